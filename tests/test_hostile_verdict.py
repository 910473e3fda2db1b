"""A program cannot choose the numbers its verdict rests on.

The attacks an adversarial tester used, each on every sandbox backend this machine has:
forge the launcher's result file and leave with ``os._exit(0)``; edit torchport's record
of the losses in-process before the launcher reports; ship a ``torchport/`` package that
stands in for the launcher inside the sandbox; and talk to the results channel directly
(malformed fields, a second "launcher", a flood). Before the results channel each of the
first three was reported as whatever the program wrote.
"""

from __future__ import annotations

import json
import os
import socket
import textwrap
import warnings
from pathlib import Path

import pytest
import test_isolation
from torchport.sandbox.channel import MAX_BYTES_PER_PROCESS, SOCKET_NAME, Collector
from torchport.sandbox.harness import RunResult, RunSpec, run
from torchport.sandbox.isolation import IsolationWarning

backend = test_isolation.backend  # each backend, skipped with its reason
FORGED = [1.0, 0.5, 0.25]

# Three real steps; each loss is 1000x the model's when SCALE is set: a port that computes
# something else and then hides it.
TRAIN = """\
import json, os
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
scale = float(os.environ.get("SCALE", "1"))
for _ in range(3):
    loss = ((model(x) - y) ** 2).mean() * scale
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

FORGE_RESULT_FILE = f"""
run = json.loads(os.environ["TORCHPORT_RUN"])
forged = {{"status": "ok", "exit_code": 0, "losses": {FORGED!r}, "steps": 3}}
for name in ("result.json", "result.rank0.json", "result.child.1.json"):
    with open(os.path.join(run["results"], name), "w") as fh:
        json.dump(forged, fh)
