"""Scaled-dot-product attention on the emulated ``tpu`` device as TorchTPU chooses its kernel
(sandbox/emulator/attention.py, from ``torch_tpu::AtenFusedSdpChoice``'s messages in the
wheel): its fused kernel runs under FLASH or OVERRIDEABLE when its conditions hold, and then
ignores ``dropout_p``; otherwise MATH with a performance warning; EFFICIENT is not TorchTPU's.
Both emulators."""

from __future__ import annotations

import test_emulator
from test_emulator import run_snippet

backend = test_emulator.backend  # the fixture: every test below runs on both emulators

PRELUDE = """
import warnings
from torch.nn.attention import SDPBackend, sdpa_kernel
torch.set_float32_matmul_precision("highest")  # the kernel choice alone, exact matmuls
torch.manual_seed(0)
q, k, v = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8)
no_dropout = F.scaled_dot_product_attention(q, k, v)
dev = lambda *ts: [t.to("tpu") for t in ts]
gap = lambda x, y: (x.detach().cpu() - y).abs().max().item()
"""


def test_the_fused_kernel_runs_under_flash_and_ignores_dropout(backend):
    code = (
        PRELUDE
        + """
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        qd, kd, vd = (t.requires_grad_() for t in dev(q, k, v))
        out = F.scaled_dot_product_attention(qd, kd, vd, dropout_p=0.5)
        out.sum().backward()
    result["flash"] = gap(out, no_dropout)
    result["grad"] = qd.grad is not None
    # torch's defaults enable FLASH too: the fused kernel, dropout ignored
    result["default"] = gap(F.scaled_dot_product_attention(*dev(q, k, v), dropout_p=0.5),
                            no_dropout)
    result["warnings"] = [str(w.message) for w in caught]
"""
    )
    r = run_snippet(code, backend=backend)
    assert r["flash"] <= 1e-5 and r["default"] <= 1e-5 and r["grad"], r
    assert r["warnings"] == [], r


def test_outside_the_fused_kernels_conditions_flash_falls_back_to_math_with_a_warning(backend):
    code = (
        PRELUDE
        + """
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        q3 = q[0]  # rank 3: not the fused kernel's
        out = F.scaled_dot_product_attention(*dev(q3, k[0], v[0]))
    result["rank3"] = gap(out, F.scaled_dot_product_attention(q3, k[0], v[0]))
    result["flash_warning"] = [str(w.message) for w in caught]
    caught.clear()
    with sdpa_kernel(SDPBackend.MATH):  # MATH keeps dropout, and says it is not optimized
        out = F.scaled_dot_product_attention(*dev(q, k, v), dropout_p=0.5)
    result["math_dropout"] = gap(out, no_dropout)
    result["math_warning"] = [str(w.message) for w in caught]
try:
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        F.scaled_dot_product_attention(*dev(q, k, v))
    result["efficient"] = None
except RuntimeError as exc:
    result["efficient"] = str(exc)
"""
    )
    r = run_snippet(code, backend=backend)
    assert r["rank3"] <= 1e-5, r
    assert "only supports FLASH_ATTENTION" in r["flash_warning"][0], r
    assert "query rank is at least 4 (current: 3)" in r["flash_warning"][0], r
    assert r["math_dropout"] > 0.1 and "dropout_p is 0.0 (current: 0.5)" in r["math_warning"][0]
    assert r["efficient"].startswith("no viable SDPBackend found"), r


def test_a_head_dimension_the_fused_kernel_cannot_tile_takes_math(backend):
    code = (
        PRELUDE
        + """
q5 = torch.randn(1, 2, 4, 130)  # head dim 130: not below 128, not a multiple of it
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = F.scaled_dot_product_attention(*dev(q5, q5, q5), dropout_p=0.5)
result["dropped"] = gap(out, F.scaled_dot_product_attention(q5, q5, q5)) > 0.1
result["warned"] = any("Head dimension" in str(w.message) for w in caught)
"""
    )
    r = run_snippet(code, backend=backend)
    assert r["dropped"] and r["warned"], r


def test_the_warnings_conditions_are_the_wheels_own_lines():
    """The emulator's two warnings list the wheel's condition lines (the facts' [sdpa]), all
    of them, and only those: a newer wheel's changed condition shows up here."""
    from torchport.sandbox.emulator import attention
    from torchport.sandbox.torchtpu_facts import section

    lines = set(section("sdpa")["conditions"])
    assert set(attention.FLASH_CONDITIONS) | set(attention.MATH_CONDITIONS) == lines
    for text, conditions in (
        (attention._FLASH, attention.FLASH_CONDITIONS),
        (attention._MATH, attention.MATH_CONDITIONS),
    ):
        assert all(f"- {line}" in text for line in conditions), conditions
    assert section("sdpa")["no_backend_error"] == attention.NO_BACKEND


def test_attention_keeps_torchs_masks_and_grouped_heads(backend):
    """The kernel choice leaves torch's attention as it is: a boolean mask (rank 3, MATH) and
    a lower-right causal bias over grouped key/value heads (the fused kernel) match the CPU."""
    code = (
        PRELUDE
        + """
from torch.nn.attention.bias import causal_lower_right
warnings.simplefilter("ignore")
q3, mask = torch.randn(4, 16, 8), torch.ones(16, 16, dtype=torch.bool).tril()
result["bool_mask"] = gap(F.scaled_dot_product_attention(*dev(q3, q3, q3), attn_mask=dev(mask)[0]),
                          F.scaled_dot_product_attention(q3, q3, q3, attn_mask=mask))
kg, vg = torch.randn(2, 2, 12, 8), torch.randn(2, 2, 12, 8)
qg = torch.randn(2, 4, 8, 8)
out = F.scaled_dot_product_attention(*dev(qg, kg, vg), attn_mask=causal_lower_right(8, 12),
                                     enable_gqa=True)
result["gqa_lower_right"] = gap(out, F.scaled_dot_product_attention(
    qg, kg, vg, attn_mask=causal_lower_right(8, 12), enable_gqa=True))
"""
    )
    r = run_snippet(code, backend=backend)
    assert r["bool_mask"] <= 1e-5 and r["gqa_lower_right"] <= 1e-5, r
