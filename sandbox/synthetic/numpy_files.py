"""``np.memmap`` / ``np.fromfile`` of a token file that is not there get a synthetic one.

nanoGPT-style scripts read ``np.memmap(os.path.join(data_dir, 'train.bin'), dtype=np.uint16,
mode='r')`` after a ``prepare.py`` the sandbox never ran. When (and only when) the file is
missing, a deterministic token file of the asked dtype is written in the run's folder (see
``files.standin_path``) and read instead; an existing file is read as it is.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from . import data, files

_ORIGINAL: dict[str, Any] = {}
_READ_MODES = ("r", "r+", "c", "readonly", "readwrite", "copyonwrite")


def _standin(filename: Any, dtype: Any, count: int, offset: int) -> Any:
    """The stand-in's path for a missing ``filename`` (written once), else ``filename``."""
    if not isinstance(filename, str | os.PathLike) or os.path.exists(filename):
        return filename
    import numpy as np

    try:
        target = files.standin_path(_ORIGINAL["root"], os.fspath(filename))
    except files.Refused as exc:  # out of the run's folder: numpy fails as it would have
        data.record("numpy", os.fspath(filename), 0, path=os.fspath(filename), refused=exc.strerror)
        return filename
    if not target.exists():  # written only where nothing is (standin_path: no link above)
        files.write_tokens(target, np.dtype(dtype).name, count, offset)
    where = target.relative_to(Path(_ORIGINAL["root"]).resolve()).as_posix()
    data.record("numpy", os.fspath(filename), count, path=where, dtype=np.dtype(dtype).name)
    return str(target)


def _memmap_new(
    cls: type, filename: Any, dtype: Any = "uint8", mode: str = "r+", *args: Any, **kw: Any
) -> Any:
    if mode in _READ_MODES:
        offset = int(kw.get("offset", args[0] if args else 0) or 0)
        shape = kw.get("shape", args[1] if len(args) > 1 else None)
        count = (
            files.TOKENS
            if shape is None
            else math.prod((shape,) if isinstance(shape, int) else shape)
        )
        filename = _standin(filename, dtype, count, offset)
    return _ORIGINAL["memmap"](cls, filename, dtype, mode, *args, **kw)


def _fromfile(
    file: Any, dtype: Any = float, count: int = -1, sep: str = "", offset: int = 0, **kw: Any
) -> Any:
    if sep == "":
        tokens = files.TOKENS if count is None or count < 0 else count
        file = _standin(file, dtype, tokens, offset)
    return _ORIGINAL["fromfile"](file, dtype=dtype, count=count, sep=sep, offset=offset, **kw)


def install(root: Path | None = None) -> None:
    """Patch numpy (if installed) in this process, once; stand-ins go under ``root`` (the
    working directory: the run's copy of the program)."""
    try:
        import numpy as np
    except ImportError:
        return
    if _ORIGINAL:
        return
    _ORIGINAL.update(root=root or Path.cwd(), memmap=np.memmap.__new__, fromfile=np.fromfile)
    # memmap is a Python class: its __new__ can be replaced, and isinstance() still holds
    np.memmap.__new__ = staticmethod(_memmap_new)  # type: ignore[method-assign, assignment]  # numpy's stubs: a method; the sandbox swaps it
    np.fromfile = _fromfile  # type: ignore[assignment]  # numpy's stubs: overloads; the sandbox swaps it


def uninstall() -> None:
    if not _ORIGINAL:
        return
    import numpy as np

    np.memmap.__new__ = staticmethod(_ORIGINAL["memmap"])  # type: ignore[method-assign]  # put back
    np.fromfile = _ORIGINAL["fromfile"]
    _ORIGINAL.clear()
