"""Reference stand-in for NVIDIA apex (optimizers, normalization, amp), NOT the library.

Served as ``apex.optimizers``, ``apex.normalization`` and ``apex.amp`` by torchport's
reference run when apex is not installed (its fused kernels need a CUDA GPU), so that the
ORIGINAL program runs on the CPU and gives reference numbers:

- ``FusedAdam`` is Adam with apex's semantics (decoupled weight decay, i.e. AdamW, when
  ``adam_w_mode``, else L2; optional bias correction), computed as ``torch.optim.AdamW`` /
  ``torch.optim.Adam`` compute it; ``FusedSGD`` is ``torch.optim.SGD``. ``FusedLAMB`` and
  the other fused optimizers have no stand-in and say so.
- ``FusedLayerNorm`` is ``torch.nn.LayerNorm``, ``FusedRMSNorm`` is ``torch.nn.RMSNorm``
  (same parameters, same ``state_dict``).
- ``amp`` is mixed precision turned off, like the shim's CUDA autocast: ``initialize``
  returns the models and optimizers unchanged (fp32) and ``scale_loss`` yields the loss.
- ``parallel.DistributedDataParallel`` is torch's (apex's bucketing and stream settings
  change when the all-reduce happens, not its result); ``SyncBatchNorm`` is batch norm
  with statistics all-reduced across the process group when there is one, plain batch
  norm otherwise, as apex's is; ``convert_syncbn_model`` swaps it in, keeping the state.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from .usage import record

OPTIMIZERS = ("FusedAdam", "FusedLAMB", "FusedSGD")
NORMALIZATION = ("FusedLayerNorm", "FusedRMSNorm", "MixedFusedLayerNorm", "MixedFusedRMSNorm")
AMP = (
    "disable_casts",
    "float_function",
    "half_function",
    "initialize",
    "load_state_dict",
    "master_params",
    "promote_function",
    "register_float_function",
    "register_half_function",
    "register_promote_function",
    "scale_loss",
    "state_dict",
)

PARALLEL = ("DistributedDataParallel", "SyncBatchNorm", "convert_syncbn_model")

_LOW_PRECISION = (torch.float16, torch.bfloat16)


# -- apex.optimizers ---------------------------------------------------------------------


class FusedAdam(torch.optim.Optimizer):
    """apex.optimizers.FusedAdam: AdamW when ``adam_w_mode`` (the default), else Adam with
    L2 weight decay; without ``bias_correction`` the moments are used as they are.

    The update is ``torch.optim.AdamW`` / ``Adam``'s (same operations in the same order,
    so the same numbers); moments are kept in fp32 for half-precision parameters, as
    apex keeps them. State: ``exp_avg`` and ``exp_avg_sq`` per parameter, ``step`` per
    group, as apex's.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        adam_w_mode: bool = True,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        set_grad_none: bool = True,
        capturable: bool = False,
        use_master: bool = False,
    ) -> None:
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        record("apex.optimizers.FusedAdam")
        defaults = dict(
            lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay
        )
        super().__init__(params, defaults)
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)

    @torch.no_grad()
    def step(
        self,
        closure=None,
        grads=None,
        output_params=None,
        scale=None,
        grad_norms=None,
        grad_scaler=None,
    ):
        if any(x is not None for x in (grads, output_params, scale, grad_norms)):
            raise RuntimeError(
                "FusedAdam has been updated.  Simply initialize it identically to "
                "torch.optim.Adam, and call step() with no arguments."
            )
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
            group["step"] = group.get("step", 0) + 1
            if group["bias_correction"]:
                bias_correction1 = 1 - beta1 ** group["step"]
                bias_correction2 = 1 - beta2 ** group["step"]
            else:
                bias_correction1 = bias_correction2 = 1.0
            step_size = lr / bias_correction1
            bias_correction2_sqrt = bias_correction2**0.5
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError(
                        "FusedAdam does not support sparse gradients, please consider "
                        "SparseAdam instead"
                    )
                compute = torch.float32 if p.dtype in _LOW_PRECISION else p.dtype
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p, dtype=compute)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=compute)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                param = p if p.dtype == compute else p.to(compute)
                grad = p.grad.to(compute)
                if weight_decay != 0:
                    if self.adam_w_mode:
                        param.mul_(1 - lr * weight_decay)
                    else:
                        grad = grad.add(param, alpha=weight_decay)
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
                param.addcdiv_(exp_avg, denom, value=-step_size)
                if param is not p:
                    p.copy_(param)
        return loss


class FusedSGD(torch.optim.SGD):
    """apex.optimizers.FusedSGD: ``torch.optim.SGD`` (weight decay before momentum)."""

    def __init__(
        self,
        params,
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        wd_after_momentum: bool = False,
        materialize_master_grads: bool = True,
        set_grad_none: bool = False,
    ) -> None:
        if wd_after_momentum:
            raise NotImplementedError(
                "torchport's reference stand-in for apex.optimizers.FusedSGD does not cover "
                "wd_after_momentum=True"
            )
        record("apex.optimizers.FusedSGD")
        super().__init__(
            params,
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            foreach=False,
        )
        self.set_grad_none = set_grad_none

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        super().zero_grad(set_to_none=self.set_grad_none if set_to_none is None else set_to_none)


