// Causal scaled softmax over the last dimension: one block per row of scores; the row's
// max and sum are block reductions in shared memory.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <torch/types.h>

#include <limits>

namespace {

constexpr int kThreads = 64;

template <typename T>
__device__ __forceinline__ T fast_exp(T v) {
  return exp(v);
}
template <>
__device__ __forceinline__ float fast_exp<float>(float v) {
  return __expf(v);
}

template <typename T>
__device__ T block_max(T v, T* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) buf[threadIdx.x] = max(buf[threadIdx.x], buf[threadIdx.x + stride]);
    __syncthreads();
  }
  const T out = buf[0];
  __syncthreads();
  return out;
}

template <typename T>
__device__ T block_sum(T v, T* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) buf[threadIdx.x] += buf[threadIdx.x + stride];
    __syncthreads();
  }
  const T out = buf[0];
  __syncthreads();
  return out;
}

template <typename scalar_t>
__global__ void causal_softmax_fwd(const scalar_t* __restrict__ scores,
                                   scalar_t* __restrict__ probs, int seq, scalar_t scale) {
  __shared__ scalar_t buf[kThreads];
  const int64_t row = blockIdx.x;
  const int query = row % seq;  // keys 0..query are visible
  const scalar_t* in = scores + row * seq;
  scalar_t* out = probs + row * seq;

  scalar_t m = -std::numeric_limits<scalar_t>::infinity();
  for (int k = threadIdx.x; k <= query; k += blockDim.x) m = max(m, in[k] * scale);
  m = block_max(m, buf);

  scalar_t s = 0;
  for (int k = threadIdx.x; k <= query; k += blockDim.x) s += fast_exp(in[k] * scale - m);
  const scalar_t inv = scalar_t(1) / block_sum(s, buf);

  for (int k = threadIdx.x; k < seq; k += blockDim.x) {
    out[k] = k <= query ? fast_exp(in[k] * scale - m) * inv : scalar_t(0);
  }
}

// d scores = scale * p * (dp - sum(dp * p)); masked keys have p = 0, so their gradient is 0
template <typename scalar_t>
__global__ void causal_softmax_bwd(const scalar_t* __restrict__ grad,
                                   const scalar_t* __restrict__ probs,
                                   scalar_t* __restrict__ dscores, int seq, scalar_t scale) {
  __shared__ scalar_t buf[kThreads];
  const int64_t row = blockIdx.x;
  const scalar_t* g = grad + row * seq;
  const scalar_t* p = probs + row * seq;
  scalar_t dot = 0;
  for (int k = threadIdx.x; k < seq; k += blockDim.x) dot += g[k] * p[k];
  dot = block_sum(dot, buf);
  for (int k = threadIdx.x; k < seq; k += blockDim.x) {
    dscores[row * seq + k] = scale * p[k] * (g[k] - dot);
  }
}

}  // namespace

torch::Tensor causal_softmax_forward_cuda(torch::Tensor scores, double scale) {
  const c10::cuda::CUDAGuard guard(scores.device());
  const int seq = scores.size(-1);
  const int64_t rows = scores.numel() / seq;
  auto probs = torch::empty_like(scores);
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(scores.scalar_type(), "causal_softmax_forward", [&] {
    causal_softmax_fwd<scalar_t><<<rows, kThreads, 0, stream>>>(
        scores.data_ptr<scalar_t>(), probs.data_ptr<scalar_t>(), seq,
        static_cast<scalar_t>(scale));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return probs;
}

torch::Tensor causal_softmax_backward_cuda(torch::Tensor grad, torch::Tensor probs,
                                           double scale) {
  const c10::cuda::CUDAGuard guard(probs.device());
  const int seq = probs.size(-1);
  const int64_t rows = probs.numel() / seq;
  auto dscores = torch::empty_like(probs);
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(probs.scalar_type(), "causal_softmax_backward", [&] {
    causal_softmax_bwd<scalar_t><<<rows, kThreads, 0, stream>>>(
        grad.data_ptr<scalar_t>(), probs.data_ptr<scalar_t>(), dscores.data_ptr<scalar_t>(),
        seq, static_cast<scalar_t>(scale));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dscores;
}
