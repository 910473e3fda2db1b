"""Train a tiny decoder LM on a synthetic Markov-chain corpus.

    python train.py --steps 200 --batch-size 8 --seq-len 16
"""
import argparse
import time

import torch
import torch.nn.functional as F

from model import TinyLM

VOCAB = 48


def markov_corpus(n_tokens: int, seed: int) -> torch.Tensor:
    """Tokens drawn from a sparse random transition table: learnable structure."""
    gen = torch.Generator().manual_seed(seed)
    table = torch.rand(VOCAB, VOCAB, generator=gen).pow(8)
    table = table / table.sum(-1, keepdim=True)
    tokens = torch.empty(n_tokens, dtype=torch.long)
    tokens[0] = 0
    for i in range(1, n_tokens):
        tokens[i] = torch.multinomial(table[tokens[i - 1]], 1, generator=gen)
    return tokens


def batches(corpus: torch.Tensor, batch_size: int, seq_len: int, device):
    while True:
        starts = torch.randint(0, corpus.numel() - seq_len - 1, (batch_size,))
        chunk = torch.stack([corpus[s : s + seq_len + 1] for s in starts.tolist()])
        yield chunk[:, :-1].to(device, non_blocking=True), chunk[:, 1:].to(device, non_blocking=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda")
    model = TinyLM(VOCAB).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    data = batches(markov_corpus(5_000, args.seed), args.batch_size, args.seq_len, device)

    t0 = time.time()
    for step in range(1, args.steps + 1):
        tokens, targets = next(data)
        logits = model(tokens)
        loss = F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 20 == 0:
            torch.cuda.synchronize()
            print(f"step {step}: loss {loss.item():.4f} ({(time.time() - t0) / step * 1e3:.1f} ms/step)")


if __name__ == "__main__":
    main()
