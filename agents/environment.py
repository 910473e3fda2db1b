"""The program's environment for a verification: ``--deps auto|none|FILE``.

Resolved and installed once per migration, on the host, before the sandboxed runs
(which are offline); the overlay is cached under ``$TORCHPORT_HOME/envs`` by what
was resolved, so a second migration of the same repository installs nothing.
``auto`` reads the imports of what the entry reaches, and installing gets the time of
one sandboxed run (``--timeout``, at most ``INSTALL_TIME_LIMIT_S``): a verification
is two runs and this, never an install that outlasts the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

from torchport.sandbox.harness import RunError, program_argv, torchrun_parts
from torchport.sandbox.isolation.env import safe_env
from torchport.tools.depinstall import InstallError, prepare
from torchport.tools.depresolve import installed_version, requirements_file, resolve

from . import runs
from .run_record import EnvironmentRecord

DEPS_MODES = ("auto", "none")
INSTALL_TIME_LIMIT_S = 900.0
PROBE_TIMEOUT_S = 30.0
# Run in the user's interpreter: what it is and where its packages are (imports nothing).
_PROBE = (
    "import json, sys, sysconfig, importlib.metadata as m\n"
    "try:\n    torch = m.version('torch')\nexcept Exception:\n    torch = None\n"
    "paths = sysconfig.get_paths()\n"
    "print(json.dumps({'version': list(sys.version_info[:2]), 'torch': torch,"
    " 'site': sorted({paths['purelib'], paths['platlib']})}))"
)


def deps_flag(text: str) -> str:
    """``--deps``: auto, none, or a requirements file that exists (checked here, one line)."""
    if text in DEPS_MODES or Path(text).is_file():
        return text if text in DEPS_MODES else str(Path(text).resolve())
    raise ValueError(f"must be auto, none or a requirements file, not {text!r}")


class InterpreterError(ValueError):
    """``--python`` names an interpreter the runs cannot use (the message says why)."""


def _minor(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    return tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())


def user_interpreter(python: str) -> EnvironmentRecord:
    """``--python PATH``: the interpreter's site-packages, when the sandbox can use them.

    The runs stay on torchport's interpreter (the launcher, the shim and the emulator
    live there); the user's packages are added after torchport's own, so they must be
    built for the same Python and the same torch minor release. The interpreter is the
    user's own, but it is still run with a clean environment and a time limit.
    Raises InterpreterError saying why it cannot be used."""
    try:
        done = subprocess.run(
            [python, "-c", _PROBE],
            env=safe_env(),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            cwd="/",
        )
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise InterpreterError(
            f"--python {python}: not a Python interpreter that answers ({exc})"
        ) from None
    ours = list(sys.version_info[:2])
    if found["version"] != ours:
        raise InterpreterError(
            f"--python {python} is Python {'.'.join(map(str, found['version']))}; torchport's "
            f"sandbox runs Python {'.'.join(map(str, ours))}, which cannot load its packages"
        )
    torch = installed_version("torch")
    if found["torch"] and _minor(found["torch"]) != _minor(torch):
        raise InterpreterError(
            f"--python {python} has torch {found['torch']}; torchport verifies with torch "
            f"{torch}, and extensions built for one minor release do not load in another"
        )
    return {"python": python, "torch": found["torch"], "site_paths": list(found["site"])}


def entry_program(entry: list[str] | None) -> list[str] | None:
    """The script or module an entry command runs (``["train.py", ...]``, ``["-m", "pkg"]``),
    under torchrun too; None for no entry or a command that runs no Python program."""
    if not entry:
        return None
    try:
        dist = torchrun_parts(entry)
        return dist.program if dist is not None else program_argv(entry)
    except RunError:
        return None


def prepare_environment(
    source: Path,
    deps: str = "auto",
    say: Callable[[str], None] = lambda message: None,
    python: str | None = None,
    entry: list[str] | None = None,
    time_limit_s: float = INSTALL_TIME_LIMIT_S,
) -> EnvironmentRecord:
    """The overlay record (``tools.depinstall.Overlay`` as data) the runs use; empty for
    ``none``. A cache that cannot be written is reported, not fatal: the runs go on
    without the overlay and the verdict names what is missing. With ``python``, that
    interpreter's site-packages come after the overlay (``site_paths``). ``entry`` (the
    command verified) scopes the imports read; installing stops after ``time_limit_s``
    (at most ``INSTALL_TIME_LIMIT_S``) and what it did not install is unavailable."""
    user: EnvironmentRecord = user_interpreter(python) if python else {}
    if user:
        say(f"dependencies: using the packages of {python} (torch {user['torch']})")
    if deps == "none":
        return user
    if deps == "auto":
        resolution = resolve(source, entry_program(entry))
    else:
        resolution = requirements_file(Path(deps))
    limit = min(time_limit_s, INSTALL_TIME_LIMIT_S)
    try:
        overlay = prepare(resolution, runs.home(), limit, say)
    except InstallError as exc:
        say(f"dependencies: not installed: {exc}")
        return {**user, "unavailable": {w.name: str(exc) for w in resolution.needed}}
    record = cast(EnvironmentRecord, {**overlay.to_json(), **user})
    say(summary_line(record))
    return record


def summary_line(record: EnvironmentRecord) -> str:
    """One line for the progress and migrate's output: what the runs have and lack."""
    parts = []
    if record.get("installed"):
        cached = " (cached)" if record.get("cached") else ""
        parts.append(f"installed {', '.join(record['installed'])}{cached}")
    if record.get("unavailable"):
        parts.append(f"could not install {', '.join(sorted(record['unavailable']))}")
    parts += record.get("notes") or []
    if record.get("skipped"):
        parts.append(f"skipped {', '.join(sorted({s['name'] for s in record['skipped']}))}")
    return "dependencies: " + ("; ".join(parts) or "nothing to install")
