"""TorchTPU's float32 matmul arithmetic on the emulated ``tpu`` device.

A TPU multiplies float32 matrices on its MXU in bfloat16 passes, and TorchTPU hands every
matmul-class op (mm, bmm, dot, convolution and their backward: ``BuildMmShlo``,
``BuildBmmShlo``, ``BuildDotShlo``, ``BuildConvolution*`` in the wheel's glue library take a
``mlir::stablehlo::Precision``) the current ``torch.tpu.Precision``, a direct binding to
StableHLO's ``dot_general`` precision config (the wheel's ``_internal/precision/
precision.py``; https://openxla.org/stablehlo/spec#dot_general). What each level computes
for float32 operands is XLA's, documented by JAX (``jax.lax.Precision``: "DEFAULT: On TPU:
performs float32 computations in bfloat16. HIGH: ... in 3 bfloat16 passes. HIGHEST: ... in 6
bfloat16 [passes]"), and by Cloud TPU ("TPUs perform matrix multiplication operations with
bfloat16 values and accumulations with IEEE float32 values ... the rounding scheme in the
conversion is round to nearest even", https://cloud.google.com/tpu/docs/bfloat16):

- ``DEFAULT``: both operands rounded to bfloat16 (round-to-nearest-even), products (exact in
  float32: 8-bit x 8-bit significands) accumulated in float32;
- ``HIGH`` (``bf16_3x``): each operand split as ``hi + lo`` (``hi`` its bfloat16 truncation,
  ``lo`` the rest rounded to bfloat16), the result ``(lo*hi + hi*lo) + hi*hi`` with a NaN in
  the small terms dropped, as XLA's ``DotAlgorithmRewriter`` lowers
  ``ALG_DOT_BF16_BF16_F32_X3`` (``RewriteF32ToBF16X3``, openxla/xla
  ``xla/service/gpu/transforms/dot_algorithm_rewriter.cc``; libtpu's own lowering is not
  public);
- ``HIGHEST`` (``bf16_6x``, about float32's 24 bits): computed in float32 (torch's CPU kernel).

Which level applies: a run's pinned precision (``RunSpec.matmul_precision``, the verifier's)
over ``torch.tpu.precision(...)`` blocks (innermost first; TorchTPU: "This setting overrides
``torch.set_float32_matmul_precision``") over the global level, which TorchTPU's
``_loader.py`` maps from ``torch.set_float32_matmul_precision`` (``sandbox/data/
torch_tpu.toml``, ``[precision]``), initially ``DEFAULT`` (so ``get_float32_matmul_precision``
answers ``"medium"``). Only float32 operands on the device change: bf16/fp16 (autocast) and
CPU tensors are computed as they are. The blocks are one stack per process (the emulator runs
backward on the calling thread, so backward matmuls see the block ``.backward()`` was called
in); whether TorchTPU's C++ context state is per thread the wheel does not show.

Both emulators call :func:`run` with CPU tensors: the Python one from ``__torch_dispatch__``,
the native one from its boxed fallback (``emulator.cpp``, ``set_precision_hook``), only while
:func:`reduced` (a level below ``HIGHEST`` is in force).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import matmul_precision, patching
from ..torchtpu_facts import section

aten = torch.ops.aten

_FACTS = section("precision")
Precision = enum.Enum(  # type: ignore[misc]  # members are the wheel's facts, read at import
    "Precision", [(m, m.lower()) for m in _FACTS["members"]], module=__name__
)
Precision.__doc__ = "torch.tpu.Precision: StableHLO's dot_general precision (float32 inputs)."
# torch.set_float32_matmul_precision's names -> Precision, as TorchTPU's _loader.py maps them
BY_TORCH_NAME = {name: Precision[m] for name, m in _FACTS["float32_matmul_precision"].items()}
TORCH_NAME = {p: name for name, p in BY_TORCH_NAME.items()}

# The run's pinned torch name ("highest", ...), or None: the program's settings decide.
pinned: str | None = None
# Whether the device follows TorchTPU's arithmetic at all (the tpu device; not neuron).
enabled = False
_global: Precision = Precision[_FACTS["initial"]]
_blocks: list[Precision] = []
# Told the level whenever it changes (the native backend's switch), or None.
_listener: Callable[[bool], None] | None = None


def current() -> Precision:
    """The level float32 matmul-class ops on the device run at now."""
    if pinned is not None:
        return BY_TORCH_NAME[pinned]
    return _blocks[-1] if _blocks else _global


def reduced() -> bool:
    """Whether float32 matmuls on the device now lose precision (below HIGHEST)."""
    return enabled and current() is not Precision["HIGHEST"]


def _changed() -> None:
    if _listener is not None:
        _listener(reduced())


def pin(value: str | None) -> None:
    """Pin ``value`` (a torch ``set_float32_matmul_precision`` name) for this process."""
    global pinned
    pinned = matmul_precision.check(value)
    _changed()


def enable(listener: Callable[[bool], None] | None = None) -> None:
    """Make the device follow TorchTPU's arithmetic; ``listener`` is told when it matters."""
    global enabled, _listener
    enabled, _listener = True, listener
    _changed()


