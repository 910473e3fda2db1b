"""torchport's own installed packages that the program does not name, absent in its runs.

The sandboxed program runs on torchport's interpreter, so torchport's site-packages are on
its path: torch and what torch needs, and also what torchport has for itself (an LLM
client, bitsandbytes and triton for the reference run). A library that probes for an
optional package (``importlib.util.find_spec("bitsandbytes")``, ``try: import triton``)
would find torchport's and take a path the user's environment never takes, and a run on
the emulated device, where those CUDA-only packages are refused, would then fail on an
import the program never wrote. So the dependency step (``tools.depinstall``) lists, in
the overlay (``HIDDEN_FILE`` at its prefix), the distributions of torchport's environment
that neither the program (its declared requirements, its imports) nor torch nor what
those need names; in every run, the original's and the port's alike, they are absent
exactly as an uninstalled package is: ``find_spec`` returns None, ``import`` raises
ModuleNotFoundError, ``importlib.metadata`` does not list them. A copy the overlay
installed is still found (the hiding covers torchport's folders only). Standard library
only: it is installed before the program's first import.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

HIDDEN_FILE = "hidden.json"  # at an overlay's prefix: {"directories", "distributions", "modules"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class HidingPathFinder:
    """``importlib.machinery.PathFinder`` (which it replaces in ``sys.meta_path``), except
    that the hidden top-level modules and distributions are not looked for in
    torchport's folders."""

    def __init__(
        self, directories: Iterable[str], distributions: Iterable[str], modules: Iterable[str]
    ) -> None:
        self.directories = {os.path.abspath(d) for d in directories}
        self.distributions = {_canonical(d) for d in distributions}
        self.modules = set(modules)

    def hides(self, module: str) -> bool:
        """Whether the top-level ``module`` is one of torchport's hidden packages."""
        return module.partition(".")[0] in self.modules

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if path is None and fullname in self.modules:
            path = [p for p in sys.path if os.path.abspath(p or ".") not in self.directories]
        return importlib.machinery.PathFinder.find_spec(fullname, path, target)

    def find_distributions(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for dist in importlib.machinery.PathFinder.find_distributions(*args, **kwargs):
            name = _canonical(dist.metadata["Name"] or "")
            where = os.path.abspath(str(dist.locate_file("")))
            if name in self.distributions and where in self.directories:
                continue
            yield dist

    def invalidate_caches(self) -> None:
        importlib.machinery.PathFinder.invalidate_caches()


def _finder() -> HidingPathFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, HidingPathFinder)), None)


def hidden(module: str) -> bool:
    """Whether ``module`` is one of torchport's packages hidden from this run."""
    finder = _finder()
    return finder is not None and finder.hides(module)


def install(prefixes: Iterable[Path]) -> HidingPathFinder | None:
    """Hide what the overlays at ``prefixes`` list (a run without one hides nothing)."""
    directories, distributions, modules = set(), set(), set()
    for prefix in prefixes:
        try:
            listed = json.loads((prefix / HIDDEN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        directories.update(listed.get("directories", []))
        distributions.update(listed.get("distributions", []))
        modules.update(listed.get("modules", []))
    if (not modules and not distributions) or _finder() is not None:
        return _finder()
    finder = HidingPathFinder(directories, distributions, modules)
    for index, entry in enumerate(sys.meta_path):
        if entry is importlib.machinery.PathFinder:
            sys.meta_path[index] = finder
            break
    else:
        sys.meta_path.append(finder)
    return finder
