"""Where a failing port first computes otherwise (agents.divergence, sandbox.module_trace).

The comparison is tested on hand-made traces (each way of blaming: a port line inside the
enclosing forward, torch's own layer on the device, code outside every module, a gradient,
the update); the whole path on real sandboxed runs: a small transformer whose port scales
one attention block's scores wrongly, and an unchanged program whose only difference is the
TPU's default matmul arithmetic.
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import pytest
from torchport.agents import divergence, divergence_report, verifier
from torchport.agents.diagnose import diagnose
from torchport.agents.verifier import (
    Parity,
    RunLimits,
    first_differing_step,
    policies,
    verify_tree,
)
from verification_md import verification_md

FP32 = policies()["fp32"]


def _sample(values, shape=None, dtype="float32"):
    return {"dtype": dtype, "shape": shape or [len(values)], "values": values}


def _call(name, out, *, given=None, parent=None, where="torch.nn.modules.linear.Linear", ops=()):
    call = {"name": name, "cls": name.rpartition(".")[2].title(), "where": where}
    call.update(out=_sample(out), parent=parent, ops=list(ops), leaf=True)
    if given is not None:
        call["in"] = _sample(given)
    return call


ORIGINAL_MODEL = """\
class Attention:
    def forward(self, x):
        q = self.q(x)
        scores = q * 0.5
        return self.proj(scores)
"""


def _trees(tmp_path: Path, port_text: str) -> tuple[Path, Path]:
    source, tree = tmp_path / "original", tmp_path / "port"
    for root, text in ((source, ORIGINAL_MODEL), (tree, port_text)):
        root.mkdir()
        (root / "model.py").write_text(text)
    return source, tree


def _traces(proj_in_port: float, where: str = "model.py:2-5"):
    """The original's and the port's calls: q matches; proj's input is 1.0 or not."""
    ref = [
        _call("attn.q", [1.0, 2.0], given=[1.0, 2.0], parent="attn"),
        _call("attn.proj", [3.0, 4.0], given=[1.0, 1.0], parent="attn"),
        _call("attn", [3.0, 4.0], given=[1.0, 2.0], where=where),
    ]
    port = [
        _call("attn.q", [1.0, 2.0], given=[1.0, 2.0], parent="attn"),
        _call("attn.proj", [3.0, 9.0], given=[1.0, proj_in_port], parent="attn", ops=["addmm"]),
        _call("attn", [3.0, 9.0], given=[1.0, 2.0], where=where),
    ]
    return {"step": 2, "calls": ref}, {"step": 2, "calls": port}


def test_an_input_that_already_differs_blames_the_enclosing_forward_at_the_changed_line(
    tmp_path,
):
    source, tree = _trees(tmp_path, ORIGINAL_MODEL.replace("q * 0.5", "q * 0.25"))
    ref, port = _traces(proj_in_port=2.0)
    found = divergence.locate(ref, port, FP32, source, tree)
    assert (found.found, found.module, found.where) == ("module", "attn", "model.py:2-5")
    assert found.blame == "port" and found.port_lines == [4] and found.original_lines == [4]
    assert "attn.proj (Proj) is the first module whose output differs" in found.summary
    assert "the port changed model.py line(s) 4" in found.summary
    assert found.rows[0].name == "attn.q" and found.rows[0].holds
    assert found.rows[1].holds is False and found.rows[1].input_holds is False


def test_a_module_whose_input_matches_is_itself_blamed_and_an_unchanged_span_is_the_devices(
    tmp_path,
):
    source, tree = _trees(tmp_path, ORIGINAL_MODEL)
    ref, port = _traces(proj_in_port=1.0)  # proj's input matches, its output does not
    found = divergence.locate(ref, port, FP32, source, tree)
    assert (found.module, found.where, found.blame) == ("attn.proj", found.where, "device")
    assert found.where == "torch.nn.modules.linear.Linear" and found.ops == ["addmm"]
    assert "torch's own layer, unchanged" in found.summary and "addmm" in found.summary
    # the same module defined in the program, in a span the port did not change
    ref, port = _traces(proj_in_port=2.0)
    found = divergence.locate(ref, port, FP32, source, tree)
    assert found.blame == "device" and found.port_lines == []
    assert "the port did not change model.py:2-5" in found.summary


