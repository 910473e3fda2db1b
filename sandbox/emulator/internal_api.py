"""TorchTPU's internal device APIs: ``torch.tpu.<name>`` refused from user code.

On torch >= 2.11 (some names >= 2.13), TorchTPU marks ten ``torch.tpu`` device APIs
internal (``torch_tpu/_internal/utils/annotations.py``, ``internal_or_experimental``):
torch itself still calls them through the device module, any other caller gets a
RuntimeError naming the ``torch.accelerator`` replacement. Which names, from which torch,
and their replacements are the wheel's facts (``sandbox.torchtpu_facts.internal_for``).
The caller is judged by its module's name, as TorchTPU does: ``torch``/``torch.*`` and
TorchTPU's own package are the framework, and here the emulator's package stands in for
``torch_tpu``. ``TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS`` (read once, at activation, as the
wheel reads it at import) turns the error into a one-time warning per API.
"""

from __future__ import annotations

import functools
import os
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from .. import torchtpu_facts

_OWN_PACKAGE = __name__.rsplit(".", 1)[0]  # the emulator: TorchTPU's stand-in
_FRAMEWORK = ("torch", "torch_tpu", _OWN_PACKAGE)
_TRUE = ("1", "true", "yes", "on")


def is_framework_module(module: object) -> bool:
    """TorchTPU's ``_is_framework_caller_frame``, by the caller's module name."""
    if not isinstance(module, str):
        return False
    return any(module == pkg or module.startswith(pkg + ".") for pkg in _FRAMEWORK)


def legacy_allowed() -> bool:
    """Whether the environment asks for the warning instead of the error."""
    var = torchtpu_facts.section("environment")["allow_legacy_device_apis"]
    return os.environ.get(var, "").strip().lower() in _TRUE


def _guard(fn: Callable[..., Any], display: str, prefer: str, strict: bool) -> Callable[..., Any]:
    warned = False
    prefix = torchtpu_facts.section("device_module")["internal_warning_prefix"]

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        nonlocal warned
        if (strict or not warned) and not torch.compiler.is_compiling():
            caller = sys._getframe(1).f_globals.get("__name__")
            if not is_framework_module(caller):
                if strict:
                    raise RuntimeError(
                        f"{display} is internal to TorchTPU and can only be called by the "
                        f"PyTorch framework (torch and torch_tpu). Use {prefer} instead."
                    )
                warned = True
                warnings.warn(
                    f"{prefix}{display} is internal to TorchTPU and may change or be "
                    f"removed without notice. Use {prefer} instead.",
                    UserWarning,
                    stacklevel=2,
                )
        return fn(*args, **kwargs)

    return guarded


def guard_module(module: types.ModuleType) -> None:
    """Wrap each internal API of ``module`` (``torch.tpu``) for the installed torch.

    A class (``device``, TorchTPU's ``_DeviceContext``) is guarded at construction, as
    TorchTPU wraps its ``__init__``; its name in the message is the class's.
    """
    strict = not legacy_allowed()
    for name, api in torchtpu_facts.internal_for(torch.__version__).items():
        target = getattr(module, name)
        if isinstance(target, type):
            init = _guard(target.__init__, target.__name__, api.prefer, strict)  # type: ignore[misc]  # the class's own constructor, guarded as TorchTPU's is
            target.__init__ = init  # type: ignore[misc]  # the same
        else:
            setattr(module, name, _guard(target, target.__name__, api.prefer, strict))
