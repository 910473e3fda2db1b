"""The two traced runs behind a first divergence (``agents.divergence``).

The original runs step ``k`` again on the reference with ``sandbox.module_trace``, sending
its models' weights at the start of that step over the results channel; torchport writes
each model's weights, as the bytes it received (torchport never unpickles them), into a copy
of the port, whose traced run loads them at the same point with ``weights_only=True``. Each
run stops after step ``k + 1``, so it costs about ``k`` steps of each program. The traces
are the lowest rank's where the programs start ranks.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from torchport.sandbox.isolation import owner

from . import divergence
from .run_record import RunRecord
from .trace_records import TraceReport, TraceSpec
from .verification_records import DivergenceRecord
from .workspace import materialize, write_over

WEIGHTS = ".torchport-trace-weights"  # the port's copy gets WEIGHTS-<model>.pt
# one side of the comparison: the program's folder, the run's mode, its matmul precision
Side = tuple[Path, str, str | None]
Runner = Callable[[Path, str, str | None, TraceSpec], RunRecord]
# A side's trace, or its run where that failed (then ``calls`` is missing, ``error`` says why)
Traced = TraceReport | RunRecord


def _weights(trace: TraceReport) -> tuple[dict[str, bytes], str]:
    """Each model's weights as sent, and what a reader should know about them."""
    sent, notes = {}, []
    for key, item in (trace.get("weights") or {}).items():
        if item.get("sent") and isinstance(item.get("state"), str):
            try:
                sent[key] = base64.b64decode(item["state"], validate=True)
            except (binascii.Error, ValueError):
                notes.append(f"model {key}: its weights arrived malformed")
        else:
            size = item.get("bytes", 0) / 2**20
            notes.append(f"model {key}: {size:.0f} MiB of weights, over what a trace sends")
    return sent, "; ".join(notes)


def _loaded_note(port: TraceReport) -> str:
    notes = []
    for key, item in (port.get("weights") or {}).items():
        if item.get("problem"):
            notes.append(f"model {key}: {item['problem']}")
        elif item.get("missing_count"):
            notes.append(f"model {key}: {item['missing_count']} tensor(s) not in the original's")
    return "; ".join(notes)


def trace_both(first: Side, second: Side, step: int, run: Runner) -> tuple[Traced, Traced, str]:
    """(``first``'s trace, ``second``'s, a note on the weights) or a failed run's result in
    place of a trace (``status`` not ok). ``second`` runs step ``step`` from ``first``'s
    weights."""
    reference = run(*first, {"step": step, "send_weights": True})
    ref_trace = reference.get("module_trace") or {}
    if reference.get("status") != "ok" or not ref_trace:
        return reference, {}, ""
    sent, note = _weights(ref_trace)
    root, mode, precision = second
    with owner.temp_dir() as tmp:
        copy = materialize(root, {}, Path(tmp) / "program")
        for key, data in sent.items():
            write_over(copy, f"{WEIGHTS}-{key}.pt", data)
        port = run(copy, mode, precision, {"step": step, "weights": WEIGHTS})
    for item in (ref_trace.get("weights") or {}).values():
        item.pop("state", None)  # bytes a report has no use for
    port_trace = port.get("module_trace") or {}
    if port.get("status") != "ok" or not port_trace:
        return reference, port, note
    return ref_trace, port_trace, "; ".join(n for n in (note, _loaded_note(port_trace)) if n)


def find(
    sides: tuple[Side, Side], step: int, policy: Any, run: Runner, names: tuple[str, str]
) -> DivergenceRecord:
    """The first divergence at ``step`` between the two sides' runs (each ``(root, mode,
    matmul precision)``), as plain data, or why it could not be found. ``names``: what
    the two sides are called in a reason ("original", "port")."""
    first, second, note = trace_both(*sides, step, run)
    traces: list[TraceReport] = []
    for side, result in zip(names, (first, second), strict=True):
        if "calls" not in result:  # the side's run, failed
            error = cast("RunRecord", result).get("error") or {}
            why = error.get("message") or "it recorded no trace"
            return {
                "step": step,
                "found": "unknown",
                "summary": f"the {side}'s traced run failed: {why}",
            }
        traces.append(cast("TraceReport", result))
    ref, port = traces
    traced = bool(port.get("calls")) and bool(ref.get("calls"))
    if not traced and min(port.get("steps_seen") or 0, ref.get("steps_seen") or 0) < step:
        return {
            "step": step,
            "found": "unknown",
            "summary": f"a traced run ended before step {step}",
        }
    found = divergence.locate(ref, port, policy, sides[0][0], sides[1][0])
    found.weights = note or f"the {names[1]} ran step {step} from the {names[0]}'s weights"
    return found.to_json()
