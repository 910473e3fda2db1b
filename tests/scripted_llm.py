"""A scripted OpenAI-compatible server: a test double for the LLM endpoint, not a model.

Each ``POST /v1/chat/completions`` takes the next step of a fixed script and answers
with it (a reply, tool calls, a refusal, an HTTP error, a delay, or a reply computed
from the request), in real OpenAI ``chat.completion`` JSON with ``usage``, over real
HTTP on loopback. Every request body is recorded so tests can assert what the client
sent. ``GET /v1/models`` lists one model.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Content:
    """An assistant message with text content."""

    text: str
    finish_reason: str = "stop"
    prompt_tokens: int = 100
    completion_tokens: int = 20


@dataclass(frozen=True)
class ToolCalls:
    """An assistant message with native tool calls: (name, arguments dict or raw JSON text)."""

    calls: list[tuple[str, dict | str]]
    prompt_tokens: int = 100
    completion_tokens: int = 20


@dataclass(frozen=True)
class Refusal:
    """An assistant message whose ``refusal`` field is set (content null)."""

    text: str = "I can't help with that."


@dataclass(frozen=True)
class HTTPError:
    """An HTTP error status with an OpenAI-style error body."""

    status: int
    message: str = "scripted error"


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` (to outlast a client timeout), then answer ``then``."""

    seconds: float
    then: Step | None = None


Step = Content | ToolCalls | Refusal | HTTPError | Delay | Callable[[dict], "Step"]
MODEL = "scripted"


@dataclass
class ScriptedLLM:
    """Serve ``script`` on 127.0.0.1 (port chosen by the OS) while used as a context manager."""

    script: list[Step]
    requests: list[dict] = field(default_factory=list)  # parsed request bodies, in order
    bodies: list[str] = field(default_factory=list)  # the raw bodies, to search for leaks
    exhausted: int = 0  # requests that came after the script ran out

    def __post_init__(self) -> None:
        self._steps = list(self.script)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._ids = 0

    @property
    def base_url(self) -> str:
        assert self._server is not None, "use ScriptedLLM as a context manager"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedLLM:
        handler = type("Handler", (_Handler,), {"scripted": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.handle_error = lambda request, address: None  # clients that hung up
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._closing.set()
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, request: dict, body: str) -> Step | None:
        with self._lock:
            self.requests.append(request)
            self.bodies.append(body)
            if not self._steps:
                self.exhausted += 1
                return None
            return self._steps.pop(0)

    def _call_id(self) -> str:
        with self._lock:
            self._ids += 1
            return f"call_{self._ids}"


class _Handler(BaseHTTPRequestHandler):
    scripted: ScriptedLLM
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self._json(404, _error("no such route", 404))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8")
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._json(404, _error("no such route", 404))
            return
        request = json.loads(body)
        step = self.scripted._next(request, body)
        if step is None:
            self._json(400, _error("scripted LLM: script exhausted", 400))
            return
        self._answer(step, request)

    def _answer(self, step: Step, request: dict) -> None:
        while callable(step):
            step = step(request)
        if isinstance(step, Delay):
            if self.scripted._closing.wait(step.seconds) or step.then is None:
                return
            self._answer(step.then, request)
            return
        if isinstance(step, HTTPError):
            self._json(step.status, _error(step.message, step.status))
            return
        message: dict = {"role": "assistant", "content": None}
        prompt, completion, finish = 100, 20, "stop"
        if isinstance(step, Content):
            message["content"] = step.text
            prompt, completion, finish = (
                step.prompt_tokens,
                step.completion_tokens,
                step.finish_reason,
            )
        elif isinstance(step, ToolCalls):
            message["tool_calls"] = [
                {
                    "id": self.scripted._call_id(),
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
                for name, args in step.calls
            ]
            prompt, completion, finish = step.prompt_tokens, step.completion_tokens, "tool_calls"
        elif isinstance(step, Refusal):
            message["refusal"] = step.text
        else:
            raise TypeError(f"not a script step: {step!r}")
        self._json(
            200,
            {
                "id": "chatcmpl-scripted",
                "object": "chat.completion",
                "created": 0,
                "model": request.get("model", MODEL),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            },
        )

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


def _error(message: str, status: int) -> dict:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
