"""Matchers for patterns that a qualified name alone cannot express.

Each is a small function over one kind of ``ast`` node, registered by the name
the catalogue uses (``match = { custom = "..." }``), with a byte regex that any
file it could match must contain (the scanner's prefilter).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .pyimports import dotted_parts, qualified_name

CUDA_DEVICE = re.compile(r"^cuda(:\d+)?$")
INT_DEVICE_NAME = re.compile(r"(^|_)(rank|gpu|gpu_id|device_id|dev_id|gpu_idx|device_idx)$")
LOGGING_METHODS = frozenset({"info", "debug", "warning", "log", "write", "set_postfix"})

# Fallback rules fire on a qualified name under a prefix only when no other rule did.
FALLBACK_PREFIXES: dict[str, str] = {
    "torch_cuda_other": "torch.cuda.",
    "backends_cuda_other": "torch.backends.cuda.",
}


@dataclass
class MatchContext:
    aliases: dict[str, str]
    parents: dict[int, ast.AST]
    modules: set[str] = field(default_factory=set)
    loop_stack: list[bool] = field(default_factory=list)
    _loop_tensors: dict[int, set[str]] = field(default_factory=dict)

    @property
    def in_training_loop(self) -> bool:
        return any(self.loop_stack)

    def qualname(self, node: ast.AST) -> str | None:
        return qualified_name(node, self.aliases)

    def enclosing_training_loop(self, node: ast.AST | None) -> ast.AST | None:
        while node is not None:
            node = self.parents.get(id(node))
            if isinstance(node, ast.For | ast.While | ast.AsyncFor) and calls_backward(node):
                return node
        return None

    def tensors_of_loop(self, loop: ast.AST) -> set[str]:
        key = id(loop)
        if key not in self._loop_tensors:
            self._loop_tensors[key] = _backward_receivers(loop)
        return self._loop_tensors[key]


# The nodes that have a place in the source (typeshed gives ast.AST no lineno): what a
# finding can point at.
Located = ast.expr | ast.stmt | ast.keyword | ast.arg | ast.alias | ast.excepthandler | ast.pattern


def _itself(node: Located, ctx: MatchContext) -> Located:
    return node


@dataclass(frozen=True)
class CustomMatcher:
    """A named matcher, called only on nodes of ``node_types``. Each matcher takes the
    node classes it is registered for (``ast.If | ast.IfExp``), so the registry holds them
    as taking Any: the dispatch on type(node) is what makes the call sound."""

    name: str
    node_types: tuple[type[Located], ...]
    prefilter: str
    match: Callable[[Any, MatchContext], bool]
    anchor: Callable[[Any, MatchContext], Located] = _itself


CUSTOM_MATCHERS: dict[str, CustomMatcher] = {}
_Match = TypeVar("_Match", bound=Callable[..., bool])


def custom(
    name: str,
    *node_types: type[Located],
    prefilter: str,
    anchor: Callable[[Any, MatchContext], Located] = _itself,
) -> Callable[[_Match], _Match]:
    def register(fn: _Match) -> _Match:
        CUSTOM_MATCHERS[name] = CustomMatcher(name, node_types, prefilter, fn, anchor)
        return fn

    return register


def _strings(node: ast.AST) -> list[str]:
    return [
        sub.value
        for sub in ast.walk(node)
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str)
    ]


def _has_cuda_string(node: ast.AST | list) -> bool:
    nodes = node if isinstance(node, list) else [node]
    return any(CUDA_DEVICE.match(s) or s.startswith("cuda:") for n in nodes for s in _strings(n))


def _has_cpu_string(node: ast.AST | list) -> bool:
    nodes = node if isinstance(node, list) else [node]
    return any(s == "cpu" for n in nodes for s in _strings(n))


_GPU_WORDS = re.compile(r"cuda|gpu", re.IGNORECASE)
# Statements a device-choosing ``if`` is made of; anything else (an assert, a call that sets
# up DDP, a loop) means the branch does more than pick a device.
_CHOICE_STATEMENTS = (ast.Assign, ast.AnnAssign, ast.Pass)


def _asks_about_the_gpu(test: ast.AST) -> bool:
    """``torch.cuda.is_available()``, ``args.cuda``, ``use_gpu``: a test about the GPU."""
    for sub in ast.walk(test):
        name = sub.id if isinstance(sub, ast.Name) else getattr(sub, "attr", "")
        if isinstance(name, str) and _GPU_WORDS.search(name):
            return True
    return False


def _only_choices(statements: list[ast.stmt]) -> bool:
    return all(isinstance(s, _CHOICE_STATEMENTS) for s in statements)


@custom("cuda_else_cpu", ast.IfExp, ast.If, prefilter="cuda")
def cuda_else_cpu(node: ast.IfExp | ast.If, ctx: MatchContext) -> bool:
    """One arm picks a CUDA device, the other the CPU: the target silently gets the CPU.

    An ``if`` statement counts only when its test asks about the GPU or both arms do
    nothing but assign: ``if ddp: <set up NCCL on cuda:RANK> else: device = "cpu"`` is not
    a device choice, and keeping one arm of it would delete the other's meaning."""
    arms: tuple[list[ast.expr], list[ast.expr]] | tuple[list[ast.stmt], list[ast.stmt]]
    if isinstance(node, ast.IfExp):
        arms = ([node.body], [node.orelse])
    else:
        arms = (node.body, node.orelse)
        if not (
            _asks_about_the_gpu(node.test)
            or (_only_choices(node.body) and _only_choices(node.orelse))
        ):
            return False
    if not arms[1]:
        return False
    return (_has_cuda_string(arms[0]) and _has_cpu_string(arms[1])) or (
        _has_cpu_string(arms[0]) and _has_cuda_string(arms[1])
    )


