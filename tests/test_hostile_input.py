"""Hostile input at the door: bad options, odd file names, a reader that leaves early.

Every bad number or --llm value of every front door is argparse's one-line error
(exit 2) before anything is created; the sandbox's own specs refuse the same limits
for a library caller; a repository whose file names hold a newline, a tab, a quote, a
backslash, a space or a byte that is not UTF-8 goes through scan, migrate, the
reports, the checkpoints, chat and batch, and real ``git apply`` applies its patch;
``| head -1`` ends the command without a traceback.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from torchport.agents import graph
from torchport.agents.checkpoints import ExactStringSerializer
from torchport.agents.verdicts import FailureKind, Verdict
from torchport.agents.verifier import tree_digest
from torchport.cli.main import EXIT_BROKEN_PIPE, _build_parser, main
from torchport.sandbox.harness import RunError
from torchport.sandbox.harness import RunSpec as HarnessSpec
from torchport.sandbox.isolation import run_isolated
from torchport.sandbox.isolation.spec import RunSpec as IsolationSpec
from torchport.tools.filenames import printable
from torchport.tools.report.patch import file_patch

TRAIN = """\
import torch

model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
if __name__ == "__main__":
    for step in range(10):
        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
CUDA = b"import torch\nx = torch.zeros(3).cuda()\nprint(x.sum().item())\n"
ODD_NAMES = [b"new\nline.py", b"tab\tname.py", b'quo"te.py', b"back\\slash.py", b"caf\xe9.py"]
ODD_NAMES += [b"sp ace.py"]
CLI = [sys.executable, "-m", "torchport.cli"]
RULES_ONLY = ["--no-verify", "--llm", "none", "-q"]


def _git(cwd: Path, *args: str) -> str:
    """git with the repository's hooks and configured programs off (a test's repo, but
    the habit is the one torchport keeps)."""
    safe = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    return subprocess.run(
        ["git", *safe, *ident, *args], cwd=cwd, check=True, capture_output=True
    ).stdout.decode("utf-8", "surrogateescape")


def _bytes(root: Path, name: bytes) -> bytes:
    with open(os.path.join(os.fsencode(root), name), "rb") as f:
        return f.read()


def program(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(TRAIN)
    return root


def odd_repo(root: Path) -> Path:
    """A training program beside files whose names every line-based format trips on."""
    program(root)
    for name in ODD_NAMES:
        with open(os.path.join(os.fsencode(root), name), "wb") as f:
            f.write(CUDA)
    return root


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and "Exception ignored" not in err, err


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "TORCHPORT_HOME": str(home), **extra}


# -- every bad option of every front door: one line, exit 2, nothing created ----------

BUDGET = [
    ("--steps", "0"),
    ("--steps", "-5"),
    ("--steps", "1.5"),
    ("--timeout", "nan"),
    ("--timeout", "inf"),
    ("--timeout", "-1"),
    ("--timeout", "0"),
    ("--timeout", "1e300"),
    ("--memory", "0"),
    ("--memory", "-1"),
    ("--memory", "63"),
    ("--isolation", "chroot"),
]
LLM = [
    ("--llm", "nosuchmode"),
    ("--llm", "http://"),
    ("--llm", "ftp://example.invalid/v1"),
    ("--llm", "http://host:port/v1"),
]
AGENT = [("--max-iterations", "-3"), ("--max-llm-tokens", "-1")]

# door -> (argv before the option, argv after it, the bad options it must refuse)
DOORS = {
    "migrate": (["migrate", "{repo}", "-t", "tpu", "--out", "{out}"], [], BUDGET + LLM + AGENT),
    "chat": (["chat", "{repo}"], [], BUDGET + LLM),
    "batch": (
        ["batch", "{repos}", "-t", "tpu", "--out", "{out}"],
        [],
        [*BUDGET, *LLM, *AGENT, ("--jobs", "0"), ("--jobs", "-2")],
    ),
    "eval": (
        ["eval", "--out", "{out}"],
        [],
        [("--jobs", "0"), ("--steps", "0"), ("--timeout", "nan"), ("--timeout", "-1")],
    ),
    "run": (
        ["run", "--root", "{repo}"],
        ["--", "python", "train.py"],
        [*BUDGET, ("--devices", "0"), ("--seed", "-1"), ("--seed", str(2**32))],
    ),
    "scan": (["scan", "{repo}"], [], [("--jobs", "-1"), ("--max-file-size", "0")]),
}
CASES = [(door, opt, value) for door, (_, _, bad) in DOORS.items() for opt, value in bad]


