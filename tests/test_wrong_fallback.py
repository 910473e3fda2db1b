"""A fallback that computes the wrong thing is failed at the kernel's call site (issue 34).

Rules alone port a Triton kernel by shipping triton_on_torch (TPK003) and a CUDA C++
extension by building its host translation (TPK002); the port's losses could still match
the original's for a few steps while a kernel is wrong at its edges. Here the fallback
the migration ships is made wrong on purpose, exactly where a real bug in it would be:
the runtime's masked access drops the last element its mask lets through (an off-by-one
mask), and the host translation of a softmax backward loses its ``- sum(dp * p)`` term. The
migration, the sandboxed runs, the original's kernels on the reference (Triton's
interpreter, torchport's CPU runner) and the differential check are real; the verdict
must name the call site and what differs there."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path

import pytest
from torchport.agents import graph, runs
from torchport.evals.tasks import load_suite
from torchport.tools import kernel_runtime
from torchport.tools.kernel_runtime import cuda_host

pytestmark = pytest.mark.slow

MASK_APPLIED = "        offset = torch.where(mask, offset, 0)\n"
# the last offset the mask lets through is masked off too: one element short at the edge
OFF_BY_ONE = (
    "        mask = mask & (offset != torch.where(mask, offset, -1).amax())\n" + MASK_APPLIED
)
BACKWARD_TERM = "scale * p[k] * (g[k] - dot)"


def _ported(tmp_path: Path, task: str) -> dict:
    src = tmp_path / "src"
    shutil.copytree(load_suite("builtin", [task])[0].repo, src)
    settings = {"source": str(src), "target": "tpu", "out": str(tmp_path / "out"), "llm": "none"}
    return graph.start({**settings, "steps": 3}, graph.Runtime(runs.new_run_id()))


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="needs the `triton` extra (pip install -e '.[triton]'): Triton's interpreter "
    "runs the original's kernel on the reference",
)
def test_a_runtime_whose_mask_is_off_by_one_fails_at_the_call_site(tmp_path, monkeypatch):
    right = kernel_runtime.shipped

    def shipped(name: str) -> str:
        text = right(name)
        if name != "triton_on_torch.py":
            return text
        assert text.count(MASK_APPLIED) == 1, "the runtime's masked access moved"
        return text.replace(MASK_APPLIED, OFF_BY_ONE)

    monkeypatch.setattr(kernel_runtime, "shipped", shipped)
    final = _ported(tmp_path, "triton-fused-rmsnorm")
    reason = final["verification"]["reason"]
    assert final["outcome"] != "verified", reason
    assert "the differential check fails at the kernel call site kernels/fused_norm.py:" in reason
    assert "mask & (offset != " in (tmp_path / "out/kernels/triton_on_torch.py").read_text()
    check = final["verification"]["kernel_check"]
    assert check["holds"] is False


def _compiler_missing() -> str:
    return "" if shutil.which("c++") or shutil.which("g++") else "no C++ compiler"


@pytest.mark.skipif(bool(_compiler_missing()), reason=_compiler_missing() or "-")
def test_a_host_build_missing_a_backward_term_fails_at_the_call_site(tmp_path, monkeypatch):
    right = cuda_host.host_source

    def host_source(*args, **kwargs):
        host = right(*args, **kwargs)
        assert host.text.count(BACKWARD_TERM) == 1, "the backward kernel moved"
        wrong = host.text.replace(BACKWARD_TERM, "scale * p[k] * g[k]")
        return dataclasses.replace(host, text=wrong)

    monkeypatch.setattr(cuda_host, "host_source", host_source)
    final = _ported(tmp_path, "masked-softmax-extension")
    reason = final["verification"]["reason"]
    assert final["outcome"] != "verified", reason
    assert "the differential check fails at the kernel call site tinylm/causal_softmax.py:" in (
        reason
    )
    assert "the gradient of" in reason, reason  # the forward matches; the backward does not
    host = next((tmp_path / "out").rglob("*_host.cpp")).read_text()
    assert "scale * p[k] * g[k]" in host and BACKWARD_TERM not in host
