"""CUDA graphs become the eager code they captured (TPT005, TPT008).

A CUDA graph is a recording: ``with torch.cuda.graph(g): BODY`` captures the kernels BODY
launches without running them, and each ``g.replay()`` runs them again on the same
tensors. No target has CUDA graphs, and the eager meaning of that is plain: BODY runs at
each replay. So the capture becomes a function and each replay a call of it::

    g = torch.cuda.CUDAGraph()                      # removed
    optimizer.zero_grad(set_to_none=True)           # moved into the function (below)
    with torch.cuda.graph(g):                       # def g_replay():
        static_loss = model(static_x).sum()         #     nonlocal static_loss
        static_loss.backward()                      #     optimizer.zero_grad(set_to_none=True)
        optimizer.step()                            #     static_loss = ...; ...
    ...
    g.replay()                                      # g_replay()

What keeps the meaning:
- the names BODY binds and the rest of the file reads (``static_loss``) stay the enclosing
  scope's: ``nonlocal`` (bound to None first when nothing else binds them there) or, at
  module level, ``global``;
- gradients: a backward captured while the gradients were None writes them afresh on every
  replay, where an eager backward would add to the last step's. The capture must follow
  ``zero_grad()`` (``set_to_none=True``, torch's default), which then moves into the function;
  a captured backward without it is refused, because whether replays overwrite or accumulate
  then depends on what ``.grad`` held at capture;
- the graph variable is used only to capture once and to replay (``reset()`` is removed);
  any other use (passed on, stored, captured twice) is refused with the reason.

``make_graphed_callables(callables, sample_args)`` becomes its callables (graphed ones
compute what they do), ``graph_pool_handle()`` None. The reference shim runs the original's
graphs (sandbox/shim/graphs.py), so the verifier compares the eager port with real replays.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeGuard

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider

from .base import (
    REMOVE_STATEMENT,
    FixContext,
    Fixed,
    NotApplicable,
    block_lines,
    code_of,
    dotted,
    fixer,
    follow_up,
    prescan,
)

GRAPHS = "cuda_graphs"  # graph variable -> _Graph
CAPTURE_CALLS = frozenset({"torch.cuda.graph", "torch.cuda.graphs.graph"})
GRAPH_TYPES = frozenset({"torch.cuda.CUDAGraph", "torch.cuda.graphs.CUDAGraph"})
SUFFIX = "_replay"
# Contexts around a capture that apply to the kernels it records and can be entered again
# at each replay: grad mode and autocast.
REENTERABLE = frozenset(
    {
        "torch.no_grad",
        "torch.inference_mode",
        "torch.enable_grad",
        "torch.set_grad_enabled",
        "torch.autocast",
        "torch.amp.autocast",
        "torch.cuda.amp.autocast",
    }
)


@dataclass
class _Graph:
    """One graph variable: where it is made, captured and replayed, and what that needs."""

    name: str
    made: list[cst.Assign] = field(default_factory=list)
    captures: list[cst.With] = field(default_factory=list)
    other_use: str | None = None
    refused: str | None = None
    function: str = ""
    declare: tuple[str, list[str]] | None = None  # ("nonlocal" | "global", names)
    prebind: list[str] = field(default_factory=list)
    zero_grad: cst.SimpleStatementLine | None = None
    contexts: list[cst.WithItem] = field(default_factory=list)  # around the capture

    @property
    def why_not(self) -> str | None:
        if self.refused:
            return self.refused
        if self.other_use:
            return f"the CUDA graph {self.name} is {self.other_use}: port its capture by hand"
        if len(self.made) != 1 or len(self.captures) != 1:
            return (
                f"the CUDA graph {self.name} is made {len(self.made)} and captured "
                f"{len(self.captures)} time(s) here: port it by hand"
            )
        return None


def _qualified(node: cst.BaseExpression, imports: dict[str, str]) -> str | None:
    name = dotted(node)
    if name is None:
        return None
    first, _, rest = name.partition(".")
    return imports.get(first, first) + (f".{rest}" if rest else "")


def capture_graph(with_node: cst.With, imports: dict[str, str]) -> str | None:
    """The graph variable of ``with [ctx, ...,] torch.cuda.graph(g, ...):`` (the capture
    the last item, no ``as``)."""
    if with_node.items[-1].asname is not None:
        return None
    call = with_node.items[-1].item
    if not (isinstance(call, cst.Call) and _qualified(call.func, imports) in CAPTURE_CALLS):
        return None
    first = call.args[0] if call.args else None
    if first is None or first.keyword is not None or not isinstance(first.value, cst.Name):
        return None
    return first.value.value


class _Bound(cst.CSTVisitor):
    """Names a block binds for its own scope (not those of functions or classes in it)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def _add(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self.names.append(target.value)
        elif isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                self._add(element.value)
        elif isinstance(target, cst.StarredElement):
            self._add(target.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._add(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._add(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._add(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._add(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._add(node.name)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.names.append(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.names.append(node.name.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def _bound_in(node: cst.CSTNode) -> list[str]:
    found = _Bound()
    node.visit(found)
    return list(dict.fromkeys(found.names))


def _calls_backward(node: cst.CSTNode) -> bool:
    return any(isinstance(n, cst.Attribute) and n.attr.value == "backward" for n in _walk(node))


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk(child)


def _is_zero_grad_to_none(statement: cst.CSTNode | None) -> TypeGuard[cst.SimpleStatementLine]:
    """``opt.zero_grad()`` / ``opt.zero_grad(set_to_none=True)`` alone on its line."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return False
    expr = statement.body[0]
    call = expr.value if isinstance(expr, cst.Expr) else None
    if not (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "zero_grad"
    ):
        return False
    return all(
        a.keyword is not None and a.keyword.value == "set_to_none" and code_of(a.value) == "True"
        for a in call.args
    )


class _Graphs(cst.CSTVisitor):
    def __init__(self, imports: dict[str, str], parents: Mapping[cst.CSTNode, cst.CSTNode]) -> None:
        self.imports = imports
        self.parents = parents
        self.graphs: dict[str, _Graph] = {}
        self.explained: set[int] = set()  # ids of the Name nodes the uses above account for
        self.names: dict[str, list[cst.Name]] = {}

    def _parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if (
            len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
            and isinstance(value, cst.Call)
            and _qualified(value.func, self.imports) in GRAPH_TYPES
        ):
            name = node.targets[0].target
            self.graphs.setdefault(name.value, _Graph(name.value)).made.append(node)
            self.explained.add(id(name))

    def visit_With(self, node: cst.With) -> None:
        name = capture_graph(node, self.imports)
        if name is not None:
            self.graphs.setdefault(name, _Graph(name)).captures.append(node)
            call = node.items[-1].item
            assert isinstance(call, cst.Call)
            self.explained.add(id(call.args[0].value))

    def visit_Name(self, node: cst.Name) -> None:
        attribute = self._parent(node)
        if (isinstance(attribute, cst.Attribute) and attribute.attr is node) or (
            isinstance(attribute, cst.Arg) and attribute.keyword is node
        ):
            return  # ``x.graph``, ``f(graph=...)``: not the variable
        self.names.setdefault(node.value, []).append(node)
        if not (isinstance(attribute, cst.Attribute) and attribute.value is node):
            return
        call = self._parent(attribute)
        statement = self._parent(call) if isinstance(call, cst.Call) else None
        if (
            attribute.attr.value in ("replay", "reset")
            and isinstance(call, cst.Call)
            and not call.args
            and isinstance(statement, cst.Expr)
        ):
            self.explained.add(id(node))

    def scope_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        parent = self._parent(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            parent = self._parent(parent)
        return parent

    def contexts_of(self, node: cst.CSTNode) -> tuple[list[cst.WithItem], str | None]:
        """The ``with`` items around ``node`` in its function (outermost first; the capture's
        own items before ``torch.cuda.graph(g)`` included): a capture
        inside ``torch.no_grad()`` captured kernels that track no gradients, so the
        eager function must enter the same contexts; one that cannot be entered again
        (a file, a lock, a stream) is refused."""
        items: list[cst.WithItem] = []
        parent: cst.CSTNode | None = node
        while parent is not None and not isinstance(parent, cst.FunctionDef | cst.Module):
            if isinstance(parent, cst.With):
                for item in reversed(parent.items[:-1] if parent is node else parent.items):
                    call = item.item
                    name = (
                        _qualified(call.func, self.imports) if isinstance(call, cst.Call) else None
                    )
                    if name not in REENTERABLE or item.asname is not None:
                        return [], (
                            f"the capture sits inside `with {code_of(call)}`, which its eager "
                            "function would have to enter again: port by hand"
                        )
                    items[:0] = [item.with_changes(comma=cst.MaybeSentinel.DEFAULT)]
            parent = self._parent(parent)
        return items, None

    def block_before(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The statement just before ``node`` in its block."""
        block = self._parent(node)
        body = getattr(block, "body", None)
        if not isinstance(body, list | tuple):
            return None
        i = next((i for i, s in enumerate(body) if s is node), 0)
        return body[i - 1] if i > 0 else None


def _plan(found: _Graphs, graph: _Graph) -> None:
    """What the capture's function needs: its name, declarations, the zero_grad it takes."""
    for use in found.names.get(graph.name, []):
        if id(use) not in found.explained:
            graph.other_use = "used otherwise than captured and replayed"
            return
    if graph.why_not:
        return
    capture = graph.captures[0]
    graph.function = f"{graph.name}{SUFFIX}"
    if graph.function in found.names:
        graph.refused = f"{graph.function} is a name of this file already: port by hand"
        return
    inside = {id(n) for n in _walk(capture)}
    bound = _bound_in(capture.body)
    read_outside = [
        name for name in bound if any(id(n) not in inside for n in found.names.get(name, []))
    ]
    scope = found.scope_of(capture)
    graph.contexts, graph.refused = found.contexts_of(capture)
    if graph.refused:
        return
    if read_outside:
        graph.declare = ("nonlocal" if scope is not None else "global", read_outside)
    if scope is not None:
        bound_elsewhere = set(_bound_in(scope.body)) - set(_bound_in(capture.body))
        graph.prebind = [n for n in read_outside if n not in bound_elsewhere]
    if _calls_backward(capture.body):
        before = found.block_before(capture)
        if not _is_zero_grad_to_none(before):
            graph.refused = (
                "the captured backward writes the gradients afresh on every replay only if "
                "they were None at capture: capture right after zero_grad(set_to_none=True), "
                "or port by hand"
            )
            return
        graph.zero_grad = before


def _imports(module: cst.Module) -> dict[str, str]:
    """``import torch.cuda as tc`` / ``from torch.cuda import graph``: local -> qualified."""
    names: dict[str, str] = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.ImportFrom) and small.module is not None:
                if small.relative or isinstance(small.names, cst.ImportStar):
                    continue
                base = code_of(small.module)
                for alias in small.names:
                    asname = alias.asname.name if alias.asname else None  # a Name, in an import
                    local = asname.value if isinstance(asname, cst.Name) else code_of(alias.name)
                    names[str(local)] = f"{base}.{code_of(alias.name)}"
            elif isinstance(small, cst.Import):
                for alias in small.names:
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        names[str(alias.asname.name.value)] = code_of(alias.name)
    return names


def graph_plans(module: cst.Module, lines: list[int], target: str) -> dict:
    parents = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ParentNodeProvider)
    found = _Graphs(_imports(module), parents)
    module.visit(found)
    for graph in found.graphs.values():
        _plan(found, graph)
    return {GRAPHS: found.graphs, "cuda_graph_imports": found.imports}


prescan("TPT005")(graph_plans)
prescan("TPT008")(graph_plans)


def _graph_of_assign(ctx: FixContext) -> _Graph | None:
    holder = ctx.parent(ctx.original)
    if not isinstance(holder, cst.Assign):
        return None
    graphs = ctx.state.get(GRAPHS, {}).values()
    return next((g for g in graphs if any(holder is made for made in g.made)), None)


@fixer("TPT005")
def cuda_graph(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    if not isinstance(node, cst.Call):
        raise NotApplicable("a CUDA graph API referenced, not called: port it by hand")
    name = (_qualified(node.func, ctx.state.get("cuda_graph_imports", {})) or "").rsplit(".")[-1]
    if name == "make_graphed_callables":
        if not node.args or node.args[0].keyword is not None:
            raise NotApplicable("make_graphed_callables without its callables first")
        callables = node.args[0].value
        holder = ctx.parent(ctx.original)
        if isinstance(holder, cst.Assign) and [_names(t.target) for t in holder.targets] == [
            _names(callables)
        ]:
            return REMOVE_STATEMENT  # ``model = make_graphed_callables(model, ...)``
        return callables
    if name == "graph_pool_handle":
        return cst.Name("None")
    if name == "CUDAGraph":
        graph = _graph_of_assign(ctx)
        if graph is None:
            raise NotApplicable("a CUDA graph not assigned to a name: port it by hand")
        if graph.why_not:
            raise NotApplicable(graph.why_not)
        return REMOVE_STATEMENT
    raise NotApplicable(f"torch.cuda.{name} has no eager port in the catalogue")


def _names(node: cst.BaseExpression) -> list[str]:
    """``a, b`` and ``(a, b)`` alike: the code of each element, or of the expression."""
    if isinstance(node, cst.Tuple | cst.List):
        return [code_of(e.value) for e in node.elements]
    return [code_of(node)]


def _declared(keyword: str, names: list[str]) -> cst.SimpleStatementLine:
    items = [cst.NameItem(cst.Name(n)) for n in names]
    small = cst.Nonlocal(items) if keyword == "nonlocal" else cst.Global(items)
    return cst.SimpleStatementLine([small])


@fixer("TPT008")
def graph_capture(node: cst.With, ctx: FixContext) -> Fixed:
    if not isinstance(ctx.original, cst.With):  # the rule's matcher finds capture blocks
        raise NotApplicable("not a capture block")
    name = capture_graph(ctx.original, ctx.state.get("cuda_graph_imports", {}))
    graph = ctx.state.get(GRAPHS, {}).get(name)
    if graph is None or graph.why_not:
        raise NotApplicable(graph.why_not if graph else "not a capture this codemod knows")
    statements: list[cst.BaseStatement] = [*block_lines(node.body)]
    head: list[cst.BaseStatement] = []
    if graph.declare:
        head.append(_declared(*graph.declare))
    if graph.zero_grad is not None:
        head.append(graph.zero_grad.with_changes(leading_lines=[]))
    if graph.contexts:  # what the capture ran under, entered again at each replay
        items = [
            item.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            for item in graph.contexts[:-1]
        ] + [graph.contexts[-1]]
        statements = [cst.With(items=items, body=cst.IndentedBlock(body=statements))]
    function = cst.FunctionDef(
        name=cst.Name(graph.function),
        params=cst.Parameters(),
        body=cst.IndentedBlock(body=[*head, *statements]),
    )
    prebind = [cst.parse_statement(f"{n} = None\n") for n in graph.prebind]
    first, *rest = [*prebind, function]
    note = cst.Comment(f"# captured as CUDA graph `{graph.name}`: runs eagerly at each replay")
    first = first.with_changes(leading_lines=[*node.leading_lines, cst.EmptyLine(comment=note)])
    return cst.FlattenSentinel([first, *rest])


@follow_up("TPT008")
def graph_uses(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    graphs = ctx.state.get(GRAPHS)
    if not graphs:
        return None
    if isinstance(original, cst.SimpleStatementLine) and any(
        original is g.zero_grad for g in graphs.values() if not g.why_not
    ):
        return REMOVE_STATEMENT  # moved into the capture's function
    if not (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1):
        return None
    expr = node.body[0]
    call = expr.value if isinstance(expr, cst.Expr) else None
    if not (
        isinstance(call, cst.Call)
        and not call.args
        and isinstance(call.func, cst.Attribute)
        and isinstance(call.func.value, cst.Name)
    ):
        return None
    graph = graphs.get(call.func.value.value)
    if graph is None or graph.why_not:
        return None
    if call.func.attr.value == "replay":
        replay = call.with_changes(func=cst.Name(graph.function))
        return node.with_changes(body=[expr.with_changes(value=replay)])
    if call.func.attr.value == "reset":
        return REMOVE_STATEMENT
    return None
