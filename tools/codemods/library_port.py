"""Porting a call of a CUDA-only library's class to its torch counterpart, as data.

apex's fused optimizers, bitsandbytes' optimizers and the like compute what a
``torch.optim`` optimizer (or ``torch.nn`` module) computes; only their signatures and
defaults differ. A ``Port`` is one class's table (its parameters in order, the defaults to
make explicit, the values at which a library-only argument changes nothing, the reason to
refuse any other), and ``port_call`` applies it to one call. The library's import aliases
(``from apex.parallel import DistributedDataParallel as ApexDDP``) are learnt by a prescan
(``register_aliases``) so that a fixer can choose its table by the library's own name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import libcst as cst

from .base import FixContext, NotApplicable, code_of, dotted, prescan, set_kwarg, string_value
from .library_names import imported_names, last_name

ANY = ("*",)  # an argument that only tunes speed: dropped whatever its value

_COMMA = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


@dataclass(frozen=True)
class Port:
    """How one library class becomes a torch one.

    ``signature``: the library's parameters in order (a positional argument is named by it);
    ``positional``: how many leading arguments stay positional (the same place in torch);
    ``explicit``: library defaults torch does not share, added when the call leaves them out;
    ``neutral``: library-only arguments and the literal values at which they change nothing
    on the target (dropped; ``ANY``: whatever the value, as for a bucket size); any other
    value, or a library-only argument not listed, is refused with ``refused``'s reason (or a
    generic one).
    """

    torch: str
    signature: tuple[str, ...]
    positional: int
    explicit: dict[str, str] = field(default_factory=dict)
    neutral: dict[str, tuple[str, ...]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    torch_args: frozenset[str] = frozenset()


def _aliases_key(top: str) -> str:
    """State key of one library's aliases in a file (local name -> its name under it): one
    per library, so a file importing from apex and bitsandbytes keeps both."""
    return f"library_aliases:{top}"


def register_aliases(top: str, *codes: str) -> None:
    """Learn, before rules ``codes`` fix a file, what its ``from top... import X as Y`` name:
    the fixers choose by the library's own class name, which an alias hides."""

    def aliases(module: cst.Module, lines: list[int], target: str) -> dict:
        names = imported_names(module, (top,))
        return {_aliases_key(top): names} if names else {}

    for code in codes:
        prescan(code)(aliases)


def class_name(node: cst.CSTNode, ctx: FixContext, library: str) -> str:
    """The library's own name of the class ``node`` calls or names (aliases resolved)."""
    return last_name(
        node,
        ctx,
        _aliases_key(library),
        lambda: NotApplicable(f"the {library} class is not named plainly here"),
    )


@dataclass(frozen=True)
class SpreadKeys:
    """The keys a ``**name`` argument can carry: ``always`` (the dict's literal keys, never
    popped) and ``maybe`` (set, defaulted or popped on some path)."""

    always: frozenset[str]
    maybe: frozenset[str]


class _DictBuilding(cst.CSTVisitor):
    """How one function builds the dict ``name``: its literal keys, the keys set or popped
    later, and whether it is used any other way (then its keys are unknown)."""

    EDITS: ClassVar[dict[str, str]] = {"setdefault": "maybe", "pop": "popped"}

    def __init__(self, name: str) -> None:
        self.name = name
        self.literal: set[str] | None = None
        self.maybe: set[str] = set()
        self.popped: set[str] = set()
        self.unknown: str | None = None
        self._explained: set[int] = set()  # the Name nodes each use above accounts for

    def _key(self, node: cst.BaseExpression) -> str | None:
        return string_value(node)  # a str key (a bytes one names no keyword)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            t = target.target
            if isinstance(t, cst.Name) and t.value == self.name:
                self._explained.add(id(t))
                if self.literal is not None:
                    self.unknown = f"{self.name} is assigned more than once"
                self.literal = self._literal_keys(node.value)
            else:
                self._item(t, self.maybe, f"{self.name}[...] is set")

    def _item(self, node: cst.BaseExpression, keys: set[str], what: str) -> None:
        """``name["key"]`` (set or deleted): its key noted in ``keys``."""
        if not (
            isinstance(node, cst.Subscript)
            and isinstance(node.value, cst.Name)
            and node.value.value == self.name
        ):
            return
        self._explained.add(id(node.value))
        index = node.slice[0].slice if len(node.slice) == 1 else None
        key = self._key(index.value) if isinstance(index, cst.Index) else None
        if key is None:
            self.unknown = f"{what} with a key not written out"
        else:
            keys.add(key)

    def _literal_keys(self, value: cst.BaseExpression) -> set[str] | None:
        if isinstance(value, cst.Dict):
            keys = [
                self._key(e.key) if isinstance(e, cst.DictElement) else None for e in value.elements
            ]
        elif isinstance(value, cst.Call) and dotted(value.func) == "dict" and value.args:
            keys = [a.keyword.value if a.keyword and not a.star else None for a in value.args]
        elif isinstance(value, cst.Call) and dotted(value.func) == "dict":
            keys = []
        else:
            keys = [None]
        if None in keys:
            self.unknown = f"{self.name} is not built from a dict with its keys written out"
            return set()
        return {k for k in keys if k is not None}  # none is None (above)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == self.name
        ):
            self._explained.add(id(func.value))
            kind = self.EDITS.get(func.attr.value)
            key = self._key(node.args[0].value) if node.args else None
            if kind is None or key is None:
                self.unknown = f"{self.name}.{func.attr.value}(...) changes keys not written out"
            else:
                getattr(self, kind).add(key)

    def visit_Del(self, node: cst.Del) -> None:
        self._item(node.target, self.popped, f"del {self.name}[...]")

    def visit_Arg(self, node: cst.Arg) -> None:
        value = node.value
        if node.star == "**" and isinstance(value, cst.Name) and value.value == self.name:
            self._explained.add(id(value))  # spread into a call: read, not changed

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and id(node) not in self._explained:
            self.unknown = self.unknown or f"{self.name} is passed on or changed another way"


