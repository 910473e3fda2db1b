"""Lines PyTorch 0.4+ broke (``loss.data[0]``, ``.view`` of a transposed comparison),
repaired where the original's run fails at them, in the original's copy and the port alike.

Such an original fails on any current PyTorch, CUDA included, so the verdict read "the
original fails here too" about a port that was sound. Now the original runs with each
failing line repaired by its documented successor (``.item()``, ``.reshape``), the port gets
the same repairs (and the same expression where a short run does not reach it, an
evaluation after the training steps), and the verdict lists every repaired line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torchport.cli.main import main as cli
from torchport.tools.legacy_torch import at_line, of_expressions

_LINES = """total += loss.data[0] + acc[0]
top1.update(prec1[0], n)
a, b = p[0], q[0]
c = correct[:k].view(-1).float().sum(0) + y.view(torch.float16).sum()
print(prec1[0], loss.data[0])
d = x.view(torch.int8)
"""


def test_the_failing_line_is_repaired_with_the_same_expression_elsewhere_in_the_file():
    fixed = at_line("zero-dim-index", _LINES, 1)
    assert fixed is not None
    # ``.data[0]`` is the 0.3 read of a scalar; the other subscript on the line is left
    assert fixed.text.splitlines()[0] == "total += loss.item() + acc[0]"
    assert fixed.text.splitlines()[4] == "print(prec1[0], loss.item())"  # the same expression
    assert (fixed.expressions, fixed.lines) == (("loss.data[0]",), (1, 5))
    one = at_line("zero-dim-index", _LINES, 2)
    assert one is not None and one.lines == (2, 5)
    assert "top1.update(prec1.item(), n)" in one.text
    assert at_line("zero-dim-index", _LINES, 3) is None  # two candidates: no guess


def test_view_becomes_reshape_only_for_a_shape():
    fixed = at_line("view-not-contiguous", _LINES, 4)
    assert fixed is not None
    assert fixed.text.splitlines()[3] == (
        "c = correct[:k].reshape(-1).float().sum(0) + y.view(torch.float16).sum()"
    )
    assert at_line("view-not-contiguous", _LINES, 6) is None  # a dtype view: no reshape form


def test_the_port_gets_the_expressions_wherever_its_lines_moved():
    port = "import torch\n\n" + _LINES
    fixed = of_expressions("zero-dim-index", port, ["loss.data[0]"])
    assert fixed is not None and fixed.lines == (3, 7)
    assert "loss.data" not in fixed.text and "prec1[0]" in fixed.text


_TRAIN = """import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 3).cuda()
crit = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))


def accuracy(out, target, k=2):
    pred = out.topk(k, 1)[1].t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    return correct[:k].view(-1).float().sum(0)


def evaluate():
    with torch.no_grad():
        loss = crit(model(x.cuda()), y.cuda())
    return loss.data[0]


for step in range(3):
    out = model(x.cuda())
    loss = crit(out, y.cuda())
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, "loss", loss.data[0], "top2", accuracy(out, y.cuda()).item())
print("eval", evaluate())
"""


_VALIDATE = """import torch

model = torch.nn.Linear(4, 3)
x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
loss = torch.nn.functional.cross_entropy(model(x), y)
print(loss.data[0])
"""


@pytest.mark.slow
def test_a_pytorch_0_3_program_verifies_with_its_lines_repaired_and_listed(tmp_path: Path):
    source = tmp_path / "repo"
    source.mkdir()
    (source / "train.py").write_text(_TRAIN)
    # another script of the repository with the same read, which the run never imports
    (source / "validate.py").write_text(_VALIDATE)
    out = tmp_path / "port"
    code = cli(["migrate", str(source), "-t", "tpu", "--llm", "none", "--steps", "3",
                "--entry", "python train.py", "--out", str(out)])  # fmt: skip
    record = json.loads((out / "torchport-report" / "verification.json").read_text())
    v = record["verification"]
    assert (code, v["verdict"]) == (0, "verified"), v["reason"]
    repaired = {(r["signature"], r["line"]): r for r in v["legacy_repairs"]}
    assert set(repaired) == {("zero-dim-index", 29), ("view-not-contiguous", 14)}, repaired
    # the same read in evaluate(), which the run reached only after its steps, goes too,
    # and in the script it never ran
    assert repaired["zero-dim-index", 29]["lines"] == [
        ["train.py", 20],
        ["train.py", 29],
        ["validate.py", 6],
    ]
    assert (out / "validate.py").read_text() == _VALIDATE.replace("loss.data[0]", "loss.item()")
    assert (source / "validate.py").read_text() == _VALIDATE
    port = (out / "train.py").read_text()
    assert "loss.data" not in port and "return correct[:k].reshape(-1).float().sum(0)" in port
    assert "2 failing line(s) repaired for current PyTorch" in v["reason"]
    assert "2 more line(s) with the same expression in the repository" in v["reason"]
    assert (source / "train.py").read_text() == _TRAIN  # the original stays as written
    # the report lists each repaired line of the port as an edit, with its reason
    changes = json.loads((out / "torchport-report" / "changes.json").read_text())
    edits = [e for e in changes["edits"] if e["rule"] == "legacy-torch"]
    listed = [(e["path"], e["line"], e["after"].strip()) for e in edits]
    assert sorted(listed) == [
        ("train.py", 14, "return correct[:k].reshape(-1).float().sum(0)"),
        ("train.py", 20, "return loss.item()"),
        (
            "train.py",
            29,
            'print("step", step, "loss", loss.item(), "top2", accuracy(out, y.to("tpu")).item())',
        ),
        ("validate.py", 6, "print(loss.item())"),
    ], listed


@pytest.mark.slow
def test_the_verify_step_returns_the_port_with_the_repairs_it_was_judged_with(tmp_path: Path):
    """Chat's /verify and the MCP server verify a proposal as it is: the outcome hands back
    the overlay with the repaired lines, so neither calls the proposal verified without them."""
    from torchport.agents.verify_step import verify_overlay
    from torchport.tools.migrate import MigrateOptions, migrate

    source = tmp_path / "repo"
    source.mkdir()
    (source / "train.py").write_text(_TRAIN)
    proposal = {
        c.path: c.after for c in migrate(source, MigrateOptions("tpu", dry_run=True)).changes
    }
    plan = {"entry": ["python", "train.py"]}
    settings = {"steps": 3, "timeout_s": 120, "deps": "none"}
    outcome = verify_overlay(
        source, proposal, plan, "tpu", settings, tmp_path / "scratch", lambda m: None
    )
    assert outcome.verification.verdict == "verified", outcome.verification.reason
    assert outcome.overlay is not None
    assert "loss.data" in proposal["train.py"]  # the proposal as it was
    assert "loss.data" not in outcome.overlay["train.py"]
    assert outcome.overlay["train.py"].count("loss.item()") == 2
