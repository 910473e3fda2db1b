"""What the code around an attention call shows about its tensors' shapes.

A port to ``scaled_dot_product_attention`` is shorter where the code makes a fact
evident: ``is_causal=True`` is exact only when queries and keys have the same length,
``enable_gqa`` is needed only when the head counts may differ, and a plain
``transpose(1, 2)`` is right for an xformers input only when it is 4-D. The evidence
read here is deliberately narrow: a name bound exactly once in the function, by one
``a, b, c = x.unbind(d)`` (identical shapes), or by ``x.view(...)`` / ``x.reshape(...)``
with each size written out. Anything else is "not evident", and the port takes the form
that is exact whatever the shapes are.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from .base import FixContext, code_of, dotted

# Methods that return a tensor of the receiver's shape (dtype, memory or graph changes).
SAME_SHAPE = frozenset(
    {"to", "contiguous", "half", "float", "bfloat16", "type", "type_as", "clone", "detach"}
)
RESHAPES = frozenset({"view", "reshape"})


# What a name is bound to: the value, ``("unpack", value)`` for one target of ``a, b = value``
# (nested for nested targets), or None where the value is not known
Bound = cst.BaseExpression | tuple[str, "Bound"] | None


@dataclass(frozen=True)
class Origin:
    """How a name got its tensor: ``group`` is the id of the unbind statement (all its
    targets share every dimension), ``dims`` the sizes written in a view/reshape (their
    code), ``rank`` the number of dimensions when known."""

    group: int | None = None
    dims: tuple[str, ...] | None = None
    rank: int | None = None


def strip_same_shape(node: cst.BaseExpression) -> cst.BaseExpression:
    """``q.to(dtype).contiguous()`` -> ``q``: the expression whose shape it has."""
    while (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in SAME_SHAPE
    ):
        node = node.func.value
    return node


def enclosing_function(ctx: FixContext) -> cst.FunctionDef | None:
    node: cst.CSTNode | None = ctx.original
    while node is not None and not isinstance(node, cst.FunctionDef):
        node = ctx.parent(node)
    return node


class _Bindings(cst.CSTVisitor):
    """Every binding of each name in one function (nested functions and classes apart)."""

    def __init__(self, root: cst.FunctionDef) -> None:
        self.root = root
        self.bound: dict[str, list[tuple[cst.CSTNode, Bound]]] = {}

    def _bind(self, target: cst.BaseExpression, statement: cst.CSTNode, value: Bound) -> None:
        if isinstance(target, cst.Name):
            self.bound.setdefault(target.value, []).append((statement, value))
        elif isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                inner = element.value
                self._bind(inner, statement, None if value is None else ("unpack", value))
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, statement, None)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if node is not self.root:
            return False
        params = node.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            self._bind(param.name, node, None)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                self._bind(star.name, node, None)
        return True

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, node, None)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target, node, None)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name, node, None)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node, None)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bind(node.target, node, None)

    def visit_Global(self, node: cst.Global) -> None:
        for item in node.names:
            self._bind(item.name, node, None)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        for item in node.names:
            self._bind(item.name, node, None)


class Shapes:
    """Shape evidence inside one function (none at module level)."""

    def __init__(self, ctx: FixContext) -> None:
        function = enclosing_function(ctx)
        self.bindings: dict[str, list] = {}
        if function is not None:
            found = _Bindings(function)
            function.visit(found)
            self.bindings = found.bound

    def origin(self, node: cst.BaseExpression, depth: int = 0) -> Origin:
        node = strip_same_shape(node)
        if depth > 8:
            return Origin()
        if isinstance(node, cst.Call):
            return self._made_by(node, depth)
        if not isinstance(node, cst.Name):
            return Origin()
        bound = self.bindings.get(node.value, [])
        if len(bound) != 1 or bound[0][1] is None:
            return Origin()
        statement, value = bound[0]
        if isinstance(value, tuple):  # one of several targets of ``a, b = value``
            made = _unbind_source(value[1])
            if made is None:
                return Origin()
            rank = self.origin(made, depth + 1).rank
            return Origin(group=id(statement), rank=None if rank is None else rank - 1)
        return self.origin(value, depth + 1)

    def _made_by(self, call: cst.Call, depth: int) -> Origin:
        method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
        if method in RESHAPES:
            sizes = _sizes(call)
            return Origin(dims=sizes, rank=None if sizes is None else len(sizes))
        if method == "permute" and call.args and not any(a.star for a in call.args):
            return Origin(rank=len(call.args) if len(call.args) > 1 else None)
        if method in ("transpose", "swapaxes", "movedim") and isinstance(call.func, cst.Attribute):
            return Origin(rank=self.origin(call.func.value, depth + 1).rank)
        if dotted(call.func) in ("rearrange", "einops.rearrange"):
            return Origin(rank=_rearranged_rank(call))
        return Origin()

    def same(self, a: cst.BaseExpression, b: cst.BaseExpression, dim: int) -> bool:
        """Whether ``a`` and ``b`` evidently have the same size in dimension ``dim``."""
        a, b = strip_same_shape(a), strip_same_shape(b)
        if isinstance(a, cst.Name) and isinstance(b, cst.Name) and a.value == b.value:
            return True
        first, second = self.origin(a), self.origin(b)
        if first.group is not None and first.group == second.group:
            return True
        if first.dims is None or second.dims is None:
            return False
        if len(first.dims) <= dim or len(second.dims) <= dim:
            return False
        size = first.dims[dim]
        return size == second.dims[dim] and size not in ("-1", "...")

    def rank(self, *tensors: cst.BaseExpression) -> int | None:
        """The number of dimensions of the first of ``tensors`` whose rank is evident."""
        for tensor in tensors:
            rank = self.origin(tensor).rank
            if rank is not None:
                return rank
        return None


def _unbind_source(value: Bound) -> cst.BaseExpression | None:
    """``x`` of ``x.unbind(d)`` / ``torch.unbind(x, d)`` / xformers' ``unbind(x, d)``:
    every element has the same shape."""
    if not isinstance(value, cst.Call):
        return None
    func = value.func
    if isinstance(func, cst.Attribute) and func.attr.value == "unbind":
        name = dotted(func.value)
        if name in ("torch", "xops", "xformers.ops") and value.args:
            return value.args[0].value
        return func.value
    if isinstance(func, cst.Name) and func.value == "unbind" and value.args:
        return value.args[0].value
    return None


def _sizes(call: cst.Call) -> tuple[str, ...] | None:
    """The sizes of ``x.view(a, b, c)`` or ``x.view((a, b, c))`` as code; None for
    ``view(dtype)``, ``view(*shape)`` or ``view(other.shape)``."""
    args = call.args
    if any(a.star or a.keyword for a in args) or not args:
        return None
    if len(args) == 1:
        only = args[0].value
        if not isinstance(only, cst.Tuple | cst.List):
            return None
        if any(isinstance(e, cst.StarredElement) for e in only.elements):
            return None
        return tuple(code_of(e.value) for e in only.elements)
    return tuple(code_of(a.value) for a in args)


def _rearranged_rank(call: cst.Call) -> int | None:
    """Dimensions on the right of an einops pattern: ``"b n (h d) -> b h n d"`` is 4."""
    if len(call.args) < 2 or not isinstance(call.args[1].value, cst.SimpleString):
        return None
    pattern = call.args[1].value.evaluated_value
    if not isinstance(pattern, str) or "->" not in pattern or "..." in pattern:
        return None
    right = pattern.split("->", 1)[1]
    depth, count = 0, 0
    for token in right.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            depth += 1
            count += depth == 1
        elif token == ")":
            depth -= 1
        elif depth == 0:
            count += 1
    return count or None
