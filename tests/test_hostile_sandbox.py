"""A hostile program against every sandbox backend: host files, host sockets, secrets.

Each attempt runs for real on each backend this machine has (skipped with the
reason where it has not). The programs only read, connect (sending nothing) and
create files the test removes; the same attempts under the ``process`` backend,
which does not isolate, show that each probe would see a leak if there were one.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_isolation
from cli_process import cli_process, migrate_process
from torchport.sandbox.isolation import (
    IsolationWarning,
    process,
    run_isolated,
    safe_env,
    unshare,
)
from torchport.sandbox.isolation.guarantees import GUARANTEES
from torchport.sandbox.isolation.spec import RunSpec
from torchport.tools.safetext import markdown_text

backend = test_isolation.backend  # the fixture: each backend, skipped with its reason
run = test_isolation.run
REPO = Path(__file__).resolve().parents[1]
DOCKER_SOCKETS = [p for p in ("/run/docker.sock", "/var/run/docker.sock") if os.path.exists(p)]
ISOLATING = ("bwrap", "docker", "unshare")
NOBODY = 65534

# Tries everything it is given; prints one JSON line of what it reached.
REACH = """
import json, os, socket, sys
cfg = json.loads(sys.argv[1])
def attempt(action):
    try:
        action()
        return True
    except OSError:
        return False
def connect(address):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(2)
        sock.connect(address)
def write():
    with open(cfg["target"], "x") as fh:
        fh.write("escaped")
