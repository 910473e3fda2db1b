"""Worker processes started by fork become spawned ones (TPN011, tpu).

TorchTPU refuses the device in a forked child of a process that had initialized it
(``[distributed] fork_error`` in ``sandbox/data/torch_tpu.toml``, "you must use the 'spawn'
start method"). Where the file has an ``if __name__ == "__main__":`` block, the program
chooses spawn once, as its first statement, and the launches stay as written; elsewhere the
launch takes a spawn context itself. A forking choice written out (``get_context("fork")``,
``set_start_method("fork")``) becomes ``"spawn"``.

Spawn pickles what it hands a child and re-imports the main module there, so the fix is
refused, with the reason, where that would break the program: a lambda or a function local
to another as the worker (or as the function a pool maps), and a launch that importing the
module would run again (at module level, or in a function a module-level call reaches,
outside the ``__main__`` block). Where one launch of a file is refused, none is made spawn
by the global switch: the others take a spawn context at the call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider
from torchport.sandbox import astparse

from ..pyimports import collect_aliases
from ..pystartmethod import DEFAULT_CONTEXT, GET_CONTEXT, SET_START_METHOD
from .base import (
    FixContext,
    Fixed,
    NotApplicable,
    arg_named,
    as_statement,
    code_of,
    dotted,
    fixer,
    follow_up,
    prepend_arg,
    prescan,
    set_kwarg,
    with_arg_value,
)

PLAN = "start_method_plan"
MODULES = ("multiprocessing", "torch.multiprocessing")
SPAWN = '"spawn"'
# Where each launch form takes the callables a child runs: (keyword, position).
CALLABLES: dict[str, tuple[tuple[str, int], ...]] = {
    "Process": (("target", 1),),
    "Pool": (("initializer", 1),),
    "ProcessPoolExecutor": (("initializer", 2),),
}
# Methods of a pool or executor whose first argument is run in a child.
POOL_METHODS = frozenset(
    {
        "map",
        "imap",
        "imap_unordered",
        "starmap",
        "apply",
        "apply_async",
        "map_async",
        "starmap_async",
        "submit",
    }
)

Parents = Mapping[cst.CSTNode, cst.CSTNode]  # ParentNodeProvider's answer: node -> its parent


@dataclass
class Plan:
    guard: int | None = None  # id of the ``__main__`` block that chooses spawn, in guard mode
    refused: dict[int, str] = field(default_factory=dict)  # id(launch call) -> reason
    # the first refusal among the launches that use the default method, for set_start_method
    default_refusal: str | None = None
    # the file's module-level name for (torch.)multiprocessing, if it imports one
    module_name: str | None = None


def _qualify(func: cst.BaseExpression, aliases: dict[str, str]) -> str | None:
    name = dotted(func)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    head = aliases.get(head, head)
    return f"{head}.{rest}" if rest else head


def _is_main_guard(statement: cst.CSTNode) -> bool:
    if not isinstance(statement, cst.If) or not isinstance(statement.test, cst.Comparison):
        return False
    test = statement.test
    if len(test.comparisons) != 1 or not isinstance(test.comparisons[0].operator, cst.Equal):
        return False
    sides = {code_of(test.left), code_of(test.comparisons[0].comparator)}
    return "__name__" in sides and bool(sides & {'"__main__"', "'__main__'"})


class _Launches(cst.CSTVisitor):
    """Every launch form of the file, the functions it defines and where, and what
    module-level code calls."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases
        self.launches: list[tuple[cst.Call, str]] = []  # (call, qualified name)
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)
        name = _qualify(node.func, self.aliases)
        if name in DEFAULT_CONTEXT or name in GET_CONTEXT or name in SET_START_METHOD:
            self.launches.append((node, name))


def _scopes(node: cst.CSTNode, parents: Parents) -> list[cst.FunctionDef | cst.Lambda]:
    """The functions around ``node``, innermost first."""
    found: list[cst.FunctionDef | cst.Lambda] = []
    parent = parents.get(node)
    while parent is not None:
        if isinstance(parent, cst.FunctionDef | cst.Lambda):
            found.append(parent)
        parent = parents.get(parent)
    return found


