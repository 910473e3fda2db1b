"""What a repository needs installed to run, decided before anything is installed.

The declared requirements come from the dependency files the scanner already reads
(``depfiles``, runtime requirements only); imports that no file declares are added
under their distribution's name. Each requirement is then either needed (missing
from torchport's environment), present, or skipped with the reason: torch is always
torchport's own, CUDA-only packages are what the catalogue's TPP001-TPP003 say they
are, and a local path, an editable install or a VCS URL would run the repository's
or a stranger's code to build, which installation never does.
"""

from __future__ import annotations

import ast
import configparser
import contextlib
import dataclasses
import fnmatch
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version
from torchport.sandbox import astparse

from ..sandbox.pythonpath import layout_paths
from ..sandbox.safepath import read_inside, read_regular
from . import legacy_keyword
from .catalogue import load_catalogue
from .depfiles import (
    CUDA_ONLY_RULES,
    dependencies_in_setup_py,
    dependencies_in_text,
    requirement_lines,
)
from .depnames import companion_fix, known_distribution, runtime_of
from .depversions import Asserted, asserted_versions
from .findings import Dependency
from .reachable import Reached, lazy_imports, reachable_files
from .repowalk import walk_repo
from .sourcefile import Unscannable, parse_python, read_text

# torchport's own: never installed, whatever the repository pins.
TORCH_DISTRIBUTIONS = frozenset({"torch", "pytorch", "torch-cpu"})
# A target's own runtime: the emulated device stands in for it in every run.
TARGET_RUNTIMES = frozenset({"torch-xla", "torch-neuronx", "torch-tpu", "libtpu", "neuronx-cc"})
# Conda entries that are the environment itself, not a package.
NOT_PACKAGES = frozenset({"python", "pip", "setuptools", "wheel"})
CUDA_ONLY = "CUDA-only (the catalogue's TPP001-TPP003): skipped"
TORCH_OWN = "torch is torchport's own; never installed"
TARGET_RUNTIME = "a target's runtime: the emulator stands in"
UNDECLARED = (
    "declared by no dependency file of the repository, and no distribution torchport knows "
    "by that import name (tools/data/distributions.toml): not installed, since a package "
    "guessed from an import could be a stranger's (dependency confusion); declare it in "
    "requirements.txt or give --deps FILE"
)
LAZY_ONLY = (
    "imported only inside a function of a module the program imports (a lazy, optional "
    "need, such as an export backend): not installed"
)
# Skipped because a port must run without them: missing at run time, they are the
# port's failure (or the shim's stand-in), never "could not be installed".
NOT_FOR_THE_PORT = (CUDA_ONLY, TORCH_OWN, TARGET_RUNTIME)
DEPENDENCY_FILE_KINDS = ("requirements", "pyproject", "setup", "conda")
_URL = re.compile(r"(://|^\s*@|\s@\s|^(git|hg|svn|bzr)\+)")
# A distribution's name as PEP 508 spells it (the packaging specification's own pattern).
PEP508_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_EDITABLE_OR_PATH = re.compile(r"^\s*(-e\s|--editable\b|\.{1,2}/|/|file:)")
# A requirements file's --hash value, as pip takes it (its allowed algorithms).
_HASH = re.compile(r"^(sha256|sha384|sha512):[0-9a-fA-F]+$")


