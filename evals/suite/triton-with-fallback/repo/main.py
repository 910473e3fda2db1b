"""Classify synthetic token sequences (does token 7 occur more often than token 3?).

    python main.py --epochs 3 --batch-size 32
"""
import argparse
import random

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from kernels import HAS_TRITON
from model import SequenceClassifier

VOCAB = 32


class CountingTask(Dataset):
    def __init__(self, n: int, max_len: int = 48, seed: int = 0):
        rng = random.Random(seed)
        self.items = []
        for _ in range(n):
            length = rng.randint(max_len // 2, max_len)
            seq = [rng.randrange(1, VOCAB) for _ in range(length)]
            label = int(seq.count(7) > seq.count(3))
            self.items.append((torch.tensor(seq + [0] * (max_len - length)), label))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def seed_everything(seed: int):
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    seed_everything(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device={device} triton={HAS_TRITON}")

    train_loader = DataLoader(CountingTask(2000, seed=args.seed), batch_size=args.batch_size, shuffle=True)
    model = SequenceClassifier(VOCAB).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        model.train()
        total, correct, running = 0, 0, 0.0
        for tokens, labels in train_loader:
            tokens, labels = tokens.to(device), labels.to(device)
            logits = model(tokens)
            loss = F.cross_entropy(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item() * labels.size(0)
            correct += (logits.argmax(-1) == labels).sum().item()
            total += labels.size(0)
        print(f"epoch {epoch}: loss {running / total:.4f} acc {correct / total:.3f}")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
