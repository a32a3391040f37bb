"""Where a command line will write, checked before any long work starts: each problem is one sentence.

``file_problem`` is for an output file whose folder must exist (``python -m attn.measure.bench --out``,
``python -m attn.course.execute --times``); ``folder_problem`` for an output folder that is created with its
parents if need be (``python -m attn.models.induction --out``). Both return None when the destination is fine.
Creating a file is tried, not inferred from permission bits, so a read-only file system or a folder that
only root could write to is found too; nothing that exists is ever opened (a named pipe would block, a
device such as /dev/full would accept the test and refuse the result). ``write_text`` then writes through a
temporary file renamed into place, so that a failure never leaves half a file.

Symbolic links: a link the learner names as the file itself (``--out results.json``, ``--times``) is followed
to where it points, since that is where they asked for the file (``follow_link=True``). A file a command writes
into a folder it was given (``--out DIR`` holding ``DIR/results.json``) is followed only while it stays inside
that folder: a link there that leads out of it is refused, before any work (``output_folder``) and again when
the file is written, so that no command overwrites a file elsewhere that nobody named.
"""

import argparse
import errno
import os
import stat
import tempfile
from pathlib import Path

NAME_MAX = 255  # bytes in one file or folder name (Linux, macOS and Windows all stop near here)
PATH_MAX = 4095  # bytes in a whole path (Linux's limit, less its closing NUL)


def name_problem(text):
    """None if ``text`` can name a place on this file system at all, else why not (before anything touches it).

    A lone surrogate (text no file system can store), a NUL character, a name of more than 255 bytes or a path of
    more than 4095 bytes would otherwise reach the operating system and come back as an OSError from inside
    pathlib; a symbolic link that leads round in a loop, or to nowhere, is named here too.
    """
    text = os.fspath(text)
    if "\x00" in text:
        return f"{text!r} holds the NUL character, which no file name may contain"
    try:
        encoded = os.fsencode(text)
    except UnicodeError:
        return f"{text!r} holds a character no file name can store (a lone surrogate); type the name again"
    long_part = next((part for part in encoded.split(b"/") if len(part) > NAME_MAX), None)
    if long_part is not None:
        shown = os.fsdecode(long_part)
        return f"the name {shown[:40]}... is {len(long_part)} bytes long; a file or folder name may have at most {NAME_MAX}"
    if len(encoded) > PATH_MAX:
        return f"the path {text[:40]}... is {len(encoded)} bytes long; a whole path may have at most {PATH_MAX}"
    return _link_problem(Path(text))


def _link_problem(path):
    """Why ``path`` or a folder above it cannot be followed (a link loop), or None."""
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return f"{path} is a symbolic link that leads round in a loop (or passes through one); remove the link"
        if error.errno == errno.ENAMETOOLONG:
            return f"{path} leads, through its links, to a path longer than this system allows"
    return None


def file_problem(text, example="results.json"):
    """None if a file can be written at ``text``, else what is wrong with it (its folder must already exist)."""
    if not str(text).strip():
        return f"the file name is empty; give one, such as {example}"
    problem = name_problem(text)
    if problem is not None:
        return problem
    given = Path(text)
    path = _target(given)
    named = given if path == given else f"{given} (a link to {path})"
    if given.is_symlink() and not path.parent.is_dir():
        return f"{given} is a symbolic link to {path}, whose folder {path.parent} does not exist; create it or remove the link"
    if path.is_dir():
        return f"{named} is a folder; give a file name, such as {given / example}"
    if path.exists() and not path.is_file():
        kind = "a named pipe" if stat.S_ISFIFO(path.stat().st_mode) else "a device or other special file"
        return f"{named} is {kind}, not a file; give the name of an ordinary file, such as {example}"
    blocked = _file_above(path)
    if blocked is not None:
        return f"{named} lies under {blocked}, which is a file, not a folder"
    if not path.parent.is_dir():
        return f"the folder {path.parent} does not exist; create it first"
    if not _can_create_in(path.parent) or (path.exists() and not os.access(path, os.W_OK)):
        return f"{named} cannot be written here (no permission to create files in {path.parent}, or a read-only place)"
    return None