def canonical(name: str) -> str:
    """PEP 503 normalised distribution name: ``Py_YAML`` -> ``py-yaml``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Wanted:
    """One requirement, where it was asked for, and (if skipped) why."""

    name: str  # canonical distribution name
    requirement: str  # as pip takes it: "timm>=0.9"
    source: str  # "requirements.txt:3" or "import in train.py:5"
    reason: str = ""
    hashes: tuple[str, ...] = ()  # a requirements file's --hash values: "sha256:HEX"
    note: str = ""  # what was asked instead: "torchvision==0.20.0 is built for torch 2.5; ..."


@dataclass
class Resolution:
    """What the repository needs: ``needed`` is what an overlay must provide."""

    needed: list[Wanted] = field(default_factory=list)
    present: list[Wanted] = field(default_factory=list)
    skipped: list[Wanted] = field(default_factory=list)
    project: tuple[str, str] | None = None  # the repository's own (name, version)
    import_names: dict[str, str] = field(default_factory=dict)  # import name -> distribution

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cuda_only_import(module: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(module, p) for p in patterns)


def _classify(dep: Dependency, source: str) -> tuple[str, Wanted]:
    """("needed"|"present"|"skipped", the requirement)."""
    text = f"{dep.name}{dep.spec}".strip()
    name = canonical(dep.name)
    if name in TORCH_DISTRIBUTIONS:
        return "skipped", Wanted(name, text, source, TORCH_OWN)
    if dep.cuda_only:
        return "skipped", Wanted(name, text, source, CUDA_ONLY)
    if name in TARGET_RUNTIMES:
        return "skipped", Wanted(name, text, source, TARGET_RUNTIME)
    if name in NOT_PACKAGES:
        return "skipped", Wanted(name, text, source, "part of the environment itself")
    if _URL.search(dep.spec) or _URL.search(dep.name):
        return "skipped", Wanted(name, text, source, "a URL or VCS requirement: not installed")
    pinned, hashes, refused = requirement_options(text)
    if refused:
        return "skipped", Wanted(name, text, source, refused)
    if hashes:
        return _hashed(name, pinned, hashes, source)
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        if re.match(r"=[^=]", dep.spec.strip()):  # conda's "numpy=1.26"
            requirement = Requirement(dep.name)
            text = dep.name
        else:
            return "skipped", Wanted(name, text, source, "not a requirement pip can read")
    if requirement.marker is not None and not requirement.marker.evaluate():
        return "skipped", Wanted(name, text, source, "its environment marker excludes this one")
    note = ""
    fix = companion_fix(name, text, requirement.specifier, installed_version("torch") or "")
    if fix is not None and not fix.requirement:
        return "skipped", Wanted(name, text, source, fix.note)
    if fix is not None:
        text, note, requirement = fix.requirement, fix.note, Requirement(fix.requirement)
    have = installed_version(name)
    if have is None:
        return "needed", Wanted(name, text, source, note=note)
    if requirement.specifier.contains(have, prereleases=True):
        why = f"torchport's environment has {have}"
        return "present", Wanted(name, text, source, why, note=note)
    why = f"torchport's environment has {have}, which the run uses"
    return "skipped", Wanted(name, text, source, why, note=note)


def requirement_options(text: str) -> tuple[str, tuple[str, ...], str]:
    """A requirements-file line split as pip splits it (the requirement, then options from
    the first word that starts with ``-``): the requirement, its ``--hash`` values, and why
    the line is refused ("" when it is not). Any other per-requirement option
    (``--config-settings``, ``--global-option``) changes how pip builds a package, and a
    hash that is not ``ALGORITHM:HEX`` is no hash pip can check."""
    words = text.split()
    at = next((i for i, word in enumerate(words) if word.startswith("-")), len(words))
    if at == len(words):
        return text, (), ""
    options, hashes = iter(words[at:]), []
    for word in options:
        option, eq, value = word.partition("=")
        if option != "--hash":
            return text, (), f"its option {option} is not one torchport gives pip (only --hash)"
        value = value if eq else next(options, "")
        if not _HASH.match(value):
            return text, (), f"--hash {value!r} is not ALGORITHM:HEX (sha256, sha384, sha512)"
        hashes.append(value.lower())
    return " ".join(words[:at]), tuple(hashes), ""


def _hashed(name: str, text: str, hashes: tuple[str, ...], source: str) -> tuple[str, Wanted]:
    """A requirement with ``--hash`` values: kept with them (pip checks them when it
    installs the pin, ``depinstall``) when it pins one version with ``==``, as pip's hash
    checking requires; refused with the reason otherwise, never installed unchecked."""
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        return "skipped", Wanted(name, text, source, "not a requirement pip can read")
    specs = list(requirement.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "===") or "*" in specs[0].version:
        why = "--hash needs one exact == pin (pip checks hashes of pinned versions only)"
        return "skipped", Wanted(name, text, source, why, hashes)
    if requirement.marker is not None and not requirement.marker.evaluate():
        return "skipped", Wanted(name, text, source, "its environment marker excludes this one")
    fix = companion_fix(name, text, requirement.specifier, installed_version("torch") or "")
    if fix is not None:  # the hashes are the pinned release's: no other is installed unchecked
        why = f"{fix.note.split(';')[0]}; its --hash values are that release's: not installed"
        return "skipped", Wanted(name, text, source, why, hashes)
    have = installed_version(name)
    if have is None:
        return "needed", Wanted(name, text, source, "", hashes)
    if requirement.specifier.contains(have, prereleases=True):
        return "present", Wanted(name, text, source, f"torchport's environment has {have}")
    why = f"torchport's environment has {have}, which the run uses"
    return "skipped", Wanted(name, text, source, why, hashes)


def _raw_requirement_skips(text: str, path: str) -> list[Wanted]:
    """Editable installs and local paths in a requirements file (depfiles drops them)."""
    found = []
    for number, line in requirement_lines(text):
        if _EDITABLE_OR_PATH.match(line):
            reason = "an editable install or a local path: it would build repository code"
            found.append(Wanted(line.strip(), line.strip(), f"{path}:{number}", reason))
    return found


class InvalidIdentity(ValueError):
    """The repository's own name or version is not what packaging allows; it is used in a
    path (the overlay's ``<name>-<version>.dist-info``), so it is refused, never cleaned."""

    def __init__(self, source: str, name: str, version: str, why: str) -> None:
        super().__init__(f"{source}: {why}")
        self.wanted = Wanted(
            canonical(name) if PEP508_NAME.match(name) else "(the repository itself)",
            f"{name}=={version}",
            source,
            f"the repository's own {why}: no distribution metadata is made for it",
        )


def checked_identity(name: object, version: object, source: str) -> tuple[str, str]:
    """``(name, version)`` when ``name`` is a PEP 508 name and ``version`` a PEP 440
    version (returned normalised: ``1.0-post1`` -> ``1.0.post1``), else InvalidIdentity."""
    name, version = str(name), str(version)
    if not PEP508_NAME.match(name):
        raise InvalidIdentity(source, name, version, f"name {name!r} is not a PEP 508 name")
    try:
        return name, str(Version(version))
    except InvalidVersion:
        raise InvalidIdentity(
            source, name, version, f"version {version!r} is not a PEP 440 version"
        ) from None


def _repository_text(root: Path, name: str) -> str | None:
    """A metadata file at the repository's root, read as ``safepath`` allows (a regular
    file inside it, of a bounded size), or None."""
    try:
        return read_inside(root, name).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def project_identity(root: Path) -> tuple[str, str] | None:
    """The repository's own distribution (name, version), when it declares one;
    InvalidIdentity when the name or version it declares is not a valid one."""
    text = _repository_text(root, "pyproject.toml")
    if text is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            data = {}
        for table in (data.get("project", {}), data.get("tool", {}).get("poetry", {})):
            if isinstance(table, dict) and isinstance(table.get("name"), str):
                version = table.get("version") or "0.0.0"
                return checked_identity(table["name"], version, "pyproject.toml")
    cfg = configparser.ConfigParser(interpolation=None)
    with contextlib.suppress(configparser.Error):
        cfg.read_string(_repository_text(root, "setup.cfg") or "")
    if cfg.get("metadata", "name", fallback=""):
        version = cfg.get("metadata", "version", fallback="0.0.0")
        if version.startswith(("attr:", "file:")):  # computed when built: as if not given
            version = "0.0.0"
        return checked_identity(cfg.get("metadata", "name"), version, "setup.cfg")
    return _setup_py_identity(root)


def _setup_py_identity(root: Path) -> tuple[str, str] | None:
    try:
        tree = astparse.parse(_repository_text(root, "setup.py") or "")
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            values = {
                kw.arg: kw.value.value
                for kw in node.keywords
                if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str)
            }
            if "name" in values:
                return checked_identity(values["name"], values.get("version", "0.0.0"), "setup.py")
    return None


