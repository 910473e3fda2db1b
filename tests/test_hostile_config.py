"""A repository's own configuration against torchport's checks (issue 29, holes 7 and 9).

The repository is untrusted, and so is its torchport.toml: `[tolerance] fp32 = {rtol =
1e30, atol = 1e30}` turned a port whose losses were off by 1e12 into `verified`, exit 0,
and `steps = 1` came from the repository too. Its `entry` was reported as "given with
--entry", no front door said a configuration file was applied, and a torchport.toml
symlinked out of the repository was followed.

Now a repository may tighten any check, but loosening one beyond the bounds of
agents/data/loosening.toml is a one-line error naming the file, the key and the bound
(exit 2, nothing written); within them, and whatever the user's flags and variables
loosen, the verdict's line and the first line of verification.md say so and who did.
Every test runs the real `torchport` CLI (or the MCP server with the SDK's client) on a
hostile repository made in tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A port that computes something else and then hides it: on the emulated device (not the
# CUDA the original runs on) every loss is 1e12 times the original's; the learning rate
# is divided by the same factor, so the run trains the same and no loss overflows.
WRONG_PORT = """\
import torch

device = torch.device("cuda")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1).to(device)
x, y = torch.randn(8, 4).to(device), torch.randn(8, 1).to(device)
scale = 1.0 if x.device.type == "cuda" else 1e12
opt = torch.optim.SGD(model.parameters(), lr=0.1 / scale)
for step in range(5):
    loss = ((model(x) - y) ** 2).mean() * scale
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
RIGHT_PORT = WRONG_PORT.replace("1e12", "1.0")
HOSTILE_TOLERANCE = "[tolerance]\nfp32 = { rtol = 1e30, atol = 1e30 }\n"


def torchport(*args: str, env: dict[str, str] | None = None, timeout: float = 600):
    return subprocess.run(
        [sys.executable, "-m", "torchport.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,  # a FIFO read as a configuration file would block forever
    )


def repository(tmp_path: Path, program: str, config: str | None = None) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(program)
    if config is not None:
        (repo / "torchport.toml").write_text(config)
    return repo


def verdict_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("verdict: "))


# --- hole 7: the tolerance and the steps ------------------------------------------------


@pytest.mark.slow
def test_a_repositorys_unbounded_tolerance_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    repo = repository(tmp_path, WRONG_PORT, HOSTILE_TOLERANCE)
    done = torchport("migrate", str(repo), "-t", "tpu", "--llm", "none")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "verified" not in done.stdout
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(f"torchport: error: {repo / 'torchport.toml'}: tolerance: fp32.rtol")
    assert "at most 0.001 (10x torchport's 0.0001, never above 0.5)" in error
    assert "agents/data/loosening.toml" in error and "Traceback" not in done.stderr
    assert not (tmp_path / "repo-tpu").exists()  # nothing written

    # without the repository's numbers, the same wrong port fails, as it always did
    (repo / "torchport.toml").unlink()
    honest = torchport("migrate", str(repo), "-t", "tpu", "--llm", "none", "--dry-run")
    assert honest.returncode == 1 and verdict_line(honest.stdout).startswith("verdict: failed")


@pytest.mark.slow
def test_within_bounds_the_repositorys_own_numbers_are_said_on_the_verdicts_line(
    tmp_path: Path,
) -> None:
    config = "steps = 3\n[tolerance]\nfp32 = { rtol = 1e-3, atol = 1e-5 }\n"
    repo = repository(tmp_path, RIGHT_PORT, config)
    done = torchport("migrate", str(repo), "-t", "tpu", "--llm", "none")
    assert done.returncode == 0, done.stdout + done.stderr
    said = (
        "under this repository's own tolerance fp32 rtol 0.001 (torchport's: 0.0001) and "
        "steps 3 (torchport's: 5), set in torchport.toml"
    )
    assert verdict_line(done.stdout).startswith(f"verdict: verified — {said}: 3 steps match")
    report = tmp_path / "repo-tpu" / "torchport-report"
    first = (report / "verification.md").read_text().splitlines()[0]
    assert first == f"# Verification: verified {said}"
    record = json.loads((report / "verification.json").read_text())
    assert record["verification"]["loosened"] == [said.removeprefix("under ")]
    # and the configuration the run applied, on its own line
    assert f"configuration: {repo / 'torchport.toml'} (steps 3, tolerance auto; fp32: " in (
        done.stdout
    )


