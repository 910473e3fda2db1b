"""triton_on_torch (tools/kernel_runtime): Triton kernels, unchanged, run on torch.

The reference is Triton's own interpreter (TRITON_INTERPRET=1, the `triton` extra): the
eval suite's three Triton repositories and hand-written kernels (tests/triton_kernels.py)
run once under it and once under triton_on_torch, each in a fresh interpreter
(tests/triton_compare.py), because a process's ``triton`` is fixed once imported and the
interpreter must be chosen before that. The runtime side installs triton_on_torch as
``triton`` in ``sys.modules``, so the repositories' kernel files run as they are, as a
port that keeps ``import triton`` would run them.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torchport.tools.kernel_runtime import support
from torchport.tools.kernel_runtime import triton_on_torch as runtime

TESTS = Path(__file__).resolve().parent
COMPARE = TESTS / "triton_compare.py"
CASES = (
    "rmsnorm",  # evals/suite/triton-fused-rmsnorm
    "swiglu",  # evals/suite/triton-swiglu-autograd, forward and backward kernels
    "softmax_fallback",  # evals/suite/triton-with-fallback
    "vector_add",
    "softmax_rows",
    "matmul",
    "autotune",
    "noncontiguous_out",
    "many_ops",
    "scalar_load_then_store",  # a loaded value is a copy (Liger's cross entropy needs it)
    "block_members",  # x.sum(axis=1), x.max(axis=0), x.cast(...), C's // and %
)


def _run_cases(out: Path, *options: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(COMPARE), str(out), *options],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out)["results"]


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's outputs under Triton's interpreter."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton's interpreter: triton is not installed (pip install -e '.[triton]')")
    out = tmp_path_factory.mktemp("interpreter") / "outputs.pt"
    return _run_cases(out, "--runtime", "interpreter", env={"TRITON_INTERPRET": "1"})


@pytest.fixture(scope="module")
def on_torch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's outputs under triton_on_torch, on the CPU."""
    return _run_cases(tmp_path_factory.mktemp("torch") / "outputs.pt", "--runtime", "torch")


def _assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, msg=lambda m, name=name: f"{name}: {m}")


def test_every_case_ran_on_both_runtimes(interpreted: dict, on_torch: dict) -> None:
    assert set(interpreted) == set(CASES)
    assert set(on_torch) == {*CASES, "vector_add_off_by_one"}


@pytest.mark.parametrize("case", CASES)
def test_a_kernel_computes_what_tritons_interpreter_does(
    case: str, interpreted: dict, on_torch: dict
) -> None:
    _assert_same(on_torch[case], interpreted[case])


def test_the_comparison_catches_an_off_by_one_mask(interpreted: dict, on_torch: dict) -> None:
    """The wrong kernel's mask drops the last element; only that element differs."""
    wrong, right = on_torch["vector_add_off_by_one"]["out"], interpreted["vector_add"]["out"]
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 1000"):
        _assert_same({"out": wrong}, {"out": right})
    torch.testing.assert_close(wrong[:-1], right[:-1])
    assert wrong[-1] == 0 and right[-1] != 0


@pytest.mark.slow
def test_kernels_run_on_the_emulated_tpu_as_on_the_cpu(tmp_path: Path, on_torch: dict) -> None:
    cases = ("rmsnorm", "swiglu", "softmax_fallback", "matmul", "noncontiguous_out")
    options = ("--runtime", "torch", "--device", "tpu", "--cases", *cases)
    on_tpu = _run_cases(tmp_path / "tpu.pt", *options)
    assert set(on_tpu) == set(cases)
    for case in cases:
        _assert_same(on_tpu[case], on_torch[case])


# ---- what is unsupported, named with its line ------------------------------------------

ATOMIC_KERNEL = """\
from torchport.tools.kernel_runtime import triton_on_torch as triton
tl = triton.language


@triton.jit
def total_kernel(total_ptr, x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(total_ptr, tl.sum(x, axis=0))
"""


def _module(path: Path, source: str) -> ModuleType:
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_atomic_is_named_with_its_line_statically_and_at_run_time(tmp_path: Path) -> None:
    assert support.unsupported_in(ATOMIC_KERNEL) == [("tl.atomic_add", 9)]
    path = tmp_path / "atomic_kernels.py"
    kernel = _module(path, ATOMIC_KERNEL).total_kernel
    x, total = torch.ones(100), torch.zeros(1)
    with pytest.raises(runtime.UnsupportedConstruct) as caught:
        kernel[(4,)](total, x, 100, BLOCK=32)
    assert f"tl.atomic_add is not supported by triton_on_torch (total_kernel at {path}:9)" in str(
        caught.value
    )


