"""Reference stand-ins for CUDA-only libraries (sandbox/shim/standins): the numbers they
compute, the import hook that serves them in reference runs only, and the run's record."""

from __future__ import annotations

import copy
import importlib
import json
import os
import subprocess
import sys
import textwrap
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
from torchport.sandbox.harness import RunSpec, run
from torchport.sandbox.isolation import IsolationWarning
from torchport.sandbox.shim import standins
from torchport.sandbox.shim.standins import apex, finder, flash, xformers

# --- a naive reference: softmax(Q K^T * scale) V, in float64 ---------------------------


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = False,
    bottom_right: bool = True,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """(batch, seq, heads, dim) in and out. Causal: query i sees keys j <= i + shift, with
    shift = Sk - Sq (bottom-right, flash-attn) or 0 (top-left, xformers); a query that
    sees no key gives zeros."""
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))
    if k.shape[1] != q.shape[1]:  # grouped-query heads
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        scores = scores + bias.double()
    if causal:
        sq, sk = scores.shape[-2:]
        shift = sk - sq if bottom_right else 0
        allowed = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + shift
        scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, -1).nan_to_num(0.0)
    return (probs @ v).transpose(1, 2)


def _close(out: torch.Tensor, expected: torch.Tensor) -> None:
    """fp32 results against the float64 reference."""
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)


def _qkv(batch: int, sq: int, sk: int, heads: int, kv_heads: int, dim: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, sq, heads, dim, generator=gen)
    k = torch.randn(batch, sk, kv_heads, dim, generator=gen)
    v = torch.randn(batch, sk, kv_heads, dim, generator=gen)
    return q, k, v


SHAPES = [  # batch, seqlen_q, seqlen_k, heads, kv heads, head dim
    (2, 16, 16, 4, 4, 32),
    (1, 7, 11, 3, 3, 16),  # cross attention, more keys than queries
    (2, 9, 5, 4, 4, 8),  # fewer keys: bottom-right causal leaves the first rows empty
    (2, 12, 12, 6, 2, 16),  # grouped-query heads
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_flash_attn_func_is_softmax_attention(shape, causal, scale):
    q, k, v = _qkv(*shape)
    out = flash.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    expected = naive_attention(q, k, v, scale=scale, causal=causal)
    _close(out, expected)


def test_flash_attn_gradients_and_packed_forms():
    q, k, v = (t.double().requires_grad_() for t in _qkv(2, 6, 9, 4, 2, 8, seed=1))
    out = flash.flash_attn_func(q, k, v, causal=True, softmax_scale=0.5)
    ours = torch.autograd.grad(out.pow(2).sum(), (q, k, v))
    ref = naive_attention(q, k, v, causal=True, scale=0.5)
    theirs = torch.autograd.grad(ref.pow(2).sum(), (q, k, v))
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)

    q, k, v = _qkv(2, 8, 8, 4, 4, 16, seed=2)
    plain = flash.flash_attn_func(q, k, v, causal=True)
    packed = flash.flash_attn_qkvpacked_func(torch.stack([q, k, v], 2), causal=True)
    kvpacked = flash.flash_attn_kvpacked_func(q, torch.stack([k, v], 2), causal=True)
    torch.testing.assert_close(packed, plain)
    torch.testing.assert_close(kvpacked, plain)

    # Packed variable-length sequences: each one attends within itself.
    lengths = [3, 8, 5]
    seqs = [_qkv(1, n, n, 4, 4, 16, seed=10 + n) for n in lengths]
    cat = [torch.cat([s[i][0] for s in seqs]) for i in range(3)]
    cu = torch.tensor([0, 3, 11, 16], dtype=torch.int32)
    varlen = flash.flash_attn_varlen_func(*cat, cu, cu, 8, 8, causal=True)
    expected = torch.cat([naive_attention(*s, causal=True)[0] for s in seqs])
    _close(varlen, expected)


