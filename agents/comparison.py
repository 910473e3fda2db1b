"""Two runs' numbers side by side: losses step by step (rank by rank where the program ran
several), or a forward pass's output statistics, under a tolerance ``Policy``.

Pure: lists of numbers in, a ``Parity`` out, so what "close enough" means is tested
without running anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from .run_record import OUTPUT_STATS, OutputStats, RunRecord
from .tolerance import Policy


@dataclass
class Parity:
    compared: str  # "losses" | "outputs" | "nothing"
    steps: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    worst_step: int | None = None
    holds: bool = False
    per_step: list[dict[str, float]] = field(default_factory=list)
    note: str = ""
    ranks: int = 1  # processes compared, rank i of the original against rank i of the port


def _close(a: float, b: float, policy: Policy) -> tuple[bool, float, float]:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b), math.inf, math.inf
    diff = abs(a - b)
    rel = diff / abs(b) if b else (0.0 if diff == 0 else math.inf)
    return diff <= policy.atol + policy.rtol * abs(b), diff, rel


def compare_series(reference: list[float], target: list[float], policy: Policy) -> Parity:
    """Step-by-step comparison of two loss trajectories (the first max_steps)."""
    n = min(len(reference), len(target), policy.max_steps)
    parity = Parity("losses", steps=n, holds=n > 0)
    for i in range(n):
        ok, diff, rel = _close(target[i], reference[i], policy)
        parity.per_step.append({"step": i + 1, "reference": reference[i], "target": target[i]})
        if diff > parity.max_abs or parity.worst_step is None:
            parity.max_abs, parity.worst_step = max(parity.max_abs, diff), i + 1
        parity.max_rel = max(parity.max_rel, rel)
        parity.holds = parity.holds and ok
    if len(reference) != len(target):
        parity.note = f"the reference recorded {len(reference)} losses, the target {len(target)}"
    return parity


def _losses_by_rank(result: RunRecord) -> dict[int, list[float]]:
    return {
        r["rank"]: list(r.get("losses") or [])
        for r in result.get("ranks") or []
        if isinstance(r.get("rank"), int)
    }


def compare_ranks(reference: RunRecord, target: RunRecord, policy: Policy) -> Parity:
    """Each rank's losses against the same rank's in the other run (DDP ranks train on
    different data, so rank 0 alone proves little); one series where neither run had two
    ranks (or one recorded none). A port that ran fewer ranks than the original (one where
    it trained two) fails, naming both: its rank 0 may match by itself."""
    ref, tgt = _losses_by_rank(reference), _losses_by_rank(target)
    if (len(ref) < 2 and len(tgt) < 2) or not ref or not tgt:
        return compare_series(reference["losses"], target["losses"], policy)
    if set(ref) != set(tgt):
        return Parity(
            "losses", note=f"the original ran ranks {sorted(ref)}, the port {sorted(tgt)}"
        )
    each = {rank: compare_series(ref[rank], tgt[rank], policy) for rank in sorted(ref)}
    worst_rank, worst = max(each.items(), key=lambda item: (not item[1].holds, item[1].max_abs))
    parity = Parity(
        "losses",
        steps=min(p.steps for p in each.values()),
        max_abs=worst.max_abs,
        max_rel=max(p.max_rel for p in each.values()),
        worst_step=worst.worst_step,
        holds=all(p.holds for p in each.values()),
        per_step=[{**row, "rank": rank} for rank, p in each.items() for row in p.per_step],
        note="; ".join(f"rank {rank}: {p.note}" for rank, p in each.items() if p.note),
        ranks=len(each),
    )
    if not parity.holds and not parity.note:
        parity.note = (
            f"rank {worst_rank} differs under the {policy.label} policy: worst at step "
            f"{worst.worst_step}, abs {worst.max_abs:.3g}, rel {worst.max_rel:.3g}"
        )
    return parity


def compare_outputs(
    reference: list[OutputStats], target: list[OutputStats], policy: Policy
) -> Parity:
    """Inference programs: shapes must be equal, summary statistics close."""
    flat_ref: list[float] = []
    flat_tgt: list[float] = []
    for r, t in zip(reference, target, strict=False):
        if r.get("shape") != t.get("shape"):
            return Parity(
                "outputs", note=f"output shapes differ: {r.get('shape')} vs {t.get('shape')}"
            )
        for key in OUTPUT_STATS:
            flat_ref.append(float(r.get(key, 0.0)))
            flat_tgt.append(float(t.get(key, 0.0)))
    every = replace(policy, max_steps=10**6)
    parity = compare_series(flat_ref, flat_tgt, every)
    parity.compared, parity.steps = "outputs", min(len(reference), len(target))
    parity.per_step = []
    return parity


def first_step_apart(
    rows: list[dict[str, Any]], policy: Policy, keys: tuple[str, str] = ("reference", "target")
) -> int | None:
    """The first step (rank 0's, where ranks ran) whose two losses, ``keys`` of each row,
    differ beyond ``policy``."""
    for row in rows:
        if row.get("rank", 0) in (0, None) and not _close(row[keys[1]], row[keys[0]], policy)[0]:
            return int(row["step"])
    return None


def first_differing_step(parity: Parity | None, policy: Policy) -> int | None:
    """The step to trace for a parity failure: the first whose losses differ; for an
    inference program whose outputs differ, 1 (its forward calls before any optimizer step
    are traced)."""
    if parity is None:
        return None
    if parity.compared == "outputs" and not parity.holds:
        return 1
    return first_step_apart(parity.per_step, policy)
