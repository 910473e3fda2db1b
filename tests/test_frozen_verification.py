"""A ``Verification`` is frozen (issue 33): no attribute of it can be set, and each step
of the verifier that adds to a verdict returns a new one, leaving the one it was given as
it was, nested run records included (a caller, or the reference-run cache, may hold them).
Each check compares the input with a deep copy taken before the call: a helper that still
edited in place, or replaced a field but edited the record under it, would fail it."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import pytest
from torchport.agents import loosening, precision_check, submodules, torch_pin, verifier
from torchport.agents.kernel_check import KernelCheck
from torchport.agents.results import Verification
from torchport.agents.tolerance import policies
from torchport.agents.unimportable import unimportable_port
from torchport.agents.verdicts import FailureKind, Reason, Verdict

FP32 = policies()["fp32"]


def run(losses: list[float], status: str = "ok", error: dict | None = None) -> dict:
    return {
        "status": status,
        "losses": losses,
        "counters": {"ops": 50, "ops_by_name": {"mm": 3}},
        "error": error,
    }


def no_module(name: str) -> dict:
    return {"type": "ModuleNotFoundError", "message": f"No module named '{name}'"}


def test_a_verification_cannot_be_assigned_to() -> None:
    v = Verification(Verdict.VERIFIED, "2 steps match")
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.verdict = Verdict.FAILED  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.reason += "; more"  # type: ignore[misc]
    assert (v.verdict, v.reason) == (Verdict.VERIFIED, "2 steps match")


def unchanged(v: Verification, step: Callable[[Verification], Verification]) -> Verification:
    """What ``step`` returns for ``v``, having checked that ``v`` is as it was."""
    before = copy.deepcopy(v)
    after = step(v)
    assert v == before, "the step changed the verification it was given"
    assert after is not v
    return after


def test_a_kernel_check_that_fails_leaves_the_verified_verdict_it_was_given() -> None:
    target = run([2.0, 1.5])
    verified = verifier.judge(run([2.0, 1.5]), target, FP32, "tpu")
    check = KernelCheck(False, "the kernel call site ops/glu.py:glu computes otherwise")
    failed = unchanged(verified, lambda v: verifier.with_kernel_check(v, check, target))
    assert verified.verdict == Verdict.VERIFIED and verified.kernel_check is None
    assert verified.failure is None and "ops/glu.py" not in verified.reason
    assert failed.verdict == Verdict.FAILED and failed.code == Reason.KERNEL_MISMATCH
    assert failed.failure["error"]["type"] == FailureKind.KERNEL_MISMATCH
    assert failed.kernel_check is not None and failed.reason.startswith(check.reason)
    assert target["error"] is None  # the run the failure was made from is untouched


def test_the_divergence_is_told_on_a_copy_of_the_failure() -> None:
    failed = verifier.judge(run([2.0, 1.5]), run([2.0, 1.9]), FP32, "tpu")
    assert failed.failure is not None
    error_before = failed.failure["error"]
    found = {
        "summary": "at step 2, model.py:10 (proj) computes otherwise",
        "blame": "port",
        "where": "model.py:10",
        "port_lines": [12],
        "cls": "Linear",
    }
    told = unchanged(failed, lambda v: verifier._told_divergence(v, found, "tpu"))
    assert failed.failure["error"] is error_before and failed.divergence is None
    assert told.failure is not failed.failure
    assert told.failure["error"]["frame"] == {"file": "model.py", "line": 12, "function": "Linear"}
    assert told.failure["error"]["message"] == told.reason
    assert told.reason == f"{failed.reason}; first divergence: {found['summary']}"
    assert told.divergence == found and told.next_step


def test_a_precision_sensitive_port_fails_on_a_new_verdict() -> None:
    falling = [2.0, 1.6, 1.3, 1.1, 1.0]
    high = run(falling)
    verified = verifier.judge(run(falling), high, FP32, "tpu")
    default = run([2.0, 1.9, 1.8, 1.7, 1.6])

    def checked(v: Verification) -> Verification:
        return verifier.with_precision_checks(v, precision_check.TARGET, high, lambda: default)[0]

    failed = unchanged(verified, checked)
    assert verified.verdict == Verdict.VERIFIED and verified.precision is None
    assert failed.verdict == Verdict.FAILED and failed.code == Reason.PRECISION_SENSITIVE
    assert failed.reason.endswith(f"At highest precision: {verified.reason}")
    assert high["error"] is None and default["error"] is None


def test_each_step_that_names_the_environment_returns_a_new_verdict(tmp_path) -> None:
    missing = run([], "failed", no_module("tinydep"))
    v = Verification(Verdict.NOT_RUNNABLE, "the original fails here too: x", target=missing)
    v = dataclasses.replace(v, reference=missing, code=Reason.BOTH_FAIL)
    env = {"unavailable": {"tinydep": "no wheel"}, "import_names": {}}
    named = unchanged(v, lambda v: verifier.name_missing_dependency(v, env))
    assert named.code == Reason.MISSING_DEPENDENCY and v.code == Reason.BOTH_FAIL

    apex = dataclasses.replace(v, target=run([], "failed", no_module("apex.amp")))
    kept = unchanged(apex, lambda v: unimportable_port(v, "tpu"))
    assert kept.code == Reason.PORT_CANNOT_IMPORT and apex.code == Reason.BOTH_FAIL

    pinned = {"skipped": [{"requirement": "torch==1.4.0", "source": "requirements.txt"}]}
    told = unchanged(v, lambda v: torch_pin.with_torch_pin(v, pinned))
    assert told.reason.startswith("the original fails on this torch")

    (tmp_path / ".gitmodules").write_text('[submodule "x"]\n\tpath = tinydep\n\turl = u\n')
    empty = unchanged(v, lambda v: submodules.name_empty_submodule(v, tmp_path))
    assert empty.code == Reason.EMPTY_SUBMODULE and v.next_step == ""


def test_a_loosened_verdict_is_said_on_a_new_one() -> None:
    verified = verifier.judge(run([2.0, 1.5]), run([2.0, 1.5]), FP32, "tpu")
    said = unchanged(verified, lambda v: loosening.said(v, {"steps": 2}))
    assert said.loosened and not verified.loosened
    assert said.reason.endswith(verified.reason) and said.reason != verified.reason