CAPABILITY_APIS = frozenset({"torch.cuda.get_device_capability", "torch.cuda.is_bf16_supported"})


_Tested = ast.If | ast.IfExp | ast.While | ast.Assert


def _test_of(node: _Tested, ctx: MatchContext) -> ast.expr:
    return node.test


@custom(
    "capability_branch",
    ast.If,
    ast.IfExp,
    ast.While,
    ast.Assert,
    prefilter="capability|bf16_supported|major|minor",
    anchor=_test_of,
)
def capability_branch(node: _Tested, ctx: MatchContext) -> bool:
    """A branch whose test asks which CUDA GPU generation this is (capability, bf16, .major)."""
    for sub in ast.walk(node.test):
        if ctx.qualname(sub) in CAPABILITY_APIS:
            return True
        if (
            isinstance(sub, ast.Attribute)
            and sub.attr in ("major", "minor")
            and isinstance(sub.value, ast.Call)
            and ctx.qualname(sub.value.func) == "torch.cuda.get_device_properties"
        ):
            return True
    return False


# accelerate's Accelerator, and the mixed-precision modes that need no change on a target
# whose autocast is bf16 (a literal "fp16", or a value only known at run time, does).
ACCELERATORS = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
PRECISIONS_KEPT = frozenset({"no", "bf16", "fp8"})
# The helper TPA007's fix wraps a run-time value in: a wrapped value is ported already.
BF16_MODE = "_bf16_for_fp16"


@custom("accelerate_fp16", ast.Call, prefilter="mixed_precision")
def accelerate_fp16(node: ast.Call, ctx: MatchContext) -> bool:
    """``Accelerator(mixed_precision="fp16")``, or a ``mixed_precision=`` whose value is
    known only at run time (``"fp16" if amp else "no"``, ``args.mixed_precision``)."""
    if ctx.qualname(node.func) not in ACCELERATORS:
        return False
    value = next((k.value for k in node.keywords if k.arg == "mixed_precision"), None)
    if value is None or (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == BF16_MODE
    ):
        return False
    if not isinstance(value, ast.Constant):
        return True
    kept = isinstance(value.value, str) and value.value in PRECISIONS_KEPT
    return not kept and value.value is not None


# The fields of a CUDA device's properties that tell its generation: its compute capability.
CAPABILITY_FIELDS = frozenset({"major", "minor"})


@custom("capability_properties", ast.Call, prefilter="get_device_properties")
def capability_properties(node: ast.Call, ctx: MatchContext) -> bool:
    """``torch.cuda.get_device_properties(d)`` read only for its compute capability:
    ``(...).major`` directly, or ``props = ...`` whose every other mention in its function
    (or module) is ``props.major`` / ``props.minor``."""
    if ctx.qualname(node.func) != "torch.cuda.get_device_properties":
        return False
    parent = ctx.parents.get(id(node))
    if isinstance(parent, ast.Attribute):
        return parent.attr in CAPABILITY_FIELDS
    if not (
        isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
    ):
        return False
    name = parent.targets[0].id
    scope: ast.AST | None = parent
    while scope is not None and not isinstance(
        scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module
    ):
        scope = ctx.parents.get(id(scope))
    if scope is None:
        return False
    mentions = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name]
    reads = [n for n in mentions if _capability_read(n, ctx)]
    return bool(reads) and len(mentions) == len(reads) + 1  # + the assignment itself


def _capability_read(name: ast.Name, ctx: MatchContext) -> bool:
    parent = ctx.parents.get(id(name))
    return isinstance(parent, ast.Attribute) and parent.attr in CAPABILITY_FIELDS


# ``device.startswith("cuda")`` / ``("cuda:")``: a prefix test on a device's name.
CUDA_PREFIX = re.compile(r"^cuda(:\d*)?$")


@custom("device_type_compare", ast.Compare, ast.Call, prefilter="cuda")
def device_type_compare(node: ast.Compare | ast.Call, ctx: MatchContext) -> bool:
    """``x.type == "cuda"``, ``"cuda" in str(d)``, ``d.type in ("cuda", "mps")``,
    ``device.startswith("cuda")``: a device test that is False on the target once the
    device it tests is renamed."""
    if isinstance(node, ast.Call):
        tested = _prefix_tested(node)
        return tested is not None and names_a_device(tested, ctx)
    if not all(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
        return False
    operands = [node.left, *node.comparators]
    if not all(names_a_device(n, ctx) for n in operands if not isinstance(n, ast.Constant)):
        return False
    for op, right in zip(node.ops, node.comparators, strict=True):
        if isinstance(op, ast.In | ast.NotIn) and isinstance(right, ast.Tuple | ast.List | ast.Set):
            operands += right.elts  # `d.type in ("cuda", "mps")`: a membership test
    return any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and CUDA_DEVICE.match(n.value)
        for n in operands
    )


