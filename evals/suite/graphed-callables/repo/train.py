"""Autoencoder whose encoder and decoder are CUDA-graphed callables, with a graph-captured
evaluation step.

make_graphed_callables captures each module's forward and backward once (on sample
inputs); afterwards every call replays the graphs, removing per-kernel launch overhead
from the small layers. Evaluation runs one captured forward over static input buffers.
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
    device = torch.device("cuda")
    encoder = nn.Sequential(nn.Linear(D_IN, 32), nn.ReLU(), nn.Linear(32, D_CODE)).to(device)
    decoder = nn.Sequential(nn.Linear(D_CODE, 32), nn.ReLU(), nn.Linear(32, D_IN)).to(device)

    sample = torch.randn(BATCH, D_IN, device=device, requires_grad=True)
    code_sample = torch.randn(BATCH, D_CODE, device=device, requires_grad=True)
    encoder, decoder = torch.cuda.make_graphed_callables(
        (encoder, decoder), ((sample,), (code_sample,))
    )

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

    # evaluation: one captured forward, replayed over the validation batches
    static_batch = torch.zeros(BATCH, D_IN, device=device)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad():
        with torch.cuda.graph(graph):
            static_err = (decoder(encoder(static_batch)) - static_batch).pow(2).mean()
    total = 0.0
    valid = make_data(8, seed=1).to(device)
    for batch in valid:
        static_batch.copy_(batch)
        graph.replay()
        total += static_err.item()
    print(f"validation mse {total / len(valid):.5f}")


if __name__ == "__main__":
    main()
