"""Reference stand-in for xformers' attention (facebookresearch/xformers), NOT the library.

Served as ``xformers.ops`` (and ``xformers.ops.fmha``, ``xformers.ops.fmha.attn_bias``) by
torchport's reference run when xformers is not installed, so that the ORIGINAL program
runs on the CPU and gives reference numbers. ``memory_efficient_attention`` follows its
documented semantics (``[B, M, H, K]`` tensors, or ``[B, M, K]`` for one head, or
``[B, M, G, H, K]`` grouped; ``scale`` defaulting to 1/sqrt(K); dropout ``p``; a tensor
``attn_bias`` added to the scores) and computes plain softmax attention in PyTorch.
Biases covered: ``LowerTriangularMask`` (causal, top-left aligned, as xformers'),
``LowerTriangularMaskWithTensorBias``, ``LowerTriangularFromBottomRightMask`` and
``BlockDiagonalMask`` (packed sequences: ``from_seqlens``, ``from_tensor_list``, ``split``);
the other block-diagonal biases are not. ``scaled_index_add`` and ``index_select_cat`` follow
their documented reference semantics (``input.index_add(0, index, source * scaling,
alpha=alpha)``; each source index-selected and flattened, then concatenated).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .attention import attend, band
from .usage import record

__version__ = "0.0.29+torchport.standin"

__all__ = [
    "AttentionBias",
    "BlockDiagonalMask",
    "LowerTriangularFromBottomRightMask",
    "LowerTriangularMask",
    "LowerTriangularMaskWithTensorBias",
    "index_select_cat",
    "memory_efficient_attention",
    "memory_efficient_attention_forward",
    "scaled_index_add",
    "unbind",
]


class AttentionBias:
    """Base of the structured attention biases (torchport reference stand-in)."""

    def materialize(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> torch.Tensor:
        raise NotImplementedError()


class LowerTriangularMask(AttentionBias):
    """Causal mask: query i attends to keys j <= i (aligned to the top-left corner)."""

    def __init__(self, *tensor_args: Any, **tensor_kwargs: Any) -> None:
        super().__init__()

    def materialize(self, shape, dtype=torch.float32, device="cpu") -> torch.Tensor:
        create_as = dtype if dtype is not torch.bfloat16 else torch.float32
        tensor = torch.full(shape, float("-inf"), dtype=create_as, device=device)
        return torch.triu(tensor, diagonal=1).to(dtype)

    def add_bias(self, bias: torch.Tensor) -> LowerTriangularMaskWithTensorBias:
        return LowerTriangularMaskWithTensorBias(bias)


class LowerTriangularMaskWithTensorBias(LowerTriangularMask):
    """The causal mask plus an additive tensor bias."""

    def __init__(self, bias: torch.Tensor) -> None:
        self._bias = bias

    def materialize(self, shape, dtype=torch.float32, device="cpu") -> torch.Tensor:
        return super().materialize(shape, dtype, device) + self._bias


class LowerTriangularFromBottomRightMask(AttentionBias):
    """Causal mask aligned to the bottom-right corner: query i attends to keys
    j <= i + (Mkv - Mq)."""

    def materialize(self, shape, dtype=torch.float32, device="cpu") -> torch.Tensor:
        create_as = dtype if dtype is not torch.bfloat16 else torch.float32
        tensor = torch.full(shape, float("-inf"), dtype=create_as, device=device)
        return torch.triu(tensor, diagonal=shape[-1] - shape[-2] + 1).to(dtype)


class BlockDiagonalMask(AttentionBias):
    """Packed sequences side by side in one batch row: query block i attends only to key
    block i (``q_seqlen[i]`` queries, ``kv_seqlen[i]`` keys)."""

    def __init__(self, q_seqlen: Sequence[int], kv_seqlen: Sequence[int] | None = None) -> None:
        self.q_seqlen = [int(n) for n in q_seqlen]
        self.kv_seqlen = [int(n) for n in (q_seqlen if kv_seqlen is None else kv_seqlen)]
        if len(self.q_seqlen) != len(self.kv_seqlen):
            raise ValueError("q_seqlen and kv_seqlen must have as many blocks")
        self._batch_sizes: Sequence[int] | None = None

    @classmethod
    def from_seqlens(
        cls, q_seqlen: Sequence[int], kv_seqlen: Sequence[int] | None = None
    ) -> BlockDiagonalMask:
        return cls(q_seqlen, kv_seqlen)

    @classmethod
    def from_tensor_list(
        cls, tensors: Sequence[torch.Tensor]
    ) -> tuple[BlockDiagonalMask, torch.Tensor]:
        """Each [B, M, ...] tensor as B blocks of M; the tensors packed into [1, sum, ...]."""
        batch_sizes = [t.shape[0] for t in tensors]
        mask = cls([t.shape[1] for t in tensors for _ in range(t.shape[0])])
        mask._batch_sizes = batch_sizes
        packed = torch.cat([t.reshape([1, -1, *t.shape[2:]]) for t in tensors], dim=1)
        return mask, packed

    def split(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """The packed [1, sum, ...] queries back as one tensor per block (per tensor of
        ``from_tensor_list``: [B, M, ...])."""
        if tensor.shape[0] != 1 or tensor.shape[1] != sum(self.q_seqlen):
            raise ValueError(f"expected [1, {sum(self.q_seqlen)}, ...], got {list(tensor.shape)}")
        sizes = self._batch_sizes or [1] * len(self.q_seqlen)
        chunks, start = [], 0
        for size in sizes:
            chunks.append(sum(self.q_seqlen[start : start + size]))
            start += size
        parts = tensor.split(chunks, dim=1)
        pairs = zip(sizes, parts, strict=True)
        return [part.reshape([size, -1, *part.shape[2:]]) for size, part in pairs]

    def keep(self, device: Any = None) -> torch.Tensor:
        """keep[i, j]: query i and key j are in the same block."""
        q = torch.repeat_interleave(torch.arange(len(self.q_seqlen)), torch.tensor(self.q_seqlen))
        k = torch.repeat_interleave(torch.arange(len(self.kv_seqlen)), torch.tensor(self.kv_seqlen))
        return (q[:, None] == k[None, :]).to(device)

    def materialize(self, shape, dtype=torch.float32, device="cpu") -> torch.Tensor:
        create_as = dtype if dtype is not torch.bfloat16 else torch.float32
        blocked = torch.full(shape[-2:], float("-inf"), dtype=create_as, device=device)
        blocked = blocked.masked_fill(self.keep(device), 0.0)
        return blocked.expand(shape).to(dtype)


def scaled_index_add(
    input: torch.Tensor,
    index: torch.Tensor,
    source: torch.Tensor,
    scaling: torch.Tensor | None = None,
    alpha: float = 1.0,
) -> torch.Tensor:
    """``input.index_add(0, index, source * scaling, alpha=alpha)`` (a new tensor)."""
    record("xformers.ops.scaled_index_add")
    scaled = source if scaling is None else source * scaling
    return torch.index_add(input, 0, index, scaled, alpha=alpha)


def index_select_cat(
    sources: Sequence[torch.Tensor], indices: Sequence[torch.Tensor]
) -> torch.Tensor:
    """Each source's rows at its indices, flattened, all concatenated into one vector."""
    record("xformers.ops.index_select_cat")
    return torch.cat([s[i.long()].flatten() for s, i in zip(sources, indices, strict=True)], dim=0)


