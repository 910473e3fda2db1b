"""Pretrained weights that are a download, offline: the model keeps its own initialisation.

Programs fetch pretrained weights while they build the model (torchvision's
``resnet50(pretrained=True)`` and ``weights.get_state_dict``, ``torch.hub.
load_state_dict_from_url``, ``torch.utils.model_zoo.load_url``). The sandbox has no network,
so the fetch fails and the program never reaches its first step, in the original as in the
port. A state dict cannot be made up, but a verification does not need the pretrained
values: it needs both runs to start from the same parameters. So when the download fails,
the fetch returns :class:`InitialWeights`, which ``Module.load_state_dict`` takes as "keep
the parameters the module has" (its deterministic, seeded initialisation, identical in both
runs). That is recorded, and the report says the weights were not the pretrained ones.

Only a state dict passed on unchanged can mean that: code that reads its entries (to rename
or drop keys) gets :class:`PretrainedWeightsUnavailable`, naming the URL. A file already in
the hub cache, and ``torch.load`` of any file, are untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from .. import patching
from .data import record

if TYPE_CHECKING:  # torch is imported by install(): importing the sandbox must not cost it
    import torch

DATASET = "pretrained weights"  # what the records call it (the report gives it its own line)
STANDIN = "not downloaded (no network): the model keeps its own initialisation, in both runs"


class PretrainedWeightsUnavailable(RuntimeError):
    """The program reads the entries of weights that could not be downloaded."""

    def __init__(self, url: str) -> None:
        super().__init__(
            f"pretrained weights {url} are a download and the sandbox has no network; "
            "torchport keeps the model's own initialisation only when the state dict goes "
            "to Module.load_state_dict unchanged, and this program reads its entries"
        )


class InitialWeights(dict):
    """The state dict for weights that could not be downloaded: loading it keeps the module's
    parameters; reading an entry fails, naming ``url``. ``in`` and ``.get`` answer as an
    empty dict does, so ``ckpt.get("model", ckpt)`` still hands this on."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def _unavailable(self, *_: Any, **__: Any) -> NoReturn:
        raise PretrainedWeightsUnavailable(self.url)

    __getitem__ = __delitem__ = __iter__ = _unavailable
    keys = values = items = pop = copy = _unavailable


_BY = "synthetic.weights"


def _offline_load_url(url: str, *args: Any, **kwargs: Any) -> Any:
    import torch.hub

    try:
        real = patching.original(torch.hub, "load_state_dict_from_url")
        return real(url, *args, **kwargs)
    except OSError:  # URLError, a failed DNS lookup, a refused connection: no download
        record("torch.hub", DATASET, 0, path=url, standin=STANDIN)
        return InitialWeights(url)


def _load_state_dict(self: torch.nn.Module, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
    import torch
    from torch.nn.modules.module import _IncompatibleKeys

    if isinstance(state_dict, InitialWeights):
        return _IncompatibleKeys([], [])
    real = patching.original(torch.nn.Module, "load_state_dict")
    return real(self, state_dict, *args, **kwargs)


def install() -> None:
    """Patch the download functions (``torch.hub``'s and ``model_zoo``'s, one function) and
    ``Module.load_state_dict``, for this process (once)."""
    import torch.hub
    import torch.utils.model_zoo

    if patching.active(_BY):
        return
    patching.patch(torch.hub, "load_state_dict_from_url", _offline_load_url, by=_BY)
    patching.patch(torch.utils.model_zoo, "load_url", _offline_load_url, by=_BY)
    patching.patch(torch.nn.Module, "load_state_dict", _load_state_dict, by=_BY)


def uninstall() -> None:
    patching.undo_all(_BY)
