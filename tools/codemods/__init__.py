"""Codemods: the catalogue's ``auto`` fixes, applied through libcst.

Each module registers the fixers of one family of rules; importing this
package registers them all, then checks them against the catalogue's fix kinds
in both directions (``consistency``), so every path that can run a codemod
(migrate, the agents, the tests) refuses a catalogue and registry that disagree.
"""

from ..catalogue import load_catalogue
from . import (  # noqa: F401 - registration
    amp,
    apex,
    apex_amp,
    bitsandbytes,
    cli_flags,
    config,
    cuda_host,
    device,
    events,
    flash_attn,
    graphs,
    launch_blocking,
    matmul_precision,
    optimizer_move,
    parallel,
    runtime,
    scaler,
    sdpa_backends,
    start_method,
    tensor_alias,
    tpu_launch,
    triton_fallback,
    visible_devices,
    xformers,
)
from .base import FIXERS, NotApplicable
from .consistency import check_fixers
from .engine import Edit, SourceResult, migrate_python
from .text import TEXT_CODEMODS

check_fixers(load_catalogue(), FIXERS, TEXT_CODEMODS)

__all__ = ["FIXERS", "Edit", "NotApplicable", "SourceResult", "migrate_python"]
