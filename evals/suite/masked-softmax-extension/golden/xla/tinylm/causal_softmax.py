"""Causal scaled softmax for attention scores, in plain PyTorch.

The C++/CUDA extension in csrc/ (one block per row, shared-memory max and sum) is
replaced by the same function: scale, mask key j > query i with -inf, softmax over the
keys. Autograd's gradient is the backward kernel's formula (masked keys get 0).
"""
import torch


def causal_softmax(scores, scale):
    """softmax(scale * scores) over the last dim, with key j > query i masked out."""
    seq = scores.size(-1)
    future = torch.ones(seq, seq, dtype=torch.bool, device=scores.device).triu(1)
    return (scores * scale).masked_fill(future, float("-inf")).softmax(dim=-1)