def test_a_member_function_a_block_lacks_is_named_with_its_line(tmp_path: Path) -> None:
    source = ATOMIC_KERNEL.replace("tl.atomic_add(total_ptr, tl.sum(x, axis=0))", "x.sort()")
    path = tmp_path / "member_kernels.py"
    kernel = _module(path, source).total_kernel
    with pytest.raises(runtime.UnsupportedConstruct, match=f"tensor.sort .*{path}:9"):
        kernel[(1,)](torch.zeros(1), torch.ones(10), 10, BLOCK=16)


def test_the_static_check_follows_imports_and_names_block_pointers() -> None:
    source = """\
import triton as tr
from triton import language as lang
from triton.language.extra import libdevice
import triton.testing
from triton.tools.tensor_descriptor import TensorDescriptor

@tr.jit
def k(X, n, B: lang.constexpr):
    p = lang.make_block_ptr(X, (n,), (1,), (0,), (B,), (0,))
    x = lang.load(p, boundary_check=(0,)) + libdevice.tanh(1.0) + libdevice.popc(1)
    lang.store(X + lang.arange(0, B), lang.exp(x) + lang.extra.cuda.smid())
    bits = x.to(lang.int32, bitcast=True)
tr.testing.do_bench(k)
"""
    assert support.unsupported_in(source) == [
        ("triton.testing", 4),
        ("triton.tools", 5),
        ("tl.make_block_ptr", 9),
        ("tl.extra.libdevice.popc", 10),
        ("tl.load(boundary_check=)", 10),
        ("tl.extra.cuda.smid", 11),
        ("triton.testing", 13),
    ]
    assert support.unsupported_in(ATOMIC_KERNEL.replace("atomic_add", "store")) == []


def test_the_static_checks_table_is_what_the_runtime_has() -> None:
    """support.py reads the runtime's tables from its text; here, against the namespaces
    the imported runtime really has."""
    provided = support.provided()
    for name, space in runtime._SPACES.items():
        assert provided[name] == {key for key in vars(space) if not key.startswith("__")}
    assert all(hasattr(runtime, name) for name in provided["triton"])
    assert "atomic_add" not in provided["triton.language"]
    assert {"tanh", "exp", "fma"} <= provided["triton.language.extra.libdevice"]


def test_an_unmasked_load_past_the_end_names_the_kernel_line_and_program(
    tmp_path: Path,
) -> None:
    source = ATOMIC_KERNEL.replace("tl.atomic_add(total_ptr, ", "tl.store(total_ptr, ")
    source = source.replace("mask=offs < n", "mask=offs <= n")
    path = tmp_path / "overrun.py"
    kernel = _module(path, source).total_kernel
    with pytest.raises(runtime.KernelIndexError) as caught:
        kernel[(4,)](torch.zeros(1), torch.ones(100), 100, BLOCK=32)
    message = str(caught.value)
    assert "tl.load of element 100 outside a storage of 100 elements" in message
    assert f"program (3, 0, 0) of total_kernel at {path}:8" in message


# ---- a port's use: the file copied alone, imported in triton's place -------------------

PORT_KERNEL = """\
import torch
import triton_on_torch as triton
from triton_on_torch import language as tl
from triton_on_torch.language.extra import libdevice


@triton.jit(do_not_specialize=["n"])
def tanh_exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.device_assert(offs >= 0, "offsets are never negative")
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = libdevice.tanh(x) + tl.math.exp(x) * n.to(tl.float32)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def check_kernel(x_ptr):
    tl.device_assert(tl.load(x_ptr) > 0, "x must be positive")
"""


@pytest.fixture
def fresh_modules() -> Any:
    """Takes out of sys.modules what the test adds (the copied runtime, its namespaces)."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_a_copy_of_the_file_alone_runs_a_kernel_as_a_port_imports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_modules: None
) -> None:
    shutil.copy(Path(runtime.__file__), tmp_path / "triton_on_torch.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _module(tmp_path / "port_kernels.py", PORT_KERNEL)
    copied = sys.modules["triton_on_torch"]
    assert copied.__file__ == str(tmp_path / "triton_on_torch.py")
    x = torch.randn(300, dtype=torch.float64)
    out = torch.zeros_like(x, requires_grad=True)  # a kernel writes past autograd, as on a GPU
    module.tanh_exp_kernel[lambda meta: (copied.cdiv(300, meta["BLOCK"]),)](
        x, out, 300, BLOCK=64, num_warps=2
    )
    torch.testing.assert_close(out.detach(), torch.tanh(x) + torch.exp(x) * 300)
    with pytest.raises(AssertionError, match=r"x must be positive .*program \(0, 0, 0\)"):
        module.check_kernel[(1,)](-x.abs() - 1)


def test_the_runtime_imports_only_the_standard_library_and_torch() -> None:
    tree = ast.parse(Path(runtime.__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or ".").partition(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"torch"}
