"""The emulated ``torch.tpu.distributed``: TorchTPU's launch step and the module's other names.

``set_tpu_launch_env`` is emulated on the one host a sandboxed run has (``sandbox.tpu_launch``
holds the step; the host's chips are the emulator's ``--devices``). Of the module's other
public names (the facts' ``[[public]]`` row), ``spmd_safe`` runs the function as it is (it
only lets TorchTPU fuse collectives with the ops around them; the emulator runs op by op) and
the rest raise, naming what to use. A package, so that ``python -m torch.tpu.distributed``
runs its ``__main__``, which prints the step's shell assignments as the wheel's module does.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from typing import Any, TypeVar

from ... import torchtpu_facts, tpu_launch
from .. import state

F = TypeVar("F", bound=Callable[..., Any])


def set_tpu_launch_env(*, nnodes: int | None = None, nproc_per_node: int | None = None) -> None:
    """TorchTPU's launch step, in the parent before workers start: sets the variables every
    rank must agree on where unset (idempotent; never overwrites)."""
    tpu_launch.set_launch_env(state.host_count, nnodes=nnodes, nproc_per_node=nproc_per_node)


def print_launch_env() -> None:
    """``python -m torch.tpu.distributed``: take the step, print its shell assignments."""
    for line in tpu_launch.printed(state.host_count):
        print(line)


def spmd_safe(func: F) -> F:
    """``@torch.tpu.distributed.spmd_safe``: the function, run as it is."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]  # wraps keeps func's signature; its stub says _Wrapped


def _not_emulated(name: str, instead: str) -> NotImplementedError:
    return NotImplementedError(f"torch.tpu.distributed.{name} is not emulated; {instead}")


def topology_aware_mesh(*args: Any, **kwargs: Any) -> Any:
    raise _not_emulated(
        "topology_aware_mesh",
        "build the mesh with torch.distributed.device_mesh.init_device_mesh('tpu', shape).",
    )


_WINDOW = "WindowTpu's peer transfers are TorchTPU's own; emulated collectives need no tuning."


class _DistributedModule(types.ModuleType):
    """The module with TorchTPU's two properties (read and assigned, not called), listing
    TorchTPU's public names."""

    def __dir__(self) -> list[str]:
        return sorted(torchtpu_facts.public_names("torch.tpu.distributed"))

    @property
    def window_num_stripes(self) -> int:
        raise _not_emulated("window_num_stripes", _WINDOW)

    @window_num_stripes.setter
    def window_num_stripes(self, value: int) -> None:
        raise _not_emulated("window_num_stripes", _WINDOW)

    @property
    def window_stripe_chunk_mb(self) -> int:
        raise _not_emulated("window_stripe_chunk_mb", _WINDOW)

    @window_stripe_chunk_mb.setter
    def window_stripe_chunk_mb(self, value: int) -> None:
        raise _not_emulated("window_stripe_chunk_mb", _WINDOW)


def install(name: str) -> types.ModuleType:
    """Make this package the module ``name`` (``torch.tpu.distributed``), which ``import``
    and ``python -m`` then find; the caller makes it an attribute of ``torch.tpu``."""
    module = sys.modules[__name__]
    module.__class__ = _DistributedModule
    sys.modules[name] = module
    return module
