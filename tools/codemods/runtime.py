"""Codemods for synchronization, memory statistics and RNG (TPT, TPM, TPR rules)."""

from __future__ import annotations

import libcst as cst

from ...sandbox import torchtpu_facts
from . import torchtpu
from .base import (
    ALL_KINDS,
    REMOVE_STATEMENT,
    VENDOR,
    FixContext,
    Fixed,
    NotApplicable,
    body_of,
    code_of,
    dotted,
    fixer,
    follow_up,
    guarded,
    sync_call,
)

# every target but xla, whose lazy device has its own calls (registered by name) or none
PORTABLE = ALL_KINDS
NOT_XLA = frozenset({"xla"})

MEMORY_RENAMES = {
    "memory_cached": "memory_reserved",
    "max_memory_cached": "max_memory_reserved",
    "reset_max_memory_allocated": "reset_peak_memory_stats",
    "reset_max_memory_cached": "reset_peak_memory_stats",
    "mem_get_info": "get_memory_info",
}

SEED_RENAMES = {
    "manual_seed": "torch.manual_seed",
    "manual_seed_all": "torch.manual_seed",
    "seed": "torch.seed",
    "seed_all": "torch.seed",
    "initial_seed": "torch.initial_seed",
}


def _last_name(node: cst.Call) -> str:
    if not isinstance(node, cst.Call):  # `f = torch.cuda.max_memory_allocated`, a reference
        raise NotApplicable("a reference to the function, not a call: rewrite where it is called")
    name = dotted(node.func)
    if name is None:
        raise NotApplicable("callee is not a plain name")
    return name.rsplit(".", 1)[-1]


@fixer("TPT001", PORTABLE)  # xla: its own, below
def synchronize(node: cst.Call, ctx: FixContext) -> Fixed:
    return ctx.expr(sync_call(ctx.target))


@fixer("TPT001", {"xla"})
def synchronize_xla(node: cst.Call, ctx: FixContext) -> Fixed:
    return ctx.expr("torch_xla.sync(wait=True)")


@fixer("TPM001", PORTABLE, but=NOT_XLA)
@fixer("TPM004", PORTABLE, but=NOT_XLA)
def memory_stats(node: cst.Call, ctx: FixContext) -> Fixed:
    name = MEMORY_RENAMES.get(_last_name(node), _last_name(node))
    call = node.with_changes(func=ctx.expr(f"torch.accelerator.memory.{name}"))
    return _guard(call, ctx, MEMORY_ON_CPU.get(name, "None"))


# What the memory statistics are on a machine with no accelerator (the accelerator target).
MEMORY_ON_CPU = {"memory_stats": "{}", "get_memory_info": "(0, 0)"} | {
    name: "0"
    for name in (
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
    )
}


def _guard(call: cst.BaseExpression, ctx: FixContext, fallback: str) -> cst.BaseExpression:
    code = code_of(call)
    return ctx.expr(guarded(ctx.target, code, fallback))


@fixer("TPM006", PORTABLE, but=NOT_XLA)
def total_memory(node: cst.Attribute, ctx: FixContext) -> Fixed:
    """``get_device_properties(i).total_memory`` -> the total of ``get_memory_info(i)``."""
    call = node.value
    if not isinstance(call, cst.Call):
        raise NotApplicable("the device properties are not read from a call here")
    info = call.with_changes(func=ctx.expr("torch.accelerator.memory.get_memory_info"))
    total = cst.Subscript(info, [cst.SubscriptElement(cst.Index(cst.Integer("1")))])
    return _guard(total, ctx, "0")


# Where a reading is only reported (logged, printed, kept in a dict of metrics), a missing
# number is NaN: it formats with any float format (``f"{v:.0f}"`` gives "nan", where None
# raises) and says "no reading". A number the program decides with (a comparison, a max())
# would change its control flow instead: refused.
_REPORTED_IN = (cst.DictElement, cst.Arg, cst.FormattedStringExpression, cst.Element)
_NUMERIC_CALLS = frozenset({"max", "min", "sum", "abs", "int", "float", "round", "range"})
NO_READING = 'float("nan")'


def _only_reported(node: cst.CSTNode, ctx: FixContext) -> bool:
    parent = ctx.parent(node)
    if isinstance(parent, cst.Arg):
        call = ctx.parent(parent)
        return not (isinstance(call, cst.Call) and dotted(call.func) in _NUMERIC_CALLS)
    if isinstance(parent, cst.DictElement):
        return parent.value is node
    return isinstance(parent, _REPORTED_IN)


