"""Apply the catalogue's codemods to one Python source, through libcst.

The scanner reports each finding's exact span; here the same nodes are found
again by position in a libcst tree (which keeps every byte of formatting and
comments), each is handed to its rule's fixer for the target, and the result
is checked to parse and compile before it is accepted.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar, cast

import libcst as cst
from libcst.metadata import (
    BaseMetadataProvider,
    CodeRange,
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
)
from torchport.sandbox import astparse
from torchport.tools.cst_imports import (
    ImportedName,
    ImportSpec,
    add_imports,
    gather_imports,
    remove_unused_imports,
)

from ..findings import Finding
from .base import (
    FIXERS,
    FOLLOW_UPS,
    PRESCANS,
    REMOVE_STATEMENT,
    Enclosed,
    FixContext,
    Kept,
    NotApplicable,
    Statement,
    as_statement,
    block_lines,
    code_of,
    dotted,
    is_multiline,
    line_end,
    with_line_end,
)
from .guard import REFUSED, Problem, blocking, original_lines, orphaned_imports
from .imports import add_definitions, torch_alias
from .positions import StatementPositions, usable
from .scope import DeviceNames

Provided = TypeVar("Provided")  # what a metadata provider gives for a node

# What the walk leaves in a node's place: a node, several statements, or nothing
Rewritten = cst.CSTNode | cst.FlattenSentinel[cst.CSTNode] | cst.RemovalSentinel

# Imports that may become unused once the code using them is migrated.
CUDA_MODULES = ("torch.cuda", "torch.backends.cudnn", "torch.backends.cuda")


@dataclass(frozen=True, slots=True)
class Edit:
    rule: str
    path: str
    line: int
    end_line: int
    before: str
    after: str
    reason: str
    cell: int | None = None
    advisory: str = (
        ""  # a fix that applied but leaves the construct slow: why (a performance advisory)
    )


@dataclass
class SourceResult:
    source: str
    edits: list[Edit] = field(default_factory=list)
    unapplied: list[tuple[Finding, str]] = field(default_factory=list)
    ships: tuple[str, ...] = ()  # files of tools/kernel_runtime the port needs beside this one
    written: tuple[tuple[str, str], ...] = ()  # files the fixes generated beside it (name, text)

    @property
    def changed(self) -> bool:
        return bool(self.edits)


_NO_DEFAULT = object()


class _Applier(cst.CSTTransformer):
    # Parents are recorded while the tree is walked (``on_visit``), not resolved up front
    # by libcst's ParentNodeProvider: that is a whole extra pass over every node of the
    # file, and fixers mostly ask about the ancestors of the node they rewrite. A question
    # about a node not walked yet (TPD023 follows an alias to its later uses) resolves the
    # provider then, once for the file.
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(
        self, findings: list[Finding], target: str, devices: DeviceNames, wrapper: MetadataWrapper
    ) -> None:
        super().__init__()
        self.target = target
        self.devices = devices
        self.wrapper = wrapper
        self.pending: dict[tuple[int, int], list[Finding]] = defaultdict(list)
        for f in findings:
            self.pending[(f.line, f.col - 1)].append(f)
        self.done: set[int] = set()
        self.edits: list[tuple[Finding | None, str, str, str, int, int]] = []
        self.edit_imports: list[
            frozenset[str | ImportedName]
        ] = []  # the modules each edit asked for
        self.state: dict = {}
        # Statements this run changed / emptied, by id; the dicts hold the nodes so that no id
        # is reused by a later node while the file is being rewritten.
        self.rewritten: dict[int, cst.CSTNode] = {}
        self.edited_lines: set[int] = set()
        self.doomed: dict[int, cst.CSTNode] = {}
        # compound statements (a def, an if, a try) a fix removes whole, by original id
        self.doom_originals: set[int] = set()
        self.guards: dict[int, cst.If] = {}  # `if torch.accelerator.is_available():` we wrote
        self.emptied: dict[int, cst.CSTNode] = {}  # blocks this run left with only ``pass``
        self.failures: dict[int, str] = {}
        self.enclosed: list[Finding] = []  # findings a fix around them rewrites (Enclosed)
        self.kept: set[int] = set()  # findings whose fix keeps the code as it is (Kept)
        self.definitions: dict[str, str] = {}  # top-level functions the fixes call
        self.ships: set[str] = set()  # files the fixes ship beside this one (FixContext.ship)
        self.written: dict[str, str] = {}  # files the fixes generate beside it (FixContext.write)
        self.path = ""  # the file's path in the repository (FixContext.path)
        self.root: Path | None = None  # the repository's folder (FixContext.root)
        self.advisories: dict[int, str] = {}  # an edit's index -> its advisory
        self.in_package = False
        self.laid_out: dict[int, Rewritten] = {}  # calls a fixer laid out itself
        self.remove: set[int] = set()
        self.imports: set[str | ImportedName] = set()
        self.module: cst.Module | None = None
        self.torch_alias: str | None = None
        self.parents: dict[int, cst.CSTNode] = {}  # id(node) -> its parent, as walked
        self.walking: list[cst.CSTNode] = []
        self.positions: Mapping[cst.CSTNode, CodeRange] = {}
        # Set by ``_rewrite_module``: top-level statements no finding is in are not entered while no
        # fixer has left state for follow-ups (they would come out unchanged anyway).
        self.by_statement: StatementPositions | None = None
        self.finding_lines = {f.line for f in findings}
        self.skipped: set[int] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.walking:
            parent = self.parents[id(node)] = self.walking[-1]
            if self.by_statement is not None and self._skips(node, parent):
                self.skipped.add(id(node))
                self.walking.append(node)
                return False
        self.walking.append(node)
        return super().on_visit(node)

    def _skips(self, node: cst.CSTNode, parent: cst.CSTNode) -> bool:
        """A statement no finding is in, while no fixer has left state for follow-ups: it
        would come out of the walk unchanged, so it is not entered. A top-level statement
        that is entered gets its positions here."""
        lazy = self.by_statement
        if lazy is not None and parent is self.module and id(node) in lazy.first_line:
            if not self.state and not lazy.holds_any(node, self.finding_lines):
                return True
            lazy.enter(node)
            return False
        if self.state or not isinstance(node, cst.BaseStatement):
            return False
        pos = self.positions.get(node)
        if pos is None:
            return False
        first = pos.start.line
        for decorator in getattr(node, "decorators", ()):  # outside a def's own span
            first = min(first, self.positions[decorator].start.line)
        return not any(first <= line <= pos.end.line for line in self.finding_lines)

    def get_metadata(
        self,
        key: type[BaseMetadataProvider[Provided]],
        node: cst.CSTNode,
        default: object = _NO_DEFAULT,
    ) -> Provided:
        """ParentNodeProvider's answer from the walk (fixers and ``DeviceNames`` ask it so);
        every other key from libcst."""
        if key is not ParentNodeProvider:
            return super().get_metadata(key, node, cast(Provided, default))
        parent = self.parents.get(id(node))
        if parent is None and node is not self.module:
            parent = self.wrapper.resolve(ParentNodeProvider).get(node)
        if parent is not None:
            return cast(Provided, parent)  # the key is ParentNodeProvider: it provides nodes
        if default is _NO_DEFAULT:
            raise KeyError(f"{type(node).__name__} has no parent")
        return cast(Provided, default)

    def visit_Module(self, node: cst.Module) -> bool:
        self.module = node
        if not hasattr(self, "lines"):
            self.lines = node.code.splitlines(keepends=True)
        # libcst types every provider's map as holding objects; this one holds CodeRanges
        self.positions = cast("Mapping[cst.CSTNode, CodeRange]", self.metadata[PositionProvider])
        return True

    def _candidates(self, original: cst.CSTNode) -> list[Finding]:
        pos = self.positions.get(original)
        if pos is None:
            return []
        lpar = getattr(original, "lpar", ())
        parens = len(lpar) if isinstance(lpar, list | tuple) else 0
        found = []
        for k in range(parens + 1):
            for f in self.pending.get((pos.start.line, pos.start.column + k), ()):
                if id(f) not in self.done and (f.end_line, f.end_col - 1) in (
                    (pos.end.line, pos.end.column - j) for j in range(parens + 1)
                ):
                    found.append(f)
        return found

    # the walk may put a node of another type in a node's place (an ``if`` for a guarded
    # line), which libcst's signature (generic in the node's type) does not allow for
    def on_leave(  # type: ignore[override]
        self, original: cst.CSTNode, updated: cst.CSTNode
    ) -> Rewritten:
        self.walking.pop()
        if id(original) in self.skipped:
            return updated
        result = self._apply_findings(original, updated)
        if result is not updated:
            result = _keep_parentheses(original, result)
        if self.state:
            result = self._follow_ups(original, result)
        if id(original) in self.doom_originals and isinstance(result, cst.CSTNode):
            self.doomed[id(result)] = result  # its block drops it (comments above kept)
            return result
        if isinstance(original, cst.SimpleStatementLine):
            line = self._drop_removed(original, result)
            if id(line) in self.doomed:
                return line
            guard = _guard_as_statement(line)
            if guard is not line and isinstance(guard, cst.If):  # one we wrote
                self.guards[id(guard)] = guard
            return guard
        if (
            isinstance(original, cst.Call)
            and isinstance(result, cst.Call)
            and id(result) not in self.laid_out
        ):
            return _tidy_trailing_comma(original, result)
        if isinstance(result, cst.IndentedBlock | cst.Module):
            return self._settle_block(result)
        if isinstance(result, cst.If) and self._left_empty(result):
            self.doomed[id(result)] = result  # its block drops it, as an emptied statement
        return result

    def _left_empty(self, node: cst.If) -> bool:
        """An ``if`` whose body this run emptied, with no ``else`` and a test without side
        effects (``if torch.cuda.device_count() > 1:`` around a removed wrapper): a reviewer
        would ask for it to go rather than read ``pass``."""
        return id(node.body) in self.emptied and node.orelse is None and _pure(node.test)

    def _settle_block(
        self, block: cst.IndentedBlock | cst.Module
    ) -> cst.IndentedBlock | cst.Module:
        """Drop the statements this run emptied, keeping the comments and blank lines above
        them (they move to the next statement), and lines a rewrite made repeat their
        neighbour (``torch.cuda.manual_seed(s)`` after ``torch.manual_seed(s)``)."""
        statements = [as_statement(s) for s in block.body]
        body: list[Statement] = []
        previous: Statement | None = None  # the last kept
        carried: list[cst.EmptyLine] = []
        dropped = False
        for index, stmt in enumerate(statements):
            last = body[-1] if body and not carried else None
            guard = self.guards.get(id(stmt))
            last_guard = self.guards.get(id(last)) if last is not None else None
            if guard is not None and last_guard is not None and not stmt.leading_lines:
                # adjacent guards we wrote: one `if torch.accelerator.is_available():`
                moved = block_lines(guard.body)
                merged = last_guard.with_changes(
                    body=last_guard.body.with_changes(body=[*block_lines(last_guard.body), *moved])
                )
                self.guards[id(merged)] = merged
                body[-1] = merged
                dropped = True
                continue
            repeat = id(stmt) in self.rewritten and _repeats(stmt, previous, body)
            if id(stmt) in self.doomed or repeat:
                following = (s for s in statements[index + 1 :] if id(s) not in self.doomed)
                lines = _without_its_comment(stmt, next(following, None))
                carried = _joined(carried, lines)
                dropped = True
                continue
            if carried:
                stmt = stmt.with_changes(leading_lines=_joined(carried, list(stmt.leading_lines)))
                carried = []
            body.append(stmt)
            previous = body[-1]
        if not dropped:
            return block
        if not body and isinstance(block, cst.IndentedBlock):
            body = [cst.SimpleStatementLine([cst.Pass()], leading_lines=carried)]
            block = block.with_changes(body=body)
            self.emptied[id(block)] = block
            return block
        return block.with_changes(body=body)

    def _apply_findings(self, original: cst.CSTNode, updated: cst.CSTNode) -> Rewritten:
        result: Rewritten = updated
        for finding in self._candidates(original):
            entry = FIXERS.get((finding.rule, self.target))
            self.done.add(id(finding))
            if entry is None:
                self.failures[id(finding)] = "no codemod for this rule and target yet"
                continue
            if not isinstance(result, cst.CSTNode):  # a fix before it removed or split it
                self.failures[id(finding)] = "another fix on the same code removed or split it"
                continue
            ctx = self._context(original)
            try:
                new = entry.fn(result, ctx)
            except NotApplicable as exc:
                self.failures[id(finding)] = str(exc)
                continue
            except Enclosed:
                self.enclosed.append(finding)
                continue
            except Kept:
                self.kept.add(id(finding))
                continue
            except Exception as exc:  # a codemod's bug must not lose the whole migration
                self.failures[id(finding)] = (
                    f"the codemod failed on this code ({type(exc).__name__}: {exc}); "
                    "left as is (a torchport bug: please report it)"
                )
                continue
            pos = self.get_metadata(PositionProvider, original)
            before = self._source_of(pos)
            if new is REMOVE_STATEMENT:
                stmt = self._enclosing_small_statement(original)
                if stmt is None:
                    stmt = self._enclosing_compound_statement(original)
                    if stmt is None:
                        self.failures[id(finding)] = "cannot remove: not inside a statement"
                        continue
                    self.doom_originals.add(id(stmt))  # a decorator's def, removed whole
                self.remove.add(id(stmt))
                stmt_pos = self.get_metadata(PositionProvider, stmt)
                before = self.module.code_for_node(stmt) if self.module else before
                self._record(
                    (finding, finding.rule, before, "", stmt_pos.start.line, stmt_pos.end.line),
                    ctx.imports,
                )
            else:
                after = _code_of(new)
                if ctx.advisory:
                    self.advisories[len(self.edits)] = ctx.advisory
                self._record(
                    (finding, finding.rule, before, after, pos.start.line, pos.end.line),
                    ctx.imports,
                )
                result = new
                if ctx.own_layout:
                    self.laid_out[id(new)] = new
            self.imports |= ctx.imports
        return result

    def _record(self, edit: tuple, imports: set[str | ImportedName]) -> None:
        self.edits.append(edit)
        self.edit_imports.append(frozenset(imports))
        self.edited_lines.update(range(edit[4], edit[5] + 1))

    def _context(self, original: cst.CSTNode) -> FixContext:
        return FixContext(
            self.target,
            original,
            lambda: self.devices.name_at(original, self),
            state=self.state,
            parent=lambda node: (
                None if node is None else self.get_metadata(ParentNodeProvider, node, None)
            ),
            torch_alias=self.torch_alias,
            definitions=self.definitions,
            in_package=self.in_package,
            ships=self.ships,
            written=self.written,
            path=self.path,
            root=self.root,
        )

    def _follow_ups(self, original: cst.CSTNode, result: Rewritten) -> Rewritten:
        for code, rewrite in FOLLOW_UPS:
            if not isinstance(result, cst.CSTNode):
                break
            ctx = self._context(original)
            new = rewrite(original, result, ctx)
            if new is None:
                continue
            pos = self.get_metadata(PositionProvider, original)
            if new is REMOVE_STATEMENT:  # a statement that only did what went away
                if isinstance(original, cst.BaseCompoundStatement):
                    self.doom_originals.add(id(original))
                elif not isinstance(original, cst.SimpleStatementLine):
                    continue
                else:
                    self.remove.update(id(small) for small in original.body)
                removed = (None, code, self._source_of(pos), "", pos.start.line, pos.end.line)
                self._record(removed, ctx.imports)
                continue
            self._record(
                (None, code, self._source_of(pos), _code_of(new), pos.start.line, pos.end.line),
                ctx.imports,
            )
            self.imports |= ctx.imports
            result = new
        return result

    def _source_of(self, pos: CodeRange) -> str:
        """The original text of a span: exactly what the finding covered."""
        lines = self.lines[pos.start.line - 1 : pos.end.line]
        if not lines:
            return ""
        if len(lines) == 1:
            return lines[0][pos.start.column : pos.end.column]
        return "".join([lines[0][pos.start.column :], *lines[1:-1], lines[-1][: pos.end.column]])

    def _enclosing_small_statement(self, node: cst.CSTNode) -> cst.CSTNode | None:
        while node is not None and not isinstance(node, cst.BaseSmallStatement):
            node = self.get_metadata(ParentNodeProvider, node, None)
        return node

    def _enclosing_compound_statement(self, node: cst.CSTNode) -> cst.CSTNode | None:
        while node is not None and not isinstance(node, cst.BaseCompoundStatement):
            node = self.get_metadata(ParentNodeProvider, node, None)
        return node

    def _drop_removed(self, original: cst.SimpleStatementLine, updated: Rewritten) -> Rewritten:
        if not isinstance(updated, cst.SimpleStatementLine):
            return updated
        pos = self.get_metadata(PositionProvider, original)
        if any(line in self.edited_lines for line in range(pos.start.line, pos.end.line + 1)):
            self.rewritten[id(updated)] = updated
        keep = [
            new
            for old, new in zip(original.body, updated.body, strict=True)
            if id(old) not in self.remove
        ]
        if len(keep) == len(updated.body):
            return updated
        if not keep:
            self.doomed[id(updated)] = updated
            return updated
        keep[-1] = keep[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(body=keep)


# Statements that draw no random number and read no device state: between a seeding call and
# its rewritten twin (``torch.manual_seed(s); np.random.seed(s); torch.cuda.manual_seed_all(s)``)
# they leave the second call nothing to do.
NO_DRAW = re.compile(
    r"^(?:[\w.]*seed\w*\(.*\)"  # random.seed(s), np.random.seed(s), set_seed(s)
    r"|[\w.]*(?:cudnn|backends)[\w.]*\s*=.*"  # cudnn.deterministic = True
    r"|os\.environ\[.*\]\s*=.*"  # os.environ["PYTHONHASHSEED"] = str(s)
    r"|[\w.]*use_deterministic_algorithms\(.*\))\s*$"
)


def _repeats(stmt: cst.CSTNode, previous: cst.CSTNode | None, kept: list) -> bool:
    """``stmt`` repeats the statement before it, or an earlier one of its block with only
    statements between that undo nothing it sets (``NO_DRAW``)."""
    if _same_line(stmt, previous):
        return True
    for between, earlier in enumerate(reversed(kept)):
        if _same_line(stmt, earlier):
            return True
        if not _draws_nothing(earlier) or between == MAX_BETWEEN:
            return False
    return False


MAX_BETWEEN = 4  # a seeding function's statements, not a whole script's


def _draws_nothing(stmt: cst.CSTNode) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    return bool(NO_DRAW.match(_code_of(stmt.body[0]).strip()))


def _same_line(stmt: cst.CSTNode, previous: cst.CSTNode | None) -> bool:
    """Two simple statement lines with the same code (their leading lines aside): generated
    only for the statements a rewrite touched, not for every line of every block."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    if not isinstance(previous, cst.SimpleStatementLine):
        return False
    return _code_of(stmt.with_changes(leading_lines=())) == _code_of(
        previous.with_changes(leading_lines=())
    )


