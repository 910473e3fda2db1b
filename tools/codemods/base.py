"""What a fixer is, and what it may ask of the engine.

A fixer turns one finding's node into its target form. It receives the node
with its children already rewritten, and a ``FixContext`` that knows the
target, the device variable in scope, and can request imports. It returns the
new node, ``REMOVE_STATEMENT`` (drop the statement that holds the node), or
raises ``NotApplicable`` with the reason a human should read.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

import libcst as cst
from torchport.tools.cst_imports.gather import ImportedName
from torchport.tools.cst_imports.gather import code_of as code_of  # the codemods import it here

from ..targets import KINDS, TargetProfile, expand, profile


class NotApplicable(Exception):
    """The rule's codemod does not fit this occurrence; it is left for a human, with this reason."""


class Enclosed(Exception):
    """The node is rewritten by the fix of a finding around it (an xformers mask built in
    the argument list of the attention call it parametrizes): no edit of its own. It counts
    as converted exactly when the fix around it applies; otherwise it is left with it."""


class Kept(Exception):
    """The fix applies by leaving the node as it is: the code already is the port (a file
    migrated before). No edit, and the finding counts as converted."""


class _RemoveStatement(enum.Enum):
    """The one value that drops a statement: an enum member, so ``is`` tells it apart to mypy."""

    REMOVE_STATEMENT = "REMOVE_STATEMENT"

    def __repr__(self) -> str:
        return "REMOVE_STATEMENT"


REMOVE_STATEMENT: Final = _RemoveStatement.REMOVE_STATEMENT

# Modules that generated code may name, longest first (``import a.b`` for ``a.b.f()``).
KNOWN_MODULES = (
    "torch_xla.distributed.xla_backend",
    "torch_xla.distributed.parallel_loader",
    "torch_xla.core.xla_model",
    "torch_xla.runtime",
    "torch_xla.backends",
    "torch_xla",
    "torch",
    "time",
    "contextlib",
)

TORCH_NAME = re.compile(r"(?<![\w.])torch\.")
DOTTED_NAME = r"(?<![\w.])[A-Za-z_][\w.]*(?=\()|(?<![\w.])[A-Za-z_]\w*\.[\w.]+"


