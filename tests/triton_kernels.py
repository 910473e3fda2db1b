"""Hand-written Triton kernels, each with a launch that returns its outputs (on the CPU).

tests/triton_compare.py runs every case twice in fresh interpreters, once with Triton's own
interpreter and once with triton_on_torch installed as ``triton``, so this module is plain
Triton source that imports ``triton`` and knows nothing of either runtime.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def add_kernel_off_by_one(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n - 1
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def softmax_rows_kernel(
    out_ptr, in_ptr, n_rows, n_cols, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offs = rows[:, None] * stride + cols[None, :]
    x = tl.load(in_ptr + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=1)[:, None]
    num = tl.exp(x)
    y = num / tl.sum(num, axis=1)[:, None]
    tl.store(out_ptr + offs, y, mask=mask)


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc=acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _every_config_ties(kernel_call, quantiles):
    """The autotuner's timing (Triton's interpreter has no benchmarker): runs the config
    once and reports a tie, so Triton keeps the first config as triton_on_torch does."""
    kernel_call()
    return [1.0, 1.0, 1.0]


@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 64})],
    key=["n"],
    do_bench=_every_config_ties,
)
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs) if EVEN else tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    y = x * scale + 1.0
    if EVEN:
        tl.store(out_ptr + offs, y)
    else:
        tl.store(out_ptr + offs, y, mask=offs < n)


@triton.jit
def transpose_into_kernel(
    in_ptr, out_ptr, n_rows, n_cols, s_in0, s_in1, s_out0, s_out1, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * s_in0 + cols * s_in1, mask=mask, other=0.0)
    tl.store(out_ptr + row * s_out0 + cols * s_out1, x * 2.0 - 1.0, mask=mask)


@triton.jit
def _quick_gelu(x):  # a @jit function called from a kernel
    return x * tl.sigmoid(1.702 * x)


@triton.jit
def many_ops_kernel(x_ptr, out_ptr, idx_ptr, M: tl.constexpr, N: tl.constexpr):
    rows = tl.arange(0, M)
    cols = tl.arange(0, N)
    offs = rows[:, None] * N + cols[None, :]
    x = tl.load(x_ptr + offs)
    pos = tl.abs(x) + 0.5
    parts = (
        tl.exp2(x) + tl.log2(pos) + tl.rsqrt(pos) + tl.sqrt(pos) + tl.math.erf(x),
        tl.sin(x) * tl.cos(x) + tl.sigmoid(x) + _quick_gelu(x) + tl.log(pos),
        tl.maximum(x, 0.1) - tl.minimum(x, -0.1) + tl.fma(x, x, pos),
        tl.where(x > 0, x, tl.zeros_like(x)) + tl.full((M, N), 2.0, tl.float32),
        tl.cumsum(x, axis=1),
        tl.broadcast_to(tl.min(x, axis=0)[None, :], (M, N)),
        tl.reshape(tl.trans(tl.reshape(x, (N, M))), (M, N)),
        tl.expand_dims(tl.sum(x, axis=1), 1) + tl.zeros((M, N), dtype=tl.float32),
    )
    for i in tl.static_range(len(parts)):
        tl.store(out_ptr + i * M * N + offs, parts[i])
    tl.store(idx_ptr + rows, tl.argmax(x, axis=1))
    tl.store(idx_ptr + M + cols, tl.argmin(x, axis=0).to(tl.int64))
    tl.store(idx_ptr + M + N + rows, (tl.max(x, axis=1) > 0.5).to(tl.int32))


@triton.jit
def scale_by_first_in_place_kernel(x_ptr, n, BLOCK: tl.constexpr):
    """Loads x[0] once, then overwrites x (x[0] first): every element is scaled by the old
    x[0], which a load that returned a view of the storage would get wrong."""
    first = tl.load(x_ptr)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(x_ptr + offs, x * first, mask=offs < n)


@triton.jit
def block_members_kernel(x_ptr, i_ptr, out_ptr, iout_ptr, M: tl.constexpr, N: tl.constexpr):
    """Triton's member functions and its C-like integer ``//`` and ``%``."""
    rows = tl.arange(0, M)
    cols = tl.arange(0, N)
    offs = rows[:, None] * N + cols[None, :]
    x = tl.load(x_ptr + offs)
    i = tl.load(i_ptr + offs)
    tl.store(out_ptr + rows, x.sum(axis=1))
    tl.store(out_ptr + M + cols, x.max(axis=0))
    tl.store(out_ptr + M + N + rows, x.cast(tl.float16).to(tl.float32).min(axis=1))
    tl.store(out_ptr + 2 * M + N + offs, x.reshape(N, M).trans().reshape(M, N))
    tl.store(iout_ptr + offs, i // 3)
    tl.store(iout_ptr + M * N + offs, i % 3)
    tl.store(iout_ptr + 2 * M * N + offs, x.to(tl.int32, bitcast=True))
    tl.store(iout_ptr + 3 * M * N + offs, (-i >> 1) ^ (i << 2) | (~i & 7))


@triton.jit
def scale_in_place_then_total_kernel(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    """x = 2x + 1 in place, then program 0 alone stores its block's old sum: a branch on
    the program id after a store (triton_on_torch's vector mode must undo that store
    before it runs the programs one by one, or x would be scaled twice)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(x_ptr + offs, x * 2.0 + 1.0, mask=mask)
    if pid == 0:
        tl.store(total_ptr, tl.sum(x, axis=0))


@triton.jit
def prefix_rows_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """Row p of out is the sum of rows 0..p of x: a loop whose length is the program's."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for row in range(0, pid + 1):
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + pid * n_cols + cols, acc, mask=cols < n_cols)


@triton.jit
def last_writer_kernel(last_ptr, flags_ptr, n_flags, BLOCK: tl.constexpr):
    """Programs storing to the same elements: Triton's interpreter runs them in order, so
    the last one's value stays. A branch every program takes alike, on the program id."""
    pid = tl.program_id(0)
    if pid >= 0:
        tl.store(last_ptr, pid)
    cols = tl.arange(0, BLOCK)
    mine = ((cols % 3) == (pid % 3)) & (cols < n_flags)
    tl.store(flags_ptr + cols, pid * 100 + cols, mask=mine)


@triton.jit
def row_scalars_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """A program's scalars ([] shapes: its id, its row's max) with its [BLOCK] blocks, and
    its axes: x[None, :], expand_dims, a 2-D sum, trans, ravel, argmax, cumsum."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    top = tl.max(x, axis=0)
    both = tl.join(x, x * 2.0)  # [BLOCK, 2]
    twice = tl.sum(tl.trans(both), axis=0) + tl.expand_dims(top, 0) * 0.0
    grid2 = x[None, :] + (row + tl.arange(0, 2))[:, None]  # [2, BLOCK]
    flat = tl.ravel(tl.broadcast_to(tl.sum(grid2, axis=0)[None, :], (2, BLOCK)))
    tl.store(out_ptr + row * 6 * BLOCK + cols, x - top + row)
    tl.store(out_ptr + row * 6 * BLOCK + BLOCK + cols, twice)
    tl.store(out_ptr + row * 6 * BLOCK + 2 * BLOCK + tl.arange(0, 2 * BLOCK), flat)
    tl.store(out_ptr + row * 6 * BLOCK + 4 * BLOCK + cols, tl.cumsum(x, axis=0))
    tl.store(out_ptr + row * 6 * BLOCK + 5 * BLOCK, tl.argmax(x, axis=0).to(tl.float32))


@triton.jit
def scale_rows_fp16_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """A float16 block times a program's float32 scalar: float32 in Triton."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0)
    scale = tl.sum(x.to(tl.float32), axis=0) / 3.0
    tl.store(out_ptr + row * n + cols, x * scale, mask=cols < n)


def _randn(*shape: int, device: str) -> torch.Tensor:
    return torch.randn(*shape).to(device)


def case_vector_add(device: str, kernel=add_kernel) -> dict[str, torch.Tensor]:
    n = 1000
    x, y = _randn(n, device=device), _randn(n, device=device)
    out = torch.zeros(n, device=device)
    kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256, num_warps=4)
    return {"out": out.cpu()}


