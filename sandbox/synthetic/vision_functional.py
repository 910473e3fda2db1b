"""``torchvision.transforms.functional`` (and ``transforms.v2.functional``) stand-ins.

Libraries that probe for torchvision import the functional API at once (a model
library's data pipeline: ``import torchvision.transforms.functional as F``, ``from
torchvision.transforms.functional import InterpolationMode``), so the stand-in package
must have it. The functions are the stand-in transforms' operations, on the same layouts
(uint8 HxW[xC] as PIL hands images over, or float CxHxW); what is not here fails where it
is called, naming it (``__getattr__`` of the module, see ``vision_modules``).
"""

from __future__ import annotations

from typing import Any

import torch

from .vision_transforms import (
    CenterCrop,
    ConvertImageDtype,
    InterpolationMode,
    Normalize,
    PILToTensor,
    Resize,
    ToTensor,
    _back,
    _chw,
)


def to_tensor(pic: Any) -> torch.Tensor:
    return ToTensor()(pic)


def pil_to_tensor(pic: Any) -> torch.Tensor:
    return PILToTensor()(pic)


def to_pil_image(pic: Any, mode: str | None = None) -> Any:
    """A PIL image of a CxHxW tensor (floats in [0, 1] or uint8), as torchvision's."""
    from PIL import Image

    t = torch.as_tensor(pic)
    if t.is_floating_point():
        t = (t * 255).round().clamp(0, 255).to(torch.uint8)
    if t.dim() == 3 and t.shape[0] in (1, 3, 4):
        t = t.permute(1, 2, 0)
    array = t.squeeze(-1).numpy() if t.dim() == 3 and t.shape[-1] == 1 else t.numpy()
    return Image.fromarray(array, mode=mode) if mode else Image.fromarray(array)


def convert_image_dtype(image: torch.Tensor, dtype: torch.dtype = torch.float) -> torch.Tensor:
    return ConvertImageDtype(dtype)(image)


def normalize(tensor: torch.Tensor, mean: Any, std: Any, inplace: bool = False) -> torch.Tensor:
    return Normalize(mean, std)(tensor)


def resize(img: torch.Tensor, size: Any, *_: Any, **__: Any) -> torch.Tensor:
    return Resize(size)(img)


def center_crop(img: torch.Tensor, output_size: Any) -> torch.Tensor:
    return CenterCrop(output_size)(img)


def crop(img: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    chw, pil_like = _chw(img)
    return _back(chw[..., top : top + height, left : left + width], pil_like, img.dim() == 2)


def hflip(img: torch.Tensor) -> torch.Tensor:
    chw, pil_like = _chw(img)
    return _back(chw.flip(-1), pil_like, img.dim() == 2)


def vflip(img: torch.Tensor) -> torch.Tensor:
    chw, pil_like = _chw(img)
    return _back(chw.flip(-2), pil_like, img.dim() == 2)


def pad(img: torch.Tensor, padding: Any, fill: float = 0, padding_mode: str = "constant") -> Any:
    """torchvision's padding: one number (all sides), two (left/right, top/bottom) or
    four (left, top, right, bottom)."""
    chw, pil_like = _chw(img)
    p = [padding] * 4 if isinstance(padding, int) else list(padding)
    left, top, right, bottom = p * 2 if len(p) == 2 else p
    mode = {"edge": "replicate"}.get(padding_mode, padding_mode)
    if mode == "constant":
        out = torch.nn.functional.pad(chw, [left, right, top, bottom], value=fill)
    else:
        out = torch.nn.functional.pad(chw[None].float(), [left, right, top, bottom], mode=mode)
        out = out[0].to(chw.dtype)
    return _back(out, pil_like, img.dim() == 2)


def get_dimensions(img: torch.Tensor) -> list[int]:
    """[channels, height, width]."""
    chw, _ = _chw(torch.as_tensor(img))
    return [1 if chw.dim() == 2 else int(chw.shape[-3]), *map(int, chw.shape[-2:])]


def get_image_size(img: torch.Tensor) -> list[int]:
    """[width, height], as torchvision's."""
    _, h, w = get_dimensions(img)
    return [w, h]


__all__ = [
    "InterpolationMode",
    "center_crop",
    "convert_image_dtype",
    "crop",
    "get_dimensions",
    "get_image_size",
    "hflip",
    "normalize",
    "pad",
    "pil_to_tensor",
    "resize",
    "to_pil_image",
    "to_tensor",
    "vflip",
]
