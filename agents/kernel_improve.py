"""The LLM improves on a verified baseline: a kernel that runs through a fallback, replaced.

Rules port a custom kernel by running it through a runtime shipped in the port
(``tools.kernel_fallbacks``: Triton on ``triton_on_torch``, CUDA C++ through its host
build), checked against the original kernel at its call site. That port is verified, and
slow. With a model configured, each such call site is offered to it once: the kernel's
source, the fact that the fallback exists and holds, and a request for the same
computation in PyTorch. Its answer is applied on a copy of the overlay (``unship`` then
takes out the kernels, the runtime's imports and the shipped files nothing needs any more)
and verified like any round; on top, the replacement is held to the fallback port's own
outputs at the site (``against_fallback``), a second reference. An answer that fails either
is dropped: the verify node keeps the best round, which is the fallback port.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any

from torchport.sandbox.safepath import read_text_regular
from torchport.tools.kernel_fallbacks import (
    FALLBACKS,
    fallback_of,
    names_span,
    shipped_unused,
    unship,
)
from torchport.tools.kernel_sites import KernelSite, kernel_sites, kernel_sources, source_reader

from . import kernel_check, verifier
from .kernel_lane import site_request
from .kernel_records import FallbackCost, FallbackRecord, KernelCheckRecord
from .repair_records import RepairRequestRecord
from .run_record import EnvironmentRecord, RunRecord
from .site_records import SiteCalls
from .state import decision
from .verdicts import Reason, Verdict
from .verification_records import VerificationRecord
from .workspace import materialize

NODE = "improve"  # the decisions' node: which sites were offered


def _read(path: Path) -> str:
    try:  # a regular file (a FIFO would block the read)
        return read_text_regular(path)
    except (OSError, UnicodeDecodeError):
        return ""


def _original_sites(source: Path, path: str) -> list[KernelSite]:
    return kernel_sites(_read(source / path), path, source_reader(source, path))


def site_name(site: KernelSite) -> str:
    """``path:entries``: how the report and the decisions name a call site."""
    return f"{site.path}:{','.join(site.entries or site.kernels)}"


def fallback_sites(source: Path, overlay: Mapping[str, str]) -> list[FallbackRecord]:
    """The original's kernel call sites that the port (``overlay``) runs through a
    fallback, with their lines in the port; a site whose definitions moved away is left
    out (nothing to offer there)."""
    out: list[FallbackRecord] = []
    for path, text in sorted(overlay.items()):
        fallback = fallback_of(text) if path.endswith(".py") else None
        if fallback is None:
            continue
        original = _read(source / path)
        sources_of = partial(kernel_sources, original)
        for site in _original_sites(source, path):
            span = names_span(text, (*site.launchers, *site.entries))
            if span is None or not any(name in text for name in site.kernels):
                continue
            out.append(
                {
                    "site": site_name(site),
                    "path": path,
                    "kind": fallback.kind,
                    "kernels": list(site.kernels),
                    "sources": sources_of(site.kernels),
                    "entries": list(site.entries),
                    "lines": list(span),
                }
            )
    return out


def costs(fallbacks: list[FallbackRecord], v: VerificationRecord) -> list[FallbackRecord]:
    """Each fallback with what it costs on the emulated device: the port's counters (its
    program's run, and the differential check's call of the sites), the program's host
    syncs inside the shipped runtime, and the site's forward time over the original's."""
    target: RunRecord = v.get("target") or {}
    counters = target.get("counters") or {}
    checked: KernelCheckRecord | None = v.get("kernel_check")
    runs = checked["runs"] if checked else {}
    site_run = runs["port"].get("counters") if "port" in runs else None
    syncs = counters.get("host_sync_sites") or {}
    rows = checked["sites"] if checked else []
    out: list[FallbackRecord] = []
    for record in fallbacks:
        in_runtime = sum(n for where, n in syncs.items() if _in_runtime(where, record["kind"]))
        cost: FallbackCost = {
            "program": {k: counters[k] for k in kernel_check.COSTS if k in counters},
            "site_check": dict(site_run or {}),
            "runtime_syncs": in_runtime,
        }
        specs = {f"{record['path']}:{entry}" for entry in record["entries"]}
        ratios = [r["time_ratio"] for r in rows if r["site"] in specs and "time_ratio" in r]
        if ratios:
            cost["time_ratio"] = max(ratios)
        out.append({**record, "cost": cost})
    return out


def _in_runtime(where: str, kind: str) -> bool:
    """Whether a host sync's ``file:line`` is in a file the ``kind`` of fallback ships."""
    file = PurePosixPath(where.rsplit(":", 1)[0]).name
    return any(file in f.shipped for f in FALLBACKS if f.kind == kind)


def offered(decisions: Iterable[Mapping[str, Any]]) -> set[str]:
    """The sites already offered to the model (one attempt each)."""
    return {str(d.get("site")) for d in decisions if d.get("node") == NODE}


def next_offer(state: Mapping[str, Any]) -> FallbackRecord | None:
    """The next fallback site to offer: with a model configured, after a verified round,
    one not offered yet (None: nothing to improve)."""
    settings = state.get("settings") or {}
    v = state.get("verification") or {}
    if settings.get("llm", "none") == "none" or v.get("verdict") != Verdict.VERIFIED:
        return None
    if state.get("iteration", 0) > settings.get("max_iterations", 0):
        return None
    done = offered(state.get("decisions") or [])
    return next((f for f in v.get("fallbacks") or [] if f["site"] not in done), None)