def _optional_imports(tree: ast.Module) -> set[int]:
    """ids of import statements inside a ``try`` body: the program runs without them."""
    return {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.Try)
        for stmt in node.body
        for sub in ast.walk(stmt)
    }


def _imports(tree: ast.Module, lazy: bool = True) -> list[tuple[str, int]]:
    """(top-level module, line) of each absolute import the program cannot run without;
    without ``lazy``, only those that importing the module runs."""
    skipped = _optional_imports(tree) | (set() if lazy else lazy_imports(tree))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module, node.lineno))
    return found


def _own_modules(root: Path, python_files: list[str]) -> set[str]:
    """Names the repository itself provides: every module file and every folder on the
    way to one (a script's folder is on its sys.path, and so are the root and src/)."""
    names: set[str] = set()
    for rel in python_files:
        parts = Path(rel).parts
        names.update(parts[:-1])
        names.add(Path(parts[-1]).stem)
    return names


def _nested_only(own: set[str], search: list[Path]) -> set[str]:
    """The names of ``own`` that the program cannot import as top-level modules (no module
    or folder of that name in a folder of its path, ``search``) while something outside
    the repository has that name: a subpackage such as Liger-Kernel's
    ``liger_kernel/triton/``, whose name made its ``import triton`` read as its own."""
    return {
        name
        for name in own
        if not any((p / name).is_dir() or (p / f"{name}.py").is_file() for p in search)
        and (known_distribution(name) is not None or _installed_module(name))
    }


