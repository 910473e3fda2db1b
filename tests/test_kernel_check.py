"""Kernel call sites and the differential check (tools/kernel_sites.py, agents/kernel_lane.py,
agents/kernel_check.py, sandbox/site_calls.py, sandbox/site_check.py): finding a kernel's
call site, asking the model about it, cleaning up after a port, drawing the inputs,
comparing two runs' reports, and, in the sandbox, a wrong torch replacement of a suite
kernel failed by the check against the kernel run in Triton's interpreter."""

from __future__ import annotations

import importlib.util
import math
import shutil
import types
from pathlib import Path

import pytest
import torch
from torchport.agents import kernel_check, kernel_lane, rewriter
from torchport.agents.kernel_check import NotComparable, compare_tensor, draw, judge_runs
from torchport.agents.llm.repair import RepairRequest, span_message
from torchport.agents.llm.toolbox import Workspace
from torchport.agents.verifier import RunLimits, policies, run_program
from torchport.evals.tasks import load_suite
from torchport.sandbox import site_calls
from torchport.sandbox import site_check as site_check_driver
from torchport.tools.kernel_sites import kernel_sites, remove_unused_kernels, unused_kernels

FP32 = policies()["fp32"]


def suite_file(task: str, rel: str) -> str:
    return (load_suite("builtin", [task])[0].repo / rel).read_text()


# --- finding the call site ------------------------------------------------------------------


def test_an_autograd_function_of_triton_kernels_is_one_site_called_through_its_wrapper():
    (site,) = kernel_sites(suite_file("triton-swiglu-autograd", "ops/swiglu.py"), "ops/swiglu.py")
    assert (site.rule, site.kernels) == ("TPK003", ("_silu_mul_fwd", "_silu_mul_bwd"))
    assert (site.launchers, site.entries, site.comparable) == (
        ("SiLUMul",),
        ("silu_mul",),
        ("silu_mul",),
    )
    assert (site.start_line, site.end_line, site.autograd) == (39, 61, ("SiLUMul",))
    assert "da = dc * b * sig * (1.0 + a * (1.0 - sig))" in site.kernel_source
    assert "class SiLUMul" not in site.kernel_source  # the launcher is the span, not context
    assert site.spec("silu_mul") == "ops/swiglu.py:silu_mul"


def test_a_load_inline_extension_is_a_site_whose_source_is_the_cuda_string():
    (site,) = kernel_sites(suite_file("load-inline-kernel", "fused_ops.py"), "fused_ops.py")
    assert (site.rule, site.kernels, site.entries) == ("TPK002", ("_ext",), ("bias_gelu",))
    assert site.launchers == ("_BiasGELU",)  # LinearBiasGELU calls the public wrapper: kept
    assert "__global__ void bias_gelu_fwd_kernel" in site.kernel_source
    assert "_ext = load_inline(" in site.kernel_source


def test_a_kernel_launched_from_a_module_method_is_a_span_but_not_comparable():
    text = """\
import torch
import triton


@triton.jit
def _k(X):
    pass


class Scale(torch.nn.Module):
    def forward(self, x):
        _k[(1,)](x)
        return x
"""
    (site,) = kernel_sites(text, "m.py")
    assert site.entries == ("Scale",) and site.comparable == ()
    assert "a method of `Scale`" in site.why_not
    assert kernel_sites("import torch\nx = 1\n", "plain.py") == []
    assert kernel_sites("import triton\ndef broken(:\n", "bad.py") == []


def test_kernels_nothing_uses_after_a_port_go_with_their_imports():
    text = suite_file("triton-swiglu-autograd", "ops/swiglu.py")
    lines = text.splitlines()
    ported = "\n".join(
        [*lines[:38], "def silu_mul(a, b):", "    return torch.nn.functional.silu(a) * b"]
    )
    kept, removed = remove_unused_kernels(ported + "\n")
    assert removed == ["_silu_mul_bwd", "_silu_mul_fwd"]
    assert "triton" not in kept and "def silu_mul(a, b):" in kept and "BLOCK = 1024" in kept
    # another file that names a kernel keeps it; a kernel still launched is never removed
    assert [n for *_, n in unused_kernels(ported, ["from ops.swiglu import _silu_mul_fwd"])] == [
        "_silu_mul_bwd"
    ]
    assert unused_kernels(text) == []
    extension = suite_file("load-inline-kernel", "fused_ops.py").splitlines()
    port = "\n".join(
        [*extension[:90], "def bias_gelu(x, bias):", "    return x + bias", *extension[108:]]
    )
    kept, removed = remove_unused_kernels(port + "\n")
    assert removed == ["_CPP_SRC", "_CUDA_SRC", "_ext"]
    assert "import load_inline" not in kept and "class LinearBiasGELU" in kept


