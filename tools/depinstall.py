"""Install what a repository needs into an overlay folder, cached by what was resolved.

The overlay is an install prefix (``pip install --prefix``): its site-packages go on the
sandboxed runs' sys.path after torchport's own (read only), so torch and everything
torchport already has stay torchport's, and its ``bin/`` (console scripts) and ``lib/``
(shared libraries a wheel ships as data, such as an MPI for mpi4py) on PATH and
LD_LIBRARY_PATH (``sandbox.pythonpath``), as in an environment pip installed into.
Installing happens here, on the host, before the offline runs, and never runs repository
or package code: pip resolves with ``--dry-run --report`` against torchport's
interpreter, wheels only, and each exact pin is then installed alone with ``--no-deps``.
pip sees a fresh environment: no credentials of torchport's, only pip's own index
settings and the proxy variables, so a user can point it at a wheel folder
(``PIP_FIND_LINKS``, ``PIP_NO_INDEX``). An overlay is made even when nothing is to be
installed: it also lists torchport's own packages that the program does not name
(``tools.depvisible``), which its runs hide (``sandbox.own_packages``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..sandbox.hostpython import python_command
from ..sandbox.own_packages import HIDDEN_FILE
from ..sandbox.pythonpath import OVERLAY_MARK
from ..sandbox.safepath import Refused, confined
from . import overlay_cache
from .catalogue import load_catalogue
from .childproc import run_bounded
from .depfiles import CUDA_ONLY_RULES, dependencies_in_text
from .depresolve import (
    CUDA_ONLY,
    TORCH_DISTRIBUTIONS,
    TORCH_OWN,
    InvalidIdentity,
    Resolution,
    canonical,
    checked_identity,
    installed_version,
)
from .depvisible import hidden_packages, own_distributions
from .safetext import REASON_CHARS

# pip's own settings and the network's, passed through when set; nothing else is.
PIP_PASSTHROUGH = (
    "PIP_FIND_LINKS",
    "PIP_NO_INDEX",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_CERT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
)
# -I: a repository's own pip/ (the working folder) or PYTHONPATH never stands in for pip
PIP = python_command("-m", "pip", "--disable-pip-version-check", "--no-input")
WHEELS_ONLY = "--only-binary=:all:"
COMPLETE = ".complete"
# A staging folder: "<overlay key>.<pid of the torchport making it>.tmp".
STAGING = re.compile(r"^[0-9a-f]{24}\.(\d+)\.tmp$")
RECORD = "overlay.json"
PREFIX = "prefix"  # the install prefix, in an overlay's folder
# how overlays are laid out: part of the key, so that one laid out otherwise is remade
LAYOUT = "prefix-1"
HOW_TO_PROVIDE = (
    "provide it with --deps FILE (a requirements file) and a folder of wheels in "
    "PIP_FIND_LINKS, or verify with --python PATH (an interpreter that has it)"
)


class InstallError(RuntimeError):
    """The overlay could not be made at all (pip missing, cache not writable)."""


class TimeLimit(TimeoutError):
    """The dependency step's time limit was reached; the message says during what."""


@dataclass
class Overlay:
    """The overlay a verification runs with, and what it took to make it."""

    path: str | None = None  # None: nothing to add to the program's sys.path
    prefix: str | None = None  # the install prefix ``path`` is the site-packages of
    key: str = ""
    installed: list[str] = field(default_factory=list)  # "name==version"
    unavailable: dict[str, str] = field(default_factory=dict)  # name -> why
    skipped: list[dict[str, str]] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    import_names: dict[str, str] = field(default_factory=dict)  # import name -> distribution
    notes: list[str] = field(default_factory=list)  # requirements asked for otherwise, and why
    hidden: list[str] = field(default_factory=list)  # torchport's, absent in the runs
    cached: bool = False
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def pip_environment(home: Path) -> dict[str, str]:
    """A fresh environment for pip: PATH, a HOME of its own, pip's and the proxy's settings."""
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONNOUSERSITE": "1",
        "PIP_CACHE_DIR": str(home / "cache"),
    }
    env.update({name: os.environ[name] for name in PIP_PASSTHROUGH if name in os.environ})
    return env


