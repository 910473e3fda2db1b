"""Multi-GPU plumbing made CPU-valid: NCCL→gloo, DDP/DataParallel device ids, SyncBatchNorm.

A CPU-only torch has no NCCL; gloo runs the same collectives on CPU tensors. DDP given
`device_ids=[rank]` on a CPU module raises, so the ids are dropped (CPU DDP wants None).
`nn.parallel.data_parallel(m, x, device_ids)` insists on cuda:0 parameters, so it calls
`m(x)` (one emulated GPU: no scatter). `SyncBatchNorm` synchronises its statistics
across the processes as on GPUs: torch refuses it CPU input and has its ops
(`batch_norm_stats`...) for accelerators only, so the reference CPU, which stands for the
GPU, gets those ops' kernels (`sandbox.device_only_ops`) and a SyncBatchNorm forward that
takes CPU input (`_sync_batch_norm_forward`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.modules._functions import SyncBatchNorm as sync_batch_norm
from torch.nn.parallel import DistributedDataParallel

from .. import device_only_ops, patching
from .recording import record

_LIBRARIES: list[torch.library.Library] = []  # the CPU kernels of device_only_ops, while active


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

    functools.update_wrapper(
        init_process_group, real, assigned=(), updated=()
    )  # sets __wrapped__ only
    return init_process_group


def _make_new_group(real: Any) -> Any:
    def new_group(*args: Any, backend: Any = None, **kwargs: Any) -> Any:
        """torch.distributed.new_group with an NCCL backend mapped to gloo."""
        if backend is not None and "nccl" in str(backend).lower():
            record(f"torch.distributed.new_group(backend={backend!r})")
            backend = "gloo"
        return real(*args, backend=backend, **kwargs)

    functools.update_wrapper(new_group, real, assigned=(), updated=())  # __wrapped__ only
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

    functools.update_wrapper(__init__, real, assigned=(), updated=())  # __wrapped__ only
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


def _make_sync_batch_norm_forward(real: Any) -> Any:
    def forward(self: torch.nn.SyncBatchNorm, input: torch.Tensor) -> torch.Tensor:
        """SyncBatchNorm.forward that synchronises CPU input across the processes as
        torch's does CUDA input (its other cases, batch norm without a group, are torch's)."""
        if (
            input.device.type != "cpu"
            or not self.training
            or not dist.is_available()
            or not dist.is_initialized()
        ):
            return real(self, input)
        group = self.process_group or dist.group.WORLD
        world_size = dist.get_world_size(group)
        if world_size == 1:
            return real(self, input)
        record("SyncBatchNorm.forward")
        self._check_input_dim(input)
        self._check_non_zero_input_channels(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / self.num_batches_tracked.item()
        running = (self.running_mean, self.running_var) if self.track_running_stats else (None,) * 2
        return sync_batch_norm.apply(
            input, self.weight, self.bias, *running, self.eps, momentum, group, world_size
        )

    functools.update_wrapper(forward, real, assigned=(), updated=())  # __wrapped__ only
    return forward


def _passing_sync_batchnorm_handle(self: DistributedDataParallel, module: Any) -> None:
    """DDP's check that SyncBatchNorm layers sit on a GPU: on the reference they are."""


def _register_cpu_kernels() -> None:
    """The accelerator-only batch-norm ops, on the CPU that plays the GPU."""
    if _LIBRARIES:
        return
    lib = torch.library.Library("aten", "IMPL")
    for op, kernel in device_only_ops.KERNELS.items():
        lib.impl(op._schema.name.split("::", 1)[1], kernel, "CPU")
    _LIBRARIES.append(lib)


def uninstall() -> None:
    """Drop the CPU kernels ``install`` registered (the patches are undone by the shim)."""
    while _LIBRARIES:
        _LIBRARIES.pop()._destroy()


def install() -> None:
    """Patch process-group creation and DDP construction for CPU tensors."""
    patching.patch(torch.nn.parallel, "data_parallel", _data_parallel, by="shim.distributed")
    patching.patch(torch.nn.DataParallel, "forward", _data_parallel_forward, by="shim.distributed")
    patching.patch(
        torch.nn.SyncBatchNorm,
        "forward",
        _make_sync_batch_norm_forward(torch.nn.SyncBatchNorm.forward),
        by="shim.distributed",
    )
    patching.patch(
        DistributedDataParallel,
        "_passing_sync_batchnorm_handle",
        _passing_sync_batchnorm_handle,
        by="shim.distributed",
    )
    _register_cpu_kernels()
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