def test_flash_attn_half_precision_and_probabilities():
    q, k, v = _qkv(2, 10, 10, 2, 2, 16, seed=3)
    out = flash.flash_attn_func(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True)
    assert out.dtype == torch.bfloat16
    expected = naive_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True)
    torch.testing.assert_close(out.double(), expected, atol=1e-2, rtol=1e-2)

    out, lse, probs = flash.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    expected = naive_attention(q, k, v, causal=True)
    _close(out, expected)
    scores = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)) * 16**-0.5
    scores = scores.masked_fill(torch.ones(10, 10, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse, scores.logsumexp(-1))
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 2, 10))


def test_flash_attn_window_softcap_alibi():
    q, k, v = _qkv(2, 6, 9, 3, 3, 8, seed=6)
    slopes = torch.tensor([0.5, 0.25, 0.125])
    out = flash.flash_attn_func(
        q, k, v, causal=True, window_size=(2, 5), softcap=3.0, alibi_slopes=slopes
    )
    # By hand: query i (shifted by Sk - Sq = 3) sees keys i + 3 - 2 .. i + 3.
    scores = q.double().transpose(1, 2) @ k.double().permute(0, 2, 3, 1) * 8**-0.5
    scores = 3.0 * torch.tanh(scores / 3.0)
    i, j = torch.arange(6)[:, None] + 3, torch.arange(9)[None, :]
    scores = scores - slopes.double().view(1, 3, 1, 1) * (i - j).abs()
    scores = scores.masked_fill(~((j >= i - 2) & (j <= i)), float("-inf"))
    expected = (scores.softmax(-1) @ v.double().transpose(1, 2)).transpose(1, 2)
    _close(out, expected)


@pytest.mark.parametrize("shape", SHAPES[:3], ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_memory_efficient_attention_is_softmax_attention(shape, causal, scale):
    q, k, v = _qkv(*shape, seed=4)
    bias = xformers.LowerTriangularMask() if causal else None
    out = xformers.memory_efficient_attention(q, k, v, attn_bias=bias, scale=scale)
    assert out.shape == q.shape and out.is_contiguous()
    # xformers' LowerTriangularMask is aligned to the top-left corner.
    expected = naive_attention(q, k, v, scale=scale, causal=causal, bottom_right=False)
    _close(out, expected)


def test_memory_efficient_attention_biases_and_layouts():
    q, k, v = _qkv(2, 6, 8, 3, 3, 8, seed=5)
    bias = torch.randn(2, 3, 6, 8)
    out = xformers.memory_efficient_attention(q, k, v, attn_bias=bias)
    _close(out, naive_attention(q, k, v, bias=bias))
    mask = xformers.LowerTriangularMask()
    out = xformers.memory_efficient_attention(q, k, v, attn_bias=mask.add_bias(bias))
    expected = naive_attention(q, k, v, bias=bias, causal=True, bottom_right=False)
    _close(out, expected)
    torch.testing.assert_close(
        mask.materialize((6, 8)),
        torch.zeros(6, 8).masked_fill(torch.ones(6, 8, dtype=torch.bool).triu(1), float("-inf")),
    )
    out = xformers.memory_efficient_attention(
        q, k, v, attn_bias=xformers.LowerTriangularFromBottomRightMask()
    )
    _close(out, naive_attention(q, k, v, causal=True))
    # [B, M, K]: one head.
    out = xformers.memory_efficient_attention(q[:, :, 0], k[:, :, 0], v[:, :, 0])
    expected = naive_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1])[:, :, 0]
    _close(out, expected)


