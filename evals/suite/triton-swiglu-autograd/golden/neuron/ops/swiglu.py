"""SwiGLU's gate, silu(a) * b.

Two Triton kernels (forward and backward) computed this on CUDA; Triton does not target
this device, so it is PyTorch, whose autograd gives the kernels' exact gradient:
d/da = dc * b * sigmoid(a) * (1 + a * (1 - sigmoid(a))), d/db = dc * silu(a).
"""
import torch
import torch.nn.functional as F


def silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b, elementwise; a and b are tensors of one shape."""
    return F.silu(a) * b
