"""Tests of the verifier's diagnose step (torchport.agents.diagnose).

The error texts are real: small programs run by real torch here, in two batched
subprocesses (plain CPU torch for CUDA-on-CPU failures, the emulated ``tpu`` for device
failures) that print one harness-shaped result per case as a JSON line, plus a few
programs run end to end through the sandbox harness. Only texts this machine cannot
produce (a CUDA build's "no driver" error, an OOM kill) are written out, each marked.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
from torchport.agents.diagnose import (
    Diagnosis,
    SignatureError,
    diagnose,
    load_signatures,
    parse_signatures,
)
from torchport.sandbox.harness import RunSpec, run
from torchport.sandbox.isolation import IsolationWarning
from torchport.tools.catalogue import TARGETS, load_catalogue

# Run every case, catch what it raises and print a result shaped like the harness's
# (sandbox.launch: error = type, message[:2000], the user's frame; stderr = warnings
# and the traceback).
RUNNER = """
import json, os, sys, traceback, warnings
import torch
from torchport.sandbox.launch import user_frame

# the CUDA-only packages torchport carries for the reference are absent here, as in a
# target run and on a CPU-only install
from torchport.sandbox import target_imports

target_imports.install("cpu" if not os.environ.get("DIAG_EMULATOR") else "tpu")

if os.environ.get("DIAG_EMULATOR"):
    import torchport.sandbox.emulated as emu

    emu.activate(os.environ["DIAG_EMULATOR"], devices=2)

for name, fn in [(k, v) for k, v in globals().items() if k.startswith("case_")]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status, error, trace = "ok", None, ""
        try:
            fn()
        except BaseException as exc:
            status, trace = "failed", traceback.format_exc()
            error = {
                "type": type(exc).__name__,
                "message": str(exc)[:2000],
                "frame": user_frame(exc.__traceback__),
            }
    warned = "".join(
        warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught
    )
    result = {
        "status": status,
        "exit_code": 0 if status == "ok" else 1,
        "error": error,
        "stderr_tail": (warned + trace)[-4000:],
        "counters": emu.counters() if os.environ.get("DIAG_EMULATOR") else {},
    }
    print("CASE=" + json.dumps({"case": name[len("case_"):], "result": result}, default=str))
"""

# Plain CPU torch: what CUDA code (and CUDA-only libraries) do without CUDA.
CPU_CASES = """
import io
import os
import tempfile

import torch
import torch.distributed as dist


def _checkpoint():
    buf = io.BytesIO()
    torch.save(torch.zeros(2), buf)
    buf.seek(0)
    return buf


def _init(backend):
    store = "file://" + os.path.abspath(tempfile.mktemp(prefix="store-", dir="."))
    try:
        dist.init_process_group(backend, init_method=store, rank=0, world_size=1)  # <-
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def case_cuda_method():
    torch.zeros(2).cuda()  # <-

def case_cuda_synchronize():
    torch.cuda.synchronize()  # <-

def case_cuda_set_device():
    torch.cuda.set_device(0)  # <-

def case_cuda_device_context():
    with torch.cuda.device(0):  # <-
        pass

def case_legacy_tensor_type():
    torch.cuda.FloatTensor(2)  # <-

def case_cuda_event():
    torch.cuda.Event(enable_timing=True)  # <-

def case_cuda_stream():
    torch.cuda.Stream()  # <-

def case_nvtx():
    torch.cuda.nvtx.range_push("step")  # <-

def case_load_cuda():
    torch.load(_checkpoint(), map_location="cuda")  # <-

def case_load_xla():
    torch.load(_checkpoint(), map_location="xla")  # <-

def case_pin_memory():
    torch.zeros(2).pin_memory()  # <-

def case_integer_device():
    torch.zeros(2).to(0)  # <-

def case_cudnn_version():
    if torch.backends.cudnn.version() >= 8000:  # <-
        pass

def case_cuda_version():
    float(torch.version.cuda)  # <-

def case_cuda_attribute():
    torch.cuda.memory_usage_percent()  # <-

def case_nccl():
    _init("nccl")

def case_backend_xla():
    _init("xla")

def case_backend_typo():
    _init("ncll")

def case_compile_tensorrt():
    torch.compile(lambda x: x + 1, backend="tensorrt")  # <-

def case_compile_tpu():
    torch.compile(lambda x: x + 1, backend="tpu")  # <-

def case_import_apex():
    from apex.optimizers import FusedAdam  # <-

def case_import_flash_attn():
    from flash_attn import flash_attn_func  # <-

def case_import_xformers():
    import xformers.ops  # <-

def case_import_triton():
    import triton  # <-

def case_import_cupy():
    import cupy  # <-

def case_import_bitsandbytes():
    import bitsandbytes  # <-

def case_import_pynvml():
    import pynvml  # <-

def case_import_tensorrt():
    import tensorrt  # <-

def case_import_torch_tpu():
    import torch_tpu  # <-