# A function whose name says it returns a device (``get_device``, ``dev``, ``device_of``).
DEVICE_FUNCTION = re.compile(r"(?i)dev")


def names_a_device(node: ast.AST, ctx: MatchContext) -> bool:
    """Whether the tested value can be the program's own device (a variable, an attribute,
    an item, ``torch.device(...)``, each maybe inside ``str()``), which the port renames. A
    value another call returns (``str(_node_get(node, "value"))``: a constant of a
    TorchScript graph recorded on CUDA, which CLIP patches) keeps its "cuda": the port
    changes nothing that would make it say "tpu"."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str":
        node = node.args[0] if len(node.args) == 1 else node
    if isinstance(node, ast.Call):  # torch.device(...), get_device(), dist_util.dev()
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return ctx.qualname(func) == "torch.device" or bool(DEVICE_FUNCTION.search(name))
    return not isinstance(node, ast.Lambda | ast.Await | ast.Yield | ast.YieldFrom)


def tests_another_value(node: ast.Constant, ctx: MatchContext) -> bool:
    """``"cuda"`` as what a value that is not the program's device is tested against
    (``str(read(node, "value")).startswith("cuda")``): neither TPD016 nor TPD002 renames it."""
    parent = ctx.parents.get(id(node))
    tested = _prefix_tested(parent) if isinstance(parent, ast.Call) else None
    if tested is not None and isinstance(parent, ast.Call) and parent.args[0] is node:
        return not names_a_device(tested, ctx)
    if isinstance(parent, ast.Compare):
        operands = [parent.left, *parent.comparators]
        return any(not names_a_device(n, ctx) for n in operands if not isinstance(n, ast.Constant))
    return False


def _prefix_tested(node: ast.Call) -> ast.expr | None:
    """``x.startswith("cuda")`` (or ``"cuda:"``): ``x``, whose prefix is tested; else None."""
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr == "startswith"):
        return None
    if len(node.args) != 1 or node.keywords:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return func.value if CUDA_PREFIX.match(first.value) else None
    return None


def _int_like(node: ast.AST | None) -> bool:
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.Name):
        return bool(INT_DEVICE_NAME.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(INT_DEVICE_NAME.search(node.attr))
    return False


@custom(
    "integer_device_id",
    ast.Call,
    ast.keyword,
    prefilter=r"device_ids|output_device|\.to\(\s*(?:\d|[\w.]*(?:rank|gpu|dev))"
    r"|device\(\s*(?:\d|[\w.]*(?:rank|gpu|dev))|device\s*=\s*[\w.]*(?:rank|gpu|dev_id|device_id)",
)
def integer_device_id(node: ast.keyword | ast.Call, ctx: MatchContext) -> bool:
    """A bare integer where a device is expected: PyTorch reads it as a CUDA ordinal."""
    if isinstance(node, ast.keyword):
        if node.arg in ("device_ids", "output_device"):
            return not (isinstance(node.value, ast.Constant) and node.value.value is None)
        return node.arg == "device" and _int_like(node.value)
    func = node.func
    first = node.args[0] if node.args else None
    if isinstance(func, ast.Attribute) and func.attr == "to" and ctx.qualname(func) is None:
        return _int_like(first)
    return ctx.qualname(func) == "torch.device" and _int_like(first)


@custom("profiler_use_cuda", ast.keyword, prefilter="use_cuda|use_device")
def profiler_use_cuda(node: ast.keyword, ctx: MatchContext) -> bool:
    value = node.value
    if node.arg == "use_cuda":
        return not (isinstance(value, ast.Constant) and value.value in (False, None))
    return (
        node.arg == "use_device"
        and isinstance(value, ast.Constant)
        and isinstance(value.value, str)
        and value.value.startswith("cuda")
    )


_LOOPS = (ast.For, ast.While, ast.AsyncFor)
_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode"})


def runs_every_step(node: ast.AST, ctx: MatchContext) -> bool:
    """Whether ``node`` runs on every training step, so a host sync there costs every step.

    Not when the step loop it sits in is an epoch loop (it runs once per epoch, after the
    inner loop), when an ``if`` on a modulo guards it (``if i % print_freq == 0``: a
    logging interval), or when it is under ``torch.no_grad()`` (evaluation).
    """
    guarded = False
    current = ctx.parents.get(id(node))
    child = node
    while current is not None:
        if isinstance(current, ast.If) and child in current.body and _is_interval(current.test):
            guarded = True
        if isinstance(current, ast.With | ast.AsyncWith) and any(
            _is_no_grad(item.context_expr, ctx) for item in current.items
        ):
            return False
        if isinstance(current, _LOOPS) and calls_backward(current):
            inner = any(
                sub is not current and isinstance(sub, _LOOPS) and calls_backward(sub)
                for sub in ast.walk(current)
            )
            return not (guarded or inner)
        child, current = current, ctx.parents.get(id(current))
    return False


def _is_interval(test: ast.AST) -> bool:
    return any(isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mod) for sub in ast.walk(test))


def _is_no_grad(expr: ast.AST, ctx: MatchContext) -> bool:
    func = expr.func if isinstance(expr, ast.Call) else expr
    return ctx.qualname(func) in _NO_GRAD


def _backward_calls(loop: ast.AST) -> list[tuple[ast.Call, ast.expr]]:
    """The ``x.backward()`` calls in ``loop``, each with its receiver ``x``."""
    return [
        (sub, sub.func.value)
        for sub in ast.walk(loop)
        if isinstance(sub, ast.Call)
        and isinstance(sub.func, ast.Attribute)
        and sub.func.attr == "backward"
    ]


def calls_backward(loop: ast.AST) -> bool:
    """A loop that calls ``.backward()`` is a training loop."""
    return bool(_backward_calls(loop))


def _backward_receivers(loop: ast.AST) -> set[str]:
    """Names that are tensors for sure: ``loss.backward()``, ``scaler.scale(loss).backward()``."""
    names: set[str] = set()
    for _call, receiver in _backward_calls(loop):
        candidates = receiver.args if isinstance(receiver, ast.Call) else [receiver]
        names.update(c.id for c in candidates if isinstance(c, ast.Name))
    return names


def _mentions_tensor(arg: ast.AST, tensors: set[str]) -> bool:
    if isinstance(arg, ast.Name):
        return arg.id in tensors
    if isinstance(arg, ast.JoinedStr):
        return any(
            isinstance(v, ast.FormattedValue) and _mentions_tensor(v.value, tensors)
            for v in arg.values
        )
    return False


@custom("print_tensor_in_loop", ast.Call, prefilter="backward")
def print_tensor_in_loop(node: ast.Call, ctx: MatchContext) -> bool:
    """``print(loss)`` / ``log(f"{loss}")`` of a tensor the loop calls ``.backward()`` on."""
    func = node.func
    is_print = isinstance(func, ast.Name) and func.id == "print" and "print" not in ctx.aliases
    is_log = isinstance(func, ast.Attribute) and func.attr in LOGGING_METHODS
    if not (is_print or is_log) or not ctx.in_training_loop or not runs_every_step(node, ctx):
        return False
    loop = ctx.enclosing_training_loop(node)
    if loop is None:
        return False
    tensors = ctx.tensors_of_loop(loop)
    args = [*node.args, *(k.value for k in node.keywords)]
    return any(_mentions_tensor(a, tensors) for a in args)


def _is_mask_expr(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
        return _is_mask_expr(node.operand) or isinstance(node.operand, ast.Name)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd | ast.BitOr):
        return _is_mask_expr(node.left) or _is_mask_expr(node.right)
    return isinstance(node, ast.Name) and "mask" in node.id.lower()


@custom("boolean_mask_index", ast.Subscript, prefilter=r"\[[^\]\n]*(?:[<>~]|==|!=|mask)")
def boolean_mask_index(node: ast.Subscript, ctx: MatchContext) -> bool:
    """``x[x > 0]`` / ``x[mask]`` read: the result's length depends on the data."""
    uses_torch = any(q == "torch" or q.startswith("torch.") for q in ctx.aliases.values())
    if not isinstance(node.ctx, ast.Load) or not uses_torch:
        return False
    return _is_mask_expr(node.slice)


