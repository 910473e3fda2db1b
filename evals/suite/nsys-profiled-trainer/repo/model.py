"""A small transformer encoder over token ids, mean-pooled into class logits."""
import torch
import torch.nn as nn


class EncoderClassifier(nn.Module):
    def __init__(self, vocab, dim, heads, layers, classes, max_len=128):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, max_len, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
        return self.head(self.encoder(x).mean(dim=1))
