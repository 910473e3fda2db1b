"""A program that stops at an import its repository keeps in a git submodule not checked out.

``git clone`` without ``--recursive`` (and ``git archive``, and a ZIP download) leaves each
submodule's folder empty. A repository that keeps a library that way (``utils/progress``,
added to ``sys.path`` and imported as ``progress``) then fails with ModuleNotFoundError in
its own code, and a verdict "the original fails here too" would blame the program for the
state of the user's copy. This reads ``.gitmodules``, and when the missing module is an
empty submodule's folder, says so and what to run instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from torchport.sandbox.safepath import read_inside

from .results import Verification
from .verdicts import Reason, Verdict

_SECTION = re.compile(r'^\s*\[submodule\s+"([^"]*)"\]\s*$')
_ENTRY = re.compile(r"^\s*(path|url)\s*=\s*(.*?)\s*$")
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


@dataclass(frozen=True)
class Submodule:
    path: str  # relative to the repository: "utils/progress"
    url: str


def declared(root: Path) -> list[Submodule]:
    """The submodules ``root/.gitmodules`` declares (none when it has no such file)."""
    try:
        text = read_inside(root, ".gitmodules").decode("utf-8", "replace")
    except OSError:
        return []
    found: list[Submodule] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if _SECTION.match(line):
            current = {}
            found.append(Submodule("", ""))
        elif current is not None and (entry := _ENTRY.match(line)):
            current[entry.group(1)] = entry.group(2)
            found[-1] = Submodule(current.get("path", ""), current.get("url", ""))
    return [s for s in found if s.path]


def empty_submodules(root: Path) -> list[Submodule]:
    """The declared submodules whose folder is missing or empty in ``root``."""
    empty = []
    for sub in declared(root):
        folder = root / sub.path
        if ".." in Path(sub.path).parts or Path(sub.path).is_absolute() or folder.is_symlink():
            continue
        if not folder.is_dir() or not any(folder.iterdir()):
            empty.append(sub)
    return empty


def name_empty_submodule(v: Verification, root: Path) -> Verification:
    """``v`` saying so when the original stopped at an import of a module that one of
    ``root``'s empty submodules would provide (its folder's name), else ``v`` as it was."""
    reference = v.reference or {}
    error = reference.get("error") or {}
    if reference.get("status") == "ok" or error.get("type") != "ModuleNotFoundError":
        return v
    found = _NO_MODULE.search(str(error.get("message") or ""))
    if found is None:
        return v
    top = found.group(1).split(".")[0]
    for sub in empty_submodules(root):
        if Path(sub.path).name != top:
            continue
        frame = error.get("frame") or {}
        where = f" at {frame['file']}:{frame['line']}" if frame.get("file") else ""
        origin = f" ({sub.url})" if sub.url else ""
        return replace(
            v,
            verdict=Verdict.NOT_RUNNABLE,
            code=Reason.EMPTY_SUBMODULE,
            reason=(
                f"the repository's git submodule {sub.path}{origin} is empty in this copy, and "
                f"the program imports {top} from it{where}: No module named '{found.group(1)}'"
            ),
            next_step=(
                "check out the submodules (git clone --recursive, or git submodule update "
                "--init in the repository) and migrate again"
            ),
        )
    return v
