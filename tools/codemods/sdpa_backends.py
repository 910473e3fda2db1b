"""TPB003 on tpu: a CUDA program's choice of attention kernels, kept where TorchTPU honours it.

TorchTPU reads three of torch's SDPA switches (the glue library calls
``at::Context::userEnabledFlashSDP``, ``userEnabledMathSDP`` and
``userEnabledOverrideableSDP``, and says "enable at least one of FLASH, OVERRIDEABLE, or MATH
for TorchTPU" when none is left): ``SDPBackend.FLASH_ATTENTION`` selects its fused kernel,
``MATH`` its decomposition. The memory-efficient and cuDNN kernels are CUDA's own fused
kernels; TorchTPU reads neither switch, and a selection of only them leaves no viable
backend. So FLASH, MATH and OVERRIDEABLE stay (TPB005, no finding on tpu), EFFICIENT and
CUDNN become FLASH (the fused kernel the program asked for, in the form TorchTPU has), the
switches nothing reads go, and a read of one answers False.
The deprecated ``torch.backends.cuda.sdp_kernel(enable_*=...)`` becomes the
``torch.nn.attention.sdpa_kernel([...])`` it stands for, in those terms.
"""

from __future__ import annotations

import libcst as cst

from . import repeats
from .base import (
    REMOVE_STATEMENT,
    FixContext,
    Fixed,
    NotApplicable,
    code_of,
    dotted,
    fixer,
)

FLASH = "FLASH_ATTENTION"
# SDPBackend member -> what TorchTPU is asked for instead (absent: kept as written)
MEMBERS = {"EFFICIENT_ATTENTION": FLASH, "CUDNN_ATTENTION": FLASH}
# legacy sdp_kernel keyword -> the backend it enables on TorchTPU (all default to True)
LEGACY = {
    "enable_flash": FLASH,
    "enable_math": "MATH",
    "enable_mem_efficient": FLASH,
    "enable_cudnn": FLASH,
}
note_list = repeats.marker("TPB003")  # [FLASH, EFFICIENT] -> [FLASH, FLASH] -> [FLASH]


@fixer("TPB003", {"tpu"})
def tpu_backends(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    name = (dotted(node.func) if isinstance(node, cst.Call) else dotted(node)) or ""
    last = name.rsplit(".", 1)[-1]
    if isinstance(node, cst.Attribute) and last in MEMBERS:
        note_list(ctx)
        return node.with_changes(attr=cst.Name(MEMBERS[last]))
    if last == "sdp_kernel" and isinstance(node, cst.Call):
        return _sdpa_kernel(node, ctx)
    if last.endswith("_enabled"):
        return cst.Name("False")  # is CUDA's own kernel on? TorchTPU never runs it
    if last.startswith("enable_"):
        return REMOVE_STATEMENT
    raise NotApplicable(f"no codemod for {name}")


def _sdpa_kernel(node: cst.Call, ctx: FixContext) -> cst.BaseExpression:
    """``sdp_kernel(enable_flash=True, enable_math=False)`` ->
    ``sdpa_kernel([SDPBackend.FLASH_ATTENTION])``: the backends it leaves on, TorchTPU's."""
    enabled = dict.fromkeys(LEGACY, True)
    for arg in node.args:
        if arg.keyword is None or arg.keyword.value not in LEGACY:
            raise NotApplicable("sdp_kernel with arguments other than enable_*=: port by hand")
        value = code_of(arg.value)
        if value not in ("True", "False"):
            raise NotApplicable(f"{arg.keyword.value}={value} is decided at run time")
        enabled[arg.keyword.value] = value == "True"
    backends = list(dict.fromkeys(LEGACY[k] for k, on in enabled.items() if on))
    if not backends:
        raise NotApplicable("sdp_kernel disables every backend")
    ctx.need("torch.nn.attention")
    members = ", ".join(f"torch.nn.attention.SDPBackend.{b}" for b in backends)
    return ctx.expr(f"torch.nn.attention.sdpa_kernel([{members}])")
