"""What a local name stands for under a CUDA-only library, read from the file's imports.

A fixer chooses its port by the library's own name for what is called (apex's
``FusedAdam``, flash-attn's ``flash_attn_varlen_func``), and a file may hide that name
behind an alias (``from apex.parallel import DistributedDataParallel as ApexDDP``,
``import xformers.ops as xops``): the scanner resolved it already, the fixer has to
again, from the imports.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
from torchport.tools.cst_imports import gather_imports

from .base import FixContext, dotted


def imported_names(module: cst.Module, roots: tuple[str, ...]) -> dict[str, str]:
    """Local name -> the qualified name it binds, for imports from the packages ``roots``."""
    return {
        spec.bound: spec.qualified
        for spec in gather_imports(module, lambda name: name.split(".")[0] in roots)
        if spec.name is not None or spec.asname is not None  # ``import a.b`` binds ``a``
    }


def qualified(node: cst.CSTNode, ctx: FixContext, key: str) -> str | None:
    """``xops.memory_efficient_attention`` -> ``xformers.ops.memory_efficient_attention``;
    None when ``node`` is not a plain dotted name."""
    name = dotted(node)
    if name is None:
        return None
    first, _, rest = name.partition(".")
    return ctx.state.get(key, {}).get(first, first) + (f".{rest}" if rest else "")


def last_name(node: cst.CSTNode, ctx: FixContext, key: str, refuse: Callable[[], Exception]) -> str:
    """The library's own name for what ``node`` (a call, or a bare reference) names."""
    func = node.func if isinstance(node, cst.Call) else node
    name = qualified(func, ctx, key) if isinstance(func, cst.BaseExpression) else None
    if name is None:
        raise refuse()
    return name.rsplit(".", 1)[-1]