def _local_functions(scope: cst.FunctionDef) -> set[str]:
    """Names of functions defined inside ``scope`` (a function): spawn cannot pickle them."""
    names = set()
    for stmt in _walk(scope.body):
        if isinstance(stmt, cst.FunctionDef):
            names.add(stmt.name.value)
        elif isinstance(stmt, cst.Assign) and isinstance(stmt.value, cst.Lambda):
            names.update(code_of(t.target) for t in stmt.targets)
    return names


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk(child)


def _lambdas_bound(module: cst.Module) -> set[str]:
    return {
        code_of(t.target)
        for node in _walk(module)
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Lambda)
        for t in node.targets
    }


def _unpicklable(expr: cst.CSTNode, local: set[str]) -> str | None:
    for node in _walk(expr):
        if isinstance(node, cst.Lambda):
            return "a lambda"
        if isinstance(node, cst.Name) and node.value in local:
            return f"the local function {node.value!r}"
    return None


def _handed_over(call: cst.Call, form: str, scope: cst.CSTNode) -> list[cst.BaseExpression]:
    """What a child of this launch runs: its target/initializer, and for a pool the first
    argument of the map/submit calls in the same scope."""
    found = [
        arg.value for key in CALLABLES.get(form, ()) if (arg := arg_named(call, *key)) is not None
    ]
    if form != "Process":
        for node in _walk(scope):
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value in POOL_METHODS
                and node.args
            ):
                found.append(node.args[0].value)
    return found


def _reached_on_import(module: cst.Module) -> set[str]:
    """Top-level functions that module-level code outside the ``__main__`` block calls,
    directly or through each other: spawn re-runs them in every child."""
    defs = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
    called = [
        s
        for s in module.body
        if not isinstance(s, cst.FunctionDef | cst.ClassDef) and not _is_main_guard(s)
    ]
    todo = [name for s in called for n in _walk(s) if (name := _called_name(n))]
    reached: set[str] = set()
    while todo:
        name = todo.pop()
        if name in defs and name not in reached:
            reached.add(name)
            todo.extend(found for n in _walk(defs[name].body) if (found := _called_name(n)))
    return reached


def _called_name(node: cst.CSTNode) -> str | None:
    """``f`` of a call ``f(...)`` by a plain name; None for anything else."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
        return node.func.value
    return None


def _refusal(call: cst.Call, form: str, parents: Parents, context: dict) -> str | None:
    scopes = [s for s in _scopes(call, parents) if isinstance(s, cst.FunctionDef)]
    top = scopes[-1] if scopes else None
    if top is None and not context["in_guard"](call):
        return (
            "the launch runs at module level: spawn re-imports the main module in each "
            "child, which would launch again; move it under if __name__ == '__main__': first"
        )
    if top is not None and top.name.value in context["reached"]:
        return (
            f"{top.name.value}() is called at module level outside if __name__ == "
            "'__main__':, and spawn re-imports the main module in each child, which would "
            "launch again; guard the call first"
        )
    local = set(context["lambdas"])
    for scope in scopes:
        local |= _local_functions(scope)
    scope = scopes[0] if scopes else context["module"]
    for handed in _handed_over(call, form, scope):
        what = _unpicklable(handed, local)
        if what:
            return (
                f"the worker is {what}, which the spawn start method cannot pickle; make it "
                "a module-level function first"
            )
    return None


@prescan("TPN011")
def plan_start_method(module: cst.Module, lines: list[int], target: str) -> dict:
    """Which launches can be made spawn, and whether the ``__main__`` block does it once."""
    aliases = collect_aliases(astparse.parse(module.code))
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    found = _Launches(aliases)
    wrapper.visit(found)
    parents = wrapper.resolve(ParentNodeProvider)
    positions = wrapper.resolve(PositionProvider)
    guard = next((s for s in module.body if _is_main_guard(s)), None)
    context = {
        "module": module,
        "lambdas": _lambdas_bound(module),
        "reached": _reached_on_import(module),
        "in_guard": lambda node: guard is not None and _inside(node, guard, parents),
    }
    plan = Plan(module_name=_multiprocessing_name(module))
    default_findings = []
    for call, name in found.launches:
        if name not in DEFAULT_CONTEXT:
            continue
        form = name.rsplit(".", 1)[-1]
        reason = _refusal(call, form, parents, context)
        if reason:
            plan.refused[id(call)] = reason
            plan.default_refusal = plan.default_refusal or (
                f"line {positions[call].start.line}: {reason}"
            )
        if positions[call].start.line in lines:
            default_findings.append(call)
    if guard is not None and default_findings and plan.default_refusal is None:
        plan.guard = id(guard)
    return {PLAN: plan}


def _multiprocessing_name(module: cst.Module) -> str | None:
    """``mp`` for ``import multiprocessing as mp`` (or ``torch.multiprocessing``) at module
    level: new code speaks the file's own name instead of adding an import."""
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not isinstance(small, cst.Import):
                continue
            for alias in small.names:
                if code_of(alias.name) in MODULES:
                    return code_of(alias.asname.name) if alias.asname else code_of(alias.name)
    return None


