"""Train a tiny transformer encoder with learnable class prototypes.

The encoder is optimised with fused AdamW (no weight decay on biases and norms); the
prototypes and their temperature with SGD, foreach implementation, one group each.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

CFG = {
    "vocab": 256,
    "d_model": 64,
    "heads": 4,
    "layers": 2,
    "seq_len": 32,
    "classes": 8,
    "batch_size": 32,
    "steps": 300,
    "lr": 3e-4,
    "proto_lr": 0.05,
    "weight_decay": 0.05,
    "clip": 1.0,
    "warmup": 30,
}

torch.manual_seed(0)
device = "tpu"


class Encoder(nn.Module):
    def __init__(self, vocab, d_model, heads, layers, seq_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=4 * d_model, dropout=0.1, batch_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, tokens):
        h = self.blocks(self.tok(tokens) + self.pos)
        return self.norm(h.mean(dim=1))


class PrototypeHead(nn.Module):
    def __init__(self, classes, d_model):
        super().__init__()
        self.prototypes = nn.Parameter(torch.randn(classes, d_model) / math.sqrt(d_model))
        self.log_scale = nn.Parameter(torch.tensor(math.log(10.0)))

    def forward(self, z):
        sims = F.normalize(z, dim=-1) @ F.normalize(self.prototypes, dim=-1).t()
        return self.log_scale.exp() * sims


def adamw_groups(module, weight_decay):
    decay, no_decay = [], []
    for name, p in module.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name or name == "pos" else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def batch(cfg):
    tokens = torch.randint(0, cfg["vocab"], (cfg["batch_size"], cfg["seq_len"]), device=device)
    labels = tokens[:, 0] % cfg["classes"]
    return tokens, labels


def main(cfg=CFG):
    encoder = Encoder(cfg["vocab"], cfg["d_model"], cfg["heads"], cfg["layers"], cfg["seq_len"])
    head = PrototypeHead(cfg["classes"], cfg["d_model"])
    encoder.to(device)
    head.to(device)

    opt_encoder = torch.optim.AdamW(
        adamw_groups(encoder, cfg["weight_decay"]), lr=cfg["lr"], betas=(0.9, 0.95)
    )
    opt_head = torch.optim.SGD(
        [
            {"params": [head.prototypes]},
            {"params": [head.log_scale], "lr": cfg["proto_lr"] * 0.1, "momentum": 0.0},
        ],
        lr=cfg["proto_lr"],
        momentum=0.9,
        foreach=True,
    )
    warmup = cfg["warmup"]
    schedule = LambdaLR(opt_encoder, lambda s: min(1.0, (s + 1) / warmup))

    for step in range(cfg["steps"]):
        tokens, labels = batch(cfg)
        loss = F.cross_entropy(head(encoder(tokens)), labels)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(encoder.parameters(), cfg["clip"])
        opt_encoder.step()
        opt_head.step()
        schedule.step()
        opt_encoder.zero_grad(set_to_none=True)
        opt_head.zero_grad(set_to_none=True)
        if step % 25 == 0:
            print(
                f"step {step:4d}  loss {loss.item():.4f}  grad-norm {grad_norm:.3f}  "
                f"lr {schedule.get_last_lr()[0]:.2e}"
            )


if __name__ == "__main__":
    main()
