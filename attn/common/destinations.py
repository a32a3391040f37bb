"""Where a command line will write, checked before any long work starts: each problem is one sentence.

``file_problem`` is for an output file whose folder must exist (``python -m attn.measure.bench --out``,
``python -m attn.course.execute --times``); ``folder_problem`` for an output folder that is created with its
parents if need be (``python -m attn.models.induction --out``). Both return None when the destination is fine.
Writing is tried, not inferred from permission bits, so a read-only file system or a folder that only
root could write to is found too.
"""

import tempfile
from pathlib import Path


def file_problem(text, example="results.json"):
    """None if a file can be written at ``text``, else what is wrong with it (its folder must already exist)."""
    if not str(text).strip():
        return f"the file name is empty; give one, such as {example}"
    path = Path(text)
    if path.is_dir():
        return f"{path} is a folder; give a file name, such as {path / example}"
    blocked = _file_above(path)
    if blocked is not None:
        return f"{path} lies under {blocked}, which is a file, not a folder"
    if not path.parent.is_dir():
        return f"the folder {path.parent} does not exist; create it first"
    if path.exists() and not _can_append(path):
        return f"{path} cannot be written here (no permission, or a read-only place)"
    if not path.exists() and not _can_create_in(path.parent):
        return f"{path} cannot be written here (no permission to create files in {path.parent})"
    return None


def folder_problem(text, example="lessons/models"):
    """None if ``text`` is, or can be made, a folder to write files in; else what is wrong with it."""
    if not str(text).strip():
        return f"the folder name is empty; give one, such as {example}"
    folder = Path(text)
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file; give a folder (it is created if it does not exist yet)"
    blocked = _file_above(folder)
    if blocked is not None:
        return f"{folder} lies under {blocked}, which is a file, not a folder"
    existing = next(parent for parent in (folder, *folder.parents) if parent.is_dir())
    if not _can_create_in(existing):
        return f"{folder} cannot be written here (no permission to create files in {existing})"
    return None


def _file_above(path):
    """The first of ``path``'s parents that exists as something other than a folder, or None."""
    return next((parent for parent in path.parents if parent.exists() and not parent.is_dir()), None)


def _can_create_in(folder):
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _can_append(path):
    try:
        with open(path, "ab"):
            return True
    except OSError:
        return False
