"""`torchport chat` with piped input (no terminal) and a scripted OpenAI-compatible server.

The server is a test double that answers with fixed replies, not a model: it
makes the plain-language loop deterministic. Plain output (no escape codes),
replies that are commands, answers or neither, and a model that asks to apply:
the approval question still comes, and "n" writes nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_llm import Content, ScriptedLLM

# every test runs the chat CLI, most of them through a verification
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-test-0123456789abcdef"


def chat(*args: str, lines: list[str] = (), env: dict | None = None, timeout: float = 300):
    """`torchport chat ARGS` with ``lines`` typed on its standard input (not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "torchport.cli", "chat", *args],
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def cuda_mnist(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "examples" / "cuda_mnist", repo)
    return repo


def test_plain_words_become_commands_and_apply_still_asks(tmp_path: Path):
    repo = cuda_mnist(tmp_path)
    before = {p.name: p.read_bytes() for p in repo.iterdir() if p.is_file()}
    script = [
        Content('{"command": "/diff run.sh"}'),
        Content('{"answer": "The emulated TPU autocasts to bf16 already."}'),
        Content("Sure! Happy to help."),
        Content('```json\n{"command": "/apply"}\n```'),
    ]
    lines = [
        "/migrate",
        "show me run.sh",
        "use bf16 everywhere",
        "hello",
        "looks good, write it",
        "n",
        "/quit",
    ]
    env = {**os.environ, "TORCHPORT_LLM_API_KEY": SECRET}
    with ScriptedLLM(script) as server:
        done = chat(str(repo), "--llm", server.base_url, lines=lines, env=env)
    out = done.stdout
    assert done.returncode == 0, done.stderr
    assert "\x1b[" not in out  # not a terminal: no escape codes
    assert "-> /diff run.sh" in out and "+export TPU_VISIBLE_DEVICES=0" in out
    assert "The emulated TPU autocasts to bf16 already." in out
    assert "Sure! Happy to help." in out
    assert "-> /apply" in out and "Apply? [y/N]" in out and "Not applied" in out
    assert {p.name: p.read_bytes() for p in repo.iterdir() if p.is_file()} == before
    assert len(server.requests) == 4
    # the model saw the session (numbered changes with their rules), never the key
    assert "2 run.sh:5 codemod TPD024" in server.requests[0]["messages"][0]["content"]
    assert all(SECRET not in body for body in server.bodies)


def test_without_an_llm_plain_words_get_a_clear_answer(tmp_path: Path):
    lines = ["port this please", "/nonsense", "/target cuda", "/undo 1"]  # then end of input
    done = chat(str(cuda_mnist(tmp_path)), "--llm", "none", lines=lines)
    assert done.returncode == 0, done.stderr
    assert "No LLM is configured" in done.stdout
    assert "error: unknown command /nonsense" in done.stdout and "/verify" in done.stdout
    assert "error: unknown target 'cuda'" in done.stdout
    assert "Nothing proposed: nothing to undo." in done.stdout
    assert "Resume with: torchport chat --resume" in done.stdout  # Ctrl-D / EOF quits


def test_bad_arguments_are_clear_errors(tmp_path: Path):
    missing = chat(str(tmp_path / "nope"))
    assert missing.returncode == 2 and "not a folder" in missing.stderr
    unknown = chat("--resume", "19990101-000000-abcdef")
    assert unknown.returncode == 2 and "no chat session" in unknown.stderr


def test_a_rule_taken_back_stays_back_on_the_next_migrate(tmp_path: Path):
    lines = ["/migrate", "/undo TPT002", "/migrate", "/redo TPT002", "/redo 2", "/report"]
    done = chat(str(cuda_mnist(tmp_path)), "--llm", "none", lines=lines)
    out = done.stdout
    assert done.returncode == 0, done.stderr
    first, second = out.split("/redo to add")[0], out.split("/redo to add")[1]
    assert first.count("undone [") == 2  # the two CUDA-event changes, by their rule code
    assert "left undone as you asked (TPT002)" in first  # the second /migrate kept them back
    assert second.count("redone [") == 2 and "already proposed: nothing to redo" in second
    assert "15 proposed, 0 undone" in out  # /redo 2 had nothing to put back


