"""Where a program that uses the device starts workers with the fork start method (TPN011).

TorchTPU refuses the device in a forked child of a process that had initialized it (its
``_lazy_init`` raises ``[distributed] fork_error`` of ``sandbox/data/torch_tpu.toml``), and
Python's default start method on Linux (3.11, the wheel's Python) is fork. A static
analyser cannot see whether a child will touch the device, so the signal is the file's:
a worker start that forks, in a file that uses a cuda or tpu device anywhere. The catalogue
doc (TPN011) says why that is the choice, and what it misses.

Kept out of ``pycustom`` (which holds the general matchers): this one is a table of the
multiprocessing forms, one job.
"""

from __future__ import annotations

import ast
import re

from .pycustom import MatchContext, custom

# Start forms that use the default start method when the call is made, and where the
# method would be given: (keyword, position) of a context argument, or None.
DEFAULT_CONTEXT: dict[str, tuple[str, int] | None] = {
    "multiprocessing.Process": None,
    "multiprocessing.Pool": None,
    "multiprocessing.pool.Pool": None,
    "torch.multiprocessing.Process": None,
    "torch.multiprocessing.Pool": None,
    "concurrent.futures.ProcessPoolExecutor": ("mp_context", 1),
    "concurrent.futures.process.ProcessPoolExecutor": ("mp_context", 1),
}
GET_CONTEXT = frozenset({"multiprocessing.get_context", "torch.multiprocessing.get_context"})
SET_START_METHOD = frozenset(
    {"multiprocessing.set_start_method", "torch.multiprocessing.set_start_method"}
)
# A child started by these does not inherit an initialized device.
SAFE_METHODS = frozenset({"spawn", "forkserver"})

DEVICE_STRING = re.compile(r"^(cuda|tpu)(:\d+)?$")
DEVICE_MODULES = ("torch.cuda", "torch.tpu", "torch.accelerator")
DEVICE_METHODS = frozenset({"cuda", "tpu"})


def method_argument(call: ast.Call) -> ast.expr | None:
    """The start-method argument of ``get_context``/``set_start_method`` (first, or
    ``method=``)."""
    for keyword in call.keywords:
        if keyword.arg == "method":
            return keyword.value
    return call.args[0] if call.args else None


def forks(method: ast.expr | None) -> bool:
    """``None`` (the default: fork on Linux) or the literal ``"fork"``; a variable is not
    judged."""
    if method is None:
        return True
    return isinstance(method, ast.Constant) and method.value in (None, "fork")


def _module_of(node: ast.AST, ctx: MatchContext) -> ast.AST:
    while (parent := ctx.parents.get(id(node))) is not None:
        node = parent
    return node


def touches_device(tree: ast.AST, ctx: MatchContext) -> bool:
    """A cuda/tpu device use anywhere in the file: ``torch.cuda.*``, ``torch.tpu.*``,
    ``torch.accelerator.*``, ``.cuda()``/``.tpu()``, or a ``"cuda"``/``"tpu:0"`` string."""
    return any(_device_use(node, ctx) for node in ast.walk(tree))


def _device_use(node: ast.AST, ctx: MatchContext) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(DEVICE_STRING.match(node.value))
    if isinstance(node, ast.Attribute):
        return (ctx.qualname(node) or "").startswith(DEVICE_MODULES)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in DEVICE_METHODS
        and not node.args
    )


def sets_start_method(tree: ast.AST, ctx: MatchContext) -> bool:
    """The file chooses the start method itself (a forking choice is its own finding)."""
    return any(
        isinstance(node, ast.Call) and ctx.qualname(node.func) in SET_START_METHOD
        for node in ast.walk(tree)
    )


def _has_argument(call: ast.Call, keyword: str, position: int) -> bool:
    if any(k.arg == keyword for k in call.keywords):
        return True
    return len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args)


def forking_start(node: ast.Call, ctx: MatchContext) -> bool:
    """The call starts (or chooses) forked workers, whatever the file does elsewhere."""
    name = ctx.qualname(node.func)
    if name in GET_CONTEXT or name in SET_START_METHOD:
        return forks(method_argument(node))
    if name not in DEFAULT_CONTEXT:
        return False
    context = DEFAULT_CONTEXT[name]
    if context is not None and _has_argument(node, *context):
        return False  # the context given is judged where it is made (get_context)
    return not sets_start_method(_module_of(node, ctx), ctx)


@custom(
    "fork_start_method",
    ast.Call,
    prefilter=r"Process|Pool|get_context|set_start_method",
)
def fork_start_method(node: ast.Call, ctx: MatchContext) -> bool:
    """A fork start in a file that uses the device (see the module docstring)."""
    return forking_start(node, ctx) and touches_device(_module_of(node, ctx), ctx)