print(json.dumps({
    "read": attempt(lambda: open(cfg["canary"]).read()),
    "write": attempt(write),
    "sockets": {p: attempt(lambda: connect(p)) for p in cfg["sockets"]},
    "abstract": attempt(lambda: connect("\\0" + cfg["abstract"])),
}))
"""


def _listen(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(address)
    sock.listen(4)
    sock.setblocking(False)
    return sock


@pytest.fixture
def host_bait(tmp_path: Path) -> Iterator[dict]:
    """A canary, a place to write and two socket listeners, all outside any scratch.

    The folder is in /var/tmp (not /tmp, which every isolating backend replaces
    with a private one), so that only the filesystem view can hide it.
    """
    folder = Path(tempfile.mkdtemp(prefix="torchport-bait-", dir="/var/tmp"))
    (folder / "canary.txt").write_text("canary\n")
    abstract = f"torchport-test-{secrets.token_hex(6)}"
    listeners = [_listen(str(folder / "host.sock")), _listen("\0" + abstract)]
    bait = {
        "canary": str(folder / "canary.txt"),
        "target": str(folder / "escaped.txt"),
        "sockets": [str(folder / "host.sock"), *DOCKER_SOCKETS],
        "abstract": abstract,
        "listeners": listeners,
    }
    try:
        yield bait
    finally:
        for sock in listeners:
            sock.close()
        shutil.rmtree(folder)


def _host_reaches(path: str) -> bool:
    """A connect() from this (unisolated) process succeeds."""
    with socket.socket(socket.AF_UNIX) as sock:
        return sock.connect_ex(path) == 0


def _reach(backend: str, bait: dict, scratch: Path) -> dict:
    """What REACH could get to from inside ``backend``, plus what the host saw arrive."""
    cfg = {k: v for k, v in bait.items() if k != "listeners"}
    res = run(backend, f"import sys; sys.argv[1:] = [{json.dumps(cfg)!r}]\n" + REACH, scratch)
    assert res.returncode == 0, res.stderr
    reached = json.loads(res.stdout)
    reached["arrived"] = []
    for sock in bait["listeners"]:
        try:
            sock.accept()[0].close()
            reached["arrived"].append(sock.getsockname())
        except BlockingIOError:
            pass
    reached["written"] = Path(bait["target"]).exists()
    return reached


def test_no_host_files_or_sockets_reachable(backend: str, host_bait: dict, tmp_path: Path) -> None:
    # The escape found by the adversarial test: docker.sock (read-only mounts do not stop
    # connect()), then a root container writing on the host. Also a socket in a host
    # folder, an abstract socket (per network namespace), and a canary file beside them.
    got = _reach(backend, host_bait, tmp_path / "scratch")
    if backend == "process":  # the probe sees every leak where nothing isolates
        assert got["read"] and got["write"] and got["written"] and got["abstract"]
        # docker.sock answers only while a daemon runs; the host's own view is the measure
        assert got["sockets"] == {p: _host_reaches(p) for p in host_bait["sockets"]}
        assert got["sockets"][host_bait["sockets"][0]] and len(got["arrived"]) == 2
        return
    assert got == {
        "read": False,
        "write": False,
        "sockets": dict.fromkeys(host_bait["sockets"], False),
        "abstract": False,
        "arrived": [],
        "written": False,
    }


def test_process_backend_says_it_exposes_sockets(tmp_path: Path) -> None:
    with pytest.warns(IsolationWarning, match="does NOT isolate.*Unix sockets"):
        run_isolated(["true"], scratch=tmp_path, timeout_s=10, memory_mb=256, backend="process")


def test_a_readonly_path_holding_host_sockets_is_refused(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # connect() ignores read-only mounts: exposing a socket folder read-only is exposing it.
    if backend == "process":
        pytest.skip("the process backend exposes everything anyway (it warns instead)")
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent" / "agent.42"))
    for holder in (Path("/run"), Path("/var"), tmp_path):
        with pytest.raises(ValueError, match="host Unix sockets live in"):
            run_isolated(
                ["true"], scratch=tmp_path / "s", readonly=[holder], timeout_s=10, memory_mb=256,
                backend=backend,
            )  # fmt: skip


# --- unshare: the private view, fail closed, as root and not -------------------------


@pytest.fixture
def unshare_here() -> None:
    reason = unshare.unavailable()
    if reason is not None:
        pytest.skip(f"unshare: {reason}")


def _spec(argv: list[str], scratch: Path, **kw) -> RunSpec:
    scratch.mkdir(parents=True, exist_ok=True)
    return RunSpec(argv=argv, scratch=scratch.resolve(), env=safe_env(home=scratch), **kw)


MOUNTS = """
import json, os
mounts = {}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    mounts[fields[4]] = fields[5].split(",")[0]
print(json.dumps({"mounts": mounts, "root": sorted(os.listdir("/")), "uid": os.getuid()}))
"""


@pytest.mark.usefixtures("unshare_here")
@pytest.mark.parametrize("enter", ["pivot_root", "chroot"])
def test_unshare_shows_only_bwraps_view_read_only(enter: str, tmp_path: Path) -> None:
    # chroot is the fallback where pivot_root cannot run: the same view either way.
    scratch = tmp_path / "scratch"
    spec = _spec([sys.executable, "-c", MOUNTS], scratch)
    res = subprocess.run(
        unshare.command(spec, enter=enter), capture_output=True, text=True, env=spec.env
    )
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    writable = {m for m, mode in seen["mounts"].items() if mode == "rw"}
    assert writable == {str(scratch.resolve()), "/tmp", "/dev/shm"}
    top = {p.parts[1] for p in (scratch, Path(sys.prefix), Path(sys.base_prefix))}
    assert set(seen["root"]) <= {"usr", "bin", "sbin", "lib", "lib64", "etc", "proc", "dev", *top}
    assert "run" not in seen["root"] and "home" not in seen["root"]


@pytest.mark.usefixtures("unshare_here")
def test_unshare_fails_closed_when_the_view_cannot_be_built(tmp_path: Path) -> None:
    # A read-only path that vanishes between planning and mounting: the bind fails, and
    # the program must not run at all (not with the host's view).
    gone = tmp_path / "gone"
    gone.mkdir()
    scratch = tmp_path / "scratch"
    spec = _spec([sys.executable, "-c", "open('ran', 'w').close()"], scratch, readonly=[gone])
    cmd = unshare.command(spec)
    gone.rmdir()
    res = subprocess.run(cmd, capture_output=True, text=True, env=spec.env)
    assert res.returncode == unshare.EXIT_NO_VIEW
    assert "cannot build the private filesystem view" in res.stderr
    assert not (scratch / "ran").exists()


@pytest.mark.usefixtures("unshare_here")
def test_unshare_isolates_a_non_root_user_too(host_bait: dict, tmp_path: Path) -> None:
    # As nobody (a user namespace, --map-root-user), with the system Python, which
    # nobody can run, and torchport's own source, which nobody can read.
    python = shutil.which("python3", path="/usr/bin")
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root (to become nobody) and /usr/bin/python3")
    userns = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         "unshare", "--map-root-user", "true"], capture_output=True, text=True,
    )  # fmt: skip
    if userns.returncode != 0:
        pytest.skip(f"nobody cannot create user namespaces here: {userns.stderr.strip()}")
    # Where nobody could read, write and connect on the host: only the view stops it.
    folder = Path(host_bait["canary"]).parent
    folder.chmod(0o777)
    Path(host_bait["sockets"][0]).chmod(0o777)
    scratch = folder / "scratch"
    scratch.mkdir()
    os.chown(scratch, NOBODY, NOBODY)
    cfg = {k: v for k, v in host_bait.items() if k != "listeners"}
    driver = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from sandbox.isolation import run_isolated
        res = run_isolated([sys.executable, "-c", {REACH!r}, {json.dumps(cfg)!r}],
                           scratch=Path({str(scratch)!r}), timeout_s=20, memory_mb=512,
                           backend="unshare")
        print(json.dumps({{"rc": res.returncode, "out": res.stdout, "err": res.stderr}}))
    """)
    done = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         python, "-I", "-c", driver], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout)
    assert res["rc"] == 0, res["err"]
    got = json.loads(res["out"])
    assert not got["read"] and not got["write"] and not got["abstract"]
    assert not any(got["sockets"].values())
    assert not Path(host_bait["target"]).exists()
    for sock in host_bait["listeners"]:
        with pytest.raises(BlockingIOError):
            sock.accept()