STEP_BOUNDARIES = frozenset({"sync", "mark_step", "optimizer_step", "MpDeviceLoader"})


def _iter_of(node: ast.For, ctx: MatchContext) -> ast.expr:
    return node.iter


@custom(
    "training_loop_without_step_boundary",
    ast.For,
    prefilter="backward",
    anchor=_iter_of,
)
def training_loop_without_step_boundary(node: ast.For, ctx: MatchContext) -> bool:
    """The innermost ``for`` loop that trains (calls ``.backward()``) and never marks an XLA
    step (``torch_xla.sync()``, ``xm.mark_step()``, ``xm.optimizer_step``, MpDeviceLoader)."""
    if not calls_backward(node):
        return False
    for sub in ast.walk(node):
        if sub is not node and isinstance(sub, ast.For | ast.While) and calls_backward(sub):
            return False  # an inner loop is the step loop
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in STEP_BOUNDARIES:
                return False
    return True


# Calls that move a module to a device; on a PrivateUse1 or XLA device they replace its
# Parameter objects (see optimizer_before_device_move).
DEVICE_MOVES = frozenset({"to", "cuda"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)


def _scope_of(node: ast.AST | None, ctx: MatchContext) -> ast.AST | None:
    while node is not None and not isinstance(node, _SCOPES):
        node = ctx.parents.get(id(node))
    return node


def _optimizer_argument(node: ast.AST, ctx: MatchContext) -> bool:
    """``node`` sits in the arguments of a ``torch.optim`` constructor call (spelled out
    ``torch.optim.Adam`` counts where ``torch`` came from a star import)."""
    current = ctx.parents.get(id(node))
    while current is not None and not isinstance(current, ast.stmt):
        if isinstance(current, ast.Call):
            name = ctx.qualname(current.func) or ".".join(dotted_parts(current.func) or [])
            if name.startswith("torch.optim."):
                return True
        current = ctx.parents.get(id(current))
    return False


def _moves_to_a_device(call: ast.Call, name: str, ctx: MatchContext) -> bool:
    """``name.cuda()``, ``name.to(device)``, ``name.to(device=d)``; not ``.to(torch.half)``."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in DEVICE_MOVES
        and isinstance(func.value, ast.Name)
        and func.value.id == name
    ):
        return False
    if func.attr == "cuda" or any(k.arg == "device" for k in call.keywords):
        return True
    first = call.args[0] if call.args else None
    if isinstance(first, ast.Attribute):
        return not (ctx.qualname(first) or "").startswith("torch.")  # a dtype
    return isinstance(first, ast.Name | ast.Constant | ast.Call)


@custom("optimizer_before_device_move", ast.Call, prefilter=r"\.parameters\(")
def optimizer_before_device_move(node: ast.Call, ctx: MatchContext) -> bool:
    """``opt = Adam(model.parameters())`` and, later in the same function, ``model.to(d)``:
    on CUDA ``.to`` keeps the Parameter objects, on the target it makes new ones and the
    optimizer updates the old copies (pytorch/xla#1623)."""
    func = node.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr == "parameters"
        and isinstance(func.value, ast.Name)
        and _optimizer_argument(node, ctx)
    ):
        return False
    scope = _scope_of(node, ctx)
    return scope is not None and any(
        isinstance(sub, ast.Call)
        and sub.lineno > (node.end_lineno or node.lineno)
        and _moves_to_a_device(sub, func.value.id, ctx)
        and _scope_of(sub, ctx) is scope
        for sub in ast.walk(scope)
    )


DATA_PARALLEL = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)
# What only the wrapper has: code that reads these needs DataParallel itself.
DATA_PARALLEL_ONLY = frozenset(
    {"device_ids", "output_device", "src_device_obj", "dim", "scatter", "gather", "replicate"}
)


