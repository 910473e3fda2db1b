"""Codemods: the catalogue's ``auto`` fixes, applied through libcst.

Each module registers the fixers of one family of rules; importing this
package registers them all.
"""

from . import amp, config, device, events, runtime, tensor_alias  # noqa: F401 - registration
from .base import FIXERS, NotApplicable
from .engine import Edit, SourceResult, migrate_python

__all__ = ["FIXERS", "Edit", "NotApplicable", "SourceResult", "migrate_python"]
