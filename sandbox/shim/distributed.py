"""Multi-GPU plumbing made CPU-valid: NCCL→gloo, DDP/DataParallel device ids, SyncBatchNorm.

A CPU-only torch has no NCCL; gloo runs the same collectives on CPU tensors. DDP given
`device_ids=[rank]` on a CPU module raises, so the ids are dropped (CPU DDP wants None).
`nn.parallel.data_parallel(m, x, device_ids)` insists on cuda:0 parameters, so it calls
`m(x)` (one emulated GPU: no scatter). `SyncBatchNorm.convert_sync_batchnorm` keeps the
BatchNorm layers (SyncBatchNorm refuses CPU input); with one process that is the same
computation, with several the batch statistics are per process.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .. import patching
from .recording import record


def _cpu_backend(backend: Any) -> Any:
    """gloo for any NCCL (or mixed "cuda:nccl,cpu:gloo") or unspecified backend."""
    if backend is None or "nccl" in str(backend).lower():
        return "gloo"
    return backend


def _make_init_process_group(real: Any) -> Any:
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        """torch.distributed.init_process_group, NCCL mapped to gloo, CUDA device_id dropped."""
        if backend is not None and "nccl" in str(backend).lower():
            record(f"torch.distributed.init_process_group({backend!r})")
        if kwargs.pop("device_id", None) is not None:
            record("torch.distributed.init_process_group(device_id=...)")
        return real(_cpu_backend(backend), *args, **kwargs)

    init_process_group.__wrapped__ = real  # type: ignore[attr-defined]
    return init_process_group


def _make_new_group(real: Any) -> Any:
    def new_group(*args: Any, backend: Any = None, **kwargs: Any) -> Any:
        """torch.distributed.new_group with an NCCL backend mapped to gloo."""
        if backend is not None and "nccl" in str(backend).lower():
            record(f"torch.distributed.new_group(backend={backend!r})")
            backend = "gloo"
        return real(*args, backend=backend, **kwargs)

    new_group.__wrapped__ = real  # type: ignore[attr-defined]
    return new_group


def _make_ddp_init(real: Any) -> Any:
    def __init__(self: DistributedDataParallel, module: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("device_ids") is not None or kwargs.get("output_device") is not None:
            record("DistributedDataParallel(device_ids=...)")
        kwargs.pop("device_ids", None)
        kwargs.pop("output_device", None)
        if args:  # positional device_ids / output_device
            record("DistributedDataParallel(device_ids=...)")
            args = (None, None, *args[2:])
        real(self, module, *args, **kwargs)

    __init__.__wrapped__ = real  # type: ignore[attr-defined]
    return __init__


def _data_parallel(
    module: Any,
    inputs: Any,
    device_ids: Any = None,
    output_device: Any = None,
    dim: int = 0,
    module_kwargs: Any = None,
) -> Any:
    """torch.nn.parallel.data_parallel on one emulated GPU: just the module's forward."""
    record("torch.nn.parallel.data_parallel")
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    return module(*inputs, **(module_kwargs or {}))


def _data_parallel_forward(self: torch.nn.DataParallel, *inputs: Any, **kwargs: Any) -> Any:
    """DataParallel on the reference's GPUs, which are all the CPU: the module's own
    forward (the sum of per-GPU gradients is the full batch's gradient anyway)."""
    record("torch.nn.DataParallel.forward")
    return self.module(*inputs, **kwargs)


def _convert_sync_batchnorm(module: Any, process_group: Any = None) -> Any:
    record("SyncBatchNorm.convert_sync_batchnorm")
    return module


def install() -> None:
    """Patch process-group creation and DDP construction for CPU tensors."""
    patching.patch(torch.nn.parallel, "data_parallel", _data_parallel, by="shim.distributed")
    patching.patch(torch.nn.DataParallel, "forward", _data_parallel_forward, by="shim.distributed")
    patching.patch(
        torch.nn.SyncBatchNorm,
        "convert_sync_batchnorm",
        staticmethod(_convert_sync_batchnorm),
        by="shim.distributed",
    )
    if not dist.is_available():
        return
    c10d = dist.distributed_c10d
    init = _make_init_process_group(c10d.init_process_group)
    new_group = _make_new_group(c10d.new_group)
    for owner in (dist, c10d):
        patching.patch(owner, "init_process_group", init, by="shim.distributed")
        patching.patch(owner, "new_group", new_group, by="shim.distributed")
    patching.patch(
        DistributedDataParallel,
        "__init__",
        _make_ddp_init(DistributedDataParallel.__init__),
        by="shim.distributed",
    )
