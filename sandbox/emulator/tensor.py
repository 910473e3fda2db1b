"""Device tensors: a ``torch.Tensor`` wrapper subclass that holds a CPU tensor.

The wrapper carries the emulated device (``tpu:0``) so user code, autograd and
optimizers see a device tensor; ``__torch_dispatch__`` sits below autograd, so
every ATen op reaches it: it unwraps to CPU, runs the CPU kernel and rewraps.
Results are therefore bit-identical to a CPU run of the same ops.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .. import device_only_ops
from . import generator, memory, precision, state
from .counters import quiet, record_op, record_sync, record_transfer

aten = torch.ops.aten

# Ops that legitimately take CPU and device tensors together: copies, and
# indexing with CPU index tensors (CUDA accepts those too).
_MIXED_DEVICE_OK = {
    aten.copy_.default,
    aten._to_copy.default,
    aten._copy_from.default,
    aten._copy_from_and_resize.default,
    aten.index.Tensor,
    aten.index_put_.default,
    aten._index_put_impl_.default,
    aten.index_put.default,
}


class EmulatedTensor(torch.Tensor):
    """A tensor on the emulated device, backed by ``self._elem`` on the CPU."""

    _elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor, index: int) -> EmulatedTensor:
        state.touch()
        # A conjugate or negative view (``x.conj()``, its ``.imag``) is a bit on the tensor
        # that torch's Conjugate and Negative keys read before the Python key: the bit goes
        # on the wrapper, where they see it, and ``_elem`` keeps the plain data below it
        # (``value_of`` puts the bits back for the CPU kernels).
        conj, neg = elem.is_conj(), elem.is_neg()
        if conj:
            elem = elem.conj()  # conj of a conjugate view clears the bit: a view, no copy
        if neg:
            elem = torch._neg_view(elem)
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=torch.device(state.name, index),
            requires_grad=elem.requires_grad,
        )
        r._elem = elem
        if conj:
            torch._C._set_conj(r, True)
        if neg:
            torch._C._set_neg(r, True)
        memory.track(r, elem, index)
        return r

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # torch.Tensor's own signature, which object's lacks
        # Printing reads device memory: one sync at the user's print, no more.
        record_sync("print")
        with quiet():
            text = super().__repr__(tensor_contents=tensor_contents)  # type: ignore[call-arg]  # the same
        # torch names subclasses in the prefix; a real device tensor prints "tensor(".
        prefix = f"{type(self).__name__}("
        if not text.startswith(prefix):
            return text
        shift = len(prefix) - len("tensor(")
        lines = text[len(prefix) :].split("\n")
        body = [lines[0]] + [ln[shift:] if ln[:shift].isspace() else ln for ln in lines[1:]]
        return "tensor(" + "\n".join(body)

    def __format__(self, format_spec: str) -> str:
        # torch.Tensor formats only exact Tensors' scalars by value; do the same here.
        if self.dim() == 0:
            return self.item().__format__(format_spec)
        return super().__format__(format_spec)

    def tolist(self) -> Any:
        """Copy to host (a sync) and return nested Python lists."""
        record_sync("tolist")
        record_transfer("d2h", _nbytes(self._elem))
        return value_of(self).tolist()

    def numpy(self, *, force: bool = False) -> Any:
        """Refuse, as a real accelerator tensor does: numpy needs host memory."""
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. "
            "Use Tensor.cpu() to copy the tensor to host memory first."
        )

    def __array__(self, dtype: Any = None) -> Any:
        return self.numpy()

    def __reduce_ex__(self, proto: Any) -> Any:
        """Pickle as torch pickles any storage-less PrivateUse1 tensor.

        ``torch.Tensor.__reduce_ex__`` would record this class and its ``_elem``;
        a real device tensor is saved as a CPU copy plus its device string
        (``torch._utils._rebuild_device_tensor_from_cpu_tensor``), which
        ``torch.load(..., map_location=...)`` and ``weights_only=True`` accept.
        """
        if getattr(self, "_is_param", False):
            # nn.Parameter of a wrapper subclass is the subclass flagged _is_param.
            data = self.detach()
            return (torch._utils._rebuild_parameter, (data, self.requires_grad, OrderedDict()))
        # torch.Tensor's own check (no storage) is False for wrapper subclasses.
        return (
            torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (self.detach().cpu(), self.dtype, str(self.device), self.requires_grad),
        )

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]  # torch types it as its disabled stand-in; the protocol takes cls and func
        cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        return dispatch(func, args, kwargs or {})


def value_of(t: EmulatedTensor) -> torch.Tensor:
    """The CPU tensor a device tensor stands for: its data with its conjugate and negative
    bits (views, no copy)."""
    elem = t._elem
    if t.is_conj():
        elem = elem.conj()
    if t.is_neg():
        elem = torch._neg_view(elem)
    return elem


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _device_of(flat: list[Any], func: Any, args: tuple, kwargs: dict) -> int | None:
    """Index of the device the op runs on; raise PyTorch's error on a mix."""
    index: int | None = None
    cpu = False
    for a in flat:
        if isinstance(a, EmulatedTensor):
            i = a.device.index
            if index is not None and i != index:
                _mismatch(func, args, kwargs)
            index = i
        elif isinstance(a, torch.Tensor) and a.dim() > 0:
            cpu = True
    if cpu and index is not None and func not in _MIXED_DEVICE_OK:
        _mismatch(func, args, kwargs)
    return index


