"""triton_on_torch: a torch implementation of the subset of Triton that this port's kernels use.

Written by torchport. The port's target device has no Triton compiler, so the kernels'
own, unchanged Python bodies run here instead: ``import triton_on_torch as triton`` (or
``install_as_triton()``, which makes ``import triton`` find this module) and every
``@triton.jit`` kernel launches as ``kernel[grid](*args)`` did, on the device its tensors
are on. It is slower than a compiled kernel but correct, and its numerics follow torch,
not a GPU: ``tl.dot`` is a full float32 matmul (never TF32), ``fma`` rounds twice, and a
float scalar argument does not promote a float16 block to float32 (torch's rule for
scalars).

A tensor argument becomes a ``Pointer`` over the tensor's whole storage, so strided views
and in-place stores work as on a GPU: a store lands in the caller's tensor. A block of
values is a ``Block``: a torch tensor with Triton's operators and member functions. A load
gathers from the storage and a store scatters into it, both masked, and an unmasked access
outside the storage raises ``KernelIndexError`` naming the kernel line and program id. A
Triton construct this runtime lacks raises ``UnsupportedConstruct`` naming it and the
kernel line that uses it; the tables below say what there is.

Two ways to run a launch. The vector mode runs the body once for all programs: a
``tl.program_id`` is a Block of every program's id (int64), and each Block computed from
one carries a leading program dimension, so a load gathers, and a store scatters, for
every program at once. Blocks that are the same for every program (``tl.arange``, a load
of weights) have no such dimension; combined with one that has, the missing dims are
inserted after the program dim, so per-program shapes broadcast as in Triton, and axes
(reductions, reshapes, ``x[:, None]``) count past it. On a CPU the programs run in
groups, in the loop's order, sized so that a group's blocks stay in the caches. An error
names the first program, in the loop's order, that fails at the failing line.

The loop mode runs the body once per program id, in order. It takes over where the body
needs a Python value that differs between programs: ``if``, ``while``, ``range()`` or
``int()`` of such a block (when every program has the same value, the vector mode uses
it). The stores the vector attempt made are undone first (each recorded what it
overwrote), and the kernel is remembered, per constexpr values, as one that needs the
loop. On a CPU the loop also takes over, after the first group, where one program's
blocks alone are as big as a group: running programs together gains nothing there.
``MODE = "loop"`` (or TRITON_ON_TORCH_MODE=loop in the environment) always loops;
``launch_modes`` says how each kernel last ran.

Where the two differ, a GPU gives no answer either: programs that store to the same
element race (here the last program in the loop's order wins within one store whose
pointer is the same for every program, an unspecified one otherwise, and the later
statement across statements), and a program that loads what another stores may see it
in one mode and not in the other. And a per-program scalar (a program id, a row's sum)
is, as in Triton, a tensor of its dtype in the vector mode, but torch's weak 0-d scalar
in the loop mode.
"""

from __future__ import annotations

import builtins
import inspect
import math
import os
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

# What this runtime provides. torchport's static check (tools/kernel_runtime/support.py)
# reads these tables from this file's text, so they stay literals; the module checks at
# import that its namespaces hold exactly these names.
TRITON_NAMES = "jit autotune heuristics Config cdiv next_power_of_2 language __version__"
NAMESPACES = {  # each namespace's names, space-separated
    "triton.language": (
        "program_id num_programs arange load store where zeros full zeros_like sum max min"
        " argmax argmin cumsum cumprod dot fma clamp cdiv cast multiple_of max_contiguous"
        " max_constancy static_range range constexpr broadcast_to broadcast reshape view"
        " ravel trans permute expand_dims join split debug_barrier static_assert"
        " device_assert static_print device_print tensor dtype pointer_type math extra"
    ),
    "triton.language.math": "fma",
    "triton.language.extra": "libdevice cuda",
    "triton.language.extra.libdevice": "fma",
    "triton.language.extra.cuda": "libdevice",
    "triton.language.extra.cuda.libdevice": "fma",
}
# Elementwise math, Triton's name -> torch's function; each is in every namespace of MATH_IN.
UNARY_MATH = {
    "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log1p": "log1p",
    "expm1": "expm1", "sqrt": "sqrt", "sqrt_rn": "sqrt", "rsqrt": "rsqrt", "abs": "abs",
    "sin": "sin", "cos": "cos", "tan": "tan", "sigmoid": "sigmoid", "erf": "erf",
    "tanh": "tanh", "floor": "floor", "ceil": "ceil", "isnan": "isnan", "isinf": "isinf",
    "fast_expf": "exp", "fast_logf": "log",
}  # fmt: skip
BINARY_MATH = {
    "maximum": "maximum", "minimum": "minimum", "pow": "pow", "atan2": "atan2",
    "div_rn": "div", "fdiv": "div", "fast_dividef": "div",
}  # fmt: skip
MATH_IN = (
    "triton.language",
    "triton.language.math",
    "triton.language.extra.libdevice",
    "triton.language.extra.cuda.libdevice",
)
# Triton's dtypes (in triton.language) -> torch's.
DTYPES = {
    "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
    "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "int1": "bool",
}  # fmt: skip
# The Triton a version check sees. The language followed is Triton 3's (tested against
# 3.8's interpreter); "3.0.0" steers code that checks versions away from later additions
# (tensor descriptors and such) that this runtime lacks.
__version__ = "3.0.0"
# "vector": run a launch's programs together where the kernel allows; "loop": one by one.
MODE = os.environ.get("TRITON_ON_TORCH_MODE", "vector")
# Each kernel's name -> how its latest launch ran: "vector", "loop", or "loop: <why>".
launch_modes: dict[str, str] = {}
# On a CPU the vector mode runs the programs in groups whose blocks have about this many
# elements: the blocks of all programs at once would not stay in the caches, and below
# torch's intra-op grain (32K) an op runs on one thread (a parallel op's threads wait for
# each other, long on a shared CPU).
CPU_GROUP_ELEMENTS = 1 << 14
FIRST_CPU_GROUP = 16  # programs; the first group's blocks size the later ones
# Keyword arguments of a launch that tune a GPU and mean nothing here.
LAUNCH_OPTIONS = frozenset(
    ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "stream", "debug")
)