def _attention(query, key, value, attn_bias, p, scale) -> torch.Tensor:
    ndim = query.dim()
    if ndim not in (3, 4, 5):
        raise ValueError(f"query must be [B, M, K], [B, M, H, K] or [B, M, G, H, K]: {ndim}-d")
    if any(t.dim() != ndim for t in (key, value)):
        raise ValueError("query, key and value must have the same number of dimensions")
    bias_tensor = attn_bias if isinstance(attn_bias, torch.Tensor) else None
    if ndim == 3:
        query, key, value = (t.unsqueeze(2) for t in (query, key, value))
        if bias_tensor is not None and bias_tensor.dim() == 3:
            bias_tensor = bias_tensor.unsqueeze(1)
    elif ndim == 5:
        groups = tuple(query.shape[2:4])
        query, key, value = (t.flatten(2, 3) for t in (query, key, value))
        if bias_tensor is not None and bias_tensor.dim() == 5:
            bias_tensor = bias_tensor.flatten(1, 2)
    sq, sk = query.shape[1], key.shape[1]
    keep, bias, is_causal = None, None, False
    if attn_bias is None:
        pass
    elif bias_tensor is not None:
        if bias_tensor.dtype == torch.bool:
            keep = bias_tensor
        else:
            bias = bias_tensor
    elif isinstance(attn_bias, LowerTriangularMaskWithTensorBias):
        record("xformers.ops.fmha.attn_bias.LowerTriangularMaskWithTensorBias")
        is_causal, bias = True, attn_bias._bias
    elif isinstance(attn_bias, LowerTriangularMask):
        record("xformers.ops.fmha.attn_bias.LowerTriangularMask")
        is_causal = True
    elif isinstance(attn_bias, BlockDiagonalMask):
        record("xformers.ops.fmha.attn_bias.BlockDiagonalMask")
        if (sq, sk) != (sum(attn_bias.q_seqlen), sum(attn_bias.kv_seqlen)):
            raise ValueError(
                f"BlockDiagonalMask of {sum(attn_bias.q_seqlen)} queries and "
                f"{sum(attn_bias.kv_seqlen)} keys given {sq} and {sk}"
            )
        keep = attn_bias.keep(query.device)
    elif isinstance(attn_bias, LowerTriangularFromBottomRightMask):
        record("xformers.ops.fmha.attn_bias.LowerTriangularFromBottomRightMask")
        keep = band(sq, sk, offset=sk - sq, right=0, device=query.device)
    else:
        raise NotImplementedError(
            f"attn_bias of type {type(attn_bias).__name__} is not covered by torchport's "
            "reference stand-in for xformers"
        )
    out = attend(
        query.transpose(1, 2),
        key.transpose(1, 2),
        value.transpose(1, 2),
        scale=query.shape[-1] ** -0.5 if scale is None else float(scale),
        keep=keep,
        bias=bias,
        is_causal=is_causal,
        dropout_p=float(p),
    )
    out = out.transpose(1, 2).contiguous()
    if ndim == 3:
        return out.squeeze(2)
    if ndim == 5:
        return out.unflatten(2, groups)
    return out


def memory_efficient_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | AttentionBias | None = None,
    p: float = 0.0,
    scale: float | None = None,
    *,
    op: Any = None,
) -> torch.Tensor:
    """query: [B, Mq, H, K]; key: [B, Mkv, H, K]; value: [B, Mkv, H, Kv] -> [B, Mq, H, Kv]."""
    record("xformers.ops.memory_efficient_attention")
    return _attention(query, key, value, attn_bias, p, scale)


def memory_efficient_attention_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | AttentionBias | None = None,
    p: float = 0.0,
    scale: float | None = None,
    *,
    op: Any = None,
) -> torch.Tensor:
    """The forward of ``memory_efficient_attention`` (same result here)."""
    record("xformers.ops.memory_efficient_attention_forward")
    return _attention(query, key, value, attn_bias, p, scale)


def unbind(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, ...]:
    """xformers' unbind: the same views as ``torch.unbind`` (xformers' own also lets
    ``stack_or_none`` find the stacked tensor again, a speed-up only)."""
    record("xformers.ops.unbind")
    return torch.unbind(x, dim)
