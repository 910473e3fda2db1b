"""`torchport mcp` driven by the MCP SDK's own client (``ClientSession`` over
``stdio_client``), as a coding agent drives it: on a copy of examples/cuda_mnist made into a
clean git repository, a whole session (scan -> migrate -> verify -> apply), a verification
cancelled by the client, paths outside the repository refused, the rule docs as resources.
The runs are real sandboxed runs with few steps; the server is the real CLI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra (pip install -e '.[mcp]') is not installed")

from mcp import ClientSession, StdioServerParameters, stdio_client
from test_hostile_kill import cmdline, processes_with
from test_mcp_session import git

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"scan", "explain_rule", "plan", "migrate", "verify", "apply", "run"}
SECRET = "sk-mcp-test-5f0c1d2e3a4b"
CLEANUP_S = 60  # a killed run's watchdog stopping it and removing its scratch folder


def cuda_mnist(tmp_path: Path) -> Path:
    """The bundled example as a clean git repository of its own."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "examples" / "cuda_mnist", repo)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the original")
    return repo


def files_of(repo: Path) -> dict[str, bytes]:
    return {
        p.relative_to(repo).as_posix(): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }


def server_env(tmp_path: Path) -> dict[str, str]:
    """The test session's torchport home (conftest), scratch folders under tmp_path, and an
    API key, which no process the server starts may show."""
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(temp), "TORCHPORT_LLM_API_KEY": SECRET}


