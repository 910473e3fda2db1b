"""TPD023, the legacy type-alias idiom of older research code:

    Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
    valid = Tensor(n, 1).fill_(1.0)
    real = imgs.type(Tensor)

The alias picks a tensor *type* by a CUDA condition once; every tensor built with it
(``Tensor(...)``) or cast to it (``x.type(Tensor)``) then lands on the GPU or the CPU. The port
keeps the CPU type, picks a device by the same condition, and moves each of those tensors there:

    Tensor = torch.FloatTensor
    tensor_device = "tpu" if cuda else "cpu"
    valid = Tensor(n, 1).to(tensor_device).fill_(1.0)
    real = imgs.type(Tensor).to(tensor_device)

so the CPU arm is what it was and the accelerator arm has the same dtype on the target device.
Any other use of the alias (``isinstance``, passed to a function, rebound, used above its
definition) leaves the whole idiom to a human: half a rewrite would change what the rest means.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import (
    Assignment,
    CodeRange,
    MetadataWrapper,
    PositionProvider,
    Scope,
    ScopeProvider,
)

from .base import FixContext, Fixed, NotApplicable, code_of, fixer, follow_up

Scopes = Mapping[cst.CSTNode, Scope | None]  # ScopeProvider's answer
Positions = Mapping[cst.CSTNode, CodeRange]

ASSIGNMENTS = "tensor_alias_assignments"  # id(original statement line) -> _Alias
USES = "tensor_alias_uses"  # id(original call) -> name of the device variable
TAKEN = "tensor_alias_names"  # names already in the file or handed out
ANALYSIS = "tensor_alias_analysis"  # id(module) -> (scopes, positions)


@dataclass(frozen=True)
class _Alias:
    device: str  # the new variable's name
    accelerator_arm: str  # the target's device
    cuda_first: bool  # the CUDA type is the ``if`` arm, not the ``else`` arm
    choice: cst.IfExp  # the rewritten ``if`` expression: its test picks the device


@fixer("TPD023")
def legacy_type_alias(node: cst.Assign, ctx: FixContext) -> Fixed:
    """Plan the whole idiom at its definition (the scanner matched its shape); the follow-up
    below splits the definition's line and rewrites the uses as the engine reaches them."""
    assign = ctx.original
    line = ctx.parent(assign)
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        raise NotApplicable("the alias shares its line with other statements; split it first")
    # the scanner's shape: ``Alias = torch.cuda.X if test else torch.X``
    target = assign.targets[0].target if isinstance(assign, cst.Assign) else None
    choice = node.value
    if not (
        isinstance(assign, cst.Assign)
        and isinstance(target, cst.Name)
        and isinstance(assign.value, cst.IfExp)
        and isinstance(choice, cst.IfExp)
    ):
        raise NotApplicable("not a name bound to a choice between tensor types")
    alias = target.value
    cuda_first = "cuda" in code_of(assign.value.body)
    cpu_arm = choice.orelse if cuda_first else choice.body
    module = _module_of(line, ctx)
    scopes, positions = _analysis(module, ctx)
    uses = _uses(alias, assign, scopes, positions, ctx)
    device = _fresh_name(f"{_snake(alias)}_device", module, ctx)
    ctx.state.setdefault(ASSIGNMENTS, {})[id(line)] = _Alias(
        device, code_of(ctx.target_device()), cuda_first, choice
    )
    ctx.state.setdefault(USES, {}).update({id(call): device for call in uses})
    return node.with_changes(value=cpu_arm)


def _module_of(node: cst.CSTNode, ctx: FixContext) -> cst.Module:
    module = next((n for n in (node, *ctx.ancestors(node)) if isinstance(n, cst.Module)), None)
    if module is None:
        raise NotApplicable("cannot find the module around the alias")
    return module


def _analysis(module: cst.Module, ctx: FixContext) -> tuple[Scopes, Positions]:
    """Scopes and positions of the original tree, computed once per file."""
    cached = ctx.state.setdefault(ANALYSIS, {})
    if id(module) not in cached:
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        cached[id(module)] = (wrapper.resolve(ScopeProvider), wrapper.resolve(PositionProvider))
    return cached[id(module)]


def _uses(
    alias: str, assign: cst.Assign, scopes: Scopes, positions: Positions, ctx: FixContext
) -> list[cst.Call]:
    """The calls to rewrite: ``alias(...)`` and ``x.type(alias)``, once every use is one."""
    scope = scopes.get(assign)
    bindings = [
        binding
        for each in {s for s in scopes.values() if s is not None}
        for binding in each.assignments[alias]
    ]
    target = assign.targets[0].target  # a builtin's binding has no node
    ours = [b for b in bindings if isinstance(b, Assignment) and b.node is target]
    if scope is None or len(bindings) != 1 or len(ours) != 1:
        raise NotApplicable(f"`{alias}` is bound more than once; choose its device by hand")
    defined = positions[assign].start.line
    calls = []
    for access in ours[0].references:
        use = access.node
        call = _rewritable_call(use, ctx)
        if call is None or positions[use].start.line <= defined:
            where = positions[use].start.line if use in positions else "?"
            raise NotApplicable(
                f"`{alias}` is used on line {where} in a way the fix cannot follow "
                f"(only `{alias}(...)` and `x.type({alias})` are rewritten)"
            )
        calls.append(call)
    return calls


def _rewritable_call(use: cst.CSTNode, ctx: FixContext) -> cst.Call | None:
    parent = ctx.parent(use)
    if isinstance(parent, cst.Call) and parent.func is use:
        return parent
    if isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star:
        call = ctx.parent(parent)
        if (
            isinstance(call, cst.Call)
            and len(call.args) == 1
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "type"
        ):
            return call
    return None


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _fresh_name(base: str, module: cst.Module, ctx: FixContext) -> str:
    taken = ctx.state.get(TAKEN)
    if taken is None:
        collector = _Names()
        module.visit(collector)
        taken = ctx.state[TAKEN] = collector.names
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


@follow_up("TPD023")
def rewrite_alias(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    """The definition becomes the CPU type and a device chosen by the same condition; each
    tensor built or cast with the alias moves to that device."""
    uses = ctx.state.get(USES)
    if uses and id(original) in uses and isinstance(node, cst.Call):
        device = uses.pop(id(original))
        return cst.Call(
            func=cst.Attribute(value=node, attr=cst.Name("to")), args=[cst.Arg(cst.Name(device))]
        )
    aliases = ctx.state.get(ASSIGNMENTS)
    if not aliases or id(original) not in aliases or not isinstance(node, cst.SimpleStatementLine):
        return None
    plan = aliases.pop(id(original))
    accelerator = ctx.expr(plan.accelerator_arm)
    if isinstance(accelerator, cst.BooleanOperation):  # `a or b if c else d` reads wrongly
        accelerator = accelerator.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    cpu = cst.SimpleString('"cpu"')
    device = plan.choice.with_changes(
        body=accelerator if plan.cuda_first else cpu,
        orelse=cpu if plan.cuda_first else accelerator,
    )
    device_line = cst.SimpleStatementLine(
        [cst.Assign([cst.AssignTarget(cst.Name(plan.device))], device)]
    )
    return cst.FlattenSentinel([node, device_line])