@dataclass
class FixContext:
    target: str
    original: cst.CSTNode
    # Finds a variable holding the repo's own device in scope; looked up only when a fixer asks.
    device_lookup: Callable[[], str | None] = lambda: None
    # modules to import ("torch", "time"), or names to import from one (``need_from``)
    imports: set[str | ImportedName] = field(default_factory=set)
    state: dict = field(default_factory=dict)  # per-file notes fixers leave for follow-ups
    # a node's parent (None for the module, and for no node: ``parent(parent(x))`` asks safely)
    parent: Callable[[cst.CSTNode | None], cst.CSTNode | None] = lambda node: None
    # ``th`` when the file imports ``torch as th`` and never plain ``torch``: new code
    # speaks the file's own name for torch instead of adding a second import
    torch_alias: str | None = None
    # top-level functions the file's fixes call, by name (their code): written once, after
    # the file's imports
    definitions: dict[str, str] = field(default_factory=dict)
    # set by a fixer that wrote a new call's layout itself: the engine then leaves its commas
    # alone (it otherwise keeps a call's closing layout when a fix drops arguments)
    own_layout: bool = False
    # whether the file is a module of a package (its folder has ``__init__.py``): a file the
    # fix ships beside it is imported relatively there
    in_package: bool = False
    # the file's path in the repository (what a file the fix writes beside it names)
    path: str = ""
    # the repository's folder, where a fix reads a file the code names (None: not known)
    root: Path | None = None
    # files of tools/kernel_runtime the fixes of this file need beside it (``ship``)
    ships: set[str] = field(default_factory=set)
    # files the fixes of this file generate beside it (``write``): name -> text
    written: dict[str, str] = field(default_factory=dict)
    # set by a fix that applies but leaves the construct slow: the report lists it as a
    # performance advisory with this reason
    advisory: str = ""

    @property
    def profile(self) -> TargetProfile:
        """What the target is (tools/data/targets.toml): fixers ask it, not the name."""
        return profile(self.target)

    @functools.cached_property
    def device_name(self) -> str | None:
        return self.device_lookup()

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """``node``'s parent, that one's parent, and so on up to the module."""
        parent = self.parent(node)
        while parent is not None:
            yield parent
            parent = self.parent(parent)

    def need(self, module: str) -> None:
        self.imports.add(module)

    def need_from(self, module: str, name: str) -> None:
        """Have the file ``from module import name`` (``module`` "." for its package)."""
        self.imports.add(ImportedName(module, name, None))

    def define(self, name: str, code: str) -> None:
        """Have the file define ``name`` (a top-level function whose source is ``code``)."""
        self.definitions[name] = code

    def ship(self, name: str) -> None:
        """Have the port carry ``name``, a file of tools/kernel_runtime, beside this file."""
        self.ships.add(name)

    def write(self, name: str, text: str) -> None:
        """Have the port carry a file the fix generated, ``name`` beside this file."""
        self.written[name] = text

    def advise(self, why: str) -> None:
        """The fix applies, but what it leaves runs slowly on the target: say why."""
        self.advisory = why

    def expr(self, code: str) -> cst.BaseExpression:
        """Parse an expression and request the imports its dotted names need."""
        if self.torch_alias:
            code = TORCH_NAME.sub(self.torch_alias + ".", code)
        for name in re.findall(DOTTED_NAME, code):
            module = next((m for m in KNOWN_MODULES if name == m or name.startswith(m + ".")), None)
            if module:
                self.need(module)
        return cst.parse_expression(code)

    def vendor_device(self) -> str:
        """The device string of a vendor target (``tpu``): what a fix that names the
        device writes. The device-agnostic target has none, so such a fix does not apply."""
        if self.profile.device is None:
            raise NotApplicable(f"{self.target} has no device string to write")
        return self.profile.device

    def device_expr(self) -> cst.BaseExpression:
        """The device to move things to: the repo's own variable if any, else the target's."""
        if self.device_name:
            return cst.parse_expression(self.device_name)
        return self.target_device()

    def target_device(self) -> cst.BaseExpression:
        return self.expr(self.profile.device_expr)

    def device_type_expr(self) -> cst.BaseExpression:
        """A device *string* for the target (argparse defaults, config values)."""
        return self.expr(self.profile.device_type_expr)


# What a fix gives back: a node (or a flattening of statements), a removal from the parent
# (an argument), or REMOVE_STATEMENT
Fixed = cst.CSTNode | cst.FlattenSentinel[cst.CSTNode] | cst.RemovalSentinel | _RemoveStatement
Fixer = Callable[[cst.CSTNode, FixContext], Fixed]
# A fixer as written: its node parameter is the node its rule's matcher finds (a Call, an
# Attribute, ...), which is what the engine hands it
AnyFixer = TypeVar("AnyFixer", bound=Callable[..., Fixed])


@dataclass(frozen=True)
class FixerEntry:
    code: str
    targets: frozenset[str]
    fn: Fixer
    by_kind: bool = False  # registered for a kind of target: a target's own fixer wins


FIXERS: dict[tuple[str, str], FixerEntry] = {}

# What a fixer may be registered for: every target, or a kind of target (the catalogue's
# fix tables key fixes the same way: a target's own key wins over its kind's).
ALL_KINDS = frozenset(KINDS)
VENDOR = frozenset({"vendor"})


def fixer(
    code: str,
    targets: frozenset[str] | set[str] = ALL_KINDS,
    into: dict[tuple[str, str], FixerEntry] = FIXERS,
    but: frozenset[str] | set[str] = frozenset(),
) -> Callable[[AnyFixer], AnyFixer]:
    """Register ``fn`` as the codemod of rule ``code`` for ``targets``, target names or
    kinds (``{"vendor"}``: every vendor target without a fixer of its own for ``code``), in
    ``FIXERS`` or in ``into`` for a registry built apart, as the consistency tests do.
    ``but`` leaves targets out of the kinds. Register only where the catalogue says
    ``auto``: ``tools.codemods`` checks both directions at import."""
    by_kind = {t for t in targets if t in KINDS}
    named = expand(set(targets) - by_kind)
    kinds = expand(by_kind) - set(but)

    def register(fn: AnyFixer) -> AnyFixer:
        for target in sorted(named | kinds):
            key = (code, target)
            mine = FixerEntry(code, frozenset(targets), fn, target not in named)
            held = into.get(key)
            if held is not None and held.by_kind == mine.by_kind:
                raise ValueError(f"two fixers for {code} on {target}")
            if held is None or held.by_kind:
                into[key] = mine
        return fn

    return register


