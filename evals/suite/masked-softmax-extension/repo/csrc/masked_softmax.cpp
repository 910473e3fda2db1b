// Python bindings for the causal scaled softmax kernels (masked_softmax_kernel.cu).
#include <torch/extension.h>

#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) \
  CHECK_CUDA(x);       \
  CHECK_CONTIGUOUS(x)

torch::Tensor causal_softmax_forward_cuda(torch::Tensor scores, double scale);
torch::Tensor causal_softmax_backward_cuda(torch::Tensor grad, torch::Tensor probs,
                                           double scale);

// scores: [..., queries, keys] with queries == keys; key j > query i is masked out.
torch::Tensor causal_softmax_forward(torch::Tensor scores, double scale) {
  CHECK_INPUT(scores);
  TORCH_CHECK(scores.dim() >= 2 && scores.size(-1) == scores.size(-2),
              "scores must be [..., seq, seq]");
  return causal_softmax_forward_cuda(scores, scale);
}

torch::Tensor causal_softmax_backward(torch::Tensor grad, torch::Tensor probs, double scale) {
  CHECK_INPUT(grad);
  CHECK_INPUT(probs);
  return causal_softmax_backward_cuda(grad, probs, scale);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &causal_softmax_forward, "causal scaled softmax (CUDA)");
  m.def("backward", &causal_softmax_backward, "its gradient (CUDA)");
}
