"""The verdict for one pair of runs: what the original and the port reached, compared.

Pure (two run results in, a ``Verification`` out): the policy of what counts as
``verified``, ``ran``, ``failed`` or ``not-runnable`` is tested without running anything.
A migration is ``verified`` only when it ran on the emulated device and its numbers
match the original's within the tolerance policy; everything short of that is named for
what it is, with the next step to take.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any, cast

from torchport.sandbox.harness import SANDBOX_ERROR
from torchport.tools.catalogue import TARGETS

from . import attribution
from .comparison import Parity, compare_outputs, compare_ranks, compare_series
from .data_notes import interpreter_note
from .diagnose import diagnose, load_signatures
from .results import Verification
from .run_record import RunRecord, failed_with
from .tolerance import Policy
from .verdicts import FailureKind, Reason, Verdict
from .verification_records import VerificationRecord


def _brief(result: RunRecord | None) -> RunRecord | None:
    """What the report keeps of a run: enough to see what happened, not every counter."""
    if result is None:
        return None
    counters = result.get("counters") or {}
    keep = (
        "ops",
        "host_syncs",
        "host_sync_sites",
        "h2d_count",
        "h2d_bytes",
        "d2h_count",
        "d2h_bytes",
        "float64_ops",
        "cuda_calls",
        "intercepted",
        "emulator_backend",  # native or python, and why: the evidence says which ran
        "emulator_backend_reason",
    )
    brief = {
        "status": result.get("status"),
        "exit_code": result.get("exit_code"),
        "steps": result.get("steps", 0),
        "forwards": result.get("forwards", 0),
        "losses": result.get("losses", []),
        "stopped": result.get("stopped"),
        "error": result.get("error"),
        "isolation": result.get("isolation"),
        "elapsed_s": result.get("elapsed_s"),
        "phases": result.get("phases") or {},
        "synthetic_data": result.get("synthetic_data", []),
        "standin_modules": result.get("standin_modules", []),
        "network": result.get("network", []),
        "command_rewrites": result.get("command_rewrites", []),
        "command_kept": result.get("command_kept", []),
        "reference_standins": result.get("reference_standins", []),
        "reference_interpreters": result.get("reference_interpreters", []),
        "cuda_kernel_runner": result.get("cuda_kernel_runner", []),
        "kernel_site_calls": result.get("kernel_site_calls", []),
        "counters": {k: counters[k] for k in keep if k in counters},
        "stderr_tail": (result.get("stderr_tail") or "")[-1500:],
    }
    return cast(RunRecord, brief)  # the same keys, some of them None in a run cut short


def _error_text(result: RunRecord) -> str:
    """The error as a reason says it: the type and the message's first line (the whole
    message and traceback stay in the run's JSON)."""
    error = result.get("error") or {}
    return f"{error.get('type', '?')}: {attribution.first_line(error.get('message', ''))}".strip()


def _full_error(result: RunRecord) -> str:
    error = result.get("error") or {}
    return f"{error.get('type', '?')}: {error.get('message', '')}"


# Every refusal and build failure of torchport's CPU runner for CUDA kernels says this.
RUNNER_REFUSAL = "torchport's CPU runner for CUDA kernels"


def judge(
    reference: RunRecord | None,
    target: RunRecord,
    policy: Policy,
    device: str,
    imports: frozenset[str] | None = None,
) -> Verification:
    """The verdict for one pair of runs (``reference`` None: the original was not run).
    ``imports``: the modules the programs import themselves (``attribution.imported_names``),
    so a package only torchport's environment has is told from one the program asks for.
    Every verdict short of ``verified`` comes with its ``next_step``."""
    v = _judged(reference, target, policy, device, imports)
    if v.verdict != Verdict.VERIFIED and not v.next_step:
        v = replace(v, next_step=next_step(v, reference, target, device))
    return v


# What to do after a ``ran`` verdict, by its reason's code.
RAN_STEPS: dict[str, str] = {
    Reason.ON_THE_CPU: "move the model and its inputs to the device (torchport scan "
    "names the lines that choose the CPU)",
    Reason.ORIGINAL_NOT_RUN: "give the entry command (--entry) so the original runs too",
    Reason.NOTHING_TO_COMPARE: "run a training entry point: torchport compares the losses of "
    "optimizer steps (or the outputs of forward calls) it sees",
    Reason.BEYOND_CPU_RUNNER: "verify the kernels' replacements on "
    "the real device; torchport's CPU runner cannot run them",
}


