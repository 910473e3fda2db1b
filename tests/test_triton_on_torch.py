"""triton_on_torch (tools/kernel_runtime): Triton kernels, unchanged, run on torch.

The reference is Triton's own interpreter (TRITON_INTERPRET=1, the `triton` extra): the
eval suite's three Triton repositories and hand-written kernels (tests/triton_kernels.py)
run once under it and once under triton_on_torch, each in a fresh interpreter
(tests/triton_compare.py), because a process's ``triton`` is fixed once imported and the
interpreter must be chosen before that. The runtime side installs triton_on_torch as
``triton`` in ``sys.modules``, so the repositories' kernel files run as they are, as a
port that keeps ``import triton`` would run them. triton_on_torch runs every case twice:
in its default mode, which runs a launch's programs together where the kernel allows,
and with every program one by one (``--mode loop``).
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
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
    "in_place_then_branch",  # stores, then `if pid == 0`: the vector mode's stores undone
    "prefix_rows",  # range(0, pid + 1)
    "last_writer",  # programs storing to one place; `if pid >= 0`, which all take alike
    "row_scalars",  # a program's [] scalars with its [BLOCK] blocks, axes past programs
    "fp16_row_scale",  # float16 block * a program's float32 scalar
)
MODES = ("vector", "loop")
# How each case's kernels run in the default mode: programs together, or one by one.
VECTOR = {
    "rmsnorm": {"_add_rms_norm_fwd"},
    "swiglu": {"_silu_mul_fwd", "_silu_mul_bwd"},
    "softmax_fallback": {"_softmax_fwd_kernel"},
    "vector_add": {"add_kernel"},
    "softmax_rows": {"softmax_rows_kernel"},
    "matmul": {"matmul_kernel"},  # a 2-D grid
    "autotune": {"scale_shift_kernel"},
    "noncontiguous_out": {"transpose_into_kernel"},
    "last_writer": {"last_writer_kernel"},
    "row_scalars": {"row_scalars_kernel"},
    "fp16_row_scale": {"scale_rows_fp16_kernel"},
}
# The loop mode's per-program scalars are torch's 0-d tensors, which do not promote a
# float16 block (the module docstring says so): its float32 result is float16's rounding.
LOOP_TOLERANCE = {"fp16_row_scale": {"rtol": 1e-3, "atol": 1e-3}}
SINGLE_PROGRAM = {"many_ops", "scalar_load_then_store", "block_members"}  # grid (1,)
KERNEL_LINES = Path(__file__).with_name("triton_kernels.py").read_text().splitlines()


def _run_cases(out: Path, *options: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Each case's outputs, and (``"modes"``) how its kernels ran."""
    proc = subprocess.run(
        [sys.executable, str(COMPARE), str(out), *options],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    saved = torch.load(out)
    return {**saved["results"], "modes": saved["modes"]}


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's outputs under Triton's interpreter."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton's interpreter: triton is not installed (pip install -e '.[triton]')")
    out = tmp_path_factory.mktemp("interpreter") / "outputs.pt"
    return _run_cases(out, "--runtime", "interpreter", env={"TRITON_INTERPRET": "1"})


@pytest.fixture(scope="module")
def on_torch_modes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every case's outputs under triton_on_torch, on the CPU, in each of its modes."""
    return {
        mode: _run_cases(
            tmp_path_factory.mktemp(mode) / "outputs.pt", "--runtime", "torch", "--mode", mode
        )
        for mode in MODES
    }


@pytest.fixture(scope="module")
def on_torch(on_torch_modes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return on_torch_modes["vector"]


def _assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], **tol: float) -> None:
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        message = lambda m, name=name: f"{name}: {m}"  # noqa: E731
        torch.testing.assert_close(got[name], tensor, msg=message, **tol)


def test_every_case_ran_on_both_runtimes(interpreted: dict, on_torch_modes: dict) -> None:
    assert set(interpreted) == {*CASES, "modes"}
    for mode in MODES:
        assert set(on_torch_modes[mode]) == {*CASES, "vector_add_off_by_one", "modes"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES)
