"""Fine-tune a text classifier with torch.optim (fp32 optimizer state).

bitsandbytes' 8-bit state has no kernels here: the optimizers keep fp32 moments, 4x the
optimizer memory of 8-bit Adam.

    python train.py --optim adamw8bit     # default
    python train.py --optim paged --lr 3e-4
"""
import argparse

import torch
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm

from model import TextClassifier


def make_batch(gen, batch_size, seq_len, vocab_size, n_classes):
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len), generator=gen)
    lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,), generator=gen)
    mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).float()
    labels = tokens[:, 0] % n_classes
    return tokens, mask, labels


def build_optimizer(args, model):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": args.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if args.optim in ("adamw8bit", "paged"):
        return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), eps=1e-6)
    # bitsandbytes' SGD ignores nesterov: plain momentum is what it computed
    return torch.optim.SGD(groups, args.lr, momentum=0.9)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--optim", choices=["adamw8bit", "paged", "sgd8bit"], default="adamw8bit")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = TextClassifier().to(device)
    optimizer = build_optimizer(args, model)

    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        tokens, mask, labels = make_batch(gen, args.batch_size, 24, 2048, 4)
        tokens, mask, labels = tokens.to(device), mask.to(device), labels.to(device)
        loss = F.cross_entropy(model(tokens, mask), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        if step % 20 == 0:
            mib = xm.get_memory_info(device)["bytes_used"] / 2**20
            print(f"step {step:4d} loss {loss.item():.4f} peak {mib:.1f} MiB")


if __name__ == "__main__":
    main()
