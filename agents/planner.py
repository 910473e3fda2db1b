"""The planner: how to run a repository cheaply, and what its migration needs.

The scan ranks entry points by evidence; the planner turns the best one into a
command the verifier can run without a human: a launch line from a README or a
script when it names the file (it carries the arguments the authors use), else
``python FILE``. A command is rejected when its argparse parser has required
arguments the command does not give, or when it still holds placeholders
(``$LR``, ``<checkpoint>``): guessing values for those would verify a different
program. Placeholders for input data (``/path/to/imagenet``, ``--data $DATA``) are
kept: the sandbox stands in synthetic data for them. ``--entry`` overrides all of it.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from torchport.sandbox import astparse
from torchport.sandbox.commandline import fillable
from torchport.sandbox.safepath import read_inside
from torchport.tools.findings import EntryPoint, ScanResult, work_counts

if TYPE_CHECKING:
    from .repair_records import PlanItem
    from .state import PlanRecord

_PLACEHOLDER = re.compile(r"[$<>{}]|\.\.\.|/path/to|PATH_TO", re.IGNORECASE)
_LAUNCHERS = ("python", "python3", "torchrun")
# Evidence (from tools.entrypoints) that running the file does something.
_RUNS_SOMETHING = ("__main__ guard", "package __main__")


@dataclass
class Plan:
    """What the rest of the graph needs from the planner; plain data, checkpointable."""

    entry: list[str] | None
    entry_reason: str
    not_runnable: str | None = None
    rejected: list[dict[str, str]] = field(default_factory=list)
    auto: int = 0
    llm: list[PlanItem] = field(default_factory=list)
    manual: list[PlanItem] = field(default_factory=list)

    def to_json(self) -> PlanRecord:
        # PlanRecord is this dataclass's fields by name, as the checkpoint holds them.
        return cast("PlanRecord", asdict(self))


def work_of(plan: Mapping[str, Any]) -> dict[str, int]:
    """A plan's (``Plan.to_json``) automatic, LLM, human and advisory counts, by the one
    definition scan, the summary and chat use (``tools.findings.work_kind``)."""
    items = [("llm", i.get("category")) for i in plan.get("llm") or []]
    items += [("manual", i.get("category")) for i in plan.get("manual") or []]
    return {**work_counts(items), "auto": int(plan.get("auto") or 0)}


def required_arguments(source: str) -> list[str]:
    """Options and positionals an argparse parser in ``source`` insists on."""
    try:
        tree = astparse.parse(source)
    except SyntaxError:
        return []
    required: list[str] = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            continue
        name = node.args[0].value
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if "default" in keywords:
            continue
        if name.startswith("-"):
            flag = keywords.get("required")
            if isinstance(flag, ast.Constant) and flag.value is True:
                names = [a.value for a in node.args if isinstance(a, ast.Constant)]
                required.append("|".join(str(n) for n in names))
        else:
            nargs = keywords.get("nargs")
            if not (isinstance(nargs, ast.Constant) and nargs.value in ("?", "*")):
                required.append(name)
    return required


def does_something_at_top_level(source: str) -> bool:
    """Whether running the file does more than define names: a top-level loop, call or
    ``with``/``if``/``try`` block (a script without a ``__main__`` guard)."""
    try:
        tree = astparse.parse(source)
    except SyntaxError:
        return False
    defining = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in tree.body:
        if isinstance(node, (*defining, ast.Assign, ast.AnnAssign, ast.Pass)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        return True
    return False


def _missing(argv: list[str], required: list[str]) -> list[str]:
    given = [a.split("=", 1)[0] for a in argv]
    positionals = [a for a in argv if not a.startswith("-")]
    missing = []
    wanted_positionals = [r for r in required if not r.startswith("-")]
    for option in (r for r in required if r.startswith("-")):
        if not any(name in given for name in option.split("|")):
            missing.append(option.split("|")[-1])
    if len(positionals) < len(wanted_positionals):
        missing += wanted_positionals[len(positionals) :]
    return missing


def _program_args(argv: list[str], path: str) -> list[str]:
    """The arguments after the script or module name in a launch command."""
    module = path.removesuffix("/__main__.py").removesuffix(".py").replace("/", ".")
    for i, word in enumerate(argv):
        if word.endswith(path) or word == module:
            return argv[i + 1 :]
    return []


def _unfilled_placeholder(argv: list[str]) -> bool:
    """A placeholder the sandbox does not stand in for (it makes input data for
    ``/path/to/imagenet``, ``--data $DATA``: see ``sandbox.commandline``)."""
    for i, word in enumerate(argv):
        option, eq, value = word.partition("=")
        if not eq:
            option, value = (argv[i - 1] if i and argv[i - 1].startswith("-") else ""), word
        if _PLACEHOLDER.search(value) and not fillable(option or None, value):
            return True
    return False


def command_for(root: Path, entry: EntryPoint) -> tuple[list[str] | None, str]:
    """A runnable argv for one ranked entry point, or None and why not."""
    try:
        source = read_inside(root, entry.path).decode("utf-8", "replace")
    except OSError as exc:
        return None, f"cannot read {entry.path}: {exc}"
    launched = any(r in _RUNS_SOMETHING or r.startswith("launched in ") for r in entry.reasons)
    if not launched and not does_something_at_top_level(source):
        return None, "no __main__ guard, launch line or top-level code: it only defines things"
    candidates: list[tuple[str, str]] = []
    if entry.command.split()[:1] and entry.command.split()[0] in _LAUNCHERS:
        candidates.append((entry.command, "its launch line"))
    plain = (
        f"python -m {entry.path.removesuffix('/__main__.py').replace('/', '.')}"
        if entry.path.endswith("__main__.py")
        else f"python {entry.path}"
    )
    if plain not in (c for c, _ in candidates):
        candidates.append((plain, "run directly"))
    required = required_arguments(source)
    reasons = []
    for command, how in candidates:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            reasons.append(f"`{command}` does not parse: {exc}")
            continue
        if _unfilled_placeholder(argv):
            reasons.append(f"`{command}` holds a placeholder")
            continue
        missing = _missing(_program_args(argv, entry.path), required)
        if missing:
            reasons.append(f"`{command}` lacks required arguments {', '.join(missing)}")
            continue
        return argv, f"{entry.path} ({how}; {', '.join(entry.reasons)})"
    return None, "; ".join(reasons)


def _notebook(root: Path, scan: ScanResult) -> str | None:
    """The notebook to run when no script is runnable: the one with the most findings."""
    counts: dict[str, int] = {}
    for f in scan.findings:
        if f.path.endswith(".ipynb"):
            counts[f.path] = counts.get(f.path, 0) + 1
    if not counts:
        return None
    return min(counts, key=lambda path: (-counts[path], path.count("/"), path))


def make_plan(
    root: Path,
    scan: ScanResult,
    target: str,
    entry: str | None = None,
    entry_from: str = "given with --entry",
) -> Plan:
    """Choose the entry command and sort the findings into auto, LLM and human work.
    ``entry_from``: where a given ``entry`` came from, as the plan says it (the flag, a
    variable, the repository's file: ``config_record.entry_reason``)."""
    auto = 0
    llm: list[PlanItem] = []
    manual: list[PlanItem] = []
    for f in scan.findings:
        kind = f.fix[target]["kind"] if target in f.fix else "manual"
        item: PlanItem = {
            "rule": f.rule,
            "path": f.path,
            "line": f.line,
            "end_line": f.end_line,
            "message": f.message,
            "category": f.category,
        }
        if kind == "auto":
            auto += 1
        elif kind == "llm":
            llm.append({**item, "hint": f.fix[target]["hint"]})
        elif kind == "manual":
            manual.append({**item, "hint": f.fix[target]["hint"]})
    plan = Plan(entry=None, entry_reason="", auto=auto, llm=llm, manual=manual)
    if entry:
        try:
            plan.entry, plan.entry_reason = shlex.split(entry), entry_from
        except ValueError as exc:
            plan.not_runnable = f"the entry ({entry_from}) does not parse: {exc}"
        return plan
    for candidate in scan.entrypoints:
        argv, why = command_for(root, candidate)
        if argv is not None:
            plan.entry, plan.entry_reason = argv, why
            return plan
        plan.rejected.append({"path": candidate.path, "why": why})
    notebook = _notebook(root, scan)
    if notebook is not None:
        plan.entry = ["python", notebook]
        plan.entry_reason = f"{notebook} (a notebook: its code cells run in order, magics skipped)"
        return plan
    if not scan.entrypoints:
        plan.not_runnable = (
            "no entry point found (no __main__ guard, training script or launch line); "
            'name one with --entry "python FILE ARGS"'
        )
    else:
        plan.not_runnable = (
            "no entry point can run without a human: "
            + "; ".join(f"{r['path']}: {r['why']}" for r in plan.rejected)
            + '; name one with --entry "python FILE ARGS"'
        )
    return plan