class FusedLAMB:
    """apex.optimizers.FusedLAMB has no reference stand-in: building one says so."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "apex is not installed and torchport's reference stand-in for apex does not "
            "cover apex.optimizers.FusedLAMB (only FusedAdam and FusedSGD): the original "
            "program cannot be run for reference numbers on this machine"
        )


# -- apex.normalization ------------------------------------------------------------------


class FusedLayerNorm(torch.nn.LayerNorm):
    """apex.normalization.FusedLayerNorm: ``torch.nn.LayerNorm``."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        memory_efficient: bool = False,
    ) -> None:
        record(f"apex.normalization.{type(self).__name__}")
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)
        self.memory_efficient = memory_efficient


class FusedRMSNorm(torch.nn.RMSNorm):
    """apex.normalization.FusedRMSNorm: ``torch.nn.RMSNorm`` (x / sqrt(mean(x^2) + eps))."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        memory_efficient: bool = False,
    ) -> None:
        record(f"apex.normalization.{type(self).__name__}")
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)
        self.memory_efficient = memory_efficient


class MixedFusedLayerNorm(FusedLayerNorm):
    """Layer norm whose output has the parameters' dtype (computed in fp32)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, *, memory_efficient=False, **kwargs):
        if not kwargs.pop("elementwise_affine", True):
            raise RuntimeError("MixedFusedLayerNorm does not support `elementwise_affine = False`")
        super().__init__(normalized_shape, eps, True, memory_efficient)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out = F.layer_norm(
            input.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps
        )
        return out.to(self.weight.dtype)


class MixedFusedRMSNorm(FusedRMSNorm):
    """RMS norm whose output has the parameters' dtype (computed in fp32)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, *, memory_efficient=False, **kwargs):
        if not kwargs.pop("elementwise_affine", True):
            raise RuntimeError("MixedFusedRMSNorm does not support `elementwise_affine = False`")
        super().__init__(normalized_shape, eps, True, memory_efficient)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out = F.rms_norm(input.float(), self.normalized_shape, self.weight.float(), self.eps)
        return out.to(self.weight.dtype)


# -- apex.amp: mixed precision off -------------------------------------------------------


def initialize(
    models,
    optimizers=None,
    enabled: bool = True,
    opt_level: str = "O1",
    cast_model_type=None,
    patch_torch_functions=None,
    keep_batchnorm_fp32=None,
    master_weights=None,
    loss_scale=None,
    cast_model_outputs=None,
    num_losses: int = 1,
    verbosity: int = 1,
    min_loss_scale=None,
    max_loss_scale=2.0**24,
):
    """The models (and optimizers) unchanged: the reference run computes in fp32."""
    record("apex.amp.initialize")
    return models if optimizers is None else (models, optimizers)


@contextlib.contextmanager
def scale_loss(
    loss,
    optimizers,
    loss_id: int = 0,
    model=None,
    delay_unscale: bool = False,
    delay_overflow_check: bool = False,
) -> Iterator[Any]:
    """Yields the loss itself (a loss scale of 1, gradients left as they are)."""
    record("apex.amp.scale_loss")
    yield loss


def master_params(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    """The optimizer's parameters (in fp32 they are their own master copies)."""
    record("apex.amp.master_params")
    for group in optimizer.param_groups:
        yield from group["params"]


def state_dict(destination=None) -> dict[str, Any]:
    record("apex.amp.state_dict")
    out = {} if destination is None else destination
    out["loss_scaler0"] = {"loss_scale": 1.0, "unskipped": 0}
    return out


def load_state_dict(state_dict: dict[str, Any]) -> None:
    record("apex.amp.load_state_dict")


@contextlib.contextmanager
def disable_casts() -> Iterator[None]:
    yield


def half_function(fn):
    return fn


def float_function(fn):
    return fn


def promote_function(fn):
    return fn


def register_half_function(module, name) -> None:
    pass


def register_float_function(module, name) -> None:
    pass


def register_promote_function(module, name) -> None:
    pass


# -- apex.parallel -----------------------------------------------------------------------


def DistributedDataParallel(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """apex.parallel.DistributedDataParallel: torch's, which averages the same gradients.

    Its other arguments only schedule the all-reduce (bucket sizes, streams, delaying it to
    the end of backward); ``gradient_average=False`` (a sum) has no torch setting."""
    record("apex.parallel.DistributedDataParallel")
    if not kwargs.get("gradient_average", True):
        raise NotImplementedError(
            "torchport's reference stand-in for apex.parallel.DistributedDataParallel "
            "averages gradients as torch's does; gradient_average=False is not covered"
        )
    return torch.nn.parallel.DistributedDataParallel(module)


class SyncBatchNorm(torch.nn.SyncBatchNorm):
    """apex.parallel.SyncBatchNorm: torch's, which syncs the statistics under a process
    group and is plain batch norm (any input rank) without one, as apex's falls back."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any = None,
        channel_last: bool = False,
        fuse_relu: bool = False,
    ):
        if channel_last or fuse_relu:
            raise NotImplementedError(
                "torchport's reference stand-in for apex.parallel.SyncBatchNorm does not "
                "cover channel_last or fuse_relu"
            )
        super().__init__(num_features, eps, momentum, affine, track_running_stats, process_group)
        record("apex.parallel.SyncBatchNorm")


def convert_syncbn_model(
    module: torch.nn.Module, process_group: Any = None, channel_last: bool = False
) -> torch.nn.Module:
    """Every batch norm of ``module`` replaced by a SyncBatchNorm holding its state
    (torch's ``convert_sync_batchnorm``, which apex's mirrors)."""
    if channel_last:
        raise NotImplementedError(
            "torchport's reference stand-in for apex.parallel.convert_syncbn_model does not "
            "cover channel_last"
        )
    record("apex.parallel.convert_syncbn_model")
    return torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
