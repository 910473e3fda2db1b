"""Hostile paths: nothing a repository names reaches the host outside its own copy.

Each test builds a hostile repository in tmp_path, aims it at ``tmp_path/"host"`` (never a
real system folder) and drives torchport's own entry point (``torchport run``, ``migrate``,
``batch``, ``scan``): a committed symlink that leads a data stand-in out of the run's copy,
a ``pyproject.toml`` version full of ``..``, a batch list's ref that git would read as an
option, a ``baseline`` of ``/dev/zero`` or outside the repository, a ``.py`` link to
``/dev/zero``, and requirement lines whose pin and hashes must survive. Where today's code
would read ``/dev/zero`` whole, the command runs in a child process under an address-space
limit, so a regression is a failed test, not a machine out of memory.
"""

from __future__ import annotations

import hashlib
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from test_environment import TRAIN, build_wheel
from torchport.agents import kernel_check
from torchport.agents.batch.clone import CloneError, checkout
from torchport.agents.batch.sources import Source
from torchport.agents.workspace import materialize
from torchport.cli.main import main
from torchport.sandbox.safepath import Refused
from torchport.sandbox.synthetic import files
from torchport.tools import depinstall
from torchport.tools.depresolve import Resolution, resolve
from torchport.tools.output.nofollow import SymlinkInPath

CLI = [sys.executable, "-m", "torchport.cli"]
# enough for torchport and a sandboxed torch program; far less than /dev/zero read whole
ADDRESS_SPACE = 3 << 30
# prints whether the data it was given exists (it runs either way)
READS_DATA = (
    "import os, sys\n"
    "path = sys.argv[sys.argv.index('--data') + 1]\n"
    "print('DATA', 'present' if os.path.exists(path) else 'missing')\n"
)
CUDA_TRAIN = TRAIN.format(imports="", value="1.0")  # three SGD steps of a CUDA model


