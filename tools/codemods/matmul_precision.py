"""TF32 switches on tpu (TPB002, and ``cudnn.allow_tf32`` of TPB001): the precision the CUDA
program asked for, as TorchTPU's global matmul precision.

TorchTPU replaces ``torch.set_float32_matmul_precision`` with a setter of its one global
``Precision`` (``sandbox.torchtpu_facts.section("precision")``: medium -> DEFAULT, a single
bf16 pass; high -> HIGH, three passes; highest -> HIGHEST, float32-exact), and that setting
covers every matmul-class op, convolutions included. So:

- ``allow_tf32 = False`` (matmul or cuDNN): the program asks for full float32 products;
  ``"highest"`` is the only setting that gives them.
- ``matmul.allow_tf32 = True``: TF32 keeps 10 mantissa bits. DEFAULT keeps bf16's 7, coarser
  than what the program was tested with; HIGH (bf16 x 3, about 16 bits) is the nearest
  setting at least as precise, and PyTorch documents ``"high"`` as ``allow_tf32 = True``.
- ``cudnn.allow_tf32 = True`` is cuDNN's default and relaxes convolutions only; TorchTPU has
  no convolution-only setting, so the line goes like the other cuDNN switches.
- ``cudnn.allow_tf32 = args.tf32`` (the user's choice) maps like the matmul flag, ``"high" if
  args.tf32 else "highest"``, unless the file also sets ``matmul.allow_tf32``: that line then
  sets the one precision, and the cuDNN line goes.
- a read of ``matmul.allow_tf32`` asks whether float32 matmuls are reduced:
  ``torch.get_float32_matmul_precision() != "highest"``, which TorchTPU also answers.
"""

from __future__ import annotations

import re

import libcst as cst

from .base import FixContext, Fixed, code_of, dotted, fixer
from .config import REPLACE_STATEMENTS, _statement_or_constant, tf32_precision

SETTER = "torch.set_float32_matmul_precision"
FULL = '"highest"'
MATMUL_TF32 = re.compile(r"\bmatmul\.allow_tf32\s*=[^=]")


@fixer("TPB002", {"tpu"})
def tpu_tf32(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    name = dotted(node) or ""
    assign = ctx.parent(ctx.parent(ctx.original))
    if name.endswith("allow_tf32") and not isinstance(assign, cst.Assign):
        return ctx.expr(f"torch.get_float32_matmul_precision() != {FULL}")
    return tf32_precision(node, ctx, SETTER)


@fixer("TPB001", {"tpu"})
def tpu_cudnn(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """cuDNN switches do nothing on a TPU, except ``allow_tf32 = False``: full float32
    convolutions, which TorchTPU gives under the global ``"highest"`` precision."""
    assign = ctx.parent(ctx.parent(ctx.original))
    if not (
        (dotted(node) or "").endswith("allow_tf32")
        and isinstance(assign, cst.Assign)
        and len(assign.targets) == 1
    ):
        return _statement_or_constant(node, ctx)
    value = code_of(assign.value)
    if value == "False":
        ctx.state.setdefault(REPLACE_STATEMENTS, {})[id(assign)] = f"{SETTER}({FULL})"
        ctx.need("torch")
        return node
    if value == "True" or _sets_matmul_tf32(ctx):
        return _statement_or_constant(node, ctx)  # cuDNN's default / the matmul line decides
    # the user's choice (``args.tf32``): as TPB002 maps the matmul flag, the one precision
    ctx.state.setdefault(REPLACE_STATEMENTS, {})[id(assign)] = (
        f'{SETTER}("high" if {value} else {FULL})'
    )
    ctx.need("torch")
    return node


def _sets_matmul_tf32(ctx: FixContext) -> bool:
    """Whether the file sets ``torch.backends.cuda.matmul.allow_tf32``: then that line sets
    TorchTPU's one precision, and a cuDNN flag beside it has nothing left to say."""
    module = [ctx.original, *ctx.ancestors(ctx.original)][-1]
    return isinstance(module, cst.Module) and MATMUL_TF32.search(module.code) is not None
