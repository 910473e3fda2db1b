"""One repository of a batch: fetch it, run the agent graph on it, and describe the outcome.

A job runs in a process of its own (``main``), which an executor starts fresh for
every repository, so memory is returned and nothing leaks from one repository to
the next. Whatever goes wrong becomes the repository's record (verdict
``error``), never an exception that stops the batch. Records name paths relative
to the batch's DIR, and carry no run id or clock time beyond ``time_s``, so the
summary of a resumed batch equals an uninterrupted one's.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from torchport.agents import config_record, runs
from torchport.sandbox.isolation import hide_own_secrets

from ..state import State
from ..verdicts import Verdict
from .clone import checkout
from .sources import Source

# Graph settings every job of a batch shares (agents.defaults.DEFAULTS for the rest).
SHARED_SETTINGS = (
    "target",
    "verify",
    "steps",
    "timeout_s",
    "memory_mb",
    "isolation",
    "deps",
    "python",
    "max_iterations",
    "max_llm_tokens",
    "llm",
)


@dataclass(frozen=True)
class JobSpec:
    """Everything a job needs, picklable (it crosses to a spawned process or a Ray worker)."""

    source: Source
    out_dir: str  # the batch's DIR, absolute; on a cluster, a path every node sees
    settings: dict[str, Any]  # SHARED_SETTINGS
    env: dict[str, str] = field(default_factory=dict)  # set in the job's process first

    @property
    def name(self) -> str:
        return self.source.name


def paths(out_dir: str | Path, name: str) -> dict[str, Path]:
    """Where a job keeps its things under DIR (one place, so the driver and docs/batch.md agree)."""
    out = Path(out_dir)
    return {
        "repo": out / "repos" / name,
        "migrated": out / "repos" / name / "migrated",
        "clone": out / "sources" / name,
        "state": out / "state" / f"{name}.sqlite",
        "log": out / "logs" / f"{name}.log",
    }


class JobOutcome(TypedDict):
    """A finished run's part of its record (``outcome``)."""

    verdict: str
    reason: str
    constructs: int
    converted: int
    converted_share: float | None
    manual_items: int
    advisories: int
    llm_edits: int
    llm_tokens: int
    report: str | None  # the report folder, relative to DIR


class JobRecord(JobOutcome):
    """One repository's line of the batch (the journal, ``summary.json``): ``base_record``
    and what its run filled in."""

    name: str
    source: str
    ref: str | None
    entry: str | None
    commit: str | None
    configuration: str | None
    time_s: float
    run_id: str | None
    error: NotRequired[str]  # the traceback of a job that raised


def main(spec: JobSpec) -> JobRecord:
    """The entry point of a job's own process: its output goes to DIR/logs/NAME.log."""
    hide_own_secrets()  # a fresh process (spawn, Ray): its environ holds the keys again
    log = paths(spec.out_dir, spec.name)["log"]
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)  # warnings, the sandbox's notices, anything a library prints
    os.dup2(fd, 2)
    os.close(fd)
    return run_job(spec)


def run_job(spec: JobSpec) -> JobRecord:
    """Migrate one repository from scratch and return its record; never raises."""
    started = time.perf_counter()
    where = paths(spec.out_dir, spec.name)
    os.environ.update(spec.env)
    os.environ["TORCHPORT_CHECKPOINTS"] = str(where["state"])  # per job: no lock contention
    record = base_record(spec)
    run_id = None
    try:
        for suffix in ("", "-wal", "-shm"):  # a killed attempt's checkpoints: start over
            Path(f"{where['state']}{suffix}").unlink(missing_ok=True)
        if where["repo"].exists():
            shutil.rmtree(where["repo"])  # whatever a killed attempt half-wrote
        where["repo"].mkdir(parents=True)
        source, commit = checkout(spec.source, where["clone"])
        record["commit"] = commit
        run_id = runs.new_run_id()
        record["run_id"] = run_id
        final = _migrate(spec, source, where["migrated"], run_id)
        record.update(outcome(final, where["migrated"], spec.out_dir))
        given: Mapping[str, Any] = final["settings"]  # the configuration: not a Settings key
        kept = given.get(config_record.KEY)
        record["configuration"] = portable(config_record.summary(kept), spec.out_dir)
    except Exception as exc:  # one repository's failure is its record, not the batch's end
        record["verdict"], record["reason"] = Verdict.ERROR, f"{type(exc).__name__}: {exc}"
        record["error"] = traceback.format_exc(limit=8)
        print(record["error"], file=sys.stderr, flush=True)
    finally:
        if run_id is not None:
            shutil.rmtree(runs.home() / "runs" / run_id, ignore_errors=True)  # scratch copies
    record["reason"] = portable(record["reason"], spec.out_dir)
    record["time_s"] = round(time.perf_counter() - started, 1)
    return record


