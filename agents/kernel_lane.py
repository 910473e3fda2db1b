"""The LLM lane for custom kernels: a kernel's call site as one request, with its context.

A kernel finding the codemods cannot port (TPK003 with neither a torch fallback nor a Triton
runtime that runs it, TPK002 ``load_inline``/``.cu``, TPK004 numba, TPK005 CuPy) is found
once per decorator or build call, but what a port rewrites is the kernel's call site
(``tools.kernel_sites``): the autograd Function or helper that launches it and the function
the program calls. So the findings of one site become one ``kernel`` request for the site's
lines, and the model gets what it needs to write the same computation in PyTorch: the
kernel's own source (the ``@triton.jit`` functions, the CUDA source string), the shapes and
dtypes the site is called with once the original has run (``sandbox.site_calls``), and the
rule it must keep: the names and arguments the program calls, and a backward for an autograd
Function (differentiable torch code, or the Function kept with a torch backward).

After a round, kernels nothing calls any more go (``remove_unused_kernels``): on the target
their decorators and extension builds are what would still fail. A differential check that
failed (``agents.kernel_check``) sends the model back to its replacement with the evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from torchport.sandbox.safepath import read_text_regular
from torchport.tools.kernel_sites import (
    KERNEL_RULES,
    KernelSite,
    kernel_sites,
    kernel_spans,
    parameters,
    source_reader,
)
from torchport.tools.kernel_sites import remove_unused_kernels as _remove_unused

from .kernel_check import describe_signature
from .kernel_records import KernelCheckRecord
from .repair_records import PlanItem, RepairRequestRecord
from .run_record import FrameRecord
from .site_records import SiteCalls
from .state import AgentEdit, DiagnosisRecord, State
from .workspace import materialize, python_files

MAX_KERNEL_CHARS = 6000  # kernel source shown to the model (a CUDA file can be long)
MAX_SIGNATURES_SHOWN = 3


def _sites_of(work: Path, rel: str) -> list[KernelSite]:
    try:
        text = (work / rel).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return kernel_sites(text, rel, source_reader(work, rel))


def _read(path: Path) -> str | None:
    try:  # a regular file (python_files leaves links out; a FIFO would block the read)
        return read_text_regular(path)
    except (OSError, UnicodeDecodeError):
        return None


def calls_text(site: KernelSite, calls: list[SiteCalls], text: str) -> str:
    """How the original's run called the site's entries, one line per recorded signature
    (empty before the original has run)."""
    lines = []
    for record in calls:
        path, _, entry = str(record.get("site", "")).partition(":")
        if path != site.path:
            continue
        names = parameters(text, entry)
        for signature in (record.get("signatures") or [])[:MAX_SIGNATURES_SHOWN]:
            lines.append(f"{entry}({describe_signature(signature, names)})")
    return "\n".join(lines)


def site_request(
    site: KernelSite,
    target: str,
    text: str,
    calls: list[SiteCalls],
    problem: str,
    evidence: str = "",
    span: tuple[int, int] | None = None,
) -> RepairRequestRecord:
    """A ``kernel`` repair request for ``site``'s lines (or ``span``: a replacement's)."""
    start, end = span or (site.start_line, site.end_line)
    entries = ", ".join(f"`{e}`" for e in site.entries)
    source = site.kernel_source
    if len(source) > MAX_KERNEL_CHARS:
        source = source[:MAX_KERNEL_CHARS] + "\n... (cut)"
    parts = [
        f"The kernel's source ({site.path}; removed once nothing uses it):\n{source}",
    ]
    called = calls_text(site, calls, text)
    if called:
        parts.append(f"The original program calls it as:\n{called}")
    if evidence:
        parts.append(evidence)
    keep = (
        f"Keep the names and arguments of {entries}: the rest of the program calls them."
        if site.entries
        else ""
    )
    backward = ""
    if site.autograd:
        functions = ", ".join(f"`{f}`" for f in site.autograd)
        backward = (
            f" {functions} is a torch.autograd.Function: the gradient must stay right, so write "
            "differentiable torch code (autograd derives the backward) or keep the Function "
            "with its forward and backward written in torch."
        )
    parts.append(
        f"Write lines {start}-{end} as pure PyTorch (torch, torch.nn.functional) that "
        "computes exactly what the kernel computes: the same formula, constants and dtypes. "
        f"{keep}{backward}"
    )
    return {
        "kind": "kernel",
        "target": target,
        "path": site.path,
        "start_line": start,
        "end_line": end,
        "problem": problem,
        "context": "\n\n".join(parts),
    }


def _problem(site: KernelSite, messages: list[str]) -> str:
    kernels = ", ".join(f"`{k}`" for k in site.kernels)
    launched = ", ".join(f"`{n}`" for n in (*site.launchers, *site.entries))
    message = messages[0] if messages else "a custom kernel the target cannot run"
    return f"{site.rule}: {message}: the kernel {kernels}, launched by {launched}"


def construct_requests(
    items: list[PlanItem],
    work: Path,
    target: str,
    calls: list[SiteCalls],
    construct_request: Callable[[PlanItem, str], RepairRequestRecord],
) -> list[tuple[str, RepairRequestRecord]]:
    """(label, request) for the LLM's constructs, bottom-up per file: the kernel findings
    of one call site become that site's ``kernel`` request; findings inside a site's span
    go with it; everything else stays a ``construct`` request (``construct_request``)."""
    sites: dict[str, list[KernelSite]] = {}
    for path in sorted({i["path"] for i in items if i["rule"] in KERNEL_RULES}):
        sites[path] = _sites_of(work, path)
    out: list[tuple[str, int, RepairRequestRecord]] = []
    taken: set[tuple[str, int]] = set()
    for path, found in sites.items():
        text = (work / path).read_text(encoding="utf-8")
        for site in found:
            mine = [i for i in items if i["path"] == path and _belongs(site, i, text)]
            if not any(i["rule"] in KERNEL_RULES for i in mine):
                continue
            taken |= {(i["path"], int(i["line"])) for i in mine}
            problem = _problem(site, [i["message"] for i in mine if i["rule"] in KERNEL_RULES])
            request = site_request(site, target, text, calls, problem)
            out.append((site.rule, request["start_line"], request))
    for item in items:
        if (item["path"], int(item["line"])) in taken:
            continue
        request = construct_request(item, target)
        out.append((item["rule"], request["start_line"], request))
    out.sort(key=lambda r: (r[2]["path"], -r[1]))
    return [(label, request) for label, _, request in out]


def _belongs(site: KernelSite, item: PlanItem, text: str) -> bool:
    """Whether a finding goes with ``site``'s request: a kernel finding on one of its
    kernels (the decorator, def or build call), or any finding inside its span."""
    line = int(item["line"])
    if site.start_line <= line <= site.end_line:
        return True
    if item["rule"] not in KERNEL_RULES:
        return False
    return any(
        start <= line <= end
        for name, (start, end) in kernel_spans(text).items()
        if name in site.kernels
    )


def remove_unused_kernels(
    source: Path, overlay: dict[str, str], work: Path, paths: list[str]
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The overlay with the kernels of ``paths`` that nothing uses any more removed (and
    the kernel modules' imports they leave unused); what went, per file. A kernel another
    file of the program mentions is kept."""
    materialize(source, overlay, work)
    others = python_files(work)
    updated, removed = dict(overlay), {}
    for rel in paths:
        path = work / rel
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        elsewhere = [_read(p) or "" for r, p in others.items() if r != rel]
        kept, names = _remove_unused(text, elsewhere)
        if names:
            updated[rel] = kept
            removed[rel] = names
    return updated, removed