def next_step(v: Verification, reference: RunRecord | None, target: RunRecord, device: str) -> str:
    """The next step after a verdict short of ``verified``: the hint of the failing run's
    diagnosed signature (the original's when it failed), or the ``RAN_STEPS`` entry."""
    failing = v.failure or next(
        (r for r in (reference, target) if r is not None and r.get("status") != "ok"), None
    )
    if failing is not None:
        found = diagnose(failing, device if device in TARGETS else "accelerator")
        library = attribution.library_site(failing)
        if library and found.signature in _cuda_signatures():
            return (
                f"the CUDA use is in an installed library ({library}), and torchport ports "
                "the repository's files only: install a release of that library that takes "
                "its device from the caller, or port that line by hand"
            )
        return found.hint
    return RAN_STEPS.get(v.code, "")


def _judged(
    reference: RunRecord | None,
    target: RunRecord,
    policy: Policy,
    device: str,
    imports: frozenset[str] | None,
) -> Verification:
    v = Verification(
        Verdict.FAILED,
        "",
        policy=policy.name,
        own_policy=policy.own,
        reference=_brief(reference),
        target=_brief(target),
    )
    if reference is not None and reference.get("status") != "ok":
        return _judge_failed_original(v, reference, target, policy, device, imports)
    if target.get("status") != "ok":
        return _judge_failed_port(v, target, imports)
    if on_the_cpu(target):
        reason = f"it ran, but on the CPU: no operation reached the emulated {device} device"
        return replace(v, verdict=Verdict.RAN, code=Reason.ON_THE_CPU, reason=reason)
    if reference is None:
        reason = "the original was not run, so there is nothing to compare with"
        return replace(v, verdict=Verdict.RAN, code=Reason.ORIGINAL_NOT_RUN, reason=reason)
    if reference.get("losses") and target.get("losses"):
        parity = compare_ranks(reference, target, policy)
    elif reference.get("outputs") and target.get("outputs"):
        parity = compare_outputs(reference["outputs"], target["outputs"], policy)
    else:
        return replace(
            v,
            verdict=Verdict.RAN,
            code=Reason.NOTHING_TO_COMPARE,
            reason="neither a loss nor a model output was recorded in both runs to compare",
            parity=Parity("nothing"),
        )
    return _judge_parity(v, parity, reference, target, policy)


def _judge_failed_port(
    v: Verification, target: RunRecord, imports: frozenset[str] | None
) -> Verification:
    """The original ran, the port did not: only what differs between the two runs can be
    torchport's (the packages it hides from a target run, a sandbox that could not start
    the port); anything else is the port's failure."""
    blame = attribution.attribute(target, imports, ("own-environment", "sandbox-start"))
    if blame is not None:
        return _attributed(v, blame, "the migration", target)
    where = _failure_where(target)
    reason = f"{target.get('status')}: {f'{where}: ' if where else ''}{_error_text(target)}"
    return replace(v, verdict=Verdict.FAILED, failure=target, code=Reason.PORT_FAILS, reason=reason)


def _judge_parity(
    v: Verification,
    parity: Parity,
    reference: RunRecord,
    target: RunRecord,
    policy: Policy,
) -> Verification:
    """Both ran and recorded something to compare: ``verified`` when it matches."""
    if parity.holds:
        reason = (
            f"{parity.steps} {'steps' if parity.compared == 'losses' else 'outputs'} match the "
            f"original within the {policy.label} policy (max abs {parity.max_abs:.3g}, "
            f"max rel {parity.max_rel:.3g})"
        )
        if parity.ranks > 1:
            reason += f", on each of {parity.ranks} ranks"
        standins = reference.get("reference_standins") or []
        if standins:
            reason += (
                "; the original ran with pure-PyTorch stand-ins for CUDA-only APIs: "
                + ", ".join(standins)
            )
        if interpreted := interpreter_note(reference):
            reason += f"; {interpreted}"
        reason += kernel_runner_note(reference.get("cuda_kernel_runner") or [])
        verdict, code = Verdict.VERIFIED, Reason.NUMBERS_MATCH
        return replace(v, parity=parity, verdict=verdict, code=code, reason=reason)
    reason = parity.note or (
        f"parity does not hold under the {policy.label} policy: worst at "
        f"{'step' if parity.compared == 'losses' else 'output'} {parity.worst_step}, "
        f"abs {parity.max_abs:.3g}, rel {parity.max_rel:.3g}"
    )
    failure = failed_with(target, FailureKind.PARITY_MISMATCH, reason)
    return replace(
        v,
        parity=parity,
        verdict=Verdict.FAILED,
        code=Reason.NUMBERS_DIFFER,
        reason=reason,
        failure=failure,
    )


