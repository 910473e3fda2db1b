"""torchport eval: honest scoring (a broken port fails, an over-eager one is imprecise,
the untouched control is correct), formatting-insensitive edit scores, resumable runs,
and the leaderboard — on a small suite written here and on the builtin one."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from torchport.agents.verifier import RunLimits
from torchport.cli.main import main
from torchport.evals import modes
from torchport.evals.edit_scores import edits_of, score
from torchport.evals.runner import evaluate, run_all
from torchport.evals.tasks import SuiteError, load_suite

TRAIN = """\
import torch

torch.manual_seed(0)
device = torch.device("cuda")
model = torch.nn.Linear(4, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    x = torch.randn(8, 4, device=device)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
GOLDEN = TRAIN.replace('torch.device("cuda")', 'torch.device("tpu")')
CONTROL = TRAIN.replace('torch.device("cuda")', 'torch.device("cpu")')


def write_task(suite: Path, name: str, repo: str, golden: str | None, difficulty: str, exp: str):
    root = suite / name
    (root / "repo").mkdir(parents=True)
    (root / "repo" / "train.py").write_text(repo)
    (root / "golden" / "tpu").mkdir(parents=True)
    if golden is not None:
        (root / "golden" / "tpu" / "train.py").write_text(golden)
    else:
        (root / "golden" / "tpu" / ".keep").write_text("")
    (root / "task.toml").write_text(
        textwrap.dedent(
            f"""\
            name = "{name}"
            difficulty = "{difficulty}"
            entry = "python train.py"
            constructs = []
            [expected]
            tpu = "{exp}"
            """
        )
    )


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    write_task(root, "linear", TRAIN, GOLDEN, "easy", "verified")
    write_task(root, "control", CONTROL, None, "control", "ran")
    return root


BUDGET = RunLimits(steps=3, forwards=3, timeout_s=180)


def with_mode(monkeypatch, name: str, produce) -> None:
    """A mode that writes what ``produce(text) -> text`` makes of train.py, then verifies."""

    def migrate(task, target, out, budget, cache):
        shutil.copytree(task.repo, out, dirs_exist_ok=True)
        path = out / "train.py"
        path.write_text(produce(path.read_text()))
        return modes.Migration(out, modes.verify_tree(task, out, target, budget, cache))

    monkeypatch.setitem(modes.RUNNERS, name, migrate)


def test_edit_scores_ignore_formatting_and_comments():
    reformatted = GOLDEN.replace('torch.device("tpu")', "torch.device( 'tpu' )  # port")
    golden = edits_of("train.py", TRAIN, GOLDEN)
    assert score(edits_of("train.py", TRAIN, reformatted), golden).precision == 1.0
    assert sum(golden.values()) == 2  # one statement removed, one added
    nothing = score(edits_of("train.py", TRAIN, TRAIN), golden)
    assert (nothing.precision, nothing.recall) == (1.0, 0.0)


@pytest.mark.slow
def test_a_broken_migration_is_marked_failed(suite, tmp_path, monkeypatch):
    # The device is right, but the learning rate was changed on the way.
    with_mode(monkeypatch, "broken", lambda t: GOLDEN.replace("lr=0.1", "lr=0.2"))
    task = load_suite(suite, ["linear"])[0]
    result = evaluate(task, "broken", "tpu", tmp_path / "work", BUDGET)
    assert result.verdict == "failed" and not result.success
    assert "parity" in result.reason
    assert result.precision == 0.5  # the lr edit is not in the golden


@pytest.mark.slow
def test_an_over_eager_migration_is_imprecise_but_verified(suite, tmp_path, monkeypatch):
    over_eager = GOLDEN.replace("for step in range(10):", "for i in range(10):")
    with_mode(monkeypatch, "eager", lambda t: over_eager)
    task = load_suite(suite, ["linear"])[0]
    result = evaluate(task, "eager", "tpu", tmp_path / "work", BUDGET)
    assert result.verdict == "verified" and result.success
    assert result.recall == 1.0 and result.precision == 0.5


@pytest.mark.slow
def test_the_untouched_control_is_correct_and_naive_breaks_the_linear_task(suite, tmp_path):
    results = run_all(
        load_suite(suite), ["rules", "naive"], ["tpu"], tmp_path / "work", BUDGET, jobs=1
    )
    by = {(r["task"], r["mode"]): r for r in results}
    control = by[("control", "rules")]
    assert control["success"] and control["verdict"] == "ran"
    assert (control["precision"], control["recall"], control["files_touched"]) == (1, 1, 0)
    assert by[("linear", "rules")]["verdict"] == "verified"
    assert by[("linear", "rules")]["recall"] == 1.0
    # run again: every result is read back, nothing is redone
    for path in (tmp_path / "work" / "migrations").iterdir():
        shutil.rmtree(path)
    again = run_all(load_suite(suite), ["rules", "naive"], ["tpu"], tmp_path / "work", BUDGET)
    assert again == results and not any((tmp_path / "work" / "migrations").iterdir())


@pytest.mark.slow
def test_cli_writes_the_leaderboard_for_a_user_suite(suite, tmp_path, capsys):
    out = tmp_path / "eval"
    code = main(
        [
            "eval",
            "--suite",
            str(suite),
            "--modes",
            "rules,shim",
            "--targets",
            "tpu",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert code == 0
    table = (out / "leaderboard.md").read_text()
    assert "| rules |" in table and "| shim |" in table
    data = json.loads((out / "leaderboard.json").read_text())
    assert data["summary"]["rules"]["success"] == 1.0
    for chart in ("leaderboard.png", "verdicts.png", "edit_scores.png"):
        assert (out / chart).read_bytes()[:4] == b"\x89PNG"
        assert f"]({chart})" in table
    assert (out / "leaderboard.csv").read_text().startswith("task,mode,target")
    assert main(["eval", "--suite", str(tmp_path / "none"), "-q"]) == 2
    assert main(["eval", "--suite", str(suite), "--modes", "magic", "-q"]) == 2


def test_suite_files_are_validated(suite):
    (suite / "linear" / "task.toml").write_text('difficulty = "trivial"\nentry = "x"\n')
    with pytest.raises(SuiteError, match="difficulty"):
        load_suite(suite)


@pytest.mark.slow
def test_the_llm_mode_ports_cuda_statements_without_the_catalogue(suite, tmp_path, monkeypatch):
    """A scripted OpenAI-compatible server (a test double) answers for the model."""
    from scripted_llm import Content, ScriptedLLM

    answer = Content('{"new_code": "device = torch.device(\\"tpu\\")", "summary": "tpu"}')
    with ScriptedLLM([answer]) as llm:
        monkeypatch.setenv("TORCHPORT_LLM_BASE_URL", llm.base_url)
        results = run_all(load_suite(suite, ["linear"]), ["llm"], ["tpu"], tmp_path / "w", BUDGET)
        prompt = llm.requests[0]["messages"][-1]["content"]
    [result] = results
    assert result["verdict"] == "verified" and result["success"], result["reason"]
    assert (result["precision"], result["recall"], result["llm_calls"]) == (1.0, 1.0, 1)
    assert "port it to tpu" in prompt and "Suggested" not in prompt  # no catalogue help


def test_every_mode_the_command_line_offers_has_a_runner():
    from torchport.cli.evaluate import MODES

    assert set(MODES) == set(modes.RUNNERS)


def test_the_hard_tier_is_split_into_libraries_and_custom_kernels():
    from torchport.evals.leaderboard import hard_tier, markdown

    def row(task, target, family, success, difficulty="hard"):
        return {
            "task": task,
            "mode": "rules",
            "target": target,
            "difficulty": difficulty,
            "family": family,
            "expected": "verified",
            "verdict": "verified" if success else "ran",
            "success": success,
            "precision": 1.0,
            "recall": 1.0,
            "residual_constructs": 0,
            "llm_calls": 0,
            "llm_tokens": 0,
            "wall_s": 1.0,
        }

    rows = [
        row("apex", "tpu", "libraries", True),
        row("flash", "tpu", "libraries", False),
        row("kernel", "tpu", "kernels", False),
        row("apex", "neuron", "libraries", True),
        row("easy", "tpu", "libraries", False, difficulty="easy"),  # not hard: not counted
    ]
    old = {k: v for k, v in row("xformers", "neuron", "libraries", True).items() if k != "family"}
    table = hard_tier([*rows, old])
    assert table[("rules", "tpu")] == {"libraries": [True, False], "kernels": [False]}
    assert table[("rules", "neuron")] == {"libraries": [True, True], "kernels": []}
    text = markdown([*rows, old])
    assert "| rules | tpu | 50% (1/2) | 0% (0/1) |" in text
    assert "| rules | neuron | 100% (2/2) | – |" in text


def test_a_task_is_in_the_kernel_family_by_its_tag():
    tasks = {t.name: t for t in load_suite("builtin")}
    assert tasks["load-inline-kernel"].family == "kernels"
    assert tasks["apex-fused"].family == "libraries"


def test_a_target_with_no_golden_is_scored_against_no_edits(suite, tmp_path, monkeypatch):
    """A task without golden/<target> (here: neuron) has no golden edits; its score was a
    TypeError (a Counter & a dict) before the evaluation ever reported."""

    def migrate(task, target, out, budget, cache):
        shutil.copytree(task.repo, out, dirs_exist_ok=True)
        (out / "train.py").write_text(GOLDEN)
        return modes.Migration(out, {"verdict": "not-runnable", "reason": "not run here"})

    monkeypatch.setitem(modes.RUNNERS, "unverified", migrate)
    task = load_suite(suite, ["linear"])[0]
    assert not task.golden("neuron").is_dir()
    result = evaluate(task, "unverified", "neuron", tmp_path / "work", BUDGET)
    assert (result.precision, result.recall) == (0.0, 1.0)  # two edits, none golden
