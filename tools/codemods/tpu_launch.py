"""TorchTPU's launch step before the workers start (TPN010, tpu only).

Every rank of a TorchTPU job must agree on variables only the parent can decide
(``TORCH_TPU_SLICEBUILDER_ADDRESSES``, one address per rank, and ``TORCH_TPU_TOPOLOGY``); the
torch-tpu wheel owns that step and leaves spawning to any launcher
(``torch_tpu/_internal/distributed/distributed.py``). It has two forms, both read from the
facts (``[distributed] launch_function`` / ``launch_module``):

- Python: ``torch.tpu.distributed.set_tpu_launch_env()`` once, before ``mp.spawn`` /
  ``start_processes`` / a ``torchrun`` subprocess. On one host it makes one address per rank,
  by default one per attached chip, so the port passes the launch's own count
  (``nproc_per_node=nprocs``) where the launch states it.
- A rank that launches itself (an MPI-style program: ``mpiexec`` starts the ranks and each
  writes ``os.environ["RANK"]`` and ``["WORLD_SIZE"]`` before
  ``init_process_group(init_method="env://")``): the wheel's worker with an integer
  ``WORLD_SIZE`` also requires ``LOCAL_RANK`` (``[distributed] worker_requires``), which such a
  launcher does not set, so the port sets it where unset (one host: the rank). A job of one
  rank is its own parent and takes the step itself (``nproc_per_node=1``); several ranks must
  agree on the step's addresses, which only their launcher's parent can decide, so they keep
  TorchTPU's own error naming what is missing unless the launch line takes the step first.
- Shell: ``python -m torch.tpu.distributed`` prints the assignments, quoted
  (``TORCH_TPU_TOPOLOGY="2,2,1"``), and exports nothing: ``export $(...)`` would keep the
  quotes in the values and a bare ``eval`` would not export them to torchrun, so the port runs
  ``eval "$(python -m torch.tpu.distributed | sed 's/^/export /')" && `` before the command,
  on its line (a Make recipe line is its own shell, so ``$`` is ``$$`` there).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import libcst as cst

from ..targets import profile
from . import torchtpu
from .base import FixContext, Fixed, NotApplicable, code_of, dotted, fixer, follow_up

PENDING = "tpu_launch_step"  # state: statement id -> the launch step to put above it


def shell_step(make: bool = False) -> str:
    """The shell form of the launch step, ending in ``&& `` (see the module's docstring)."""
    dollar = "$$" if make else "$"
    return f"eval \"{dollar}(python -m {torchtpu.launch_module()} | sed 's/^/export /')\" && "


# -- Python --------------------------------------------------------------------------------

NPROCS = {"spawn": ("nprocs", 2), "start_processes": ("nprocs", 2)}  # keyword, position
NPROC_FLAG = re.compile(r"^--nproc[-_]per[-_]node(?:=(\d+))?$")


def _count(node: cst.Call) -> cst.BaseExpression | None:
    """How many workers the launch starts, where it says so plainly, else None."""
    name = (dotted(node.func) or "").rsplit(".", 1)[-1]
    if name in NPROCS:
        keyword, position = NPROCS[name]
        for i, arg in enumerate(node.args):
            if arg.star:
                return None
            if (arg.keyword and arg.keyword.value == keyword) or (
                not arg.keyword and i == position
            ):
                value = arg.value
                return value if isinstance(value, cst.Name | cst.Attribute | cst.Integer) else None
        return cst.Integer("1") if name == "spawn" else None  # spawn's default
    words = node.args[0].value if node.args else None
    elements = words.elements if isinstance(words, cst.List | cst.Tuple) else []
    strings = [e.value.evaluated_value for e in elements if isinstance(e.value, cst.SimpleString)]
    for flag, following in zip(strings, [*strings[1:], None], strict=True):
        found = NPROC_FLAG.match(flag) if isinstance(flag, str) else None
        count = found and (found.group(1) or following)
        if isinstance(count, str) and count.isdigit():
            return cst.Integer(count)
    return None


@fixer("TPN010", {"tpu"})
def launch_step(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """Mark the statement that launches: the follow-up puts the launch step above it."""
    if not isinstance(node, cst.Call):
        raise NotApplicable("not a call that launches workers")
    statement: cst.CSTNode | None = ctx.original
    while statement is not None and not isinstance(statement, cst.SimpleStatementLine):
        if isinstance(statement, cst.BaseCompoundStatement | cst.Lambda):
            raise NotApplicable(
                f"the launch is inside a larger statement: call {torchtpu.launch_function()}() "
                "before it by hand"
            )
        statement = ctx.parent(statement)
    if statement is None:
        raise NotApplicable("the launch is not inside a statement")
    if (dotted(node.func) or "").endswith("init_process_group"):
        steps = _self_launch_steps(statement, ctx)
    else:
        count = _count(node)
        argument = f"nproc_per_node={code_of(count)}" if count is not None else ""
        step = ctx.expr(f"{torchtpu.launch_function()}({argument})")
        steps = [cst.SimpleStatementLine(body=[cst.Expr(step)])]
    ctx.state.setdefault(PENDING, {})[id(statement)] = steps
    return node


def _environ_of(statement: cst.SimpleStatementLine, ctx: FixContext) -> str:
    """How the statements before ``statement`` spell ``os.environ`` where they write
    ``WORLD_SIZE`` (the matcher found that write)."""
    block = ctx.parent(statement)
    body = list(getattr(block, "body", ()))
    lines = body[: body.index(statement)] if statement in body else []
    for line in (x for x in lines if isinstance(x, cst.SimpleStatementLine)):
        for small in line.body:
            for target in getattr(small, "targets", ()):
                t = target.target
                index = t.slice[0].slice if isinstance(t, cst.Subscript) else None
                key = index.value if isinstance(index, cst.Index) else None  # not a[i:j]
                if isinstance(key, cst.SimpleString) and key.evaluated_value == "WORLD_SIZE":
                    return code_of(t.value)
    raise NotApplicable(
        "the rank's own WORLD_SIZE is not written in this block: set LOCAL_RANK and call "
        f"{torchtpu.launch_function()}() before init_process_group by hand"
    )


def _self_launch_steps(
    statement: cst.SimpleStatementLine, ctx: FixContext
) -> list[cst.BaseStatement]:
    """Above the self-launched rank's ``init_process_group`` (see the module's docstring)."""
    environ = _environ_of(statement, ctx)
    launch = code_of(ctx.expr(f"{torchtpu.launch_function()}(nproc_per_node=1)"))
    code = (
        f'{environ}.setdefault("LOCAL_RANK", {environ}["RANK"])\n'
        f'if int({environ}["WORLD_SIZE"]) == 1:\n'
        f"    {launch}\n"
    )
    return list(cst.parse_module(code).body)


@follow_up("TPN010")
def step_above_the_launch(
    original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext
) -> Fixed | None:
    pending = ctx.state.get(PENDING)
    if not pending or id(original) not in pending or not isinstance(node, cst.SimpleStatementLine):
        return None
    first, *rest = pending.pop(id(original))
    return cst.FlattenSentinel(
        [first.with_changes(leading_lines=node.leading_lines), *rest,
         node.with_changes(leading_lines=[])]
    )  # fmt: skip


# -- shell, Make, YAML lines ---------------------------------------------------------------

_COMMAND = (
    r"(?:[A-Za-z_]\w*=\S*\s+)*(?:exec\s+|nohup\s+)?"
    r"(?:torchrun|python3?\s+-m\s+torch\.distributed\.(?:run|launch))\b"
)
_SHELL = re.compile(rf"^(?P<head>\s*)(?={_COMMAND})")
_MAKE = re.compile(rf"^(?P<head>\t[@+\-]*\s*)(?={_COMMAND})")
# `run: torchrun ...`, `- torchrun ...`, or a line of a block scalar: a plain shell line
_YAML = re.compile(rf"^(?P<head>\s*(?:-\s+)?(?:[\w.-]+:\s+)?)(?={_COMMAND})")


def launch_step_line(line: str, target: str, path: str) -> str | None:
    """The line with the launch step before its torchrun command, or None where the command
    does not start the line's shell command (a quoted YAML value, an exec-form list, ...)."""
    module = profile(target).launch_module
    if module is None or module in line:
        return None
    name = PurePosixPath(path).name.lower()
    if name.endswith((".yaml", ".yml")):
        pattern, make = _YAML, False
    elif name in ("makefile", "gnumakefile") or name.endswith(".mk"):
        pattern, make = _MAKE, True
    else:
        pattern, make = _SHELL, False
    found = pattern.match(line)
    if found is None:
        return None
    head = found["head"]
    return head + shell_step(make) + line[len(head) :]


LEFT = (
    "the command does not start its line (a quoted value, a list, a continued command): "
    f"put the launch step, {shell_step().strip().removesuffix('&&').strip()}, before it by hand"
)