FollowUp = Callable[[cst.CSTNode, cst.CSTNode, FixContext], Fixed | None]
FOLLOW_UPS: list[tuple[str, FollowUp]] = []


def follow_up(code: str) -> Callable[[FollowUp], FollowUp]:
    """Register a rewrite of nodes that are not findings but must change with rule ``code``'s
    fix (the ``.record()`` calls of a CUDA event, say). It sees every node of a file whose
    fixers left state for it, and returns a new node, None, or (for a statement line)
    ``REMOVE_STATEMENT``."""

    def register(fn: FollowUp) -> FollowUp:
        FOLLOW_UPS.append((code, fn))
        return fn

    return register


Prescan = Callable[[cst.Module, list[int], str], dict]
PRESCANS: dict[str, Prescan] = {}


def prescan(code: str) -> Callable[[Prescan], Prescan]:
    """Register a look at the whole file before rule ``code``'s fixes run, given the lines of
    that rule's findings. It returns state for the fixer and its follow-ups: a follow-up sees
    nodes in file order, so what it must know about code *above* the finding (a function
    defined before the model is wrapped) has to be known before the rewrite starts."""

    def register(fn: Prescan) -> Prescan:
        PRESCANS[code] = fn
        return fn

    return register


def guarded(target: str, call: str, fallback: str = "None") -> str:
    """Where device calls raise on a CPU-only machine (device-agnostic code), guard them.

    ``torch.accelerator.synchronize()`` -> ``(torch.accelerator.synchronize() if
    torch.accelerator.is_available() else None)``; TPU and Trainium always have a device.
    """
    if not profile(target).may_lack_device:
        return call
    return f"({call} if torch.accelerator.is_available() else {fallback})"


def sync_call(target: str) -> str:
    return guarded(target, profile(target).sync_call)


# A statement as libcst builds one: ``BaseStatement`` itself declares no ``leading_lines``
Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement


def as_statement(node: object) -> Statement:
    """``node`` as a statement with leading lines; anything else is a codemod's bug."""
    if not isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        raise TypeError(f"{type(node).__name__} is not a statement")
    return node


def as_expression(node: object) -> cst.BaseExpression:
    """``node`` as an expression: what a transformer of an expression's parts gives back (a
    removal or a flattening there would be a codemod's bug)."""
    if not isinstance(node, cst.BaseExpression):
        raise TypeError(f"{type(node).__name__} is not an expression")
    return node


def block_lines(block: cst.BaseSuite) -> list[Statement]:
    """A block's statements as lines: a one-line suite (``else: y = f(x)``) is one line."""
    if isinstance(block, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=block.body)]
    return [as_statement(s) for s in cst.ensure_type(block, cst.IndentedBlock).body]


def body_of(
    node: cst.With, rewrite: cst.CSTTransformer | None = None
) -> cst.FlattenSentinel[cst.BaseStatement]:
    """A ``with`` block replaced by its body (each statement through ``rewrite``, if given),
    the block's leading comments and blank lines kept on its first statement."""
    statements = block_lines(node.body)
    if rewrite is not None:  # a rewrite of names inside: each statement stays one statement
        statements = [as_statement(s.visit(rewrite)) for s in statements]
    first = statements[0]
    statements[0] = first.with_changes(leading_lines=[*node.leading_lines, *first.leading_lines])
    return cst.FlattenSentinel(statements)


