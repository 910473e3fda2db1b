"""``summary.png`` beside the batch's summary: how many repositories reached each verdict,
and which ones took the time.

Drawn from the summary's data alone (``summary.summarize``), so it is the same picture
whatever order the jobs finished in; only the times differ between two batches, as in
the tables. A batch of hundreds shows its ``MAX_REPOSITORIES`` slowest and says so.
Written through ``tools.output.nofollow`` into DIR under a fixed name: no repository's
name is ever part of a path here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchport.agents import charts
from torchport.tools.output import nofollow

CHART = "summary.png"
MAX_REPOSITORIES = 40


def chart_data(summary: dict[str, Any]) -> dict[str, Any]:
    """What the chart shows: verdict counts, and the slowest repositories (name, seconds,
    verdict), slowest first, ties by name."""
    repos = summary["repos"]
    times = sorted(
        ((r["name"], float(r["time_s"] or 0.0), str(r["verdict"])) for r in repos),
        key=lambda row: (-row[1], row[0]),
    )
    return {
        "verdicts": dict(summary["totals"]["verdicts"]),
        "times": times[:MAX_REPOSITORIES],
        "repositories": len(repos),
    }


def figure(summary: dict[str, Any]) -> Any | None:
    """The chart (a matplotlib ``Figure``); None for a batch of no repositories."""
    data = chart_data(summary)
    if not data["repositories"]:
        return None
    times, n = data["times"], data["repositories"]
    heights = (1.0 + 0.35 * len(data["verdicts"]), 1.2 + 0.3 * len(times))
    fig, (counts, slow) = charts.figure(8.0, heights)
    target = summary["settings"].get("target")
    repositories = "repository" if n == 1 else "repositories"
    charts.count_bars(counts, data["verdicts"], f"torchport batch: {n} {repositories} to {target}")
    which = "time per repository" if len(times) == n else f"the {len(times)} slowest of {n}"
    charts.ranked_bars(slow, times, which, "wall time (s)", "s")
    return fig


def write_chart(out_dir: Path, summary: dict[str, Any]) -> Path | None:
    """Write DIR/summary.png; its path, or None when there was nothing to draw."""
    fig = figure(summary)
    if fig is None:
        return None
    nofollow.write_bytes(out_dir, CHART, charts.png(fig))
    return out_dir / CHART