_EXPECTED = "expected to be one of 'highest', 'high', or 'medium', got"


@functools.wraps(torch.set_float32_matmul_precision)
def set_float32_matmul_precision(precision: str) -> None:
    """TorchTPU's replacement: the torch name sets the global Precision (its _loader.py)."""
    global _global
    if not isinstance(precision, str) or precision not in BY_TORCH_NAME:
        raise ValueError(f"{_EXPECTED} '{precision}'")
    _global = BY_TORCH_NAME[precision]
    _changed()


@functools.wraps(torch.get_float32_matmul_precision)
def get_float32_matmul_precision() -> str:
    """The torch name of the global Precision (a ``torch.tpu.precision`` block aside)."""
    return TORCH_NAME[_global]


@contextmanager
def precision(mode: Precision) -> Iterator[None]:
    """``torch.tpu.precision(Precision.HIGHEST)``: ``mode`` for float32 matmuls in the block."""
    if not isinstance(mode, Precision):
        raise ValueError(
            "expected to be one of 'PrecisionConfig.DEFAULT',"
            f" 'PrecisionConfig.HIGH', or 'PrecisionConfig.HIGHEST', got '{mode}'"
        )
    _blocks.append(mode)
    _changed()
    try:
        yield
    finally:
        _blocks.pop()
        _changed()


def install_torch_settings() -> None:
    """Replace torch.set/get_float32_matmul_precision as TorchTPU's loader does."""
    for name, value in (
        ("set_float32_matmul_precision", set_float32_matmul_precision),
        ("get_float32_matmul_precision", get_float32_matmul_precision),
    ):
        patching.patch(torch, name, value, by="emulator.precision")


# ------------------------------------------------------------------ the arithmetic


