"""A repository's own torchport settings, and where each effective value came from.

Four layers, each overriding the one before: torchport's built-in defaults, the
repository's file (``[tool.torchport]`` in its ``pyproject.toml``, or a ``torchport.toml``
at its root; both at once is refused, so that no one has to guess which one counts),
``TORCHPORT_*`` environment variables, and command-line flags. The two list settings
(``exclude``, ``skip``) add up instead of replacing: a project that excludes its vendored
code keeps it excluded whatever a flag adds (a ``!PATTERN`` re-includes, gitignore-style).
``tolerance`` is a policy name and, from the file only, per-policy numbers: a name given
later replaces the name and keeps the file's numbers.

Every value is checked where it is read; a bad one is a one-line ``ConfigError`` naming
the file (or variable) and the key. The front doors (``cli``) read this once per
repository; ``torchport config`` prints the result with each value's source.
"""

from __future__ import annotations

import copy
import os
import shlex
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from torchport.sandbox.limits import LIMITS
from torchport.sandbox.safepath import Refused, confined, read_inside
from torchport.tools.catalogue import TARGETS, load_catalogue
from torchport.tools.repowalk import ExcludeError, exclude_spec

from .defaults import VERIFY_STEPS
from .loosening import check, check_tolerance

CONFIG_FILE = "torchport.toml"
PYPROJECT = "pyproject.toml"
SECTION = "[tool.torchport]"
MAX_FILE_BYTES = 1 << 20  # a configuration file, not a data file: larger is refused
DEPS_MODES = ("auto", "none")
ROOT_MARKERS = (".git", ".hg", CONFIG_FILE)
SEVERITIES = ("info", "warning", "error")  # the least severe first: --fail-on S fails on S and up


class ConfigError(ValueError):
    """A configuration that cannot be used: the message is one line naming where and which key."""


# --- how each key's value is read --------------------------------------------------------


def _target(value: Any) -> str:
    if value not in TARGETS:
        raise ValueError(f"must be one of {', '.join(TARGETS)}, not {value!r}")
    return value


def entry_command(value: Any) -> str:
    """An entry command as the planner takes it (split as a shell would), else ValueError
    saying why: every front door that takes one (flag, file, batch list) checks it so."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f'must be a command line such as "python train.py", not {value!r}')
    try:
        shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"does not parse as a command: {exc}") from None
    return value


def _steps(value: Any) -> int:
    bound = LIMITS["steps"]
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not bound.holds(value):
        raise ValueError(f"must be {bound.describe()}, not {value!r}")
    return value


def _repository_steps(value: Any) -> int:
    """``steps`` in a repository's file: fewer than torchport's own only within bounds."""
    steps = _steps(value)
    check("steps", steps, VERIFY_STEPS)
    return steps


SWITCH_WORDS = {"true": True, "1": True, "yes": True, "on": True}
SWITCH_WORDS.update({"false": False, "0": False, "no": False, "off": False})


def _switch(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def _switch_text(text: str) -> bool:
    if text.strip().lower() not in SWITCH_WORDS:
        raise ValueError(f"must be one of {', '.join(SWITCH_WORDS)}, not {text!r}")
    return SWITCH_WORDS[text.strip().lower()]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list):
        raise ValueError(f"must be a list of strings, not {value!r}")
    if not all(isinstance(v, str) for v in value):
        raise ValueError(f"must be a list of strings, not {value!r}")
    return value


def _patterns(value: Any) -> list[str]:
    patterns = _strings(value)
    try:
        exclude_spec(patterns)
    except ExcludeError as exc:
        raise ValueError(str(exc)) from None
    return patterns


def _codes(value: Any) -> list[str]:
    codes = [c.strip().upper() for c in _strings(value) if c.strip()]
    catalogue = load_catalogue()
    unknown = [c for c in codes if not catalogue.select([c])]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} matches no rule (see `torchport rules`)")
    return codes


def _policy_names() -> tuple[str, ...]:
    from .tolerance import policies  # the verifier's own table, read only when asked

    return ("auto", *policies())


def _policy(value: Any) -> dict[str, Any]:
    if value not in _policy_names():
        raise ValueError(f"must be one of {', '.join(_policy_names())}, not {value!r}")
    return {"policy": value}


def _tolerance(value: Any) -> dict[str, Any]:
    """``"bf16"``, or a table: ``policy = NAME`` and ``NAME = {rtol, atol, max_steps}``."""
    if isinstance(value, str):
        return _policy(value)
    if not isinstance(value, dict):
        raise ValueError(f"must be a policy name or a table, not {value!r}")
    from .tolerance import POLICY_FIELDS

    tolerance = _policy(value.get("policy", "auto"))
    for name, numbers in value.items():
        if name == "policy":
            continue
        if name not in _policy_names()[1:]:
            raise ValueError(f"{name}: not a policy (policy, {', '.join(_policy_names()[1:])})")
        if not isinstance(numbers, dict):
            raise ValueError(f"{name}: must be a table such as {{ rtol = 0.05, atol = 0.01 }}")
        for field_name, number in numbers.items():
            if field_name not in POLICY_FIELDS:
                raise ValueError(
                    f"{name}.{field_name}: unknown (one of {', '.join(POLICY_FIELDS)})"
                )
            if not _number_for(field_name, number):
                least = "an integer of at least 1" if field_name == "max_steps" else "a number >= 0"
                raise ValueError(f"{name}.{field_name}: must be {least}, not {number!r}")
        tolerance[name] = {k: POLICY_FIELDS[k](v) for k, v in numbers.items()}
        check_tolerance(name, tolerance[name])  # the file's: tighter, or looser within bounds
    return tolerance


def _number_for(field_name: str, number: Any) -> bool:
    """rtol and atol: any number from 0; max_steps: an integer from 1."""
    if isinstance(number, bool) or not isinstance(number, int | float):
        return False
    return isinstance(number, int) and number >= 1 if field_name == "max_steps" else number >= 0


def _deps_file(value: Any, root: Path) -> str:
    """``deps`` in a repository's file: auto, none, or a requirements file in the repository."""
    if value in DEPS_MODES:
        return value
    if isinstance(value, str) and value:
        path = (root / value).resolve()
        if path.is_file() and path.is_relative_to(root.resolve()):
            return str(path)
    raise ValueError(f"must be auto, none or a requirements file in {root}, not {value!r}")


