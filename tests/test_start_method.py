"""TPN011: a program that uses the device and starts workers by fork is ported to the spawn
start method for tpu, where TorchTPU refuses the device in a forked child (issue 30). Each
form is found and rewritten; spawn's needs (picklable workers, a main module that can be
imported again) refuse the fix with a reason instead of a broken port; and the port runs on
the emulated tpu, whose children are spawned."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from golden import migrate_file
from torchport.sandbox.harness import RunSpec, run
from torchport.sandbox.torchtpu_facts import section
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import ScanOptions, scan

DEVICE = 'import torch\n\nDEVICE = torch.device("cuda")\n'


def _write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def _found(tmp_path: Path, source: str, target: str | None = "tpu") -> list[int]:
    path = _write(tmp_path, source)
    return [f.line for f in scan(path, ScanOptions(target=target)).findings if f.rule == "TPN011"]


def _port(tmp_path: Path, source: str) -> tuple[str, list[str]]:
    """The tpu port of ``source`` (TPN011's fixes only) and the reasons of those refused."""
    path = _write(tmp_path, source)
    findings = [f for f in scan(path, ScanOptions(target="tpu")).findings if f.rule == "TPN011"]
    assert findings, "nothing to port"
    result = migrate_python(path.read_text(), findings, "tpu", path.name)
    return result.source, [reason for _, reason in result.unapplied]


FOUND = {
    "process": "import multiprocessing as mp\n\ndef f():\n    mp.Process(target=print).start()\n",
    "from-import": "from multiprocessing import Process\n\ndef f():\n    Process(target=print)\n",
    "pool": "import multiprocessing\n\ndef f():\n    multiprocessing.Pool(2)\n",
    "torch-process": "import torch.multiprocessing as tmp\n\ndef f():\n"
    "    tmp.Process(target=print)\n",
    "torch-pool": "import torch.multiprocessing\n\ndef f():\n    torch.multiprocessing.Pool(2)\n",
    "executor": "from concurrent.futures import ProcessPoolExecutor\n\ndef f():\n"
    "    ProcessPoolExecutor(2)\n",
    "get-context": "import multiprocessing as mp\n\ndef f():\n    mp.get_context()\n",
    "get-context-fork": "import multiprocessing as mp\n\ndef f():\n    mp.get_context('fork')\n",
    "get-context-none": "import multiprocessing as mp\n\ndef f():\n"
    "    mp.get_context(method=None)\n",
    "set-fork": "import torch.multiprocessing as mp\n\ndef f():\n    mp.set_start_method('fork')\n",
}


@pytest.mark.parametrize("form", sorted(FOUND))
def test_each_fork_start_is_found_in_a_file_that_uses_the_device(tmp_path, form):
    assert _found(tmp_path, DEVICE + FOUND[form]) == [7]


@pytest.mark.parametrize(
    "source",
    [
        # spawn or forkserver chosen, at the call or for the program
        "import multiprocessing as mp\n\ndef f():\n    mp.get_context('spawn').Process()\n",
        "import multiprocessing as mp\n\ndef f():\n    mp.get_context('forkserver').Pool(2)\n",
        "import multiprocessing as mp\n\nmp.set_start_method('spawn')\nmp.Process(target=print)\n",
        "import concurrent.futures as cf\nimport multiprocessing as mp\n\ndef f():\n"
        "    cf.ProcessPoolExecutor(2, mp_context=mp.get_context('spawn'))\n",
        # torch's launchers that spawn already
        "import torch.multiprocessing as mp\n\ndef f(g):\n    mp.spawn(g, nprocs=2)\n",
        "import torch.multiprocessing as mp\n\ndef f(g):\n"
        "    mp.start_processes(g, nprocs=2, start_method='spawn')\n",
        # DataLoader workers run the dataset only (see TPN011.md)
        "from torch.utils.data import DataLoader\n\ndef f(ds):\n"
        "    DataLoader(ds, num_workers=4)\n",
    ],
)
def test_starts_that_do_not_fork_are_not_reported(tmp_path, source):
    assert _found(tmp_path, DEVICE + source) == []


def test_a_file_without_the_device_may_fork(tmp_path):
    assert _found(tmp_path, FOUND["process"]) == []
    assert _found(tmp_path, "import torch\n" + FOUND["process"]) == []
    assert _found(tmp_path, "import torch\nx = torch.ones(1).tpu()\n" + FOUND["pool"]) == [6]


@pytest.mark.parametrize("target", ["neuron", "xla", "accelerator", None])
def test_only_tpu_is_told(tmp_path, target):
    assert _found(tmp_path, DEVICE + FOUND["process"], target) == []


def test_the_main_block_chooses_spawn_once(tmp_path):
    source = DEVICE + textwrap.dedent(
        """\
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor


        def work(rank):
            return rank


        def main():
            ps = [mp.Process(target=work, args=(r,)) for r in range(2)]
            with ProcessPoolExecutor(2) as pool:
                pool.map(work, range(2))
            with mp.Pool(2) as pool:
                pool.map(work, range(2))
            return ps


        if __name__ == "__main__":  # the entry point
            main()
        """
    )
    port, refused = _port(tmp_path, source)
    assert refused == []
    assert port.count("set_start_method") == 1
    assert '    mp.set_start_method("spawn", force=True)\n    main()\n' in port
    assert port.replace('    mp.set_start_method("spawn", force=True)\n', "") == source
    assert port.startswith(DEVICE) and "import multiprocessing\n" not in port


def test_a_one_line_main_block_gains_the_choice_as_a_block(tmp_path):
    source = DEVICE + FOUND["process"] + 'if __name__ == "__main__": f()\n'
    port, refused = _port(tmp_path, source)
    assert refused == []
    assert port.endswith(
        'if __name__ == "__main__":\n    mp.set_start_method("spawn", force=True)\n    f()\n'
    )


PER_CALL = {
    "process": 'mp.get_context("spawn").Process(target=print).start()',
    "from-import": 'multiprocessing.get_context("spawn").Process(target=print)',
    "pool": 'multiprocessing.get_context("spawn").Pool(2)',
    "torch-process": 'tmp.get_context("spawn").Process(target=print)',
    "torch-pool": 'torch.multiprocessing.get_context("spawn").Pool(2)',
    "executor": 'ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))',
    "get-context": 'mp.get_context("spawn")',
    "get-context-fork": 'mp.get_context("spawn")',
    "get-context-none": 'mp.get_context(method="spawn")',
    "set-fork": 'mp.set_start_method("spawn")',
}


@pytest.mark.parametrize("form", sorted(PER_CALL))
def test_without_a_main_block_each_launch_takes_a_spawn_context(tmp_path, form):
    port, refused = _port(tmp_path, DEVICE + FOUND[form])
    assert refused == []
    assert port.splitlines()[-1] == "    " + PER_CALL[form]
    compile(port, "port.py", "exec")
    assert _found(tmp_path, port) == []  # nothing left to report on the port
    if re.search(r"(?<![\w.])multiprocessing\.get_context", PER_CALL[form]):
        assert "import multiprocessing\n" in port  # the module the new code names


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (
            "import multiprocessing as mp\n\ndef f():\n    mp.Process(target=lambda: 1)\n",
            "the worker is a lambda",
        ),
        (
            "import multiprocessing as mp\n\ndef f():\n    def g():\n        pass\n\n"
            "    mp.Process(target=g)\n",
            "the local function 'g'",
        ),
        (
            "import multiprocessing as mp\n\ndef f():\n    with mp.Pool(2) as p:\n"
            "        p.map(lambda x: x, [1])\n",
            "the worker is a lambda",
        ),
        (
            "import multiprocessing as mp\n\nsquare = lambda x: x * x\n\ndef f():\n"
            "    with mp.Pool(2) as p:\n        p.map(square, [1])\n",
            "the local function 'square'",
        ),
        (
            "import multiprocessing as mp\n\nmp.Process(target=print).start()\n",
            "the launch runs at module level",
        ),
        (
            "import multiprocessing as mp\n\ndef f():\n    mp.Process(target=print)\n\n"
            "def main():\n    f()\n\nmain()\n",
            "f() is called at module level",
        ),
    ],
)
def test_spawn_that_would_break_the_program_is_refused_with_the_reason(tmp_path, source, reason):
    port, refused = _port(tmp_path, DEVICE + source)
    assert port == DEVICE + source
    assert len(refused) == 1 and reason in refused[0] and "spawn" in refused[0]


