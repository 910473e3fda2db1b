"""Denoising autoencoder whose training resumes bit-exactly from a checkpoint.

Every random stream is seeded and saved with the weights: Python, NumPy, the CPU and CUDA
generators, and the dedicated CUDA generator that draws the input corruption noise.
"""

import argparse
import os
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def capture_rng_state(noise_gen: torch.Generator) -> dict:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.get_rng_state(),
        "tpu": torch.tpu.default_generators[0].get_state(),
        "noise": noise_gen.get_state(),
    }


def restore_rng_state(state: dict, noise_gen: torch.Generator) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["cpu"].cpu())
    torch.tpu.set_rng_state(state["tpu"].cpu())
    noise_gen.set_state(state["noise"].cpu())


class DAE(nn.Module):
    def __init__(self, dim=64, hidden=128, code=16, p_drop=0.2):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(p_drop), nn.Linear(hidden, code))
        self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.ReLU(), nn.Linear(hidden, dim), nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--sigma", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ckpt", default="dae_last.pt")
    parser.add_argument("--save-every", type=int, default=2)
    args = parser.parse_args()

    device = torch.device("tpu")
    seed_everything(args.seed)
    noise_gen = torch.Generator(device="tpu")
    noise_gen.manual_seed(args.seed + 1)

    # Smooth random curves in [0, 1]: sums of a few sinusoids with random phases.
    t = np.linspace(0, 2 * np.pi, 64, dtype=np.float32)
    phases = np.random.uniform(0, 2 * np.pi, size=(2048, 3)).astype(np.float32)
    curves = sum(np.sin((k + 1) * t[None, :] + phases[:, k : k + 1]) for k in range(3))
    data = torch.from_numpy((curves - curves.min()) / (curves.max() - curves.min()))

    model = DAE().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start_step = 0
    if os.path.exists(args.ckpt):
        ckpt = torch.load(args.ckpt, map_location="cpu", weights_only=False)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        restore_rng_state(ckpt["rng"], noise_gen)
        start_step = ckpt["step"]
        print(f"resumed from {args.ckpt} at step {start_step}")

    for step in range(start_step, args.steps):
        idx = torch.randint(0, data.size(0), (args.batch_size,))
        clean = data[idx].to(device)
        noisy = clean + args.sigma * torch.randn(clean.shape, device=device, generator=noise_gen)
        loss = F.mse_loss(model(noisy.clamp(0, 1)), clean)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % args.save_every == 0:
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": capture_rng_state(noise_gen),
                "step": step + 1,
            }
            torch.save(state, args.ckpt)
        if step % 25 == 0:
            print(f"step {step:4d} reconstruction mse {loss.item():.5f}")


if __name__ == "__main__":
    main()
