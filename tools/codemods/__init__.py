"""Codemods: the catalogue's ``auto`` fixes, applied through libcst.

Each module registers the fixers of one family of rules; importing this
package registers them all.
"""

from . import (  # noqa: F401 - registration
    amp,
    config,
    device,
    events,
    optimizer_move,
    parallel,
    runtime,
    scaler,
    tensor_alias,
    visible_devices,
)
from .base import FIXERS, NotApplicable
from .engine import Edit, SourceResult, migrate_python

__all__ = ["FIXERS", "Edit", "NotApplicable", "SourceResult", "migrate_python"]
