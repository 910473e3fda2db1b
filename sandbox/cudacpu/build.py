"""Compile a translated extension with the host C++ compiler, through torch's own
``cpp_extension.load``, into a folder named by everything the library depends on.

The folder is ``<root>/<name>-<key>``, the key a hash of the translated sources, the
flags, the runtime's files, torch's version and the compiler: the same extension built
twice under one root is compiled once (ninja finds nothing to do), and an edit anywhere
builds anew. ``root`` is the caller's choice: a sandboxed run's scratch folder (the
reference shim's default: runs write only there), or a cache torchport owns.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

RUNTIME = Path(__file__).with_name("runtime")
INCLUDE = RUNTIME / "include"
RUNTIME_SOURCE = RUNTIME / "runtime.cpp"
# Of the program's compiler options only macros and include folders are kept: nvcc's
# (architectures, fast math, ptxas) mean nothing to the host compiler, and the runner
# chooses the optimisation and language level (those of its precompiled prelude). CUDA's
# libraries are not linked: the runner provides what it runs.
_HOST_FLAG = re.compile(r"^-(D|U|I)")
_CUDA_LIBRARY = re.compile(
    r"^-l(cuda|cudart|cublas\w*|cudnn|curand|cufft|cusparse|cusolver|nvrtc)$"
)


CACHE_ENV = "TORCHPORT_CUDACPU_CACHE"
# The runner's own options (its precompiled prelude is built with the same): optimised
# kernels, and stack probes so that a kernel's large local array faults on its thread's
# guard page (reported as a stack overflow) instead of writing past it.
RUNNER_CFLAGS = ("-O2", "-fstack-clash-protection")
PCH_ENV = "TORCHPORT_CUDACPU_PCH"  # set by the run's parent: see pch.py


def cache_root() -> Path:
    """torchport's own cache of builds (outside a sandboxed run): ``$TORCHPORT_CUDACPU_CACHE``,
    else ``$TORCHPORT_HOME/cudacpu``, else ``~/.cache/torchport/cudacpu``. Keyed by
    content, so sharing it between runs and processes never loads a stale build."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    home = os.environ.get("TORCHPORT_HOME") or Path.home() / ".cache" / "torchport"
    return Path(home) / "cudacpu"


class CompileFailed(RuntimeError):
    """The translated extension did not compile (the compiler's errors name the user's
    files and lines)."""


@dataclass
class Built:
    module: Any  # the loaded module (or the library's path, for a non-Python extension)
    library: Path
    folder: Path
    seconds: float
    compiled: bool  # False: an identical build was already in the folder


def host_flags(flags: list[str] | None) -> list[str]:
    """The options of ``extra_cflags`` / ``extra_cuda_cflags`` the runner keeps."""
    return [f for f in flags or [] if _HOST_FLAG.match(f)]


def host_ldflags(flags: list[str] | None) -> list[str]:
    """``extra_ldflags`` without CUDA's libraries."""
    return [f for f in flags or [] if not _CUDA_LIBRARY.match(f) and "cuda" not in f.lower()]


@cache
def runtime_digest(folder: Path = RUNTIME) -> str:
    """A hash of the runtime's files (of ``folder``: the headers alone, for the
    precompiled prelude)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _compiler() -> str:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"


def key(
    name: str,
    files: list[tuple[str, str]],
    cflags: list[str],
    ldflags: list[str],
    includes: list[str],
) -> str:
    import torch

    parts = [
        name,
        files,
        cflags,
        ldflags,
        includes,
        torch.__version__,
        runtime_digest(),
        _compiler(),
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


@contextlib.contextmanager
def _jobs(count: str) -> Iterator[None]:
    before = os.environ.get("MAX_JOBS")
    os.environ.setdefault("MAX_JOBS", count)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MAX_JOBS", None)


# torch's FileBaton: a file cpp_extension.load creates in the build folder while it builds.
BATON = "lock"
FLOCK = ".torchport-build.flock"


@contextlib.contextmanager
def one_builder(folder: Path) -> Iterator[None]:
    """Build ``folder`` alone. torch's baton is a plain file: a build killed mid-compile (a
    test run stopped, a verification past its time) leaves it, and every later build of the
    folder waits on it forever, then imports a library nobody built. torchport's builders
    take an ``flock`` first, which the kernel releases when its holder dies: a baton found
    under it is a dead build's, and is removed."""
    with open(folder / FLOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            (folder / BATON).unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(
    name: str,
    files: list[tuple[str, str]],
    root: Path,
    *,
    cflags: list[str] | None = None,
    ldflags: list[str] | None = None,
    includes: list[str] | None = None,
    is_python_module: bool = True,
    pch: Path | None = None,
) -> Built:
    """Write ``files`` ((file name, text) pairs) into the key's folder under ``root`` and
    compile them with the runtime; raises ``CompileFailed`` with the compiler's errors.
    ``pch`` (default: ``$TORCHPORT_CUDACPU_PCH``) is a folder holding the precompiled
    prelude (see ``pch``)."""
    from torch.utils import cpp_extension

    cflags, ldflags, includes = list(cflags or []), list(ldflags or []), list(includes or [])
    if pch is None and os.environ.get(PCH_ENV):
        pch = Path(os.environ[PCH_ENV])
    first = [str(pch)] if pch is not None and pch.is_dir() else []  # the .gch, then the .h
    includes = [*first, str(INCLUDE), *includes]
    folder = root / f"{name}-{key(name, files, cflags, ldflags, includes)}"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for file_name, text in files:
        path = folder / file_name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")  # unchanged files keep ninja's timestamps
        paths.append(str(path))
    library = folder / f"{name}.so"
    compiled = not library.is_file()
    started = time.monotonic()
    try:
        with _jobs("2"), one_builder(folder):
            module = cpp_extension.load(
                name=name,
                sources=[*paths, str(RUNTIME_SOURCE)],
                extra_cflags=[*RUNNER_CFLAGS, *cflags],
                extra_ldflags=ldflags,
                extra_include_paths=includes,
                build_directory=str(folder),
                verbose=False,
                with_cuda=False,
                is_python_module=is_python_module,
            )
    except RuntimeError as exc:
        if "Error building extension" not in str(exc):
            raise
        raise CompileFailed(
            f"torchport's CPU runner for CUDA kernels could not compile extension {name!r}: "
            + compiler_errors(str(exc))
        ) from None
    return Built(module, library, folder, round(time.monotonic() - started, 2), compiled)


def compiler_errors(output: str, limit: int = 6) -> str:
    """The compiler's error lines (``file:line:col: error: ...``), the first few."""
    lines = [
        ln.strip() for ln in output.splitlines() if re.search(r":\d+:(\d+:)? (fatal )?error:", ln)
    ]
    return " | ".join(lines[:limit]) if lines else output[-1500:]