def test_block_diagonal_attention_is_each_sequence_attending_to_itself():
    # two batches of packed sequences (2 of length 5, 3 of length 3), as a ViT's crops are
    torch.manual_seed(6)
    crops = [torch.randn(2, 5, 3, 4), torch.randn(3, 3, 3, 4)]
    mask, packed = xformers.BlockDiagonalMask.from_tensor_list(crops)
    assert packed.shape == (1, 19, 3, 4)
    out = xformers.memory_efficient_attention(packed, packed, packed, attn_bias=mask)
    alone = [xformers.memory_efficient_attention(c, c, c) for c in crops]
    for got, expected in zip(mask.split(out), alone, strict=True):
        torch.testing.assert_close(got, expected)
    # from_seqlens, materialized: 0 inside a block, -inf across blocks
    blocks = xformers.BlockDiagonalMask.from_seqlens([2, 1]).materialize((3, 3))
    inf = float("-inf")
    assert blocks.tolist() == [[0, 0, inf], [0, 0, inf], [inf, inf, 0]]
    with pytest.raises(ValueError):  # a packed tensor of another length
        xformers.memory_efficient_attention(packed[:, :4], packed[:, :4], packed[:, :4], mask)


def test_scaled_index_add_and_index_select_cat_follow_their_reference_semantics():
    x, source = torch.zeros(4, 3), torch.ones(2, 3)
    index, scaling = torch.tensor([0, 2]), torch.tensor([1.0, 2.0, 3.0])
    out = xformers.scaled_index_add(x, index, source, scaling=scaling, alpha=0.5)
    assert out.tolist() == [[0.5, 1.0, 1.5], [0, 0, 0], [0.5, 1.0, 1.5], [0, 0, 0]]
    assert x.abs().sum() == 0  # a new tensor, the input unchanged
    a, b = torch.arange(6.0).view(3, 2), torch.arange(4.0).view(2, 2) + 10
    cat = xformers.index_select_cat([a, b], [torch.tensor([2]), torch.tensor([0, 1])])
    assert cat.tolist() == [4.0, 5.0, 10.0, 11.0, 12.0, 13.0]


# --- apex ---------------------------------------------------------------------------------


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list[torch.Tensor]):
    for x in batches:
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()


@pytest.mark.parametrize(
    "adam_w_mode, reference", [(True, torch.optim.AdamW), (False, torch.optim.Adam)]
)
def test_fused_adam_equals_torch_adam(adam_w_mode, reference):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    twin = copy.deepcopy(model)
    batches = [torch.randn(32, 8) for _ in range(6)]
    options = dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    _train(model, apex.FusedAdam(model.parameters(), adam_w_mode=adam_w_mode, **options), batches)
    _train(twin, reference(twin.parameters(), **options), batches)
    for ours, theirs in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)


def test_fused_adam_without_bias_correction_and_refusals():
    p = nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = apex.FusedAdam([p], lr=0.1, bias_correction=False, eps=0.0)
    p.grad = torch.tensor([0.5, 2.0])
    opt.step()
    # m = 0.1 g, v = 0.001 g^2: the step is lr * m / sqrt(v) = 0.1 * sqrt(10) * sign(g).
    torch.testing.assert_close(p.detach(), torch.tensor([1.0, -2.0]) - 0.1 * 10**0.5)
    assert opt.param_groups[0]["step"] == 1 and set(opt.state[p]) == {"exp_avg", "exp_avg_sq"}
    opt.zero_grad()
    assert p.grad is None  # set_grad_none, as apex
    with pytest.raises(RuntimeError, match="AMSGrad"):
        apex.FusedAdam([p], amsgrad=True)
    with pytest.raises(NotImplementedError, match="FusedLAMB"):
        apex.FusedLAMB([p], lr=1e-3)


@pytest.mark.parametrize("shape", [8, [4, 6]])
@pytest.mark.parametrize("affine", [True, False])
def test_fused_layer_norm_equals_layer_norm(shape, affine):
    torch.manual_seed(1)
    ours = apex.FusedLayerNorm(shape, eps=1e-5, elementwise_affine=affine)
    theirs = nn.LayerNorm(shape, eps=1e-5, elementwise_affine=affine)
    if affine:
        nn.init.normal_(theirs.weight)
        nn.init.normal_(theirs.bias)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 5, *([8] if shape == 8 else shape))
    torch.testing.assert_close(ours(x), theirs(x))


