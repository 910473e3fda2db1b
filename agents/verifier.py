"""The verifier: run the original and the migration, compare, and say what was proven.

The original runs on the CUDA→CPU reference shim and the migration on the
emulated target, both through the sandbox harness with the same seed, step
budget and synthetic data. ``judge`` is pure (two run results in, a verdict
out) so the policy can be tested without running anything; ``run_pair`` does
the running. A migration is ``verified`` only when it ran on the emulated
device and its numbers match the original's within the tolerance policy in
``data/tolerance.toml``; everything short of that is named for what it is.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
import math
import os
import re
import shlex
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cache, partial
from pathlib import Path
from typing import Any

from torchport.sandbox.harness import SANDBOX_ERROR, RunError, RunSpec, run, torchrun_parts
from torchport.sandbox.limits import (
    DEFAULT_DEVICES,
    DEFAULT_ISOLATION,
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
)
from torchport.sandbox.modes import EMULATED
from torchport.sandbox.safepath import digest_regular, read_inside
from torchport.tools.atomicfile import atomic_write
from torchport.tools.catalogue import TARGETS
from torchport.tools.codemods import tpu_launch
from torchport.tools.depinstall import HOW_TO_PROVIDE
from torchport.tools.depresolve import NOT_FOR_THE_PORT

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
from .data_notes import interpreter_note
from .defaults import VERIFY_STEPS
from .diagnose import diagnose, load_signatures
from .provide_step import provide_step
from .unimportable import unimportable_port
from .verdicts import FailureKind, Verdict

# The harness mode that runs each target's migrated code. `accelerator` code asks
# torch.accelerator for the device, so any emulated accelerator proves it.
MODE_FOR_TARGET = {**{name: name for name in EMULATED}, "accelerator": "tpu", "xla": None}
_NOT_COPIED = {".git", "__pycache__", ".venv", "venv", "torchport-report"}
_BF16 = re.compile(r"\bbfloat16\b|\bbf16\b|\bautocast\b|\bhalf\(\)|\bfloat16\b")


@dataclass(frozen=True)
class RunLimits:
    """How each of a verification's two runs is bounded and what machine it sees (not
    ``sandbox.budget.Budget``, the step counter inside the running program)."""

    steps: int = VERIFY_STEPS
    forwards: int = VERIFY_STEPS
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    isolation: str = DEFAULT_ISOLATION
    seed: int = 0
    devices: int = DEFAULT_DEVICES  # what device_count() answers in both runs
    lower_args: bool = True  # size and time arguments lowered (False: --keep-args)


def budget_of(settings: Mapping[str, Any]) -> RunLimits:
    """The run limits a migration's settings ask for (the graph's, or a chat session's)."""
    steps = int(settings.get("steps", RunLimits.steps))
    return RunLimits(
        steps=steps,
        forwards=steps,
        timeout_s=float(settings.get("timeout_s", RunLimits.timeout_s)),
        memory_mb=int(settings.get("memory_mb", RunLimits.memory_mb)),
        isolation=str(settings.get("isolation", RunLimits.isolation)),
        devices=int(settings.get("devices", RunLimits.devices)),
        lower_args=not settings.get("keep_args", False),
    )


@dataclass(frozen=True)
class Policy:
    name: str
    rtol: float
    atol: float
    max_steps: int
    note: str = ""  # what the project's ``tolerance`` changed, said with the name
    own: str = ""  # the policy torchport itself would choose for the program (choose_policy)

    @property
    def label(self) -> str:
        """The name as verdicts say it: with the project's change, when there is one."""
        return f"{self.name} ({self.note})" if self.note else self.name


POLICY_FIELDS = {"rtol": float, "atol": float, "max_steps": int}


@cache
def policies() -> dict[str, Policy]:
    text = importlib.resources.files("torchport.agents").joinpath("data/tolerance.toml")
    data = tomllib.loads(text.read_text(encoding="utf-8"))
    return {
        name: Policy(name, **values)
        for name, values in data.items()
        if name != precision_check.DefaultPolicy.name  # (b) against (a), not the original
    }


def policies_for(tolerance: Mapping[str, Any] | None) -> dict[str, Policy]:
    """The policies under a project's ``tolerance`` setting (``agents.project_config``):
    its numbers for a policy replace the file's, and a policy it names (not ``auto``)
    is the one every comparison uses, whatever the program computes in."""
    tolerance = tolerance or {}
    chosen = {}
    for name, base in policies().items():
        numbers = {k: v for k, v in (tolerance.get(name) or {}).items() if k in POLICY_FIELDS}
        said = ", ".join(f"{k} {v:g}" for k, v in numbers.items())
        chosen[name] = replace(base, **numbers, note=f"{said} from the project" if said else "")
    forced = tolerance.get("policy", "auto")
    if forced != "auto":
        picked = chosen[forced]
        note = f"{picked.note}; " if picked.note else ""
        picked = replace(picked, note=f"{note}chosen by the project")
        chosen = dict.fromkeys(chosen, picked)
    return chosen