def test_a_container_passing_its_input_on_is_climbed_to_the_forward_that_made_it(tmp_path):
    """dcgan's Discriminator scales its features before ``adv_layer``, an nn.Sequential:
    the Sequential's first Linear sees the changed input first, and so does the Sequential."""
    source, tree = _trees(tmp_path, ORIGINAL_MODEL.replace("q * 0.5", "q * 0.25"))
    seq = "torch.nn.modules.container.Sequential"
    ref, port = [], []
    for calls, feature in ((ref, 1.0), (port, 1.5)):
        calls.append(_call("model", [1.0], given=[1.0], parent="D"))
        calls.append(_call("adv.0", [feature * 2], given=[feature], parent="adv"))
        calls.append(_call("adv", [feature * 2], given=[feature], parent="D", where=seq))
        calls.append(_call("D", [feature * 2], given=[1.0], where="model.py:2-5"))
    found = divergence.locate({"calls": ref}, {"calls": port}, FP32, source, tree)
    assert (found.module, found.where, found.blame) == ("D", "model.py:2-5", "port")
    assert found.port_lines == [4]


def test_an_input_no_module_made_is_blamed_on_code_outside_the_modules(tmp_path):
    source, tree = _trees(tmp_path, ORIGINAL_MODEL)
    ref = {"step": 1, "calls": [_call("embed", [1.0], given=[5.0])]}
    port = {"step": 1, "calls": [_call("embed", [2.0], given=[6.0])]}
    found = divergence.locate(ref, port, FP32, source, tree)
    assert found.blame == "outside-modules" and divergence.OUTSIDE in found.summary


def test_equal_outputs_turn_to_the_gradients_then_to_the_update(tmp_path):
    source, tree = _trees(tmp_path, ORIGINAL_MODEL)
    calls = [_call("fc", [1.0, 2.0], given=[1.0])]
    grads = [{"root": 0, "name": "fc.weight", "grad": _sample([0.1, 0.2])}]
    bad = [{"root": 0, "name": "fc.weight", "grad": _sample([0.1, 0.4])}]
    ref = {"step": 3, "calls": calls, "grads": grads}
    found = divergence.locate(ref, {"step": 3, "calls": calls, "grads": bad}, FP32, source, tree)
    assert (found.found, found.module) == ("gradient", "fc")
    assert "the gradient of fc.weight differs" in found.summary
    found = divergence.locate(ref, {"step": 3, "calls": calls, "grads": grads}, FP32, source, tree)
    assert found.found == "update" and "optimizer" in found.summary


def test_no_module_to_match_is_said_plainly(tmp_path):
    source, tree = _trees(tmp_path, ORIGINAL_MODEL)
    found = divergence.locate({"calls": []}, {"calls": []}, FP32, source, tree)
    assert found.found == "unknown" and "no module structure" in found.summary


def test_samples_compare_shapes_non_finite_values_and_the_policy():
    same = _sample([1.0, math.nan])
    assert divergence.compare_sample(same, same, FP32)[0] is True
    assert divergence.compare_sample(same, _sample([1.0, 2.0]), FP32)[0] is False
    assert divergence.compare_sample(same, _sample([1.0, math.nan], shape=[1, 2]), FP32)[0] is False
    held, worst_abs, _ = divergence.compare_sample(_sample([100.0]), _sample([100.0 + 5e-3]), FP32)
    assert held is True and math.isclose(worst_abs, 5e-3, rel_tol=1e-6)
    assert divergence.compare_sample(_sample([1.0]), _sample([1.001]), FP32)[0] is False


def test_the_first_differing_step_is_rank_0s_first_step_beyond_the_policy():
    rows = [
        {"step": 1, "reference": 1.0, "target": 1.0, "rank": 0},
        {"step": 1, "reference": 1.0, "target": 9.0, "rank": 1},
        {"step": 2, "reference": 1.0, "target": 1.5, "rank": 0},
    ]
    assert first_differing_step(Parity("losses", per_step=rows), FP32) == 2
    assert first_differing_step(Parity("losses", per_step=rows[:1]), FP32) is None
    assert first_differing_step(Parity("outputs", holds=False), FP32) == 1


def test_a_divergence_in_an_unchanged_torch_layer_is_diagnosed_as_the_emulators(tmp_path):
    from torchport.agents.verifier import judge

    def run(losses):
        return {"status": "ok", "losses": losses, "counters": {"ops": 10}, "error": None}

    failed = judge(run([2.0, 1.5]), run([2.0, 1.9]), FP32, "tpu")
    source, tree = _trees(tmp_path, ORIGINAL_MODEL)
    ref, port = _traces(proj_in_port=1.0)
    found = divergence.locate(ref, port, FP32, source, tree).to_json()
    told = verifier._told_divergence(failed, found, "tpu")
    diagnosed = diagnose(told.failure, "tpu")
    assert (diagnosed.signature, diagnosed.action) == ("parity-emulated-op", "human")
    assert "(attn.proj)" in diagnosed.cause and told.next_step == diagnosed.hint


