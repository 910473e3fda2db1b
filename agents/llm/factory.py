"""Turn the ``--llm`` setting into a client, starting the embedded model when asked.

Kept apart from ``agents.llm`` so that rules-only runs never import the
openai SDK, and so the graph sees one callable: settings -> client or None.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

# A running embedded-model server to use instead of starting one (set by `torchport batch`
# for its local jobs, so that N jobs share one 2 GB model rather than start N).
SHARED_LOCAL_URL = "TORCHPORT_LOCAL_LLM_URL"
SHARED_LOCAL_MODEL = "TORCHPORT_LOCAL_LLM_MODEL"


class LLMSetupError(RuntimeError):
    """The LLM that was asked for cannot be used (bad flag, model not installed)."""


def llm_factory(say: Callable[[str], None]) -> Callable[[Mapping[str, Any]], Any]:
    """A factory the graph calls once, the first time a node needs the LLM."""

    def make(settings: Mapping[str, Any]) -> Any:
        from .client import LLMClient
        from .config import LLMConfigError, resolve

        try:
            config = resolve(settings.get("llm"), os.environ)
        except LLMConfigError as exc:
            raise LLMSetupError(str(exc)) from exc
        if config is None:
            return None
        if config.local and os.environ.get(SHARED_LOCAL_URL):
            from .config import with_base_url

            url = os.environ[SHARED_LOCAL_URL]
            model = os.environ.get(SHARED_LOCAL_MODEL) or config.model
            config = with_base_url(config, url, model=model)
            say(f"using the embedded model already running at {url}")
        elif config.local:
            from . import local
            from .config import with_base_url

            say("starting the embedded model (llama.cpp, loopback only)")
            try:
                server = local.LocalServer.shared()
            except local.LocalModelError as exc:
                raise LLMSetupError(str(exc)) from exc
            config = with_base_url(
                config,
                server.base_url,
                model=server.model,
                api_key=getattr(server, "api_key", None),
            )
        say(f"LLM: {config.model} at {config.base_url}")
        return LLMClient(config)

    return make
