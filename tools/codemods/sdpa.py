"""Writing a ``torch.nn.functional.scaled_dot_product_attention`` call in the file's style.

flash-attn and xformers ports (``flash_attn.py``, ``xformers.py``) decide *what* the call
computes; this module writes it: the SDPA name the file already imports
(``F.scaled_dot_product_attention`` after ``import torch.nn.functional as F``), the
program's own expressions put into generated code unchanged (parenthesized where
precedence needs it), and one argument per line when the call would not fit on its line,
as ruff and black lay it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import libcst as cst
from torchport.tools.cst_imports import module_imports

from .base import FixContext, as_expression, code_of, dotted

SDPA = "torch.nn.functional.scaled_dot_product_attention"
FUNCTIONAL = "torch.nn.functional"
SDPA_NAME = "sdpa_name"  # per-file state: how this file spells SDPA
LOWER_RIGHT = "torch.nn.attention.bias"  # causal_lower_right's module (not loaded by torch)
LINE = 88  # black's and ruff's default width: longer calls go one argument per line

# Expressions that bind tighter than an attribute access: no parentheses needed before ``.``
_ATOMS = (
    cst.Name,
    cst.Attribute,
    cst.Call,
    cst.Subscript,
    cst.SimpleString,
    cst.Integer,
    cst.Float,
    cst.Tuple,
    cst.List,
)


def sdpa_spelling(module: cst.Module) -> str:
    """``F.scaled_dot_product_attention`` when the file binds ``torch.nn.functional`` to
    ``F`` at module level, the bare name when it imports SDPA itself, else the full name."""
    for small in module_imports(module):
        if isinstance(small, cst.Import):
            for alias in small.names:
                if dotted(alias.name) == FUNCTIONAL and alias.asname:
                    return f"{code_of(alias.asname.name)}.scaled_dot_product_attention"
        elif not small.relative and small.module:
            found = _from_import(small)
            if found:
                return found
    return SDPA


def _from_import(node: cst.ImportFrom) -> str | None:
    module = dotted(node.module)
    if isinstance(node.names, cst.ImportStar) or module not in ("torch.nn", FUNCTIONAL):
        return None
    for alias in node.names:
        name = dotted(alias.name)
        local = code_of(alias.asname.name) if alias.asname else name
        if module == "torch.nn" and name == "functional":
            return f"{local}.scaled_dot_product_attention"
        if module == FUNCTIONAL and name == "scaled_dot_product_attention":
            return local
    return None


def needs_parens(node: cst.BaseExpression) -> bool:
    return not isinstance(node, _ATOMS) and not node.lpar


def parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    if not needs_parens(node):
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


class _Fill(cst.CSTTransformer):
    """Each hole (a Name of the template) replaced by the program's expression."""

    def __init__(self, holes: dict[str, cst.BaseExpression]) -> None:
        super().__init__()
        self.holes = holes

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        if isinstance(original.value, cst.Name) and original.value.value in self.holes:
            return updated.with_changes(value=parenthesized(self.holes[original.value.value]))
        return updated

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.holes.get(original.value, updated)


def template(ctx: FixContext, code: str, **holes: cst.BaseExpression) -> cst.BaseExpression:
    """``code`` (torchport's own, imports requested) with the program's expressions in its
    holes: ``template(ctx, "Q.size(1)", Q=node)``."""
    return as_expression(ctx.expr(code).visit(_Fill(holes)))


Star = Literal["", "*", "**"]  # how an input is passed: as is, ``*unpacked``, ``**unpacked``
Inputs = list[tuple[Star, cst.BaseExpression]]


@dataclass
class Call:
    """One attention call to write: positional inputs (an input may be ``*packed``), keyword
    arguments in order, and the method calls applied to its result (``transpose(1, 2)``)."""

    func: str
    inputs: Inputs  # (star, expression)
    keywords: list[tuple[str, cst.BaseExpression]] = field(default_factory=list)
    after: list[str] = field(default_factory=list)

    def render(self, ctx: FixContext, original: cst.Call) -> cst.BaseExpression:
        ctx.own_layout = True
        args = [cst.Arg(value, star=star) for star, value in self.inputs]
        args += [
            cst.Arg(
                value,
                keyword=cst.Name(name),
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""),
                    whitespace_after=cst.SimpleWhitespace(""),
                ),
            )
            for name, value in self.keywords
        ]
        call = cst.Call(func=ctx.expr(self.func), args=_separated(args, multiline=False))
        if _too_long(ctx, original, self._wrap(ctx, call)) or _multiline(original):
            indent = _statement(ctx)[1] + 4
            args = [_broken(a) if indent + len(code_of(a)) >= LINE else a for a in args]
            call = call.with_changes(
                args=_separated(args, multiline=True),
                whitespace_before_args=_newline(extra="    "),
            )
        return self._wrap(ctx, call)

    def _wrap(self, ctx: FixContext, call: cst.BaseExpression) -> cst.BaseExpression:
        for method in self.after:
            call = template(ctx, f"RESULT.{method}", RESULT=call)
        return call


def _newline(extra: str) -> cst.ParenthesizedWhitespace:
    return cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(),
        indent=True,
        last_line=cst.SimpleWhitespace(extra),
    )


def _broken(arg: cst.Arg) -> cst.Arg:
    """A conditional argument too long for its line, laid out as ruff does:
    ``name=(\n    body\n    if test\n    else other\n)``."""
    value = arg.value
    if not isinstance(value, cst.IfExp):
        return arg
    inner = _newline(extra="        ")
    return arg.with_changes(
        value=value.with_changes(
            lpar=[cst.LeftParen(whitespace_after=inner)],
            rpar=[cst.RightParen(whitespace_before=_newline(extra="    "))],
            whitespace_before_if=inner,
            whitespace_before_else=inner,
        )
    )


def _separated(args: list[cst.Arg], multiline: bool) -> list[cst.Arg]:
    if not multiline:
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        return [a.with_changes(comma=comma) for a in args[:-1]] + args[-1:]
    comma = cst.Comma(whitespace_after=_newline(extra="    "))
    last = cst.Comma(whitespace_after=_newline(extra=""))
    return [a.with_changes(comma=comma) for a in args[:-1]] + [
        a.with_changes(comma=last) for a in args[-1:]
    ]


def _multiline(call: cst.Call) -> bool:
    return "\n" in code_of(call)


def _statement(ctx: FixContext) -> tuple[cst.CSTNode | None, int]:
    """The statement line around the call, and how deep it is indented (blocks x 4)."""
    node: cst.CSTNode | None = ctx.original
    line, depth = None, 0
    while node is not None:
        if line is None and isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement):
            line = node
        if isinstance(node, cst.IndentedBlock):
            depth += 1
        node = ctx.parent(node)
    return line, depth * 4


def _too_long(ctx: FixContext, original: cst.Call, new: cst.BaseExpression) -> bool:
    """Whether the statement, with ``new`` in place of the call, has a line over ``LINE``."""
    line, indent = _statement(ctx)
    if line is None:
        return len(code_of(new)) > LINE
    if isinstance(line, cst.BaseCompoundStatement):  # a call in an if/while test: its header
        text = code_of(new)
    else:
        text = code_of(line.deep_replace(ctx.original, new))
    return any(indent + len(row) > LINE for row in text.splitlines())
