"""The LLM improves on a verified baseline (issue 34, item 4): the suite's
triton-swiglu-autograd ports by rules alone through triton_on_torch (its kernels unchanged,
shipped runtime beside them), verified against the original kernels at the call site. With
a model configured (a scripted OpenAI-compatible server on loopback, a test double for the
endpoint), that site is offered once for a PyTorch version, which must verify and match the
fallback port's own outputs at the site; one that fails leaves the fallback port, verified.
The codemods, the sandboxed runs, Triton's interpreter and both differential checks are real.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from scripted_llm import ScriptedLLM
from test_kernel_lane import RIGHT, WRONG, rewrite_span
from torchport.agents import graph, kernel_improve, runs
from torchport.agents.fallback_report import fallbacks_markdown
from torchport.agents.llm.factory import llm_factory
from torchport.evals.tasks import load_suite
from torchport.tools.kernel_fallbacks import names_span, shipped_unused, unship

SITE = "ops/swiglu.py:silu_mul"
needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="needs the `triton` extra (pip install -e '.[triton]'): Triton's interpreter "
    "runs the original's kernels on the reference",
)


def migrate(tmp_path: Path, script: list, llm: bool = True) -> tuple[dict, ScriptedLLM]:
    src = tmp_path / "src"
    shutil.copytree(load_suite("builtin", ["triton-swiglu-autograd"])[0].repo, src)
    with ScriptedLLM(script) as server:
        runtime = graph.Runtime(runs.new_run_id(), llm_factory=llm_factory(lambda m: None))
        settings = {
            "source": str(src),
            "target": "tpu",
            "out": str(tmp_path / "out"),
            "llm": server.base_url if llm else "none",
            "steps": 3,
            "timeout_s": 300,
        }
        final = graph.start(settings, runtime)
    return final, server


def verified(final: dict) -> dict:
    """The final verification, which must be ``verified`` whatever the model answered."""
    assert final["outcome"] == "verified", final["verification"]["reason"]
    return final["verification"]


def steps(final: dict) -> list[tuple[str, str]]:
    return [(d["node"], d["decision"]) for d in final["decisions"]]


@needs_triton
@pytest.mark.slow
def test_a_right_replacement_of_a_fallback_kernel_is_taken_and_the_runtime_goes(tmp_path):
    final, llm = migrate(tmp_path, [rewrite_span(RIGHT)])
    v = verified(final)
    assert steps(final)[1:] == [
        ("rewrite", "codemods"),
        ("verify", "verified"),
        ("improve", "PyTorch version asked"),
        ("rewrite", "LLM edited"),
        ("rewrite", "fallback removed"),
        ("verify", "verified"),
        ("verify", "replacement taken"),
        ("deliver", "verified"),
    ]
    (request,) = llm.requests
    asked = request["messages"][-1]["content"]
    assert "KernelFallback: " + SITE + " runs through triton_on_torch" in asked
    assert "def _silu_mul_bwd(" in asked and "matches both the original kernel and that" in asked
    # held to both references: the original kernel and the fallback port at the site
    assert v["kernel_check"]["holds"] is True and v["fallback_check"]["holds"] is True
    assert [s["site"] for s in v["fallback_check"]["sites"]] == [SITE]
    # the fallback port's site ran on the emulated device (the reference shim counts nothing)
    assert v["fallback_check"]["runs"]["original"]["counters"]["ops"] > 0
    taken = next(d for d in final["decisions"] if d["decision"] == "replacement taken")
    assert taken["why"].startswith(
        f"the replacement of {SITE} verifies and matches the fallback port: the differential "
        f"check matches the fallback's kernels at {SITE} on 1 recorded input signature"
    ), taken["why"]
    assert v["fallbacks"] == []
    out = tmp_path / "out"
    assert not (out / "ops" / "triton_on_torch.py").exists()
    ported = (out / "ops" / "swiglu.py").read_text()
    assert "triton" not in ported and "_silu_mul_fwd" not in ported
    report = (out / "torchport-report" / "verification.md").read_text()
    assert "## Kernels through a fallback" not in report


@needs_triton
@pytest.mark.slow
def test_a_wrong_replacement_is_failed_at_the_site_and_the_fallback_port_is_kept(tmp_path):
    final, llm = migrate(tmp_path, [rewrite_span(WRONG)])
    v = verified(final)
    assert steps(final)[-5:] == [
        ("rewrite", "fallback removed"),
        ("verify", "failed"),
        ("verify", "kept the fallback"),
        ("verify", "reverted"),
        ("deliver", "verified"),
    ]
    kept = next(d for d in final["decisions"] if d["decision"] == "kept the fallback")
    assert kept["site"] == SITE and kept["kind"] == "triton_on_torch"
    assert kept["why"].startswith(
        f"the replacement of {SITE} does not verify: the differential check fails at the "
        f"kernel call site {SITE}: on inputs (a: float32[64, 128] (requires grad), "
        "b: float32[64, 128] (requires grad)), the gradient of a differs"
    ), kept["why"]
    assert len(llm.requests) == 1 and llm.exhausted == 0  # one attempt, no repair loop
    out = tmp_path / "out"
    assert (out / "ops" / "triton_on_torch.py").is_file()
    assert "from . import triton_on_torch as triton" in (out / "ops" / "swiglu.py").read_text()
    (fallback,) = v["fallbacks"]
    assert fallback["site"] == SITE and fallback["kind"] == "triton_on_torch"
    program = fallback["cost"]["program"]
    assert program["ops"] > 0 and program["h2d_count"] > 0 and "d2h_count" in program
    assert fallback["cost"]["runtime_syncs"] > 0
    assert fallback["cost"]["site_check"]["ops"] > 0 and fallback["cost"]["time_ratio"] > 0
    report = (out / "torchport-report" / "verification.md").read_text()
    assert "## Kernels through a fallback" in report
    kernels = "`_silu_mul_fwd`, `_silu_mul_bwd`"
    row = f"| `{SITE}` | {kernels} | triton\\_on\\_torch | the port's program | {program['ops']} |"
    assert row in report, report
    assert f"| `{SITE}` | {kernels} | triton\\_on\\_torch | the site's check | " in report
    assert "of the program's host syncs are inside the shipped triton\\_on\\_torch" in report
    assert "kept the fallback" in report


@needs_triton
@pytest.mark.slow
def test_without_a_model_the_fallback_port_is_delivered_and_reported(tmp_path):
    final, llm = migrate(tmp_path, [], llm=False)
    assert final["outcome"] == "verified"
    assert "improve" not in {node for node, _ in steps(final)} and not llm.requests
    (fallback,) = final["verification"]["fallbacks"]
    assert fallback["site"] == SITE and fallback["lines"] == [39, 61]


GELU = '''\
def bias_gelu(x, bias):
    """gelu(x + bias) with the tanh approximation; autograd derives the backward."""
    return torch.nn.functional.gelu(x + bias, approximate="tanh")'''


@pytest.mark.slow
def test_a_host_build_replaced_by_pytorch_leaves_no_host_files_in_the_port(tmp_path):
    """evals/suite/load-inline-kernel: rules build the CUDA extension from its host
    translation (TPK002); the model's PyTorch version of ``bias_gelu`` is taken, and the
    build, its CUDA strings, the host translation and the runner's runtime all go."""
    if not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no C++ compiler: the CPU runner and the host build need one")
    src = tmp_path / "src"
    shutil.copytree(load_suite("builtin", ["load-inline-kernel"])[0].repo, src)
    with ScriptedLLM([rewrite_span(GELU, "fused_ops.py")]) as server:
        runtime = graph.Runtime(runs.new_run_id(), llm_factory=llm_factory(lambda m: None))
        settings = {"source": str(src), "target": "tpu", "out": str(tmp_path / "out")}
        final = graph.start({**settings, "llm": server.base_url, "steps": 3}, runtime)
    v = final["verification"]
    assert final["outcome"] == "verified", v["reason"]
    taken = next(d for d in final["decisions"] if d["decision"] == "replacement taken")
    assert taken["site"] == "fused_ops.py:bias_gelu" and taken["kind"] == "host build"
    asked = server.requests[0]["messages"][-1]["content"]
    assert "runs through its host build" in asked and "__global__ void bias_gelu_fwd" in asked
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir() if p.is_file() and "host" in p.name) == []
    assert not (out / "cudacpu_runtime.h").exists()
    ported = (out / "fused_ops.py").read_text()
    assert "cudacpu_host" not in ported and "_CUDA_SRC" not in ported and "_ext =" not in ported
    assert 'gelu(x + bias, approximate="tanh")' in ported


