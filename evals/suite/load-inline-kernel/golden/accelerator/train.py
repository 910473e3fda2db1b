import time

import torch
import torch.nn.functional as F

from model import FeedForwardNet

CONFIG = dict(steps=300, batch_size=256, lr=2e-3, d_in=32, d_out=8, log_every=25, seed=0)


def synthetic_batch(batch_size, d_in, d_out, gen):
    x = torch.randn(batch_size, d_in, generator=gen)
    # a fixed nonlinear target: sums of products of input pairs
    y = (x[:, :d_out] * x[:, d_out : 2 * d_out]).tanh() + 0.05 * torch.randn(batch_size, d_out, generator=gen)
    return x, y


def main(cfg=CONFIG):
    torch.manual_seed(cfg["seed"])
    torch.accelerator.set_device_index(0)
    device = torch.device(torch.accelerator.current_accelerator().type, 0)

    model = FeedForwardNet(d_in=cfg["d_in"], d_out=cfg["d_out"]).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    gen = torch.Generator().manual_seed(cfg["seed"])

    torch.accelerator.synchronize()
    start = time.perf_counter()
    for step in range(1, cfg["steps"] + 1):
        x, y = synthetic_batch(cfg["batch_size"], cfg["d_in"], cfg["d_out"], gen)
        x, y = x.to(device), y.to(device)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % cfg["log_every"] == 0:
            torch.accelerator.synchronize()
            ms = (time.perf_counter() - start) * 1000.0 / cfg["log_every"]
            print(f"step {step:4d}  loss {loss.item():.5f}  {ms:.2f} ms/step")
            start = time.perf_counter()


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"total {time.time() - t0:.1f}s")
