"""AST edit primitives: the only way the LLM-driven rewriter may change code.

Each takes a source text and a location, makes one edit, and checks the result
before returning it: it parses, it compiles, the edited node is still one node
spanning exactly the new code, and nothing outside the targeted span changed.
Otherwise it refuses with ``EditRefused`` and a reason a model can act on.
Locations are 1-based lines and 1-based columns, as the scanner reports them.
"""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import (
    CodeRange,
    MetadataWrapper,
    PositionProvider,
    WhitespaceInclusivePositionProvider,
)
from torchport.sandbox import astparse
from torchport.tools.cst_imports import (
    ImportedName,
    add_imports,
    gather_imports,
    under,
)
from torchport.tools.cst_imports import remove_unused_imports as drop_unused


class EditRefused(ValueError):
    """The edit was not made; ``str(exc)`` says why."""


@dataclass(frozen=True)
class EditResult:
    source: str
    start_line: int
    end_line: int  # lines of the new text that the edit covers


def _wrapper(source: str) -> MetadataWrapper:
    try:
        return MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    except cst.ParserSyntaxError as exc:
        raise EditRefused(f"the file does not parse before the edit: {exc.message}") from exc


def _offset(lines: list[str], line: int, col0: int) -> int:
    return sum(len(x) for x in lines[: line - 1]) + col0


def _nodes_at(source: str, line: int, col: int) -> list[tuple[cst.CSTNode, CodeRange]]:
    """Nodes starting at (line, col), outermost first."""
    wrapper = _wrapper(source)
    positions = wrapper.resolve(PositionProvider)
    found = [
        (node, rng)
        for node, rng in positions.items()
        if rng.start.line == line and rng.start.column == col - 1
    ]
    found.sort(key=lambda nr: (nr[1].end.line, nr[1].end.column), reverse=True)
    return found


def _check(new_source: str, path: str) -> None:
    try:
        cst.parse_module(new_source)
        compile(new_source, path, "exec", dont_inherit=True)
    except (cst.ParserSyntaxError, SyntaxError, ValueError) as exc:
        raise EditRefused(f"the edited file would not compile: {exc}") from exc


def replace_node(
    source: str,
    line: int,
    col: int,
    end_line: int,
    end_col: int,
    new_code: str,
    path: str = "<edit>",
) -> EditResult:
    """Replace the code of the node spanning exactly (line, col)-(end_line, end_col)."""
    candidates = [
        (node, rng)
        for node, rng in _nodes_at(source, line, col)
        if (rng.end.line, rng.end.column) == (end_line, end_col - 1)
    ]
    if not candidates:
        raise EditRefused(
            f"no syntax node spans exactly {line}:{col}-{end_line}:{end_col}; "
            "read the span again and give a node's exact location"
        )
    node, _ = candidates[0]
    is_expression = isinstance(node, cst.BaseExpression)
    try:
        (cst.parse_expression if is_expression else cst.parse_statement)(new_code)
    except cst.ParserSyntaxError as exc:
        kind = "an expression" if is_expression else "a statement"
        raise EditRefused(f"the new code is not {kind}: {exc.message}") from exc
    lines = source.splitlines(keepends=True)
    start = _offset(lines, line, col - 1)
    end = _offset(lines, end_line, end_col - 1)
    new_source = source[:start] + new_code + source[end:]
    if is_expression:
        # Parentheses never change the tree; if the bare text parses differently, the
        # surrounding operators captured part of it: keep it grouped.
        grouped = source[:start] + f"({new_code})" + source[end:]
        _check(grouped, path)
        if _tree(new_source) != _tree(grouped):
            new_source, new_code = grouped, f"({new_code})"
    _check(new_source, path)
    return EditResult(new_source, line, line + new_code.count("\n"))


def _tree(source: str) -> str | None:
    try:
        return ast.dump(astparse.parse(source))
    except SyntaxError:
        return None


