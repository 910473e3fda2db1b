"""``torchvision.datasets`` stand-ins that keep the real classes' contract.

The contract a program relies on, as torchvision's classes have it: ``download=True``
creates ``root`` and the dataset's folder under it (a later ``torch.save`` into ``root``
works, and a later ``download=False`` finds the data); ``download=False`` where nothing was
downloaded stands in for the files the user keeps there (the folder is made as on their
machine: the sandbox never has them, so torchvision's "Dataset not found" would fail every
program that reads a local copy); ``train`` (or ``split``) picks a split
of its own size, training larger than test; ``transform`` / ``target_transform`` apply;
``.data`` / ``.targets`` / ``.classes`` have the real types (CIFAR: a numpy ``uint8`` NxHxWxC
array and a list of ints; MNIST: ``uint8`` and ``int64`` tensors; SVHN: NxCxHxW and
``.labels``). Sizes hold a few batches of the program's batch size (``data.size_for``).

Without torchvision, samples reach the stand-in transforms as uint8 tensors laid out as
PIL would hand them to ``ToTensor`` (HxW or HxWxC); with the real torchvision these classes
replace its own and hand out PIL images, as it does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Layout:
    """How a real dataset class keeps its data: the folder ``download`` makes under
    ``root`` (``{name}``: the class's name), the real split sizes, and the types of
    ``.data`` and of the targets."""

    folder: str
    sizes: tuple[int, int]  # train, test
    data: str  # "tensor" (N x H x W [x C]), "numpy" (N x H x W x C), "numpy_chw"
    targets: str  # "tensor", "list", "numpy"


CIFAR_SIZES = (50000, 10000)
MNIST_LAYOUT = Layout("{name}/raw", (60000, 10000), "tensor", "tensor")


class SyntheticImageDataset(Dataset):
    """A torchvision-style image dataset made up on the spot (never downloaded)."""

    shape: ClassVar[tuple[int, ...]] = (28, 28)
    classes: ClassVar[list[str]] = _DIGITS
    layout: ClassVar[Layout] = MNIST_LAYOUT
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
            self.split = split
        if isinstance(root, (str, os.PathLike)):
            root = os.path.expanduser(os.fspath(root))
        self.root, self.train = root, train
        self.transform, self.target_transform = transform, target_transform
        name = type(self).__name__
        self._fetch()  # download or a local copy: the same folder, as on their machine
        n = data.size_for(train, self.layout.sizes[0 if train else 1])
        gen = data.generator("torchvision", name, "train" if train else "test")
        targets = data.labels(n, len(self.classes), gen)
        images = data.images(n, self.shape, targets, len(self.classes), gen)
        self.data, self.targets = _as(self.layout.data, images), _as(self.layout.targets, targets)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        data.record("torchvision", name, n, split="train" if train else "test")

    def _fetch(self) -> None:
        """What ``root`` holds on the user's machine: the dataset's folder, downloaded now
        (``download``) or kept there before (a stand-in writes no files into it)."""
        if self.root is None:  # the real classes fail on it; a stand-in has no use for it
            return
        folder = os.path.join(self.root, self.layout.folder.format(name=type(self).__name__))
        os.makedirs(folder, exist_ok=True)

    def __len__(self) -> int:
        return len(self.data)

    def _image(self, index: int) -> Any:
        img = self.data[index]
        if self.layout.data == "numpy_chw":
            img = img.transpose(1, 2, 0)
        if self.as_pil:
            return _pil(img)
        return torch.as_tensor(img)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        img, target = self._image(index), int(self.targets[index])
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


def _as(kind: str, values: torch.Tensor) -> Any:
    """``values`` as the real class has them (a tensor without numpy)."""
    if kind == "tensor":
        return values
    if kind == "list":
        return values.tolist()
    try:
        import numpy  # noqa: F401  (torch's .numpy() needs it)
    except ImportError:
        return values
    if kind == "numpy_chw":
        return values.permute(0, 3, 1, 2).contiguous().numpy()
    return values.numpy()


def _pil(img: Any) -> Any:
    try:
        from PIL import Image

        return Image.fromarray(img.numpy() if isinstance(img, torch.Tensor) else img)
    except Exception:  # no PIL or no numpy: the array itself
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
    layout: ClassVar[Layout] = Layout("cifar-10-batches-py", CIFAR_SIZES, "numpy", "list")


class CIFAR100(CIFAR10):
    classes: ClassVar[list[str]] = [f"class_{i}" for i in range(100)]
    layout: ClassVar[Layout] = Layout("cifar-100-python", CIFAR_SIZES, "numpy", "list")


class SVHN(SyntheticImageDataset):
    shape: ClassVar[tuple[int, ...]] = (32, 32, 3)
    classes: ClassVar[list[str]] = [str(i) for i in range(10)]
    layout: ClassVar[Layout] = Layout("", (73257, 26032), "numpy_chw", "numpy")

    def __init__(self, root: Any = None, split: str = "train", **kwargs: Any) -> None:
        kwargs.pop("train", None)
        super().__init__(root, split=split, **kwargs)
        self.labels = self.targets  # SVHN's name for them


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


__all__ = ["DATASETS", "FOLDERS", "SyntheticImageDataset"]