def test_a_kernel_computes_what_tritons_interpreter_does(
    case: str, mode: str, interpreted: dict, on_torch_modes: dict
) -> None:
    tolerance = LOOP_TOLERANCE.get(case, {}) if mode == "loop" else {}
    _assert_same(on_torch_modes[mode][case], interpreted[case], **tolerance)


def test_the_loop_modes_float16_promotion_is_torchs(
    interpreted: dict, on_torch_modes: dict
) -> None:
    """What LOOP_TOLERANCE allows is needed: the loop mode's result is float16's rounding."""
    with pytest.raises(AssertionError, match="Mismatched elements"):
        _assert_same(on_torch_modes["loop"]["fp16_row_scale"], interpreted["fp16_row_scale"])


def _reason(why: str) -> tuple[str, str]:
    """A loop mode's reason as (what, the kernel line's source)."""
    what, _, where = why.removeprefix("loop: ").partition(" (")
    line = int(where.rstrip(")").rpartition(":")[2])
    return what, KERNEL_LINES[line - 1].strip()


def test_kernels_run_their_programs_together_where_their_indexing_allows(
    on_torch_modes: dict,
) -> None:
    modes = on_torch_modes["vector"]["modes"]
    for case, kernels in VECTOR.items():
        assert modes[case] == dict.fromkeys(kernels, "vector"), case
    for case in SINGLE_PROGRAM:  # nothing to run together
        assert set(modes[case].values()) == {"loop"}, case
    (why,) = modes["prefix_rows"].values()
    assert _reason(why) == (
        "int() of a value that differs by program",
        "for row in range(0, pid + 1):",
    )
    # the second launch's reason is the one remembered from the first's attempt
    (why,) = modes["in_place_then_branch"].values()
    assert _reason(why) == ("bool() of a value that differs by program", "if pid == 0:")
    assert {case for case, ran in modes.items() if "vector" in ran.values()} == {
        *VECTOR,
        "vector_add_off_by_one",
    }


def test_the_loop_mode_runs_every_kernel_one_program_at_a_time(on_torch_modes: dict) -> None:
    modes = on_torch_modes["loop"]["modes"]
    assert {mode for ran in modes.values() for mode in ran.values()} == {"loop"}
    assert set(modes) == {*CASES, "vector_add_off_by_one"}


@pytest.mark.parametrize("mode", MODES)
def test_the_comparison_catches_an_off_by_one_mask(
    mode: str, interpreted: dict, on_torch_modes: dict
) -> None:
    """The wrong kernel's mask drops the last element; only that element differs."""
    wrong = on_torch_modes[mode]["vector_add_off_by_one"]["out"]
    right = interpreted["vector_add"]["out"]
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 1000"):
        _assert_same({"out": wrong}, {"out": right})
    torch.testing.assert_close(wrong[:-1], right[:-1])
    assert wrong[-1] == 0 and right[-1] != 0


@pytest.mark.slow
def test_kernels_run_on_the_emulated_tpu_as_on_the_cpu(tmp_path: Path, on_torch: dict) -> None:
    cases = ("rmsnorm", "swiglu", "softmax_fallback", "matmul", "noncontiguous_out")
    options = ("--runtime", "torch", "--device", "tpu", "--cases", *cases)
    on_tpu = _run_cases(tmp_path / "tpu.pt", *options)
    assert set(on_tpu) == {*cases, "modes"}
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


GRID_KERNEL = """\
from torchport.tools.kernel_runtime import triton_on_torch as triton
tl = triton.language


@triton.jit
def copy_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = (tl.program_id(0) + tl.program_id(1) * 2) * BLOCK + tl.arange(0, BLOCK)
    tl.device_assert(offs < 5 * BLOCK, "in bounds")
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))
"""


