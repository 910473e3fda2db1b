"""``torchvision.datasets`` / ``torchvision.transforms`` stand-ins.

Images are uint8 tensors laid out as PIL would hand them to ``ToTensor`` (HxW for
greyscale, HxWxC for colour); the transforms here accept both that layout and the
CxH xW float tensors ``ToTensor`` makes. When the real torchvision is installed, its
dataset classes are replaced by these, converted to PIL images when PIL is there.
"""

from __future__ import annotations

import math
import os
from typing import Any, ClassVar

import torch
from torch.utils.data import Dataset

from . import data

_DIGITS = [
    f"{i} - {w}"
    for i, w in enumerate(
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    )
]
_FASHION = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle-boot",
]
_CIFAR10 = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]


class SyntheticImageDataset(Dataset):
    """A torchvision-style image dataset made up on the spot (never downloaded)."""

    shape: ClassVar[tuple[int, ...]] = (28, 28)
    classes: ClassVar[list[str]] = _DIGITS
    as_pil: ClassVar[bool] = False  # set when standing in for the real torchvision

    def __init__(
        self,
        root: Any = None,
        train: bool = True,
        transform: Any = None,
        target_transform: Any = None,
        download: bool = False,
        split: str | None = None,
        **_: Any,
    ) -> None:
        if split is not None:
            train = split in ("train", "extra", "unlabeled", "train+unlabeled")
        self.root, self.train = root, train
        self.transform, self.target_transform = transform, target_transform
        n = data.size_for(train)
        name = type(self).__name__
        gen = data.generator("torchvision", name, "train" if train else "test")
        self.targets = data.labels(n, len(self.classes), gen)
        self.data = data.images(n, self.shape, self.targets, len(self.classes), gen)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        data.record("torchvision", name, n, split="train" if train else "test")

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        img, target = self.data[index], int(self.targets[index])
        if self.as_pil:
            img = _pil(img)
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


def _pil(img: torch.Tensor) -> Any:
    try:
        from PIL import Image

        return Image.fromarray(img.numpy())
    except Exception:  # no PIL or no numpy: the tensor itself
        return img


class MNIST(SyntheticImageDataset):
    pass


class FashionMNIST(SyntheticImageDataset):
    classes: ClassVar[list[str]] = _FASHION


class KMNIST(SyntheticImageDataset):
    classes: ClassVar[list[str]] = [str(i) for i in range(10)]


class CIFAR10(SyntheticImageDataset):
    shape: ClassVar[tuple[int, ...]] = (32, 32, 3)
    classes: ClassVar[list[str]] = _CIFAR10

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.targets = self.targets.tolist()  # a list, as torchvision has it


class CIFAR100(CIFAR10):
    classes: ClassVar[list[str]] = [f"class_{i}" for i in range(100)]


class SVHN(SyntheticImageDataset):
    shape: ClassVar[tuple[int, ...]] = (32, 32, 3)
    classes: ClassVar[list[str]] = [str(i) for i in range(10)]


IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _load_image(path: str) -> Any:
    """An RGB image as the stand-in transforms take it: a uint8 HxWxC tensor."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as img:
        return torch.from_numpy(np.asarray(img.convert("RGB")).copy())


class DatasetFolder(Dataset):
    """``root/<class>/<file>`` read from disk, as torchvision's (real files, not synthetic:
    the sandbox's stand-in folders come from ``sandbox.commandline``)."""

    def __init__(
        self,
        root: Any,
        loader: Any = None,
        extensions: tuple[str, ...] | None = None,
        transform: Any = None,
        target_transform: Any = None,
        is_valid_file: Any = None,
        **_: Any,
    ) -> None:
        self.root = os.fspath(root)
        self.loader = loader or _load_image
        self.transform, self.target_transform = transform, target_transform
        self.classes = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        if not self.classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {self.root}.")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        ok = is_valid_file or (lambda p: p.lower().endswith(extensions or IMG_EXTENSIONS))
        self.samples = [
            (os.path.join(folder, name), self.class_to_idx[c])
            for c in self.classes
            for folder, _, names in sorted(os.walk(os.path.join(self.root, c)))
            for name in sorted(names)
            if ok(os.path.join(folder, name))
        ]
        self.targets = [t for _, t in self.samples]
        self.imgs = self.samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        path, target = self.samples[index]
        sample = self.loader(path)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target


class ImageFolder(DatasetFolder):
    def __init__(
        self,
        root: Any,
        transform: Any = None,
        target_transform: Any = None,
        loader: Any = None,
        is_valid_file: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(root, loader, None, transform, target_transform, is_valid_file, **kwargs)


DATASETS = {c.__name__: c for c in (MNIST, FashionMNIST, KMNIST, CIFAR10, CIFAR100, SVHN)}
# Served by the stand-in torchvision only: the real ones read real folders already.
FOLDERS = {c.__name__: c for c in (DatasetFolder, ImageFolder)}


# -- transforms --------------------------------------------------------------------


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


class InterpolationMode:
    """The names torchvision's enum has; the stand-in transforms interpolate bilinearly."""

    NEAREST, BILINEAR, BICUBIC = "nearest", "bilinear", "bicubic"


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

__all__ = ["DATASETS", "FOLDERS", "TRANSFORMS", "SyntheticImageDataset"]