def named_distributions(resolution: Resolution) -> set[str]:
    """Every distribution the program names: declared, imported, its own."""
    wanted = [*resolution.needed, *resolution.present, *resolution.skipped]
    names = {w.name for w in wanted} | set(resolution.import_names.values())
    if resolution.project is not None:
        names.add(canonical(resolution.project[0]))
    return names


def overlay_key(resolution: Resolution) -> str:
    """What the overlay's contents depend on: the requirements, the repository's own
    name, the interpreter and torch they are installed against, and what its list of
    hidden packages depends on (the distributions the program names, torchport's own)."""
    parts = [
        sorted(
            w.requirement + "".join(f" --hash={h}" for h in w.hashes) for w in resolution.needed
        ),
        resolution.project,
        sys.version_info[:2],
        platform.machine(),
        installed_version("torch"),
        LAYOUT,
        sorted(named_distributions(resolution)),  # what the overlay's hidden list keeps
        own_distributions(),  # what it hides
    ]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


def _pip(
    args: list[str], env: dict[str, str], deadline: float, doing: str
) -> subprocess.CompletedProcess:
    """pip, stopped (its whole process group) at ``deadline``; ``doing`` names the step."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeLimit(f"reached before {doing}")
    try:
        return run_bounded([*PIP, *args], env, left)
    except subprocess.TimeoutExpired as exc:
        raise TimeLimit(f"pip was stopped while {doing}") from exc


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["pip gave no reason"])[-1][:REASON_CHARS]


def _dry_run(
    requirements: list[str], env: dict[str, str], work: Path, deadline: float
) -> tuple[list[tuple[str, str]] | None, str]:
    """pip's resolution against torchport's interpreter: [(name, version)], or None and why."""
    report = work / "report.json"
    report.unlink(missing_ok=True)
    # torch as installed: else pip picks the newest torchvision (say) and the torch it
    # wants, and drags CUDA packages in with it; a pin that cannot hold is "unavailable"
    constraints = work / "constraints.txt"
    constraints.write_text(f"torch=={installed_version('torch')}\n", encoding="utf-8")
    args = ["install", "--dry-run", "--quiet", WHEELS_ONLY, "--report", str(report)]
    args += ["--constraint", str(constraints)]
    done = _pip([*args, *requirements], env, deadline, f"resolving {', '.join(requirements)}")
    if done.returncode != 0 or not report.is_file():
        return None, _last_line(done.stderr or done.stdout)
    data = json.loads(report.read_text(encoding="utf-8"))
    return [
        (item["metadata"]["name"], item["metadata"]["version"]) for item in data.get("install", [])
    ], ""


NO_DISTRIBUTION = "No matching distribution found"
_VERSIONS = re.compile(r"^Available versions: (.+)$", re.MULTILINE)


def sources_only(name: str, env: dict[str, str], deadline: float) -> str | None:
    """Why ``name`` had no distribution for the wheels-only resolution, where the index has
    it as source distributions only (for this interpreter): pip's index listing counts
    sdists, which the resolution refuses. Only file names are read; nothing is built."""
    done = _pip(["index", "versions", name], env, deadline, f"listing {name}'s releases")
    found = _VERSIONS.search(done.stdout or "") if done.returncode == 0 else None
    if found is None:
        return None
    newest = found.group(1).split(", ")[0]
    return (
        f"{name} is published as source distributions only (newest {newest}), no wheel for "
        "this interpreter; torchport installs wheels only (a build runs its code on the host)"
    )


def _resolve(
    overlay: Overlay, requirements: dict[str, str], env: dict[str, str], work: Path, deadline: float
) -> list[tuple[str, str]]:
    """Pins for every requirement pip can resolve; each one it cannot goes to unavailable."""
    pins, why = _dry_run(list(requirements.values()), env, work, deadline)
    if pins is not None:
        return pins
    usable = []
    for name, requirement in requirements.items():  # which ones could not be had
        alone, why = _dry_run([requirement], env, work, deadline)
        if alone is None and NO_DISTRIBUTION in why:
            why = sources_only(name, env, deadline) or why
        if alone is None:
            overlay.unavailable[name] = why
        else:
            usable.append(requirement)
    if not usable:
        return []
    pins, why = _dry_run(usable, env, work, deadline)
    if pins is None:  # each resolves alone but not together
        overlay.unavailable.update({canonical(r): why for r in usable})
        return []
    return pins


def _keep(name: str, version: str, overlay: Overlay) -> bool:
    """Whether a pin pip chose goes into the overlay (torch, CUDA-only and installed don't)."""
    rules = [load_catalogue().by_code[c] for c in CUDA_ONLY_RULES]
    (dep,) = dependencies_in_text("requirements", f"{name}=={version}", "pip", rules)
    why = ""
    if canonical(name) in TORCH_DISTRIBUTIONS:
        why = TORCH_OWN
    elif dep.cuda_only:
        why = CUDA_ONLY
    elif (have := installed_version(name)) is not None:
        why = f"pip would replace torchport's {have}; kept {have}"
    if why:
        overlay.skipped.append(
            {
                "name": canonical(name),
                "requirement": f"{name}=={version}",
                "source": "pip's resolution",
                "reason": why,
            }
        )
    return not why


def _pinned(pin: str, hashes: tuple[str, ...], work: Path) -> list[str]:
    """pip's arguments for one pin: the pin itself, or, when the repository's requirements
    file gave hashes for it, a requirements file of the pin with its hashes and
    ``--require-hashes``, so pip refuses a wheel whose hash is not one of them. The pin
    comes from pip's own resolution and the hashes were checked as ALGORITHM:HEX
    (``depresolve.requirement_options``): the file holds nothing else."""
    if not hashes:
        return [pin]
    listed = work / "hashed-requirement.txt"
    listed.write_text(pin + "".join(f" --hash={h}" for h in hashes) + "\n", encoding="utf-8")
    return ["--require-hashes", "-r", str(listed)]


def site_of(prefix: Path) -> Path:
    """Where pip puts a pure-Python package under ``--prefix`` with this interpreter
    (``PREFIX/lib/python3.11/site-packages``)."""
    base = {"base": str(prefix), "platbase": str(prefix)}
    return Path(sysconfig.get_path("purelib", "posix_prefix", vars=base))


def _write_project_metadata(folder: Path, project: tuple[str, str]) -> None:
    """A ``.dist-info`` for the repository itself, so ``importlib.metadata.version(name)``
    answers as it would after ``pip install .``; its code is the run's own copy. The name
    and version are checked again (``depresolve.checked_identity``: a PEP 508 name, a PEP
    440 version) and the folder must be one directly in ``folder``: they come from the
    repository, and they make a path."""
    name, version = checked_identity(*project, "the repository's metadata")
    wanted = f"{canonical(name).replace('-', '_')}-{version}.dist-info"
    info = confined(folder, wanted, "the dependency overlay")
    if info.parent != folder.resolve():
        raise Refused(wanted, "is not a folder of the dependency overlay's own")
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "INSTALLER").write_text("torchport\n", encoding="utf-8")


