"""Re-execute lesson notebooks in place, each top to bottom in a fresh kernel, and time them.

    python -m attn.course.execute                       # every lesson in lessons/
    python -m attn.course.execute lessons/05_attention_matrix.ipynb
    python -m attn.course.execute --times book/lesson_times.md

This is how the committed outputs are produced: the working directory is the notebook's own
folder (as in JupyterLab), no widget state is stored (the book cannot use it), and nothing
else about the notebook changes. ``--times`` writes the measured running times as a Markdown
table, which the instructors' guide includes.
"""

import argparse
import sys
import time
from pathlib import Path

from attn.common.destinations import file_problem, write_text, write_through_temporary

LESSONS = Path(__file__).resolve().parents[2] / "lessons"


def execute(path, timeout=600):
    """Execute one notebook in place in a fresh python3 kernel; return the seconds it took."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=False,
        record_timing=False,
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    notebook.metadata.pop("widgets", None)  # state from an earlier run would load widget scripts for nothing
    # never half a notebook; a notebook named through a link is written where the link leads, as the learner asked
    write_through_temporary(path, lambda temporary: nbformat.write(notebook, temporary), follow_link=True)
    return seconds


def notebook_problem(path):
    """None if ``path`` is a notebook file that can be read, else a sentence saying what it is instead."""
    import nbformat

    from attn.common.destinations import name_problem

    problem = name_problem(path)
    if problem is not None:
        return problem
    path = Path(path)
    if path.exists() and not path.is_dir() and not path.is_file():
        return f"{path} is not an ordinary file (a named pipe or a device); give notebook files, such as lessons/*.ipynb"
    if path.is_dir():
        return f"{path} is a folder; give notebook files, such as {path / '*.ipynb'}"
    if not path.is_file():
        return f"no such notebook: {path}"
    try:
        nbformat.validate(nbformat.read(path, as_version=4))
    except Exception as error:  # noqa: BLE001 - JSON, encoding and schema errors all mean "not a notebook"
        reason = " ".join(str(error).split())[:100]
        return f"{path} is not a notebook Jupyter can run ({type(error).__name__}: {reason}); give a .ipynb file saved by Jupyter"
    return None


def title_of(path):
    """The notebook's first heading, without the leading '# '."""
    import nbformat

    problem = notebook_problem(path)
    if problem is not None:
        raise ValueError(problem)

    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown" and cell.source.startswith("# "):
            return cell.source.splitlines()[0][2:].strip()
    return Path(path).stem


def times_table(times):
    """A Markdown table of (notebook path, seconds) pairs."""
    if not isinstance(times, list | tuple) or not all(
            isinstance(row, list | tuple) and len(row) == 2 and isinstance(row[1], int | float) for row in times):
        raise TypeError(f"times must be a list of (notebook path, seconds) pairs, got {type(times).__name__}")
    lines = ["| Notebook | Running time (s) |", "| --- | --- |"]
    lines += [f"| {title_of(path)} | {seconds:.0f} |" for path, seconds in times]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m attn.course.execute", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to execute (default: every lesson)")
    parser.add_argument("--times", help="also write the running times as a Markdown table to this file")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted(LESSONS.glob("*.ipynb"))
    for path in notebooks:  # every argument is checked before the first notebook runs
        problem = notebook_problem(path)
        if problem is not None:
            parser.error(problem)
    if args.times is not None:
        problem = file_problem(args.times, example="lesson_times.md")
        if problem is not None:
            parser.error(f"--times: {problem}")
        args.times = Path(args.times)
    times = []
    for path in notebooks:
        seconds = execute(path)
        times.append((path, seconds))
        print(f"{seconds:6.1f} s  {path}", flush=True)
    if args.times is not None:
        write_text(args.times, times_table(times), follow_link=True)  # the file the learner named
        print(f"wrote {args.times}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
