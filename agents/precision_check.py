"""The verifier's second run of a ``tpu`` port: at the TPU's default matmul arithmetic.

A TPU computes float32 matmul-class ops as bf16 passes on its MXU unless the program asks
for more (``Precision.DEFAULT``: inputs rounded to bfloat16, float32 accumulation;
TorchTPU maps ``torch.set_float32_matmul_precision`` onto it, ``sandbox/data/
torch_tpu.toml`` ``[precision]``). The verifier therefore checks a port twice:

(a) at ``highest`` (``RunSpec.matmul_precision``: exact float32 matmuls), against the
    original under the ``fp32``/``bf16`` policy: a difference there is the port's bug;
(b) at TorchTPU's own arithmetic (``matmul_precision=None``: the program's settings, else
    DEFAULT), against (a) under the ``tpu_default`` policy: a divergence beyond it, a
    NaN or infinity (a) does not have, or a loss that stops falling where (a)'s falls
    says the program's training is sensitive to the TPU's default arithmetic.

Where it matters (``why_not``): run (b) only for target ``tpu`` (the one target whose
device computes float32 matmuls in bf16 by default; ``accelerator`` code runs on the
emulated tpu device as a stand-in for whichever accelerator, and neuron's emulator is
exact), only when (a) verified the port (a port that already failed, or was not compared,
gets nothing from a second run: its verdict cannot get better and its bug is (a)'s to
fix), and only when a matmul-class op reached the device in (a) (no matmul, nothing the
precision could change: the run would cost a whole program's time to learn that). The
second run is one more run of the migrated program, so it adds about a migrated run's
wall time to a verification that needs it (``timings["default_precision"]``).

A port whose (b) fails is ``failed`` (error ``PrecisionSensitive``), never ``verified``:
``verified`` means it runs on TorchTPU, and on TorchTPU the program, as ported, trains
at DEFAULT; its losses there are not the original's. The reason names the fix a
faithful port makes (``torch.set_float32_matmul_precision("highest")``, which TorchTPU
maps to ``Precision.HIGHEST``), and the rewrite loop can make it.
"""

from __future__ import annotations

import importlib.resources
import math
import tomllib
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import cast

from .run_record import OUTPUT_STATS, OutputStats, RunRecord
from .verdicts import Verdict
from .verification_records import DefaultCheckRecord

# What verification run (a) pins on every emulated device: exact float32 matmuls.
HIGHEST = "highest"
# The only target whose device computes float32 matmuls as bf16 passes by default.
TARGET = "tpu"
# ATen ops (as the emulator's ``ops_by_name`` counts them, forward and backward) whose
# float32 inputs the TPU's DEFAULT precision rounds: mm, bmm, addmm, linear, conv,
# einsum, SDPA's matmuls, baddbmm and batched matmul all reach the device as one of these.
MATMUL_CLASS = frozenset(
    {
        "mm",
        "bmm",
        "addmm",
        "addbmm",
        "baddbmm",
        "_addmm_activation",
        "addmv",
        "mv",
        "dot",
        "vdot",
        "matmul",
        "linear",
        "einsum",
        "convolution",
        "_convolution",
        "convolution_backward",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
    }
)


@dataclass(frozen=True)
class DefaultPolicy:
    """How far (b) may be from (a) (numpy's isclose over the first ``max_steps``), and how
    much of (a)'s fall in loss over all the steps compared (b) must keep
    (``min_progress``) to count as training."""

    rtol: float
    atol: float
    max_steps: int
    min_progress: float
    name: str = "tpu_default"


@cache
def default_policy() -> DefaultPolicy:
    """``[tpu_default]`` of ``agents/data/tolerance.toml`` (measured: see its comments)."""
    text = importlib.resources.files("torchport.agents").joinpath("data/tolerance.toml")
    numbers = tomllib.loads(text.read_text(encoding="utf-8"))[DefaultPolicy.name]
    return DefaultPolicy(**numbers)


def matmul_ops(run: RunRecord | None) -> int:
    """How many matmul-class ops a run put on the emulated device."""
    by_name = ((run or {}).get("counters") or {}).get("ops_by_name") or {}
    return sum(n for name, n in by_name.items() if name in MATMUL_CLASS)


def why_not(target: str, verdict: str, highest: RunRecord | None) -> str:
    """Why run (b) is not worth its run for this port ("" when it is; see the module doc)."""
    if target != TARGET:
        return f"only a {TARGET} device computes float32 matmuls as bf16 passes by default"
    if verdict != Verdict.VERIFIED:
        return f"the check at highest precision did not verify the port ({verdict})"
    if not matmul_ops(highest):
        return "no matmul-class op reached the device: the TPU's default precision changes nothing"
    return ""


@dataclass
class DefaultCheck:
    """Run (b) against run (a): what was compared and what was found."""

    ran: bool
    holds: bool | None = None  # None: not run, or nothing to compare
    why: str = ""  # why it did not run, or what failed
    policy: str = DefaultPolicy.name
    compared: str = "nothing"
    steps: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    nonfinite: bool = False
    stalled: bool = False
    matmul_ops: int = 0
    per_step: list[dict[str, float]] = field(default_factory=list)

    def to_json(self) -> DefaultCheckRecord:
        return cast("DefaultCheckRecord", asdict(self))


def _fall(losses: list[float]) -> float:
    return losses[0] - losses[-1] if len(losses) > 1 else 0.0