def _repo(root: Path, texts: dict[str, str]) -> Path:
    for rel, text in texts.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _host(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    host.mkdir()
    return host


def _everything(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def _limited() -> None:
    """In the child: an address-space limit (the soft one, which the child may lower
    further for its own sandboxed runs)."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, hard))


def _cli_limited(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        preexec_fn=_limited,
        timeout=300,
        check=False,
    )


# -- 3. stand-in data never written through a repository symlink ----------------------------


def test_run_writes_no_stand_in_through_a_repository_symlink(tmp_path, capsys):
    """``--data escape/x/corpus.txt`` with ``escape -> host``: before the sandbox started,
    the text stand-in was written to host/x/corpus.txt. A link that dangles in the copy
    (``../host``: torchport's own temp folder) was a traceback. Now neither is made, the
    program runs without one, and the run says why."""
    host = _host(tmp_path)
    repo = _repo(tmp_path / "repo", {"train.py": READS_DATA})
    (repo / "escape").symlink_to(host)
    (repo / "dangling").symlink_to("../host")
    for data in ("escape/x/corpus.txt", "dangling/y/corpus.txt"):
        code = main(["run", "--root", str(repo), "--", "python", "train.py", "--data", data])
        printed = capsys.readouterr()
        assert code == 0, printed.out + printed.err
        assert "DATA missing" in printed.out
        assert f"no stand-in made (the program ran without one): {data}: leaves" in printed.out
        assert "Traceback" not in printed.err
    assert _everything(host) == []


def test_a_committed_stand_in_folder_link_is_not_followed(tmp_path, capsys):
    """A placeholder's stand-in goes to ``.torchport-data/``: a repository that commits
    that name as a link to the host gets no stand-in, not one written there."""
    host = _host(tmp_path)
    repo = _repo(tmp_path / "repo", {"train.py": READS_DATA})
    (repo / files.STANDIN_DIR).symlink_to(host)
    code = main(["run", "--root", str(repo), "--", "python", "train.py", "--data", "$DATA/a.txt"])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "no stand-in made" in printed.out and "DATA missing" in printed.out
    assert _everything(host) == []


def test_stand_ins_inside_the_copy_are_still_made(tmp_path):
    """The confinement refuses only what leaves: a link inside the copy is followed, and a
    placeholder still gets its stand-in under ``.torchport-data``."""
    root = tmp_path / "copy"
    (root / "datasets").mkdir(parents=True)
    (root / "data").symlink_to("datasets")
    assert files.standin_path(root, "data/train.txt") == root.resolve() / "datasets/train.txt"
    assert files.standin_path(root, "/path/to/x.bin", in_place=False).parent.name == (
        files.STANDIN_DIR
    )
    (root / "out").symlink_to(tmp_path)
    with pytest.raises(Refused, match="leaves the run's copy"):
        files.standin_path(root, "out/x.txt")


def test_a_copy_of_the_repository_is_never_written_through_its_links(tmp_path):
    """Every verification, repair and kernel check runs a copy that keeps the repository's
    symlinks, and torchport writes into it on the host: the migration's files
    (``materialize``) and the kernel check's cases (``CASES_FILE``). A file the repository
    committed as a link to the host was written through; now the copy's link is replaced,
    and a folder that is a link is refused."""
    host = _host(tmp_path)
    (host / "victim.py").write_text("HOST\n")
    (host / "cases").write_text("HOST\n")
    repo = _repo(tmp_path / "repo", {"train.py": "x = 1\n"})
    (repo / "model.py").symlink_to(host / "victim.py")
    (repo / kernel_check.CASES_FILE).symlink_to(host / "cases")
    (repo / "pkg").symlink_to(host)
    copy = materialize(repo, {"model.py": "PORTED\n"}, tmp_path / "copy")
    assert (copy / "model.py").read_text() == "PORTED\n" and not (copy / "model.py").is_symlink()
    with pytest.raises(SymlinkInPath):
        materialize(repo, {"pkg/new.py": "PORTED\n"}, tmp_path / "copy")
    cases = tmp_path / "cases.pt"
    cases.write_bytes(b"CASES")

    def runner(folder: Path, mode: str) -> dict[str, bytes]:
        return {"cases": (folder / kernel_check.CASES_FILE).read_bytes()}

    assert kernel_check.run_site_check(repo, cases, "tpu", runner) == {"cases": b"CASES"}
    assert {p.name: p.read_text() for p in host.iterdir()} == {
        "victim.py": "HOST\n",
        "cases": "HOST\n",
    }


@pytest.mark.slow
def test_migrate_writes_no_stand_in_through_a_repository_symlink(tmp_path, capsys):
    """The same launch line as migrate's --entry: both runs (the original's and the
    port's) go on without the stand-in, and nothing lands in the host folder."""
    host = _host(tmp_path)
    repo = _repo(tmp_path / "repo", {"train.py": CUDA_TRAIN + READS_DATA})
    (repo / "escape").symlink_to(host)
    entry = "python train.py --data escape/x/corpus.txt"
    args = ["-t", "tpu", "--llm", "none", "--steps", "1", "--out", str(tmp_path / "out")]
    main(["migrate", str(repo), *args, "--entry", entry, "--exit-zero"])
    printed = capsys.readouterr()
    assert "verdict:" in printed.out, printed.out + printed.err
    assert _everything(host) == []


# -- 4. the repository's name and version never make a path ---------------------------------

TRAVERSAL = "1/../../../../../host/planted"  # from <home>/envs/<key>.tmp/site/x-1 to tmp_path


def test_a_version_with_dot_dot_plants_no_dist_info(tmp_path):
    host = _host(tmp_path)
    repo = _repo(
        tmp_path / "repo",
        {"pyproject.toml": f'[project]\nname = "x"\nversion = "{TRAVERSAL}"\n', "a.py": ""},
    )
    resolution = resolve(repo)
    assert resolution.project is None
    (skipped,) = [w for w in resolution.skipped if w.source == "pyproject.toml"]
    assert "is not a PEP 440 version" in skipped.reason
    # a Resolution made by hand (a library caller) is checked again where the path is made
    home = tmp_path / "home"
    for project in (("x", TRAVERSAL), ("../../../../host/named", "1.0")):
        overlay = depinstall.prepare(Resolution(project=project), home)
        assert any(s["name"] == "(the repository itself)" for s in overlay.skipped)
    assert _everything(host) == []
    site = Path(depinstall.prepare(Resolution(project=("my.pkg", "1.0-post1")), home).path)
    assert (site / "my_pkg-1.0.post1.dist-info" / "METADATA").is_file()


@pytest.mark.slow
def test_migrate_of_a_version_with_dot_dot_plants_nothing(tmp_path, monkeypatch, capsys):
    """A plain migrate (dependencies auto, so the repository's metadata is made) with the
    overlay cache where the traversal is aimed from."""
    host = _host(tmp_path)
    monkeypatch.setenv("TORCHPORT_HOME", str(tmp_path / "home"))
    repo = _repo(
        tmp_path / "repo",
        {
            "pyproject.toml": f'[project]\nname = "x"\nversion = "{TRAVERSAL}"\n',
            "train.py": CUDA_TRAIN,
        },
    )
    args = ["-t", "tpu", "--llm", "none", "--steps", "1", "--out", str(tmp_path / "out")]
    main(["migrate", str(repo), *args, "--exit-zero"])
    printed = capsys.readouterr()
    assert "verdict:" in printed.out, printed.out + printed.err
    assert _everything(host) == []


# -- 5. a batch list's ref never reaches git as an option ----------------------------------


def _git_repo(path: Path) -> None:
    path.mkdir()
    (path / "train.py").write_text("import torch\nx = torch.zeros(2).cuda()\n")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "train.py"], [*ident, "commit", "-q", "-m", "one"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)


@pytest.mark.parametrize("kind", ["txt", "csv"])
def test_a_batch_ref_that_is_an_option_is_refused_before_git_sees_it(tmp_path, capsys, kind):
    """``--pathspec-from-file=SECRET`` as the ref: git read the file and its line reached
    the summaries and the log. Now the list is refused, naming the line, and no job runs."""
    secret = _host(tmp_path) / "shadow"
    secret.write_text("root:SECRET-LINE-4711:19000:0:99999:7:::\n")
    _git_repo(tmp_path / "prog")
    ref = f"--pathspec-from-file={secret}"
    listed = tmp_path / f"list.{kind}"
    text = f"prog {ref} prog-x\n" if kind == "txt" else f"source,ref,name\nprog,{ref},prog-x\n"
    listed.write_text(text)
    out = tmp_path / "out"
    code = main(["batch", str(listed), "-t", "tpu", "--out", str(out), "--no-verify"])
    printed = capsys.readouterr()
    assert code == 2, printed.out + printed.err
    line = "1" if kind == "txt" else "2"
    assert f"list.{kind}:{line}: ref '{ref}' starts with '-'" in printed.err
    assert "SECRET-LINE" not in printed.out + printed.err
    assert not (out / "results").exists()


def test_clone_refuses_an_option_as_a_ref(tmp_path):
    """A library caller's Source is checked where git runs, too."""
    _git_repo(tmp_path / "prog")
    source = Source("prog", str(tmp_path / "prog"), "--orphan=x", git=True)
    with pytest.raises(CloneError, match="starts with '-'"):
        checkout(source, tmp_path / "dest")


# -- 8. no unbounded read of what a repository names ---------------------------------------


def test_a_repository_baseline_of_dev_zero_is_refused(tmp_path):
    """``baseline = "/dev/zero"`` in the repository's torchport.toml read /dev/zero whole."""
    repo = _repo(tmp_path / "repo", {"torchport.toml": 'baseline = "/dev/zero"\n', "a.py": ""})
    done = _cli_limited("scan", str(repo))
    assert done.returncode == 2, done.stderr
    assert "baseline: must be a file inside the repository, not '/dev/zero'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_users_baseline_of_dev_zero_is_not_read_whole(tmp_path):
    """--baseline is the user's own: any file they name, but a regular one."""
    repo = _repo(tmp_path / "repo", {"a.py": ""})
    done = _cli_limited("scan", str(repo), "--baseline", "/dev/zero")
    assert done.returncode == 2, done.stderr
    assert "cannot read baseline /dev/zero: not a regular file" in done.stderr


def test_a_repository_baseline_outside_it_tells_nothing_about_host_files(tmp_path, capsys):
    """Today's two messages ("is not JSON" / "No such file") told whether a host file
    exists; a baseline outside the repository (a path, ``..`` or a link) now gets one."""
    host = _host(tmp_path)
    (host / "exists.json").write_text("not json")
    repo = tmp_path / "repo"
    messages = set()
    for name in ("exists.json", "missing.json"):
        for value in (f"../host/{name}", str(host / name), f"link-{name}"):
            _repo(repo, {"torchport.toml": f'baseline = "{value}"\n', "a.py": ""})
            (repo / f"link-{name}").unlink(missing_ok=True)
            (repo / f"link-{name}").symlink_to(host / name)
            assert main(["scan", str(repo)]) == 2
            err = capsys.readouterr().err
            messages.add(err.replace(value, "VALUE"))
    (message,) = messages
    assert "baseline: must be a file inside the repository, not 'VALUE'" in message


def test_a_py_link_to_dev_zero_is_not_read_on_the_host(tmp_path):
    """A reference run asks whether the program uses cpp_extension: it read every ``.py``
    of the copy whole on the host, ``zero.py -> /dev/zero`` included."""
    repo = _repo(tmp_path / "repo", {"train.py": "print('RAN')\n"})
    (repo / "zero.py").symlink_to("/dev/zero")
    done = _cli_limited("run", "--reference", "--root", str(repo), "--", "python", "train.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RAN" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.slow
def test_migrate_of_a_repository_with_a_py_link_to_dev_zero(tmp_path):
    """The verifier reads the port's Python files to choose its tolerance, and the
    reference run checks for extensions: neither reads the link."""
    repo = _repo(tmp_path / "repo", {"train.py": CUDA_TRAIN})
    (repo / "zero.py").symlink_to("/dev/zero")
    args = ["-t", "tpu", "--llm", "none", "--steps", "1", "--out", str(tmp_path / "out")]
    done = _cli_limited("migrate", str(repo), *args, "--exit-zero")
    assert "verdict: verified" in done.stdout, done.stdout + done.stderr


# -- 9. requirement lines keep their pins and hashes -----------------------------------------


def test_hash_options_and_continuations_keep_the_pin(tmp_path):
    sha = "sha256:" + "ab" * 32
    repo = _repo(
        tmp_path / "repo",
        {
            "requirements.txt": f"tinydepa==0.1 --hash={sha}\n"
            f"tinydepb==0.2 \\\n    --hash={sha} \\\n    --hash=sha256:{'CD' * 32}\n"
            'tinydepc==0.3 \\\n    ; python_version > "3"\n'
            "tinydepd>=1 --hash=sha256:00\n"
            "tinydepe==1 --global-option=--evil\n"
            "tinydepf==1 --hash=md5:00\n",
            "a.py": "",
        },
    )
    resolution = resolve(repo)
    needed = {w.name: w for w in resolution.needed}
    assert needed["tinydepa"].requirement == "tinydepa==0.1"
    assert needed["tinydepa"].hashes == (sha,)
    assert needed["tinydepb"].requirement == "tinydepb==0.2"
    assert needed["tinydepb"].hashes == (sha, f"sha256:{'cd' * 32}")
    assert needed["tinydepb"].source == "requirements.txt:2"
    assert needed["tinydepc"].requirement.startswith("tinydepc==0.3")
    skipped = {w.name: w.reason for w in resolution.skipped}
    assert "needs one exact == pin" in skipped["tinydepd"]
    assert "--global-option is not one torchport gives pip" in skipped["tinydepe"]
    assert "is not ALGORITHM:HEX" in skipped["tinydepf"]


@pytest.mark.slow
def test_a_hashed_requirement_is_installed_only_with_its_hash(tmp_path, monkeypatch):
    """pip checks the hash: the right one installs the wheel, a wrong one installs nothing
    (today the hash and the pin were dropped and any tinydep went in)."""
    wheels = tmp_path / "wheels"
    wheel = build_wheel(wheels, "tinydep", "0.1", "VALUE = 0.5\n")
    build_wheel(wheels, "tinydep", "0.2", "VALUE = 2.0\n")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    right = "sha256:" + hashlib.sha256(wheel.read_bytes()).hexdigest()
    for name, digest in (("good", right), ("bad", "sha256:" + "0" * 64)):
        repo = _repo(tmp_path / name, {"requirements.txt": f"tinydep==0.1 \\\n  --hash={digest}\n"})
        overlay = depinstall.prepare(resolve(repo), tmp_path / "cache")
        if name == "good":
            assert overlay.installed == ["tinydep==0.1"], overlay.unavailable
        else:
            assert overlay.installed == [] and "hash" in overlay.unavailable["tinydep"].lower()