def _installed_module(name: str) -> bool:
    """Whether torchport's environment has a top-level module ``name``. Only a plain
    identifier is looked up (a dotted one would import its parent), never ``__main__``
    (whose spec is whatever started this process: None under a test runner's workers)."""
    if not name.isidentifier() or name == "__main__":
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _with_asserted(
    dep: Dependency, source: str, asserted: dict[str, Asserted]
) -> tuple[Dependency, str]:
    """``dep`` pinned to the version the code asserts of it, when it asserts one that the
    declared specifier admits (a conflicting declaration is kept: pip says which fails)."""
    found = asserted.get(canonical(dep.name))
    if found is None or _URL.search(dep.spec) or dep.spec.strip().startswith("-"):
        return dep, source
    try:
        declared = Requirement(f"{dep.name}{dep.spec}")
        if not declared.specifier.contains(found.version, prereleases=True):
            return dep, source
    except (InvalidRequirement, InvalidVersion):
        return dep, source
    extras = f"[{','.join(sorted(declared.extras))}]" if declared.extras else ""
    spec = f"{extras}=={found.version}"
    return dataclasses.replace(dep, spec=spec), f"{source} (version: {found.source})"


def _imports_read(
    python: list[tuple[str, ast.Module]], root: Path, reached: Reached | None
) -> list[tuple[str, str, int, bool]]:
    """(module, file, line, lazy only) of the imports that decide the requirements: without
    ``reached``, all of every file; with it, those the reached modules run (the program's
    own all), then, marked lazy, the ones inside their functions."""
    run, lazy = [], []
    for rel, tree in python:
        path = (root / rel).resolve()
        if reached is None or path == reached.main:
            run += [(m, rel, line, False) for m, line in _imports(tree)]
        elif path in reached.files:
            eager = _imports(tree, lazy=False)
            run += [(m, rel, line, False) for m, line in eager]
            lazy += [(m, rel, line, True) for m, line in _imports(tree) if (m, line) not in eager]
    return run + lazy


def _runtimes(
    declared: list[tuple[Dependency, str]], names: set[str]
) -> list[tuple[Dependency, str]]:
    """The providers of the shared libraries that declared wheels load at run time (an MPI
    for mpi4py), each unless the repository names it or another provider itself."""
    found = []
    for dep, source in declared:
        providers = runtime_of(canonical(dep.name))
        if providers and not names & set(providers):
            why = f"the shared library {dep.name}'s wheel loads at run time ({source})"
            found.append((Dependency(providers[0], "", dep.path, dep.line, False), why))
            names.add(providers[0])
    return found


def _importable(known: tuple[str, str] | None, top: str) -> bool:
    """Whether torchport's environment already has what an import needs: its top-level
    module, or for a submodule that needs a distribution of its own
    (``torch.utils.tensorboard``), that distribution."""
    if known is not None and "." in known[0]:
        return installed_version(known[1]) is not None
    return importlib.util.find_spec(top) is not None


def _asserted(python: list[tuple[str, ast.Module]], own: set[str]) -> dict[str, Asserted]:
    """Distribution -> the version the code asserts of it (the first assert read), for the
    modules that are not the repository's own."""
    found: dict[str, Asserted] = {}
    for rel, tree in python:
        for item in asserted_versions(tree, rel):
            if item.module in own or item.module in sys.stdlib_module_names:
                continue
            known = known_distribution(item.module)
            found.setdefault(canonical(known[1] if known else item.module), item)
    return found