# --- the parts, without a sandbox ----------------------------------------------------------

PORT = """import torch
from . import triton_on_torch as triton
from .triton_on_torch import language as tl


@triton.jit
def _k(X, n, BLOCK: tl.constexpr):
    pass


class Op(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        _k[(1,)](x, x.numel(), BLOCK=16)
        return x


def op(x):
    return Op.apply(x)
"""
FALLBACK = {
    "site": "pkg/ops.py:op",
    "path": "pkg/ops.py",
    "kind": "triton_on_torch",
    "kernels": ["_k"],
    "entries": ["op"],
    "lines": [11, 19],
}


def test_unship_takes_out_the_kernels_the_runtime_import_and_file_once_nothing_calls_them():
    assert names_span(PORT, ["Op", "op"]) == (11, 19) and names_span(PORT, ["gone"]) is None
    assert unship(PORT, ["_k"]) == (PORT, [])  # still launched: nothing goes
    replaced = PORT.replace(PORT[PORT.index("class Op") :], "def op(x):\n    return x * 1\n")
    text, removed = unship(replaced, ["_k"])
    assert removed == ["_k"] and "triton" not in text and "import torch" in text
    overlay = {"pkg/ops.py": text, "pkg/triton_on_torch.py": "# runtime", "train.py": ""}
    assert shipped_unused(overlay, ["pkg/ops.py", "train.py"]) == ["pkg/triton_on_torch.py"]
    overlay["pkg/ops.py"] = PORT  # a file of its folder still imports it: it stays
    assert shipped_unused(overlay, ["pkg/ops.py", "train.py"]) == []
    host = {"m.py": 'ext = cudacpu_host.build("ops", "ops_host.cpp", __file__)', "ops_host.cpp": ""}
    assert shipped_unused(host, ["m.py"]) == []
    assert shipped_unused({**host, "m.py": "ext = None"}, ["m.py"]) == ["ops_host.cpp"]