def _inside(node: cst.CSTNode, outer: cst.CSTNode, parents: Parents) -> bool:
    parent = parents.get(node)
    while parent is not None:
        if parent is outer:
            return True
        parent = parents.get(parent)
    return False


def _spawn_method(call: cst.Call) -> cst.Call:
    """``get_context()`` / ``get_context("fork")`` / ``set_start_method("fork")`` with
    ``"spawn"``."""
    spawn = cst.SimpleString(SPAWN)
    if arg_named(call, "method", 0) is None:
        return prepend_arg(call, spawn)
    return with_arg_value(call, "method", 0, spawn)


def _module(ctx: FixContext, plan: Plan) -> str:
    if plan.module_name:
        return plan.module_name
    ctx.need("multiprocessing")
    return "multiprocessing"


def _spawn_context(ctx: FixContext, plan: Plan) -> cst.BaseExpression:
    return cst.parse_expression(f'{_module(ctx, plan)}.get_context("spawn")')


@fixer("TPN011", {"tpu"})
def start_method(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    if not isinstance(node, cst.Call):
        raise NotApplicable("not a call")
    plan: Plan = ctx.state.get(PLAN) or Plan()
    last = (dotted(node.func) or "").rsplit(".", 1)[-1]
    if last == "get_context":
        return _spawn_method(node)
    if last == "set_start_method":
        if plan.default_refusal:
            raise NotApplicable(f"spawn would break a launch of this file ({plan.default_refusal})")
        return _spawn_method(node)
    if id(ctx.original) in plan.refused:
        raise NotApplicable(plan.refused[id(ctx.original)])
    if plan.guard is not None:
        return node  # the __main__ block chooses spawn for the whole program (follow-up)
    if last == "ProcessPoolExecutor":
        return set_kwarg(node, "mp_context", _spawn_context(ctx, plan))
    if last not in ("Process", "Pool"):
        raise NotApplicable(f"{code_of(node.func)} is not a launch form this fix knows")
    owner = node.func.value if isinstance(node.func, cst.Attribute) else None
    if owner is not None and (dotted(owner) or "").rsplit(".", 1)[-1] != "pool":
        # the file's own name for (torch.)multiprocessing: mp.get_context("spawn").Process
        spawn: cst.BaseExpression = cst.Call(
            cst.Attribute(owner, cst.Name("get_context")), [cst.Arg(cst.SimpleString(SPAWN))]
        )
    else:
        spawn = _spawn_context(ctx, plan)
    return node.with_changes(func=cst.Attribute(spawn, cst.Name(last)))


@follow_up("TPN011")
def choose_spawn_in_main(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    """``multiprocessing.set_start_method("spawn", force=True)`` first in the ``__main__``
    block, when the plan chose it (``force``: a library may have chosen already)."""
    plan = ctx.state.get(PLAN)
    if plan is None or plan.guard != id(original) or not isinstance(node, cst.If):
        return None
    choose = cst.parse_statement(f'{_module(ctx, plan)}.set_start_method("spawn", force=True)\n')
    body = node.body
    if isinstance(body, cst.SimpleStatementSuite):
        rest = [cst.SimpleStatementLine(body=body.body)]
        return node.with_changes(body=cst.IndentedBlock(body=[choose, *rest]))
    first, *others = cst.ensure_type(body, cst.IndentedBlock).body  # the other suite: above
    first = as_statement(first)
    moved = first.with_changes(leading_lines=[])
    choose = choose.with_changes(leading_lines=first.leading_lines)
    return node.with_changes(body=body.with_changes(body=[choose, moved, *others]))
