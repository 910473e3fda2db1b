"""flash-attn and xformers ported by the codemods (TPK010, TPK011) to
``scaled_dot_product_attention``: every generated form computes what the library does (the
reference stand-ins, sandbox/shim/standins/flash.py and xformers.py, which follow the
libraries' documented semantics), forward and gradients; what cannot be said exactly is
refused with its reason; whole programs verify rules-only. The outputs themselves are
golden files (tests/fixtures/golden/TPK010*.py, TPK011*.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from torchport.sandbox.shim.standins import flash, xformers
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import scan

FLASH_FORMS = """\
import torch
from flash_attn import flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func
from flash_attn import flash_attn_varlen_func as varlen
from flash_attn import flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func


def self_attention(x, heads):
    B, T, C = x.shape
    q, k, v = x.view(B, T, 3, heads, C // (3 * heads)).unbind(2)
    return flash_attn_func(q, k, v, causal=True)


def lengths_differ(q, k, v, causal):
    return flash_attn_func(q, k, v, 0.0, 0.3, causal)


def grouped(q, k, v):
    return flash_attn_func(q, k, v, causal=True, deterministic=True)


def packed(qkv):
    return flash_attn_qkvpacked_func(qkv, causal=True, softmax_scale=0.5)


def kv_packed(q, kv):
    return flash_attn_kvpacked_func(q, kv, causal=True)


def varlen_uneven(q, k, v, cu_q, cu_k, causal):
    return varlen(q, k, v, cu_q, cu_k, 5, 6, causal=causal, softmax_scale=0.4)


def varlen_packed(qkv, cu):
    return flash_attn_varlen_qkvpacked_func(qkv, cu, 5, causal=True)


def varlen_kv_packed(q, kv, cu_q, cu_k):
    return flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, 4, 6)
"""

XFORMERS_FORMS = """\
import torch
import xformers.ops as xops
from xformers.ops import LowerTriangularMask, memory_efficient_attention


def four_d(x, heads):
    B, N, C = x.shape
    q, k, v = xops.unbind(x.reshape(B, N, 3, heads, C // (3 * heads)), 2)
    return memory_efficient_attention(q, k, v, attn_bias=LowerTriangularMask())


def any_rank(q, k, v):
    return xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask(), op=None)


def bottom_right(q, k, v):
    bias = None
    return xops.fmha.memory_efficient_attention_forward(
        q, k, v, xops.fmha.attn_bias.LowerTriangularFromBottomRightMask(), 0.0, 0.7
    )
"""

XFORMERS_TENSOR_BIAS = """\
from xformers.ops import memory_efficient_attention


def with_bias(q, k, v, bias):
    return memory_efficient_attention(q, k, v, attn_bias=bias, scale=0.25)
"""


def _port(tmp_path: Path, source: str, target: str = "tpu") -> str:
    path = tmp_path / "attention.py"
    path.write_text(source)
    findings = [f for f in scan(path).findings if f.rule in ("TPK010", "TPK011")]
    result = migrate_python(source, findings, target, path.name)
    assert result.unapplied == [], result.unapplied
    return result.source


def _module(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
    return module


@pytest.fixture
def ported_flash(tmp_path, monkeypatch):
    """(the original run on flash-attn's stand-in, the port run on torch alone)."""
    ported = _port(tmp_path, FLASH_FORMS)
    assert "flash_attn" not in ported
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "flash_attn", flash)
        original = _module(FLASH_FORMS, "original")
    return original, _module(ported, "ported")


def _xformers_modules(tmp_path, monkeypatch, source):
    ported = _port(tmp_path, source)
    assert "xformers" not in ported
    ops = types.ModuleType("xformers.ops")
    ops.__dict__.update(vars(xformers))
    ops.fmha = types.SimpleNamespace(
        memory_efficient_attention_forward=xformers.memory_efficient_attention_forward,
        attn_bias=xformers,
    )
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "xformers", types.ModuleType("xformers"))
        patch.setitem(sys.modules, "xformers.ops", ops)
        sys.modules["xformers"].ops = ops
        original = _module(source, "original")
    return original, _module(ported, "ported")


