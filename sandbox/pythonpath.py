"""Where a sandboxed program finds its own modules and its installed dependencies.

A repository run as its author runs it has its root importable (``pip install -e .``
or ``PYTHONPATH=.``), and its ``src/`` too in a src layout: a script in ``scripts/``
doing ``from mypkg.model import GPT`` must work. Both go on ``PYTHONPATH`` so that
every Python process of the run (spawned ranks, subprocesses) sees them. The
dependency overlays (``site_paths``) go there as well, for those processes, and the
launcher moves them after torchport's site-packages (``place_site_paths``) so that
torch and what torchport has always win; an overlay never holds a distribution that
torchport's environment has, so the order only matters as a second guard.

An overlay is an install prefix (``tools.depinstall``): the sandbox binds the whole prefix
read-only (``readonly_paths``), and puts its ``bin/`` first on PATH (console scripts its
wheels install) and its ``lib/`` on LD_LIBRARY_PATH (a shared library a wheel ships as
data, found by the dynamic loader as in the environment pip installed it into).

The launcher itself must import torchport before any of these folders is on its path (a
repository's ``torchport/`` package would stand in for it), so the harness hands them
over in ``TORCHPORT_PROGRAM_PATH``, not ``PYTHONPATH``; the launcher adds them to its
path once torchport is loaded, and to ``PYTHONPATH`` for the processes the program starts.
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Sequence
from pathlib import Path

from . import own_packages

SITE_VARIABLE = "TORCHPORT_SITE_PATHS"
PROGRAM_VARIABLE = "TORCHPORT_PROGRAM_PATH"
# a file at an overlay's install prefix: its bin/ and lib/ are the program's (a --python
# interpreter's site-packages has none, and /usr never goes on PATH or LD_LIBRARY_PATH)
OVERLAY_MARK = ".torchport-overlay"


def layout_paths(program_dir: Path) -> list[Path]:
    """The program's root, and its ``src/`` when a package or module lives there."""
    paths = [program_dir]
    src = program_dir / "src"
    if src.is_dir() and any(
        (child / "__init__.py").is_file() or child.suffix == ".py" for child in src.iterdir()
    ):
        paths.append(src)
    return paths


def overlay_prefix(site: Path) -> Path | None:
    """The install prefix whose ``lib/pythonX.Y/site-packages`` ``site`` is, when it is a
    dependency overlay's (marked ``OVERLAY_MARK``), else None."""
    prefix = site.parents[2] if len(site.parents) > 2 else None
    if prefix is None or not (prefix / OVERLAY_MARK).is_file():
        return None
    return prefix


def readonly_paths(site_paths: Sequence[Path]) -> list[Path]:
    """What the sandbox binds read-only for ``site_paths``: an overlay's whole prefix (its
    bin/ and lib/ too), any other site folder as it is."""
    return [overlay_prefix(p) or p for p in site_paths]


def program_environment(program_dir: Path, site_paths: Sequence[Path]) -> dict[str, str]:
    """The variables that make the layout and the overlays importable in every process,
    and the overlays' console scripts and shared libraries found."""
    entries = [*layout_paths(program_dir), *site_paths]
    env = {PROGRAM_VARIABLE: os.pathsep.join(str(p) for p in entries)}
    if site_paths:
        env[SITE_VARIABLE] = os.pathsep.join(str(p) for p in site_paths)
    prefixes = [p for p in map(overlay_prefix, site_paths) if p is not None]
    if prefixes:
        from .isolation.env import safe_env  # host side only: the runs never call this

        bins = [str(p / "bin") for p in prefixes]
        env["PATH"] = os.pathsep.join([*bins, safe_env()["PATH"]])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(str(p / "lib") for p in prefixes)
    return env


def pin_own_package() -> None:
    """Fix ``torchport``'s package path as it is now, before the program's folders are on
    ``sys.path``. ``torchport`` is a namespace package: left alone, its path is recomputed
    from ``sys.path`` at each import, and a program's ``torchport/tools/`` folder (no
    ``__init__.py`` beside it) would become where ``torchport.tools`` is found when
    torchport first imports it, inside the run."""
    package = sys.modules.get("torchport")
    path = getattr(package, "__path__", None)
    if package is not None and path is not None and not isinstance(path, list):
        package.__path__ = list(path)


def program_path() -> list[str]:
    """Inside a run: the program's folders and the overlays, in ``PYTHONPATH``'s order."""
    return [p for p in os.environ.get(PROGRAM_VARIABLE, "").split(os.pathsep) if p]


def program_folders() -> list[str]:
    """Inside a run: the program's own folders (its root, ``src/``), without the overlays
    (``place_site_paths`` puts those after site-packages)."""
    overlays = set(installed_overlays())
    return [p for p in program_path() if p not in overlays]


def installed_overlays() -> list[str]:
    """Inside a run: the dependency overlays' folders (installed packages, not the user's)."""
    return [p for p in os.environ.get(SITE_VARIABLE, "").split(os.pathsep) if p]


def place_site_paths() -> list[str]:
    """In the launcher: each overlay after site-packages (and its ``.pth`` files read), and
    torchport's own packages the program does not name hidden (``own_packages``)."""
    overlays = installed_overlays()
    for path in overlays:
        while path in sys.path:
            sys.path.remove(path)
        site.addsitedir(path)
    prefixes = (overlay_prefix(Path(p)) for p in overlays)
    own_packages.install(p for p in prefixes if p is not None)
    return overlays