@pytest.mark.parametrize(("mode", "group"), [("vector", 16), ("vector", 2), ("loop", 16)])
def test_an_error_names_the_first_program_in_the_loops_order(
    mode: str, group: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Programs (2, 0), (0, 1), (1, 1) and (2, 1) read past the end of x; the loop runs
    (2, 0) first (axis 0 varies fastest), and the vector mode names it too, whether it
    runs all programs together or (``group`` 2) one group of them after another."""
    monkeypatch.setattr(runtime, "MODE", mode)
    monkeypatch.setattr(runtime, "FIRST_CPU_GROUP", group)
    monkeypatch.setattr(runtime, "CPU_GROUP_ELEMENTS", 8 * group)  # BLOCK is 8
    path = tmp_path / "grid_kernels.py"
    kernel = _module(path, GRID_KERNEL).copy_kernel
    with pytest.raises(runtime.KernelIndexError) as caught:
        kernel[(3, 2)](torch.ones(2 * 8), torch.zeros(6 * 8), BLOCK=8)
    assert str(caught.value) == (
        "tl.load of element 16 outside a storage of 16 elements, "
        f"in program (2, 0, 0) of copy_kernel at {path}:9"
    )
    assert caught.value.__notes__ == [
        "in triton_on_torch kernel copy_kernel, "
        + ("all programs at once" if mode == "vector" else "program (2, 0, 0)")
    ]
    assert runtime.launch_modes["copy_kernel"] == mode
    x, out = torch.randn(6 * 8), torch.zeros(6 * 8)
    kernel[(3, 2)](x, out, BLOCK=8)  # blocks 0 to 4 (2 twice); block 5 is no program's
    assert torch.equal(out, torch.cat([x[:40], torch.zeros(8)]))
    assert runtime.launch_modes["copy_kernel"] == mode
    if mode == "vector":
        assert kernel.group == {(("BLOCK", 8),): group}
    with pytest.raises(AssertionError, match=r"in bounds \(program \(1, 2, 0\), copy_kernel "):
        kernel[(3, 3)](torch.ones(9 * 8), torch.zeros(9 * 8), BLOCK=8)


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The constexpr values of each launch that tries the vector mode."""
    tried: list[tuple] = []
    vectorised = runtime.JITFunction._vectorised
    monkeypatch.setattr(
        runtime.JITFunction,
        "_vectorised",
        lambda self, values, key: tried.append(key) or vectorised(self, values, key),
    )
    return tried


def test_programs_whose_blocks_fill_a_cpu_group_alone_finish_in_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attempts: list[tuple]
) -> None:
    """Running them together gains nothing: after the first group the loop takes over
    from the next program (the first group's stores stay), and later launches loop."""
    monkeypatch.setattr(runtime, "FIRST_CPU_GROUP", 2)
    monkeypatch.setattr(runtime, "CPU_GROUP_ELEMENTS", 8)  # one program's BLOCK
    kernel = _module(tmp_path / "wide.py", GRID_KERNEL).copy_kernel
    for _ in range(2):
        x, out = torch.randn(6 * 8), torch.zeros(6 * 8)
        kernel[(3, 2)](x, out, BLOCK=8)
        assert torch.equal(out, torch.cat([x[:40], torch.zeros(8)]))
    assert len(attempts) == 1
    assert runtime.launch_modes["copy_kernel"] == (
        "loop: a program's blocks fill a CPU group (8 elements)"
    )


def test_a_kernel_that_needs_the_loop_is_remembered_per_constexpr_values(
    tmp_path: Path, attempts: list[tuple]
) -> None:
    source = GRID_KERNEL.replace(
        "    tl.store(out_ptr + offs, tl.load(x_ptr + offs))",
        "    for i in range(tl.program_id(0)):\n"
        "        tl.store(out_ptr + offs, tl.load(x_ptr + offs) + i)",
    )
    kernel = _module(tmp_path / "remembered.py", source).copy_kernel
    x = torch.arange(6 * 8, dtype=torch.float32)
    for block in (8, 8, 4):
        out = torch.zeros(6 * 8)
        kernel[(3, 2)](x, out, BLOCK=block)
        want = torch.zeros(6 * 8)
        for pid in itertools.product(range(2), range(1, 3)):  # (y, x); x = 0 stores nothing
            part = slice((pid[1] + 2 * pid[0]) * block, (pid[1] + 2 * pid[0] + 1) * block)
            want[part] = x[part] + pid[1] - 1
        assert torch.equal(out, want), block
    assert len(attempts) == 2  # BLOCK=8 once, BLOCK=4 once
    assert set(kernel.needs_loop) == {(("BLOCK", 8),), (("BLOCK", 4),)}
    assert runtime.launch_modes["copy_kernel"].startswith("loop: int() of a value that differs")


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
