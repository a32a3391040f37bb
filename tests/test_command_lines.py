"""python -m attn.models.induction and python -m attn.course.execute check every argument before any long work starts.

Each bad argument gets argparse's one-line error (exit status 2) while the training or the notebook run,
replaced here by a function that fails the test, never starts. (python -m attn.measure.bench: test_bench_cli.py.)
"""

import json

import pytest

from attn.course import execute
from attn.models import induction


@pytest.fixture
def nothing_runs(monkeypatch):
    def refuse(*arguments, **options):
        raise AssertionError("the long work started before the arguments were checked")

    monkeypatch.setattr(induction.files, "train_and_save", refuse)
    monkeypatch.setattr(execute, "execute", refuse)


def error_of(capsys, main, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].count(": error: ") == 1, lines
    return lines[-1]


@pytest.mark.usefixtures("nothing_runs")
def test_induction_out_is_checked_before_three_thousand_steps(capsys, tmp_path):
    a_file = tmp_path / "weights"
    a_file.write_text("")
    cases = {
        str(a_file): f"argument --out: {a_file} is a file; give a folder (it is created if it does not exist yet)",
        str(a_file / "models"): f"argument --out: {a_file / 'models'} lies under {a_file}, which is a file, not a folder",
        "": "argument --out: the folder name is empty; give one, such as lessons/records",
        "/proc/models": "argument --out: /proc/models cannot be written here (no permission to create files in /proc)",
    }
    for out, message in cases.items():
        assert error_of(capsys, induction.main, ["--out", out]) == f"python -m attn.models.induction: error: {message}"
    (tmp_path / "models" / "induction_2layer.pt").mkdir(parents=True)
    assert "induction_2layer.pt is a folder, so the file of that name cannot be written" in error_of(
        capsys, induction.main, ["--out", str(tmp_path / "models")]
    )


def test_induction_out_may_be_a_new_folder_deep_down(monkeypatch, tmp_path):
    written = []
    monkeypatch.setattr(induction.files, "train_and_save", lambda out: written.append(out) or {"models": {}})
    induction.main(["--out", str(tmp_path / "new" / "deeper")])
    assert written == [tmp_path / "new" / "deeper"]


