"""An original that fails on torchport's torch where the repository pins another release.

torchport never installs torch (its runs use its own, the one the target's runtime is built
for), so a repository that pins ``torch==2.0.0`` runs on, say, 2.13 here. When the original
then fails, "the original fails here too" reads as the repository being broken, where it may
only rely on its release (a private attribute of a torch class, a removed function). The
verdict says which torch ran and which the repository asks for, and what to do next.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from torchport.tools.depresolve import installed_version

from .results import Verification
from .verdicts import Reason

# torch==2.0.0 (pip), pytorch::pytorch=2.0.0 / pytorch=2.0 (conda); not pytorch-cuda=11.7
_PIN = re.compile(r"(?:^|::)(?:py)?torch\s*={1,2}\s*(\d+)\.(\d+)(?:\.\d+)?\s*$")
ORIGINAL_FAILS = "the original fails here too: "


def torch_pin(environment: Mapping[str, Any]) -> tuple[str, str] | None:
    """The repository's exact pin of another torch minor release than this one:
    ``(requirement, where)``, else None."""
    here = tuple(int(p) for p in _torch_version().split(".")[:2])
    for skipped in environment.get("skipped") or []:
        requirement = str(skipped.get("requirement", ""))
        found = _PIN.search(requirement)
        if found and (int(found.group(1)), int(found.group(2))) != here:
            return requirement, str(skipped.get("source", ""))
    return None


def with_torch_pin(v: Verification, environment: Mapping[str, Any]) -> Verification:
    """A reason that blames the original while the repository pins another torch says so."""
    pin = torch_pin(environment)
    if pin is None or v.code != Reason.BOTH_FAIL or not v.reason.startswith(ORIGINAL_FAILS):
        return v
    requirement, where = pin
    here = _torch_version()
    asks = f"{where} asks for {requirement}" if where else f"the repository asks for {requirement}"
    reason = (
        f"the original fails on this torch ({here}; {asks}): {v.reason[len(ORIGINAL_FAILS) :]}"
        f"; if it runs on its own release, it relies on that release's torch, and the port "
        f"must be updated for torch {here} (torchport never installs torch)"
    )
    return replace(v, reason=reason)


def _torch_version() -> str:
    """The runs' torch (torchport's own), read from its metadata: importing torch here
    would load it into every command that only migrates."""
    return (installed_version("torch") or "0.0").split("+")[0]
