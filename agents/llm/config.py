"""Which LLM endpoint the agents talk to, if any: one frozen value resolved from a flag and env.

Kept apart from the client so the CLI can decide (and report) "rules only", "this
endpoint" or "the embedded local model" before anything is started or connected.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

LOCAL_MODEL = "qwen2.5-coder-1.5b-instruct"
# For an explicit endpoint without TORCHPORT_LLM_MODEL: llama.cpp, vLLM (single model)
# and Ollama-style servers accept any name and serve what they loaded, so a placeholder
# name works there; hosted APIs answer a clear "model not found" that names the variable.
DEFAULT_REMOTE_MODEL = "default"
NO_KEY = "not-needed"

ENV_BASE_URL = "TORCHPORT_LLM_BASE_URL"
ENV_MODEL = "TORCHPORT_LLM_MODEL"
ENV_KEYS = ("TORCHPORT_LLM_API_KEY", "OPENAI_API_KEY")  # first one set wins

VALID_FLAGS = ("none", "auto", "local", "http://HOST[:PORT]/v1", "https://HOST/v1")


class LLMConfigError(ValueError):
    """The LLM settings are unusable; the message says which values are valid."""


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str
    api_key: str = field(default=NO_KEY, repr=False)  # never printed, never logged
    timeout_s: float = 120.0
    max_retries: int = 3
    temperature: float = 0.0
    max_tokens: int = 1024
    local: bool = False  # the caller starts the embedded server and fills base_url

    def to_json(self) -> dict:
        """The settings for a report, without the key."""
        data = dataclasses.asdict(self)
        data["api_key"] = "set" if self.api_key != NO_KEY else "none"
        return data


def with_base_url(
    cfg: LLMConfig, url: str, *, model: str | None = None, api_key: str | None = None
) -> LLMConfig:
    """The same settings pointed at ``url``: for the local server once it listens, with the
    model name it answers to and the key it demands (``LocalServer.model``/``.api_key``)."""
    return dataclasses.replace(
        cfg,
        base_url=url.rstrip("/"),
        model=model or cfg.model,
        api_key=api_key or cfg.api_key,
    )


def _api_key(env: Mapping[str, str]) -> str:
    return next((env[name] for name in ENV_KEYS if env.get(name)), NO_KEY)


def _remote(url: str, env: Mapping[str, str]) -> LLMConfig:
    return LLMConfig(
        base_url=url.rstrip("/"),
        model=env.get(ENV_MODEL) or DEFAULT_REMOTE_MODEL,
        api_key=_api_key(env),
    )


def _local(env: Mapping[str, str]) -> LLMConfig:
    return LLMConfig(base_url="", model=env.get(ENV_MODEL) or LOCAL_MODEL, local=True)


def local_available() -> bool:
    """Whether the embedded model server can run (llama-cpp-python is installed)."""
    return importlib.util.find_spec("llama_cpp") is not None


KEYWORDS = ("none", "auto", "local")


def check_flag(flag: str) -> str:
    """``flag`` if --llm accepts it (a keyword in any case, or an http(s) URL naming a
    host), else LLMConfigError saying what is valid: checked when the command line is
    read, so a typo fails before a run starts rather than after its first stage."""
    value = flag.strip()
    if value.lower() in KEYWORDS:
        return value.lower()
    if value.startswith(("http://", "https://")):
        _check_url(value, "--llm")
        return value
    raise LLMConfigError(f"unknown LLM setting {flag!r}; valid values: {', '.join(VALID_FLAGS)}")


def _check_url(url: str, what: str) -> None:
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # ValueError for a port that is not a number
    except ValueError as exc:
        raise LLMConfigError(f"{what} {url!r} is not a usable URL: {exc}") from None
    if not parts.hostname or any(c.isspace() or not c.isprintable() for c in url):
        raise LLMConfigError(f"{what} {url!r} is not an http(s) URL with a host")


def resolve(flag: str | None, env: Mapping[str, str]) -> LLMConfig | None:
    """The LLM to use for ``--llm FLAG``; None means rules only.

    ``none``: rules only. A URL: that OpenAI-compatible endpoint. ``local``: the
    embedded model (base_url left empty for the caller). ``auto`` or no flag:
    $TORCHPORT_LLM_BASE_URL if set, else the local model if it can run, else none.
    """
    value = check_flag(flag or "auto")
    if value == "none":
        return None
    if value == "local":
        return _local(env)
    if value != "auto":
        return _remote(value, env)
    url = env.get(ENV_BASE_URL, "").strip()
    if not url:
        return _local(env) if local_available() else None
    if not url.startswith(("http://", "https://")):
        raise LLMConfigError(f"{ENV_BASE_URL}={url!r} is not an http(s) URL")
    _check_url(url, ENV_BASE_URL)
    return _remote(url, env)