def _state(llm: str = "http://127.0.0.1:1/v1", verdict: str = "verified", decisions=()) -> dict:
    return {
        "settings": {"llm": llm, "max_iterations": 3},
        "iteration": 1,
        "verification": {"verdict": verdict, "fallbacks": [FALLBACK]},
        "decisions": list(decisions),
    }


def test_a_verified_fallback_site_is_offered_once_and_only_with_a_model():
    assert kernel_improve.next_offer(_state()) == FALLBACK
    assert graph.after_verify(_state()) == "improve"
    assert kernel_improve.next_offer(_state(llm="none")) is None  # --llm none: as before
    assert graph.after_verify(_state(llm="none")) == "deliver"
    assert kernel_improve.next_offer(_state(verdict="failed")) is None
    asked = {"node": "improve", "decision": "PyTorch version asked", "site": FALLBACK["site"]}
    assert kernel_improve.next_offer(_state(decisions=[asked])) is None
    assert graph.after_verify(_state(decisions=[asked])) == "deliver"


def test_a_replacement_that_differs_from_the_fallback_port_fails_and_keeps_the_fallback():
    from torchport.agents.kernel_check import KernelCheck

    verified = {"verdict": "verified", "reason": "3 steps match"}
    differs = KernelCheck(
        False,
        "the differential check fails at the kernel call site pkg/ops.py:op: on inputs "
        "(x: float32[4]), output 0 differs from the original's by up to 0.5",
    )
    record, logged = kernel_improve.judged(verified, FALLBACK, differs)
    assert record["verdict"] == "failed" and record["fallback_check"]["holds"] is False
    assert logged["decision"] == "kept the fallback" and logged["site"] == "pkg/ops.py:op"
    assert (
        logged["why"]
        == record["reason"]
        == (
            "the replacement of pkg/ops.py:op does not match the fallback port (triton_on_torch): "
            "the differential check fails at the kernel call site pkg/ops.py:op: on inputs "
            "(x: float32[4]), output 0 differs from the fallback's by up to 0.5"
        )
    )
    nothing = KernelCheck(None, "the kernel call sites were not compared: no case")
    assert kernel_improve.judged(verified, FALLBACK, nothing)[0]["verdict"] == "failed"
    holds = KernelCheck(True, "the differential check matches")
    record, logged = kernel_improve.judged(verified, FALLBACK, holds)
    assert record["verdict"] == "verified" and logged["decision"] == "replacement taken"
    unchanged = {**verified, "fallbacks": [FALLBACK]}  # the answer was not applied
    record, logged = kernel_improve.judged(unchanged, FALLBACK, None)
    assert record["verdict"] == "failed" and logged["decision"] == "kept the fallback"
    assert logged["why"].startswith("the model's answer left pkg/ops.py:op on its fallback")
    failed = {"verdict": "failed", "reason": "the losses differ"}
    record, logged = kernel_improve.judged(failed, FALLBACK, None)
    assert record is failed and logged["why"].endswith("does not verify: the losses differ")


