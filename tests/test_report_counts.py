"""The migration report's numbers: one construct is one finding of the scan, and every
report says found = converted + left for a human + performance advisories, per file and
in total, however many edits (follow-ups included) a conversion took."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from torchport.tools.migrate import MigrateOptions, migrate
from torchport.tools.report.counts import count_constructs
from torchport.tools.report.linemap import line_map
from torchport.tools.report.migration import one_line_summary

# Two cuDNN flags removed above a construct left for a human; two .item() calls on one
# line (one advisory entry, x2); one .item() under a logging interval (not reported).
TRAIN = """\
import torch
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = False

model = torch.nn.Linear(4, 2).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
props = torch.cuda.get_device_properties(0)
for step in range(3):
    x = torch.randn(8, 4).cuda()
    loss = F.mse_loss(model(x), torch.zeros(8, 2).cuda())
    loss.backward()
    opt.step()
    print(loss.item(), loss.item() * 2)
    if step % 2 == 0:
        print(loss.item())
"""

# CUDA events: four constructs converted by eight edits (the .record() calls, the
# elapsed_time and the removal of the synchronize right after the last record() are
# follow-ups); `import time` is added above the construct left.
BENCH = """\
import torch

start = torch.cuda.Event(enable_timing=True)
end = torch.cuda.Event(enable_timing=True)
x = torch.randn(64, 64, device="cuda")
start.record()
y = x @ x
end.record()
torch.cuda.synchronize()
print("ms", start.elapsed_time(end))
print(torch.cuda.get_device_properties(0).name)
"""


def report_text(out: Path, name: str) -> str:
    return (out / "torchport-report" / name).read_text()


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    root = tmp_path_factory.mktemp("counts")
    src = root / "src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    (src / "bench.py").write_text(BENCH)
    result = migrate(src, MigrateOptions(target="tpu", out=root / "out"))
    return result, root / "out"


def test_found_is_converted_plus_left_plus_advisory_per_file_and_in_total(migrated):
    result, out = migrated
    data = json.loads(report_text(out, "changes.json"))
    s = data["summary"]
    by_file = Counter(f.path for f in result.scan.findings)
    assert s["per_file"] == {
        "bench.py": {"found": 5, "converted": 4, "left": 1, "advisory": 0},
        "train.py": {"found": 8, "converted": 5, "left": 1, "advisory": 2},
    }
    for path, row in s["per_file"].items():
        assert row["found"] == by_file[path] == row["converted"] + row["left"] + row["advisory"]
    assert s["constructs_found"] == len(result.scan.findings) == 13
    assert (s["converted"], s["left_for_humans"], s["advisories"]) == (9, 2, 2)
    # follow-up edits are edits, not constructs: more edits than conversions
    assert s["edits"] == len(result.edits) > s["converted"]
    assert len(data["left_for_humans"]) == 2 and len(data["advisories"]) == 2
    assert {a["rule"] for a in data["advisories"]} == {"TPH001"}


def test_summary_md_and_the_cli_line_say_the_same_numbers(migrated):
    result, out = migrated
    summary = report_text(out, "summary.md")
    assert "13 CUDA constructs found: **9 converted** automatically (69%, 13 edits)" in summary
    assert "2 left for a human and 2 performance advisories" in summary
    assert "| `train.py` | 8 | 5 | 1 | 2 |" in summary
    assert "| `bench.py` | 5 | 4 | 1 | 0 |" in summary
    assert one_line_summary(result) == (
        "13 constructs: 9 converted automatically (13 codemod edits in 2 files), "
        "2 left for a human, 2 performance advisories"
    )


def test_advisories_have_their_own_section_and_one_entry_per_line(migrated):
    _, out = migrated
    manual = report_text(out, "manual.md")
    left, advisories = manual.split("# Performance advisories")
    assert "TPH" not in left and "TPD012" in left
    assert "2 constructs need a decision" in left
    assert advisories.count("## ") == 1  # two .item() on one line: one entry
    assert "TPH001 `.item()` in a training loop x2" in advisories
    assert "print(loss.item())`" not in advisories  # the logging-interval one is no finding


# bench.py grew by one line above its construct (`import time` and its group's blank
# line, two synchronize() lines in; the two event constructors and the original's
# synchronize after the last record() out), train.py lost three
# (two cuDNN lines and the blank line between them and the model: no blank-line debris)
@pytest.mark.parametrize(
    "path, line, original", [("bench.py", 12, 11), ("train.py", 6, 9), ("train.py", 12, 15)]
)
def test_manual_gives_the_migrated_line_with_the_original_beside_it(migrated, path, line, original):
    result, out = migrated
    assert f"## `{path}:{line} (original {original})`" in report_text(out, "manual.md")
    snippets = {f.snippet for f in result.scan.findings if (f.path, f.line) == (path, original)}
    assert (out / path).read_text().splitlines()[line - 1].strip() in snippets


def test_a_line_that_did_not_move_has_no_original_beside_it(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "info.py").write_text("import torch\n\nprint(torch.cuda.get_device_properties(0))\n")
    (src / "same.py").write_text(
        "import torch\n\nprint(torch.cuda.get_device_properties(0))\nx = torch.ones(1).cuda()\n"
    )
    migrate(src, MigrateOptions(target="tpu", out=tmp_path / "out"))
    manual = report_text(tmp_path / "out", "manual.md")
    assert "## `info.py:3` —" in manual and "## `same.py:3` —" in manual  # same.py changed
    assert "original" not in manual  # below the construct only: its line did not move


def test_line_map_follows_inserted_removed_and_rewritten_lines():
    before = textwrap.dedent(
        """\
        a
        drop1
        drop2
        b
        old
        c
        """
    )
    after = textwrap.dedent(
        """\
        new0
        a
        b
        new1
        new2
        c
        """
    )
    mapped = line_map(before, after)
    assert [mapped(n) for n in range(1, 7)] == [2, 3, 3, 3, 4, 6]
    assert line_map("x\n", "x\n")(1) == 1
    # a device `if` folded into its body: the body's lines moved up and lost an indent
    folded = line_map(
        "if cuda:\n    n = 2\n    p = props(0)\n    arg = 'cuda'\nelse:\n    arg = 'cpu'\nend\n",
        "n = 2\np = props(0)\narg = 'tpu'\nend\n",
    )
    assert [folded(n) for n in (2, 3, 7)] == [1, 2, 4]


def test_counts_stay_whole_when_a_file_cannot_be_rewritten(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    Path(src / "old.py").write_bytes(
        b"# -*- coding: latin-1 -*-\nimport torch\n# caf\xe9\nx = torch.zeros(2).cuda()\n"
    )
    result = migrate(src, MigrateOptions(target="tpu", out=tmp_path / "out"))
    s = json.loads(report_text(tmp_path / "out", "changes.json"))["summary"]
    assert s["per_file"]["old.py"] == {"found": 1, "converted": 0, "left": 1, "advisory": 0}
    assert result.unapplied and s["converted"] == 0


def test_chats_report_gives_the_proposed_files_lines_and_advisories_apart(tmp_path):
    from torchport.agents.chat.views import left_for_you
    from torchport.agents.planner import make_plan

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    result = migrate(src, MigrateOptions(target="tpu", dry_run=True))
    plan = make_plan(src, result.scan, "tpu")
    overlay = {c.path: c.after for c in result.changes}
    left, advisories = left_for_you([*plan.llm, *plan.manual], {"train.py": TRAIN}, overlay)
    assert [row[:2] for row in left] == [["TPD012", "train.py:6 (original 9)"]]
    assert [row[:2] for row in advisories] == [["TPH001 x2", "train.py:12 (original 15)"]]
    untouched, _ = left_for_you(plan.llm, {}, {})
    assert [row[1] for row in untouched] == ["train.py:9"]


def test_an_import_the_codemods_emptied_is_converted_one_still_used_is_left(tmp_path):
    """`from apex.optimizers import FusedAdam` goes with FusedAdam's last use (TPK007), so
    its TPP001 finding is not left for a human; the import of a class still used is."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(
        textwrap.dedent(
            """\
            import torch
            from apex.optimizers import FusedAdam
            from apex.optimizers import FusedLAMB as Lamb

            model = torch.nn.Linear(4, 2)
            opt = FusedAdam(model.parameters(), lr=1e-3)
            other = Lamb(model.parameters())
            """
        )
    )
    result = migrate(src, MigrateOptions(target="tpu", dry_run=True))
    imports = [f for f in result.scan.findings if f.rule == "TPP001"]
    assert sorted(f.line for f in imports) == [2, 3]
    counts = count_constructs(result)
    assert [f.line for f in counts.converted if f.rule == "TPP001"] == [2]
    assert [f.line for f, _ in counts.left if f.rule == "TPP001"] == [3]
    assert "torch.optim.AdamW(" in result.changes[0].after
    assert "from apex.optimizers import FusedAdam" not in result.changes[0].after