def improvement_request(
    source: Path, fallback: FallbackRecord, target: str, calls: list[SiteCalls]
) -> RepairRequestRecord | None:
    """The ``kernel`` request for a site that runs through a fallback: its lines in the
    port, the kernel's source, and that a verified fallback exists which the answer must
    match as well as the original kernel."""
    site = next(
        (s for s in _original_sites(source, fallback["path"]) if site_name(s) == fallback["site"]),
        None,
    )
    if site is None:
        return None
    original = _read(source / site.path)
    how = _HOW[fallback["kind"]]
    evidence = (
        f"The port already runs this kernel {how}, and that port is verified against the "
        "original kernel at this call site: it is correct but slow. Your PyTorch version "
        "replaces it only if it matches both the original kernel and that fallback "
        "(outputs and gradients); otherwise the fallback stays."
    )
    problem = f"KernelFallback: {fallback['site']} runs {how}; a PyTorch version is the fast port"
    start, end = fallback["lines"]
    return site_request(site, target, original, calls, problem, evidence, (start, end))


_HOW = {
    "triton_on_torch": "through triton_on_torch (a Python loop over its program ids)",
    "host build": "through its host build (the CUDA C++ translated for the CPU, on host copies)",
}


def unship_overlay(
    original: Iterable[str], overlay: Mapping[str, str], fallback: FallbackRecord
) -> tuple[dict[str, str], list[str]]:
    """The overlay without the site's kernels once the replacement no longer calls them,
    the runtime's imports nothing uses and the shipped files nothing needs; what went."""
    path = fallback["path"]
    names = [*fallback["kernels"], *fallback.get("sources", [])]
    text, removed = unship(overlay.get(path, ""), names)
    if not removed:
        return dict(overlay), []
    updated = {**overlay, path: text}
    dropped = shipped_unused(updated, original)
    return {k: v for k, v in updated.items() if k not in dropped}, [*removed, *dropped]


def against_fallback(
    source: Path,
    trees: tuple[Mapping[str, str], Mapping[str, str]],
    fallback: FallbackRecord,
    reference: RunRecord,
    settings: Mapping[str, Any],
    environment: EnvironmentRecord | None,
    scratch: Path,
) -> kernel_check.KernelCheck:
    """The replacement (``trees[1]``, an overlay) against the fallback port (``trees[0]``)
    at the site, both on the target's emulated device, on the original's recorded inputs."""
    sites = [
        s for s in _original_sites(source, fallback["path"]) if site_name(s) == fallback["site"]
    ]
    baseline = materialize(source, dict(trees[0]), scratch / "fallback-port")
    tree = materialize(source, dict(trees[1]), scratch / "replacement")
    limits = verifier.budget_of(settings)
    target, tolerance = settings["target"], settings.get("tolerance")
    return verifier.check_against_port(
        baseline, tree, sites, reference, target, limits, environment, tolerance
    )


def judged(
    record: VerificationRecord, fallback: FallbackRecord, checked: kernel_check.KernelCheck | None
) -> tuple[VerificationRecord, dict[str, Any]]:
    """The improvement round's verdict (failed unless it verified, left the fallback and
    matched the fallback port at the site) and the decision that says what the port keeps."""
    site, kind = fallback["site"], fallback["kind"]
    if record.get("verdict") != Verdict.VERIFIED:
        why = f"the replacement of {site} does not verify: {record.get('reason', '')}"
        return record, decision("verify", "kept the fallback", site=site, kind=kind, why=why)
    why = _rejected(record, fallback, checked)
    if why:  # failed, so that the verify node keeps the best round: the fallback port
        failed: VerificationRecord = {
            **record,
            "verdict": Verdict.FAILED,
            "reason": why,
            "code": Reason.KERNEL_MISMATCH,
            "fallback_check": checked.to_json() if checked else None,
        }
        return failed, decision("verify", "kept the fallback", site=site, kind=kind, why=why)
    assert checked is not None  # _rejected holds it to the fallback
    found = _as_fallback(checked.reason)
    why = f"the replacement of {site} verifies and matches the fallback port: {found}"
    taken: VerificationRecord = {**record, "fallback_check": checked.to_json()}
    return taken, decision("verify", "replacement taken", site=site, kind=kind, why=why)


def _rejected(
    record: VerificationRecord, fallback: FallbackRecord, checked: kernel_check.KernelCheck | None
) -> str:
    """Why a verified round still does not replace the fallback ("" when it does)."""
    site, kind = fallback["site"], fallback["kind"]
    if still_on_fallback(record, fallback):
        return f"the model's answer left {site} on its fallback (not applied, or still used)"
    if checked is None or checked.holds is not True:
        found = _as_fallback(checked.reason) if checked else "not compared"
        return f"the replacement of {site} does not match the fallback port ({kind}): {found}"
    return ""


def still_on_fallback(record: VerificationRecord, fallback: FallbackRecord) -> bool:
    """Whether the round's port still runs ``fallback``'s site through its fallback."""
    return fallback["site"] in {f["site"] for f in record.get("fallbacks") or []}


def _as_fallback(reason: str) -> str:
    """The check's text names its reference "the original's": here it is the fallback port."""
    return reason.replace("the original's", "the fallback's")
