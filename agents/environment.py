"""The program's environment for a verification: ``--deps auto|none|FILE``.

Resolved and installed once per migration, on the host, before the sandboxed runs
(which are offline); the overlay is cached under ``$TORCHPORT_HOME/envs`` by what
was resolved, so a second migration of the same repository installs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchport.tools.depinstall import InstallError, prepare
from torchport.tools.depresolve import requirements_file, resolve

from . import runs

DEPS_MODES = ("auto", "none")
INSTALL_TIME_LIMIT_S = 900.0


def deps_flag(text: str) -> str:
    """``--deps``: auto, none, or a requirements file that exists (checked here, one line)."""
    if text in DEPS_MODES or Path(text).is_file():
        return text if text in DEPS_MODES else str(Path(text).resolve())
    raise ValueError(f"must be auto, none or a requirements file, not {text!r}")


def prepare_environment(
    source: Path, deps: str = "auto", say: Callable[[str], None] = lambda message: None
) -> dict[str, Any]:
    """The overlay record (``tools.depinstall.Overlay`` as data) the runs use; empty for
    ``none``. A cache that cannot be written is reported, not fatal: the runs go on
    without the overlay and the verdict names what is missing."""
    if deps == "none":
        return {}
    resolution = requirements_file(Path(deps)) if deps != "auto" else resolve(source)
    try:
        overlay = prepare(resolution, runs.home(), INSTALL_TIME_LIMIT_S, say)
    except InstallError as exc:
        say(f"dependencies: not installed: {exc}")
        return {"unavailable": {w.name: str(exc) for w in resolution.needed}}
    record = overlay.to_json()
    say(summary_line(record))
    return record


def summary_line(record: dict[str, Any]) -> str:
    """One line for the progress and migrate's output: what the runs have and lack."""
    parts = []
    if record.get("installed"):
        cached = " (cached)" if record.get("cached") else ""
        parts.append(f"installed {', '.join(record['installed'])}{cached}")
    if record.get("unavailable"):
        parts.append(f"could not install {', '.join(sorted(record['unavailable']))}")
    if record.get("skipped"):
        parts.append(f"skipped {', '.join(sorted({s['name'] for s in record['skipped']}))}")
    return "dependencies: " + ("; ".join(parts) or "nothing to install")