@fixer("TPK018")
def device_telemetry(node: cst.Call, ctx: FixContext) -> Fixed:
    """NVML's utilisation, temperature, power and clock have no in-process counterpart on
    the target: where the program only reports them, the reading is NaN."""
    if not _only_reported(ctx.original, ctx):
        raise NotApplicable(
            f"{_last_name(node)}() is computed with here, not only reported: the target has "
            "no such reading (report NaN, or read the target's own monitor)"
        )
    return cst.parse_expression(_in_quotes_of(ctx.original, ctx, NO_READING))


def _in_quotes_of(node: cst.CSTNode, ctx: FixContext, code: str) -> str:
    """``code`` with its string quotes swapped where it lands inside an f-string that uses
    the same quote (before Python 3.12 that does not parse)."""
    for parent in ctx.ancestors(node):
        if isinstance(parent, cst.FormattedString):
            if '"' in parent.start:
                return code.replace('"', "'")
            return code
    return code


@fixer("TPM002", PORTABLE)
def empty_cache(node: cst.Call, ctx: FixContext) -> Fixed:
    return _guard(
        node.with_changes(func=ctx.expr("torch.accelerator.memory.empty_cache")), ctx, "None"
    )


@fixer("TPM002", {"xla"})
def empty_cache_xla(node: cst.Call, ctx: FixContext) -> Fixed:
    return REMOVE_STATEMENT


@fixer("TPR001")
def manual_seed(node: cst.Call, ctx: FixContext) -> Fixed:
    name = _last_name(node)
    if name not in SEED_RENAMES:
        raise NotApplicable(f"no portable equivalent for torch.cuda.{name}")
    return node.with_changes(func=ctx.expr(SEED_RENAMES[name]))


# Not on accelerator: the RNG state there depends on the device type (the CPU's generator
# when there is no accelerator), which the TOML leaves to a human.
# (each vendor profile's rng_module: its device_module, else torch.get_device_module(device))
# TorchTPU: a process sees one device, tpu:0, so its default generator is the first. Where the
# wheel makes torch.tpu.<name> internal on some torch it allows (get_rng_state from 2.13), the
# port reads that generator instead: default_generators is public (experimental) on every
# allowed torch, and the replacement the wheel's message names (torch.accelerator.random) is
# not in every allowed torch (2.13 lacks it). See docs/TPR002.md.
TPU_GENERATOR = "torch.tpu.default_generators[0]"
TPU_GENERATOR_METHOD = {"get_rng_state": "get_state", "set_rng_state": "set_state"}


def _tpu_rng_callee(name: str) -> str:
    if torchtpu.keeps(name):
        return f"torch.tpu.{name}"
    if not torchtpu.keeps("default_generators"):
        raise NotApplicable(f"torch.tpu.{name} is internal and default_generators is not public")
    return f"{TPU_GENERATOR}.{TPU_GENERATOR_METHOD[name]}"


@fixer("TPR002", VENDOR)
def rng_state(node: cst.Call, ctx: FixContext) -> Fixed:
    name = _last_name(node).removesuffix("_all")
    if not ctx.profile.one_device_per_process:
        return node.with_changes(func=ctx.expr(f"{ctx.profile.rng_module}.{name}"))
    # one device per process: a device argument names this process's device or one it
    # cannot use (TorchTPU refuses any other index), so it goes
    keep = 1 if name == "set_rng_state" else 0
    if any(a.star for a in node.args[:keep]):
        raise NotApplicable("the state is passed with * or **")
    args = [a for a in node.args if not (a.keyword and a.keyword.value == "device")][:keep]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(func=ctx.expr(_tpu_rng_callee(name)), args=args)


