"""One verification of a proposed migration, shared by the graph and by chat's /verify.

Both front doors must judge a migration the same way: the same dependency overlay, the
same scratch copy of the tree, the same reference run (made once and reused), the same
budget read from the settings. Keeping the step in one place is what guarantees that a
chat session's verdict is the one ``torchport migrate`` would give.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torchport.tools.sourcefile import read_exact

from . import kernel_improve, library_patch, loosening, runs, verifier
from .environment import prepare_environment
from .run_record import EnvironmentRecord, RunRecord
from .state import PlanRecord
from .verdicts import Reason, Verdict
from .verification_records import PatchJSON
from .workspace import materialize

MAX_PATCHED = library_patch.MAX_FILES


@dataclass
class VerifyOutcome:
    """The verdict, and what a later round reuses instead of making again."""

    verification: verifier.Verification
    reference: RunRecord | None  # the original's run (None when not runnable)
    environment: EnvironmentRecord | None  # the dependency overlay the runs used
    # the overlay with the lines the original ran repaired (agents.legacy_repair); None: as given
    overlay: dict[str, str] | None = None


def verify_overlay(
    source: Path,
    overlay: Mapping[str, str],
    plan: PlanRecord,
    target: str,
    settings: Mapping[str, Any],
    scratch: Path,
    say: Callable[[str], None],
    *,
    reference: RunRecord | None = None,
    environment: EnvironmentRecord | None = None,
) -> VerifyOutcome:
    """Run the original (unless ``reference`` is given) and the migration; judge them.

    ``scratch`` is this run's own folder: the migrated tree is materialised under it
    from ``overlay`` every time, never reused from what an interrupted step left.
    """
    why_not = plan.get("not_runnable")
    entry = plan.get("entry")
    if why_not or not entry:
        why = why_not or "no entry point: nothing to run"
        refused = verifier.Verification(Verdict.NOT_RUNNABLE, why, code=Reason.NO_ENTRY)
        return VerifyOutcome(refused, None, environment)
    budget = verifier.budget_of(settings)
    if environment is None:
        environment = prepare_environment(
            source,
            settings.get("deps", "auto"),
            say,
            settings.get("python"),
            entry=entry,
            time_limit_s=budget.timeout_s,
        )
    work = materialize(source, dict(overlay), scratch / "work")

    def verify(environment: EnvironmentRecord, reference: RunRecord | None) -> Verified:
        return verifier.verify_tree(
            source,
            work,
            entry,
            target,
            budget,
            runs.home() / "references",
            reference=reference,
            say=say,
            environment=environment,
            tolerance=settings.get("tolerance"),
        )

    verification, ran = verify(environment, reference)
    verification = _library_patched(verification, ran, verify, environment, (target, scratch))
    # a looser check than torchport's own, from the repository's file or the user, is said
    verification = loosening.said(verification, settings)
    # the kernel call sites run through a fallback, and what that costs on the device
    found = kernel_improve.fallback_sites(source, overlay)
    verification = replace(
        verification, fallbacks=kernel_improve.costs(found, verification.to_json())
    )
    return VerifyOutcome(verification, ran, environment, _repaired(overlay, work, verification))


Verified = tuple[verifier.Verification, RunRecord | None]


def _library_patched(
    v: verifier.Verification,
    ran: RunRecord | None,
    verify: Callable[[EnvironmentRecord, RunRecord | None], Verified],
    environment: EnvironmentRecord,
    where: tuple[str, Path],
) -> verifier.Verification:
    """``v``, or where the port failed on CUDA inside an installed library, the verdict of
    the port run again with those files ported (``agents.library_patch``), when it got
    further; the original's run (``ran``) is reused."""
    target, scratch = where
    sites = tuple(p for p in [environment.get("path")] if p)  # what torchport installed
    if ran is None or ran.get("status") != "ok" or not sites:
        return v
    patched = scratch / library_patch.SITE
    shutil.rmtree(patched, ignore_errors=True)  # an earlier round's copies
    patched_env: EnvironmentRecord = {**environment, "patched_site": str(patched)}
    patches: list[PatchJSON] = []
    current = v
    while len(patches) < MAX_PATCHED:
        inside = library_patch.failing_file(current.failure or {}, target, sites)
        if inside is None:
            break
        patched.mkdir(parents=True, exist_ok=True)
        patch = library_patch.patch_file(inside, sites, patched, target)
        if patch is None:
            break
        patches.append(patch.to_json())
        current, _ = verify(patched_env, ran)
    if not patches or verifier.rank(current.to_json()) <= verifier.rank(v.to_json()):
        return v
    return replace(
        current,
        library_patches=patches,
        reason=f"{library_patch.note(patches)}; {current.reason}",
        next_step=library_patch.next_step(patches),
    )


def _repaired(
    overlay: Mapping[str, str], work: Path, v: verifier.Verification
) -> dict[str, str] | None:
    """``overlay`` with the port's files the legacy repairs changed in ``work``, or None."""
    changed = {site[0] for r in v.legacy_repairs for site in r.get("port_lines") or ()}
    if not changed:
        return None
    return {**overlay, **{rel: read_exact(work / rel) for rel in sorted(changed)}}