# Appended to the task's ops/swiglu.py (lines above unchanged): triton_on_torch has no
# triton.testing, so the codemods cannot run the file's kernels there and they stay the LLM's.
UNRUNNABLE = """

def bench(a, b):
    return triton.testing.do_bench(lambda: silu_mul(a, b))
"""


def test_the_kernel_findings_of_a_site_are_one_request_with_the_kernel_as_context(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(load_suite("builtin", ["triton-swiglu-autograd"])[0].repo, repo)
    with (repo / "ops" / "swiglu.py").open("a") as ops:
        ops.write(UNRUNNABLE)
    settings = {"target": "tpu", "select": []}
    overlay, _ = rewriter.codemods(repo, "tpu", [])
    work = tmp_path / "work"
    items = rewriter.llm_constructs(
        repo, overlay, work, settings, rewriter.refusals(repo, settings)
    )
    assert sorted((i["rule"], i["line"]) for i in items) == [("TPK003", 11), ("TPK003", 21)]
    inside = {**items[0], "rule": "TPD001", "line": 45, "end_line": 45, "message": "m"}
    outside = {**items[0], "rule": "TPD001", "line": 3, "end_line": 3, "message": "m", "hint": "h"}
    calls = [
        {
            "site": "ops/swiglu.py:silu_mul",
            "signatures": [
                {
                    "args": [
                        {
                            "kind": "tensor",
                            "shape": [4, 8],
                            "dtype": "float32",
                            "requires_grad": True,
                        },
                        {
                            "kind": "tensor",
                            "shape": [4, 8],
                            "dtype": "float32",
                            "requires_grad": False,
                        },
                    ],
                    "kwargs": {},
                }
            ],
        }
    ]
    requests = kernel_lane.construct_requests(
        [*items, inside, outside], work, "tpu", calls, rewriter.construct_request
    )
    assert [(rule, r["kind"], r["start_line"]) for rule, r in requests] == [
        ("TPK003", "kernel", 39),
        ("TPD001", "construct", 3),
    ]
    request = requests[0][1]
    assert request["problem"].startswith("TPK003: Triton kernels compile for NVIDIA")
    text = span_message(RepairRequest(**request), Workspace(work))
    assert "def _silu_mul_fwd(A, B, C, n, BLOCK: tl.constexpr):" in text
    assert "silu_mul(a: float32[4, 8] (requires grad), b: float32[4, 8])" in text
    assert "`SiLUMul` is a torch.autograd.Function: the gradient must stay right" in text
    assert "Keep the names and arguments of `silu_mul`" in text
    assert text.rstrip().endswith('"new_code": "..."}], "summary": "..."}')
    assert "Rewrite lines 39-61 of ops/swiglu.py" in text


# --- recording the calls (in this process, on a module made here) -----------------------------


def test_the_recorder_notes_the_first_distinct_signatures_and_calls_through(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops").mkdir()
    module = types.ModuleType("ops.glu")
    module.__file__ = str(tmp_path / "ops" / "glu.py")

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return 2 * x

        @staticmethod
        def backward(ctx, g):
            return 2 * g

    module.glu = lambda a, b, eps=1e-6: a * torch.sigmoid(b) + eps
    module.Double = Double
    site_calls.reset()
    try:
        site_calls._wanted.clear()
        site_calls._wrap("ops/glu.py:glu", module, "glu")
        site_calls._wrap("ops/glu.py:Double.apply", module, "Double.apply")
        a = torch.full((2, 3), 0.5, requires_grad=True)
        for n in (3, 3, 4, 5, 6):
            out = module.glu(torch.ones(2, n), torch.zeros(2, n), eps=0.1)
        assert torch.equal(out, torch.full((2, 6), 0.6))
        assert torch.equal(module.Double.apply(a), torch.ones(2, 3))
        glu, double = site_calls.records()
    finally:
        site_calls.reset()
    assert (glu["site"], glu["module"], glu["root"], glu["calls"]) == (
        "ops/glu.py:glu",
        "ops.glu",
        ".",
        5,
    )
    assert len(glu["signatures"]) == site_calls.MAX_SIGNATURES  # shapes 3, 4, 5; 6 is past it
    first = glu["signatures"][0]
    assert first["args"][0] == {
        "kind": "tensor",
        "shape": [2, 3],
        "dtype": "float32",
        "requires_grad": False,
        "mean": 1.0,
        "std": 0.0,
        "min": 1.0,
        "max": 1.0,
    }
    assert first["kwargs"] == {"eps": {"kind": "value", "value": 0.1}}
    (sig,) = double["signatures"]
    assert sig["args"][0]["requires_grad"] is True and double["calls"] == 1


# --- drawing the inputs -----------------------------------------------------------------------


def test_inputs_are_drawn_like_the_recorded_tensors_and_seeded():
    spec = {
        "kind": "tensor",
        "shape": [400, 50],
        "dtype": "float32",
        "requires_grad": True,
        "mean": 3.0,
        "std": 0.02,
        "min": 2.9,
        "max": 3.1,
    }
    drawn = draw(spec, torch.Generator().manual_seed(0))["tensor"]
    assert abs(float(drawn.mean()) - 3.0) < 1e-3 and abs(float(drawn.std()) - 0.02) < 1e-3
    again = draw(spec, torch.Generator().manual_seed(0))["tensor"]
    assert torch.equal(drawn, again)
    ones = draw({**spec, "mean": 1.0, "std": 0.0, "min": 1.0}, torch.Generator().manual_seed(0))
    assert float(ones["tensor"].std()) > 0.05 and float(ones["tensor"].min()) >= 0  # varied
    ints = draw(
        {"kind": "tensor", "shape": [1000], "dtype": "int64", "min": 3, "max": 7},
        torch.Generator().manual_seed(0),
    )
    assert ints["requires_grad"] is False and set(ints["tensor"].tolist()) == {3, 4, 5, 6, 7}
    assert draw({"kind": "value", "value": 1e-6}, None) == {"kind": "value", "value": 1e-6}
    with pytest.raises(NotComparable, match="an argument of type Config"):
        draw({"kind": "opaque", "type": "Config"}, None)


# --- comparing two reports --------------------------------------------------------------------


def tensor(values, shape=None, dtype="float32"):
    return {"shape": shape or [len(values)], "dtype": dtype, "values": values}


def test_a_tensor_holds_within_the_policy_and_the_worst_element_is_named():
    assert compare_tensor("output 0", tensor([1.0, 2.0]), tensor([1.0, 2.00001]), FP32)["holds"]
    off = compare_tensor(
        "output 0", tensor([1.0, 2.0, 3.0, 4.0], [2, 2]), tensor([1.0, 2.0, 3.0, 4.5], [2, 2]), FP32
    )
    assert (off["holds"], off["index"], off["max_abs"]) == (False, [1, 1], 0.5)
    assert (
        off["why"]
        == "differs from the original's by up to 0.5 (rel 0.125) at [1, 1] under the fp32 policy"
    )
    assert compare_tensor("o", tensor([math.nan]), tensor([math.nan]), FP32)["holds"]
    assert not compare_tensor("o", tensor([math.nan]), tensor([1.0]), FP32)["holds"]
    assert "has shape [2]" in compare_tensor("o", tensor([1.0]), tensor([1.0, 1.0]), FP32)["why"]
    assert (
        "is bfloat16, the original's float32"
        in compare_tensor("o", tensor([1.0]), tensor([1.0], dtype="bfloat16"), FP32)["why"]
    )
    assert compare_tensor("g", {"none": True}, {"none": True}, FP32)["holds"]
    assert (
        compare_tensor("g", tensor([1.0]), {"none": True}, FP32)["why"]
        == "is None in the port's run only"
    )


SWIGLU = load_suite("builtin", ["triton-swiglu-autograd"])[0].repo
(SITE,) = kernel_sites((SWIGLU / "ops/swiglu.py").read_text(), "ops/swiglu.py")
SIGNATURE = {
    "args": [
        {"kind": "tensor", "shape": [2], "dtype": "float32", "requires_grad": True},
        {"kind": "tensor", "shape": [2], "dtype": "float32", "requires_grad": False},
    ],
    "kwargs": {},
}


def report(out, grad, error=None):
    if error:
        return {"site": SITE.spec("silu_mul"), "error": error}
    return {
        "site": SITE.spec("silu_mul"),
        "outputs": [tensor(out)],
        "after": [{"name": "a", **tensor([1.0, 2.0])}, {"name": "b", **tensor([0.0, 1.0])}],
        "grads": [{"name": "a", **tensor(grad)}],
    }


def judged(ref, port, ref_status="ok"):
    described = [{"site": SITE.spec("silu_mul"), "signature": SIGNATURE}]
    runs = [
        {
            "status": ref_status,
            "site_check": {"cases": [ref]} if ref_status == "ok" else {},
            "error": None if ref_status == "ok" else {"type": "timeout", "message": "stopped"},
        },
        {"status": "ok", "site_check": {"cases": [port]}},
    ]
    return judge_runs(SWIGLU, SWIGLU, [SITE], described, *runs, policies())


def test_the_check_holds_fails_or_compares_nothing_from_the_two_reports():
    same = judged(report([0.5, 1.5], [0.2, 0.3]), report([0.5, 1.5], [0.2, 0.3]))
    assert same.holds is True and same.sites[0]["status"] == "matched"
    assert same.reason.startswith(
        "the differential check matches the original's kernels at "
        "ops/swiglu.py:silu_mul on 1 recorded input signature"
    )
    wrong = judged(report([0.5, 1.5], [0.2, 0.3]), report([0.5, 1.5], [0.2, 0.9]))
    assert wrong.holds is False and wrong.frame == {
        "file": "ops/swiglu.py",
        "line": 59,
        "function": "silu_mul",
        "code": None,
    }
    assert wrong.reason == (
        "the differential check fails at the kernel call site ops/swiglu.py:silu_mul: on inputs "
        "(a: float32[2] (requires grad), b: float32[2]), the gradient of a differs from the "
        "original's by up to 0.6 (rel 2) at [1] under the fp32 policy"
    )
    raised = judged(report([0.5, 1.5], [0.2, 0.3]), report(None, None, "RuntimeError: boom"))
    assert raised.holds is False and "the call raised RuntimeError: boom" in raised.reason
    renamed = judged(
        report([0.5], [0.2]),
        {"site": SITE.spec("silu_mul"), "missing": "ops.swiglu has no silu_mul"},
    )
    assert renamed.holds is None and "in the port, ops.swiglu has no silu_mul" in renamed.reason
    original_raised = judged(report(None, None, "ValueError: shape"), report([1.0], [1.0]))
    assert original_raised.holds is None and "the original raised" in original_raised.reason
    not_run = judged(report([0.5], [0.2]), report([0.5], [0.2]), ref_status="timeout")
    assert not_run.holds is None
    assert "the original's sites could not be run: timeout: stopped" in not_run.reason


def test_each_site_reports_the_ports_forward_time_over_the_originals():
    from torchport.agents.deliver import kernel_check_markdown

    ref = {**report([0.5, 1.5], [0.2, 0.3]), "seconds": 0.004}
    timed = judged(ref, {**report([0.5, 1.5], [0.2, 0.3]), "seconds": 0.001})
    assert timed.sites[0]["time_ratio"] == pytest.approx(0.25)
    shown = "\n".join(kernel_check_markdown(timed.to_json()))
    assert "| 0.25x (1 ms / 4 ms) |" in shown
    assert "the port's call takes 0.25x the original's on the reference" in shown
    untimed = judged(ref, report([0.5, 1.5], [0.2, 0.3]))  # the port's repeat call failed
    assert "time_ratio" not in untimed.sites[0]
    assert "| not timed |" in "\n".join(kernel_check_markdown(untimed.to_json()))


def test_the_driver_times_repeated_forward_calls_after_the_compared_one(tmp_path):
    from torchport.sandbox import site_check

    (tmp_path / "timed_site.py").write_text(
        "CALLS = []\n\ndef f(x):\n    CALLS.append(x.requires_grad)\n    return x * 2\n"
    )
    x = {"kind": "tensor", "tensor": torch.ones(3), "requires_grad": True}
    case = {"root": str(tmp_path), "module": "timed_site", "entry": "f", "args": [x], "kwargs": {}}
    got = site_check.run_case(case, torch.device("cpu"))
    import timed_site

    assert got["seconds"] >= 0 and got["grads"][0]["name"] == "x"
    # the compared call, then the timed ones; every call sees the same argument
    assert timed_site.CALLS == [True] * (1 + site_check.TIMED_CALLS)


def never_run(root: Path, mode: str) -> dict:
    raise AssertionError("nothing to compare: no sandboxed run")


def test_nothing_is_compared_when_the_original_never_called_the_site(tmp_path):
    calls = {"kernel_site_calls": []}
    checked = kernel_check.check(SWIGLU, SWIGLU, [SITE], calls, "tpu", never_run, policies())
    assert checked.holds is None
    assert checked.reason == (
        "the kernel call sites were not compared: ops/swiglu.py:silu_mul: not called in the "
        "original's run"
    )


# --- in the sandbox: a wrong torch replacement of a suite kernel ------------------------------

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="needs the `triton` extra (pip install -e '.[triton]'): Triton's interpreter "
    "runs the original's kernels on the reference",
)


def stream(shape, std, grad):
    return {
        "kind": "tensor",
        "shape": shape,
        "dtype": "float32",
        "requires_grad": grad,
        "mean": 0.0,
        "std": std,
        "min": -3 * std,
        "max": 3 * std,
    }


# As the program calls it: a residual stream of std 0.02, a weight of ones, eps 1e-6.
NORM_CALLS = [
    {
        "site": "kernels/fused_norm.py:fused_add_rms_norm",
        "module": "kernels.fused_norm",
        "root": ".",
        "calls": 5,
        "signatures": [
            {
                "args": [
                    stream([2, 3, 32], 0.02, True),
                    stream([2, 3, 32], 0.02, True),
                    {
                        "kind": "tensor",
                        "shape": [32],
                        "dtype": "float32",
                        "requires_grad": True,
                        "mean": 1.0,
                        "std": 0.0,
                        "min": 1.0,
                        "max": 1.0,
                    },
                    {"kind": "value", "value": 1e-6},
                ],
                "kwargs": {},
            }
        ],
    }
]


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("eps", ["eps", "1e-5"])
def test_a_replacement_with_a_wrong_eps_is_failed_by_the_check_and_the_right_one_holds(
    tmp_path, eps
):
    task = load_suite("builtin", ["triton-fused-rmsnorm"])[0]
    port = tmp_path / "port"
    shutil.copytree(task.repo, port)
    shutil.copytree(task.golden("tpu"), port, dirs_exist_ok=True)
    norm = port / "kernels" / "fused_norm.py"
    norm.write_text(norm.read_text().replace("keepdim=True) + eps)", f"keepdim=True) + {eps})"))
    (site,) = kernel_check.discover(task.repo)
    budget = RunLimits(timeout_s=300, memory_mb=4096, steps=None, forwards=None)  # type: ignore[arg-type]

    def runner(root: Path, mode: str) -> dict:
        return run_program(root, kernel_check.DRIVER, mode, budget)

    calls = {"kernel_site_calls": NORM_CALLS}
    checked = kernel_check.check(task.repo, port, [site], calls, "tpu", runner, policies())
    (launches,) = checked.runs["original"]["reference_interpreters"][0]["kernels"].items()
    # the compared call, then at least one timed forward call (site_check.TIMED_CALLS at most)
    assert launches[0] == "kernels/fused_norm.py:_add_rms_norm_fwd"
    assert 2 <= launches[1] <= 1 + site_check_driver.TIMED_CALLS
    if eps == "eps":
        assert checked.holds is True, checked.reason
        (case,) = checked.sites[0]["cases"]
        assert case["compared"] == 2 + 3 + 3  # outputs, arguments after the call, gradients
        return
    assert checked.holds is False, checked.reason
    assert checked.reason.startswith(
        "the differential check fails at the kernel call site "
        "kernels/fused_norm.py:fused_add_rms_norm: on inputs (x: float32[2, 3, 32] (requires "
        "grad), residual: float32[2, 3, 32] (requires grad), weight: float32[32] (requires "
        "grad), eps: 1e-06), "
    ), checked.reason
    assert checked.frame["file"] == "kernels/fused_norm.py"