def kernel_runner_note(extensions: list[dict[str, Any]]) -> str:
    """What the reason says when the original's CUDA kernels ran on torchport's CPU runner
    (or the extension's own CPU kernels did), so a reader knows where its numbers came from."""
    notes = []
    for ext in extensions:
        if ext.get("error"):
            continue
        if ext.get("cpu_kernels"):
            notes.append(
                f"{ext.get('name')} (its own CPU kernels, dispatched at {ext['cpu_kernels']})"
            )
            continue
        launches = ext.get("launches") or {}
        ran = ", ".join(f"{k} x{n}" for k, n in sorted(launches.items())) or "no launches"
        notes.append(f"{ext.get('name')} ({ran})")
    if not notes:
        return ""
    return (
        "; the original's CUDA extensions were built for the CPU by torchport's CPU runner "
        "for CUDA kernels: " + "; ".join(notes)
    )


def on_the_cpu(target: RunRecord) -> bool:
    return (target.get("counters") or {}).get("ops") == 0


@cache
def _cuda_signatures() -> frozenset[str]:
    return frozenset(sig.id for sig in load_signatures() if sig.cuda)


def _needs_cuda(target: RunRecord, device: str) -> bool:
    """The migration fails because CUDA is missing on the target (a CUDA construct the port
    kept, such as ``torch.cuda.CUDAGraph()``): that the original fails there too, on the
    reference shim, says nothing for the port, which would fail on the device as well."""
    found = diagnose(target, device if device in TARGETS else "accelerator")
    return found.signature in _cuda_signatures()


def _failure_site(result: RunRecord) -> str:
    """Where a run failed: the user's frame as ``file:line``, or "" when it has none."""
    frame = (result.get("error") or {}).get("frame") or {}
    return f"{frame['file']}:{frame.get('line')}" if frame.get("file") else ""


def _failure_where(result: RunRecord) -> str:
    """The user's frame for a reason, and the installed library's line it called into
    when the failure is there (``engine.py:38, in timm/data/mixup.py:19``)."""
    where, library = _failure_site(result), attribution.library_site(result)
    return f"{where}, in {library}" if where and library else where or library


def _fails_identically(reference: RunRecord, target: RunRecord) -> bool:
    """Both failed with the same exception type at the same line of the user's code
    (without a frame on either side: with the same error text)."""
    if target.get("status") == "ok":
        return False
    ref_error, tgt_error = reference.get("error") or {}, target.get("error") or {}
    if ref_error.get("type") != tgt_error.get("type"):
        return False
    ref_site, tgt_site = _failure_site(reference), _failure_site(target)
    if ref_site == tgt_site and ref_site:
        return True
    if _same_statement(ref_error.get("frame"), tgt_error.get("frame")):
        return True  # the port moved the line (an import added above), not the failure
    if ref_site or tgt_site:
        return False
    return _full_error(reference) == _full_error(target)


def _same_statement(ref_frame: Any, tgt_frame: Any) -> bool:
    """The same file and function failing on a statement of the same text (unchanged
    by the port), when the line numbers differ."""
    if not (isinstance(ref_frame, dict) and isinstance(tgt_frame, dict)):
        return False
    keys = ("file", "function", "code")
    return all(ref_frame.get(k) for k in keys) and all(
        ref_frame.get(k) == tgt_frame.get(k) for k in keys
    )


def _attributed(
    v: Verification, blame: attribution.Attribution, which: str, result: RunRecord
) -> Verification:
    """``not-runnable`` for a failure torchport caused (``blame``): the reason says what of
    torchport's did it and the next step, never that ``which`` run's program fails."""
    v = replace(
        v, verdict=Verdict.NOT_RUNNABLE, attribution=blame.to_json(), next_step=blame.next_step
    )
    if blame.kind == "sandbox-start":
        reason = f"torchport could not run {which}: {blame.sentence()}"
        return replace(v, code=Reason.COULD_NOT_START, reason=reason)
    where = _failure_site(result)
    reason = f"{blame.sentence()} ({which} failed{f' at {where}' if where else ''})"
    return replace(v, code=Reason.TORCHPORT_CAUSED, reason=reason)


