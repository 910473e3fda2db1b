"""Reference stand-in for flash-attn (Dao-AILab/flash-attention), NOT the library.

Served as ``flash_attn`` / ``flash_attn.flash_attn_interface`` by torchport's reference
run when flash-attn is not installed (it needs a CUDA GPU), so that the ORIGINAL program
runs on the CPU and gives reference numbers. Each function follows flash-attn 2's
documented semantics exactly but computes plain softmax attention in PyTorch
(``scaled_dot_product_attention``): (batch, seqlen, nheads, headdim) tensors,
grouped-query heads, ``softmax_scale`` defaulting to 1/sqrt(headdim), causal masks
aligned to the bottom-right corner, sliding windows, softcapping, ALiBi, dropout, and
query rows with nothing to attend to giving zeros. Not covered: the KV-cache and paged
(``block_table``) paths.
"""

from __future__ import annotations

import torch

from .attention import attend, band
from .usage import record

__version__ = "2.8.3+torchport.standin"

__all__ = [
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
]


def _flash(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float,
    softmax_scale: float | None,
    causal: bool,
    window_size,
    softcap: float,
    alibi_slopes: torch.Tensor | None,
    return_attn_probs: bool,
):
    """Attention on (batch, seqlen, nheads, headdim) tensors, flash-attn's semantics."""
    if q.dim() != 4:
        raise ValueError(
            f"expected q of shape (batch, seqlen, nheads, headdim), got {tuple(q.shape)}"
        )
    batch, sq, heads = q.shape[0], q.shape[1], q.shape[2]
    sk = k.shape[1]
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)
    left, right = (int(w) for w in window_size)
    if causal:
        right = 0
    offset = sk - sq  # flash-attn aligns windows and causal masks to the bottom-right
    is_causal = left < 0 and right == 0 and offset == 0
    keep = (
        None if is_causal else band(sq, sk, offset=offset, left=left, right=right, device=q.device)
    )
    bias = None
    if alibi_slopes is not None:
        i = torch.arange(sq, device=q.device)[:, None] + offset
        j = torch.arange(sk, device=q.device)[None, :]
        distance = (i - j).abs().to(torch.float32)
        slopes = alibi_slopes.to(torch.float32)
        slopes = (
            slopes.view(1, heads, 1, 1) if slopes.dim() == 1 else slopes.view(batch, heads, 1, 1)
        )
        bias = -slopes * distance
    result = attend(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        scale=scale,
        keep=keep,
        bias=bias,
        is_causal=is_causal,
        dropout_p=float(dropout_p),
        softcap=float(softcap),
        return_probs=return_attn_probs,
    )
    if return_attn_probs:
        out, lse, probs = result
        return out.transpose(1, 2).contiguous(), lse, probs
    return result.transpose(1, 2).contiguous()


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """q: (batch, seqlen_q, nheads, headdim); k, v: (batch, seqlen_k, nheads_k, headdim).
    Returns out (batch, seqlen_q, nheads, headdim) [, softmax_lse (batch, nheads, seqlen_q),
    attention probabilities (batch, nheads, seqlen_q, seqlen_k)]."""
    record("flash_attn.flash_attn_func")
    return _flash(
        q,
        k,
        v,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        return_attn_probs,
    )


def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """qkv: (batch, seqlen, 3, nheads, headdim)."""
    record("flash_attn.flash_attn_qkvpacked_func")
    q, k, v = qkv.unbind(2)
    return _flash(
        q,
        k,
        v,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        return_attn_probs,
    )


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """q: (batch, seqlen_q, nheads, headdim); kv: (batch, seqlen_k, 2, nheads_k, headdim)."""
    record("flash_attn.flash_attn_kvpacked_func")
    k, v = kv.unbind(2)
    return _flash(
        q,
        k,
        v,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        return_attn_probs,
    )


def _varlen(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p,
    softmax_scale,
    causal,
    window_size,
    softcap,
    alibi_slopes,
    return_attn_probs,
):
    """Sequences packed along the first dimension: one ``_flash`` per sequence."""
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    if len(starts_q) != len(starts_k):
        raise ValueError("cu_seqlens_q and cu_seqlens_k must have the same length")
    outs, lses, probs = [], [], []
    for b in range(len(starts_q) - 1):
        slopes = alibi_slopes
        if slopes is not None and slopes.dim() == 2:
            slopes = slopes[b : b + 1]
        qs, ks = slice(starts_q[b], starts_q[b + 1]), slice(starts_k[b], starts_k[b + 1])
        result = _flash(
            q[qs].unsqueeze(0),
            k[ks].unsqueeze(0),
            v[ks].unsqueeze(0),
            dropout_p,
            softmax_scale,
            causal,
            window_size,
            softcap,
            slopes,
            return_attn_probs,
        )
        if return_attn_probs:
            outs.append(result[0][0])
            lses.append(result[1][0])
            probs.append(result[2][0])
        else:
            outs.append(result[0])
    out = torch.cat(outs, 0) if outs else q.new_empty((0, *q.shape[1:-1], v.shape[-1]))
    if not return_attn_probs:
        return out
    lse = torch.cat(lses, -1) if lses else q.new_empty((q.shape[1], 0), dtype=torch.float32)
    padded = q.new_zeros((len(probs), q.shape[1], int(max_seqlen_q), int(max_seqlen_k)))
    for b, p in enumerate(probs):
        padded[b, :, : p.shape[-2], : p.shape[-1]] = p
    return out, lse, padded


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
):
    """q: (total_q, nheads, headdim); k, v: (total_k, nheads_k, headdim); cu_seqlens_*:
    (batch + 1,) cumulative sequence lengths."""
    record("flash_attn.flash_attn_varlen_func")
    if block_table is not None:
        raise NotImplementedError(
            "torchport's reference stand-in for flash_attn does not cover the paged KV cache "
            "(block_table)"
        )
    return _varlen(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        return_attn_probs,
    )


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """qkv: (total, 3, nheads, headdim)."""
    record("flash_attn.flash_attn_varlen_qkvpacked_func")
    q, k, v = qkv.unbind(1)
    return _varlen(
        q,
        k,
        v,
        cu_seqlens,
        cu_seqlens,
        max_seqlen,
        max_seqlen,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        return_attn_probs,
    )


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """q: (total_q, nheads, headdim); kv: (total_k, 2, nheads_k, headdim)."""
    record("flash_attn.flash_attn_varlen_kvpacked_func")
    k, v = kv.unbind(1)
    return _varlen(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        alibi_slopes,
        return_attn_probs,
    )
