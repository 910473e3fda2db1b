"""A precompiled ``cudacpu/prelude.h`` (torch's extension header and the runtime) for the
CPU runner's builds: parsing torch's headers is most of a translation unit's compile
time, over a minute of CPU, and a reference run that builds an extension must finish
within its run's timeout.

Every translation unit the runner writes starts with ``#include <cudacpu/prelude.h>``.
GCC uses ``<dir>/cudacpu/prelude.h.gch`` instead when ``dir`` comes first on the include
path and the flags match the ones it was built with (those of a cpp_extension build,
less the extension's name, which torch's headers never read); otherwise it reads the
header, as without one. The file is built once per torch, compiler and runtime (a key
names its folder), by torchport itself, never by a sandboxed run: a run only reads it
(``for_sandbox``). GCC only; about 800 MB, so building one evicts all but the ``KEEP``
most recently used others (each torchport install and version has its own key: without
eviction a machine that upgrades or keeps several environments fills its disk).

    python -m torchport.sandbox.cudacpu.pch   # build it (or find it); print its folder
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from torchport.sandbox.safepath import read_inside

from .build import INCLUDE, PCH_ENV, RUNNER_CFLAGS, cache_root, runtime_digest

ENV = PCH_ENV
HEADER = INCLUDE / "cudacpu" / "prelude.h"
GCH = Path("cudacpu") / "prelude.h.gch"
BUILD_TIMEOUT_S = 900
FAILED = "failed.txt"
# What the program's code must hold for a reference run to need it.
_USES_EXTENSIONS = re.compile(rb"cpp_extension")
_SCAN_LIMIT = 2000  # files: a huge tree is not read through before each run
KEEP = 2  # other precompiled preludes kept beside a new one, the most recently used


def compile_flags() -> list[str] | None:
    """The flags cpp_extension compiles a CPU extension's sources with (its ninja file's
    ``cflags``, for the runtime's include folder), without the extension's name; None
    where they cannot be had (not GCC, a torch whose private writer changed)."""
    try:
        from torch.utils import cpp_extension

        if not cpp_extension.check_compiler_is_gcc(cpp_extension.get_cxx_compiler()):
            return None
        with tempfile.TemporaryDirectory(prefix="torchport-pch-flags-") as tmp:
            ninja = Path(tmp) / "build.ninja"
            cpp_extension._write_ninja_file_to_build_library(
                path=str(ninja),
                name="pch",
                sources=[str(HEADER)],
                extra_cflags=list(RUNNER_CFLAGS),
                extra_cuda_cflags=[],
                extra_sycl_cflags=[],
                extra_ldflags=[],
                extra_include_paths=[str(INCLUDE)],
                with_cuda=False,
                with_sycl=False,
                is_standalone=False,
            )
            text = ninja.read_text(encoding="utf-8")
    except Exception:  # any failure means: build without a precompiled header
        return None
    found = re.search(r"^cflags = (.*)$", text, re.M)
    post = re.search(r"^post_cflags = (.*)$", text, re.M)
    if found is None:
        return None
    flags = shlex.split(found.group(1)) + (shlex.split(post.group(1)) if post else [])
    return [f for f in flags if not f.startswith("-DTORCH_EXTENSION_NAME")]


@cache
def _compiler_version() -> str:
    from torch.utils import cpp_extension

    compiler = cpp_extension.get_cxx_compiler()
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return compiler
    return compiler + " " + out.stdout.splitlines()[0] if out.stdout else compiler


def folder() -> Path | None:
    """Where this torch's and compiler's precompiled prelude is (or will be)."""
    flags = compile_flags()
    if flags is None:
        return None
    import torch

    parts = [*flags, torch.__version__, _compiler_version(), runtime_digest(INCLUDE)]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return cache_root() / "pch" / key


def ensure() -> Path | None:
    """The folder to put first on the include path (building the file if needed), or None
    when there is none to be had (the reason is kept in the folder's failed.txt)."""
    where = folder()
    if where is None:
        return None
    if (where / GCH).is_file():
        _used(where)
        return where
    if (where / FAILED).is_file():
        return None
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(where.parent / f"{where.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it
        if (where / GCH).is_file():
            return where
        built = _compile(where)
    if built:
        evict(where)
    return where if built else None


def _used(where: Path) -> None:
    """Mark ``where`` as just used (its lock file's time), for ``evict``'s order."""
    with contextlib.suppress(OSError):
        os.utime(where.parent / f"{where.name}.lock")


def evict(kept: Path, keep: int = KEEP) -> list[Path]:
    """Remove the precompiled preludes beside ``kept`` but the ``keep`` most recently used;
    one whose lock another process holds (building it) stays. A run that was to read an
    evicted one reads the header instead (slower, the same code). Returns what went."""
    others = [p for p in kept.parent.iterdir() if p.is_dir() and p != kept and p.name[0] != "."]
    lock_of = {p: kept.parent / f"{p.name}.lock" for p in others}
    others.sort(key=lambda p: lock_of[p].stat().st_mtime if lock_of[p].exists() else 0.0)
    gone = []
    for stale in others[: max(len(others) - keep, 0)]:
        with open(lock_of[stale], "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # being built right now
            shutil.rmtree(stale, ignore_errors=True)
        lock_of[stale].unlink(missing_ok=True)
        gone.append(stale)
    return gone


def _compile(where: Path) -> bool:
    from torch.utils import cpp_extension

    work = Path(tempfile.mkdtemp(prefix=".pch-", dir=where.parent))
    try:
        (work / GCH).parent.mkdir(parents=True)
        command = [cpp_extension.get_cxx_compiler(), "-x", "c++-header", str(HEADER)]
        command += ["-o", str(work / GCH), *(compile_flags() or [])]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if proc.returncode != 0:
            where.mkdir(parents=True, exist_ok=True)
            (where / FAILED).write_text(proc.stderr[-2000:] or "no output", encoding="utf-8")
            return False
        for path in (work, *work.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)  # readable by a sandbox user
        if where.exists():
            shutil.rmtree(where)
        os.replace(work, where)
        return True
    except subprocess.TimeoutExpired:
        return False
    finally:
        shutil.rmtree(work, ignore_errors=True)


def uses_extensions(program: Path) -> bool:
    """Whether the program's Python code mentions torch's cpp_extension at all. Read on
    the host, so only as ``safepath`` reads a repository's files: regular files inside
    the program's folder, of the scanner's size at most (a ``.py`` link to ``/dev/zero``
    or out of the folder is not the program's code)."""
    for count, path in enumerate(program.rglob("*.py")):
        if count >= _SCAN_LIMIT:
            return True  # too many to read: assume it may
        try:
            if _USES_EXTENSIONS.search(read_inside(program, path.relative_to(program))):
                return True
        except OSError:
            continue
    return False


def for_sandbox(mode: str, program: Path) -> tuple[list[Path], dict[str, str]]:
    """For a run's parent: the read-only paths and the environment a reference run of
    ``program`` needs to use the precompiled prelude (nothing for other runs, programs
    without extensions, or where none can be built)."""
    if mode != "reference" or not uses_extensions(program):
        return [], {}
    where = ensure()
    return ([where], {ENV: str(where)}) if where is not None else ([], {})


if __name__ == "__main__":
    built = ensure()
    if built is None:
        sys.exit("torchport: no precompiled header for the CPU runner (not GCC, or it failed)")
    print(built)