class UnsupportedConstruct(NotImplementedError):
    """A Triton construct this runtime does not implement, with where the kernel uses it."""


class KernelIndexError(IndexError):
    """A kernel's unmasked load or store outside the storage of its pointer's tensor."""


class _NeedsLoop(Exception):
    """The vector mode cannot go on: the body needs a value that differs between programs."""


def _display(name: str) -> str:
    """``triton.language.atomic_add`` as kernels spell it: ``tl.atomic_add``."""
    return "tl" + name[len("triton.language") :] if name.startswith("triton.language") else name


def _where() -> str:
    """The kernel function and file:line that called into this module."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == _THIS_FILE:
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return "<unknown>"
    code = frame.f_code
    return f"{code.co_name} at {code.co_filename}:{frame.f_lineno}"


_THIS_FILE = _where.__code__.co_filename


def _unsupported(construct: str) -> UnsupportedConstruct:
    return UnsupportedConstruct(f"{construct} is not supported by triton_on_torch ({_where()})")


class _Namespace(types.ModuleType):
    """A Triton namespace (``triton.language``, ``tl.math``, ...); a name it lacks raises
    UnsupportedConstruct where the kernel uses it (dunder probes stay AttributeErrors)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _unsupported(f"{_display(self.__name__)}.{name}")


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise _unsupported(f"triton.{name}")


_SPACES = {name: _Namespace(name) for name in NAMESPACES}
language = _SPACES["triton.language"]
for _name, _space in _SPACES.items():
    _parent, _, _leaf = _name.rpartition(".")
    if _parent in _SPACES:
        setattr(_SPACES[_parent], _leaf, _space)


def _on_blocks(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn``, written over torch tensors, as a kernel calls it: Blocks in and out. When an
    argument carries the program dim, every tensor argument (and pointer) gets it, so
    ``fn`` sees the program dim first in all of them (``_PROGRAM.lead`` is 1), and so do
    its results."""

    def call(*args: Any, **kwargs: Any) -> Any:
        values, lead = _aligned((*args, *kwargs.values()), every=True)
        args, kwargs = (
            tuple(values[: len(args)]),
            dict(zip(kwargs, values[len(args) :], strict=True)),
        )
        if not lead:
            return _wrap(fn(*args, **kwargs))
        previous, _PROGRAM.lead = _PROGRAM.lead, 1
        try:
            return _wrap(fn(*args, **kwargs), lead=True)
        finally:
            _PROGRAM.lead = previous

    call.__name__ = call.__qualname__ = name
    call.__doc__ = fn.__doc__
    return call


def _tl(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Put ``fn`` into triton.language under its name (``sum_`` is ``tl.sum``)."""
    name = fn.__name__.rstrip("_")
    setattr(language, name, _on_blocks(fn, name))
    return fn


# The program being run: its ids, the grid and the device of the launch's tensors. In the
# vector mode: every program's ids (Blocks), whether the tl function being called works on
# tensors with the program dim first (``lead``), and what each store overwrote.
class _Program(threading.local):
    pid: tuple[int, int, int] = (0, 0, 0)
    grid: tuple[int, int, int] = (1, 1, 1)
    device: torch.device = torch.device("cpu")
    vector: bool = False
    lead: int = 0
    ids: tuple[Block, ...] = ()
    first: int = 0  # the flat index (axis 0 fastest) of the first program in ``ids``
    widest: int = 0  # the most elements a load or store has touched
    journal: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None


_PROGRAM = _Program()


def _tensor(value: Any) -> torch.Tensor:
    """A Python scalar as a 0-d tensor on the launch's device (torch keeps it weak in
    promotion, as Triton does a constant); a tensor as it is."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, Block):
        return value.data
    return torch.as_tensor(value, device=_PROGRAM.device)


class _Int(int):
    """An integer argument, program id or constexpr: a Python int that also has Triton's
    ``.to`` and ``.value``."""

    @property
    def dtype(self) -> torch.dtype:
        return torch.int32 if -(2**31) <= self < 2**31 else torch.int64

    @property
    def value(self) -> int:
        return int(self)

    def to(self, dtype: torch.dtype, bitcast: bool = False) -> Block:
        return Block(torch.tensor(int(self), dtype=dtype, device=_PROGRAM.device))


class _Float(float):
    """A float argument or constexpr: a Python float with Triton's ``.to`` and ``.value``."""

    dtype = torch.float32

    @property
    def value(self) -> float:
        return float(self)

    def to(self, dtype: torch.dtype, bitcast: bool = False) -> Block:
        return Block(torch.tensor(float(self), dtype=dtype, device=_PROGRAM.device))


class Block:
    """A block of values, Triton's ``tl.tensor``: a torch tensor with Triton's operators
    (``//`` and ``%`` truncate, as in C) and member functions (``x.to``, ``x.sum(axis)``,
    ...); a member it lacks raises UnsupportedConstruct. Every ``tl`` function unwraps its
    arguments and wraps its result, so the implementations below see only torch tensors.
    In the vector mode a block whose values differ by program has them along a leading
    program dim (``lead``); its ``shape`` is still one program's."""

    __slots__ = ("data", "lead")
    __hash__ = None  # type: ignore[assignment]  # == is elementwise

    def __init__(self, data: torch.Tensor, lead: bool = False) -> None:
        self.data = data
        self.lead = lead

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape[int(self.lead) :])

    def numel(self) -> int:
        return math.prod(self.shape)

    def to(self, dtype: torch.dtype, bitcast: bool = False, **rounding: Any) -> Block:
        return Block(self.data.view(dtype) if bitcast else self.data.to(dtype), self.lead)

    def __getitem__(self, index: Any) -> Block:
        return Block(self.data[_past_lead(_unwrap(index), self.lead)], self.lead)

    def _one(self, what: str) -> torch.Tensor:
        """The block's one value, as Python's if/while/range()/int() need it; in the
        vector mode, the value every program has."""
        return _uniform(self.data, what) if self.lead else self.data

    def __bool__(self) -> bool:
        return bool(self._one("bool()"))

    def __index__(self) -> int:
        return int(self._one("int()"))

    def __float__(self) -> float:
        return float(self._one("float()"))

    def __repr__(self) -> str:
        return f"Block({self.data!r})"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _unsupported(f"tensor.{name}")