def case_vector_add_off_by_one(device: str) -> dict[str, torch.Tensor]:
    return case_vector_add(device, kernel=add_kernel_off_by_one)


def case_softmax_rows(device: str) -> dict[str, torch.Tensor]:
    x = _randn(37, 53, device=device) * 3
    out = torch.zeros_like(x)
    grid = lambda meta: (triton.cdiv(37, meta["BLOCK_M"]),)  # noqa: E731 (Triton's idiom)
    softmax_rows_kernel[grid](out, x, 37, 53, x.stride(0), BLOCK_M=8, BLOCK_N=64)
    return {"out": out.cpu()}


def case_matmul(device: str) -> dict[str, torch.Tensor]:
    M, N, K = 45, 37, 70
    a = _randn(M, K, device=device)
    b = _randn(N, K, device=device).t()  # a non-contiguous (K, N) view
    c = torch.zeros(M, N, device=device)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
    matmul_kernel[grid](
        a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16
    )
    return {"c": c.cpu()}


def case_autotune(device: str) -> dict[str, torch.Tensor]:
    outs = {}
    for n in (512, 300):
        x = _randn(n, device=device)
        out = torch.zeros(n, device=device)
        scale_shift_kernel[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, 0.5)
        outs[f"out{n}"] = out.cpu()
    return outs


