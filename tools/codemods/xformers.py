"""TPK011: xformers' ``memory_efficient_attention`` becomes ``scaled_dot_product_attention``.

xformers computes exact softmax attention on ``[B, M, H, K]`` tensors (also ``[B, M, K]``
and ``[B, M, G, H, K]``); SDPA on ``[B, H, M, K]`` (any leading dimensions). The port:

- the layout: ``transpose(1, 2)`` in and back where the code shows the tensors are 4-D,
  else ``movedim(1, -2)`` in and ``movedim(-2, 1)`` back, which is right for each rank
  xformers accepts (a no-op on 3-D, the heads and groups kept in front on 5-D);
- ``attn_bias``: ``LowerTriangularMask()`` (causal, aligned to the top-left corner as
  xformers documents it) -> ``is_causal=True``; ``LowerTriangularFromBottomRightMask()``
  -> ``is_causal`` where the lengths are evidently equal, else
  ``causal_lower_right``; a tensor (added to the scores) -> ``attn_mask``;
- ``p`` -> ``dropout_p``, ``scale`` kept, ``op=`` (which kernel) dropped;
- ``xformers.ops.unbind(x, dim)`` -> ``torch.unbind(x, dim)``.

Refused with the reason: the block-diagonal (packed sequence) biases, a causal mask
combined with a tensor bias, an ``attn_bias`` whose value may be an xformers mask object
(the file names mask classes), ``*``/``**`` arguments, and everything else under xformers.
A mask class built in the argument list of a ported call is converted with it
(``Enclosed``).
"""

from __future__ import annotations

import libcst as cst

from . import attention_port as port
from .attention_shapes import Shapes
from .base import Enclosed, FixContext, Fixed, NotApplicable, code_of, dotted, fixer, prescan
from .library_names import imported_names, last_name, qualified
from .sdpa import SDPA, SDPA_NAME, Call, Inputs, parenthesized, sdpa_spelling, template

ALIASES = "xformers_aliases"
MASK_NAMES = "xformers_masks"  # the file builds an xformers mask outside attention calls
ATTENTION = frozenset({"memory_efficient_attention", "memory_efficient_attention_forward"})
SIGNATURE = {
    name: port.Signature(
        f"xformers.ops.{name}",
        ("query", "key", "value", "attn_bias", "p", "scale"),
        {"op": port.ANY, "output_dtype": ("None",)},
        {"output_dtype": "SDPA returns the inputs' dtype; cast its result instead"},
    )
    for name in ATTENTION
}
TOP_LEFT = frozenset({"LowerTriangularMask"})
BOTTOM_RIGHT = frozenset({"LowerTriangularFromBottomRightMask"})
SDPA_KEYWORDS = ("attn_mask", "dropout_p", "is_causal", "scale")

REASONS = {
    "BlockDiagonal": "block-diagonal biases (packed variable-length batches) are not ported: "
    "pad the batch and pass a mask, or build the block-diagonal attn_mask from the "
    "sequence lengths",
    "WithTensorBias": "a causal mask with a tensor bias: fold both into one additive "
    "attn_mask (the bias, -inf above the diagonal)",
}


@prescan("TPK011")
def _file_facts(module: cst.Module, lines: list[int], target: str) -> dict:
    names = imported_names(module, ("xformers",))
    masks = _MaskNames(names)
    module.visit(masks)
    return {ALIASES: names, SDPA_NAME: sdpa_spelling(module), MASK_NAMES: masks.found}