def _unwrap(value: Any) -> Any:
    if isinstance(value, Block):
        return value.data
    if isinstance(value, tuple):
        return tuple(_unwrap(item) for item in value)
    return value


def _wrap(value: Any, lead: bool = False) -> Any:
    if isinstance(value, torch.Tensor):
        return Block(value, lead and value.dim() > 0)
    if isinstance(value, tuple):
        return tuple(_wrap(item, lead) for item in value)
    return value


# ---- the vector mode's program dim ----------------------------------------------------


def _uniform(data: torch.Tensor, what: str) -> torch.Tensor:
    """The one value (0-d) that every program has in ``data`` (program dim first); where
    programs differ, or a program has more than one, the loop mode must run the body."""
    each = data.reshape(data.shape[0], -1) if data.dim() else data.reshape(1, 1)
    if each.shape[1] != 1 or (each.shape[0] > 1 and not bool((each == each[0]).all())):
        raise _NeedsLoop(f"{what} of a value that differs by program ({_where()})")
    return each[0, 0]


def _python(value: Any) -> int:
    """A shape's or range's number as a Python int; a tensor of one per program (in the
    vector mode) must hold the same for every program."""
    if isinstance(value, torch.Tensor) and _PROGRAM.vector and value.dim() > 0:
        value = _uniform(value, "a shape or range")
    return int(value)


def _past_lead(index: Any, lead: bool) -> Any:
    """An index of one program's block (``x[:, None]``) as it applies with the program dim."""
    if not lead:
        return index
    return (slice(None), *(index if isinstance(index, tuple) else (index,)))


def _leads(value: Any) -> bool:
    return isinstance(value, Block | Pointer) and value.lead


def _rank(value: Any) -> int:
    """The per-program rank of a block or pointer block (0 for anything else)."""
    data = value.data if isinstance(value, Block) else getattr(value, "offset", None)
    return data.dim() - int(value.lead) if isinstance(data, torch.Tensor) else 0


def _padded(data: torch.Tensor, lead: bool, rank: int, every: bool) -> torch.Tensor:
    """``data`` with dims of 1 inserted after its program dim up to per-program ``rank``;
    with ``every``, a tensor without the program dim gets a program dim of 1 too."""
    if lead:
        return data[(slice(None),) + (None,) * (rank + 1 - data.dim())]
    return data[(None,) * (rank + 1 - data.dim())] if every else data


def _aligned(values: tuple[Any, ...], every: bool) -> tuple[list[Any], bool]:
    """``values`` as torch works on them (Blocks as tensors) and whether one of them has
    the program dim. If one has, each that has is given the others' per-program rank, so
    torch's right-aligned broadcasting of the rest keeps Triton's per-program shapes (a
    program's [] with [BLOCK] is [P, BLOCK]); ``every``: the rest get a program dim too."""
    if not _PROGRAM.vector or not any(map(_leads, values)):
        return [_unwrap(value) for value in values], False
    rank = max(map(_rank, values))
    aligned: list[Any] = []
    for value in values:
        offset = value.offset if isinstance(value, Pointer) else None  # a tensor, or an int
        if isinstance(value, Block):
            value = _padded(value.data, value.lead, rank, every)
        elif isinstance(offset, torch.Tensor) and (value.lead or every):
            value = Pointer(value.flat, _padded(offset, value.lead, rank, every), True)
        aligned.append(_unwrap(value))
    return aligned, True


def _failing(failed: torch.Tensor) -> tuple[tuple[int, int, int], int]:
    """The program a failed check names, and its row of ``failed``: the running program's;
    in a vector mode call (program dim first), the first program, in the loop's order,
    with a failed element."""
    if not _PROGRAM.lead or failed.dim() == 0:
        return _PROGRAM.pid, -1
    row = int(failed.reshape(failed.shape[0], -1).any(1).nonzero()[0, 0])
    first, (x, y, _) = _PROGRAM.first + row, _PROGRAM.grid
    return (first % x, first // x % y, first // (x * y)), row


def _truncating_div(a: torch.Tensor, b: Any) -> torch.Tensor:
    """``//``: C's integer division (toward zero), as Triton's; floor for floats."""
    both_integer = not a.is_floating_point() and not _tensor(b).is_floating_point()
    return torch.div(a, b, rounding_mode="trunc" if both_integer else "floor")


# Python operator -> the torch function of Triton's meaning (``%`` is C's fmod).
_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.true_divide,
    "floordiv": _truncating_div, "mod": torch.fmod, "pow": torch.pow,
    "and": torch.bitwise_and, "or": torch.bitwise_or, "xor": torch.bitwise_xor,
    "lshift": torch.bitwise_left_shift, "rshift": torch.bitwise_right_shift,
    "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq,
    "ne": torch.ne,
}  # fmt: skip
_REFLECTED = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
              "lshift", "rshift")  # fmt: skip


