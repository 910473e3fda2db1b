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
    summary = text.split("Findings by severity")[0]
    assert summary.startswith("Summary") and "constructs by category:" in summary
    # the torchrun line of run.sh is a finding for tpu only: TorchTPU's launch step (TPN010)
    assert "findings: 7 (error 4, warning 1, info 2)" in summary
    assert "tpu" in text and "neuron" not in text.split("fixes per target")[1]
    md = render_markdown(result)
    assert md.startswith("# torchport scan (tpu)")
    assert "| device |" in md and "## Skipped" in md


def _finding_lines(text: str) -> list[tuple[str, str, str]]:
    """(severity, file, line) of each construct line of a text report, in order."""
    found, severity, path = [], None, None
    for line in text.split("Findings by severity")[1].splitlines()[1:]:
        if line and not line.startswith(" ") and line.endswith(")"):
            severity = line.split()[0]
        elif line.startswith("    "):
            found.append((severity, path, line.strip()))
        elif line.startswith("  "):
            path = line.strip()
    return found


def test_text_report_lists_constructs_by_severity_then_file_one_line_each(repo: Path):
    result = scan(repo)
    text = render_text(result)
    assert text.index("Summary") < text.index("fixes per target") < text.index("Findings")
    lines = _finding_lines(text)
    assert len(lines) == len(result.findings)  # one line per construct, no snippet lines
    order = [(["error", "warning", "info"].index(sev), path) for sev, path, _ in lines]
    assert order == sorted(order)  # severity first, then file
    assert [(s, p) for s, p, _ in lines][:2] == [("error", "requirements.txt")] * 2
    assert ("warning", "run.sh") in [(s, p) for s, p, _ in lines]
    cuda = next(line for _, path, line in lines if "TPD001" in line)
    assert cuda.startswith("5:9") and "model = torch.nn.Linear(2, 2).cuda()" in cuda
    assert "`.cuda()` on a tensor or module" in cuda  # the rule's title


def test_text_report_shows_only_the_selected_targets_fix_unless_all_targets(repo: Path):
    """TPD024 (CUDA_VISIBLE_DEVICES) is auto on tpu and neuron, manual on xla and accelerator."""

    def visible_devices(text: str) -> str:
        return next(line for _, _, line in _finding_lines(text) if "TPD024" in line)

    xla = visible_devices(render_text(scan(repo, ScanOptions(target="xla"))))
    assert xla.split()[:3] == ["2:8", "TPD024", "manual"] and "tpu" not in xla
    both = scan(repo, ScanOptions(target="xla", all_targets=True))
    every = "tpu,neuron:auto xla,accelerator:manual"
    assert every in visible_devices(render_text(both, all_targets=True))
    assert every in visible_devices(render_text(scan(repo)))  # no target: every target's
    cuda = next(line for _, _, line in _finding_lines(render_text(scan(repo))) if "TPD001" in line)
    assert cuda.split()[2] == "all:auto"  # the same fix everywhere, said once
    # --all-targets keeps the target's findings and summary; JSON gets every fix too
    assert len(both.findings) == len(scan(repo, ScanOptions(target="xla")).findings)
    assert set(json.loads(render_json(both))["findings"][0]["fix"]) == {
        "tpu",
        "neuron",
        "xla",
        "accelerator",
    }


def test_text_report_of_a_clean_repository_counts_nothing_by_severity(tmp_path: Path):
    (tmp_path / "a.py").write_text("x = 1\n")
    text = render_text(scan(tmp_path, ScanOptions(target="tpu")))
    assert "\n  findings: 0\n" in text and "error (" not in text


def test_scan_all_targets_from_the_command_line(repo: Path, capsys):
    assert main(["scan", str(repo), "-q", "-t", "xla"]) == 1
    assert "tpu,neuron:auto" not in capsys.readouterr().out
    assert main(["scan", str(repo), "-q", "-t", "xla", "--all-targets"]) == 1
    out = capsys.readouterr().out
    assert "tpu,neuron:auto xla,accelerator:manual" in out
    assert "what xla needs fixed, with every target's fix" in out


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