# --- the process backend: torchport's own keys ----------------------------------------

SNOOP = """
import json, os
sentinel = open("sentinel.txt").read().strip().encode()
found, readable = {}, {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    for what in ("environ", "cmdline", "maps"):
        try:
            with open(f"/proc/{pid}/{what}", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        readable.setdefault(int(pid), []).append(what)
        if sentinel in data:
            found.setdefault(int(pid), []).append(what)
with open(f"/proc/{os.getppid()}/stat") as fh:  # the parent is torchport's watchdog
    grandparent = int(fh.read().rpartition(")")[2].split()[1])
print("SNOOP " + json.dumps({"grandparent": grandparent, "found": found, "readable": readable}))
"""


def test_process_backend_cannot_read_torchports_keys(tmp_path: Path) -> None:
    # A real `torchport run --isolation process` holding OPENAI_API_KEY and
    # TORCHPORT_LLM_API_KEY; its program reads every /proc/*/environ, cmdline and maps it
    # can. A plain process of the program's user and privileges holding the same value is
    # the control: the snoop finds it, so it would find torchport's without the protection.
    sentinel = f"sk-sentinel-{secrets.token_hex(12)}"
    program = tmp_path / "program"
    program.mkdir()
    (program / "snoop.py").write_text(SNOOP)
    (program / "sentinel.txt").write_text(sentinel)
    env = {**os.environ, "OPENAI_API_KEY": sentinel, "TORCHPORT_LLM_API_KEY": sentinel}
    # started as the backend starts a program (as root: no capabilities), but no torchport
    hold = RunSpec(argv=[sys.executable, "-c", "import sys; sys.stdin.read()"], scratch=tmp_path)
    control = subprocess.Popen(process.command(hold), stdin=subprocess.PIPE, env=env)
    try:
        cli = cli_process(
            "run", "--isolation", "process", "--root", str(program), "--steps", "1",
            "-f", "json", "--", "python", "snoop.py", env=env,
        )  # fmt: skip
        out, err = cli.communicate(timeout=120)
    finally:
        control.communicate(b"")
    assert cli.returncode == 0, err
    line = next(x for x in json.loads(out)["stdout_tail"].splitlines() if x.startswith("SNOOP"))
    snoop = json.loads(line.removeprefix("SNOOP "))
    # the program ran under torchport (its watchdog between them), and saw it
    assert snoop["grandparent"] == cli.pid
    assert snoop["found"] == {str(control.pid): ["environ"]}
    assert "environ" in snoop["readable"][str(control.pid)]
    assert snoop["readable"][str(cli.pid)] == ["cmdline"]  # no environ, no memory map


HOLDER = """
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "hide":
    from sandbox.isolation.secrets import hide_own_secrets
    assert hide_own_secrets() == ["OPENAI_API_KEY"] and hide_own_secrets() == []
child = subprocess.run(["sh", "-c", "echo $OPENAI_API_KEY"], capture_output=True, text=True)
print(os.environ["OPENAI_API_KEY"], child.stdout.strip(), flush=True)
sys.stdin.read()
"""


READER = """
import json, sys
def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().decode()
    except OSError:
        return None
print(json.dumps({pid: environ(pid) for pid in sys.argv[1:]}))
"""


def _as_nobody(python: str, *args: str) -> list[str]:
    ids = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return ["setpriv", *ids, python, "-I", *args]


def _hold(python: str, how: str, env: dict[str, str]) -> subprocess.Popen:
    """A process of nobody's holding OPENAI_API_KEY, hidden (``how="hide"``) or not."""
    argv = _as_nobody(python, "-c", HOLDER, str(REPO), how)
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    return subprocess.Popen(argv, env=env, text=True, **pipes)