def _guard_as_statement(line: Rewritten) -> Rewritten:
    """``(torch.accelerator.synchronize() if torch.accelerator.is_available() else None)``
    alone on its line -> ``if torch.accelerator.is_available(): torch.accelerator...()``:
    a conditional expression reads as a value, and a reviewer asks for the statement."""
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return line
    expr = line.body[0]
    if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.IfExp):
        return line
    choice = expr.value
    if not (
        isinstance(choice.orelse, cst.Name)
        and choice.orelse.value == "None"
        and _code_of(choice.test).endswith("accelerator.is_available()")
    ):
        return line
    call = expr.with_changes(value=choice.body.with_changes(lpar=[], rpar=[]))
    return cst.If(
        test=choice.test.with_changes(lpar=[], rpar=[]),
        body=cst.IndentedBlock(
            [cst.SimpleStatementLine([call], trailing_whitespace=line.trailing_whitespace)]
        ),
        leading_lines=line.leading_lines,
    )


def migrate_python(
    source: str,
    findings: list[Finding],
    target: str,
    path: str,
    cell: int | None = None,
    in_package: bool = False,
    root: Path | None = None,
) -> SourceResult:
    """Rewrite ``source`` for ``target``, applying the codemods of ``findings``
    (``in_package``: the file is a module of a package, FixContext.in_package; ``root``:
    the repository's folder, where a fix reads the files the code names, FixContext.root).

    Every rewrite passes the semantic guard: when the migrated file has a static finding the
    original had not (pyflakes', or a keyword given twice), the fixes whose edits caused it
    are refused and the file is rewritten without them, until it is clean. A refused fix is
    left for a human with the finding as its reason.
    """
    if not findings:
        return SourceResult(source)
    remaining, refused = list(findings), list[tuple[Finding, str]]()
    while True:
        result, applier = _migrate_once(source, remaining, target, path, cell, in_package, root)
        broken = blocking(source, result.source, path) if result.edits else []
        orphans = orphaned_imports(source, broken)
        if orphans:
            result.source = _drop_unused_imports(result.source, orphans)
            broken = blocking(source, result.source, path)
        if not broken or applier is None:  # no applier: nothing parsed, so nothing broken
            break
        blamed = _blame(broken, source, result.source, applier, remaining)
        if not blamed:
            why = "; ".join(dict.fromkeys(_guard_reason(p) for p in broken))
            reason = f"{why} (no single fix to blame: file left as is)"
            return SourceResult(source, unapplied=refused + [(f, reason) for f in remaining])
        refused += [(f, blame) for f in remaining if (blame := blamed.get(id(f)))]
        remaining = [f for f in remaining if id(f) not in blamed]
    result.unapplied = refused + result.unapplied
    return result


