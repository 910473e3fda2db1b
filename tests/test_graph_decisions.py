"""The loop's decisions without the sandbox: the graph's edges, which round is kept, and
what diagnose chooses to try next (agents.graph, agents.repair_choice).

The failures are run records shaped like the harness's (the messages are torch's own,
as in test_diagnose); the rules a diagnosis names run for real on a small file. No
program is run, so these take a second or two; the end-to-end runs are in
test_agent_graph and test_agent_llm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torchport.agents import graph
from torchport.agents.defaults import DEFAULTS
from torchport.agents.repair_choice import no_fix_reason
from torchport.agents.state import State

SOURCE = "import torch\n\nx = torch.zeros(2).cuda()\nprint(x)\n"
NOT_COMPILED = "Torch not compiled with CUDA enabled"


def _settings(source: Path, **more: Any) -> dict[str, Any]:
    return {**DEFAULTS, "source": str(source), "target": "tpu", **more}


def _failed_at(path: str, line: int, message: str = NOT_COMPILED) -> dict[str, Any]:
    """A failed verification whose migrated run raised at path:line."""
    frame = {"file": path, "line": line, "function": "<module>", "code": "x"}
    run = {
        "status": "failed",
        "error": {"type": "AssertionError", "message": message, "frame": frame},
        "stderr_tail": "",
    }
    return {"verdict": "failed", "reason": message, "failure": run, "target": run}


def _parity_failure() -> dict[str, Any]:
    """Both programs ran; the losses differ. The run has no frame to point at."""
    run = {
        "status": "failed",
        "error": {"type": "ParityMismatch", "message": "step 2: 0.5 vs 0.7", "frame": None},
        "stderr_tail": "",
    }
    return {"verdict": "failed", "reason": "losses differ", "failure": run}


class _Ctx(graph.Runtime):
    """A runtime whose "LLM" is a marker object: diagnose only asks whether one exists
    (it never talks to it), and counts how often it asked."""

    def __init__(self, run_id: str, with_llm: bool) -> None:
        super().__init__(run_id, llm_factory=(lambda s: object()) if with_llm else None)
        self.asked = 0

    def llm(self, settings: Any) -> Any:
        self.asked += 1
        return super().llm(settings)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "train.py").write_text(SOURCE, encoding="utf-8")
    return tmp_path / "repo"


def _diagnose(state: State, with_llm: bool = False) -> tuple[dict[str, Any], _Ctx]:
    """Run the diagnose node; ``with_llm`` configures one (``--llm`` other than none)."""
    ctx = _Ctx("decisions-test", with_llm)
    settings = {**state["settings"], "llm": "scripted" if with_llm else "none"}
    return graph.diagnose({**state, "settings": settings}, ctx), ctx


def _already_migrated(repo: Path) -> State:
    """train.py's line 3 migrated already, and still failing there: no rule has more to do."""
    return {
        "settings": _settings(repo),
        "overlay": {"train.py": SOURCE.replace(".cuda()", '.to("tpu")')},
        "verification": _failed_at("train.py", 3),
        "decisions": [],
    }


# --- edges -------------------------------------------------------------------------------


def test_after_rewrite_skips_verification_only_when_asked() -> None:
    assert graph.after_rewrite({"settings": {"verify": True}}) == "verify"
    assert graph.after_rewrite({"settings": {"verify": False}}) == "deliver"
    assert graph.after_rewrite({"settings": {}}) == "verify"


@pytest.mark.parametrize(
    ("verdict", "iteration", "elapsed", "expected"),
    [
        ("verified", 1, 0.0, "deliver"),
        ("not-runnable", 1, 0.0, "deliver"),
        ("failed", 1, 0.0, "diagnose"),
        ("failed", 3, 0.0, "diagnose"),  # max_iterations rounds after the first
        ("failed", 4, 0.0, "deliver"),
        ("failed", 1, 1801.0, "deliver"),  # past max_wall_s
    ],
)
def test_after_verify_diagnoses_a_failure_while_rounds_and_time_are_left(
    verdict: str, iteration: int, elapsed: float, expected: str
) -> None:
    state = {
        "settings": {"max_iterations": 3, "max_wall_s": 1800.0},
        "verification": {"verdict": verdict},
        "iteration": iteration,
        "elapsed_s": elapsed,
    }
    assert graph.after_verify(state) == expected


def test_after_diagnose_rewrites_only_with_a_fix() -> None:
    assert graph.after_diagnose({"next_fix": {"kind": "rules"}}) == "rewrite"
    assert graph.after_diagnose({"next_fix": None}) == "deliver"


def test_the_graph_wires_every_node_and_edge() -> None:
    drawn = graph.build(graph.Runtime("wiring")).compile().get_graph()
    edges = {(e.source, e.target) for e in drawn.edges}
    assert edges == {
        ("__start__", "plan"),
        ("plan", "rewrite"),
        ("rewrite", "verify"),
        ("rewrite", "deliver"),
        ("verify", "diagnose"),
        ("verify", "improve"),
        ("verify", "deliver"),
        ("improve", "rewrite"),
        ("improve", "deliver"),
        ("diagnose", "rewrite"),
        ("diagnose", "deliver"),
        ("deliver", "__end__"),
    }


# --- which round is kept -----------------------------------------------------------------


