"""`torchport batch` on real repositories: real jobs in real processes, real git clones, a
real SIGKILL of the whole batch and a resume; no mocks."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_process import cli_process
from torchport.agents.batch.sources import Source, SourcesError, read_sources
from torchport.cli.main import main

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
# easy corpus programs (tests/fixtures/corpus/expected.toml): each verifies, rules only
EASY = [
    "mnist_basic",
    "amp_gradscaler",
    "cuda_events_bench",
    "cudnn_flags",
    "float64_science",
    "host_sync_loop",
    "inference_only",
    "rng_state",
]
FAST = ["--steps", "1", "--llm", "none"]


def batch_process(*args: str, env: dict[str, str]) -> subprocess.Popen:
    """The CLI in its own session, so a test can kill it and every job it started."""
    return cli_process("batch", *args, env=env)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def git_repo(path: Path, versions: list[str]) -> list[str]:
    """A repository with one commit per version of train.py, tagged v1, v2, ...; their shas."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    shas = []
    for number, text in enumerate(versions, start=1):
        (path / "train.py").write_text(text)
        git(path, "add", "train.py")
        git(path, "commit", "-q", "-m", f"version {number}")
        git(path, "tag", f"v{number}")
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas


def journal(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]


def journaled(out: Path, event: str) -> set[str]:
    """The repositories the journal has an ``event`` line for, read while the batch writes
    it: only whole lines (a line is one write, but a reader may still see half of it)."""
    try:
        text = (out / "journal.jsonl").read_text()
    except FileNotFoundError:
        return set()
    lines = text.splitlines(keepends=True)
    entries = [json.loads(line) for line in lines if line.endswith("\n")]
    return {e["name"] for e in entries if e["event"] == event}


def without_times(out: Path) -> tuple[dict, list[dict], str]:
    """The three summaries with their time fields (and only those) taken out."""
    data = json.loads((out / "summary.json").read_text())
    del data["totals"]["time_s"]
    for row in data["repos"]:
        del row["time_s"]
    rows = list(csv.DictReader(io.StringIO((out / "summary.csv").read_text())))
    for row in rows:
        del row["time_s"]
    md = re.sub(r"\b\d+\.\d s\b", "T s", (out / "summary.md").read_text())
    return data, rows, md


# -- SOURCES ------------------------------------------------------------------------


def test_a_folder_is_one_repository_per_subfolder(tmp_path):
    for name in ("b-repo", "a repo!", ".hidden", "__pycache__", "out"):
        (tmp_path / "src" / name).mkdir(parents=True)
    (tmp_path / "src" / "notes.txt").write_text("not a repository")
    found = read_sources(tmp_path / "src", exclude=tmp_path / "src" / "out")
    assert [(s.name, s.git) for s in found] == [("a-repo", False), ("b-repo", False)]
    assert found[0].location == str((tmp_path / "src" / "a repo!").resolve())
    with pytest.raises(SourcesError, match="inside the repository"):
        read_sources(tmp_path / "src", exclude=tmp_path / "src" / "b-repo" / "port")


def test_text_and_csv_lists_with_comments_refs_and_names(tmp_path):
    for name in ("one", "two", "three", "bare.git"):
        (tmp_path / "repos" / name).mkdir(parents=True)
    git_repo(tmp_path / "repos" / "tagged", ["x = 1\n", "x = 2\n"])
    for part in ("HEAD", "objects", "refs"):  # looks like a bare repository
        (tmp_path / "repos" / "bare.git" / part).touch()
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "repos.txt").write_text(
        "# repositories to port\n"
        "\n"
        "../repos/one\n"
        "../repos/tagged v1   # a ref: cloned, v1 checked out\n"
        f"{tmp_path}/repos/tagged - tagged-head\n"
        "https://example.com/org/model.git main\n"
        "git@example.com:org/other.git\n"
        "../repos/bare.git\n"
    )
    found = read_sources(tmp_path / "lists" / "repos.txt")
    tagged = str((tmp_path / "repos" / "tagged").resolve())
    assert found == [
        Source("one", str((tmp_path / "repos" / "one").resolve())),
        Source("tagged", tagged, "v1", git=True),
        Source("tagged-head", tagged),
        Source("model", "https://example.com/org/model.git", "main", git=True),
        Source("other", "git@example.com:org/other.git", git=True),
        Source("bare", str((tmp_path / "repos" / "bare.git").resolve()), git=True),
    ]
    (tmp_path / "lists" / "repos.csv").write_text(
        "source,ref,name\n"
        "../repos/two,,\n"
        "# ../repos/three,,\n"
        f"file://{tmp_path}/repos/tagged,v2,tagged-v2\n"
        "../repos/three,,third\n"
    )
    found = read_sources(tmp_path / "lists" / "repos.csv")
    assert [(s.name, s.ref, s.git) for s in found] == [
        ("two", None, False),
        ("tagged-v2", "v2", True),
        ("third", None, False),
    ]
    (tmp_path / "lists" / "only-source.csv").write_text("Source\n../repos/one\n")
    assert [s.name for s in read_sources(tmp_path / "lists" / "only-source.csv")] == ["one"]