def dotted(node: cst.CSTNode | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None (any other node, or none)."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def string_value(node: cst.CSTNode | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value if isinstance(node.evaluated_value, str) else None
    return None


def with_string(node: cst.SimpleString, value: str) -> cst.SimpleString:
    """The same literal (prefix and quotes kept) holding ``value``."""
    quote = node.quote
    prefix = node.prefix
    return node.with_changes(value=f"{prefix}{quote}{value}{quote}")


def arg_named(call: cst.Call, keyword: str, position: int | None = None) -> cst.Arg | None:
    for i, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
        if arg.keyword is None and arg.star == "" and i == position:
            return arg
    return None


def bound_arguments(call: cst.Call, parameters: tuple[str, ...]) -> dict[str, cst.BaseExpression]:
    """A call's arguments by the parameter each binds: keywords by name, positional ones by
    ``parameters``' order (one past them under ""). Arguments spread with ``*`` or ``**``
    bind nothing anyone can name: NotApplicable."""
    found: dict[str, cst.BaseExpression] = {}
    for i, arg in enumerate(call.args):
        if arg.star:
            raise NotApplicable(f"arguments passed with {arg.star}: their names are not known")
        key = arg.keyword.value if arg.keyword else (parameters[i] if i < len(parameters) else "")
        found[key] = arg.value
    return found


def with_arg_value(
    call: cst.Call, keyword: str, position: int | None, value: cst.BaseExpression
) -> cst.Call:
    """``call`` with that argument's value replaced (found by keyword or position)."""
    arg = arg_named(call, keyword, position)
    if arg is None:
        raise NotApplicable(f"no {keyword} argument")
    return call.with_changes(
        args=[a.with_changes(value=value) if a is arg else a for a in call.args]
    )


def drop_args(call: cst.Call, *keywords: str) -> cst.Call:
    """``call`` without the keyword arguments named; trailing commas tidied."""
    kept = [a for a in call.args if not (a.keyword and a.keyword.value in keywords)]
    if kept and kept[-1].comma is not cst.MaybeSentinel.DEFAULT:
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=kept)


def set_kwarg(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """Replace ``keyword=``'s value, or append ``keyword=value`` in the call's own layout
    (one argument per line stays one per line; a trailing comma stays trailing)."""
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == keyword:
            args[i] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    new = cst.Arg(
        value=value,
        keyword=cst.Name(keyword),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    separator = _separator(args)
    own: cst.Comma | cst.MaybeSentinel = separator
    closing = last.comma
    last_end = line_end(last.comma)
    if is_multiline(separator) and last_end is not None:
        # The last argument keeps its own end-of-line comment; the new one closes the call.
        own = with_line_end(separator, last_end)
        closing = with_line_end(last.comma, cst.TrailingWhitespace())
    args[-1] = last.with_changes(comma=own, whitespace_after_arg=cst.SimpleWhitespace(""))
    args.append(new.with_changes(comma=closing, whitespace_after_arg=last.whitespace_after_arg))
    return call.with_changes(args=args)


def is_multiline(comma: cst.Comma | cst.MaybeSentinel) -> bool:
    return line_end(comma) is not None


def line_end(comma: cst.Comma | cst.MaybeSentinel) -> cst.TrailingWhitespace | None:
    """How the comma's line ends (its end-of-line comment, if any) where the comma ends a
    line: one argument per line. None for a comma within a line, or no comma."""
    if isinstance(comma, cst.Comma) and isinstance(
        comma.whitespace_after, cst.ParenthesizedWhitespace
    ):
        return comma.whitespace_after.first_line
    return None


def with_line_end(
    comma: cst.Comma | cst.MaybeSentinel, end: cst.TrailingWhitespace
) -> cst.Comma | cst.MaybeSentinel:
    """``comma`` ending its line with ``end`` instead, where it ends a line; else as it is."""
    if isinstance(comma, cst.Comma) and isinstance(
        comma.whitespace_after, cst.ParenthesizedWhitespace
    ):
        return comma.with_changes(
            whitespace_after=comma.whitespace_after.with_changes(first_line=end)
        )
    return comma


def prepend_arg(call: cst.Call, value: cst.BaseExpression) -> cst.Call:
    """Insert a positional first argument, separated the way the call separates its own."""
    args = list(call.args)
    comma = _separator(args) if args else cst.MaybeSentinel.DEFAULT
    return call.with_changes(args=[cst.Arg(value, comma=comma), *args])


def _separator(args: list[cst.Arg]) -> cst.Comma:
    """The comma between two arguments of this call (the first one's, if it has one)."""
    if len(args) >= 2 and isinstance(args[0].comma, cst.Comma):
        return args[0].comma
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