def resolve(root: Path, program: list[str] | None = None) -> Resolution:
    """The requirements of the repository at ``root`` (read only; nothing is run).

    With ``program`` (the entry as ``program_argv`` gives it), undeclared imports are read
    only from the modules the entry reaches (``reachable``): every import of the program
    itself (its ``main()`` runs), and those of the modules it imports that importing them
    runs. An import inside a library function is that function's lazy, optional need (an
    export backend, a logger): listed as skipped (``LAZY_ONLY``), so that a run that does
    reach it is not-runnable with the package named. Without a program, or when the entry
    is no Python file of the repository, every import of every Python file counts."""
    catalogue = load_catalogue()
    rules = [catalogue.by_code[c] for c in CUDA_ONLY_RULES]
    cuda_imports = list(catalogue.by_code["TPP001"].match.get("import", []))
    resolution = Resolution()
    try:
        resolution.project = project_identity(root)
    except InvalidIdentity as exc:
        resolution.skipped.append(exc.wanted)
    declared: list[tuple[Dependency, str]] = []
    python: list[tuple[str, ast.Module]] = []
    trees: dict[Path, ast.Module] = {}
    for f in walk_repo(root, []):
        try:
            text = read_text(read_regular(f.path), f.kind).text
        except (OSError, Unscannable):
            continue
        if f.kind in DEPENDENCY_FILE_KINDS:
            deps = dependencies_in_text(f.kind, text, f.rel, rules, main_only=True)
            declared += [(d, f"{f.rel}:{d.line}") for d in deps]
            if f.kind == "requirements":
                resolution.skipped += _raw_requirement_skips(text, f.rel)
        elif f.kind == "python":
            try:
                tree = parse_python(text, f.rel)
            except Unscannable:
                # PyTorch 0.3's ``x.cuda(async=True)``: read as the runs see it, renamed
                fixed = legacy_keyword.repaired(text)
                if fixed is None:
                    continue
                tree = parse_python(fixed.text, f.rel)
            python.append((f.rel, tree))
            trees[f.path.resolve()] = tree
            if f.rel.rsplit("/", 1)[-1] == "setup.py":
                deps = dependencies_in_setup_py(tree, f.rel, rules, main_only=True)
                declared += [(d, f"{f.rel}:{d.line}") for d in deps]
    own = _own_modules(root, [rel for rel, _ in python])
    names = {canonical(d.name) for d, _ in declared}
    if resolution.project:
        names.add(canonical(resolution.project[0]))
    asserted = _asserted(python, own)
    reached = reachable_files(root, program, trees.get) if program else None
    if reached is not None:
        own -= _nested_only(own, [reached.main.parent, *layout_paths(root.resolve())])
    for module, rel, line, lazy in _imports_read(python, root, reached):
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top in own or top == "__future__":
            continue
        known = known_distribution(module)
        dist = canonical(known[1] if known else top)
        if known is None or "." not in known[0]:
            resolution.import_names[top] = dist
        if dist in names:
            continue
        names.add(dist)
        source = f"import {module} in {rel}:{line}"
        if _cuda_only_import(module, cuda_imports):
            declared.append((Dependency(dist, "", rel, line, True), source))
        elif _importable(known, top):
            continue
        elif lazy:
            resolution.skipped.append(Wanted(dist, dist, source, LAZY_ONLY))
        elif known is None:
            resolution.skipped.append(Wanted(dist, dist, source, UNDECLARED))
        else:
            declared.append((Dependency(dist, "", rel, line, False), source))
    declared = [_with_asserted(dep, source, asserted) for dep, source in declared]
    declared += _runtimes(declared, names)
    seen: set[tuple[str, str]] = set()
    for dep, source in declared:
        kind, wanted = _classify(dep, source)
        if (kind, wanted.requirement) in seen:
            continue
        seen.add((kind, wanted.requirement))
        getattr(resolution, kind).append(wanted)
    return resolution


def requirements_file(path: Path) -> Resolution:
    """``--deps FILE``: that requirements file instead of what the repository declares."""
    rules = [load_catalogue().by_code[c] for c in CUDA_ONLY_RULES]
    text = path.read_text(encoding="utf-8")
    resolution = Resolution(skipped=_raw_requirement_skips(text, path.name))
    for dep in dependencies_in_text("requirements", text, path.name, rules):
        kind, wanted = _classify(dep, f"{path.name}:{dep.line}")
        getattr(resolution, kind).append(wanted)
    return resolution
