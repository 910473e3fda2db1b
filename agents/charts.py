"""Bar charts for the summaries of many runs (``torchport eval``, ``torchport batch``).

A table of fifty rows answers "which one"; a chart answers "how many of each, and where
did the time go" at a glance. The conventions are ``agents.plots``': matplotlib's object
API on the Agg canvas (no display, no pyplot state, safe from any thread), imported only
when a chart is drawn so the command line starts light. Every order here is fixed by the
data (verdicts in ``VERDICT_ORDER``, then by name; bars by value, then by label), and the
PNG holds no date, so the same summary draws the same bytes.

Labels come from users' repositories and suites (task and repository names, verdicts):
each is drawn as plain text on one line (control characters shown escaped, no mathtext,
so a ``$`` in a name is a dollar sign and never a formula that fails to parse) and cut to
``MAX_LABEL`` characters. A label is only ever text in the picture, never part of a path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from torchport.tools.safetext import terminal_line

from .plots import png
from .verdicts import Verdict

__all__ = ["count_bars", "figure", "label", "legend", "png", "ranked_bars", "stacked_columns"]

# The verifier's verdicts, then a run's and a batch's own (agents.verdicts), then any other.
VERDICT_ORDER = tuple(Verdict)
VERDICT_COLOURS: dict[str, str] = {
    Verdict.VERIFIED: "#2ca02c",
    Verdict.RAN: "#1f77b4",
    Verdict.FAILED: "#d62728",
    Verdict.NOT_RUNNABLE: "#7f7f7f",
    Verdict.NOT_VERIFIED: "#bcbd22",
    Verdict.ERROR: "#000000",
}
_OTHER_COLOURS = ("#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#aec7e8")
MAX_LABEL = 32
_PLAIN = {"parse_math": False}  # a label's "$" is a dollar sign


def label(text: object) -> str:
    """``text`` as one short line of plain text for a chart."""
    line = terminal_line(" ".join(str(text).split()))
    return line if len(line) <= MAX_LABEL else line[: MAX_LABEL - 1] + "…"


def verdict_order(verdicts: Iterable[str]) -> list[str]:
    """The verdicts present: the known ones in ``VERDICT_ORDER``, then the rest by name."""
    present = set(verdicts)
    known = [v for v in VERDICT_ORDER if v in present]
    return known + sorted(present - set(known))


def colours(verdicts: Sequence[str]) -> dict[str, str]:
    """A colour per verdict: the known ones their own, others the palette in order."""
    others = iter(_OTHER_COLOURS * (1 + len(verdicts) // len(_OTHER_COLOURS)))
    return {v: VERDICT_COLOURS.get(v) or next(others) for v in verdict_order(verdicts)}


def figure(width: float, heights: Sequence[float]) -> tuple[Any, list[Any]]:
    """A figure of one panel per height (inches), stacked, and its axes."""
    from matplotlib.figure import Figure  # only when a summary draws: its import is slow

    fig = Figure(figsize=(width, sum(heights)), layout="constrained")
    axes = fig.subplots(len(heights), 1, squeeze=False, height_ratios=list(heights))[:, 0]
    return fig, list(axes)


def legend(ax: Any, **options: Any) -> None:
    """The panel's legend, right of it, its labels plain text (``label``)."""
    drawn = ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), **options)
    for text in drawn.get_texts():
        text.set_parse_math(False)


def count_bars(ax: Any, counts: Mapping[str, int], title: str) -> None:
    """One horizontal bar per verdict (``VERDICT_ORDER``, top down), its count at its end."""
    order = verdict_order(counts)
    palette = colours(order)
    ys = range(len(order))
    bars = ax.barh(ys, [counts[v] for v in order], color=[palette[v] for v in order])
    ax.bar_label(bars, padding=3)
    ax.set_yticks(list(ys), [label(v) for v in order], **_PLAIN)
    ax.invert_yaxis()
    ax.set_xlabel("repositories")
    ax.set_title(title, fontsize="medium", **_PLAIN)
    ax.margins(x=0.15)
    ax.xaxis.get_major_locator().set_params(integer=True)


def ranked_bars(
    ax: Any, rows: Sequence[tuple[str, float, str]], title: str, axis: str, unit: str
) -> None:
    """``rows`` (label, value, verdict) as horizontal bars in their order from the top,
    coloured by verdict and with the value at each bar's end; the caller sorts and trims."""
    palette = colours([v for _, _, v in rows])
    ys = range(len(rows))
    bars = ax.barh(ys, [value for _, value, _ in rows], color=[palette[v] for _, _, v in rows])
    ax.bar_label(bars, labels=[f"{value:.1f} {unit}" for _, value, _ in rows], padding=3)
    ax.set_yticks(list(ys), [label(name) for name, _, _ in rows], **_PLAIN)
    ax.invert_yaxis()
    ax.set_xlabel(axis)
    ax.set_title(title, fontsize="medium", **_PLAIN)
    ax.margins(x=0.2, y=0.3 / max(1, len(rows)))  # about a third of a bar above and below
    if rows:
        from matplotlib.patches import Patch

        handles = [Patch(color=c, label=label(v)) for v, c in palette.items()]
        legend(ax, handles=handles)


def stacked_columns(
    ax: Any, groups: Sequence[str], counts: Sequence[Mapping[str, int]], title: str
) -> None:
    """A column per group, stacked from its verdict counts (``VERDICT_ORDER`` from the
    bottom), with a legend of the verdicts."""
    order = verdict_order(v for c in counts for v in c)
    palette = colours(order)
    xs = list(range(len(groups)))
    bottom = [0] * len(groups)
    for verdict in order:
        heights = [c.get(verdict, 0) for c in counts]
        ax.bar(xs, heights, 0.6, bottom=bottom, color=palette[verdict], label=label(verdict))
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    many = len(groups) > 4
    shown = [label(g) for g in groups]
    ax.set_xticks(xs, shown, rotation=30 if many else 0, ha="right" if many else "center", **_PLAIN)
    ax.set_ylabel("results")
    ax.set_title(title, fontsize="medium", **_PLAIN)
    ax.yaxis.get_major_locator().set_params(integer=True)
    if order:
        legend(ax)
