"""Write a file so that a reader sees the old contents or the new ones, never half of either.

Every file torchport writes and someone may read while it is written (a report, a
result a resumed batch trusts, a cache entry, an edit the repair loop makes) goes
through here: the bytes go to a new temporary file beside the final name (``O_EXCL``
and ``O_NOFOLLOW``: never an existing file or a link planted there), are flushed and
fsynced, take the permissions the file had, and are renamed over it. On any failure
the temporary file is removed and the old file is untouched. With ``sync_folder`` the
folder is fsynced too, so the rename itself survives a power cut, not only the bytes.

``write_in_folder`` works on an open folder descriptor, so ``output.nofollow`` can use it
in a folder it reached without following links; ``atomic_write`` is the same for a path.
"""

from __future__ import annotations

import os
import secrets
import stat
from contextlib import suppress
from pathlib import Path

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# The temporary file's name: hidden, recognisably ours, unique, and within NAME_MAX.
TEMP_SUFFIX = ".torchport"


def temp_name(name: str) -> str:
    """A fresh temporary name beside ``name`` (a crash may leave one: it says whose it is)."""
    return f".{name[:100]}.{secrets.token_hex(4)}{TEMP_SUFFIX}"


def write_in_folder(
    folder: int, name: str, data: bytes, *, mode: int | None = None, sync_folder: bool = False
) -> None:
    """Replace ``name`` in the open folder ``folder`` by ``data`` atomically.

    The file keeps its permissions unless ``mode`` is given; a new file gets the usual
    ones (0666 less the umask).
    """
    if mode is None:
        with suppress(FileNotFoundError):
            current = os.stat(name, dir_fd=folder, follow_symlinks=False)
            mode = current.st_mode if stat.S_ISREG(current.st_mode) else None
    temp = temp_name(name)
    fd = os.open(temp, _NEW_FILE, 0o666, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), stat.S_IMODE(mode))
            os.fsync(handle.fileno())
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=folder)
        raise
    if sync_folder:
        os.fsync(folder)


def atomic_write(
    path: Path,
    data: bytes | str,
    *,
    mode: int | None = None,
    sync_folder: bool = False,
    errors: str = "surrogateescape",
) -> None:
    """Replace the file ``path`` (its folder must exist) by ``data`` atomically; text is
    written as UTF-8 (``errors`` for characters that have no encoding: lone surrogates
    come back as the bytes they were read from)."""
    raw = data.encode("utf-8", errors) if isinstance(data, str) else data
    folder = os.open(path.parent, _FOLDER)
    try:
        write_in_folder(folder, path.name, raw, mode=mode, sync_folder=sync_folder)
    finally:
        os.close(folder)
