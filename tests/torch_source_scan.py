"""What the product's source does to and with torch, read from its AST (no import).

Shared by tests/test_torch_patching.py (no torch attribute is assigned outside the one
patching mechanism) and tests/test_torch_private_api.py (every private torch symbol used is
listed in sandbox/TORCH_PRIVATE_API.md). Names are resolved through imports
(``from torch.utils import _pytree``) and through local aliases (``acc = torch.accelerator``,
``for owner in (dist, c10d)``), so a patch cannot hide behind a short name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The product: what ships. evals/suite holds the CUDA programs under test (user code).
PRODUCT = ("agents", "tools", "evals", "sandbox")
EXCLUDED = ("evals/suite",)


@dataclass(frozen=True)
class Use:
    """One reference in the source: the dotted torch path, where, and how."""

    symbol: str
    path: str  # relative to the repository root
    function: str  # qualified name of the enclosing function, or "<module>"
    line: int


def product_files() -> list[Path]:
    """Every Python file of the product, sorted."""
    files = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(EXCLUDED):
                files.append(path)
    return files


def _is_private(component: str) -> bool:
    return component.startswith("_") and not (
        component.startswith("__") and component.endswith("__")
    )


def is_private_symbol(symbol: str) -> bool:
    """A dotted torch path with a private component (``torch._C``, ``torch.x._y``)."""
    return any(_is_private(part) for part in symbol.split(".")[1:])


class _Scope:
    def __init__(self, parent: _Scope | None, name: str) -> None:
        self.parent = parent
        self.name = name
        self.aliases: dict[str, str] = {}
        self.strings: dict[str, str] = {}  # loop variables over literal names

    def lookup(self, name: str, strings: bool = False) -> str | None:
        scope: _Scope | None = self
        while scope is not None:
            table = scope.strings if strings else scope.aliases
            if name in table:
                return table[name]
            scope = scope.parent
        return None


class _Walker(ast.NodeVisitor):
    """Collects torch references (`uses`) and assignments to torch attributes (`writes`)."""

    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.scope = _Scope(None, "<module>")
        self.stack: list[str] = []
        self.uses: list[Use] = []
        self.writes: list[Use] = []
        self.patches: list[Use] = []

    # -- resolution ---------------------------------------------------------------
    def resolve(self, node: ast.AST) -> str | None:
        """The dotted torch path `node` denotes, if it is rooted at torch."""
        if isinstance(node, ast.Name):
            return self.scope.lookup(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Subscript):
            return self.resolve(node.value)
        if _called(node) == "getattr" and node.args:  # type: ignore[arg-type]
            return self._named_attribute(node)  # type: ignore[arg-type]
        return None

    def _named_attribute(self, node: ast.Call) -> str | None:
        """``f(torch.x, "name", ...)``: ``torch.x.name`` (``torch.x.<dynamic>`` for a
        computed name); None unless the first argument is rooted at torch."""
        base = self.resolve(node.args[0]) if node.args else None
        if not base:
            return None
        name = node.args[1] if len(node.args) > 1 else None
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return f"{base}.{name.value}"
        bound = self.scope.lookup(name.id, strings=True) if isinstance(name, ast.Name) else None
        return f"{base}.{bound or '<dynamic>'}"

    def _bind(self, target: ast.AST, value: ast.AST | None) -> None:
        """Record `target = value` as an alias when `value` is rooted at torch."""
        if isinstance(target, ast.Name):
            resolved = self.resolve(value) if value is not None else None
            if resolved:
                self.scope.aliases[target.id] = resolved
            else:
                self.scope.aliases.pop(target.id, None)
        elif isinstance(target, ast.Tuple | ast.List):
            values = value.elts if isinstance(value, ast.Tuple | ast.List) else None
            for i, element in enumerate(target.elts):
                same = values is not None and len(values) == len(target.elts)
                self._bind(element, values[i] if same else None)

    def _where(self) -> str:
        return ".".join(self.stack) or "<module>"

    def _use(self, symbol: str, node: ast.AST, writes: bool = False) -> None:
        use = Use(symbol, self.rel, self._where(), getattr(node, "lineno", 0))
        (self.writes if writes else self.uses).append(use)

    # -- imports --------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "torch" or alias.name.startswith("torch."):
                if alias.asname:
                    self.scope.aliases[alias.asname] = alias.name
                    self._use(alias.name, node)
                else:
                    self.scope.aliases["torch"] = "torch"
                    if alias.name != "torch":
                        self._use(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or not (module == "torch" or module.startswith("torch.")):
            return
        for alias in node.names:
            symbol = f"{module}.{alias.name}"
            self.scope.aliases[alias.asname or alias.name] = symbol
            self._use(symbol, node)

    # -- scopes ---------------------------------------------------------------------
    def _visit_scope(self, node: ast.AST, name: str) -> None:
        for decorator in getattr(node, "decorator_list", []):
            self.visit(decorator)
        args = getattr(node, "args", None)
        if isinstance(args, ast.arguments):
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if arg.annotation is not None:
                    self.visit(arg.annotation)
            for default in [*args.defaults, *args.kw_defaults]:
                if default is not None:
                    self.visit(default)
        if getattr(node, "returns", None) is not None:
            self.visit(node.returns)  # type: ignore[attr-defined]
        for base in getattr(node, "bases", []):
            self.visit(base)
        self.stack.append(name)
        self.scope = _Scope(self.scope, name)
        for statement in node.body:  # type: ignore[attr-defined]
            self.visit(statement)
        assert self.scope.parent is not None
        self.scope = self.scope.parent
        self.stack.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_scope(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._visit_scope(node, node.name)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._visit_scope(node, node.name)

    # -- bindings and writes ----------------------------------------------------------
    def _write_targets(self, targets: list[ast.expr]) -> None:
        for target in targets:
            elements = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
            for element in elements:
                symbol = self.resolve(element) if isinstance(element, ast.Attribute) else None
                if symbol:
                    self._use(symbol, element, writes=True)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        self._write_targets(node.targets)
        for target in node.targets:
            self._visit_target_bases(target)
            self._bind(target, node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.annotation)
        self._write_targets([node.target])
        self._visit_target_bases(node.target)
        self._bind(node.target, node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        self._write_targets([node.target])
        self._visit_target_bases(node.target)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._write_targets(node.targets)

    def _visit_target_bases(self, target: ast.AST) -> None:
        """An assignment target's base is read (``torch._C`` in ``torch._C._x = f``)."""
        if isinstance(target, ast.Attribute | ast.Subscript):
            self.visit(target)

    def visit_For(self, node: ast.For) -> None:
        """A loop over a literal tuple of torch objects or of names (``for owner in (dist,
        c10d)``, ``for name in ("_a", "_b")``) is read once per item, so that what it
        reaches through each is seen; any other loop once, its variable unbound."""
        self.visit(node.iter)
        items = node.iter.elts if isinstance(node.iter, ast.Tuple | ast.List) else []
        target = node.target.id if isinstance(node.target, ast.Name) else None
        resolved = [self.resolve(item) for item in items]
        names = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        if items and target and all(resolved):
            bindings = [(self.scope.aliases, value) for value in resolved]
        elif items and target and len(names) == len(items):
            bindings = [(self.scope.strings, value) for value in names]
        else:
            self._bind(node.target, None)
            bindings = [({}, "")]
        for table, value in bindings:
            if target and value:
                table[target] = value
            for statement in [*node.body, *node.orelse]:
                self.visit(statement)
        if target:
            self.scope.aliases.pop(target, None)
            self.scope.strings.pop(target, None)

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self._bind(item.optional_vars, None)
        for statement in node.body:
            self.visit(statement)

    def visit_Call(self, node: ast.Call) -> None:
        called = _called(node)
        patch = bool(called and called.endswith("patch"))  # patching.patch, a local _patch
        named = self._named_attribute(node) if patch or called in _NAMING_CALLS else None
        if named:
            # setattr(torch.x, "y", v) writes torch.x.y; patching.patch(torch.x, "y", v)
            # and getattr(torch.x, "y") use it: both count as uses of the symbol.
            self._use(named, node, writes=called in _WRITING_CALLS)
            if called in _WRITING_CALLS:
                self._use(named, node)
            if patch:
                self.patches.append(Use(named, self.rel, self._where(), node.lineno))
        self.generic_visit(node)

    # -- reads ----------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        symbol = self.resolve(node)
        if symbol:
            self._use(symbol, node)
            return  # the outermost torch path only
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        symbol = self.scope.lookup(node.id)
        if symbol and symbol != "torch" and isinstance(node.ctx, ast.Load):
            self._use(symbol, node)


