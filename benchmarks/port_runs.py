"""Whether a port runs: the human's and torchport's trees, side by side, in the sandbox.

Used by ``human_ports.py --runs``. Most of the human ports are libraries with no entry
command, so what runs is what every user of the library runs first: importing each module
the human changed, in one sandboxed process per tree, on an emulated accelerator
(``torch.accelerator`` answers a device: the ported code paths are the ones taken) and on
plain CPU torch (no accelerator: the fallbacks are taken). A port with an entry command
also runs it for a few optimizer steps in both modes. The two trees get the same
dependencies (an overlay installed once from the human tree's requirements, as a
verification would) and the same budget, so a module that cannot run here (a package the
index lacks, a model hub download) fails alike in both and is reported as such, not as
the port's fault.

Importing runs a module's top level only, not its functions: a name unbound inside a
function is not seen here (the semantic guard and pyflakes check those statically).
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

from torchport.agents.environment import prepare_environment
from torchport.sandbox.harness import RunError, RunSpec, run

RUNNER = "_torchport_import_check.py"
MARK = "TORCHPORT-IMPORTS "
MODES = ("tpu", "plain")  # an emulated accelerator; plain CPU torch (none)
TIMEOUT_S = 240.0
MEMORY_MB = 6144


PACKAGE_ROOT = re.compile(r"""["']src["']|where\s*=\s*\[?\s*["']?src\b""")


def src_layout(tree: Path) -> bool:
    """Whether ``src/`` holds the top-level packages (its packaging says so: ``package_dir``
    or ``where`` naming ``src``); otherwise ``src`` is a package of its own (FP-Quant)."""
    if not (tree / "src").is_dir():
        return False
    for name in ("setup.py", "setup.cfg", "pyproject.toml"):
        path = tree / name
        if path.is_file() and PACKAGE_ROOT.search(path.read_text(errors="replace")):
            return True
    return False


def module_name(rel: str, src_root: bool = False) -> str | None:
    """``src/pkg/mod.py`` -> ``pkg.mod`` in a src layout (``src.pkg.mod`` otherwise);
    None where no import statement can name it."""
    parts = rel.removesuffix(".py").split("/")
    if parts[0] == "src" and len(parts) > 1 and src_root:
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    ok = parts and all(p.isidentifier() and not keyword.iskeyword(p) for p in parts)
    return ".".join(parts) if ok else None


def runner_source(modules: list[str], src_root: bool) -> str:
    """A program that imports each module in turn and prints what happened, one JSON line.

    Plain ``import`` statements (not ``importlib`` on a list) so that dependency resolution,
    which reads what the entry reaches, sees the modules and their imports."""
    lines = ["import json, sys, os", "RESULTS = {}"]
    if src_root:
        lines.append("sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'src'))")
    for name in modules:
        lines += [
            "try:",
            f"    import {name}",
            f"    RESULTS[{name!r}] = 'ok'",
            "except BaseException as error:  # a failing module must not stop the others",
            f"    RESULTS[{name!r}] = f'{{type(error).__name__}}: {{error}}'[:240]",
        ]
    # one short line per module, failures last: the harness keeps only the output's tail
    lines.append("for name, outcome in sorted(RESULTS.items(), key=lambda i: i[1] != 'ok'):")
    lines.append(f"    print({MARK!r} + json.dumps([name, outcome[:150]]), flush=True)")
    return "\n".join(lines) + "\n"


@dataclass
class TreeRuns:
    """One tree's outcome in one mode: per module ``ok`` or the error, and the entry's."""

    imports: dict[str, str] = field(default_factory=dict)
    entry: str = ""  # "" when there is no entry; "ok" or the error otherwise
    error: str = ""  # the import run itself did not report (crash, timeout)


def _one_line(result: dict) -> str:
    error = result.get("error") or {}
    text = f"{error.get('type', result['status'])}: {error.get('message', '')}".strip()
    return text.splitlines()[0][:240] if text else result["status"]


def _run(tree: Path, command: list[str], mode: str, site_paths: tuple[Path, ...]) -> dict:
    """One sandboxed run of ``command`` in ``tree``, a few steps long; a harness that cannot
    start is a failed run."""
    spec = RunSpec(
        root=tree,
        command=command,
        mode=mode,
        steps=3,
        forwards=3,
        timeout_s=TIMEOUT_S,
        memory_mb=MEMORY_MB,
        site_paths=site_paths,
    )
    try:
        return run(spec).to_json()
    except RunError as exc:
        return {"status": "failed", "error": {"type": "RunError", "message": str(exc)}}


def _imports(tree: Path, modules: list[str], mode: str, site_paths: tuple[Path, ...]) -> TreeRuns:
    (tree / RUNNER).write_text(runner_source(modules, src_layout(tree)), encoding="utf-8")
    try:
        result = _run(tree, ["python", RUNNER], mode, site_paths)
    finally:
        (tree / RUNNER).unlink(missing_ok=True)
    reported = dict(
        json.loads(line[len(MARK) :])
        for line in (result.get("stdout_tail") or "").splitlines()
        if line.startswith(MARK)
    )
    if not reported:
        return TreeRuns(error=_one_line(result))
    return TreeRuns(imports={m: reported.get(m, "not reported (output cut)") for m in modules})


def _entry(tree: Path, command: list[str], mode: str, site_paths: tuple[Path, ...]) -> str:
    result = _run(tree, command, mode, site_paths)
    return "ok" if result["status"] == "ok" else _one_line(result)


def environment(tree: Path, modules: list[str], entry: list[str] | None) -> tuple[Path, ...]:
    """The dependency overlay both trees use, resolved from what the checks reach."""
    (tree / RUNNER).write_text(runner_source(modules, src_layout(tree)), encoding="utf-8")
    try:
        record = prepare_environment(tree, "auto", entry=entry or ["python", RUNNER])
    finally:
        (tree / RUNNER).unlink(missing_ok=True)
    return tuple(Path(p) for p in [record.get("path"), *record.get("site_paths", [])] if p)


def check(
    trees: dict[str, Path], files: list[str], entry: list[str] | None
) -> dict[str, dict[str, TreeRuns]]:
    """``{tree name: {mode: TreeRuns}}`` for the modules of ``files`` and the entry."""
    src_root = src_layout(trees["human"])
    modules = sorted({m for f in files if (m := module_name(f, src_root))})
    site_paths = environment(trees["human"], modules, entry)
    out: dict[str, dict[str, TreeRuns]] = {}
    for name, tree in trees.items():
        out[name] = {}
        for mode in MODES:
            runs = _imports(tree, modules, mode, site_paths) if modules else TreeRuns()
            if entry:
                runs.entry = _entry(tree, entry, mode, site_paths)
            out[name][mode] = runs
    return out


def verdict(human: TreeRuns, ported: TreeRuns) -> tuple[int, int, list[str], list[str]]:
    """(checks the human's port passes, of those the torchport port passes too, the ones
    it fails with torchport's error, the checks the human's port fails with its error)
    for one mode."""
    passed = both = 0
    regressions: list[str] = []
    unrunnable = [f"{m}: {mine}" for m, mine in human.imports.items() if mine != "ok"]
    if human.error:
        unrunnable.append(f"imports: {human.error}")
    if human.entry and human.entry != "ok":
        unrunnable.append(f"entry: {human.entry}")
    missing = ported.error or "not run"
    checks = [(m, mine, ported.imports.get(m, missing)) for m, mine in human.imports.items()]
    if human.entry:
        checks.append(("entry", human.entry, ported.entry))
    for name, mine, theirs in checks:
        if mine != "ok":
            continue
        passed += 1
        if theirs == "ok":
            both += 1
        else:
            regressions.append(f"{name}: {theirs}")
    return passed, both, regressions, unrunnable