def _guard_reason(problem: Problem) -> str:
    return f"{REFUSED}: the fix would add {problem.kind}: {problem.message}"


def _blame(
    broken: list[Problem], before: str, after: str, applier: _Applier, findings: list[Finding]
) -> dict[int, str]:
    """The fixes (by id) whose edits introduced ``broken``, each with the reason.

    An edit is blamed when the problem's line came from the edit's lines; failing that,
    when the edit changed how often the problem's name occurs, or asked for the import
    that is now unused. An edit with no finding (a follow-up) blames the fixes on its lines.
    """
    blamed: dict[int, str] = {}
    for problem in broken:
        lines = set(original_lines(before, after, problem.line))
        culprits = [i for i, e in enumerate(applier.edits) if lines & set(range(e[4], e[5] + 1))]
        if not culprits:
            word = re.compile(rf"(?<![\w.]){re.escape(problem.name)}(?!\w)")
            culprits = [
                i
                for i, e in enumerate(applier.edits)
                if len(word.findall(e[2])) != len(word.findall(e[3]))
                or problem.name in applier.edit_imports[i]
            ]
        for i in culprits:
            finding, *_, line, end = applier.edits[i]
            owners = (
                [finding]
                if finding is not None
                else [f for f in findings if f.line <= end and f.end_line >= line]
            )
            for f in owners:
                blamed.setdefault(id(f), _guard_reason(problem))
    return blamed


