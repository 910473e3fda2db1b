"""A small causal LM over packed sequences: attention is flash-attn's varlen kernel."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from flash_attn import flash_attn_varlen_qkvpacked_func


class PackedSelfAttention(nn.Module):
    def __init__(self, dim, n_head, dropout=0.0):
        super().__init__()
        self.n_head = n_head
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cu_seqlens, max_seqlen):
        total, dim = x.shape
        # (total_tokens, 3, nheads, headdim): the layout the varlen kernel wants
        qkv = self.qkv(x).view(total, 3, self.n_head, dim // self.n_head)
        y = flash_attn_varlen_qkvpacked_func(
            qkv,
            cu_seqlens,
            max_seqlen,
            dropout_p=self.dropout if self.training else 0.0,
            causal=True,
        )
        return self.proj(y.reshape(total, dim))


class Block(nn.Module):
    def __init__(self, dim, n_head, dropout=0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = PackedSelfAttention(dim, n_head, dropout)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, cu_seqlens, max_seqlen):
        x = x + self.attn(self.ln_1(x), cu_seqlens, max_seqlen)
        return x + self.mlp(self.ln_2(x))


class PackedLM(nn.Module):
    def __init__(self, vocab_size=64, dim=96, n_head=4, n_layer=2, max_len=32, dropout=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList([Block(dim, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, tokens, positions, cu_seqlens, max_seqlen, targets=None):
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x, cu_seqlens, max_seqlen)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.float(), targets)
