"""The one way the sandbox replaces an attribute of torch: named, listed, undoable.

The shim, the emulator, the step budget, the synthetic data and the rendezvous guard all
rewrite attributes of torch modules and classes in place (user code imported later must
see the replacements). Doing it only through `patch()` means every replacement in effect
is listed (`active()`: what a torch upgrade must re-check, see TORCH_PRIVATE_API.md), and
any of them can be undone exactly (`undo`, `undo_all`), which the in-process tests rely
on. Patches that last the whole run are simply never undone; they are still listed.

A patch of an attribute that another patch already replaced stacks on it: undoing either
one, in any order, leaves the attribute as the patches still in effect make it.
Standard library only: importing it needs no torch.
"""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass
from typing import Any

_MISSING: Any = object()


@dataclass(eq=False)
class Patch:
    """One replaced attribute: ``name`` is what it stands in for (``torch.cuda.Event``),
    ``by`` who replaced it (``shim.cuda_api``); ``original`` is what the attribute read
    before (inherited ones included); ``before`` is the value undoing it puts back
    (`_MISSING` when the attribute was inherited or computed: undoing deletes)."""

    name: str
    by: str
    owner: Any
    attr: str
    value: Any
    original: Any
    before: Any


_registry: list[Patch] = []


def _qualified(owner: Any) -> str:
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return f"<{type(owner).__qualname__} object>"


def _own_value(owner: Any, attr: str) -> Any:
    """The value stored on ``owner`` itself, or `_MISSING` if inherited or computed."""
    try:
        return vars(owner).get(attr, _MISSING)
    except TypeError:  # no __dict__
        return _MISSING


def patch(owner: Any, attr: str, value: Any, *, by: str) -> Patch:
    """Set ``owner.attr = value`` and list it as done ``by`` (a dotted component name)."""
    name = f"{_qualified(owner)}.{attr}"
    previous = getattr(owner, attr, None)
    done = Patch(name, by, owner, attr, value, previous, _own_value(owner, attr))
    setattr(owner, attr, value)
    _registry.append(done)
    return done


def original(owner: Any, attr: str) -> Any:
    """The value ``owner.attr`` had before the oldest patch in effect (or its current one)."""
    for done in _registry:
        if done.owner is owner and done.attr == attr:
            return done.original
    return getattr(owner, attr)


def active(by: str | None = None) -> list[Patch]:
    """The patches in effect, oldest first; only those of component ``by`` (and its
    sub-components, ``shim`` covers ``shim.amp``) when given."""
    return [done for done in _registry if by is None or _within(done.by, by)]


def _within(component: str, by: str) -> bool:
    return component == by or component.startswith(by + ".")


def undo(done: Patch) -> None:
    """Take one patch back. If a later patch of the same attribute is still in effect, the
    attribute keeps its value and that later patch will restore what this one replaced."""
    index = next(i for i, p in enumerate(_registry) if p is done)
    later = [p for p in _registry[index + 1 :] if p.owner is done.owner and p.attr == done.attr]
    del _registry[index]
    if later:
        later[0].before = done.before
    elif done.before is _MISSING:
        with contextlib.suppress(AttributeError):
            delattr(done.owner, done.attr)
    else:
        setattr(done.owner, done.attr, done.before)


def undo_all(by: str) -> None:
    """Undo every patch of component ``by`` (and its sub-components), newest first."""
    for done in reversed(active(by)):
        undo(done)
