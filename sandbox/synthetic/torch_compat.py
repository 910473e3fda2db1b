"""``torch._six``, removed in torch 2.0, for the old libraries a repository pins.

Research code from the torch 1.x years pins libraries of its time (deit and ConvNeXt:
``timm==0.3.2``) that import ``from torch._six import container_abcs, string_classes,
int_classes, inf``. Those names were aliases of the standard library's; serving them
again lets the original and its port import on this torch, and is recorded.
"""

from __future__ import annotations

import collections.abc
import math
from types import ModuleType

from .data import record

ALIASES = {
    "container_abcs": collections.abc,
    "string_classes": (str, bytes),
    "int_classes": int,
    "inf": math.inf,
    "nan": math.nan,
    "PY37": True,
}


def build(module: ModuleType) -> None:
    module.__dict__.update(ALIASES)
    record("torch", "_six", 0, standin="torch 1.x aliases of the standard library")