def _migrate_once(
    source: str,
    findings: list[Finding],
    target: str,
    path: str,
    cell: int | None,
    in_package: bool = False,
    root: Path | None = None,
) -> tuple[SourceResult, _Applier | None]:
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        return SourceResult(
            source, unapplied=[(f, f"libcst cannot parse: {exc}") for f in findings]
        ), None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    statements = _by_statement(wrapper, source)
    applier = _Applier(findings, target, DeviceNames(wrapper, statements), wrapper)
    applier.torch_alias = torch_alias(module)
    applier.in_package = in_package
    applier.path = path
    applier.root = root
    for code, look in PRESCANS.items():
        lines = [f.line for f in findings if f.rule == code]
        if lines:
            applier.state.update(look(module, lines, target))
    new_module = _rewrite_module(wrapper, applier, source, statements)
    if applier.imports or applier.edits:
        new_module = add_definitions(new_module, applier.definitions)
        new_source = _fix_imports(new_module, applier.imports)
    else:
        new_source = new_module.code
    applied = {id(e[0]) for e in applier.edits if e[0] is not None} | applier.kept
    applied |= _settle_enclosed(applier, [f for f in findings if id(f) in applied])
    unapplied = [
        (f, applier.failures.get(id(f), "no node at the reported position"))
        for f in findings
        if id(f) not in applied
    ]
    try:
        astparse.parse(new_source, path)
    except SyntaxError as exc:
        reason = f"migrated code did not compile ({exc.msg}, line {exc.lineno}); file left as is"
        return SourceResult(source, unapplied=[(f, reason) for f in findings]), applier
    reasons = {f.rule: _reason(f, target) for f in findings}
    edits = [
        Edit(rule, path, line, end, before, after, reasons.get(rule, rule), cell, advisory)
        for index, (_, rule, before, after, line, end) in enumerate(applier.edits)
        for advisory in [applier.advisories.get(index, "")]
    ]
    ships = tuple(sorted(applier.ships))
    written = tuple(sorted(applier.written.items()))
    return SourceResult(new_source, edits, unapplied, ships, written), applier