def judge(highest: RunRecord, default: RunRecord, policy: DefaultPolicy) -> DefaultCheck:
    """(b) against (a), both runs of the migrated program (``default`` ran at TorchTPU's
    own arithmetic). Losses: step by step, then NaN/inf, then the fall in loss; outputs of
    an inference program: their statistics."""
    check = DefaultCheck(ran=True, matmul_ops=matmul_ops(highest))
    if default.get("status") != "ok" and not _same_failure(highest, default):
        error = default.get("error") or {}
        check.holds = False
        check.why = (
            f"it stops at the TPU's default precision ({default.get('status')}: "
            f"{error.get('type', '?')}: {error.get('message', '')})"
        )
        return check
    a, b = list(highest.get("losses") or []), list(default.get("losses") or [])
    if a and b:
        check.compared = "losses"
        pairs = list(zip(a, b, strict=False))
        check.per_step = [
            {"step": i + 1, "highest": x, "default": y} for i, (x, y) in enumerate(pairs)
        ]
    else:
        pairs = _output_pairs(highest.get("outputs") or [], default.get("outputs") or [])
        check.compared = "outputs" if pairs else "nothing"
    if not pairs:
        check.why = "neither run recorded a loss or an output to compare"
        return check
    check.steps = len(pairs)
    # the deviation over the first max_steps (bf16 rounding moves a trajectory further
    # with every step); NaN and the fall in loss over every step compared
    check.max_abs, check.max_rel, close = _deviation(pairs[: policy.max_steps], policy)
    check.nonfinite = any(math.isfinite(x) and not math.isfinite(y) for x, y in pairs)
    fall_a, fall_b = _fall([x for x, _ in pairs]), _fall([y for _, y in pairs])
    falling = check.compared == "losses" and fall_a > 0
    check.stalled = falling and fall_b < policy.min_progress * fall_a
    check.holds = close and not check.nonfinite and not check.stalled
    check.why = _what_failed(check, close, (fall_a, fall_b)) if not check.holds else ""
    return check


def _same_failure(highest: RunRecord, default: RunRecord) -> bool:
    """Both runs stopped with the same error at the same place: the failure is the
    program's (a port verified up to a failure the original shares), not the precision's."""
    if highest.get("status") == "ok":
        return False
    first, second = highest.get("error") or {}, default.get("error") or {}
    where = ("type", "frame")
    return all(first.get(k) == second.get(k) for k in where) and first.get("type") is not None


def _output_pairs(a: list[OutputStats], b: list[OutputStats]) -> list[tuple[float, float]]:
    pairs = []
    for x, y in zip(a, b, strict=False):
        for key in OUTPUT_STATS:
            pairs.append((float(x.get(key, 0.0)), float(y.get(key, 0.0))))
    return pairs


def _deviation(
    pairs: list[tuple[float, float]], policy: DefaultPolicy
) -> tuple[float, float, bool]:
    """Max abs and rel deviation of (b) from (a), and whether every pair is within policy
    (a non-finite value on either side is infinitely far, whatever the other)."""
    worst_abs = worst_rel = 0.0
    close = True
    for x, y in pairs:
        if not (math.isfinite(x) and math.isfinite(y)):
            same = x == y or (math.isnan(x) and math.isnan(y))
            worst_abs = worst_rel = worst_abs if same else math.inf
            close = close and same
            continue
        diff = abs(y - x)
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / abs(x) if x else (0.0 if diff == 0 else math.inf))
        close = close and diff <= policy.atol + policy.rtol * abs(x)
    return worst_abs, worst_rel, close


def _what_failed(check: DefaultCheck, close: bool, falls: tuple[float, float]) -> str:
    """Each way (b) failed, the deviation from (a) always said."""
    fall_a, fall_b = falls
    found = []
    if check.nonfinite:
        found.append("its loss becomes NaN or infinite")
    if check.stalled:
        found.append(
            f"its loss stops falling (by {fall_b:.3g} over {check.steps} steps, "
            f"where at highest precision it falls by {fall_a:.3g})"
        )
    where = "beyond" if not close else "within"
    found.append(
        f"its {check.compared} are max abs {check.max_abs:.3g}, max rel {check.max_rel:.3g} "
        f"from the run at highest precision, {where} the {check.policy} policy"
    )
    return "; ".join(found)


# What a faithful port does when its training needs float32 matmuls on a TPU.
FIX = (
    'a faithful port pins torch.set_float32_matmul_precision("highest") (TorchTPU: '
    "Precision.HIGHEST), or torch.tpu.precision(...) around the matmuls that need it"
)


def reason(check: DefaultCheck) -> str:
    """What the verdict's reason says of run (b)."""
    if not check.ran:
        return ""
    if check.holds:
        return (
            f"at the TPU's default matmul precision (float32 matmuls as bf16 passes) its "
            f"{check.steps} {check.compared} stay within the {check.policy} policy of the "
            f"run at highest (max abs {check.max_abs:.3g}, max rel {check.max_rel:.3g})"
        )
    if check.holds is None:
        return f"at the TPU's default matmul precision: {check.why}"
    return (
        "it matches the original only with exact float32 matmuls: at the TPU's default "
        f"matmul precision (float32 matmuls as bf16 passes, TorchTPU's own) {check.why}; {FIX}"
    )
