"""The tpu ports of CUDA switches emit what TorchTPU accepts and means the same (issue 30):
TF32 flags become the global matmul precision TorchTPU maps them to, the SDPA kernels
TorchTPU honours stay chosen, pinning stays, and ``CUDA_LAUNCH_BLOCKING`` takes TorchTPU's
name in every kind of file. Checked against the wheel's facts (``sandbox/torchtpu_facts``)
and, where the port is Python, by running it on the installed torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from torchport.sandbox.torchtpu_facts import section
from torchport.tools.migrate import MigrateOptions, migrate

SETTER = re.compile(r'torch\.set_float32_matmul_precision\("(\w+)"\)')


def _port(tmp_path: Path, files: dict[str, str], target: str = "tpu") -> Path:
    repo = tmp_path / "repo"
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    out = tmp_path / f"out-{target}"
    migrate(repo, MigrateOptions(target=target, out=out))
    return out


@pytest.mark.parametrize(
    ("flag", "value", "precision"),
    [
        ("torch.backends.cuda.matmul.allow_tf32", "False", "HIGHEST"),
        ("torch.backends.cudnn.allow_tf32", "False", "HIGHEST"),
        ("torch.backends.cuda.matmul.allow_tf32", "True", "HIGH"),
    ],
)
def test_tf32_flags_become_torchtpus_precision(tmp_path, flag, value, precision):
    out = _port(tmp_path, {"train.py": f"import torch\n\n{flag} = {value}\n"})
    text = (out / "train.py").read_text()
    (setting,) = SETTER.findall(text)
    assert section("precision")["float32_matmul_precision"][setting] == precision
    assert "allow_tf32" not in text
    run = subprocess.run([sys.executable, str(out / "train.py")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_a_programs_own_precision_setting_is_kept(tmp_path):
    source = 'import torch\n\ntorch.set_float32_matmul_precision("medium")\n'
    out = _port(tmp_path, {"train.py": source})
    assert (out / "train.py").read_text() == source


ATTENTION = """\
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

q = torch.randn(1, 2, 8, 16)
with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=True):
    out = F.scaled_dot_product_attention(q, q, q)
torch.backends.cuda.enable_mem_efficient_sdp(False)
print(out.shape)
"""


def test_sdpa_choices_torchtpu_honours_are_kept(tmp_path):
    text = (_port(tmp_path, {"attn.py": ATTENTION}) / "attn.py").read_text()
    assert "SDPBackend.MATH])" in text and "sdpa_kernel([SDPBackend.FLASH_ATTENTION," in text
    assert "EFFICIENT" not in text and "enable_mem_efficient" not in text
    assert text.count("FLASH_ATTENTION") == 2  # the repeated FLASH went; the legacy one is new
    assert "torch.nn.attention.SDPBackend.MATH" in text  # enable_math defaulted to True
    run = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True)
    assert run.returncode == 0 and "torch.Size([1, 2, 8, 16])" in run.stdout, run.stderr


def test_neuron_still_neutralises_the_choice(tmp_path):
    text = (_port(tmp_path, {"attn.py": ATTENTION}, "neuron") / "attn.py").read_text()
    assert "FLASH_ATTENTION" not in text and "contextlib.nullcontext()" in text


def test_pinning_is_kept_for_tpu_and_dropped_for_neuron(tmp_path):
    source = (
        "import torch\nfrom torch.utils.data import DataLoader\n\n"
        "loader = DataLoader(list(range(4)), pin_memory=True)\n"
        "x = torch.zeros(2).pin_memory()\n"
    )
    tpu = (_port(tmp_path, {"data.py": source}) / "data.py").read_text()
    neuron = (_port(tmp_path, {"data.py": source}, "neuron") / "data.py").read_text()
    assert tpu.count("pin_memory") == 2
    assert "pin_memory" not in neuron


def test_launch_blocking_takes_torchtpus_name_everywhere(tmp_path):
    name = section("environment")["launch_blocking"]
    files = {
        "train.py": 'import os\n\nos.environ["CUDA_LAUNCH_BLOCKING"] = "1"\n',
        "run.sh": "#!/bin/sh\nCUDA_LAUNCH_BLOCKING=1 python train.py\n",
        "Makefile": "debug:\n\tCUDA_LAUNCH_BLOCKING=1 python train.py\n",
        "env.yaml": "env:\n  CUDA_LAUNCH_BLOCKING: '1'\n",
    }
    out = _port(tmp_path, files)
    for path, text in files.items():
        ported = (out / path).read_text()
        assert ported == text.replace("CUDA_LAUNCH_BLOCKING", name), path


ATTENTION_CALLS = """\
import torch.nn.functional as F
from flash_attn import flash_attn_func, flash_attn_varlen_func


def f(q, k, v, p, cu, n, training):
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=p if training else 0.0)
    b = F.scaled_dot_product_attention(q, k, v, None, 0.0)
    c = flash_attn_func(q, k, v, 0.1)
    d = flash_attn_varlen_func(q, k, v, cu, cu, n, n)
    return a, b, c, d
"""


def test_attention_the_tpu_kernel_treats_differently_is_reported_for_tpu_only(tmp_path):
    from torchport.tools.scanner import ScanOptions, scan

    path = tmp_path / "attn.py"
    path.write_text(ATTENTION_CALLS, encoding="utf-8")
    tpu = {(f.line, f.rule) for f in scan(path, ScanOptions(target="tpu")).findings}
    assert {(6, "TPH006"), (8, "TPH006"), (9, "TPH007")} <= tpu
    assert (7, "TPH006") not in tpu  # a literal 0: nothing is dropped on CUDA either
    for target in ("neuron", "xla", "accelerator", None):
        rules = {f.rule for f in scan(path, ScanOptions(target=target)).findings}
        assert not rules & {"TPH006", "TPH007"}, target


def test_a_flash_attn_port_keeps_the_dropout_warning_beside_its_sdpa_call(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "attn.py").write_text(ATTENTION_CALLS, encoding="utf-8")
    options = MigrateOptions(target="tpu", out=tmp_path / "out", annotate=True)
    migrate(tmp_path / "repo", options)
    lines = (tmp_path / "out" / "attn.py").read_text().splitlines()
    assert not any("flash_attn_func(" in line for line in lines)
    warned = [i for i, line in enumerate(lines) if "TPH006" in line]
    # each warning sits on an SDPA call that now carries the dropout: the two calls and the
    # varlen port's helper (it passes its dropout_p on)
    assert len(warned) == 3, lines
    assert all("scaled_dot_product_attention" in " ".join(lines[i : i + 3]) for i in warned)
