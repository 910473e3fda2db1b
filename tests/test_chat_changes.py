"""A proposal cut into numbered changes: undoing some puts back exactly their lines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from torchport.agents.chat import changes as ch

BASE = {"train.py": "import torch\nx = 1\nm = M().cuda()\ny = 2\nz = x.cuda()\n"}
PROPOSAL = {"train.py": "import torch\nimport time\nx = 1\nm = M().to(d)\ny = 2\nz = x.to(d)\n"}
EDITS = [
    {"rule": "TPD001", "path": "train.py", "line": 3, "end_line": 3, "reason": "cuda method"},
    {"rule": "TPD001", "path": "train.py", "line": 5, "end_line": 5, "reason": "cuda method"},
]


def test_hunks_are_numbered_in_file_order_and_attributed():
    found = ch.split(BASE, PROPOSAL, EDITS)
    assert [c["id"] for c in found] == [1, 2, 3]
    assert [(c["by"], c["rules"]) for c in found] == [
        ("supporting", []),
        ("codemod", ["TPD001"]),
        ("codemod", ["TPD001"]),
    ]
    assert ch.at_line(found, "train.py", 5)["id"] == 3


def test_undoing_one_change_reverts_only_its_lines():
    found = ch.split(BASE, PROPOSAL, EDITS)
    text = ch.current(BASE, PROPOSAL, found, {2})["train.py"]
    assert text == "import torch\nimport time\nx = 1\nm = M().cuda()\ny = 2\nz = x.to(d)\n"
    assert ch.current(BASE, PROPOSAL, found, {1, 2, 3}) == {}  # all undone: nothing to write
    assert ch.current(BASE, PROPOSAL, found, set()) == PROPOSAL


def test_diff_of_one_file_and_hunk_text():
    found = ch.split(BASE, PROPOSAL, EDITS)
    assert (
        ch.hunk(BASE, PROPOSAL, found[1]) == "@@ train.py:3 @@\n-m = M().cuda()\n+m = M().to(d)\n"
    )
    patch = ch.diff(BASE, ch.current(BASE, PROPOSAL, found, {1}), "train.py")
    assert "+import time" not in patch and "+z = x.to(d)" in patch


lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n", "e\n"]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(lines, lines, st.data())
def test_any_subset_undone_gives_each_hunk_old_or_new(before, after, data):
    base, proposal = {"f.py": "".join(before)}, {"f.py": "".join(after)}
    found = ch.split(base, proposal)
    undone = set(data.draw(st.lists(st.sampled_from([c["id"] for c in found] or [0]))))
    text = ch.current(base, proposal, found, undone).get("f.py", base["f.py"])
    # each kept change adds its net lines, each undone one none
    kept = [c for c in found if c["id"] not in undone]
    net = sum((c["span"][3] - c["span"][2]) - (c["span"][1] - c["span"][0]) for c in kept)
    assert len(text.splitlines()) == len(before) + net
    # undoing the rest too gives back the original; undoing none gives the proposal
    rest = {c["id"] for c in found} - undone
    assert (
        ch.current(base, proposal, found, undone | rest).get("f.py", base["f.py"]) == base["f.py"]
    )
    assert ch.current(base, proposal, found, set()).get("f.py", base["f.py"]) == proposal["f.py"]


def test_original_line_numbers_map_onto_the_proposal():
    before, after = BASE["train.py"], PROPOSAL["train.py"]
    # 1 import torch (same), 2 x = 1 (one line down), 3 the .cuda() line (changed), 5 too
    assert [ch.map_line(before, after, n) for n in (1, 2, 3, 4, 5)] == [1, 3, 4, 5, 6]
    assert after.splitlines()[ch.map_line(before, after, 4) - 1] == "y = 2"
