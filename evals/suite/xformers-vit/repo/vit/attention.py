import torch.nn as nn
import xformers.ops as xops


class MemEffAttention(nn.Module):
    """Multi-head self-attention on xformers' memory-efficient kernel.

    xformers takes [batch, seq, heads, head_dim] tensors, so the qkv projection is only
    reshaped, never permuted.
    """

    def __init__(self, dim, num_heads=8, qkv_bias=True, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        assert dim % num_heads == 0, "dim should be divisible by num_heads"
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.unbind(2)
        x = xops.memory_efficient_attention(
            q, k, v, p=self.attn_drop if self.training else 0.0, scale=self.scale
        )
        x = x.reshape(B, N, C)
        return self.proj_drop(self.proj(x))