def test_a_list_gives_each_repository_its_entry_command(tmp_path):
    for name in ("one", "two", "three"):
        (tmp_path / "repos" / name).mkdir(parents=True)
    (tmp_path / "repos.txt").write_text(
        "repos/one -- python train.py --lr 0.1 --name 'a b'  # a comment\n"
        "repos/two - second -- torchrun --nproc_per_node 2 -- train.py\n"
        "repos/three\n"
    )
    found = {s.name: s.entry for s in read_sources(tmp_path / "repos.txt")}
    assert found == {
        "one": "python train.py --lr 0.1 --name 'a b'",  # as the planner will split it
        "second": "torchrun --nproc_per_node 2 -- train.py",  # only the first -- splits
        "three": None,  # the planner chooses
    }
    (tmp_path / "repos.csv").write_text(
        'source,entry\nrepos/one,python train.py --epochs 1\nrepos/two,"  "\n'
    )
    found = {s.name: s.entry for s in read_sources(tmp_path / "repos.csv")}
    assert found == {"one": "python train.py --epochs 1", "two": None}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("# nothing but a comment\n\n", "no entries; nothing to migrate"),
        ("repos/one --\n", "repos.txt:1: nothing after `--`"),
        ("-- python train.py\n", "expected `PATH_OR_GIT_URL"),
        ("repos/one v1 n x -- python train.py\n", "got 4 fields before the entry"),
        ("repos/one\nrepos/missing\n", r"repos.txt:2: no such folder: repos/missing"),
        ("repos/one\nrepos/dup/one\n", r"repos.txt:2: the name 'one' is already used by"),
        ("repos/one v1\n", "has a ref .v1. but is not a git repository"),
        ("repos/one - bad/name\n", "not safe as a file name"),
        ("repos/one a b c\n", "expected `PATH_OR_GIT_URL"),
        ("'repos/one\n", "repos.txt:1: No closing quotation"),
    ],
)
def test_list_errors_say_which_line_and_why(tmp_path, content, message):
    (tmp_path / "repos" / "one").mkdir(parents=True)
    (tmp_path / "repos" / "dup" / "one").mkdir(parents=True)
    (tmp_path / "repos.txt").write_text(content)
    with pytest.raises(SourcesError, match=message):
        read_sources(tmp_path / "repos.txt")


def test_bad_input_exits_2_before_anything_runs(tmp_path, capsys):
    (tmp_path / "no-header.csv").write_text("path,ref\nx,\n")
    (tmp_path / "repos" / "repo").mkdir(parents=True)
    (tmp_path / "bad-entry.csv").write_text("source,entry\nrepos/repo,python 'x.py\n")
    out = tmp_path / "out"
    for sources, message in (
        (tmp_path / "missing", "no such file or folder"),
        (tmp_path / "no-header.csv", "needs a header row with a `source` column"),
        (tmp_path / "bad-entry.csv", 'bad-entry.csv:2: entry "python \'x.py" does not parse'),
    ):
        assert main(["batch", str(sources), "-t", "tpu", "--out", str(out)]) == 2
        assert message in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["batch", str(tmp_path / "empty"), "-t", "tpu", "--out", str(out)]) == 2
    assert "no subfolders" in capsys.readouterr().err
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "occupied").mkdir()
    (tmp_path / "occupied" / "notes.txt").write_text("someone's files")
    assert main(["batch", str(tmp_path / "src"), "-t", "tpu", "--out", str(tmp_path / "occupied")])
    assert "is not a torchport batch folder" in capsys.readouterr().err
    assert main(["batch", str(tmp_path), "-t", "tpu", "--out", str(out), "--jobs", "0"]) == 2
    assert main(["batch", str(tmp_path), "-t", "tpu", "--out", str(out), "--llm", "nope"]) == 2
    assert "unknown LLM setting" in capsys.readouterr().err
    assert not (out / "results").exists()


# -- git sources, refs, exit status, a DIR made for another batch --------------------

