"""Every git command torchport runs, without running anything the repository chose.

A repository's ``.git/config`` and hooks are its own code: ``core.fsmonitor``,
a filter driver named by ``.gitattributes``, ``gpg.program`` with
``commit.gpgsign``, ``core.hooksPath`` and the hooks themselves all execute on
the host, as the user, when git runs in that repository. So each command here
turns them off on its command line (``-c`` beats every config file), runs with
none of the caller's ``GIT_*`` variables, never prompts and never pages. Filter
drivers are found by reading the configuration (which executes nothing); those
the repository's own configuration defines (its ``local`` and ``worktree``
scopes, includes counted) are replaced by empty ones. The user's own global
filters (git-lfs) are left as they are: the user installed them, not the
repository.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_TIMEOUT_S = 900.0

# What no repository may make git run: (key, value) pairs given to every command.
HARDENING: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("core.askPass", ""),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("commit.gpgsign", "false"),
    ("tag.gpgsign", "false"),
    ("protocol.ext.allow", "never"),
    ("diff.external", ""),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
# A filter driver named by the repository becomes one that does nothing.
EMPTY_FILTER = (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false"))
# The scopes a repository controls (its .git/config, config.worktree and their includes).
REPOSITORY_SCOPES = ("local", "worktree")
ENVIRONMENT = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "",
    "SSH_ASKPASS": "",
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "true",
    "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
}


class GitError(RuntimeError):
    """git could not do what was asked; the message has git's own reason."""


class GitNotFound(GitError):
    """git is not installed."""


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without its GIT_* variables, plus ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {**env, **ENVIRONMENT, **(extra or {})}


def _config_args(pairs: list[tuple[str, str]]) -> list[str]:
    return [arg for key, value in pairs for arg in ("-c", f"{key}={value}")]


def not_an_option(value: str, what: str = "ref") -> str:
    """``value`` (a ref, a path, a URL from a list, a config or a repository) as it is, or
    GitError when git would read it as an option (``--pathspec-from-file=/etc/shadow``).

    ``--end-of-options`` is not enough everywhere: git 2.39's ``checkout`` still counts it
    as a revision, so a value that starts with ``-`` is refused outright."""
    if value.startswith("-"):
        raise GitError(f"{what} {value!r} starts with '-': git would read it as an option")
    return value


class Git:
    """git in one folder (a repository, or None for a clone), hardened as above."""

    def __init__(self, folder: Path | None, timeout_s: float = GIT_TIMEOUT_S) -> None:
        self.folder = folder
        self.timeout_s = timeout_s
        self._filters: list[str] | None = None

    def repository_filters(self) -> list[str]:
        """Names of the filter drivers the repository's own configuration defines."""
        if self._filters is None:
            self._filters = []
            if self.folder is not None:
                listed = self._run(
                    ["config", "--show-scope", "--includes", "--get-regexp", r"^filter\."],
                    _config_args(list(HARDENING)),
                )
                for line in listed.stdout.decode("utf-8", "replace").splitlines():
                    scope, _, rest = line.partition("\t")
                    name = rest.split(" ", 1)[0].removeprefix("filter.").rpartition(".")[0]
                    if scope in REPOSITORY_SCOPES and name and name not in self._filters:
                        self._filters.append(name)
        return self._filters

    def hardening(self) -> list[str]:
        pairs = list(HARDENING)
        pairs += [
            (f"filter.{name}.{key}", value)
            for name in self.repository_filters()
            for key, value in EMPTY_FILTER
        ]
        return _config_args(pairs)

    def run(
        self,
        *args: str,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        """``git ARGS`` in the folder; with ``check``, a failure raises GitError."""
        done = self._run(list(args), self.hardening(), input=input, env=env)
        if check and done.returncode != 0:
            raise GitError(f"git {_shown(args)} failed: {_last_line(done)}")
        return done

    def text(
        self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None
    ) -> str:
        """The stripped standard output of a command that must succeed."""
        done = self.run(*args, input=input, env=env)
        return done.stdout.decode("utf-8", "surrogateescape").strip()

    def _run(
        self,
        args: list[str],
        config: list[str],
        input: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        where = ["-C", str(self.folder)] if self.folder is not None else []
        try:
            return subprocess.run(
                ["git", *config, *where, *args],
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
                capture_output=True,
                env=environment(env),
                timeout=self.timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise GitNotFound("git is not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise GitError(f"git {_shown(args)} took longer than {self.timeout_s:.0f} s") from exc


def _shown(args: tuple[str, ...] | list[str]) -> str:
    return " ".join(a for a in args if a not in ("--quiet", "-q", "--"))


def _last_line(done: subprocess.CompletedProcess[bytes]) -> str:
    lines = [ln for ln in done.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {done.returncode}"