def _leaves(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    return [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes]


def _same_values_and_gradients(original, ported, name: str, *args) -> None:
    """The two functions agree in output and in every input's gradient (float64)."""
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    results = []
    for module in (original, ported):
        out = getattr(module, name)(*args)
        weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
        grads = torch.autograd.grad((out * weights).sum(), leaves)
        results.append((out.detach(), grads))
    (out_a, grads_a), (out_b, grads_b) = results
    assert out_a.shape == out_b.shape
    torch.testing.assert_close(out_b, out_a, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


def test_flash_self_attention_and_equal_lengths_are_is_causal(ported_flash):
    original, ported = ported_flash
    torch.manual_seed(0)
    _same_values_and_gradients(original, ported, "self_attention", *_leaves((2, 7, 48)), 2)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("sq", "sk"), [(3, 8), (8, 3), (5, 5)])
def test_flash_causal_is_bottom_right_when_lengths_differ(ported_flash, sq, sk, causal):
    """Decoding against a longer cache (sq < sk), and more queries than keys (sq > sk: the
    first queries see no key and give zeros, as in flash-attn)."""
    original, ported = ported_flash
    torch.manual_seed(1)
    args = _leaves((2, sq, 3, 8), (2, sk, 3, 8), (2, sk, 3, 8))
    _same_values_and_gradients(original, ported, "lengths_differ", *args, causal)


def test_flash_grouped_query_heads(ported_flash):
    original, ported = ported_flash
    torch.manual_seed(2)
    args = _leaves((2, 6, 8, 4), (2, 9, 2, 4), (2, 9, 2, 4))
    _same_values_and_gradients(original, ported, "grouped", *args)


def test_flash_packed_forms(ported_flash):
    original, ported = ported_flash
    torch.manual_seed(3)
    _same_values_and_gradients(original, ported, "packed", *_leaves((2, 6, 3, 4, 8)))
    args = _leaves((2, 4, 4, 8), (2, 7, 2, 2, 8))  # fewer kv heads, a longer key sequence
    _same_values_and_gradients(original, ported, "kv_packed", *args)


@pytest.mark.parametrize("causal", [True, False])
def test_flash_varlen_uneven_lengths(ported_flash, causal):
    """Three sequences of lengths (2, 5, 1) queries and (4, 3, 6) keys: one masked SDPA
    over the packed tokens, causal aligned to each sequence's last key."""
    original, ported = ported_flash
    torch.manual_seed(4)
    cu_q = torch.tensor([0, 2, 7, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 4, 7, 13], dtype=torch.int32)
    args = _leaves((8, 4, 8), (13, 2, 8), (13, 2, 8))
    _same_values_and_gradients(original, ported, "varlen_uneven", *args, cu_q, cu_k, causal)


def test_flash_varlen_packed_forms(ported_flash):
    original, ported = ported_flash
    torch.manual_seed(5)
    cu = torch.tensor([0, 3, 4, 9], dtype=torch.int32)
    _same_values_and_gradients(original, ported, "varlen_packed", *_leaves((9, 3, 2, 8)), cu)
    cu_q = torch.tensor([0, 4, 5], dtype=torch.int32)
    cu_k = torch.tensor([0, 2, 8], dtype=torch.int32)
    args = _leaves((5, 4, 8), (8, 2, 1, 8))
    _same_values_and_gradients(original, ported, "varlen_kv_packed", *args, cu_q, cu_k)


def test_xformers_layouts_and_masks(tmp_path, monkeypatch):
    original, ported = _xformers_modules(tmp_path, monkeypatch, XFORMERS_FORMS)
    torch.manual_seed(6)
    _same_values_and_gradients(original, ported, "four_d", *_leaves((2, 5, 24)), 2)
    # 3-D [B, M, K] and 5-D [B, M, G, H, K]: the rank is not evident, movedim is exact
    for shape in ((3, 6, 8), (2, 6, 4, 8), (2, 6, 2, 3, 8)):
        _same_values_and_gradients(original, ported, "any_rank", *_leaves(shape, shape, shape))
    q, k = (2, 3, 2, 8), (2, 7, 2, 8)
    _same_values_and_gradients(original, ported, "bottom_right", *_leaves(q, k, k))


def test_xformers_tensor_bias_is_added_to_the_scores(tmp_path, monkeypatch):
    original, ported = _xformers_modules(tmp_path, monkeypatch, XFORMERS_TENSOR_BIAS)
    torch.manual_seed(7)
    q, k = (2, 4, 3, 8), (2, 6, 3, 8)
    args = _leaves(q, k, k, (2, 3, 4, 6))
    _same_values_and_gradients(original, ported, "with_bias", *args)
