"""`torchport mcp --http` against a local process that is not the user's agent (issue 29,
hole 6). Loopback stops other machines and the Host/Origin checks stop web pages, but any
local process could call the tools: `run ["python", "-m", "quopri", ".env"]` returned an
untracked `.env`, and `migrate` then `apply {confirm: true, force: true}` rewrote tracked
files. Now every request needs `Authorization: Bearer TOKEN`.

The server is the real CLI on 127.0.0.1, driven by the MCP SDK's own client; a request
without the token (or with a wrong one, or a session id stolen from an authenticated
client) is refused before any tool runs: the `.env` is not returned, nothing is applied.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra (pip install -e '.[mcp]') is not installed")

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from test_mcp import cuda_mnist, files_of, free_port, git, server_env, text_of
from torchport.agents.mcp.http_auth import (
    TOKEN_VARIABLE,
    RequireToken,
    TokenError,
    server_token,
)

CANARY = "DATABASE_PASSWORD=canary-7f3e9a1b"  # an untracked .env the caller must not see
ANNOUNCED = re.compile(r"serving (http://\S+/mcp); .*TOKEN: (.+)$")


class Server:
    """`torchport mcp REPO --http PORT` as a process; its standard error read as it comes
    (the announcement says where it listens and the token; every line is kept)."""

    ANNOUNCE_S = 120  # the server's start-up: imports, the repository's configuration

    def __init__(self, repo: Path, env: dict[str, str]) -> None:
        cmd = [sys.executable, "-m", "torchport.cli", "mcp", str(repo)]
        self.process = subprocess.Popen(
            [*cmd, "--http", str(free_port())], stderr=subprocess.PIPE, text=True, env=env
        )
        self.log: list[str] = []
        self.url = self.token = ""
        self._announced = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(self.process.stderr,))
        self._reader.start()
        if not self._announced.wait(self.ANNOUNCE_S) or not self.url:
            self.stop()
            pytest.fail(f"the server announced no URL and token: {''.join(self.log)}")

    def _read(self, stream: IO[str]) -> None:
        for line in stream:  # the announcement comes once the port is bound
            self.log.append(line)
            if (found := ANNOUNCED.search(line.strip())) and not self.url:
                self.url, self.token = found.groups()
                self._announced.set()
        self._announced.set()  # ended without one

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self._reader.join()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """examples/cuda_mnist as a clean git checkout, with an untracked .env beside it."""
    repo = cuda_mnist(tmp_path)
    (repo / ".gitignore").write_text(".env\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore .env")
    (repo / ".env").write_text(CANARY + "\n")
    return repo


def client_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


@asynccontextmanager
async def connected(url: str, http: httpx2.AsyncClient) -> AsyncIterator[ClientSession]:
    async with (
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        yield client


Body = Callable[[ClientSession, httpx2.AsyncClient], Awaitable[Any]]


def through_http(url: str, token: str | None, body: Body) -> Any:
    """``body`` with the SDK's client, over an HTTP client whose requests carry ``token``
    (None: no Authorization header); ``body`` may change its headers as it goes."""

    async def session() -> Any:
        timeout = httpx2.Timeout(30.0, read=300.0)
        headers = client_headers(token)
        async with (
            httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
            connected(url, http) as client,
        ):
            return await body(client, http)

    return anyio.run(session)


async def refusal(call: Awaitable[Any]) -> str:
    """The error an MCP call ends with (inside the client's task group, so that it is the
    call's own error, not the group's); the test fails if the call succeeds."""
    try:
        answer = await call
    except MCPError as exc:
        return str(exc)
    pytest.fail(f"answered without the token: {answer}")


async def initialised(client: ClientSession, http: httpx2.AsyncClient) -> str:
    return await refusal(client.initialize())


LEAK = {"command": ["python", "-m", "quopri", ".env"]}


@pytest.mark.slow
def test_no_token_no_tools(repo: Path, tmp_path: Path) -> None:
    server = Server(repo, server_env(tmp_path))
    try:
        # the process that is not the agent: no token, or a guessed one
        for token in (None, "not-the-token", server.token[:-1], server.token.lower()):
            assert "unauthorized" in through_http(server.url, token, initialised)

        # the agent: with the token, the same calls work (so the refusals above were the
        # token's, not something else's) ...
        seen: dict[str, Any] = {}

        async def agent(client: ClientSession, http: httpx2.AsyncClient) -> None:
            await client.initialize()
            ran = await client.call_tool("run", LEAK)
            seen["run"] = str(ran.structured_content or text_of(ran))
            made = await client.call_tool("migrate", {"target": "tpu"})
            seen["proposal"] = made.structured_content["proposal_id"]
            assert made.structured_content["files"]
            # ... and an intruder that steals its session id (the header the client sends)
            # but has no token is refused, the tool never running
            del http.headers["Authorization"]
            seen["refused"] = [await refusal(client.call_tool("run", LEAK))]
            before = files_of(repo)
            apply = {"proposal_id": seen["proposal"], "confirm": True, "force": True}
            seen["refused"].append(await refusal(client.call_tool("apply", apply)))
            seen["unchanged"] = files_of(repo) == before
            http.headers["Authorization"] = f"Bearer {server.token}"
            applied = await client.call_tool("apply", apply)
            seen["applied"] = not applied.is_error and files_of(repo) != before

        through_http(server.url, server.token, agent)
    finally:
        server.stop()
    assert "canary-7f3e9a1b" in seen["run"]  # the tool does read it, for the agent
    assert all("unauthorized" in r and "canary" not in r for r in seen["refused"])
    assert seen["unchanged"] and seen["applied"]


@pytest.mark.slow
def test_the_users_token_reaches_no_child(repo: Path, tmp_path: Path) -> None:
    """TORCHPORT_MCP_TOKEN is the token; the server does not echo it, and a program the
    server runs (through its worker and the sandbox) finds it nowhere in its environment."""
    token = "user-chosen-token-0123456789abcdef"
    server = Server(repo, {**server_env(tmp_path), TOKEN_VARIABLE: token})
    (repo / "show_env.py").write_text("import os\nprint(sorted(os.environ.items()))\n")
    show_env = ["python", "show_env.py"]

    async def agent(client: ClientSession, http: httpx2.AsyncClient) -> str:
        await client.initialize()
        ran = await client.call_tool("run", {"command": show_env})
        assert not ran.is_error, text_of(ran)
        assert ran.structured_content["status"] == "ok", ran.structured_content["error"]
        return str(ran.structured_content)

    try:
        assert "unauthorized" in through_http(server.url, None, initialised)
        shown = through_http(server.url, token, agent)
    finally:
        server.stop()
    assert server.token == f"the value of {TOKEN_VARIABLE}"  # not echoed
    assert "PATH" in shown and token not in shown and TOKEN_VARIABLE not in shown
    assert token not in "".join(server.log)


# --- the token and the middleware, in-process ------------------------------------------------


def test_the_token_leaves_the_environment_before_any_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_VARIABLE, "a-token-of-the-users-0123456789")
    assert server_token() == ("a-token-of-the-users-0123456789", True)
    assert TOKEN_VARIABLE not in os.environ
    child = subprocess.run(
        [sys.executable, "-c", f"import os; print(os.environ.get({TOKEN_VARIABLE!r}))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == "None"
    # none given: a fresh random one each time, long enough not to be guessed
    first, second = server_token({}), server_token({})
    assert first[1] is False and first[0] != second[0] and len(first[0]) >= 40


def test_a_weak_token_is_refused_without_echoing_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "torchport.cli", "mcp", str(tmp_path), "--http", str(free_port())],
        env={**os.environ, TOKEN_VARIABLE: "short-token"},
        capture_output=True,
        text=True,
        timeout=120,  # a server that took it would serve until killed
    )
    refusal = f"{TOKEN_VARIABLE}: must be at least 16 visible ASCII characters"
    assert done.returncode == 2 and refusal in done.stderr, done.stderr
    assert "short-token" not in done.stderr and "Traceback" not in done.stderr
    for weak in ("has a space in it somewhere", "tab\tin-the-token-0123456", "é" * 20):
        with pytest.raises(TokenError, match=refusal) as refused:
            server_token({TOKEN_VARIABLE: weak})
        assert weak not in str(refused.value)


class Inner:
    """The app behind the middleware: records whether a request reached it."""

    def __init__(self) -> None:
        self.reached: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.reached.append(scope["type"])
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"tool ran"})


def asgi_call(app: Any, scope_type: str, headers: list[tuple[bytes, bytes]]) -> list[dict]:
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": scope_type, "headers": headers, "method": "POST", "path": "/mcp"}
    anyio.run(app, scope, receive, send)
    return sent


TOKEN = "the-servers-token-0123456789"


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer wrong-token-0123456789abc")],
        [(b"authorization", b"Basic " + TOKEN.encode())],  # not the bearer scheme
        [(b"authorization", TOKEN.encode())],  # no scheme
        [(b"authorization", b"Bearer " + TOKEN.encode() + b"x")],
        [(b"authorization", b"Bearer " + TOKEN[:-1].encode())],
        [(b"authorization", b"Bearer " + TOKEN.encode()), (b"authorization", b"Bearer x")],
        [(b"x-authorization", b"Bearer " + TOKEN.encode())],
    ],
)
def test_a_request_without_the_token_reaches_nothing(headers: list) -> None:
    inner = Inner()
    sent = asgi_call(RequireToken(inner, TOKEN), "http", headers)
    assert inner.reached == []
    assert sent[0]["status"] == 401
    assert (b"www-authenticate", b'Bearer realm="torchport mcp"') in sent[0]["headers"]
    assert b"unauthorized" in sent[1]["body"] and TOKEN.encode() not in sent[1]["body"]


def test_the_token_lets_a_request_through() -> None:
    inner = Inner()
    for scheme in (b"Bearer", b"bearer", b"BEARER"):
        headers = [(b"authorization", scheme + b" " + TOKEN.encode())]
        sent = asgi_call(RequireToken(inner, TOKEN), "http", headers)
        assert sent[0]["status"] == 200
    asgi_call(RequireToken(inner, TOKEN), "lifespan", [])  # the session manager's start-up
    assert inner.reached == ["http", "http", "http", "lifespan"]
