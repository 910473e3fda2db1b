"""What a run was given in place of what it asked for, in words for the report and the
terminal: synthetic data (downloads, placeholder paths, token files, a tokenizer), the
arguments of the command that were made small, and kernels that ran in an interpreter
instead of on a GPU (the reference run). A verdict reached on stand-ins says so."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# sandbox.synthetic.weights.DATASET (not imported: that package imports torch)
WEIGHTS = "pretrained weights"


def _standin(entry: Any) -> str:
    if not isinstance(entry, dict):
        return str(entry)
    words = f"{entry.get('library', '?')} {entry.get('dataset', '?')}"
    if entry.get("path"):
        words += f" at {entry['path']}"
    details = [str(entry[k]) for k in ("split", "dtype", "standin") if entry.get(k)]
    if isinstance(entry.get("columns"), list):  # a dataset's columns, and whence they came
        whence = f", from {entry['columns_from']}" if entry.get("columns_from") else ""
        details.append(f"columns {' '.join(map(str, entry['columns']))}{whence}")
    size = entry.get("size")
    return words + f" ({', '.join([f'{size} items' if size else '', *details]).strip(', ')})"


def _rewrite(entry: Any) -> str:
    if not isinstance(entry, dict):
        return str(entry)
    return (
        f"{entry.get('argument')} {entry.get('before')} -> {entry.get('after')} "
        f"({entry.get('why')})"
    )


def _kept(entry: Any) -> str:
    if not isinstance(entry, dict):
        return str(entry)
    return (
        f"{entry.get('argument')} {entry.get('before')} (not {entry.get('after')}: "
        f"{entry.get('why')})"
    )


def interpreter_note(run: Mapping[str, Any] | None) -> str:
    """One line for the kernels a (reference) run executed in an interpreter, or ""."""
    parts = []
    for entry in (run or {}).get("reference_interpreters") or []:
        if not isinstance(entry, dict):
            continue
        kernels = ", ".join(
            f"{name} (x{count})" for name, count in (entry.get("kernels") or {}).items()
        )
        notes = "".join(f"; {note}" for note in entry.get("notes") or [])
        parts.append(
            f"{kernels} ran in Triton's interpreter (triton {entry.get('version', '?')}, "
            f"TRITON_INTERPRET=1) on the CPU, not compiled for a GPU{notes}"
        )
    return "the original's kernels: " + "; ".join(parts) if parts else ""


def data_notes(run: Mapping[str, Any] | None) -> list[str]:
    """One line for the synthetic data a run used, one for pretrained weights it was not
    given, one for its rewritten arguments, one for kernels it ran in an interpreter."""
    run = run or {}
    lines = []
    standins = run.get("synthetic_data") or []
    weights = [e for e in standins if isinstance(e, dict) and e.get("dataset") == WEIGHTS]
    refused = [e for e in standins if isinstance(e, dict) and e.get("refused")]
    data = [e for e in standins if e not in weights and e not in refused]
    if data:
        used = "; ".join(_standin(e) for e in data)
        lines.append(f"synthetic data used instead of the real data: {used}")
    if refused:
        why = "; ".join(f"{e.get('path')}: {e.get('refused')}" for e in refused)
        lines.append(f"no stand-in made (the program ran without one): {why}")
    if weights:
        urls = ", ".join(str(e.get("path")) for e in weights)
        lines.append(
            "pretrained weights NOT loaded (a download; no network here): both runs started "
            f"from the model's own seeded initialisation instead of {urls}"
        )
    if run.get("command_rewrites"):
        changed = "; ".join(_rewrite(e) for e in run["command_rewrites"])
        lines.append(f"arguments rewritten in the command (both runs, not the code): {changed}")
    if run.get("command_kept"):
        kept = "; ".join(_kept(e) for e in run["command_kept"])
        lines.append(f"arguments NOT lowered (run as given): {kept}")
    if note := interpreter_note(run):
        lines.append(note)
    return lines
