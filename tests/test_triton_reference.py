"""Triton kernels on the CPU reference (sandbox/shim/triton_interpreter.py): the original's
@triton.jit kernels run in Triton's interpreter, the run says so, a target run cannot
import triton, and the verifier tells a right PyTorch replacement of a kernel from a wrong
one against the kernel's own numbers (issue 17's acceptance, for Triton).

The programs are the suite's triton-fused-rmsnorm (a forward kernel) and
triton-swiglu-autograd (forward and backward kernels), run for 3 steps: the interpreter
runs each program instance in Python, so shapes are the suite's tiny ones."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from torchport.agents.diagnose import diagnose
from torchport.agents.verifier import RunLimits, judge, policies, verify_tree
from torchport.evals.tasks import load_suite
from torchport.sandbox import target_imports
from torchport.sandbox.harness import RunSpec, run
from torchport.sandbox.isolation import IsolationWarning
from verification_md import verification_md

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="needs the `triton` extra (pip install -e '.[triton]'): Triton's interpreter "
    "runs the original's kernels on the reference",
)
STEPS = 3
BUDGET = RunLimits(steps=STEPS, forwards=STEPS, timeout_s=300, memory_mb=4096)
INTERPRETED = {
    "interpreter": "triton-interpreter",
    "version": "3.8.0",
    "kernels": {"ops/swiglu.py:_silu_mul_fwd": 3},
    "notes": ["autotune: the first config listed was used, untimed"],
}

# --- without a sandbox --------------------------------------------------------------------


def test_a_target_run_meets_triton_as_not_installed_and_diagnose_says_so():
    finder = target_imports._HidingFinder()
    finder.mode = "neuron"
    with pytest.raises(ModuleNotFoundError) as caught:
        finder.find_spec("triton.language")
    assert caught.value.name == "triton"
    assert "not importable in a run on the emulated neuron" in str(caught.value)
    assert finder.find_spec("tritonclient") is None  # another package, not hidden
    failed = {
        "status": "failed",
        "error": {"type": "ModuleNotFoundError", "message": str(caught.value)},
    }
    assert diagnose(failed, "neuron").signature == "missing-triton"


def test_the_verdict_and_the_report_name_the_interpreter():
    reference = {"status": "ok", "losses": [1.0, 0.5], "reference_interpreters": [INTERPRETED]}
    target = {"status": "ok", "losses": [1.0, 0.5], "counters": {"ops": 10}}
    v = judge(reference, target, policies()["fp32"], "tpu")
    assert v.verdict == "verified"
    assert "ops/swiglu.py:_silu_mul_fwd (x3) ran in Triton's interpreter (triton 3.8.0" in v.reason
    assert "autotune: the first config listed was used, untimed" in v.reason
    text = verification_md(v)
    assert "- reference: the original's kernels: ops/swiglu.py:\\_silu\\_mul\\_fwd (x3)" in text
    assert v.to_json()["reference"]["reference_interpreters"] == [INTERPRETED]


# --- sandboxed runs -----------------------------------------------------------------------


NORM_SITE = "kernels/fused_norm.py:fused_add_rms_norm"


def _harness(root: Path, mode: str) -> dict[str, Any]:
    spec = RunSpec(
        root=root,
        command=["python", "train.py"],
        mode=mode,
        steps=STEPS,
        isolation="process",
        timeout_s=300,
        record_sites=(NORM_SITE,) if mode == "reference" else (),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IsolationWarning)  # "process" is asked for
        return run(spec).to_json()


PROBE = """\
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a * x + tl.load(y_ptr + offs, mask=mask), mask=mask)


