"""The CPU runner's translation of CUDA C++ (sandbox/cudacpu/translate.py), without
compiling: launches, shared memory, device checks, refusals with file and line, and the
detection of extensions that ship CPU kernels. What the translated code computes is
tests/test_cudacpu_kernels.py's (slow: it compiles)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from torchport.sandbox.cudacpu import Refused, pch
from torchport.sandbox.cudacpu.extension import inline_sources, locate
from torchport.sandbox.cudacpu.lexing import mask_directives, mask_literals
from torchport.sandbox.cudacpu.structure import functions
from torchport.sandbox.cudacpu.translate import (
    Source,
    cpu_dispatch,
    local_headers,
    source_files,
    translate,
)


def cu(text: str, origin: str = "op.cu") -> Source:
    return Source(textwrap.dedent(text), origin, cuda=True)


def one(text: str, origin: str = "op.cu"):
    """The translation of one .cu source: (translated text without the prelude, result)."""
    result = translate([cu(text, origin)])
    body = result.files[0].split("\n", 2)[2]  # the prelude include, the #line directive
    return body, result


KERNELS = """
    template <typename T>
    __device__ T twice(T v) { return v + v; }

    template <typename T, int B>
    __global__ void __launch_bounds__(256) scale(const T* x, T* y, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) y[i] = twice<T>(x[i]);
    }

    __device__ float block_total(float* buf, float v) {
      buf[threadIdx.x] = v;
      __syncthreads();
      return buf[0];
    }

    __global__ void total(const float* x, float* out) {
      __shared__ float buf[128];
      out[0] = block_total(buf, x[threadIdx.x]);
    }

    __global__ void hist(const int* v, int* c) { atomicAdd(&c[v[threadIdx.x]], 1); }

    void run(torch::Tensor x, torch::Tensor y, cudaStream_t s) {
      ns::scale<float, 4><<<dim3(2, 1), 64, 0, s>>>(x.data_ptr<float>(),
          y.data_ptr<float>(),
          (int)x.numel());
      total<<<1, 128>>>(x.data_ptr<float>(), y.data_ptr<float>());
      hist<<<1, 32, 16>>>(nullptr, nullptr);
      unknown_kernel<<<1, 1>>>();
    }
