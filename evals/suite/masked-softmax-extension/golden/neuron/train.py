"""Train a tiny causal LM on a synthetic copy-with-offset language."""
import argparse
import time

import torch

from tinylm import TinyLM


def batch(gen, batch_size, seq_len, vocab):
    """Sequences whose second half repeats the first half shifted by one token id."""
    half = torch.randint(0, vocab, (batch_size, seq_len // 2 + 1), generator=gen)
    seq = torch.cat([half, (half[:, 1:] + 1) % vocab], dim=1)[:, : seq_len + 1]
    return seq[:, :-1], seq[:, 1:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "neuron"
    model = TinyLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(0)

    torch.accelerator.synchronize()
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        idx, targets = (t.to(device) for t in batch(gen, args.batch_size, 32, 64))
        _, loss = model(idx, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            torch.accelerator.synchronize()
            ms = (time.perf_counter() - start) * 1000.0 / 50
            print(f"step {step}  loss {loss.item():.4f}  {ms:.1f} ms/step")
            start = time.perf_counter()


if __name__ == "__main__":
    main()
