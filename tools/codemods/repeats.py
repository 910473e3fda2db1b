"""A fix that renames one member of a literal list, tuple or set can make it repeat another:
``[FLASH_ATTENTION, EFFICIENT_ATTENTION]`` becomes ``[MATH, MATH]`` on neuron, ``(torch.float16,
torch.bfloat16)`` becomes ``(torch.bfloat16, torch.bfloat16)``. Each occurrence means what
the first does, so a reviewer reads the repeats as a mistake: they go.

``marker(code)`` gives rule ``code``'s fixer a function to call on the node it rewrites; the
container that node is a member of is then rewritten without repeats (the first of each
stays, the container's own layout kept), as a follow-up edit of that rule.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from .base import FixContext, Fixed, code_of, follow_up

Containers = cst.List | cst.Tuple | cst.Set


def marker(code: str) -> Callable[[FixContext], None]:
    """The function rule ``code``'s fixer calls to have its node's container de-duplicated."""
    key = f"{code}_repeats"  # state: ids of the containers whose members this fix changed

    def mark(ctx: FixContext) -> None:
        element = ctx.parent(ctx.original)
        if isinstance(element, cst.Element):
            container = ctx.parent(element)
            if isinstance(container, Containers):
                ctx.state.setdefault(key, set()).add(id(container))

    @follow_up(code)
    def drop_repeats(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
        marked = ctx.state.get(key)
        if not marked or id(original) not in marked or not isinstance(node, Containers):
            return None
        seen: set[str] = set()
        keep = []
        for element in node.elements:
            text = code_of(element.value)
            if text not in seen:
                seen.add(text)
                keep.append(element)
        if len(keep) == len(node.elements):
            return None
        last = node.elements[-1].comma
        if isinstance(node, cst.Tuple) and len(keep) == 1:
            last = cst.Comma()  # (x,) stays a tuple
        keep[-1] = keep[-1].with_changes(comma=last)
        return node.with_changes(elements=keep)

    return mark
