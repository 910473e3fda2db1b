"""A Hugging Face ``datasets`` stand-in: ``load_dataset`` answers with synthetic columns.

Only the common surface is provided (``Dataset`` with indexing, ``map``, ``filter``,
``select``, ``shuffle``, ``train_test_split``, ``set_format``/``with_format("torch")``;
``DatasetDict``). With the real library installed, :func:`columns` feeds its own
``Dataset.from_dict`` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import data

# name -> (splits, text field, label field or None, number of classes)
_SCHEMAS: dict[str, tuple[tuple[str, ...], str, str | None, int]] = {
    "imdb": (("train", "test", "unsupervised"), "text", "label", 2),
    "rotten_tomatoes": (("train", "validation", "test"), "text", "label", 2),
    "yelp_polarity": (("train", "test"), "text", "label", 2),
    "amazon_polarity": (("train", "test"), "content", "label", 2),
    "ag_news": (("train", "test"), "text", "label", 4),
    "emotion": (("train", "validation", "test"), "text", "label", 6),
    "sst2": (("train", "validation", "test"), "sentence", "label", 2),
    "cola": (("train", "validation", "test"), "sentence", "label", 2),
    "wikitext": (("train", "validation", "test"), "text", None, 0),
    "tiny_shakespeare": (("train", "validation", "test"), "text", None, 0),
    "tinyshakespeare": (("train", "validation", "test"), "text", None, 0),
    "tinystories": (("train", "validation"), "text", None, 0),
    "openwebtext": (("train",), "text", None, 0),
    "bookcorpus": (("train",), "text", None, 0),
    "c4": (("train", "validation"), "text", None, 0),
    "fineweb": (("train",), "text", None, 0),
    "fineweb-edu": (("train",), "text", None, 0),
}
# name -> (splits, image field, label field, number of classes, image shape HxW[xC])
_IMAGE_SCHEMAS: dict[str, tuple[tuple[str, ...], str, str, int, tuple[int, ...]]] = {
    "mnist": (("train", "test"), "image", "label", 10, (28, 28)),
    "fashion_mnist": (("train", "test"), "image", "label", 10, (28, 28)),
    "cifar10": (("train", "test"), "img", "label", 10, (32, 32, 3)),
    "cifar100": (("train", "test"), "img", "fine_label", 100, (32, 32, 3)),
    "food101": (("train", "validation"), "image", "label", 101, (32, 32, 3)),
    "tiny-imagenet": (("train", "valid"), "image", "label", 200, (32, 32, 3)),
    "imagenet-1k": (("train", "validation", "test"), "image", "label", 1000, (32, 32, 3)),
}
_DEFAULT = (("train", "test"), "text", "label", 2)


def _lookup(table: dict[str, Any], path: str, name: str | None) -> Any:
    for key in (name, path.rsplit("/", 1)[-1]):
        if key and key.lower() in table:
            return table[key.lower()]
    return None


def _schema(path: str, name: str | None) -> tuple[tuple[str, ...], str, str | None, int]:
    return _lookup(_SCHEMAS, path, name) or _DEFAULT


def _image_columns(path: str, name: str | None, split: str) -> dict[str, list[Any]] | None:
    """Images (PIL where Pillow is installed, as ``datasets`` gives them) and labels."""
    schema = _lookup(_IMAGE_SCHEMAS, path, name)
    if schema is None:
        return None
    _, image_field, label_field, classes, shape = schema
    n = data.size_for(split.startswith("train"))
    gen = data.generator("datasets", path, name, split)
    targets = data.labels(n, classes, gen)
    pixels = data.images(n, shape, targets, classes, gen)
    return {image_field: [_pil(img) for img in pixels], label_field: targets.tolist()}


def _pil(img: torch.Tensor) -> Any:
    try:
        from PIL import Image
    except ImportError:
        return img
    return Image.fromarray(img.numpy())


def split_names(path: str, name: str | None) -> tuple[str, ...]:
    image = _lookup(_IMAGE_SCHEMAS, path, name)
    return image[0] if image else _schema(path, name)[0]


def columns(path: str, name: str | None, split: str) -> dict[str, list[Any]]:
    images = _image_columns(path, name, split)
    if images is not None:
        return images
    _, text_field, label_field, classes = _schema(path, name)
    n = data.size_for(split.startswith("train"))
    gen = data.generator("datasets", path, name, split)
    targets = data.labels(n, max(classes, 2), gen)
    cols: dict[str, list[Any]] = {text_field: data.sentences(targets, gen)}
    if label_field is not None:
        unlabeled = split == "unsupervised"
        cols[label_field] = [-1] * n if unlabeled else targets.tolist()
    if text_field == "sentence":
        cols["idx"] = list(range(n))
    return cols


def _base_split(split: str) -> str:
    # "train[:10%]" and "train+test" -> the first named split
    return split.split("[", 1)[0].split("+", 1)[0].strip()


def load(
    path: str,
    name: str | None,
    split: Any,
    make: Callable[[dict[str, list[Any]]], Any],
    make_dict: Callable[[dict[str, Any]], Any],
) -> Any:
    dataset_id = path if name is None else f"{path}/{name}"
    if split is None:
        out = {}
        for s in split_names(path, name):
            out[s] = make(columns(path, name, s))
            data.record("datasets", dataset_id, len(out[s]), split=s)
        return make_dict(out)
    if isinstance(split, list | tuple):
        return [load(path, name, s, make, make_dict) for s in split]
    base = _base_split(str(split))
    ds = make(columns(path, name, base))
    data.record("datasets", dataset_id, len(ds), split=base)
    return ds


class Dataset:
    def __init__(self, cols: dict[str, list[Any]]) -> None:
        self._cols = {k: list(v) for k, v in cols.items()}
        self._format: tuple[str | None, list[str] | None] = (None, None)

    @classmethod
    def from_dict(cls, mapping: dict[str, list[Any]], **_: Any) -> Dataset:
        return cls(mapping)

    @classmethod
    def from_list(cls, rows: list[dict[str, Any]], **_: Any) -> Dataset:
        keys = list(rows[0]) if rows else []
        return cls({k: [r[k] for r in rows] for k in keys})

    @property
    def column_names(self) -> list[str]:
        return list(self._cols)

    @property
    def num_rows(self) -> int:
        return len(next(iter(self._cols.values()), []))

    def __len__(self) -> int:
        return self.num_rows

    def _fmt(self, key: str, value: Any) -> Any:
        kind, cols = self._format
        if kind == "torch" and (cols is None or key in cols):
            try:
                return torch.as_tensor(value)
            except (TypeError, ValueError, RuntimeError):
                return value
        return value

    def _row(self, i: int) -> dict[str, Any]:
        kind, cols = self._format
        keys = [k for k in self._cols if kind is None or cols is None or k in cols]
        return {k: self._fmt(k, self._cols[k][i]) for k in keys}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._fmt(key, self._cols[key])
        if isinstance(key, slice):
            return {k: self._fmt(k, v[key]) for k, v in self._cols.items()}
        if isinstance(key, int | torch.Tensor):
            return self._row(int(key))
        return self.select(list(key))[:]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self._row(i)

    def _new(self, cols: dict[str, list[Any]]) -> Dataset:
        out = Dataset(cols)
        out._format = self._format
        return out

    def select(self, indices: Any) -> Dataset:
        idx = [int(i) for i in indices]
        return self._new({k: [v[i] for i in idx] for k, v in self._cols.items()})

    def shuffle(self, seed: int | None = None, **_: Any) -> Dataset:
        gen = torch.Generator().manual_seed(0 if seed is None else seed)
        return self.select(torch.randperm(len(self), generator=gen).tolist())

    def train_test_split(
        self, test_size: float | int = 0.25, seed: int | None = None, shuffle: bool = True, **_: Any
    ) -> DatasetDict:
        ds = self.shuffle(seed) if shuffle else self
        n_test = int(test_size) if isinstance(test_size, int) else round(len(ds) * test_size)
        cut = len(ds) - n_test
        return DatasetDict(train=ds.select(range(cut)), test=ds.select(range(cut, len(ds))))

    def map(
        self,
        function: Callable[..., Any] | None = None,
        batched: bool = False,
        batch_size: int | None = 1000,
        remove_columns: Any = None,
        with_indices: bool = False,
        **_: Any,
    ) -> Dataset:
        if function is None:
            return self
        drop = [remove_columns] if isinstance(remove_columns, str) else list(remove_columns or [])
        rows: list[dict[str, Any]] = []
        n, step = len(self), (batch_size or len(self) or 1)
        if batched:
            for start in range(0, n, step):
                batch = {k: v[start : start + step] for k, v in self._cols.items()}
                idx = list(range(start, min(n, start + step)))
                update = function(batch, idx) if with_indices else function(batch)
                merged = {**batch, **(update or {})}
                for j in range(len(idx)):
                    rows.append({k: v[j] for k, v in merged.items()})
        else:
            for i in range(n):
                row = {k: v[i] for k, v in self._cols.items()}
                update = function(row, i) if with_indices else function(row)
                rows.append({**row, **(update or {})})
        keys = [k for k in (rows[0] if rows else self._cols) if k not in drop]
        return self._new({k: [r[k] for r in rows] for k in keys})

    def filter(self, function: Callable[..., Any], **_: Any) -> Dataset:
        return self.select([i for i, row in enumerate(iter(self._raw_rows())) if function(row)])

    def _raw_rows(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield {k: v[i] for k, v in self._cols.items()}

    def remove_columns(self, names: Any) -> Dataset:
        drop = {names} if isinstance(names, str) else set(names)
        return self._new({k: v for k, v in self._cols.items() if k not in drop})

    def rename_column(self, old: str, new: str) -> Dataset:
        return self._new({(new if k == old else k): v for k, v in self._cols.items()})

    def set_format(self, type: str | None = None, columns: Any = None, **_: Any) -> None:
        self._format = (type, list(columns) if columns is not None else None)

    def with_format(self, type: str | None = None, columns: Any = None, **_: Any) -> Dataset:
        out = self._new(self._cols)
        out.set_format(type, columns)
        return out

    def reset_format(self) -> None:
        self._format = (None, None)

    def __repr__(self) -> str:
        return f"Dataset(features: {self.column_names}, num_rows: {len(self)}) [synthetic]"


class DatasetDict(dict):
    def map(self, *args: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: v.map(*args, **kwargs) for k, v in self.items()})

    def filter(self, *args: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: v.filter(*args, **kwargs) for k, v in self.items()})

    def shuffle(self, seed: int | None = None, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: v.shuffle(seed, **kwargs) for k, v in self.items()})

    def set_format(self, *args: Any, **kwargs: Any) -> None:
        for v in self.values():
            v.set_format(*args, **kwargs)

    def with_format(self, *args: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: v.with_format(*args, **kwargs) for k, v in self.items()})

    def remove_columns(self, names: Any) -> DatasetDict:
        return DatasetDict({k: v.remove_columns(names) for k, v in self.items()})

    def rename_column(self, old: str, new: str) -> DatasetDict:
        return DatasetDict({k: v.rename_column(old, new) for k, v in self.items()})


def load_dataset(path: str, name: str | None = None, *_: Any, split: Any = None, **__: Any) -> Any:
    """Never downloads: synthetic columns shaped like the named dataset."""
    return load(path, name, split, Dataset, DatasetDict)
