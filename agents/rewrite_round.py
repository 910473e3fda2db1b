"""One rewrite round's working state: the overlay as it grows, the LLM's edits and usage,
and the decisions to log.

A round can take several steps (the codemods, the LLM on catalogue constructs, a fix
diagnose asked for, pruning imports the LLM left unused); each step reads and extends the
same overlay. Keeping that in one small object lets the graph's rewrite node read as the
list of those steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchport.tools.repowalk import exclude_spec, is_excluded

from . import kernel_improve, kernel_lane, rewriter
from .kernel_records import FallbackRecord
from .repair_records import RepairBrief, RepairRecord, RepairRequestRecord
from .site_records import SiteCalls
from .state import AgentEdit, Settings, decision, scan_filters


@dataclass
class RewriteRound:
    source: Path
    settings: Settings
    scratch: Path
    overlay: dict[str, str] | None
    usage: dict[str, float]  # the LLM's tally so far (llm.client.Usage.to_json)
    client: Any = None  # LLMClient, or None when no LLM is configured or none is needed
    log: list[dict[str, Any]] = field(default_factory=list)
    agent_edits: list[AgentEdit] = field(default_factory=list)
    # how the original called its kernel sites (its reference run), once it has run
    kernel_calls: list[SiteCalls] = field(default_factory=list)
    kernel_files: set[str] = field(default_factory=set)  # files of kernel sites asked about
    scan_file: str | None = None  # the plan's scan (State.plan_scan), which the codemods read

    def run_codemods(self) -> None:
        s = self.settings
        given: Mapping[str, Any] = s  # run_id: the front doors' key, not one Settings lists
        self.overlay, summary = rewriter.codemods(
            self.source,
            s["target"],
            s.get("select", []),
            s.get("annotate", False),
            run=given.get("run_id"),
            filters=scan_filters(s),
            safe_only=bool(s.get("safe_only")),
            scan_file=self.scan_file,
        )
        self.log.append(decision("rewrite", "codemods", **summary))

    def refused(self) -> rewriter.Refusals:
        """What the codemods refused to port, with why (the LLM's other work)."""
        return rewriter.refusals(self.source, self.settings, self.scan_file)

    def excluded(self, rel: str) -> bool:
        """A file the run leaves alone (``exclude``): no model edits it either."""
        return is_excluded(exclude_spec(self.settings.get("exclude") or ()), rel)

    def ask_llm(self, request: RepairRequestRecord, why: str) -> None:
        if self.excluded(request["path"]):
            excluded = decision("rewrite", "LLM not asked: excluded file", path=request["path"])
            self.log.append(excluded)
            return
        if request.get("kind") == "kernel":
            self.kernel_files.add(request["path"])
        before = self.overlay or {}
        self.overlay, record = rewriter.llm_repair(
            self.client,
            self.source,
            before,
            self.scratch / "llm",
            request,
            max_tokens=self.settings["max_llm_tokens"] - tokens(self.usage),
        )
        changed = (k for k, v in self.overlay.items() if v != before.get(k))
        strayed = sorted(k for k in changed if self.excluded(k))
        if strayed:
            self.overlay = before
            rewriter.reject(record, f"edited an excluded file: {', '.join(strayed)}")
        self.usage = add_usage(self.usage, record["usage"])
        made: list[AgentEdit] = [{**e, "by": "llm", "for": why} for e in record["edits"]]
        self.agent_edits.extend(made)
        self.log.append(decision("rewrite", f"LLM {record['status']}", **_brief(record)))

    def ask_llm_about_constructs(self, limit: int, say: Any) -> None:
        """The catalogue's ``llm`` constructs, located again on the migrated code (the
        codemods moved lines) and taken bottom-up, so that an edit never shifts the lines
        of one still to come. A custom kernel's findings are one request for its call site
        (``agents.kernel_lane``)."""
        scan = self.scratch / "scan"
        items = rewriter.llm_constructs(
            self.source,
            self.overlay or {},
            scan,
            self.settings,
            self.refused(),
        )
        requests = kernel_lane.construct_requests(
            items, scan, self.settings["target"], self.kernel_calls, rewriter.construct_request
        )
        for rule, request in requests[:limit]:
            if tokens(self.usage) >= self.settings["max_llm_tokens"]:
                self.log.append(decision("rewrite", "LLM token budget spent", item=rule))
                return
            what = "the kernel call site" if request["kind"] == "kernel" else rule
            say(f"rewriting: asking the LLM about {what} at {request['path']}")
            self.ask_llm(request, rule)

    def apply_rule_files(self, rules: list[str], files: dict[str, str]) -> None:
        self.log.append(decision("rewrite", "rules re-run", rules=rules, files=sorted(files)))
        self.overlay = {**(self.overlay or {}), **files}

    def remove_unused_kernels(self) -> None:
        """Kernels whose call sites the LLM replaced, which nothing uses any more, go with
        their extension builds and CUDA source strings: on the target their decorators and
        builds are what would still fail."""
        touched = sorted(self.kernel_files & {e["path"] for e in self.agent_edits})
        if not touched:
            return
        self.overlay, removed = kernel_lane.remove_unused_kernels(
            self.source, self.overlay or {}, self.scratch / "kernels", touched
        )
        if removed:
            self.log.append(decision("rewrite", "unused kernels removed", kernels=removed))

    def unship(self, fallback: FallbackRecord | None) -> None:
        """After a replacement of a site that ran through a fallback: its kernels, the
        runtime's imports and the shipped files go once nothing needs them."""
        if fallback is None:
            return
        overlay = self.overlay or {}
        original = [p for p in overlay if (self.source / p).is_file()]
        self.overlay, removed = kernel_improve.unship_overlay(original, overlay, fallback)
        if removed:
            self.log.append(decision("rewrite", "fallback removed", removed=removed))

    def prune_imports_the_llm_left(self) -> None:
        """Once the LLM replaced every use of a CUDA-only library, its import is what still
        fails on the target; an unused import does nothing else."""
        touched = sorted({e["path"] for e in self.agent_edits})
        if not touched:
            return
        overlay = self.overlay or {}
        pruned = rewriter.prune_cuda_imports(self.source, overlay, self.scratch / "prune", touched)
        if pruned != overlay:
            dropped = sorted(k for k in pruned if pruned[k] != overlay.get(k))
            self.log.append(decision("rewrite", "unused CUDA-only imports removed", files=dropped))
            self.overlay = pruned


def tokens(usage: Mapping[str, float]) -> int:
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def add_usage(total: Mapping[str, float], more: Mapping[str, float]) -> dict[str, float]:
    out = dict(total)
    for key, value in (more or {}).items():
        if isinstance(value, int | float):
            out[key] = out.get(key, 0) + value
    return out


def _brief(record: RepairRecord) -> RepairBrief:
    return {
        "path": record["request"]["path"],
        "lines": [record["request"]["start_line"], record["request"]["end_line"]],
        "summary": record.get("summary", ""),
        "turns": record.get("turns"),
        "edits": len(record.get("edits", [])),
        "error": record.get("error"),
    }