def _wrapped(value: ast.AST, ctx: MatchContext) -> bool:
    """``DataParallel(m)``, possibly moved: ``DataParallel(m).cuda()`` / ``.to(d)``."""
    while isinstance(value, ast.Call):
        if ctx.qualname(value.func) in DATA_PARALLEL:
            return True
        if not (isinstance(value.func, ast.Attribute) and value.func.attr in ("cuda", "to")):
            return False
        value = value.func.value
    return False


def _asks_for_the_wrapper(holder: str, tree: ast.AST, ctx: MatchContext) -> bool:
    def named(node: ast.AST) -> bool:
        return ".".join(dotted_parts(node) or ()) == holder

    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in DATA_PARALLEL_ONLY
            and named(node.value)
        ):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
            and named(node.args[0])
        ):
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(ctx.qualname(k) in DATA_PARALLEL for k in kinds):
                return True
    return False


@custom("data_parallel_wrapper", ast.Assign, prefilter="DataParallel")
def data_parallel_wrapper(node: ast.Assign, ctx: MatchContext) -> bool:
    """``model = DataParallel(m)`` where nothing in the file reads what only the wrapper has
    (``model.device_ids``, ``isinstance(model, DataParallel)``): the model can be unwrapped."""
    if len(node.targets) != 1 or not _wrapped(node.value, ctx):
        return False
    parts = dotted_parts(node.targets[0])
    if not parts:
        return False
    root: ast.AST = node
    while id(root) in ctx.parents:
        root = ctx.parents[id(root)]
    return not _asks_for_the_wrapper(".".join(parts), root, ctx)


GRAD_SCALERS = frozenset(
    {
        "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler",
        "torch.amp.GradScaler",
        "torch.amp.grad_scaler.GradScaler",
    }
)


def _scaling_only(use: ast.Name, ctx: MatchContext) -> bool:
    """``s.scale(loss).backward()``, ``s.step(opt)``, ``s.update()``, ``s.unscale_(opt)``:
    what a scaler does for fp16, and nothing else."""
    attribute = ctx.parents.get(id(use))
    call = ctx.parents.get(id(attribute))
    if not (isinstance(attribute, ast.Attribute) and isinstance(call, ast.Call)):
        return False
    if call.func is not attribute or attribute.attr not in ("scale", "step", "update", "unscale_"):
        return False
    if attribute.attr == "scale":  # only as the receiver of .backward()
        backward = ctx.parents.get(id(call))
        return isinstance(backward, ast.Attribute) and backward.attr == "backward"
    return isinstance(ctx.parents.get(id(call)), ast.Expr) or attribute.attr == "step"


