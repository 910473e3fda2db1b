"""Positions for the top-level statements a rewrite enters, computed one statement at a time.

libcst's ``PositionProvider`` generates the whole module's code with position tracking
before a transform starts: the largest single cost of a migration, paid even for the
statements no finding is in. A top-level statement's first line is known from the plain
code of the statements above it (cheap), and its nodes' positions come from generating
that statement alone, starting at that line: the same numbers the provider gives.

A node whose position was not computed (a statement the rewrite skipped, the module
itself) is looked up in libcst's provider, resolved then, once per file: a question
nobody expected still gets libcst's answer.
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

NEWLINE = re.compile(r"\r\n?|\n")


class StatementPositions(dict):
    """node -> CodeRange, filled by ``enter`` for each top-level statement a walk enters."""

    def __init__(self, wrapper: MetadataWrapper) -> None:
        super().__init__()
        self.wrapper = wrapper
        module = wrapper.module
        self.module = module
        line = 1 + sum(len(NEWLINE.findall(module.code_for_node(h))) for h in module.header)
        self.first_line: dict[int, int] = {}  # id(top-level statement) -> its first line
        self.last_line: dict[int, int] = {}
        self.code: dict[int, str] = {}  # id(top-level statement) -> its code
        for stmt in module.body:
            code = self.code[id(stmt)] = module.code_for_node(stmt)
            self.first_line[id(stmt)] = line
            line += len(NEWLINE.findall(code))
            self.last_line[id(stmt)] = line - 1
        self.entered: set[int] = set()

    def holds_any(self, stmt: cst.CSTNode, lines: set[int]) -> bool:
        """Whether one of ``lines`` is inside top-level ``stmt`` (its comments included)."""
        first, last = self.first_line[id(stmt)], self.last_line[id(stmt)]
        return any(first <= line <= last for line in lines)

    def enter(self, stmt: cst.CSTNode) -> None:
        """Compute the positions of ``stmt`` and every node in it."""
        if id(stmt) in self.entered:
            return
        self.entered.add(id(stmt))
        provider = PositionProvider()
        state = PositionProvidingCodegenState(
            default_indent=self.module.default_indent,
            default_newline=self.module.default_newline,
            provider=provider,
        )
        state.line = self.first_line[id(stmt)]
        stmt._codegen(state)
        self.update(provider._computed)

    def __missing__(self, node: cst.CSTNode) -> CodeRange:
        return self.wrapper.resolve(PositionProvider)[node]


def usable(source: str) -> bool:
    """Statement by statement needs newlines counted the way the provider counts them,
    token by token; a lone carriage return could fall between two tokens."""
    return "\r" not in source
