"""`torchport migrate`: complete, idempotent, reversible as a patch, and never harmful
to the user's tree."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from torchport.cli.main import main
from torchport.tools import migrate as migrate_module
from torchport.tools.catalogue import TARGETS
from torchport.tools.migrate import MigrateError, MigrateOptions, migrate
from torchport.tools.scanner import ScanOptions, scan

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
LABELS = tomllib.loads((CORPUS / "expected.toml").read_text())["files"]


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "torchport-report" not in p.parts
    }


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )


def _git_repo(tmp_path: Path, files: dict[str, str]) -> Path:
    repo = tmp_path / "repo"
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    return repo


PROGRAM = """\
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(4, 2).cuda()
x = torch.randn(8, 4).cuda()
torch.cuda.synchronize()
print(model(x).sum().item())
"""


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> dict[str, tuple[Path, object]]:
    """The corpus migrated once per target (module-scoped: the runs take a few seconds)."""
    before = _tree_digest(CORPUS)
    out = {}
    for target in TARGETS:
        dest = tmp_path_factory.mktemp(target) / "out"
        out[target] = (dest, migrate(CORPUS, MigrateOptions(target=target, out=dest)))
    assert _tree_digest(CORPUS) == before, "migrate must never touch its input"
    return out


# Forms an auto rule refuses on purpose, each left for a human with its reason: a torchrun
# that srun starts on each node needs TorchTPU's launch step on each node, inside the task
# (a step before srun would give every node the batch host's NODE_RANK), so the shell form
# is put only before a command that starts its line (TPN010); apex's convert_syncbn_model is
# synchronized batch norm, a human's choice on every target (TPK009, TPN004). Lines are the
# migrated file's.
# flash-attn's rotary and RMSNorm layers are not attention (TPK010 ports only its attention
# functions); an xformers mask built outside the call may reach it through a variable, and
# block-diagonal masks are not ported (TPK011).
SYNC_BN = ("apex_trainer/train.py", 31, "TPK009")
FLASH_LAYERS = {("flash_attn_model/model.py", line, "TPK010") for line in (47, 80, 82)}
XFORMERS_MASKS = {("xformers_vit/vit.py", line, "TPK011") for line in (23, 28, 48, 49)}
# A power reading the program computes with has no stand-in value (TPK018). (A Triton
# kernel with no torch fallback runs on triton_on_torch, TPK003: converted, an advisory.)
ATTENTION = FLASH_LAYERS | XFORMERS_MASKS
KERNELS = {("gpu_monitoring/monitor.py", 42, "TPK018")}
# A device test whose CUDA arm reads get_device_properties (TPD012, left for the LLM or a
# human) stays a test for CUDA: the target takes the arm the original takes off CUDA.
DEVICE_ARM = ("multi_file_pkg/cudanet/utils.py", 24, "TPD016")
REFUSED_ON_PURPOSE = {
    "tpu": {
        ("shell_scripts/job.sbatch", 7, "TPN010"),
        SYNC_BN,
        *ATTENTION,
        *KERNELS,
        DEVICE_ARM,
    },
    "neuron": {SYNC_BN, *ATTENTION, *KERNELS, DEVICE_ARM},
    "xla": {  # one or two more lines of imports above them
        ("apex_trainer/train.py", 33, "TPK009"),
        *FLASH_LAYERS,
        *{("xformers_vit/vit.py", line, "TPK011") for line in (24, 29, 49, 50)},
        ("gpu_monitoring/monitor.py", 43, "TPK018"),
        ("multi_file_pkg/cudanet/utils.py", 26, "TPD016"),
    },
    "accelerator": {SYNC_BN, *ATTENTION, *KERNELS, DEVICE_ARM},
}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_no_auto_finding_is_left_and_a_second_run_changes_nothing(migrated, target, tmp_path):
    dest, result = migrated[target]
    assert len(result.edits) > 150
    left = {
        (f.path, f.line, f.rule)
        for f in scan(dest, ScanOptions(target=target)).findings
        if f.fix[target]["kind"] == "auto"
    }
    assert left == REFUSED_ON_PURPOSE.get(target, set())
    reported = {(f.path, f.rule) for f, why in result.unapplied if why}
    assert {(path, rule) for path, _, rule in left} <= reported
    again = migrate(dest, MigrateOptions(target=target, out=tmp_path / "again"))
    assert again.changes == [] and again.edits == []


@pytest.mark.parametrize("target", ["tpu", "accelerator"])
def test_the_patch_applies_to_the_original_and_reproduces_the_output(migrated, target, tmp_path):
    dest, _ = migrated[target]
    repo = tmp_path / "repo"
    shutil.copytree(CORPUS, repo)
    _git(repo, "init", "-q")
    patch = dest / "torchport-report" / "changes.patch"
    _git(repo, "apply", str(patch))
    shutil.rmtree(repo / ".git")
    assert _tree_digest(repo) == _tree_digest(dest)


def test_edits_change_nothing_outside_their_spans(migrated):
    """Every changed line of the original lies in an edit's line range (imports aside; a
    removed argument may take its call's closing line with it, so ranges reach one line on)."""
    import difflib

    _, result = migrated["tpu"]
    spans: dict[str, list[tuple[int, int]]] = {}
    for e in result.edits:
        if e.cell is None:
            spans.setdefault(e.path, []).append((e.line, e.end_line))
    for change in result.changes:
        if not change.path.endswith(".py"):
            continue
        old = change.before.splitlines()
        matcher = difflib.SequenceMatcher(a=old, b=change.after.splitlines(), autojunk=False)
        for tag, i1, i2, _, _ in matcher.get_opcodes():
            if tag == "equal":
                continue
            for line in range(i1 + 1, i2 + 1):
                text = old[line - 1].strip()
                inside = any(a - 1 <= line <= b + 1 for a, b in spans.get(change.path, ()))
                # Imports the migration added or dropped may take a blank line with them.
                assert inside or text == "" or text.startswith(("import ", "from ")), (
                    f"{change.path}:{line} changed outside any edit: {text!r}"
                )


