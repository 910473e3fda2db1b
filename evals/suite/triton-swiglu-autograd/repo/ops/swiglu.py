"""SwiGLU's gate, silu(a) * b, as one Triton kernel each way.

Eager PyTorch keeps silu(a) alive for the backward and launches four kernels; these two
read a and b once per pass and keep nothing but the inputs.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _silu_mul_fwd(A, B, C, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(A + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    c = a * tl.sigmoid(a) * b
    tl.store(C + offs, c.to(C.dtype.element_ty), mask=mask)


@triton.jit
def _silu_mul_bwd(DC, A, B, DA, DB, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dc = tl.load(DC + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(A + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(a)
    silu = a * sig
    da = dc * b * sig * (1.0 + a * (1.0 - sig))
    db = dc * silu
    tl.store(DA + offs, da.to(DA.dtype.element_ty), mask=mask)
    tl.store(DB + offs, db.to(DB.dtype.element_ty), mask=mask)


BLOCK = 1024


class SiLUMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        a, b = a.contiguous(), b.contiguous()
        c = torch.empty_like(a)
        n = a.numel()
        _silu_mul_fwd[(triton.cdiv(n, BLOCK),)](a, b, c, n, BLOCK=BLOCK)
        ctx.save_for_backward(a, b)
        return c

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        dc = dc.contiguous()
        da, db = torch.empty_like(a), torch.empty_like(b)
        n = a.numel()
        _silu_mul_bwd[(triton.cdiv(n, BLOCK),)](dc, a, b, da, db, n, BLOCK=BLOCK)
        return da, db


def silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b, elementwise; a and b are CUDA tensors of one shape."""
    return SiLUMul.apply(a, b)
