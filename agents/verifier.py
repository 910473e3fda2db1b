"""The verifier: run the original and the migration, judge the pair, and say what was proven.

The original runs on the CUDA→CPU reference shim and the migration on the emulated
target, both through the sandbox harness with the same seed, step budget and synthetic
data (``agents.reference_runs``, which also caches the original's run). The pair is
judged by ``agents.judging`` (pure: two run results in, a verdict out) under the policy
``agents.tolerance`` chooses, comparing with ``agents.comparison``. What ``verify_tree``
adds here is what needs the runs themselves: the differential check at the kernel call
sites, the port again at the TPU's own arithmetic, the first divergence of a port whose
numbers differ, and what a verdict's reason must name about the environment.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import importlib.util
import re
import shlex
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from torchport.sandbox.harness import RunError, torchrun_parts
from torchport.sandbox.modes import EMULATED, GENERIC, DeviceNames, torch_problem
from torchport.sandbox.safepath import read_inside
from torchport.tools.codemods import tpu_launch
from torchport.tools.depinstall import HOW_TO_PROVIDE
from torchport.tools.depresolve import NOT_FOR_THE_PORT
from torchport.tools.targets import profiles

from . import (
    attribution,
    divergence_runs,
    kernel_check,
    legacy_repair,
    original_keyword,
    port_launch,
    precision_check,
    submodules,
    torch_pin,
    verify_pair,
)
from .comparison import (
    Parity,
    compare_ranks,
    compare_series,
    first_differing_step,
    first_step_apart,
)
from .judging import judge, kernel_runner_note, next_step, on_the_cpu, rank
from .provide_step import provide_step
from .reference_runs import (
    RunLimits,
    budget_of,
    interpreter_versions,
    reference_run,
    run_program,
    sandbox_digest,
    tree_digest,
)
from .results import Verification
from .run_record import EnvironmentRecord, ErrorRecord, RunRecord, failed_with
from .tolerance import POLICY_FIELDS, Policy, choose_policy, policies, policies_for
from .trace_records import TraceSpec
from .unimportable import unimportable_port
from .verdicts import FailureKind, Reason, Verdict, failure_kind
from .verification_records import DivergenceRecord, HighestSummary, PrecisionRecord, Timings

# Where callers have always found them; each lives in the module of its job.
__all__ = [
    "POLICY_FIELDS",
    "Parity",
    "Policy",
    "RunLimits",
    "Verification",
    "budget_of",
    "choose_policy",
    "compare_ranks",
    "compare_series",
    "interpreter_versions",
    "judge",
    "kernel_runner_note",
    "mode_for",
    "name_missing_dependency",
    "names_for",
    "next_step",
    "policies",
    "policies_for",
    "rank",
    "reference_run",
    "run_program",
    "sandbox_digest",
    "tree_digest",
    "unsupported_target",
    "verify_tree",
    "with_kernel_check",
    "with_precision_checks",
]


def mode_for(target: str) -> str | None:
    """The harness mode that runs a target's migrated code: its profile's emulator
    (tools/data/targets.toml; ``accelerator`` code asks torch.accelerator for the device,
    so any emulated accelerator proves it). None: no emulated device runs it."""
    known = profiles().get(target)
    return known.emulator if known is not None else None


def device_of(mode: str, limits: RunLimits) -> str:
    """The device a run in ``mode`` under ``limits`` puts the port on (what the judge names
    and diagnoses for): a target's own name for the generic device, else the mode's."""
    return limits.names.device if limits.names is not None and mode == GENERIC else mode


def names_for(target: str) -> DeviceNames | None:
    """The names the generic emulated device takes for ``target``: its profile's device and
    backends, where the profile runs on the generic mode under a device of its own (a
    target added by a profile file); None: the mode's own device is the target's."""
    known = profiles().get(target)
    return known.emulated_names if known is not None else None


def _python_texts(tree: Path) -> Iterator[str]:
    """The text of each Python file of ``tree`` (a copy of the repository, on the host) that
    ``safepath`` reads: a ``.py`` link out of the tree or to ``/dev/zero`` is no source."""
    for path in tree.rglob("*.py"):
        try:
            yield read_inside(tree, path.relative_to(tree)).decode("utf-8", "replace")
        except OSError:
            continue


def verify_tree(
    source: Path,
    tree: Path,
    argv: list[str],
    target: str,
    limits: RunLimits,
    cache: Path | None,
    preload: tuple[str, ...] = (),
    reference: RunRecord | None = None,
    say: Callable[[str], None] = lambda message: None,
    environment: EnvironmentRecord | None = None,
    together: bool | None = None,
    tolerance: Mapping[str, Any] | None = None,
) -> tuple[Verification, RunRecord | None]:
    """Run the original (``reference``, if not given) and ``tree`` on the target; judge
    under the tolerance policy (``tolerance``: the project's setting, ``policies_for``).

    ``environment``: the dependency overlay the runs use (``tools.depinstall``'s record).
    The runs start together when there is room (``together`` overrides). Returns the
    verdict, with its ``timings``, and the reference run, which callers may keep. The port
    is compared at exact float32 matmuls, then at the TPU's arithmetic where that matters
    (``with_precision_checks``); lines PyTorch 0.4+ broke are repaired (``_legacy_repaired``)."""
    started = time.perf_counter()
    environment = environment or {}
    site_paths = _site_paths(environment)
    if why := unsupported_target(target):
        return Verification(Verdict.NOT_RUNNABLE, why, code=Reason.UNSUPPORTED_TARGET), reference
    mode, limits = mode_for(target) or "plain", replace(limits, names=names_for(target))
    say = verify_pair.serialised(say)
    plan = _schedule(limits, together)
    given, step = reference, _stepped_launch(tree, argv, mode)

    def original_at(root: Path) -> RunRecord:
        say("verifying: running the original on the CUDA reference shim")
        progress = _steps(say, "original", limits)
        recorded = kernel_check.record_specs(kernel_check.discover(source))
        return reference_run(root, argv, limits, cache, progress, site_paths, recorded)

    migrated = _migration(tree, argv, mode, limits, (preload, site_paths), say, bool(step))
    # PyTorch 0.3's ``async=`` keyword: the original runs renamed, as the port is, and says so
    with original_keyword.runnable_original(source) as (runnable, renamed):
        original = (lambda: given) if given is not None else partial(original_at, runnable)
        pair = verify_pair.run_both(original, migrated, plan.together and given is None)
        if given is None:
            pair = _legacy_repaired(pair, runnable, tree, (original_at, migrated), target)
    reference, run = pair.reference, pair.migrated
    ran = time.perf_counter()
    policy = choose_policy(_python_texts(tree), tolerance)
    imports = attribution.imported_names([*_python_texts(source), *_python_texts(tree)])
    judged = judge(reference, run, policy, device_of(mode, limits), imports)
    v = _named(replace(judged, launch=step), environment, target, source, (renamed, reference))
    checks = (plan, policies_for(tolerance))
    v = _sites_checked(v, source, tree, (reference, run), mode, limits, site_paths, checks, say)
    v, again = with_precision_checks(v, target, run, lambda: migrated(None))
    done = time.perf_counter()
    got = "given" if given is not None else ("cache" if reference.get("cached") else "run")
    compare = done - ran - (again[1] if again else 0.0)
    v = replace(v, timings=verify_pair.timings(pair, got, compare, done - started, plan, again))
    traced = _with_divergence(v, (source, tree), argv, mode, limits, site_paths, policy, say)
    return traced, reference


def _with_divergence(
    v: Verification,
    trees: tuple[Path, Path],
    argv: list[str],
    mode: str,
    limits: RunLimits,
    site_paths: tuple[str, ...],
    policy: Policy,
    say: Callable[[str], None],
) -> Verification:
    """A port whose losses differ from the original's (``ParityMismatch``, judged under
    ``policy``, the verification's own), or whose
    training differs at the TPU's arithmetic (``PrecisionSensitive``): where it first
    computes otherwise (``agents.divergence``), in its reason, its next step and the failure
    that diagnosis reads."""
    kind = failure_kind(v.failure)
    if v.verdict != Verdict.FAILED or kind not in (
        FailureKind.PARITY_MISMATCH,
        FailureKind.PRECISION_SENSITIVE,
    ):
        return v
    source, tree = trees
    exact = precision_check.HIGHEST if mode in EMULATED else None
    fp32 = policies()["fp32"]
    sides: tuple[tuple[Path, str, str | None], tuple[Path, str, str | None]]
    if kind == FailureKind.PARITY_MISMATCH:
        step = first_differing_step(v.parity, policy)
        sides = ((source, "reference", None), (tree, mode, exact))
        names = ("original", "port")
    else:  # the port against itself: exact float32 matmuls, then the TPU's own
        rows = v.precision["default"]["per_step"] if v.precision else []
        policy, step = fp32, first_step_apart(rows, fp32, ("highest", "default")) or 1
        sides, names = ((tree, mode, exact), (tree, mode, None)), ("exact run", "default run")
    if step is None:
        return v
    say(f"verifying: tracing every module at step {step} on both sides")

    def traced(root: Path, run_mode: str, precision: str | None, trace: TraceSpec) -> RunRecord:
        up_to_k = replace(limits, steps=step + 1)  # the same forward budget as the runs compared
        return run_program(
            root, argv, run_mode, up_to_k, (), None, site_paths, (), precision, False, trace
        )

    started = time.perf_counter()
    found = divergence_runs.find(sides, step, policy, traced, names)
    seconds = round(time.perf_counter() - started, 3)
    if v.timings:
        total = round(v.timings["total_s"] + seconds, 3)
        timings: Timings = {**v.timings, "divergence": {"seconds": seconds}, "total_s": total}
        v = replace(v, timings=timings)
    return _told_divergence(v, found, device_of(mode, limits))


def _told_divergence(v: Verification, found: DivergenceRecord, device: str) -> Verification:
    """The divergence in the reason and in the failure diagnosis reads (a port line as
    its frame), and the next step the diagnosis then gives."""
    v = replace(v, divergence=found, reason=f"{v.reason}; first divergence: {found['summary']}")
    if v.failure is None:
        return v
    error: ErrorRecord = {**(v.failure.get("error") or {}), "message": v.reason}
    if found.get("blame") == "port" and found.get("port_lines"):
        where, line = found["where"].rpartition(":")[0], found["port_lines"][0]
        error["frame"] = {"file": where, "line": line, "function": found.get("cls")}
    failure: RunRecord = {**v.failure, "error": error}  # a copy: the run may be shared
    v = replace(v, failure=failure)
    return replace(v, next_step=next_step(v, None, failure, device))


def _legacy_repaired(
    pair: verify_pair.Pair,
    runnable: Path,
    tree: Path,
    runs: tuple[Callable[[Path], RunRecord], Callable[..., RunRecord]],
    target: str,
) -> verify_pair.Pair:
    """The pair again, where the original failed at a line PyTorch 0.4+ broke: the
    original's copy and the port repaired there (``agents.legacy_repair``), the port run
    again, and the repairs kept in the reference's record for the verdict."""
    original_at, migrated = runs
    with legacy_repair.repaired_original(pair.reference, runnable, original_at, target) as (
        reference,
        repairs,
    ):
        if not repairs:
            return pair
        done = legacy_repair.repair_port(tree, repairs)
    reference = {**reference, "legacy_repairs": [r.to_json() for r in done]}
    started = time.perf_counter()
    run = migrated() if any(r.port_lines for r in done) else pair.migrated
    return replace(
        pair, reference=reference, migrated=run, migrated_s=time.perf_counter() - started
    )


def _named(
    v: Verification,
    environment: EnvironmentRecord,
    target: str,
    source: Path,
    original: tuple[Any, RunRecord],
) -> Verification:
    """The verdict with what its reason must name: a package the environment could not
    provide, a CUDA-only import the port kept, the torch the original pins, an empty
    submodule (a clone without --recursive), the ``async=`` keywords the original ran
    renamed with and the lines it ran repaired (``original``: those renames and its run)."""
    renamed, reference = original
    v = name_missing_dependency(v, environment)
    v = unimportable_port(v, target)
    v = torch_pin.with_torch_pin(v, environment)  # an original that pins another torch
    v = submodules.name_empty_submodule(v, source)
    if renamed:
        v = replace(v, reason=f"{v.reason}; {original_keyword.note(renamed)}")
    v = _with_repairs(v, reference)
    return v


def _with_repairs(v: Verification, reference: RunRecord) -> Verification:
    """The verdict with the lines the original ran repaired (``agents.legacy_repair``)."""
    repaired = reference.get("legacy_repairs")
    if not repaired:
        return v
    frame = (reference.get("error") or {}).get("frame") or {}
    file, line = frame.get("file"), frame.get("line")
    failed_at = (file, line) if file is not None and line is not None else None
    reason = f"{v.reason}; {legacy_repair.note(repaired, failed_at)}"
    return replace(v, legacy_repairs=list(repaired), reason=reason)


def _migration(
    tree: Path,
    argv: list[str],
    mode: str,
    limits: RunLimits,
    paths: tuple[tuple[str, ...], tuple[str, ...]],
    say: Callable[[str], None],
    launch_step: bool = False,
) -> Callable[..., RunRecord]:
    """The migration's run on the emulated device: with exact float32 matmuls unless
    called with ``precision`` None (the TPU's own arithmetic). ``paths``: the preloaded
    modules and the dependency overlay's folders; ``launch_step``: TorchTPU's launch step
    first (``_stepped_launch``)."""
    preload, site_paths = paths
    exact = precision_check.HIGHEST if mode in EMULATED else None

    def migrated(precision: str | None = exact) -> RunRecord:
        at = "" if precision else " at the TPU's default matmul precision"
        say(f"verifying: running the migration on the emulated {mode} device{at}")
        progress = _steps(say, f"migration{at}", limits)
        return run_program(
            tree, argv, mode, limits, preload, progress, site_paths, (), precision, launch_step
        )

    return migrated


def with_precision_checks(
    v: Verification,
    target: str,
    highest: RunRecord,
    at_default: Callable[[], RunRecord],
) -> tuple[Verification, tuple[RunRecord, float] | None]:
    """``v`` (check (a): the port at highest precision against the original) with check
    (b): ``at_default`` runs the port at TorchTPU's own arithmetic where that matters
    (``precision_check``, which says where and why). A port whose training (b) finds
    sensitive to the TPU's bf16 matmul passes fails, with ``PrecisionSensitive``; the
    second run and its wall time are returned for the timings (None when not run)."""
    skip = precision_check.why_not(target, v.verdict, highest)
    check, again = precision_check.DefaultCheck(ran=False, why=skip), None
    if not skip:
        started = time.perf_counter()
        default = at_default()
        again = (default, time.perf_counter() - started)
        check = precision_check.judge(highest, default, precision_check.default_policy())
    precision: PrecisionRecord = {"highest": _highest_summary(v), "default": check.to_json()}
    v = replace(v, precision=precision)
    if check.holds is False:
        reason = f"{precision_check.reason(check)}. At highest precision: {v.reason}"
        run = again[0] if again else highest
        failure = failed_with(run, FailureKind.PRECISION_SENSITIVE, reason)
        code = Reason.PRECISION_SENSITIVE
        v = replace(v, verdict=Verdict.FAILED, code=code, reason=reason, failure=failure)
    elif check.ran:
        v = replace(v, reason=f"{v.reason}; {precision_check.reason(check)}")
    elif target == precision_check.TARGET and v.verdict == Verdict.VERIFIED:
        why = f"not run again at the TPU's default matmul precision: {skip}"
        v = replace(v, reason=f"{v.reason}; {why}")
    return v, again


def _highest_summary(v: Verification) -> HighestSummary:
    """Check (a) as the report shows it beside check (b): the port, with every float32
    matmul exact, against the original under the verdict's policy."""
    parity = v.parity
    summary: HighestSummary = {"matmul_precision": precision_check.HIGHEST, "policy": v.policy}
    if parity is not None:
        summary["compared"], summary["steps"] = parity.compared, parity.steps
        summary["max_abs"], summary["max_rel"] = parity.max_abs, parity.max_rel
        summary["holds"] = parity.holds
    return summary


def _stepped_launch(tree: Path, argv: list[str], mode: str) -> str:
    """The port's launch command when it is a tpu torchrun (its run then takes TorchTPU's
    launch step first), else "".

    The command is part of the port: on TorchTPU a torchrun line runs only behind the launch
    step. Where a launch line of ``tree`` already takes it before this command (TPN010 wrote
    it), that line is the port's command; otherwise the entry command itself gains the step
    in the form TPN010 writes, and the report names that command as the one to run."""
    if mode != "tpu":
        return ""
    try:
        if torchrun_parts(argv) is None:
            return ""
    except RunError:
        return ""  # the run itself says what is wrong with the command
    found = port_launch.port_command(tree, argv)
    return found or tpu_launch.shell_step() + shlex.join(argv)


def _site_paths(environment: EnvironmentRecord) -> tuple[str, ...]:
    """The dependency overlay's folders, as the programs' sys.path gets them: the packages
    with installed files ported (``agents.library_patch``), if any, first."""
    paths = [environment.get("patched_site"), environment.get("path")]
    return tuple(p for p in [*paths, *environment.get("site_paths", [])] if p)


def _sites_checked(
    v: Verification,
    source: Path,
    tree: Path,
    runs: tuple[RunRecord, RunRecord],
    mode: str,
    limits: RunLimits,
    site_paths: tuple[str, ...],
    checks: tuple[verify_pair.Schedule, dict[str, Policy]],
    say: Callable[[str], None],
) -> Verification:
    """``v`` with the differential check at the kernel call sites the migration changed,
    when both programs ran (``with_kernel_check``); ``v`` as it is otherwise. ``checks``:
    how the check's runs are scheduled, and the tolerance policies it judges by."""
    reference, run = runs
    replaced = kernel_check.replaced(source, tree, kernel_check.discover(source))
    if (
        not replaced
        or v.verdict not in (Verdict.VERIFIED, Verdict.FAILED)
        or not _both_ran(reference, run)
    ):
        return v
    say("verifying: the differential check at the kernel call sites")
    checked = _check_sites(source, tree, replaced, reference, mode, limits, site_paths, checks)
    return with_kernel_check(v, checked, run)


def _check_sites(
    source: Path,
    tree: Path,
    sites: list[Any],
    reference: RunRecord,
    mode: str,
    limits: RunLimits,
    site_paths: tuple[str, ...],
    checks: tuple[verify_pair.Schedule, dict[str, Policy]],
    original_mode: str = "reference",
) -> kernel_check.KernelCheck:
    """The differential check's two sandboxed runs: the verifier's limits, no step budget
    (the driver trains nothing), together when the machine has room for both.
    ``original_mode``: how ``source``'s sites run (a fallback port: on the target too)."""
    unbudgeted = replace(limits, steps=None, forwards=None)
    plan, policy_set = checks

    def runner(root: Path, run_mode: str) -> RunRecord:
        # exact float32 on the device, like check (a): a kernel's replacement is compared
        pinned = precision_check.HIGHEST if run_mode != "reference" else None
        return run_program(
            root,
            kernel_check.DRIVER,
            run_mode,
            unbudgeted,
            site_paths=site_paths,
            matmul_precision=pinned,
        )

    def both(original: Any, port: Any) -> tuple[RunRecord, RunRecord]:
        pair = verify_pair.run_both(original, port, plan.together)
        return pair.reference, pair.migrated

    return kernel_check.check(
        source, tree, sites, reference, (original_mode, mode), runner, policy_set, both
    )


def check_against_port(
    baseline: Path,
    tree: Path,
    sites: list[Any],
    reference: RunRecord,
    target: str,
    limits: RunLimits,
    environment: EnvironmentRecord | None,
    tolerance: Mapping[str, Any] | None = None,
) -> kernel_check.KernelCheck:
    """The differential check with a verified port (``baseline``) as the reference: both
    trees' sites run on the target's emulated device, on the original's recorded inputs.
    A replacement of a kernel that runs through a fallback is held to the fallback too."""
    mode, limits = mode_for(target) or "plain", replace(limits, names=names_for(target))
    checks = (_schedule(limits, None), policies_for(tolerance))
    site_paths = _site_paths(environment or {})
    return _check_sites(baseline, tree, sites, reference, mode, limits, site_paths, checks, mode)


def _both_ran(reference: RunRecord, target: RunRecord) -> bool:
    return (
        reference.get("status") == "ok" and target.get("status") == "ok" and not on_the_cpu(target)
    )


def with_kernel_check(
    v: Verification, checked: kernel_check.KernelCheck, target: RunRecord
) -> Verification:
    """The verdict with the differential check's: a kernel site that computes otherwise
    fails the migration whatever its losses did, and the reason names the site first (it is
    the more precise evidence); a check that holds, or compared nothing, says so."""
    v = replace(v, kernel_check=checked.to_json())
    if checked.holds is False:
        losses = ""
        if v.parity is not None and v.parity.steps:
            held = "match" if v.parity.holds else "do not match either"
            losses = f"; the program's {v.parity.steps} losses {held}"
        failure = failed_with(target, FailureKind.KERNEL_MISMATCH, checked.reason, checked.frame)
        return replace(
            v,
            verdict=Verdict.FAILED,
            code=Reason.KERNEL_MISMATCH,
            reason=checked.reason + losses,
            failure=failure,
        )
    return replace(v, reason=f"{v.reason}; {checked.reason}")


def _schedule(limits: RunLimits, together: bool | None) -> verify_pair.Schedule:
    if together is not None:
        return verify_pair.Schedule(
            together, f"{'together' if together else 'one after the other'}: as asked"
        )
    return verify_pair.schedule(
        limits.memory_mb, verify_pair.memory_available_mb(), verify_pair.cores()
    )


_NO_MODULE = re.compile(r"No module named '([^']+)'")


def name_missing_dependency(v: Verification, environment: EnvironmentRecord) -> Verification:
    """A program that stopped at an import of a package the overlay could not provide (or
    skipped) is not-runnable here, whatever its port: say which package, why it is
    missing, and how to provide it."""
    failed = [r for r in (v.target, v.reference) if r and r.get("status") != "ok"]
    for result in failed:
        error = result.get("error") or {}
        found = _NO_MODULE.search(str(error.get("message", "")))
        if error.get("type") != "ModuleNotFoundError" or not found:
            continue
        module = found.group(1).split(".")[0]
        dist = (environment.get("import_names") or {}).get(module, module)
        why = (environment.get("unavailable") or {}).get(dist)
        skipped = [
            s
            for s in environment.get("skipped") or []
            if s.get("name") == dist and s.get("reason") not in NOT_FOR_THE_PORT
        ]
        if why is None and skipped:
            why = skipped[0].get("reason")
        if why is None and dist in (environment.get("hidden") or []):
            why = (
                "torchport's environment has it, but the program's requirements do not name "
                "it, so its runs do not see it (as a user who installed them would not)"
            )
        if why is None:
            continue
        # Not "the original fails here too": the package is missing from the runs'
        # environment (torchport's, or the interpreter given), not wrong in the program.
        ref = v.reference or {}
        original_failed = bool(ref) and ref.get("status") != "ok"
        tried = dist in (environment.get("unavailable") or {})  # else skipped or hidden
        step = provide_step(dist, environment)
        blame = attribution.Attribution(
            "own-environment",
            f"torchport {'could not install' if tried else 'did not install'} {dist}",
            f"the program needs {dist} (import {module})"
            + (", so neither run could start" if original_failed else "")
            + f": {why}",
            step or HOW_TO_PROVIDE[0].upper() + HOW_TO_PROVIDE[1:],
        )
        return replace(
            v,
            verdict=Verdict.NOT_RUNNABLE,
            failure=None,
            attribution=blame.to_json(),
            next_step=blame.next_step,
            code=Reason.MISSING_DEPENDENCY,
            reason=f"{blame.cause}: {blame.evidence}" + ("" if step else f"; {HOW_TO_PROVIDE}"),
        )
    return v


def _steps(
    say: Callable[[str], None], which: str, limits: RunLimits
) -> Callable[[dict[str, Any]], None]:
    def report(event: dict[str, Any]) -> None:
        loss = event.get("loss")
        shown = f", loss {loss:.5g}" if isinstance(loss, float) else ""
        say(f"verifying: {which} step {event.get('step')}/{limits.steps}{shown}")

    return report


def unsupported_target(target: str) -> str | None:
    """Why a target's code cannot run in this sandbox at all, or None."""
    mode = mode_for(target)
    if target == "xla" and importlib.util.find_spec("torch_xla") is None:
        return (
            "PyTorch/XLA code needs torch_xla, which is not installed in the sandbox and has "
            "no emulator here; the migration was checked statically only"
        )
    if mode is None and target != "xla":
        return f"no emulated device for target {target!r}"
    names = names_for(target)
    if names is not None and (problem := torch_problem(names.device)):
        return f"no emulated device for target {target!r}: {problem}"
    return None
