"""TPK003: a Triton kernel whose code has a torch fallback becomes that fallback.

The common shape of optional Triton in a project (a fused softmax, a norm, an activation):

    try:
        import triton
        import triton.language as tl
        HAS_TRITON = True
    except ImportError:
        HAS_TRITON = False

    if HAS_TRITON:
        @triton.jit
        def _kernel(...): ...

    def _launch(x): ... _kernel[grid](...) ...

    def softmax(x, dim=-1):
        if HAS_TRITON and x.is_cuda:
            return _launch(x)
        return torch.softmax(x, dim=dim)

The author's torch branch is what the program computes wherever Triton cannot run (no
triton, not a CUDA tensor): that they ship it for those machines is the evidence that it
computes the same function, and the verifier then checks the port against the original's
numbers (the kernel run in Triton's interpreter where the guard lets it run on the CPU
reference). So on every target the port keeps only the fallback: each guarded ``if`` is
dropped (its ``else``, when it has one, takes its place), and the kernels, every
function and class that only serves them, the ``if HAS_TRITON:`` block around them and
the guarded import go (the flag stays, ``False``, for code elsewhere that reads it). On
the accelerator target too: the port is device-agnostic PyTorch; keeping the Triton path
for CUDA is a speed choice a human can make.

Refused, with the reason, where the fallback is not evidently there: a kernel launched
outside such a guard (no fallback at all: the LLM's or a human's PyTorch equivalent), a
guard that does not test for Triton or CUDA (``if n > 4096:`` picks the kernel for speed,
not where it cannot run), a Triton branch that neither returns nor has an ``else``, an
``elif`` chain, or a fallback that only raises.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import CodeRange

from . import triton_runtime
from .base import (
    REMOVE_STATEMENT,
    FixContext,
    Fixed,
    Kept,
    NotApplicable,
    as_statement,
    block_lines,
    code_of,
    fixer,
    follow_up,
    prescan,
)

PLAN = "triton_fallback"
DECORATORS = ("jit", "autotune", "heuristics")


@dataclass
class Plan:
    """What the fallback port of one file removes and rewrites (ids of original nodes)."""

    refusal: str = ""
    doomed: set[int] = field(default_factory=set)  # top-level statements to drop
    dispatch: set[int] = field(default_factory=set)  # guarded ifs: the fallback stays
    flag: str | None = None
    flag_import: int | None = None  # the try: import triton ... block, becomes FLAG = False
    # refused, the kernels run on triton_on_torch instead (triton_runtime) unless this says
    # why not; None where the file has no kernels to run
    no_runtime: str | None = None
    # the file imports triton_on_torch already (an accelerator port, migrated again)
    runtime_imported: bool = False


def _names(node: cst.CSTNode) -> set[str]:
    """Every plain name read under ``node`` (``a.b.c`` gives ``a``)."""
    found: set[str] = set()

    class Reads(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.add(name.value)

        def visit_Attribute(self, attribute: cst.Attribute) -> bool:
            attribute.value.visit(self)
            return False

    node.visit(Reads())
    return found


def _imports_triton(stmt: cst.CSTNode) -> set[str]:
    """The names ``stmt`` (an import line) binds to triton modules."""
    bound: set[str] = set()
    if not isinstance(stmt, cst.SimpleStatementLine):
        return bound
    for small in stmt.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                module = code_of(alias.name)
                if module.split(".")[0] == "triton":
                    bound.add(code_of(alias.asname.name) if alias.asname else module.split(".")[0])
        elif (
            isinstance(small, cst.ImportFrom)
            and small.module is not None
            and code_of(small.module).split(".")[0] == "triton"
            and not isinstance(small.names, cst.ImportStar)
        ):
            for alias in small.names:
                bound.add(code_of(alias.asname.name) if alias.asname else code_of(alias.name))
    return bound


def _assigned_flag(block: cst.BaseSuite, value: str) -> str | None:
    """``NAME = True`` (``value``) as a statement of ``block``: the flag's name."""
    for stmt in getattr(block, "body", ()):
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                    and code_of(small.value) == value
                ):
                    return small.targets[0].target.value
    return None


