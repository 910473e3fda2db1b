"""The end of a run: write the migration where the user asked, with its evidence.

Nothing reaches the user's tree before this point. The codemods' report
(``changes.patch`` and friends, from ``tools.report.migration``) is written
for the final overlay, so it includes the LLM's verified edits; beside it,
``verification.json`` and ``verification.md`` say what was run, what was
compared, the verdict and every decision the agents made; ``index.html`` shows all of
it on one page. All of them go to
the writer together, so the output appears whole (report included) or not at
all, and a run killed while writing finishes the write when resumed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypedDict

from torchport.sandbox.isolation.guarantees import describe
from torchport.tools.filenames import printable_data
from torchport.tools.migrate import (
    FileChange,
    MigrateOptions,
    MigrationResult,
    computed_migration,
    write_result,
)
from torchport.tools.report.counts import count_constructs
from torchport.tools.safetext import markdown_code, markdown_text
from torchport.tools.sourcefile import read_exact

from . import divergence_report, legacy_repair, library_patch, plots, report_page
from .data_notes import data_notes, interpreter_note
from .fallback_report import fallbacks_markdown
from .kernel_records import CaseResult, KernelCheckRecord
from .report_record import ReportRecord, SandboxUsed
from .run_record import RunRecord
from .state import AgentEdit, State, scan_filters
from .tolerance import policies_for
from .verification_records import ParityRecord, PrecisionRecord, Timings, VerificationRecord


class Written(TypedDict, total=False):
    """Where the result went, for the decision log; ``written: None`` on a dry run."""

    written: None
    output: str
    constructs: int
    converted: int
    left_for_humans: int
    advisories: int
    branch: str
    backup: str
    report: str


PLOT = "losses.png"  # beside verification.md, which shows it
HTML = "index.html"  # the whole report as one page (agents.report_page)


def options_of(settings: Mapping[str, Any], dry_run: bool | None = None) -> MigrateOptions:
    return MigrateOptions(
        target=settings["target"],
        select=tuple(settings.get("select") or ()),
        **scan_filters(settings),
        out=Path(settings["out"]) if settings.get("out") else None,
        in_place=bool(settings.get("in_place")),
        branch=settings.get("branch"),
        dry_run=bool(settings.get("dry_run")) if dry_run is None else dry_run,
        annotate=bool(settings.get("annotate")),
        force=bool(settings.get("force")),
        safe_only=bool(settings.get("safe_only")),
    )


def migration_result(state: Mapping[str, Any]) -> MigrationResult:
    """The codemods' result with its changes replaced by the run's final overlay.

    The result is the one the rewrite node computed for this run (never a second pass of
    the codemods), unless this process did not compute it (a resumed run)."""
    s = state["settings"]
    source = Path(s["source"])
    options = options_of(s, dry_run=True)
    result = computed_migration(source, options, s.get("run_id"), state.get("plan_scan"))
    overlay = state.get("overlay") or {}
    result.changes = [
        FileChange(rel, _original(source / rel), text) for rel, text in sorted(overlay.items())
    ]
    # the lines the original ran repaired for current PyTorch, repaired in the port too
    repairs = (state.get("verification") or {}).get("legacy_repairs") or []
    result.edits = [*result.edits, *legacy_repair.port_edits(repairs)]
    return result


def _original(path: Path) -> str:
    """The original text of a file of the overlay; "" for one the port adds (a file a fix
    ships, tools.migrate.shipped_files)."""
    return read_exact(path, errors="surrogateescape") if path.exists() else ""


def deliver(state: State, outcome: str, say: Callable[[str], None]) -> Written:
    """Write the result and the evidence; returns where they went (for the decision log)."""
    s = state["settings"]
    if s.get("dry_run"):
        return {"written": None}
    result = migration_result(state)
    files = verification_files(state, outcome)
    files[HTML] = html_page(state, outcome, result, files)
    write_result(result, options_of(s), say, files)
    totals = count_constructs(result).totals()
    written: Written = {
        "output": str(result.output),
        # what the front doors count, so none of them has to run the codemods again
        "constructs": totals["found"],
        "converted": totals["converted"],
        "left_for_humans": totals["left"],
        "advisories": totals["advisory"],
    }
    if result.branch:
        written["branch"] = result.branch
    if result.backup:
        written["backup"] = str(result.backup)
    if result.report_dir is not None:
        written["report"] = str(result.report_dir)
    return written


def html_page(
    state: State, outcome: str, result: MigrationResult, files: dict[str, str | bytes]
) -> str:
    """``index.html``: the whole report as one page, from the same record, parts of
    verification.md and plots as the files beside it."""
    record = verification_record(state, outcome)
    images = {name: data for name, data in files.items() if isinstance(data, bytes)}
    parts = verification_sections(record)
    return report_page.html_report(state["settings"], result, record, parts, images)


def verification_record(state: State, outcome: str) -> ReportRecord:
    s = state["settings"]
    return {
        "run_id": s.get("run_id"),
        "target": s["target"],
        "verdict": outcome,
        "verification": state.get("verification"),
        "iterations": state.get("iteration", 0),
        "plan": state.get("plan"),
        "decisions": state.get("decisions", []),
        "agent_edits": state.get("agent_edits", []),
        "llm_usage": state.get("llm_usage") or {},
        "elapsed_s": round(state.get("elapsed_s", 0.0), 3),
        "sandbox": sandbox_used(state.get("verification")),
        "environment": state.get("environment") or {},
    }


def sandbox_used(verification: VerificationRecord | None) -> list[SandboxUsed]:
    """Which isolation backend the verification's sandboxed runs had, and what each
    isolates: a verdict reached under ``process`` ran with no isolation at all, and a
    reader of the report should not have to open the JSON to learn it."""
    v: VerificationRecord = verification or {}
    runs: dict[str, list[str]] = {}
    for run, record in (("original", v.get("reference")), ("migrated", v.get("target"))):
        if backend := (record or {}).get("isolation"):
            runs.setdefault(backend, []).append(run)
    return [
        {"backend": backend, "runs": names, "isolates": describe(backend)}
        for backend, names in runs.items()
    ]


def verification_files(state: State, outcome: str) -> dict[str, str | bytes]:
    """``verification.json`` and ``verification.md``, for the writer to put in the report."""
    record = verification_record(state, outcome)
    v: Mapping[str, Any] = state.get("verification") or {}
    patches = v.get("library_patches") or []
    return {
        "verification.json": json.dumps(printable_data(record), indent=2, default=str),
        "verification.md": verification_markdown(record),
        **library_patch.patch_files(patches),  # the installed files the port ran ported
        **plot_files(state),
    }


def plot_files(state: Mapping[str, Any]) -> dict[str, bytes]:
    """``losses.png``: both runs' losses per step and the tolerance band they were judged by;
    ``divergence.png``: where a port that fails first computes otherwise, module by module."""
    v = state.get("verification") or {}
    policy = policies_for(state["settings"].get("tolerance")).get(str(v.get("policy") or ""))
    drawn = plots.loss_png(v, (policy.rtol, policy.atol)) if policy is not None else None
    profile = divergence_report.png(v.get("divergence") or {}, policy.rtol) if policy else None
    return {
        **({PLOT: drawn} if drawn else {}),
        **({divergence_report.PLOT: profile} if profile else {}),
    }


def verification_markdown(record: ReportRecord) -> str:
    """``verification.md``. The reason, the entry command, the runtime evidence, the LLM's
    edits and the decisions quote the program and the repository (error messages, file
    names, code), so each is a code span or escaped text: rendering it shows them, never
    runs their HTML or fetches their images."""
    lines = [line for part in verification_sections(record).values() for line in part]
    usage = record.get("llm_usage") or {}
    if usage:
        lines += ["", f"LLM: {markdown_code(json.dumps(usage))}"]
    return "\n".join(lines) + "\n"


def verification_sections(record: ReportRecord) -> dict[str, list[str]]:
    """verification.md's parts in its order, by name: the HTML report shows each where it
    belongs (the summary first, the losses by the plots, ...) from the same lines."""
    v: VerificationRecord = record.get("verification") or {}
    return {
        "summary": _summary_markdown(record, v),
        "timing": timings_markdown(v.get("timings") or {}),
        "losses": _parity_markdown(v.get("parity") or {}),
        "divergence": divergence_report.markdown(v.get("divergence") or {}),
        "precision": precision_markdown(v.get("precision")),
        "kernels": kernel_check_markdown(v.get("kernel_check")),
        "fallbacks": fallbacks_markdown(v.get("fallbacks") or []),
        "environment": environment_markdown(record.get("environment") or {}),
        "evidence": _evidence_markdown(v.get("target") or {}),
        "agent_edits": _agent_edits_markdown(record["agent_edits"]),
        "decisions": _decisions_markdown(record["decisions"]),
    }


def _decisions_markdown(decisions: list[dict[str, Any]]) -> list[str]:
    lines = ["", "## Decisions", ""]
    for d in decisions:
        why = d.get("why") or ""
        lines.append(
            f"- **{_md(d['node'])}**: {_md(d['decision'])}" + (f" — {_md(why)}" if why else "")
        )
    return lines


def _summary_markdown(record: ReportRecord, v: VerificationRecord) -> list[str]:
    """The verdict line and the facts a reader needs to trust it."""
    lines = [
        f"# Verification: {_md(record['verdict'])}{_headline_note(v)}",
        "",
        f"- target: `{record['target']}`; run {markdown_code(str(record['run_id']))}; "
        f"{record['iterations']} verification round(s); {record['elapsed_s']} s",
        f"- why: {_md(v.get('reason', 'verification was not run (--no-verify)'))}",
        *([f"- next step: {_md(v['next_step'])}"] if v.get("next_step") else []),
    ]
    if v.get("caveat"):
        lines.append(f"- caveat: {_md(v['caveat'])}")
    if interpreted := interpreter_note(v.get("reference")):
        lines.append(f"- reference: {_md(interpreted)}")
    for used in record.get("sandbox") or []:
        lines.append(
            f"- sandbox ({_programs(used['runs'])}): {markdown_code(used['backend'])} — "
            f"{_md(used['isolates'])}"
        )
    plan = record.get("plan") or {}
    if entry := plan.get("entry"):
        lines.append(
            f"- entry: {markdown_code(' '.join(entry))} ({_md(plan.get('entry_reason', ''))})"
        )
    if v.get("launch"):
        lines.append(
            f"- port's command: {markdown_code(v['launch'])} (its launch line takes TorchTPU's "
            "launch step, so the port's run took it in torchrun's parent too)"
        )
    if v.get("policy"):
        lines.append(
            f"- tolerance policy: {markdown_code(v['policy'])} (agents/data/tolerance.toml)"
        )
    return lines + kernel_runner_markdown((v.get("reference") or {}).get("cuda_kernel_runner"))


def kernel_runner_markdown(extensions: list[dict[str, Any]] | None) -> list[str]:
    """One line per CUDA extension of the original that torchport's CPU runner built for
    the reference run: what ran (kernels and launches, or its own CPU kernels), what was
    refused and where, or why it could not be built."""
    lines = []
    for ext in extensions or []:
        where = f"{markdown_code(str(ext.get('api')))} at {markdown_code(str(ext.get('site')))}"
        head = f"- reference kernels: {markdown_code(str(ext.get('name')))} ({where}) "
        if ext.get("error"):
            lines.append(head + f"could not run on torchport's CPU runner: {_md(ext['error'])}")
            continue
        if ext.get("cpu_kernels"):
            what = f"ran its own CPU kernels (dispatch at {markdown_code(ext['cpu_kernels'])})"
        else:
            launches = ext.get("launches") or {}
            ran = ", ".join(f"{markdown_code(k)} x{n}" for k, n in sorted(launches.items()))
            what = f"ran on torchport's CPU runner for CUDA kernels: {ran or 'no launches'}"
        refused = [
            f"{markdown_code(str(r.get('function')))} ({_md(r.get('family'))}, "
            f"{markdown_code(str(r.get('file')) + ':' + str(r.get('line')))})"
            for r in ext.get("refused") or []
        ]
        lines.append(head + what + (f"; refused: {', '.join(refused)}" if refused else ""))
    return lines


def timings_markdown(timings: Timings) -> list[str]:
    """One line: where the verification's time went (``timings`` in verification.json)."""
    if not timings:
        return []
    ref, migrated = timings["reference"], timings["migrated"]
    phases = migrated.get("phases") or {}
    spent = "".join(
        f", {phases[name]} s {name}" for name in ("program", "teardown") if name in phases
    )
    return [
        f"- time: {timings['total_s']} s: original {ref['source']} ({ref['seconds']} s), "
        f"{_md(timings['runs'])}; migration {migrated['seconds']} s "
        f"({migrated.get('start_up_s', '?')} s start-up{spent}); "
        f"comparison {timings['compare_s']} s"
        + (
            f"; the migration again at the TPU's default matmul precision "
            f"{timings['default_precision']['seconds']} s"
            if "default_precision" in timings
            else ""
        )
        + (
            f"; the two traced runs that found the first divergence "
            f"{timings['divergence']['seconds']} s"
            if "divergence" in timings
            else ""
        )
    ]


