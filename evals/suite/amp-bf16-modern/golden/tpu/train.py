"""Tiny causal language model trained with bf16 autocast.

Everything is configured through CONFIG below; run with `python train.py`.
Data is a synthetic token stream with a repeating structure so the loss
actually goes down.
"""
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {
    "device": "tpu",
    "seed": 1234,
    "vocab_size": 128,
    "d_model": 64,
    "n_heads": 4,
    "n_layers": 2,
    "seq_len": 32,
    "batch_size": 16,
    "lr": 3e-4,
    "weight_decay": 0.1,
    "grad_clip": 1.0,
    "max_steps": 300,
    "log_interval": 25,
}


class TinyLM(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, seq_len):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Parameter(torch.zeros(1, seq_len, d_model))
        layer = nn.TransformerEncoderLayer(
            d_model, n_heads, dim_feedforward=4 * d_model, dropout=0.0,
            activation="gelu", batch_first=True, norm_first=True,
        )
        self.blocks = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.register_buffer(
            "causal_mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False
        )

    def forward(self, idx):
        t = idx.size(1)
        x = self.tok_emb(idx) + self.pos_emb[:, :t]
        x = self.blocks(x, mask=self.causal_mask[:t, :t], is_causal=True)
        return self.head(self.ln_f(x))


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        torch.manual_seed(cfg["seed"])
        self.device = torch.device(cfg["device"])

        self.model = TinyLM(
            cfg["vocab_size"], cfg["d_model"], cfg["n_heads"], cfg["n_layers"], cfg["seq_len"]
        ).to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"]
        )

        # "corpus": a noisy periodic sequence, kept on the GPU
        n_tokens = 20_000
        base = torch.arange(n_tokens) % 17 * 7 % cfg["vocab_size"]
        noise = torch.randint(0, cfg["vocab_size"], (n_tokens,))
        keep = torch.rand(n_tokens) < 0.9
        self.tokens = torch.where(keep, base, noise).to(self.device)

    def get_batch(self):
        cfg = self.cfg
        starts = torch.randint(0, self.tokens.numel() - cfg["seq_len"] - 1, (cfg["batch_size"],))
        offsets = torch.arange(cfg["seq_len"])
        idx = (starts[:, None] + offsets[None, :]).to(self.device)
        return self.tokens[idx], self.tokens[idx + 1]

    def train_step(self, x, y):
        self.model.train()
        with torch.amp.autocast("tpu", dtype=torch.bfloat16):
            logits = self.model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # bf16 autocast: no loss scaling needed
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg["grad_clip"])
        self.optimizer.step()
        return loss.detach()

    def fit(self):
        t0 = time.time()
        for step in range(1, self.cfg["max_steps"] + 1):
            x, y = self.get_batch()
            loss = self.train_step(x, y)
            if step % self.cfg["log_interval"] == 0:
                loss = loss.item()
                print(f"step {step:4d}  loss {loss:.4f}  ppl {math.exp(loss):8.2f}  "
                      f"{time.time() - t0:.1f}s")


if __name__ == "__main__":
    Trainer(CONFIG).fit()