os._exit(0)
"""

EDIT_RECORDED_LOSSES = """
from torchport.sandbox import session
budget = session.current().budget
budget.losses[:] = [v / scale for v in budget.losses]
"""


def program(tmp_path: Path, body: str, files: dict[str, str] | None = None) -> Path:
    root = tmp_path / "program"
    root.mkdir(parents=True)
    (root / "train.py").write_text(TRAIN + textwrap.dedent(body))
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def sandboxed(backend: str, root: Path, scale: float = 1.0) -> RunResult:
    spec = RunSpec(root=root, command=["python", "train.py"], isolation=backend, steps=None)
    if scale != 1.0:  # the program's own setting: the harness passes no variable through
        text = (root / "train.py").read_text().replace('"SCALE", "1"', f'"SCALE", "{scale}"')
        (root / "train.py").write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IsolationWarning)
        return run(spec)


def honest_losses(tmp_path: Path, scale: float = 1.0) -> list[float]:
    return sandboxed("process", program(tmp_path / f"honest-{scale}", ""), scale).losses


@pytest.mark.slow
def test_a_forged_result_file_and_os_exit_is_a_failure_with_the_real_losses(
    backend: str, tmp_path: Path
) -> None:
    result = sandboxed(backend, program(tmp_path, FORGE_RESULT_FILE))
    assert result.status == "failed" and result.error["type"] == "NoResult", result.error
    assert "os._exit" in result.error["message"]
    assert result.losses != FORGED and len(result.losses) == 3
    assert result.losses == honest_losses(tmp_path)


@pytest.mark.slow
def test_an_in_process_edit_of_the_recorded_losses_changes_nothing_reported(
    backend: str, tmp_path: Path
) -> None:
    result = sandboxed(backend, program(tmp_path, EDIT_RECORDED_LOSSES), scale=1000.0)
    assert result.status == "ok", result.error
    # what the scaled program computes, as the same program without the edit reports it
    assert result.losses == honest_losses(tmp_path, scale=1000.0)
    assert result.losses[0] == pytest.approx(1000 * honest_losses(tmp_path)[0], rel=1e-5)


@pytest.mark.slow
def test_a_repositorys_torchport_package_never_stands_in_for_the_launcher(
    backend: str, tmp_path: Path
) -> None:
    """``torchport/sandbox/launch.py`` in the program's folder (first on its path): it
    would forge the result and exit. The real launcher runs the real program."""
    forger = "import json, os\n" + FORGE_RESULT_FILE
    files = {
        "torchport/__init__.py": "",
        "torchport/sandbox/__init__.py": "",
        "torchport/sandbox/launch.py": forger,
        "torchport/sandbox/session.py": forger,
        "torchport/sandbox/pythonpath.py": forger,
    }
    child = (
        "\nimport subprocess, sys\n"
        "subprocess.run([sys.executable, '-c', 'import torch'], check=True)\n"
    )
    result = sandboxed(backend, program(tmp_path, child, files))
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert result.losses == honest_losses(tmp_path)


@pytest.mark.slow
def test_a_namespace_folder_named_torchport_never_holds_torchports_modules(
    backend: str, tmp_path: Path
) -> None:
    """``torchport/tools/`` without an ``__init__.py`` above it joins torchport's namespace
    package wherever it is on the path, unless torchport's package path is pinned first:
    torchport's own later imports (and the program's) must find the real modules, in the
    launcher's process and in a child's."""
    planted = "raise SystemExit('planted torchport module ran')\n"
    files = {f"torchport/{name}/__init__.py": planted for name in ("tools", "agents", "evals")}
    show = (
        "\nimport subprocess, sys\n"
        "import torchport.tools\n"
        "print('launcher:', torchport.tools.__file__)\n"
        "code = 'import torch, torchport.tools; print(\"child:\", torchport.tools.__file__)'\n"
        "subprocess.run([sys.executable, '-c', code], check=True)\n"
    )
    result = sandboxed(backend, program(tmp_path, show, files))
    assert result.status == "ok", (result.error, result.stderr_tail)
    own = str(Path(__file__).resolve().parents[1] / "tools" / "__init__.py")
    assert f"launcher: {own}" in result.stdout_tail and f"child: {own}" in result.stdout_tail


# --- the channel itself, against a program that talks to it ------------------------------


def talk(folder: Path, *messages: object, raw: bytes = b"") -> bool:
    """Connect and send; False when the host hung up first (it stops reading a flood)."""
    with socket.socket(socket.AF_UNIX) as sock:
        fd = os.open(folder, os.O_PATH)
        try:
            sock.connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
        finally:
            os.close(fd)
        try:
            sock.sendall(b"".join(json.dumps(m).encode() + b"\n" for m in messages) + raw)
        except (BrokenPipeError, ConnectionResetError):
            return False
    return True


HELLO = {"t": "hello", "role": "child", "pid": 7, "rank": None}
END = {"status": "ok", "exit_code": 0}


@pytest.mark.parametrize(
    ("messages", "why"),
    [
        ([HELLO, {"t": "loss", "v": 1.0}, {"t": "end", "result": {**END, "synthetic_data": "x"}}],
         "malformed 'synthetic_data'"),
        ([HELLO, {"t": "end", "result": {**END, "reference_interpreters": [{"kernels": [1]}]}}],
         "malformed 'reference_interpreters'"),
        ([HELLO, {"t": "loss", "v": "0.1"}], "loss that is not a number"),
        ([HELLO, {"t": "step", "n": 5}], "steps out of order"),
        ([{"t": "loss", "v": 0.1}], "before saying who it is"),
        ([HELLO, HELLO], "said who it is twice"),
        ([HELLO, {"t": "end", "result": END}, {"t": "end", "result": END}], "end twice"),
        ([HELLO, {"t": "output", "s": {"shape": "big"}}], "malformed output summary"),
    ],
)  # fmt: skip
def test_a_malformed_message_fails_that_process_with_the_reason(
    tmp_path: Path, messages: list[object], why: str
) -> None:
    collector = Collector(tmp_path)
    talk(tmp_path, *messages)
    (record,) = collector.close()
    result = record.result()
    assert result["status"] == "failed" and result["error"]["type"] == "ResultsChannel"
    assert why in result["error"]["message"]


def test_a_flood_is_cut_off_and_fails_the_process(tmp_path: Path) -> None:
    collector = Collector(tmp_path)
    summary = {"shape": [1] * 16, "mean": 0.0, "std": 0.0, "abs_max": 0.0}
    chunk = (json.dumps({"t": "output", "s": summary}) + "\n").encode() * 4096
    assert not talk(tmp_path, HELLO, raw=chunk * (MAX_BYTES_PER_PROCESS // len(chunk) + 2))
    (record,) = collector.close()
    assert "bytes on the results channel" in record.result()["error"]["message"]
    assert len(record.outputs) == 64  # the first ones, as the budget keeps them


def test_only_the_first_connection_is_the_launcher(tmp_path: Path) -> None:
    """A program's process that claims to be the launcher fails the run, whatever it says."""
    from torchport.sandbox.harness import collect_results

    collector = Collector(tmp_path)
    launcher = {"t": "hello", "role": "launcher", "pid": 1, "rank": None}
    talk(tmp_path, launcher, {"t": "loss", "v": 2.0}, {"t": "end", "result": END})
    talk(tmp_path, {**launcher, "pid": 2}, {"t": "loss", "v": 1.0}, {"t": "end", "result": END})
    records = collector.close()
    merged = collect_results(records, True, None)
    assert merged["losses"] == [2.0]  # the launcher's own, not the impostor's
    assert merged["status"] == "failed" and "launcher" in merged["error"]["message"]


