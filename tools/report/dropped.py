"""User options a migration dropped: what the port no longer does that the original was told to.

A codemod may remove a keyword a user chose (``torch.compile(model, mode="max-autotune")``
loses its ``mode`` on every target) or a setting whose value comes from the program's options
(``torch.backends.cudnn.allow_tf32 = args.tf32`` goes on neuron: ``--tf32`` then does nothing
there). The port runs, so nothing fails; the report must say so, or a reviewer learns it from
a benchmark. Read from the edits themselves (their code before and after), so every codemod's
removals are covered without each one having to remember to declare them:

- a keyword of a call that the edit keeps (the same callee name after) but without it;
- a removed statement that sets a module attribute or calls a setting with a value that is not
  a constant (``args.tf32``, ``not cfg.fast``): a constant is the codemod's own decision, the
  rule's doc says what it means; a variable is the user's choice, now without effect
  (unless a line the port wrote in the same file uses it: ``cudnn.allow_tf32 = args.tf32``
  goes on tpu while ``matmul.allow_tf32 = args.tf32`` became TorchTPU's one precision).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

from torchport.sandbox import astparse

from ..catalogue import load_catalogue


@dataclass(frozen=True)
class Dropped:
    """One user option the port lost: ``option`` of ``of``, at ``path:line`` (the original)."""

    rule: str
    path: str
    line: int
    option: str
    of: str
    why: str

    def text(self) -> str:
        return f"dropped: {self.option} of {self.of}, {self.why}"

    def to_json(self) -> dict[str, str | int]:
        return {
            "rule": self.rule,
            "path": self.path,
            "line": self.line,
            "option": self.option,
            "of": self.of,
            "why": self.why,
            "text": self.text(),
        }


def _parse(code: str) -> ast.AST | None:
    text = textwrap.dedent(code).strip()
    if not text:
        return None
    for mode in ("exec", "eval"):
        try:
            return astparse.parse(text, mode=mode)
        except SyntaxError:
            continue
    return None


def _callee(call: ast.Call) -> str:
    return ast.unparse(call.func)


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _keywords(tree: ast.AST) -> dict[tuple[str, str], tuple[str, str]]:
    """(callee's last name, keyword) -> (callee as written, ``keyword=value``)."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg is not None:
                    key = (_last(_callee(node)), kw.arg)
                    found.setdefault(key, (_callee(node), f"{kw.arg}={ast.unparse(kw.value)}"))
    return found


def _constant(value: ast.AST) -> bool:
    """A literal (``True``, ``"high"``, ``-1``, ``(1, 2)``): nothing the user chose at run time."""
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _settings(tree: ast.AST) -> Iterable[tuple[str, str]]:
    """(what was set, the non-constant value) of each setting statement in ``tree``."""
    for node in getattr(tree, "body", ()):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Attribute) and not _constant(node.value):
                yield ast.unparse(target), ast.unparse(node.value)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                if not _constant(arg):
                    yield _callee(call), ast.unparse(arg)


def dropped_options(edits: Iterable, target: str | None = None) -> list[Dropped]:
    """The user options the edits dropped, in edit order (``Edit`` of ``tools.codemods``).
    ``target``: say why in the words of the rule's fix for it (on tpu, ``set_device(args.gpu)``
    goes because "a TorchTPU process has one device"), not only what CUDA lacks."""
    rules = load_catalogue().by_code
    edits = list(edits)
    written: dict[str, list[str]] = {}  # path -> the code the edits wrote there
    for edit in edits:
        written.setdefault(edit.path, []).append(edit.after)
    found: list[Dropped] = []
    for edit in edits:
        before = _parse(edit.before)
        if before is None:
            continue
        rule = rules.get(edit.rule)
        why = rule.message if rule is not None else edit.reason
        fix = rule.fixes.get(target) if rule is not None and target else None
        if fix is not None and fix.hint:
            why = f"{why}; on {target}: {fix.hint}"
        if not edit.after.strip():
            for setting, value in _settings(before):
                if any(value in code for code in written[edit.path]):
                    continue  # the value still takes effect through a line the port wrote
                option = f"the effect of {value}"
                found.append(Dropped(edit.rule, edit.path, edit.line, option, setting, why))
            continue
        after = _parse(edit.after)
        if after is None:
            continue
        kept = _keywords(after)
        calls = [n for n in ast.walk(after) if isinstance(n, ast.Call)]
        callees = {_last(_callee(n)) for n in calls}
        # a value the port passes positionally instead (``current_stream(self.device)``)
        passed = {(_last(_callee(n)), ast.unparse(a)) for n in calls for a in n.args}
        for (name, keyword), (callee, option) in _keywords(before).items():
            value = option.split("=", 1)[1]
            if name in callees and (name, keyword) not in kept and (name, value) not in passed:
                found.append(Dropped(edit.rule, edit.path, edit.line, option, callee, why))
    return found