def _settle_enclosed(applier: _Applier, applied: list[Finding]) -> set[int]:
    """The enclosed findings whose enclosing fix applied (converted with it); the others
    are left, with the reason why."""
    converted = set()
    for inner in applier.enclosed:
        around = [f for f in applied if _contains(f, inner)]
        if around:
            converted.add(id(inner))
        else:
            applier.failures[id(inner)] = (
                "part of the call around it, which was not ported (its own reason says why)"
            )
    return converted


def _contains(outer: Finding, inner: Finding) -> bool:
    return (outer.line, outer.col) <= (inner.line, inner.col) and (
        outer.end_line,
        outer.end_col,
    ) >= (inner.end_line, inner.end_col)


def _by_statement(wrapper: MetadataWrapper, source: str) -> StatementPositions | None:
    """Positions computed statement by statement, unless that could change the result: a
    line the applier rewrites wherever it stands (a guard written as an expression) is in
    the file. ``TORCHPORT_WHOLE_WALK=1`` walks every statement, for comparison."""
    if os.environ.get("TORCHPORT_WHOLE_WALK") == "1" or not usable(source) or _GUARD in source:
        return None
    return StatementPositions(wrapper)


def _rewrite_module(
    wrapper: MetadataWrapper,
    applier: _Applier,
    source: str,
    statements: StatementPositions | None,
) -> cst.Module:
    """Run the applier over the module; with ``statements``, entering only the top-level
    statements that hold a finding (positions computed for those alone)."""
    applier.lines = source.splitlines(keepends=True)  # the module's code, as parsed
    if statements is None:
        return wrapper.visit(applier)
    applier.by_statement = statements
    applier.metadata = {PositionProvider: statements}
    return wrapper.module.visit(applier)