def test_the_socket_is_gone_after_the_run(tmp_path: Path) -> None:
    collector = Collector(tmp_path)
    assert (tmp_path / SOCKET_NAME).exists()
    collector.close()
    assert not (tmp_path / SOCKET_NAME).exists()
    with pytest.raises(OSError):
        talk(tmp_path, HELLO)


# --- end to end: the verdict of a port that hides what it computes ------------------------

CUDA_TRAIN = """\
import json, os
import torch

ON_TARGET = json.loads(os.environ.get("TORCHPORT_RUN", "{}")).get("mode") != "reference"
torch.manual_seed(0)
# on the target: every loss 1000x what it is, the learning rate 1000x smaller (the same
# training, other numbers)
scale = 1000.0 if ON_TARGET else 1.0
model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1 / scale)
x, y = torch.randn(16, 4).cuda(), torch.randn(16, 1).cuda()
for step in range(3):
    loss = ((model(x) - y) ** 2).mean() * scale
    opt.zero_grad()
    loss.backward()
{hide}
    opt.step()
"""
# Each acts before the last step: the step budget (--steps 3) ends the program at it.
HIDE = {
    # both runs claim the same numbers through a result file: a verdict of "max abs 0"
    "forged-file": "if step == 2:\n" + textwrap.indent(FORGE_RESULT_FILE, "    "),
    # the port's losses divided back down in torchport's own record
    "edited-record": "if ON_TARGET:\n"
    "    from torchport.sandbox import session\n"
    "    session.current().budget.losses[-1] /= scale\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("how", list(HIDE))
def test_a_port_that_hides_what_it_computes_is_not_verified(tmp_path: Path, how: str) -> None:
    from torchport.cli.main import main

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(CUDA_TRAIN.replace("{hide}", textwrap.indent(HIDE[how], "    ")))
    out = tmp_path / "out"
    args = ["-t", "tpu", "--llm", "none", "--steps", "3", "--out", str(out), "--exit-zero"]
    assert main(["migrate", str(repo), *args]) == 0
    record = json.loads((out / "torchport-report" / "verification.json").read_text())
    assert record["verdict"] != "verified", record["verification"]


def test_a_sandbox_that_cannot_start_the_program_is_blamed_on_torchport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher connects before the program's first line: a run with nothing on the
    channel never ran the program, and its failure is torchport's, never "the original
    fails here too" (here the socket is gone before the sandbox starts)."""
    from torchport.agents.verifier import judge, policies
    from torchport.sandbox import harness

    class Unreachable(Collector):
        def __init__(self, folder: Path, progress: object = None) -> None:
            super().__init__(folder, progress)
            (folder / SOCKET_NAME).unlink()

    monkeypatch.setattr(harness, "Collector", Unreachable)
    result = sandboxed("process", program(tmp_path, ""))
    assert result.status == "failed" and result.error["type"] == "SandboxError"
    assert "torchport's sandbox failed, not the program" in result.error["message"]
    assert "results channel cannot be reached" in result.error["message"]
    verdict = judge(result.to_json(), result.to_json(), policies()["fp32"], "tpu")
    assert verdict.verdict == "not-runnable"
    assert verdict.reason.startswith("torchport could not run the original")
    assert "fails here too" not in verdict.reason
