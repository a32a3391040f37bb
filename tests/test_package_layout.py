"""The package's tree shows the course: layers at the top, then what is fetched, what is trained, what is measured.

Imports run one way. ``attn.common`` (helpers under everything) imports nothing else of the package; a layer
(a module at the top of ``attn/``) imports only common and other layers; data (``attn.data``: the corpus, the
tokenizer, the model fetch) only common; a model (``attn.models``) adds the layers and data; serving
(``attn.serving``, lesson 19) adds the models; attention across devices (``attn.distributed``, lesson 20) adds only
the layers; an experiment (``attn.experiments``, one seeded command per record a lesson reads) adds serving; a
measurement (``attn.measure``) adds distributed; the course's machinery (``attn.course``) may read them all. The
package's own ``__init__`` is the public front door and may name anything. No module grows past about 400
lines without a reason written here.
"""

import ast

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "attn"

SUBPACKAGES = ("common", "data", "models", "serving", "distributed", "experiments", "measure", "course")
# Which groups each group may import (its own included).
ALLOWED = {
    "common": {"common"},
    "layers": {"common", "layers"},
    "data": {"common", "data"},  # what is fetched and read: nothing of the models
    "models": {"common", "layers", "data", "models"},
    "serving": {"common", "layers", "data", "models", "serving"},  # lesson 19: serving runs the models
    "distributed": {"common", "layers", "distributed"},  # lesson 20: the layers split across processes
    "experiments": {"common", "layers", "data", "models", "serving", "experiments"},
    "measure": {"common", "layers", "data", "models", "serving", "distributed", "measure"},
    "course": {"common", "layers", "data", "models", "serving", "distributed", "experiments", "measure", "course"},
}
# The public paths that /work/shared/COURSE.md promises for modules that live in a subpackage: a thin front door
# each, which only re-exports (checked below), so they count as the group they point into.
FRONT_DOORS = {"attn.corpus": "data", "attn.fashion": "data", "attn.lm": "models", "attn.pretrained": "models"}
LONG_MODULES = {
    # module: why it stays whole
    "attn/models/llama.py": "lesson 16's checked forward and lesson 19's door-checked forward side by side, one model, "
                            "proven equal (tests/experiments/test_decode_speed.py)",
    "attn/course/exercises/primer.py": "the interlude's four exercises and their named mistakes, "
                                       "one lesson's module like the others",
}


def group_of(module):
    """The group of a module (one of SUBPACKAGES, or 'layers'), or None for the package's front door ``attn`` itself."""
    parts = module.split(".")
    if parts == ["attn"]:
        return None
    if module in FRONT_DOORS:
        return FRONT_DOORS[module]
    return parts[1] if parts[1] in SUBPACKAGES else "layers"


def module_name(path):
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path):
    """Every attn module a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("attn")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attn") and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names
                      if (PACKAGE.parent / f"{node.module}.{alias.name}".replace(".", "/")).with_suffix(".py").exists()
                      or (PACKAGE.parent / f"{node.module}.{alias.name}".replace(".", "/")).is_dir()}
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(ROOT)))
def test_imports_run_one_way(path):
    name = module_name(path)
    group = group_of(name)
    if group is None:
        return
    wrong = sorted(other for other in imported_modules(path)
                   if group_of(other) is not None and group_of(other) not in ALLOWED[group])
    assert not wrong, f"{name} ({group}) imports {', '.join(wrong)}, which {group} may not: see this file's docstring"


def test_every_subpackage_says_what_lives_there_and_who_may_import_it():
    for init in PACKAGE.rglob("__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring and len(docstring) > 60, f"{init.relative_to(ROOT)} needs a docstring saying what lives there"


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_grows_past_about_400_lines_without_a_reason(path):
    relative = str(path.relative_to(ROOT))
    lines = len(path.read_text().splitlines())
    assert lines <= 420 or relative in LONG_MODULES, f"{relative} has {lines} lines: split it by concern, or say why not here"


def test_every_subpackage_is_installed():
    """pyproject.toml lists every package folder, so that a non-editable install has the whole tree."""
    listed = (ROOT / "pyproject.toml").read_text()
    for init in PACKAGE.rglob("__init__.py"):
        assert f'"{module_name(init)}"' in listed, f"pyproject.toml's packages lack {module_name(init)}"


@pytest.mark.parametrize("name", sorted(FRONT_DOORS))
def test_a_front_door_only_re_exports(name):
    """A public path such as attn.lm holds imports, __all__ and the command line's entry: no code of its own."""
    tree = ast.parse((PACKAGE.parent / f"{name.replace('.', '/')}.py").read_text())
    kinds = {type(node).__name__ for node in tree.body[1:]}  # after the docstring
    extra = kinds - {"ImportFrom", "Assign", "If"}
    assert not extra, f"{name} defines {extra}: keep its code in the subpackage it points into"


def test_the_direction_check_catches_a_layer_that_imports_a_model(tmp_path):
    """The checker itself: a layer importing a model, written to a temporary file, is found."""
    sample = tmp_path / "sample.py"
    sample.write_text("from attn.models.decoder import Decoder\nimport attn.measure.timing\n")
    found = imported_modules(sample)
    assert {"attn.models.decoder", "attn.measure.timing"} <= found
    assert {group_of(module) for module in found} - ALLOWED["layers"] == {"models", "measure"}


def test_no_import_circle():
    """No chain of imports leads from a module back to itself (inside functions included): each one's imports
    can be read before it, and a layer that extends another sits above it (attn.model_attention above
    attn.multihead and attn.window)."""
    graph = {module_name(path): {other for other in imported_modules(path) if other != module_name(path)}
             for path in MODULES}
    graph = {name: {other for other in imports if other in graph and group_of(name) is not None
                    and group_of(other) is not None} for name, imports in graph.items()}
    state = {}

    def visit(name, path):
        state[name] = "open"
        for other in sorted(graph[name]):
            if state.get(other) == "open":
                cycle = path[path.index(other):] + [other]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if other not in state:
                visit(other, [*path, other])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


# Modules of attn/experiments that write no record of their own: each helps the commands that do.
EXPERIMENT_SUPPORT = {
    "compressed_caches_record": "compressed_caches' derived fields from a record's measured ones",
    "records": "writes every command's record with its provenance",
    "smollm2_reading_checks": "smollm2_reading's argument checks",
    "topk_reading": "smollm2_sparse's measures",
    "sink_austen_words": "sink_austen's definitions, interval and claim words, Bonferroni family and text",
    "kept_runs": "runs a command's trainings over forked workers, keeping each finished run (sink_austen)",
}


def test_one_experiment_per_record_named_after_it():
    """A record lessons/records/NAME.json is written by attn/experiments/NAME.py, and every experiment writes one: into
    lessons/records/, or, where its numbers are timings of one machine, into lessons/benchmarks/."""
    modules = {path.stem for path in (PACKAGE / "experiments").glob("*.py") if path.stem != "__init__"}
    records = {path.stem for path in (ROOT / "lessons" / "records").glob("*.json")}
    timings = {path.stem for path in (ROOT / "lessons" / "benchmarks").glob("*.json")} & modules
    assert not records & timings, f"a record in both folders: {sorted(records & timings)}"
    assert records | timings == modules - set(EXPERIMENT_SUPPORT), (
        f"records without their command: {sorted(records - modules)}; "
        f"commands without their record: {sorted(modules - set(EXPERIMENT_SUPPORT) - records - timings)}")
    for name in records | timings:
        assert f'"{name}.json"' in (PACKAGE / "experiments" / f"{name}.py").read_text(), f"{name}.py does not name {name}.json"
