"""What makes a process a sandboxed run: the mode activated, seeds fixed, synthetic data,
a step budget, and, at the end, the numbers it produced.

The launcher starts a session for the program's own process and exports its settings
(``TORCHPORT_RUN``, with ``sandbox/bootstrap`` first on ``PYTHONPATH``) so that every
Python process the program starts (``mp.spawn`` ranks, ``multiprocessing`` spawn or
forkserver children, ``subprocess`` calls of ``python``) starts the same session the
moment it imports torch (see ``sandbox.bootstrap.sitecustomize``). A forked child
inherits the session and starts counting from zero. Every process sends its numbers on
the run's results channel (``sandbox.channel``) as they are recorded, and its end report
there; the host merges them.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .channel import Reporter
from .exception_line import exception_start
from .modes import EMULATED, DeviceNames
from .pythonpath import installed_overlays, program_path

OWN_CODE = str(Path(__file__).resolve().parents[1])
ENV = "TORCHPORT_RUN"
BOOTSTRAP = str(Path(__file__).resolve().parent / "bootstrap")


@dataclass(frozen=True)
class RunConfig:
    """The settings every process of one run shares (travels as JSON in ``TORCHPORT_RUN``)."""

    mode: str
    results: str  # the run's own folder: the results channel's socket, scratch builds
    devices: int = 2
    steps: int | None = None
    forwards: int | None = None
    seed: int = 0
    preload: tuple[str, ...] = ()
    real_data: bool = False
    # reference mode: kernel call sites (path:function) whose arguments are recorded
    record_sites: tuple[str, ...] = ()
    # the emulated device's float32 matmul precision pinned for the run (None: the
    # program's own settings, as on TorchTPU); see sandbox.matmul_precision
    matmul_precision: str | None = None
    # sandbox.module_trace's settings as JSON (the step, the weights to send or load), or None
    trace: str | None = None
    # mode neuron: the device under a target's own names (sandbox.modes.DeviceNames as JSON)
    names: dict[str, str] | None = None

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str) -> RunConfig:
        data = json.loads(text)
        tuples = {k: tuple(data.get(k, ())) for k in ("preload", "record_sites")}
        return cls(**{**data, **tuples})


@dataclass
class Session:
    config: RunConfig
    watcher: Any = None  # the module whose counters describe the run (or None)
    budget: Any = None
    synthetic: Any = None
    standins: Any = None
    interpreters: Any = None  # reference mode: kernels run in an interpreter (Triton's)
    site_calls: Any = None  # reference mode: the kernel call sites' arguments (site_calls)
    reporter: Reporter | None = None  # this process's sender on the results channel
    child: bool = False  # not the launcher's process: sends its own end report
    rank: int | None = None
    error: dict[str, Any] | None = None
    written: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        """The numbers this process produced: budget, counters, data and stand-ins used."""
        out: dict[str, Any] = {}
        if self.budget is not None:
            out.update(self.budget.to_json())
        if self.watcher is not None:
            counters = getattr(self.watcher, "counters", None) or getattr(
                self.watcher, "intercepted", None
            )
            try:
                out["counters"] = counters() if counters else {}
            except Exception as exc:
                out["counters"] = {"error": repr(exc)}
        if self.synthetic is not None and self.synthetic.records():
            out["synthetic_data"] = self.synthetic.records()
        if served := standin_modules():
            out["standin_modules"] = served
        if reached := _network_records():
            out["network"] = reached
        if self.standins is not None and self.standins.records():
            out["reference_standins"] = self.standins.records()
        if self.interpreters is not None and self.interpreters.records():
            out["reference_interpreters"] = self.interpreters.records()
        if self.config.mode == "reference":
            kernels = _kernel_runner_records()
            if kernels:
                out["cuda_kernel_runner"] = kernels
        if self.site_calls is not None and self.site_calls.records():
            out["kernel_site_calls"] = self.site_calls.records()
        if self.config.trace:
            from torchport.sandbox import module_trace

            if (traced := module_trace.report()) is not None:
                out["module_trace"] = traced
        out.update(self.extra)  # what a torchport driver run in the sandbox reports
        return out

    def did_work(self) -> bool:
        budget = self.budget
        return budget is not None and bool(budget.steps or budget.forwards or budget.losses)


_current: Session | None = None


def _network_records() -> list[str]:
    """The addresses the process reached for (``sandbox.network_log``), if it recorded."""
    module = sys.modules.get("torchport.sandbox.network_log")
    return module.records() if module is not None else []


def _kernel_runner_records() -> list[dict[str, Any]]:
    """The CUDA extensions the CPU runner built in this process (reference mode), if
    the shim's module for them was loaded at all."""
    module = sys.modules.get("torchport.sandbox.shim.cuda_extensions")
    return module.records() if module is not None else []


