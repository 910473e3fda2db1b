"""flash-attn and xformers ported by the codemods (TPK010, TPK011) to
``scaled_dot_product_attention``: every generated form computes what the library does (the
reference stand-ins, sandbox/shim/standins/flash.py and xformers.py, which follow the
libraries' documented semantics), forward and gradients; what cannot be said exactly is
refused with its reason; whole programs verify rules-only. The outputs themselves are
golden files (tests/fixtures/golden/TPK010*.py, TPK011*.py)."""

from __future__ import annotations

import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from rules_run import migrate_rules_only
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


def chosen(q, k, v, causal):
    return xops.memory_efficient_attention(
        query=q, key=k, value=v, attn_bias=xops.LowerTriangularMask() if causal else None
    )


def chosen_the_other_way(q, k, v, full):
    return memory_efficient_attention(q, k, v, None if full else LowerTriangularMask())


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
    for flag in (True, False):  # the mask chosen at run time
        _same_values_and_gradients(original, ported, "chosen", *_leaves(q, k, k), flag)
        _same_values_and_gradients(
            original, ported, "chosen_the_other_way", *_leaves(k, k, k), flag
        )


def test_xformers_tensor_bias_is_added_to_the_scores(tmp_path, monkeypatch):
    original, ported = _xformers_modules(tmp_path, monkeypatch, XFORMERS_TENSOR_BIAS)
    torch.manual_seed(7)
    q, k = (2, 4, 3, 8), (2, 6, 3, 8)
    args = _leaves(q, k, k, (2, 3, 4, 6))
    _same_values_and_gradients(original, ported, "with_bias", *args)


REFUSED = {
    # flash-attn settings SDPA has no argument for
    "flash_attn_func(q, k, v, window_size=(4, 0))": "sliding-window",
    "flash_attn_func(q, k, v, softcap=30.0)": "softcapping",
    "flash_attn_func(q, k, v, alibi_slopes=slopes)": "ALiBi",
    "flash_attn_func(q, k, v, return_attn_probs=True)": "log-sum-exp",
    "flash_attn_func(q, k, v, return_attn_probs=args.probs)": "log-sum-exp",
    "flash_attn_func(q, k, v, **options)": "arguments passed with **",
    "flash_attn_func(*qkv)": "arguments passed with *",
    "flash_attn_func(q, k, v, 0.0, None, True, (-1, -1))": "pass it by keyword",
    "flash_attn_func(q, k, v, scale=0.5)": "scale= is not an argument of flash_attn",
    "flash_attn_func(q.float(), k + 1, v, causal=True)": "computed in the call",
    "flash_attn_varlen_qkvpacked_func(qkv, cu[0] + cu, 8)": "assign it to a name first",
    "flash_attn_with_kvcache(q, k_cache, v_cache)": "updates the KV cache in place",
    "partial(flash_attn_func, causal=True)": "referenced, not called",
    # xformers biases that are not one of the ported masks
    "xops.memory_efficient_attention(q, k, v, attn_bias=BlockDiagonalMask.from_seqlens(s))": (
        "block-diagonal"
    ),
    "xops.memory_efficient_attention(q, k, v, attn_bias=LowerTriangularMask().add_bias(b))": (
        "fold both into one additive attn_mask"
    ),
    "xops.memory_efficient_attention(q, k, v, output_dtype=torch.float32)": "cast its result",
    "xops.memory_efficient_attention(q, k, v, LowerTriangularMask() if args.causal else mask)": (
        "a mask chosen at run time between other values"
    ),
    "xops.memory_efficient_attention(q, k, v, [LowerTriangularMask()][0])": "mixed with other",
    "xops.memory_efficient_attention_partial(q, k, v)": "has no port",
}


def ported_line(tmp_path: Path, line: str, header: str = "") -> tuple[str, list[str]]:
    source = textwrap.dedent(
        f"""\
        import torch
        from functools import partial
        import xformers.ops as xops
        from xformers.ops.fmha.attn_bias import BlockDiagonalMask, LowerTriangularMask
        from flash_attn import flash_attn_func, flash_attn_varlen_qkvpacked_func
        from flash_attn import flash_attn_with_kvcache
        {header}


        def attention(q, k, v, qkv, cu, k_cache, v_cache, args, options, slopes, mask, s, b):
            out = {line}
            return out
        """
    )
    path = tmp_path / "t.py"
    path.write_text(source)
    findings = [f for f in scan(path).findings if f.rule in ("TPK010", "TPK011")]
    result = migrate_python(source, findings, "tpu", "t.py")
    return result.source, [why for _, why in result.unapplied]


@pytest.mark.parametrize("line", sorted(REFUSED))
def test_what_sdpa_cannot_say_the_same_is_refused_with_its_reason(tmp_path, line):
    source, reasons = ported_line(tmp_path, line)
    assert f"out = {line}\n" in source  # left as it was, for a human (or the LLM)
    assert reasons and all(REFUSED[line] in why or "part of the call" in why for why in reasons)
    assert any(REFUSED[line] in why for why in reasons), reasons