def _guarded_import(stmt: cst.CSTNode) -> tuple[set[str], str | None]:
    """``try: import triton ...; FLAG = True except ImportError: FLAG = False``: the triton
    names it binds and FLAG (None when ``stmt`` is not that)."""
    if not isinstance(stmt, cst.Try) or stmt.orelse is not None or stmt.finalbody is not None:
        return set(), None
    bound: set[str] = set()
    for inner in stmt.body.body:
        bound |= _imports_triton(inner)
    if not bound or len(stmt.handlers) != 1:
        return set(), None
    handler = stmt.handlers[0]
    if handler.type is None or code_of(handler.type) not in ("ImportError", "ModuleNotFoundError"):
        return set(), None
    flag = _assigned_flag(stmt.body, "True")
    return bound, flag if flag and _assigned_flag(handler.body, "False") == flag else None


def _is_kernel(stmt: cst.CSTNode, triton_names: set[str]) -> bool:
    """A def decorated ``@triton.jit`` / ``@triton.autotune(...)`` / ``@jit`` from triton."""
    if not isinstance(stmt, cst.FunctionDef):
        return False
    for decorator in stmt.decorators:
        target = decorator.decorator
        target = target.func if isinstance(target, cst.Call) else target
        text = code_of(target)
        head, _, attr = text.rpartition(".")
        if (head.split(".")[0] in triton_names and attr in DECORATORS) or text in triton_names:
            return True
    return False


def _guard_tests(test: cst.BaseExpression, flag: str | None) -> bool:
    """Whether an if's test says where Triton can run: the flag, ``x.is_cuda``, or a
    ``device.type == "cuda"`` comparison, as one of its ``and``-ed terms."""
    pending, terms = [test], []
    while pending:
        term = pending.pop()
        if isinstance(term, cst.BooleanOperation):
            if not isinstance(term.operator, cst.And):
                return False
            pending += [term.left, term.right]
        else:
            terms.append(term)
    for term in terms:
        text = code_of(term)
        if flag and text == flag:
            return True
        if isinstance(term, cst.Attribute) and term.attr.value == "is_cuda":
            return True
        if isinstance(term, cst.Comparison) and '"cuda"' in text.replace("'", '"'):
            return True
    return False


def _statements(block: cst.BaseSuite | Sequence[cst.BaseSmallStatement]) -> list[cst.CSTNode]:
    """What a block holds: statements, or a one-line suite's small statements."""
    found: list[cst.CSTNode] = [*block.body] if isinstance(block, cst.BaseSuite) else []
    return found


def _only_raises(stmts: list[cst.CSTNode]) -> bool:
    return all(
        isinstance(s, cst.SimpleStatementLine)
        and all(isinstance(small, cst.Raise | cst.Pass | cst.Expr) for small in s.body)
        for s in stmts
    )


class _Dispatches(cst.CSTVisitor):
    """In code that is not Triton's own: every read of a Triton-only name must sit in the
    body of a guarded ``if`` with a fallback (collected), or the plan is refused."""

    def __init__(
        self, triton_only: set[str], flag: str | None, positions: Mapping[cst.CSTNode, CodeRange]
    ) -> None:
        self.triton_only, self.flag, self.positions = triton_only, flag, positions
        self.found: set[int] = set()
        self.refusal = ""
        self.branches = 0  # ifs whose body runs Triton code: candidate dispatches

    def _line(self, node: cst.CSTNode) -> int:
        pos = self.positions.get(node)
        return pos.start.line if pos is not None else 0

    def _refuse(self, why: str) -> None:
        self.refusal = self.refusal or why

    def visit_If(self, node: cst.If) -> bool:
        if not (_names(node.body) & self.triton_only):
            return True
        self.branches += 1
        line = self._line(node)
        if not _guard_tests(node.test, self.flag):
            self._refuse(
                f"the Triton path at line {line} is chosen by `{code_of(node.test)}`, not by "
                "whether Triton can run (the flag, x.is_cuda): its other branch is not "
                "evidently the same computation"
            )
            return False
        if isinstance(node.orelse, cst.If):
            self._refuse(f"the Triton branch at line {line} is part of an elif chain")
            return False
        body = _statements(node.body)
        if node.orelse is None:
            last = body[-1] if body else None
            returns = isinstance(last, cst.SimpleStatementLine) and any(
                isinstance(small, cst.Return) for small in last.body
            )
            if not returns:
                self._refuse(
                    f"the Triton branch at line {line} neither returns nor has an else: "
                    "no fallback to keep"
                )
                return False
        elif _only_raises(_statements(node.orelse.body)):
            self._refuse(f"the fallback of the Triton branch at line {line} only raises")
            return False
        if node.orelse is not None and _names(node.orelse.body) & self.triton_only:
            self._refuse(f"the fallback of the Triton branch at line {line} uses Triton too")
            return False
        if _names(node.test) & self.triton_only:
            self._refuse(f"the guard at line {line} calls Triton code")
            return False
        self.found.add(id(node))
        return False  # its body goes: what it reads does not matter

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.triton_only:
            self._refuse(
                f"`{node.value}` (Triton code) is used at line {self._line(node)} outside a "
                "guard with a torch fallback: no fallback to keep (a PyTorch equivalent is "
                "for the LLM or a human)"
            )


