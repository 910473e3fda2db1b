"""What a verification concluded, as the graph checkpoints it and the report reads it.

The verdict is a ``Verdict`` (``agents.verdicts``); the rest is the evidence behind it.
A ``Verification`` is frozen: each step that adds to it returns a new one
(``dataclasses.replace``), so no caller sees a verdict change through an alias it kept.
Its list and dict fields are never changed in place either: a new value replaces them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, cast

from .comparison import Parity
from .kernel_records import FallbackRecord, KernelCheckRecord
from .run_record import RepairJSON, RunRecord
from .verdicts import Reason
from .verification_records import (
    DivergenceRecord,
    PatchJSON,
    PrecisionRecord,
    Timings,
    VerificationRecord,
)


@dataclass(frozen=True)
class Verification:
    verdict: str
    reason: str  # the rendered text: what a reader is told
    policy: str = ""
    parity: Parity | None = None
    reference: RunRecord | None = None
    target: RunRecord | None = None
    failure: RunRecord | None = None  # the target run, for diagnose
    # What a verdict holds only up to: "both runs then fail the same way at train.py:41: ..."
    caveat: str = ""
    # Where the verification's wall time went (verify_pair.timings); empty when nothing ran
    timings: Timings = field(default_factory=lambda: Timings())
    # The differential check at the kernel call sites the migration replaced
    # (agents.kernel_check); None when it replaced none
    kernel_check: KernelCheckRecord | None = None
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
    precision: PrecisionRecord | None = None
    # What of torchport's was on a failing run's path (agents.attribution), when something
    # was: the failure is then not the program's, and ``reason`` says so first
    attribution: dict[str, str] | None = None
    # The original's lines repaired for current PyTorch, as the port has them
    # (agents.legacy_repair): each a dict of ``Repair``
    legacy_repairs: list[RepairJSON] = field(default_factory=list)
    # Files of installed libraries the port ran with ported (agents.library_patch): each a
    # dict of ``Patch``; the verdict holds only with them
    library_patches: list[PatchJSON] = field(default_factory=list)
    # What the user can do next (the attribution's step, or the diagnosed signature's hint)
    next_step: str = ""
    # Where a port whose losses differ first computes something else (agents.divergence:
    # ``Divergence`` as a dict), or why that could not be found; None when not looked for
    divergence: DivergenceRecord | None = None
    # What ``reason`` says, as a stable code (``Reason``): what behaviour and tests key on
    code: str = Reason.NONE
    # The kernel call sites the port runs through a fallback (a shipped runtime), with what
    # each costs on the emulated device (agents.kernel_improve)
    fallbacks: list[FallbackRecord] = field(default_factory=list)
    # A model's replacement of such a site against the fallback port's own outputs there;
    # None when no replacement was checked
    fallback_check: KernelCheckRecord | None = None

    def to_json(self) -> VerificationRecord:
        """The record the graph checkpoints and the report writes."""
        return cast("VerificationRecord", asdict(self))

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Verification:
        """A checkpointed record back as a ``Verification``: keys it does not know are
        ignored and missing ones take their defaults (a record from before ``code``)."""
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in record.items() if k in known}
        if isinstance(data.get("parity"), Mapping):
            data["parity"] = Parity(**data["parity"])
        return cls(**data)