def write_text(path, text, follow_link=False):
    """Write ``text`` to the file ``path`` through a temporary file in its folder, renamed into place.

    follow_link: True where the learner named ``path`` itself (a link there is followed wherever it leads); False
    (a file written into a folder) follows a link only to a place inside the folder that holds it."""
    from attn.common.validate import require_text

    require_text("text", text)
    write_through_temporary(path, lambda temporary: Path(temporary).write_text(text, encoding="utf-8"), follow_link)


def write_through_temporary(path, write, follow_link=False):
    """Call ``write(temporary)`` to fill a temporary file beside ``path``, then rename it to ``path``: all or nothing.

    follow_link: as for ``write_text``; a link that leads out of its folder is refused unless it is True."""
    if not callable(write):
        raise TypeError(f"write must be a function that fills the temporary file, got {type(write).__name__}")
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a file's path, got {type(path).__name__}")
    if not isinstance(follow_link, bool):
        raise TypeError(f"follow_link must be True or False, got {type(follow_link).__name__}")
    problem = file_problem(path) or (None if follow_link else link_leaves_folder(path))
    if problem is not None:
        raise ValueError(problem)
    target = _target(Path(path))
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    os.close(handle)
    try:
        write(temporary)
        if target.exists():
            os.chmod(temporary, stat.S_IMODE(target.stat().st_mode))
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)  # what open() would have given a new file
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def link_leaves_folder(path):
    """Why the file ``path`` may not be written through, or None: it is a symbolic link that leads out of the folder
    it is in, to a file nobody named."""
    given = Path(path)
    if not given.is_symlink():
        return None
    folder = Path(os.path.realpath(given.parent))
    target = Path(os.path.realpath(given))
    if target.is_relative_to(folder):
        return None
    return (f"{given} is a symbolic link to {target}, outside the folder {given.parent} it was to be written in; it "
            "was not followed: remove the link, or give that file itself as the destination")


def _target(path):
    """Where ``path`` leads: itself, or for a symbolic link (even one to nowhere) the place it points to."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def folder_problem(text, example="lessons/records"):
    """None if ``text`` is, or can be made, a folder to write files in; else what is wrong with it."""
    if not str(text).strip():
        return f"the folder name is empty; give one, such as {example}"
    problem = name_problem(text)
    if problem is not None:
        return problem
    if Path(text).is_symlink() and not Path(text).exists():
        return (f"{text} is a symbolic link to {os.readlink(text)}, which does not exist; create that folder first, "
                "or remove the link and give a folder")
    folder = _target(Path(text))
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


def output_folder(text, file_names, example="lessons/records"):
    """``text`` as a Path, if it names a folder that is there (or can be made) and can be written in, where none of
    ``file_names`` is taken by a folder; a ValueError (TypeError for a non-path) saying what is wrong otherwise."""
    if not isinstance(text, str | os.PathLike):
        raise TypeError(f"out must be a folder's path, such as {example!r}, got {type(text).__name__}")
    if not isinstance(file_names, list | tuple) or not isinstance(example, str):
        raise TypeError(f"file_names must be a list of file names and example a path, got {type(file_names).__name__}")
    if not all(isinstance(name, str) and name and "/" not in name for name in file_names):
        raise TypeError(f"file_names must be plain file names (text without a '/'), got {list(file_names)!r:.80}")
    problem = folder_problem(text, example=example)
    taken = [Path(text) / name for name in file_names if (Path(text) / name).is_dir()] if problem is None else []
    if taken:
        problem = f"{taken[0]} is a folder, so the file of that name cannot be written; move it away"
    if problem is None:
        problem = next(filter(None, (link_leaves_folder(Path(text) / name) for name in file_names)), None)
    if problem is not None:
        raise ValueError(problem)
    return Path(text)


def folder_argument(*file_names, example="lessons/records"):
    """An argparse ``type=`` for ``--out FOLDER`` that will hold ``file_names``: checked before any work starts."""

    def check(text):
        try:
            return output_folder(text, file_names, example)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return check