def _stopped(
    overlay: Overlay,
    requirements: dict[str, str],
    why: TimeLimit,
    elapsed_s: float,
    time_limit_s: float,
    say: Callable[[str], None],
) -> None:
    """The time limit ended the step: what is missing, said once, and marked unavailable so
    that the runs go on without it and the verdict names it."""
    done_names = {canonical(p.split("==")[0]) for p in overlay.installed}
    missing = [n for n in requirements if n not in done_names and n not in overlay.unavailable]
    reason = f"not installed: the dependency step reached its {time_limit_s:g} s limit ({why})"
    overlay.unavailable.update({name: reason for name in missing})
    say(
        f"dependencies: time limit ({time_limit_s:g} s) reached after {elapsed_s:.0f} s: {why}; "
        f"the runs go on without {', '.join(missing) or 'nothing more'}"
    )


def _notes(resolution: Resolution, overlay: Overlay) -> list[str]:
    """Each requirement asked for otherwise than the repository wrote it (a companion
    pinned for another torch), with what was installed for it."""
    pins = {canonical(p.split("==")[0]): p for p in overlay.installed}
    notes = []
    for wanted in resolution.needed:
        if wanted.note and wanted.name in pins:
            notes.append(f"{wanted.note}: installed {pins[wanted.name]}")
        elif wanted.note:
            why = overlay.unavailable.get(wanted.name, "not installed")
            notes.append(f"{wanted.note}: {wanted.requirement} could not be installed ({why})")
    return notes