@custom("grad_scaler_only_scaling", ast.Assign, prefilter="GradScaler")
def grad_scaler_only_scaling(node: ast.Assign, ctx: MatchContext) -> bool:
    """``scaler = GradScaler()`` whose every use in the file is scale/step/update/unscale_:
    with bf16 nothing needs scaling, and the scaler can go with its calls."""
    if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
        return False
    value = node.value
    if not (isinstance(value, ast.Call) and ctx.qualname(value.func) in GRAD_SCALERS):
        return False
    device = value.args[0] if value.args else None
    device = next((k.value for k in value.keywords if k.arg == "device"), device)
    if device is not None and not (
        isinstance(device, ast.Constant) and str(device.value).startswith("cuda")
    ):
        return False
    name = node.targets[0].id
    root: ast.AST = node
    while id(root) in ctx.parents:
        root = ctx.parents[id(root)]
    uses = [n for n in ast.walk(root) if isinstance(n, ast.Name) and n.id == name]
    return all(
        use is node.targets[0] or (isinstance(use.ctx, ast.Load) and _scaling_only(use, ctx))
        for use in uses
    ) and not any(isinstance(n, ast.arg) and n.arg == name for n in ast.walk(root))


@custom("torch_cuda_other", prefilter="cuda")
def torch_cuda_other(node: ast.AST, ctx: MatchContext) -> bool:  # pragma: no cover - fallback
    return False


@custom("backends_cuda_other", prefilter="cuda")
def backends_cuda_other(node: ast.AST, ctx: MatchContext) -> bool:  # pragma: no cover - fallback
    return False


# A legacy CUDA tensor type and the CPU types of the same dtype; ``torch.Tensor`` is the
# default dtype's type, float32 unless the program changes the default.
_CPU_FORM = {"FloatTensor": ("torch.FloatTensor", "torch.Tensor")}
_LEGACY_CUDA_TYPE = re.compile(r"^torch\.cuda\.([A-Z][A-Za-z0-9]*Tensor)$")


@custom("cuda_tensor_type_alias", ast.Assign, prefilter=r"cuda\.[A-Za-z0-9]*Tensor")
def cuda_tensor_type_alias(node: ast.Assign, ctx: MatchContext) -> bool:
    """``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``: one name that holds
    a CUDA tensor type or its CPU form of the same dtype, chosen by a condition."""
    if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
        return False
    choice = node.value
    if not isinstance(choice, ast.IfExp):
        return False
    for cuda_arm, cpu_arm in ((choice.body, choice.orelse), (choice.orelse, choice.body)):
        m = _LEGACY_CUDA_TYPE.match(ctx.qualname(cuda_arm) or "")
        if m and ctx.qualname(cpu_arm) in _CPU_FORM.get(m.group(1), (f"torch.{m.group(1)}",)):
            return True
    return False


APEX_AMP = "apex.amp."
APEX_INITIALIZE = frozenset({"apex.amp.initialize", "apex.amp.frontend.initialize"})
APEX_SCALE_LOSS = frozenset({"apex.amp.scale_loss", "apex.amp.handle.scale_loss"})


def _plain(node: ast.AST | None) -> str | None:
    parts = dotted_parts(node) if node is not None else None
    return ".".join(parts) if parts else None


@custom("apex_amp_initialize", ast.Assign, prefilter="initialize")
def apex_amp_initialize(node: ast.Assign, ctx: MatchContext) -> bool:
    """``model, optimizer = amp.initialize(model, optimizer, ...)``: what comes back is bound
    to the names that went in, so the call can go (autocast takes over the model's forward)."""
    value = node.value
    if len(node.targets) != 1 or not isinstance(value, ast.Call):
        return False
    if ctx.qualname(value.func) not in APEX_INITIALIZE:
        return False
    given = {k.arg: k.value for k in value.keywords if k.arg in ("models", "optimizers")}
    for name, arg in zip(("models", "optimizers"), value.args, strict=False):
        given.setdefault(name, arg)
    passed = [_plain(given.get("models")), _plain(given.get("optimizers"))]
    passed = [p for p in passed if p is not None]
    target = node.targets[0]
    bound = [_plain(t) for t in target.elts] if isinstance(target, ast.Tuple) else [_plain(target)]
    if "optimizers" in given and len(passed) == 1:
        return False  # a list or an expression went in: its parts are not named
    return bool(passed) and bound == passed


@custom("apex_amp_scale_loss", ast.With, prefilter="scale_loss")
def apex_amp_scale_loss(node: ast.With, ctx: MatchContext) -> bool:
    """``with amp.scale_loss(loss, optimizer) as scaled: <body>``, one item, the loss a plain
    name, the body free of other apex calls and never rebinding ``scaled``: the block is its
    body with ``scaled`` read as ``loss``."""
    if len(node.items) != 1:
        return False
    item = node.items[0]
    call, alias = item.context_expr, item.optional_vars
    if not (isinstance(call, ast.Call) and isinstance(alias, ast.Name)):
        return False
    if ctx.qualname(call.func) not in APEX_SCALE_LOSS or not call.args:
        return False
    if _plain(call.args[0]) is None:
        return False
    for statement in node.body:
        for inner in ast.walk(statement):
            if (
                isinstance(inner, ast.Name)
                and inner.id == alias.id
                and not isinstance(inner.ctx, ast.Load)
            ):
                return False
            if isinstance(inner, ast.Attribute | ast.Name) and (
                ctx.qualname(inner) or ""
            ).startswith(APEX_AMP):
                return False
    return True


