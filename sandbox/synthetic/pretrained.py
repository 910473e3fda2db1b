"""Hugging Face ``from_pretrained`` offline: a model whose configuration is known here is
built at its own initialisation, and the run says so.

``GPT2LMHeadModel.from_pretrained("gpt2")`` and ``AutoModel.from_pretrained(...)`` fetch a
config and weights from the Hub; the sandbox has no network, so the program stops before
its first step, in the original as in the port. As with ``weights`` (torch.hub's
downloads), a verification needs both runs to start from the same parameters, not the
pretrained values: where the download fails and the configuration is known offline, the
model is built from it (``cls(config)``, in eval mode as ``from_pretrained`` returns it,
seeded identically in both runs), and recorded as weights not loaded.

A configuration is known offline when the real call finds it (a local folder, the HF
cache), when the program passes one (``config=``), or when the library ships it: a config
class whose defaults are a named checkpoint's architecture (its docstring says "the
defaults will yield a similar configuration to that of the [org/name]") answers for that
checkpoint. Anything else fails with :class:`PretrainedUnavailable`, naming what was
asked for and the next step. The hub is set offline (``HF_HUB_OFFLINE``) so that a call
fails at once instead of retrying a network that is not there.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .data import record
from .weights import DATASET

STANDIN = (
    "not downloaded (no network): built from {config} at the model's own initialisation, "
    "in both runs"
)
# "... the defaults will yield a similar configuration to that of the [org/name](url)"
DEFAULTS_OF = re.compile(r"similar\s+configuration\s+to\s+that\s+of\s+the\s+\[([^\]\s]+)\]")


# What a config's from_pretrained consumes itself (where and how to download), never a
# setting of the config nor handed back as unused (AutoModel passes them on itself).
HUB_KWARGS = frozenset(
    {
        "cache_dir",
        "force_download",
        "resume_download",
        "proxies",
        "token",
        "use_auth_token",
        "local_files_only",
        "revision",
        "subfolder",
        "trust_remote_code",
        "code_revision",
        "return_unused_kwargs",
        "mirror",
        "user_agent",
    }
)


class PretrainedUnavailable(OSError):
    """``from_pretrained`` of something whose configuration is not known offline (an
    ``OSError``, as the real call's own failure is)."""

    def __init__(self, what: str, name: str) -> None:
        super().__init__(
            f"{what}.from_pretrained({name!r}): the config and weights are a download from "
            "the Hugging Face Hub and the sandbox has no network, and no configuration for "
            f"{name!r} is known offline (a local folder, the HF cache, a config= argument, "
            "or a config class whose defaults are that checkpoint). Next step: save the "
            "checkpoint (or its config.json) to a folder in the repository and pass that "
            "path, or pass config= to from_pretrained"
        )


def checkpoint(config_class: type) -> str | None:
    """The checkpoint a config class's defaults reproduce, from its docstring."""
    found = DEFAULTS_OF.search(config_class.__doc__ or "")
    return found.group(1) if found else None


def names(name: str, ckpt: str | None) -> bool:
    """Whether ``name`` asks for ``ckpt`` (``gpt2`` is ``openai-community/gpt2``)."""
    if not ckpt:
        return False
    return name.strip("/").lower() in {ckpt.lower(), ckpt.rsplit("/")[-1].lower()}


def shipped(config_class: type, name: str) -> Any:
    """``config_class()`` where its defaults are ``name``'s architecture, else None."""
    return config_class() if names(name, checkpoint(config_class)) else None


def shipped_auto(name: str) -> Any:
    """The default config of the model type ``name`` mentions whose defaults are ``name``
    (only those model types' config classes are imported), else None."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    words = set(re.split(r"[/_.\-]+", name.lower()))
    base = name.lower().rsplit("/", 1)[-1]
    for model_type in CONFIG_MAPPING:
        key = model_type.lower()
        if key in words or base.startswith(key):
            config = shipped(CONFIG_MAPPING[model_type], name)
            if config is not None:
                return config
    return None


def _local(name: Any) -> bool:
    return not isinstance(name, str) or os.path.exists(name)


def _offline(
    real: classmethod[Any, ..., Any], fallback: Callable[..., Any]
) -> classmethod[Any, ..., Any]:
    """``real``, or ``fallback`` where it fails as a download does (an ``OSError``) for a
    name that is not a local path."""

    @functools.wraps(real.__func__)
    def call(cls: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return real.__func__(cls, name, *args, **kwargs)
        except OSError as exc:
            if _local(name) or isinstance(exc, PretrainedUnavailable):
                raise
            return fallback(cls, name, exc, *args, **kwargs)

    return classmethod(call)


def _model(cls: Any, name: str, exc: OSError, *args: Any, **kwargs: Any) -> Any:
    from transformers import PretrainedConfig

    given = kwargs.get("config")
    config = given if isinstance(given, PretrainedConfig) else None
    if config is None and cls.config_class is not None:
        config = shipped(cls.config_class, name)
    if config is None:
        raise PretrainedUnavailable(cls.__name__, name) from exc
    dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
    model = cls(config)
    if dtype not in (None, "auto"):
        model = model.to(dtype)
    model.eval()  # as from_pretrained returns it
    what = "the config= given" if config is given else f"{type(config).__name__}'s defaults"
    record("transformers", DATASET, 0, path=name, standin=STANDIN.format(config=what))
    return model


def _config(cls: Any, name: str, exc: OSError, *args: Any, **kwargs: Any) -> Any:
    config = shipped(cls, name) if checkpoint(cls) else shipped_auto(name)
    if config is None:
        raise PretrainedUnavailable(cls.__name__, name) from exc
    unused = {}
    for key, value in kwargs.items():  # from_pretrained("gpt2", n_layer=2), as the real
        if key in HUB_KWARGS or key.startswith("_"):
            continue
        if hasattr(config, key):
            setattr(config, key, value)
        else:
            unused[key] = value
    return (config, unused) if kwargs.get("return_unused_kwargs") else config


def patch_modeling(mod: ModuleType) -> None:
    """``transformers.modeling_utils``: ``PreTrainedModel.from_pretrained`` offline."""
    base = mod.PreTrainedModel
    base.from_pretrained = _offline(base.__dict__["from_pretrained"], _model)


def patch_configuration(mod: ModuleType) -> None:
    """``transformers.configuration_utils``: a config class's ``from_pretrained`` offline."""
    base = getattr(mod, "PreTrainedConfig", None) or mod.PretrainedConfig
    base.from_pretrained = _offline(base.__dict__["from_pretrained"], _config)


def patch_auto_configuration(mod: ModuleType) -> None:
    """``AutoConfig.from_pretrained`` offline (``AutoModel*`` asks it first)."""
    auto = mod.AutoConfig
    auto.from_pretrained = _offline(auto.__dict__["from_pretrained"], _config)


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "transformers.modeling_utils": patch_modeling,
    "transformers.configuration_utils": patch_configuration,
    "transformers.models.auto.configuration_auto": patch_auto_configuration,
}


def install() -> None:
    """The hub offline for this process and the processes it starts (no network here:
    a download fails at once instead of after retries)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
