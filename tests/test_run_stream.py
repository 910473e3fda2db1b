"""`torchport run` shows the program's own output while it runs, then the run's summary.

The echo is a view: the harness still captures the output's tail for the result (the
verifier reads it), and with ``-f json`` standard output is the JSON alone. What the
program prints is untrusted, so it reaches the terminal escaped, a line at a time.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from torchport.cli.echo import LONGEST_LINE, ProgramEcho


def echoed(*chunks: tuple[str, bytes], close: bool = True) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    echo = ProgramEcho({"stdout": out, "stderr": err})
    for name, chunk in chunks:
        echo(name, chunk)
    if close:
        echo.close()
    return out.getvalue(), err.getvalue()


def test_whole_lines_are_shown_each_on_its_stream():
    out, err = echoed(("stdout", b"a\nb"), ("stderr", b"oops\n"), ("stdout", b"c\n"))
    assert (out, err) == ("a\nbc\n", "oops\n")


def test_a_line_is_shown_once_it_ends_and_the_last_one_at_close():
    out, _ = echoed(("stdout", b"done\npartial"), close=False)
    assert out == "done\n"  # "partial" waits for its end ...
    assert echoed(("stdout", b"done\npartial"))[0] == "done\npartial\n"  # ... or the close


def test_escape_sequences_are_shown_escaped_not_obeyed():
    out, _ = echoed(("stdout", b"\x1b]0;pwned\x07 \xe2\x80\xae \x1b[2J\n"))
    assert out == "\\x1b]0;pwned\\x07 \\u202e \\x1b[2J\n"


def test_a_progress_bar_shows_one_line_per_update():
    """``\\r`` ends a line (it would overprint one); ``\\r\\n`` split across two chunks is
    still one line end, and a ``\\r`` at a line's start makes no empty line."""
    out, _ = echoed(("stdout", b"x\n\rstep 1\rstep 2\r"), ("stdout", b"\nend\r\n"))
    assert out == "x\nstep 1\nstep 2\nend\n"


def test_a_character_split_across_chunks_arrives_whole():
    out, _ = echoed(("stdout", "é".encode()[:1]), ("stdout", "é\n".encode()[1:]))
    assert out == "é\n"


def test_a_line_without_end_is_shown_in_pieces():
    out, _ = echoed(("stdout", b"y" * (LONGEST_LINE + 10)), close=False)
    assert out == "y" * LONGEST_LINE + "\n"


PROGRAM = """\
import sys, time
print("first line, from the program", flush=True)
print("a warning \\x1b]0;pwned\\x07", file=sys.stderr, flush=True)
if len(sys.argv) > 1:
    time.sleep(600)  # still running when the test reads the line above
"""


def torchport_run(root: Path, *extra: str) -> list[str]:
    """`torchport run` of prog.py in ``root`` on plain CPU torch, one step."""
    options = ["--root", str(root), "--target", "accelerator", "--steps", "1", *extra]
    return [sys.executable, "-m", "torchport.cli", "run", *options, "--", "python", "prog.py"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "prog.py").write_text(PROGRAM)
    return tmp_path


@pytest.mark.slow
def test_the_programs_output_comes_first_and_the_summary_after(root: Path):
    done = subprocess.run(torchport_run(root), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "first line, from the program"
    assert lines[1].startswith("ok (plain, isolation: ")  # the harness summary, after
    assert "a warning \\x1b]0;pwned\\x07" in done.stderr.splitlines()


@pytest.mark.slow
def test_with_json_standard_output_is_the_json_alone(root: Path):
    done = subprocess.run(
        torchport_run(root, "-f", "json"), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # nothing but the JSON
    assert result["stdout_tail"] == "first line, from the program\n"  # still captured
    assert "a warning \x1b]0;pwned\x07" in result["stderr_tail"]  # exact in the record
    shown = done.stderr.splitlines()
    assert "first line, from the program" in shown and "a warning \\x1b]0;pwned\\x07" in shown


def as_from_a_terminal() -> None:
    """The child starts as a shell in a terminal starts it: Ctrl-C's SIGINT neither ignored
    nor blocked. Both are inherited across exec, so a test worker that some library left
    ignoring or blocking SIGINT would otherwise hand that on, and Ctrl-C would never land."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def signal_masks(pid: int) -> str:
    """The process's ignored, blocked and caught signal masks (/proc), for a failure."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "no /proc status"
    return ", ".join(ln for ln in lines if ln.startswith(("SigIgn", "SigBlk", "SigCgt")))


@pytest.mark.slow
def test_the_output_is_shown_while_the_program_still_runs(root: Path):
    """The program prints, then sleeps for ten minutes: its line arrives before it ends.
    Ctrl-C then stops torchport and the run with it."""
    command = torchport_run(root, "--timeout", "900")
    command.append("sleep")
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT below dumps its threads
        preexec_fn=as_from_a_terminal,
    )
    try:
        assert proc.stdout.readline() == "first line, from the program\n"
        assert proc.poll() is None  # torchport (and the program) still running
        signals = signal_masks(proc.pid)
        os.kill(proc.pid, signal.SIGINT)
        try:
            assert proc.wait(timeout=120) == 130
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGABRT)
            pytest.fail(f"no exit 120 s after Ctrl-C ({signals}); {proc.communicate()[1][-6000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
