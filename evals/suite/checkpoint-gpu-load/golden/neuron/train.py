"""Imbalanced 4-class classifier with periodic checkpoints and resume.

Each time a checkpoint is written the job throws its model and optimizer away
and resumes from disk, exactly as it would after a preemption on the cluster.

    python train.py --steps 600 --ckpt-every 200
"""
import argparse
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

from checkpoint import load_checkpoint, save_checkpoint

N_FEATURES = 20
N_CLASSES = 4


def make_data(n=4000):
    priors = torch.tensor([0.55, 0.25, 0.15, 0.05])
    y = torch.multinomial(priors, n, replacement=True)
    centers = 2.0 * torch.randn(N_CLASSES, N_FEATURES)
    x = centers[y] + torch.randn(n, N_FEATURES)
    return x, y


def build(lr, device):
    model = nn.Sequential(
        nn.Linear(N_FEATURES, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, N_CLASSES)
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    return model, optimizer


def train(model, optimizer, x, y, class_weights, start, stop, batch_size):
    model.train()
    for step in range(start, stop):
        idx = torch.randint(0, len(x), (batch_size,), device=x.device)
        loss = F.cross_entropy(model(x[idx]), y[idx], weight=class_weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % 50 == 0:
            print(f"step {step + 1:4d}  loss {loss.item():.4f}")
    return stop


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--ckpt-every", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "neuron"

    x, y = make_data()
    x, y = x.to(device), y.to(device)
    # inverse-frequency class weights; saved with the checkpoint so a resumed run uses the same ones
    counts = torch.bincount(y, minlength=N_CLASSES).float()
    class_weights = counts.sum() / (N_CLASSES * counts)

    model, optimizer = build(args.lr, device)
    with tempfile.TemporaryDirectory() as ckpt_dir:
        path = os.path.join(ckpt_dir, "last.pt")
        step = 0
        while step < args.steps:
            stop = min(step + args.ckpt_every, args.steps)
            step = train(model, optimizer, x, y, class_weights, step, stop, args.batch_size)
            save_checkpoint(path, model, optimizer, step, class_weights=class_weights)

            # simulate the preemption: drop everything and come back from the checkpoint
            del model, optimizer, class_weights
            model, optimizer = build(args.lr, device)
            step, ckpt = load_checkpoint(path, model, optimizer)
            class_weights = ckpt["class_weights"]
            print(f"resumed at step {step}")


if __name__ == "__main__":
    main()