V1 = "import torch\n\nx = torch.zeros(2).cuda()\n"
V2 = V1 + "torch.cuda.synchronize()\n"


@pytest.mark.slow
def test_a_git_source_is_migrated_at_its_ref_and_the_original_left_alone(tmp_path, capsys):
    repo = tmp_path / "prog"
    v1, v2 = git_repo(repo, [V1, V2])
    (tmp_path / "list.txt").write_text(
        "prog v1 prog-v1\n"  # the tag: one construct
        "prog\n"  # the working tree as it is: two
        "prog no-such-ref prog-bad\n"  # fails alone
    )
    out = tmp_path / "out"
    args = ["batch", str(tmp_path / "list.txt"), "-t", "tpu", "--out", str(out), "--no-verify"]
    assert main([*args, "--jobs", "2"]) == 1  # prog-bad is an error
    err = capsys.readouterr().err
    assert re.search(r"\[\d/3\] prog-bad: error", err) and "[3/3]" in err
    rows = {r["name"]: r for r in json.loads((out / "summary.json").read_text())["repos"]}
    assert rows["prog-v1"]["commit"] == v1 and rows["prog-v1"]["constructs"] == 1
    assert rows["prog"]["commit"] is None and rows["prog"]["constructs"] == 2
    assert rows["prog-v1"]["verdict"] == rows["prog"]["verdict"] == "not verified"
    assert rows["prog-bad"]["verdict"] == "error"
    assert "no-such-ref" in rows["prog-bad"]["reason"]
    assert (out / "summary.png").read_bytes().startswith(b"\x89PNG")
    assert "](summary.png)" in (out / "summary.md").read_text()
    assert "Traceback" in json.loads((out / "results/prog-bad.json").read_text())["error"]
    migrated = (out / rows["prog-v1"]["report"]).parent / "train.py"
    assert "synchronize" not in migrated.read_text() and '"tpu"' in migrated.read_text()
    assert (out / "sources/prog-v1/train.py").read_text() == V1
    assert git(repo, "rev-parse", "HEAD") == v2 and git(repo, "status", "--porcelain") == ""
    assert (repo / "train.py").read_text() == V2

    # the same DIR for another target would mix two batches' records
    assert main([*args[:2], "-t", "neuron", *args[4:]]) == 2
    assert "holds a batch made with target='tpu'" in capsys.readouterr().err
    # run again: nothing redone, same summary
    before = (out / "summary.json").read_text()
    assert main(args) == 1
    assert "0 to migrate" in capsys.readouterr().err
    assert (out / "summary.json").read_text() == before
    assert [e["event"] for e in journal(out)].count("started") == 3


@pytest.mark.slow
def test_a_repositorys_entry_from_the_list_is_how_its_program_runs(tmp_path, capsys):
    """The program needs --lr: with the list's entry it runs and verifies; the same
    program without one has no command that can run (the planner sees the required
    argument), so the entry is what made the difference."""
    shutil.copytree(Path(__file__).parent / "fixtures" / "needs_lr", tmp_path / "prog")
    # the same program whose own torchport.toml names the entry (the list names none)
    shutil.copytree(tmp_path / "prog", tmp_path / "configured")
    (tmp_path / "configured" / "torchport.toml").write_text('entry = "python train.py --lr 0.1"\n')
    (tmp_path / "list.txt").write_text(
        "prog - given -- python train.py --lr 0.1\nprog - guessed\nconfigured\n"
    )
    out = tmp_path / "out"
    args = ["batch", str(tmp_path / "list.txt"), "-t", "tpu", "--out", str(out), *FAST]
    assert main(args) == 1  # "guessed" is not verified
    rows = {r["name"]: r for r in json.loads((out / "summary.json").read_text())["repos"]}
    assert rows["given"]["verdict"] == "verified", rows["given"]["reason"]
    assert rows["configured"]["verdict"] == "verified", rows["configured"]["reason"]
    assert rows["guessed"]["verdict"] == "not-runnable"
    assert "--lr" in rows["guessed"]["reason"] and "--entry" in rows["guessed"]["reason"]
    record = json.loads((out / "results" / "given.json").read_text())
    assert record["entry"] == "python train.py --lr 0.1"
    # another entry for the same repository is another job: not read back as done
    (tmp_path / "list.txt").write_text("prog - guessed -- python train.py --lr 0.2\n")
    capsys.readouterr()
    assert main(args) == 0
    assert "1 to migrate" in capsys.readouterr().err


# -- acceptance: killed midway, resumed, same as uninterrupted ---------------------