def choose_policy(
    migrated_sources: Iterable[str], tolerance: Mapping[str, Any] | None = None
) -> Policy:
    """bf16 when the migrated program may compute in reduced precision on the target
    (unless the project's ``tolerance`` names the policy: ``policies_for``).

    The reference shim disables CUDA autocast (as a CPU-only torch does), so an
    original that autocasts ran in fp32 while its migration autocasts on the
    emulated device: any autocast or bfloat16/float16 in the migrated program's
    files means the two runs differ by rounding, and the looser policy applies.
    """
    uses_low_precision = any(_BF16.search(text) for text in migrated_sources)
    own = "bf16" if uses_low_precision else "fp32"
    return replace(policies_for(tolerance)[own], own=own)


@dataclass
class Parity:
    compared: str  # "losses" | "outputs" | "nothing"
    steps: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    worst_step: int | None = None
    holds: bool = False
    per_step: list[dict[str, float]] = field(default_factory=list)
    note: str = ""
    ranks: int = 1  # processes compared, rank i of the original against rank i of the port


def _close(a: float, b: float, policy: Policy) -> tuple[bool, float, float]:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b), math.inf, math.inf
    diff = abs(a - b)
    rel = diff / abs(b) if b else (0.0 if diff == 0 else math.inf)
    return diff <= policy.atol + policy.rtol * abs(b), diff, rel


def compare_series(reference: list[float], target: list[float], policy: Policy) -> Parity:
    """Step-by-step comparison of two loss trajectories (the first max_steps)."""
    n = min(len(reference), len(target), policy.max_steps)
    parity = Parity("losses", steps=n, holds=n > 0)
    for i in range(n):
        ok, diff, rel = _close(target[i], reference[i], policy)
        parity.per_step.append({"step": i + 1, "reference": reference[i], "target": target[i]})
        if diff > parity.max_abs or parity.worst_step is None:
            parity.max_abs, parity.worst_step = max(parity.max_abs, diff), i + 1
        parity.max_rel = max(parity.max_rel, rel)
        parity.holds = parity.holds and ok
    if len(reference) != len(target):
        parity.note = f"the reference recorded {len(reference)} losses, the target {len(target)}"
    return parity


def _losses_by_rank(result: dict[str, Any]) -> dict[int, list[float]]:
    return {
        r["rank"]: list(r.get("losses") or [])
        for r in result.get("ranks") or []
        if isinstance(r.get("rank"), int)
    }


def compare_ranks(reference: dict[str, Any], target: dict[str, Any], policy: Policy) -> Parity:
    """Each rank's losses against the same rank's in the other run (DDP ranks train on
    different data, so rank 0 alone proves little); one series where neither run had two
    ranks (or one recorded none). A port that ran fewer ranks than the original (one where
    it trained two) fails, naming both: its rank 0 may match by itself."""
    ref, tgt = _losses_by_rank(reference), _losses_by_rank(target)
    if (len(ref) < 2 and len(tgt) < 2) or not ref or not tgt:
        return compare_series(reference["losses"], target["losses"], policy)
    if set(ref) != set(tgt):
        return Parity(
            "losses", note=f"the original ran ranks {sorted(ref)}, the port {sorted(tgt)}"
        )
    each = {rank: compare_series(ref[rank], tgt[rank], policy) for rank in sorted(ref)}
    worst_rank, worst = max(each.items(), key=lambda item: (not item[1].holds, item[1].max_abs))
    parity = Parity(
        "losses",
        steps=min(p.steps for p in each.values()),
        max_abs=worst.max_abs,
        max_rel=max(p.max_rel for p in each.values()),
        worst_step=worst.worst_step,
        holds=all(p.holds for p in each.values()),
        per_step=[{**row, "rank": rank} for rank, p in each.items() for row in p.per_step],
        note="; ".join(f"rank {rank}: {p.note}" for rank, p in each.items() if p.note),
        ranks=len(each),
    )
    if not parity.holds and not parity.note:
        parity.note = (
            f"rank {worst_rank} differs under the {policy.label} policy: worst at step "
            f"{worst.worst_step}, abs {worst.max_abs:.3g}, rel {worst.max_rel:.3g}"
        )
    return parity


def compare_outputs(
    reference: list[dict[str, Any]], target: list[dict[str, Any]], policy: Policy
) -> Parity:
    """Inference programs: shapes must be equal, summary statistics close."""
    flat_ref: list[float] = []
    flat_tgt: list[float] = []
    for r, t in zip(reference, target, strict=False):
        if r.get("shape") != t.get("shape"):
            return Parity(
                "outputs", note=f"output shapes differ: {r.get('shape')} vs {t.get('shape')}"
            )
        for key in ("mean", "std", "abs_max"):
            flat_ref.append(float(r.get(key, 0.0)))
            flat_tgt.append(float(t.get(key, 0.0)))
    every = replace(policy, max_steps=10**6)
    parity = compare_series(flat_ref, flat_tgt, every)
    parity.compared, parity.steps = "outputs", min(len(reference), len(target))
    parity.per_step = []
    return parity


