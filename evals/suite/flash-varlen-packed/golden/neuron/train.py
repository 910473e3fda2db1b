"""Train the packed LM: every step packs a fresh batch of variable-length documents.

No padding token is ever computed: the batch is one row of tokens delimited by cu_seqlens,
which the block-diagonal attention mask reads. bf16 autocast on the Trainium device.
"""
import time

import torch

from model import PackedLM
from packing import pack, sample_documents

vocab_size = 64
docs_per_step = 12
max_steps = 300
lr = 2e-3
seed = 0

torch.manual_seed(seed)
device = torch.device("neuron")

model = PackedLM(vocab_size=vocab_size).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
generator = torch.Generator().manual_seed(seed)

tokens_seen = 0
start = time.time()
for step in range(max_steps):
    docs = sample_documents(generator, docs_per_step, vocab_size)
    inputs, targets, positions, cu_seqlens, max_seqlen = pack(docs)
    inputs = inputs.to(device, non_blocking=True)
    targets = targets.to(device, non_blocking=True)
    positions = positions.to(device, non_blocking=True)
    cu_seqlens = cu_seqlens.to(device, non_blocking=True)

    with torch.autocast(device_type="neuron", dtype=torch.bfloat16):
        _, loss = model(inputs, positions, cu_seqlens, max_seqlen, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    tokens_seen += inputs.numel()

    if step % 20 == 0:
        torch.accelerator.synchronize()
        rate = tokens_seen / (time.time() - start)
        peak = torch.accelerator.memory.max_memory_allocated() / 2**20
        print(f"step {step} loss {loss.item():.4f} | {rate:.0f} tok/s | peak {peak:.0f} MiB")

torch.save(model.state_dict(), "packed_lm.pt")
