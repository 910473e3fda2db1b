"""The leaderboard's pictures: success per mode and difficulty, verdicts per target and
mode, and edit scores per mode.

Drawn from the results and the leaderboard's summary alone, in an order the data fixes
(targets and modes by name, difficulties as ``tasks.DIFFICULTIES``), so the same results
draw the same bytes. Written through ``tools.output.nofollow`` under fixed names beside
``leaderboard.md``: no task's name is ever part of a path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchport.agents import charts
from torchport.tools.output import nofollow

from .tasks import DIFFICULTIES

# The file each chart is written to, and what leaderboard.md says it shows.
CHARTS = {
    "leaderboard.png": "success per mode and difficulty",
    "verdicts.png": "verdicts per target and mode",
    "edit_scores.png": "edit precision and recall per mode",
}


def verdict_counts(results: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, int]]:
    """Per (target, mode), sorted: how many results reached each verdict."""
    counts: dict[tuple[str, str], Counter[str]] = {}
    for r in results:
        counts.setdefault((str(r["target"]), str(r["mode"])), Counter())[str(r["verdict"])] += 1
    return {key: dict(sorted(counts[key].items())) for key in sorted(counts)}


def _grouped(ax: Any, groups: list[str], series: dict[str, list[float]], top: float) -> None:
    """Side-by-side columns, one colour per series, one cluster per group."""
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(groups))], values, width, label=name)
    centres = [x + width * (len(series) - 1) / 2 for x in range(len(groups))]
    ax.set_xticks(centres, [charts.label(g) for g in groups], parse_math=False)
    ax.set_ylim(0, top)
    if series:
        charts.legend(ax)


def success_figure(summary: dict[str, Any]) -> Any:
    """Success rate (%) per mode, a column per difficulty present."""
    modes = sorted(summary)
    present = [d for d in DIFFICULTIES if any(d in s["by_difficulty"] for s in summary.values())]
    series = {
        d: [100 * summary[m]["by_difficulty"].get(d, {}).get("success", 0.0) for m in modes]
        for d in present
    }
    fig, (ax,) = charts.figure(2.5 + 1.4 * len(modes), (3.8,))
    _grouped(ax, modes, series, 100)
    ax.set_ylabel("success rate (%)")
    ax.set_title("torchport eval: success per mode and difficulty", fontsize="medium")
    return fig


def verdicts_figure(results: list[dict[str, Any]]) -> Any:
    """A stacked column per (target, mode): how its results ended."""
    counts = verdict_counts(results)
    groups = [f"{target} · {mode}" for target, mode in counts]
    fig, (ax,) = charts.figure(3.0 + 0.9 * len(groups), (4.0,))
    charts.stacked_columns(ax, groups, list(counts.values()), "verdicts per target · mode")
    return fig


def edit_scores_figure(summary: dict[str, Any]) -> Any:
    """Mean edit precision and recall per mode against the golden migrations."""
    modes = sorted(summary)
    series = {k: [summary[m][k] for m in modes] for k in ("precision", "recall")}
    fig, (ax,) = charts.figure(2.5 + 1.2 * len(modes), (3.4,))
    _grouped(ax, modes, series, 1.05)
    ax.set_ylabel("mean over the mode's results")
    ax.set_title("edits against the golden migration", fontsize="medium")
    return fig


def write_charts(results: list[dict[str, Any]], summary: dict[str, Any], out: Path) -> list[Path]:
    """Write every chart of ``CHARTS`` into ``out``; none for no results."""
    if not results:
        return []
    draw: dict[str, Callable[[], Any]] = {
        "leaderboard.png": lambda: success_figure(summary),
        "verdicts.png": lambda: verdicts_figure(results),
        "edit_scores.png": lambda: edit_scores_figure(summary),
    }
    for name, make in draw.items():
        nofollow.write_bytes(out, name, charts.png(make()))
    return [out / name for name in draw]