_GUARD = "accelerator.is_available()"  # _guard_as_statement's test, in any code it rewrites


# Calls that only ask about the machine: an ``if`` testing them has no side effect to keep.
QUERIES = frozenset(
    {
        "is_available",
        "device_count",
        "is_initialized",
        "get_world_size",
        "get_rank",
        "current_device",
        "current_device_index",
        "is_bf16_supported",
        "addressable_runtime_device_count",
        "global_runtime_device_count",
    }
)
PURE_EXPRESSIONS = (
    cst.Name,
    cst.Attribute,
    cst.Integer,
    cst.Float,
    cst.SimpleString,
    cst.Comparison,
    cst.BooleanOperation,
    cst.UnaryOperation,
    # ``if step == args.profile_steps[1] - 1:`` around a removed statement: indexing and
    # arithmetic on the program's own values (a __getitem__ with side effects in an if's
    # test would be perverse)
    cst.Subscript,
    cst.BinaryOperation,
)


def _pure(test: cst.BaseExpression) -> bool:
    """True when evaluating ``test`` changes nothing: names, attributes, literals,
    comparisons and machine queries (``torch.cuda.device_count()``)."""
    for node in _walk(test):
        if isinstance(node, cst.Call):
            name = dotted(node.func)
            if name is None or name.rsplit(".", 1)[-1] not in QUERIES or node.args:
                return False
        elif isinstance(node, cst.BaseExpression) and not isinstance(node, PURE_EXPRESSIONS):
            return False
    return True


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk(child)


