"""A verification's two runs: started together when the machine has room, each timed phase
by phase, the timings in verification.json as its schema documents them (issue 16)."""

from __future__ import annotations

import contextvars
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest
from torchport.agents import verify_pair
from torchport.agents.deliver import verification_markdown, verification_record
from torchport.agents.verifier import RunLimits, verify_tree
from torchport.sandbox.channel import Collector
from torchport.sandbox.harness import LAUNCHER, PHASES, phases

LAUNCH = [*LAUNCHER, "--mode", "plain", "--chdir"]
SCHEMA = json.loads((Path(__file__).parent / "data" / "verification.schema.json").read_text())
TRAIN = (
    "import torch\nm = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
    "for _ in range(9):\n    l = m(torch.ones(2, 2)).sum()\n    o.zero_grad()\n"
    "    l.backward()\n    o.step()\n"
)


# -- when the two runs start together ---------------------------------------------------


@pytest.mark.parametrize(
    ("available", "cpus", "together", "why"),
    [
        (64_000, 1, False, "1 CPU core"),
        (None, 8, False, "unknown"),
        (8_191, 8, False, "8191 MB available, each run may take 4096"),
        (8_192, 2, True, "2 CPU cores, 8192 MB available"),
    ],
)
def test_together_only_with_a_core_each_and_memory_for_both(available, cpus, together, why):
    plan = verify_pair.schedule(4096, available, cpus)
    assert plan.together is together and why in plan.why


def test_available_memory_is_the_kernels_estimate(tmp_path: Path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683584 kB\nMemAvailable:   21829992 kB\n")
    assert verify_pair.memory_available_mb(meminfo) == 21318
    meminfo.write_text("MemTotal:       24683584 kB\n")  # a kernel before 3.14
    assert verify_pair.memory_available_mb(meminfo) is None
    assert verify_pair.memory_available_mb(tmp_path / "absent") is None
    assert (verify_pair.memory_available_mb() or 0) > 0  # this machine's /proc/meminfo


def test_together_the_calls_overlap_with_the_callers_context():
    both = threading.Barrier(2, timeout=10)  # broken unless both calls wait at once
    asked = contextvars.ContextVar("asked", default="nobody")
    asked.set("the caller")

    def reference():
        both.wait()
        return {"who": asked.get()}

    def migrated():
        both.wait()
        return {"who": "migration"}

    pair = verify_pair.run_both(reference, migrated, together=True)
    assert pair.reference == {"who": "the caller"} and pair.migrated == {"who": "migration"}
    assert pair.reference_s > 0 and pair.migrated_s > 0


def test_one_after_the_other_the_reference_ends_first_and_errors_reach_the_caller():
    events = []

    def call(name):
        def run():
            events.append(f"{name} starts")
            time.sleep(0.05)
            events.append(f"{name} ends")
            return {}

        return run

    verify_pair.run_both(call("reference"), call("migration"), together=False)
    assert events == ["reference starts", "reference ends", "migration starts", "migration ends"]

    def failing():
        raise OSError("the original could not be copied")

    with pytest.raises(OSError, match="could not be copied"):
        verify_pair.run_both(failing, call("migration"), together=True)


# -- each run's phases ------------------------------------------------------------------


def test_phases_lie_between_marks_and_a_missing_mark_leaves_its_phase_out():
    marks = {"begun": 100.0, "spawned": 100.5, "process": 100.49, "entered": 101.0}
    assert phases(marks) == {"prepare": 0.5, "sandbox": 0.0, "interpreter": 0.51}
    marks.update(activated=103.0, finished=110.0, returned=110.25)
    assert list(phases(marks)) == [name for name, _, _ in PHASES]
    assert phases(marks)["teardown"] == 0.25


def test_the_schema_names_every_phase_of_the_harness():
    assert list(SCHEMA["$defs"]["phases"]["properties"]) == [name for name, _, _ in PHASES]
    assert set(verify_pair.START_UP) < {name for name, _, _ in PHASES}


def test_a_process_knows_when_it_started():
    # A fresh process that waits a second before asking: the answer is its start, not
    # the moment it asked (a test worker's own start can be any time ago).
    before = time.time()
    asked = subprocess.run(
        [sys.executable, "-c", _ASK_STARTED], capture_output=True, text=True, check=True
    )
    started = float(asked.stdout)
    assert before - 0.5 < started < before + 0.5, (before, started)


_ASK_STARTED = """
import time
time.sleep(1.0)
from torchport.sandbox.launch import process_started
print(process_started())
"""


def _timings(source: str, together: bool) -> dict:
    run = {"elapsed_s": 3.0, "phases": {name: 0.5 for name, _, _ in PHASES}}
    pair = verify_pair.Pair(run, run, 3.1, 3.2)
    return verify_pair.timings(pair, source, 0.01, 3.3, verify_pair.Schedule(together, "why"))


def test_timings_follow_the_schema_and_a_broken_one_does_not():
    timings_schema = {"$defs": SCHEMA["$defs"], "$ref": "#/$defs/timings"}
    for source, together in (("run", True), ("run", False), ("cache", True), ("given", False)):
        jsonschema.validate(_timings(source, together), timings_schema)
    good = _timings("run", True)
    assert good["runs"] == "together" and good["migrated"]["start_up_s"] == 2.0
    assert _timings("cache", True)["runs"] == "migration only"
    broken = _timings("run", True)
    broken["migrated"]["phases"]["warmup"] = 1.0  # a phase the schema does not know
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, timings_schema)


