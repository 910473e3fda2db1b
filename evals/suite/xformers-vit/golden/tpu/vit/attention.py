import torch.nn as nn
import torch.nn.functional as F


class MemEffAttention(nn.Module):
    """Multi-head self-attention on PyTorch's scaled_dot_product_attention.

    The qkv projection is reshaped to [batch, seq, heads, head_dim]; SDPA takes
    [batch, heads, seq, head_dim], so q, k, v are transposed in and the output back.
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
        x = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            dropout_p=self.attn_drop if self.training else 0.0,
            scale=self.scale,
        ).transpose(1, 2)
        x = x.reshape(B, N, C)
        return self.proj_drop(self.proj(x))
