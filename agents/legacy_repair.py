"""The original, runnable on current PyTorch: lines PyTorch 0.4+ broke, repaired where a
run fails at them, in a copy of the original and in the port alike.

A repository written for PyTorch 0.3 (``loss.data[0]``, ``.view`` of a transposed
comparison) stops on any current PyTorch, CUDA included, so its original fails here too
and there is nothing to compare the port with, though the port itself is sound. Moving
such a repository to a target that needs PyTorch 2 means these repairs anyway. When the
original's run fails with one of the signatures ``tools.legacy_torch.RULES`` knows, at
a line of the repository's own, that line is repaired in a copy and the original runs
again, until it runs or fails otherwise (at most ``MAX_REPAIRS`` lines). The port gets the
same repairs at the same lines, and the verdict lists every one, as it lists the
``async=`` renames (``agents.original_keyword``): the original as written still cannot
run on current PyTorch, and the report must not hide it.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, cast

from torchport.tools.codemods import Edit
from torchport.tools.legacy_torch import RULES, WHY, at_line, of_expressions
from torchport.tools.repowalk import walk_repo
from torchport.tools.sourcefile import read_exact

from .diagnose import diagnose
from .run_record import RepairJSON, RunRecord

MAX_REPAIRS = 8
RULE = "legacy-torch"  # the rule the report lists the repairs under


@dataclass(frozen=True)
class Repair:
    """One failure repaired: where the original failed, the expressions repaired there and
    wherever else the repository has them (as written), the failing line before and after,
    the (file, line)s changed in the original, and the port's (file, line, before, after)s
    (none: the port has no such expression)."""

    signature: str
    path: str
    line: int
    expressions: tuple[str, ...]
    before: str
    after: str
    lines: tuple[tuple[str, int], ...]
    port_lines: tuple[tuple[str, int, str, str], ...] = ()

    def to_json(self) -> RepairJSON:
        return cast("RepairJSON", asdict(self))


def _line(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _python_file(root: Path, rel: str | None) -> Path | None:
    """``root/rel`` when it is a regular Python file of the repository's own."""
    if not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
        return None
    path = root / rel
    if path.suffix != ".py" or path.is_symlink() or not path.is_file():
        return None
    return path


def _next_repair(result: Mapping[str, Any], root: Path, target: str) -> Repair | None:
    """The repair of the line ``result`` failed at (written into ``root``, with the same
    expressions in the repository's other files), when its failure is one ``RULES`` knows
    and the line is the repository's own and changes."""
    if result.get("status") == "ok":
        return None
    found = diagnose(result, target)
    path = _python_file(root, found.file)
    if found.signature not in RULES or path is None or not found.line:
        return None
    text = read_exact(path)
    fixed = at_line(found.signature, text, found.line)
    if fixed is None:
        return None
    path.write_bytes(fixed.text.encode("utf-8"))
    rel = str(found.file)
    elsewhere = _repair_tree(root, found.signature, fixed.expressions, skip=rel)
    lines = (*((rel, n) for n in fixed.lines), *((f, n) for f, n, _, _ in elsewhere))
    before, after = _line(text, found.line), _line(fixed.text, found.line)
    return Repair(found.signature, rel, found.line, fixed.expressions, before, after, lines)


def _repair_tree(
    root: Path, signature: str, expressions: tuple[str, ...], skip: str = ""
) -> tuple[tuple[str, int, str, str], ...]:
    """Repair ``expressions`` in every Python file under ``root`` (but ``skip``) that has
    them; the (file, line, before, after) of each line changed."""
    changed = []
    for f in walk_repo(root, []):
        if f.kind != "python" or f.rel == skip or f.path.suffix != ".py" or f.path.is_symlink():
            continue
        try:
            text = read_exact(f.path)
        except (OSError, UnicodeDecodeError):
            continue
        if not any(e in text for e in expressions):  # cheap: most files have none
            continue
        fixed = of_expressions(signature, text, expressions)
        if fixed is None:
            continue
        f.path.write_bytes(fixed.text.encode("utf-8"))
        changed += [(f.rel, n, _line(text, n), _line(fixed.text, n)) for n in fixed.lines]
    return tuple(changed)


@contextlib.contextmanager
def repaired_original(
    reference: RunRecord,
    runnable: Path,
    run: Callable[[Path], RunRecord],
    target: str,
) -> Iterator[tuple[RunRecord, list[Repair]]]:
    """``(reference, repairs)``: the run as given and no repairs when it did not fail at a
    line the table repairs; else the run of a temporary copy of ``runnable`` repaired line
    by line (``run`` runs a root), and the repairs. The copy is removed on exit."""
    if reference.get("status") == "ok" or diagnose(reference, target).signature not in RULES:
        yield reference, []
        return
    with tempfile.TemporaryDirectory(prefix="torchport-legacy-") as scratch:
        copy = Path(scratch) / runnable.name
        shutil.copytree(runnable, copy, symlinks=True)
        repairs: list[Repair] = []
        while len(repairs) < MAX_REPAIRS:
            repair = _next_repair(reference, copy, target)
            if repair is None:
                break
            repairs.append(repair)
            reference = run(copy)
        yield reference, repairs


def repair_port(tree: Path, repairs: list[Repair]) -> list[Repair]:
    """Apply each repair to the port in ``tree`` (a port torchport wrote): the same
    expressions wherever its files have them; returns the repairs with the port's lines."""
    return [replace(r, port_lines=_repair_tree(tree, r.signature, r.expressions)) for r in repairs]


def port_edits(repairs: list[RepairJSON]) -> list[Edit]:
    """The port's repaired lines as the report's edits (rule ``RULE``), with the reason."""
    return [
        Edit(RULE, path, line, line, before, after, WHY[r["signature"]])
        for r in repairs
        for path, line, before, after in r.get("port_lines") or ()
    ]


def note(repairs: list[RepairJSON], failed_at: tuple[str, int] | None = None) -> str:
    """What the verdict says of the repairs, or "" for none. ``failed_at``: where the
    original's run failed after them, named when it is a line torchport repaired."""
    if not repairs:
        return ""
    where = ", ".join(f"{r['path']}:{r['line']} `{r['after'].strip()}`" for r in repairs)
    more = sum(len(r["lines"]) - 1 for r in repairs)
    why = "; ".join(sorted({WHY[r["signature"]] for r in repairs}))
    text = (
        f"the original ran with {len(repairs)} failing line(s) repaired for current PyTorch "
        f"({where})"
    )
    if more:
        text += (
            f" and {more} more line(s) with the same expression in the repository, which the "
            "run may not reach"
        )
    text += f": as written it fails on any PyTorch since 0.4 ({why}); the port has the same repairs"
    unported = [f"{r['path']}:{r['line']}" for r in repairs if not r.get("port_lines")]
    if unported:
        text += f", except at {', '.join(unported)} (the port has no such expression there)"
    repaired_lines = {tuple(site) for r in repairs for site in r["lines"]}
    if failed_at and failed_at in repaired_lines:
        text += (
            f"; the original then failed at {failed_at[0]}:{failed_at[1]}, a line torchport "
            "repaired: that repair is the likelier cause"
        )
    return text