def _mismatch(func: Any, args: tuple, kwargs: dict) -> None:
    """Raise the device-mismatch error torch 2.13 raises for the same op on CUDA.

    Pointwise ops and reductions check devices in TensorIterator: "... but found
    at least two devices, <first non-CPU device> and <the other>!". Other ops check
    in their generated wrapper (aten/src/ATen/core/adaption.cpp), argument by
    argument in schema order: "... but got <arg> is on <device>, different from
    other tensors on <first tensor's device> (when checking argument in method
    wrapper_<Backend>_<op>)". CPU scalars (0-dim) are accepted, as on CUDA.
    """
    named: list[tuple[str, torch.Tensor]] = []
    schema = func._schema.arguments
    for i, arg in enumerate(schema):
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        items = value if isinstance(value, list | tuple) else [value]
        named += [(arg.name, t) for t in items if isinstance(t, torch.Tensor)]
    tensors = [(n, t) for n, t in named if not (t.device.type == "cpu" and t.dim() == 0)]
    prefix = "Expected all tensors to be on the same device, but "
    if (
        torch.Tag.pointwise in func.tags
        or torch.Tag.reduction in func.tags
        or (func.__name__.startswith("_foreach_"))
    ):
        common = next((t.device for _, t in tensors if t.device.type != "cpu"), None)
        other = next(t.device for _, t in tensors if t.device != common)
        raise RuntimeError(f"{prefix}found at least two devices, {common} and {other}!")
    common = tensors[0][1].device
    name, bad = next((n, t) for n, t in tensors if t.device != common)
    raise RuntimeError(
        f"{prefix}got {name} is on {bad.device}, different from other tensors on {common} "
        f"(when checking argument in method wrapper_PrivateUse1_{func.__name__.split('.')[0]})"
    )


# Ops with no CPU kernel whose behaviour on the real device is not known: refused by name,
# so a port that calls one does not verify here and then fail (or not) on the hardware.
NOT_EMULATED = {
    aten.record_stream.default: (
        "Tensor.record_stream is not emulated: the target's streams are placeholders (one "
        "ordered queue) and its runtime does not document record_stream; remove the call "
        "(see `torchport rules TPT003`)"
    ),
}


@functools.cache
def refused_ops(device: str) -> dict[Any, str]:
    """The ops ``device`` refuses, each with its error: those not emulated on any device,
    and those the real device lacks (``device_only_ops.refusals``). Both emulators refuse
    these, the Python one here, the native one by registration (native/register.py)."""
    return {**NOT_EMULATED, **device_only_ops.refusals(device)}


def dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``func`` on the CPU tensors behind ``args`` and rewrap the results."""
    if state.bad_fork:
        state.touch()  # raises TorchTPU's fork error
    if (refused := refused_ops(state.name).get(func)) is not None:
        raise NotImplementedError(refused)
    flat, _ = tree_flatten((args, kwargs))
    index = _device_of(flat, func, args, kwargs)

    # A device= argument decides where the result lives (``.to``, ``*_like``).
    to_host = False
    target = kwargs.get("device")
    if target is not None:
        target = torch.device(target)
        if target.type == state.name:
            index = state.check_index(target.index)
            kwargs = {**kwargs, "device": torch.device("cpu")}
        elif target.type == "cpu":
            to_host = True

    if kwargs.get("generator") is not None:  # random ops on device tensors
        kwargs = {**kwargs, "generator": generator.for_device_op(kwargs["generator"])}

    wrappers: dict[int, EmulatedTensor] = {}

    def unwrap(x: Any) -> Any:
        if not isinstance(x, EmulatedTensor):
            return x
        value = value_of(x)
        wrappers[id(value)] = x  # an in-place op returns it: its wrapper is the answer
        return value

    cpu_args, cpu_kwargs = tree_map(unwrap, args), tree_map(unwrap, kwargs)
    if func in precision.OPS:  # float32 matmuls in TorchTPU's bfloat16 passes
        out = precision.run(func, cpu_args, cpu_kwargs)
    elif func is aten._fused_sdp_choice.default and precision.sdp_math(cpu_args[0]):
        out = precision.SDP_MATH
    elif func in device_only_ops.KERNELS:  # no CPU kernel in torch: the emulator's own
        out = device_only_ops.KERNELS[func](*cpu_args, **cpu_kwargs)
    else:
        out = func(*cpu_args, **cpu_kwargs)

    # float64 is slow or missing on TPU/Trainium: flag ops reading or making it.
    float64 = any(
        isinstance(a, torch.Tensor) and a.dtype == torch.float64
        for a in (*flat, *tree_flatten(out)[0])
    )
    record_op(str(func.overloadpacket.__name__), float64)

    if func is aten._local_scalar_dense.default:
        record_sync("item")
        return out
    if func is aten.copy_.default:
        dst, src = args[0], args[1]
        if isinstance(dst, EmulatedTensor) and not isinstance(src, EmulatedTensor):
            record_transfer("h2d", _nbytes(src))
        elif not isinstance(dst, EmulatedTensor) and isinstance(src, EmulatedTensor):
            record_sync("copy_to_host")
            record_transfer("d2h", _nbytes(src))
    if to_host:
        record_sync("to_cpu")
        record_transfer("d2h", _nbytes(out))
        return out
    if index is None:
        index = state.current_index()

    def wrap(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and not isinstance(x, EmulatedTensor):
            # In-place and out= ops return their input: give back its wrapper.
            same = wrappers.get(id(x))
            if same is None:
                return EmulatedTensor(x, index)
            if same.shape != x.shape or (x.layout == torch.strided and same.stride() != x.stride()):
                _sync_metadata(same)  # resize_, t_, unsqueeze_, out= resized...
            return same
        return x

    return tree_map(wrap, out)


_PYTHON_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
_META_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)


def _sync_metadata(wrapper: EmulatedTensor) -> None:
    """Give ``wrapper`` the sizes and strides its CPU tensor got from an in-place op.

    A wrapper's metadata is fixed at creation; ops that change a tensor's shape in
    place (``resize_``, ``t_``, ``unsqueeze_``, an ``out=`` tensor resized) change
    only the CPU tensor inside. The wrapper's placeholder storage uses the meta
    allocator, so the Meta kernel of ``set_`` (below the Python key) can set the
    wrapper's own sizes and strides, growing that placeholder if needed.
    """
    elem = wrapper._elem
    if elem.layout != torch.strided:
        return  # sparse_resize_ and friends: the wrapper keeps its creation shape
    with torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEY), torch._C._DisableTorchDispatch():
        storage = torch.Tensor.untyped_storage(wrapper)
        aten.set_.source_Storage_storage_offset.redispatch(
            _META_KEY, wrapper, storage, elem.storage_offset(), elem.size(), elem.stride()
        )


def to_device(t: torch.Tensor, index: int) -> EmulatedTensor:
    """Wrap a fresh CPU tensor as a device tensor (used by factory kernels)."""
    return EmulatedTensor(t, index)
