"""The rewriter's guard on LLM edits: an edit must stay near the lines it was asked about."""

from __future__ import annotations

from torchport.agents.rewriter import construct_request, outside_window

BEFORE = "".join(f"line{i} = {i}\n" for i in range(1, 21))


def edited(lines: dict[int, str | None], extra_top: str = "") -> str:
    out = [extra_top] if extra_top else []
    for i, text in enumerate(BEFORE.splitlines(keepends=True), start=1):
        if i not in lines:
            out.append(text)
        elif lines[i] is not None:
            out.append(lines[i] + "\n")
    return "".join(out)


def test_edits_inside_the_window_pass():
    assert outside_window(BEFORE, edited({10: "line10 = 0"}), 10, 10, 2) is None
    assert outside_window(BEFORE, edited({12: "line12 = 0"}), 10, 10, 2) is None
    assert outside_window(BEFORE, edited({9: None, 10: None}), 10, 10, 2) is None


def test_edits_far_from_the_window_are_named():
    why = outside_window(BEFORE, edited({10: "x = 1", 17: "line17 = 0"}), 10, 10, 2)
    assert why is not None and "17" in why
    # deleting everything after the construct (what a confused small model did)
    assert outside_window(BEFORE, edited({i: None for i in range(10, 21)}), 10, 10, 2)


def test_imports_may_change_anywhere():
    new = edited({10: "line10 = torch.nn.LayerNorm(3)"}, extra_top="import torch\n")
    assert outside_window(BEFORE, new, 10, 10, 2) is None
    with_import = "from apex import x\n" + BEFORE
    assert outside_window(with_import, new, 11, 11, 2) is None  # the import dropped
    assert outside_window(BEFORE, edited({1: "from apex import x"}), 10, 10, 2)  # code -> import


def test_a_construct_request_is_exactly_the_finding_with_its_hint():
    item = {"rule": "TPK007", "path": "t.py", "line": 8, "end_line": 9, "message": "m", "hint": "h"}
    request = construct_request(item, "tpu")
    assert (request["start_line"], request["end_line"]) == (8, 9)
    assert request["context"] == "Suggested approach: h" and request["kind"] == "construct"
