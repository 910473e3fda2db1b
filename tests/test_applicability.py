"""Fix applicability: every automatic fix says what it may change, the report lists those
that can change results under their own heading, and ``--safe-only`` applies only the
fixes that cannot (tools/catalogue/applicability.toml)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from torchport.tools.catalogue import applicability as app
from torchport.tools.catalogue import load_catalogue
from torchport.tools.migrate import MigrateOptions, migrate

PROGRAM = """\
import time

import torch

model = torch.nn.Linear(4, 4).cuda()
start = torch.cuda.Event(enable_timing=True)
end = torch.cuda.Event(enable_timing=True)
start.record()
with torch.cuda.amp.autocast():
    y = model(torch.randn(2, 4).cuda())
end.record()
torch.cuda.synchronize()
print(start.elapsed_time(end), time.time())
"""


def test_every_automatic_fix_declares_what_it_may_change() -> None:
    rules = list(load_catalogue())
    assert app.undeclared(rules) == [], "declare them in tools/catalogue/applicability.toml"
    assert set(app.declared()) <= {r.code for r in rules}, "a declared code has no rule"


def test_a_target_key_overrides_the_rules_applicability() -> None:
    assert app.of("TPA002", "tpu").applicability is app.Applicability.NUMERICS
    assert app.of("TPA002", "accelerator").applicability is app.Applicability.SAFE
    assert app.of("TPD001", "tpu").applicability is app.Applicability.SAFE
    # an undeclared rule is never taken for safe
    assert app.of("TPX999", "tpu").applicability is app.Applicability.BEHAVIOUR


@pytest.mark.parametrize(
    "table, message",
    [
        ({"TPA001": {"applicability": "maybe", "why": "x"}}, "is not one of"),
        ({"TPA001": {"applicability": "safe"}}, "no why"),
        ({"TPA001": {"applicability": "safe", "why": "x", "cuda": "safe"}}, "unknown keys"),
    ],
)
def test_a_malformed_table_is_refused_at_load(table: dict, message: str) -> None:
    with pytest.raises(app.ApplicabilityError, match=message):
        app.parse(table)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(PROGRAM)
    return repo


def test_the_report_lists_fixes_that_change_numerics_or_behaviour(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = migrate(_repo(tmp_path), MigrateOptions(target="tpu", out=out))
    migrated = (out / "train.py").read_text()
    assert "torch.bfloat16" in migrated and "torch.cuda" not in migrated
    summary = (out / "torchport-report" / "summary.md").read_text()
    section = summary.split("## Changes that can alter results", 1)[1]
    numerics, behaviour = section.split("### Behaviour", 1)
    assert "TPA001 at `train.py:9`" in numerics and "bfloat16" in numerics
    assert "TPT002" in behaviour and "wall time" in behaviour
    assert "TPD001" not in section  # a device move is a rename: not listed
    data = json.loads((out / "torchport-report" / "changes.json").read_text())
    kinds = {e["rule"]: e["applicability"] for e in data["edits"]}
    assert kinds["TPA001"] == "numerics" and kinds["TPT002"] == "behaviour"
    assert kinds["TPD001"] == "safe"
    assert data["summary"]["can_change_results"]["numerics"] >= 1
    assert result.unapplied == []


def test_safe_only_applies_renames_and_leaves_the_rest_for_a_human(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = migrate(_repo(tmp_path), MigrateOptions(target="tpu", out=out, safe_only=True))
    migrated = (out / "train.py").read_text()
    assert 'model = torch.nn.Linear(4, 4).to("tpu")' in migrated  # TPD001: a rename
    assert "torch.accelerator.synchronize()" in migrated  # TPT001: a rename
    assert "torch.cuda.amp.autocast()" in migrated, "fp16 -> bf16 is not a safe fix"
    assert "torch.cuda.Event" in migrated, "a rewritten timer is not a safe fix"
    withheld = {f.rule: why for f, why in result.unapplied}
    assert withheld["TPA001"].startswith("not applied (--safe-only): its fix changes numerics")
    assert "behaviour" in withheld["TPT002"]
    assert {e.rule for e in result.edits} <= {
        code for code in app.declared() if app.of(code, "tpu").applicability == "safe"
    }
    report = out / "torchport-report"
    assert "TPA001" in (report / "manual.md").read_text()
    summary = (report / "summary.md").read_text()
    assert "fixes that can change results were not applied (--safe-only" in summary
    assert "## Changes that can alter results" not in summary


def test_the_cli_passes_safe_only_through_the_agent_graph(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "torchport.cli", "migrate", str(_repo(tmp_path)), "--target",
         "tpu", "--out", str(out), "--safe-only", "--no-verify", "--llm", "none", "-q"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-2000:]
    migrated = (out / "train.py").read_text()
    assert "torch.cuda.amp.autocast()" in migrated and "torch.cuda.Event" in migrated
    assert "torch.accelerator.synchronize()" in migrated  # TPT001 is safe: applied
