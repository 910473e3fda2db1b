"""What a pre-commit hook or a CI job asks of `torchport scan`: files given by name and
named from the repository's root, a baseline of accepted findings that survives edits
which move lines, and the severity that fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torchport.agents.project_config import KEYS
from torchport.cli.main import main

TRAIN = "import torch\n\nmodel = torch.nn.Linear(2, 2).cuda()\ntorch.cuda.synchronize()\n"


@pytest.fixture(autouse=True)
def _no_torchport_variables(monkeypatch):
    for variable in (key.env for key in KEYS.values()):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)  # the marker that says where the repository starts
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(TRAIN)
    return root


def scan_json(*argv: str, capsys) -> tuple[int, list[tuple[str, int, str]]]:
    status = main(["scan", *argv, "-f", "json", "-q"])
    out = capsys.readouterr().out
    findings = json.loads(out)["findings"] if out else []
    return status, [(f["path"], f["line"], f["rule"]) for f in findings]


def test_files_are_named_from_the_repository_root(repo, capsys, monkeypatch):
    (repo / "notes.txt").write_text("x.cuda()\n")  # a kind the scanner does not read
    monkeypatch.chdir(repo / "src")
    status, found = scan_json("train.py", "../notes.txt", "-t", "tpu", capsys=capsys)
    assert status == 1
    assert found == [("src/train.py", 3, "TPD001"), ("src/train.py", 4, "TPT001")]
    assert main(["scan", str(repo / "src"), str(repo / "notes.txt")]) == 2
    assert "not folders and files together" in capsys.readouterr().err


def test_only_new_findings_fail_past_a_baseline(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    assert main(["scan", ".", "-t", "tpu", "--write-baseline", "base.json", "-q"]) == 0
    assert capsys.readouterr().out == ""  # the baseline, no report
    entries = json.loads((repo / "base.json").read_text())["findings"]
    assert [(e["rule"], e["path"]) for e in entries] == [
        ("TPD001", "src/train.py"),
        ("TPT001", "src/train.py"),
    ]
    # lines moved and re-indented: still the same findings
    moved = "import torch\n# a comment\n\n\nif True:\n    model = torch.nn.Linear(2, 2).cuda()\n"
    (repo / "src" / "train.py").write_text(moved + "torch.cuda.synchronize()\n")
    assert scan_json("src/train.py", "-t", "tpu", "--baseline", "base.json", capsys=capsys) == (
        0,
        [],
    )
    # a second synchronize() is one more than the baseline accepts: the later one is new
    (repo / "src" / "train.py").write_text(moved + "torch.cuda.synchronize()\n" * 2)
    status, found = scan_json(".", "-t", "tpu", "--baseline", "base.json", capsys=capsys)
    assert (status, found) == (1, [("src/train.py", 8, "TPT001")])


def test_a_json_report_serves_as_a_baseline(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    assert main(["scan", ".", "-f", "json", "-o", "report.json", "-q"]) == 1
    assert scan_json(".", "--baseline", "report.json", capsys=capsys) == (0, [])
    (repo / "src" / "more.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    assert scan_json(".", "--baseline", "report.json", capsys=capsys)[1] == [
        ("src/more.py", 2, "TPD001")
    ]


def test_the_baseline_and_the_failing_severity_can_live_in_the_project(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    assert main(["scan", ".", "-t", "tpu", "--write-baseline", ".baseline.json", "-q"]) == 0
    (repo / "torchport.toml").write_text('target = "tpu"\nbaseline = ".baseline.json"\n')
    assert scan_json("src/train.py", capsys=capsys) == (0, [])
    (repo / "src" / "new.py").write_text("import torch\nx = torch.zeros(2, dtype=torch.float64)\n")
    assert scan_json("src/new.py", capsys=capsys)[0] == 1  # TPF001, a warning
    (repo / "torchport.toml").write_text('baseline = ".baseline.json"\nfail-on = "error"\n')
    assert scan_json("src/new.py", capsys=capsys) == (0, [("src/new.py", 2, "TPF001")])


@pytest.mark.parametrize(
    ("fail_on", "status"), [(None, 1), ("info", 1), ("warning", 1), ("error", 0)]
)
def test_fail_on_sets_the_least_severity_that_fails(fail_on, status, tmp_path, capsys):
    program = tmp_path / "p.py"  # an info (TPB001) and a warning (TPF001), no error
    program.write_text(
        "import torch\ntorch.backends.cudnn.benchmark = True\n"
        "x = torch.zeros(2, dtype=torch.float64)\n"
    )
    argv = [str(program), "-t", "tpu", *(["--fail-on", fail_on] if fail_on else [])]
    assert scan_json(*argv, capsys=capsys)[0] == status
    program.write_text("import torch\ntorch.backends.cudnn.benchmark = True\n")
    assert scan_json(str(program), "--fail-on", "warning", capsys=capsys)[0] == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read baseline"),
        ("{not json", "is not JSON"),
        ('{"findings": [{"line": 3}]}', "no list of findings with rule, path and snippet"),
    ],
)
def test_a_bad_baseline_is_one_line(content, message, repo, capsys):
    baseline = repo / "base.json"
    if content is not None:
        baseline.write_text(content)
    assert main(["scan", str(repo), "--baseline", str(baseline)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and str(baseline) in err
