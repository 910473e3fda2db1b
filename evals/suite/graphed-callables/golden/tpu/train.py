"""Autoencoder trained eagerly, evaluated with a no-grad forward per validation batch.

There are no CUDA graphs on the target: the encoder and decoder run as plain modules
(torch.compile is the target's way to cut per-op overhead).
"""
import torch
import torch.nn as nn

BATCH, D_IN, D_CODE = 64, 48, 8


def make_data(n_batches, seed=0):
    g = torch.Generator().manual_seed(seed)
    basis = torch.randn(D_CODE, D_IN, generator=g)
    codes = torch.randn(n_batches, BATCH, D_CODE, generator=g)
    return torch.tanh(codes @ basis) + 0.01 * torch.randn(n_batches, BATCH, D_IN, generator=g)


def main():
    torch.manual_seed(0)
    device = torch.device("tpu")
    encoder = nn.Sequential(nn.Linear(D_IN, 32), nn.ReLU(), nn.Linear(32, D_CODE)).to(device)
    decoder = nn.Sequential(nn.Linear(D_CODE, 32), nn.ReLU(), nn.Linear(32, D_IN)).to(device)

    params = list(encoder.parameters()) + list(decoder.parameters())
    optimizer = torch.optim.Adam(params, lr=3e-3)
    train = make_data(40).to(device)
    for step, batch in enumerate(train):
        recon = decoder(encoder(batch))
        loss = nn.functional.mse_loss(recon, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:3d} loss {loss.item():.5f}")

    # evaluation: one no-grad forward per validation batch
    total = 0.0
    valid = make_data(8, seed=1).to(device)
    with torch.no_grad():
        for batch in valid:
            total += (decoder(encoder(batch)) - batch).pow(2).mean().item()
    print(f"validation mse {total / len(valid):.5f}")


if __name__ == "__main__":
    main()
