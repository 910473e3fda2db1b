import argparse

import torch
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm

from model import ResidualMLP


def make_teacher(d_in, n_classes, gen):
    """A fixed random two-layer network whose argmax labels the synthetic inputs."""
    w1 = torch.randn(d_in, 64, generator=gen) / d_in**0.5
    w2 = torch.randn(64, n_classes, generator=gen) / 8.0
    return lambda x: (torch.tanh(x @ w1) @ w2).argmax(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch_xla.device()

    model = ResidualMLP().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(args.seed)
    teacher = make_teacher(48, 10, gen)

    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch_size, 48, generator=gen)
        y = teacher(x)
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch_xla.sync()
        if step % 50 == 0:
            torch_xla.sync(wait=True)
            print(f"step {step:4d}  loss {loss.item():.4f}")

    info = xm.get_memory_info(device)
    peak = info.get("peak_bytes_used", info["bytes_used"])
    print(f"peak memory {peak / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
