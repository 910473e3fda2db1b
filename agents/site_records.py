"""The JSON shapes the differential check's sandboxed drivers write, named.

``sandbox.site_calls`` records a kernel call site's arguments in the original's reference
run (``RunRecord.kernel_site_calls``); ``sandbox.site_check`` reports one call's tensors
(``RunRecord.site_check``). ``agents.kernel_check`` reads both. TypedDicts describe them
without changing a byte of the JSON: the records stay plain dicts at run time.
"""

from __future__ import annotations

from typing import TypedDict


class ArgSpec(TypedDict, total=False):
    """One recorded argument (``sandbox.site_calls.describe``): a tensor's spec and
    statistics, a plain value, a dtype, a list or tuple of those, or an opaque object."""

    kind: str  # tensor | value | dtype | list | tuple | opaque
    shape: list[int]
    dtype: str
    requires_grad: bool
    mean: float
    std: float
    min: float
    max: float
    items: list[ArgSpec]
    value: object
    type: str  # an opaque argument's class name


class Signature(TypedDict, total=False):
    """One distinct call of a site: its positional and keyword arguments."""

    args: list[ArgSpec]
    kwargs: dict[str, ArgSpec]


class SiteCalls(TypedDict, total=False):
    """A site's first distinct calls in the original's run (``kernel_site_calls``)."""

    site: str  # path:function, as ``KernelSite.spec`` spells it
    module: str
    root: str
    signatures: list[Signature]


class TensorReport(TypedDict, total=False):
    """One tensor as ``sandbox.site_check`` reports it (``values`` may be a sample)."""

    name: str
    none: bool
    shape: list[int]
    dtype: str
    values: list[float]
    sampled: bool


class CaseReport(TypedDict, total=False):
    """One call's report from ``sandbox.site_check``: or the error, or what is missing."""

    error: str
    missing: str
    outputs: list[TensorReport]
    after: list[TensorReport]
    grads: list[TensorReport]
    seconds: float  # the fastest of a few more forward calls


class SiteCheckReport(TypedDict, total=False):
    """``sandbox.site_check``'s report in a run record (``RunRecord.site_check``)."""

    cases: list[CaseReport]
