"""A tiny image captioner: patch embedding, then a causal decoder with cross-attention."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .layers import CausalSelfAttention, CrossAttention


class DecoderBlock(nn.Module):
    def __init__(self, dim, num_heads, max_tokens, num_patches):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = CausalSelfAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_attn = CrossAttention(dim, num_heads, max_tokens, num_patches)
        self.norm3 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, patches):
        x = x + self.self_attn(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), patches)
        return x + self.mlp(self.norm3(x))


class Captioner(nn.Module):
    def __init__(self, vocab_size=48, dim=64, num_heads=4, depth=2, image_size=16, patch=4, max_tokens=8):
        super().__init__()
        num_patches = (image_size // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.patch_pos = nn.Parameter(torch.randn(1, num_patches, dim) * 0.02)
        self.tok = nn.Embedding(vocab_size, dim)
        self.pos = nn.Parameter(torch.randn(1, max_tokens, dim) * 0.02)
        self.blocks = nn.ModuleList(
            [DecoderBlock(dim, num_heads, max_tokens, num_patches) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, images, tokens, targets):
        patches = self.patch_embed(images).flatten(2).transpose(1, 2) + self.patch_pos
        x = self.tok(tokens) + self.pos[:, : tokens.shape[1]]
        for block in self.blocks:
            x = block(x, patches)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
