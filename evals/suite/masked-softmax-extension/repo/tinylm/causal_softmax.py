"""Causal scaled softmax for attention scores, from the C++/CUDA extension in csrc/.

Built on first import with torch.utils.cpp_extension.load (needs nvcc and ninja); the
build is cached under ~/.cache/torch_extensions.
"""
import os

import torch
from torch.utils.cpp_extension import load

_CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "csrc")

_ext = load(
    name="causal_softmax",
    sources=[
        os.path.join(_CSRC, "masked_softmax.cpp"),
        os.path.join(_CSRC, "masked_softmax_kernel.cu"),
    ],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3", "--use_fast_math", "-gencode=arch=compute_80,code=sm_80"],
    verbose=False,
)


class CausalSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, scale):
        probs = _ext.forward(scores.contiguous(), scale)
        ctx.save_for_backward(probs)
        ctx.scale = scale
        return probs

    @staticmethod
    def backward(ctx, grad):
        (probs,) = ctx.saved_tensors
        return _ext.backward(grad.contiguous(), probs, ctx.scale), None


def causal_softmax(scores, scale):
    """softmax(scale * scores) over the last dim, with key j > query i masked out."""
    return CausalSoftmax.apply(scores, scale)