# -- the launcher's exit ----------------------------------------------------------------


@pytest.mark.slow
def test_the_launcher_leaves_after_threads_and_atexit_handlers_with_the_exit_code(tmp_path):
    """It skips Python's finalisation, not what a program may rely on at exit."""
    (tmp_path / "prog.py").write_text(
        "import atexit, sys, threading, time\n"
        "atexit.register(lambda: open('atexit.txt', 'w').write('ran'))\n"
        "def late():\n    time.sleep(0.5)\n    open('thread.txt', 'w').write('joined')\n"
        "threading.Thread(target=late).start()\n"
        "print('printed, never flushed by the program', end='')\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    for code in (0, 3):
        collector = Collector(tmp_path)
        try:
            launched = subprocess.run(
                [*LAUNCH, str(tmp_path), "--results", str(tmp_path), "--", "prog.py", str(code)],
                capture_output=True,
                text=True,
                timeout=300,
            )
        finally:
            (record,) = collector.close()
        assert launched.returncode == (0 if code == 0 else 1), launched.stderr
        assert launched.stdout.endswith("printed, never flushed by the program")
        assert (tmp_path / "atexit.txt").read_text() == "ran"
        assert (tmp_path / "thread.txt").read_text() == "joined"
        result = record.result()
        assert record.role == "launcher" and result["exit_code"] == code
        assert set(result["clock"]) == {"process", "entered", "activated", "finished"}
        for name in ("atexit.txt", "thread.txt"):
            (tmp_path / name).unlink()


# -- a whole verification ---------------------------------------------------------------


@pytest.mark.slow
def test_a_verification_reports_its_phases_in_verification_json(tmp_path: Path):
    """The original's run, then a second verification reading it from the cache; both
    records valid against the schema, the phases real numbers."""
    original = tmp_path / "original"
    original.mkdir()
    (original / "train.py").write_text(TRAIN)
    budget = RunLimits(steps=2, forwards=2, timeout_s=120, memory_mb=2048)
    said: list[str] = []
    first, reference = verify_tree(
        original,
        original,
        ["python", "train.py"],
        "tpu",
        budget,
        tmp_path / "cache",
        say=said.append,
    )
    assert first.verdict == "ran", first.reason  # plain CPU code: nothing on the device
    # the evidence says which emulator ran the migration, and why
    counters = first.target["counters"]
    assert counters["emulator_backend"] in ("native", "python")
    assert counters["emulator_backend_reason"]
    assert "verifying: running the original on the CUDA reference shim" in said
    assert "verifying: running the migration on the emulated tpu device" in said
    timings = first.timings
    plan = verify_pair.schedule(2048, verify_pair.memory_available_mb(), verify_pair.cores())
    assert timings["runs"] == ("together" if plan.together else "one after the other")
    assert timings["reference"]["source"] == "run"
    for run in (timings["reference"], timings["migrated"]):
        assert list(run["phases"]) == [name for name, _, _ in PHASES]
        assert run["phases"]["activation"] > 0 and run["phases"]["program"] > 0
        assert run["start_up_s"] < run["seconds"] <= timings["total_s"]
    again, _ = verify_tree(
        original, original, ["python", "train.py"], "tpu", budget, tmp_path / "cache"
    )
    assert again.timings["reference"]["source"] == "cache"
    assert again.timings["runs"] == "migration only"
    given, _ = verify_tree(
        original, original, ["python", "train.py"], "tpu", budget, None, reference=reference
    )
    assert given.timings["reference"] == {"source": "given", "seconds": 0.0}
    for v in (first, again, given):
        state = {"settings": {"target": "tpu", "run_id": "r1"}, "verification": v.to_json()}
        record = json.loads(json.dumps(verification_record(state, v.verdict), default=str))
        jsonschema.validate(record, SCHEMA)
        assert f"- time: {v.timings['total_s']} s: original" in verification_markdown(record)