def test_a_bias_in_a_variable_is_a_tensor_unless_the_file_builds_masks(tmp_path):
    """A variable ``attn_bias`` is passed on as SDPA's ``attn_mask`` (a float tensor is
    added to the scores in both), unless the file builds an xformers mask outside the
    attention calls: the variable may hold that object, which SDPA cannot take."""
    line = "xops.memory_efficient_attention(q, k, v, attn_bias=mask)"
    source, reasons = ported_line(tmp_path, line)
    assert reasons == [] and "attn_mask=mask" in source
    source, reasons = ported_line(tmp_path, line, header="CAUSAL = LowerTriangularMask()")
    assert f"out = {line}\n" in source
    assert any("may hold an xformers mask" in why for why in reasons), reasons


def test_a_mask_class_built_in_a_refused_call_is_left_with_it(tmp_path):
    """``Enclosed``: the mask inside a ported call is converted with it; inside a refused
    one, it is left, and says why."""
    line = "xops.memory_efficient_attention(q, k, v, attn_bias=LowerTriangularMask(), p=*s)"
    source, reasons = ported_line(tmp_path, line.replace("p=*s", "*s"))
    assert sorted(reasons)[1].startswith("part of the call around it"), reasons
    source, reasons = ported_line(tmp_path, "xops.memory_efficient_attention(q, k, v, None)")
    assert reasons == [] and "scaled_dot_product_attention(" in source


PROGRAM = """\
import torch
import torch.nn as nn
from flash_attn import flash_attn_func, flash_attn_varlen_qkvpacked_func


class Block(nn.Module):
    def __init__(self, dim=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, memory, cu_seqlens):
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.heads, self.head_dim)
        k, v = self.kv(memory).view(B, memory.shape[1], 2, self.kv_heads, self.head_dim).unbind(2)
        # decoding-style: fewer queries than keys, grouped key/value heads
        y = flash_attn_func(q, k, v, causal=True)
        packed = self.qkv(y.reshape(B, T, C)).view(B * T, 3, self.heads, self.head_dim)
        z = flash_attn_varlen_qkvpacked_func(packed, cu_seqlens, T, causal=True)
        return self.out(z.reshape(B, T, C))


torch.manual_seed(0)
model = Block().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
cu_seqlens = torch.tensor([0, 3, 8, 10, 16], dtype=torch.int32).cuda()
for step in range(10):
    x = torch.randn(2, 8, 32).cuda()
    memory = torch.randn(2, 12, 32).cuda()
    loss = model(x, memory, cu_seqlens).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.6f}")
"""

XFORMERS_PROGRAM = """\
import torch
import torch.nn as nn
import xformers.ops as xops


class CrossAttention(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, context, bias):
        B, N, C = x.shape
        q = self.q(x).reshape(B, N, self.heads, C // self.heads)
        k, v = xops.unbind(self.kv(context).reshape(B, -1, 2, self.heads, C // self.heads), 2)
        y = xops.memory_efficient_attention(q, k, v, attn_bias=bias)
        return self.out(y.reshape(B, N, C))


torch.manual_seed(0)
model = CrossAttention().cuda()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
bias = torch.randn(2, 4, 6, 9).cuda()
for step in range(10):
    x, context = torch.randn(2, 6, 32).cuda(), torch.randn(2, 9, 32).cuda()
    loss = model(x, context, bias).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


PROGRAMS = {  # program, what its port must say, the library that must be gone
    "flash-attn": (PROGRAM, "causal_lower_right(q.size(1), k.size(1))", "flash_attn"),
    "xformers": (XFORMERS_PROGRAM, "attn_mask=bias", "xformers"),
}


@pytest.mark.slow
@pytest.mark.parametrize("target", ["tpu", "neuron"])
@pytest.mark.parametrize("library", sorted(PROGRAMS))
def test_a_program_verifies_rules_only_with_the_same_numbers(tmp_path, library, target):
    """Forward and gradients through the loss: eight optimizer steps on the same numbers
    as the original run on the library's stand-in."""
    program, written, gone = PROGRAMS[library]
    final = migrate_rules_only(tmp_path, program, target, steps=8)
    assert final["outcome"] == "verified", (final["verification"]["reason"], final["decisions"])
    migrated = (tmp_path / "out" / "train.py").read_text()
    assert gone not in migrated and written in migrated
    assert "stand-ins" in final["verification"]["reason"]
    assert final["verification"]["parity"]["max_abs"] < 1e-5


def test_a_name_imported_beside_the_ported_one_and_never_used_goes_with_it(tmp_path):
    """``from flash_attn import flash_attn_qkvpacked_func, flash_attn_func`` with only the
    second called: the leftover name would keep the CUDA-only import, and the port would
    fail at it on the target. A ``# noqa`` import (a deliberate re-export) stays."""
    source = textwrap.dedent(
        """\
        import torch
        from flash_attn import flash_attn_qkvpacked_func, flash_attn_func
        from flash_attn import flash_attn_varlen_func  # noqa: F401


        def attention(q, k, v):
            return flash_attn_func(q, k, v).reshape(q.shape[0], q.shape[1], -1)
        """
    )
    ported = _port(tmp_path, source)
    assert "flash_attn_qkvpacked_func" not in ported and "flash_attn_func" not in ported
    assert "from flash_attn import flash_attn_varlen_func  # noqa: F401\n" in ported
