"""Which host paths a sandboxed Python program needs to see (read-only).

bwrap and docker expose only these, not the whole host filesystem, so that
files such as ~/.netrc or cloud credential files stay invisible.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Top-level system directories; on merged-/usr systems most are symlinks.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Small /etc files the dynamic linker and libc read.
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/alternatives",
)


def python_paths() -> list[Path]:
    """The running interpreter's installation and virtual environment."""
    paths = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    paths.add(Path(sys.executable).resolve().parent.parent)
    return sorted(p for p in paths if str(p) not in SYSTEM_DIRS and p != Path("/usr"))


def dedupe(paths: list[Path]) -> list[Path]:
    """Existing paths, resolved, without ones already covered by a parent."""
    out: list[Path] = []
    for p in sorted({Path(p).resolve() for p in paths if Path(p).exists()}):
        if not any(p.is_relative_to(q) for q in out):
            out.append(p)
    return out