@dataclass
class Verification:
    verdict: str
    reason: str
    policy: str = ""
    parity: Parity | None = None
    reference: dict[str, Any] | None = None
    target: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None  # the target run, for diagnose
    # What a verdict holds only up to: "both runs then fail the same way at train.py:41: ..."
    caveat: str = ""
    # Where the verification's wall time went (verify_pair.timings); empty when nothing ran
    timings: dict[str, Any] = field(default_factory=dict)
    # The differential check at the kernel call sites the migration replaced
    # (agents.kernel_check); None when it replaced none
    kernel_check: dict[str, Any] | None = None
    # The policy torchport would have chosen (``policy`` may be one the configuration named)
    own_policy: str = ""
    # What the verdict was judged under that is looser than torchport's defaults, and who
    # set it (agents.loosening); also at the head of ``reason`` for a ``verified``
    loosened: list[str] = field(default_factory=list)
    # tpu, torchrun: the port's launch command as its launch line has it, when that line takes
    # TorchTPU's launch step first (agents.port_launch); the port's run took the step too
    launch: str = ""
    # The two precision checks of a port (agents.precision_check): "highest" (the port
    # against the original, exact float32 matmuls) and "default" (the TPU's own arithmetic
    # against "highest", or why it was not run); None when the migration was not run
    precision: dict[str, Any] | None = None
    # What of torchport's was on a failing run's path (agents.attribution), when something
    # was: the failure is then not the program's, and ``reason`` says so first
    attribution: dict[str, str] | None = None
    # The original's lines repaired for current PyTorch, as the port has them
    # (agents.legacy_repair): each a dict of ``Repair``
    legacy_repairs: list[dict[str, Any]] = field(default_factory=list)
    # Files of installed libraries the port ran with ported (agents.library_patch): each a
    # dict of ``Patch``; the verdict holds only with them
    library_patches: list[dict[str, Any]] = field(default_factory=list)
    # What the user can do next (the attribution's step, or the diagnosed signature's hint)
    next_step: str = ""
    # Where a port whose losses differ first computes something else (agents.divergence:
    # ``Divergence`` as a dict), or why that could not be found; None when not looked for
    divergence: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _brief(result: dict[str, Any] | None) -> dict[str, Any] | None:
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
    return {
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


def _error_text(result: dict[str, Any]) -> str:
    """The error as a reason says it: the type and the message's first line (the whole
    message and traceback stay in the run's JSON)."""
    error = result.get("error") or {}
    return f"{error.get('type', '?')}: {attribution.first_line(error.get('message', ''))}".strip()


def _full_error(result: dict[str, Any]) -> str:
    error = result.get("error") or {}
    return f"{error.get('type', '?')}: {error.get('message', '')}"


# Every refusal and build failure of torchport's CPU runner for CUDA kernels says this.
RUNNER_REFUSAL = "torchport's CPU runner for CUDA kernels"


def judge(
    reference: dict[str, Any] | None,
    target: dict[str, Any],
    policy: Policy,
    mode: str,
    imports: frozenset[str] | None = None,
) -> Verification:
    """The verdict for one pair of runs (``reference`` None: the original was not run).
    ``imports``: the modules the programs import themselves (``attribution.imported_names``),
    so a package only torchport's environment has is told from one the program asks for.
    Every verdict short of ``verified`` comes with its ``next_step``."""
    v = _judged(reference, target, policy, mode, imports)
    if v.verdict != Verdict.VERIFIED and not v.next_step:
        v.next_step = next_step(v, reference, target, mode)
    return v


# What to do after a ``ran`` verdict, by the start of its reason.
RAN_STEPS = {
    "it ran, but on the CPU": "move the model and its inputs to the device (torchport scan "
    "names the lines that choose the CPU)",
    "the original was not run": "give the entry command (--entry) so the original runs too",
    "neither a loss nor": "run a training entry point: torchport compares the losses of "
    "optimizer steps (or the outputs of forward calls) it sees",
    "the original could not run on the CPU reference": "verify the kernels' replacements on "
    "the real device; torchport's CPU runner cannot run them",
}


def next_step(
    v: Verification, reference: dict[str, Any] | None, target: dict[str, Any], mode: str
) -> str:
    """The next step after a verdict short of ``verified``: the hint of the failing run's
    diagnosed signature (the original's when it failed), or the ``RAN_STEPS`` entry."""
    failing = v.failure or next(
        (r for r in (reference, target) if r is not None and r.get("status") != "ok"), None
    )
    if failing is not None:
        found = diagnose(failing, mode if mode in TARGETS else "accelerator")
        library = attribution.library_site(failing)
        if library and found.signature in _cuda_signatures():
            return (
                f"the CUDA use is in an installed library ({library}), and torchport ports "
                "the repository's files only: install a release of that library that takes "
                "its device from the caller, or port that line by hand"
            )
        return found.hint
    return next((step for head, step in RAN_STEPS.items() if v.reason.startswith(head)), "")


def _judged(
    reference: dict[str, Any] | None,
    target: dict[str, Any],
    policy: Policy,
    mode: str,
    imports: frozenset[str] | None,
) -> Verification:
    v = Verification(Verdict.FAILED, "", policy=policy.name, own_policy=policy.own)
    v.reference, v.target = _brief(reference), _brief(target)
    if reference is not None and reference.get("status") != "ok":
        return _judge_failed_original(v, reference, target, policy, mode, imports)
    if target.get("status") != "ok":
        return _judge_failed_port(v, target, imports)
    if _on_the_cpu(target):
        v.verdict = Verdict.RAN
        v.reason = f"it ran, but on the CPU: no operation reached the emulated {mode} device"
        return v
    if reference is None:
        v.verdict = Verdict.RAN
        v.reason = "the original was not run, so there is nothing to compare with"
        return v
    if reference.get("losses") and target.get("losses"):
        parity = compare_ranks(reference, target, policy)
    elif reference.get("outputs") and target.get("outputs"):
        parity = compare_outputs(reference["outputs"], target["outputs"], policy)
    else:
        v.verdict = Verdict.RAN
        v.reason = "neither a loss nor a model output was recorded in both runs to compare"
        v.parity = Parity("nothing")
        return v
    return _judge_parity(v, parity, reference, target, policy)


def _judge_failed_port(
    v: Verification, target: dict[str, Any], imports: frozenset[str] | None
) -> Verification:
    """The original ran, the port did not: only what differs between the two runs can be
    torchport's (the packages it hides from a target run, a sandbox that could not start
    the port); anything else is the port's failure."""
    blame = attribution.attribute(target, imports, ("own-environment", "sandbox-start"))
    if blame is not None:
        return _attributed(v, blame, "the migration", target)
    v.verdict, v.failure = Verdict.FAILED, target
    where = _failure_where(target)
    v.reason = f"{target.get('status')}: {f'{where}: ' if where else ''}{_error_text(target)}"
    return v


def _judge_parity(
    v: Verification,
    parity: Parity,
    reference: dict[str, Any],
    target: dict[str, Any],
    policy: Policy,
) -> Verification:
    """Both ran and recorded something to compare: ``verified`` when it matches."""
    v.parity = parity
    if parity.holds:
        v.verdict = Verdict.VERIFIED
        v.reason = (
            f"{parity.steps} {'steps' if parity.compared == 'losses' else 'outputs'} match the "
            f"original within the {policy.label} policy (max abs {parity.max_abs:.3g}, "
            f"max rel {parity.max_rel:.3g})"
        )
        if parity.ranks > 1:
            v.reason += f", on each of {parity.ranks} ranks"
        standins = reference.get("reference_standins") or []
        if standins:
            v.reason += (
                "; the original ran with pure-PyTorch stand-ins for CUDA-only APIs: "
                + ", ".join(standins)
            )
        if interpreted := interpreter_note(reference):
            v.reason += f"; {interpreted}"
        v.reason += kernel_runner_note(reference.get("cuda_kernel_runner") or [])
    else:
        v.verdict = Verdict.FAILED
        v.reason = parity.note or (
            f"parity does not hold under the {policy.label} policy: worst at "
            f"{'step' if parity.compared == 'losses' else 'output'} {parity.worst_step}, "
            f"abs {parity.max_abs:.3g}, rel {parity.max_rel:.3g}"
        )
        v.failure = {
            **target,
            "error": {"type": FailureKind.PARITY_MISMATCH, "message": v.reason, "frame": None},
        }
    return v


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


def _on_the_cpu(target: dict[str, Any]) -> bool:
    return (target.get("counters") or {}).get("ops") == 0


@cache
def _cuda_signatures() -> frozenset[str]:
    return frozenset(sig.id for sig in load_signatures() if sig.cuda)


def _needs_cuda(target: dict[str, Any], mode: str) -> bool:
    """The migration fails because CUDA is missing on the target (a CUDA construct the port
    kept, such as ``torch.cuda.CUDAGraph()``): that the original fails there too, on the
    reference shim, says nothing for the port, which would fail on the device as well."""
    found = diagnose(target, mode if mode in TARGETS else "accelerator")
    return found.signature in _cuda_signatures()


def _failure_site(result: dict[str, Any]) -> str:
    """Where a run failed: the user's frame as ``file:line``, or "" when it has none."""
    frame = (result.get("error") or {}).get("frame") or {}
    return f"{frame['file']}:{frame.get('line')}" if frame.get("file") else ""


def _failure_where(result: dict[str, Any]) -> str:
    """The user's frame for a reason, and the installed library's line it called into
    when the failure is there (``engine.py:38, in timm/data/mixup.py:19``)."""
    where, library = _failure_site(result), attribution.library_site(result)
    return f"{where}, in {library}" if where and library else where or library


def _fails_identically(reference: dict[str, Any], target: dict[str, Any]) -> bool:
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
    v: Verification, blame: attribution.Attribution, which: str, result: dict[str, Any]
) -> Verification:
    """``not-runnable`` for a failure torchport caused (``blame``): the reason says what of
    torchport's did it and the next step, never that ``which`` run's program fails."""
    v.verdict, v.attribution, v.next_step = Verdict.NOT_RUNNABLE, blame.to_json(), blame.next_step
    if blame.kind == "sandbox-start":
        v.reason = f"torchport could not run {which}: {blame.sentence()}"
        return v
    where = _failure_site(result)
    v.reason = f"{blame.sentence()} ({which} failed{f' at {where}' if where else ''})"
    return v