CUDA_PROFILER_RANGES = frozenset(
    {
        "torch.cuda.profiler.profile",
        "torch.autograd.profiler.emit_nvtx",
        "torch.autograd.emit_nvtx",
    }
)


@custom("cuda_profiler_block", ast.With, prefilter="profile|emit_nvtx")
def cuda_profiler_block(node: ast.With, ctx: MatchContext) -> bool:
    """``with torch.cuda.profiler.profile(), torch.autograd.profiler.emit_nvtx(): <body>``:
    every item an Nsight range, none bound with ``as``: the block is its body."""
    return all(
        isinstance(item.context_expr, ast.Call)
        and item.optional_vars is None
        and ctx.qualname(item.context_expr.func) in CUDA_PROFILER_RANGES
        for item in node.items
    )


DEVICE_PROPERTIES = frozenset({"torch.cuda.get_device_properties"})


@custom("cuda_total_memory", ast.Attribute, prefilter="total_memory")
def cuda_total_memory(node: ast.Attribute, ctx: MatchContext) -> bool:
    """``torch.cuda.get_device_properties(i).total_memory``, read (not assigned): the
    device's memory size, which ``torch.accelerator.memory.get_memory_info(i)`` answers on
    every target."""
    value = node.value
    return (
        node.attr == "total_memory"
        and isinstance(node.ctx, ast.Load)
        and isinstance(value, ast.Call)
        and len(value.args) <= 1
        and not value.keywords
        and ctx.qualname(value.func) in DEVICE_PROPERTIES
    )


CUDA_GRAPH_CAPTURE = frozenset({"torch.cuda.graph", "torch.cuda.graphs.graph"})


@custom("cuda_graph_capture", ast.With, prefilter="graph")
def cuda_graph_capture(node: ast.With, ctx: MatchContext) -> bool:
    """``with [ctx, ...,] torch.cuda.graph(g):`` (the capture the last item, the graph a
    plain name, no ``as``): the capture, which becomes a function each ``g.replay()`` calls."""
    if node.items[-1].optional_vars is not None:
        return False
    call = node.items[-1].context_expr
    return (
        isinstance(call, ast.Call)
        and ctx.qualname(call.func) in CUDA_GRAPH_CAPTURE
        and bool(call.args)
        and isinstance(call.args[0], ast.Name)
    )


# Where TorchTPU's fused SDPA kernel ignores dropout, or is not used (its glue library's
# conditions: "TorchTPU only supports FLASH_ATTENTION SDPBackend ... when: query rank is at
# least 4, ..."; the kernel's cache key marks dropout_p "Unused"). Each attention call a
# port lands on SDPA, with the position of its dropout argument: (keyword, index).
ATTENTION_DROPOUT = {
    "torch.nn.functional.scaled_dot_product_attention": ("dropout_p", 4),
    "flash_attn_func": ("dropout_p", 3),
    "flash_attn_qkvpacked_func": ("dropout_p", 1),
    "flash_attn_kvpacked_func": ("dropout_p", 2),
    "flash_attn_varlen_func": ("dropout_p", 7),
    "flash_attn_varlen_qkvpacked_func": ("dropout_p", 3),
    "flash_attn_varlen_kvpacked_func": ("dropout_p", 6),
    "memory_efficient_attention": ("p", 4),
}


def _attention_form(node: ast.Call, ctx: MatchContext) -> str | None:
    """The table's key for an SDPA, flash-attn or xformers attention call, else None."""
    name = ctx.qualname(node.func) or ""
    last = name.rsplit(".", 1)[-1]
    if name in ATTENTION_DROPOUT:
        return name
    if name.startswith("flash_attn") and last.startswith("flash_attn_"):
        return last if last in ATTENTION_DROPOUT else None
    if name.startswith("xformers") and last == "memory_efficient_attention":
        return last
    return None


@custom("attention_dropout_on_tpu", ast.Call, prefilter="attention|attn")
def attention_dropout_on_tpu(node: ast.Call, ctx: MatchContext) -> bool:
    """An attention call with a dropout probability that is not a literal 0: TorchTPU's
    fused kernel takes the call and drops no attention weights."""
    form = _attention_form(node, ctx)
    if form is None:
        return False
    keyword, index = ATTENTION_DROPOUT[form]
    value = next((k.value for k in node.keywords if k.arg == keyword), None)
    if value is None and len(node.args) > index:
        value = node.args[index]
    if value is None or any(isinstance(a, ast.Starred) for a in node.args):
        return False
    return not (isinstance(value, ast.Constant) and value.value == 0)


@custom("varlen_attention_on_tpu", ast.Call, prefilter="varlen")
def varlen_attention_on_tpu(node: ast.Call, ctx: MatchContext) -> bool:
    """flash-attn's varlen forms: the port is one SDPA over (heads, tokens, dim), rank 3,
    below the rank 4 TorchTPU's fused kernel needs."""
    form = _attention_form(node, ctx)
    return form is not None and "varlen" in form