def plan(module: cst.Module, positions: Mapping[cst.CSTNode, CodeRange]) -> Plan:
    """Which statements of ``module`` go, which ifs become their fallback, or why not."""
    result = Plan()
    triton_names: set[str] = set()
    top = list(module.body)
    for stmt in top:
        bound, flag = _guarded_import(stmt)
        if bound:
            triton_names |= bound
            if flag:
                result.flag, result.flag_import = flag, id(stmt)
        triton_names |= _imports_triton(stmt)
    if not triton_names:
        result.refusal = "triton is not imported at the top level of this file"
        return result

    def flag_block(stmt: cst.CSTNode) -> bool:
        """``if FLAG:`` holding only defs (kernels): its defs count as top-level ones, and
        when all of them go, the engine drops the emptied ``if`` itself."""
        return (
            isinstance(stmt, cst.If)
            and result.flag is not None
            and code_of(stmt.test) == result.flag
            and stmt.orelse is None
            and all(isinstance(s, cst.FunctionDef | cst.ClassDef) for s in _statements(stmt.body))
        )

    defined: dict[str, cst.CSTNode] = {}
    blocks = {id(stmt) for stmt in top if flag_block(stmt)}
    for stmt in top:
        inner = _statements(stmt.body) if id(stmt) in blocks else [stmt]
        for each in inner:
            if isinstance(each, cst.FunctionDef | cst.ClassDef):
                defined[each.name.value] = each
    triton_only = {name for name, stmt in defined.items() if _is_kernel(stmt, triton_names)}
    if not triton_only:
        result.refusal = "no @triton.jit kernel is defined at the top level of this file"
        return result
    result.no_runtime = _no_runtime(module, positions)
    growing, why_not = True, dict[str, str]()
    while growing:  # whatever reads triton or a Triton-only name is Triton-only
        growing = False
        for name, definition in defined.items():
            if name not in triton_only and _names(definition) & (triton_only | triton_names):
                dispatch = _Dispatches(triton_only | triton_names, result.flag, positions)
                definition.visit(dispatch)
                if dispatch.found and not dispatch.refusal:
                    continue  # reads them only in guarded branches: it keeps its fallback
                if dispatch.branches:  # it has a Triton branch, but not one with a fallback
                    why_not.setdefault(name, dispatch.refusal)
                triton_only.add(name)
                growing = True
    public = sorted(name for name in triton_only if not name.startswith("_"))
    if not any(
        _names(stmt) & triton_only for name, stmt in defined.items() if name not in triton_only
    ):
        entry = ", ".join(f"`{n}`" for n in public) or "the kernels"
        result.refusal = next(iter(why_not.values()), "") or (
            f"no torch fallback in this file: {entry} reach Triton code unconditionally (a PyTorch "
            "equivalent is for the LLM or a human)"
        )
        return result
    if public:
        result.refusal = (
            f"{', '.join(f'`{n}`' for n in public)}: Triton code with a public name, which "
            "another module may import; port its callers to the fallback first"
        )
        return result
    helpers = triton_only | triton_names
    kernels = {id(stmt) for stmt in defined.values() if _is_kernel(stmt, triton_names)}
    for name, definition in defined.items():
        if name in triton_only and id(definition) not in kernels:  # their fixer removes kernels
            result.doomed.add(id(definition))
    for stmt in top:
        if id(stmt) == result.flag_import or _imports_triton(stmt):
            continue
        inner = _statements(stmt.body) if id(stmt) in blocks else [stmt]
        for each in inner:
            if isinstance(each, cst.FunctionDef | cst.ClassDef) and each.name.value in triton_only:
                continue
            dispatch = _Dispatches(helpers, result.flag, positions)
            each.visit(dispatch)
            if dispatch.refusal:
                result.refusal = dispatch.refusal
                return result
            result.dispatch |= dispatch.found
    if not result.dispatch:
        result.refusal = (
            "no guarded branch chooses between the kernel and a torch fallback in this file"
        )
    return result