def _judge_failed_original(
    v: Verification,
    reference: dict[str, Any],
    target: dict[str, Any],
    policy: Policy,
    mode: str,
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
        v.verdict, v.reason = (
            Verdict.NOT_RUNNABLE,
            f"torchport could not run the original: {failure}",
        )
        return v
    if target.get("status") == "ok" and RUNNER_REFUSAL in _full_error(reference):
        return _beyond_the_runner(v, target, mode, failure)
    ref_losses, tgt_losses = reference.get("losses") or [], target.get("losses") or []
    parity = compare_series(ref_losses, tgt_losses, policy) if ref_losses and tgt_losses else None
    same = _fails_identically(reference, target)
    matched = parity is not None and parity.holds and len(ref_losses) == len(tgt_losses)
    if same and _needs_cuda(target, mode):
        v.verdict, v.parity, v.failure = Verdict.FAILED, parity, target
        v.reason = (
            f"the original fails here too: {failure}; the migration fails the same way on "
            "the target, for want of CUDA: it still needs CUDA there"
        )
        return v
    if same and matched and not _on_the_cpu(target):
        v.verdict, v.parity = Verdict.VERIFIED, parity
        v.caveat = f"both runs then fail the same way at {failure}"
        if blame is not None:
            v.attribution, v.next_step = blame.to_json(), blame.next_step
            v.caveat += f": {blame.sentence()}"
        v.reason = (
            f"{parity.steps} steps match the original within the {policy.label} policy "
            f"(max abs {parity.max_abs:.3g}, max rel {parity.max_rel:.3g}); {v.caveat}"
        )
        return v
    if blame is not None:
        v.parity = parity
        return _attributed(v, blame, "the original", reference)
    return _original_fails(v, parity, target, failure, same)


def _beyond_the_runner(
    v: Verification, target: dict[str, Any], mode: str, failure: str
) -> Verification:
    """The original's kernels are beyond torchport's CPU runner: no reference numbers, as
    for an original that was not run; the runner's reason says what it refused."""
    v.verdict = Verdict.RAN
    v.reason = f"the original could not run on the CPU reference: {failure}"
    if _on_the_cpu(target):
        v.reason += f"; the migration ran, but on the CPU, not the emulated {mode} device"
    else:
        v.reason += "; the migration ran, with nothing to compare it with"
    return v


def _original_fails(
    v: Verification, parity: Parity | None, target: dict[str, Any], failure: str, same: bool
) -> Verification:
    """The original's own failure, nothing of torchport's on its path: ``not-runnable``,
    saying so first, then how far the migration got."""
    v.verdict, v.parity = Verdict.NOT_RUNNABLE, parity
    if target.get("status") == "ok":
        v.reason = f"the original fails here, the migration does not: {failure}"
        return v
    v.reason = f"the original fails here too: {failure}"
    if not same:
        v.failure = target  # the migration's own failure, for a diagnosis in the report
        v.reason += f"; the migration fails otherwise: {_error_text(target)}"
    if parity is not None:
        held = "match" if parity.holds else "do not match"
        v.reason += f"; the {parity.steps} steps both ran {held}"
    return v


_RANKS = {Verdict.VERIFIED: 4, Verdict.RAN: 3, Verdict.NOT_RUNNABLE: 0}  # FAILED: 1 or 2


def rank(verification: dict[str, Any]) -> int:
    """How far a migration got, to keep the best of several rounds (higher is better)."""
    verdict = verification.get("verdict")
    if verdict == Verdict.FAILED:
        error = ((verification.get("failure") or {}).get("error")) or {}
        return 2 if error.get("type") in FailureKind.numeric() else 1
    return _RANKS.get(str(verdict), 0)


def run_program(
    root: Path,
    argv: list[str],
    mode: str,
    budget: RunLimits,
    preload: tuple[str, ...] = (),
    progress: Callable[[dict[str, Any]], None] | None = None,
    site_paths: tuple[str, ...] = (),
    record_sites: tuple[str, ...] = (),
    matmul_precision: str | None = None,
    launch_step: bool = False,
    trace: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One sandboxed run as plain data (a harness that cannot start is a failed run).
    ``matmul_precision``: pinned on the emulated device (``RunSpec``), or None;
    ``launch_step``: TorchTPU's launch step runs in torchrun's parent first; ``trace``:
    ``sandbox.module_trace``'s settings."""
    dist = torchrun_parts(argv)
    spec = RunSpec(
        launch_step=launch_step,
        preload=preload,
        # at least one device per local rank, as each rank sets its own
        devices=max(budget.devices, dist.nproc if dist is not None and dist.nproc else 1),
        root=root,
        command=argv,
        mode=mode,
        steps=budget.steps,
        forwards=budget.forwards,
        seed=budget.seed,
        timeout_s=budget.timeout_s,
        memory_mb=budget.memory_mb,
        isolation=budget.isolation,
        progress=progress,
        site_paths=tuple(Path(p) for p in site_paths),
        record_sites=record_sites,
        matmul_precision=matmul_precision,
        lower_args=budget.lower_args,
        trace=trace,
    )
    try:
        return run(spec).to_json()
    except RunError as exc:
        return {
            "status": "failed",
            "exit_code": None,
            "error": {"type": FailureKind.RUN_ERROR, "message": str(exc), "frame": None},
        }


def _python_texts(tree: Path) -> Iterator[str]:
    """The text of each Python file of ``tree`` (a copy of the repository, on the host) that
    ``safepath`` reads: a ``.py`` link out of the tree or to ``/dev/zero`` is no source."""
    for path in tree.rglob("*.py"):
        try:
            yield read_inside(tree, path.relative_to(tree)).decode("utf-8", "replace")
        except OSError:
            continue


def tree_digest(root: Path) -> str:
    """A digest of every file's path and bytes under ``root`` (what a run can see).

    A path is hashed as the bytes of its name (``os.fsencode``): a name that is not
    UTF-8 is as much a file as any other."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root)
        if _NOT_COPIED.intersection(rel.parts):
            continue  # the harness does not copy these into the run either
        digest.update(os.fsencode(rel) + b"\0")
        file_digest = hashlib.sha256()
        digest_regular(path, file_digest)  # streamed: a file of any size, not held whole
        digest.update(file_digest.digest())
    return digest.hexdigest()


@cache
def sandbox_digest() -> str:
    """What the reference run's numbers also depend on: torchport's own sandbox code (the
    shim, the step budget, the stand-ins). A cached run from another version is stale."""
    return tree_digest(Path(__file__).resolve().parents[1] / "sandbox")


@cache
def interpreter_versions() -> dict[str, str | None]:
    """The kernel interpreters the reference run has (Triton's, from the ``triton`` extra):
    with one installed, upgraded or removed, an original's kernels run (or fail) otherwise."""
    try:
        return {"triton": importlib.metadata.version("triton")}
    except importlib.metadata.PackageNotFoundError:
        return {"triton": None}


def reference_run(
    root: Path,
    argv: list[str],
    budget: RunLimits,
    cache: Path | None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    site_paths: tuple[str, ...] = (),
    record_sites: tuple[str, ...] = (),
) -> dict:
    """The original's run on the reference shim, reused when nothing it depends on changed.

    The original is read only and runs with fixed seeds, so its numbers depend only on
    its files, the command and the budget: migrating one repository to several
    targets (or resuming, or re-running an evaluation) runs it once. A failed run is
    not cached (it may have been the machine's fault). ``record_sites``: the kernel call
    sites whose arguments the run records for the differential check (``kernel_check``).
    """
    parts = [tree_digest(root), argv, asdict(budget), *site_paths, sandbox_digest()]
    parts += [interpreter_versions(), list(record_sites)]
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]
    path = cache / f"{key}.json" if cache is not None else None
    if path is not None and path.is_file():
        try:
            return {**json.loads(path.read_text()), "cached": True}
        except (OSError, ValueError):
            pass
    result = run_program(
        root,
        argv,
        "reference",
        budget,
        progress=progress,
        site_paths=site_paths,
        record_sites=record_sites,
    )
    if path is not None and result.get("status") == "ok":
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(result, default=str))
    return result


def verify_tree(
    source: Path,
    tree: Path,
    argv: list[str],
    target: str,
    budget: RunLimits,
    cache: Path | None,
    preload: tuple[str, ...] = (),
    reference: dict[str, Any] | None = None,
    say: Callable[[str], None] = lambda message: None,
    environment: dict[str, Any] | None = None,
    together: bool | None = None,
    tolerance: Mapping[str, Any] | None = None,
) -> tuple[Verification, dict[str, Any] | None]:
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
        return Verification(Verdict.NOT_RUNNABLE, why), reference
    mode = MODE_FOR_TARGET[target] or "plain"
    say = verify_pair.serialised(say)
    plan = _schedule(budget, together)
    given, step = reference, _stepped_launch(tree, argv, mode)

    def original_at(root: Path) -> dict[str, Any]:
        say("verifying: running the original on the CUDA reference shim")
        progress = _steps(say, "original", budget)
        recorded = kernel_check.record_specs(kernel_check.discover(source))
        return reference_run(root, argv, budget, cache, progress, site_paths, recorded)

    migrated = _migration(tree, argv, mode, budget, (preload, site_paths), say, bool(step))
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
    judged = judge(reference, run, policy, mode, imports)
    v = _named(judged, environment, target, source, (renamed, reference))
    checks = (plan, policies_for(tolerance))
    v = _sites_checked(v, source, tree, (reference, run), mode, budget, site_paths, checks, say)
    v, again = with_precision_checks(v, target, run, lambda: migrated(None))
    done = time.perf_counter()
    got = "given" if given is not None else ("cache" if reference.get("cached") else "run")
    compare = done - ran - (again[1] if again else 0.0)
    v.timings, v.launch = verify_pair.timings(pair, got, compare, done - started, plan, again), step
    traced = _with_divergence(v, (source, tree), argv, mode, budget, site_paths, policy, say)
    return traced, reference


def _with_divergence(
    v: Verification,
    trees: tuple[Path, Path],
    argv: list[str],
    mode: str,
    budget: RunLimits,
    site_paths: tuple[str, ...],
    policy: Policy,
    say: Callable[[str], None],
) -> Verification:
    """A port whose losses differ from the original's (``ParityMismatch``, judged under
    ``policy``, the verification's own), or whose
    training differs at the TPU's arithmetic (``PrecisionSensitive``): where it first
    computes otherwise (``agents.divergence``), in its reason, its next step and the failure
    that diagnosis reads."""
    kind = (v.failure or {}).get("error", {}).get("type")
    if v.verdict != Verdict.FAILED or kind not in (
        FailureKind.PARITY_MISMATCH,
        FailureKind.PRECISION_SENSITIVE,
    ):
        return v
    source, tree = trees
    exact = precision_check.HIGHEST if mode in EMULATED else None
    fp32 = policies()["fp32"]
    if kind == FailureKind.PARITY_MISMATCH:
        step = first_differing_step(v.parity, policy)
        sides = ((source, "reference", None), (tree, mode, exact))
        names = ("original", "port")
    else:  # the port against itself: exact float32 matmuls, then the TPU's own
        rows = ((v.precision or {}).get("default") or {}).get("per_step") or []
        policy, step = fp32, first_step_apart(rows, fp32, ("highest", "default")) or 1
        sides, names = ((tree, mode, exact), (tree, mode, None)), ("exact run", "default run")
    if step is None:
        return v
    say(f"verifying: tracing every module at step {step} on both sides")

    def traced(root: Path, run_mode: str, precision: str | None, trace: dict) -> dict[str, Any]:
        limits = replace(budget, steps=step + 1)  # the same forward budget as the runs compared
        return run_program(
            root, argv, run_mode, limits, (), None, site_paths, (), precision, False, trace
        )

    started = time.perf_counter()
    found = divergence_runs.find(sides, step, policy, traced, names)
    seconds = round(time.perf_counter() - started, 3)
    if v.timings:
        v.timings["divergence"] = {"seconds": seconds}
        v.timings["total_s"] = round(v.timings["total_s"] + seconds, 3)
    return _told_divergence(v, found, mode)


def first_step_apart(
    rows: list[dict[str, Any]], policy: Policy, keys: tuple[str, str] = ("reference", "target")
) -> int | None:
    """The first step (rank 0's, where ranks ran) whose two losses, ``keys`` of each row,
    differ beyond ``policy``."""
    for row in rows:
        if row.get("rank", 0) in (0, None) and not _close(row[keys[1]], row[keys[0]], policy)[0]:
            return int(row["step"])
    return None


def first_differing_step(parity: Parity | None, policy: Policy) -> int | None:
    """The step to trace for a parity failure: the first whose losses differ; for an
    inference program whose outputs differ, 1 (its forward calls before any optimizer step
    are traced)."""
    if parity is None:
        return None
    if parity.compared == "outputs" and not parity.holds:
        return 1
    return first_step_apart(parity.per_step, policy)


def _told_divergence(v: Verification, found: dict[str, Any], mode: str) -> Verification:
    """The divergence in the reason and in the failure diagnosis reads (a port line as
    its frame), and the next step the diagnosis then gives."""
    v.divergence = found
    v.reason += f"; first divergence: {found['summary']}"
    if v.failure is None:
        return v
    v.failure["error"] = {**v.failure["error"], "message": v.reason}
    if found.get("blame") == "port" and found.get("port_lines"):
        where, line = found["where"].rpartition(":")[0], found["port_lines"][0]
        v.failure["error"]["frame"] = {"file": where, "line": line, "function": found.get("cls")}
    v.next_step = next_step(v, None, v.failure, mode)
    return v


def _legacy_repaired(
    pair: verify_pair.Pair,
    runnable: Path,
    tree: Path,
    runs: tuple[Callable[[Path], dict[str, Any]], Callable[..., dict[str, Any]]],
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
    environment: dict[str, Any],
    target: str,
    source: Path,
    original: tuple[Any, dict[str, Any]],
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
        v.reason += f"; {original_keyword.note(renamed)}"
    v = _with_repairs(v, reference)
    return v


def _with_repairs(v: Verification, reference: dict[str, Any]) -> Verification:
    """The verdict with the lines the original ran repaired (``agents.legacy_repair``)."""
    repaired = reference.get("legacy_repairs")
    if not repaired:
        return v
    frame = (reference.get("error") or {}).get("frame") or {}
    failed_at = (frame.get("file"), frame.get("line")) if frame else None
    v.legacy_repairs = list(repaired)
    v.reason += f"; {legacy_repair.note(repaired, failed_at)}"
    return v


def _migration(
    tree: Path,
    argv: list[str],
    mode: str,
    budget: RunLimits,
    paths: tuple[tuple[str, ...], tuple[str, ...]],
    say: Callable[[str], None],
    launch_step: bool = False,
) -> Callable[..., dict[str, Any]]:
    """The migration's run on the emulated device: with exact float32 matmuls unless
    called with ``precision`` None (the TPU's own arithmetic). ``paths``: the preloaded
    modules and the dependency overlay's folders; ``launch_step``: TorchTPU's launch step
    first (``_stepped_launch``)."""
    preload, site_paths = paths
    exact = precision_check.HIGHEST if mode in EMULATED else None

    def migrated(precision: str | None = exact) -> dict[str, Any]:
        at = "" if precision else " at the TPU's default matmul precision"
        say(f"verifying: running the migration on the emulated {mode} device{at}")
        progress = _steps(say, f"migration{at}", budget)
        return run_program(
            tree, argv, mode, budget, preload, progress, site_paths, (), precision, launch_step
        )

    return migrated


def with_precision_checks(
    v: Verification,
    target: str,
    highest: dict[str, Any],
    at_default: Callable[[], dict[str, Any]],
) -> tuple[Verification, tuple[dict[str, Any], float] | None]:
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
    v.precision = {"highest": _highest_summary(v), "default": check.to_json()}
    if check.holds is False:
        v.verdict, at_highest = Verdict.FAILED, v.reason
        v.reason = f"{precision_check.reason(check)}. At highest precision: {at_highest}"
        error = {"type": FailureKind.PRECISION_SENSITIVE, "message": v.reason, "frame": None}
        v.failure = {**(again[0] if again else highest), "error": error}
    elif check.ran:
        v.reason += f"; {precision_check.reason(check)}"
    elif target == precision_check.TARGET and v.verdict == Verdict.VERIFIED:
        v.reason += f"; not run again at the TPU's default matmul precision: {skip}"
    return v, again


def _highest_summary(v: Verification) -> dict[str, Any]:
    """Check (a) as the report shows it beside check (b): the port, with every float32
    matmul exact, against the original under the verdict's policy."""
    parity = v.parity
    summary: dict[str, Any] = {"matmul_precision": precision_check.HIGHEST, "policy": v.policy}
    if parity is not None:
        summary.update(
            compared=parity.compared,
            steps=parity.steps,
            max_abs=parity.max_abs,
            max_rel=parity.max_rel,
            holds=parity.holds,
        )
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


def _site_paths(environment: dict[str, Any]) -> tuple[str, ...]:
    """The dependency overlay's folders, as the programs' sys.path gets them: the packages
    with installed files ported (``agents.library_patch``), if any, first."""
    paths = [environment.get("patched_site"), environment.get("path")]
    return tuple(p for p in [*paths, *environment.get("site_paths", [])] if p)


def _sites_checked(
    v: Verification,
    source: Path,
    tree: Path,
    runs: tuple[dict[str, Any], dict[str, Any]],
    mode: str,
    budget: RunLimits,
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
    checked = _check_sites(source, tree, replaced, reference, mode, budget, site_paths, checks)
    return with_kernel_check(v, checked, run)


def _check_sites(
    source: Path,
    tree: Path,
    sites: list[Any],
    reference: dict[str, Any],
    mode: str,
    budget: RunLimits,
    site_paths: tuple[str, ...],
    checks: tuple[verify_pair.Schedule, dict[str, Policy]],
) -> kernel_check.KernelCheck:
    """The differential check's two sandboxed runs: the verifier's limits, no step budget
    (the driver trains nothing), together when the machine has room for both."""
    unbudgeted = replace(budget, steps=None, forwards=None)
    plan, policy_set = checks

    def runner(root: Path, run_mode: str) -> dict[str, Any]:
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

    def both(original: Any, port: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        pair = verify_pair.run_both(original, port, plan.together)
        return pair.reference, pair.migrated

    return kernel_check.check(source, tree, sites, reference, mode, runner, policy_set, both)


def _both_ran(reference: dict[str, Any], target: dict[str, Any]) -> bool:
    return (
        reference.get("status") == "ok" and target.get("status") == "ok" and not _on_the_cpu(target)
    )


def with_kernel_check(
    v: Verification, checked: kernel_check.KernelCheck, target: dict[str, Any]
) -> Verification:
    """The verdict with the differential check's: a kernel site that computes otherwise
    fails the migration whatever its losses did, and the reason names the site first (it is
    the more precise evidence); a check that holds, or compared nothing, says so."""
    v.kernel_check = checked.to_json()
    if checked.holds is False:
        losses = ""
        if v.parity is not None and v.parity.steps:
            held = "match" if v.parity.holds else "do not match either"
            losses = f"; the program's {v.parity.steps} losses {held}"
        v.verdict = Verdict.FAILED
        v.reason = checked.reason + losses
        v.failure = {
            **target,
            "error": {
                "type": FailureKind.KERNEL_MISMATCH,
                "message": checked.reason,
                "frame": checked.frame,
            },
        }
        return v
    v.reason += f"; {checked.reason}"
    return v


def _schedule(budget: RunLimits, together: bool | None) -> verify_pair.Schedule:
    if together is not None:
        return verify_pair.Schedule(
            together, f"{'together' if together else 'one after the other'}: as asked"
        )
    return verify_pair.schedule(
        budget.memory_mb, verify_pair.memory_available_mb(), verify_pair.cores()
    )


_NO_MODULE = re.compile(r"No module named '([^']+)'")


def name_missing_dependency(v: Verification, environment: dict[str, Any]) -> Verification:
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
        v.verdict, v.failure = Verdict.NOT_RUNNABLE, None
        original_failed = bool(v.reference) and v.reference.get("status") != "ok"
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
        v.attribution, v.next_step = blame.to_json(), blame.next_step
        v.reason = f"{blame.cause}: {blame.evidence}" + ("" if step else f"; {HOW_TO_PROVIDE}")
        return v
    return v


def _steps(
    say: Callable[[str], None], which: str, budget: RunLimits
) -> Callable[[dict[str, Any]], None]:
    def report(event: dict[str, Any]) -> None:
        loss = event.get("loss")
        shown = f", loss {loss:.5g}" if isinstance(loss, float) else ""
        say(f"verifying: {which} step {event.get('step')}/{budget.steps}{shown}")

    return report


def unsupported_target(target: str) -> str | None:
    """Why a target's code cannot run in this sandbox at all, or None."""
    mode = MODE_FOR_TARGET.get(target)
    if target == "xla" and importlib.util.find_spec("torch_xla") is None:
        return (
            "PyTorch/XLA code needs torch_xla, which is not installed in the sandbox and has "
            "no emulator here; the migration was checked statically only"
        )
    if mode is None and target != "xla":
        return f"no emulated device for target {target!r}"
    return None