def test_fix_asks_the_llm_to_repair_a_failed_verification(tmp_path: Path):
    """An undone `.cuda()` fails on the emulated tpu; /fix sends that failure to the LLM
    (scripted here: it answers with the edit a good model would make) and the repaired
    proposal verifies; only /apply writes it."""
    repo = cuda_mnist(tmp_path)

    def repair(request: dict) -> Content:
        text = request["messages"][-1]["content"]
        line = re.search(r"^\D*(\d+)\D.*model = Net\(\)\.cuda\(\)", text, re.MULTILINE)
        assert line is not None, text
        edit = {"start_line": int(line.group(1)), "end_line": int(line.group(1))}
        edit["new_code"] = "    model = Net().to(device)"
        return Content(json.dumps({"edits": [edit], "summary": "move the model to `device`"}))

    lines = ["/migrate", "/undo 9", "/verify", "/fix", "/verify", "/diff train.py"]
    lines += ["/apply", "y"]
    with ScriptedLLM([repair]) as server:
        done = chat(str(repo), "--llm", server.base_url, "--steps", "2", lines=lines, timeout=600)
    out = done.stdout
    assert done.returncode == 0, done.stderr
    first, second = out.split("The LLM proposes: move the model to `device`")
    assert "verdict: failed" in first and "Torch not compiled with CUDA" in first
    assert "Problem (failure): AssertionError" in server.requests[0]["messages"][-1]["content"]
    assert "verdict: verified" in second
    assert re.search(r"\[\d+\] train\.py:\d+ llm", second)  # the repair is a change of its own
    assert "+    model = Net().to(device)" in second and "Applied to 3 files" in second
    assert "model = Net().to(device)" in (repo / "train.py").read_text()


def test_edit_sends_the_lines_a_person_names_and_the_edit_is_a_proposal(tmp_path: Path):
    """`/edit train.py:54 ...` names the line as on disk; the LLM (scripted) gets that line
    where the proposal now has it, and its edit is a numbered change, written by nobody."""
    repo = cuda_mnist(tmp_path)
    original = (repo / "train.py").read_text()
    assert original.splitlines()[53].strip() == "model = Net().cuda()"

    def bf16(request: dict) -> Content:
        text = request["messages"][-1]["content"]
        line = int(re.search(r"File: train\.py, lines (\d+)-\1", text).group(1))
        assert re.search(rf"^\D*{line}\D.*model = Net\(\)\.to\(device\)$", text, re.MULTILINE)
        edit = {"start_line": line, "end_line": line}
        edit["new_code"] = "    model = Net().to(device, dtype=torch.bfloat16)"
        return Content(json.dumps({"edits": [edit], "summary": "the model in bf16"}))

    lines = ["/migrate", "/edit train.py", "/edit x.py:1 y"]
    lines += ["/edit train.py:54 keep the model in bf16", "/diff train.py", "/report"]
    with ScriptedLLM([bf16]) as server:
        done = chat(str(repo), "--llm", server.base_url, lines=lines)
    out = done.stdout
    assert done.returncode == 0, done.stderr
    assert "usage: /edit FILE:LINE[-END]" in out and "no file x.py" in out
    assert len(server.requests) == 1  # only the well-formed /edit reached the model
    assert "Problem (instruction): keep the model in bf16" in server.bodies[0]
    assert "The LLM proposes: the model in bf16" in out
    assert re.search(r"\[\d+\] train\.py:54 llm", out)
    assert "+    model = Net().to(device, dtype=torch.bfloat16)" in out
    assert (repo / "train.py").read_text() == original  # a proposal, nothing written


def test_resume_keeps_the_session_and_can_change_its_llm(tmp_path: Path):
    repo = cuda_mnist(tmp_path)
    first = chat(str(repo), "--llm", "none", lines=["/migrate", "/undo 1", "hello"])
    assert first.returncode == 0 and "No LLM is configured" in first.stdout
    session_id = re.search(r"--resume (\S+)", first.stdout).group(1)
    with ScriptedLLM([Content('{"command": "/report"}')]) as server:
        again = chat("--resume", session_id, "--llm", server.base_url, lines=["what now?"])
    assert again.returncode == 0, again.stderr
    assert f"resuming session {session_id}: {repo} -> tpu; 15 changes proposed, 1 undone" in (
        again.stdout
    )
    assert "-> /report" in again.stdout and "14 proposed, 1 undone" in again.stdout
    assert len(server.requests) == 1


def test_a_failing_command_is_reported_and_the_session_goes_on(tmp_path: Path):
    repo = cuda_mnist(tmp_path)
    first = chat(str(repo), "--llm", "none", lines=["/target"])
    session_id = re.search(r"--resume (\S+)", first.stdout).group(1)
    shutil.rmtree(repo)  # the repository went away between two sittings
    again = chat("--resume", session_id, lines=["/migrate", "/target neuron"])
    assert again.returncode == 0, again.stderr
    assert "error: that command failed:" in again.stdout
    assert "target is now neuron." in again.stdout  # the next command still ran
    assert "Traceback" not in again.stdout + again.stderr