def _deps_here(value: Any) -> str:
    """``deps`` from the environment or a flag: a FILE is relative to the current folder."""
    from .environment import deps_flag

    return deps_flag(value)


def _baseline(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a file name, not {value!r}")
    return value


def _baseline_file(value: Any, root: Path) -> str:
    """``baseline`` in a repository's file: a file inside the repository, relative to its
    root. One that leads out (an absolute path, ``..``, a symlink) is refused with the same
    words whether or not anything is there, so a repository cannot probe the host's files
    (``--baseline`` and ``TORCHPORT_BASELINE`` are the user's: they may name any file)."""
    try:
        return str(confined(root, _baseline(value)))
    except Refused:
        raise ValueError(f"must be a file inside the repository, not {value!r}") from None


def _fail_on(value: Any) -> str:
    if value not in SEVERITIES:
        raise ValueError(f"must be one of {', '.join(SEVERITIES)}, not {value!r}")
    return value


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _flag_list(read: Callable[[Any], list[str]]) -> Callable[[Any], list[str]]:
    """A repeatable flag's values, each of which may hold several, comma-separated."""
    return lambda values: read([p for v in values for p in (_split(v) if "," in v else [v])])


def _anywhere(read: Callable[[Any], Any]) -> Callable[[Any, Path], Any]:
    """A file's value that means the same whatever the repository's root."""
    return lambda value, root: read(value)


@dataclass(frozen=True)
class Key:
    """One setting: its default, its variable and flag, how the file's value (with the
    repository's root), the environment's and a flag's are read, and how a layer combines
    with the ones under it (replace; extend: lists add up; policy: see the module doc)."""

    default: Any
    env: str
    flag: str
    from_file: Callable[[Any, Path], Any]
    from_env: Callable[[str], Any]
    from_flag: Callable[[Any], Any] = lambda value: value
    combine: str = "replace"

    @property
    def attr(self) -> str:
        """The option's name in argparse's namespace (``--fail-on``: ``fail_on``)."""
        return self.flag.lstrip("-").replace("-", "_")


KEYS: dict[str, Key] = {
    "target": Key(None, "TORCHPORT_TARGET", "--target", _anywhere(_target), _target),
    "entry": Key(
        None, "TORCHPORT_ENTRY", "--entry", _anywhere(entry_command), entry_command, entry_command
    ),
    "steps": Key(VERIFY_STEPS, "TORCHPORT_STEPS", "--steps", _anywhere(_repository_steps), _steps),
    # run the program's command as given: no size or time argument lowered for a short run
    "keep-args": Key(False, "TORCHPORT_KEEP_ARGS", "--keep-args", _anywhere(_switch), _switch_text),
    # gitignore patterns relative to the repository's root: files neither reported nor rewritten
    "exclude": Key(
        [],
        "TORCHPORT_EXCLUDE",
        "--exclude",
        _anywhere(_patterns),
        lambda text: _patterns(_split(text)),
        _flag_list(_patterns),
        combine="extend",
    ),
    # rule codes or prefixes neither reported nor applied
    "skip": Key(
        [],
        "TORCHPORT_SKIP",
        "--skip",
        _anywhere(_codes),
        lambda text: _codes(_split(text)),
        _flag_list(_codes),
        combine="extend",
    ),
    "tolerance": Key(
        {"policy": "auto"},
        "TORCHPORT_TOLERANCE",
        "--tolerance",
        _anywhere(_tolerance),
        _policy,
        _policy,
        combine="policy",
    ),
    "deps": Key("auto", "TORCHPORT_DEPS", "--deps", _deps_file, _deps_here, _deps_here),
    # scan's gate (a pre-commit hook's, a CI job's): accepted findings, the severity that fails
    "baseline": Key(None, "TORCHPORT_BASELINE", "--baseline", _baseline_file, _baseline),
    "fail-on": Key("info", "TORCHPORT_FAIL_ON", "--fail-on", _anywhere(_fail_on), _fail_on),
}
ENVIRONMENT = {key.env: name for name, key in KEYS.items()}


# --- the file ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigFile:
    path: Path
    where: str  # how errors name it: the path, and the section in a pyproject.toml
    table: dict[str, Any]


def _load(root: Path, name: str, lenient: bool) -> dict[str, Any] | None:
    """The TOML of the configuration file ``name`` at ``root``; None when there is none
    (or, ``lenient``, when it cannot be read or parsed and does not mention torchport).

    The repository chooses what its file is, so it is read only as a regular file inside
    the repository of at most MAX_FILE_BYTES (``sandbox.safepath``): a symlink out of it, a
    FIFO or device, or a huge file is refused (ConfigError), lenient or not, never followed.
    """
    path = root / name
    if not os.path.lexists(path):
        return None
    try:
        text = read_inside(root, name, MAX_FILE_BYTES).decode("utf-8")
    except Refused as exc:
        raise ConfigError(
            f"{path}: refused: {exc.strerror}; a configuration file must be a regular file "
            f"inside the repository, of at most {MAX_FILE_BYTES} bytes"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        if lenient:
            return None
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # someone else's pyproject.toml that TOML cannot read is their problem, not ours,
        # unless it holds our section
        if lenient and "tool.torchport" not in text:
            return None
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def config_file(root: Path) -> ConfigFile | None:
    """The repository's torchport configuration, or None when it has none."""
    found = []
    own = _load(root, CONFIG_FILE, lenient=False)
    if own is not None:
        found.append(ConfigFile(root / CONFIG_FILE, str(root / CONFIG_FILE), own))
    pyproject = root / PYPROJECT
    tool = (_load(root, PYPROJECT, lenient=True) or {}).get("tool")
    if isinstance(tool, dict) and "torchport" in tool:
        found.append(ConfigFile(pyproject, f"{pyproject} {SECTION}", tool["torchport"]))
    if len(found) > 1:
        raise ConfigError(
            f"{root}: both {CONFIG_FILE} and {SECTION} in {PYPROJECT} configure torchport; keep one"
        )
    if found and not isinstance(found[0].table, dict):
        raise ConfigError(f"{found[0].where}: must be a table of settings")
    return found[0] if found else None


def _file_values(file: ConfigFile, root: Path) -> dict[str, Any]:
    values = {}
    for name, value in file.table.items():
        key = KEYS.get(name)
        if key is None:
            hint = f"known: {', '.join(KEYS)}"
            if name == "tool" and file.path.name == CONFIG_FILE:
                hint = f"{CONFIG_FILE} holds the settings at its top level, with no {SECTION}"
            raise ConfigError(f"{file.where}: unknown key {name!r} ({hint})")
        read = partial(_read_file_value, key.from_file, root)
        values[name] = _checked(read, value, f"{file.where}: {name}")
    return values


def _read_file_value(from_file: Callable[[Any, Path], Any], root: Path, value: Any) -> Any:
    return from_file(value, root)


def _checked(read: Callable[[Any], Any], value: Any, where: str) -> Any:
    try:
        return read(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


# --- the layers together -------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str  # "default", a file, an environment variable, a flag; joined with " + "


@dataclass
class ProjectConfig:
    root: Path | None
    file: Path | None
    settings: dict[str, Setting] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.settings[key].value

    def to_json(self) -> dict[str, Any]:
        return {
            "root": str(self.root) if self.root else None,
            "file": str(self.file) if self.file else None,
            "settings": {
                k: {"value": s.value, "source": s.source} for k, s in self.settings.items()
            },
        }


def _combine(key: Key, below: Setting, value: Any, source: str) -> Setting:
    joined = source if below.source == "default" else f"{below.source} + {source}"
    if key.combine == "extend":
        return Setting([*below.value, *value], joined) if value else below
    if key.combine == "policy":  # the name replaced; numbers from below kept, and said
        kept = set(below.value) - {"policy"}
        return Setting({**below.value, **value}, joined if kept else source)
    return Setting(value, source)


def environment_values(env: Mapping[str, str]) -> dict[str, Any]:
    """The settings the ``TORCHPORT_*`` variables give (empty ones count as unset)."""
    values = {}
    for variable, name in ENVIRONMENT.items():
        text = env.get(variable, "").strip()
        if text:
            values[name] = _checked(KEYS[name].from_env, text, variable)
    return values


def flag_values(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the given flags hold (parsed by argparse, read here like the rest)."""
    return {
        name: _checked(KEYS[name].from_flag, value, KEYS[name].flag)
        for name, value in flags.items()
        if name in KEYS and value is not None
    }


@dataclass(frozen=True)
class Overrides:
    """The layers above a repository's file, read once: a batch reads them before its
    first job and hands them to every job, whose repository's file goes under them."""

    env: dict[str, Any] = field(default_factory=dict)  # read from TORCHPORT_* variables
    flags: dict[str, Any] = field(default_factory=dict)  # read from the flags given
    defaults: dict[str, Any] = field(default_factory=dict)  # a front door's own defaults


def overrides(
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Overrides:
    """Read and check ``env`` (``os.environ`` if None) and ``flags`` (only those given:
    name -> value as argparse parsed it); ConfigError names the variable or flag."""
    return Overrides(
        environment_values(os.environ if env is None else env),
        flag_values(flags or {}),
        # a front door's default is said as its flag would say it
        {
            k: KEYS[k].from_flag(v)
            for k, v in (defaults or {}).items()
            if k in KEYS and v is not None
        },
    )


def resolve(root: Path | None, above: Overrides | None = None) -> ProjectConfig:
    """The effective settings for the repository at ``root`` (None: no repository, as a
    batch's own settings): the built-in defaults (a front door's own over ``KEYS``'), the
    repository's file, then ``above`` (``overrides()``: the environment, then the flags)."""
    above = above or overrides()
    root = root.resolve() if root is not None else None
    file = config_file(root) if root is not None and root.is_dir() else None
    defaults = {**{k: key.default for k, key in KEYS.items()}, **above.defaults}
    settings = {k: Setting(copy.deepcopy(v), "default") for k, v in defaults.items()}
    layers: list[tuple[Mapping[str, Any], Callable[[str], str]]] = [
        (_file_values(file, root), lambda name: str(file.path)) if file and root else ({}, str),
        (above.env, lambda name: KEYS[name].env),
        (above.flags, lambda name: KEYS[name].flag),
    ]
    for values, source in layers:
        for name, value in values.items():
            settings[name] = _combine(KEYS[name], settings[name], value, source(name))
    return ProjectConfig(root, file.path if file else None, settings)


def project_root(paths: Iterable[Path]) -> Path:
    """Where a scan of these files stands: the nearest folder at or above their common
    folder that holds ``.git``, ``.hg``, ``torchport.toml`` or a ``pyproject.toml`` with a
    ``[tool.torchport]`` section; else that common folder. So a pre-commit hook's files
    are named, and configured, as a scan of the whole repository names them."""
    folders = [p.resolve() if p.is_dir() else p.resolve().parent for p in paths]
    common = Path(os.path.commonpath(folders)) if folders else Path.cwd().resolve()
    for folder in (common, *common.parents):
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
            return folder
        try:
            tool = (_load(folder, PYPROJECT, lenient=True) or {}).get("tool")
        except ConfigError:  # not a file to read (a link out, a FIFO): not this folder's
            continue
        if isinstance(tool, dict) and "torchport" in tool:
            return folder
    return common