def _no_runtime(module: cst.Module, positions: Mapping[cst.CSTNode, CodeRange]) -> str:
    """Why the file's kernels cannot run on triton_on_torch ("" when they can)."""
    crowded = triton_runtime.crowded_imports(module)
    if crowded:
        line = positions[crowded[0]].start.line if crowded[0] in positions else 0
        return f"line {line} imports Triton with other modules in one statement"
    return triton_runtime.lacking(module.code)


@prescan("TPK003")
def triton_fallback_plan(module: cst.Module, lines: list[int], target: str) -> dict:
    from libcst.metadata import MetadataWrapper, PositionProvider

    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    found = plan(module, wrapper.resolve(PositionProvider))
    found.runtime_imported = triton_runtime.imports_runtime(module)
    return {PLAN: found}


def _plan(ctx: FixContext) -> Plan:
    found = ctx.state.get(PLAN)
    if not isinstance(found, Plan):
        raise NotApplicable("the file was not analysed for a torch fallback")
    return found


def _on_runtime(found: Plan) -> bool:
    """No fallback to keep, and triton_on_torch runs every kernel of the file."""
    return bool(found.refusal) and found.no_runtime == ""


@fixer("TPK003")
def kernel_to_fallback(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """The kernel's decorator: the kernel goes (the follow-up takes the rest); with no
    fallback, it stays and runs on triton_on_torch (the follow-up changes the imports); or
    the reason why neither applies."""
    found = _plan(ctx)
    if _on_runtime(found) and found.runtime_imported:
        raise Kept  # a port already: the kernels run on the runtime where Triton is missing
    if _on_runtime(found):
        ctx.ship(triton_runtime.RUNTIME_FILE)
        ctx.advise(
            triton_runtime.ADVISORY_OFF_TRITON
            if ctx.profile.may_have_triton
            else triton_runtime.ADVISORY
        )
        return node
    if found.refusal:
        raise NotApplicable("; ".join(filter(None, (found.refusal, found.no_runtime))))
    return REMOVE_STATEMENT


@follow_up("TPK003")
def keep_the_fallback(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    found = ctx.state.get(PLAN)
    if isinstance(found, Plan) and _on_runtime(found):
        if found.runtime_imported:
            return None  # its imports are the runtime's already
        return triton_runtime.runtime_node(original, node, ctx)
    if not isinstance(found, Plan) or found.refusal:
        return None
    if id(original) in found.doomed:
        return REMOVE_STATEMENT
    if id(original) == found.flag_import and found.flag:
        return cst.SimpleStatementLine(
            [cst.Assign([cst.AssignTarget(cst.Name(found.flag))], cst.Name("False"))],
            leading_lines=as_statement(original).leading_lines,  # a top-level import
        )
    if id(original) in found.dispatch and isinstance(node, cst.If):
        if node.orelse is None:
            return REMOVE_STATEMENT
        body = block_lines(node.orelse.body)
        first = body[0].with_changes(leading_lines=[*node.leading_lines, *body[0].leading_lines])
        return cst.FlattenSentinel([first, *body[1:]])
    return None
