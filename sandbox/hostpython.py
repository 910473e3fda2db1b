"""How torchport starts a Python process of its own: isolated mode, in a folder it owns.

A child started as ``python -m pip`` or ``python -c CODE`` has its working folder first on
``sys.path``, and ``PYTHONPATH`` before site-packages. Started from inside a repository
(``cd repo && torchport migrate .``, ``torchport mcp .``) the repository's own ``pip/`` or
``torchport/`` package would be imported in place of the real one, on the host, with
torchport's privileges; started in the system's temporary folder, any local user's
``llama_cpp/`` would. ``-I`` (isolated mode: no working folder or script folder on the
path, no ``PYTHON*`` variables, no user site-packages) leaves only the interpreter's own
library and its environment's site-packages, which is where torchport and its
dependencies live. The working folder is one torchport made for itself, so that nothing a
child resolves against it (a relative path, a tool's config file) is another user's.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

# -I: isolated mode (implies -E: no PYTHON* variables, -s: no user site, -P: no unsafe
# path first on sys.path); -u stands in for PYTHONUNBUFFERED, which -E ignores.
ISOLATED = ("-I",)


def python_command(*args: str, python: str | None = None, unbuffered: bool = False) -> list[str]:
    """``python -I [-u] ARGS...`` for ``python`` (default: the interpreter running torchport)."""
    return [python or sys.executable, *ISOLATED, *(("-u",) if unbuffered else ()), *args]


def without_secrets(environ: dict[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) less every credential-like variable: a child
    that needs no key (a compiler run, a build) is started without one, rather than
    trusted to leave it alone."""
    from .isolation.env import looks_secret

    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if not looks_secret(k)}


def _home() -> Path:
    return Path(os.environ.get("TORCHPORT_HOME") or Path.home() / ".cache" / "torchport")


def private_cwd() -> str:
    """A folder only this user can write, for children's working folder: ``$TORCHPORT_HOME/cwd``.

    Made 0700 if missing; refused (ValueError) if it is a symlink or another user's, since
    then it is not torchport's to use."""
    folder = _home() / "cwd"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ValueError(f"{folder} is not a folder of this user's; torchport will not run there")
    if info.st_mode & 0o022:
        os.chmod(folder, 0o700)
    return str(folder)


def spawn_children_safely() -> None:
    """Make the Python processes ``multiprocessing`` starts itself (spawn children, its
    resource tracker: ``python -c 'from multiprocessing... import ...'``) start with
    ``-P``: their ``-c`` would otherwise put the working folder first on the path, ahead of
    the standard library. multiprocessing passes on only the flags torchport itself was
    started with (``util._args_from_interpreter_flags``), so ``-P`` is added there.
    Idempotent."""
    from multiprocessing import util

    original = util._args_from_interpreter_flags  # type: ignore[attr-defined]  # private, not in typeshed
    if getattr(original, "torchport", False):
        return

    def flags() -> list[str]:
        args = original()
        return args if "-I" in args or "-P" in args else [*args, "-P"]

    flags.__dict__["torchport"] = True  # a mark on the function: patched once
    util._args_from_interpreter_flags = flags  # type: ignore[attr-defined]  # private, not in typeshed
