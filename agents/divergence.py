"""Where a port first computes something else: two module traces compared.

When a port's losses part from the original's at step ``k``, both programs run step ``k``
again with ``sandbox.module_trace`` on, the port loading the original's weights at its
start (``agents.divergence_runs``). Each module call of the port, in execution order, is
matched with the original's call of the same module (qualified name and how many times it
was called before) and their outputs compared under the verification's tolerance policy.

The first call that differs tells where, and its input tells whose code: when its input
still matches, the module itself computes otherwise (its ``forward``, or for a layer of
torch's own, the device's op); when its input already differs, the code that made that
input does: the enclosing module's ``forward`` between its calls (a scale applied to
attention scores, a ``.float()`` dropped before a norm), or code outside every module (the
data, the loss). Where that code lies in the program, the lines the port changed there
name a port bug; a span the port did not change, or a layer of torch's, names the emulated
device's ops or arithmetic. With every output equal, the gradients are compared; with those
equal too, the difference is in the update (optimizer, gradient scaler, schedule).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

from torchport.tools.report.linemap import line_map

from .kernel_check import compare_tensor
from .site_records import TensorReport
from .tolerance import Policy
from .trace_records import ModuleCall, TraceReport
from .verification_records import DivergenceRecord

WINDOW = (3, 6)  # rows of the table before and after the first divergent call


@dataclass
class Row:
    """One module call of the port against the original's same call."""

    index: int
    name: str
    cls: str
    where: str
    dtypes: tuple[str, str]  # original, port
    max_abs: float
    max_rel: float
    holds: bool
    input_holds: bool | None = None
    ops: list[str] = field(default_factory=list)
    parent: str | None = None


@dataclass
class Divergence:
    """What the comparison found; ``found`` says which kind of answer it is."""

    step: int
    found: str  # "module" | "gradient" | "update" | "unknown"
    summary: str
    module: str = ""
    cls: str = ""
    where: str = ""  # the code that computes otherwise: path:first-last, or a torch class
    blame: str = ""  # "port" | "device" | "outside-modules" | ""
    port_lines: list[int] = field(default_factory=list)  # lines the port changed there
    original_lines: list[int] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # the device's ops in that module, where known
    max_abs: float = 0.0
    max_rel: float = 0.0
    dtypes: tuple[str, str] = ("", "")
    rows: list[Row] = field(default_factory=list)  # the table around the first divergent call
    profile: list[tuple[str, float]] = field(default_factory=list)  # every call's max rel
    weights: str = ""  # how the port got the original's weights

    def to_json(self) -> DivergenceRecord:
        return cast("DivergenceRecord", asdict(self))


def compare_sample(
    ref: TensorReport, got: TensorReport, policy: Policy
) -> tuple[bool, float, float]:
    """(within the policy, max abs, max rel) of two tensors' samples (``module_trace.sample``),
    as the kernel check compares tensors (``kernel_check.compare_tensor``); a dtype of its own
    is not a difference here (the table shows both), a different shape always is."""
    found = compare_tensor("", ref, got, policy, same_dtype=False)
    if "max_abs" not in found:  # a different shape, or a different number of values
        return False, math.inf, math.inf
    return found["holds"], found["max_abs"], found["max_rel"]


def _matched(
    reference: list[ModuleCall], port: list[ModuleCall]
) -> list[tuple[ModuleCall, ModuleCall]]:
    """Each port call with the original's call of the same module and occurrence."""
    seen: dict[str, int] = {}
    theirs: dict[tuple[str, int], ModuleCall] = {}
    for call in reference:
        theirs[(call["name"], seen.get(call["name"], 0))] = call
        seen[call["name"]] = seen.get(call["name"], 0) + 1
    seen.clear()
    pairs = []
    for call in port:
        key = (call["name"], seen.get(call["name"], 0))
        seen[call["name"]] = key[1] + 1
        if key in theirs:
            pairs.append((theirs[key], call))
    return pairs


def _row(index: int, ref: ModuleCall, got: ModuleCall, policy: Policy) -> Row:
    holds, worst_abs, worst_rel = compare_sample(ref["out"], got["out"], policy)
    inputs = None
    if "in" in ref and "in" in got:
        inputs = compare_sample(ref["in"], got["in"], policy)[0]
    return Row(
        index=index,
        name=got["name"],
        cls=got.get("cls", ""),
        where=got.get("where", ""),
        dtypes=(ref["out"].get("dtype", ""), got["out"].get("dtype", "")),
        max_abs=worst_abs,
        max_rel=worst_rel,
        holds=holds,
        input_holds=inputs,
        ops=list(got.get("ops") or []),
        parent=got.get("parent"),
    )


def changed_lines(original: str, port: str) -> dict[int, int]:
    """The port's lines that differ from the original's, each with the original's line
    that stood where it is (``tools.report.linemap``)."""
    before, after = original.splitlines(), port.splitlines()
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    back = line_map(port, original)
    out = {}
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            for j in range(j1, j2):
                out[j + 1] = back(j + 1)
    return out


def _span(where: str) -> tuple[str, int, int] | None:
    path, sep, lines = where.rpartition(":")
    first, dash, last = lines.partition("-")
    if not sep or not dash or not first.isdigit() or not last.isdigit():
        return None
    return path, int(first), int(last)


