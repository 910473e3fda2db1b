"""Lazy conjugate and negative views on the emulated device read as on the CPU.

``x.conj()`` of a complex tensor is a view with the conjugate bit set (a dispatch key, not
data); ``torch.fft.ifft`` of real input goes through one. The native backend rebuilt its
device tensors with a fixed key set and dropped the bit, so ``x.conj()`` read as ``x`` and
``ifft`` of real input came out wrong (found by benchmarks/opinfo_coverage.py: fft.ifft,
fft.ihfft, fft.hfftn differed). The Python emulator's wrapper dropped it too (``x.conj()``
was not conjugate, ``x.conj().imag`` raised); now the wrapper carries the bits and its CPU
tensor the plain data.
"""

from __future__ import annotations

import pytest
from test_emulator import run_snippet

CODE = """
torch.manual_seed(0)
x = torch.randn(4, dtype=torch.complex64)
r = torch.randn(5, 6)
dev = "tpu"
xd, rd = x.to(dev), r.to(dev)
result["conj"] = xd.conj().is_conj() and xd.conj().cpu().equal(x.conj())
result["neg_view"] = (-xd.conj()).cpu().equal(-x.conj())
result["imag_of_conj"] = xd.conj().imag.cpu().equal(x.conj().imag)
result["ifft_real"] = torch.fft.ifft(rd, norm="ortho").cpu().equal(torch.fft.ifft(r, norm="ortho"))
result["hfftn"] = torch.fft.hfftn(rd).cpu().equal(torch.fft.hfftn(r))
result["conj_plus_self"] = (xd.conj() + xd).cpu().equal(x.conj() + x)
result["outer_of_conj"] = torch.outer(xd.conj(), xd).cpu().equal(torch.outer(x.conj(), x))
result["neg_bit"] = xd.conj().imag.is_neg() and not xd.conj().clone().is_conj()
"""


@pytest.mark.parametrize(
    "backend",
    [
        "native",
        "python",
    ],
)
def test_conjugate_views_and_ifft_of_real_input_match_cpu(backend: str) -> None:
    result = run_snippet(CODE, backend=backend, matmul_precision="highest")
    assert result == {
        "conj": True,
        "neg_view": True,
        "imag_of_conj": True,
        "ifft_real": True,
        "hfftn": True,
        "conj_plus_self": True,
        "outer_of_conj": True,
        "neg_bit": True,
    }
