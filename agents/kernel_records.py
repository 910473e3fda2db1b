"""The JSON shapes of the differential check's verdict (``agents.kernel_check``), named.

The check writes them into ``verification.json``'s ``kernel_check``, which the report,
the chat views and the kernel lane read back; what its sandboxed drivers write is in
``agents.site_records``. TypedDicts describe them without changing a byte of the JSON:
the records stay plain dicts at run time.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from .run_record import ErrorRecord, FrameRecord
from .site_records import Signature


class DrawnArg(TypedDict, total=False):
    """A case argument drawn from an ``ArgSpec`` (holds a tensor: torch-saved, never JSON)."""

    kind: str
    tensor: Any  # a torch.Tensor, imported lazily
    requires_grad: bool
    items: list[DrawnArg]
    value: object


class SiteCase(TypedDict):
    """One call ``sandbox.site_check`` makes (its input file)."""

    site: str
    module: str
    root: str
    entry: str
    args: list[DrawnArg]
    kwargs: dict[str, DrawnArg]


class DescribedCase(TypedDict, total=False):
    """What a case is for the report: its site and recorded signature, or why it was skipped."""

    site: str
    signature: Signature
    skipped: str


class TensorComparison(TypedDict, total=False):
    """One port tensor against the original's (``kernel_check.compare_tensor``)."""

    label: str
    holds: bool
    why: str
    max_abs: float
    max_rel: float
    index: list[int] | str


class CaseResult(TypedDict, total=False):
    """One compared case in a site's row: its inputs, policy and worst tensor."""

    inputs: str
    policy: str
    holds: bool | None
    note: str
    worst: TensorComparison | None
    compared: int
    # the fastest forward call at the site, each side (sandbox.site_check's ``seconds``)
    seconds_original: float
    seconds_port: float


class SiteRow(TypedDict, total=False):
    """One site of ``kernel_check.sites``: its status and cases."""

    site: str
    cases: list[CaseResult]
    status: str  # matched | differs | not compared
    note: str
    time_ratio: float  # the port's forward time at the site over the original's


class RunBrief(TypedDict):
    """What ``kernel_check.runs`` keeps of each driver run."""

    status: str | None
    error: ErrorRecord | None
    elapsed_s: float | None
    reference_interpreters: list[dict[str, Any]]
    stderr_tail: str
    counters: NotRequired[dict[str, int]]  # kernel_check.COSTS, where the device counted


class FallbackCost(TypedDict, total=False):
    """What running a kernel through its fallback costs on the emulated device: the port's
    program (its whole run) and the differential check's call of the sites, in
    ``kernel_check.COSTS``; and the program's host syncs inside the shipped runtime."""

    program: dict[str, int]
    site_check: dict[str, int]
    runtime_syncs: int
    time_ratio: float  # the site's forward time over the original's on the reference


class FallbackRecord(TypedDict, total=False):
    """A kernel call site the port runs through a fallback (``tools.kernel_fallbacks``)."""

    site: str  # path:entries
    path: str
    kind: str  # triton_on_torch | host build
    kernels: list[str]
    sources: list[str]  # the module-level strings an extension build compiled (its CUDA)
    entries: list[str]
    lines: list[int]  # the site's first and last line in the port
    cost: FallbackCost


class KernelCheckRecord(TypedDict):
    """``verification.json``'s ``kernel_check`` (``KernelCheck.to_json``)."""

    holds: bool | None
    reason: str
    policy: str
    sites: list[SiteRow]
    runs: dict[str, RunBrief]
    note: str
    frame: FrameRecord | None
