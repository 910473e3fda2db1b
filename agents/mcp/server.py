"""The MCP server of one repository, on stdio or on streamable HTTP bound to loopback."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from torchport.tools import __version__

from . import handlers, resources
from .http_auth import RequireToken
from .session import Session

LOOPBACK_NAMES = ("localhost",)
INSTRUCTIONS = """\
torchport ports PyTorch programs off CUDA (to tpu, neuron, xla or device-agnostic
torch.accelerator code) and proves the port by running it in a sandbox on an emulated
device, against the original's own numbers. Typical session: scan (what ties the code to
CUDA) -> plan -> migrate (a proposal: diff and numbered changes; nothing written) ->
verify (its verdict and evidence) -> apply with confirm: true (the only call that
writes). Every path is confined to the repository this server was started on."""


def build(repo: Path, settings: dict[str, Any]) -> MCPServer:
    """The server for ``repo`` (resolved), its runs bounded by ``settings``."""
    server = MCPServer(
        "torchport", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    session = Session(repo.resolve(), settings)
    handlers.register(server, session)
    resources.register(server, session)
    return server


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    """The bound, listening socket of ``--http PORT`` on ``host`` (loopback only); OSError
    when the port is taken. Bound before the server starts, so that whoever waits for the
    announcement can connect at once."""
    if not is_loopback(host):
        raise ValueError(f"{host} is not a loopback address: the server listens on loopback only")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host.strip("[]"), port), family=family)


def serve(server: MCPServer, bound: socket.socket | None = None, token: str = "") -> None:
    """stdio (``bound`` None), or streamable HTTP at /mcp on the loopback socket ``bound``
    (``listen``), where every request must carry ``Authorization: Bearer TOKEN``
    (``http_auth``)."""
    if bound is None:
        server.run("stdio")
        return
    if not token:
        raise ValueError("streamable HTTP needs a token: any local process can reach loopback")
    import anyio
    import uvicorn

    host = bound.getsockname()[0]
    # the SDK's own app (its Host and Origin checks for a loopback host included), behind
    # the token; served by uvicorn as the SDK's run("streamable-http") serves it
    app = RequireToken(server.streamable_http_app(host=host), token)
    config = uvicorn.Config(app, log_level="warning")
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[bound]))
