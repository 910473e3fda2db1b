"""A small, counted client for any OpenAI-compatible chat endpoint.

The openai SDK does the HTTP; this wrapper does the retries itself (so every retry
is counted and backs off the way we choose), normalises replies into plain data,
keeps a usage tally for reports, and drops native tool calling for the rest of the
session when a server rejects it (small local servers often do), so the caller can
fall back to the JSON-in-content protocol.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import openai
from openai.types.chat import ChatCompletion
from torchport.tools.safetext import REASON_CHARS

from .config import LLMConfig

MAX_BACKOFF_S = 30.0


class LLMError(RuntimeError):
    """The endpoint could not give an answer (after retries, where retrying made sense)."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments_json: str


@dataclass(frozen=True)
class Reply:
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    refusal: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Usage:
    """What a session cost: answered calls, tokens the server reported, retries, wall time."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    seconds: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def since(self, earlier: Usage) -> Usage:
        """The part of this tally that came after the snapshot ``earlier``."""
        return Usage(
            calls=self.calls - earlier.calls,
            prompt_tokens=self.prompt_tokens - earlier.prompt_tokens,
            completion_tokens=self.completion_tokens - earlier.completion_tokens,
            retries=self.retries - earlier.retries,
            seconds=self.seconds - earlier.seconds,
        )

    def to_json(self) -> dict:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        return data


def _retryable(exc: openai.OpenAIError) -> bool:
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return False


def _rejects_tools(exc: openai.OpenAIError) -> bool:
    return (
        isinstance(exc, openai.APIStatusError)
        and exc.status_code == 400
        and "tool" in f"{exc.message} {exc.body}".lower()
    )


def _describe(exc: openai.OpenAIError) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot connect ({exc.__cause__ or exc})"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {str(exc.message)[:REASON_CHARS]}"
    return f"{type(exc).__name__}: {str(exc)[:REASON_CHARS]}"


def plain_messages(messages: list[dict]) -> list[dict]:
    """The conversation without native tool-call messages, for servers without tools."""
    out: list[dict] = []
    for message in messages:
        if message.get("role") == "tool":
            out.append({"role": "user", "content": f"Tool result:\n{message.get('content', '')}"})
        elif message.get("tool_calls"):
            calls = [
                {"tool": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in message["tool_calls"]
            ]
            text = "\n".join(json.dumps(c) for c in calls)
            out.append({"role": "assistant", "content": message.get("content") or text})
        else:
            out.append(message)
    return out


class LLMClient:
    """One endpoint, one model; ``chat`` returns a ``Reply`` or raises ``LLMError``."""

    def __init__(
        self,
        config: LLMConfig,
        *,
        backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not config.base_url:
            raise LLMError("no base_url: start the local model server first (with_base_url)")
        self.config = config
        self.backoff_s = backoff_s
        self.usage = Usage()
        self.tools_supported = True
        self._sleep = sleep
        self._api = openai.OpenAI(
            base_url=config.base_url,
            api_key=config.api_key,
            timeout=config.timeout_s,
            max_retries=0,
        )

    def usage_snapshot(self) -> Usage:
        return replace(self.usage)

    def chat(self, messages: list[dict], tools: list[dict] | None = None) -> Reply:
        """One chat completion, retried on timeouts, connection errors, 429 and 5xx."""
        started = time.monotonic()
        try:
            return self._chat(messages, tools)
        finally:
            self.usage.seconds += time.monotonic() - started

    def _chat(self, messages: list[dict], tools: list[dict] | None) -> Reply:
        attempt = 0
        while True:
            use_tools = bool(tools) and self.tools_supported
            try:
                completion = self._create(
                    messages if use_tools else plain_messages(messages),
                    tools if use_tools else None,
                )
            except openai.OpenAIError as exc:
                if use_tools and _rejects_tools(exc):
                    self.tools_supported = False  # for the rest of the session
                    continue
                if not _retryable(exc):
                    raise LLMError(
                        f"LLM request refused by {self.config.base_url}: {_describe(exc)}"
                    ) from exc
                if attempt >= self.config.max_retries:
                    raise LLMError(
                        f"LLM endpoint {self.config.base_url} failed after "
                        f"{attempt + 1} attempt(s): {_describe(exc)}"
                    ) from exc
                self._sleep(min(self.backoff_s * 2**attempt, MAX_BACKOFF_S))
                attempt += 1
                self.usage.retries += 1
                continue
            return self._reply(completion)

    def _create(self, messages: list[dict], tools: list[dict] | None) -> ChatCompletion:
        kwargs: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if tools:
            kwargs["tools"] = tools
        return self._api.chat.completions.create(**kwargs)

    def _reply(self, completion: ChatCompletion) -> Reply:
        if not completion.choices:
            raise LLMError(f"LLM endpoint {self.config.base_url} returned no choices")
        choice = completion.choices[0]
        message = choice.message
        calls = []
        for call in message.tool_calls or []:
            function = getattr(call, "function", None)
            if function is not None:
                calls.append(ToolCall(call.id, function.name, function.arguments or "{}"))
        usage = completion.usage
        reply = Reply(
            content=message.content,
            tool_calls=calls,
            finish_reason=choice.finish_reason,
            refusal=getattr(message, "refusal", None),
            prompt_tokens=(usage.prompt_tokens or 0) if usage else 0,
            completion_tokens=(usage.completion_tokens or 0) if usage else 0,
        )
        self.usage.calls += 1
        self.usage.prompt_tokens += reply.prompt_tokens
        self.usage.completion_tokens += reply.completion_tokens
        return reply
