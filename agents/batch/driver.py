"""Run a batch: skip what is done, launch the rest on an executor, file each result, summarize.

The driver is the only writer of ``results/`` and ``journal.jsonl`` (jobs write
only their own folders), so the batch's bookkeeping stays consistent when jobs
run on other machines, and a kill at any moment leaves at worst a repository
that is redone on the next run.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchport.sandbox.isolation import looks_secret

from .executors import Executor, ExecutorError
from .job import JobSpec
from .progress import Progress
from .sources import Source
from .store import Store
from .summary import summarize, write_summary


def run_batch(
    sources: Sequence[Source],
    out_dir: Path,
    settings: dict[str, Any],
    executor: Executor,
    quiet: bool = False,
) -> dict[str, Any]:
    """Migrate every source not already done; returns the summary (also written to DIR)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    store = Store(out_dir)
    store.check_fresh()
    with store.locked():
        store.check_identity(settings)
        done = store.finished(list(sources))
        store.reconcile(done)
        attempts = Counter(e["name"] for e in store.journal() if e.get("event") == "started")
        todo = [s for s in sources if s.name not in done]
        env = {**job_env(), **(shared_model(settings, executor) if todo else {})}
        specs = [JobSpec(s, str(out_dir), settings, env) for s in todo]

        def started(spec: JobSpec) -> None:
            attempts[spec.name] += 1
            store.log("started", spec.name, attempt=attempts[spec.name])

        with Progress(len(sources), len(done), quiet) as progress:
            progress.say(
                f"{len(sources)} repositories to {settings['target']}: {len(done)} already done, "
                f"{len(specs)} to migrate ({executor.jobs} at a time, {executor.name})"
            )
            # closing: an interrupted batch stops its jobs now, not when garbage is collected
            with contextlib.closing(executor.run(specs, started)) as finished:
                for spec, record in finished:
                    store.save(record)
                    store.log("finished", spec.name, verdict=record["verdict"])
                    done[spec.name] = record
                    progress.finished(record)
            summary = summarize([done[s.name] for s in sources], settings)
            written = write_summary(out_dir, summary)
            progress.say(f"summary: {written[0]} (also .csv, .json); the page: {written[-1]}")
    return summary


def shared_model(settings: dict[str, Any], executor: Executor) -> dict[str, str]:
    """One embedded model for all local jobs (each would otherwise start its own 2 GB
    server); the jobs find it through the environment. Ray jobs, possibly on other
    machines, start their own."""
    from torchport.agents.llm.config import resolve
    from torchport.agents.llm.factory import SHARED_LOCAL_MODEL, SHARED_LOCAL_URL

    config = resolve(settings.get("llm"), os.environ)
    if executor.name != "local" or config is None or not config.local:
        return {}
    from torchport.agents.llm import local

    try:
        server = local.LocalServer.shared()  # stopped when the batch ends
    except local.LocalModelError as exc:
        raise ExecutorError(f"cannot start the embedded model: {exc}") from exc
    return {SHARED_LOCAL_URL: server.base_url, SHARED_LOCAL_MODEL: server.model}


def job_env() -> dict[str, str]:
    """torchport's settings for jobs on other machines: no credentials, no per-job values."""
    return {
        k: v
        for k, v in os.environ.items()
        if k.startswith("TORCHPORT_") and k != "TORCHPORT_CHECKPOINTS" and not looks_secret(k)
    }