def base_record(spec: JobSpec) -> JobRecord:
    """A record before anything ran: also what a job that died without a word leaves."""
    return {
        "name": spec.name,
        "source": spec.source.location,
        "ref": spec.source.ref,
        "entry": spec.source.entry,
        "commit": None,
        "verdict": Verdict.ERROR,
        "reason": "",
        "configuration": None,
        "constructs": 0,
        "converted": 0,
        "converted_share": None,
        "manual_items": 0,
        "advisories": 0,
        "llm_edits": 0,
        "llm_tokens": 0,
        "time_s": 0.0,
        "report": None,
        "run_id": None,
    }


def crashed(spec: JobSpec, why: str) -> JobRecord:
    """The record of a job whose process died (killed for memory, a crash in native code)."""
    return {**base_record(spec), "reason": why}


def _migrate(spec: JobSpec, source: Path, out: Path, run_id: str) -> State:
    from torchport.agents import graph
    from torchport.agents.llm.factory import llm_factory

    def say(message: str) -> None:
        print(f"torchport: {message}", file=sys.stderr, flush=True)

    settings = {
        **{k: spec.settings[k] for k in SHARED_SETTINGS if k in spec.settings},
        **project_settings(spec, source),
        "source": str(source),
        "out": str(out),
        "force": True,  # replaces what a killed attempt left
        "run_id": run_id,
    }
    say(f"{spec.name}: run {run_id}, {source} -> {out}")
    say(f"{spec.name}: {config_record.summary(settings[config_record.KEY])}")
    return graph.start(settings, graph.Runtime(run_id, say, llm_factory(say)))


def project_settings(spec: JobSpec, source: Path) -> dict[str, Any]:
    """The repository's own configuration under the batch's ``TORCHPORT_*`` variables and
    flags (``agents.project_config``); the list's entry for it counts as a flag, so it wins
    over the repository's file, which wins over the planner's choice. Raises ConfigError,
    which makes the record ``error``."""
    from torchport.agents.project_config import Overrides, resolve

    given = spec.settings.get("overrides") or {}
    above = Overrides(**given)
    if spec.source.entry:
        above = Overrides(above.env, {**above.flags, "entry": spec.source.entry}, above.defaults)
    config = resolve(source, above)
    settings = {name: setting.value for name, setting in config.settings.items()}
    settings[config_record.KEY] = config_record.record(config)
    if spec.source.entry:  # a flag to the configuration, the list's to whoever reads it
        settings = config_record.given(settings, "entry", spec.source.entry, "the batch list")
    return settings


def outcome(final: Mapping[str, Any], migrated: Path, out_dir: str) -> JobOutcome:
    """The record's numbers for a finished run: verdict, constructs, what was converted."""
    # the report node's counts (deliver): the scan is for the target, so only what it needs
    written = next(d for d in reversed(final["decisions"]) if d.get("node") == "deliver")
    constructs = int(written["constructs"])  # = converted + manual + advisories
    manual = int(written["left_for_humans"])
    advisories = int(written.get("advisories", 0))  # a run resumed from before they counted
    converted = int(written.get("converted", constructs - manual - advisories))
    usage = final.get("llm_usage") or {}
    v = final.get("verification") or {}
    report = migrated / "torchport-report"
    return {
        "verdict": final.get("outcome", Verdict.NOT_VERIFIED),
        "reason": v.get("reason") or "verification was not run (--no-verify)",
        "constructs": constructs,
        "converted": converted,
        "converted_share": share(converted, constructs),
        "manual_items": manual,
        "advisories": advisories,
        "llm_edits": len(final.get("agent_edits") or []),
        "llm_tokens": int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0)),
        "report": str(report.relative_to(out_dir)) if report.is_dir() else None,
    }


def share(converted: int, constructs: int) -> float | None:
    """The converted fraction; None when there was nothing to convert."""
    return round(converted / constructs, 4) if constructs else None


def portable(text: str, out_dir: str) -> str:
    """``text`` with DIR and the scratch folder left out, so two batches read the same."""
    text = text.replace(str(Path(out_dir)) + os.sep, "")
    return text.replace(str(runs.home() / "runs") + os.sep, "<scratch>" + os.sep)
