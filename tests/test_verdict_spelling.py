"""No verdict or failure kind is spelled as a string outside its enum (``agents.verdicts``).

A verdict typed as ``"not-runable"`` in one module is a branch that never runs and a
verdict no chart colours: read from the syntax tree (never a regex over comments and
docstrings), every literal equal to a ``Verdict`` or ``FailureKind`` value is an error.
Values that are also ordinary words (``failed`` is also a run's status, ``error`` a key)
count where the code handles a verdict: compared with, assigned to, passed as or keyed by
something named ``verdict``, ``outcome`` or ``expected``, or given to ``Verification``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from torchport.agents.verdicts import FailureKind, Verdict, failure_kind
from torchport.sandbox.harness import SANDBOX_ERROR

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("agents", "evals", "cli")
NOT_SCANNED = ("agents/verdicts.py", "evals/suite/")
WORDS = {"verified", "ran", "failed", "error"}  # also ordinary words: only in a verdict's place
SPELLED = {str(v) for v in (*Verdict, *FailureKind)}
UNIQUE = SPELLED - WORDS
VERDICT_NAME = re.compile(r"verdict|outcome|expected", re.IGNORECASE)


def _strings(node: ast.AST | None) -> Iterator[ast.Constant]:
    """The string constants ``node`` is, or holds as a tuple, list, set or conditional."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        for element in node.elts:
            yield from _strings(element)
    elif isinstance(node, ast.IfExp):
        yield from _strings(node.body)
        yield from _strings(node.orelse)


def _names_verdict(node: ast.AST) -> bool:
    return bool(VERDICT_NAME.search(ast.unparse(node)))


def _in_verdict_place(node: ast.AST) -> Iterator[ast.Constant]:
    """The string constants ``node`` puts where a verdict goes."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        if any(_names_verdict(s) for s in sides if not isinstance(s, ast.Constant)):
            for side in sides:
                yield from _strings(side)
    elif isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                for one, value in zip(target.elts, node.value.elts, strict=False):
                    if _names_verdict(one):
                        yield from _strings(value)
            elif _names_verdict(target):
                yield from _strings(node.value)
    elif isinstance(node, ast.keyword) and node.arg and VERDICT_NAME.search(node.arg):
        yield from _strings(node.value)
    elif isinstance(node, ast.Dict):
        keys = [k for k in node.keys if isinstance(k, ast.Constant)]
        if any(k.value in UNIQUE for k in keys):  # a table by verdict: every key is one
            yield from keys
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and VERDICT_NAME.search(str(key.value)):
                yield from _strings(value)
    elif isinstance(node, ast.Call):
        yield from _called(node)


def _called(node: ast.Call) -> Iterator[ast.Constant]:
    func = node.func
    getter = isinstance(func, ast.Attribute) and func.attr == "get" and len(node.args) == 2
    if getter and any(_names_verdict(n) for n in (func, node.args[0])):
        yield from _strings(node.args[1])
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name == "Verification" and node.args:
        yield from _strings(node.args[0])


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            found.add(id(body[0].value))
    return found


def spelled_out(source: str, name: str = "<code>") -> list[str]:
    """Each literal of a verdict or failure kind in ``source``, as ``name:line 'value'``."""
    tree = ast.parse(source, name)
    docs = _docstrings(tree)
    hits: dict[int, ast.Constant] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in UNIQUE and id(node) not in docs:
            hits[id(node)] = node
        for constant in _in_verdict_place(node):
            if constant.value in SPELLED:
                hits[id(constant)] = constant
    ordered = sorted(hits.values(), key=lambda c: (c.lineno, c.col_offset))
    return [f"{name}:{c.lineno} {c.value!r}" for c in ordered]


def _product_files() -> Iterator[Path]:
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(NOT_SCANNED):
                yield path


def test_no_verdict_or_failure_kind_is_spelled_outside_its_enum() -> None:
    found = [
        hit
        for path in _product_files()
        for hit in spelled_out(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    ]
    assert found == []


def test_the_check_sees_each_way_a_verdict_is_spelled() -> None:
    code = '''
"""A docstring may say not-runnable and ParityMismatch."""
if v.verdict == "failed": pass
if record["verdict"] in ("verified", "ran"): pass
v.verdict, v.failure = "not-runnable", None
row = {"verdict": "error", "status": "failed"}
done(verdict="verified")
final.get("outcome", "not verified")
Verification("ran", "why")
error = {"type": "KernelMismatch"}
if result.get("status") == "failed": pass
lookup = {"error": 1, "ran": check.get("ran")}
colours = {"failed": "red", "not-runnable": "grey"}
'''
    assert [hit.split(" ", 1)[1] for hit in spelled_out(code)] == [
        "'failed'",
        "'verified'",
        "'ran'",
        "'not-runnable'",
        "'error'",
        "'verified'",
        "'not verified'",
        "'ran'",
        "'KernelMismatch'",
        "'failed'",
        "'not-runnable'",
    ]


def test_the_enums_are_the_strings_checkpoints_hold() -> None:
    """A checkpoint written before the enums existed reads back equal, and a verdict
    written now is the same JSON."""
    import json

    assert json.dumps({"verdict": Verdict.NOT_RUNNABLE}) == '{"verdict": "not-runnable"}'
    assert Verdict.FAILED == "failed" and Verdict("not verified") is Verdict.NOT_VERIFIED
    assert FailureKind.SANDBOX_ERROR == SANDBOX_ERROR  # the sandbox's name for it
    assert failure_kind({"error": {"type": "ParityMismatch"}}) is not None
    assert failure_kind({"error": {"type": "ParityMismatch"}}) == FailureKind.PARITY_MISMATCH
    assert failure_kind(None) is None and failure_kind({"error": None}) is None