def raising_repo(path: Path) -> Path:
    """mnist_basic, broken: the program raises before its first step."""
    shutil.copytree(CORPUS / "mnist_basic", path)
    text = (path / "train.py").read_text()
    (path / "train.py").write_text(
        text.replace("\nimport torch\n", "\nimport torch\nraise RuntimeError('broken')\n", 1)
    )
    return path


def acceptance_sources(root: Path) -> Path:
    """Eight easy corpus programs, one that raises, one with a syntax error, one bad ref."""
    for name in EASY:
        shutil.copytree(CORPUS / name, root / "repos" / name)
    raising_repo(root / "repos" / "raises")
    shutil.copytree(CORPUS / "mnist_basic", root / "repos" / "syntax")
    with (root / "repos" / "syntax" / "train.py").open("a") as fh:
        fh.write("\ndef broken(:\n")
    git_repo(root / "tagged", [V1])
    lines = [f"repos/{name}" for name in [*EASY, "raises", "syntax"]]
    lines.append("tagged v9  # no such tag: this one's job fails")
    (root / "repos.txt").write_text("\n".join(lines) + "\n")
    return root / "repos.txt"


@pytest.mark.slow
def test_a_killed_batch_resumes_to_the_summary_of_an_uninterrupted_one(tmp_path):
    sources = acceptance_sources(tmp_path)
    env = {**os.environ, "TORCHPORT_HOME": str(tmp_path / "home")}
    common = ["-t", "tpu", "--jobs", "2", *FAST]
    killed_out, whole_out = tmp_path / "resumed", tmp_path / "whole"

    killed = batch_process(str(sources), "--out", str(killed_out), *common, env=env)
    deadline = time.monotonic() + 300
    while len(journaled(killed_out, "finished")) < 3:  # the kill lands after 3 finished
        assert killed.poll() is None and time.monotonic() < deadline, killed.stderr.read()
        time.sleep(0.2)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    before = journal(killed_out)
    # done is what a resumed batch reads back: the result files. The journal's "finished"
    # line comes just after each (the kill may fall between the two; the resumed batch then
    # journals that finish itself, `recovered`), so the files are the count here.
    finished_before = {p.stem for p in (killed_out / "results").glob("*.json")}
    assert journaled(killed_out, "finished") <= finished_before
    interrupted = {e["name"] for e in before if e["event"] == "started"} - finished_before
    assert len(finished_before) >= 3 and interrupted  # some were mid-run at the kill
    assert not (killed_out / "summary.json").exists()

    resumed = batch_process(str(sources), "--out", str(killed_out), *common, env=env)
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 1, err  # not-runnable and error repositories
    assert f"{len(finished_before)} already done" in err

    whole = batch_process(str(sources), "--out", str(whole_out), *common, env=env)
    _, err = whole.communicate(timeout=600)
    assert whole.returncode == 1, err

    names = {*EASY, "raises", "syntax", "tagged"}
    events = journal(killed_out)
    assert {p.stem for p in (killed_out / "results").glob("*.json")} == names
    for name in names:
        finished = [e for e in events if e["name"] == name and e["event"] == "finished"]
        started = [e for e in events if e["name"] == name and e["event"] == "started"]
        assert len(finished) == 1, (name, events)
        if name in finished_before:
            assert len(started) == 1 and started[0]["batch_pid"] == killed.pid  # not redone
        elif name in interrupted:
            assert [e["attempt"] for e in started] == [1, 2]  # redone from scratch
        else:
            assert len(started) == 1 and started[0]["batch_pid"] == resumed.pid

    assert without_times(killed_out) == without_times(whole_out)
    data = json.loads((whole_out / "summary.json").read_text())
    verdicts = {r["name"]: r["verdict"] for r in data["repos"]}
    assert verdicts == {
        **dict.fromkeys(EASY, "verified"),
        "raises": "not-runnable",  # the original raises too: "the original fails here too"
        "syntax": "not-runnable",
        "tagged": "error",
    }
    assert data["totals"]["verdicts"] == {
        "error": 1,
        "not-runnable": 2,
        "verified": len(EASY),
    }
    assert [r["name"] for r in data["repos"]] == sorted(names)
    for row in data["repos"]:
        if row["verdict"] != "error":
            assert (whole_out / row["report"] / "summary.md").is_file()
            assert row["constructs"] == row["converted"] + row["manual_items"] + row["advisories"]
        if row["verdict"] == "verified":
            assert row["constructs"] > 0 and row["converted_share"] > 0
    assert str(tmp_path / "whole") not in (whole_out / "summary.md").read_text()
