"""A tpu port is checked twice (agents/precision_check.py): at highest precision against
the original, for port bugs, and at the TPU's default arithmetic (float32 matmuls as bf16
passes) against that, for a program whose training is sensitive to it; the report shows
both deviations. Judgement on run results as the harness writes them, then real runs."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import jsonschema
import pytest
from torchport.agents import precision_check
from torchport.agents.deliver import verification_markdown, verification_record
from torchport.agents.diagnose import diagnose
from torchport.agents.verifier import (
    RunLimits,
    judge,
    policies,
    rank,
    verify_tree,
    with_precision_checks,
)
from verification_md import verification_md

FP32 = policies()["fp32"]
POLICY = precision_check.default_policy()
SCHEMA = json.loads((Path(__file__).parent / "data" / "verification.schema.json").read_text())


def run(losses=(), mm=3, status="ok", outputs=()):
    return {
        "status": status,
        "exit_code": 0 if status == "ok" else 1,
        "losses": list(losses),
        "outputs": list(outputs),
        "counters": {"ops": 50, "ops_by_name": {"mm": mm, "add": 10}},
        "error": None if status == "ok" else {"type": "RuntimeError", "message": "boom"},
    }


FALLING = [2.0, 1.6, 1.3, 1.1, 1.0]


def checked(default, target="tpu", highest=FALLING, reference=FALLING):
    """The verdict of a port matching ``reference`` at highest, with run (b) ``default``."""
    called = []
    high = run(highest)
    v = judge(run(reference), high, FP32, "tpu")

    def again():
        called.append(True)
        return default

    v, second = with_precision_checks(v, target, high, again)
    return v, second, called


# -- where it matters ------------------------------------------------------------------


def test_the_second_run_only_where_it_can_change_the_verdict():
    assert precision_check.why_not("tpu", "verified", run(FALLING)) == ""
    assert "only a tpu device" in precision_check.why_not("neuron", "verified", run(FALLING))
    assert "did not verify" in precision_check.why_not("tpu", "failed", run(FALLING))
    assert "no matmul-class op" in precision_check.why_not("tpu", "verified", run(FALLING, mm=0))
    conv = {"counters": {"ops_by_name": {"convolution_backward": 2}}}
    assert precision_check.matmul_ops(conv) == 2


def test_a_port_with_no_matmul_or_on_another_target_is_not_run_again():
    for target, mm in (("neuron", 3), ("tpu", 0)):
        high = run(FALLING, mm=mm)
        v = judge(run(FALLING), high, FP32, "tpu")
        v, second = with_precision_checks(v, target, high, lambda: pytest.fail("ran again"))
        assert second is None and v.verdict == "verified"
        assert v.precision["default"]["ran"] is False and v.precision["default"]["why"]
    assert "not run again at the TPU's default matmul precision" in v.reason


def test_a_port_that_fails_at_highest_is_not_run_again():
    high = run([2.0, 1.9])
    v = judge(run([2.0, 1.5]), high, FP32, "tpu")
    v, second = with_precision_checks(v, "tpu", high, lambda: pytest.fail("ran again"))
    assert v.verdict == "failed" and v.failure["error"]["type"] == "ParityMismatch"
    assert v.precision["highest"]["holds"] is False and second is None


# -- check (b) ---------------------------------------------------------------------------


def test_bf16_rounding_noise_within_the_policy_keeps_the_port_verified():
    noisy = [x * (1 + 0.3 * POLICY.rtol) for x in FALLING]
    v, second, called = checked(run(noisy))
    assert called and second is not None
    assert v.verdict == "verified", v.reason
    assert "at the TPU's default matmul precision" in v.reason
    d = v.precision["default"]
    assert d["holds"] is True and d["steps"] == 5
    assert d["max_rel"] == pytest.approx(0.3 * POLICY.rtol, rel=1e-6)


@pytest.mark.parametrize(
    ("default", "found"),
    [
        ([2.0, 1.6, math.nan, math.nan, math.nan], "NaN or infinite"),
        ([2.0, 1.6, 1.3, math.inf, math.inf], "NaN or infinite"),
        ([2.0, 2.0, 2.0, 2.0, 2.0], "stops falling"),
        ([2.0, 3.0, 5.0, 9.0, 17.0], "beyond the tpu_default policy"),
    ],
)
def test_training_sensitive_to_bf16_matmuls_is_not_verified(default, found):
    v, _, _ = checked(run(default))
    assert v.verdict == "failed"
    assert v.failure["error"]["type"] == "PrecisionSensitive"
    assert found in v.reason
    assert 'torch.set_float32_matmul_precision("highest")' in v.reason
    assert v.reason.endswith(
        "At highest precision: 5 steps match the original within the "
        "fp32 policy (max abs 0, max rel 0)"
    )
    assert v.precision["highest"]["holds"] is True
    assert v.precision["default"]["holds"] is False
    d = diagnose(v.failure, "tpu")
    assert (d.signature, d.action) == ("precision-sensitive", "llm")
    assert rank(v.to_json()) == 2  # a numbers failure, as a parity mismatch is


def test_a_loss_that_falls_less_than_half_as_far_stalls_even_when_close():
    # within any sane tolerance of (a) step by step, but it has stopped learning
    a = [1.000, 0.998, 0.996, 0.994, 0.992]
    b = [1.000, 0.9995, 0.9993, 0.9990, 0.9990]
    check = precision_check.judge(run(a), run(b), POLICY)
    assert check.stalled and not check.nonfinite and check.holds is False
    assert check.max_rel < POLICY.rtol
    assert precision_check.judge(run(a), run(a), POLICY).holds is True


def test_a_crash_only_at_default_precision_fails_and_outputs_are_compared():
    v, _, _ = checked(run(status="failed"))
    assert v.verdict == "failed" and "it stops at the TPU's default precision" in v.reason
    # verified up to a failure the original shares: (b) failing the same way is no news
    shared = run([2.0, 1.6], status="failed")
    check = precision_check.judge(shared, {**shared, "losses": [2.0, 1.6001]}, POLICY)
    assert check.holds is True and check.steps == 2
    out = {"shape": [2], "mean": 1.0, "std": 0.5, "abs_max": 2.0}
    check = precision_check.judge(
        run(outputs=[out]), run(outputs=[{**out, "mean": 1.0 + 1e-4}]), POLICY
    )
    assert check.compared == "outputs" and check.holds is True and check.steps == 3


# -- the report ------------------------------------------------------------------------


def test_the_report_shows_both_checks_with_their_deviations():
    v, _, _ = checked(run([2.0, 1.6, math.nan, math.nan, math.nan]))
    md = verification_md(v)
    first = md.splitlines()[0]
    assert first == (
        "# Verification: failed (at the TPU's default matmul precision; exact float32 matches)"
    )
    assert "## Matmul precision: the port run twice" in md
    row_a = next(line for line in md.splitlines() if line.startswith("| (a) port bugs"))
    row_b = next(line for line in md.splitlines() if line.startswith("| (b) the TPU's"))
    assert "| the original | 5 losses | 0 | 0 | `fp32` | holds |" in row_a
    assert "| (a) | 5 losses | inf | inf | `tpu_default` | fails: its loss becomes NaN" in row_b
    assert "| 3 | 1.3 | nan |" in md
    noisy = [x * 1.001 for x in FALLING]
    held = verification_md(checked(run(noisy))[0])
    assert held.splitlines()[0] == "# Verification: verified"
    assert "| (a) | 5 losses | 0.002 | 0.001 | `tpu_default` | holds |" in held
    skipped = verification_md(checked(run(FALLING), target="neuron")[0], target="neuron")
    assert "| — | — | — | `tpu_default` | not run: only a tpu device" in skipped


def test_the_record_follows_the_schema():
    for default in (run([2.0, 1.6, math.nan, 1.0, 1.0]), run(FALLING)):
        v, _, _ = checked(default)
        state = {"settings": {"target": "tpu", "run_id": "r1"}, "verification": v.to_json()}
        record = json.loads(json.dumps(verification_record(state, v.verdict), default=str))
        jsonschema.validate(record, SCHEMA)
        assert verification_markdown(record)


# -- real runs ---------------------------------------------------------------------------

# A least-squares fit fine-tuned from a nearby start: its residual (about 1e-3 of the
# weights) is below what bfloat16 resolves of them (2**-8 relative), so with float32
# matmuls the loss falls by a factor each step and with bf16 passes it cannot see its
# own error. A program that needs float32 matmuls, as some scientific fits do.
SENSITIVE = """
import torch

