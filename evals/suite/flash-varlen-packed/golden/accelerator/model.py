"""A small causal LM over packed sequences: attention is SDPA with a block-diagonal mask."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def packed_causal_mask(cu_seqlens, total):
    """(total, total) bool: token i attends to token j of its own document, j <= i.

    The same attention flash-attn's varlen kernel computes from cu_seqlens: documents
    never see each other, and each is causal on its own.
    """
    idx = torch.arange(total, device=cu_seqlens.device)
    doc = torch.searchsorted(cu_seqlens[1:], idx, right=True)
    return (doc[:, None] == doc[None, :]) & (idx[None, :] <= idx[:, None])


class PackedSelfAttention(nn.Module):
    def __init__(self, dim, n_head, dropout=0.0):
        super().__init__()
        self.n_head = n_head
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cu_seqlens, max_seqlen):
        total, dim = x.shape
        # (total_tokens, 3, nheads, headdim); SDPA takes (nheads, total_tokens, headdim)
        qkv = self.qkv(x).view(total, 3, self.n_head, dim // self.n_head)
        q, k, v = qkv.transpose(0, 2).unbind(1)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=packed_causal_mask(cu_seqlens, total),
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.proj(y.transpose(0, 1).reshape(total, dim))


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
