"""Exact softmax attention in pure PyTorch: the core of the flash-attn and xformers
reference stand-ins (this is torchport code, NOT either library).

Tensors here are (batch, heads, seq, dim). Half-precision inputs are computed in fp32 and
the output cast back, as the fused kernels accumulate in fp32. Query rows that may attend
to no key at all give zeros (flash-attn's documented behaviour), never NaN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def band(
    sq: int,
    sk: int,
    *,
    offset: int,
    left: int = -1,
    right: int = -1,
    device: torch.device | str | None = None,
) -> torch.Tensor | None:
    """keep[i, j] for the keys j in [i + offset - left, i + offset + right] (a negative
    bound is unbounded on that side); None when both sides are unbounded. Causal is
    ``right=0``: ``offset=0`` aligns it to the top-left corner, ``offset=sk - sq`` to the
    bottom-right one."""
    if left < 0 and right < 0:
        return None
    i = torch.arange(sq, device=device)[:, None] + offset
    j = torch.arange(sk, device=device)[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    return keep


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    keep: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    softcap: float = 0.0,
    return_probs: bool = False,
):
    """softmax(softcap(Q K^T * scale) + bias, masked by keep) V.

    q: (B, H, Sq, D); k, v: (B, Hk, Sk, D[v]) with H a multiple of Hk (grouped-query
    heads: query head h reads key/value head h // (H // Hk)). ``keep`` (bool, True =
    may attend) and ``bias`` (additive) broadcast to (B, H, Sq, Sk); ``is_causal`` is the
    top-left aligned causal mask. With ``return_probs``: (out, logsumexp (B, H, Sq) in
    fp32, probabilities (B, H, Sq, Sk)), else out.
    """
    out_dtype = q.dtype
    compute = torch.float32 if q.dtype in _LOW_PRECISION else q.dtype
    q, k, v = (t.to(compute) for t in (q, k, v))
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if heads != kv_heads:
        if kv_heads == 0 or heads % kv_heads:
            raise ValueError(
                f"number of query heads ({heads}) must be a multiple of key/value heads "
                f"({kv_heads})"
            )
        k = k.repeat_interleave(heads // kv_heads, dim=-3)
        v = v.repeat_interleave(heads // kv_heads, dim=-3)
    sq, sk = q.shape[-2], k.shape[-2]
    manual = softcap > 0 or return_probs
    if is_causal and (keep is not None or bias is not None or manual or sq != sk):
        causal = band(sq, sk, offset=0, right=0, device=q.device)
        assert causal is not None  # right=0 bounds it
        keep = causal if keep is None else keep & causal
        is_causal = False
    empty = None
    if keep is not None:
        rows = keep.any(-1, keepdim=True)
        if not bool(rows.all()):
            # A row with no key: let it attend (finite numbers, finite gradients), then zero it.
            empty = ~rows
            keep = keep | empty
    if manual:
        scores = (q @ k.transpose(-2, -1)) * scale
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        if bias is not None:
            scores = scores + bias.to(compute)
        if keep is not None:
            scores = scores.masked_fill(~keep, float("-inf"))
        lse = scores.logsumexp(-1)
        probs = scores.softmax(-1)
        if empty is not None:
            probs = probs.masked_fill(empty, 0.0)
            lse = lse.masked_fill(empty.squeeze(-1), float("inf"))
        dropped = F.dropout(probs, dropout_p, training=True) if dropout_p > 0 else probs
        out = dropped @ v
    else:
        mask = keep
        if bias is not None:
            mask = bias.to(compute)
            if keep is not None:
                mask = torch.where(keep, mask, float("-inf"))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
        )
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    out = out.to(out_dtype)
    if return_probs:
        return out, lse.float(), probs.to(out_dtype)
    return out
