"""Report formats: JSON fields, SARIF validity against the official schema, text and
Markdown summaries, and the CLI's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from torchport.cli.main import main
from torchport.tools.report import render_json, render_markdown, render_sarif, render_text
from torchport.tools.scanner import ScanOptions, scan

SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"

PROGRAM = """\
import torch
import torch.backends.cudnn as cudnn

cudnn.benchmark = True
model = torch.nn.Linear(2, 2).cuda()
for x in loader:
    loss = model(x).sum()
    loss.backward()
    print(loss.item())
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(PROGRAM)
    (tmp_path / "requirements.txt").write_text("torch==2.1.0+cu121\nflash-attn>=2.5\nnumpy\n")
    (tmp_path / "run.sh").write_text(
        "#!/bin/sh\nexport CUDA_VISIBLE_DEVICES=0,1\n"
        "torchrun --nproc_per_node=2 train.py --epochs 1\n"
    )
    (tmp_path / "bin.py").write_bytes(b"\x00\x01")
    return tmp_path


def test_json_report_carries_every_documented_field(repo: Path):
    data = json.loads(render_json(scan(repo)))
    for key in (
        "files_scanned",
        "loc",
        "findings",
        "entrypoints",
        "dependencies",
        "skipped",
        "summary",
    ):
        assert key in data
    finding = data["findings"][0]
    for key in (
        "rule",
        "severity",
        "category",
        "path",
        "line",
        "col",
        "end_line",
        "end_col",
        "message",
        "snippet",
        "fix",
    ):
        assert key in finding
    assert set(finding["fix"]) == {"tpu", "neuron", "xla", "accelerator"}
    assert data["files_scanned"] == 3 and data["loc"] == 9 + 3 + 3
    assert {(d["name"], d["cuda_only"]) for d in data["dependencies"]} == {
        ("torch", True),
        ("flash-attn", True),
        ("numpy", False),
    }
    assert data["skipped"] == [{"path": "bin.py", "reason": "binary file"}]
    assert data["entrypoints"][0]["path"] == "train.py"
    assert data["entrypoints"][0]["command"].startswith("torchrun --nproc_per_node=2 train.py")
    rules_by_path = {(f["path"], f["rule"]) for f in data["findings"]}
    assert ("run.sh", "TPD024") in rules_by_path
    assert ("requirements.txt", "TPP003") in rules_by_path
    assert ("requirements.txt", "TPP002") in rules_by_path
    assert data["summary"]["by_category"]["device"] == 2


def test_sarif_validates_against_the_official_schema(repo: Path):
    schema = json.loads(SCHEMA.read_text())
    log = json.loads(render_sarif(scan(repo)))
    jsonschema.validate(log, schema, cls=jsonschema.Draft4Validator)
    run = log["runs"][0]
    assert run["results"] and all(r["ruleId"].startswith("TP") for r in run["results"])
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert all(ids[r["ruleIndex"]] == r["ruleId"] for r in run["results"])
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert notes[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "bin.py"


def test_sarif_schema_check_rejects_a_broken_log(repo: Path):
    """The validation above can fail: a log missing a result's message does not pass."""
    schema = json.loads(SCHEMA.read_text())
    log = json.loads(render_sarif(scan(repo)))
    del log["runs"][0]["results"][0]["message"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(log, schema, cls=jsonschema.Draft4Validator)


def test_text_and_markdown_reports_group_and_summarise(repo: Path):
    result = scan(repo, ScanOptions(target="tpu"))
    text = render_text(result)
    assert text.index("requirements.txt") < text.index("run.sh") < text.index("train.py")
    assert "constructs by category:" in text and "fixes per target" in text
    assert "tpu" in text and "neuron" not in text.split("fixes per target")[1]
    md = render_markdown(result)
    assert md.startswith("# torchport scan (tpu)")
    assert "| device |" in md and "## Skipped" in md


def test_cli_exit_codes(repo: Path, tmp_path_factory, capsys):
    clean = tmp_path_factory.mktemp("clean")
    (clean / "ok.py").write_text("import torch\nx = torch.zeros(2)\n")
    assert main(["scan", str(clean), "-q"]) == 0
    assert main(["scan", str(repo), "-q"]) == 1
    assert main(["scan", str(repo), "-q", "--exit-zero"]) == 0
    assert main(["scan", str(repo / "nope"), "-q"]) == 2
    assert main(["scan", str(repo), "--select", "ZZZ", "-q"]) == 2
    out = tmp_path_factory.mktemp("out") / "r.sarif"
    assert main(["scan", str(repo), "-f", "sarif", "-o", str(out), "-q"]) == 1
    assert json.loads(out.read_text())["version"] == "2.1.0"
    capsys.readouterr()
    assert main(["rules", "TPD001"]) == 0
    assert "TPD001" in capsys.readouterr().out
    assert main(["rules", "NOPE"]) == 2


def test_console_script_runs_as_a_subprocess(repo: Path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchport.cli",
            "scan",
            str(repo),
            "-f",
            "json",
            "--target",
            "tpu",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["target"] == "tpu"