@fixer("TPT004")
def nvtx(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """``nvtx.range(name)`` -> ``torch.profiler.record_function(name)``; push/pop/mark dropped."""
    if not isinstance(node, cst.Call):
        raise NotApplicable("NVTX reference that is not a call")
    name = _last_name(node)
    if name == "range":
        return node.with_changes(func=ctx.expr("torch.profiler.record_function"))
    if name in ("range_push", "range_pop", "mark"):
        return REMOVE_STATEMENT
    raise NotApplicable(f"no equivalent for torch.cuda.nvtx.{name}")


# Where each CUDA stream API lives on a target that has streams (TPT003). The device-agnostic
# ones take the device positionally (``torch.accelerator.current_stream(device=None, /)``);
# TorchNeuron supports them ("torch.neuron and torch.accelerator reference", AWS Neuron
# docs: stream and event functions, and "code written against torch.accelerator needs no
# change"). xla has no stream API: TPT003 stays manual there.
DEVICE_AGNOSTIC_STREAMS = {
    "Stream": "torch.Stream",
    "current_stream": "torch.accelerator.current_stream",
    "set_stream": "torch.accelerator.set_stream",
}
CUDA_STREAM_FUNCTIONS = ("Stream", "stream", "current_stream", "default_stream", "set_stream")


def _tpu_streams() -> dict[str, str]:
    """TorchTPU's streams are placeholders with torch.cuda's signatures (one ordered queue:
    renaming keeps the code's ordering while overlapping nothing). A name the wheel makes
    internal on some torch it allows (current_stream, set_stream) moves to the replacement
    the wheel names; the rest stay torch.tpu's (sandbox/data/torch_tpu.toml decides)."""
    internal = torchtpu_facts.internal_for(torchtpu.newest_allowed_torch())
    return {
        name: f"torch.tpu.{name}" if torchtpu.keeps(name) else internal[name].prefer
        for name in CUDA_STREAM_FUNCTIONS
        if torchtpu.keeps(name) or name in internal
    }


STREAM_APIS: dict[str, dict[str, str]] = {
    "tpu": _tpu_streams(),
    "neuron": DEVICE_AGNOSTIC_STREAMS,
    "accelerator": DEVICE_AGNOSTIC_STREAMS,
}
# torch.accelerator's stream functions take the device positionally only.
POSITIONAL_DEVICE = frozenset({"torch.accelerator.current_stream"})

# Names that are types: referenced without a call (isinstance, annotations), they stay manual.
STREAM_TYPES = frozenset({"Stream", "ExternalStream", "StreamContext"})


@fixer("TPT003", set(STREAM_APIS))
def cuda_stream(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """CUDA streams -> the target's streams (see STREAM_APIS).

    On the accelerator target ``with torch.cuda.stream(s):`` becomes ``with s:`` (a
    ``torch.Stream`` is a context manager); TorchTPU keeps ``torch.tpu.stream(s)``.
    """
    apis = STREAM_APIS[ctx.target]
    agnostic = apis is DEVICE_AGNOSTIC_STREAMS
    name = (dotted(node.func) if isinstance(node, cst.Call) else dotted(node)) or ""
    name = name.rsplit(".", 1)[-1]
    if not isinstance(node, cst.Call):
        # A function passed on (``partial(torch.cuda.stream, stream=s)``) is renamed; a type,
        # or a device-agnostic function (no ``stream(s)``; a CPU guard), is left to a human.
        to = apis.get(name, "")
        if agnostic or name in STREAM_TYPES or not to or to.startswith("torch.accelerator."):
            raise NotApplicable(f"torch.cuda.{name} used without a call; check by hand")
        return ctx.expr(to)
    if agnostic and name == "stream" and len(node.args) == 1:
        return node.args[0].value
    if name not in apis:
        raise NotApplicable(f"no {ctx.target} equivalent of torch.cuda.{name}")
    call = node.with_changes(func=ctx.expr(apis[name]))
    if apis[name] in POSITIONAL_DEVICE:
        call = call.with_changes(args=[_positional(a) for a in node.args])
    if not ctx.profile.may_lack_device:
        return call
    if name == "current_stream" and (line := _event_call_line(ctx)) is not None:
        ctx.state.setdefault(GUARDED_LINES, set()).add(id(line))
        return call
    fallback = {"current_stream": "torch.Stream()"}.get(name)
    return _guard(call, ctx, fallback or "None") if fallback or name == "set_stream" else call


# A CPU torch.Stream (the guard's fallback) has no events: on a CPU-only machine its
# wait_stream / wait_event / record_event raise ("cpu backend doesn't support events",
# torch 2.13). A statement that is only such a call is guarded whole instead.
EVENT_METHODS = frozenset({"wait_stream", "wait_event", "record_event"})
GUARDED_LINES = "stream_lines_to_guard"


def _event_call_line(ctx: FixContext) -> cst.SimpleStatementLine | None:
    """``torch.cuda.current_stream().wait_stream(s)`` alone on its line: that line."""
    method = ctx.parent(ctx.original)
    call = ctx.parent(method)
    expr = ctx.parent(call)
    line = ctx.parent(expr)
    if (
        isinstance(method, cst.Attribute)
        and method.attr.value in EVENT_METHODS
        and isinstance(call, cst.Call)
        and isinstance(expr, cst.Expr)
        and isinstance(line, cst.SimpleStatementLine)
        and len(line.body) == 1
    ):
        return line
    return None


@follow_up("TPT003")
def guard_event_line(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    if id(original) not in ctx.state.get(GUARDED_LINES, ()) or not isinstance(
        node, cst.SimpleStatementLine
    ):
        return None
    return cst.If(
        test=cst.parse_expression("torch.accelerator.is_available()"),
        body=cst.IndentedBlock([node.with_changes(leading_lines=())]),
        leading_lines=node.leading_lines,
    )


@fixer("TPT009", {"tpu", "xla"})
def record_stream(node: cst.Call, ctx: FixContext) -> Fixed:
    """On one ordered queue (TorchTPU's placeholder streams, XLA's graph) no other stream
    can still use a tensor's memory: ``x.record_stream(s)`` has nothing to keep."""
    statement = ctx.parent(ctx.parent(ctx.original))
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        raise NotApplicable("record_stream() inside a larger statement: remove it by hand")
    return REMOVE_STATEMENT


def _positional(arg: cst.Arg) -> cst.Arg:
    return arg.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)


LOADER_WRAPPERS = frozenset({"enumerate", "tqdm", "tqdm.tqdm", "iter"})
APPEND_SYNC = "append_sync"


@fixer("TPH005", {"xla"})
def xla_step_boundary(node: cst.BaseExpression, ctx: FixContext) -> Fixed:
    """Feed the training loop through MpDeviceLoader (which marks each step and prefetches
    to the device); when the loop does not iterate over a loader, sync at the end of each
    step instead."""
    wrapped = _wrap_loader(node, ctx)
    if wrapped is not None:
        return wrapped
    loop = ctx.parent(ctx.original)
    ctx.state.setdefault(APPEND_SYNC, set()).add(id(loop))
    ctx.need("torch_xla")
    return node


def _wrap_loader(node: cst.BaseExpression, ctx: FixContext) -> cst.BaseExpression | None:
    """``loader`` / ``enumerate(tqdm(loader))``: the loader itself wrapped, or None."""
    if isinstance(node, cst.Name | cst.Attribute):
        code = code_of(node)
        return ctx.expr(
            f"torch_xla.distributed.parallel_loader.MpDeviceLoader({code}, torch_xla.device())"
        )
    if isinstance(node, cst.Call) and dotted(node.func) in LOADER_WRAPPERS and node.args:
        inner = _wrap_loader(node.args[0].value, ctx)
        if inner is not None:
            return node.with_changes(args=[node.args[0].with_changes(value=inner), *node.args[1:]])
    return None


@follow_up("TPH005")
def sync_at_end_of_step(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    pending = ctx.state.get(APPEND_SYNC)
    if not pending or id(original) not in pending or not isinstance(node, cst.For):
        return None
    pending.discard(id(original))
    sync = cst.parse_statement("torch_xla.sync()\n")
    return node.with_changes(body=node.body.with_changes(body=[*node.body.body, sync]))


PROFILER_STATEMENTS = frozenset({"start", "stop", "init"})


@fixer("TPT006")
def cuda_profiler_range(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """``torch.cuda.profiler.start()`` / ``stop()``: they only tell Nsight where to record
    (``cudaProfilerStart``), so on the target the statements go; the program computes the
    same. ``with profile():`` is TPT007's."""
    name = _last_name(node) if isinstance(node, cst.Call) else None
    if name in PROFILER_STATEMENTS:
        return REMOVE_STATEMENT
    if name in ("profile", "emit_nvtx"):
        raise NotApplicable(
            f"{name}() outside a plain `with {name}():` block (TPT007 ports that one)"
        )
    raise NotApplicable(f"torch.cuda.profiler.{name} has no counterpart off CUDA")


@fixer("TPT007")
def cuda_profiler_block(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """``with torch.cuda.profiler.profile(): <body>`` -> ``<body>``."""
    if not isinstance(node, cst.With):
        raise NotApplicable("not a with-block of an Nsight range")
    return body_of(node)
