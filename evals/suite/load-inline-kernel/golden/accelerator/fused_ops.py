"""Fused bias + GELU (tanh approximation): a JIT-compiled CUDA extension on NVIDIA GPUs,
plain PyTorch on every other device.

On CUDA machines the kernels are compiled once at import with
torch.utils.cpp_extension.load_inline (needs nvcc and ninja); the build is cached under
~/.cache/torch_extensions. Elsewhere gelu(x + bias, approximate="tanh") computes the same.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

_CPP_SRC = """
torch::Tensor bias_gelu_forward(torch::Tensor x, torch::Tensor bias);
torch::Tensor bias_gelu_backward(torch::Tensor grad, torch::Tensor x, torch::Tensor bias);
"""

_CUDA_SRC = r"""
#include <torch/extension.h>
#include <cuda.h>
#include <cuda_runtime.h>

#define CHECK_INPUT(t) \
  TORCH_CHECK(t.is_cuda(), #t " must be a CUDA tensor"); \
  TORCH_CHECK(t.is_contiguous(), #t " must be contiguous"); \
  TORCH_CHECK(t.scalar_type() == at::kFloat, #t " must be float32")

// gelu(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))
__device__ __forceinline__ float gelu_tanh(float v) {
  const float k0 = 0.7978845608028654f;
  const float k1 = 0.044715f;
  return 0.5f * v * (1.0f + tanhf(k0 * v * (1.0f + k1 * v * v)));
}

__device__ __forceinline__ float gelu_tanh_grad(float v) {
  const float k0 = 0.7978845608028654f;
  const float k1 = 0.044715f;
  const float t = tanhf(k0 * v * (1.0f + k1 * v * v));
  const float dinner = k0 * (1.0f + 3.0f * k1 * v * v);
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner;
}

// x: [rows, hidden] flattened, bias: [hidden]
__global__ void bias_gelu_fwd_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                     float* __restrict__ y, int64_t n, int64_t hidden) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = gelu_tanh(x[i] + bias[i % hidden]);
}

__global__ void bias_gelu_bwd_kernel(const float* __restrict__ g, const float* __restrict__ x,
                                     const float* __restrict__ bias, float* __restrict__ dx,
                                     int64_t n, int64_t hidden) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dx[i] = g[i] * gelu_tanh_grad(x[i] + bias[i % hidden]);
}

torch::Tensor bias_gelu_forward(torch::Tensor x, torch::Tensor bias) {
  CHECK_INPUT(x);
  CHECK_INPUT(bias);
  auto y = torch::empty_like(x);
  const int64_t n = x.numel();
  const int threads = 256;
  const int blocks = (n + threads - 1) / threads;
  bias_gelu_fwd_kernel<<<blocks, threads>>>(x.data_ptr<float>(), bias.data_ptr<float>(),
                                            y.data_ptr<float>(), n, bias.numel());
  return y;
}

torch::Tensor bias_gelu_backward(torch::Tensor grad, torch::Tensor x, torch::Tensor bias) {
  CHECK_INPUT(grad);
  CHECK_INPUT(x);
  CHECK_INPUT(bias);
  auto dx = torch::empty_like(x);
  const int64_t n = x.numel();
  const int threads = 256;
  const int blocks = (n + threads - 1) / threads;
  bias_gelu_bwd_kernel<<<blocks, threads>>>(grad.data_ptr<float>(), x.data_ptr<float>(),
                                            bias.data_ptr<float>(), dx.data_ptr<float>(), n,
                                            bias.numel());
  return dx;
}
"""

_ext = None
if torch.cuda.is_available():
    _ext = load_inline(
        name="fused_bias_gelu",
        cpp_sources=_CPP_SRC,
        cuda_sources=_CUDA_SRC,
        functions=["bias_gelu_forward", "bias_gelu_backward"],
        extra_cuda_cflags=["-O3", "--use_fast_math"],
        verbose=False,
    )


class _BiasGELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        x = x.contiguous()
        ctx.save_for_backward(x, bias)
        return _ext.bias_gelu_forward(x, bias)

    @staticmethod
    def backward(ctx, grad_out):
        x, bias = ctx.saved_tensors
        dx = _ext.bias_gelu_backward(grad_out.contiguous(), x, bias)
        dbias = dx.reshape(-1, bias.numel()).sum(0)
        return dx, dbias


def bias_gelu(x, bias):
    """gelu(x + bias) with the tanh approximation; bias broadcasts over the last dim."""
    if _ext is not None and x.is_cuda and x.dtype == torch.float32:
        return _BiasGELU.apply(x, bias)
    return F.gelu(x + bias, approximate="tanh")


class LinearBiasGELU(nn.Module):
    """y = gelu(x @ W^T + b), with the bias add fused into the activation kernel."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return bias_gelu(self.linear(x), self.bias)