def _spread_keys(call: cst.Call, ctx: FixContext) -> SpreadKeys:
    """The keys of ``call``'s one ``**name``, from how its function (or module) builds it."""
    spread = [a for a in call.args if a.star]
    if len(spread) != 1 or spread[0].star != "**" or not isinstance(spread[0].value, cst.Name):
        raise NotApplicable(
            "arguments passed with * or ** other than one **dict: their names are not known"
        )
    name = spread[0].value.value
    scope: cst.CSTNode | None = ctx.original
    while scope is not None and not isinstance(scope, cst.FunctionDef | cst.Module):
        scope = ctx.parent(scope)
    if scope is None:
        raise NotApplicable(f"**{name}: where {name} is built is not known")
    building = _DictBuilding(name)
    scope.visit(building)
    if building.unknown or building.literal is None:
        raise NotApplicable(
            f"**{name}: its keys are not known ({building.unknown or f'{name} is not built here'})"
        )
    always = frozenset(building.literal - building.popped)
    return SpreadKeys(always, frozenset(building.literal | building.maybe) - always)


def named_args(call: cst.Call, port: Port) -> list[tuple[str | None, cst.Arg]]:
    """Each argument with the parameter it binds (None for the ones kept positional, and
    for a ``**dict`` spread, whose keys ``port_call`` checks)."""
    named: list[tuple[str | None, cst.Arg]] = []
    for i, arg in enumerate(call.args):
        if arg.star == "**":
            named.append((None, arg))
            continue
        if arg.star:
            raise NotApplicable(f"arguments passed with {arg.star}: their names are not known")
        if arg.keyword is not None:
            named.append((arg.keyword.value, arg))
        elif i >= len(port.signature):
            raise NotApplicable("more positional arguments than the library's signature has")
        else:
            named.append((None if i < port.positional else port.signature[i], arg))
    return named


def _keyword(name: str, arg: cst.Arg) -> cst.Arg:
    return arg.with_changes(
        keyword=cst.Name(name),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )


def _spread_given(call: cst.Call, port: Port, torch: str, ctx: FixContext) -> set[str]:
    """The parameters a ``**dict`` argument always binds; refused when one it may bind has
    no torch counterpart (a key the library does not know fails in both, so it may pass)."""
    if not any(a.star for a in call.args):
        return set()
    keys = _spread_keys(call, ctx)
    for key in sorted(keys.always | keys.maybe):
        if key in port.signature and key not in port.torch_args:
            raise NotApplicable(
                f"the **dict may carry {key}=, which {torch} has no counterpart for"
            )
    for key in sorted(keys.maybe & set(port.explicit)):
        raise NotApplicable(
            f"the **dict carries {key}= on some paths only, and the library's default for it "
            f"differs from {torch}'s: make it explicit in the dict"
        )
    return set(keys.always)


def port_call(call: cst.Call, port: Port, torch: str, ctx: FixContext) -> cst.Call:
    """``call`` of a library class rewritten as a call of ``torch`` by ``port``'s table;
    NotApplicable with the reason where an argument has no neutral value."""
    args: list[cst.Arg] = []
    given: set[str] = _spread_given(call, port, torch, ctx)
    for i, (name, arg) in enumerate(named_args(call, port)):
        if name is None:
            if not arg.star:
                given.add(port.signature[i])
            args.append(arg)
            continue
        given.add(name)
        if name in port.torch_args:
            args.append(arg if arg.keyword is not None else _keyword(name, arg))
            continue
        value = code_of(arg.value)
        allowed = port.neutral.get(name, ())
        if allowed != ANY and value not in allowed:
            why = port.refused.get(name, f"{name}= has no counterpart in {torch}")
            raise NotApplicable(f"{name}={value}: {why}")
    if args and len(args) < len(call.args):  # an argument dropped: the last one closes the call
        last = call.args[-1]
        closing = args[-1].with_changes(
            comma=last.comma, whitespace_after_arg=last.whitespace_after_arg
        )
        args = [
            a if a.comma is not cst.MaybeSentinel.DEFAULT else a.with_changes(comma=_COMMA)
            for a in args[:-1]
        ] + [closing]
    ported = call.with_changes(func=ctx.expr(torch), args=args)
    for name, value in port.explicit.items():
        if name not in given:
            ported = set_kwarg(ported, name, ctx.expr(value))
    return ported


def optimizer_port(
    node: cst.CSTNode,
    ctx: FixContext,
    library: str,
    ports: dict[str, Port],
    missing: dict[str, str],
    referenced: str,
) -> tuple[str, Port]:
    """The library optimizer ``node`` calls and its port (from ``ports``); refused with the
    reason for one torch.optim lacks (``missing``: class -> the algorithm), one the table
    does not know, and a class referenced without a call (``referenced`` says why)."""
    name = class_name(node, ctx, library)
    if name in missing:
        raise NotApplicable(
            f"torch.optim has no {missing[name]}: keep an implementation of it in "
            "PyTorch, or change the optimizer on purpose (training will differ)"
        )
    port = ports.get(name)
    if port is None:
        raise NotApplicable(f"{library} {name} has no torch counterpart in the catalogue")
    if not isinstance(node, cst.Call):
        raise NotApplicable(f"{name} is referenced, not called: {referenced}")
    return name, port
