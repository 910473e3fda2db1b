"""Oracles for the backend_flags family (tools/catalogue/data/backend_flags.toml): cuDNN,
TF32 and attention-kernel switches."""

# ruff: noqa: E501 (the codemods edit in place, without re-wrapping: the expected lines are long)
from __future__ import annotations

import pytest
from oracle import Pair, assert_pair, params

PAIRS = [
    Pair(
        "TPB001",
        "tpu",
        "cudnn-flags-removed",
        """
        import torch

        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.deterministic = True
        torch.manual_seed(0)
        """,
        # the doc's example writes torch.use_deterministic_algorithms(True); its fix text
        # says the statement is removed (TPU arithmetic is deterministic): the text wins
        """
        import torch

        torch.manual_seed(0)
        """,
    ),
    Pair(
        "TPB001",
        "tpu",
        "cudnn-tf32-off-is-highest-precision",
        """
        import torch

        torch.backends.cudnn.allow_tf32 = False
        x = torch.zeros(2)
        """,
        """
        import torch

        torch.set_float32_matmul_precision("highest")
        x = torch.zeros(2)
        """,
    ),
    Pair(
        "TPB001",
        "neuron",
        "benchmark-flag-removed",
        """
        import torch

        torch.backends.cudnn.benchmark = True
        x = torch.zeros(2)
        """,
        """
        import torch

        x = torch.zeros(2)
        """,
    ),
    Pair(
        "TPB001",
        "accelerator",
        "cudnn-flags-left-alone",
        """
        import torch

        torch.backends.cudnn.benchmark = True
        x = torch.zeros(2)
        """,
    ),
    Pair(
        "TPB002",
        "tpu",
        "tf32-on-is-high",
        """
        import torch

        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        x = torch.zeros(2)
        """,
        """
        import torch

        torch.set_float32_matmul_precision("high")
        x = torch.zeros(2)
        """,
    ),
    Pair(
        "TPB002",
        "tpu",
        "flag-read",
        """
        import torch

        if torch.backends.cuda.matmul.allow_tf32:
            print("tf32 matmuls")
        """,
        """
        import torch

        if torch.get_float32_matmul_precision() != "highest":
            print("tf32 matmuls")
        """,
    ),
    Pair(
        "TPB002",
        "accelerator",
        "users-choice",
        """
        import torch


        def setup(args):
            torch.backends.cuda.matmul.allow_tf32 = args.tf32
        """,
        """
        import torch


        def setup(args):
            torch.set_float32_matmul_precision("high" if args.tf32 else "highest")
        """,
    ),
    Pair(
        "TPB002",
        "neuron",
        "assignment-removed",
        """
        import torch

        torch.backends.cuda.matmul.allow_tf32 = True
        x = torch.zeros(2)
        """,
        """
        import torch

        x = torch.zeros(2)
        """,
    ),
    Pair(
        "TPB003",
        "tpu",
        "efficient-becomes-flash-once",
        """
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        """,
        """
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        """,
    ),
    Pair(
        "TPB003",
        "neuron",
        "efficient-becomes-math",
        """
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v)
        """,
        """
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(q, k, v)
        """,
    ),
    Pair(
        "TPB003",
        "tpu",
        "mem-efficient-switch-removed",
        """
        import torch

        torch.backends.cuda.enable_mem_efficient_sdp(False)
        use_mem = torch.backends.cuda.mem_efficient_sdp_enabled()
        x = torch.zeros(2)
        """,
        """
        import torch

        use_mem = False
        x = torch.zeros(2)
        """,
    ),
    Pair(
        "TPB004",
        "accelerator",
        "cuda-tuning-removed",
        """
        import torch

        torch.backends.cuda.cufft_plan_cache.max_size = 32
        torch.backends.cuda.preferred_linalg_library("cusolver")
        spec = torch.fft.rfft(signal)
        """,
        """
        import torch

        spec = torch.fft.rfft(signal)
        """,
    ),
    Pair(
        "TPB004",
        "tpu",
        "other-backends-and-strings-left-alone",
        """
        import torch

        if torch.backends.mps.is_available():
            print("torch.backends.cuda is not used here")
        """,
    ),
    Pair(
        "TPB003",
        "tpu",
        "legacy-sdp-kernel-context",
        """
        import torch

        with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_mem_efficient=True):
            out = attend(q, k, v)
        """,
        # math is on by default in the legacy context: it stays a choice
        # mem-efficient counts as FLASH; FLASH named once; the module the call names is imported
        """
        import torch
        import torch.nn.attention

        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.FLASH_ATTENTION, torch.nn.attention.SDPBackend.MATH]):
            out = attend(q, k, v)
        """,
    ),
    Pair(
        "TPB001",
        "neuron",
        "only-statement-of-an-if",
        """
        import torch

        if args.benchmark:
            torch.backends.cudnn.benchmark = True
        x = torch.zeros(2)
        """,
        # an if left empty whose test does nothing goes with it
        """
        import torch

        x = torch.zeros(2)
        """,
    ),
]


@pytest.mark.parametrize("pair", params(PAIRS))
def test_backend_flags_oracle(pair: Pair, tmp_path) -> None:
    assert_pair(pair, tmp_path)
