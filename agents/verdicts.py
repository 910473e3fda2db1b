"""What a run can conclude, and how a judged failure is named: the only place either is spelled.

Both are ``StrEnum``: a member is its string, so checkpoints, reports and JSON written
before these types existed read back equal, and writing one writes the same bytes. A
verdict read from a checkpoint is a plain ``str``; it still compares equal to its member.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any


class Verdict(enum.StrEnum):
    """What a migration reached: the verifier's four, then a run's or a batch job's own."""

    VERIFIED = "verified"  # ran on the emulated device, numbers match within the policy
    RAN = "ran"  # ran, but with nothing (or nothing on the device) to compare
    FAILED = "failed"  # the port fails, or its numbers differ
    NOT_RUNNABLE = "not-runnable"  # nothing here can run it (the original's own failure too)
    NOT_VERIFIED = "not verified"  # no verification was asked for, or none was reached
    ERROR = "error"  # a batch job that crashed before it had a verdict

    @classmethod
    def judged(cls) -> tuple[Verdict, ...]:
        """The verifier's verdicts, best first: what a task may expect, what a chart orders."""
        return (cls.VERIFIED, cls.RAN, cls.FAILED, cls.NOT_RUNNABLE)


class FailureKind(enum.StrEnum):
    """The ``type`` of a failure record's ``error`` that is not the program's own exception:
    a judgement of the verifier, or torchport's sandbox failing to produce a run."""

    PARITY_MISMATCH = "ParityMismatch"  # both ran; the losses or outputs differ
    KERNEL_MISMATCH = "KernelMismatch"  # a replaced kernel call site computes otherwise
    PRECISION_SENSITIVE = "PrecisionSensitive"  # training differs at the TPU's own matmuls
    RUN_ERROR = "RunError"  # the harness refused the run before it started
    SANDBOX_ERROR = "SandboxError"  # the sandbox could not start it (sandbox.harness's)
    NO_RESULT = "NoResult"  # the program left no result (killed, or its rank died first)

    @classmethod
    def numeric(cls) -> frozenset[FailureKind]:
        """The failures where both programs ran and only their numbers disagree."""
        return frozenset({cls.PARITY_MISMATCH, cls.KERNEL_MISMATCH, cls.PRECISION_SENSITIVE})

    @classmethod
    def torchports(cls) -> frozenset[FailureKind]:
        """The failures of torchport's own harness rather than of the program."""
        return frozenset({cls.RUN_ERROR, cls.SANDBOX_ERROR, cls.NO_RESULT})


def failure_kind(record: Mapping[str, Any] | None) -> str | None:
    """The ``type`` of a failure record's error (a ``FailureKind`` value, or the program's
    own exception's name), None when there is no failure."""
    error = (record or {}).get("error") or {}
    kind = error.get("type") if isinstance(error, dict) else None
    return str(kind) if kind is not None else None


class Reason(enum.StrEnum):
    """Why a verification reached its verdict, as a stable code beside the rendered
    ``reason``: what the next step, a later note and a test key on, so rewording a reason
    changes no behaviour."""

    NONE = ""  # not set (a record written before the codes)
    NUMBERS_MATCH = "numbers-match"
    MATCH_THEN_SHARED_FAILURE = "numbers-match-then-shared-failure"
    NUMBERS_DIFFER = "numbers-differ"
    ON_THE_CPU = "on-the-cpu"
    ORIGINAL_NOT_RUN = "original-not-run"
    NOTHING_TO_COMPARE = "nothing-to-compare"
    BEYOND_CPU_RUNNER = "beyond-cpu-runner"
    PORT_FAILS = "port-fails"
    PORT_NEEDS_CUDA = "port-needs-cuda"
    PORT_CANNOT_IMPORT = "port-cannot-import"
    ORIGINAL_FAILS = "original-fails"  # the original fails here, the migration does not
    BOTH_FAIL = "original-fails-too"
    TORCHPORT_CAUSED = "torchport-caused"  # something of torchport's on the failure's path
    COULD_NOT_START = "could-not-start"  # torchport's sandbox could not start a run
    MISSING_DEPENDENCY = "missing-dependency"
    EMPTY_SUBMODULE = "empty-submodule"
    KERNEL_MISMATCH = "kernel-mismatch"
    PRECISION_SENSITIVE = "precision-sensitive"
    UNSUPPORTED_TARGET = "unsupported-target"
    NO_ENTRY = "no-entry"  # the plan found nothing to run
    SHIM_NEEDS_DEVICE = "shim-needs-device"
