"""Masked-token pretraining on variable-length sequences (a toy BERT objective).

Each batch has its own padded length; 15% of the real tokens are masked and only
those positions are scored. Per-token losses are weighted so that every sequence
contributes equally, however many of its tokens were masked.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, MASK = 0, 1
device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")


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
    """Random sequences of random length, right-padded to the longest one in the batch."""
    lengths = torch.randint(min_len, max_len + 1, (batch_size,))
    tokens = torch.full((batch_size, int(lengths.max())), PAD, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        tokens[i, :n] = torch.randint(2, vocab, (n,))
    return tokens.to(device, non_blocking=True)


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

        if torch.accelerator.is_available():
            torch.accelerator.synchronize()
        start = time.perf_counter()
        real = tokens != PAD
        masked = real & (torch.rand(tokens.shape, device=device) < args.mask_prob)
        positions = masked.nonzero()  # (n_masked, 2): row, column
        per_sequence = torch.bincount(positions[:, 0], minlength=tokens.size(0))
        weights = 1.0 / per_sequence[positions[:, 0]].float()
        targets = tokens.masked_select(masked)
        n_unique = torch.unique(tokens[real]).numel()
        if torch.accelerator.is_available():
            torch.accelerator.synchronize()
        mask_time += time.perf_counter() - start

        logits = model(tokens.masked_fill(masked, MASK), padding=~real)
        token_loss = F.cross_entropy(logits[masked], targets, reduction="none")
        loss = (weights * token_loss).sum() / weights.sum()

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(
                f"step {step:3d} loss {loss.item():.4f} masked {positions.size(0):3d} "
                f"distinct tokens {n_unique:3d} masking {1e3 * mask_time / (step + 1):.2f} ms/step"
            )


if __name__ == "__main__":
    main()
