"""Decoder layers on PyTorch's scaled_dot_product_attention.

The projections are shaped [batch, seq, heads, head_dim]; SDPA takes [batch, heads, seq,
head_dim], so q, k and v are transposed in and the output back.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    """Caption tokens attend to earlier caption tokens."""

    def __init__(self, dim, num_heads, attn_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).view(B, N, 3, self.num_heads, C // self.num_heads)
        q, k, v = qkv.unbind(2)
        x = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            dropout_p=self.attn_drop if self.training else 0.0,
            is_causal=True,  # self-attention: the same length, top-left = bottom-right
        ).transpose(1, 2)
        return self.proj(x.reshape(B, N, C))


class CrossAttention(nn.Module):
    """Caption tokens attend to image patches, with a learned (head, token, patch) bias
    added to the scores: the table is sized for the longest caption and the patch grid
    (16 patches) and sliced per batch.
    """

    def __init__(self, dim, num_heads, max_tokens, num_patches, attn_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.attn_drop = attn_drop
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        self.rel_bias = nn.Parameter(torch.zeros(num_heads, max_tokens, num_patches))

    def forward(self, x, patches):
        B, N, C = x.shape
        M = patches.shape[1]
        q = self.q(x).view(B, N, self.num_heads, C // self.num_heads)
        k, v = self.kv(patches).view(B, M, 2, self.num_heads, C // self.num_heads).unbind(2)
        bias = self.rel_bias[:, :N, :M].unsqueeze(0)  # broadcast over the batch
        x = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=bias,
            dropout_p=self.attn_drop if self.training else 0.0,
        ).transpose(1, 2)
        return self.proj(x.reshape(B, N, C))