def _parity_markdown(parity: ParityRecord) -> list[str]:
    """The losses of both runs, step by step (rank by rank for several processes)."""
    if not parity.get("per_step"):
        return []
    ranked = "rank" in parity["per_step"][0]  # several processes: rank i against rank i
    head = "| rank | step |" if ranked else "| step |"
    lines = ["", f"{head} original (shim) | migrated (emulator) |"]
    lines.append("|---:" * (4 if ranked else 3) + "|")
    lines += [
        f"|{(' ' + str(p['rank']) + ' |') if ranked else ''} {p['step']} | "
        f"{p['reference']:.6g} | {p['target']:.6g} |"
        for p in parity["per_step"]
    ]
    lines.append(
        f"\nmax abs error {parity.get('max_abs', 0):.3g}, "
        f"max rel error {parity.get('max_rel', 0):.3g}"
    )
    if parity.get("compared") == "losses":  # drawn beside this file (plot_files)
        lines += ["", f"![both runs' losses per step, with the tolerance band]({PLOT})"]
    return lines


def precision_markdown(precision: PrecisionRecord | None) -> list[str]:
    """The port's two runs (``agents.precision_check``): (a) with exact float32 matmuls
    against the original, (b) at the TPU's default arithmetic against (a), each with its
    measured deviation, and (b)'s losses beside (a)'s when it ran."""
    if not precision:
        return []
    highest, default = precision["highest"], precision["default"]
    lines = ["", "## Matmul precision: the port run twice", ""]
    lines.append(
        "| check | float32 matmuls | against | compared | max abs | max rel | policy | result |"
    )
    lines.append("|---|---|---|---|---:|---:|---|---|")
    lines.append(_check_row("(a) port bugs", "highest (exact)", "the original", highest, True))
    lines.append(
        _check_row("(b) the TPU's arithmetic", "default (bf16 passes)", "(a)", default, False)
    )
    if default.get("per_step"):
        lines += ["", "| step | at highest | at the TPU's default |", "|---:|---:|---:|"]
        lines += [
            f"| {p['step']} | {p['highest']:.6g} | {p['default']:.6g} |"
            for p in default["per_step"]
        ]
    return lines


