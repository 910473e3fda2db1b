"""``CUDA_LAUNCH_BLOCKING`` becomes TorchTPU's launch-blocking variable (TPD025, tpu).

A CUDA program sets ``CUDA_LAUNCH_BLOCKING=1`` to make every launch synchronous, so an
error is reported at the op that caused it. TorchTPU's libraries read the same switch under
their own name (``sandbox/data/torch_tpu.toml``, ``[environment] launch_blocking``; the
issue's ``TPU_LAUNCH_BLOCKING`` is not a string the wheel holds), with the same meaning of
the value, so the name changes wherever it is written: a Python string (a setting or a
read alike), a shell line, a Makefile, YAML, JSON or a Dockerfile. Apart from
``visible_devices.py`` (TPD024), whose settings need more than a rename.
"""

from __future__ import annotations

import re

import libcst as cst

from ..targets import profile
from .base import FixContext, Fixed, NotApplicable, fixer

CUDA = "CUDA_LAUNCH_BLOCKING"


@fixer("TPD025", {"tpu"})
def launch_blocking(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    if not isinstance(node, cst.SimpleString):
        raise NotApplicable("not a plain string literal")
    return node.with_changes(value=node.value.replace(CUDA, ctx.profile.launch_blocking or ""))


def launch_blocking_text(match: str, target: str) -> str | None:
    """The matched ``CUDA_LAUNCH_BLOCKING`` of a non-Python file, for ``target``."""
    name = profile(target).launch_blocking
    if name is None:
        return None
    return re.sub(rf"\b{CUDA}\b", name, match)
