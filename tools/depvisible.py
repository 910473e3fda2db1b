"""Which of torchport's own installed distributions a program may see (the rest are hidden
in its runs: ``sandbox.own_packages``).

Visible: what torchport's sandbox itself loads into a run (``BASE``: torch, numpy, pillow,
setuptools for torch's extension builder; torchport itself, not what it requires), every
distribution the program names (declared in its dependency files, or one of its imports'
distributions), what the overlay installed for it, and everything those require (their
``Requires-Dist``, followed through torchport's environment). A user who installed the
program's requirements has exactly those, and a library's probe for anything else finds
nothing in their environment: it finds nothing in the runs either.
"""

from __future__ import annotations

import importlib.metadata
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from .depresolve import canonical

# What the sandbox imports in every run (launcher, shim, emulator, synthetic datasets),
# and torch's extension builder's setuptools: visible whatever the program names.
BASE = frozenset({"torch", "numpy", "pillow", "setuptools"})
# torchport itself: its sandbox code runs in the program's process, but what the rest of
# torchport needs (an LLM client, the agent graph) is not the program's
OWN = "torchport"


def own_directories() -> list[str]:
    """torchport's site-packages folders (the interpreter the runs use)."""
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def own_distributions() -> list[str]:
    """``name==version`` of each distribution in torchport's folders."""
    found = importlib.metadata.distributions(path=own_directories())
    return sorted(f"{canonical(d.metadata['Name'] or '')}=={d.version}" for d in found)


def _requires(dist: importlib.metadata.Distribution) -> list[str]:
    """The distributions ``dist`` needs (no extras; markers read for this interpreter)."""
    names = []
    for text in dist.requires or []:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.append(canonical(requirement.name))
    return names


def _top_level(dist: importlib.metadata.Distribution) -> set[str]:
    """The top-level import names a distribution installs (its files' first parts)."""
    listed = dist.read_text("top_level.txt")
    if listed:
        return {line.strip() for line in listed.splitlines() if line.strip()}
    found = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first in ("..", "__pycache__") or first.endswith((".dist-info", ".pth", ".data")):
            continue
        name = (
            first.split(".")[0] if file.suffix in (".py", ".so") or len(file.parts) == 1 else first
        )
        if name.isidentifier():
            found.add(name)
    return found


def hidden_packages(
    named: Iterable[str], overlay_sites: Iterable[str] = ()
) -> dict[str, list[str]]:
    """``{"directories", "distributions", "modules"}``: torchport's folders, and the
    distributions of them (with their top-level modules) that no name in ``named``, no
    distribution of ``overlay_sites`` and nothing they require reaches."""
    directories = own_directories()
    own = {
        canonical(d.metadata["Name"] or ""): d
        for d in importlib.metadata.distributions(path=directories)
    }
    visible: set[str] = {OWN}
    queue = [canonical(n) for n in (*BASE, *named)]
    for dist in importlib.metadata.distributions(path=[str(Path(p)) for p in overlay_sites]):
        queue += _requires(dist)
    while queue:
        name = queue.pop()
        if name in visible:
            continue
        visible.add(name)
        if name in own:
            queue += _requires(own[name])
    hidden = sorted(set(own) - visible)
    kept_modules = set().union(*(_top_level(own[n]) for n in own if n in visible))
    modules = set().union(*(_top_level(own[n]) for n in hidden)) - kept_modules
    return {"directories": directories, "distributions": hidden, "modules": sorted(modules)}