def sweep_stale_staging(envs: Path) -> list[Path]:
    """Remove the staging folders of installs whose torchport is gone (killed mid-install):
    only folders named as ``prepare`` names them, directly in ``envs``. The removed."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in envs.iterdir():
            match = STAGING.match(entry.name)
            if match is None or not entry.is_dir() or entry.is_symlink():
                continue
            if _alive(int(match.group(1))):
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def prepare(
    resolution: Resolution,
    cache: Path,
    time_limit_s: float = 900.0,
    say: Callable[[str], None] = lambda message: None,
) -> Overlay:
    """The overlay for ``resolution`` under ``cache``: reused when already made whole,
    made otherwise (progress through ``say``), within ``time_limit_s`` seconds."""
    started = time.monotonic()
    overlay = Overlay(
        skipped=[asdict(w) for w in resolution.skipped],
        present=[w.requirement for w in resolution.present],
        import_names=dict(resolution.import_names),
        notes=[w.note for w in resolution.present if w.note],
    )
    overlay.key = overlay_key(resolution)
    sweep_stale_staging(cache / "envs")
    final = cache / "envs" / overlay.key
    if (final / COMPLETE).is_file():
        try:
            saved = json.loads((final / RECORD).read_text(encoding="utf-8"))
            overlay_cache.used(final)
            return Overlay(**{**saved, "cached": True, "elapsed_s": 0.0})
        except (OSError, ValueError, TypeError):
            pass  # a damaged record: make it again
    try:
        staging = cache / "envs" / f"{overlay.key}.{os.getpid()}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        site = site_of(staging / PREFIX)
        site.mkdir(parents=True)
        (staging / PREFIX / OVERLAY_MARK).write_text("", encoding="utf-8")
    except OSError as exc:
        raise InstallError(f"cannot write the dependency cache {cache}: {exc}") from exc
    env = pip_environment(staging)
    deadline = started + time_limit_s
    requirements = {w.name: w.requirement for w in resolution.needed}
    hashes = {w.name: w.hashes for w in resolution.needed if w.hashes}
    try:
        if requirements:
            say(f"dependencies: resolving {', '.join(sorted(requirements))}")
            pins = [
                p
                for p in _resolve(overlay, requirements, env, staging, deadline)
                if _keep(*p, overlay)
            ]
            for number, (name, version) in enumerate(pins, start=1):
                say(f"dependencies: installing {number}/{len(pins)}: {name}=={version}")
                args = ["install", "--quiet", "--no-deps", WHEELS_ONLY, "--prefix"]
                pin = f"{name}=={version}"
                what = _pinned(pin, hashes.get(canonical(name), ()), staging)
                done = _pip(
                    [*args, str(staging / PREFIX), *what], env, deadline, f"installing {pin}"
                )
                if done.returncode == 0:
                    overlay.installed.append(f"{name}=={version}")
                else:
                    overlay.unavailable[canonical(name)] = _last_line(done.stderr or done.stdout)
    except TimeLimit as exc:
        _stopped(overlay, requirements, exc, time.monotonic() - started, time_limit_s, say)
    if resolution.project is not None:
        try:
            _write_project_metadata(site, resolution.project)
        except (InvalidIdentity, Refused) as exc:  # a Resolution not made by resolve()
            itself = {"name": "(the repository itself)", "requirement": "", "source": ""}
            overlay.skipped.append({**itself, "reason": str(exc)})
    overlay.notes += _notes(resolution, overlay)
    hidden = hidden_packages(named_distributions(resolution), [str(site)])
    overlay.hidden = hidden["distributions"]
    (staging / PREFIX / HIDDEN_FILE).write_text(json.dumps(hidden, indent=1), encoding="utf-8")
    overlay.elapsed_s = round(time.monotonic() - started, 3)
    overlay.prefix = str(final / PREFIX)
    overlay.path = str(site_of(final / PREFIX))
    (staging / RECORD).write_text(json.dumps(overlay.to_json(), indent=2), encoding="utf-8")
    if not overlay.unavailable:
        (staging / COMPLETE).write_text("", encoding="utf-8")
    shutil.rmtree(staging / "cache", ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)  # an incomplete overlay of an earlier run
    try:
        os.replace(staging, final)
    except OSError:  # another torchport made it meanwhile: theirs is as good
        shutil.rmtree(staging, ignore_errors=True)
    overlay_cache.used(final)
    overlay_cache.evict(cache / "envs")
    return overlay