@pytest.mark.slow
def test_the_users_looser_choices_are_allowed_and_said_as_the_users(tmp_path: Path) -> None:
    repo = repository(tmp_path, RIGHT_PORT)
    done = torchport(
        "migrate",
        str(repo),
        "-t",
        "tpu",
        "--llm",
        "none",
        "--steps",
        "1",  # below a repository's bound: the user may
        "--dry-run",
        env={"TORCHPORT_TOLERANCE": "bf16"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert verdict_line(done.stdout).startswith(
        "verdict: verified — under the user's tolerance policy bf16 (torchport's: fp32 for "
        "this program), set with TORCHPORT_TOLERANCE; under the user's steps 1 (torchport's: "
        "5), set with --steps: 1 steps match"
    )


TOO_LOOSE = [
    ("steps = 1\n", "steps: 1 is looser", "at least 2 (torchport's: 5)"),
    ("[tolerance]\nfp32 = { rtol = 2e-3 }\n", "fp32.rtol 0.002", "at most 0.001 (10x"),
    ("[tolerance]\nfp32 = { atol = 1 }\n", "fp32.atol 1 is looser", "at most 0.0001 (10x"),
    ("[tolerance]\nbf16 = { rtol = 0.51 }\n", "bf16.rtol 0.51", "at most 0.5 (10x"),
    ("[tolerance]\nbf16 = { atol = 0.2 }\n", "bf16.atol 0.2", "at most 0.1 (10x"),
    ("[tolerance]\nfp32 = { max_steps = 1 }\n", "fp32.max_steps 1", "at least 2 (torchport's"),
    ("[tolerance]\nfp32 = { rtol = inf }\n", "fp32.rtol inf", "at most 0.001"),
]


@pytest.mark.parametrize(("config", "what", "bound"), TOO_LOOSE)
def test_each_looser_value_beyond_its_bound_is_a_clear_error(
    tmp_path: Path, config: str, what: str, bound: str
) -> None:
    repo = repository(tmp_path, RIGHT_PORT, config)
    done = torchport("config", str(repo))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"torchport: error: {repo / 'torchport.toml'}: ")
    assert what in done.stderr and bound in done.stderr


def test_tighter_values_and_a_named_policy_are_the_repositorys_to_choose(tmp_path: Path) -> None:
    config = (
        'steps = 50\n[tolerance]\npolicy = "bf16"\n'
        "fp32 = { rtol = 1e-6, atol = 0, max_steps = 5000 }\nbf16 = { rtol = 0.5, atol = 0.1 }\n"
    )
    done = torchport("config", str(repository(tmp_path, RIGHT_PORT, config)), "-f", "json")
    assert done.returncode == 0, done.stderr
    settings = json.loads(done.stdout)["settings"]
    assert settings["steps"]["value"] == 50
    assert settings["tolerance"]["value"]["bf16"] == {"rtol": 0.5, "atol": 0.1}


# --- hole 9: which file, where each value came from, and what a file may be --------------


@pytest.mark.slow
def test_migrate_says_which_file_was_applied_and_an_entry_from_it_is_from_it(
    tmp_path: Path,
) -> None:
    repo = repository(tmp_path, RIGHT_PORT, 'entry = "python train.py"\nexclude = ["docs/"]\n')
    args = ("migrate", str(repo), "--llm", "none", "--dry-run", "--no-verify")
    text = torchport(*args, env={"TORCHPORT_TARGET": "xla"})
    assert text.returncode == 0, text.stderr
    file = repo / "torchport.toml"
    line = f"configuration: {file} (entry python train.py, exclude docs/); TORCHPORT_TARGET "
    assert line + "(target xla)" in text.stdout.splitlines()
    data = json.loads(torchport(*args, "-t", "xla", "-f", "json").stdout)
    assert data["verification"]["plan"]["entry_reason"] == f"from {file}"
    assert data["configuration"]["file"] == str(file)
    assert data["configuration"]["set"]["entry"] == {
        "value": "python train.py",
        "source": str(file),
    }
    # the flag's own entry is the flag's
    flag = ("-t", "xla", "-f", "json", "--entry", "python train.py")
    flagged = json.loads(torchport(*args, *flag).stdout)
    assert flagged["verification"]["plan"]["entry_reason"] == "given with --entry"


def _outside_link(repo: Path, tmp_path: Path, name: str) -> None:
    outside = tmp_path / "elsewhere.toml"
    body = (
        'entry = "python train.py"\n'
        if name == "torchport.toml"
        else ('[tool.torchport]\nentry = "python train.py"\n')
    )
    outside.write_text(body)
    (repo / name).symlink_to(outside)


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda repo, tmp: _outside_link(repo, tmp, "torchport.toml"), "leaves the repository"),
        (lambda repo, tmp: _outside_link(repo, tmp, "pyproject.toml"), "leaves the repository"),
        (lambda repo, tmp: (repo / "torchport.toml").symlink_to("/dev/zero"), "leaves the"),
        (lambda repo, tmp: os.mkfifo(repo / "torchport.toml"), "not a regular file"),
        (
            lambda repo, tmp: (repo / "torchport.toml").write_text("#" * (1 << 20) + "\n"),
            "larger than 1048576 bytes",
        ),
    ],
    ids=["link-out", "pyproject-link-out", "dev-zero", "fifo", "huge"],
)
def test_a_configuration_file_that_is_not_a_file_of_the_repository_is_refused(
    tmp_path: Path, make, why: str
) -> None:
    repo = repository(tmp_path, RIGHT_PORT)
    make(repo, tmp_path)
    done = torchport(
        "migrate", str(repo), "-t", "xla", "--llm", "none", "--dry-run", "--no-verify", timeout=120
    )
    assert done.returncode == 2, done.stdout
    name = next(p.name for p in repo.iterdir() if p.name.endswith(".toml"))
    assert done.stderr.startswith(f"torchport: error: {repo / name}: refused: {why}")
    assert "a configuration file must be a regular file inside the repository" in done.stderr


