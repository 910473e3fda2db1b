"""Install the native (C++) emulator as torch's PrivateUse1 backend in this process.

The C++ library (emulator.cpp) brings the device's allocator, guard, hooks, the few
explicit kernels and the boxed fallback; this module names the device, routes to the
fallback the ops that would otherwise run a device-generic composite, and installs the
parts of the Python emulator that are not tied to its tensor subclass: the device
module (``torch.tpu``), torch.accelerator, generators, memory statistics, CUDA-use
records, torch.compile, torch.distributed, pinning and the counters' Python side.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import types
from pathlib import Path
from typing import Any

import torch

from .. import device_only_ops, torchtpu_facts, tpu_launch
from ..emulator import backend, generator, precision, serialization, state
from ..emulator.counters import record_sync, record_transfer, reset
from ..emulator.tensor import _MIXED_DEVICE_OK, refused_ops
from .build import MODULE

ROUTED = "routed-ops.json"
_LIBRARIES: list[torch.library.Library] = []  # kept alive: dropping one unregisters its kernels


def load(library: Path) -> types.ModuleType:
    """Import the built extension from ``library`` (a ``.so`` made by build.py)."""
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(library))
    spec = importlib.util.spec_from_file_location(MODULE, str(library), loader=loader)
    if spec is None:
        raise ImportError(f"cannot load the native emulator from {library}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _qualified(op: Any) -> str:
    """``aten::index.Tensor`` (an empty overload name keeps its dot: ``aten::copy_.``)."""
    return f"{op._schema.name}.{op._schema.overload_name}"


def routed_ops() -> tuple[list[str], list[str]]:
    """Ops whose PrivateUse1 (and SparsePrivateUse1) kernel must be the fallback, i.e.
    the CPU (SparseCPU) kernel itself.

    A CompositeExplicitAutograd(NonFunctional) kernel fills the PrivateUse1 slot of an
    op that also has a CPU kernel: ``add.Tensor`` would become ``empty`` + ``add.out``,
    ``native_layer_norm`` a decomposition, so the device would not run the CPU's
    kernels (benchmarks/cpp_backend/README.md, *Routing*). torch's own PrivateUse1
    kernels of the c10d collectives would hand device tensors to gloo; through the
    fallback gloo gets the CPU tensors over the same memory, as on the Python emulator.
    """
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    composite = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
    dense, sparse = [], []
    for name in torch._C._dispatch_get_all_op_names():
        aten = name.startswith("aten::") and any(has(name, k) for k in composite)
        if has(name, "CPU") and (aten or (name.startswith("c10d::") and has(name, "PrivateUse1"))):
            dense.append(name)
        if aten and has(name, "SparseCPU"):
            sparse.append(name)
    return dense, sparse


def _routed(library: Path) -> tuple[list[str], list[str]]:
    """:func:`routed_ops`, as listed once at build time next to the library (listing
    every op costs a few tenths of a second in each process), else listed now."""
    listed = library.with_name(ROUTED)
    if listed.is_file():
        data = json.loads(listed.read_text(encoding="utf-8"))
        return data["dense"], data["sparse"]
    return routed_ops()


def _register_device_only_ops(name: str) -> None:
    """``device_only_ops.KERNELS`` as the PrivateUse1 kernels of their ops: torch has no
    CPU kernel for them, so the boxed fallback could not run them. Each kernel runs on
    the device tensors, its ops through the fallback. The ops device ``name`` refuses
    (``device_only_ops.refusals``) get no kernel: ``register`` refuses them instead."""
    lib = torch.library.Library("aten", "IMPL")
    refused = device_only_ops.refusals(name)
    for op, kernel in device_only_ops.KERNELS.items():
        if op not in refused:
            lib.impl(op._schema.name.split("::", 1)[1], kernel, "PrivateUse1")
    _LIBRARIES.append(lib)


def _on_sync(kind: str, d2h_bytes: int) -> None:
    """Called by the C++ backend at each host sync (``.item()``, a device-to-host copy)."""
    record_sync(kind)
    if d2h_bytes:
        record_transfer("d2h", d2h_bytes)


def register(name: str, devices: int, library: Path) -> None:
    """Make ``name`` a torch device on a host of ``devices``, run by the C++ backend (a
    process sees ``state.visible(name, devices)`` of them, as on the Python backend)."""
    ext = load(library)
    count = state.visible(name, devices)
    ext.configure(name, count, [_qualified(op) for op in _MIXED_DEVICE_OK], _on_sync)
    ext.set_ordinal_note(state.ordinal_note(name, count))
    if name == "tpu":
        ext.refuse_forked(torchtpu_facts.section("distributed")["fork_error"])
        state.first_use_check = tpu_launch.worker_error
        ext.on_first_use(state.first_use_error)
    ext.route_to_fallback(*_routed(library))
    _register_device_only_ops(name)
    ext.set_precision_hook(precision.qualified_names(), precision.run_by_name)
    for op, message in refused_ops(name).items():
        ext.refuse(_qualified(op), message)
    state.name, state.count, state.host_count, state.native = name, count, devices, ext
    generator.install()
    torch.utils.rename_privateuse1_backend(name)
    module = backend.make_device_module(name)
    torch._register_device_module(name, module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True
    )
    backend.install_shared(name, module)
    serialization.install(native=True)
    reset()
