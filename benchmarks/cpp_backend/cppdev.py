"""Build (JIT, cached) and activate the C++ PrivateUse1 backend ``cppdev``.

    import cppdev; ext = cppdev.activate("alias")   # or "copy"
    x = torch.ones(3).to("cppdev")

One PrivateUse1 backend per process: never activate it next to the Python emulator.
"""

from __future__ import annotations

import atexit
import os
import time
import types
from pathlib import Path

import torch
from torch.utils import cpp_extension

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"  # ignored by git (`build/` in .gitignore)
MODES = {"alias": 0, "copy": 1}
_ext = None


def load(verbose: bool = False):
    """Compile cppdev.cpp once (cached under build/) and return the extension module."""
    global _ext
    if _ext is None:
        BUILD.mkdir(exist_ok=True)
        os.environ.setdefault("MAX_JOBS", "1")
        _ext = cpp_extension.load(
            name="cppdev_ext",
            sources=[str(HERE / "cppdev.cpp")],
            build_directory=str(BUILD),
            extra_cflags=["-O2"],
            verbose=verbose,
        )
    return _ext


def _device_module() -> types.ModuleType:
    mod = types.ModuleType("torch.cppdev")
    mod.is_available = lambda: True
    mod.device_count = lambda: 1
    mod.current_device = lambda: 0
    mod.set_device = lambda device: None
    mod.synchronize = lambda device=None: None
    mod.is_initialized = lambda: True
    mod._is_in_bad_fork = lambda: False
    mod.manual_seed = lambda seed: None
    mod.manual_seed_all = lambda seed: None
    mod.get_rng_state = lambda device=None: torch.get_rng_state()
    mod.set_rng_state = lambda state, device=None: torch.set_rng_state(state)
    mod.get_amp_supported_dtype = lambda: [torch.bfloat16, torch.float16]
    return mod


def cpu_kernel_ops() -> list[str]:
    """aten ops with a CPU kernel that PrivateUse1 would otherwise run as a composite.

    A CompositeExplicitAutograd(NonFunctional) kernel fills the PrivateUse1 slot:
    add.Tensor would become empty + add.out, native_layer_norm a batch_norm-based
    decomposition. A real backend registers its own kernels for these; here they
    go to the fallback, i.e. to the CPU kernel itself.
    """
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    composite = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
    return [
        name.removeprefix("aten::")
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::") and has(name, "CPU") and any(has(name, k) for k in composite)
    ]


def activate(mode: str = "alias", route: bool = True) -> types.ModuleType:
    """Register ``cppdev`` as the PrivateUse1 backend of this process.

    mode: "alias" (zero-copy fallback) or "copy" (at::native::cpu_fallback).
    route: send ops that have a CPU kernel to it (see cpu_kernel_ops).
    """
    ext = load()
    ext.set_mode(MODES[mode])
    if torch._C._get_privateuse1_backend_name() != "cppdev":
        if route:
            ext.route_to_fallback(cpu_kernel_ops())
        torch.utils.rename_privateuse1_backend("cppdev")
        torch._register_device_module("cppdev", _device_module())
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_storage=True
        )
        ext.register_hooks()
        # Backward of device tensors runs on torch's autograd device thread, which can
        # drop its last reference to the finished graph task (and take the GIL to do
        # so) while the interpreter is shutting down: an intermittent abort at exit.
        # Give it a moment first.
        atexit.register(time.sleep, 0.05)
    return ext


def self_check(mode: str = "alias") -> None:
    """A few semantics the fallback has to get right; raises AssertionError if not."""
    ext = activate(mode)
    dev = "cppdev"
    x = torch.arange(6.0).reshape(2, 3)
    d = x.to(dev)
    assert d.device.type == dev and torch.equal(d.cpu(), x)
    assert torch.equal((d * 2 + 1).t().cpu(), (x * 2 + 1).t())  # fallback + views
    v = d.view(3, 2)
    v.add_(1)  # in-place through a view must reach the base
    assert torch.equal(d.cpu(), x + 1) and v._base is d
    r = d[:, 1]  # a view made by a CPU kernel (select), mapped back to device memory
    r.mul_(10)
    assert d.cpu()[0, 1].item() == 20.0
    out = torch.empty(0, device=dev)
    torch.add(d, d, out=out)  # out= that resizes the output
    assert out.shape == (2, 3) and torch.equal(out.cpu(), 2 * d.cpu())
    e = torch.empty(2, device=dev).resize_(4, 5)
    assert e.shape == (4, 5) and e.device.type == dev
    s = torch.empty(0, device=dev).set_(d)
    assert s.data_ptr() == d.data_ptr()
    assert torch.arange(4, device=dev).cpu().tolist() == [0, 1, 2, 3]  # factory via fallback
    assert d.sum().item() == 84.0  # [[1, 20, 3], [4, 50, 6]]; _local_scalar_dense
    w = torch.randn(4, 4, requires_grad=True)
    wd = w.detach().to(dev).requires_grad_()
    (wd @ wd).relu().sum().backward()
    (w @ w).relu().sum().backward()
    assert wd.grad.device.type == dev and torch.equal(wd.grad.cpu(), w.grad)
    print(f"self-check ({mode}) ok; {ext.fallback_calls()} fallback calls")


if __name__ == "__main__":
    import sys

    load(verbose=True)
    print("built in", BUILD)
    self_check(sys.argv[1] if len(sys.argv) > 1 else "alias")
