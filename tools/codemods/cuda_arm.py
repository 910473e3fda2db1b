"""Whether a device test guards CUDA code the port leaves as it is.

TPD016 retargets ``if x.device.type == "cuda":`` to the target's name, so the arm the
original ran on a GPU runs on the target. That is right when the arm is ported too. Where
the catalogue leaves a construct in it for the LLM or a human (Liger-Kernel's ``sm_count =
torch.cuda.get_device_properties(X.device).multi_processor_count``, TPD012), the
retargeted test sends the port into code the target cannot run, while the test left as it
was takes the other arm (``sm_count = 1``), as the original does on any machine without
CUDA. The prescan scans the file as the scanner does, for the target, and notes each such
test with the construct that keeps it; the fixer refuses those with the reason.
"""

from __future__ import annotations

import functools

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ...sandbox import astparse
from ..catalogue import load_catalogue
from ..catalogue.model import FixKind
from ..pymatch import CompiledRules, analyze_module
from .base import prescan

KEPT = "tpd016_kept_arms"  # state: id(test) -> why the test stays a test for CUDA
LEFT = (FixKind.LLM, FixKind.MANUAL)


@functools.cache
def _compiled(target: str) -> CompiledRules:
    catalogue = load_catalogue()
    rules = [r for r in catalogue if r.applies_to(target)]
    return CompiledRules.build(rules, list(catalogue))


def _left_lines(source: str, target: str) -> dict[int, str]:
    """The lines of the file's constructs that no codemod ports on ``target``: code, name."""
    try:
        tree = astparse.parse(source)
    except (SyntaxError, ValueError):
        return {}
    by_code = load_catalogue().by_code
    left: dict[int, str] = {}
    for raw in analyze_module(tree, source, _compiled(target)):
        fix = by_code[raw.code].fixes.get(target)
        if fix is not None and fix.kind in LEFT:
            left.setdefault(raw.span.line, f"{raw.code} ({by_code[raw.code].name})")
    return left


def _cuda_arm(node: cst.If) -> cst.CSTNode | None:
    """The arm that runs when the device is CUDA: the body, or for ``!=`` / ``not in``
    the ``else``."""
    test = node.test
    negated = isinstance(test, cst.Comparison) and all(
        isinstance(c.operator, cst.NotEqual | cst.NotIn) for c in test.comparisons
    )
    if not negated:
        return node.body
    return node.orelse.body if isinstance(node.orelse, cst.Else) else None


class _Ifs(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.If] = []

    def visit_If(self, node: cst.If) -> None:
        self.found.append(node)


@prescan("TPD016")
def kept_arms(module: cst.Module, lines: list[int], target: str) -> dict:
    """The tests of TPD016's lines whose CUDA arm holds a construct left for the LLM or a
    human, each with the reason the fixer gives."""
    left = _left_lines(module.code, target)
    if not left:
        return {}
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    ifs = _Ifs()
    module.visit(ifs)
    kept: dict[int, str] = {}
    for node in ifs.found:
        arm = _cuda_arm(node)
        if node.test not in positions or positions[node.test].start.line not in lines:
            continue
        if arm is None or arm not in positions:
            continue
        span = positions[arm]
        inside = [n for n in range(span.start.line, span.end.line + 1) if n in left]
        if inside:
            kept[id(node.test)] = (
                f"the arm it guards holds {left[inside[0]]} at line {inside[0]}, which the "
                "port leaves for the LLM or a human; kept as a test for CUDA, it sends the "
                "target to the other arm, as the original does on a machine without CUDA"
            )
    return {KEPT: kept}
