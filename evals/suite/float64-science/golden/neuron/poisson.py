"""Poisson problem  -lap(u) = f  on the unit square, u = 0 on the boundary.

Instead of assembling and factorising the 5-point matrix we minimise the
discrete Dirichlet energy

    E(u) = 1/2 h^2 sum |grad_h u|^2  -  h^2 sum f u

with a first-order optimiser: the same code path we use for the nonlinear
(p-Laplacian) variants, where no direct solver applies. The manufactured
solution u* = sin(pi x) sin(pi y) gives f = 2 pi^2 u*, so the error of the
iterate can be checked directly.
"""
import math
import time

import torch
import torch.nn.functional as F

CONFIG = {
    "n": 63,                  # interior points per side, h = 1 / (n + 1)
    "device": "neuron",
    # no float64 on the device; fp32 round-off (~1e-7) stays far below the O(h^2) ~ 2e-4 error
    "dtype": torch.float32,
    "lr": 2e-2,
    "iters": 3000,
    "log_every": 250,
    "seed": 0,
}


def make_grid(n, device, dtype):
    h = 1.0 / (n + 1)
    x = torch.linspace(h, 1.0 - h, n, device=device, dtype=dtype)
    X, Y = torch.meshgrid(x, x, indexing="ij")
    return X, Y, h


def exact_solution(X, Y):
    return torch.sin(math.pi * X) * torch.sin(math.pi * Y)


def dirichlet_energy(u, f, h):
    up = F.pad(u, (1, 1, 1, 1))  # zero Dirichlet boundary
    du_dx = (up[1:, 1:-1] - up[:-1, 1:-1]) / h
    du_dy = (up[1:-1, 1:] - up[1:-1, :-1]) / h
    return 0.5 * h**2 * (du_dx.pow(2).sum() + du_dy.pow(2).sum()) - h**2 * (f * u).sum()


def solve(cfg):
    torch.manual_seed(cfg["seed"])
    X, Y, h = make_grid(cfg["n"], cfg["device"], cfg["dtype"])
    u_star = exact_solution(X, Y)
    f = 2 * math.pi**2 * u_star

    # initial guess: the bubble function 16 x(1-x) y(1-y), already zero on the boundary
    u = (16 * X * (1 - X) * Y * (1 - Y)).requires_grad_()
    optimizer = torch.optim.Adam([u], lr=cfg["lr"])
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg["iters"])

    t0 = time.perf_counter()
    for it in range(1, cfg["iters"] + 1):
        optimizer.zero_grad()
        energy = dirichlet_energy(u, f, h)
        energy.backward()
        optimizer.step()
        scheduler.step()

        if it % cfg["log_every"] == 0 or it == 1:
            with torch.no_grad():
                err = (u - u_star).abs().max().item()
            print(f"iter {it:5d}  E = {energy.item(): .12e}  max|u - u*| = {err:.3e}  "
                  f"({time.perf_counter() - t0:.1f}s)")

    # the continuous energy of u* is -pi^2 / 4
    print(f"final energy {dirichlet_energy(u.detach(), f, h).item():.10f}  (continuum {-math.pi**2 / 4:.10f})")
    return u.detach()


if __name__ == "__main__":
    solve(CONFIG)