def _judge_failed_original(
    v: Verification,
    reference: RunRecord,
    target: RunRecord,
    policy: Policy,
    device: str,
    imports: frozenset[str] | None = None,
) -> Verification:
    """The original itself fails here: the port is judged on what both runs reached.

    Both ran the same k >= 1 steps with matching losses and then fail identically:
    ``verified`` for those k steps, the shared failure kept as the caveat (it is the
    original's, not the port's). A failure something of torchport's caused (a stand-in,
    a lowered argument, its environment, its sandox: ``agents.attribution``) is
    ``not-runnable`` saying so. Anything else: ``not-runnable``, saying first that the
    original fails, then how far the migration got.
    """
    where = _failure_where(reference)
    failure = f"{f'{where}: ' if where else ''}{_error_text(reference)}"
    blame = attribution.attribute(reference, imports)
    if blame is not None and blame.kind == "sandbox-start":
        return _attributed(v, blame, "the original", reference)
    if (reference.get("error") or {}).get("type") == SANDBOX_ERROR:  # it never started
        return replace(
            v,
            code=Reason.COULD_NOT_START,
            verdict=Verdict.NOT_RUNNABLE,
            reason=f"torchport could not run the original: {failure}",
        )
    if target.get("status") == "ok" and RUNNER_REFUSAL in _full_error(reference):
        return _beyond_the_runner(v, target, device, failure)
    ref_losses, tgt_losses = reference.get("losses") or [], target.get("losses") or []
    parity = compare_series(ref_losses, tgt_losses, policy) if ref_losses and tgt_losses else None
    same = _fails_identically(reference, target)
    matched = parity is not None and parity.holds and len(ref_losses) == len(tgt_losses)
    if same and _needs_cuda(target, device):
        reason = (
            f"the original fails here too: {failure}; the migration fails the same way on "
            "the target, for want of CUDA: it still needs CUDA there"
        )
        return replace(
            v,
            verdict=Verdict.FAILED,
            code=Reason.PORT_NEEDS_CUDA,
            parity=parity,
            failure=target,
            reason=reason,
        )
    if same and matched and parity is not None and not on_the_cpu(target):
        return _matched_then_shared(v, parity, policy, failure, blame)
    if blame is not None:
        return _attributed(replace(v, parity=parity), blame, "the original", reference)
    return _original_fails(v, parity, target, failure, same)


def _matched_then_shared(
    v: Verification,
    parity: Parity,
    policy: Policy,
    failure: str,
    blame: attribution.Attribution | None,
) -> Verification:
    """``verified`` for the steps both runs matched before failing identically, the shared
    failure (and what of torchport's was on its path, if anything) kept as the caveat."""
    v = replace(v, verdict=Verdict.VERIFIED, parity=parity, code=Reason.MATCH_THEN_SHARED_FAILURE)
    caveat = f"both runs then fail the same way at {failure}"
    if blame is not None:
        v = replace(v, attribution=blame.to_json(), next_step=blame.next_step)
        caveat += f": {blame.sentence()}"
    reason = (
        f"{parity.steps} steps match the original within the {policy.label} policy "
        f"(max abs {parity.max_abs:.3g}, max rel {parity.max_rel:.3g}); {caveat}"
    )
    return replace(v, caveat=caveat, reason=reason)


def _beyond_the_runner(
    v: Verification, target: RunRecord, device: str, failure: str
) -> Verification:
    """The original's kernels are beyond torchport's CPU runner: no reference numbers, as
    for an original that was not run; the runner's reason says what it refused."""
    reason = f"the original could not run on the CPU reference: {failure}"
    if on_the_cpu(target):
        reason += f"; the migration ran, but on the CPU, not the emulated {device} device"
    else:
        reason += "; the migration ran, with nothing to compare it with"
    return replace(v, verdict=Verdict.RAN, code=Reason.BEYOND_CPU_RUNNER, reason=reason)


def _original_fails(
    v: Verification, parity: Parity | None, target: RunRecord, failure: str, same: bool
) -> Verification:
    """The original's own failure, nothing of torchport's on its path: ``not-runnable``,
    saying so first, then how far the migration got."""
    v = replace(v, verdict=Verdict.NOT_RUNNABLE, parity=parity)
    if target.get("status") == "ok":
        reason = f"the original fails here, the migration does not: {failure}"
        return replace(v, code=Reason.ORIGINAL_FAILS, reason=reason)
    reason = f"the original fails here too: {failure}"
    if not same:
        v = replace(v, failure=target)  # the migration's own failure, for the report's diagnosis
        reason += f"; the migration fails otherwise: {_error_text(target)}"
    if parity is not None:
        held = "match" if parity.holds else "do not match"
        reason += f"; the {parity.steps} steps both ran {held}"
    return replace(v, code=Reason.BOTH_FAIL, reason=reason)


_RANKS: dict[str, int] = {
    Verdict.VERIFIED: 4,
    Verdict.RAN: 3,
    Verdict.NOT_RUNNABLE: 0,
}  # FAILED: 1 or 2


def rank(verification: VerificationRecord) -> int:
    """How far a migration got, to keep the best of several rounds (higher is better)."""
    verdict = verification.get("verdict")
    if verdict == Verdict.FAILED:
        error = ((verification.get("failure") or {}).get("error")) or {}
        return 2 if error.get("type") in FailureKind.numeric() else 1
    return _RANKS.get(str(verdict), 0)
