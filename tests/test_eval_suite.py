"""The builtin eval suite: well formed, golden migrations that parse, and the CI subset
of the acceptance command (the whole suite is a benchmark: see docs/benchmarks/eval-suite.md)."""

from __future__ import annotations

import json

import pytest
from torchport.cli.main import main
from torchport.evals.edit_scores import golden_tree_edits, tree_edits
from torchport.evals.tasks import load_suite


def test_every_builtin_task_is_well_formed_with_goldens_that_parse():
    tasks = load_suite("builtin")
    assert len(tasks) >= 30
    for task in tasks:
        for target in ("tpu", "neuron", "xla", "accelerator"):
            golden = task.golden(target)
            assert golden.is_dir(), f"{task.name}: no golden for {target}"
            edits = golden_tree_edits(task.repo, golden)
            assert all(unit != "<does not parse>" for _, _, unit in edits), (task.name, target)
        if task.difficulty == "control":
            assert not any(golden_tree_edits(task.repo, task.golden(t)) for t in task.expected)
        else:
            assert golden_tree_edits(task.repo, task.golden("tpu")), task.name
    assert tree_edits(tasks[0].repo, tasks[0].repo) == {}


@pytest.mark.slow
def test_the_acceptance_command_on_a_small_subset(tmp_path):
    out = tmp_path / "eval"
    args = ["eval", "--suite", "builtin", "--modes", "rules,naive,shim", "--targets", "tpu"]
    subset = ["--tasks", "mlp-basic,control-cpu-trainer", "--out", str(out), "-q"]
    assert main(args + subset) == 0
    summary = json.loads((out / "leaderboard.json").read_text())["summary"]
    assert summary["rules"]["success"] == 1.0  # mlp-basic verified, the control left alone
    assert summary["naive"]["by_difficulty"]["easy"]["success"] == 0.0
    results = json.loads((out / "leaderboard.json").read_text())["results"]
    control = [r for r in results if r["task"] == "control-cpu-trainer"]
    assert all(r["files_touched"] == 0 for r in control if r["mode"] != "naive")
