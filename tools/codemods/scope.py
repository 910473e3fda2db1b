"""Which variable holds the repository's own device, where a construct is rewritten.

``.cuda()`` becomes ``.to(device)`` when the code already has a ``device`` in
scope (a parameter, or assigned earlier in the function or at module level);
otherwise the target's own device is spelled out.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

if TYPE_CHECKING:
    from .positions import StatementPositions

DEVICE_NAMES = ("device", "dev", "DEVICE")


class _Assignments(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.scopes: dict[int, list[tuple[str, int]]] = {}
        self.stack: list[int] = [0]

    def _bind(self, name: str, node: cst.CSTNode) -> None:
        if name in DEVICE_NAMES:
            line = self.get_metadata(PositionProvider, node).start.line
            self.scopes.setdefault(self.stack[-1], []).append((name, line))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.stack.append(id(node))
        for param in (*node.params.params, *node.params.kwonly_params):
            self._bind(param.name.value, node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.stack.pop()

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Name):
            self._bind(node.target.value, node)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name):
            self._bind(node.target.value, node)


class DeviceNames:
    def __init__(
        self, wrapper: MetadataWrapper, statements: StatementPositions | None = None
    ) -> None:
        self._wrapper = wrapper
        # tools.codemods.positions.StatementPositions, when the engine computes positions
        # statement by statement: only the statements that spell a device name are visited
        self._statements = statements

    @functools.cached_property
    def scopes(self) -> dict:
        # paid only by files whose fixers ask for a device variable
        collector = _Assignments()
        statements = self._statements
        if statements is None:
            self._wrapper.visit(collector)
            return collector.scopes
        collector.metadata = {PositionProvider: statements}
        for stmt in self._wrapper.module.body:  # in order: the first binding found wins
            if any(name in statements.code[id(stmt)] for name in DEVICE_NAMES):
                statements.enter(stmt)
                stmt.visit(collector)
        return collector.scopes

    def name_at(self, node: cst.CSTNode, provider: cst.MetadataDependent) -> str | None:
        """A device variable bound before ``node``'s line in its function, or at module level."""
        line = provider.get_metadata(PositionProvider, node).start.line
        parent: cst.CSTNode | None = node
        while parent is not None:
            parent = provider.get_metadata(ParentNodeProvider, parent, None)
            if isinstance(parent, cst.FunctionDef):
                for name, bound in self.scopes.get(id(parent), ()):
                    if bound < line:
                        return name
        for name, bound in self.scopes.get(0, ()):
            if bound < line:
                return name
        return None