def to_bf16(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to bfloat16 (round-to-nearest-even), as float32."""
    return t.to(torch.bfloat16).to(torch.float32)


def split(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hi, lo)``: ``hi`` the bfloat16 truncation of ``t``, ``lo`` the rest in bfloat16."""
    hi = (t.contiguous().view(torch.int32) & -65536).view(torch.float32)
    return hi, to_bf16(t - hi)


@dataclass(frozen=True)
class MatmulOp:
    """An op bilinear in its ``left`` and ``right`` operands (argument names), plus terms
    that are not products (a bias, ``beta * self``): ``drop`` sets the arguments that leave
    those out (for HIGH's small products); outputs in ``exact`` are not products (a bias's
    gradient) and come from the unrounded operands."""

    left: tuple[str, ...]
    right: tuple[str, ...]
    drop: dict[str, Any] = field(default_factory=dict)
    exact: tuple[int, ...] = ()


_ADD = {"beta": 0}
OPS: dict[Any, MatmulOp] = {
    aten.mm.default: MatmulOp(("self",), ("mat2",)),
    aten.mm.out: MatmulOp(("self",), ("mat2",)),
    aten.bmm.default: MatmulOp(("self",), ("mat2",)),
    aten.bmm.out: MatmulOp(("self",), ("mat2",)),
    aten.mv.default: MatmulOp(("self",), ("vec",)),  # the native backend: addmv.out
    aten.dot.default: MatmulOp(("self",), ("tensor",)),
    aten.vdot.default: MatmulOp(("self",), ("other",)),
    aten.addmm.default: MatmulOp(("mat1",), ("mat2",), _ADD),
    aten.addmm.out: MatmulOp(("mat1",), ("mat2",), _ADD),
    aten.addmm_.default: MatmulOp(("mat1",), ("mat2",), _ADD),
    aten.addmv.default: MatmulOp(("mat",), ("vec",), _ADD),
    aten.addmv.out: MatmulOp(("mat",), ("vec",), _ADD),
    aten.addmv_.default: MatmulOp(("mat",), ("vec",), _ADD),
    aten.addbmm.default: MatmulOp(("batch1",), ("batch2",), _ADD),
    aten.addbmm.out: MatmulOp(("batch1",), ("batch2",), _ADD),
    aten.addbmm_.default: MatmulOp(("batch1",), ("batch2",), _ADD),
    aten.baddbmm.default: MatmulOp(("batch1",), ("batch2",), _ADD),
    aten.baddbmm.out: MatmulOp(("batch1",), ("batch2",), _ADD),
    aten.baddbmm_.default: MatmulOp(("batch1",), ("batch2",), _ADD),
    aten.convolution.default: MatmulOp(("input",), ("weight",), {"bias": None}),
    aten.convolution_backward.default: MatmulOp(
        ("grad_output",), ("input", "weight"), {"output_mask": None}, exact=(2,)
    ),
}


def named(op: Any, args: tuple | list, kwargs: dict) -> dict[str, Any]:
    """Every argument of ``op`` by its schema name (defaults filled in)."""
    out: dict[str, Any] = {}
    for i, arg in enumerate(op._schema.arguments):
        if i < len(args):
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


def _float32(values: dict[str, Any], names: tuple[str, ...]) -> bool:
    return all(
        isinstance(values.get(n), torch.Tensor) and values[n].dtype == torch.float32 for n in names
    )


def applies(op: Any, args: tuple | list, kwargs: dict) -> bool:
    """Whether ``op`` with these arguments is a float32 matmul that loses precision now."""
    spec = OPS.get(op)
    if spec is None or not reduced():
        return False
    return _float32(named(op, args, kwargs), spec.left + spec.right)


def run(op: Any, args: tuple | list, kwargs: dict) -> Any:
    """``op`` (on CPU tensors) at the current level; as is when it does not apply."""
    spec = OPS.get(op)
    values = named(op, args, kwargs)
    if spec is None or not reduced() or not _float32(values, spec.left + spec.right):
        return op(*args, **kwargs)
    if current() is Precision["DEFAULT"]:
        return _default(op, spec, values)
    return _high(op, spec, values)


def _with(values: dict[str, Any], names: tuple[str, ...], fn: Callable) -> dict[str, Any]:
    return {**values, **{n: fn(values[n]) for n in names}}


def _products_only(op: Any, spec: MatmulOp, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` less the terms that are not products (``drop``)."""
    out = {**values, **spec.drop}
    if "output_mask" in spec.drop:  # convolution_backward: no bias gradient
        out["output_mask"] = [*values["output_mask"][:2], False]
    return out


def _exact_outputs(op: Any, spec: MatmulOp, values: dict[str, Any], result: Any) -> Any:
    """Put back the outputs that are not products (a bias gradient), from the exact operands."""
    if not spec.exact or not any(values["output_mask"][i] for i in spec.exact):
        return result
    mask = [i in spec.exact and values["output_mask"][i] for i in range(3)]
    exact = op(**{**values, "output_mask": mask})
    return tuple(exact[i] if i in spec.exact else r for i, r in enumerate(result))


def _default(op: Any, spec: MatmulOp, values: dict[str, Any]) -> Any:
    rounded = _with(values, spec.left + spec.right, to_bf16)
    if spec.exact:
        rounded = _products_only(op, spec, rounded)
        return _exact_outputs(op, spec, values, op(**rounded))
    return op(**rounded)


def _functional(op: Any) -> Any:
    """The out-of-place overload of ``op`` (``mm`` for ``mm.out``, ``addmm`` for ``addmm_``)."""
    packet = op.overloadpacket
    name = packet.__name__
    if name.endswith("_"):
        packet = getattr(aten, name[:-1])
    return packet.default


def _high(op: Any, spec: MatmulOp, values: dict[str, Any]) -> Any:
    halves = {n: split(values[n]) for n in spec.left + spec.right}
    hi = {n: h for n, (h, _) in halves.items()}
    lo = {n: lo for n, (_, lo) in halves.items()}
    small = _functional(op)
    base = {k: v for k, v in _products_only(op, spec, values).items() if k != "out"}
    if small is not op:
        base = {k: v for k, v in base.items() if k in {a.name for a in small._schema.arguments}}
    low_high = small(**{**base, **{n: lo[n] for n in spec.left}, **{n: hi[n] for n in spec.right}})
    high_low = small(**{**base, **{n: hi[n] for n in spec.left}, **{n: lo[n] for n in spec.right}})
    main_values = {**values, **hi}
    if spec.exact:
        main_values = _products_only(op, spec, main_values)
    high_high = op(**main_values)
    if isinstance(high_high, tuple):
        combined = tuple(
            h if h is None or a is None else h.add_(_no_nan(a + b))
            for h, a, b in zip(high_high, low_high, high_low, strict=True)
        )
        return _exact_outputs(op, spec, values, combined)
    return high_high.add_(_no_nan(low_high + high_low))


def _no_nan(t: torch.Tensor) -> torch.Tensor:
    """The small products' sum with NaN dropped (XLA's ReplaceNaNWithZeros: an infinite
    operand times a zero ``lo`` part is NaN there, and the ``hi*hi`` term carries it)."""
    return torch.nan_to_num(t, nan=0.0, posinf=torch.inf, neginf=-torch.inf)


def qualified_names() -> list[str]:
    """``aten::mm.`` ... : the ops :func:`run` changes, as the native backend names them."""
    return [f"{op._schema.name}.{op._schema.overload_name}" for op in OPS]


def run_by_name(name: str, args: list) -> Any:
    """The native backend's entry: ``run`` for the op called ``name`` (``aten::mm.``)."""
    return run(_BY_NAME[name], args, {})


_BY_NAME = {f"{op._schema.name}.{op._schema.overload_name}": op for op in OPS}


# sdp::SDPBackend::math: float32 attention below HIGHEST takes the math kernel, whose
# matmuls (bmm) follow the precision; torch's CPU fused kernels compute in float32.
SDP_MATH = 0


def sdp_math(query: Any) -> bool:
    """Whether scaled-dot-product attention on ``query`` must take the math kernel."""
    return reduced() and isinstance(query, torch.Tensor) and query.dtype == torch.float32