def case_import_torch_xla():
    import torch_xla.core.xla_model as xm  # <-

def case_import_other():
    import torchport_no_such_dependency  # <-

def case_apex_required():
    try:
        import apex
    except ImportError:
        raise RuntimeError("this model needs apex")  # <-

def case_numpy():
    torch.zeros(2).numpy()  # <-

def case_float64_input():
    torch.nn.Linear(2, 2)(torch.zeros(1, 2, dtype=torch.float64))  # <-

def case_float64_matmul():
    torch.zeros(2, 2, dtype=torch.float64) @ torch.zeros(2, 2)  # <-

def case_half_input():
    torch.nn.Linear(2, 2)(torch.zeros(1, 2).half())  # <-

def case_svd_half():
    torch.linalg.svd(torch.eye(3).half())  # <-

def case_fft_bfloat16():
    torch.fft.fft(torch.zeros(4).bfloat16())  # <-

def case_huge_tensor():
    torch.empty(1 << 50)  # <-

def case_memory_error():
    bytearray(1 << 50)  # <-

def case_cuda_grad_scaler():
    torch.cuda.amp.GradScaler()

def case_cuda_autocast():
    with torch.autocast("cuda"):
        torch.zeros(2) + 1

def case_key_error():
    {}["learning_rate"]  # <-

def case_view_after_transpose():
    pred = torch.arange(6).view(2, 3).t()
    correct = pred.eq(pred)  # laid out as pred is: transposed
    correct[:3].view(-1)  # <-

def case_zero_dim_index():
    loss = torch.ones(3).sum()
    loss.data[0]  # <-

def case_name_gone():
    from json import imread  # <-

def case_data_missing():
    open("/nonexistent/torchport-case/train.csv")  # <-

def case_argument_refused():
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--image-size", type=int, choices=[224, 256])
    parser.parse_args(["--image-size", "64"])  # <-
"""

# The emulated tpu device (2 of them): failures of a port that runs on the target.
TPU_CASES = """
import torch


def case_cpu_input():
    torch.nn.Linear(2, 2).to("tpu")(torch.zeros(3, 2))  # <-

def case_two_devices():  # a second device in one process: TorchTPU's processes have one
    torch.zeros(2, device="tpu:0") + torch.zeros(2, device="tpu:1")  # <-

def case_numpy_on_device():
    torch.zeros(2, device="tpu").numpy()  # <-

def case_legacy_synchronize():
    torch.tpu.synchronize()  # <-

def case_tpu_attribute():
    torch.tpu.memory_allocated()  # <-

def case_op_missing():
    torch.tril_indices(3, 3, device="tpu")  # <-

def case_op_without_cpu_kernel():
    q = torch.ones(1, 1, 4, 8, device="tpu")
    torch.ops.aten._flash_attention_forward(q, q, q, None, None, 4, 4, 0.0, False, False)  # <-

def case_op_torchtpu_lacks():
    x = torch.ones(4, 3, device="tpu")
    torch.batch_norm_stats(x, 1e-5)  # <-

def case_pinned_factory():
    torch.empty(2, pin_memory=True)  # <-

def case_cpu_generator():
    torch.randn(2, device="tpu", generator=torch.Generator())  # <-

def case_ordinal():
    torch.zeros(1, device="tpu:5")  # <-

def case_fp16_scaler():
    model = torch.nn.Linear(2, 2).half().to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("tpu")
    scaler.scale(model(torch.zeros(3, 2).half().to("tpu")).float().sum()).backward()
    scaler.step(opt)  # <-

def case_cuda_leftover():
    torch.zeros(2).to("tpu").cuda()  # <-