def notebook_text(cells=1):
    cell = {"cell_type": "code", "execution_count": None, "id": "a1", "metadata": {}, "outputs": [], "source": "1 + 1"}
    return json.dumps({"cells": [cell] * cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.usefixtures("nothing_runs")
def test_execute_checks_every_notebook_before_running_any(capsys, tmp_path):
    good = tmp_path / "good.ipynb"
    good.write_text(notebook_text())
    script = tmp_path / "lesson.py"
    script.write_text("print('hello')\n")
    truncated = tmp_path / "truncated.ipynb"
    truncated.write_text(notebook_text()[:40])
    invalid = tmp_path / "invalid.ipynb"
    invalid.write_text(json.dumps({"cells": "none", "nbformat": 4, "nbformat_minor": 5, "metadata": {}}))
    empty = tmp_path / "empty.ipynb"
    empty.write_text("")
    for path in (script, truncated, invalid, empty):
        message = error_of(capsys, execute.main, [str(good), str(path)])
        assert f"error: {path} is not a notebook Jupyter can run (" in message, message
        assert message.endswith("); give a .ipynb file saved by Jupyter")
    assert f"error: {tmp_path} is a folder; give notebook files, such as {tmp_path / '*.ipynb'}" in error_of(
        capsys, execute.main, [str(good), str(tmp_path)]
    )
    missing = tmp_path / "missing.ipynb"
    assert f"python -m attn.course.execute: error: no such notebook: {missing}" in error_of(capsys, execute.main, [str(missing)])


@pytest.mark.usefixtures("nothing_runs")
def test_execute_checks_where_the_times_go_before_running(capsys, tmp_path):
    good = tmp_path / "good.ipynb"
    good.write_text(notebook_text())
    cases = {
        str(tmp_path): f"--times: {tmp_path} is a folder; give a file name, such as {tmp_path / 'lesson_times.md'}",
        str(good / "times.md"): f"--times: {good / 'times.md'} lies under {good}, which is a file, not a folder",
        str(tmp_path / "missing" / "times.md"): f"--times: the folder {tmp_path / 'missing'} does not exist; create it first",
        "": "--times: the file name is empty; give one, such as lesson_times.md",
        "/proc/times.md": "--times: /proc/times.md cannot be written here",
    }
    for times, message in cases.items():
        assert message in error_of(capsys, execute.main, [str(good), "--times", times])


def test_reading_time_names_what_is_not_a_notebook(capsys, tmp_path):
    from attn.course import reading_time

    assert "is not a folder of notebooks" in error_of(capsys, reading_time.main, [str(tmp_path)])
    (tmp_path / "broken.ipynb").write_text('{"cells": [')
    message = error_of(capsys, reading_time.main, [str(tmp_path)])
    assert f"error: {tmp_path / 'broken.ipynb'} is not a notebook saved by Jupyter (" in message, message
    for wrong, says in ((None, "not NoneType"), (3, "not int"), (tmp_path / "none.ipynb", "no such notebook")):
        with pytest.raises(ValueError, match=says):
            reading_time.count(wrong)
    (tmp_path / "odd.ipynb").write_text('{"cells": [1, 2]}')
    with pytest.raises(ValueError, match="is not a notebook saved by Jupyter"):
        reading_time.count(tmp_path / "odd.ipynb")


@pytest.mark.usefixtures("nothing_runs")
def test_execute_refuses_pipes_devices_and_links_to_nowhere_for_the_times(capsys, tmp_path):
    import os

    good = tmp_path / "good.ipynb"
    good.write_text(notebook_text())
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)  # opening it to test it would wait for a reader forever
    dangling = tmp_path / "times.md"
    dangling.symlink_to(tmp_path / "missing" / "times.md")
    cases = {
        str(pipe): f"--times: {pipe} is a named pipe, not a file",
        "/dev/full": "--times: /dev/full is a device or other special file, not a file",
        str(dangling): f"--times: {dangling} is a symbolic link to {tmp_path / 'missing' / 'times.md'}, whose folder "
                       f"{tmp_path / 'missing'} does not exist; create it or remove the link",
    }
    for times, message in cases.items():
        assert message in error_of(capsys, execute.main, [str(good), "--times", times])


def test_execute_writes_the_times_through_a_temporary_file(monkeypatch, tmp_path):
    good = tmp_path / "good.ipynb"
    good.write_text(notebook_text())
    monkeypatch.setattr(execute, "execute", lambda path: 1.5)
    times = tmp_path / "times.md"
    assert execute.main([str(good), "--times", str(times)]) == 0
    assert "| Running time (s) |" in times.read_text()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["good.ipynb", "times.md"]


def test_induction_runs_checks_its_folder_before_training(capsys, monkeypatch, tmp_path):
    from attn.experiments import induction_runs

    monkeypatch.setattr(induction_runs, "run_with_checkpoints", lambda *arguments: pytest.fail("training started"))
    assert "argument --out: /dev/full is a file" in error_of(capsys, induction_runs.main, ["--out", "/dev/full"])
    assert "cannot be written here" in error_of(capsys, induction_runs.main, ["--out", "/proc/x"])


def test_reading_time_command_names_a_notebook_with_odd_outputs(capsys, tmp_path):
    from attn.course import reading_time

    cell = {"cell_type": "code", "source": "x", "outputs": None}
    (tmp_path / "odd.ipynb").write_text(json.dumps({"cells": [cell]}))
    message = error_of(capsys, reading_time.main, [str(tmp_path)])
    assert "odd.ipynb is not a notebook saved by Jupyter (cell 0's outputs are not a list of outputs)" in message
