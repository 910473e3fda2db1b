"""Reversible monkeypatching: every attribute the shim replaces is remembered here.

The shim rewrites attributes of torch modules and classes in place (user code imported
later must see the replacements); keeping the originals lets `deactivate()` restore the
process exactly, which the in-process unit tests rely on.
"""

from __future__ import annotations

import contextlib
from typing import Any

_MISSING = object()
_saved: list[tuple[Any, str, Any]] = []


def patch(owner: Any, name: str, value: Any) -> Any:
    """Set `owner.name = value`, remembering the previous value; return the previous value."""
    old = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
    if old is _MISSING:
        old = getattr(owner, name, _MISSING)
        # Inherited or dynamically produced: restoring means deleting our override.
        _saved.append((owner, name, _MISSING))
    else:
        _saved.append((owner, name, old))
    setattr(owner, name, value)
    return None if old is _MISSING else old


def original(owner: Any, name: str) -> Any:
    """The value `owner.name` had before the shim first patched it (or its current one)."""
    for saved_owner, saved_name, old in _saved:
        if saved_owner is owner and saved_name == name and old is not _MISSING:
            return old
    return getattr(owner, name)


def restore_all() -> None:
    """Undo every patch, newest first."""
    while _saved:
        owner, name, old = _saved.pop()
        if old is _MISSING:
            with contextlib.suppress(AttributeError):
                delattr(owner, name)
        else:
            setattr(owner, name, old)