"""

SCRIPTS = {"cpu": CPU_CASES, "tpu": TPU_CASES}

# case -> (signature, action for target tpu, rules that must be among the diagnosis's).
CPU_EXPECTED: dict[str, tuple[str, str, set[str]]] = {
    "cuda_method": ("cuda-unavailable", "rules", {"TPD001", "TPD002"}),
    "cuda_synchronize": ("cuda-unavailable", "rules", {"TPT001"}),
    "cuda_set_device": ("cuda-unavailable", "rules", {"TPD010"}),
    "cuda_device_context": ("cuda-unavailable", "rules", {"TPD017"}),
    "legacy_tensor_type": ("cuda-tensor-type", "rules", {"TPD018", "TPD021"}),
    "cuda_event": ("cuda-timing-api", "rules", {"TPT002"}),
    "cuda_stream": ("cuda-timing-api", "rules", {"TPT003"}),
    "nvtx": ("cuda-nvtx", "rules", {"TPT004"}),
    "load_cuda": ("load-cuda-checkpoint", "rules", {"TPS001", "TPS002"}),
    "load_xla": ("map-location-unknown", "llm", {"TPS001"}),
    # The original's pinning fails on a CPU-only torch (no accelerator), but a tpu port keeps
    # it (TPL001/TPL002 are "none" on tpu: TorchTPU pins): no rule, and not TPD005 (no
    # integer device on that line); the other targets get TPL002 (test below).
    "pin_memory": ("pin-memory-no-accelerator", "llm", set()),
    "integer_device": ("accelerator-unavailable", "rules", {"TPD005"}),
    "cudnn_version": ("cuda-version-none", "llm", {"TPD020", "TPB001"}),
    "cuda_version": ("cuda-version-none", "llm", {"TPD020"}),
    "cuda_attribute": ("cuda-attribute-missing", "llm", {"TPD099"}),
    "nccl": ("nccl-unavailable", "rules", {"TPN001", "TPN002"}),
    "backend_xla": ("distributed-backend-target", "human", set()),
    "backend_typo": ("distributed-backend-unknown", "llm", {"TPN001"}),
    "compile_tensorrt": ("compile-backend-unknown", "rules", {"TPC002"}),
    "compile_tpu": ("compile-backend-target", "human", set()),
    "import_apex": ("missing-apex", "llm", {"TPP001", "TPK007"}),
    "import_flash_attn": ("missing-flash-attn", "llm", {"TPP001", "TPK010"}),
    "import_xformers": ("missing-xformers", "llm", {"TPP001", "TPK011"}),
    "import_triton": ("missing-triton", "llm", {"TPP001", "TPK003"}),
    "import_cupy": ("missing-cupy", "llm", {"TPP001", "TPK005"}),
    "import_bitsandbytes": ("missing-bitsandbytes", "llm", {"TPP001", "TPK012"}),
    "import_pynvml": ("missing-gpu-monitor", "llm", {"TPP001", "TPK013"}),
    "import_tensorrt": ("missing-cuda-library", "llm", {"TPP001"}),
    "import_torch_tpu": ("target-runtime-import", "llm", set()),
    "import_torch_xla": ("xla-runtime-missing", "human", set()),
    "import_other": ("dependency-missing", "human", set()),
    "apex_required": ("missing-apex", "llm", {"TPP001"}),  # found in the chained traceback
    "float64_input": ("float64", "llm", {"TPF001"}),
    "float64_matmul": ("float64", "llm", {"TPF001"}),
    "half_input": ("half-dtype-mismatch", "llm", {"TPA003", "TPA004"}),
    "svd_half": ("low-precision-op", "llm", set()),
    "fft_bfloat16": ("low-precision-op", "llm", set()),
    "huge_tensor": ("out-of-memory", "human", set()),
    "memory_error": ("out-of-memory", "human", set()),
    "cuda_grad_scaler": ("cuda-gradscaler-disabled", "rules", {"TPA002"}),
    "cuda_autocast": ("cuda-autocast-disabled", "rules", {"TPA001", "TPA003"}),
    "key_error": ("unknown", "llm", set()),
    "view_after_transpose": ("view-not-contiguous", "llm", set()),
    "zero_dim_index": ("zero-dim-index", "llm", set()),
    "name_gone": ("name-gone-from-package", "human", set()),
    "data_missing": ("data-missing", "human", set()),
    "argument_refused": ("argument-refused", "human", set()),
}
TPU_EXPECTED: dict[str, tuple[str, str, set[str]]] = {
    "cpu_input": ("device-mismatch", "llm", {"TPD007"}),
    "two_devices": ("tpu-one-device", "llm", {"TPD010"}),
    "numpy_on_device": ("numpy-on-device", "llm", {"TPH002"}),
    "legacy_synchronize": ("legacy-device-api", "llm", set()),
    "tpu_attribute": ("target-api-missing", "llm", set()),
    "op_missing": ("emulator-op-missing", "human", set()),
    # An op torch has no CPU kernel for, on device tensors: the emulator runs the CPU one.
    "op_without_cpu_kernel": ("emulator-op-missing-cpu-kernel", "human", set()),
    # Still fails on both emulators (no getPinnedMemoryAllocator hook): an emulator gap, and
    # no rule, since a tpu port keeps pin_memory=True (TPL001 is "none" on tpu).
    # An op TorchTPU 0.2.0 has no kernel for (its wheel): refused with TorchTPU's own error,
    # the port's problem on the real device too, not the emulator's.
    "op_torchtpu_lacks": ("torchtpu-op-missing", "human", set()),
    "pinned_factory": ("emulator-hook-missing", "human", set()),
    "cpu_generator": ("device-mismatch", "llm", set()),
    "ordinal": ("tpu-one-device", "llm", {"TPD003"}),
    "fp16_scaler": ("cuda-gradscaler", "rules", {"TPA002", "TPA004"}),
    "cuda_leftover": ("cuda-unavailable", "rules", {"TPD001"}),
}
# Cases whose outcome depends on what is installed here (numpy may or may not be).
OPTIONAL = {"numpy": ("dependency-missing", "human", set())}

# Signatures proven by the end-to-end harness runs or by texts written out below.
END_TO_END = {"run-timeout", "run-crashed", "cuda-unavailable", "parity-mismatch"}
WRITTEN = {"run-memory-limit", "run-killed", "rendezvous-timeout", "kernel-mismatch"}
WRITTEN |= {"invalid-device-ordinal"}  # the neuron host's text, below
# precision-sensitive: tests/test_precision_check.py (a port judged at both precisions)
WRITTEN |= {"precision-sensitive"}
# parity-port-line (a real port, bug in one layer), parity-emulated-op: tests/test_divergence.py
WRITTEN |= {"parity-port-line", "parity-emulated-op"}
# What the sandbox lacks: texts written out below (test_what_the_sandbox_lacks)
WRITTEN |= {"hub-download", "network-unreachable", "no-terminal", "read-only-path"}
WRITTEN |= {"binary-incompatible"}
# Proven by sandboxed runs in tests/test_rendezvous.py.
END_TO_END |= {"rendezvous-unreachable"}


def _marked_lines(source: str) -> dict[str, int]:
    """case name -> line of its ``# <-`` marker (the line the error frame must name)."""
    lines, current, marks = source.splitlines(), None, {}
    for number, text in enumerate(lines, start=1):
        if m := re.match(r"def (?:case_)?(\w+)\(", text):
            current = m[1]
        if "# <-" in text and current and current not in marks:
            marks[current] = number
    return marks


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Run both case scripts at once; ``{"cpu": {case: result}, "tpu": {...}}``."""
    root = tmp_path_factory.mktemp("diagnose-cases")
    procs = {}
    for kind, source in SCRIPTS.items():
        script = root / f"cases_{kind}.py"
        script.write_text(textwrap.dedent(source) + RUNNER)
        env = {**os.environ, "DIAG_EMULATOR": "tpu" if kind == "tpu" else ""}
        # The Python emulator: its texts are the ones to diagnose, and it is the one that
        # can lack an op (op_missing); the native one runs every CPU kernel.
        env["TORCHPORT_EMULATOR"] = "python"
        procs[kind] = subprocess.Popen(
            [sys.executable, script.name],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    results: dict[str, dict[str, Any]] = {}
    for kind, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-4000:]
        rows = [json.loads(ln[5:]) for ln in out.splitlines() if ln.startswith("CASE=")]
        results[kind] = {row["case"]: row["result"] for row in rows}
    return results


def _check(kind: str, name: str, result: dict[str, Any], expected: tuple[str, str, set[str]]):
    signature, action, rules = expected
    d = diagnose(result, "tpu")
    assert (d.signature, d.action) == (signature, action), (result["error"], d)
    assert rules <= set(d.rules), d.rules
    assert d.evidence and d.cause and d.target == "tpu"
    line = _marked_lines(SCRIPTS[kind]).get(name)
    if result["status"] == "failed":
        if line is None:  # failed inside a helper: the helper's marked line
            line = _marked_lines(SCRIPTS[kind])["_init"]
        assert (d.file, d.line) == (f"cases_{kind}.py", line), (d, result["error"])
    return d


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CPU_EXPECTED))
def test_cpu_torch_failures(cases: dict, name: str) -> None:
    _check("cpu", name, cases["cpu"][name], CPU_EXPECTED[name])


@pytest.mark.parametrize("name", sorted(TPU_EXPECTED))
def test_emulated_tpu_failures(cases: dict, name: str) -> None:
    _check("tpu", name, cases["tpu"][name], TPU_EXPECTED[name])


def test_optional_cases(cases: dict) -> None:
    for name, expected in OPTIONAL.items():
        if cases["cpu"][name]["status"] == "failed":
            _check("cpu", name, cases["cpu"][name], expected)


def test_every_case_ran(cases: dict) -> None:
    assert set(cases["cpu"]) == set(CPU_EXPECTED) | set(OPTIONAL)
    assert set(cases["tpu"]) == set(TPU_EXPECTED)


def test_causes_name_what_the_error_named(cases: dict) -> None:
    legacy = diagnose(cases["tpu"]["legacy_synchronize"], "tpu")
    assert "torch.tpu.synchronize" in legacy.cause
    assert "torch.accelerator.synchronize" in legacy.hint
    missing = diagnose(cases["tpu"]["op_missing"], "tpu")
    assert "aten::tril_indices" in missing.cause and "emulator" in missing.cause
    no_kernel = diagnose(cases["tpu"]["op_without_cpu_kernel"], "tpu")
    assert "aten::_flash_attention_forward" in no_kernel.cause and no_kernel.limitation
    lacks = diagnose(cases["tpu"]["op_torchtpu_lacks"], "tpu")
    assert "aten::batch_norm_stats" in lacks.cause and not lacks.limitation
    assert "SyncBatchNorm" in lacks.hint and "all_reduce" in lacks.hint
    assert "tpu:0" in diagnose(cases["tpu"]["numpy_on_device"], "tpu").cause
    assert "'ncll'" in diagnose(cases["cpu"]["backend_typo"], "tpu").cause
    assert "BFloat16" in diagnose(cases["cpu"]["fft_bfloat16"], "tpu").cause
    assert "Half" in diagnose(cases["cpu"]["svd_half"], "tpu").cause


def test_where_the_match_was_found(cases: dict) -> None:
    assert diagnose(cases["cpu"]["cuda_method"], "tpu").matched_in == "message"
    chained = diagnose(cases["cpu"]["apex_required"], "tpu")
    assert chained.matched_in == "stderr"
    assert chained.evidence == "ModuleNotFoundError: No module named 'apex'"
    warned = diagnose(cases["cpu"]["cuda_grad_scaler"], "tpu")
    assert warned.matched_in == "stderr" and "GradScaler is enabled" in warned.evidence


def test_rules_and_action_follow_the_target(cases: dict) -> None:
    # TPF001 has no fix for device-agnostic code ("none"): not a finding there.
    assert diagnose(cases["cpu"]["float64_input"], "tpu").rules == ("TPF001",)
    assert diagnose(cases["cpu"]["float64_input"], "accelerator").rules == ()
    # Pinning: kept on tpu (TorchTPU pins), removed by TPL002's codemod elsewhere.
    pinning = diagnose(cases["cpu"]["pin_memory"], "neuron")
    assert (pinning.action, pinning.rules) == ("rules", ("TPL002", "TPL001"))
    assert diagnose(cases["tpu"]["pinned_factory"], "neuron").rules == ("TPL001", "TPL002")
    assert diagnose(cases["cpu"]["pin_memory"], "tpu").rules == ()
    # TPB001 (cudnn flags) is "none" for accelerator too; TPD020 stays.
    assert diagnose(cases["cpu"]["cudnn_version"], "accelerator").rules == ("TPD020",)
    # The CUDA codemods exist for every target.
    for target in TARGETS:
        d = diagnose(cases["cpu"]["cuda_method"], target)
        assert d.action == "rules" and "TPD001" in d.rules and d.target == target


def test_a_rules_signature_without_a_codemod_for_the_target_goes_to_the_llm() -> None:
    table = parse_signatures(
        textwrap.dedent(
            """
            [[signature]]
            id = "memory-debugging-only"
            patterns = ['_record_memory_history']
            cause = "CUDA memory debugging."
            rules = ["TPM005"]
            action = "rules"
            """
        )
    )
    result = {
        "status": "failed",
        "error": {
            "type": "AttributeError",
            "message": "module 'torch.cuda.memory' has no attribute '_record_memory_history'",
            "frame": None,
        },
    }
    # TPM005 is "manual" for every target: no codemod to re-run.
    assert diagnose(result, "tpu", table).action == "llm"


def test_unknown_failures_go_to_the_llm(cases: dict) -> None:
    d = diagnose(cases["cpu"]["key_error"], "neuron")
    assert (d.signature, d.action, d.rules) == ("unknown", "llm", ())
    assert d.evidence == "KeyError: 'learning_rate'"
    bare = diagnose({"status": "failed", "error": None, "stderr_tail": "Segfault\nbye\n"}, "xla")
    assert (bare.signature, bare.action, bare.evidence) == ("unknown", "llm", "bye")


def test_a_clean_run_is_ok_and_ignores_nothing_else() -> None:
    d = diagnose({"status": "ok", "error": None, "stderr_tail": "loss 0.1\n"}, "tpu")
    assert (d.signature, d.action) == ("ok", "none")


def test_warnings_do_not_explain_a_failure(cases: dict) -> None:
    result = dict(cases["cpu"]["cuda_autocast"])
    result.update(status="failed", error={"type": "KeyError", "message": "'lr'", "frame": None})
    assert diagnose(result, "tpu").signature == "unknown"


# --- End to end: real programs through the sandbox harness ---------------------------

TRAIN = """\
import torch

