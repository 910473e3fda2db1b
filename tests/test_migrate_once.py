"""One codemod pass per `torchport migrate` run: the report reads the rewrite's result."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from torchport.cli.main import main
from torchport.tools import migrate as migrate_module
from torchport.tools import scanner
from torchport.tools.migrate import MigrateOptions, computed_migration, migrate, scan_options_of
from torchport.tools.migration_memo import load_scan, save_scan

PROGRAM = """\
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 2).cuda()
torch.cuda.synchronize()
"""


@pytest.fixture
def passes(monkeypatch) -> list[Path]:
    """The roots the codemods ran over, one entry per pass."""
    seen: list[Path] = []
    real = migrate_module._rewrite

    def counting(result, options):
        seen.append(result.root)
        return real(result, options)

    monkeypatch.setattr(migrate_module, "_rewrite", counting)
    return seen


@pytest.fixture
def scans(monkeypatch) -> list[Path]:
    """The files each scan read (the scanner's own loop over them), one entry per scan."""
    seen: list[Path] = []
    real = scanner._run

    def counting(engine, files, options, progress):
        seen.append(sorted(f.path for f in files))
        return real(engine, files, options, progress)

    monkeypatch.setattr(scanner, "_run", counting)
    return seen


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_run_applies_the_codemods_once(tmp_path, passes, scans, capsys, dry_run):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(PROGRAM)
    args = ["migrate", str(src), "-t", "tpu", "--no-verify", "-q", "--llm", "none"]
    assert main([*args, "--dry-run"] if dry_run else args) == 0
    assert passes == [src.resolve()]
    assert scans == [[src.resolve() / "a.py"]]  # the plan's scan, which the rewrite reused
    expected = migrate(src, MigrateOptions(target="tpu", dry_run=True)).changes[0].after
    if dry_run:
        assert "+model = torch.nn.Linear(4, 2).to(device)" in capsys.readouterr().out
    else:
        assert (tmp_path / "src-tpu" / "a.py").read_text() == expected
        assert "changes.patch" in {p.name for p in (tmp_path / "src-tpu").rglob("*")}


def test_a_kept_result_is_computed_again_when_the_tree_changes(tmp_path, passes):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(PROGRAM)
    options = MigrateOptions(target="tpu")
    first = computed_migration(src, options, "run-1")
    first.changes.clear()  # a caller's changes to its copy never reach the next caller
    again = computed_migration(src, options, "run-1")
    assert len(passes) == 1 and len(again.changes) == 1
    (src / "a.py").write_text(PROGRAM.replace("torch.cuda.synchronize()\n", ""))
    changed = computed_migration(src, options, "run-1")
    assert len(passes) == 2 and "synchronize" not in changed.changes[0].after
    computed_migration(src, options, "run-2")  # another run computes its own
    assert len(passes) == 3


def test_a_kept_scan_is_read_only_while_it_is_of_the_same_tree_and_options(tmp_path, scans):
    """The plan's scan, kept in the run's folder, stands in for the migration's own scan
    only for the tree it was made of, unchanged, with the same options."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(PROGRAM)
    options = scanner.ScanOptions(target="tpu")
    made = scanner.scan(src, options)
    kept = save_scan(tmp_path / "run" / "plan-scan.json", src, options, made)
    read = load_scan(kept, src, options)
    assert read is not None and len(scans) == 1
    assert read.findings == made.findings and read.entrypoints == made.entrypoints
    assert any("synchronize" in f.snippet for f in read.findings)
    assert load_scan(kept, src, dataclasses.replace(options, target="xla")) is None
    assert load_scan(tmp_path / "run" / "none.json", src, options) is None
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.py").write_text(PROGRAM)
    assert load_scan(kept, other, options) is None  # the same files, another tree
    (src / "a.py").write_text(PROGRAM.replace("torch.cuda.synchronize()\n", ""))
    assert load_scan(kept, src, options) is None  # the tree changed since
    assert len(scans) == 1  # reading a kept scan never scans


def test_a_migration_given_the_plans_scan_does_not_scan_again(tmp_path, scans):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(PROGRAM)
    options = MigrateOptions(target="tpu")
    kept = save_scan(
        tmp_path / "plan-scan.json",
        src,
        scan_options_of(options),
        scanner.scan(src, scan_options_of(options)),
    )
    result = computed_migration(src, options, "run-1", kept)
    assert len(scans) == 1 and "torch.cuda." not in result.changes[0].after


@pytest.mark.slow
def test_files_rewritten_in_worker_processes_give_the_same_result(monkeypatch, tmp_path):
    """The pool (opt-in: TORCHPORT_MIGRATE_JOBS) merges in file order, and an unapplied
    fix comes back as the scan's own finding, not a copy."""
    from torchport.tools import parallel_rewrite

    corpus = Path(__file__).parent / "fixtures" / "corpus"
    options = MigrateOptions(target="tpu", dry_run=True)
    alone = migrate(corpus, options)
    monkeypatch.setattr(parallel_rewrite, "MIN_BYTES", 0)
    monkeypatch.setenv("TORCHPORT_MIGRATE_JOBS", "2")
    real = migrate_module._rewrite_file

    def rewrite_file(*args):  # leaves the process's id behind: which process did the work
        (tmp_path / str(os.getpid())).touch()
        return real(*args)

    monkeypatch.setattr(migrate_module, "_rewrite_file", rewrite_file)
    pooled = migrate(corpus, options)
    workers = {int(p.name) for p in tmp_path.iterdir()}
    assert workers and os.getpid() not in workers, "no file was rewritten in a worker"
    assert [(c.path, c.after) for c in pooled.changes] == [(c.path, c.after) for c in alone.changes]
    assert pooled.edits == alone.edits and pooled.unapplied
    scanned = {id(f) for f in pooled.scan.findings}
    assert all(id(f) in scanned for f, _ in pooled.unapplied)
    assert [(f.rule, f.path, f.line, why) for f, why in pooled.unapplied] == [
        (f.rule, f.path, f.line, why) for f, why in alone.unapplied
    ]
