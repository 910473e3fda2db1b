"""--exclude (and the project's `exclude`) in every front door: an excluded file is neither
reported nor rewritten, and a migrated copy holds it byte for byte. Real scans, real
codemods, real batch jobs in their own processes, the real chat loop on piped input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torchport.agents.project_config import KEYS
from torchport.agents.rewrite_round import RewriteRound
from torchport.cli.main import main

CUDA = "import torch\n\nx = torch.zeros(2).cuda()\ntorch.cuda.synchronize()\n"


@pytest.fixture(autouse=True)
def _no_torchport_variables(monkeypatch):
    for variable in (key.env for key in KEYS.values()):
        monkeypatch.delenv(variable, raising=False)


def make_repo(root: Path, config: str | None = None) -> Path:
    """train.py, vendor/lib.py, gen/a_cuda.py and gen/keep_cuda.py, all with CUDA calls."""
    for rel in ("train.py", "vendor/lib.py", "gen/a_cuda.py", "gen/keep_cuda.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(CUDA)
    if config is not None:
        (root / "torchport.toml").write_text(config)
    return root


def files_found(*argv: str, capsys) -> set[str]:
    main(["scan", *argv, "-f", "json", "-q"])
    return {f["path"] for f in json.loads(capsys.readouterr().out)["findings"]}


def test_scan_leaves_out_what_flags_and_the_project_exclude(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo")
    every = {"train.py", "vendor/lib.py", "gen/a_cuda.py", "gen/keep_cuda.py"}
    assert files_found(str(repo), capsys=capsys) == every
    assert files_found(str(repo), "--exclude", "vendor/", capsys=capsys) == every - {
        "vendor/lib.py"
    }
    (repo / "torchport.toml").write_text('exclude = ["*_cuda.py"]\n')
    assert files_found(str(repo), capsys=capsys) == {"train.py", "vendor/lib.py"}
    # a flag adds to the project's list; a later !PATTERN takes a file back
    got = files_found(str(repo), "--exclude", "vendor", "--exclude", "!keep_cuda.py", capsys=capsys)
    assert got == {"train.py", "gen/keep_cuda.py"}
    # an anchored pattern is relative to the root; a named file that is excluded stays out
    assert (
        files_found(str(repo / "gen" / "a_cuda.py"), "--exclude", "/gen/", capsys=capsys) == set()
    )


def test_skip_leaves_rules_out_of_scan_and_migration(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo", 'skip = ["TPT"]\n')
    main(["scan", str(repo), "-f", "json", "-q"])
    rules = {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert rules == {"TPD001"}
    out = tmp_path / "out"
    assert main(["migrate", str(repo), "-t", "tpu", "--no-verify", "--llm", "none", "-q",
                 "--out", str(out)]) == 0  # fmt: skip
    assert "torch.cuda.synchronize()" in (out / "train.py").read_text()
    assert ".cuda()" not in (out / "train.py").read_text()


def test_migrate_leaves_excluded_files_byte_identical(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo", 'target = "tpu"\nexclude = ["vendor/"]\n')
    (repo / "gen" / "a_cuda.py").write_bytes(CUDA.encode() + b"# \xff not utf-8\n")
    out = tmp_path / "out"
    argv = ["migrate", str(repo), "--no-verify", "--llm", "none", "-q", "--out", str(out)]
    assert main([*argv, "--exclude", "gen/", "-f", "json"]) == 0  # target from the project
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == "tpu"
    assert data["files_changed"] == ["train.py"]
    for rel in ("vendor/lib.py", "gen/a_cuda.py", "gen/keep_cuda.py"):
        assert (out / rel).read_bytes() == (repo / rel).read_bytes(), rel
    assert ".cuda()" not in (out / "train.py").read_text()
    changes = json.loads((out / "torchport-report" / "changes.json").read_text())
    assert changes["files_changed"] == ["train.py"]


def test_without_a_target_anywhere_migrate_says_where_to_give_one(tmp_path, capsys):
    repo = make_repo(tmp_path / "repo")
    assert main(["migrate", str(repo), "--no-verify"]) == 2
    assert "TORCHPORT_TARGET" in capsys.readouterr().err


@pytest.mark.slow
def test_batch_applies_each_repositorys_config_and_the_flags(tmp_path, capsys):
    sources = tmp_path / "repos"
    make_repo(sources / "configured", 'exclude = ["vendor/"]\n')
    make_repo(sources / "plain")
    out = tmp_path / "out"
    argv = ["batch", str(sources), "-t", "tpu", "--out", str(out), "--no-verify", "--llm", "none"]
    assert main([*argv, "--exclude", "gen/", "-q"]) == 0
    for name, untouched in (
        ("configured", ["vendor/lib.py", "gen/a_cuda.py"]),
        ("plain", ["gen/a_cuda.py", "gen/keep_cuda.py"]),
    ):
        migrated = out / "repos" / name / "migrated"
        for rel in untouched:
            assert (migrated / rel).read_text() == CUDA, (name, rel)
        assert ".cuda()" not in (migrated / "train.py").read_text(), name
    assert ".cuda()" not in (out / "repos/plain/migrated/vendor/lib.py").read_text()
    # a repository whose configuration is bad is its own error, not the batch's end
    (sources / "broken").mkdir()
    (sources / "broken" / "torchport.toml").write_text("steps = 0\n")
    assert main([*argv, "--exclude", "gen/", "-q"]) == 1
    record = json.loads((out / "results" / "broken.json").read_text())
    assert record["verdict"] == "error" and "steps: must be an integer" in record["reason"]


def test_chat_neither_lists_nor_proposes_excluded_files(tmp_path):
    repo = make_repo(tmp_path / "repo", 'exclude = ["gen/"]\n')
    env = {**os.environ, "TORCHPORT_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "torchport.cli", "chat", str(repo), "--llm", "none", "--plain",
         "--exclude", "vendor/"],
        input="/scan\n/migrate\n/quit\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "train.py:3" in done.stdout and "train.py:4" in done.stdout
    # the configuration line names the patterns (and where each came from); nothing else
    said = [line for line in done.stdout.splitlines() if "configuration: " in line]
    assert len(said) == 1 and "exclude gen/, vendor/" in said[0]
    listed = done.stdout.replace(said[0], "")
    assert "vendor/" not in listed and "gen/" not in listed
    assert "proposed" in done.stdout and "in 1 files" in done.stdout


def test_no_model_is_asked_about_an_excluded_file(tmp_path):
    """A failure in an excluded file is left as it is: the model is not asked."""
    work = RewriteRound(tmp_path, {"exclude": ["vendor/"], "max_llm_tokens": 100}, tmp_path, {}, {})
    work.ask_llm({"path": "vendor/lib.py", "kind": "failure"}, "failure")
    assert work.overlay == {} and work.agent_edits == []
    assert work.log[-1]["decision"] == "LLM not asked: excluded file"


def test_chat_takes_the_projects_entry_unless_given_one(tmp_path):
    """The project's `entry` is chat's --entry: /plan shows the command /verify would run."""
    repo = make_repo(tmp_path / "repo", 'entry = "python train.py --from-the-file"\n')
    env = {**os.environ, "TORCHPORT_HOME": str(tmp_path / "home")}

    def plan(*flags: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "torchport.cli", "chat", str(repo), "--llm", "none", "--plain",
             *flags],
            input="/plan\n/quit\n",
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "python train.py --from-the-file" in plan()
    given = plan("--entry", "python train.py --from-the-flag")
    assert "--from-the-flag" in given and "--from-the-file" not in given
