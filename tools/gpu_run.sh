#!/usr/bin/env bash
# Run the GPU suite on a CUDA machine that already has torch (Triton and pytest where present):
# nothing is installed and no package registry is needed; the course is imported from this folder.
#
#   tools/gpu_run.sh NAME [COPY_TO]
#
# writes lessons/benchmarks/gpu-NAME.json (the table is printed last, the full output also goes to
# gpu-NAME.log beside it) and, if COPY_TO is given, copies both there as well (for example $OUT on a
# borrowed machine, whose files come back). PYTHON chooses the interpreter (default: python3).
# Exit status: the suite's (1 if a CUDA test failed), or 2 if the arguments or the machine are wrong.
set -euo pipefail
cd "$(dirname "$0")/.."

name=${1:-}
copy_to=${2:-}
python=${PYTHON:-python3}
if [[ ! $name =~ ^[A-Za-z0-9._-]+$ ]]; then
    echo "usage: tools/gpu_run.sh NAME [COPY_TO]   (NAME: letters, digits, '.', '_' or '-', such as h100)" >&2
    exit 2
fi
if [[ -n $copy_to && ! -d $copy_to ]]; then
    echo "tools/gpu_run.sh: the folder $copy_to does not exist" >&2
    exit 2
fi
"$python" - "$python" <<'PYTHON' || exit 2
import sys

try:
    import torch
except ImportError:
    sys.exit(f"tools/gpu_run.sh: {sys.argv[1]} cannot import torch; set PYTHON to the interpreter that has it")
if not torch.cuda.is_available():
    sys.exit(f"tools/gpu_run.sh: torch {torch.__version__} sees no CUDA GPU here; to try the suite on the CPU, run "
             f"{sys.argv[1]} -m attn.measure.bench --suite gpu --dry-run --out /tmp/gpu-dry.json")
PYTHON

out=lessons/benchmarks/gpu-$name.json
log=lessons/benchmarks/gpu-$name.log
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0
"$python" -m attn.measure.bench --suite gpu --out "$out" 2>&1 | tee "$log" || status=$?
if [[ -n $copy_to ]]; then
    cp "$out" "$log" "$copy_to"/
fi
exit "$status"