device = triton.runtime.driver.active.get_active_torch_device()
props = triton.runtime.driver.active.utils.get_device_properties(device.index)
x = torch.randn(100, device=device)
y = torch.randn(100, device="cuda")
out = torch.empty_like(x)
_axpy[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, out, 100, 2.0)
print(device, props["multiprocessor_count"], _axpy.best_config.kwargs["BLOCK"])
print(torch.allclose(out, 2 * x + y), torch.cuda.current_device())
"""


def _shim_launcher(root: Path) -> dict[str, Any]:
    """``python -m torchport.sandbox.shim probe.py`` with a report file."""
    report = root / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-m", "torchport.sandbox.shim", "probe.py"],
        cwd=root,
        env={**env, "TORCHPORT_SHIM_REPORT": str(report), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    data = json.loads(report.read_text()) if report.is_file() else {}
    return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr, **data}


def _golden(task_name: str, target: str, into: Path) -> Path:
    task = load_suite("builtin", [task_name])[0]
    tree = into / f"{task_name}-{target}"
    shutil.copytree(task.repo, tree)
    shutil.copytree(task.golden(target), tree, dirs_exist_ok=True)
    return tree


# Replacements a port could plausibly get wrong: the norm taken before the residual add
# (the values change from the first step), and SwiGLU with a hand-written backward that
# drops silu's a * (1 - sigmoid(a)) term (the first loss is right, the gradient is not).
WRONG_NORM = """\
import torch


def fused_add_rms_norm(x, residual, weight, eps: float = 1e-6):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    return y, x + residual
"""
WRONG_BACKWARD = """\
import torch


class _SiLUMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return torch.nn.functional.silu(a) * b

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        sig = torch.sigmoid(a)
        return dc * b * sig, dc * a * sig


