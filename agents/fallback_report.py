"""The report's part on kernels that run through a fallback, and what that costs.

A port whose kernels run through a shipped runtime (``tools.kernel_fallbacks``) is correct
and slow; the reader is told which call sites do, through what, and what the emulated
device counted: the ops, host syncs and host/device copies of the port's whole run, the
syncs of those inside the shipped runtime, and those of the differential check's call of
the sites on their recorded inputs (``verification.json``'s ``fallbacks``).
"""

from __future__ import annotations

from collections.abc import Mapping

from torchport.tools.safetext import markdown_code, markdown_text

from .kernel_records import FallbackRecord

# The counters shown, in order, with their column titles.
COLUMNS = (
    ("ops", "ops"),
    ("host_syncs", "host syncs"),
    ("h2d_count", "copies to device"),
    ("h2d_bytes", "bytes to device"),
    ("d2h_count", "copies to host"),
    ("d2h_bytes", "bytes to host"),
)


def _counts(counters: Mapping[str, int]) -> str:
    if not counters:
        return " | ".join("—" for _ in COLUMNS)
    return " | ".join(str(counters.get(key, "—")) for key, _ in COLUMNS)


def fallbacks_markdown(fallbacks: list[FallbackRecord]) -> list[str]:
    """The section (empty when no kernel runs through a fallback)."""
    if not fallbacks:
        return []
    lines = ["", "## Kernels through a fallback", ""]
    lines.append(
        "These kernel call sites run through a runtime shipped in the port, checked against "
        "the original kernel: correct, and slow. A PyTorch version of the site is the fast "
        "port. What the emulated device counted:"
    )
    titles = " | ".join(title for _, title in COLUMNS)
    lines += ["", f"| site | kernels | fallback | run | {titles} |"]
    lines.append("|---|---|---|---|" + "---:|" * len(COLUMNS))
    for record in fallbacks:
        cost = record.get("cost") or {}
        kernels = ", ".join(markdown_code(k) for k in record.get("kernels") or [])
        head = f"| {markdown_code(record['site'])} | {kernels} | {markdown_text(record['kind'])}"
        lines.append(f"{head} | the port's program | {_counts(cost.get('program') or {})} |")
        site_check = cost.get("site_check") or {}
        lines.append(f"{head} | the site's check | {_counts(site_check)} |")
    notes = [note for record in fallbacks for note in _notes(record)]
    return [*lines, *([""] if notes else []), *notes]


def _notes(record: FallbackRecord) -> list[str]:
    cost, site = record.get("cost") or {}, markdown_code(record["site"])
    notes = []
    if cost.get("runtime_syncs"):
        notes.append(
            f"- {site}: {cost['runtime_syncs']} of the program's host syncs are inside the "
            f"shipped {markdown_text(record['kind'])} runtime"
        )
    if "time_ratio" in cost:
        notes.append(
            f"- {site}: its forward call takes {cost['time_ratio']:.2f}x the original kernel's "
            "time on the reference"
        )
    return notes
