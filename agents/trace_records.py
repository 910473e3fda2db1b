"""The JSON a traced run reports (``sandbox.module_trace``), named.

A run traced for the first divergence records, at step ``k``, every module call's output
(and input) sample, every parameter's gradient sample and the models' weights, sent or
loaded; ``RunRecord.module_trace`` carries it and ``agents.divergence`` reads two of them.
TypedDicts name the keys without changing a byte: the records stay plain dicts.
"""

from __future__ import annotations

from typing import TypedDict

from .site_records import TensorReport

# One module call (``sandbox.module_trace``'s hook); ``in`` is a keyword, hence the
# functional form. ``out``/``in``: samples of its first output and input tensor.
ModuleCall = TypedDict(
    "ModuleCall",
    {
        "name": str,
        "cls": str,
        "where": str,  # path:first-last of its forward, or package.module.Class
        "leaf": bool,
        "parent": str | None,  # the module whose forward called this one
        "out": TensorReport,
        "in": TensorReport,
        "ops": list[str],  # the device's ops in it, where counted
    },
    total=False,
)


class GradSample(TypedDict):
    """One parameter's gradient at step ``k``."""

    root: int  # which model
    name: str
    grad: TensorReport


class WeightsNote(TypedDict, total=False):
    """One model's weights: as the original sent them, or as the port loaded them."""

    sent: bool
    bytes: int
    state: str  # base64 of torch.save's bytes (dropped before a report keeps it)
    loaded: int
    problem: str
    missing: list[str]
    missing_count: int


class TraceReport(TypedDict, total=False):
    """``sandbox.module_trace.Trace.report``."""

    step: int
    steps_seen: int
    calls: list[ModuleCall]
    grads: list[GradSample]
    weights: dict[str, WeightsNote]
    truncated: bool


class TraceSpec(TypedDict, total=False):
    """What a traced run is asked to do (the harness's ``trace`` argument)."""

    step: int
    send_weights: bool
    weights: str  # the file prefix the port loads the original's weights from
