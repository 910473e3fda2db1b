"""Causal scaled softmax for attention scores: the C++/CUDA extension in csrc/ on NVIDIA
GPUs, plain PyTorch on every other device.

On CUDA machines the extension is built on first import with
torch.utils.cpp_extension.load (needs nvcc and ninja); the build is cached under
~/.cache/torch_extensions. Elsewhere the same function is computed with a -inf mask.
"""
import os

import torch
from torch.utils.cpp_extension import load

_CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "csrc")

_ext = None
if torch.cuda.is_available():
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
    if _ext is not None and scores.is_cuda:
        return CausalSoftmax.apply(scores, scale)
    seq = scores.size(-1)
    future = torch.ones(seq, seq, dtype=torch.bool, device=scores.device).triu(1)
    return (scores * scale).masked_fill(future, float("-inf")).softmax(dim=-1)
