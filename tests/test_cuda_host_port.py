"""TPK002 on a vendor target (tools/codemods/cuda_host.py): a ``load_inline`` CUDA extension
builds, in the port, from the host C++ torchport's CPU runner translates it into, shipped
beside the module with the runner's runtime and ``cudacpu_host.py``; its functions run on
host copies of the tensors. Where the runner refuses a construct, the finding is refused
with it and its line. Real migrations; the slow tests build and run the shipped files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torchport.agents import graph, runs
from torchport.tools.codemods import migrate_python
from torchport.tools.kernel_runtime import cuda_host, shipped
from torchport.tools.migrate import in_package, shipped_files
from torchport.tools.migration_result import FileChange
from torchport.tools.scanner import scan

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "evals" / "suite" / "load-inline-kernel" / "repo"

PROGRAM = '''\
import torch
from torch.utils.cpp_extension import load_inline

_CPP = "torch::Tensor scale(torch::Tensor x, double a);"

_CUDA = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* x, float* y, float a, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = BODY;
}

torch::Tensor scale(torch::Tensor x, double a) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  auto y = torch::empty_like(x);
  const int64_t n = x.numel();
  scale_kernel<<<(n + 127) / 128, 128>>>(x.data_ptr<float>(), y.data_ptr<float>(), a, n);
  return y;
}
"""

