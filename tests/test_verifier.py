"""The verifier's judgement and tolerance policy, on run results as the harness
writes them (no programs are run here: ``judge`` is pure)."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
from torchport.agents.comparison import compare_outputs, compare_series
from torchport.agents.judging import RAN_STEPS, judge, next_step
from torchport.agents.results import Verification
from torchport.agents.tolerance import choose_policy, policies
from torchport.agents.verdicts import Reason, Verdict
from torchport.agents.verifier import unsupported_target

FP32 = policies()["fp32"]
BF16 = policies()["bf16"]


def run(status="ok", losses=(), outputs=(), ops=100, error=None):
    return {
        "status": status,
        "exit_code": 0 if status == "ok" else 1,
        "losses": list(losses),
        "outputs": list(outputs),
        "counters": {"ops": ops},
        "error": error,
    }


def test_policy_file_defines_fp32_tighter_than_bf16():
    assert FP32.rtol < BF16.rtol and FP32.atol <= BF16.atol
    assert BF16.max_steps < FP32.max_steps


def test_bf16_policy_when_the_migrated_program_may_run_reduced_precision():
    assert choose_policy(['with torch.autocast("tpu", dtype=torch.bfloat16):']).name == "bf16"
    # an autocast without a dtype runs bf16 on the device, fp32 on the shim
    assert choose_policy(["with torch.autocast(device_type=device.type):"]).name == "bf16"
    assert choose_policy(["x = x.half()"]).name == "bf16"
    assert choose_policy(['x = x.to("tpu")', "y = autocaster(x)"]).name == "fp32"


def test_identical_losses_verify_and_a_small_drift_does_not_under_fp32():
    ref = [2.30, 2.10, 1.90]
    assert compare_series(ref, list(ref), FP32).holds
    drift = [2.30, 2.10 * (1 + 1e-3), 1.90]
    parity = compare_series(ref, drift, FP32)
    assert not parity.holds and parity.worst_step == 2
    assert parity.max_rel == pytest.approx(1e-3, rel=1e-6)
    assert compare_series(ref, drift, BF16).holds


def test_bf16_compares_only_the_first_steps_and_nan_never_matches_a_number():
    ref = [1.0] * 10
    late_divergence = [1.0] * BF16.max_steps + [5.0] * (10 - BF16.max_steps)
    assert compare_series(ref, late_divergence, BF16).holds
    assert compare_series(ref, late_divergence, FP32).holds is False
    assert not compare_series([1.0], [math.nan], FP32).holds
    assert compare_series([math.nan], [math.nan], FP32).holds


def test_no_common_step_is_not_parity():
    assert not compare_series([], [1.0], FP32).holds


def test_outputs_compare_shapes_then_statistics():
    a = {"shape": [2, 3], "mean": 0.5, "std": 1.0, "abs_max": 2.0}
    assert compare_outputs([a], [dict(a)], FP32).holds
    assert not compare_outputs([a], [{**a, "shape": [3, 2]}], FP32).holds
    assert "shapes differ" in compare_outputs([a], [{**a, "shape": [3, 2]}], FP32).note
    assert not compare_outputs([a], [{**a, "mean": 0.6}], FP32).holds


def test_verified_when_losses_match():
    v = judge(run(losses=[2.3, 2.2]), run(losses=[2.3, 2.2]), FP32, "tpu")
    assert v.verdict == "verified" and v.code == Reason.NUMBERS_MATCH and v.failure is None
    assert "2 steps" in v.reason


def test_a_reference_with_stand_ins_says_so():
    ref = {**run(losses=[1.0]), "reference_standins": ["flash_attn.flash_attn_func"]}
    v = judge(ref, run(losses=[1.0]), FP32, "tpu")
    assert v.verdict == "verified" and "stand-ins" in v.reason and "flash_attn" in v.reason
    assert v.reference["reference_standins"] == ["flash_attn.flash_attn_func"]


KERNELS = {
    "api": "load_inline",
    "name": "fused_gelu",
    "site": "ops.py:40",
    "cpu_kernels": None,
    "refused": [],
    "launches": {"gelu_fwd": 3, "gelu_bwd": 3},
}


def test_a_reference_whose_kernels_ran_on_the_cpu_runner_says_so():
    ref = {**run(losses=[1.0]), "cuda_kernel_runner": [KERNELS]}
    v = judge(ref, run(losses=[1.0]), FP32, "tpu")
    assert v.verdict == "verified"
    assert "torchport's CPU runner for CUDA kernels: fused_gelu (gelu_bwd x3, gelu_fwd x3)" in (
        v.reason
    )
    assert v.reference["cuda_kernel_runner"] == [KERNELS]


def test_an_original_the_kernel_runner_refuses_leaves_the_port_at_ran():
    message = (
        "ops.py:12: warp_sum uses __shfl_down_sync (warp intrinsic), which torchport's CPU "
        "runner for CUDA kernels cannot run: ..."
    )
    ref = run("failed", error={"type": "RuntimeError", "message": message, "frame": None})
    v = judge(ref, run(losses=[1.0]), FP32, "tpu")
    assert v.verdict == "ran" and v.code == Reason.BEYOND_CPU_RUNNER and message in v.reason
    # any other failure of the original still makes the port not-runnable
    other = run("failed", error={"type": "OSError", "message": "CUDA_HOME is not set"})
    assert judge(other, run(losses=[1.0]), FP32, "tpu").verdict == "not-runnable"


def test_parity_mismatch_is_a_classified_failure():
    v = judge(run(losses=[2.3, 2.2]), run(losses=[2.3, 2.5]), FP32, "tpu")
    assert v.verdict == "failed"
    assert v.failure["error"]["type"] == "ParityMismatch" and v.code == Reason.NUMBERS_DIFFER
    assert "step 2" in v.reason


def test_a_crash_of_the_migration_fails_with_its_error():
    error = {"type": "RuntimeError", "message": "boom", "frame": {"file": "t.py", "line": 3}}
    v = judge(run(losses=[1.0]), run("failed", error=error), FP32, "tpu")
    # the reason names the program's own frame, as "the original fails here too" does
    assert v.verdict == "failed" and v.reason == "failed: t.py:3: RuntimeError: boom"
    assert v.failure["error"] == error


def test_missing_data_in_both_runs_is_not_runnable():
    error = {"type": "FileNotFoundError", "message": "[Errno 2] No such file: 'data.csv'"}
    v = judge(run("failed", error=error), run("failed", error=error), FP32, "tpu")
    assert v.verdict == "not-runnable" and v.code == Reason.BOTH_FAIL
    assert v.reason.endswith(": FileNotFoundError: " + error["message"])
    # Whatever the error: the verdict says the original fails as well. When the migration
    # fails for want of CUDA, it is the port's failure too.
    cuda = {"type": "AssertionError", "message": "Torch not compiled with CUDA enabled"}
    v = judge(run("failed", error=cuda), run("failed", error=cuda), FP32, "tpu")
    assert v.verdict == "failed" and v.code == Reason.PORT_NEEDS_CUDA


def _fails_at(line, steps, message="boom"):
    error = {
        "type": "RuntimeError",
        "message": message,
        "frame": {"file": "train.py", "line": line},
    }
    return run("failed", losses=[2.3, 2.2, 2.1][:steps], error=error)


def test_the_same_failure_for_want_of_cuda_is_the_ports_failure_not_a_caveat():
    """The original stops at ``torch.cuda.CUDAGraph()`` on the reference shim; a port that
    kept it stops there too on the device: matching steps before it do not verify it."""
    graph = "Tried to instantiate dummy base class CUDAGraph"
    v = judge(_fails_at(72, 2, graph), _fails_at(72, 2, graph), FP32, "tpu")
    assert v.verdict == "failed" and v.failure is not None and v.caveat == ""
    assert v.reason == (
        f"the original fails here too: train.py:72: RuntimeError: {graph}; the migration "
        "fails the same way on the target, for want of CUDA: it still needs CUDA there"
    )


def test_matching_steps_then_the_same_failure_verify_with_a_caveat():
    v = judge(_fails_at(41, 2), _fails_at(41, 2), FP32, "tpu")
    assert (v.verdict, v.parity.steps) == ("verified", 2)
    assert v.caveat == "both runs then fail the same way at train.py:41: RuntimeError: boom"
    assert v.code == Reason.MATCH_THEN_SHARED_FAILURE and v.reason.endswith(v.caveat)
    assert v.to_json()["caveat"] == v.caveat and v.failure is None
    # ... not when the losses differ, the failure is elsewhere, or no step was taken
    drift = _fails_at(41, 2)
    drift["losses"] = [2.3, 2.9]
    for other in (drift, _fails_at(42, 2), _fails_at(41, 0)):
        v = judge(_fails_at(41, 2), other, FP32, "tpu")
        assert v.verdict == "not-runnable" and v.caveat == "" and v.code == Reason.BOTH_FAIL
        assert "train.py:41: RuntimeError" in v.reason
    v = judge(_fails_at(41, 2), _fails_at(42, 2, "other"), FP32, "tpu")
    assert "the migration fails otherwise: RuntimeError: other" in v.reason
    assert v.failure["error"]["frame"]["line"] == 42

    # ... but a port that moved the failing statement (an import added above it) fails
    # the same way: same file, function and code, another line
    def at(line, code):
        result = _fails_at(line, 2)
        result["error"]["frame"].update(function="train", code=code)
        return result

    moved = judge(
        at(41, "raise RuntimeError('boom')"), at(43, "raise RuntimeError('boom')"), FP32, "tpu"
    )
    assert moved.verdict == "verified" and moved.caveat
    changed = judge(at(41, "raise RuntimeError('boom')"), at(43, "x = y.cuda()"), FP32, "tpu")
    assert changed.verdict == "not-runnable" and "fails otherwise" in changed.reason
    # ... nor when the migration ran on the CPU
    on_cpu = {**_fails_at(41, 2), "counters": {"ops": 0}}
    assert judge(_fails_at(41, 2), on_cpu, FP32, "tpu").verdict == "not-runnable"


def test_a_failing_original_is_named_however_the_migration_went():
    failed_ref = run("failed", error={"type": "RuntimeError", "message": "no driver"})
    v = judge(failed_ref, run(losses=[1.0]), FP32, "tpu")
    assert v.verdict == "not-runnable" and v.code == Reason.ORIGINAL_FAILS
    assert v.reason.endswith(": RuntimeError: no driver")


def test_running_on_the_cpu_is_not_verification():
    v = judge(run(losses=[1.0]), run(losses=[1.0], ops=0), FP32, "tpu")
    assert v.verdict == "ran" and v.code == Reason.ON_THE_CPU
    assert v.next_step == RAN_STEPS[Reason.ON_THE_CPU]


def test_without_a_reference_or_numbers_the_verdict_is_ran():
    v = judge(None, run(losses=[1.0]), FP32, "tpu")
    assert v.verdict == "ran" and v.code == Reason.ORIGINAL_NOT_RUN
    nothing = judge(run(), run(), FP32, "tpu")
    assert nothing.verdict == "ran" and nothing.code == Reason.NOTHING_TO_COMPARE


def test_the_next_step_follows_the_reasons_code_not_its_words():
    """Rewording a reason changes no next step: the step is looked up by the code."""
    reworded = Verification(Verdict.RAN, "ran on the host only", code=Reason.ON_THE_CPU)
    assert next_step(reworded, None, run(), "tpu") == RAN_STEPS[Reason.ON_THE_CPU]
    no_code = Verification(Verdict.RAN, "it ran, but on the CPU: no operation reached it")
    assert next_step(no_code, None, run(), "tpu") == ""


def test_xla_without_torch_xla_is_not_runnable_and_emulated_targets_are():
    assert unsupported_target("tpu") is None and unsupported_target("accelerator") is None
    reason = unsupported_target("xla")
    if importlib.util.find_spec("torch_xla") is None:
        assert "torch_xla" in reason
    else:
        assert reason is None


@pytest.mark.slow
def test_a_cached_reference_run_is_reused_only_by_the_same_sandbox_code(tmp_path, monkeypatch):
    """The original's run is cached by its files, command and budget, and by torchport's
    sandbox code: a newer shim or step budget must not be handed yesterday's numbers."""
    from torchport.agents import reference_runs, verifier

    root = tmp_path / "repo"
    root.mkdir()
    (root / "train.py").write_text(
        "import torch\nm = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(9):\n    l = m(torch.ones(2, 2)).sum()\n    o.zero_grad()\n"
        "    l.backward()\n    o.step()\n"
    )
    budget = verifier.RunLimits(steps=2, forwards=2, timeout_s=120)
    cache = tmp_path / "cache"
    first = verifier.reference_run(root, ["python", "train.py"], budget, cache)
    again = verifier.reference_run(root, ["python", "train.py"], budget, cache)
    assert first["status"] == "ok" and "cached" not in first and again.get("cached") is True
    monkeypatch.setattr(reference_runs, "sandbox_digest", lambda: "another torchport")
    after_upgrade = verifier.reference_run(root, ["python", "train.py"], budget, cache)
    assert after_upgrade["status"] == "ok" and "cached" not in after_upgrade


def test_a_verification_reads_back_from_its_checkpointed_record():
    v = judge(run(losses=[2.3, 2.2]), run(losses=[2.3, 2.5]), FP32, "tpu")
    again = Verification.from_json(json.loads(json.dumps(v.to_json())))
    assert again == v and again.parity is not None and again.parity.worst_step == 2
    old = {"verdict": "ran", "reason": "written before the codes", "retired_field": 1}
    assert Verification.from_json(old).code == Reason.NONE