def _operator(op: Callable[[Any, Any], Any], reflected: bool) -> Callable[[Block, Any], Any]:
    def apply(self: Block, other: Any) -> Any:
        if isinstance(other, Pointer):
            return NotImplemented  # offsets + pointer: the pointer's __radd__
        (mine, theirs), lead = _aligned((self, other), every=False)
        left, right = (_tensor(theirs), mine) if reflected else (mine, theirs)
        return Block(op(left, right), lead)

    return apply


for _name, _op in _OPERATORS.items():
    setattr(Block, f"__{_name}__", _operator(_op, reflected=False))
    if _name in _REFLECTED:
        setattr(Block, f"__r{_name}__", _operator(_op, reflected=True))
for _name, _unary in (("neg", torch.neg), ("pos", torch.positive), ("invert", torch.bitwise_not),
                      ("abs", torch.abs)):  # fmt: skip
    setattr(Block, f"__{_name}__", lambda b, _unary=_unary: Block(_unary(b.data), b.lead))


# ---- pointers, loads and stores -------------------------------------------------------


class pointer_type:  # Triton's name
    """``ptr.dtype``: Triton's pointer type, whose ``element_ty`` is the tensor's dtype."""

    def __init__(self, element_ty: torch.dtype) -> None:
        self.element_ty = element_ty

    def __repr__(self) -> str:
        return f"pointer<{self.element_ty}>"