def current() -> Session | None:
    """This process's session (None before one started)."""
    return _current


def _activate(config: RunConfig) -> Any:
    mode, devices = config.mode, config.devices
    if mode == "reference":
        from torchport.sandbox import shim
        from torchport.sandbox.shim import cuda_extensions

        shim.activate(gpus=devices)
        cuda_extensions.build_in(Path(config.results) / "cudacpu")  # CUDA extensions: scratch only
        return shim
    if mode in EMULATED:
        from torchport.sandbox import emulated

        # built by the parent, if at all
        names = DeviceNames.from_json(config.names) if config.names is not None else None
        precision = config.matmul_precision
        emulated.activate(mode, devices, build=False, matmul_precision=precision, names=names)
        return emulated
    return None


def _seed(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def start(config: RunConfig, reporter: Reporter, *, child: bool = False) -> Session:
    """Activate the mode, stand-ins, preloads, seeds, synthetic data and the step budget
    in this process; the launcher's process and every child go through here. Each number
    the budget records goes to ``reporter`` as it is recorded."""
    global _current
    session = _current = Session(config, reporter=reporter, child=child)
    # a real wandb, if installed, must not try its server (the sandbox has no network)
    os.environ["WANDB_MODE"] = "disabled"
    session.watcher = _activate(config)
    from torchport.sandbox import rendezvous

    rendezvous.install()  # every mode: an unreachable rendezvous fails at once
    from torchport.sandbox import network_log

    network_log.install()  # every mode: a refused download is named in the verdict
    if config.mode == "reference":
        # CUDA-only libraries (flash-attn, xformers, apex) as pure-PyTorch stand-ins
        # when absent; never in a target mode: the port must not depend on them.
        from torchport.sandbox.shim import standins

        session.standins = standins
        standins.install()
        # @triton.jit kernels in Triton's interpreter, on the shim's CPU tensors
        from torchport.sandbox.shim import triton_interpreter

        session.interpreters = triton_interpreter
        triton_interpreter.install()
        if config.record_sites:
            from torchport.sandbox import site_calls

            session.site_calls = site_calls
            site_calls.install(config.record_sites)
    elif config.mode in EMULATED:
        # what torchport's environment holds only for the reference (triton) is not there
        from torchport.sandbox import target_imports

        target_imports.install(config.mode)
    for module in config.preload:
        importlib.import_module(module)
    _seed(config.seed)
    if not config.real_data:
        from torchport.sandbox import synthetic

        session.synthetic = synthetic
        synthetic.install()
    from torchport.sandbox.budget import Budget, install

    session.budget = install(
        Budget(max_steps=config.steps, max_forwards=config.forwards, journal=_journal(session))
    )
    if config.trace:
        from torchport.sandbox import module_trace

        module_trace.install(json.loads(config.trace), config.mode)
    os.register_at_fork(after_in_child=_forked)
    return session


def _journal(session: Session) -> Callable[..., None]:
    """The budget's numbers to the results channel; a DataLoader worker's never (its
    forward calls are not the program's training)."""

    def send(kind: str, **fields: Any) -> None:
        if session.reporter is not None and not (session.child and _in_dataloader_worker()):
            session.reporter.send(kind, **fields)

    return send


def export(config: RunConfig) -> None:
    """Make every Python process started from now on start the same session."""
    os.environ[ENV] = config.to_env()
    path = os.environ.get("PYTHONPATH", "")
    # the program's folders and the overlays (TORCHPORT_PROGRAM_PATH) after the bootstrap
    entries = [BOOTSTRAP, *program_path(), *([path] if path else [])]
    os.environ["PYTHONPATH"] = os.pathsep.join(entries)


def distributed_rank() -> int | None:
    """The process's rank: torch.distributed's once initialised, else RANK / LOCAL_RANK."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except (RuntimeError, ValueError):
        pass
    for name in ("RANK", "LOCAL_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return None


def standin_modules() -> list[str]:
    """The modules torchport's synthetic finder served in place of an absent library
    (``sandbox.synthetic.finder``'s mark): a failure in a library that probed for one of
    them is the stand-in's, not the program's."""
    mark = "__torchport_synthetic__"  # synthetic.finder.MARK, read without importing it
    return sorted(n for n, m in list(sys.modules.items()) if getattr(m, mark, False) is True)


def user_frame(tb: Any) -> dict[str, Any] | None:
    """The innermost frame of the user's own code (not the library's, not ours, not a
    package the dependency overlay installed)."""
    libraries = (OWN_CODE, "<", sys.base_prefix, *installed_overlays())
    frames = [
        f
        for f in traceback.extract_tb(tb)
        if "site-packages" not in f.filename and not f.filename.startswith(libraries)
    ]
    if not frames:
        return None
    f = frames[-1]
    return {
        "file": os.path.relpath(f.filename),
        "line": f.lineno,
        "function": f.name,
        "code": f.line,
    }


MESSAGE_MAX = 2000
# The whole message a clipped one came from, kept in the result as ``full_message``
# (a rank's traceback is a few kilobytes; this bounds a pathological one).
FULL_MESSAGE_MAX = 100_000


def _head_lines(text: str, limit: int) -> str:
    """``text``'s start, at most ``limit`` characters, in whole lines where a line fits."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    return head[: head.rfind("\n")] if "\n" in head else head


def clipped(message: str, limit: int = MESSAGE_MAX) -> str:
    """A message of at most ``limit`` characters that keeps its exception line as well as
    its start: a rank's failure re-raised with the rank's whole traceback ends with the
    exception the run died of, which cutting the tail would lose; and where that
    exception's own message is long (torch's "Could not run 'aten::X' ..." lists every
    dispatch key after it), the kept tail starts at the exception line, not after it."""
    if len(message) <= limit:
        return message
    half = (limit - 3) // 2
    found = exception_start(message)
    if found is not None and len(message) - found[0] > half:
        start = found[0]
        head = _head_lines(message[:start].rstrip("\n"), half)
        rest = _head_lines(message[start:], limit - len(head) - 5)
        return f"{head}\n…\n{rest}\n…"
    head, tail = message[:half], message[-half:]
    # whole lines only: a line cut in two could read as an exception line ("me")
    head = head[: head.rfind("\n")] if "\n" in head else head
    tail = tail[tail.find("\n") + 1 :] if "\n" in tail else tail
    return f"{head}\n…\n{tail}"


def error_of(exc: BaseException) -> dict[str, Any]:
    """An exception as a result's ``error``. ``sys.exit(1)`` raised while handling the
    program's exception (as ``mp.spawn``'s wrapper does) reports that exception. A message
    too long for ``message`` is kept whole in ``full_message`` (the report's JSON), so the
    rank's traceback the reason was cut from can still be read."""
    if isinstance(exc, SystemExit) and exc.__context__ is not None:
        exc = exc.__context__
    text = str(exc)
    error = {
        "type": type(exc).__name__,
        "message": clipped(text),
        "frame": user_frame(exc.__traceback__),
        "traceback": traceback_frames(exc.__traceback__),
    }
    if len(text) > MESSAGE_MAX:
        error["full_message"] = clipped(text, FULL_MESSAGE_MAX)
    return error


# Frames a result's error keeps of the whole traceback, innermost last.
TRACEBACK_FRAMES = 40


def traceback_frames(tb: Any) -> list[dict[str, Any]]:
    """Every frame of the traceback (the innermost ``TRACEBACK_FRAMES``), torchport's and
    the libraries' included, with absolute paths: the host tells from them whether one of
    torchport's stand-ins or a package of its own environment was on the failing path
    (``agents.attribution``), which the user's frame alone cannot say."""
    return [
        {"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "")[:200]}
        for f in traceback.extract_tb(tb)[-TRACEBACK_FRAMES:]
    ]


# --- the program's children ------------------------------------------------------------


def start_child() -> None:
    """Start this process's session from ``TORCHPORT_RUN`` (the bootstrap calls this as
    soon as torch is imported); a no-op where a session already runs."""
    if _current is not None or not os.environ.get(ENV):
        return
    config = RunConfig.from_env(os.environ[ENV])
    session = start(config, Reporter(config.results, "child", distributed_rank), child=True)
    _become_child(session)
    hook = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        session.error = error_of(exc)
        hook(kind, exc, tb)

    sys.excepthook = excepthook


def _become_child(session: Session) -> None:
    session.child, session.written, session.error = True, False, None
    session.budget.on_step = lambda steps, loss: _note_rank(session)
    session.budget.on_limit = lambda reason: _stop_child(session, reason)
    _wrap_process_entry()
    atexit.register(write_child_result)


def _forked() -> None:
    """A forked child inherits the session: it counts its own steps from zero."""
    session = _current
    if session is None:
        return
    budget = session.budget
    budget.steps = budget.forwards = 0
    budget.losses, budget.outputs = [], []
    if session.reporter is not None:
        session.reporter.role = "child"
        session.reporter.after_fork()
    reset = getattr(session.watcher, "reset", None) or getattr(
        session.watcher, "reset_intercepted", None
    )
    if reset is not None:
        reset()
    if session.interpreters is not None:
        session.interpreters.reset()
    if session.site_calls is not None:
        session.site_calls.reset()
    _become_child(session)


def _note_rank(session: Session) -> None:
    rank = distributed_rank()
    if rank is not None:
        session.rank = rank


def _stop_child(session: Session, reason: str) -> None:
    """The budget is spent: write the result and end the process cleanly, so that
    ``mp.spawn`` sees exit code 0. Ranks of one DDP job reach the same step together,
    after that step's collectives, so none is left waiting for a peer."""
    write_child_result(exit_code=0, stopped=f"budget reached: {reason}")
    raise SystemExit(0)


def _in_dataloader_worker() -> bool:
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


def write_child_result(exit_code: int | None = None, stopped: str | None = None) -> None:
    """This child's end report, once, if it did any work (a DataLoader worker never)."""
    session = _current
    if session is None or not session.child or session.written:
        return
    if not session.did_work() or _in_dataloader_worker():
        return
    session.written = True
    failed = session.error is not None or exit_code not in (0, None)
    result: dict[str, Any] = {
        "mode": session.config.mode,
        "program": sys.argv,
        "pid": os.getpid(),
        "rank": distributed_rank() if session.rank is None else session.rank,
        "status": "failed" if failed else "ok",
        "exit_code": (exit_code or 1) if failed else 0,
        "ended_at": time.time(),
        **session.report(),
    }
    if session.error is not None:
        result["error"] = session.error
    if stopped:
        result["stopped"] = stopped
    if session.reporter is not None:
        session.reporter.end(result)


def _wrap_process_entry() -> None:
    """``multiprocessing`` children (fork, spawn, forkserver) all run ``_bootstrap``;
    forkserver and fork children leave with ``os._exit``, past any atexit handler."""
    from multiprocessing.process import BaseProcess

    real_bootstrap = BaseProcess._bootstrap  # type: ignore[attr-defined]  # every child's private entry, not in typeshed
    if getattr(real_bootstrap, "torchport", False):
        return
    real_run = BaseProcess.run

    def _bootstrap(self: BaseProcess, *args: Any, **kwargs: Any) -> int:
        code = real_bootstrap(self, *args, **kwargs)
        write_child_result(exit_code=code)
        return code

    def run(self: BaseProcess) -> None:
        try:
            real_run(self)
        except BaseException as exc:
            session = _current
            if session is not None and not (isinstance(exc, SystemExit) and not exc.code):
                session.error = error_of(exc)
            raise

    _bootstrap.__dict__["torchport"] = True  # a mark on the function: wrapped once
    BaseProcess._bootstrap = _bootstrap  # type: ignore[attr-defined]  # private, as above
    BaseProcess.run = run  # type: ignore[method-assign]  # every child's run, wrapped