def _entry_command(program_dir: Path) -> list[str]:
    entry = scan(program_dir).entrypoints[0]
    if entry.kind == "module":
        return [sys.executable, "-m", entry.command.split()[2]]
    return [sys.executable, entry.path]


EASY_AND_MEDIUM = sorted(
    {
        path.split("/")[0]
        for path, entry in LABELS.items()
        if entry.get("difficulty") in ("easy", "medium") and not path.endswith(".ipynb")
    }
)


@pytest.mark.slow
@pytest.mark.parametrize("program", EASY_AND_MEDIUM)
def test_easy_and_medium_programs_migrated_to_accelerator_run_on_cpu_torch(migrated, program):
    dest, _ = migrated["accelerator"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA", "NCCL"))}
    proc = subprocess.run(
        _entry_command(dest / program),
        cwd=dest / program,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_there_are_enough_runnable_programs():
    assert len(EASY_AND_MEDIUM) >= 16  # what the corpus holds


def test_reports_are_written_beside_the_output(migrated):
    dest, result = migrated["tpu"]
    report = dest / "torchport-report"
    assert {p.name for p in report.iterdir()} == {
        "changes.patch",
        "changes.json",
        "changes.csv",
        "manual.md",
        "summary.md",
        ".torchport-output.json",  # what torchport wrote there, for the next run to replace
    }
    data = json.loads((report / "changes.json").read_text())
    assert len(data["edits"]) == len(result.edits)
    edit = data["edits"][0]
    assert {"rule", "path", "line", "end_line", "before", "after", "reason"} <= set(edit)
    csv_rows = (report / "changes.csv").read_text().count("\n")
    assert csv_rows >= len(result.edits) + 1
    manual = (report / "manual.md").read_text()
    assert "suggested approach" in manual
    # a Triton kernel with no fallback runs on the shipped runtime: slow, an advisory
    advisories = manual[manual.index("# Performance advisories") :]
    assert "TPK003" in advisories and "triton_on_torch" in advisories
    assert "converted" in (report / "summary.md").read_text()


def test_unparsable_files_are_copied_unchanged_and_listed(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.py").write_text(PROGRAM)
    py2 = 'import torch\nprint "on", torch.cuda.device_count()\nx.cuda()\n'
    (src / "old.py").write_text(py2)
    result = migrate(src, MigrateOptions(target="tpu", out=tmp_path / "out"))
    assert (tmp_path / "out" / "old.py").read_text() == py2
    assert "old.py" in (tmp_path / "out" / "torchport-report" / "summary.md").read_text()
    assert [s.path for s in result.scan.skipped] == ["old.py"]
    assert ".to(" in (tmp_path / "out" / "good.py").read_text()


def test_existing_foreign_output_is_never_overwritten(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(PROGRAM)
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(MigrateError, match="is not a torchport output"):
        migrate(src, MigrateOptions(target="tpu", out=out))
    assert (out / "precious.txt").read_text() == "keep me"
    migrate(src, MigrateOptions(target="tpu", out=tmp_path / "fresh"))
    migrate(src, MigrateOptions(target="tpu", out=tmp_path / "fresh"))  # re-run replaces its own


def test_in_place_needs_a_clean_git_tree_or_force_with_a_backup(tmp_path):
    repo = _git_repo(tmp_path, {"train.py": PROGRAM})
    (repo / "train.py").write_text(PROGRAM + "# local edit\n")
    with pytest.raises(MigrateError, match="uncommitted changes"):
        migrate(repo, MigrateOptions(target="tpu", in_place=True))
    assert (repo / "train.py").read_text().endswith("# local edit\n")
    result = migrate(repo, MigrateOptions(target="tpu", in_place=True, force=True))
    assert result.backup is not None and result.backup.is_dir()
    assert (result.backup / "train.py").read_text().endswith("# local edit\n")
    assert "torch.accelerator.synchronize()" in (repo / "train.py").read_text()

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text(PROGRAM)
    with pytest.raises(MigrateError, match="not a git repository"):
        migrate(plain, MigrateOptions(target="tpu", in_place=True))


def test_in_place_on_a_clean_repo_rewrites_only_what_it_reports(tmp_path):
    repo = _git_repo(tmp_path, {"train.py": PROGRAM, "notes.txt": "untouched\n"})
    result = migrate(repo, MigrateOptions(target="neuron", in_place=True))
    status = _git(repo, "status", "--porcelain").stdout.splitlines()
    assert sorted(status) == [" M train.py", "?? torchport-report/"]
    assert [c.path for c in result.changes] == ["train.py"]


def test_an_interrupted_in_place_run_leaves_each_file_old_or_new(tmp_path, monkeypatch):
    files = {f"m{i}.py": PROGRAM.replace("8, 4", f"{i + 1}, 4") for i in range(6)}
    repo = _git_repo(tmp_path, files)
    calls = {"n": 0}
    real_replace = os.replace

    def flaky_replace(src, dst, **dir_fds):
        folder = os.readlink(f"/proc/self/fd/{dir_fds['dst_dir_fd']}")
        if folder == str(repo) and dst in files:  # a rewrite, not a backup
            calls["n"] += 1
            if calls["n"] == 4:
                raise KeyboardInterrupt("killed mid-run")
        return real_replace(src, dst, **dir_fds)

    monkeypatch.setattr(migrate_module.os, "replace", flaky_replace)
    with pytest.raises(KeyboardInterrupt):
        migrate(repo, MigrateOptions(target="tpu", in_place=True))
    new_count = 0
    for name, old in files.items():
        text = (repo / name).read_text()
        assert text == old or "torch.accelerator.synchronize()" in text
        new_count += text != old
    assert new_count == 3
    assert not [p for p in repo.iterdir() if p.name.endswith(".torchport")]
    (backup,) = (repo / "torchport-report" / "backup").iterdir()  # made before any rewrite
    assert {p.name: p.read_text() for p in backup.iterdir()} == files


def test_branch_commits_the_migration_and_leaves_the_checkout_alone(tmp_path):
    repo = _git_repo(tmp_path, {"train.py": PROGRAM})
    result = migrate(repo, MigrateOptions(target="xla", branch="port-xla"))
    assert (repo / "train.py").read_text() == PROGRAM
    assert _git(repo, "status", "--porcelain").stdout == ""
    migrated = _git(repo, "show", "port-xla:train.py").stdout
    assert "torch_xla" in migrated and ".cuda()" not in migrated
    assert result.branch == "port-xla"
    with pytest.raises(MigrateError, match="already exists"):
        migrate(repo, MigrateOptions(target="xla", branch="port-xla"))


def test_notebook_cells_are_migrated_and_outputs_kept(tmp_path):
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3"}},
        "cells": [
            {
                "cell_type": "code",
                "metadata": {"tags": ["setup"]},
                "execution_count": 1,
                "outputs": [{"output_type": "stream", "name": "stdout", "text": ["cuda\n"]}],
                "source": ["!nvidia-smi\n", "import torch\n", "x = torch.ones(2).cuda()"],
            },
            {"cell_type": "markdown", "metadata": {}, "source": ["Uses `.cuda()`"]},
        ],
    }
    src = tmp_path / "src"
    src.mkdir()
    (src / "nb.ipynb").write_text(json.dumps(nb, indent=1))
    migrate(src, MigrateOptions(target="tpu", out=tmp_path / "out"))
    new = json.loads((tmp_path / "out" / "nb.ipynb").read_text())
    code = new["cells"][0]
    assert code["source"] == ["!nvidia-smi\n", "import torch\n", 'x = torch.ones(2).to("tpu")']
    assert code["outputs"] == nb["cells"][0]["outputs"] and code["metadata"] == {"tags": ["setup"]}
    assert new["cells"][1] == nb["cells"][1] and new["metadata"] == nb["metadata"]


def test_a_notebook_cell_gets_no_import_a_cell_above_has(tmp_path):
    """Cells are migrated one by one but run top to bottom in one namespace: a later cell's
    rewrite needs ``torch``, which the first cell imports, so nothing is added to it; a
    first cell that needs an import still gets one."""
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
             "source": ["import torch\n", "import torch.nn as nn\n"]},
            {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
             "source": ["if torch.cuda.is_available():\n", "    device = torch.device('cuda')"]},
        ],
    }  # fmt: skip
    src = tmp_path / "src"
    src.mkdir()
    (src / "nb.ipynb").write_text(json.dumps(nb, indent=1))
    migrate(src, MigrateOptions(target="tpu", out=tmp_path / "out"))
    cells = json.loads((tmp_path / "out" / "nb.ipynb").read_text())["cells"]
    assert cells[1]["source"] == [
        "if torch.accelerator.is_available():\n",
        "    device = torch.device('tpu')",
    ], cells[1]["source"]