def case_noncontiguous_out(device: str) -> dict[str, torch.Tensor]:
    """Reads a strided view at an offset; writes a transposed view of a larger buffer."""
    base = _randn(12, 40, device=device)
    x = base[2:, 3:33]  # (10, 30), storage offset 83, row stride 40
    buffer = torch.zeros(40, 12, device=device)
    out = buffer[1:31, 1:11].t()  # (10, 30) with strides (1, 12)
    transpose_into_kernel[(10,)](x, out, 10, 30, *x.stride(), *out.stride(), BLOCK=32)
    return {"buffer": buffer.cpu()}


def case_many_ops(device: str) -> dict[str, torch.Tensor]:
    M, N = 8, 16
    x = _randn(M, N, device=device)
    out = torch.zeros(8, M, N, device=device)
    idx = torch.zeros(M + N + M, dtype=torch.int64, device=device)
    many_ops_kernel[(1,)](x, out, idx, M=M, N=N)
    return {"out": out.cpu(), "idx": idx.cpu()}


def case_scalar_load_then_store(device: str) -> dict[str, torch.Tensor]:
    x = _randn(100, device=device)
    scale_by_first_in_place_kernel[(1,)](x, 100, BLOCK=32)
    return {"x": x.cpu()}


def case_block_members(device: str) -> dict[str, torch.Tensor]:
    M, N = 4, 8
    x = _randn(M, N, device=device)
    i = torch.randint(-50, 50, (M, N), dtype=torch.int32).to(device)
    out = torch.zeros(2 * M + N + M * N, device=device)
    iout = torch.zeros(4 * M * N, dtype=torch.int32, device=device)
    block_members_kernel[(1,)](x, i, out, iout, M=M, N=N)
    return {"out": out.cpu(), "iout": iout.cpu()}


def case_in_place_then_branch(device: str) -> dict[str, torch.Tensor]:
    x = _randn(1000, device=device)
    total = torch.zeros(1, device=device)
    for _ in range(2):  # the second launch, known to need the loop, skips the vector try
        scale_in_place_then_total_kernel[(triton.cdiv(1000, 128),)](x, total, 1000, BLOCK=128)
    return {"x": x.cpu(), "total": total.cpu()}


def case_prefix_rows(device: str) -> dict[str, torch.Tensor]:
    x = _randn(6, 20, device=device)
    out = torch.zeros(6, 20, device=device)
    prefix_rows_kernel[(6,)](x, out, 20, BLOCK=32)
    return {"out": out.cpu()}


def case_last_writer(device: str) -> dict[str, torch.Tensor]:
    last = torch.full((1,), -1, dtype=torch.int32, device=device)
    flags = torch.full((16,), -1, dtype=torch.int32, device=device)
    last_writer_kernel[(5,)](last, flags, 14, BLOCK=16)
    return {"last": last.cpu(), "flags": flags.cpu()}


def case_row_scalars(device: str) -> dict[str, torch.Tensor]:
    x = _randn(5, 12, device=device)
    out = torch.zeros(5, 6, 16, device=device)
    row_scalars_kernel[(5,)](x, out, 12, BLOCK=16)
    return {"out": out.cpu()}


def case_fp16_row_scale(device: str) -> dict[str, torch.Tensor]:
    x = (_randn(4, 50, device=device) * 3).half()
    out = torch.zeros(4, 50, device=device)
    scale_rows_fp16_kernel[(4,)](x, out, 50, BLOCK=64)
    return {"out": out.cpu()}


CASES = {
    "vector_add": case_vector_add,
    "softmax_rows": case_softmax_rows,
    "matmul": case_matmul,
    "autotune": case_autotune,
    "noncontiguous_out": case_noncontiguous_out,
    "many_ops": case_many_ops,
    "scalar_load_then_store": case_scalar_load_then_store,
    "block_members": case_block_members,
    "in_place_then_branch": case_in_place_then_branch,
    "prefix_rows": case_prefix_rows,
    "last_writer": case_last_writer,
    "row_scalars": case_row_scalars,
    "fp16_row_scale": case_fp16_row_scale,
}
WRONG = {"vector_add_off_by_one": case_vector_add_off_by_one}
