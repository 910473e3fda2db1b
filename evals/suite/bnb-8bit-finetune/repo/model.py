"""Bag-of-embeddings text classifier: token embeddings, mean pooling, a small MLP head."""
import torch
import torch.nn as nn


class TextClassifier(nn.Module):
    def __init__(self, vocab_size=2048, dim=64, hidden=128, n_classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.head = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, n_classes))

    def forward(self, tokens, mask):
        x = self.embed(tokens) * mask.unsqueeze(-1)
        pooled = x.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return self.head(pooled)