def _blame(d: Divergence, source: Path, tree: Path) -> None:
    """Whose code ``d.where`` is, and the lines the port changed in it."""
    span = _span(d.where)
    if span is None:
        d.blame = "device"
        return
    path, first, last = span
    try:
        original = (source / path).read_text(encoding="utf-8", errors="replace")
        port = (tree / path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        original = port = ""
    changed = {
        line: back for line, back in changed_lines(original, port).items() if first <= line <= last
    }
    d.port_lines, d.original_lines = sorted(changed), sorted(set(changed.values()))
    d.blame = "port" if changed else "device"


def _culprit(rows: list[Row], first: int) -> tuple[str, str, str]:
    """(module, class, where) of the code that computes otherwise at ``rows[first]``: the
    module itself when its input matches; else the innermost enclosing call whose own input
    still matches (a container such as ``nn.Sequential`` passes its input on unchanged, so
    the code that made it is further out); ("", "", "") when none does."""
    row = rows[first]
    if row.input_holds is not False:
        return row.name, row.cls, row.where
    at = first
    while True:
        enclosing = _enclosing(rows, at)
        if enclosing is None:
            return "", "", ""
        at, parent = enclosing, rows[enclosing]
        if parent.input_holds is not False:
            return parent.name, parent.cls, parent.where


def _enclosing(rows: list[Row], at: int) -> int | None:
    """The row of the call that encloses ``rows[at]``: the next call of its parent module
    (forward hooks fire when a call returns, so a parent's comes after its children's)."""
    parent = rows[at].parent
    if parent is None:
        return None
    return next((i for i in range(at + 1, len(rows)) if rows[i].name == parent), None)


def _gradients(
    reference: TraceReport, port: TraceReport, policy: Policy
) -> tuple[str, float, float] | None:
    """The first parameter whose gradient differs: (name, max abs, max rel), or None."""
    theirs = {(g["root"], g["name"]): g["grad"] for g in reference.get("grads") or []}
    for g in port.get("grads") or []:
        ref = theirs.get((g["root"], g["name"]))
        if ref is None:
            continue
        holds, worst_abs, worst_rel = compare_sample(ref, g["grad"], policy)
        if not holds:
            return g["name"], worst_abs, worst_rel
    return None


def locate(
    reference: TraceReport, port: TraceReport, policy: Policy, source: Path, tree: Path
) -> Divergence:
    """The first divergence between two traces of step ``k`` (``module_trace.report``)."""
    step = int(port.get("step") or reference.get("step") or 0)
    pairs = _matched(reference.get("calls") or [], port.get("calls") or [])
    if not pairs:
        return Divergence(step, "unknown", _nothing_to_match(reference, port))
    rows = [_row(i, ref, got, policy) for i, (ref, got) in enumerate(pairs)]
    profile = [(row.name, row.max_rel) for row in rows]
    first = next((i for i, row in enumerate(rows) if not row.holds), None)
    if first is None:
        return _after_forward(step, reference, port, policy, profile)
    row = rows[first]
    module, cls, where = _culprit(rows, first)
    d = Divergence(step, "module", "", module=module, cls=cls, where=where, ops=row.ops)
    d.max_abs, d.max_rel, d.dtypes, d.profile = row.max_abs, row.max_rel, row.dtypes, profile
    d.rows = rows[max(0, first - WINDOW[0]) : first + WINDOW[1]]
    if not where:
        d.blame = "outside-modules"
    else:
        _blame(d, source, tree)
    d.summary = summary(d, row)
    return d


def _nothing_to_match(reference: TraceReport, port: TraceReport) -> str:
    if not reference.get("calls") and not port.get("calls"):
        return "no module of the program ran in that step: it has no module structure to compare"
    return "the two programs share no module name in that step, so their calls cannot be matched"


def _after_forward(
    step: int, reference: TraceReport, port: TraceReport, policy: Policy, profile: list
) -> Divergence:
    found = _gradients(reference, port, policy)
    if found is not None:
        name, worst_abs, worst_rel = found
        owner = name.rpartition(".")[0]
        d = Divergence(step, "gradient", "", module=owner, max_abs=worst_abs, max_rel=worst_rel)
        d.profile = profile
        d.summary = (
            f"every module's output matches at step {step}, but the gradient of {name} "
            f"differs (abs {worst_abs:.3g}, rel {worst_rel:.3g}): the backward of "
            f"{owner or 'the model'} computes otherwise"
        )
        return d
    d = Divergence(step, "update", "", profile=profile)
    d.summary = (
        f"every module's output and every gradient match at step {step}: the difference "
        "arises in the update (the optimizer, a gradient scaler or the learning-rate schedule)"
    )
    return d


DEVICE = "the emulated device's op or its arithmetic"
OUTSIDE = "its input already differs and no module made it: the data or code outside every module"


def summary(d: Divergence, row: Row) -> str:
    """One sentence for the verdict: which module, whose code, by how much."""
    numbers = f"max abs {row.max_abs:.3g}, rel {row.max_rel:.3g}"
    if row.dtypes[0] != row.dtypes[1]:
        numbers += f", dtype {row.dtypes[0]} vs {row.dtypes[1]}"
    at = f"at step {d.step}, {row.name} ({row.cls}) is the first module whose output differs"
    at += f" ({numbers})"
    if d.blame == "outside-modules":
        return f"{at}; {OUTSIDE}"
    if row.input_holds is False:
        at += f"; its input already differs: the code of {d.module} ({d.where}) made it"
    if d.blame == "port":
        path = d.where.rpartition(":")[0]
        lines = ", ".join(str(n) for n in d.port_lines)
        was = ", ".join(str(n) for n in d.original_lines)
        return (
            f"{at}; the port changed {path} line(s) {lines} there (the original's line(s) "
            f"{was}): a port bug"
        )
    ops = f" (device ops: {', '.join(d.ops)})" if d.ops else ""
    if _span(d.where) is None:
        return f"{at}; {d.where} is torch's own layer, unchanged: {DEVICE}{ops}"
    return f"{at}; the port did not change {d.where}: {DEVICE}{ops}"
