"""torchport's CPU runner for CUDA kernels runs real kernels to their known answers
(tests/fixtures/cudacpu/kernels.cu, compiled once per machine into the runner's cache,
keyed by its content: minutes of CPU the first time, so these tests are slow).

Each answer would be wrong if the runner were: threads that do not wait at
``__syncthreads()`` read tiles and partial sums before they are written, a dynamic
shared buffer that is not the block's own mixes chunks, atomics that lose updates
miscount, a 3-D block with the wrong thread order writes elsewhere."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch
from torchport.sandbox.cudacpu import build, compile_extension, file_sources, pch
from torchport.sandbox.cudacpu.build import INCLUDE, cache_root
from torchport.sandbox.native.build import missing_tools

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parent / "fixtures" / "cudacpu"


@pytest.fixture(scope="module")
def kernels():
    missing = missing_tools()
    if missing:
        pytest.skip(f"the CPU runner for CUDA kernels cannot compile here: {missing}")
    units = file_sources([str(FIXTURES / "kernels.cu")])
    return compile_extension("torchport_test_kernels", units, cache_root(), pch=pch.ensure())


def test_the_precompiled_prelude_matches_the_builds_flags():
    """GCC takes the .gch only when the flags match the build's: a wrong flag set would
    leave every build a minute slower, with every answer still right."""
    where = pch.ensure()
    if where is None:
        pytest.skip("no precompiled prelude here (the compiler is not GCC, or it failed)")
    from torch.utils import cpp_extension

    with tempfile.TemporaryDirectory() as tmp:
        unit = Path(tmp) / "unit.cpp"
        unit.write_text("#include <cudacpu/prelude.h>\n__global__ void k() {}\n")
        flags = [f for f in pch.compile_flags() if not f.startswith("-I")]
        command = [cpp_extension.get_cxx_compiler(), "-H", "-fsyntax-only", "-Winvalid-pch"]
        command += [f"-I{where}", f"-I{INCLUDE}", "-DTORCH_EXTENSION_NAME=any_name", *flags]
        run = subprocess.run([*command, str(unit)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"! {where / pch.GCH}" in run.stderr, run.stderr[:2000]


def test_one_thread_per_element(kernels):
    x = torch.randn(1000)  # 4 blocks of 256, the last one partly outside
    assert torch.equal(kernels.module.affine(x, 2.0, -1.0), 2.0 * x - 1.0)


def test_a_grid_stride_loop_covers_more_elements_than_threads(kernels):
    x = torch.randn(10_000)  # 4 blocks of 64 threads
    assert torch.equal(kernels.module.square(x), x * x)


def test_a_2d_grid_through_a_shared_tile_with_a_barrier(kernels):
    x = torch.randn(37, 50)  # partial tiles on both edges
    assert torch.equal(kernels.module.transpose(x), x.t())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_template_block_reduction_whose_barrier_is_in_a_device_function(kernels, dtype):
    x = torch.randn(20, 1000, dtype=dtype)
    torch.testing.assert_close(kernels.module.row_sum(x), x.sum(1))


def test_dynamic_shared_memory_is_each_blocks_own(kernels):
    x = torch.arange(100.0)
    out = kernels.module.reverse_chunks(x, 32)
    expected = torch.cat([c.flip(0) for c in x.split(32)])
    assert torch.equal(out, expected)


def test_atomics_count_every_update(kernels):
    values = torch.randint(0, 12, (5000,))
    counts, largest, total = kernels.module.histogram(values, 10)  # 10, 11 clamp to bin 9
    expected = torch.bincount(values.clamp(max=9), minlength=10).int()
    assert torch.equal(counts, expected)
    assert largest.item() == values.max().item()
    assert total.item() == values.sum().item()  # exact: small integers in float


def test_syncthreads_count_sums_the_blocks_predicates(kernels):
    x = torch.randn(1000)
    padded = torch.nn.functional.pad(x, (0, 24))
    expected = (padded > 0).view(-1, 128).sum(1).int()
    assert torch.equal(kernels.module.count_positive(x, 128), expected)


def test_a_3d_block_sees_every_thread_index(kernels):
    out = kernels.module.coords(3)
    b, z, y, x = torch.meshgrid(*(torch.arange(n) for n in (3, 2, 3, 4)), indexing="ij")
    assert torch.equal(out, (x + 10 * y + 100 * z + 1000 * b).int())


def test_math_intrinsics(kernels):
    x = torch.randn(1000)
    expected = torch.exp(-x.abs()) / (1 + torch.rsqrt(1 + x * x)) + x.clamp(min=0) + torch.tanh(x)
    torch.testing.assert_close(kernels.module.intrinsics(x), expected)


def test_a_refused_warp_intrinsic_raises_with_its_file_and_line_when_called(kernels):
    with pytest.raises(RuntimeError) as raised:
        kernels.module.warp_reduce(torch.randn(32))
    message = str(raised.value)
    assert "kernels.cu:113: warp_sum uses __shfl_down_sync (warp intrinsic)" in message
    assert "torchport's CPU runner for CUDA kernels cannot run" in message
    refused = kernels.record["refused"]
    assert [(r["function"], r["line"]) for r in refused] == [("warp_sum", 113)]


@pytest.mark.parametrize(
    "which, kernel, says",
    [
        (0, "null_write_kernel", "it reads or writes memory outside its buffers (out of bounds"),
        (1, "deep_stack_kernel", "the thread's stack (128 KiB on the CPU) overflowed"),
    ],
)
def test_a_kernel_that_faults_says_which_kernel_block_and_thread(kernels, which, kernel, says):
    """A fault kills the process (as it would have): the message is what is left of it."""
    load = (
        "import importlib.util, torch\n"
        f"spec = importlib.util.spec_from_file_location('torchport_test_kernels', "
        f"{str(kernels.built.library)!r})\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        f"m.fault({which})\n"
    )
    run = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGSEGV, run.stderr[-2000:]
    head = f"torchport CPU runner: kernel {kernel} faulted in block (0, 0, 0), thread (0, 0, 0): "
    assert head + says in run.stderr


def test_the_library_counts_each_kernels_launches(kernels):
    before = kernels.launches().get("transpose_kernel", 0)
    kernels.module.transpose(torch.randn(3, 3))
    kernels.module.transpose(torch.randn(3, 3))
    assert kernels.launches()["transpose_kernel"] == before + 2
    assert set(kernels.record["barrier_kernels"]) == {
        "transpose_kernel",
        "row_sum_kernel",
        "reverse_chunks_kernel",
        "count_positive_kernel",
        "deep_stack_kernel",
    }


def test_an_extension_with_cpu_kernels_runs_them_on_cpu_tensors():
    """The .cpp sends CPU tensors to its own CPU code, so the runner leaves its device
    test alone: the CUDA kernel is compiled (it is linked) but never launched, and a
    refused device function on the CUDA side is no obstacle."""
    if missing_tools():
        pytest.skip(f"the CPU runner for CUDA kernels cannot compile here: {missing_tools()}")
    folder = FIXTURES / "dispatch"
    units = file_sources([str(folder / "scale_add.cpp"), str(folder / "scale_add_cuda.cu")])
    ext = compile_extension("torchport_test_dispatch", units, cache_root(), pch=pch.ensure())
    x, y = torch.randn(100), torch.randn(100)
    assert torch.equal(ext.module.scale_add(x, y, 3.0), 3.0 * x + y)
    assert ext.record["cpu_kernels"].endswith("scale_add.cpp:18")
    assert ext.launches() == {}
    assert [r["function"] for r in ext.record["refused"]] == ["lane_broadcast"]


def test_a_torch_1_style_extension_dispatching_on_x_type_builds_and_runs():
    """pytorch/extension-cpp's LLTM (2018) and the tutorials of its time check
    ``x.type().is_cuda()`` and dispatch on ``x.type()``: the first must ask for the CPU
    without a member the deprecated type lacks, the second needs the overload torch 2
    removed. Both dtypes run, each through its own instantiation."""
    if missing_tools():
        pytest.skip(f"the CPU runner for CUDA kernels cannot compile here: {missing_tools()}")
    units = file_sources([str(FIXTURES / "legacy" / "affine_legacy.cu")])
    ext = compile_extension("torchport_test_legacy", units, cache_root(), pch=pch.ensure())
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(3, 40, dtype=dtype)
        rows = torch.arange(3, dtype=dtype).unsqueeze(1)
        assert torch.equal(ext.module.affine_rows(x, 2.5), 2.5 * x + rows)
    assert ext.launches() == {"affine_rows_kernel": 2}


def test_a_build_killed_mid_compile_does_not_stop_the_next(tmp_path):
    """A killed build leaves torch's baton in its folder; the next build used to wait on it
    forever (a test run stopped mid-compile hung the next full run) and then import a
    library nobody built. Under torchport's flock the baton is a dead build's: it goes."""
    if missing_tools():
        pytest.skip(f"the CPU runner for CUDA kernels cannot compile here: {missing_tools()}")
    folder = FIXTURES / "dispatch"
    units = file_sources([str(folder / "scale_add.cpp"), str(folder / "scale_add_cuda.cu")])
    for attempt in ("first", "after a killed build"):
        (tmp_path / "root").mkdir(exist_ok=True)
        for built in (tmp_path / "root").glob("*/"):
            (built / build.BATON).write_text("")  # what the killed build left
            for library in built.glob("*.so"):
                library.unlink()
        done = {}
        worker = threading.Thread(
            target=lambda done=done: done.setdefault(
                "ext",
                compile_extension(
                    "torchport_test_baton", units, tmp_path / "root", pch=pch.ensure()
                ),
            ),
            daemon=True,
        )
        worker.start()
        worker.join(timeout=600)
        assert "ext" in done, f"the {attempt} build did not finish: it waits on a dead baton"
        x, y = torch.randn(10), torch.randn(10)
        assert torch.equal(done["ext"].module.scale_add(x, y, 2.0), 2.0 * x + y)
    (tmp_path / build.BATON).write_text("")
    with build.one_builder(tmp_path):  # whoever holds the flock finds no baton
        assert not (tmp_path / build.BATON).exists()