def test_a_refused_launch_keeps_the_program_on_fork_and_the_others_spawn_at_the_call(tmp_path):
    source = DEVICE + textwrap.dedent(
        """\
        import multiprocessing as mp


        def work(rank):
            return rank


        def main():
            mp.Process(target=work).start()
            mp.Process(target=lambda: 0).start()


        if __name__ == "__main__":
            main()
        """
    )
    port, refused = _port(tmp_path, source)
    assert 'mp.get_context("spawn").Process(target=work)' in port
    assert "    mp.Process(target=lambda: 0)" in port
    assert "set_start_method" not in port
    assert len(refused) == 1 and "lambda" in refused[0]


def test_a_forking_choice_stays_where_a_launch_needs_fork(tmp_path):
    source = DEVICE + textwrap.dedent(
        """\
        import multiprocessing as mp


        def main():
            mp.set_start_method("fork")
            mp.Process(target=lambda: 0).start()


        if __name__ == "__main__":
            main()
        """
    )
    port, refused = _port(tmp_path, source)
    assert port == source
    assert len(refused) == 1
    assert refused[0].startswith("spawn would break a launch of this file (line 9: the worker")


def test_the_doc_names_the_wheels_error():
    doc = (Path(__file__).parents[1] / "tools/catalogue/docs/TPN011.md").read_text()
    assert section("distributed")["fork_error"].split(". ")[0] in doc.replace("\n  ", " ")