def test_fused_rms_norm_and_amp():
    norm = apex.FusedRMSNorm(8)
    nn.init.normal_(norm.weight)
    x = torch.randn(4, 8)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    torch.testing.assert_close(norm(x), expected)

    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert apex.initialize(model, opt, opt_level="O2") == (model, opt)
    assert apex.initialize([model], opt_level="O1") == [model]
    loss = model(torch.randn(2, 4)).sum()
    with apex.scale_loss(loss, opt) as scaled:
        assert scaled is loss
    assert list(apex.master_params(opt)) == list(model.parameters())


def test_convert_syncbn_model_keeps_the_state_and_computes_batch_norm():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.BatchNorm1d(144))
    for bn in (model[1], model[3]):
        nn.init.normal_(bn.weight)
        bn.running_mean.normal_()
    plain = copy.deepcopy(model)
    synced = apex.convert_syncbn_model(model)
    assert [type(m).__name__ for m in synced] == [
        "Conv2d",
        "SyncBatchNorm",
        "Flatten",
        "SyncBatchNorm",
    ]
    torch.testing.assert_close(synced.state_dict(), plain.state_dict())
    x = torch.randn(5, 3, 8, 8)
    for mode in (True, False):  # batch statistics, then the running ones both updated
        synced.train(mode)
        plain.train(mode)
        torch.testing.assert_close(synced(x), plain(x))
    torch.testing.assert_close(synced[1].running_var, plain[1].running_var)


def test_apex_ddp_refuses_a_gradient_sum():
    with pytest.raises(NotImplementedError, match="gradient_average=False"):
        apex.DistributedDataParallel(nn.Linear(2, 2), gradient_average=False)


# --- the import hook ----------------------------------------------------------------------


@pytest.fixture
def hook():
    """The finder installed in this process; everything it served is forgotten afterwards."""
    before = set(sys.modules)
    finder.install()
    try:
        yield
    finally:
        finder.uninstall()
        for name in set(sys.modules) - before:
            if name.partition(".")[0] in finder.TOPS:
                del sys.modules[name]


def test_served_modules_say_what_they_are(hook):
    import apex as served_apex
    import flash_attn
    import xformers.ops as xops
    from apex.optimizers import FusedAdam

    assert FusedAdam is apex.FusedAdam and xops.LowerTriangularMask is xformers.LowerTriangularMask
    standins.reset()
    flash_attn.flash_attn_func(*_qkv(1, 2, 2, 1, 1, 4))
    assert standins.records() == ["flash_attn.flash_attn_func"]
    for module in (flash_attn, xops, served_apex.amp, flash, xformers, apex):
        assert "reference stand-in" in module.__doc__.lower() and "NOT" in module.__doc__
    with pytest.raises(AttributeError, match="provides only flash_attn_func"):
        flash_attn.flash_attn_with_kvcache  # noqa: B018
    with pytest.raises(ModuleNotFoundError, match="apex is not installed"):
        importlib.import_module("apex.contrib")


# --- reference runs through the harness ---------------------------------------------------

TRAIN = """\
import torch
import torch.nn as nn
from apex import amp
from apex.normalization import FusedLayerNorm
from apex.optimizers import FusedAdam
from flash_attn import flash_attn_func


class Block(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = FusedLayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        y = flash_attn_func(q.half(), k.half(), v.half(), causal=True)
        return x + self.proj(y.float().view(b, s, d))


torch.manual_seed(0)
model = nn.Sequential(Block(), Block(), nn.Linear(32, 1)).cuda()
optimizer = FusedAdam(model.parameters(), lr=1e-3)
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
for step in range(10):
    x = torch.randn(4, 16, 32, device="cuda")
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    with amp.scale_loss(loss, optimizer) as scaled:
        scaled.backward()
    optimizer.step()
    print(step, loss.item())
"""

