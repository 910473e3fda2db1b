"""The stand-in ``torchvision`` as a package: each submodule a library imports, by name.

A library that finds torchvision importable (``importlib.util.find_spec``) goes on to
``import torchvision.transforms.functional as F``, ``from torchvision.transforms import
InterpolationMode``, ``torchvision.ops``, ``torchvision.utils``; a stand-in that is one flat
module fails it there, in the library, and the verdict blamed the program. :data:`MODULES`
builds every submodule the stand-in serves (``finder.PACKAGES`` says which are
packages); a name one of them lacks fails where it is asked for,
saying that torchvision is a stand-in here and how to get the real one.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from . import vision, vision_functional, vision_ops, vision_transforms

NEXT_STEP = (
    "torchvision is not installed here and torchport serves a stand-in with the common "
    "datasets, transforms, ops and utils; install the real one for the rest "
    "(torchport migrate --deps auto, or a requirements FILE naming torchvision)"
)


def version() -> str:
    """A torchvision version matching the installed torch (torch 2.N pairs with 0.N+15),
    so that libraries comparing it take their current code paths."""
    minor = torch.__version__.split(".")[1]
    return f"0.{int(minor) + 15}.0+torchport.synthetic" if minor.isdigit() else "0.0"


def _missing(module: ModuleType) -> None:
    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"{module.__name__}.{name}: {NEXT_STEP}")

    module.__dict__["__getattr__"] = __getattr__  # PEP 562: looked up in the module's dict


# -- v2's additions to the transforms ------------------------------------------------


class ToImage(vision_transforms.PILToTensor):
    """v2's ``ToImage``: a PIL-layout image as a uint8 CxHxW tensor."""


class ToDtype:
    """v2's ``ToDtype(dtype, scale=...)``: ``scale`` maps uint8 to [0, 1] floats."""

    def __init__(self, dtype: Any, scale: bool = False) -> None:
        self.dtype = dtype[torch.Tensor] if isinstance(dtype, dict) else dtype
        self.scale = scale

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        if self.scale:
            return vision_transforms.ConvertImageDtype(self.dtype)(img)
        return img.to(self.dtype)


class ToPureTensor:
    def __call__(self, img: Any) -> torch.Tensor:
        return torch.as_tensor(img)


V2_TRANSFORMS = {c.__name__: c for c in (ToImage, ToDtype, ToPureTensor)}


# -- ops, io, utils --------------------------------------------------------------------