def test_the_report_section_escapes_the_programs_names():
    hostile = "<img src=x onerror=alert(1)>"
    found = {
        "summary": f"at step 1, {hostile} differs",
        "rows": [
            {"index": 0, "name": hostile, "cls": "A|B", "where": "m.py:1-2", "dtypes": ["f", "f"]}
        ],
        "profile": [[hostile, 0.5]],
        "step": 1,
    }
    text = "\n".join(divergence_report.markdown(found))
    assert re.findall(r"(?<![\\`])<img", text) == []  # escaped, or a code span
    assert "`<img src=x onerror=alert(1)>`" in text and "`A\\|B`" in text
    assert f"]({divergence_report.PLOT})" in text
    assert divergence_report.png(found, FP32.rtol)[:8] == b"\x89PNG\r\n\x1a\n"


# -- real runs ---------------------------------------------------------------------------

MODEL = """
import math

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, depth=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)
"""

TRAIN = """
import torch
import torch.nn.functional as F

from model import TinyTransformer

torch.manual_seed(0)
device = torch.device("cuda")
model = TinyTransformer().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(0, 64, (8, 16))
for step in range(4):
    batch = tokens.to(device)
    logits = model(batch[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 64), batch[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(step, loss.item())
"""

# A least-squares fit from a nearby start, as one nn.Linear: bf16 matmul passes cannot see
# its residual (tests/test_precision_check.py's SENSITIVE program, with a module).
FIT = """
import torch

torch.manual_seed(0)
device = torch.device("cuda")
d, n = 128, 512
w_true = torch.randn(d, 1, dtype=torch.float64)
x = torch.randn(n, d, dtype=torch.float64)
y = (x @ w_true).float().to(device)
x = x.float().to(device)
model = torch.nn.Linear(d, 1, bias=False)
with torch.no_grad():
    model.weight.copy_((w_true + 1e-3 * torch.randn(d, 1, dtype=torch.float64)).T.float())
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.25)
for step in range(5):
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(step, loss.item())
"""

BUDGET = RunLimits(steps=4, forwards=4, timeout_s=240, memory_mb=4096)
SCALE = "/ math.sqrt(q.shape[-1])"


def _write(root: Path, files: dict[str, str]) -> None:
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text).lstrip())


@pytest.mark.slow
def test_a_port_that_scales_one_attention_block_wrongly_is_named_at_its_line(tmp_path):
    source, tree = tmp_path / "original", tmp_path / "port"
    _write(source, {"model.py": MODEL, "train.py": TRAIN})
    bug = MODEL.replace(SCALE, "/ math.sqrt(2 * q.shape[-1])")
    _write(tree, {"model.py": bug, "train.py": TRAIN.replace('"cuda"', '"tpu"')})
    line = 1 + (tree / "model.py").read_text().splitlines().index(
        "        scores = q @ k.transpose(-2, -1) / math.sqrt(2 * q.shape[-1])"
    )
    v, _ = verify_tree(source, tree, ["python", "train.py"], "tpu", BUDGET, None)
    assert v.verdict == "failed" and v.failure["error"]["type"] == "ParityMismatch"
    found = v.divergence
    assert found["found"] == "module" and found["module"] == "blocks.0.attn"
    assert found["blame"] == "port" and found["port_lines"] == [line]
    assert found["where"].startswith("model.py:") and found["max_rel"] > FP32.rtol
    assert f"the port changed model.py line(s) {line}" in v.reason
    assert v.next_step.startswith(f"Compare model.py line(s) {line} with the original's")
    diagnosed = diagnose(v.failure, "tpu")
    assert (diagnosed.signature, diagnosed.file, diagnosed.line) == (
        "parity-port-line",
        "model.py",
        line,
    )
    first = next(r for r in found["rows"] if not r["holds"])
    assert first["name"] == "blocks.0.attn.proj" and first["input_holds"] is False
    assert "## First divergence" in verification_md(v)


@pytest.mark.slow
def test_an_unchanged_program_under_the_tpus_matmul_arithmetic_names_the_op(tmp_path):
    source, tree = tmp_path / "original", tmp_path / "port"
    _write(source, {"fit.py": FIT})
    _write(tree, {"fit.py": FIT.replace('"cuda"', '"tpu"')})
    budget = RunLimits(steps=5, forwards=5, timeout_s=240, memory_mb=2048)
    v, _ = verify_tree(source, tree, ["python", "fit.py"], "tpu", budget, None)
    assert v.verdict == "failed" and v.failure["error"]["type"] == "PrecisionSensitive"
    found = v.divergence
    assert (found["found"], found["module"], found["blame"]) == ("module", "Linear", "device")
    assert "mm" in found["ops"] and found["step"] == 1
    assert "torch's own layer, unchanged: the emulated device's op" in v.reason
    assert "the default run ran step 1 from the exact run's weights" in found["weights"]
