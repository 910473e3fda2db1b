"""``torchvision.transforms`` stand-ins: the classes a training script composes.

They take what the stand-in datasets hand out (uint8 tensors in PIL's layout, HxW or
HxWxC) and what ``ToTensor`` makes (float CxHxW), and keep the layout they were given.
``functional`` (``vision_functional``) has the same operations as functions.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

import torch


def _chw(img: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(CxHxW view, whether it came in PIL-like layout)."""
    if img.dtype == torch.uint8 and img.dim() == 2:
        return img.unsqueeze(0), True
    if img.dtype == torch.uint8 and img.dim() == 3 and img.shape[-1] in (1, 3, 4):
        return img.permute(2, 0, 1), True
    return img, False


def _back(chw: torch.Tensor, pil_like: bool, was_2d: bool) -> torch.Tensor:
    if not pil_like:
        return chw
    return chw[0] if was_2d else chw.permute(1, 2, 0).contiguous()


class Compose:
    def __init__(self, transforms: list[Any]) -> None:
        self.transforms = list(transforms)

    def __call__(self, img: Any) -> Any:
        for t in self.transforms:
            img = t(img)
        return img


class ToTensor:
    def __call__(self, img: Any) -> torch.Tensor:
        img = torch.as_tensor(img)
        chw, _ = _chw(img)
        if chw.dtype == torch.uint8:
            return chw.to(torch.float32).div(255.0).contiguous()
        return chw.to(torch.float32)


class PILToTensor:
    def __call__(self, img: Any) -> torch.Tensor:
        return _chw(torch.as_tensor(img))[0].contiguous()


class ConvertImageDtype:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        if img.dtype == torch.uint8 and self.dtype.is_floating_point:
            return img.to(self.dtype) / 255.0
        return img.to(self.dtype)


class Normalize:
    def __init__(self, mean: Any, std: Any, inplace: bool = False) -> None:
        self.mean, self.std = mean, std

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        mean = torch.as_tensor(self.mean, dtype=t.dtype).reshape(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=t.dtype).reshape(-1, 1, 1)
        return (t - mean) / std


class Lambda:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, img: Any) -> Any:
        return self.fn(img)


class Resize:
    def __init__(self, size: Any, **_: Any) -> None:
        self.size = size

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        chw, pil_like = _chw(img)
        h, w = chw.shape[-2:]
        if isinstance(self.size, int):
            scale = self.size / min(h, w)
            size = (max(1, round(h * scale)), max(1, round(w * scale)))
        else:
            size = tuple(self.size)
        out = torch.nn.functional.interpolate(
            chw[None].to(torch.float32), size=size, mode="bilinear", align_corners=False
        )[0]
        out = out.round().clamp(0, 255).to(chw.dtype) if chw.dtype == torch.uint8 else out
        return _back(out, pil_like, img.dim() == 2)


class CenterCrop:
    def __init__(self, size: Any) -> None:
        self.size = (size, size) if isinstance(size, int) else tuple(size)

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        chw, pil_like = _chw(img)
        h, w = chw.shape[-2:]
        th, tw = self.size
        top, left = max(0, (h - th) // 2), max(0, (w - tw) // 2)
        return _back(chw[..., top : top + th, left : left + tw], pil_like, img.dim() == 2)


class RandomCrop:
    def __init__(self, size: Any, padding: int | None = None, **_: Any) -> None:
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.padding = padding or 0

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        chw, pil_like = _chw(img)
        if self.padding:
            chw = torch.nn.functional.pad(chw, [self.padding] * 4)
        h, w = chw.shape[-2:]
        th, tw = self.size
        top = int(torch.randint(0, h - th + 1, ()))
        left = int(torch.randint(0, w - tw + 1, ()))
        return _back(chw[..., top : top + th, left : left + tw], pil_like, img.dim() == 2)


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        if float(torch.rand(())) >= self.p:
            return img
        chw, pil_like = _chw(img)
        return _back(chw.flip(-1), pil_like, img.dim() == 2)


class RandomResizedCrop:
    """A random area and aspect ratio, cropped and resized to ``size``."""

    def __init__(
        self, size: Any, scale: Any = (0.08, 1.0), ratio: Any = (3 / 4, 4 / 3), **_: Any
    ) -> None:
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.scale, self.ratio = scale, ratio

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        chw, pil_like = _chw(img)
        h, w = chw.shape[-2:]
        area = h * w * float(torch.empty(()).uniform_(*self.scale))
        log_ratio = torch.empty(()).uniform_(math.log(self.ratio[0]), math.log(self.ratio[1]))
        aspect = math.exp(float(log_ratio))
        th = min(h, max(1, round(math.sqrt(area / aspect))))
        tw = min(w, max(1, round(math.sqrt(area * aspect))))
        top = int(torch.randint(0, h - th + 1, ()))
        left = int(torch.randint(0, w - tw + 1, ()))
        crop = chw[..., top : top + th, left : left + tw]
        return Resize(self.size)(_back(crop, pil_like, img.dim() == 2))


class RandomApply:
    def __init__(self, transforms: list[Any], p: float = 0.5) -> None:
        self.transforms, self.p = list(transforms), p

    def __call__(self, img: Any) -> Any:
        if float(torch.rand(())) >= self.p:
            return img
        return Compose(self.transforms)(img)


class RandomRotation:
    """Accepted and ignored beyond a no-op: synthetic data needs no augmentation."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def __call__(self, img: Any) -> Any:
        return img


class ColorJitter(RandomRotation):
    pass


class RandomGrayscale(RandomRotation):
    pass


class GaussianBlur(RandomRotation):
    pass


class InterpolationMode(Enum):
    """torchvision's enum (its values are its strings); the stand-in transforms resize
    with torch's interpolation of that name where torch has one, else bilinearly."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


TRANSFORMS = {
    c.__name__: c
    for c in (
        Compose,
        ToTensor,
        PILToTensor,
        ConvertImageDtype,
        Normalize,
        Lambda,
        Resize,
        CenterCrop,
        RandomCrop,
        RandomHorizontalFlip,
        RandomResizedCrop,
        RandomApply,
        RandomRotation,
        ColorJitter,
        RandomGrayscale,
        GaussianBlur,
        InterpolationMode,
    )
}