def _without_its_comment(stmt: Statement, following: Statement | None) -> list[cst.EmptyLine]:
    """The lines above a dropped statement, less the comment block right above it (no blank
    line between): it described the dropped line (``# speed up`` above ``cudnn.benchmark =
    True``), and left in place it would describe the next one. It stays only where it heads
    a paragraph that goes on and names the next statement, not the dropped one (``# Data
    loading`` above a dropped line and ``dataset = ...``)."""
    lines = list(stmt.leading_lines)
    attached = 0
    while attached < len(lines) and lines[-1 - attached].comment is not None:
        attached += 1
    if not attached:
        return lines
    comment = lines[-attached:]
    heads_next = (
        following is not None
        and not following.leading_lines
        and _names(comment, following)
        and not _names(comment, stmt)
    )
    return lines if heads_next else lines[:-attached]


_NOT_NAMES = frozenset({"torch", "self", "args", "true", "false", "none", "with"})
_WORD = re.compile(r"[A-Za-z]{4,}")


def _names(comment: list[cst.EmptyLine], stmt: Statement) -> bool:
    """Whether the comment names a word of the statement's code (``# data`` / ``dataset``)."""
    if isinstance(stmt, cst.BaseCompoundStatement):  # its first line: `if x:` / `def f(a):`
        stmt = stmt.with_changes(body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Pass()])]))
    code = _code_of(stmt.with_changes(leading_lines=()))
    words = {w.lower() for w in _WORD.findall(code)} - _NOT_NAMES
    said = " ".join(line.comment.value for line in comment if line.comment is not None)
    said_words = {w.lower() for w in _WORD.findall(said)}
    return any(a.startswith(b) or b.startswith(a) for a in said_words for b in words)


