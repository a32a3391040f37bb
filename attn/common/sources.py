"""Files the course reads, checked before they are opened: each problem is one sentence.

``source_problem`` is for an input file named by a learner (a GGUF file, a downloaded wheel): nothing there,
a folder, a pipe or a device, or a path the file system refuses to look at. It never opens the file, so a
named pipe cannot block it.
"""

import os
import stat
from pathlib import Path


def source_problem(path, what):
    """None if ``path`` (str or os.PathLike) names an ordinary file; else (exception class, sentence).

    FileNotFoundError when nothing is there (a dangling link said as such), ValueError for a folder, a pipe
    or a device, or a path that cannot be looked at (a name too long, a loop of links, no permission).
    ``what`` names the file expected, as in "a .gguf file".
    """
    if not isinstance(path, str | os.PathLike):
        return TypeError, f"the path of {what} must be a str or pathlib.Path, got {type(path).__name__}"
    from attn.common.destinations import name_problem

    named = name_problem(path)  # NUL, a lone surrogate, a name too long, a loop of links: before the OS sees it
    if named is not None:
        return ValueError, named
    path = Path(path)
    try:
        path.stat()
    except FileNotFoundError:
        pass
    except OSError as error:  # a name too long, a loop of links, no permission to look into a folder
        return ValueError, f"{str(path)[:80]} cannot be looked at: {error.strerror}"
    if not path.exists():
        return FileNotFoundError, f"there is no file at {path}" + (" (a symbolic link to nowhere)" if path.is_symlink() else "")
    if path.is_dir():
        return ValueError, f"{path} is a folder; give the path of {what}"
    if not stat.S_ISREG(path.stat().st_mode):
        return ValueError, f"{path} is not an ordinary file (a pipe or a device?); give the path of {what}"
    return None
