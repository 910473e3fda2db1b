"""The import hook: stand-in modules when a library is absent, patched entry points when
it is present.

One finder sits at the front of ``sys.meta_path``. For the handful of names it knows it
first asks the other finders; if they find the real module it lets that load (wrapping
the loader for the modules whose dataset entry points it replaces), otherwise it serves
a small module built from this package.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..importhook import PatchingLoader
from . import pretrained

MARK = "__torchport_synthetic__"
VERSION = "0.0+torchport.synthetic"


# The stand-in torchvision's modules (``vision_modules.MODULES``, named here so that
# importing the sandbox does not import torch) and which of them are packages.
TORCHVISION = (
    "torchvision",
    "torchvision.transforms",
    "torchvision.transforms.functional",
    "torchvision.transforms.v2",
    "torchvision.transforms.v2.functional",
    "torchvision.datasets",
    "torchvision.datasets.folder",
    "torchvision.datasets.vision",
    "torchvision.ops",
    "torchvision.io",
    "torchvision.utils",
    "torchvision.models",
)
PACKAGES = frozenset(
    {"torchvision", "torchvision.transforms", "torchvision.transforms.v2"}
    | {"torchvision.datasets", "torchvision.io", "torchvision.models", "torchaudio"}
)


def _torchvision(mod: ModuleType) -> None:
    from . import vision_modules

    vision_modules.MODULES[mod.__name__](mod)


def _torchaudio(mod: ModuleType) -> None:
    mod.__dict__.update(
        __version__=VERSION, datasets=importlib.import_module(f"{mod.__name__}.datasets")
    )


def _torchaudio_datasets(mod: ModuleType) -> None:
    from . import audio

    mod.__dict__.update(audio.DATASETS)


def _datasets(mod: ModuleType) -> None:
    from . import hf

    mod.__dict__.update(
        __version__=VERSION,
        load_dataset=hf.load_dataset,
        Dataset=hf.Dataset,
        DatasetDict=hf.DatasetDict,
    )


def _tiktoken(mod: ModuleType) -> None:
    from . import tokenizer

    mod.__dict__["__version__"] = VERSION
    for name in tokenizer.PUBLIC:
        setattr(mod, name, getattr(tokenizer, name))


def _wandb(mod: ModuleType) -> None:
    from . import experiment_log

    mod.__dict__["__version__"] = VERSION
    for name in experiment_log.PUBLIC:
        setattr(mod, name, getattr(experiment_log, name))


def _torch_six(mod: ModuleType) -> None:
    from . import torch_compat

    torch_compat.build(mod)


STUBS: dict[str, Callable[[ModuleType], None]] = {
    "wandb": _wandb,
    "torch._six": _torch_six,
    **dict.fromkeys(TORCHVISION, _torchvision),
    "torchaudio": _torchaudio,
    "torchaudio.datasets": _torchaudio_datasets,
    "datasets": _datasets,
    "tiktoken": _tiktoken,
}


# -- patches for the real libraries (not exercised where they are not installed) ----


def _patch_torchvision_datasets(mod: ModuleType) -> None:
    from . import vision

    for name, cls in vision.DATASETS.items():
        if hasattr(mod, name):
            setattr(mod, name, type(name, (cls,), {"as_pil": True}))


def _patch_torchaudio_datasets(mod: ModuleType) -> None:
    from . import audio

    for name, cls in audio.DATASETS.items():
        if hasattr(mod, name):
            setattr(mod, name, cls)


def _patch_datasets(mod: ModuleType) -> None:
    from . import hf

    def load_dataset(
        path: str, name: str | None = None, *_: Any, split: Any = None, **__: Any
    ) -> Any:
        return hf.load(path, name, split, mod.Dataset.from_dict, mod.DatasetDict)

    mod.__dict__["load_dataset"] = load_dataset


def _patch_tiktoken(mod: ModuleType) -> None:
    from . import tokenizer

    get_encoding = tokenizer.falling_back(mod.get_encoding)
    mod.__dict__.update(
        get_encoding=get_encoding,
        encoding_for_model=lambda model: get_encoding(mod.encoding_name_for_model(model)),
    )


def _patch_torchvision_extension(mod: ModuleType) -> None:
    if not mod._has_ops():
        from . import vision_ops

        vision_ops.define()
        # ops.nms asks first; an operator still missing fails where it is called
        mod.__dict__["_assert_has_ops"] = lambda: None


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    **pretrained.PATCHES,
    "torchvision.extension": _patch_torchvision_extension,
    "torchvision.datasets": _patch_torchvision_datasets,
    "torchaudio.datasets": _patch_torchaudio_datasets,
    "datasets": _patch_datasets,
    "tiktoken": _patch_tiktoken,
}


class _StubLoader(importlib.abc.Loader):
    def __init__(self, build: Callable[[ModuleType], None]) -> None:
        self.build = build

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        setattr(module, MARK, True)
        self.build(module)


class SyntheticFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in STUBS and name not in PATCHES:
            return None
        parent = sys.modules.get(name.rpartition(".")[0]) if "." in name else None
        if parent is not None and getattr(parent, MARK, False):
            return self._stub(name) if name in STUBS else None
        real = self._real_spec(name, path, target)
        if real is None:
            return self._stub(name) if name in STUBS else None
        if name in PATCHES and real.loader is not None:
            real.loader = PatchingLoader(real.loader, PATCHES[name])
        return real

    def _real_spec(self, name: str, path: Any, target: Any) -> Any:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                return spec
        return None

    @staticmethod
    def _stub(name: str) -> importlib.machinery.ModuleSpec:
        is_pkg = name in PACKAGES or "." not in name
        return importlib.machinery.ModuleSpec(
            name, _StubLoader(STUBS[name]), origin="torchport-synthetic", is_package=is_pkg
        )


_FINDER = SyntheticFinder()


def install() -> SyntheticFinder:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return _FINDER


def uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