def _blank_run(lines: list[cst.EmptyLine]) -> int:
    longest = run = 0
    for line in lines:
        run = run + 1 if line.comment is None else 0
        longest = max(longest, run)
    return longest


def _joined(carried: list[cst.EmptyLine], own: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The lines above a dropped statement joined to the next one's: comments kept, but no
    run of blank lines longer than either had (no blank-line debris where a line went)."""
    limit = max(_blank_run(carried), _blank_run(own))
    joined, run = [], 0
    for line in [*carried, *own]:
        run = run + 1 if line.comment is None else 0
        if run <= limit:
            joined.append(line)
    return joined


def _tidy_trailing_comma(original: cst.Call, updated: cst.Call) -> cst.Call:
    """Removing arguments keeps the call's own layout: ``f(a, )`` never, and in a
    one-argument-per-line call the closing parenthesis stays where it was."""
    if len(updated.args) >= len(original.args):
        return updated
    if not updated.args:  # f(\n    a=1,\n) with every argument gone: f()
        return updated.with_changes(whitespace_before_args=cst.SimpleWhitespace(""))
    last_before, last = original.args[-1], updated.args[-1]
    comma = last_before.comma
    end = line_end(last.comma)
    if is_multiline(comma) and end is not None:
        # The closing line's indentation from the removed argument, but this one's own
        # comment: the removed argument's comment was about the removed argument.
        comma = with_line_end(comma, end)
    last = last.with_changes(comma=comma, whitespace_after_arg=last_before.whitespace_after_arg)
    return updated.with_changes(args=[*updated.args[:-1], last])


def _code_of(node: Rewritten) -> str:
    if isinstance(node, cst.RemovalSentinel):
        return ""
    if isinstance(node, cst.Arg):
        node = node.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    if isinstance(node, cst.FlattenSentinel):
        return "".join(code_of(n) for n in node.nodes)
    return code_of(node)


def _reason(finding: Finding, target: str) -> str:
    return f"{finding.message}; {target}: {finding.fix.get(target, {}).get('hint', '')}".rstrip()


def _keep_parentheses(original: cst.CSTNode, result: Rewritten) -> Rewritten:
    """A fix of a parenthesised expression keeps its parentheses: ``not(cudnn.is_acceptable(i))``
    rewritten without them would be ``notFalse``, which libcst refuses to build (and a
    reader would not write)."""
    lpar = getattr(original, "lpar", None)
    if not lpar or not isinstance(result, cst.BaseExpression) or getattr(result, "lpar", True):
        return result
    return result.with_changes(lpar=lpar, rpar=getattr(original, "rpar", ()))


def _drop_unused_imports(source: str, imports: list[ImportSpec]) -> str:
    return _no_new_leading_blank(
        source, remove_unused_imports(cst.parse_module(source), imports).code
    )


def _no_new_leading_blank(before: str, after: str) -> str:
    """An import removed from the top of a file leaves the blank line that followed it as the
    file's first line: drop it (a file that began with one keeps it)."""
    if after[:1] in ("\n", "\r") and before[:1] not in ("\n", "\r"):
        return after.lstrip("\r\n")
    return after


def _fix_imports(module: cst.Module, needed: set[str | ImportedName]) -> str:
    """The migrated module's code with the imports its edits need, less the CUDA imports
    they left unused."""
    module = add_imports(module, needed)
    code = module.code
    if not any(name in code for name in CUDA_MODULES):  # no import can match: no visit
        return code
    found = [
        spec
        for spec in gather_imports(module, lambda name: name.startswith(CUDA_MODULES))
        if spec.name is not None or spec.asname is not None  # ``import torch.cuda`` binds torch
    ]
    if not found:
        return code
    return _no_new_leading_blank(code, remove_unused_imports(module, found, code).code)
