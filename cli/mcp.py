"""``torchport mcp``: torchport as a Model Context Protocol server for coding agents."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .options import (
    add_exclude,
    add_llm,
    add_run_budget,
    add_tolerance,
    apply_project_config,
    budget_settings,
    fail,
    positive_int,
)

EPILOG = """\
tools (only apply writes to the repository, and only with confirm: true):
  scan          CUDA-specific constructs (file, line, rule, fix per target)
  explain_rule  a rule's documentation and fix per target
  plan          the entry command, and what is automatic, for an LLM, for a person
  migrate       a proposal: unified diff, numbered changes, a proposal id (writes nothing)
  verify        the sandboxed verification of a proposal, or of the working tree
                against its last commit: verdict and evidence (progress, cancellable)
  apply         writes a proposal (clean git tree, backups, atomic writes)
  run           one program in the sandbox, emulated device or CUDA reference shim
resources: torchport://rules/CODE (one per rule), torchport://report/last

Every path a tool takes must lie inside REPO: '..', absolute paths elsewhere and
symlinks that lead out are refused. The user's code runs only in the sandbox.

register it with a coding agent (the usual mcpServers entry):
  {"mcpServers": {"torchport": {"command": "torchport", "args": ["mcp", "/path/to/repo"]}}}

--http needs a token: every request must carry the header 'Authorization: Bearer TOKEN',
or it is answered 401 before any tool runs (any local process can reach loopback). The
token is TORCHPORT_MCP_TOKEN's value (at least 16 characters), else a random one the server
prints once on its standard error when it starts. Either way it is removed from the
environment before the server starts anything: no worker and no sandboxed run sees it.
A client passes it as a header, e.g. in an mcpServers entry:
  {"mcpServers": {"torchport": {"url": "http://127.0.0.1:8765/mcp",
                                "headers": {"Authorization": "Bearer TOKEN"}}}}

examples:
  torchport mcp .                      stdio, for an agent that starts the server
  torchport mcp repo/ --http 8765      http://127.0.0.1:8765/mcp (loopback only), token printed
  TORCHPORT_MCP_TOKEN=$(openssl rand -hex 24) torchport mcp repo/ --http 8765
"""


def add_parser(sub: Any) -> None:
    m = sub.add_parser(
        "mcp",
        help="serve a repository to coding agents over the Model Context Protocol",
        description="A Model Context Protocol server on one repository: scan, plan, migrate "
        "(a proposal), verify (on the emulated device), apply and run, as tools any MCP "
        "client can call. Speaks stdio by default (the client starts it); --http serves "
        "streamable HTTP on a loopback address instead. Needs the `mcp` extra "
        "(pip install 'torchport[mcp]').",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    m.add_argument("repo", nargs="?", default=".", help="the repository served (default: .)")
    m.add_argument(
        "--http",
        type=positive_int,
        metavar="PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; every request "
        "needs 'Authorization: Bearer TOKEN' (TORCHPORT_MCP_TOKEN, else a random token printed "
        "on standard error)",
    )
    m.add_argument(
        "--host",
        default="127.0.0.1",
        help="the loopback address --http binds (default: 127.0.0.1; others are refused)",
    )
    add_llm(m, "none", ": the calling agent is the LLM")
    add_exclude(m)
    verification = m.add_argument_group("verification and run (verify, run)")
    add_run_budget(verification, deps=True)
    add_tolerance(verification)
    m.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    repo = Path(args.repo)
    if not repo.is_dir():
        return fail(f"{args.repo}: not a folder")
    try:
        from torchport.agents.mcp import server
        from torchport.agents.mcp.http_auth import TokenError, server_token
    except ImportError as exc:
        return fail(f"torchport mcp needs the mcp package: pip install 'torchport[mcp]' ({exc})")
    if args.http is not None and not server.is_loopback(args.host):
        return fail(
            f"--host {args.host}: not a loopback address; the server listens on loopback only"
        )
    try:  # out of the environment first, whatever the transport: no child may inherit it
        token, given = server_token()
    except TokenError as exc:
        return fail(str(exc))
    from torchport.agents.project_config import ConfigError

    try:  # the repository's [tool.torchport]: its entry and target are the tools' defaults
        config = apply_project_config(args, repo.resolve())
    except ConfigError as exc:
        return fail(str(exc))
    settings = {
        **budget_settings(args),
        "llm": args.llm,
        "skip": args.skip,
        "exclude": args.exclude,
        "entry": config["entry"],
        "target": config["target"],
    }
    built = server.build(repo, settings)
    bound = None
    if args.http is not None:
        try:
            bound = server.listen(args.host, args.http)
        except OSError as exc:  # the port is taken, or the address is not this machine's
            return fail(f"--http {args.http} on {args.host}: cannot listen: {exc.strerror or exc}")
        _announce(args.host, args.http, token, given)
    server.serve(built, bound, token)
    return 0


def _announce(host: str, port: int, token: str, given: bool) -> None:
    """Where the server listens and how to authenticate, once, on standard error (the
    user's terminal or log, which no program the server runs can read: their output is
    piped, and the worker runs no repository code). A token the user gave is not echoed."""
    from torchport.agents.mcp.http_auth import TOKEN_VARIABLE

    shown = f"the value of {TOKEN_VARIABLE}" if given else token
    url_host = f"[{host}]" if ":" in host else host
    print(
        f"torchport mcp: serving http://{url_host}:{port}/mcp; every request needs the "
        f"header 'Authorization: Bearer TOKEN', TOKEN: {shown}",
        file=sys.stderr,
        flush=True,
    )