# -- a multi-process launch without TorchTPU's launch step (TPN010) ------------------------

SPAWNERS = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})
SUBPROCESS_LAUNCHERS = frozenset(
    {
        "subprocess.run",
        "subprocess.Popen",
        "subprocess.call",
        "subprocess.check_call",
        "subprocess.check_output",
        "os.system",
    }
)
TORCHRUN_COMMAND = re.compile(r"^(?:torchrun|python3?\s+-m\s+torch\.distributed\.(?:run|launch))\b")
LAUNCH_STEP = "set_tpu_launch_env"


def _launches_torchrun(call: ast.Call) -> bool:
    first = call.args[0] if call.args else None
    words = first.elts if isinstance(first, ast.List | ast.Tuple) else [first]
    head = words[0] if words else None
    return (
        isinstance(head, ast.Constant)
        and isinstance(head.value, str)
        and bool(TORCHRUN_COMMAND.match(head.value))
    )


def _module_of(node: ast.AST, ctx: MatchContext) -> ast.AST:
    while (parent := ctx.parents.get(id(node))) is not None:
        node = parent
    return node


def _has_launch_step(module: ast.AST) -> bool:
    return any(
        isinstance(sub, ast.Attribute | ast.Name)
        and (sub.attr if isinstance(sub, ast.Attribute) else sub.id) == LAUNCH_STEP
        for sub in ast.walk(module)
    )


# A rank that sets its own worker variables before ``init_process_group(init_method="env://")``
# (an MPI-style program: mpiexec starts the ranks, the program writes RANK and WORLD_SIZE).
SELF_LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE")
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"


def environ_key(target: ast.AST, ctx: MatchContext) -> str | None:
    """``K`` where ``target`` is ``os.environ["K"]`` (as a store), else None."""
    if not (isinstance(target, ast.Subscript) and ctx.qualname(target.value) == "os.environ"):
        return None
    key = target.slice
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _body(node: ast.AST) -> list[ast.stmt]:
    """The statements of a block node (a function, a loop, a module), else none."""
    body = getattr(node, "body", None)
    return body if isinstance(body, list) else []


def self_launched(node: ast.Call, ctx: MatchContext) -> bool:
    """``init_process_group`` in a body that assigned ``os.environ["RANK"]`` and
    ``os.environ["WORLD_SIZE"]`` in statements before it: the rank is its own launcher."""
    if ctx.qualname(node.func) != INIT_PROCESS_GROUP:
        return False
    statement: ast.AST = node
    while (parent := ctx.parents.get(id(statement))) is not None and not (
        isinstance(statement, ast.stmt) and statement in _body(parent)
    ):
        statement = parent
    if parent is None or not isinstance(statement, ast.stmt):
        return False
    body = _body(parent)
    before = body[: body.index(statement)]
    keys = {
        environ_key(target, ctx)
        for s in before
        if isinstance(s, ast.Assign)
        for target in s.targets
    }
    return all(name in keys for name in SELF_LAUNCH_VARIABLES)


@custom(
    "multiprocess_launch",
    ast.Call,
    prefilter=r"spawn|start_processes|torchrun|torch\.distributed\.(?:run|launch)|WORLD_SIZE",
)
def multiprocess_launch(node: ast.Call, ctx: MatchContext) -> bool:
    """Workers started from this process (``mp.spawn``, ``start_processes``, a ``torchrun``
    subprocess), or a rank that launched itself (it sets ``RANK`` and ``WORLD_SIZE`` before
    ``init_process_group``), in a file that never takes TorchTPU's launch step."""
    name = ctx.qualname(node.func)
    starts = name in SPAWNERS or (name in SUBPROCESS_LAUNCHERS and _launches_torchrun(node))
    starts = starts or self_launched(node, ctx)
    return starts and not _has_launch_step(_module_of(node, ctx))


# Command-line option names made of "cuda" (TPD026): `--cuda`, `--no-cuda`, `-no_cuda`,
# `--use_cuda`, `--disable-cuda`. An option that already has an accelerator-named string is
# the port's own work (a second migration leaves it alone).
CUDA_OPTION = re.compile(r"^-{1,2}(?:(?:no|use|disable|enable)[-_]?)?cuda$")
ACCEL_OPTION = re.compile(r"^-{1,2}(?:(?:no|use|disable|enable)[-_]?)?accel$")


def option_strings(node: ast.Call) -> list[str]:
    """The option strings of an ``add_argument`` call: its leading string arguments."""
    names = []
    for arg in node.args:
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            break
        names.append(arg.value)
    return names


@custom("cuda_named_option", ast.Call, prefilter=r"add_argument\(\s*['\"]-[\w-]*cuda")
def cuda_named_option(node: ast.Call, ctx: MatchContext) -> bool:
    """``parser.add_argument("--no-cuda", ...)``: a user-facing option named after CUDA."""
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr == "add_argument"):
        return False
    names = option_strings(node)
    return any(CUDA_OPTION.match(n) for n in names) and not any(
        ACCEL_OPTION.match(n) for n in names
    )
