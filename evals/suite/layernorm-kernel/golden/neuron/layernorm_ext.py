"""LayerNorm over the last dimension in plain PyTorch.

The JIT-compiled CUDA kernels (load_inline: block reductions for the row mean and
variance, and for the input gradient's two row sums) are replaced by F.layer_norm, which
computes the same normalisation; autograd gives the gradients the hand-written backward
kernels computed, and the target's compiler fuses what it can.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class FusedLayerNorm(nn.Module):
    """Drop-in for nn.LayerNorm over the last dimension (same parameters and state dict)."""

    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        self.normalized_shape = normalized_shape
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return F.layer_norm(x, (self.normalized_shape,), self.weight, self.bias, self.eps)