def silu_mul(a, b):
    return _SiLUMul.apply(a, b)
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Any]:
    """The kernel programs' reference and tpu runs, the probe under the shim's launcher,
    and the verifications of right and wrong replacements (each original run once, from
    the verifier's cache), two at a time."""
    trees = tmp_path_factory.mktemp("triton")
    cache = trees / "cache"
    norm = load_suite("builtin", ["triton-fused-rmsnorm"])[0].repo
    probe = trees / "probe"
    probe.mkdir()
    (probe / "probe.py").write_text(PROBE)
    ports = {
        "norm-right": _golden("triton-fused-rmsnorm", "tpu", trees),
        "glu-right": _golden("triton-swiglu-autograd", "neuron", trees),
        "norm-wrong": _golden("triton-fused-rmsnorm", "tpu", trees / "wrong"),
        "glu-wrong": _golden("triton-swiglu-autograd", "neuron", trees / "wrong"),
    }
    (ports["norm-wrong"] / "kernels" / "fused_norm.py").write_text(WRONG_NORM)
    (ports["glu-wrong"] / "ops" / "swiglu.py").write_text(WRONG_BACKWARD)

    def verify(name: str) -> Any:
        task = "triton-fused-rmsnorm" if name.startswith("norm") else "triton-swiglu-autograd"
        original = load_suite("builtin", [task])[0].repo
        target = "tpu" if name.startswith("norm") else "neuron"
        return verify_tree(original, ports[name], ["python", "train.py"], target, BUDGET, cache)[0]

    jobs = {
        "reference": lambda: _harness(norm, "reference"),
        "tpu": lambda: _harness(norm, "tpu"),
        "probe": lambda: _shim_launcher(probe),
        **{name: (lambda name=name: verify(name)) for name in ports},
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


@needs_triton
@pytest.mark.slow
def test_the_original_runs_its_kernel_in_the_interpreter_and_trains(runs):
    result = runs["reference"]
    assert result["status"] == "ok", result["stderr_tail"]
    assert len(result["losses"]) == STEPS and result["steps"] == STEPS
    assert all(0.0 < loss < 10.0 for loss in result["losses"])
    (interpreted,) = result["reference_interpreters"]
    assert interpreted["interpreter"] == "triton-interpreter"
    assert interpreted["version"] == importlib.metadata.version("triton")
    # two blocks of two norms and the final norm: five launches per forward
    assert interpreted["kernels"] == {"kernels/fused_norm.py:_add_rms_norm_fwd": 5 * STEPS}
    # the call site's arguments, for the differential check: the first block's residual
    # is zeros (no grad), every later one the stream (grad)
    (site,) = result["kernel_site_calls"]
    assert (site["site"], site["module"], site["root"], site["calls"]) == (
        NORM_SITE,
        "kernels.fused_norm",
        ".",
        5 * STEPS,
    )
    first, later = site["signatures"]
    assert [a.get("requires_grad") for a in first["args"]] == [True, False, True, None]
    assert [a.get("requires_grad") for a in later["args"]] == [True, True, True, None]
    assert first["args"][0]["shape"] == [8, 16, 32] and first["args"][3]["value"] == 1e-6
    assert first["args"][1]["std"] == 0.0 and 0.0 < first["args"][0]["std"] < 1.0


@needs_triton
@pytest.mark.slow
def test_the_original_cannot_use_triton_on_the_emulated_device(runs):
    result = runs["tpu"]
    assert result["status"] == "failed" and result["reference_interpreters"] == []
    assert result["error"]["type"] == "ModuleNotFoundError", result["error"]
    assert "No module named 'triton'" in result["error"]["message"]
    assert result["error"]["frame"]["file"].endswith("fused_norm.py")


@needs_triton
@pytest.mark.slow
def test_launch_helpers_autotune_and_the_driver_work_under_the_shim_launcher(runs):
    result = runs["probe"]
    assert result["returncode"] == 0, result["stderr"][-3000:]
    assert result["stdout"] == "cuda:0 108 16\nTrue 0\n"  # the first config, untimed
    (interpreted,) = result["reference_interpreters"]
    assert interpreted["kernels"] == {"probe.py:_axpy": 1}
    assert interpreted["notes"] == ["autotune: the first config listed was used, untimed"]


# Liger-Kernel's RMSNorm (linkedin/Liger-Kernel, src/liger_kernel/ops/rms_norm.py) calls a
# method of its float argument ``eps`` and ``rsqrt`` imported by name from libdevice: both
# work in compiled Triton, and Triton 3.8's interpreter runs neither.
SCALAR_PROBE = """\
import torch
import triton
import triton.language as tl
from triton.language.extra.libdevice import rsqrt


@triton.jit
def _rms(x_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    eps = eps.to(tl.float32)
    rstd = rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * n_cols + cols, x * rstd, mask=mask)


x = torch.randn(3, 10, device="cuda")
y = torch.empty_like(x)
_rms[(3,)](x, y, 10, 1e-6, BLOCK=16)
expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
print(torch.allclose(y, expected, rtol=1e-5, atol=1e-6))
print(rsqrt.__module__, triton.language.extra.libdevice.rsqrt.__module__)
"""


@needs_triton
@pytest.mark.slow
def test_a_float_argument_and_libdevice_by_name_run_as_compiled_triton_runs_them(tmp_path):
    (tmp_path / "probe.py").write_text(SCALAR_PROBE)
    result = _shim_launcher(tmp_path)
    assert result["returncode"] == 0, result["stderr"][-3000:]
    # the values are the norm's; the module's own name was pointed elsewhere, not triton's
    assert result["stdout"].splitlines() == [
        "True",
        "torchport.sandbox.shim.triton_interpreter triton.language.extra.libdevice",
    ]
    (interpreted,) = result["reference_interpreters"]
    assert interpreted["kernels"] == {"probe.py:_rms": 1}
    assert interpreted["notes"] == [
        "libdevice rsqrt imported by name ran as triton.language.math's"
    ]


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("port", ["norm-right", "glu-right"])
def test_the_right_replacement_of_a_kernel_is_verified_against_it(runs, port):
    v = runs[port]
    assert v.verdict == "verified", v.reason
    assert v.parity.steps == STEPS and v.parity.max_rel < 1e-6
    assert "ran in Triton's interpreter" in v.reason
    assert v.kernel_check["holds"] is True and "the differential check matches" in v.reason


@needs_triton
@pytest.mark.slow
def test_a_replacement_that_norms_before_the_residual_add_fails(runs):
    v = runs["norm-wrong"]
    assert v.verdict == "failed" and v.parity.compared == "losses", v.reason
    assert v.parity.worst_step is not None and v.parity.max_rel > 1e-3
    assert v.reason.startswith(f"the differential check fails at the kernel call site {NORM_SITE}")
    assert (
        v.reason.endswith("do not match either") and v.failure["error"]["type"] == "KernelMismatch"
    )


@needs_triton
@pytest.mark.slow
def test_a_replacement_with_a_wrong_backward_matches_once_then_fails(runs):
    v = runs["glu-wrong"]
    assert v.verdict == "failed", v.reason
    first = v.parity.per_step[0]
    assert first["reference"] == pytest.approx(first["target"], rel=1e-6)  # same forward
    assert v.parity.max_rel > 1e-4  # the gradient differs, so the next steps do
    assert v.kernel_check["holds"] is False
    assert "ops/swiglu.py:silu_mul" in v.reason and "the gradient of a differs" in v.reason