model = torch.nn.Linear(4, 1).to("tpu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4, device="tpu")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
"""


def _harness(tmp_path: Path, source: str, **spec: Any) -> dict[str, Any]:
    """Run ``source`` as train.py through the harness, without a sandbox (tests only)."""
    root = tmp_path / "prog"
    root.mkdir()
    (root / "train.py").write_text(source)
    spec.setdefault("mode", "tpu")
    spec = {"isolation": "process", "timeout_s": 120, **spec}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IsolationWarning)  # "process" is asked for
        return run(RunSpec(root=root, command=["python", "train.py"], **spec)).to_json()


@pytest.mark.slow
def test_a_cuda_call_left_in_a_tpu_port(tmp_path: Path) -> None:
    result = _harness(tmp_path, TRAIN)
    assert result["status"] == "failed", result
    d = diagnose(result, "tpu")
    assert (d.signature, d.action, d.file, d.line) == ("cuda-unavailable", "rules", "train.py", 10)
    assert "TPT001" in d.rules and d.evidence.endswith("Torch not compiled with CUDA enabled")
    # Without the error's frame, the traceback in stderr still says where; without
    # either, the emulator's record of the CUDA calls the program attempted.
    result["error"]["frame"] = None
    assert (diagnose(result, "tpu").file, diagnose(result, "tpu").line) == ("train.py", 10)
    result["stderr_tail"] = ""
    assert result["counters"]["cuda_call_sites"], result["counters"]
    assert (diagnose(result, "tpu").file, diagnose(result, "tpu").line) == ("train.py", 10)


def test_a_program_that_dies_without_a_traceback(tmp_path: Path) -> None:
    result = _harness(tmp_path, "import os\nos._exit(3)\n", mode="plain")
    d = diagnose(result, "tpu")
    assert (d.signature, d.action) == ("run-crashed", "human")


def test_a_traceback_in_stderr_comes_before_a_native_crash(tmp_path: Path) -> None:
    # The launcher wrote no result (os._exit), but the program printed its traceback:
    # the diagnosis quotes that exception instead of calling it a native crash.
    program = textwrap.dedent("""
        import os, traceback
        try:
            raise ConnectionError("peer rank 1 went away")
        except ConnectionError:
            traceback.print_exc()
        os._exit(1)
    """)
    result = _harness(tmp_path, program, mode="plain")
    assert result["error"]["type"] == "NoResult", result
    d = diagnose(result, "tpu")
    assert d.signature != "run-crashed" and d.matched_in == "stderr"
    assert d.evidence == "ConnectionError: peer rank 1 went away"
    assert (d.file, d.line) == ("train.py", 4)


def test_the_last_traceback_of_a_rank_is_read_behind_its_prefix() -> None:
    stderr = textwrap.dedent("""\
        Traceback (most recent call last):
          File "/w/train.py", line 3, in <module>
        KeyError: 'early, handled'
        [rank1]: Traceback (most recent call last):
        [rank1]:   File "/w/train.py", line 12, in <module>
        [rank1]:     dist.init_process_group("gloo")
        [rank1]: torch.distributed.DistStoreError: Timed out after 61 seconds waiting for clients.
        W1201 torch/distributed/elastic: a log line after it
    """)
    no_result = {"type": "NoResult", "message": "the program ended without a result", "frame": None}
    result = {"status": "failed", "error": no_result, "stderr_tail": stderr}
    d = diagnose(result, "tpu")
    assert (d.signature, d.file, d.line) == ("rendezvous-timeout", "/w/train.py", 12)
    assert d.evidence.startswith("torch.distributed.DistStoreError: Timed out after 61 seconds")
    # With no traceback at all, it is still a crash without a Python exception.
    result["stderr_tail"] = "Segmentation fault (core dumped)\n"
    assert diagnose(result, "tpu").signature == "run-crashed"


def test_tool_limitations_are_named_as_such() -> None:
    from torchport.agents.repair_choice import no_fix_reason as _no_fix_reason

    limited = {sig.id for sig in load_signatures() if sig.limitation}
    assert {"emulator-op-missing", "rendezvous-unreachable", "dependency-missing"} <= limited
    assert not {"run-crashed", "out-of-memory"} & limited
    assert all(sig.action == "human" for sig in load_signatures() if sig.limitation)
    assert "limitation of torchport" in _no_fix_reason("human", False, limitation=True)
    assert "needs a human" in _no_fix_reason("human", False, limitation=False)


def test_a_run_stopped_at_the_time_limit(tmp_path: Path) -> None:
    result = _harness(tmp_path, "import time\ntime.sleep(60)\n", mode="plain", timeout_s=2)
    assert result["status"] == "timeout"
    d = diagnose(result, "tpu")
    assert (d.signature, d.action, d.matched_in) == ("run-timeout", "human", "status")
    assert "step budget" in d.hint


# Written out: a memory kill cannot be provoked safely on a shared machine. The shape is
# sandbox.harness.run's for a killed run (error type = the isolation's kill reason).
def _killed(reason: str) -> dict[str, Any]:
    return {
        "status": "killed",
        "exit_code": -9,
        "error": {"type": reason, "message": f"the run was stopped: {reason}", "frame": None},
        "stderr_tail": "",
        "counters": {},
    }


@pytest.mark.parametrize(
    ("reason", "signature", "hint"),
    [
        ("memory", "run-memory-limit", "memory limit"),
        ("signal SIGKILL", "run-killed", "stderr_tail"),
        ("cpu-time", "run-killed", "CPU-time"),
    ],
)
def test_killed_runs_go_to_a_human(reason: str, signature: str, hint: str) -> None:
    d = diagnose(_killed(reason), "tpu")
    assert (d.signature, d.action, d.file, d.line) == (signature, "human", None, None)
    assert hint in d.hint


def test_an_ordinal_beyond_the_hosts_devices_is_a_run_limitation() -> None:
    # Written out: the emulated neuron's text (a TorchNeuron process sees the host's devices,
    # tests/test_emulator_conformance.py); only the run's --devices can be wrong there.
    message = "neuron error: invalid device ordinal 2 (the emulator was activated with devices=2)"
    frame = {"file": "train.py", "line": 3, "function": "<module>", "code": "x.to('neuron:2')"}
    result = {"status": "failed", "error": {"type": "RuntimeError", "message": message}}
    d = diagnose({**result, "error": {**result["error"], "frame": frame}}, "neuron")
    assert (d.signature, d.action, d.limitation) == ("invalid-device-ordinal", "human", True)


def test_a_rank_indexed_tpu_device_is_the_programs_bug_not_a_limitation(cases: dict) -> None:
    d = diagnose(cases["tpu"]["two_devices"], "tpu")
    assert not d.limitation and "tpu:1" in d.cause and 'torch.device("tpu")' in d.hint


def test_a_cuda_build_without_a_driver() -> None:
    # Written out: only a CUDA build of torch on a machine without a driver says this
    # (c10/cuda/CUDAFunctions.cpp); this machine has a CPU build.
    message = (
        "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU "
        "and installed a driver from http://www.nvidia.com/Download/index.aspx"
    )
    frame = {"file": "train.py", "line": 7, "function": "<module>", "code": "x.cuda()"}
    result = {
        "status": "failed",
        "error": {"type": "RuntimeError", "message": message, "frame": frame},
    }
    d = diagnose(result, "neuron")
    assert (d.signature, d.action, d.file, d.line) == ("cuda-unavailable", "rules", "train.py", 7)


def test_the_cuda_call_record_locates_a_cuda_failure_without_a_frame(cases: dict) -> None:
    result = dict(cases["cpu"]["nvtx"])
    result["error"] = {**result["error"], "frame": None}
    result["stderr_tail"] = ""
    # The reference shim's record (shim.intercepted()) of the run's CUDA calls.
    site = {"api": "torch.cuda.nvtx.range_push", "file": "/w/train.py", "line": 12, "count": 3}
    result["counters"] = [site]
    d = diagnose(result, "tpu")
    assert (d.signature, d.file, d.line) == ("cuda-nvtx", "/w/train.py", 12)
    # Two sites do not say which one failed.
    result["counters"] = [site, {**site, "line": 20}]
    assert diagnose(result, "tpu").line is None


def test_a_parity_failure_from_the_verifier_goes_to_the_llm() -> None:
    from torchport.agents.verifier import judge, policies

    def run(losses):
        return {"status": "ok", "losses": losses, "counters": {"ops": 10}, "error": None}

    failed = judge(run([2.0, 1.5]), run([2.0, 1.9]), policies()["fp32"], "tpu")
    d = diagnose(failed.failure, "tpu")
    assert (d.signature, d.action, d.file) == ("parity-mismatch", "llm", None)
    assert "step 2" in d.evidence


def test_a_failed_differential_check_goes_to_the_llm_at_the_kernel_site() -> None:
    from torchport.agents.kernel_check import KernelCheck
    from torchport.agents.verifier import judge, policies, with_kernel_check

    def run(losses):
        return {"status": "ok", "losses": losses, "counters": {"ops": 10}, "error": None}

    verified = judge(run([2.0, 1.5]), run([2.0, 1.5]), policies()["fp32"], "tpu")
    reason = "the differential check fails at the kernel call site ops/glu.py:glu: ..."
    frame = {"file": "ops/glu.py", "line": 12, "function": "glu", "code": None}
    failed = with_kernel_check(verified, KernelCheck(False, reason, frame=frame), run([2.0, 1.5]))
    assert failed.verdict == "failed" and failed.reason.startswith(reason)
    assert failed.reason.endswith("; the program's 2 losses match")
    d = diagnose(failed.failure, "tpu")
    assert (d.signature, d.action, d.file, d.line) == ("kernel-mismatch", "llm", "ops/glu.py", 12)


# --- The table itself -----------------------------------------------------------------


def test_every_signature_has_a_case() -> None:
    covered = {e[0] for e in (*CPU_EXPECTED.values(), *TPU_EXPECTED.values())}
    covered |= END_TO_END | WRITTEN
    ids = {sig.id for sig in load_signatures()}
    assert ids - covered == set(), "signatures without a test case"
    assert covered - ids - {"unknown"} == set(), "cases for signatures that do not exist"


def test_every_signature_has_a_next_step() -> None:
    """Each failure tells the user what to do next, with the option that does it where one
    does (never an internal name such as RunSpec.timeout_s)."""
    for sig in load_signatures():
        assert sig.hint.strip(), f"{sig.id} has no next step (hint)"
        assert "RunSpec" not in sig.hint, sig.id
    steps = {sig.id: sig.hint for sig in load_signatures()}
    assert "--timeout" in steps["run-timeout"] and "--steps" in steps["run-timeout"]
    assert "--deps" in steps["dependency-missing"] and "--python" in steps["dependency-missing"]
    assert "/path/to/" in steps["data-missing"] and "--keep-args" in steps["argument-refused"]
    assert "weights stand-in" in steps["hub-download"] and "--memory" in steps["out-of-memory"]


# (signature, error type, message, the failing line's code) as the runs report them
SANDBOX_LACKS = [
    (
        "hub-download",
        "OSError",
        "We couldn't connect to 'https://huggingface.co' to load "
        "this file, couldn't find it in the cached files",
        "AutoModel.from_pretrained(name)",
    ),
    (
        "network-unreachable",
        "URLError",
        "<urlopen error [Errno -3] Temporary failure in name resolution>",
        "urllib.request.urlretrieve(url, path)",
    ),
    (
        "no-terminal",
        "ValueError",
        "not enough values to unpack (expected 2, got 0)",
        "rows, columns = os.popen('stty size', 'r').read().split()",
    ),
    (
        "read-only-path",
        "OSError",
        "[Errno 30] Read-only file system: '/opt/out'",
        "os.makedirs(args.out)",
    ),
    (
        "binary-incompatible",
        "ImportError",
        "/x/_C.so: undefined symbol: _ZN3c104cuda",
        "import torchvision",
    ),
]


@pytest.mark.parametrize("case", SANDBOX_LACKS, ids=[c[0] for c in SANDBOX_LACKS])
def test_what_the_sandbox_lacks(case: tuple[str, str, str, str]) -> None:
    signature, kind, message, code = case
    frame = {"file": "train.py", "line": 7, "function": "main", "code": code}
    result = {"status": "failed", "error": {"type": kind, "message": message, "frame": frame}}
    d = diagnose(result, "tpu")
    assert (d.signature, d.file, d.line) == (signature, "train.py", 7)
    assert d.hint
    # the same ValueError from another line is not a terminal's
    if signature == "no-terminal":
        other = {**result, "error": {**result["error"], "frame": {**frame, "code": "a, b = []"}}}
        assert diagnose(other, "tpu").signature == "unknown"


def test_every_rule_code_is_in_the_catalogue() -> None:
    catalogue = load_catalogue()
    for sig in load_signatures():
        assert sig.rules or sig.action != "rules", sig.id
        for code in sig.rules:
            assert code in catalogue.by_code, (sig.id, code)


def test_the_table_is_checked_when_loaded() -> None:
    good = 'id = "x-y"\npatterns = ["boom"]\ncause = "c"\nrules = []\naction = "llm"\n'

    def table(text: str) -> str:
        return "[[signature]]\n" + text

    assert [s.id for s in parse_signatures(table(good))] == ["x-y"]
    bad = {
        "rule(s) ['TPX999']": good.replace("rules = []", 'rules = ["TPX999"]'),
        "bad regex": good.replace('"boom"', '"(boom"'),
        "not one of": good.replace('"llm"', '"maybe"'),
        "not a group": good.replace('cause = "c"', 'cause = "{module} missing"'),
        "reserved": good.replace('"x-y"', '"unknown"'),
        "unknown field": good + 'severity = "high"\n',
        "neither patterns": good.replace('patterns = ["boom"]\n', ""),
        "unknown status": good + 'status = ["crashed"]\n',
    }
    for message, text in bad.items():
        with pytest.raises(SignatureError, match=re.escape(message)):
            parse_signatures(table(text))
    with pytest.raises(SignatureError, match="duplicate"):
        parse_signatures(table(good) + table(good))


def test_bad_targets_and_json(cases: dict) -> None:
    with pytest.raises(ValueError, match="unknown target"):
        diagnose(cases["cpu"]["cuda_method"], "cuda")
    d = diagnose(cases["cpu"]["cuda_method"], "xla")
    assert isinstance(d, Diagnosis)
    data = json.loads(json.dumps(d.to_json()))
    assert data["signature"] == "cuda-unavailable" and isinstance(data["rules"], list)


def test_a_long_message_is_matched_without_runaway_backtracking() -> None:
    """A pattern that backtracks catastrophically on a long message never returns; one that
    does not takes milliseconds. The guard is a minute, so a busy machine cannot fail it
    (speed itself is benchmarks/' business, not a test's)."""
    noise = "x" * 1990
    result = {
        "status": "failed",
        "error": {"type": "RuntimeError", "message": noise, "frame": None},
        "stderr_tail": ("y" * 79 + "\n") * 50,
    }

    def runaway(*_: object) -> None:
        raise AssertionError("a signature's pattern is still matching after 60 s")

    previous = signal.signal(signal.SIGALRM, runaway)
    signal.alarm(60)
    try:
        for _ in range(20):
            assert diagnose(result, "tpu").signature == "unknown"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
