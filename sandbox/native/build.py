"""Compile the native emulator once per torch version and source, cached and shared.

The library lives in ``$TORCHPORT_EMULATOR_CACHE`` (default ``$TORCHPORT_HOME/emulator``,
else ``~/.cache/torchport/emulator``), in a folder named by the torch version and a hash
of the source and of torch, so an upgrade or an edit builds anew and nothing stale is
loaded. Builds are safe to run concurrently (pytest-xdist workers, batch runs): one file
lock per key, and the build goes to a temporary folder that is renamed into place whole.

The compiler runs in a child process of torchport (trusted), never in a sandboxed run:
loading a freshly built library would register a PrivateUse1 backend in the builder's
own process, which must stay free of it. Sandboxed programs only load the result.

    python -m torchport.sandbox.native.build   # build (or find) it; print its path
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..hostpython import python_command, without_secrets

SOURCE = Path(__file__).with_name("emulator.cpp")
MODULE = "torchport_emulator"
CACHE_ENV = "TORCHPORT_EMULATOR_CACHE"
BUILD_TIMEOUT_S = 900
FAILED = "failed.txt"


class BuildError(RuntimeError):
    """The compiler is missing or the build failed (the message says which)."""


def cache_root() -> Path:
    """Where built libraries are kept (see the module docstring)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    home = os.environ.get("TORCHPORT_HOME") or Path.home() / ".cache" / "torchport"
    return Path(home) / "emulator"


def _torch() -> tuple[str, str]:
    """torch's version and where it is installed, without importing it (the parent of a
    run may not have, and need not: importing torch costs a second or two)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise BuildError("torch is not installed")
    return importlib.metadata.version("torch"), str(Path(spec.origin).resolve())


def key() -> str:
    """The cache key: torch's version, the Python ABI and a hash of the source and torch."""
    version, where = _torch()
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(version.encode())
    digest.update(where.encode())
    digest.update(sys.implementation.cache_tag.encode())
    return f"torch-{version}-{digest.hexdigest()[:16]}"


def library_path() -> Path:
    """Where this torch's library is (or will be) once built."""
    return cache_root() / key() / f"{MODULE}.so"


def missing_tools() -> str | None:
    """Why nothing can be compiled here (no C++ compiler, no ninja), or None."""
    from torch.utils import cpp_extension

    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None and shutil.which("g++") is None:
        return f"no C++ compiler ({compiler} or g++) on PATH"
    if not cpp_extension.is_ninja_available():
        return "ninja is not installed (torch.utils.cpp_extension needs it)"
    return None


def previous_failure() -> str | None:
    """The reason the last build of this key failed, if it did (kept to not retry per run)."""
    path = cache_root() / key() / FAILED
    return path.read_text(encoding="utf-8").strip() if path.exists() else None


def build(retry_failed: bool = True) -> Path:
    """Return the library's path, compiling it first if needed (raises BuildError)."""
    target = library_path()
    if target.exists():
        return target
    reason = missing_tools()
    if reason:
        raise BuildError(reason)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same key
        if target.exists():
            return target
        if not retry_failed and previous_failure():
            raise BuildError(previous_failure() or "")
        _compile_into(target.parent)
    return target


def _compile_into(final: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))  # the cache root
    started = time.monotonic()
    try:
        proc = subprocess.run(
            python_command("-m", f"{__package__}.compile", str(work)),
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            env={**without_secrets(), "MAX_JOBS": os.environ.get("MAX_JOBS", "1")},
            cwd=work,  # torchport's own folder, not the user's (a repository's)
        )
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if "error" in ln]
            detail = (lines or (proc.stderr + proc.stdout).splitlines() or ["no output"])[:3]
            reason = f"the C++ build failed: {' | '.join(detail)[:600]}"
            final.mkdir(parents=True, exist_ok=True)
            (final / FAILED).write_text(reason + "\n", encoding="utf-8")
            raise BuildError(reason)
        (work / "build-seconds.txt").write_text(f"{time.monotonic() - started:.1f}\n")
        if final.exists():  # only a failure marker can be there (we hold the lock)
            shutil.rmtree(final)
        work.chmod(0o755)  # readable by a sandbox user other than ours (docker)
        os.replace(work, final)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"the C++ build took over {BUILD_TIMEOUT_S} s") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        print(build())
    except BuildError as exc:
        sys.exit(f"torchport: native emulator: {exc}")