def box_area(boxes: torch.Tensor) -> torch.Tensor:
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    top_left = torch.maximum(boxes1[:, None, :2], boxes2[None, :, :2])
    bottom_right = torch.minimum(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = (bottom_right - top_left).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (box_area(boxes1)[:, None] + box_area(boxes2)[None, :] - inter)


def batched_nms(
    boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float
) -> torch.Tensor:
    """nms per category: boxes of different ``idxs`` never suppress each other."""
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    return vision_ops.nms(boxes + offsets[:, None], scores, iou_threshold)


class ImageReadMode:
    UNCHANGED, GRAY, GRAY_ALPHA, RGB, RGB_ALPHA = "", "L", "LA", "RGB", "RGBA"


def read_image(path: str, mode: str = ImageReadMode.UNCHANGED, **_: Any) -> torch.Tensor:
    """A uint8 CxHxW tensor of an image file (through PIL), as torchvision.io's."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as opened:
        img = opened.convert(mode) if mode else opened
        array = np.asarray(img).copy()
    t = torch.from_numpy(array)
    return t[None] if t.dim() == 2 else t.permute(2, 0, 1).contiguous()


def make_grid(
    tensor: Any,
    nrow: int = 8,
    padding: int = 2,
    normalize: bool = False,
    value_range: Any = None,
    scale_each: bool = False,
    pad_value: float = 0.0,
    **_: Any,
) -> torch.Tensor:
    """Images (BxCxHxW, or a list of CxHxW) tiled ``nrow`` to a row, as torchvision's."""
    t = torch.stack(list(tensor)) if isinstance(tensor, (list, tuple)) else tensor
    if t.dim() == 3:
        t = t[None]
    if t.shape[1] == 1:
        t = t.expand(-1, 3, -1, -1)
    if normalize:
        low, high = value_range or (float(t.min()), float(t.max()))
        t = (t.clamp(low, high) - low) / max(high - low, 1e-5)
    n, c, h, w = t.shape
    cols = min(nrow, n)
    rows = -(-n // cols)
    height, width = rows * (h + padding) + padding, cols * (w + padding) + padding
    grid = t.new_full((c, height, width), pad_value)
    for i in range(n):
        top, left = (i // cols) * (h + padding) + padding, (i % cols) * (w + padding) + padding
        grid[:, top : top + h, left : left + w] = t[i]
    return grid


def save_image(tensor: Any, fp: Any, format: str | None = None, **kwargs: Any) -> None:
    grid = make_grid(tensor, **kwargs)
    vision_functional.to_pil_image(grid.detach().cpu().clamp(0, 1)).save(fp, format=format)


# -- the modules -----------------------------------------------------------------------


def _fill(**names: Any) -> Callable[[ModuleType], None]:
    def build(module: ModuleType) -> None:
        module.__dict__.update(names)
        _missing(module)

    return build


def _root(module: ModuleType) -> None:
    module.__dict__["__version__"] = version()
    for sub in ("datasets", "transforms", "ops", "utils", "io", "models"):
        setattr(module, sub, __import__(f"{module.__name__}.{sub}", fromlist=["_"]))
    module.__dict__.update(get_image_backend=lambda: "PIL", set_image_backend=lambda backend: None)
    _missing(module)


def _transforms(module: ModuleType) -> None:
    module.__dict__.update(vision_transforms.TRANSFORMS)
    module.__dict__["functional"] = __import__(f"{module.__name__}.functional", fromlist=["_"])
    _missing(module)


def _transforms_v2(module: ModuleType) -> None:
    _transforms(module)
    module.__dict__.update(V2_TRANSFORMS)


_FUNCTIONAL = {name: getattr(vision_functional, name) for name in vision_functional.__all__}
_FOLDER = {
    "ImageFolder": vision.ImageFolder,
    "DatasetFolder": vision.DatasetFolder,
    "IMG_EXTENSIONS": vision.IMG_EXTENSIONS,
    "default_loader": vision._load_image,
    "pil_loader": vision._load_image,
}


def _datasets(module: ModuleType) -> None:
    module.__dict__.update(vision.DATASETS)
    module.__dict__.update(_FOLDER)
    module.__dict__["VisionDataset"] = vision.SyntheticImageDataset
    for sub in ("folder", "vision"):
        setattr(module, sub, __import__(f"{module.__name__}.{sub}", fromlist=["_"]))
    _missing(module)


MODULES: dict[str, Callable[[ModuleType], None]] = {
    "torchvision": _root,
    "torchvision.transforms": _transforms,
    "torchvision.transforms.functional": _fill(**_FUNCTIONAL),
    "torchvision.transforms.v2": _transforms_v2,
    "torchvision.transforms.v2.functional": _fill(**_FUNCTIONAL),
    "torchvision.datasets": _datasets,
    "torchvision.datasets.folder": _fill(**_FOLDER),
    "torchvision.datasets.vision": _fill(VisionDataset=vision.SyntheticImageDataset),
    "torchvision.ops": _fill(
        nms=vision_ops.nms, batched_nms=batched_nms, box_area=box_area, box_iou=box_iou
    ),
    "torchvision.io": _fill(read_image=read_image, ImageReadMode=ImageReadMode),
    "torchvision.utils": _fill(make_grid=make_grid, save_image=save_image),
    "torchvision.models": _fill(),
}
