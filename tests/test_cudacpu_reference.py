"""A CUDA C++ program as the verifier's reference: the suite's load_inline task runs on the
CPU reference through torchport's CPU runner for CUDA kernels and produces losses; its
hand-written port is verified against them, a wrong port (the exact GELU for the kernel's
tanh approximation) is failed by the differential check at the kernel's call site, though
its losses match. An original whose kernels the runner
refuses leaves its port at ``ran``, and the runner's reason, with file and line, reaches
the verification (slow: sandboxed runs, and the extension compiles in the run)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from torchport.agents.deliver import kernel_runner_markdown, verification_markdown
from torchport.agents.verifier import RunLimits, verify_tree
from torchport.sandbox.native.build import missing_tools

pytestmark = pytest.mark.slow
SUITE = Path(__file__).resolve().parents[1] / "evals" / "suite"
TASK = SUITE / "load-inline-kernel"
LIMITS = RunLimits(steps=3, forwards=3, timeout_s=900)


def port(tmp: Path, name: str, edit=None) -> Path:
    """The task's repository with its tpu golden laid over it (and ``edit`` applied)."""
    tree = tmp / name
    shutil.copytree(TASK / "repo", tree)
    shutil.copytree(TASK / "golden" / "tpu", tree, dirs_exist_ok=True)
    if edit is not None:
        fused = tree / "fused_ops.py"
        fused.write_text(edit(fused.read_text()))
    return tree


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    missing = missing_tools()
    if missing:
        pytest.skip(f"the CPU runner for CUDA kernels cannot compile here: {missing}")
    tmp = tmp_path_factory.mktemp("cudacpu-reference")
    cache = tmp / "references"  # the original runs (and compiles) once for both ports
    right = port(tmp, "right")
    # the exact GELU for the tanh one: 4.4e-06 relative on these losses, inside the fp32
    # policy, so only the kernel's call site can tell them apart
    wrong = port(
        tmp,
        "wrong",
        lambda s: s.replace('F.gelu(x + bias, approximate="tanh")', "F.gelu(x + bias)"),
    )
    argv = ["python", "train.py"]
    return {
        name: verify_tree(TASK / "repo", tree, argv, "tpu", LIMITS, cache)[0]
        for name, tree in (("right", right), ("wrong", wrong))
    }


def test_the_load_inline_original_runs_its_kernels_on_the_cpu_reference(verdicts):
    reference = verdicts["right"].reference
    assert reference["status"] == "ok" and len(reference["losses"]) == LIMITS.steps
    (extension,) = reference["cuda_kernel_runner"]
    assert extension["name"] == "fused_bias_gelu" and extension["api"] == "load_inline"
    assert extension["site"] == "fused_ops.py:81"
    # one forward and one backward launch per layer (3) and step
    assert extension["launches"] == {
        "bias_gelu_fwd_kernel": 3 * LIMITS.steps,
        "bias_gelu_bwd_kernel": 3 * LIMITS.steps,
    }
    assert extension["refused"] == [] and extension["cpu_kernels"] is None


def test_the_right_port_is_verified_and_says_where_the_reference_came_from(verdicts):
    v = verdicts["right"]
    assert v.verdict == "verified", v.reason
    assert "torchport's CPU runner for CUDA kernels: fused_bias_gelu (" in v.reason
    record = {
        "verdict": v.verdict,
        "verification": v.to_json(),
        "target": "tpu",
        "run_id": "r1",
        "iterations": 1,
        "elapsed_s": 1.0,
        "agent_edits": [],
        "decisions": [],
    }
    text = verification_markdown(record)
    assert (
        "- reference kernels: `fused_bias_gelu` (`load_inline` at `fused_ops.py:81`) ran on "
        "torchport's CPU runner for CUDA kernels: `bias_gelu_bwd_kernel` x9, "
        "`bias_gelu_fwd_kernel` x9"
    ) in text


def test_a_port_that_changes_the_kernels_meaning_is_failed(verdicts):
    v = verdicts["wrong"]
    assert v.verdict == "failed", v.reason
    assert v.failure["error"]["type"] == "KernelMismatch", v.failure["error"]
    assert v.kernel_check["holds"] is False
    assert v.reason.startswith(
        "the differential check fails at the kernel call site fused_ops.py:bias_gelu"
    ), v.reason
    # the losses alone would have passed it
    assert v.parity is not None and v.parity.holds and v.reason.endswith("losses match")


REFUSED = '''
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <cub/cub.cuh>
typedef cub::BlockReduce<float, 128> Reduce;
torch::Tensor total(torch::Tensor x) { return x.sum(); }
"""
ext = load_inline("reduce_ext", "torch::Tensor total(torch::Tensor x);", cuda_sources=CUDA,
                  functions=["total"])
'''
TRAIN = """
import torch
import ops

torch.manual_seed(0)
model = torch.nn.Linear(4, 1).to("{device}")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    loss = model(torch.randn(8, 4, device="{device}")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_an_original_the_runner_refuses_leaves_the_port_at_ran_with_the_reason(tmp_path):
    original, ported = tmp_path / "original", tmp_path / "ported"
    for tree, device, ops in ((original, "cuda", REFUSED), (ported, "tpu", "")):
        tree.mkdir()
        (tree / "ops.py").write_text(textwrap.dedent(ops))
        (tree / "train.py").write_text(textwrap.dedent(TRAIN.format(device=device)))
    v, reference = verify_tree(original, ported, ["python", "train.py"], "tpu", LIMITS, None)
    assert v.verdict == "ran", v.reason
    assert v.reason.startswith("the original could not run on the CPU reference: ops.py:")
    assert "ops.py:6: the file uses cub:: (CUB)" in v.reason
    assert "torchport's CPU runner for CUDA kernels cannot run" in v.reason
    (extension,) = reference["cuda_kernel_runner"]
    assert extension["refused"] == [
        {"family": "CUB", "construct": "cub::", "file": "ops.py", "line": 6, "function": None}
    ]
    (line,) = kernel_runner_markdown([extension])
    assert "could not run on torchport's CPU runner" in line and "ops.py:6" in line