def mismatch_request(state: State, found: DiagnosisRecord) -> RepairRequestRecord | None:
    """After a failed differential check: the replacement of the failing site, sent back
    with the check's evidence, the kernel's source and the original's launch code."""
    verification = state.get("verification") or {}
    checked: KernelCheckRecord | None = verification.get("kernel_check")
    frame: FrameRecord = (checked.get("frame") if checked else None) or {}
    path, function = frame.get("file"), frame.get("function")
    if not path or not function:
        return None
    settings = state["settings"]
    source = Path(settings["source"])
    original = _read(source / path)
    if original is None:
        return None
    site = next(
        (
            s
            for s in kernel_sites(original, path, source_reader(source, path))
            if function in s.comparable or function.partition(".")[0] in s.entries
        ),
        None,
    )
    overlay = state.get("overlay") or {}
    current = overlay.get(path)
    if site is None or current is None:
        return None
    span = _replacement_span(state.get("agent_edits") or [], path, current)
    if span is None:
        return None
    calls = (state.get("reference") or {}).get("kernel_site_calls") or []
    launch = "\n".join(original.splitlines()[site.start_line - 1 : site.end_line])
    reason = checked.get("reason", "") if checked else ""
    evidence = (
        f"Your replacement computes otherwise than the kernel: {reason}\n"
        f"The original's launch code was:\n{launch}"
    )
    problem = f"KernelMismatch: {reason}"[:1000]
    return site_request(site, settings["target"], original, calls, problem, evidence, span)


def _replacement_span(edits: list[AgentEdit], path: str, text: str) -> tuple[int, int] | None:
    """The lines of the newest LLM edit of ``path`` still in ``text``."""
    from .rewriter import edit_span

    for edit in reversed(edits):
        if edit.get("path") == path and (span := edit_span(edit, text)) is not None:
            return span
    return None
