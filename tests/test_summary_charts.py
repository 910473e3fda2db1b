"""`torchport batch` and `torchport eval` draw their summaries: summary.png (verdict counts,
time per repository) and leaderboard/verdicts/edit_scores.png, shown by the Markdown beside
them. The bars are the data's (checked on the figures' own artists), the same data draws
the same bytes, and a hostile name is only ever text in the picture."""

from __future__ import annotations

import io
import os
from dataclasses import fields

import pytest
from torchport.agents import charts
from torchport.agents.batch import charts as batch_charts
from torchport.agents.batch.summary import FIELDS, summarize, write_summary
from torchport.evals import charts as eval_charts
from torchport.evals import leaderboard
from torchport.evals.runner import Result
from torchport.tools.output.nofollow import SymlinkInPath

SETTINGS = {"target": "tpu", "verify": True, "steps": 1, "llm": "none"}


def batch(*repos: tuple[str, str, float | None]) -> dict:
    """A batch summary of repositories (name, verdict, seconds)."""
    records = []
    for name, verdict, seconds in repos:
        record = {k: None for k in FIELDS}
        record.update(name=name, verdict=verdict, time_s=seconds, constructs=1, converted=1)
        records.append(record)
    return summarize(records, SETTINGS)


def result(task: str, mode: str, target: str, verdict: str, precision: float = 1.0) -> dict:
    """One eval job's result (``Result.to_json()``); what the charts do not draw is zero."""
    row = dict.fromkeys((f.name for f in fields(Result)), 0)
    row |= {"task": task, "mode": mode, "target": target, "verdict": verdict, "reason": ""}
    row |= {"difficulty": "easy", "family": "libraries", "expected": "verified"}
    row |= {"success": verdict == "verified", "precision": precision, "recall": 0.5}
    row |= {"outside_golden": [], "report": None, "error": None, "parity_max_rel": None}
    return Result(**row).to_json()


def image_size(data: bytes) -> tuple[int, int]:
    import matplotlib.image

    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    height, width, _ = matplotlib.image.imread(io.BytesIO(data), format="png").shape
    return width, height


def ticks(axis) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels()]


# -- batch -----------------------------------------------------------------------------


def test_the_batch_chart_counts_verdicts_and_ranks_repositories_by_time():
    summary = batch(
        ("b", "verified", 2.0), ("a", "failed", 2.0), ("c", "verified", 9.5), ("d", "error", None)
    )
    data = batch_charts.chart_data(summary)
    assert data["verdicts"] == {"error": 1, "failed": 1, "verified": 2}
    assert data["times"] == [
        ("c", 9.5, "verified"),
        ("a", 2.0, "failed"),  # a tie goes by name
        ("b", 2.0, "verified"),
        ("d", 0.0, "error"),  # no time is none spent
    ]
    counts, slow = batch_charts.figure(summary).get_axes()[:2]
    assert ticks(counts.yaxis) == ["verified", "failed", "error"]  # the verifier's order
    assert [p.get_width() for p in counts.patches] == [2, 1, 1]
    assert ticks(slow.yaxis) == ["c", "a", "b", "d"]
    assert [p.get_width() for p in slow.patches] == [9.5, 2.0, 2.0, 0.0]
    colour = [p.get_facecolor() for p in slow.patches]
    assert colour[0] == colour[2] != colour[1] != colour[3]  # by verdict
    assert colour[1] == counts.patches[1].get_facecolor()  # the same colour in both panels


def test_a_large_batch_shows_its_slowest_and_says_so():
    n = batch_charts.MAX_REPOSITORIES + 5
    summary = batch(*[(f"repo-{i:02d}", "verified", float(i)) for i in range(n)])
    data = batch_charts.chart_data(summary)
    assert len(data["times"]) == batch_charts.MAX_REPOSITORIES
    assert data["times"][0] == (f"repo-{n - 1:02d}", float(n - 1), "verified")
    assert data["times"][-1][0] == "repo-05"  # the five fastest left out
    slow = batch_charts.figure(summary).get_axes()[1]
    assert slow.get_title() == f"the {batch_charts.MAX_REPOSITORIES} slowest of {n}"


def test_the_batch_summary_shows_its_chart_and_the_same_data_draws_the_same_bytes(tmp_path):
    summary = batch(("one", "verified", 1.5), ("two", "failed", 4.0))
    for folder in "abc":
        (tmp_path / folder).mkdir()
    written = write_summary(tmp_path / "a", summary)
    chart = tmp_path / "a" / "summary.png"
    assert chart in written
    width, height = image_size(chart.read_bytes())
    assert width > 600 and height > 300
    markdown = (tmp_path / "a" / "summary.md").read_text()
    assert "![verdicts, and time per repository](summary.png)" in markdown
    write_summary(tmp_path / "b", batch(("one", "verified", 1.5), ("two", "failed", 4.0)))
    assert (tmp_path / "b" / "summary.png").read_bytes() == chart.read_bytes()
    write_summary(tmp_path / "c", batch(("one", "verified", 1.5), ("two", "failed", 9.0)))
    assert (tmp_path / "c" / "summary.png").read_bytes() != chart.read_bytes()


def test_an_empty_batch_draws_nothing_and_one_repository_draws_its_bar(tmp_path):
    written = write_summary(tmp_path, batch())
    assert not (tmp_path / "summary.png").exists()
    assert sorted(p.name for p in written) == [
        "index.html",
        "summary.csv",
        "summary.json",
        "summary.md",
    ]
    assert "summary.png" not in (tmp_path / "summary.md").read_text()
    write_summary(tmp_path, batch(("only", "ran", 0.25)))
    assert image_size((tmp_path / "summary.png").read_bytes())[0] > 300
    counts, slow = batch_charts.figure(batch(("only", "ran", 0.25))).get_axes()[:2]
    assert counts.get_title() == "torchport batch: 1 repository to tpu"
    assert ticks(slow.yaxis) == ["only"] and slow.get_title() == "time per repository"


