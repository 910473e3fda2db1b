"""Train a tiny GPT on a synthetic character stream (nanoGPT-style loop).

The forward pass runs under bf16 autocast on the TPU.
"""
import time

import torch

from model import GPT, GPTConfig

# -----------------------------------------------------------------------------
batch_size = 16
max_iters = 200
learning_rate = 3e-3
weight_decay = 0.1
log_interval = 10
device = "tpu"
seed = 1337
# -----------------------------------------------------------------------------

torch.manual_seed(seed)
device_type = "tpu" if "tpu" in device else "cpu"
ctx = torch.autocast(device_type=device_type, dtype=torch.bfloat16)

config = GPTConfig()


def make_corpus(n_tokens=20_000):
    """A noisy periodic token stream: learnable, but not trivially."""
    g = torch.Generator().manual_seed(seed)
    base = torch.arange(n_tokens) % 17 + (torch.arange(n_tokens) // 97) % 5
    noise = torch.randint(0, config.vocab_size, (n_tokens,), generator=g)
    keep = torch.rand(n_tokens, generator=g) < 0.9
    return torch.where(keep, base, noise)


data = make_corpus()


def get_batch():
    ix = torch.randint(len(data) - config.block_size, (batch_size,))
    x = torch.stack([data[i : i + config.block_size] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + config.block_size] for i in ix])
    if device_type == "tpu":
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


model = GPT(config).to(device)
optimizer = torch.optim.AdamW(
    model.parameters(), lr=learning_rate, betas=(0.9, 0.95), weight_decay=weight_decay
)

t0 = time.time()
for it in range(max_iters):
    X, Y = get_batch()
    with ctx:
        logits, loss = model(X, Y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()

    if it % log_interval == 0:
        torch.accelerator.synchronize()
        dt = time.time() - t0
        t0 = time.time()
        tok_s = batch_size * config.block_size * (log_interval if it else 1) / dt
        print(f"iter {it}: loss {loss.item():.4f}, {tok_s:,.0f} tok/s")
