import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from kernels import fused_add_rms_norm


class RMSNormWeight(nn.Module):
    """Holds an RMSNorm's scale; the fused kernel applies it."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x, residual):
        return fused_add_rms_norm(x, residual, self.weight, self.eps)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = RMSNormWeight(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = RMSNormWeight(dim)
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)
        nn.init.normal_(self.proj.weight, std=0.02 / math.sqrt(2))
        nn.init.normal_(self.down.weight, std=0.02 / math.sqrt(2))

    def forward(self, hidden, residual):
        x, residual = self.norm1(hidden, residual)
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        hidden = self.proj(attn.transpose(1, 2).reshape(B, T, C))
        x, residual = self.norm2(hidden, residual)
        return self.down(F.gelu(self.up(x))), residual


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int = 32, heads: int = 2, layers: int = 2, ctx: int = 64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, ctx, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = RMSNormWeight(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, tokens):
        hidden = self.embed(tokens) + self.pos[:, : tokens.size(1)]
        residual = torch.zeros_like(hidden)
        for block in self.blocks:
            hidden, residual = block(hidden, residual)
        x, _ = self.norm(hidden, residual)
        return self.head(x)