def _round(verdict: str, iteration: int, error: str = "RuntimeError") -> dict[str, Any]:
    record = {"verdict": verdict, "failure": {"error": {"type": error}}}
    return graph.this_round({"overlay": {"a.py": str(iteration)}}, record, iteration)


def test_a_worse_round_is_rolled_back_and_a_tie_keeps_the_newer() -> None:
    parity = _round("failed", 1, "ParityMismatch")
    crash = _round("failed", 2)
    assert graph.better_of(parity, crash) is parity  # a crash is worse than a parity miss
    assert graph.better_of(None, crash) is crash
    tie = _round("failed", 3, "ParityMismatch")
    assert graph.better_of(parity, tie) is tie
    assert graph.better_of(crash, _round("verified", 4))["iteration"] == 4


# --- what diagnose chooses ---------------------------------------------------------------


def test_rules_the_diagnosis_names_are_rerun_when_they_change_something(repo: Path) -> None:
    # The first pass left train.py alone (as with a --rules selection that missed it).
    state: State = {
        "settings": _settings(repo),
        "overlay": {},
        "verification": _failed_at("train.py", 3),
        "decisions": [],
    }
    update, ctx = _diagnose(state)
    fix = update["next_fix"]
    assert fix is not None and fix["kind"] == "rules"
    assert "TPD001" in fix["rules"] or "TPD002" in fix["rules"]
    assert set(fix["files"]) == {"train.py"} and ".cuda()" not in fix["files"]["train.py"]
    assert update["decisions"][0]["fix"] == "rules"
    assert ctx.asked == 0  # a deterministic fix needs no LLM, and none was started


def test_the_user_rules_selection_bounds_what_diagnose_reruns(repo: Path) -> None:
    state: State = {
        "settings": _settings(repo, select=["TPA"]),  # AMP rules only: none fixes .cuda()
        "overlay": {},
        "verification": _failed_at("train.py", 3),
        "decisions": [],
    }
    update, _ = _diagnose(state)
    assert update["next_fix"] is None
    assert "no LLM configured" in update["decisions"][0]["why"]


def test_without_an_llm_a_failure_no_rule_fixes_stops_and_says_why(repo: Path) -> None:
    state = _already_migrated(repo)
    update, _ = _diagnose(state)
    assert update["next_fix"] is None
    assert update["decisions"][0]["decision"] == "stop"
    assert update["decisions"][0]["why"].endswith(no_fix_reason("rules", has_llm=False))


def test_with_an_llm_the_failing_frame_goes_to_it_once(repo: Path) -> None:
    state = _already_migrated(repo)
    update, _ = _diagnose(state, with_llm=True)
    fix = update["next_fix"]
    assert fix is not None and fix["kind"] == "llm"
    assert fix["request"]["path"] == "train.py"
    assert fix["request"]["start_line"] <= 3 <= fix["request"]["end_line"]
    # The same failure at the same place again: nothing new to try.
    again, _ = _diagnose({**state, "decisions": update["decisions"]}, with_llm=True)
    assert again["next_fix"] is None
    assert again["decisions"][0]["why"].endswith(no_fix_reason("rules", has_llm=True))


def test_a_parity_failure_revisits_the_llms_own_edits_newest_first(repo: Path) -> None:
    overlay = {"train.py": "import torch\n\nx = torch.zeros(2)\ny = x * 2\nprint(x)\n"}
    edits = [
        {
            "path": "train.py",
            "before": "x = torch.zeros(2).cuda()\n",
            "after": "x = torch.zeros(2)\n",
        },
        {"path": "train.py", "before": "y = x * 3\n", "after": "y = x * 2\n"},
    ]
    state: State = {
        "settings": _settings(repo),
        "overlay": overlay,
        "agent_edits": edits,
        "verification": _parity_failure(),
        "decisions": [],
    }
    update, _ = _diagnose(state, with_llm=True)
    request = update["next_fix"]["request"]
    assert (request["path"], request["start_line"]) == ("train.py", 4)  # the newest edit
    assert "y = x * 3" in request["context"]  # shown what it replaced
    assert update["diagnosis"]["file"] == "train.py"
    second, _ = _diagnose({**state, "decisions": update["decisions"]}, with_llm=True)
    assert second["next_fix"]["request"]["start_line"] == 3  # then the older one
    # Without an LLM there is nobody to revisit them.
    alone, _ = _diagnose(state)
    assert alone["next_fix"] is None


def test_a_missing_cuda_library_asks_the_llm_about_its_remaining_uses(repo: Path) -> None:
    (repo / "train.py").write_text(
        "import torch\nimport cupy\n\nadd = cupy.RawKernel(SOURCE, 'add')\n",
        encoding="utf-8",
    )
    run = {
        "status": "failed",
        "error": {"type": "ModuleNotFoundError", "message": "No module named 'cupy'"},
        "stderr_tail": "",
    }
    state: State = {
        "settings": _settings(repo),
        "overlay": {},
        "verification": {"verdict": "failed", "failure": run},
        "decisions": [],
    }
    update, _ = _diagnose(state, with_llm=True)
    assert update["diagnosis"]["signature"] == "missing-cupy"
    fix = update["next_fix"]
    assert fix is not None and fix["kind"] == "constructs" and fix["items"] >= 1
    without, _ = _diagnose(state)
    assert without["next_fix"] is None