"""


def test_launches_become_runner_calls_with_what_the_kernel_needs():
    body, result = one(KERNELS)
    assert "<<<" not in body and ">>>" not in body
    assert (
        '::cudacpu::launch(::cudacpu::KernelInfo{"scale", false, false}, dim3(2, 1), 64, 0, s, '
        "[&](auto... cudacpu_a) { ns::scale<float, 4>(cudacpu_a...); }, x.data_ptr<float>()"
    ) in body
    # the barrier is in a device function it calls: its threads must run as fibers
    assert '::cudacpu::launch(::cudacpu::KernelInfo{"total", true, false}, 1, 128, 0, 0,' in body
    # atomics: blocks in order; a shared-memory size without a stream gets the default one
    assert '::cudacpu::launch(::cudacpu::KernelInfo{"hist", false, true}, 1, 32, 16, 0,' in body
    # a kernel the translator cannot see is assumed to need both (the safe choice)
    assert (
        '::cudacpu::launch(::cudacpu::KernelInfo{"unknown_kernel", true, true}, 1, 1, 0, 0, '
        "[&](auto... cudacpu_a) { unknown_kernel(cudacpu_a...); })"
    ) in body
    assert [(k.name, k.barrier, k.atomics) for k in result.kernels] == [
        ("scale", False, False),
        ("total", True, False),
        ("hist", False, True),
    ]


def test_every_edit_keeps_the_line_count_so_messages_name_the_users_lines():
    text = textwrap.dedent(KERNELS)
    body, _ = one(KERNELS)
    assert body.count("\n") == text.count("\n")
    assert body.splitlines()[5] == text.splitlines()[5]  # the kernel's header, untouched


def test_the_prelude_maps_lines_back_to_the_users_file():
    result = translate([Source("__global__ void k() {}\n", "src/op kernel.cu", True, 7)])
    head = result.files[0].splitlines()[:2]
    assert head == ["#include <cudacpu/prelude.h>", '#line 7 "src/op kernel.cu"']


def test_dynamic_shared_memory_becomes_the_launchs_buffer():
    body, _ = one(
        """
        __global__ void k(float* x) {
          extern __shared__ __align__(16) unsigned char smem[];
          extern __shared__ float4 tile[];
          float* f = reinterpret_cast<float*>(smem);
        }
        """
    )
    assert (
        "unsigned char* const smem = reinterpret_cast<unsigned char*>(::cudacpu::dynamic_shared());"
        in body
    )
    assert "float4* const tile = reinterpret_cast<float4*>(::cudacpu::dynamic_shared());" in body
    assert "extern" not in body


def test_device_checks_and_constants_ask_for_the_cpu():
    body, _ = one(
        """
        #define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be CUDA")
        #if __CUDA_ARCH__ >= 700
        #endif
        torch::Tensor f(torch::Tensor x) {
          TORCH_CHECK(x.device().is_cuda(), "x.is_cuda() in a string stays");
          auto o = torch::zeros({3}, torch::dtype(torch::kFloat).device(torch::kCUDA));
          auto d = torch::Device(c10::DeviceType::CUDA, 0);
          return x.cuda();  // x.is_cuda() in a comment stays
        }
        TORCH_LIBRARY_IMPL(myops, CUDA, m) { m.impl("f", &f); }
        """
    )
    assert "TORCH_CHECK(x.is_cpu(), #x" in body
    assert "#if CUDACPU_ARCH >= 700" in body
    assert 'TORCH_CHECK(x.device().is_cpu(), "x.is_cuda() in a string stays");' in body
    assert ".device(torch::kCPU)" in body and "c10::DeviceType::CPU, 0" in body
    assert "return x.cpu();  // x.is_cuda() in a comment stays" in body
    assert "TORCH_LIBRARY_IMPL(myops, CPU, m)" in body


def test_a_torch_1_device_check_through_the_deprecated_type_asks_the_tensor():
    """``x.type()`` (DeprecatedTypeProperties) has ``is_cuda()`` but no ``is_cpu()``: the
    check becomes the tensor's own, on the same line."""
    body, _ = one(
        """
        #define CHECK_CUDA(x) AT_ASSERTM(x.type().is_cuda(), #x " must be a CUDA tensor")
        bool f(torch::Tensor x) { return x.type() .is_cuda( ) && x.is_cuda(); }
        """
    )
    assert 'AT_ASSERTM(x.is_cpu(), #x " must be a CUDA tensor")' in body
    assert "bool f(torch::Tensor x) { return x.is_cpu() && x.is_cpu(); }" in body
    assert "type()" not in body


@pytest.mark.parametrize(
    "code, construct, family",
    [
        ("v += __shfl_down_sync(0xffffffff, v, 1);", "__shfl_down_sync", "warp intrinsic"),
        ("unsigned m = __ballot_sync(0xffffffff, v > 0);", "__ballot_sync", "warp intrinsic"),
        ("__syncwarp();", "__syncwarp", "warp intrinsic"),
        ("auto g = cooperative_groups::this_thread_block();", "cooperative_groups", None),
        ("wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;", "wmma::", "tensor cores"),
        ('asm volatile("mov.u32 %0, %%laneid;" : "=r"(v));', "asm", "inline PTX"),
        ("float t = tex1Dfetch<float>(tex, 0);", "tex1Dfetch", "textures and surfaces"),
        ("curand_init(0, 0, 0, &state);", "curand_init", None),
        ("cub::BlockReduce<float, 128> r;", "cub::", "CUB"),
        ("volatile float* s = buf; s[0] += s[16];", "volatile", None),
    ],
)
def test_a_refused_construct_turns_its_function_into_a_stub_naming_it(code, construct, family):
    body, result = one(
        f"""
        __device__ float helper(float v, float* buf) {{
          {code}
          return v;
        }}
        __global__ void ok(float* x) {{ x[threadIdx.x] = 1.0f; }}
        """,
        origin="csrc/ops.cu",
    )
    (refusal,) = result.refusals
    assert refusal.construct == construct and refusal.function == "helper"
    assert (refusal.file, refusal.line) == ("csrc/ops.cu", 3)
    assert family is None or refusal.family == family
    stub = body.splitlines()[1]
    assert stub.startswith('__device__ float helper(float v, float* buf) { ::cudacpu::refuse("')
    assert "csrc/ops.cu:3: helper uses " + construct in stub
    assert "torchport's CPU runner for CUDA kernels cannot run" in stub
    assert "x[threadIdx.x] = 1.0f;" in body  # the other kernel is untouched
    assert [k.name for k in result.kernels if not k.refused] == ["ok"]