PROGRAM = """\
import multiprocessing as mp

import torch


def work(rank, queue):
    queue.put(float((torch.ones(2, device="cuda") * (rank + 1)).sum().cpu()))


def main():
    print("parent", torch.zeros(1, device="cuda").device.type)
    queue = mp.Queue()
    procs = [mp.Process(target=work, args=(r, queue)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    # only the children that finished put a result: a refused child must not leave the
    # parent waiting on the queue until the run's timeout
    done = [p for p in procs if p.exitcode == 0]
    print("children", sorted(queue.get() for _ in done), [p.exitcode for p in procs])


if __name__ == "__main__":
    main()
"""


def _run_tpu(root: Path, source: str):
    root.mkdir()
    (root / "train.py").write_text(source)
    spec = RunSpec(root, ["python", "train.py"], mode="tpu", isolation="process", timeout_s=300)
    return run(spec)


@pytest.mark.slow
def test_the_port_runs_on_the_emulated_tpu_with_spawned_children(tmp_path):
    original = _write(tmp_path, PROGRAM)
    port = migrate_file(original, "tpu")
    assert 'mp.set_start_method("spawn", force=True)' in port
    result = _run_tpu(tmp_path / "port", port)
    assert result.status == "ok", result.stderr_tail
    assert "children [2.0, 4.0] [0, 0]" in result.stdout_tail
    # the same program on fork: a child that touches the device after the parent did
    forked = port.replace('    mp.set_start_method("spawn", force=True)\n', "")
    result = _run_tpu(tmp_path / "forked", forked)
    assert "children [2.0, 4.0] [0, 0]" not in result.stdout_tail, result.stdout_tail
    assert section("distributed")["fork_error"] in result.stderr_tail + result.stdout_tail
