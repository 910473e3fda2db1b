"""The next step when a program stops at an import of a package its runs could not have.

Most such packages can be provided (a wheel folder, ``--deps FILE``, an interpreter that
has them: ``tools.depinstall.HOW_TO_PROVIDE``). A torch companion whose releases ended
before the run's torch (torchtext: its last release is for torch 2.3) cannot: no wheel of
it loads beside that torch, so "provide it with --deps" would send the user to the same
failure inside the package. The step then names the torch that has a release of it, the
torch the repository itself asks for when it says, and what a port to a newer torch needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchport.tools.depnames import ended_for
from torchport.tools.depresolve import TORCH_OWN, installed_version


def _torch_asked(environment: Mapping[str, Any]) -> str:
    """``pytorch==1.3.1 (requirements.txt:5)`` when the repository pins its torch (torchport
    skips that pin: its torch is its own), else ""."""
    for skipped in environment.get("skipped") or []:
        if isinstance(skipped, Mapping) and skipped.get("reason") == TORCH_OWN:
            where = f" ({skipped.get('source')})" if skipped.get("source") else ""
            return f"{skipped.get('requirement')}{where}"
    return ""


def provide_step(dist: str, environment: Mapping[str, Any], torch: str | None = None) -> str | None:
    """How to give the runs ``dist`` when the usual way (``HOW_TO_PROVIDE``) cannot: for a
    companion with no release for ``torch`` (the runs' torch; torchport's when None), an
    interpreter with an older torch, and the note that a port to a newer torch must replace
    the program's use of it. None: the usual way applies."""
    torch = torch or installed_version("torch") or ""
    ended = ended_for(dist, torch) if torch else None
    if ended is None:
        return None
    last_torch, last = ended
    asked = _torch_asked(environment)
    asked = f"; the repository asks for {asked}" if asked else ""
    return (
        f"Verify with --python PATH: an interpreter with torch {last_torch} or older and "
        f"{dist} installed ({dist} {last} is its last release, for torch {last_torch}){asked}. "
        f"On a target whose torch is newer no {dist} release exists: the port needs the "
        f"program's use of {dist} replaced"
    )