def _check_row(
    name: str, matmuls: str, against: str, check: Mapping[str, Any], always: bool
) -> str:
    """One check's row; a check that did not run says why in place of its numbers."""
    policy = markdown_code(str(check.get("policy", "")))
    if not (always or check.get("ran")):
        why = _md(check.get("why", ""))
        return f"| {name} | {matmuls} | {against} | — | — | — | {policy} | not run: {why} |"
    holds = check.get("holds")
    result = {True: "holds", False: "fails", None: "compared nothing"}[holds]
    if check.get("why") and holds is not True:
        result += f": {_md(check['why'])}"
    return (
        f"| {name} | {matmuls} | {against} | {check.get('steps', 0)} "
        f"{_md(check.get('compared', 'nothing'))} | {check.get('max_abs', 0.0):.3g} "
        f"| {check.get('max_rel', 0.0):.3g} | {policy} | {result} |"
    )


def kernel_check_markdown(checked: KernelCheckRecord | None) -> list[str]:
    """The differential check at the kernel call sites: each site, each recorded input
    signature, and the worst difference found (``kernel_check`` in verification.json)."""
    if not checked:
        return []
    verdict = {True: "holds", False: "fails", None: "compared nothing"}[checked.get("holds")]
    lines = ["", f"## Kernel call sites (differential check: {verdict})", ""]
    lines.append(_md(checked.get("reason", "")))
    rows = [(row, case) for row in checked.get("sites") or [] for case in row.get("cases") or []]
    if rows:
        lines += ["", "| site | inputs | result | worst | time, port / original |"]
        lines.append("|---|---|---|---|---|")
    for row, case in rows:
        worst = case.get("worst") or {}
        shown = (
            f"{_md(worst.get('label', ''))}: {_md(worst.get('why', ''))}"
            if worst.get("why")
            else f"max abs {worst.get('max_abs', 0.0):.3g}"
            if worst
            else _md(case.get("note", ""))
        )
        result = {True: "matches", False: "differs", None: "not compared"}[case.get("holds")]
        lines.append(
            f"| {markdown_code(row['site'])} | {_md(case.get('inputs', ''))} | {result} "
            f"| {shown} | {_time_ratio(case)} |"
        )
    for row in checked.get("sites") or []:
        if row.get("note"):
            lines.append(f"- {markdown_code(row['site'])}: {_md(row['note'])}")
        if "time_ratio" in row:
            lines.append(
                f"- {markdown_code(row['site'])}: the port's call takes {row['time_ratio']:.2f}x "
                "the original's on the reference (fastest forward call of a few; the reference "
                "runs the original's kernels through Triton's interpreter or the CUDA runner, "
                "on this machine's CPU)"
            )
    return lines