class _MaskNames(cst.CSTVisitor):
    """Whether the file uses an xformers attention-bias class other than in the arguments
    of a memory_efficient_attention call: a mask object that a variable could then hold."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases
        self.found = False
        self.inside = 0  # depth in attention calls' arguments

    def _resolve(self, node: cst.BaseExpression) -> str:
        name = dotted(node) or ""
        first, _, rest = name.partition(".")
        return self.aliases.get(first, first) + (f".{rest}" if rest else "")

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if self._resolve(node.func).rsplit(".", 1)[-1] in ATTENTION:
            self.inside += 1

    def leave_Call(self, node: cst.Call) -> None:
        if self._resolve(node.func).rsplit(".", 1)[-1] in ATTENTION:
            self.inside -= 1

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if dotted(node) is None:  # ``LowerTriangularMask().add_bias``: look inside
            return True
        self._check(node)
        return False  # the chain is one reference

    def visit_Name(self, node: cst.Name) -> None:
        self._check(node)

    def _check(self, node: cst.BaseExpression) -> None:
        if not self.inside and _is_mask(self._resolve(node)):
            self.found = True


def _is_mask(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return name.startswith("xformers.") and (
        last.endswith(("Mask", "Bias")) or ".attn_bias." in name
    )


def _library_name(node: cst.CSTNode, ctx: FixContext) -> str:
    return last_name(
        node, ctx, ALIASES, lambda: NotApplicable("the xformers function is not named plainly")
    )


@fixer("TPK011")
def xformers_attention(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    name = _library_name(node, ctx)
    if name in ATTENTION and isinstance(node, cst.Call):
        return _attention(node, name, ctx)
    if name == "unbind" and isinstance(node, cst.Call):
        return _unbind(node, ctx)
    if _inside_attention_call(ctx):
        raise Enclosed()
    if name in ATTENTION or name == "unbind":
        raise NotApplicable(f"{name} is referenced, not called: each call needs its own port")
    full = qualified(node.func if isinstance(node, cst.Call) else node, ctx, ALIASES) or name
    for part, why in REASONS.items():
        if part in full:
            raise NotApplicable(f"xformers' {full.removeprefix('xformers.')}: {why}")
    if name in TOP_LEFT | BOTTOM_RIGHT:
        raise NotApplicable(
            f"{name} built outside the attention call: build it in the call's argument list "
            "(the port makes it SDPA's causal mask there), or use is_causal by hand"
        )
    raise NotApplicable(
        f"xformers' {name} has no port: only memory_efficient_attention (with no bias, a "
        "causal mask or a tensor bias) and unbind are ported"
    )


def _inside_attention_call(ctx: FixContext) -> bool:
    """Whether the node is (in) an argument of a memory_efficient_attention call."""
    node = ctx.original
    while (parent := ctx.parent(node)) is not None:
        if isinstance(parent, cst.Arg):
            call = ctx.parent(parent)
            name = qualified(call.func, ctx, ALIASES) if isinstance(call, cst.Call) else None
            return name is not None and name.rsplit(".", 1)[-1] in ATTENTION
        if isinstance(parent, cst.BaseStatement):
            return False
        node = parent
    return False


def _unbind(node: cst.Call, ctx: FixContext) -> cst.BaseExpression:
    """``unbind(x, dim)`` (xformers' faster unbind: the same views) -> ``torch.unbind``."""
    if any(a.star for a in node.args) or any(
        a.keyword is not None and a.keyword.value != "dim" for a in node.args
    ):
        raise NotApplicable("unbind called with arguments other than (x, dim)")
    return node.with_changes(func=ctx.expr("torch.unbind"))


def _attention(node: cst.Call, name: str, ctx: FixContext) -> cst.BaseExpression:
    args = port.bind(node, SIGNATURE[name])
    missing = [p for p in ("query", "key", "value") if p not in args]
    if missing:
        raise NotApplicable(f"{name} without {', '.join(missing)}")
    query, key, value = args["query"], args["key"], args["value"]
    shapes = Shapes(ctx)
    keywords = _bias(args.get("attn_bias"), query, key, shapes, ctx)
    if not port.literal(args.get("p"), "0.0", "0", "0."):
        keywords["dropout_p"] = args["p"]
    if not port.literal(args.get("scale"), "None"):
        keywords["scale"] = args["scale"]
    if shapes.rank(query, key, value) == 4:
        into, back = "X.transpose(1, 2)", "transpose(1, 2)"
    else:
        into, back = "X.movedim(1, -2)", "movedim(-2, 1)"
    inputs: Inputs = [("", template(ctx, into, X=t)) for t in (query, key, value)]
    after = [back] + (["contiguous()"] if port.needs_contiguous(ctx) else [])
    ordered = [(k, keywords[k]) for k in SDPA_KEYWORDS if k in keywords]
    return Call(ctx.state.get(SDPA_NAME, SDPA), inputs, ordered, after).render(ctx, node)


def _bias(
    bias: cst.BaseExpression | None,
    query: cst.BaseExpression,
    key: cst.BaseExpression,
    shapes: Shapes,
    ctx: FixContext,
) -> dict[str, cst.BaseExpression]:
    """SDPA's keywords for xformers' ``attn_bias``."""
    if bias is None or port.literal(bias, "None"):
        return {}
    mask = _mask_call(bias, ctx)
    if mask is not None:
        return _causal(mask, query, key, shapes, ctx, cst.Name("True"))
    if isinstance(bias, cst.IfExp):  # ``LowerTriangularMask() if self.causal else None``
        return _chosen_mask(bias, query, key, shapes, ctx)
    method = (
        bias.func.attr.value
        if isinstance(bias, cst.Call) and isinstance(bias.func, cst.Attribute)
        else None
    )
    if method == "add_bias":
        raise NotApplicable(f"attn_bias=...add_bias(...): {REASONS['WithTensorBias']}")
    if _MentionsXformers(ctx).found(bias):
        raise NotApplicable(
            f"attn_bias={code_of(bias)}: an xformers mask mixed with other values is not ported"
        )
    if ctx.state.get(MASK_NAMES):
        raise NotApplicable(
            "attn_bias may hold an xformers mask object here (the file builds xformers' "
            "masks outside the attention calls): pass the mask class in the call, or a tensor"
        )
    return {"attn_mask": bias}  # a tensor: added to the scores, as SDPA adds a float mask


def _mask_call(node: cst.BaseExpression, ctx: FixContext) -> tuple[cst.Call, str] | None:
    """The call ``node`` where it builds an xformers class (``LowerTriangularMask()``), with
    that class's qualified name."""
    built = qualified(node.func, ctx, ALIASES) if isinstance(node, cst.Call) else None
    if not isinstance(node, cst.Call) or built is None or not built.startswith("xformers."):
        return None
    return node, built


def _causal(
    mask_call: tuple[cst.Call, str],
    query: cst.BaseExpression,
    key: cst.BaseExpression,
    shapes: Shapes,
    ctx: FixContext,
    when: cst.BaseExpression,
) -> dict[str, cst.BaseExpression]:
    """The causal mask ``bias`` builds, applied ``when`` that holds (``True``: always)."""
    bias, built = mask_call
    mask, spelled = built.rsplit(".", 1)[-1], code_of(bias.func)
    for part, why in REASONS.items():
        if part in built:
            raise NotApplicable(f"attn_bias={spelled}(...): {why}")
    if mask not in TOP_LEFT | BOTTOM_RIGHT or bias.args:
        raise NotApplicable(f"attn_bias={spelled}(...): this mask is not ported")
    if mask in TOP_LEFT or shapes.same(query, key, 1):
        return {"is_causal": when}
    q, k = port.reusable(query, "query"), port.reusable(key, "key")
    return {"attn_mask": port.lower_right(ctx, q, k, when)}


def _chosen_mask(
    bias: cst.IfExp,
    query: cst.BaseExpression,
    key: cst.BaseExpression,
    shapes: Shapes,
    ctx: FixContext,
) -> dict[str, cst.BaseExpression]:
    """``Mask() if test else None`` (or the other way round): the mask decided at run time."""
    body, orelse = _mask_call(bias.body, ctx), _mask_call(bias.orelse, ctx)
    if body is not None and port.literal(bias.orelse, "None"):
        return _causal(body, query, key, shapes, ctx, bias.test)
    if orelse is not None and port.literal(bias.body, "None"):
        test = cst.UnaryOperation(cst.Not(), parenthesized(bias.test))
        return _causal(orelse, query, key, shapes, ctx, test)
    raise NotApplicable(
        f"attn_bias={code_of(bias)}: a mask chosen at run time between other values is not "
        "ported (only an xformers causal mask or None)"
    )


class _MentionsXformers:
    """Whether an expression refers to anything under xformers."""

    def __init__(self, ctx: FixContext) -> None:
        self.ctx = ctx

    def found(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Name | cst.Attribute):
            name = qualified(node, self.ctx, ALIASES)
            if name is not None and name.startswith("xformers."):
                return True
        return any(self.found(child) for child in node.children)