def test_volatile_in_host_code_is_not_refused():
    _, result = one("void f() { volatile int spin = 0; (void)spin; }")
    assert result.refusals == []


def test_a_macro_that_expands_to_a_warp_intrinsic_is_refused_where_it_is_used():
    _, result = one(
        """
        #define WARP_ADD(v, o) ((v) + __shfl_xor_sync(0xffffffff, (v), (o)))
        __device__ float reduce(float v) {
          return WARP_ADD(v, 1);
        }
        """
    )
    (refusal,) = result.refusals
    assert refusal.function == "reduce" and refusal.line == 4
    assert "__shfl_xor_sync (through the macro WARP_ADD)" in refusal.construct


def test_a_launch_inside_device_code_is_refused_as_dynamic_parallelism():
    _, result = one(
        """
        __global__ void child(float* x) { x[0] = 1; }
        __global__ void parent(float* x) { child<<<1, 1>>>(x); }
        """
    )
    (refusal,) = result.refusals
    assert (refusal.function, refusal.family, refusal.line) == ("parent", "dynamic parallelism", 3)


def test_refused_libraries_lose_their_include_and_a_file_scope_use_stops_the_build():
    body, result = one(
        """
        #include <cub/cub.cuh>
        #include <cooperative_groups.h>
        namespace cg = cooperative_groups;
        __global__ void k(float* x) {
          cg::thread_block b = cg::this_thread_block();
        }
        """
    )
    assert result.dropped_includes == ["cub/cub.cuh", "cooperative_groups.h"]
    assert "// (dropped) #include <cub/cub.cuh>" in body
    assert "namespace cg" not in body  # the alias went with the library
    (refusal,) = result.refusals
    assert (refusal.function, refusal.construct) == ("k", "cg::")
    with pytest.raises(Refused) as raised:
        translate([cu("typedef cub::BlockReduce<float, 128> Reduce;\n", "red.cu")])
    assert "red.cu:1: the file uses cub:: (CUB)" in str(raised.value)


CPU_DISPATCH = {
    "if-else": """
        torch::Tensor forward(torch::Tensor x) {
          if (x.is_cuda()) {
            return forward_cuda(x);
          } else {
            return forward_cpu(x);
          }
        }
    """,
    "return then fall through": """
        torch::Tensor forward(torch::Tensor x) {
          if (x.device().is_cuda()) return forward_cuda(x);
          TORCH_CHECK(x.is_contiguous());
          return forward_cpu(x);
        }
    """,
    "cpu first": """
        torch::Tensor forward(torch::Tensor x) {
          if (x.device().type() == torch::kCPU) { return forward_cpu(x); }
          return forward_cuda(x);
        }
    """,
    "ternary": """
        torch::Tensor forward(torch::Tensor x) {
          return x.is_cuda() ? forward_cuda(x) : forward_cpu(x);
        }
    """,
    "registration": """
        TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("forward", &forward_cpu); }
        TORCH_LIBRARY_IMPL(myops, CUDA, m) { m.impl("forward", &forward_cuda); }
    """,
}
CHECKS_ONLY = {
    "an if that raises": """
        torch::Tensor forward(torch::Tensor x) {
          if (!x.is_cuda()) { AT_ERROR("x must be a CUDA tensor"); }
          return forward_cuda(x);
        }
    """,
    "the cpu branch raises": """
        torch::Tensor forward(torch::Tensor x) {
          if (x.is_cuda()) { return forward_cuda(x); }
          else { TORCH_CHECK(false, "no CPU version"); }
        }
    """,
    "a check": """
        torch::Tensor forward(torch::Tensor x) {
          TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
          return forward_cuda(x);
        }
    """,
}


@pytest.mark.parametrize("name", CPU_DISPATCH)
def test_an_extension_that_dispatches_to_its_own_cpu_code_keeps_its_device_tests(name):
    host = Source(textwrap.dedent(CPU_DISPATCH[name]), "ext.cpp", cuda=False)
    kernel = cu("torch::Tensor forward_cuda(torch::Tensor x) { TORCH_CHECK(x.is_cuda()); }")
    assert cpu_dispatch([host, kernel]) is not None
    result = translate([host, kernel])
    assert result.cpu_dispatch.startswith("ext.cpp:")
    assert ".is_cpu()" not in "".join(result.files)  # CPU tensors take the CPU branch
    assert "kCUDA" not in CPU_DISPATCH[name] or "kCUDA" in result.files[0]