def test_the_chart_is_never_written_through_a_symlink(tmp_path):
    elsewhere = tmp_path / "elsewhere.png"
    elsewhere.write_bytes(b"mine")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(elsewhere, out / "summary.png")
    with pytest.raises(SymlinkInPath):
        write_summary(out, batch(("one", "verified", 1.0)))
    assert elsewhere.read_bytes() == b"mine"


# -- labels ----------------------------------------------------------------------------


def test_a_label_is_one_short_line_of_plain_text():
    hostile = "$\\frac{1}{0$ \x1b]0;pwned\x07\nverdict: verified " + "x" * 50
    shown = charts.label(hostile)
    assert "\n" not in shown and "\x1b" not in shown and "\x07" not in shown
    assert shown.startswith("$\\frac{1}{0$ \\x1b]0;pwned") and shown.endswith("…")
    assert len(shown) == charts.MAX_LABEL
    assert charts.label("short") == "short"


def test_hostile_modes_and_verdicts_draw_as_text_never_as_formulas_or_paths(tmp_path):
    results = [
        result("t", "$\\frac{1}{0$", "tpu", "$unbalanced"),
        result("t", "../../../etc/passwd", "tpu", "verified"),
    ]
    paths = leaderboard.write(results, tmp_path / "board")
    assert image_size(paths["verdicts.png"].read_bytes())[0] > 300  # it drew: no mathtext
    assert sorted(p.name for p in (tmp_path / "board").iterdir()) == [
        "edit_scores.png",
        "leaderboard.csv",
        "leaderboard.json",
        "leaderboard.md",
        "leaderboard.png",
        "verdicts.png",
    ]
    ax = eval_charts.verdicts_figure(results).get_axes()[0]
    assert ticks(ax.xaxis) == ["tpu · $\\frac{1}{0$", "tpu · ../../../etc/passwd"]
    assert not any(t.get_parse_math() for t in ax.get_xticklabels())
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["verified", "$unbalanced"]


# -- eval ------------------------------------------------------------------------------

RESULTS = [
    result("a", "rules", "tpu", "verified"),
    result("b", "rules", "tpu", "failed", precision=0.5),
    result("a", "naive", "tpu", "failed", precision=0.0),
    result("b", "naive", "tpu", "failed", precision=0.0),
    result("a", "rules", "neuron", "not-runnable"),
]


def test_verdicts_are_counted_per_target_and_mode_and_stacked_as_counted():
    counts = eval_charts.verdict_counts(RESULTS)
    assert counts == {
        ("neuron", "rules"): {"not-runnable": 1},
        ("tpu", "naive"): {"failed": 2},
        ("tpu", "rules"): {"failed": 1, "verified": 1},
    }
    ax = eval_charts.verdicts_figure(RESULTS).get_axes()[0]
    assert ticks(ax.xaxis) == ["neuron · rules", "tpu · naive", "tpu · rules"]
    stacks = {c.get_label(): [p.get_height() for p in c] for c in ax.containers}
    assert stacks == {"verified": [0, 0, 1], "failed": [0, 2, 1], "not-runnable": [1, 0, 0]}
    bottoms = {c.get_label(): [p.get_y() for p in c] for c in ax.containers}
    assert bottoms["not-runnable"] == [0, 2, 2]  # on top of verified and failed


def test_edit_scores_are_the_leaderboards_means_per_mode():
    summary = leaderboard.summarize(RESULTS)
    ax = eval_charts.edit_scores_figure(summary).get_axes()[0]
    assert ticks(ax.xaxis) == ["naive", "rules"]
    bars = {c.get_label(): [p.get_height() for p in c] for c in ax.containers}
    assert bars["precision"] == pytest.approx([0.0, 2.5 / 3])  # rules: (1 + 0.5 + 1) / 3
    assert bars["recall"] == pytest.approx([0.5, 0.5])


def test_the_leaderboard_shows_its_charts_and_the_same_results_draw_the_same_bytes(tmp_path):
    paths = leaderboard.write(RESULTS, tmp_path / "one")
    markdown = paths["markdown"].read_text()
    for name, what in eval_charts.CHARTS.items():
        assert f"![{what}]({name})" in markdown
        width, height = image_size(paths[name].read_bytes())
        assert width > 400 and height > 250
    again = leaderboard.write(list(RESULTS), tmp_path / "two")
    other = leaderboard.write([*RESULTS, result("c", "naive", "tpu", "ran")], tmp_path / "three")
    for name in eval_charts.CHARTS:
        assert again[name].read_bytes() == paths[name].read_bytes()
    assert other["verdicts.png"].read_bytes() != paths["verdicts.png"].read_bytes()


def test_no_results_draw_no_charts_and_one_result_draws_them_all(tmp_path):
    paths = leaderboard.write([], tmp_path / "none")
    assert not list((tmp_path / "none").glob("*.png")) and "png" not in str(paths)
    assert "## Charts" not in paths["markdown"].read_text()
    paths = leaderboard.write([RESULTS[0]], tmp_path / "one")
    assert all(image_size(paths[name].read_bytes())[0] > 300 for name in eval_charts.CHARTS)


def test_drawing_a_summary_imports_matplotlib_only_when_it_draws():
    import subprocess
    import sys

    probe = (
        "import sys\nimport torchport.cli.main, torchport.agents.batch.driver\n"
        "import torchport.evals.leaderboard\n"
        "print(any(m.startswith('matplotlib') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
