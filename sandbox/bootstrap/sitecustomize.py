"""Started by every Python process of a sandboxed run (the launcher puts this folder
first on PYTHONPATH): when ``TORCHPORT_RUN`` is set, the run's session (mode, seeds,
synthetic data, step budget, result file) starts as soon as the process imports torch.

Nothing but the standard library is imported here, so a child that never touches torch
(a helper script, a tool) pays for a few stat calls, not for torch. A ``sitecustomize``
that the interpreter would otherwise have run is run after this one.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


class _StartOnTorchImport:
    """A meta-path finder that lets torch load normally, then starts the session."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            from torchport.sandbox.session import start_child

            start_child()

        spec.loader.exec_module = exec_module
        return spec


def _run_shadowed_sitecustomize() -> None:
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _import_own_package() -> None:
    """Import torchport's sandbox package from torchport's installation, with the run's
    PYTHONPATH (the program's folders, this one) off the path for that import: a
    repository's own ``torchport/`` package must never stand in for it. Once imported,
    its submodules are found through the package itself, wherever the path points."""
    named = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    saved = sys.path[:]
    sys.path[:] = [p for p in saved if p and os.path.abspath(p) not in named]
    try:
        import torchport.sandbox.pythonpath

        torchport.sandbox.pythonpath.pin_own_package()
    finally:
        sys.path[:] = saved


if os.environ.get("TORCHPORT_RUN"):
    _import_own_package()
    # the dependency overlay after site-packages here too, as in the launcher (light:
    # torchport.sandbox's package imports nothing)
    from torchport.sandbox.pythonpath import place_site_paths

    place_site_paths()
    if "torch" not in sys.modules:
        sys.meta_path.insert(0, _StartOnTorchImport())
_run_shadowed_sitecustomize()