def test_the_report_lists_each_fallback_with_the_devices_counters():
    cost = {"ops": 7, "host_syncs": 2, "h2d_count": 3, "h2d_bytes": 12, "d2h_count": 1}
    spent = {"program": cost, "site_check": {}, "runtime_syncs": 2, "time_ratio": 31.5}
    lines = fallbacks_markdown([{**FALLBACK, "cost": spent}])
    assert lines[1] == "## Kernels through a fallback"
    head = "| `pkg/ops.py:op` | `_k` | triton\\_on\\_torch"
    assert f"{head} | the port's program | 7 | 2 | 3 | 12 | 1 | — |" in lines
    assert f"{head} | the site's check | — | — | — | — | — | — |" in lines
    assert lines[-2:] == [
        "- `pkg/ops.py:op`: 2 of the program's host syncs are inside the shipped "
        "triton\\_on\\_torch runtime",
        "- `pkg/ops.py:op`: its forward call takes 31.50x the original kernel's time on the "
        "reference",
    ]
    assert fallbacks_markdown([]) == []


def test_the_improve_node_asks_once_per_site_within_the_budget_and_says_why_not(tmp_path):
    source = tmp_path / "src" / "pkg"
    source.mkdir(parents=True)
    kernel = "import triton\nimport triton.language as tl"
    (source / "ops.py").write_text(
        PORT.replace(PORT[PORT.index("from .") : PORT.index("\n\n")], kernel)
    )
    settings = {"source": str(tmp_path / "src"), "target": "tpu", "max_llm_tokens": 100}
    state = _state()
    state["settings"].update(settings)

    def node(client: object, usage: dict | None = None) -> dict:
        runtime = graph.Runtime("improve", llm_factory=lambda s: client)
        return graph.improve({**state, "llm_usage": usage or {}}, runtime)

    asked = node(object())
    (logged,) = asked["decisions"]
    assert (logged["decision"], logged["site"], logged["kind"]) == (
        "PyTorch version asked",
        "pkg/ops.py:op",
        "triton_on_torch",
    )
    request = asked["next_fix"]["request"]
    assert asked["next_fix"]["kind"] == "improve" and asked["improving"] == FALLBACK
    assert (request["kind"], request["start_line"], request["end_line"]) == ("kernel", 11, 19)
    assert request["problem"].startswith(
        "KernelFallback: pkg/ops.py:op runs through triton_on_torch"
    )
    assert "def _k(X, n, BLOCK: tl.constexpr):" in request["context"]
    for client, usage, why in (
        (None, None, "no LLM answers"),
        (object(), {"prompt_tokens": 80, "completion_tokens": 20}, "the LLM token budget is spent"),
    ):
        update = node(client, usage)
        assert update["next_fix"] is None and "improving" not in update
        assert [(d["decision"], d["why"]) for d in update["decisions"]] == [("not asked", why)]