@pytest.mark.parametrize(("door", "option", "value"), CASES, ids=lambda v: str(v))
def test_a_bad_option_is_one_line_exit_2_and_nothing_is_created(
    door, option, value, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("TORCHPORT_HOME", str(tmp_path / "home"))
    program(tmp_path / "repos" / "repo")
    where = {"repo": tmp_path / "repos" / "repo", "repos": tmp_path / "repos"}
    where["out"] = tmp_path / "out"
    head, tail, _ = DOORS[door]
    argv = [a.format(**where) for a in head] + [option, value] + tail
    before = sorted(tmp_path.rglob("*"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"torchport {door}: error: argument {option}") and err.count("\n") == 1
    _no_traceback(err)
    assert sorted(tmp_path.rglob("*")) == before  # no home, run folder, output or batch DIR


def test_the_lowest_values_each_option_accepts_parse():
    args = _build_parser().parse_args(
        [
            *("migrate", "r", "-t", "tpu", "--steps", "1", "--timeout", "0.5", "--memory", "64"),
            *("--max-iterations", "0", "--max-llm-tokens", "0", "--llm", " LOCAL "),
        ]
    )
    assert (args.steps, args.timeout, args.memory, args.max_iterations) == (1, 0.5, 64, 0)
    assert args.llm == "local"
    url = "https://127.0.0.1:8443/v1"
    args = _build_parser().parse_args(["batch", "s", "-t", "tpu", "-o", "o", "--llm", url])
    assert args.llm == url and args.jobs == 1
    args = _build_parser().parse_args(["scan", ".", "--jobs", "0", "--max-file-size", "1"])
    assert (args.jobs, args.max_file_size) == (0, 1)
    args = _build_parser().parse_args(["run", "--seed", str(2**32 - 1), "--devices", "1"])
    assert (args.seed, args.devices, args.isolation) == (2**32 - 1, 1, "auto")


def test_the_console_script_says_one_line_and_makes_no_home(tmp_path):
    repo = program(tmp_path / "repo")
    proc = subprocess.run(
        [*CLI, "migrate", str(repo), "-t", "tpu", "--timeout", "nan"],
        capture_output=True,
        text=True,
        env=_env(tmp_path / "home"),
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "torchport migrate: error: argument --timeout: must be a number above 0 and at most "
        "604800, not 'nan'"
    ]
    assert not (tmp_path / "home").exists() and not (tmp_path / "repo-tpu").exists()


# -- the sandbox's own specs: a library caller cannot run unbounded either ------------


def _ids(limits: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in limits.items())


BAD_LIMITS = [
    {"timeout_s": math.nan},
    {"timeout_s": math.inf},
    {"timeout_s": 0},
    {"timeout_s": -1.0},
    {"memory_mb": 0},
    {"memory_mb": -1},
    {"memory_mb": 512.5},
    {"pids": 0},
    {"cpus": 0.0},
    {"cpus": math.nan},
]


@pytest.mark.parametrize("bad", BAD_LIMITS, ids=_ids)
def test_the_isolation_spec_refuses_a_limit_that_does_not_bound(bad, tmp_path):
    (name,) = bad
    with pytest.raises(ValueError, match=f"^{name} must be"):
        IsolationSpec(argv=["true"], scratch=tmp_path, **bad)
    limits = {"timeout_s": 30.0, "memory_mb": 512, **bad}
    scratch = tmp_path / "scratch"
    marker = scratch / "ran"
    with pytest.raises(ValueError, match="must be"):
        run_isolated(
            [sys.executable, "-c", f"open({str(marker)!r}, 'w')"], scratch=scratch, **limits
        )
    assert not scratch.exists()  # refused before anything was made, let alone started


@pytest.mark.parametrize(
    "bad",
    [
        {"steps": 0},
        {"forwards": -1},
        {"timeout_s": math.nan},
        {"memory_mb": 0},
        {"devices": 0},
        {"seed": -1},
        {"steps": True},
    ],
    ids=_ids,
)
def test_the_harness_spec_refuses_a_budget_that_does_not_bound(bad, tmp_path):
    (name,) = bad
    with pytest.raises(RunError, match=f"^{name} must be"):
        HarnessSpec(root=tmp_path, command=["python", "train.py"], **bad)


def test_the_harness_spec_takes_no_step_budget_as_none(tmp_path):
    spec = HarnessSpec(root=tmp_path, command=["python", "x.py"], steps=None, forwards=None)
    assert spec.steps is None and spec.forwards is None


# -- odd file names: digest, patch, reports, checkpoints, chat, batch -----------------


def test_the_tree_digest_hashes_the_bytes_of_each_name(tmp_path):
    digests = []
    for i, name in enumerate([b"caf\xe9.py", b"caf\xe8.py", b"caf\xe9.py"]):
        root = tmp_path / str(i)
        root.mkdir()
        with open(os.path.join(os.fsencode(root), name), "wb") as f:
            f.write(CUDA)
        digests.append(tree_digest(root))
    assert digests[0] == digests[2] != digests[1]


def test_a_patch_of_odd_names_and_odd_lines_is_applied_by_git(tmp_path):
    """Names git must quote, and lines ``str.splitlines`` would split (form feed, U+2028,
    a lone CR), a CRLF file and a last line without a newline: git reproduces each."""
    before = "a = 1\x0c\nb = 'x\u2028y'\nc = 2\rd\n".encode() + b"e = '\xe9'\nf = 3"
    after = before.replace(b"1", b"10").replace(b"3", b"30")
    crlf_before, crlf_after = b"p = 1\r\nq = 2\r\n", b"p = 1\r\nq = 20\r\n"
    repo = tmp_path / "repo"
    repo.mkdir()
    patch = ""
    for name in [*ODD_NAMES, b"crlf.py"]:
        old, new = (crlf_before, crlf_after) if name == b"crlf.py" else (before, after)
        with open(os.path.join(os.fsencode(repo), name), "wb") as f:
            f.write(old)
        text = [b.decode("utf-8", "surrogateescape") for b in (old, new)]
        patch += file_patch(os.fsdecode(name), *text)
    (tmp_path / "p.patch").write_bytes(patch.encode("utf-8", "surrogateescape"))
    _git(repo, "init", "-q")
    _git(repo, "apply", "--check", str(tmp_path / "p.patch"))
    _git(repo, "apply", str(tmp_path / "p.patch"))
    for name in ODD_NAMES:
        assert _bytes(repo, name) == after
    assert _bytes(repo, b"crlf.py") == crlf_after


def _headers(patch: str) -> set[tuple[str, ...]]:
    """Each file's ``diff --git``, ``---`` and ``+++`` lines (git puts ``index`` between)."""
    files = patch.split("\ndiff --git ")
    heads = [f.split("\n@@")[0].splitlines() for f in files]
    return {tuple(x for x in h if x.startswith(("diff --git ", "--- ", "+++ "))) for h in heads}


def test_migrate_writes_odd_names_that_git_applies_and_json_that_any_reader_reads(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("TORCHPORT_HOME", str(tmp_path / "home"))
    repo = odd_repo(tmp_path / "repo")
    code = main(["migrate", str(repo), "-t", "tpu", "--no-verify", "--llm", "none", "-q"])
    assert code in (0, 1)
    stdout = capsys.readouterr().out
    out = tmp_path / "repo-tpu"
    report = out / "torchport-report"
    for path in report.iterdir():
        if path.name != "changes.patch":
            path.read_bytes().decode("utf-8")  # every report is valid UTF-8
    data = json.loads((report / "changes.json").read_bytes().decode("utf-8"))
    expected = {printable(os.fsdecode(n)) for n in ODD_NAMES} | {"train.py"}
    assert set(data["files_changed"]) == expected and "caf\\xe9.py" in expected
    # git applies the patch to a copy of the original and gets the output, byte for byte
    patch = (report / "changes.patch").read_bytes()
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    _git(copy, "init", "-q")
    _git(copy, "apply", str(report / "changes.patch"))
    for name in [*ODD_NAMES, b"train.py"]:
        assert _bytes(copy, name) == _bytes(out, name) and b".cuda()" not in _bytes(out, name)
    # ... and names each file exactly as git's own diff does
    original = tmp_path / "by-git"
    shutil.copytree(repo, original)
    _git(original, "init", "-q")
    _git(original, "add", "-A")
    _git(original, "commit", "-qm", "original")
    for name in [*ODD_NAMES, b"train.py"]:
        with open(os.path.join(os.fsencode(original), name), "wb") as f:
            f.write(_bytes(out, name))
    by_git = _git(original, "-c", "core.quotePath=true", "diff", "--no-color", "--no-ext-diff")
    assert _headers(patch.decode("utf-8", "surrogateescape")) == _headers(by_git)
    # the run's checkpoint holds the exact names (langgraph's own encoding made them "?")
    run_id = stdout.split("run: ")[1].split()[0]
    state, pending = graph.saved_state(run_id)
    assert pending == () and set(state["overlay"]) == {os.fsdecode(n) for n in ODD_NAMES} | {
        "train.py"
    }


def test_the_checkpoint_serializer_round_trips_every_string():
    serde = ExactStringSerializer()
    value = {
        "caf\udce9.py": ["new\nline.py", "caf\udce9.py", ("x\ud800",)],
        "plain": "\x00torchport-surrogates:looks tagged",
        "n": 3,
    }
    back = serde.loads_typed(serde.dumps_typed(value))
    assert back["caf\udce9.py"][:2] == ["new\nline.py", "caf\udce9.py"]
    assert list(back["caf\udce9.py"][2]) == ["x\ud800"]
    assert back["plain"] == value["plain"] and back["n"] == 3


def test_a_verdict_is_checkpointed_as_its_plain_value(recwarn):
    """langgraph's serializer tags a str subclass with its type (and warns on reading it
    back, to refuse it in a later version): a Verdict goes in as the plain string."""
    serde = ExactStringSerializer()
    kind, data = serde.dumps_typed({"verdict": Verdict.VERIFIED, "kinds": [FailureKind.NO_RESULT]})
    assert b"torchport.agents" not in data  # no type name inside the checkpoint
    back = serde.loads_typed((kind, data))
    assert type(back["verdict"]) is str and back["verdict"] == Verdict.VERIFIED
    assert back["kinds"] == [FailureKind.NO_RESULT]
    assert not [w for w in recwarn if "unregistered type" in str(w.message)]


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "markdown"])
def test_scan_writes_every_format_for_odd_names(fmt, tmp_path, capsys):
    repo = odd_repo(tmp_path / "repo")
    out = tmp_path / f"report.{fmt}"
    assert main(["scan", str(repo), "-f", fmt, "-o", str(out), "-q"]) == 1
    _no_traceback(capsys.readouterr().err)
    text = out.read_bytes().decode("utf-8")
    if fmt in ("json", "sarif"):
        data = json.loads(text)
    if fmt == "json":  # (SARIF's URIs are part E's: percent-encoded)
        assert "\\ud" not in text.lower()  # no lone surrogate escapes (I-JSON)
        found = {f["path"] for f in data["findings"]}
        assert found >= {printable(os.fsdecode(n)) for n in ODD_NAMES}


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_scan_to_a_strict_utf8_stdout_does_not_crash(fmt, tmp_path):
    """A UTF-8 locale with strict errors (en_US.UTF-8 on most desktops) used to end the
    scan with UnicodeEncodeError at the first name that is not UTF-8."""
    repo = odd_repo(tmp_path / "repo")
    proc = subprocess.run(
        [*CLI, "scan", str(repo), "-f", fmt, "-q"],
        capture_output=True,
        env=_env(tmp_path / "home", PYTHONIOENCODING="utf-8:strict"),
        timeout=120,
    )
    _no_traceback(proc.stderr.decode())
    assert proc.returncode == 1
    assert "caf" in proc.stdout.decode("utf-8")


@pytest.mark.slow
def test_migrate_verifies_a_repository_with_odd_names(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCHPORT_HOME", str(tmp_path / "home"))
    repo = odd_repo(tmp_path / "repo")
    argv = ["migrate", str(repo), "-t", "tpu", "--llm", "none", "--steps", "2", "-q"]
    main([*argv, "--exit-zero"])
    out = capsys.readouterr().out
    assert "verdict: verified" in out, out
    assert (tmp_path / "repo-tpu" / "torchport-report" / "verification.json").is_file()


@pytest.mark.slow
def test_chat_diffs_and_writes_a_patch_git_applies_for_odd_names(tmp_path):
    repo = odd_repo(tmp_path / "repo")
    proc = subprocess.run(
        [*CLI, "chat", str(repo), "--llm", "none", "--plain"],
        input="/scan\n/migrate\n/diff\n/report\n/quit\n",
        capture_output=True,
        text=True,
        env=_env(tmp_path / "home", PYTHONIOENCODING="utf-8:strict"),
        timeout=300,
    )
    _no_traceback(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    patch = proc.stdout.split("the proposal as a patch: ")[1].split()[0]
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    _git(copy, "init", "-q")
    _git(copy, "apply", patch)
    for name in ODD_NAMES:
        assert b'.to("tpu")' in _bytes(copy, name)


@pytest.mark.slow
def test_batch_of_an_odd_repository_writes_valid_summaries(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHPORT_HOME", str(tmp_path / "home"))
    repos = tmp_path / "repos"
    odd_repo(Path(os.fsdecode(os.fsencode(repos) + b"/caf\xe9")))
    out = tmp_path / "out"
    argv = ["batch", str(repos), "-t", "tpu", "--out", str(out), "--no-verify"]
    assert main([*argv, "--llm", "none", "-q"]) == 0
    for suffix in ("md", "csv", "json"):
        (out / f"summary.{suffix}").read_bytes().decode("utf-8")
    (row,) = json.loads((out / "summary.json").read_text())["repos"]
    assert row["source"].endswith("caf\\xe9") and row["verdict"] == "not verified"


# -- a reader that leaves early: `torchport ... | head -1` -----------------------------


def _reader_that_leaves(args: list[str], env: dict[str, str], lines: int) -> tuple[bytes, int, str]:
    """Run the command with its stdout a pipe of one page whose reader takes ``lines``
    lines and closes it (0: closed before the command starts, as ``| true``); the
    command's next write then meets a closed pipe, deterministically."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    if not lines:
        os.close(read_end)
    proc = subprocess.Popen([*CLI, *args], stdout=write_end, stderr=subprocess.PIPE, env=env)
    os.close(write_end)
    taken = b""
    while taken.count(b"\n") < lines:
        chunk = os.read(read_end, 1)
        assert chunk, "the command ended before its first line"
        taken += chunk
    if lines:
        os.close(read_end)
    _, err = proc.communicate(timeout=300)
    return taken, proc.returncode, err.decode()


def _many_findings(root: Path) -> Path:
    root.mkdir(parents=True)
    # long lines: the diff outgrows Python's 8 KiB buffer, so more is written after it
    body = "".join(f"x{i} = torch.zeros({i}).cuda()  # {'padding ' * 20}\n" for i in range(60))
    (root / "many.py").write_text("import torch\n" + body)
    return root


MIGRATE_DRY_RUN = ["migrate", "{repo}", "-t", "tpu", "--dry-run", *RULES_ONLY]


@pytest.mark.parametrize(
    ("command", "lines", "first"),
    [
        (["rules"], 0, b""),
        (["scan", "{repo}", "-q"], 0, b""),
        pytest.param(MIGRATE_DRY_RUN, 0, b"", marks=pytest.mark.slow),
        # Python drops what a write that the reader cut short left unwritten (scan writes
        # its report at once), so only commands that write again after are in this set.
        (["rules"], 1, b"code "),
        (MIGRATE_DRY_RUN, 1, b"diff --git"),
    ],
    ids=["rules-true", "scan-true", "migrate-true", "rules-head", "migrate-head"],
)
def test_a_reader_that_leaves_early_ends_the_command_quietly(command, lines, first, tmp_path):
    repo = _many_findings(tmp_path / "repo")
    args = [a.format(repo=repo) for a in command]
    taken, code, err = _reader_that_leaves(args, _env(tmp_path / "home"), lines)
    assert taken.startswith(first)
    assert code == EXIT_BROKEN_PIPE, err
    assert "BrokenPipe" not in err
    _no_traceback(err)
