"""The MCP server of one repository, on stdio or on streamable HTTP bound to loopback."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from torchport.tools import __version__

from . import resources, tools
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
    tools.register(server, session)
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


def serve(server: MCPServer, port: int | None = None, host: str = "127.0.0.1") -> None:
    """stdio (the default), or streamable HTTP at http://HOST:PORT/mcp on loopback only."""
    if port is None:
        server.run("stdio")
        return
    if not is_loopback(host):
        raise ValueError(f"{host} is not a loopback address: the server listens on loopback only")
    server.run("streamable-http", host=host, port=port)
