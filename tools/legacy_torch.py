"""Lines PyTorch 0.4 and later broke, repaired at one line with their documented successors.

Code written for PyTorch 0.3 read a loss as ``loss.data[0]`` and relied on reductions and
comparisons returning contiguous 1-element tensors; on any PyTorch since 0.4 (CUDA
included) the same lines raise "invalid index of a 0-dim tensor" or "view size is not
compatible with input tensor's size and stride". Which subscript is 0-dim, or which
``.view`` sees a transposed layout, is known only when a run reaches it, so each repair
takes the line a run failed at and changes only the expression there that the failure
can be:

- ``x.data[0]`` (or, with no such expression on the line, the one ``x[0]``) becomes
  ``x.item()``: PyTorch 0.4's own successor, the same Python number 0.3 returned;
- ``x.view(shape)`` becomes ``x.reshape(shape)``: the same view wherever ``view``
  succeeds, and a copy only where ``view`` raises.

The same expression elsewhere in the file (``loss.data[0]`` in the evaluation loop a short
run never reaches) is repaired with it. A line with no such expression, or several with no
way to tell which failed, is left as it is (``None``): a guess could change what it means.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

# ``x.view(torch.float16)`` reinterprets the bytes: reshape has no such form
_DTYPE_NAMES = frozenset(
    (
        *("float", "float16", "float32", "float64", "half", "double", "bfloat16"),
        *("int", "int8", "int16", "int32", "int64", "long", "short", "uint8", "bool"),
        *("complex64", "complex128", "cfloat", "cdouble"),
    )
)


def _is_zero_subscript(node: cst.CSTNode) -> bool:
    """``x[0]``, ``x.data[0]``: a subscript with the one index ``0``."""
    if not isinstance(node, cst.Subscript) or len(node.slice) != 1:
        return False
    element = node.slice[0].slice
    return (
        isinstance(element, cst.Index)
        and isinstance(element.value, cst.Integer)
        and element.value.value == "0"
    )


def _data_of(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``x`` of ``x.data``, else None."""
    if isinstance(node, cst.Attribute) and node.attr.value == "data":
        return node.value
    return None


def _zero_dim_pick(sites: Sequence[cst.CSTNode]) -> list[cst.CSTNode]:
    """Of the line's ``[0]`` subscripts: the ``x.data[0]`` ones (PyTorch 0.3's read of a
    scalar), else the single one; none when several leave no way to tell."""
    data: list[cst.CSTNode] = [
        n for n in sites if isinstance(n, cst.Subscript) and _data_of(n.value) is not None
    ]
    return data or (list(sites) if len(sites) == 1 else [])


def _item(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.Subscript)
    value = _data_of(node.value) or node.value
    return cst.Call(cst.Attribute(value, cst.Name("item")))


def _is_dtype(arg: cst.Arg) -> bool:
    if arg.keyword is not None:
        return arg.keyword.value == "dtype"
    value = arg.value
    if isinstance(value, cst.Attribute):
        return value.attr.value in _DTYPE_NAMES
    if isinstance(value, cst.Name):
        return value.value in _DTYPE_NAMES or "dtype" in value.value
    return isinstance(value, cst.SimpleString)


def _is_shape_view(node: cst.CSTNode) -> bool:
    """``x.view(shape)``; not ``x.view(dtype)``, which reinterprets bytes and has no reshape."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "view"
        and bool(node.args)
        and not any(_is_dtype(a) for a in node.args)
    )


def _every(sites: Sequence[cst.CSTNode]) -> list[cst.CSTNode]:
    """Every shape view on the line: reshape is the same view wherever view works."""
    return list(sites)


def _reshape(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
    return node.with_changes(func=node.func.with_changes(attr=cst.Name("reshape")))


class _Sites(cst.CSTVisitor):
    """Every expression ``is_site`` accepts, with the line it starts on."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, is_site: Callable[[cst.CSTNode], bool]) -> None:
        self.is_site = is_site
        self.found: list[tuple[int, cst.CSTNode]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.is_site(node):
            self.found.append((self.get_metadata(PositionProvider, node).start.line, node))
        return True


class _Replace(cst.CSTTransformer):
    def __init__(self, chosen: list[cst.CSTNode], change: Callable[[cst.CSTNode], cst.CSTNode]):
        self.chosen = {id(n) for n in chosen}
        self.change = change

    def on_leave(  # type: ignore[override]  # libcst says a node leaves as its own class; a rule swaps `x.data[0]` for a call
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode:
        if id(original_node) in self.chosen:
            return self.change(updated_node)
        return updated_node


@dataclass(frozen=True)
class _Rule:
    is_site: Callable[[cst.CSTNode], bool]
    pick: Callable[[Sequence[cst.CSTNode]], list[cst.CSTNode]]  # of the failing line's sites
    change: Callable[[cst.CSTNode], cst.CSTNode]


# the failure signature (agents/data/signatures.toml) -> how to repair the line it names
RULES: dict[str, _Rule] = {
    "zero-dim-index": _Rule(_is_zero_subscript, _zero_dim_pick, _item),
    "view-not-contiguous": _Rule(_is_shape_view, _every, _reshape),
}


@dataclass(frozen=True)
class Fixed:
    """A file repaired: its text, the expressions repaired (as written) and the lines."""

    text: str
    expressions: tuple[str, ...]
    lines: tuple[int, ...]


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _fix(
    text: str, rule: _Rule, choose: Callable[[list[tuple[int, cst.CSTNode]]], set[str]]
) -> Fixed | None:
    try:
        wrapper = MetadataWrapper(cst.parse_module(text))
    except (cst.ParserSyntaxError, RecursionError):
        return None
    sites = _Sites(rule.is_site)
    wrapper.visit(sites)
    codes = choose(sites.found)
    chosen = [(line, n) for line, n in sites.found if _code(n) in codes]
    if not chosen:
        return None
    fixed = wrapper.module.visit(_Replace([n for _, n in chosen], rule.change)).code
    if fixed == text:
        return None
    return Fixed(fixed, tuple(sorted(codes)), tuple(sorted({line for line, _ in chosen})))


def at_line(signature: str, text: str, line: int) -> Fixed | None:
    """``text`` with what ``signature`` can be on ``line`` repaired, and each identical
    expression elsewhere in the file (the same read of the same name, which a short run
    need not reach: an evaluation loop after the training steps); None when the line has
    nothing to repair or nothing to tell its candidates apart."""
    rule = RULES[signature]

    def on_line(found: list[tuple[int, cst.CSTNode]]) -> set[str]:
        return {_code(n) for n in rule.pick([n for at, n in found if at == line])}

    return _fix(text, rule, on_line)


def of_expressions(signature: str, text: str, expressions: Sequence[str]) -> Fixed | None:
    """``text`` with every one of ``expressions`` repaired (the port of a repaired file)."""
    return _fix(text, RULES[signature], lambda found: set(expressions))


WHY = {
    "zero-dim-index": (
        "indexing a 0-dim tensor has raised since PyTorch 0.4; `.item()` is its successor, "
        "the same Python number"
    ),
    "view-not-contiguous": (
        "current PyTorch keeps a transposed layout through elementwise ops, so this `.view` "
        "raises; `.reshape` is the same view wherever `.view` works"
    ),
}