def test_hidden_secrets_as_a_non_root_user(tmp_path: Path) -> None:
    # The protection that counts where torchport is not root: a program of the same user
    # (nobody here) reads the environ of a plain process holding a key, but not of one that
    # called hide_own_secrets; even a reader allowed to (root, CAP_SYS_PTRACE) finds the
    # value blanked; and the holder's os.environ and its children still have the key.
    python = shutil.which("python3", path="/usr/bin")
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root (to become nobody) and /usr/bin/python3")
    sentinel = f"sk-sentinel-{secrets.token_hex(12)}"
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": sentinel}
    holders = {how: _hold(python, how, env) for how in ("hide", "plain")}
    try:
        for holder in holders.values():  # both ready, both still hold the live key
            assert holder.stdout.readline().split() == [sentinel, sentinel]
        pids = {how: h.pid for how, h in holders.items()}
        got = subprocess.run(
            _as_nobody(python, "-c", READER, *map(str, pids.values())),
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        seen = json.loads(got.stdout)
        root_view = Path(f"/proc/{pids['hide']}/environ").read_bytes()
    finally:
        for holder in holders.values():
            holder.communicate("")
    assert sentinel in seen[str(pids["plain"])]
    assert seen[str(pids["hide"])] is None
    assert b"OPENAI_API_KEY=\0" in root_view and sentinel.encode() not in root_view


# --- torchport doctor -----------------------------------------------------------------


def test_doctor_measures_each_backend() -> None:
    cli = cli_process("doctor", "-f", "json", env=dict(os.environ))
    out, err = cli.communicate(timeout=180)
    assert cli.returncode == 0, err
    report = json.loads(out)
    backends = report["backends"]
    assert report["auto"] != "process" and backends[report["auto"]]["available"]
    for name, entry in backends.items():
        if not entry["available"]:
            assert entry["reason"], name
            continue
        secrets_ = entry["secrets"]
        assert not (secrets_["found"] or secrets_["memory_map_readable"]), name
        if name == "process":  # the truth: nothing but limits and the keys
            assert entry["network"]["host_loopback"] and entry["files"] == {
                "read": True, "write": True,
            }  # fmt: skip
            assert entry["torchport_visible"]
            continue
        assert entry["network"] == {
            "interfaces": ["lo"], "default_route": False, "host_loopback": False,
        }, name  # fmt: skip
        assert entry["files"] == {"read": False, "write": False}, name
        assert not any(entry["sockets"].values()), (name, entry["sockets"])
        assert not entry["torchport_visible"], name
        assert int(entry["identity"]["capabilities"], 16) == 0, name
    assert any(name in backends and backends[name]["available"] for name in ISOLATING)


def test_doctor_help_explains_the_columns() -> None:
    cli = cli_process("doctor", "--help", env=dict(os.environ))
    out, _ = cli.communicate(timeout=60)
    for column in ("network", "host files", "host sockets", "processes", "secrets", "limits"):
        assert f"\n  {column}" in out


# --- which sandbox a verification ran in, said where a person reads the verdict ---------

TINY_TRAIN = """
import torch
model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    loss = model(torch.randn(8, 4).cuda()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["bwrap", "process"])
def test_migrate_says_which_sandbox_ran_and_what_it_isolates(
    isolation: str, tmp_path: Path
) -> None:
    reason = test_isolation._MODULES[isolation].unavailable()
    if reason is not None:
        pytest.skip(f"{isolation}: {reason}")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(TINY_TRAIN)
    out = tmp_path / "out"
    env = {**os.environ, "TORCHPORT_HOME": str(tmp_path / "home")}
    cli = migrate_process(
        str(repo), "-t", "tpu", "--steps", "1", "--isolation", isolation,
        "--out", str(out), "--exit-zero", env=env,
    )  # fmt: skip
    stdout, stderr = cli.communicate(timeout=300)
    assert cli.returncode == 0, stderr
    said = GUARANTEES[isolation]
    assert f"sandbox (original and migrated): {isolation} — {said}" in stdout.splitlines()
    report = out / "torchport-report"
    record = json.loads((report / "verification.json").read_text())
    assert record["verdict"] == "verified"
    assert record["sandbox"] == [
        {"backend": isolation, "runs": ["original", "migrated"], "isolates": said}
    ]
    md = (report / "verification.md").read_text()
    line = f"- sandbox (original and migrated programs): `{isolation}` — {markdown_text(said)}"
    assert line in md.splitlines()
