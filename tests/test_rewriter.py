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


MODEL = """\
from torch import nn


class Block(nn.Module):
    def forward(self, x):
        return fused_gelu(x)
"""


def _one_span_repair(tmp_path, rel: str, text: str, line: int, new_code: str, problem: str):
    """llm_repair of one line of ``rel``, the model's one reply replacing it with ``new_code``."""
    import json

    from scripted_llm import Content, ScriptedLLM
    from torchport.agents.llm.client import LLMClient
    from torchport.agents.llm.config import LLMConfig
    from torchport.agents.rewriter import llm_repair

    src = tmp_path / "src"
    src.mkdir()
    (src / rel).write_text(text)
    edit = {"start_line": line, "end_line": line, "new_code": new_code}
    reply = Content(json.dumps({"edits": [edit], "summary": "edited"}))
    request = {
        "kind": "construct",
        "target": "tpu",
        "path": rel,
        "start_line": line,
        "end_line": line,
        "problem": problem,
    }
    with ScriptedLLM([reply]) as server:
        client = LLMClient(LLMConfig(base_url=server.base_url, model="m"), backoff_s=0.01)
        return llm_repair(client, src, {}, tmp_path / "work", request, max_turns=2, max_tokens=None)


def test_an_llm_edit_that_uses_torch_or_f_gets_their_imports(tmp_path):
    """A model writes `F.gelu` as in any PyTorch file; the file never imported F."""
    overlay, record = _one_span_repair(
        tmp_path,
        "model.py",
        MODEL,
        6,
        "        return F.gelu(torch.tanh(x))",
        "TPK010: fused_gelu is a CUDA-only kernel",
    )
    text = overlay["model.py"]
    assert "import torch.nn.functional as F\n" in text and "import torch\n" in text
    assert record["imports_added"] == ["F", "torch"]
    compile(text, "model.py", "exec")
    assert (tmp_path / "src" / "model.py").read_text() == MODEL  # the original is never touched


def test_names_the_file_binds_itself_get_no_import():
    from torchport.agents.rewriter import with_missing_imports

    text = "def f(torch, math):\n    import time\n    return torch.x + math.y + time.z\n"
    assert with_missing_imports(text, "f.py") == (text, [])
    broken = "def f(:\n    F.relu\n"
    assert with_missing_imports(broken, "f.py") == (broken, [])


TRAIN = """\
import torch


def train(model, use_cuda):
    if use_cuda:
        model = model.cuda()
    device = next(model.parameters()).device
    return model, device
"""


def test_an_llm_edit_that_uses_a_name_before_it_is_bound_is_refused(tmp_path):
    """The semantic guard sees `device` read before `train` binds it; the overlay is kept."""
    overlay, record = _one_span_repair(
        tmp_path,
        "train.py",
        TRAIN,
        6,
        "        model = model.to(device)",
        "TPD001: .cuda() moves to a CUDA device",
    )
    assert overlay == {}
    assert record["status"] == "rejected" and record["edits"] == []
    assert "semantic guard" in record["error"] and "'device'" in record["error"]