torch.manual_seed(0)
device = torch.device("tpu")
d, n = 128, 512
w_true = torch.randn(d, 1, dtype=torch.float64)
x = torch.randn(n, d, dtype=torch.float64)
y = (x @ w_true).float().to(device)
x = x.float().to(device)
w = (w_true + 1e-3 * torch.randn(d, 1, dtype=torch.float64)).float().to(device)
w.requires_grad_(True)
optimizer = torch.optim.SGD([w], lr=0.25)
for step in range(5):
    loss = ((x @ w - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(step, loss.item())
"""

# The same model at a scale bf16 resolves: a fit from a random start.
ROBUST = SENSITIVE.replace("w_true + 1e-3 * torch.randn", "torch.randn")


def _original(source: str) -> str:
    return source.replace('torch.device("tpu")', 'torch.device("cuda")')


@pytest.mark.slow
@pytest.mark.parametrize(
    ("program", "verdict"),
    [(ROBUST, "verified"), (SENSITIVE, "failed")],
    ids=["robust", "sensitive"],
)
def test_a_real_port_is_run_twice(tmp_path, program, verdict):
    original, port = tmp_path / "original", tmp_path / "port"
    for folder, text in ((original, _original(program)), (port, program)):
        folder.mkdir()
        (folder / "fit.py").write_text(textwrap.dedent(text))
    budget = RunLimits(steps=5, forwards=5, timeout_s=240, memory_mb=2048)
    said: list[str] = []
    v, _ = verify_tree(original, port, ["python", "fit.py"], "tpu", budget, None, say=said.append)
    assert v.verdict == verdict, v.reason
    highest, default = v.precision["highest"], v.precision["default"]
    assert highest["holds"] is True and highest["max_rel"] <= FP32.rtol
    assert default["ran"] is True and default["matmul_ops"] > 0
    again = v.timings["default_precision"]["seconds"]
    assert 0 < again < v.timings["total_s"]
    shown = f"the migration again at the TPU's default matmul precision {again} s"
    assert shown in verification_md(v)
    assert any("at the TPU's default matmul precision" in s for s in said)
    if verdict == "failed":
        assert v.failure["error"]["type"] == "PrecisionSensitive"
        assert default["stalled"] or default["max_rel"] > POLICY.rtol
        assert verification_md(v).startswith("# Verification: failed (at the TPU's default")
    else:
        assert default["holds"] is True and default["max_abs"] > 0  # bf16 passes ran
