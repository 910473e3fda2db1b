"""The picture of a verification: both runs' loss per step, with the band the policy allows.

A table of per-step numbers answers "by how much"; a plot answers "where and how" at a
glance: a port that drifts from the first step, one that agrees and then jumps, one rank of
two that goes its own way. The band is the tolerance the verdict was judged under (``atol +
rtol * |original|`` around the original's loss), so a point outside it is a failed step.
Drawn with matplotlib's object API on the Agg canvas: no display, no global pyplot state,
safe from any thread.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

ORIGINAL, PORT = "#1f77b4", "#d62728"


def _by_rank(per_step: list[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    ranks: dict[int, list[Mapping[str, Any]]] = {}
    for row in per_step:
        ranks.setdefault(int(row.get("rank") or 0), []).append(row)
    return ranks


def loss_figure(
    per_step: list[Mapping[str, Any]], band: tuple[float, float], title: str
) -> Any | None:
    """The figure (matplotlib ``Figure``) of ``per_step`` (``Parity.per_step``: step,
    reference, target and, with several ranks, rank), one panel per rank, with the band
    ``(rtol, atol)`` around the original; None when there is nothing to draw."""
    if not per_step:
        return None
    from matplotlib.figure import Figure  # only when a report draws: its import is slow

    ranks = _by_rank(per_step)
    rtol, atol = band
    fig = Figure(figsize=(6.4, 2.2 + 1.8 * len(ranks)), layout="constrained")
    axes = fig.subplots(len(ranks), 1, squeeze=False)[:, 0]
    for ax, (rank, rows) in zip(axes, sorted(ranks.items()), strict=True):
        steps = [r["step"] for r in rows]
        original = [float(r["reference"]) for r in rows]
        port = [float(r["target"]) for r in rows]
        margin = [atol + rtol * abs(v) for v in original]
        low = [v - m for v, m in zip(original, margin, strict=True)]
        high = [v + m for v, m in zip(original, margin, strict=True)]
        ax.fill_between(steps, low, high, color=ORIGINAL, alpha=0.15, label="tolerance")
        ax.plot(steps, original, "o-", color=ORIGINAL, label="original (CUDA reference)")
        ax.plot(steps, port, "x--", color=PORT, label="port (emulated device)")
        ax.set_ylabel(f"loss, rank {rank}" if len(ranks) > 1 else "loss")
        ax.set_xticks(steps)
        ax.legend(fontsize="small")
    axes[-1].set_xlabel("step")
    fig.suptitle(title, fontsize="medium")
    return fig


def png(fig: Any) -> bytes:
    """The figure as PNG bytes."""
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110)
    return out.getvalue()


def loss_png(verification: Mapping[str, Any], band: tuple[float, float]) -> bytes | None:
    """``losses.png`` for a verification record (``Verification.to_json()``), or None when
    its runs have no per-step losses to compare."""
    parity = verification.get("parity") or {}
    if parity.get("compared") != "losses":
        return None
    title = f"{verification.get('verdict')}: {parity.get('steps')} steps, "
    title += f"{verification.get('policy')} policy (rtol {band[0]:g}, atol {band[1]:g})"
    fig = loss_figure(parity.get("per_step") or [], band, title)
    return png(fig) if fig is not None else None
