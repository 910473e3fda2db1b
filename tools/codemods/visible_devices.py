"""``CUDA_VISIBLE_DEVICES`` becomes the target's device-selection variables (TPD024).

TorchNeuron reads ``NEURON_RT_VISIBLE_CORES`` (``"0"``, ``"0,1"``, ``"0-3"``): the same list,
by NeuronCore, so the name changes and the value stays. libtpu reads ``TPU_VISIBLE_CHIPS``
only together with the topology of the process: ``TPU_CHIPS_PER_PROCESS_BOUNDS`` (the chips
this process owns) and ``TPU_PROCESS_BOUNDS`` (the processes that share the slice); a renamed
variable alone is ignored. One chip for one process (``CUDA_VISIBLE_DEVICES=0``, the usual
form) is unambiguous and becomes the three settings. A list of several GPUs is not: under
torchrun or ``mp.spawn`` every rank inherits it and picks its own GPU, while on a TPU host
each process must own its chips (the launcher sets that per rank), so a list, or a value
computed at run time, is left for a human with the reason. Reading the variable reads
``TPU_VISIBLE_CHIPS``.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import libcst as cst

from .base import FixContext, NotApplicable, code_of, follow_up
from .base import fixer as register

CUDA = "CUDA_VISIBLE_DEVICES"
RENAMED = {"tpu": "TPU_VISIBLE_CHIPS", "neuron": "NEURON_RT_VISIBLE_CORES"}
ONE_PROCESS_ONE_CHIP = "1,1,1"  # TPU_CHIPS_PER_PROCESS_BOUNDS and TPU_PROCESS_BOUNDS
ONE_CHIP = re.compile(r"^\d+$")
LEFT_FOR_TPU = (
    "not one constant chip: a list is shared by every rank a launcher starts, and libtpu "
    "needs each process's own chips (TPU_VISIBLE_CHIPS with TPU_CHIPS_PER_PROCESS_BOUNDS and "
    "TPU_PROCESS_BOUNDS, or the launcher's defaults): set them by hand"
)
TPU_SETTINGS = "tpu_visible_chips"  # state: statement id -> the bounds to set above it


def tpu_settings(chips: str) -> list[tuple[str, str]] | None:
    """The (name, value) pairs that give this process the one chip ``chips`` names; None
    for anything but one chip (see the module's docstring)."""
    if not ONE_CHIP.match(chips):
        return None
    return [
        ("TPU_CHIPS_PER_PROCESS_BOUNDS", ONE_PROCESS_ONE_CHIP),
        ("TPU_PROCESS_BOUNDS", ONE_PROCESS_ONE_CHIP),
        ("TPU_VISIBLE_CHIPS", chips),
    ]


# -- Python -------------------------------------------------------------------------------


def _string_value(node: cst.CSTNode | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _renamed(node: cst.SimpleString, name: str) -> cst.SimpleString:
    quote = node.quote
    prefix = node.prefix
    return node.with_changes(value=f"{prefix}{quote}{name}{quote}")


def _set_value(node: cst.SimpleString, ctx: FixContext) -> tuple[cst.CSTNode, str | None]:
    """(the statement that sets the variable, the constant it sets or None), where the
    string is the key of ``os.environ[KEY] = value`` or ``os.environ.setdefault(KEY, v)``;
    for any other use (a read: ``get``, ``[KEY]``, ``in``), the string itself and None."""
    holder = ctx.parent(ctx.original)
    if isinstance(holder, cst.Index):
        subscript = ctx.parent(ctx.parent(holder))  # Index < SubscriptElement < Subscript
        target = ctx.parent(subscript)
        if isinstance(target, cst.AssignTarget):
            return ctx.parent(target), _string_value(ctx.parent(target).value)
    if isinstance(holder, cst.Arg):
        call = ctx.parent(holder)
        method = (
            call.func.attr.value
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
            else ""
        )
        if method == "setdefault" and len(call.args) == 2 and call.args[0] is holder:
            statement = ctx.parent(call)
            if isinstance(statement, cst.Expr):
                return statement, _string_value(call.args[1].value)
    return ctx.original, None  # a read (get, [KEY], in): not a setting


@register("TPD024", {"neuron"})
def visible_cores(node: cst.CSTNode, ctx: FixContext):
    if not isinstance(node, cst.SimpleString):
        raise NotApplicable("not a plain string literal")
    return _renamed(node, RENAMED["neuron"])


@register("TPD024", {"tpu"})
def visible_chips(node: cst.CSTNode, ctx: FixContext):
    if not isinstance(node, cst.SimpleString):
        raise NotApplicable("not a plain string literal")
    statement, chips = _set_value(node, ctx)
    if statement is ctx.original:  # reading which chips are visible
        return _renamed(node, RENAMED["tpu"])
    settings = tpu_settings(chips) if chips is not None else None
    if settings is None:
        raise NotApplicable(LEFT_FOR_TPU)
    ctx.state.setdefault(TPU_SETTINGS, {})[id(statement)] = settings[:-1]
    return _renamed(node, RENAMED["tpu"])


@follow_up("TPD024")
def bounds_before_chips(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext):
    """The topology settings go right above the statement that now sets TPU_VISIBLE_CHIPS,
    written the same way (an assignment or a setdefault)."""
    pending = ctx.state.get(TPU_SETTINGS)
    if not pending or not isinstance(original, cst.SimpleStatementLine):
        return None
    index = next((i for i, s in enumerate(original.body) if id(s) in pending), None)
    if index is None:
        return None
    statement = node.body[index]
    lines = [
        cst.parse_statement(_setting(statement, name, value) + "\n")
        for name, value in pending.pop(id(original.body[index]))
    ]
    first = lines[0].with_changes(leading_lines=node.leading_lines)
    return cst.FlattenSentinel([first, *lines[1:], node.with_changes(leading_lines=[])])


def _setting(statement: cst.CSTNode, name: str, value: str) -> str:
    """``statement`` (which sets TPU_VISIBLE_CHIPS) rewritten to set ``name`` to ``value``,
    quoted as the original's value was."""
    if isinstance(statement, cst.Assign):
        target = code_of(statement.targets[0].target).replace(RENAMED["tpu"], name, 1)
        q = statement.value.quote
        return f"{target} = {q}{value}{q}"
    call = statement.value  # os.environ.setdefault(KEY, value)
    key = code_of(call.args[0].value).replace(RENAMED["tpu"], name, 1)
    q = call.args[1].value.quote
    return f"{code_of(call.func)}({key}, {q}{value}{q})"


# -- shell, Make, Dockerfile, YAML, JSON lines ---------------------------------------------

_SHELL = re.compile(rf"\b{CUDA}=(?P<q>[\"']?)(?P<chips>[0-9,]*)(?P=q)(?=\s|$|;)")
_YAML = re.compile(
    rf"^(?P<indent>\s*(?:-\s+)?)(?P<kq>[\"']?){CUDA}(?P=kq)\s*:\s*(?P<q>[\"']?)(?P<chips>[0-9,]+)(?P=q)\s*$"
)
_YAML_ITEM = re.compile(rf"^(?P<indent>\s*-\s+)(?P<q>[\"']?){CUDA}=(?P<chips>[0-9,]+)(?P=q)\s*$")
_JSON = re.compile(rf'^(?P<indent>\s*)"{CUDA}"\s*:\s*"(?P<chips>[0-9,]+)"(?P<comma>\s*,?)\s*$')


def visible_devices_line(line: str, target: str, path: str) -> str | None:
    """The line for ``target`` (several lines where one setting became three), or None."""
    body, newline = (line[:-1], "\n") if line.endswith("\n") else (line, "")
    name = PurePosixPath(path).name.lower()
    if target == "neuron":
        new = re.sub(rf"\b{CUDA}\b", RENAMED["neuron"], body)
        return None if new == body else new + newline
    if target != "tpu":
        return None
    if name.endswith((".yaml", ".yml")):
        return _structured(body, newline, _YAML_ITEM, "{indent}{q}{name}={value}{q}") or (
            _structured(body, newline, _YAML, '{indent}{kq}{name}{kq}: "{value}"')
        )
    if name.endswith(".json"):
        return _structured(body, newline, _JSON, '{indent}"{name}": "{value}",', last_comma=True)
    match = _SHELL.search(body)
    settings = tpu_settings(match["chips"]) if match else None
    if settings is None:
        return None
    words = " ".join(f"{n}={v}" for n, v in settings)
    return body[: match.start()] + words + body[match.end() :] + newline


def _structured(body, newline, pattern, form, last_comma=False) -> str | None:
    match = pattern.match(body)
    settings = tpu_settings(match["chips"]) if match else None
    if settings is None:
        return None
    fields = match.groupdict(default="")
    lines = [form.format(**{**fields, "name": n, "value": v}) for n, v in settings]
    if last_comma:  # JSON: the last pair keeps the original's comma (or its absence)
        lines[-1] = lines[-1].removesuffix(",") + fields["comma"].strip()
    if pattern is _YAML and "-" in fields["indent"]:  # `- KEY: v` opens one mapping
        under = fields["indent"].replace("-", " ")
        lines[1:] = [under + line[len(fields["indent"]) :] for line in lines[1:]]
    return "\n".join(lines) + newline
