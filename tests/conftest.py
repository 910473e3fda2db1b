from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from torchport.tools.scanner import ScanOptions, scan
from xdist_groups import pytest_collection_modifyitems  # noqa: F401  (a hook)


@pytest.fixture
def scan_source(tmp_path: Path):
    """Scan one Python file written from a dedented string; return (line, rule) pairs."""

    def run(source: str, name: str = "prog.py", **options) -> list[tuple[int, str]]:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        result = scan(tmp_path, ScanOptions(**options))
        return [(f.line, f.rule) for f in result.findings if f.path == name]

    return run


@pytest.fixture(autouse=True, scope="session")
def _torchport_home(tmp_path_factory: pytest.TempPathFactory):
    """Checkpoints, scratch copies and dependency overlays of agent runs go to a temporary
    folder, never ~/.cache; pip never reaches an index."""
    import os

    from torchport.agents.llm import local
    from torchport.sandbox.cudacpu import build as cudacpu_build
    from torchport.sandbox.native import build
    from torchport.tools import torchtpu_wheel

    keys = (
        "TORCHPORT_HOME",
        "TORCHPORT_MODELS",
        "TORCHPORT_EMULATOR_CACHE",
        cudacpu_build.CACHE_ENV,
        torchtpu_wheel.CACHE_ENV,
        "PIP_NO_INDEX",
    )
    saved = {k: os.environ.get(k) for k in keys}
    # the native emulator's build (a minute of CPU) is kept like the model cache: per
    # machine, not per session or xdist worker
    os.environ[build.CACHE_ENV] = str(build.cache_root())
    # so is the CPU runner's build of a CUDA test extension (minutes of CPU; keyed by content)
    os.environ[cudacpu_build.CACHE_ENV] = str(cudacpu_build.cache_root())
    # and so is the torch-tpu wheel make test's set-up fetched (the conformance tests' oracle)
    os.environ[torchtpu_wheel.CACHE_ENV] = str(torchtpu_wheel.cache_dir())
    home = tmp_path_factory.mktemp("torchport-home")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The workers share the cache of the originals' reference runs (keyed by content,
        # written atomically), as one process's session does: not four runs of each.
        shared = tmp_path_factory.getbasetemp().parent / "references"
        shared.mkdir(exist_ok=True)
        (home / "references").symlink_to(shared)
    os.environ["TORCHPORT_MODELS"] = str(local.cache_dir())  # the one model cache, kept
    os.environ["TORCHPORT_HOME"] = str(home)
    # migrate installs what a repository needs (--deps auto): in tests, never from an index
    os.environ["PIP_NO_INDEX"] = "1"
    yield home
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """With TORCHPORT_TEST_CPU=FILE, append each test's CPU seconds (its own process and the
    children it waited for) to FILE as JSON lines: wall time under a busy machine or
    parallel workers says little about what a test costs."""
    import os

    out = os.environ.get("TORCHPORT_TEST_CPU")
    if not out:
        return (yield)
    import json
    import resource
    import time

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    c0, t0 = cpu(), time.monotonic()
    try:
        return (yield)
    finally:
        record = {"test": item.nodeid, "cpu_s": round(cpu() - c0, 2)}
        record["wall_s"] = round(time.monotonic() - t0, 2)
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")


@pytest.fixture
def active():
    """The reference shim, active for one test and fully undone afterwards."""
    from torchport.sandbox import shim

    shim.reset_intercepted()
    shim.activate()
    try:
        yield shim
    finally:
        shim.deactivate()