REAL_FLASH_ATTN = """\
import torch
from flash_attn import flash_attn_func, REAL

print("real flash_attn:", REAL)
model = torch.nn.Linear(4, 4).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    h = model(torch.randn(2, 3, 1, 4, device="cuda"))
    loss = flash_attn_func(h, h, h).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


XFORMERS = """\
import torch
import xformers.ops as xops

q = torch.randn(2, 8, 4, 16, device="cuda")
out = xops.memory_efficient_attention(q, q, q, attn_bias=xops.LowerTriangularMask())
print(tuple(out.shape), out.device.type)
"""


def _shim_launcher(root: Path) -> dict[str, Any]:
    """``python -m torchport.sandbox.shim prog.py`` with a report file."""
    report = root / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "torchport.sandbox.shim", "prog.py"],
        cwd=root,
        env={**os.environ, "TORCHPORT_SHIM_REPORT": str(report), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    data = json.loads(report.read_text()) if report.is_file() else {}
    return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr, **data}


def _harness(root: Path, mode: str) -> dict[str, Any]:
    spec = RunSpec(
        root=root,
        command=["python", "train.py"],
        mode=mode,
        steps=3,
        isolation="process",
        timeout_s=120,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IsolationWarning)  # "process" is asked for
        return run(spec).to_json()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """The training program in reference and tpu mode, a program whose flash_attn is a
    real package of its own, and an xformers program under the shim's own launcher, each
    run once, two at a time."""
    program = tmp_path_factory.mktemp("standins")
    (program / "train.py").write_text(TRAIN)
    real = tmp_path_factory.mktemp("real")
    (real / "train.py").write_text(REAL_FLASH_ATTN)
    (real / "flash_attn").mkdir()
    (real / "flash_attn" / "__init__.py").write_text(
        textwrap.dedent(
            """
            REAL = True

            def flash_attn_func(q, k, v, **kwargs):
                return q * 2
            """
        )
    )
    shimmed = tmp_path_factory.mktemp("shim")
    (shimmed / "prog.py").write_text(XFORMERS)
    jobs = {
        "reference": (_harness, program, "reference"),
        "tpu": (_harness, program, "tpu"),
        "real": (_harness, real, "reference"),
        "shim": (_shim_launcher, shimmed),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(*job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.slow
def test_reference_run_uses_and_records_standins(runs):
    result = runs["reference"]
    assert result["status"] == "ok", result["stderr_tail"]
    assert len(result["losses"]) == 3 and result["steps"] == 3
    assert all(torch.isfinite(torch.tensor(result["losses"])))
    assert result["reference_standins"] == [
        "apex.amp.initialize",
        "apex.amp.scale_loss",
        "apex.normalization.FusedLayerNorm",
        "apex.optimizers.FusedAdam",
        "flash_attn.flash_attn_func",
    ]


@pytest.mark.slow
def test_no_standins_outside_reference_mode(runs):
    result = runs["tpu"]
    assert result["status"] == "failed"
    assert result["error"]["type"] == "ModuleNotFoundError", result["error"]
    assert result["reference_standins"] == []


@pytest.mark.slow
def test_a_real_package_is_never_stood_in(runs):
    result = runs["real"]
    assert result["status"] == "ok", result["stderr_tail"]
    assert "real flash_attn: True" in result["stdout_tail"]
    assert result["reference_standins"] == []


@pytest.mark.slow
def test_shim_launcher_serves_and_reports_standins(runs):
    result = runs["shim"]
    assert result["returncode"] == 0, result["stderr"][-3000:]
    assert result["stdout"] == "(2, 8, 4, 16) cpu\n"
    assert result["reference_standins"] == [
        "xformers.ops.fmha.attn_bias.LowerTriangularMask",
        "xformers.ops.memory_efficient_attention",
    ]
