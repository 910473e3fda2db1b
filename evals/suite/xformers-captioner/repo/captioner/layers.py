"""Decoder layers on xformers' memory-efficient attention ([batch, seq, heads, head_dim])."""
import torch
import torch.nn as nn
import xformers.ops as xops


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
        q, k, v = xops.unbind(qkv, 2)
        x = xops.memory_efficient_attention(
            q,
            k,
            v,
            attn_bias=xops.LowerTriangularMask(),
            p=self.attn_drop if self.training else 0.0,
        )
        return self.proj(x.reshape(B, N, C))


class CrossAttention(nn.Module):
    """Caption tokens attend to image patches, with a learned (head, token, patch) bias.

    xformers wants the bias's last dimension allocated to a multiple of 8: the table is
    sized for the longest caption and the patch grid (16 patches) and sliced per batch.
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
        k, v = xops.unbind(self.kv(patches).view(B, M, 2, self.num_heads, C // self.num_heads), 2)
        bias = self.rel_bias[:, :N, :M].unsqueeze(0).expand(B, -1, -1, -1)
        x = xops.memory_efficient_attention(
            q, k, v, attn_bias=bias, p=self.attn_drop if self.training else 0.0
        )
        return self.proj(x.reshape(B, N, C))