_ext = load_inline(
    name="scale_ext",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["scale"],
    extra_cflags=["-DSCALE_EXT=1"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)
'''


def _ported(tmp_path: Path, body: str = "a * x[i]", in_package: bool = False):
    source = PROGRAM.replace("BODY", body)
    path = tmp_path / "ops.py"
    path.write_text(source, encoding="utf-8")
    findings = [f for f in scan(path).findings if f.rule == "TPK002"]
    assert findings, "the scanner finds the extension"
    return migrate_python(source, findings, "tpu", "ops.py", in_package=in_package)


def test_the_build_call_builds_the_shipped_host_translation(tmp_path):
    result = _ported(tmp_path)
    assert not result.unapplied
    assert (
        '_ext = cudacpu_host.build("scale_ext", "scale_ext_host.cpp", __file__, '
        'extra_cflags=["-DSCALE_EXT=1"], verbose=False)'
    ) in result.source  # nvcc's flags go, a macro stays
    assert "import cudacpu_host" in result.source
    assert "cuda_sources" not in result.source
    assert set(result.ships) == {"cudacpu_host.py", "cudacpu_runtime.h", "cudacpu_runtime.cpp"}
    [advisory] = [e.advisory for e in result.edits if e.rule == "TPK002"]
    assert ".cpu()" in advisory and ".to(device)" in advisory and "scale_ext_host.cpp" in advisory


def test_the_shipped_source_is_the_translation_with_its_provenance(tmp_path):
    [(name, text)] = _ported(tmp_path).written
    assert name == "scale_ext_host.cpp"
    head = text.split("#include <torch/extension.h>")[0]
    assert "Translated by torchport" in head and 'ops.py: load_inline(name="scale_ext")' in head
    assert "is_cuda() -> x.is_cpu()" in head  # what changed
    assert '#include "cudacpu_runtime.h"' in text
    assert "<cudacpu/prelude.h>" not in text  # the runner's own prelude is not the port's
    assert "::cudacpu::launch(" in text and "<<<" not in text.replace("<<<grid", "")
    assert "TORCH_CHECK(x.is_cpu()" in text
    assert '#line 6 "ops.py"' in text  # the kernel's lines name the original's
    assert "// (in cudacpu_runtime.h) #include <cuda_runtime.h>" in text
    assert 'm.def("scale"' in text  # load_inline's binding of functions=


def test_the_translation_is_deterministic(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = _ported(tmp_path / "a"), _ported(tmp_path / "b")
    assert first.written == second.written and first.source == second.source


def test_a_construct_the_runner_refuses_is_named_with_its_line(tmp_path):
    result = _ported(tmp_path, body="__shfl_down_sync(0xffffffff, a * x[i], 1)")
    [(finding, reason)] = result.unapplied
    assert finding.rule == "TPK002"
    assert "__shfl_down_sync" in reason and "ops.py:12" in reason
    assert not result.written and "load_inline(" in result.source


def test_a_module_of_a_package_imports_the_helper_relatively(tmp_path):
    result = _ported(tmp_path, in_package=True)
    assert not result.unapplied
    assert "from . import cudacpu_host" in result.source


KERNEL_CU = """\
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void twice_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = BODY;
}

torch::Tensor twice(torch::Tensor x) {
  auto y = torch::empty_like(x);
  twice_kernel<<<(x.numel() + 63) / 64, 64>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
"""
BINDING_CPP = """\
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); }
"""


def _loaded(tmp_path: Path, sources: str, body: str = "2.0f * x[i]"):
    """A package module that builds csrc/ (beside the package) with load(sources=...)."""
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "twice.cpp").write_text(BINDING_CPP)
    (tmp_path / "csrc" / "twice_kernel.cu").write_text(KERNEL_CU.replace("BODY", body))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    source = (
        "import os\nfrom pathlib import Path\nfrom torch.utils.cpp_extension import load\n\n"
        '_CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "csrc")\n'
        f'_ext = load(name="twice_ext", sources={sources}, verbose=False)\n'
    )
    path = tmp_path / "pkg" / "ops.py"
    path.write_text(source)
    findings = [f for f in scan(path).findings if f.rule == "TPK002"]
    assert findings, "the scanner finds the extension"
    return migrate_python(source, findings, "tpu", "pkg/ops.py", in_package=True, root=tmp_path)


@pytest.mark.parametrize(
    "sources",
    [
        '[os.path.join(_CSRC, "twice.cpp"), os.path.join(_CSRC, "twice_kernel.cu")]',
        '[Path(__file__).parent.parent / "csrc" / "twice.cpp", "csrc/twice_kernel.cu"]',
    ],
)
def test_load_reads_the_sources_its_paths_name_from_the_repository(tmp_path, sources):
    result = _loaded(tmp_path, sources)
    assert not result.unapplied
    assert (
        '_ext = cudacpu_host.build("twice_ext", "twice_ext_host.cpp", __file__, verbose=False)'
        in (result.source)
    )
    [(name, text)] = result.written
    assert name == "twice_ext_host.cpp"
    assert "sources=[../csrc/twice.cpp, ../csrc/twice_kernel.cu]" in text
    assert '#line 1 "../csrc/twice_kernel.cu"' in text and "::cudacpu::launch(" in text


def _loaded_in_function(tmp_path: Path, function: str):
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "twice.cpp").write_text(BINDING_CPP)
    (tmp_path / "csrc" / "twice_kernel.cu").write_text(KERNEL_CU.replace("BODY", "2.0f * x[i]"))
    source = "import os\nfrom torch.utils.cpp_extension import load\n\n\n" + function
    path = tmp_path / "ops.py"
    path.write_text(source)
    findings = [f for f in scan(path).findings if f.rule == "TPK002"]
    return migrate_python(source, findings, "tpu", "ops.py", root=tmp_path)


LOCAL_HERE = """def build(verbose=False):
    here = os.path.dirname(os.path.abspath(__file__))
    return load(
        name="twice_ext",
        sources=[
            os.path.join(here, "csrc", "twice.cpp"),
            os.path.join(here, "csrc", "twice_kernel.cu"),
        ],
    )
"""


def test_load_follows_a_path_named_in_the_calling_function(tmp_path):
    result = _loaded_in_function(tmp_path, LOCAL_HERE)
    assert not result.unapplied
    assert 'return cudacpu_host.build("twice_ext", "twice_ext_host.cpp", __file__)' in result.source
    [(_, text)] = result.written
    assert "sources=[csrc/twice.cpp, csrc/twice_kernel.cu]" in text


@pytest.mark.parametrize(
    "rebinding",
    [
        "def other(here):\n    return here\n",  # a parameter of the same name
        'def other():\n    here = "elsewhere"\n',  # a second, different value
        "for here in ['a']:\n    pass\n",  # a loop variable
    ],
)
def test_a_path_name_bound_another_way_in_the_module_is_not_followed(tmp_path, rebinding):
    [(_, reason)] = _loaded_in_function(tmp_path, LOCAL_HERE + "\n\n" + rebinding).unapplied
    assert "not a path known without running the code" in reason


TWICE_CUH = """\
#pragma once
#include <cuda_runtime.h>
#include "detail/scale.cuh"

__device__ __forceinline__ float twice_of(float v) { return scale_of(v, 2.0f); }
"""
SCALE_CUH = """\
#pragma once
__device__ __forceinline__ float scale_of(float v, float k) { return k * v; }
"""


def _with_headers(tmp_path: Path):
    """csrc/twice_kernel.cu includes csrc/twice.cuh, which includes csrc/detail/scale.cuh."""
    (tmp_path / "csrc" / "detail").mkdir(parents=True)
    (tmp_path / "csrc" / "twice.cuh").write_text(TWICE_CUH)
    (tmp_path / "csrc" / "detail" / "scale.cuh").write_text(SCALE_CUH)
    kernel = KERNEL_CU.replace("BODY", "twice_of(x[i])")
    kernel = kernel.replace(
        "#include <cuda_runtime.h>\n", '#include <cuda_runtime.h>\n#include "twice.cuh"\n'
    )
    (tmp_path / "csrc" / "twice_kernel.cu").write_text(kernel)
    (tmp_path / "csrc" / "twice.cpp").write_text(BINDING_CPP)
    source = (
        "import os\nfrom torch.utils.cpp_extension import load\n\n"
        '_ext = load(name="twice_ext", sources=["csrc/twice.cpp", "csrc/twice_kernel.cu"])\n'
    )
    (tmp_path / "ops.py").write_text(source)
    findings = [f for f in scan(tmp_path / "ops.py").findings if f.rule == "TPK002"]
    return migrate_python(source, findings, "tpu", "ops.py", root=tmp_path)


def test_the_repositorys_own_headers_are_inlined_where_first_included(tmp_path):
    result = _with_headers(tmp_path)
    assert not result.unapplied, result.unapplied
    [(_, text)] = result.written
    assert '#include "twice.cuh"' not in text and '#include "detail/scale.cuh"' not in text
    assert '#line 1 "csrc/twice.cuh"' in text and '#line 1 "csrc/detail/scale.cuh"' in text
    # the header's CUDA include stood in for, its #pragma once gone, the kernel's line restored
    assert "#pragma once" not in text.split("cudacpu_runtime.h", 1)[1]
    assert '#line 4 "csrc/twice.cuh"' in text and '#line 4 "csrc/twice_kernel.cu"' in text
    assert (
        text.index("scale_of(float v")
        < text.index("twice_of(float v")
        < text.index("void twice_kernel")
    )


def test_a_header_outside_the_repository_is_not_read(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "outside.cuh").write_text("__device__ float secret() { return 1.0f; }\n")
    (tmp_path / "repo" / "csrc").mkdir()
    (tmp_path / "repo" / "csrc" / "twice.cpp").write_text(BINDING_CPP)
    kernel = '#include "../../outside.cuh"\n' + KERNEL_CU.replace("BODY", "x[i]")
    (tmp_path / "repo" / "csrc" / "twice_kernel.cu").write_text(kernel)
    source = (
        "from torch.utils.cpp_extension import load\n\n"
        '_ext = load(name="twice_ext", sources=["csrc/twice.cpp", "csrc/twice_kernel.cu"])\n'
    )
    (tmp_path / "repo" / "ops.py").write_text(source)
    findings = [f for f in scan(tmp_path / "repo" / "ops.py").findings if f.rule == "TPK002"]
    result = migrate_python(source, findings, "tpu", "ops.py", root=tmp_path / "repo")
    [(_, reason)] = result.unapplied
    assert "../../outside.cuh" in reason and not result.written


def test_sources_that_include_headers_of_their_own_are_refused(tmp_path):
    result = _loaded(
        tmp_path,
        '["csrc/twice.cpp", "csrc/twice_kernel.cu"]',
        body='x[i]; }\n#include "twice.cuh"\n{',
    )
    [(_, reason)] = result.unapplied
    assert "twice.cuh" in reason and "headers of their own" in reason


def test_load_with_a_path_known_only_at_run_time_is_refused(tmp_path):
    [(_, reason)] = _loaded(tmp_path, '[os.environ["SRC"], "csrc/twice_kernel.cu"]').unapplied
    assert "os.environ" in reason and "not a path known without running the code" in reason


def test_load_of_a_kernel_the_runner_refuses_names_its_file_and_line(tmp_path):
    sources = '["csrc/twice.cpp", "csrc/twice_kernel.cu"]'
    result = _loaded(tmp_path, sources, body="__shfl_xor_sync(0xffffffff, x[i], 1)")
    [(_, reason)] = result.unapplied
    assert "__shfl_xor_sync" in reason and "twice_kernel.cu:6" in reason


def test_the_port_adds_the_generated_and_the_shipped_files_beside_the_module(tmp_path):
    change = FileChange("pkg/ops.py", "a", "b", ("cudacpu_runtime.h",), (("x_host.cpp", "//x"),))
    added = {c.path: c.after for c in shipped_files(tmp_path, [change])}
    assert added == {"pkg/x_host.cpp": "//x", "pkg/cudacpu_runtime.h": cuda_host.runtime_header()}
    assert shipped("cudacpu_runtime.h") == cuda_host.runtime_header()


def test_the_runtime_header_stands_alone():
    header = cuda_host.runtime_header()
    assert "#include <cudacpu/" not in header  # host.h joined in
    assert "CUDART_PI_F" in header  # math_constants.h's macros
    assert '#include "cudacpu_runtime.h"' in cuda_host.runtime_source()


def _compiler_missing() -> str:
    return "" if shutil.which("c++") or shutil.which("g++") else "no C++ compiler"


def _built_and_run(tmp_path: Path, result, check: str) -> subprocess.CompletedProcess:
    """The port's written and shipped files in a folder, and ``check`` run against them
    (argv[1] the folder) in a fresh Python that builds the extension."""
    if _compiler_missing():
        pytest.skip(_compiler_missing())
    port = tmp_path / "port"
    port.mkdir()
    for name, text in result.written:
        (port / name).write_text(text)
    for name in result.ships:
        (port / name).write_text(shipped(name))
    head = "import sys, torch\nsys.path.insert(0, sys.argv[1])\nimport cudacpu_host\n"
    return subprocess.run(
        [sys.executable, "-c", head + textwrap.dedent(check), str(port)],
        capture_output=True,
        text=True,
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "MAX_JOBS": "2"},
        timeout=900,
        check=False,
    )


@pytest.mark.slow
def test_the_shipped_files_build_and_run_on_host_copies(tmp_path):
    check = """
        ext = cudacpu_host.build("scale_ext", "scale_ext_host.cpp", sys.argv[1] + "/x.py")
        x = torch.arange(300, dtype=torch.float32)
        y = ext.scale(x, 2.5)
        assert torch.equal(y, 2.5 * x), (y - 2.5 * x).abs().max()
        print("ok", y.device)
        """
    done = _built_and_run(tmp_path, _ported(tmp_path), check)
    assert done.returncode == 0 and "ok cpu" in done.stdout, done.stderr[-3000:]


@pytest.mark.slow
def test_a_host_build_with_inlined_headers_builds_and_runs(tmp_path):
    check = """
        ext = cudacpu_host.build("twice_ext", "twice_ext_host.cpp", sys.argv[1] + "/x.py")
        x = torch.arange(300, dtype=torch.float32)
        assert torch.equal(ext.twice(x), 2 * x)
        print("ok")
        """
    done = _built_and_run(tmp_path, _with_headers(tmp_path), check)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


@pytest.mark.slow
def test_the_eval_task_port_is_verified_rules_only(tmp_path):
    """evals/suite/load-inline-kernel: the port runs the translated kernels on the
    emulated tpu's host copies and matches the original's CPU-runner numbers."""
    if _compiler_missing():
        pytest.skip(_compiler_missing())
    settings = {"source": str(TASK), "target": "tpu", "out": str(tmp_path / "out"), "llm": "none"}
    state = graph.start({**settings, "steps": 3}, graph.Runtime(runs.new_run_id()))
    assert state["outcome"] == "verified", state["verification"]["reason"]
    out = tmp_path / "out"
    assert (out / "fused_bias_gelu_host.cpp").is_file() and (out / "cudacpu_host.py").is_file()
    assert "cudacpu_host.build(" in (out / "fused_ops.py").read_text()


def test_a_file_in_the_migrated_folder_imports_the_helper_absolutely_even_beside_an_init(
    tmp_path,
):
    """pytorch/extension-cpp's ``cuda/`` has an ``__init__.py`` and its scripts run there
    (``python jit.py``): ``from . import cudacpu_host`` would fail in them. A module of a
    package below the folder imports it relatively."""
    (tmp_path / "pkg" / "inner").mkdir(parents=True)
    for folder in (tmp_path, tmp_path / "pkg"):
        (folder / "__init__.py").write_text("")
    assert not in_package(tmp_path, "jit.py")
    assert in_package(tmp_path, "pkg/ops.py")
    assert not in_package(tmp_path, "pkg/inner/ops.py")  # no __init__.py there
