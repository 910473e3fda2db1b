"""Paths a repository names, confined to a folder before torchport reads or writes them.

A repository is untrusted: it can commit a symlink (``escape -> /etc``, ``data.py ->
/dev/zero``), a FIFO, or a name full of ``..``, and torchport runs as whoever started
it, root included. Checking a path's text is not enough: ``escape/x`` is lexically
inside the repository and really anywhere. So every path a repository (or its
configuration, or its command line) chooses is resolved here, each symlink followed
to its end, and refused when the result leaves the folder it must stay in.

``confined`` is the check (for a path torchport is about to create or hand on);
``read_inside`` reads a file a repository names: a regular file inside the folder, at
most a size limit (the scanner's, ``sourcefile.DEFAULT_MAX_BYTES``, unless the caller's
kind of file has its own), opened without following a last-moment symlink and without
blocking on a FIFO. ``read_regular`` (and ``read_text_regular``) is the same read for a
path already known to be inside (the scanner's walk, a file the user named), and
``digest_regular`` hashes such a file of any size a block at a time.

A refusal is a ``Refused``, an ``OSError``: code that already turns an unreadable file
into a skip, a note or a one-line error does the same with a refused one, and its
message says why without telling whether anything exists outside the folder.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

# The largest repository file torchport reads on the host (the scanner's limit too:
# tools.sourcefile takes it from here, so the two cannot drift apart).
DEFAULT_MAX_BYTES = 2_000_000

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(OSError):
    """A path torchport will not read or write; ``strerror`` says why in a few words."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(errno.EPERM, reason, os.fspath(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def confined(root: Path, path: str | os.PathLike[str], what: str = "the repository") -> Path:
    """``path`` (relative to ``root``, or absolute) with every symlink resolved; Refused
    when the result is not inside ``root`` (``what`` names ``root`` in the message).

    The result has no symlink in the part that exists now, so a write there that only
    creates what does not exist yet stays inside ``root``.
    """
    base = root.resolve()
    try:
        real = (base / path).resolve()
    except (OSError, RuntimeError):  # a symlink loop
        raise Refused(path, "a symlink loop") from None
    if not real.is_relative_to(base):
        raise Refused(path, f"leaves {what} (a symlink or '..' points outside it)")
    return real


@contextmanager
def open_regular(path: Path, limit: int | None = None) -> Iterator[BinaryIO]:
    """``path`` open for reading: a regular file (not a link, FIFO or device: Refused) of
    at most ``limit`` bytes when one is given; a missing or unreadable file is the usual
    OSError. For a reader that streams (a digest) instead of holding the file."""
    try:
        fd = os.open(path, _READ)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(path, "a symlink (not followed)") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise Refused(path, "not a regular file")
        if limit is not None and info.st_size > limit:
            raise Refused(path, f"larger than {limit} bytes ({info.st_size})")
        yield handle


def read_regular(path: Path, limit: int = DEFAULT_MAX_BYTES) -> bytes:
    """The bytes of ``path``: a regular file of at most ``limit`` bytes (``open_regular``)."""
    with open_regular(path, limit) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while read
        raise Refused(path, f"larger than {limit} bytes")
    return data


def read_text_regular(path: Path, limit: int = DEFAULT_MAX_BYTES) -> str:
    """``read_regular``'s bytes as ``Path.read_text`` gives them: UTF-8 (else
    UnicodeDecodeError), with universal newlines."""
    return io.TextIOWrapper(io.BytesIO(read_regular(path, limit)), encoding="utf-8").read()


def digest_regular(path: Path, digest: Any) -> None:
    """Feed the bytes of the regular file ``path`` to ``digest`` (a hashlib object) a block
    at a time: any size, never all of it in memory."""
    with open_regular(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)


def read_inside(
    root: Path,
    path: str | os.PathLike[str],
    limit: int = DEFAULT_MAX_BYTES,
    what: str = "the repository",
) -> bytes:
    """The bytes of ``path`` (relative to ``root``, or absolute), a regular file inside
    ``root`` of at most ``limit`` bytes; Refused otherwise (see ``confined``)."""
    return read_regular(confined(root, path, what), limit)