def insert_import(
    source: str,
    module: str,
    name: str | None = None,
    path: str = "<edit>",
    asname: str | None = None,
) -> EditResult:
    """Add ``import module`` (or ``from module import name``, ``as asname``) unless there."""
    if not all(part.isidentifier() for part in module.split(".")) or any(
        n is not None and not n.isidentifier() for n in (name, asname)
    ):
        raise EditRefused(f"not an importable name: {module!r} {name!r}")
    spec = ImportedName(module, name, asname)
    new_source = add_imports(_wrapper(source).module, {spec}).code
    _check(new_source, path)
    old_lines, new_lines = source.splitlines(), new_source.splitlines()
    added = [x for x in new_lines if x not in old_lines]
    if any(not x.strip().startswith(("import ", "from ")) and x.strip() for x in added):
        raise EditRefused("adding the import would change more than import lines")
    first = next((i for i, x in enumerate(new_lines, 1) if x in added), 1)
    return EditResult(new_source, first, first + max(len(added) - 1, 0))


def _leading_lines(stmt: cst.BaseStatement) -> list[cst.EmptyLine]:
    """The comments and blank lines above a statement (every libcst statement is a simple
    line or a compound statement; both keep them)."""
    if isinstance(stmt, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        return list(stmt.leading_lines)
    return []


def _statement_spans(
    wrapper: MetadataWrapper,
) -> list[tuple[int, cst.Module | cst.IndentedBlock, list[tuple[int, int]]]]:
    """Every block with the line span each of its statements owns: (depth, block, spans).

    A statement's own lines run from its first decorator (or its keyword) to the end of
    its code, comments inside it included; the comments and blank lines above it
    belong to it in the tree but not to its span, so an edit of the span keeps them.
    """
    syntactic = wrapper.resolve(PositionProvider)
    inclusive = wrapper.resolve(WhitespaceInclusivePositionProvider)
    blocks: list[tuple[int, cst.Module | cst.IndentedBlock, list[tuple[int, int]]]] = []

    def own_span(stmt: cst.BaseStatement) -> tuple[int, int]:
        decorators = getattr(stmt, "decorators", ())
        start = syntactic[decorators[0] if decorators else stmt].start.line
        end = inclusive[stmt].end
        return start, end.line - 1 if end.column == 0 else end.line

    class Collector(cst.CSTVisitor):
        depth = 0

        def visit_Module(self, node: cst.Module) -> None:
            blocks.append((0, node, [own_span(s) for s in node.body]))

        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
            self.depth += 1
            blocks.append((self.depth, node, [own_span(s) for s in node.body]))

        def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
            self.depth -= 1

    wrapper.module.visit(Collector())
    return blocks


def _code_lines(source: str) -> set[int]:
    """Lines that hold code (not only comments or blanks), strings spanning lines included."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type not in skip and tok.type != tokenize.ENDMARKER:
                lines.update(range(tok.start[0], tok.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        pass
    return lines


def _span_hint(
    source: str,
    blocks: list[tuple[int, cst.Module | cst.IndentedBlock, list[tuple[int, int]]]],
    start_line: int,
    end_line: int,
) -> str:
    """Which span would be valid: the smallest run of whole statements of one block."""
    if not _code_lines(source) & set(range(start_line, end_line + 1)):
        return "; they hold no statement, only comments or blank lines"
    best: tuple[int, list[tuple[int, int]]] | None = None
    for depth, _, spans in blocks:
        inside = bool(spans) and spans[0][0] <= start_line and end_line <= spans[-1][1]
        if inside and (best is None or depth > best[0]):
            best = (depth, spans)
    if best is None:
        return ""
    spans = best[1]
    first = next(a for a, b in spans if b >= start_line)
    last = max(b for a, b in spans if a <= end_line)
    if first > last:
        return "; they hold no statement, only comments or blank lines"
    return f"; the smallest span of whole statements containing them is lines {first}-{last}"


def replace_lines(
    source: str, start_line: int, end_line: int, new_code: str, path: str = "<edit>"
) -> EditResult:
    """Replace the whole statements on lines start_line..end_line with ``new_code``.

    Line spans are what a model reads off a numbered listing, so this is the edit it
    gets right most often; whole statements of one block keep the tree sound.
    ``new_code`` may be dedented (it is indented to the block); empty removes the
    statements, leaving ``pass`` in a block that would become empty. Comments above
    the first statement and everything outside the span stay byte for byte.
    """
    if start_line < 1 or end_line < start_line:
        raise EditRefused(f"bad line span {start_line}-{end_line}: need 1 <= start <= end")
    wrapper = _wrapper(source)
    blocks = _statement_spans(wrapper)
    target = None
    for depth, block, spans in blocks:
        starts = [i for i, (a, _) in enumerate(spans) if a == start_line]
        ends = [j for j, (_, b) in enumerate(spans) if b == end_line]
        if starts and ends and starts[0] <= ends[-1] and (target is None or depth > target[0]):
            target = (depth, block, starts[0], ends[-1])
    if target is None:
        hint = _span_hint(source, blocks, start_line, end_line)
        raise EditRefused(
            f"lines {start_line}-{end_line} are not whole statements of one block{hint}"
        )
    _, block, first, last = target
    try:
        new_module = cst.parse_module(textwrap.dedent(new_code)) if new_code.strip() else None
    except cst.ParserSyntaxError as exc:
        raise EditRefused(f"the new code does not parse as statements: {exc.message}") from exc
    new_body = list(new_module.body) if new_module else []
    header = list(new_module.header) if new_module else []
    footer = list(new_module.footer) if new_module else []
    kept_above = _leading_lines(block.body[first])
    if new_body:
        new_body[0] = new_body[0].with_changes(
            leading_lines=[*kept_above, *header, *_leading_lines(new_body[0])]
        )
        carried = footer
    else:
        carried = [*kept_above, *header, *footer]
    body = [*block.body[:first], *new_body]
    rest = list(block.body[last + 1 :])
    block_footer = list(block.footer)
    if rest:
        rest[0] = rest[0].with_changes(leading_lines=[*carried, *_leading_lines(rest[0])])
    elif isinstance(block, cst.IndentedBlock) and not body:
        body = [cst.SimpleStatementLine([cst.Pass()], leading_lines=carried)]
    else:
        block_footer = [*carried, *block_footer]
    replacement = block.with_changes(body=[*body, *rest], footer=block_footer)

    class Swap(cst.CSTTransformer):
        def leave_IndentedBlock(
            self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
        ) -> cst.BaseSuite:
            if original_node is block and isinstance(replacement, cst.IndentedBlock):
                return replacement
            return updated_node

    module = wrapper.module
    new_source = (replacement if isinstance(replacement, cst.Module) else module.visit(Swap())).code
    _check(new_source, path)
    old_lines, new_lines = source.splitlines(True), new_source.splitlines(True)
    kept_after = len(old_lines) - end_line
    if (
        new_lines[: start_line - 1] != old_lines[: start_line - 1]
        or new_lines[len(new_lines) - kept_after :] != old_lines[end_line:]
    ):
        raise EditRefused("the edit would change lines outside the span; give a smaller span")
    return EditResult(new_source, start_line, max(start_line, len(new_lines) - kept_after))


def remove_unused_imports(source: str, modules: tuple[str, ...], path: str = "<edit>") -> str:
    """Drop imports from ``modules`` (and their submodules) whose names nothing uses.

    After the LLM replaced every use of a CUDA-only library, its import is what
    still fails on the target; removing an import nobody uses cannot change what
    the program computes (beyond the import's own side effects, which for these
    libraries is loading CUDA code). Imports still in use are kept.
    """
    tree = cst.parse_module(source)
    found = gather_imports(tree, under(modules))
    if not found:
        return source
    new_source = drop_unused(tree, found, source).code
    _check(new_source, path)
    return new_source
