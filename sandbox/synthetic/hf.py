"""A Hugging Face ``datasets`` stand-in: ``load_dataset`` answers with synthetic columns.

A dataset known offline by name (``data/hf_datasets.toml``) has that dataset's columns; any
other has the columns the program's code reads (an image dataset for a program that reads
``examples["image"]``): the columns a real dataset of its kind has, not text by default.
Only the common surface is provided (``Dataset`` with indexing, ``map``, ``filter``,
``select``, ``shuffle``, ``train_test_split``, ``set_format``/``with_format("torch")``;
``DatasetDict``). With the real library installed, :func:`columns` feeds its own
``Dataset.from_dict`` instead.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import batch, data

# What the stand-in knows of datasets by name, and how it reads a program for the rest.
SCHEMAS_FILE = Path(__file__).parent.parent / "data" / "hf_datasets.toml"
# A column read by name in the program's code: ``examples["image"]``, ``batch['img']``.
COLUMN_READ = re.compile(r"""\[\s*(['"])([A-Za-z_]\w*)\1\s*\]""")


@dataclass(frozen=True)
class Schema:
    """The columns of a dataset's split: an image column (PIL images of ``shape``) or
    none, text columns, a label column of ``classes`` classes or none."""

    splits: tuple[str, ...]
    image: str | None = None
    texts: tuple[str, ...] = ()
    label: str | None = None
    classes: int = 0
    shape: tuple[int, ...] = ()


def _schema(entry: dict[str, Any], **override: Any) -> Schema:
    text = entry.get("text")
    fields = {
        "splits": tuple(entry["splits"]),
        "image": entry.get("image"),
        "texts": (text,) if text else (),
        "label": entry.get("label"),
        "classes": int(entry.get("classes", 0)),
        "shape": tuple(entry.get("shape", ())),
    }
    return Schema(**{**fields, **override})


@functools.cache
def table() -> dict[str, Any]:
    with open(SCHEMAS_FILE, "rb") as f:
        return tomllib.load(f)


def _lookup(path: str, name: str | None) -> Schema | None:
    known = {**table()["text"], **table()["image"]}
    for key in (name, path.rsplit("/", 1)[-1]):
        if key and key.lower() in known:
            return _schema(known[key.lower()])
    return None


def columns_read(texts: list[str]) -> list[str]:
    """The column names ``texts`` (a program's sources) read by subscript, in order."""
    return list(dict.fromkeys(m.group(2) for t in texts for m in COLUMN_READ.finditer(t)))


def from_program(reads: list[str]) -> Schema:
    """The schema of a dataset known by no name, from the columns the program reads: an
    image dataset where it reads an image column (a loader's ``examples["image"]``), a
    text classification set otherwise, its text and label columns named as the program
    reads them (``[program]`` of :data:`SCHEMAS_FILE`)."""
    rules = table()["program"]
    # in the vocabulary's order: a program that reads "label" and writes "labels" for its
    # model (``out["labels"] = ex["label"]``) has a dataset with "label"
    image = next((c for c in rules["image_names"] if c in reads), None)
    label = next((c for c in rules["label_names"] if c in reads), "label")
    texts = tuple(c for c in reads if c in rules["text_names"])
    if image is None:
        default = _schema(rules["default"])
        return _schema(rules["default"], texts=texts or default.texts, label=label)
    return _schema(rules["image"], image=image, label=label, texts=texts)


def _program_sources() -> list[str]:
    """The program's entry script and the file that called ``load_dataset``."""
    script = sys.argv[0] if sys.argv and sys.argv[0].endswith(".py") else ""
    paths = dict.fromkeys(os.path.abspath(p) for p in (script, batch.caller()) if p)
    return [batch.program_source(p) for p in paths]


def schema_for(path: str, name: str | None) -> Schema:
    """The named dataset's schema where it is known offline, else the program's."""
    return _lookup(path, name) or from_program(columns_read(_program_sources()))


def _pil(img: torch.Tensor) -> Any:
    try:
        from PIL import Image
    except ImportError:
        return img
    return Image.fromarray(img.numpy())


def split_names(path: str, name: str | None) -> tuple[str, ...]:
    return schema_for(path, name).splits


def columns(path: str, name: str | None, split: str) -> dict[str, list[Any]]:
    """Images (PIL where Pillow is installed, as ``datasets`` gives them), texts and
    labels of the schema's columns, deterministic for the dataset and split."""
    schema = schema_for(path, name)
    n = data.size_for(split.startswith("train"))
    gen = data.generator("datasets", path, name, split)
    targets = data.labels(n, max(schema.classes, 2), gen)
    cols: dict[str, list[Any]] = {}
    if schema.image is not None:
        pixels = data.images(n, schema.shape, targets, max(schema.classes, 2), gen)
        cols[schema.image] = [_pil(img) for img in pixels]
    for text in schema.texts:
        cols[text] = data.sentences(targets, gen)
    if schema.label is not None:
        unlabeled = split == "unsupervised"
        cols[schema.label] = [-1] * n if unlabeled else targets.tolist()
    if schema.texts == ("sentence",):
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
    """The split (or splits, or every split as ``make_dict``) of the named dataset, each
    recorded with its size and columns: a failure over a column the stand-in lacks is
    then told to be the stand-in's (``agents.attribution``)."""
    if split is None:
        return make_dict({s: _split(path, name, s, make) for s in split_names(path, name)})
    if isinstance(split, list | tuple):
        return [load(path, name, s, make, make_dict) for s in split]
    return _split(path, name, _base_split(str(split)), make)


def _split(path: str, name: str | None, split: str, make: Callable[..., Any]) -> Any:
    cols = columns(path, name, split)
    ds = make(cols)
    dataset_id = path if name is None else f"{path}/{name}"
    # where the columns came from: a dataset known offline has the real one's, so a column
    # it lacks the real one lacks too; guessed ones may be the stand-in's mistake
    known = _lookup(path, name) is not None
    source = "the dataset's features" if known else "the columns the program reads"
    data.record(
        "datasets", dataset_id, len(ds), split=split, columns=list(cols), columns_from=source
    )
    return ds


class Dataset:
    def __init__(self, cols: dict[str, list[Any]]) -> None:
        self._cols = {k: list(v) for k, v in cols.items()}
        self._format: tuple[str | None, list[str] | None] = (None, None)
        # ``set_transform``'s function, applied to a batch (a dict of lists) on access
        self._transform: Callable[[dict[str, list[Any]]], dict[str, Any]] | None = None

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
        if self._transform is not None:  # as datasets does: a batch of one, then its row
            out = self._transform({k: [v[i]] for k, v in self._cols.items()})
            return {k: v[0] for k, v in out.items()}
        kind, cols = self._format
        keys = [k for k in self._cols if kind is None or cols is None or k in cols]
        return {k: self._fmt(k, self._cols[k][i]) for k in keys}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._fmt(key, self._cols[key])
        if isinstance(key, slice):
            if self._transform is not None:
                return self._transform({k: v[key] for k, v in self._cols.items()})
            return {k: self._fmt(k, v[key]) for k, v in self._cols.items()}
        if isinstance(key, int | torch.Tensor):
            return self._row(int(key))
        return self.select(list(key))[:]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self._row(i)

    def _new(self, cols: dict[str, list[Any]]) -> Dataset:
        out = Dataset(cols)
        out._format, out._transform = self._format, self._transform
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
        self._format, self._transform = (None, None), None

    def set_transform(self, transform: Callable[..., Any] | None, **_: Any) -> None:
        """``transform`` turns each accessed batch (a dict of lists) into what is returned."""
        self._transform = transform

    def with_transform(self, transform: Callable[..., Any] | None, **_: Any) -> Dataset:
        out = self._new(self._cols)
        out.set_transform(transform)
        return out

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

    def set_transform(self, *args: Any, **kwargs: Any) -> None:
        for v in self.values():
            v.set_transform(*args, **kwargs)

    def with_transform(self, *args: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: v.with_transform(*args, **kwargs) for k, v in self.items()})

    def remove_columns(self, names: Any) -> DatasetDict:
        return DatasetDict({k: v.remove_columns(names) for k, v in self.items()})

    def rename_column(self, old: str, new: str) -> DatasetDict:
        return DatasetDict({k: v.rename_column(old, new) for k, v in self.items()})


def load_dataset(path: str, name: str | None = None, *_: Any, split: Any = None, **__: Any) -> Any:
    """Never downloads: synthetic columns shaped like the named dataset."""
    return load(path, name, split, Dataset, DatasetDict)
