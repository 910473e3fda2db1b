"""One definition of "left for a human" and "performance advisory": scan's summary, the
plan line (the graph's and chat's), the migration's summary and chat's /report count one
repository the same way (``tools.findings.work_kind``)."""

from __future__ import annotations

from pathlib import Path

from torchport.agents.chat.views import left_for_you
from torchport.agents.planner import make_plan, work_of
from torchport.tools.findings import work_line
from torchport.tools.migrate import MigrateOptions, migrate
from torchport.tools.report.counts import count_constructs
from torchport.tools.report.summary import summarize
from torchport.tools.report.text import render_summary
from torchport.tools.scanner import ScanOptions, scan

# On tpu: .cuda() x3 converted automatically, the capability check left for a human
# (TPD013), the .item() in the training loop a performance advisory (TPH001).
TRAIN = """\
import torch

major, minor = torch.cuda.get_device_capability()
model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4).cuda()).pow(2).mean()
    loss.backward()
    opt.step()
    print(loss.item())
"""


def test_scan_plan_summary_and_chat_count_advisories_alike(tmp_path: Path):
    src = tmp_path / "repo"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    scanned = scan(src, ScanOptions(target="tpu"))
    assert {f.rule for f in scanned.findings} >= {"TPD013", "TPH001"}

    in_scan = summarize(scanned)["fix_kinds"]["tpu"]
    plan = make_plan(src, scanned, "tpu", "python train.py").to_json()
    in_plan = work_of(plan)
    totals = count_constructs(migrate(src, MigrateOptions(target="tpu", out=tmp_path / "out")))
    left, advisories = left_for_you(plan["manual"] + plan["llm"], {}, {})

    assert in_scan == in_plan
    assert (in_scan["manual"], in_scan["advisory"]) == (1, 1)
    assert (len(totals.left), len(totals.advisory)) == (1, 1)
    assert (len(left), len(advisories)) == (1, 1)
    assert len(totals.converted) == in_scan["auto"]
    # as the graph and chat say the plan, and as scan's text summary shows it
    assert work_line(in_plan).endswith("1 for a human, 1 performance advisory")
    row = next(line for line in render_summary(scanned) if line.strip().startswith("tpu"))
    assert row.split()[1:8] == [str(in_scan["auto"]), "/", "0", "/", "1", "/", "1"]
