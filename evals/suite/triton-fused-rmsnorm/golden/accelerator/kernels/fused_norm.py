"""Fused residual add + RMSNorm, the pre-norm step of every decoder block.

A Triton kernel fused these on CUDA; Triton does not target this device, so it is written
in PyTorch (the device's compiler fuses the elementwise work), with autograd's exact
gradient in place of the hand-written backward.
"""
import torch


def fused_add_rms_norm(x, residual, weight, eps: float = 1e-6):
    """(RMSNorm(x + residual) * weight, x + residual) for tensors of any leading shape."""
    h = x + residual
    rstd = torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + eps)
    return (h.float() * rstd * weight.float()).to(x.dtype), h