def test_a_link_to_a_file_inside_the_repository_is_a_file_of_the_repository(
    tmp_path: Path,
) -> None:
    repo = repository(tmp_path, RIGHT_PORT)
    (repo / "config").mkdir()
    (repo / "config" / "torchport.toml").write_text('target = "xla"\n')
    (repo / "torchport.toml").symlink_to("config/torchport.toml")
    done = torchport("config", str(repo), "-f", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["settings"]["target"]["value"] == "xla"


@pytest.mark.slow
def test_chat_says_which_file_was_applied(tmp_path: Path) -> None:
    repo = repository(tmp_path, RIGHT_PORT, 'entry = "python train.py"\n')
    done = subprocess.run(
        [sys.executable, "-m", "torchport.cli", "chat", str(repo), "-t", "xla", "--llm", "none"],
        input="/plan\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    file = repo.resolve() / "torchport.toml"
    assert f"configuration: {file} (entry python train.py); --target (target xla)" in done.stdout
    assert f"run as: python train.py (from {file})" in done.stdout


@pytest.mark.slow
def test_batch_says_which_file_each_repository_applied(tmp_path: Path) -> None:
    repo = repository(tmp_path, RIGHT_PORT, 'entry = "python train.py"\nsteps = 4\n')
    listed = tmp_path / "repos.txt"
    listed.write_text(f"{repo}\n")
    out = tmp_path / "out"
    done = torchport(
        "batch", str(listed), "--out", str(out), "-t", "xla", "--no-verify", "--llm", "none"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    row = json.loads((out / "summary.json").read_text())["repos"][0]
    assert row["configuration"] == (
        f"configuration: {repo / 'torchport.toml'} (entry python train.py, steps 4); "
        "--target (target xla)"
    )
    assert "configuration:" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_mcp_returns_which_file_was_applied(tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    import anyio
    from test_mcp import connected

    repo = repository(tmp_path, RIGHT_PORT, 'entry = "python train.py"\ntarget = "xla"\n')

    async def session() -> dict:
        async with connected(repo, tmp_path) as client:
            planned = await client.call_tool("plan", {})
            return planned.structured_content

    plan = anyio.run(session)
    file = str(repo.resolve() / "torchport.toml")
    assert plan["entry_reason"] == f"from {file}"
    assert plan["configuration"]["file"] == file
    assert plan["configuration"]["set"]["entry"]["source"] == file
    assert plan["configuration"]["summary"] == (
        f"configuration: {file} (target xla, entry python train.py)"
    )


def test_who_loosened_what_is_said_for_every_source() -> None:
    """``loosening.loosened`` on a verdict, for each kind of source a setting can have."""
    from torchport.agents import config_record, loosening, verifier

    assert set(loosening.NUMBERS) == set(verifier.POLICY_FIELDS) <= set(loosening.bounds())
    file = "/r/pyproject.toml"
    kept = {"file": file, "set": {"tolerance": {"value": {}, "source": f"{file} + --tolerance"}}}
    settings = {
        "steps": 5,
        "tolerance": {"policy": "bf16", "bf16": {"rtol": 0.1}},
        "configuration": kept,
    }
    v = verifier.Verification("verified", "5 steps match", policy="bf16", own_policy="fp32")
    assert loosening.loosened(v, settings) == [
        "the user's tolerance policy bf16 (torchport's: fp32 for this program), set with "
        "--tolerance",
        "this repository's own tolerance bf16 rtol 0.1 (torchport's: 0.05), set in pyproject.toml",
    ]
    # an MCP call's steps, then chat's /verify --steps: the user's, each named
    called = config_record.given(settings, "steps", 2, "verify's steps")
    assert "the user's steps 2 (torchport's: 5), set with verify's steps" in (
        loosening.loosened(v, called)
    )
    # a tighter choice, or a verdict that is not verified, says nothing more
    tight = {"steps": 50, "tolerance": {"policy": "auto", "fp32": {"rtol": 1e-6}}}
    fp32 = verifier.Verification("verified", "50 steps match", policy="fp32", own_policy="fp32")
    assert loosening.said(fp32, tight) is fp32 and not fp32.loosened
    failed = verifier.Verification("failed", "parity does not hold", policy="bf16")
    assert loosening.said(failed, called).reason == "parity does not hold"
    # a run resumed from a checkpoint that kept no sources still says what it ran under
    old = loosening.said(fp32, {"steps": 2})
    assert old.reason.startswith("under the run's steps 2 (torchport's: 5), from a run that")
