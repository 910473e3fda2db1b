"""Masked-token pretraining on variable-length sequences (a toy BERT objective).

Every batch is padded to one fixed length; 15% of the real tokens are masked and only
those positions are scored. Per-token losses are weighted so that every sequence
contributes equally, however many of its tokens were masked.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla

PAD, MASK = 0, 1
device = torch_xla.device()


class TinyMLM(nn.Module):
    def __init__(self, vocab: int, d_model: int = 64, max_len: int = 64):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, 4, 2 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.lm_head = nn.Linear(d_model, vocab)

    def forward(self, tokens, padding):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        h = self.embed(tokens) + self.pos(positions)
        return self.lm_head(self.encoder(h, src_key_padding_mask=padding))


def make_batch(batch_size, min_len, max_len, vocab):
    """Random sequences of random length, right-padded to max_len (a static shape for XLA)."""
    lengths = torch.randint(min_len, max_len + 1, (batch_size,))
    tokens = torch.full((batch_size, max_len), PAD, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        tokens[i, :n] = torch.randint(2, vocab, (n,))
    return tokens.to(device)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=128)
    parser.add_argument("--mask-prob", type=float, default=0.15)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = TinyMLM(args.vocab).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    mask_time = 0.0

    for step in range(args.steps):
        tokens = make_batch(args.batch_size, 8, 48, args.vocab)

        torch_xla.sync(wait=True)
        start = time.perf_counter()
        real = tokens != PAD
        masked = real & (torch.rand(tokens.shape, device=device) < args.mask_prob)
        # Static shapes: weight every position (0 where unmasked) instead of selecting.
        per_sequence = masked.sum(dim=1, keepdim=True)
        weights = masked.float() / per_sequence.clamp(min=1).float()
        seen = torch.zeros(args.vocab, device=device)
        seen.index_add_(0, tokens.flatten(), real.flatten().float())
        n_unique = (seen > 0).sum()
        torch_xla.sync(wait=True)
        mask_time += time.perf_counter() - start

        logits = model(tokens.masked_fill(masked, MASK), padding=~real)
        token_loss = F.cross_entropy(logits.transpose(1, 2), tokens, reduction="none")
        loss = (weights * token_loss).sum() / weights.sum()

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        if step % 20 == 0:
            print(
                f"step {step:3d} loss {loss.item():.4f} masked {int(masked.sum()):3d} "
                f"distinct tokens {int(n_unique):3d} masking {1e3 * mask_time / (step + 1):.2f} ms/step"
            )


if __name__ == "__main__":
    main()
