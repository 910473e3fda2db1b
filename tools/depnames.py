"""Which distribution an import needs, and which release of a torch companion a torch needs.

Both are data (``tools/data/distributions.toml``), read here: an import no dependency file
declares is installed only when the table names its distribution (a name guessed from the
import could be a stranger's package: dependency confusion), and a torchvision,
torchaudio or torchtext pinned to the series built for another torch is replaced by the
series built for the torch installed (two torch builds cannot be installed together).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

TABLE = Path(__file__).resolve().parent / "data" / "distributions.toml"
# patch releases a series is probed with when a specifier is matched against a series
_PATCHES = range(10)


@functools.cache
def _tables() -> dict[str, Any]:
    return tomllib.loads(TABLE.read_text(encoding="utf-8"))


def known_distribution(module: str) -> tuple[str, str] | None:
    """``(prefix, distribution)`` for the longest dotted prefix of ``module`` the table
    names (``torch.utils.tensorboard.writer`` -> ``("torch.utils.tensorboard",
    "tensorboard")``), or None: a distribution torchport does not know."""
    imports = _tables()["imports"]
    parts = module.split(".")
    for size in range(len(parts), 0, -1):
        prefix = ".".join(parts[:size])
        if prefix in imports:
            return prefix, imports[prefix]
    return None


def runtime_of(distribution: str) -> list[str]:
    """The distributions that provide the shared library ``distribution``'s wheel loads
    at run time (``mpi4py`` -> ``["mpich"]``); none for most."""
    return list(_tables().get("runtime", {}).get(distribution, []))


def torch_minor(version: str) -> str:
    """``2.13.0+cpu`` -> ``2.13``."""
    return ".".join(version.split("+")[0].split(".")[:2])


def _admits_series(specifier: SpecifierSet, series: str) -> bool:
    return any(specifier.contains(f"{series}.{p}", prereleases=True) for p in _PATCHES)


@dataclass(frozen=True)
class CompanionFix:
    """A companion requirement that cannot hold beside the installed torch, and what
    replaces it (``requirement`` empty: no release of it exists for that torch)."""

    requirement: str  # what is installed instead: "torchvision==0.28.*", or ""
    note: str  # "torchvision==0.20.0 is built for torch 2.5; ..."


def _minor_key(minor: str) -> tuple[int, ...]:
    return tuple(int(p) for p in minor.split(".") if p.isdigit())


def ended_for(name: str, torch: str) -> tuple[str, str] | None:
    """``(last torch, last series)`` when ``name`` is a companion whose releases ended
    (``companions_ended``) before ``torch``: no release of it is built for that torch, and
    none will be. None otherwise (no companion, or one with a release for it, or one that
    may still get one)."""
    series_of = _tables()["companions"].get(name)
    if series_of is None or name not in _tables().get("companions_ended", {}):
        return None
    last_torch, last = max(series_of.items(), key=lambda item: _minor_key(item[0]))
    if _minor_key(torch_minor(torch)) <= _minor_key(last_torch):
        return None
    return last_torch, last


def companion_fix(
    name: str, asked: str, specifier: SpecifierSet, torch: str
) -> CompanionFix | None:
    """None when ``name`` is no torch companion, or ``specifier`` (``asked`` as written)
    admits the series built for ``torch``; the replacement otherwise. An unpinned companion
    is left to pip (with torch held as installed, it picks the release built for it),
    except one whose releases ended before ``torch``: pip would still take its last
    release, which cannot load beside this torch, so it is not installed and says why."""
    series_of = _tables()["companions"].get(name)
    if series_of is None:
        return None
    if not str(specifier):
        ended = ended_for(name, torch)
        if ended is None:
            return None
        last_torch, last = ended
        why = _tables()["companions_ended"][name]
        return CompanionFix(
            "",
            f"{name} has no release for torch {torch_minor(torch)} (the last, {last}, is for "
            f"torch {last_torch}; {why}): not installed, since its native library would not "
            "load beside this torch",
        )
    minor = torch_minor(torch)
    series = series_of.get(minor)
    if series is not None and _admits_series(specifier, series):
        return None
    built_for = [t for t, s in series_of.items() if _admits_series(specifier, s)]
    torches = built_for[0] if len(built_for) == 1 else f"{built_for[0]} to {built_for[-1]}"
    pinned = (
        f"{asked} is built for torch {torches}"
        if built_for
        else f"{asked} is built for no torch torchport knows of"
    )
    if series is None:
        last_torch, last = list(series_of.items())[-1]
        note = (
            f"{pinned}; {name} has no release for torch {minor} (the last, {last}, is for "
            f"torch {last_torch}): not installed"
        )
        return CompanionFix("", note)
    replacement = f"{name}=={series}.*"
    return CompanionFix(replacement, f"{pinned}; the release for torch {minor} is used instead")
