"""Writes into a user's folder that never pass through a symlink below it.

A repository can commit a symlink (``torchport-report -> /home/user``) or a
folder can be swapped for one while torchport works; a plain ``open(path)``
would then write wherever the link points. Here every folder below the one we
were given is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's
descriptor, the file is made with ``O_CREAT | O_EXCL | O_NOFOLLOW`` beside its
final name and renamed over it within that same folder descriptor, so a link
anywhere on the way is refused, never followed. The folder we were given (the
base) is the user's choice and is opened as named.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath

from ..atomicfile import write_in_folder

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NOFOLLOW_DIR = _DIR_FLAGS | os.O_NOFOLLOW
_READ_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class SymlinkInPath(OSError):
    """A path below the base crosses a symlink (or a non-folder); nothing was written there."""


def parts_of(rel: str) -> tuple[str, ...]:
    """A relative path's components; refuses absolute paths and ``..`` (they leave the base)."""
    path = PurePosixPath(rel)
    if path.is_absolute() or not path.parts or ".." in path.parts:
        raise ValueError(f"not a path inside the folder: {rel!r}")
    return tuple(p for p in path.parts if p != ".")


def symlink_on_path(base: Path, rel: str) -> str | None:
    """Why writing ``base/rel`` would cross a symlink, or None when it would not."""
    here = base
    parts = parts_of(rel)
    for depth, part in enumerate(parts):
        here = here / part
        try:
            mode = here.lstat().st_mode
        except FileNotFoundError:
            return None
        shown = "/".join(parts[: depth + 1])
        if stat.S_ISLNK(mode):
            return f"{shown} is a symlink: torchport does not write through symlinks"
        if depth < len(parts) - 1 and not stat.S_ISDIR(mode):
            return f"{shown} is not a folder"
    return None


@contextmanager
def open_folder(base: Path, parts: tuple[str, ...], create: bool) -> Iterator[int]:
    """A descriptor of ``base/parts...``, each step opened without following a link."""
    fd = os.open(base, _DIR_FLAGS)
    try:
        for depth, part in enumerate(parts):
            if create:
                with suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
            try:
                child = os.open(part, _NOFOLLOW_DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    shown = "/".join(parts[: depth + 1])
                    raise SymlinkInPath(
                        exc.errno, f"{shown} is a symlink or not a folder", str(base / shown)
                    ) from None
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _existing(name: str, folder: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def write_bytes(base: Path, rel: str, data: bytes, mode: int | None = None) -> None:
    """Write ``base/rel`` atomically (old or new, never half), never through a symlink.

    The file keeps its current permissions unless ``mode`` is given; a new file gets the
    usual ones (0666 less the umask).
    """
    *folders, name = parts_of(rel)
    with open_folder(base, tuple(folders), create=True) as folder:
        current = _existing(name, folder)
        if current is not None and stat.S_ISLNK(current.st_mode):
            raise SymlinkInPath(errno.ELOOP, f"{rel} is a symlink", str(base / rel))
        if current is not None and not stat.S_ISREG(current.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"{rel} is not a regular file", str(base / rel))
        write_in_folder(folder, name, data, mode=mode)


def write_text(base: Path, rel: str, text: str | bytes) -> None:
    """``write_bytes`` of UTF-8 text; undecodable bytes read with surrogateescape come back.
    Bytes (a report's picture) are written as they are."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
    write_bytes(base, rel, data)


def read_bytes(base: Path, rel: str) -> tuple[bytes, int]:
    """The bytes and permission bits of ``base/rel``, read without following a symlink."""
    *folders, name = parts_of(rel)
    with open_folder(base, tuple(folders), create=False) as folder:
        try:
            fd = os.open(name, _READ_FILE, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SymlinkInPath(exc.errno, f"{rel} is a symlink", str(base / rel)) from None
            raise
        with os.fdopen(fd, "rb") as fh:
            return fh.read(), stat.S_IMODE(os.fstat(fh.fileno()).st_mode)


def unlink(base: Path, rel: str) -> None:
    """Remove ``base/rel`` (a file or a link, never what a link points to)."""
    *folders, name = parts_of(rel)
    with open_folder(base, tuple(folders), create=False) as folder:
        os.unlink(name, dir_fd=folder)


def rmdir(base: Path, rel: str) -> bool:
    """Remove the folder ``base/rel`` if it is empty; False when it is not (or is gone)."""
    *folders, name = parts_of(rel)
    try:
        with open_folder(base, tuple(folders), create=False) as folder:
            os.rmdir(name, dir_fd=folder)
    except (FileNotFoundError, SymlinkInPath):
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            return False
        raise
    return True


def sha256_of(path: Path) -> str:
    """The SHA-256 of a regular file, opened without following a symlink."""
    digest = hashlib.sha256()
    fd = os.open(path, _READ_FILE)
    with os.fdopen(fd, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