def _time_ratio(case: CaseResult) -> str:
    original, port = case.get("seconds_original"), case.get("seconds_port")
    if original is None or port is None or original <= 0:
        return "not timed"
    return f"{port / original:.2f}x ({port * 1e3:.3g} ms / {original * 1e3:.3g} ms)"


def _evidence_markdown(target: RunRecord) -> list[str]:
    """What the emulated device counted while the migration ran, and notes on its data."""
    counters = target.get("counters") or {}
    lines: list[str] = []
    if counters:
        lines += ["", "## Runtime evidence (migrated program)", ""]
        lines += [
            f"- {_md(k)}: {_md(counters[k])}" for k in sorted(counters) if k != "host_sync_sites"
        ]
    return lines + [f"- {_md(note)}" for note in data_notes(target)]


def _agent_edits_markdown(edits: list[AgentEdit]) -> list[str]:
    if not edits:
        return []
    lines = ["", "## Edits beyond the codemods", ""]
    for e in edits:
        lines.append(
            f"- {markdown_code(str(e.get('path')))} lines {e.get('start_line')}-"
            f"{e.get('end_line')} ({_md(e.get('by'))}, for {_md(e.get('for'))}): "
            f"{_md(e.get('reason', ''))}"
        )
    return lines


def _headline_note(verification: VerificationRecord) -> str:
    """What the first line must not leave out: a check looser than torchport's own (the
    repository's or the user's), the original failing too, or a caveat."""
    loosened = "; ".join(f"under {_md(said)}" for said in verification.get("loosened") or [])
    head = f" {loosened}" if loosened else ""
    reason = str(verification.get("reason") or "")
    precision = verification.get("precision")
    if precision and precision["default"]["holds"] is False:
        return f"{head} (at the TPU's default matmul precision; exact float32 matches)"
    if reason.startswith("the original fails here"):
        return f"{head} ({_md(reason.partition(':')[0])})"
    return head + (" (with a caveat)" if verification.get("caveat") else "")