def test_annotate_marks_what_is_left_once(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(
        "import torch\nimport triton\n\nprops = torch.cuda.get_device_properties(0)\n"
    )
    migrate(src, MigrateOptions(target="tpu", out=tmp_path / "o1", annotate=True))
    once = (tmp_path / "o1" / "a.py").read_text()
    assert once.count("# torchport: TPD012") == 1 and once.count("# torchport: TPP001") == 1
    migrate(tmp_path / "o1", MigrateOptions(target="tpu", out=tmp_path / "o2", annotate=True))
    assert (tmp_path / "o2" / "a.py").read_text() == once


def test_cli_dry_run_prints_the_diff_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text(PROGRAM)
    assert main(["migrate", str(src), "--target", "tpu", "--dry-run", "--no-verify", "-q"]) == 0
    out = capsys.readouterr().out
    assert "+model = torch.nn.Linear(4, 2).to(device)" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    assert main(["migrate", str(src), "--target", "tpu", "--no-verify", "-q"]) == 0
    assert (tmp_path / "src-tpu" / "torchport-report" / "changes.patch").is_file()
    assert main(["migrate", str(src / "nope"), "--target", "tpu", "-q"]) == 2


def test_a_crlf_file_keeps_its_line_endings_and_only_its_fixed_lines_change(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    lines = ["import torch", "x = torch.zeros(3).cuda()", "print(x.sum().item())", ""]
    (src / "train.py").write_bytes("\r\n".join(lines).encode())
    result = migrate(src, MigrateOptions(target="tpu", out=tmp_path / "out"))
    after = (result.output / "train.py").read_bytes()
    assert after == b'import torch\r\nx = torch.zeros(3).to("tpu")\r\nprint(x.sum().item())\r\n'
    patch = (result.report_dir / "changes.patch").read_bytes().decode().splitlines()
    removed = [line for line in patch if line.startswith("-") and not line.startswith("---")]
    added = [line for line in patch if line.startswith("+") and not line.startswith("+++")]
    assert len(removed) == len(added) == 1  # one line, not the whole file


def test_a_file_in_another_declared_encoding_is_left_for_a_human_not_a_crash(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    text = '# -*- coding: latin-1 -*-\nimport torch\nname = "caf\xe9"\nx = torch.zeros(2).cuda()\n'
    (src / "train.py").write_bytes(text.encode("latin-1"))
    result = migrate(src, MigrateOptions(target="tpu", out=tmp_path / "out"))
    assert (result.output / "train.py").read_bytes() == text.encode("latin-1")  # untouched
    assert [(f.rule, why) for f, why in result.unapplied] == [
        ("TPD001", "the file is not UTF-8: not rewritten (convert it to UTF-8, then migrate)")
    ]
    assert "not UTF-8" in (result.report_dir / "manual.md").read_text()


def test_a_reference_to_a_memory_function_is_left_for_a_human_with_the_reason(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    text = "import torch\nfn = torch.cuda.max_memory_allocated\nx = torch.zeros(2).cuda()\n"
    (src / "m.py").write_text(text)
    result = migrate(src, MigrateOptions(target="accelerator", out=tmp_path / "out"))
    assert [(f.rule, why.split(":")[0]) for f, why in result.unapplied] == [
        ("TPM001", "a reference to the function, not a call")
    ]
    assert ".to(" in (result.output / "m.py").read_text()  # the rest still migrated


def test_a_codemod_that_crashes_leaves_its_finding_and_the_rest_of_the_file_migrates(
    tmp_path, monkeypatch
):
    from torchport.tools.codemods import engine

    def broken(node, ctx):
        raise AttributeError("'Attribute' object has no attribute 'func'")

    rule = ("TPM001", "accelerator")
    monkeypatch.setitem(engine.FIXERS, rule, dataclasses.replace(engine.FIXERS[rule], fn=broken))
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(
        "import torch\nprint(torch.cuda.memory_allocated())\nx = torch.zeros(2).cuda()\n"
    )
    result = migrate(src, MigrateOptions(target="accelerator", out=tmp_path / "out"))
    [(finding, why)] = result.unapplied
    assert finding.rule == "TPM001" and "AttributeError" in why and "torchport bug" in why
    assert ".to(" in (result.output / "m.py").read_text()


def test_torch_from_a_star_import_is_torch_and_a_second_migration_changes_nothing(tmp_path):
    """Super-Resolution's eval.py gets torch from `from utils import *`: its torch.load was
    found only after the first migration added `import torch` (a second pass changed it)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "utils.py").write_text("import torch\n\n\ndef psnr(a, b):\n    return 0.0\n")
    (src / "eval.py").write_text(
        "from utils import *\n\n"
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
        'model = torch.load("ckpt.pt")["generator"].to(device)\n'
        "print(psnr(model, model))\n"
    )
    once = migrate(src, MigrateOptions(target="tpu", out=tmp_path / "once")).output
    assert 'map_location="cpu"' in (once / "eval.py").read_text()
    twice = migrate(once, MigrateOptions(target="tpu", out=tmp_path / "twice")).output
    assert (twice / "eval.py").read_text() == (once / "eval.py").read_text()