@asynccontextmanager
async def connected(repo: Path, tmp_path: Path, *args: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "torchport.cli", "mcp", str(repo), *args],
        env=server_env(tmp_path),
        cwd=str(tmp_path),
    )
    with open(tmp_path / "server.log", "a", encoding="utf-8") as log:
        async with (
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def text_of(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def processes_under(folder: Path) -> list[int]:
    """Live processes (not this one) whose command line or environment names ``folder``:
    the server and its worker (TMPDIR) and each sandboxed run (its scratch folder)."""
    return processes_with(str(folder))


def server_pid(tmp_path: Path) -> int:
    """The server: the process whose command line is `torchport.cli mcp`."""
    for pid in processes_under(tmp_path / "tmp"):
        try:
            if b"torchport.cli\x00mcp" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    raise AssertionError("no server process")


async def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout} s")
        await anyio.sleep(0.1)
    return found


# --- the server, through the SDK's client --------------------------------------------------


def test_the_server_refuses_paths_outside_and_serves_rule_docs(tmp_path: Path) -> None:
    """No verification here: confinement, the rule resources and the empty last report."""
    repo = cuda_mnist(tmp_path)
    (tmp_path / "secret").mkdir()
    (repo / "leak").symlink_to(tmp_path / "secret")

    async def session() -> None:
        async with connected(repo, tmp_path) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == TOOLS
            for call, arguments in [
                ("scan", {"path": "../"}),
                ("scan", {"path": "/etc"}),
                ("scan", {"path": "leak"}),
                ("apply", {"proposal_id": "p-x", "confirm": True, "files": ["/etc/passwd"]}),
                ("run", {"command": ["python", "train.py"], "root": "leak"}),
            ]:
                result = await client.call_tool(call, arguments)
                assert result.is_error, (call, arguments)
                assert "outside the repository" in text_of(result) or "'..'" in text_of(result)
            unknown = await client.call_tool("explain_rule", {"code": "NOPE999"})
            assert unknown.is_error and "no rule 'NOPE999'" in text_of(unknown)
            rule = await client.call_tool("explain_rule", {"code": "TPD001"})
            assert rule.structured_content["code"] == "TPD001"
            resources = {str(r.uri) for r in (await client.list_resources()).resources}
            assert "torchport://rules/TPD001" in resources
            assert "torchport://report/last" in resources
            doc = (await client.read_resource("torchport://rules/TPD001")).contents[0]
            assert doc.mime_type == "text/markdown"
            assert doc.text == rule.structured_content["doc"] and "## Fix per target" in doc.text
            last = (await client.read_resource("torchport://report/last")).contents[0]
            assert json.loads(last.text)["report"] is None

    anyio.run(session)
    assert git(repo, "status", "--porcelain") == "?? leak\n"  # nothing else was written


def test_the_repositorys_configuration_is_the_servers_default(tmp_path: Path) -> None:
    """[tool.torchport] in the served repository: its target is what plan uses when the call
    names none, its entry what the plan runs, its exclude what scan leaves out."""
    repo = cuda_mnist(tmp_path)
    (repo / "torchport.toml").write_text(
        'target = "neuron"\nentry = "python train.py --steps 1"\nexclude = ["run.sh"]\n'
    )

    async def session() -> None:
        async with connected(repo, tmp_path) as client:
            scanned = (await client.call_tool("scan", {})).structured_content
            paths = {f["path"] for f in scanned["findings"]}
            assert "train.py" in paths and "run.sh" not in paths
            planned = await client.call_tool("plan", {})
            assert not planned.is_error, text_of(planned)
            assert planned.structured_content["entry"] == ["python", "train.py", "--steps", "1"]
            # the call's own target wins over the file's
            other = await client.call_tool("plan", {"target": "tpu", "entry": "python train.py"})
            assert other.structured_content["entry"] == ["python", "train.py"]

    anyio.run(session)
    (repo / "torchport.toml").write_text('target = "gpu"\n')
    bad = subprocess.run(
        [sys.executable, "-m", "torchport.cli", "mcp", str(repo)],
        capture_output=True,
        text=True,
        env=server_env(tmp_path),
        input="",
    )
    assert bad.returncode == 2 and "target" in bad.stderr and "torchport.toml" in bad.stderr


@pytest.mark.slow
def test_a_whole_session_scan_migrate_verify_apply(tmp_path: Path) -> None:
    repo = cuda_mnist(tmp_path)
    original = files_of(repo)
    progress: list[str] = []

    async def heard(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def session() -> dict[str, Any]:
        async with connected(repo, tmp_path, "--steps", "2") as client:
            found = await client.call_tool("scan", {"target": "tpu"})
            assert not found.is_error
            rules = {f["rule"] for f in found.structured_content["findings"]}
            assert {"TPD001", "TPD024"} <= rules
            assert "TPL001" not in rules  # pin_memory is kept on tpu: nothing to report

            plan = (await client.call_tool("plan", {"target": "tpu"})).structured_content
            assert plan["entry"] == ["python", "train.py"] and plan["auto"] > 0

            made = await client.call_tool("migrate", {"target": "tpu"}, progress_callback=heard)
            proposal = made.structured_content
            assert not made.is_error and proposal["written"] is False
            assert files_of(repo) == original and git(repo, "status", "--porcelain") == ""
            ids = [c["id"] for c in proposal["changes"]]
            assert ids == list(range(1, len(ids) + 1)) and len(ids) > 5
            assert {"path", "line", "by", "rules", "diff"} <= set(proposal["changes"][0])

            progress.clear()
            checked = await client.call_tool(
                "verify", {"proposal_id": proposal["proposal_id"]}, progress_callback=heard
            )
            verdict = checked.structured_content
            assert verdict["verdict"] == "verified", verdict["reason"]
            assert any("migration step 1/2" in m for m in progress), progress
            assert verdict["verification"]["parity"]["steps"] == 2

            pid = proposal["proposal_id"]
            refused = await client.call_tool("apply", {"proposal_id": pid})
            assert refused.is_error and "confirm: true" in text_of(refused)
            loose = await client.call_tool("apply", {"proposal_id": pid, "confirm": "yes"})
            assert loose.is_error and "confirm" in text_of(loose)  # only a JSON true writes
            assert "verification: verified" in text_of(refused)
            assert files_of(repo) == original

            applied = await client.call_tool("apply", {"proposal_id": pid, "confirm": True})
            assert not applied.is_error, text_of(applied)
            last = (await client.read_resource("torchport://report/last")).contents[0]
            assert json.loads(last.text)["verification"]["verdict"] == "verified"

            ran = await client.call_tool(
                "run",
                {"command": ["python", "train.py"], "target": "tpu"},
                progress_callback=heard,
            )
            assert ran.structured_content["status"] == "ok", text_of(ran)
            assert ran.structured_content["steps"] == 2 and len(ran.structured_content["losses"])
            assert any("running: step 2/2" in m for m in progress), progress

            tree = await client.call_tool("verify", {"target": "tpu"})  # the working tree
            assert tree.structured_content["verdict"] == "verified"
            assert "against HEAD (3 modified" in tree.structured_content["compared"]
            return {"proposal": proposal, "applied": applied.structured_content}

    done = anyio.run(session)
    proposal, applied = done["proposal"], done["applied"]
    assert applied["files"] == proposal["files"] and applied["verification"] == "verified"
    # the repository now holds exactly what the diff says: git applies it to the original
    expected = tmp_path / "expected"
    shutil.copytree(repo, expected)
    git(expected, "checkout", "-q", "--", ".")
    subprocess.run(
        ["git", "apply", "-"], cwd=expected, input=proposal["diff"], text=True, check=True
    )
    assert files_of(repo) == files_of(expected) != original
    backup = Path(applied["backup"])
    for rel in proposal["files"]:
        assert (backup / rel).read_bytes() == original[rel]


@pytest.mark.slow
def test_a_cancelled_verification_leaves_nothing_running(tmp_path: Path) -> None:
    repo = cuda_mnist(tmp_path)
    temp, log = tmp_path / "tmp", tmp_path / "server.log"

    async def session() -> None:
        async with connected(repo, tmp_path) as client:
            made = await client.call_tool("migrate", {"target": "tpu"})
            server = server_pid(tmp_path)
            seen: list[int] = []

            def runs() -> list[int]:  # the sandboxed runs' processes (and the worker)
                return [p for p in processes_under(temp) if p != server]

            def stopped() -> bool:
                return "torchport mcp: verify stopped" in log.read_text()

            def watchdogs() -> list[int]:  # one a sandboxed run
                return [p for p in runs() if b"watchdog.py" in cmdline(p)]

            with anyio.CancelScope() as scope:

                async def heard(value: float, total: float | None, message: str | None) -> None:
                    if "running the migration" in (message or "") and not seen:
                        seen.extend(await until(watchdogs, 120, "a sandboxed run"))
                        # the worker blanked our key as torchport does; the runs never had it
                        assert not processes_with(SECRET), "a key readable in /proc"
                        scope.cancel()

                arguments = {"proposal_id": made.structured_content["proposal_id"], "steps": 500}
                await client.call_tool("verify", arguments, progress_callback=heard)
            assert scope.cancelled_caught and seen
            # the server says so once it has stopped the worker and waited for its runs
            await until(stopped, CLEANUP_S * 2, "the server's word that the verify stopped")
            assert not runs() and "runs are gone" in log.read_text()
            # the server is still there and answers
            again = await client.call_tool("plan", {"target": "tpu"})
            assert not again.is_error and again.structured_content["entry"]

    anyio.run(session)
    assert not [p for p in temp.iterdir() if p.name.startswith("torchport-run-")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_on_loopback_and_nowhere_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from torchport.cli.main import main

    repo = cuda_mnist(tmp_path)
    assert main(["mcp", str(repo), "--http", "8765", "--host", "0.0.0.0"]) == 2
    assert "--host 0.0.0.0: not a loopback address" in capsys.readouterr().err
    assert main(["mcp", str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err

    cli = [sys.executable, "-m", "torchport.cli", "mcp", str(repo)]
    port = free_port()
    env = server_env(tmp_path)
    with open(tmp_path / "http.log", "w") as log:
        server = subprocess.Popen([*cli, "--http", str(port)], stderr=log, env=env)
    try:

        async def session() -> set[str]:
            url = f"http://127.0.0.1:{port}/mcp"
            await until(lambda: _token(tmp_path) or server.poll() is not None, 120, "listening")
            bearer = {"Authorization": f"Bearer {_token(tmp_path)}"}  # printed at start
            async with (
                httpx2.AsyncClient(headers=bearer) as http,
                streamable_http_client(url, http_client=http) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                return {t.name for t in (await client.list_tools()).tools}

        assert anyio.run(session) == TOOLS
    finally:
        server.terminate()
        server.wait(timeout=30)


def _token(tmp_path: Path) -> str | None:
    """The token the HTTP server announced on its standard error, once it listens."""
    found = re.search(r"TOKEN: (\S+)$", (tmp_path / "http.log").read_text(), re.M)
    return found.group(1) if found else None