HIDDEN_SHOWN = 8  # of torchport's hidden packages, named in verification.md


def environment_markdown(environment: Mapping[str, Any]) -> list[str]:
    """The program's dependencies: what was installed for the runs, what was skipped and
    why, and what could not be had (each quoted: names come from the repository)."""
    if not environment:
        return []
    lines = ["", "## Dependencies", ""]
    cached = " (reused from the cache)" if environment.get("cached") else ""
    for pin in environment.get("installed") or []:
        lines.append(f"- installed {markdown_code(pin)}{cached}")
    for name, why in sorted((environment.get("unavailable") or {}).items()):
        lines.append(f"- could not install {markdown_code(name)}: {_md(why)}")
    for note in environment.get("notes") or []:
        lines.append(f"- {_md(note)}")
    for s in environment.get("skipped") or []:
        lines.append(
            f"- skipped {markdown_code(s.get('requirement', ''))} "
            f"({_md(s.get('source', ''))}): {_md(s.get('reason', ''))}"
        )
    if len(lines) == 3:
        lines.append("- nothing to install: torchport's environment has what the program declares")
    hidden = environment.get("hidden") or []
    if hidden:
        shown = ", ".join(markdown_code(name) for name in hidden[:HIDDEN_SHOWN])
        more = f" and {len(hidden) - HIDDEN_SHOWN} more" if len(hidden) > HIDDEN_SHOWN else ""
        lines.append(
            f"- absent in both runs: torchport's own packages that the program does not name "
            f"({shown}{more}; all in the JSON report)"
        )
    return lines


def _programs(runs: list[str]) -> str:
    return " and ".join(runs) + (" programs" if len(runs) > 1 else " program")


def _md(value: Any) -> str:
    return markdown_text(str(value))
