"""Character-level GPT trained with activation checkpointing and gradient accumulation.

Effective batch = MICRO_BATCH * ACCUM_STEPS sequences; every transformer block's
activations are recomputed during backward to fit longer contexts on one GPU.
"""

import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla

# torch_xla's checkpoint puts an optimization barrier around the saved inputs, so the XLA
# compiler cannot fold the recomputation back into the forward pass (reentrant only).
from torch_xla.utils.checkpoint import checkpoint

BLOCK_SIZE = 64
N_LAYER, N_HEAD, N_EMBD = 4, 4, 128
DROPOUT = 0.1
MICRO_BATCH = 8
ACCUM_STEPS = 4
MAX_STEPS = 60
LR = 1e-3
EMPTY_CACHE_EVERY = 10
LOG_EVERY = 5

device = torch_xla.device()
torch.manual_seed(1337)
random.seed(1337)

# A synthetic corpus: sentences from a tiny grammar, so the script needs no download.
SUBJECTS = ["the cat", "a dog", "my friend", "the old sailor", "every student"]
VERBS = ["sees", "likes", "paints", "follows", "remembers"]
OBJECTS = ["the moon", "a red boat", "the quiet river", "two birds", "the map"]
text = " ".join(
    f"{random.choice(SUBJECTS)} {random.choice(VERBS)} {random.choice(OBJECTS)}." for _ in range(4000)
)
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)


def get_batch():
    ix = torch.randint(len(data) - BLOCK_SIZE - 1, (MICRO_BATCH,))
    x = torch.stack([data[i : i + BLOCK_SIZE] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + BLOCK_SIZE] for i in ix])
    x = x.to(device)
    y = y.to(device)
    return x, y


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(N_EMBD)
        self.qkv = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.proj = nn.Linear(N_EMBD, N_EMBD)
        self.ln2 = nn.LayerNorm(N_EMBD)
        self.mlp = nn.Sequential(
            nn.Linear(N_EMBD, 4 * N_EMBD), nn.GELU(), nn.Linear(4 * N_EMBD, N_EMBD), nn.Dropout(DROPOUT)
        )

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, grad_checkpointing=True):
        super().__init__()
        self.grad_checkpointing = grad_checkpointing
        self.tok = nn.Embedding(vocab_size, N_EMBD)
        self.pos = nn.Embedding(BLOCK_SIZE, N_EMBD)
        self.blocks = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.head = nn.Linear(N_EMBD, vocab_size, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            if self.grad_checkpointing and self.training:
                x = checkpoint(block, x)
            else:
                x = block(x)
        return self.head(self.ln_f(x))


model = GPT(len(chars)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, vocab {len(chars)}")

for step in range(MAX_STEPS):
    t0 = time.time()
    for micro_step in range(ACCUM_STEPS):
        x, y = get_batch()
        with torch.autocast(device_type="xla", dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        (loss / ACCUM_STEPS).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch_xla.sync()

    if step % LOG_EVERY == 0:
        print(f"step {step:3d} loss {loss.item():.4f} ({(time.time() - t0) * 1e3:.0f} ms)")
