"""The LLM lane for custom kernels, end to end: the agent graph ports the suite's
triton-swiglu-autograd (a torch.autograd.Function whose forward and backward are Triton
kernels, no torch fallback) with a scripted OpenAI-compatible server on loopback (a test
double for the endpoint, not a model) answering the rewriter; the codemods, the sandboxed
runs, the kernel in Triton's interpreter and the differential check are real.

A right replacement verifies (losses and the check at the call site). A replacement whose
backward drops silu's ``a * (1 - sigmoid(a))`` term, plausible and right at step one, is
failed by the differential check, and the loop sends the model back to it with the check's
evidence and the shapes the original called it with; its next answer verifies."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
from scripted_llm import Content, ScriptedLLM
from torchport.agents import graph, runs
from torchport.agents.llm.factory import llm_factory
from torchport.evals.tasks import load_suite

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="needs the `triton` extra (pip install -e '.[triton]'): Triton's interpreter "
    "runs the original's kernels on the reference",
)

SITE = "ops/swiglu.py:silu_mul"
RIGHT = '''\
def silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b, elementwise; autograd derives the kernels' backward."""
    return F.silu(a) * b'''
WRONG = """\
class SiLUMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return F.silu(a) * b

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        sig = torch.sigmoid(a)
        return dc * b * sig, dc * a * sig


def silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return SiLUMul.apply(a, b)"""


def rewrite_span(code: str, path: str = "ops/swiglu.py"):
    """A script step answering with ``code`` for the lines the request names in ``path``
    (read from it: the codemods may have moved them), as the JSON edits shorthand."""

    def answer(request: dict) -> Content:
        asked = request["messages"][-1]["content"]
        found = re.search(rf"File: {re.escape(path)}, lines (\d+)-(\d+)", asked)
        assert found, asked[-400:]
        edit = {"start_line": int(found[1]), "end_line": int(found[2]), "new_code": code}
        return Content(json.dumps({"edits": [edit], "summary": "the kernels in PyTorch"}))

    return answer


def migrate(tmp_path: Path, script: list, **settings) -> tuple[dict, ScriptedLLM]:
    """The task with ``tl.assume`` in its forward kernel, on a line of its own: Triton's
    interpreter runs it (the reference), triton_on_torch lacks it, so the rules cannot run
    the kernels on that runtime (TPK003) and leave them to the LLM, at the same lines."""
    src = tmp_path / "src"
    shutil.copytree(load_suite("builtin", ["triton-swiglu-autograd"])[0].repo, src)
    ops = src / "ops" / "swiglu.py"
    assumed = "    mask = offs < n; tl.assume(n > 0)\n"
    ops.write_text(ops.read_text().replace("    mask = offs < n\n", assumed, 1))
    with ScriptedLLM(script) as llm:
        runtime = graph.Runtime(runs.new_run_id(), llm_factory=llm_factory(lambda m: None))
        final = graph.start(
            {
                "source": str(src),
                "target": "tpu",
                "out": str(tmp_path / "out"),
                "llm": llm.base_url,
                "steps": 3,
                "timeout_s": 300,
                **settings,
            },
            runtime,
        )
    return final, llm


def steps(final: dict) -> list[tuple[str, str]]:
    return [(d["node"], d["decision"]) for d in final["decisions"]]


@pytest.mark.slow
def test_a_right_kernel_replacement_verifies_at_the_call_site_and_on_the_losses(tmp_path):
    final, llm = migrate(tmp_path, [rewrite_span(RIGHT)])
    v = final["verification"]
    assert final["outcome"] == "verified", v["reason"]
    assert ("rewrite", "unused kernels removed") in steps(final)
    check = v["kernel_check"]
    assert check["holds"] is True and [s["site"] for s in check["sites"]] == [SITE]
    assert "the differential check matches the original's kernels at " + SITE in v["reason"]
    # one request for the call site, with the kernels' source and the backward rule
    (request,) = llm.requests
    asked = request["messages"][-1]["content"]
    assert "def _silu_mul_bwd(" in asked and "da = dc * b * sig * (1.0 + a * (1.0 - sig))" in asked
    assert "`SiLUMul` is a torch.autograd.Function" in asked
    assert (
        "File: ops/swiglu.py, lines 39-61" in asked and "Write lines 39-61 as pure PyTorch" in asked
    )
    ported = (tmp_path / "out" / "ops" / "swiglu.py").read_text()
    assert "triton" not in ported and "_silu_mul_fwd" not in ported
    assert "return F.silu(a) * b" in ported and "import torch.nn.functional as F" in ported
    report = (tmp_path / "out" / "torchport-report" / "verification.md").read_text()
    assert "## Kernel call sites (differential check: holds)" in report


@pytest.mark.slow
def test_a_wrong_backward_is_failed_by_the_differential_check_and_repaired(tmp_path):
    final, llm = migrate(tmp_path, [rewrite_span(WRONG), rewrite_span(RIGHT)])
    assert final["outcome"] == "verified", final["verification"]["reason"]
    first = [("rewrite", "LLM edited"), ("rewrite", "unused kernels removed")]
    second = [("diagnose", "llm"), ("rewrite", "LLM edited"), ("verify", "verified")]
    assert steps(final)[2:] == [*first, ("verify", "failed"), *second, ("deliver", "verified")]
    failed = next(d for d in final["decisions"] if d["decision"] == "failed")
    assert failed["why"].startswith(
        f"the differential check fails at the kernel call site {SITE}: on inputs "
        "(a: float32[64, 128] (requires grad), b: float32[64, 128] (requires grad)), "
        "the gradient of a differs from the original's by up to"
    ), failed["why"]
    diagnosed = next(d for d in final["decisions"] if d["node"] == "diagnose")
    assert diagnosed["signature"] == "kernel-mismatch" and diagnosed["file"] == "ops/swiglu.py"
    # the second request: the replacement, the evidence, the kernel and the recorded shapes
    second = llm.requests[1]["messages"][-1]["content"]
    assert "KernelMismatch: the differential check fails at the kernel call site" in second
    assert "silu_mul(a: float32[64, 128] (requires grad), b: float32[64, 128]" in second
    assert "def _silu_mul_bwd(" in second and "return dc * b * sig, dc * a * sig" in second
    assert llm.exhausted == 0