# Calls whose first two arguments name an attribute: (owner, "name", ...).
_WRITING_CALLS = frozenset({"setattr", "delattr"})
_NAMING_CALLS = _WRITING_CALLS | {"getattr", "hasattr", "original"}


def _called(node: ast.AST) -> str | None:
    """The bare name of what a call calls (``patch`` for ``patching.patch(...)``)."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name):
        return node.func.id
    return node.func.attr if isinstance(node.func, ast.Attribute) else None


def private_symbol(symbol: str) -> str:
    """The part of a dotted torch path that names private API: up to the last private
    component and one more (``torch._C.DispatchKey`` for ``torch._C.DispatchKey.Meta``)."""
    parts = symbol.split(".")
    last = max(i for i, part in enumerate(parts) if i and _is_private(part))
    return ".".join(parts[: last + 2])


def scan(path: Path) -> _Walker:
    """Walk one file."""
    walker = _Walker(path.relative_to(ROOT).as_posix())
    walker.visit(ast.parse(path.read_text(), filename=str(path)))
    return walker


def uses() -> Iterator[Use]:
    """Every torch reference in the product."""
    for path in product_files():
        yield from scan(path).uses


def patches() -> Iterator[Use]:
    """Every ``patching.patch(torch.x, "name", ...)``: the torch attributes replaced."""
    for path in product_files():
        yield from scan(path).patches


def writes() -> Iterator[Use]:
    """Every assignment, setattr or delattr whose target is rooted at torch."""
    for path in product_files():
        yield from scan(path).writes
