"""Oracles for the kernels family (tools/catalogue/data/kernels.toml): fused optimizers, NVML
readings and flash-attn calls."""

from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

PAIRS = [
    Pair(
        "TPK014",
        "tpu",
        "fused-dropped",
        """
        import torch

        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
        """,
        """
        import torch

        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        """,
    ),
    Pair(
        "TPK014",
        "accelerator",
        "fused-dropped",
        """
        import torch

        optimizer = torch.optim.Adam(model.parameters(), fused=True, weight_decay=0.1)
        """,
        """
        import torch

        optimizer = torch.optim.Adam(model.parameters(), weight_decay=0.1)
        """,
    ),
    Pair(
        "TPK014",
        "tpu",
        "foreach-left-alone",
        """
        import torch

        optimizer = torch.optim.AdamW(model.parameters(), foreach=True, fused=False)
        """,
    ),
    Pair(
        "TPK018",
        "tpu",
        "reported-reading-is-nan",
        """
        import torch

        log.info("step %d util %s%%", step, torch.cuda.utilization())
        x = torch.zeros(2)
        """,
        """
        import torch

        log.info("step %d util %s%%", step, float("nan"))
        x = torch.zeros(2)
        """,
    ),
    Pair(
        "TPK018",
        "accelerator",
        "reading-in-metrics",
        """
        import torch

        metrics = {"loss": loss.item(), "temp": torch.cuda.temperature()}
        x = torch.zeros(2)
        """,
        """
        import torch

        metrics = {"loss": loss.item(), "temp": float("nan")}
        x = torch.zeros(2)
        """,
    ),
    Pair(
        "TPK018",
        "tpu",
        "decision-on-a-reading-left-for-a-human",
        """
        import torch

        if torch.cuda.utilization() > 90:
            time.sleep(1)
        """,
    ),
    Pair(
        "TPK010",
        "tpu",
        "flash-attn-same-lengths",
        """
        import torch.nn.functional as F
        from flash_attn import flash_attn_func


        def attend(qkv):
            q, k, v = qkv.unbind(2)
            return flash_attn_func(q, k, v, causal=True)
        """,
        # (batch, seq, heads, dim) in and out; one unbind: same lengths, so is_causal
        """
        import torch.nn.functional as F


        def attend(qkv):
            q, k, v = qkv.unbind(2)
            return F.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2),
                v.transpose(1, 2),
                is_causal=True,
            ).transpose(1, 2).contiguous()
        """,
    ),
    Pair(
        "TPK014",
        "tpu",
        "users-fused-choice-left-alone",
        """
        import torch

        optimizer = torch.optim.AdamW(model.parameters(), fused=args.fused)
        """,
    ),
    Pair(
        "TPK014",
        "neuron",
        "last-argument-of-a-wrapped-call",
        """
        import torch

        optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=1e-3,
            fused=True,
        )
        """,
        """
        import torch

        optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=1e-3,
        )
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_kernels_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