class Pointer:
    """A pointer or a block of them: element offsets (an int or an int64 tensor) into
    ``flat``, the whole storage of a kernel argument as a 1-D tensor; in the vector mode
    offsets that differ by program have the program dim first (``lead``)."""

    def __init__(self, flat: torch.Tensor, offset: int | torch.Tensor, lead: bool = False):
        self.flat = flat
        self.offset = offset
        self.lead = lead

    @classmethod
    def of(cls, tensor: torch.Tensor) -> Pointer:
        tensor = tensor.detach()  # the same storage; a kernel's writes are not autograd's
        size = tensor.untyped_storage().nbytes() // tensor.element_size()
        return cls(tensor.as_strided((size,), (1,), 0), int(tensor.storage_offset()))

    @property
    def dtype(self) -> pointer_type:
        return pointer_type(self.flat.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        offset = self.offset
        return tuple(offset.shape[int(self.lead) :]) if isinstance(offset, torch.Tensor) else ()

    def __add__(self, other: Any) -> Pointer:
        (mine, other), lead = _aligned((self, other), every=False)
        if isinstance(other, torch.Tensor):
            other = other.to(torch.int64)
        return Pointer(self.flat, mine.offset + other, lead)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Pointer:
        return self + (-other)

    def __getitem__(self, index: Any) -> Pointer:
        offset = _tensor(self.offset)[_past_lead(_unwrap(index), self.lead)]
        return Pointer(self.flat, offset, self.lead)


def _checked(pointer: Pointer, mask: Any, what: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The offsets a load or store touches (masked-off ones set to 0) and the mask, both
    broadcast to one shape; an offset outside the storage is a KernelIndexError."""
    if not isinstance(pointer, Pointer):
        raise TypeError(f"{what} takes a pointer, not {type(pointer).__name__} ({_where()})")
    offset = _tensor(pointer.offset).to(torch.int64)
    if mask is not None:
        offset, mask = torch.broadcast_tensors(offset, _tensor(mask).to(torch.bool))
        offset = torch.where(mask, offset, 0)
        mask = None if bool(mask.all()) else mask  # often nothing is masked off
    _PROGRAM.widest = max(_PROGRAM.widest, offset.numel())
    if offset.numel() and not _inside(offset, pointer.flat.numel()):
        outside = (offset < 0) | (offset >= pointer.flat.numel())
        program, row = _failing(outside)
        here = (offset[row], outside[row]) if row >= 0 else (offset, outside)
        first = int(here[0][here[1]].flatten()[0])
        raise KernelIndexError(
            f"{what} of element {first} outside a storage of {pointer.flat.numel()} "
            f"elements, in program {program} of {_where()}"
        )
    return offset, mask


def _inside(offset: torch.Tensor, size: int) -> bool:
    """Whether every offset is in [0, size): one pass over them (the vector mode's are many)."""
    low, high = torch.stack(torch.aminmax(offset)).tolist()
    return low >= 0 and high < size


@_tl
def load(
    pointer: Pointer,
    mask: Any = None,
    other: Any = None,
    boundary_check: Sequence[int] = (),
    padding_option: str = "",
    cache_modifier: str = "",
    eviction_policy: str = "",
    volatile: bool = False,
) -> torch.Tensor:
    """Gather ``pointer``'s elements; where ``mask`` is false, ``other`` (or 0)."""
    for argument, value in (("boundary_check", boundary_check), ("padding_option", padding_option)):
        if value:
            raise _unsupported(f"tl.load({argument}=)")  # block pointers'
    offset, mask = _checked(pointer, mask, "tl.load")
    # a copy, never a view (``flat[0-d index]`` would be one): later stores must not reach it
    values = pointer.flat.index_select(0, offset.flatten()).view(offset.shape)
    if mask is None:
        return values
    if isinstance(other, torch.Tensor):
        other = other.to(values.dtype)
    return torch.where(mask, values, 0 if other is None else other)


@_tl
def store(
    pointer: Pointer,
    value: Any,
    mask: Any = None,
    boundary_check: Sequence[int] = (),
    cache_modifier: str = "",
    eviction_policy: str = "",
) -> None:
    """Scatter ``value`` (cast to the pointer's element type) where ``mask`` is true."""
    if boundary_check:
        raise _unsupported("tl.store(boundary_check=)")
    value = _tensor(value).to(pointer.flat.dtype)
    if _PROGRAM.lead and (not isinstance(pointer.offset, torch.Tensor) or len(pointer.offset) == 1):
        value, mask = _last_writes(value, mask)  # every program stores to the same places
    offset, mask = _checked(pointer, mask, "tl.store")
    if mask is None:
        offset, value = torch.broadcast_tensors(offset, value)
        index, value = offset.flatten(), value.flatten()
    else:
        offset, value, mask = torch.broadcast_tensors(offset, value, mask)
        kept = mask.flatten().nonzero().squeeze(1)  # once for both (x[mask] finds them again)
        index, value = offset.flatten()[kept], value.flatten()[kept]
    if _PROGRAM.journal is not None:  # the vector mode: what this store overwrites
        _PROGRAM.journal.append((pointer.flat, index, pointer.flat.index_select(0, index)))
    pointer.flat.scatter_(0, index, value)  # (index_put_ is as fast alone, not beside others)


def _last_writes(value: torch.Tensor, mask: Any) -> tuple[torch.Tensor, Any]:
    """Every program's store to the same places (program dim first) as the one store the
    loop's last writer leaves: for each place, the value of the last program whose mask
    lets it through."""
    if mask is None:
        return (value[-1:] if value.dim() else value), None
    value, mask = torch.broadcast_tensors(value, _tensor(mask).to(torch.bool))
    if value.dim() == 0:
        return value, mask
    programs = torch.arange(len(mask), device=mask.device).view(-1, *[1] * (mask.dim() - 1))
    last = torch.where(mask, programs, -1).amax(0, keepdim=True)
    return value.gather(0, last.clamp(min=0)), last >= 0


def _undo(journal: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> None:
    """Put back what the stores of a vector attempt overwrote, the last store first."""
    for flat, index, old in reversed(journal):
        flat.scatter_(0, index, old)


# ---- program ids, block creation, shapes ----------------------------------------------


@_tl
def program_id(axis: int) -> _Int | Block:
    """This program's id along ``axis``; in the vector mode, every program's."""
    return _PROGRAM.ids[axis] if _PROGRAM.vector else _Int(_PROGRAM.pid[axis])


@_tl
def num_programs(axis: int) -> _Int:
    return _Int(_PROGRAM.grid[axis])


@_tl
def arange(start: int, end: int) -> torch.Tensor:
    return torch.arange(_python(start), _python(end), dtype=torch.int32, device=_PROGRAM.device)


def _shape(shape: Sequence[int] | tuple[Sequence[int]]) -> tuple[int, ...]:
    """A shape given as a sequence or as separate ints (``broadcast_to(x, M, N)``)."""
    if isinstance(shape, int):
        return (shape,)
    if len(shape) == 1 and isinstance(shape[0], Sequence):
        shape = shape[0]
    return tuple(_python(size) for size in shape)


@_tl
def zeros(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(_shape(shape), dtype=dtype, device=_PROGRAM.device)


@_tl
def full(shape: Sequence[int], value: Any, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(_shape(shape), value, dtype=dtype, device=_PROGRAM.device)


@_tl
def zeros_like(input: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(input)


@_tl
def where(condition: Any, x: Any, y: Any) -> torch.Tensor:
    return torch.where(_tensor(condition).to(torch.bool), x, y)


@_tl
def broadcast_to(input: Any, *shape: Any) -> torch.Tensor:
    shape, tensor = _shape(shape), _tensor(input)
    if _PROGRAM.lead:  # the program dim stays
        tensor = _padded(tensor, True, len(shape), every=False)
        return tensor.broadcast_to((len(tensor), *shape))
    return tensor.broadcast_to(shape)


@_tl
def broadcast(input: Any, other: Any) -> tuple[torch.Tensor, ...]:
    return tuple(torch.broadcast_tensors(_tensor(input), _tensor(other)))


# In a call on blocks with the program dim (``_PROGRAM.lead`` is 1), it stays first and
# the axes a kernel names count past it.


def _axis(axis: int) -> int:
    return axis + _PROGRAM.lead if axis >= 0 else axis


@_tl
def reshape(input: torch.Tensor, *shape: Any, can_reorder: bool = False) -> torch.Tensor:
    return input.reshape((*input.shape[: _PROGRAM.lead], *_shape(shape)))


@_tl
def view(input: torch.Tensor, *shape: Any) -> torch.Tensor:
    return reshape(input, *shape)


@_tl
def ravel(input: torch.Tensor, can_reorder: bool = False) -> torch.Tensor:
    return input.reshape(*input.shape[: _PROGRAM.lead], -1)


@_tl
def permute(input: torch.Tensor, *dims: Any) -> torch.Tensor:
    lead, rank = _PROGRAM.lead, input.dim() - _PROGRAM.lead
    return input.permute(*range(lead), *(dim % rank + lead for dim in _shape(dims)))


@_tl
def trans(input: torch.Tensor, *dims: Any) -> torch.Tensor:
    """Triton's transpose: the dims given, or the two dims of a 2-D block swapped."""
    return permute(input, *dims) if dims else permute(input, 1, 0)


@_tl
def expand_dims(input: Any, axis: int | Sequence[int]) -> torch.Tensor:
    result = _tensor(input)
    axes = [axis] if isinstance(axis, int) else list(axis)
    rank = result.dim() - _PROGRAM.lead + len(axes)
    for one in sorted(a % rank for a in axes):
        result = result.unsqueeze(one + _PROGRAM.lead)
    return result


@_tl
def join(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.stack(torch.broadcast_tensors(a, b), dim=-1)


@_tl
def split(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(a.unbind(-1))


# ---- reductions, scans, dot -----------------------------------------------------------


def _widened(input: torch.Tensor, floats_too: bool) -> torch.Tensor:
    """Triton's reductions widen integers narrower than 32 bits to int32, and ``max`` and
    ``min`` widen float16/bfloat16 to float32 as well."""
    if input.dtype == torch.bool or (not input.is_floating_point() and input.itemsize < 4):
        return input.to(torch.int32)
    if floats_too and input.is_floating_point() and input.itemsize < 4:
        return input.to(torch.float32)
    return input


@_tl
def sum_(
    input: torch.Tensor, axis: int | None = None, keep_dims: bool = False, dtype: Any = None
) -> torch.Tensor:
    input = input.to(dtype) if dtype is not None else _widened(input, floats_too=False)
    dims = tuple(range(_PROGRAM.lead, input.dim())) if axis is None else _axis(axis)
    if dims == ():  # a program's scalar: nothing to add up (torch would take dim=() as all)
        return input
    return torch.sum(input, dim=dims, keepdim=keep_dims, dtype=input.dtype)


def _extremes(pick: Callable[..., Any], name: str) -> None:
    """``tl.max`` and ``tl.argmax`` (``pick`` torch.max), or ``tl.min`` and ``tl.argmin``."""

    def extreme(
        input: torch.Tensor,
        axis: int | None = None,
        return_indices: bool = False,
        return_indices_tie_break_left: bool = True,
        keep_dims: bool = False,
    ) -> Any:
        """The values, and with ``return_indices`` their int32 positions too (the first
        of equal ones, as Triton's default tie break)."""
        input = _widened(input, floats_too=True)
        if axis is None:  # over all of a program's values
            input, axis = input.reshape(*input.shape[: _PROGRAM.lead], -1), 0
        values, positions = pick(input, dim=_axis(axis), keepdim=keep_dims)
        return (values, positions.to(torch.int32)) if return_indices else values

    def arg(
        input: torch.Tensor, axis: int, tie_break_left: bool = True, keep_dims: bool = False
    ) -> torch.Tensor:
        return extreme(input, axis, return_indices=True, keep_dims=keep_dims)[1]

    setattr(language, name, _on_blocks(extreme, name))
    setattr(language, f"arg{name}", _on_blocks(arg, f"arg{name}"))


_extremes(torch.max, "max")
_extremes(torch.min, "min")


def _scan(
    scan: Callable[..., torch.Tensor], input: torch.Tensor, axis: int, reverse: bool, dtype: Any
) -> torch.Tensor:
    input = input.to(dtype) if dtype is not None else _widened(input, floats_too=False)
    axis = _axis(axis)
    if reverse:
        return scan(input.flip(axis), dim=axis, dtype=input.dtype).flip(axis)
    return scan(input, dim=axis, dtype=input.dtype)


@_tl
def cumsum(
    input: torch.Tensor, axis: int = 0, reverse: bool = False, dtype: Any = None
) -> torch.Tensor:
    return _scan(torch.cumsum, input, axis, reverse, dtype)


@_tl
def cumprod(
    input: torch.Tensor, axis: int = 0, reverse: bool = False, dtype: Any = None
) -> torch.Tensor:
    return _scan(torch.cumprod, input, axis, reverse, dtype)


@_tl
def dot(
    input: torch.Tensor,
    other: torch.Tensor,
    acc: torch.Tensor | None = None,
    input_precision: str | None = None,
    allow_tf32: bool | None = None,
    max_num_imprecise_acc: int | None = None,
    out_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """A block matmul, exact in float32 whatever the precision asked (int32 for integers,
    float64 where an input is), plus ``acc``."""
    if not input.is_floating_point():
        out_dtype = torch.int32
    elif torch.float64 in (input.dtype, other.dtype):
        out_dtype = torch.float64
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # a TPU's default: bfloat16 passes
    try:
        result = torch.matmul(input.to(out_dtype), other.to(out_dtype))
    finally:
        torch.set_float32_matmul_precision(previous)
    return result if acc is None else (acc + result).to(acc.dtype)


# ---- elementwise math -----------------------------------------------------------------


def _math(torch_name: str) -> Callable[..., torch.Tensor]:
    """torch's ``torch_name`` over tensors and scalars alike (options such as
    propagate_nan are moot: torch's maximum and minimum propagate NaN)."""
    op = getattr(torch, torch_name)
    return lambda *args, **options: op(*map(_tensor, args))


@_tl
def cast(input: Any, dtype: torch.dtype, fp_downcast_rounding: Any = None) -> torch.Tensor:
    """``tl.cast(x, dtype)``, which is ``x.to(dtype)`` (``bitcast=True`` is unsupported)."""
    return _tensor(input).to(dtype)


def fma(x: Any, y: Any, z: Any) -> torch.Tensor:
    return _tensor(x) * y + z


@_tl
def clamp(x: Any, min: Any, max: Any, propagate_nan: Any = None) -> torch.Tensor:
    return torch.minimum(torch.maximum(_tensor(x), _tensor(min)), _tensor(max))


for _space_name in MATH_IN:
    for _name, _torch_name in (UNARY_MATH | BINARY_MATH).items():
        setattr(_SPACES[_space_name], _name, _on_blocks(_math(_torch_name), _name))
    _SPACES[_space_name].fma = _on_blocks(fma, "fma")  # type: ignore[attr-defined]


def cdiv(x: Any, div: Any) -> Any:
    """Ceiling division of integers (or of integer blocks)."""
    return (x + div - 1) // div


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n (Triton's: 0 for 0)."""
    return 0 if n == 0 else 1 << (int(n) - 1).bit_length()


language.cdiv = cdiv  # type: ignore[attr-defined]


# ---- compile-time helpers, hints and checks -------------------------------------------


class constexpr:  # Triton's name
    """Marks a compile-time parameter (``BLOCK: tl.constexpr``). ``tl.constexpr(v)`` is v,
    a number as one that also has Triton's ``.value`` (``MODE = tl.constexpr(0)``)."""

    def __new__(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return value
        return _Int(value) if isinstance(value, int) else _Float(value)


language.constexpr = constexpr  # type: ignore[attr-defined]
language.tensor = Block  # type: ignore[attr-defined]
language.dtype = torch.dtype  # type: ignore[attr-defined]
language.pointer_type = pointer_type  # type: ignore[attr-defined]
for _name, _torch_name in DTYPES.items():
    setattr(language, _name, getattr(torch, _torch_name))


@_tl
def range_(start: int, end: int | None = None, step: int = 1, **hints: Any) -> builtins.range:
    """``tl.range``: a Python range; num_stages, loop_unroll_factor and such are hints."""
    if end is None:
        return builtins.range(_python(start))
    return builtins.range(_python(start), _python(end), _python(step))


@_tl
def static_range(start: int, end: int | None = None, step: int = 1) -> builtins.range:
    return range_(start, end, step)


def _hint(input: Any, values: Any) -> Any:
    """``tl.multiple_of`` and such: facts for the compiler, nothing to compute."""
    return input


for _name in ("multiple_of", "max_contiguous", "max_constancy"):
    setattr(language, _name, _hint)


@_tl
def debug_barrier() -> None:
    """Every program runs alone here: there is nothing to wait for."""


@_tl
def static_assert(condition: Any, msg: str = "") -> None:
    if not condition:
        raise AssertionError(f"tl.static_assert failed: {msg} ({_where()})")


@_tl
def device_assert(condition: Any, msg: str = "", mask: Any = None) -> None:
    failed = ~_tensor(condition).to(torch.bool)
    if mask is not None:
        failed = failed & _tensor(mask).to(torch.bool)
    if bool(failed.any()):
        program = _failing(failed)[0]
        raise AssertionError(f"tl.device_assert failed: {msg} (program {program}, {_where()})")


@_tl
def static_print(*values: Any) -> None:
    print(*values)


@_tl
def device_print(prefix: str, *values: Any, hex: bool = False) -> None:
    programs = "all programs (program dim first)" if _PROGRAM.lead else f"pid {_PROGRAM.pid}"
    print(f"{programs} {prefix}", *values)


# ---- kernels and their launch ---------------------------------------------------------


class _Launcher:
    """What ``kernel[grid]`` works on: a JITFunction, or autotune/heuristics around one."""

    fn: Any

    @property
    def arg_names(self) -> list[str]:
        return list(self.fn.arg_names)

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return lambda *args, **kwargs: self.run(grid, args, kwargs)

    def run(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        raise NotImplementedError

    def _named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**dict(zip(self.arg_names, args, strict=False)), **kwargs}


class JITFunction(_Launcher):
    """A ``@triton.jit`` function: launched with ``kernel[grid](...)``, or called directly
    from another kernel as the plain Python function it is."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.signature = inspect.signature(fn)
        self.constexprs = {
            name
            for name, param in self.signature.parameters.items()
            if param.annotation is constexpr or str(param.annotation).endswith("constexpr")
        }
        # constexpr values -> why the body needs the loop mode with them
        self.needs_loop: dict[tuple[Any, ...], str] = {}
        # constexpr values -> how many programs the vector mode runs together on a CPU
        self.group: dict[tuple[Any, ...], int] = {}

    @property
    def arg_names(self) -> list[str]:
        return list(self.signature.parameters)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def run(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Run the body for every program id of ``grid`` (a tuple, or a function of the
        launch's named arguments): all at once where it can (the vector mode), else once
        per program id, in order."""
        kwargs = {k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS}
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
        grid = grid(named) if callable(grid) else grid
        grid = (grid,) if isinstance(grid, int) else tuple(int(g) for g in grid)
        grid = (*grid, 1, 1)[:3]
        tensors = [v for v in named.values() if isinstance(v, torch.Tensor)]
        device = tensors[0].device if tensors else torch.device("cpu")
        values = {name: self._argument(name, value) for name, value in named.items()}
        key = tuple((name, _hashable(named[name])) for name in sorted(self.constexprs))
        saved = (_PROGRAM.pid, _PROGRAM.grid, _PROGRAM.device)
        _PROGRAM.grid, _PROGRAM.device = grid, device
        try:
            mode, done, total = "loop", 0, math.prod(grid)
            if MODE != "loop" and total > 1:
                why = self.needs_loop.get(key)
                if why is None:
                    mode = "vector"
                    why, done = self._vectorised(values, key)
                if why is not None:
                    self.needs_loop[key], mode = why, f"loop: {why}"
            if mode != "vector":
                for flat in builtins.range(done, total):  # axis 0 fastest
                    _PROGRAM.pid = (
                        flat % grid[0],
                        flat // grid[0] % grid[1],
                        flat // grid[0] // grid[1],
                    )
                    self.fn(**values)
        except Exception as error:
            at = "all programs at once" if mode == "vector" else f"program {_PROGRAM.pid}"
            error.add_note(f"in triton_on_torch kernel {self.__name__}, {at}")
            raise
        finally:
            _PROGRAM.pid, _PROGRAM.grid, _PROGRAM.device = saved
            launch_modes[self.__name__] = mode

    def _vectorised(self, values: dict[str, Any], key: tuple[Any, ...]) -> tuple[str | None, int]:
        """Run the body once for all programs (on a CPU, once per group of them, in the
        loop's order): (None, all of them) if it ran, else why the loop must run the body
        and from which program on: the first, with this attempt's stores undone, or the
        first after a group when each program's blocks alone fill a CPU group (running
        them together gains nothing). A kernel error (an index outside a storage, a failed
        assertion, an unsupported construct) is the kernel's and raised; any other error
        may be this mode's, so the loop runs the kernel to find out."""
        total, start = math.prod(_PROGRAM.grid), 0
        cpu = _PROGRAM.device.type == "cpu"
        group = self.group.get(key, min(total, FIRST_CPU_GROUP)) if cpu else total
        _PROGRAM.vector, _PROGRAM.journal = True, []
        try:
            while start < total:
                stop = min(start + group, total)
                _programs(start, stop)
                self.fn(**values)
                if cpu and key not in self.group:  # sized from the first group's blocks
                    each = max(1, _PROGRAM.widest // (stop - start))
                    self.group[key] = max(1, CPU_GROUP_ELEMENTS // each)
                    if self.group[key] == 1 and stop < total:
                        return f"a program's blocks fill a CPU group ({each} elements)", stop
                start, group = stop, self.group.get(key, group)
            return None, total
        except (KernelIndexError, UnsupportedConstruct, AssertionError):
            raise
        except Exception as error:
            _undo(_PROGRAM.journal)
            why = (
                str(error) if isinstance(error, _NeedsLoop) else f"{error!r} ({_raised_at(error)})"
            )
            return why, 0
        finally:
            _PROGRAM.vector, _PROGRAM.journal, _PROGRAM.ids, _PROGRAM.lead = False, None, (), 0
            _PROGRAM.first = 0

    def _argument(self, name: str, value: Any) -> Any:
        """What the body sees: a tensor as a Pointer, a runtime int or float as one that
        has ``.to``; constexprs and everything else as passed."""
        if isinstance(value, torch.Tensor):
            return Pointer.of(value)
        if name in self.constexprs or isinstance(value, bool):
            return value
        if isinstance(value, int):
            return _Int(value)
        return _Float(value) if isinstance(value, float) else value


def _programs(start: int, stop: int) -> None:
    """Make the programs start..stop-1 (counted as the loop runs them, axis 0 fastest)
    the ones the vector mode runs."""
    x, y, _ = _PROGRAM.grid
    ids = torch.arange(start, stop, device=_PROGRAM.device)
    _PROGRAM.ids = tuple(Block(i, True) for i in (ids % x, ids // x % y, ids // (x * y)))
    _PROGRAM.pid = (start % x, start // x % y, start // (x * y))
    _PROGRAM.first, _PROGRAM.widest = start, 0


def _raised_at(error: BaseException) -> str:
    """The kernel function and file:line where ``error`` was raised (its deepest frame
    outside this module and torch)."""
    where, trace = "<unknown>", error.__traceback__
    while trace is not None:
        code = trace.tb_frame.f_code
        if code.co_filename != _THIS_FILE and not code.co_filename.startswith(_TORCH_DIR):
            where = f"{code.co_name} at {code.co_filename}:{trace.tb_lineno}"
        trace = trace.tb_next
    return where


_TORCH_DIR = os.path.dirname(torch.__file__)


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


class Config:
    """One autotuning configuration: ``kwargs`` become the kernel's meta-parameters; the
    rest (num_warps, num_stages, ...) tunes a GPU and is kept only to be read back."""

    def __init__(
        self,
        kwargs: dict[str, Any],
        num_warps: int = 4,
        num_stages: int = 3,
        pre_hook: Callable[..., Any] | None = None,
        **options: Any,
    ) -> None:
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.pre_hook = pre_hook
        self.options = options


class _Autotuned(_Launcher):
    """``@triton.autotune``: always the first config (nothing here is worth timing)."""

    def __init__(self, fn: _Launcher, configs: Sequence[Config]) -> None:
        self.fn = fn
        self.config = configs[0] if configs else Config({})

    def run(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        clash = sorted(set(kwargs) & set(self.config.kwargs))
        if clash:
            raise ValueError(f"meta-parameters {clash} are set by both the call and autotune")
        if self.config.pre_hook is not None:
            self.config.pre_hook({**self._named(args, kwargs), **self.config.kwargs})
        self.fn.run(grid, args, {**kwargs, **self.config.kwargs})


class _Heuristics(_Launcher):
    """``@triton.heuristics``: each meta-parameter computed from the launch's arguments."""

    def __init__(self, fn: _Launcher, values: dict[str, Callable[[dict[str, Any]], Any]]):
        self.fn = fn
        self.values = values

    def run(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        kwargs = dict(kwargs)
        for name, rule in self.values.items():
            kwargs[name] = rule(self._named(args, kwargs))
        self.fn.run(grid, args, kwargs)


def jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@triton.jit`` and ``@triton.jit(...)``; the options (debug, noinline, ...) are moot."""
    return JITFunction(fn) if fn is not None else JITFunction


def autotune(configs: Sequence[Config], key: Sequence[str], **options: Any) -> Any:
    return lambda fn: _Autotuned(fn, configs)


def heuristics(values: dict[str, Callable[[dict[str, Any]], Any]]) -> Any:
    return lambda fn: _Heuristics(fn, values)


def install_as_triton() -> None:
    """Make ``import triton`` and ``import triton.language as tl`` (and tl.math, libdevice)
    find this runtime, so a kernel module runs unchanged."""
    sys.modules["triton"] = sys.modules[__name__]
    sys.modules.update(_SPACES)


# ``import triton_on_torch.language as tl`` and ``from triton_on_torch.language.extra import
# libdevice`` work as the same lines with ``triton`` do.
for _name, _space in _SPACES.items():
    sys.modules.setdefault(__name__ + _name[len("triton") :], _space)


# Triton's member functions: ``x.sum(axis=1)`` is ``tl.sum(x, axis=1)``, and so on.
BLOCK_METHODS = (
    "sum max min argmax argmin cumsum cumprod reshape view ravel trans permute expand_dims"
    " broadcast_to split cast"
)
for _name in [*BLOCK_METHODS.split(), *UNARY_MATH]:
    setattr(Block, _name, getattr(language, _name))


def _check_tables() -> None:
    """The tables above are what the static check reads: they must be what is here."""
    for name, space in _SPACES.items():
        wanted = set(NAMESPACES[name].split())
        wanted |= set(UNARY_MATH) | set(BINARY_MATH) if name in MATH_IN else set()
        wanted |= set(DTYPES) if name == "triton.language" else set()
        have = {key for key in vars(space) if not key.startswith("__")}
        if have != wanted:
            raise RuntimeError(f"{name}: table and namespace differ by {have ^ wanted}")
    missing = [name for name in TRITON_NAMES.split() if name not in globals()]
    if missing:
        raise RuntimeError(f"triton: {missing} in the table but not defined")


_check_tables()
