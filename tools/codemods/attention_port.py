"""What flash-attn and xformers ports share: reading a call's arguments against the
library's signature, the causal mask, and whether the result must be made contiguous.

Both libraries take ``(batch, seq, heads, dim)`` tensors and return a contiguous one;
``scaled_dot_product_attention`` takes ``(batch, heads, seq, dim)``. The port transposes
in and back, and adds ``.contiguous()`` unless every use of the result evidently accepts
any strides (``reshape``, ``flatten``, einops' ``rearrange``): ``.view()`` on a
transposed tensor raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst

from .attention_shapes import enclosing_function, strip_same_shape
from .base import FixContext, NotApplicable, code_of, dotted
from .sdpa import LOWER_RIGHT, template

ANY = ("*",)  # an argument dropped whatever its value
# Uses of a result that work on any strides: no .contiguous() needed before them.
STRIDE_AGNOSTIC = frozenset({"reshape", "flatten", "contiguous", "size", "dim"})
REARRANGE = ("rearrange", "einops.rearrange")


@dataclass(frozen=True)
class Signature:
    """A library function's parameters: ``positional`` of them may be given by position
    (the places every supported release agrees on); ``keywords`` are the others torchport
    knows, each with the values at which dropping it changes nothing (``ANY``: whatever
    the value) and why any other value is refused."""

    name: str
    positional: tuple[str, ...]
    keywords: Mapping[str, tuple[str, ...]]
    refused: Mapping[str, str]
    beyond: str = "more positional arguments than torchport knows the meaning of"


def _normal(code: str) -> str:
    return "".join(code.split())


def bind(call: cst.Call, signature: Signature) -> dict[str, cst.BaseExpression]:
    """Each argument of ``call`` by its parameter name; refused (NotApplicable, with the
    reason) for ``*``/``**`` arguments, unknown keywords, too many positions, and values
    that would change the result but have no port."""
    bound: dict[str, cst.BaseExpression] = {}
    for i, arg in enumerate(call.args):
        if arg.star:
            raise NotApplicable(
                f"arguments passed with {arg.star}: their names and values are not known "
                f"here, and some of {signature.name}'s settings have no SDPA counterpart"
            )
        if arg.keyword is not None:
            name = arg.keyword.value
            if name not in signature.positional and name not in signature.keywords:
                raise NotApplicable(f"{name}= is not an argument of {signature.name} known here")
        elif i < len(signature.positional):
            name = signature.positional[i]
        else:
            raise NotApplicable(signature.beyond)
        bound[name] = arg.value
    for name, allowed in signature.keywords.items():
        if name in bound and allowed != ANY and _normal(code_of(bound[name])) not in allowed:
            why = signature.refused.get(name, "it has no SDPA counterpart")
            raise NotApplicable(f"{name}={code_of(bound[name])}: {why}")
    return bound


def literal(node: cst.BaseExpression | None, *values: str) -> bool:
    """Whether ``node`` is written as one of ``values`` (None: absent counts as the first)."""
    if node is None:
        return True
    return _normal(code_of(node)) in values


def reusable(node: cst.BaseExpression, what: str) -> cst.BaseExpression:
    """An expression whose size can be asked again: ``q`` for ``q.to(dtype)``; refused when
    it is computed (asking would compute it twice)."""
    base = strip_same_shape(node)
    if dotted(base) is None:
        raise NotApplicable(
            f"the causal mask needs the sequence length of {what} ({code_of(node)}), which is "
            "computed in the call: assign it to a name first"
        )
    return base


def lower_right(
    ctx: FixContext, q: cst.BaseExpression, k: cst.BaseExpression, causal: cst.BaseExpression
) -> cst.BaseExpression:
    """flash-attn's causal mask (aligned to the bottom-right corner, which differs from
    SDPA's ``is_causal`` whenever the lengths differ) as an ``attn_mask``; ``causal``
    decided at run time gives ``... if causal else None``."""
    ctx.need(LOWER_RIGHT)
    mask = template(
        ctx, "torch.nn.attention.bias.causal_lower_right(Q.size(1), K.size(1))", Q=q, K=k
    )
    if literal(causal, "True"):
        return mask
    return cst.IfExp(test=causal, body=mask, orelse=cst.Name("None"))


def needs_contiguous(ctx: FixContext) -> bool:
    """Whether the port's transposed result must be made contiguous, as the library's is:
    unless it is reshaped at once, or assigned to a name whose every read (until the name
    is bound again; anywhere in the function when in a loop) is."""
    parent = ctx.parent(ctx.original)
    if _agnostic_use(ctx, ctx.original):
        return False
    if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1):
        return True
    target = parent.targets[0].target
    function = enclosing_function(ctx)
    if not isinstance(target, cst.Name) or function is None:
        return True
    uses = _Uses(target.value)
    function.visit(uses)
    if _in_loop(ctx, parent):
        reads = [node for kind, node in uses.events if kind == "load"]
        if sum(kind == "bind" for kind, _ in uses.events) != 1:
            return True
    else:
        at = next(i for i, (_, node) in enumerate(uses.events) if node is target)
        reads = []
        for kind, node in uses.events[at + 1 :]:
            if kind == "bind":
                break
            reads.append(node)
    return not reads or not all(_agnostic_use(ctx, node) for node in reads)


def _in_loop(ctx: FixContext, node: cst.CSTNode) -> bool:
    for parent in ctx.ancestors(node):
        if isinstance(parent, cst.FunctionDef):
            return False
        if isinstance(parent, cst.For | cst.While):
            return True
    return False


def _agnostic_use(ctx: FixContext, node: cst.CSTNode) -> bool:
    parent = ctx.parent(node)
    if isinstance(parent, cst.Attribute) and parent.value is node:
        call = ctx.parent(parent)
        return (
            parent.attr.value in STRIDE_AGNOSTIC
            and isinstance(call, cst.Call)
            and call.func is parent
        )
    if isinstance(parent, cst.Arg):
        call = ctx.parent(parent)
        return (
            isinstance(call, cst.Call)
            and dotted(call.func) in REARRANGE
            and bool(call.args)
            and call.args[0] is parent
        )
    return False


class _Uses(cst.CSTVisitor):
    """The bindings and reads of one name in a function, in source order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.events: list[tuple[str, cst.Name]] = []
        self._targets: set[int] = set()

    def _bound(self, target: cst.BaseExpression) -> None:
        self._targets.update(id(name) for name in _names(target))

    def visit_Assign(self, node: cst.Assign) -> bool:
        node.value.visit(self)  # the value is read before the targets are bound
        for target in node.targets:
            self._bound(target.target)
            target.visit(self)
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bound(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bound(node.target)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self.events.append(("bind" if id(node) in self._targets else "load", node))


def _names(target: cst.BaseExpression) -> list[cst.Name]:
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, cst.Tuple | cst.List):
        return [n for e in target.elements for n in _names(e.value)]
    if isinstance(target, cst.StarredElement):
        return _names(target.value)
    return []
