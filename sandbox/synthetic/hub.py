"""``torch.hub.list`` without a network: the entry points of a hub repository torch has
not cached are an empty list, recorded.

Programs ask the hub what a repository offers while building their argument parser
(dino's ``main_dino.py`` adds ``torch.hub.list("facebookresearch/xcit:main")`` to its
``--arch`` choices), long before they would load anything from it. In the sandbox that
call can only fail, so the whole program fails before its first line of training; with
no entries the program runs on, and a program that then asks for one of those entries
fails there, naming it. ``torch.hub.load`` is left alone: the repository's code cannot be
made up (pretrained weights fetched by URL are ``weights``'s).
"""

from __future__ import annotations

from typing import Any

from .. import patching
from .data import record

_BY = "synthetic.hub"


def _offline_list(github: str, *args: Any, **kwargs: Any) -> list[str]:
    import torch.hub

    try:
        return patching.original(torch.hub, "list")(github, *args, **kwargs)
    except OSError:  # URLError, a failed DNS lookup: the sandbox has no network
        record("torch.hub", f"list({github!r})", 0, standin="no entries: no network here")
        return []


def install() -> None:
    import torch.hub  # here, not at the top: importing the sandbox must not import torch

    if not patching.active(_BY):
        patching.patch(torch.hub, "list", _offline_list, by=_BY)


def uninstall() -> None:
    patching.undo_all(_BY)