@pytest.mark.parametrize("name", CHECKS_ONLY)
def test_a_device_check_is_not_cpu_code(name):
    host = Source(textwrap.dedent(CHECKS_ONLY[name]), "ext.cpp", cuda=False)
    assert cpu_dispatch([host]) is None
    assert ".is_cpu()" in translate([host]).files[0]  # the check passes for CPU tensors


def test_function_headers_are_found_through_templates_attributes_and_classes():
    code = mask_directives(
        mask_literals(
            textwrap.dedent(
                """
                namespace a { namespace b {
                template <typename T, int N = sizeof(T)>
                __global__ void __launch_bounds__(256, 2) k1(T* x) { if (x) { x[0] = 1; } }
                struct S {
                  __device__ float get() const { return v; }
                  float v = 1.0f;
                };
                }}
                extern "C" {
                void c_api(int x) {}
                }
                int table[] = {1, 2, 3};
                auto lam = [](int v) { return v; };
                static void host(int v = 3) { printf("}{"); }
                """
            )
        )
    )
    found = [(f.name, f.kernel, f.device) for f in functions(code)]
    assert found == [
        ("k1", True, True),
        ("get", False, True),
        ("c_api", False, False),
        ("host", False, False),
    ]


def test_load_inline_strings_are_found_in_the_callers_file(tmp_path):
    program = tmp_path / "ops.py"
    program.write_text(
        textwrap.dedent(
            '''
            from torch.utils.cpp_extension import load_inline

            CPP = "torch::Tensor f(torch::Tensor x);"
            CUDA = r"""
            __global__ void k(float* x) {
              x[threadIdx.x] = __shfl_sync(0xffffffff, x[0], 0);
            }
            torch::Tensor f(torch::Tensor x) { return x; }
            """
            ext = load_inline("ops", CPP, cuda_sources=CUDA, functions=["f"])
            '''
        )
    )
    namespace: dict[str, str] = {}
    exec(program.read_text().split("ext =")[0].split("\n", 2)[2], namespace)
    assert locate(namespace["CUDA"], program.read_text().splitlines()) == 5
    units = inline_sources("ops", namespace["CPP"], namespace["CUDA"], ["f"], caller=str(program))
    assert [name for name, _ in units] == ["main.cpp", "cuda.cu.cpp"]
    main, kernels = units[0][1], units[1][1]
    assert "torch::wrap_pybind_function(f)" in main.text
    (refusal,) = translate([main, kernels]).refusals
    assert (refusal.file, refusal.line) == (str(program), 7)
    assert f'#line 5 "{program}"' in translate([main, kernels]).files[1]
    # a string the file does not hold (built at run time) is named by its place in the call
    units = inline_sources("ops", "", "__global__ void k() {}", caller=str(program))
    assert units[1][1].segments[1].origin == "ops:cuda_sources[0]"


def test_only_reference_runs_of_programs_with_extensions_get_the_precompiled_prelude(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "train.py").write_text("import torch\n")
    assert not pch.uses_extensions(tmp_path)
    assert pch.for_sandbox("reference", tmp_path) == ([], {})
    (tmp_path / "pkg" / "ops.py").write_text("from torch.utils.cpp_extension import load\n")
    assert pch.uses_extensions(tmp_path)
    assert pch.for_sandbox("tpu", tmp_path) == ([], {})  # a port must not build kernels


def test_a_barrier_in_a_local_header_is_seen_through_the_include(tmp_path):
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "reduce.cuh").write_text(
        textwrap.dedent(
            """
            #pragma once
            __device__ float block_total(float* buf, float v) {
              buf[threadIdx.x] = v;
              __syncthreads();
              return buf[0];
            }
            """
        )
    )
    kernel = tmp_path / "op.cu"
    kernel.write_text(
        textwrap.dedent(
            """
            #include "common/reduce.cuh"
            __global__ void total(const float* x, float* out) {
              __shared__ float buf[64];
              out[0] = block_total(buf, x[threadIdx.x]);
            }
            void run(float* x, float* y) { total<<<1, 64>>>(x, y); }
            """
        )
    )
    sources = source_files([kernel])
    headers = local_headers(sources, [])
    assert [Path(h.origin).name for h in headers] == ["reduce.cuh"]
    result = translate(sources, headers)
    assert '::cudacpu::KernelInfo{"total", true, false}' in result.files[0]
    # without the header the kernel's call is unknown: it would run without barriers
    assert '::cudacpu::KernelInfo{"total", false, false}' in translate(sources).files[0]
