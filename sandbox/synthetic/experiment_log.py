"""A ``wandb`` that records nothing, for programs that log their experiments to Weights &
Biases when wandb is not installed (or cannot be: an old pin with no wheel).

Logging does not change what a program computes, and in the sandbox a real wandb could
not reach its server anyway (the session sets ``WANDB_MODE=disabled`` for a real one).
Every call is accepted and dropped; using the stand-in is recorded.
"""

from __future__ import annotations

import sys
from typing import Any

from .data import record


class _Config(dict):
    """``run.config``: a dict with attribute access, as wandb's is."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def update(self, *args: Any, **kwargs: Any) -> None:  # wandb's takes allow_val_change=
        kwargs.pop("allow_val_change", None)
        super().update(*args, **kwargs)


def _as_mapping(config: Any) -> dict:
    """wandb takes a dict, an argparse Namespace or any object with attributes."""
    if config is None:
        return {}
    if isinstance(config, dict):
        return config
    return dict(vars(config)) if hasattr(config, "__dict__") else dict(config)


class Run:
    """What ``wandb.init`` returns: every method a no-op."""

    def __init__(self, **settings: Any) -> None:
        self.config = _Config(_as_mapping(settings.get("config")))
        self.id = self.name = "torchport-offline"

    def __getattr__(self, name: str) -> Any:
        return _ignore

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class _Media:
    """``wandb.Image``, ``Histogram``, ``Table``, ...: built and never sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


def init(*args: Any, **kwargs: Any) -> Run:
    record("wandb", "experiment log", 0, standin="wandb.init records nothing here")
    current = Run(**kwargs)
    for module in (sys.modules[__name__], sys.modules.get("wandb")):
        if module is not None:  # wandb.run and wandb.config follow the current run
            module.__dict__.update(run=current, config=current.config)
    return current


run: Run | None = None
config = _Config()
log = watch = finish = login = save = define_metric = alert = _ignore
Image = Histogram = Table = Video = Audio = Object3D = Html = Artifact = _Media
PUBLIC = (
    "init", "run", "config", "log", "watch", "finish", "login", "save", "define_metric",
    "alert", "Image", "Histogram", "Table", "Video", "Audio", "Object3D", "Html", "Artifact",
    "Run",
)  # fmt: skip
