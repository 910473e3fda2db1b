"""Audit torchport's ``tpu`` ports for what real TorchTPU refuses, statically.

Issue 30's acceptance: a port torchport writes for ``tpu`` must use no ``torch.tpu`` API the
torch-tpu wheel marks internal for the installed torch, no rank-indexed device (each TorchTPU
process sees one core, ``tpu:0``), and none of the variables TorchTPU writes itself
(``TPU_VISIBLE_CHIPS``, the ``*_BOUNDS``...). The facts come from
``sandbox/data/torch_tpu.toml`` (``torchport.sandbox.torchtpu_facts``), never restated here.

Given migrated output folders (``torchport migrate --target tpu --out DIR``), it reads their
Python (and notebooks' code cells) as syntax trees, and their shell scripts, Makefiles and
YAML as text, and finds:

- ``internal-api``: ``torch.tpu.<name>`` internal under the installed torch (also imported
  ``from torch.tpu``, or through ``torch.get_device_module("tpu")``);
- ``indexed-device``: a tpu device with an index other than a literal 0:
  ``torch.device("tpu", local_rank)``, ``f"tpu:{rank}"``, ``"tpu:" + str(rank)``,
  ``"tpu:{}".format(r)``, ``"tpu:%d" % r``, ``"tpu:1"``, ``set_device_index(local_rank)``,
  ``torch.accelerator.device_index(i)``, ``torch.tpu.set_device(i)``; in scripts ``tpu:$RANK``;
- ``ddp-device-ids``: ``DistributedDataParallel(..., device_ids=..., output_device=...)``
  (one device per process: DDP takes the module's device);
- ``torchtpu-env``: ``TPU_VISIBLE_CHIPS`` or another variable TorchTPU writes itself.

Comments and docstrings are not code and are not searched. Prints one row per folder; exits
1 when anything is found, 2 on bad input.

    python benchmarks/tpu_api_audit.py OUT_DIR [OUT_DIR ...] [--json] [--findings]
    python benchmarks/tpu_api_audit.py --migrate WORK [--only corpus,cuda_mnist,...]

``--migrate WORK`` first ports the benchmark set to tpu under WORK (rules only, no
verification) and audits each: every case of tests/fixtures/corpus, examples/cuda_mnist,
the originals of the human-port benchmark (benchmarks/human_ports.py) and the real
repositories of benchmarks/realworld.py (both from the snapshots under $TORCHPORT_MIRRORS).
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import itertools
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from torchport.sandbox import torchtpu_facts

KINDS = ("internal-api", "indexed-device", "ddp-device-ids", "torchtpu-env")
SKIP_DIRS = frozenset({"torchport-report", ".git", "__pycache__", ".venv", "venv", "node_modules"})
SHELL_FILE = re.compile(r"\.(sh|bash|zsh|mk)$|^(Makefile|GNUmakefile|makefile)(\..*)?$")
YAML_FILE = re.compile(r"\.ya?ml$")
TEXT_FILE = re.compile(f"{SHELL_FILE.pattern}|{YAML_FILE.pattern}")

# calls whose first argument selects a device by index (one device per process on TorchTPU)
INDEX_SETTERS = frozenset(
    {
        "torch.accelerator.set_device_index",
        "torch.accelerator.set_device_idx",
        "torch.accelerator.device_index",
        "torch.tpu.set_device",
        "torch.tpu.device",
    }
)
DDP_NAMES = frozenset(
    {"torch.nn.parallel.DistributedDataParallel", "torch.nn.DistributedDataParallel"}
)
DDP_DEVICE_KEYWORDS = ("device_ids", "output_device")
INDEXED_STRING = re.compile(r"^tpu:(\d+)$")
# the process's own device index: always 0 on TorchTPU, so not a rank-indexed device
CURRENT_INDEX = frozenset(
    {"torch.accelerator.current_device_index", "torch.accelerator.current_device_idx"}
)


@dataclass(frozen=True)
class Finding:
    kind: str
    path: str  # relative to the audited folder
    line: int
    text: str  # the code found, shortened


@dataclass
class FolderAudit:
    label: str
    folder: str
    files: int = 0
    unparsed: list[str] = field(
        default_factory=list
    )  # Python that does not parse (scanned as text)
    findings: list[Finding] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = Counter(f.kind for f in self.findings)
        return {kind: found.get(kind, 0) for kind in KINDS}


@dataclass(frozen=True)
class Facts:
    """What the audit looks for, from the torch-tpu facts for one torch version."""

    internal: frozenset[str]
    env: frozenset[str]

    @classmethod
    def for_torch(cls, torch_version: str) -> Facts:
        environment = torchtpu_facts.section("environment")
        written = set(environment["written_by_torchtpu"])
        return cls(frozenset(torchtpu_facts.internal_for(torch_version)), frozenset(written))

    def text_patterns(self) -> dict[str, re.Pattern[str]]:
        """The searches in shell scripts, Makefiles and YAML, by finding kind."""
        patterns = {
            "indexed-device": re.compile(r"\btpu:(?:0*[1-9]\d*\b|\$|\{|%)"),
            "torchtpu-env": re.compile(r"\b(?:" + "|".join(sorted(self.env)) + r")\b"),
        }
        if self.internal:
            names = "|".join(sorted(self.internal))
            patterns["internal-api"] = re.compile(r"\btorch\.tpu\.(?:" + names + r")\b")
        return patterns


def installed_torch() -> str:
    """The installed torch's version, without importing it (``2.13.0+cpu``)."""
    return importlib.metadata.version("torch")


# --- Python ---------------------------------------------------------------------------------


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local names bound by imports -> the dotted names they stand for."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names.setdefault(top, top)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Call) and _device_module_of(node, aliases) == "tpu":
        head = "torch.tpu"  # torch.get_device_module("tpu").X
    elif isinstance(node, ast.Name):
        head = aliases.get(node.id, node.id)
    else:
        return None
    return ".".join([head, *reversed(parts)])


def _device_module_of(call: ast.Call, aliases: dict[str, str]) -> str | None:
    if _dotted(call.func, aliases) != "torch.get_device_module" or not call.args:
        return None
    first = call.args[0]
    return first.value if isinstance(first, ast.Constant) else None


def _literal_zero(node: ast.AST | None) -> bool:
    return node is None or (isinstance(node, ast.Constant) and node.value in (0, None))


def _process_index(node: ast.AST | None, aliases: dict[str, str]) -> bool:
    """0, None, the process's current index (``torch.accelerator.current_device_index()``) or
    the device of a tensor that already exists (``x.device``): none of them is a rank's."""
    if isinstance(node, ast.Call):
        return _dotted(node.func, aliases) in CURRENT_INDEX
    if isinstance(node, ast.Attribute):
        return node.attr == "device"
    return _literal_zero(node)


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


class _PythonAudit:
    """One Python source: every finding, by walking its syntax tree once."""

    def __init__(self, tree: ast.AST, source: str, facts: Facts) -> None:
        self.tree, self.lines, self.facts = tree, source.splitlines(), facts
        self.aliases = _aliases(tree)
        self.skip = _docstrings(tree)
        self.env = re.compile(r"\b(?:" + "|".join(sorted(facts.env)) + r")\b")

    def findings(self) -> Iterator[tuple[str, ast.AST]]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module == "torch.tpu":
                for alias in node.names:
                    if alias.name in self.facts.internal:
                        yield "internal-api", node
            elif isinstance(node, ast.Attribute):
                name = _dotted(node, self.aliases) or ""
                if name.startswith("torch.tpu.") and name[10:] in self.facts.internal:
                    yield "internal-api", node
            elif isinstance(node, ast.Call):
                yield from self._call(node)
            elif self._built_indexed(node, self.aliases):
                yield "indexed-device", node
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in self.skip:
                    continue
                match = INDEXED_STRING.match(node.value)
                if match and int(match.group(1)) != 0:
                    yield "indexed-device", node
                if self.env.search(node.value):
                    yield "torchtpu-env", node

    def _call(self, node: ast.Call) -> Iterator[tuple[str, ast.AST]]:
        name = _dotted(node.func, self.aliases) or ""
        keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        if name == "torch.device":
            kind = node.args[0] if node.args else keywords.get("type")
            index = node.args[1] if len(node.args) > 1 else keywords.get("index")
            tpu = isinstance(kind, ast.Constant) and kind.value == "tpu"
            if tpu and not _process_index(index, self.aliases):
                yield "indexed-device", node
        elif name in INDEX_SETTERS:
            index = node.args[0] if node.args else keywords.get("device")
            if not _process_index(index, self.aliases):
                yield "indexed-device", node
        elif name in DDP_NAMES or name.rsplit(".", 1)[-1] == "DistributedDataParallel":
            given = [keywords.get(k) for k in DDP_DEVICE_KEYWORDS] + node.args[1:3]
            if any(value is not None and not _literal_zero(value) for value in given):
                yield "ddp-device-ids", node
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            head = node.func.value
            if isinstance(head, ast.Constant) and "tpu:{" in str(head.value):
                yield "indexed-device", node

    @staticmethod
    def _built_indexed(node: ast.AST, aliases: dict[str, str]) -> bool:
        """``f"tpu:{r}"``, ``"tpu:" + str(r)``, ``"tpu:%d" % r``."""
        if isinstance(node, ast.JoinedStr):
            return any(
                isinstance(part, ast.Constant)
                and str(part.value).endswith("tpu:")
                and isinstance(after, ast.FormattedValue)
                and not _process_index(after.value, aliases)
                for part, after in itertools.pairwise(node.values)
            )
        if not isinstance(node, ast.BinOp):
            return False
        left = node.left
        if not (isinstance(left, ast.Constant) and isinstance(left.value, str)):
            return False
        if isinstance(node.op, ast.Add):
            return left.value.endswith("tpu:")
        return isinstance(node.op, ast.Mod) and "tpu:%" in left.value

    def line_text(self, node: ast.AST) -> tuple[int, str]:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return line, text[:160]


def audit_python(source: str, facts: Facts) -> list[tuple[str, int, str]] | None:
    """(kind, line, text) for each finding in ``source``; None when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    audit = _PythonAudit(tree, source, facts)
    found = []
    for kind, node in audit.findings():
        line, text = audit.line_text(node)
        found.append((kind, line, text))
    return sorted(set(found), key=lambda f: (f[1], f[0]))


def audit_text(source: str, facts: Facts, comment: str = "#") -> list[tuple[str, int, str]]:
    """(kind, line, text) for each finding in a shell script, Makefile or YAML file."""
    found = []
    patterns = facts.text_patterns()
    for number, raw in enumerate(source.splitlines(), 1):
        code = re.split(rf"(?:^|\s){re.escape(comment)}", raw, maxsplit=1)[0]
        for kind, pattern in patterns.items():
            if pattern.search(code):
                found.append((kind, number, raw.strip()[:160]))
    return found


def notebook_cells(source: str) -> Iterator[str]:
    """The code cells of a notebook, IPython magics and shell lines blanked (lines kept)."""
    try:
        cells = json.loads(source).get("cells", [])
    except (ValueError, AttributeError):
        return
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            text = cell.get("source", "")
            text = "".join(text) if isinstance(text, list) else str(text)
            yield "\n".join("" if ln.lstrip()[:1] in "%!" else ln for ln in text.splitlines())


# --- folders ---------------------------------------------------------------------------------


def _files(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part in SKIP_DIRS for part in rel.parts[:-1]) or not path.is_file():
            continue
        if path.suffix in (".py", ".ipynb") or TEXT_FILE.search(path.name):
            yield path


def audit_folder(folder: Path, facts: Facts, label: str | None = None) -> FolderAudit:
    """Every finding in one migrated output folder."""
    result = FolderAudit(label or folder.name, str(folder))
    for path in _files(folder):
        rel = str(path.relative_to(folder))
        source = path.read_text(encoding="utf-8", errors="replace")
        result.files += 1
        if path.suffix == ".py":
            found = audit_python(source, facts)
            if found is None:
                result.unparsed.append(rel)
                found = audit_text(source, facts)
        elif path.suffix == ".ipynb":
            found = []
            for cell in notebook_cells(source):
                found += audit_python(cell, facts) or audit_text(cell, facts)
        else:
            found = audit_text(source, facts)
        result.findings += [Finding(kind, rel, line, text) for kind, line, text in found]
    return result


def table(audits: Iterable[FolderAudit]) -> str:
    head = "| repository | files | " + " | ".join(KINDS) + " | total |"
    lines = [head, "|" + " --- |" * (len(KINDS) + 3)]
    for audit in audits:
        counts = audit.counts()
        cells = " | ".join(str(counts[k]) for k in KINDS)
        lines.append(f"| {audit.label} | {audit.files} | {cells} | {sum(counts.values())} |")
    return "\n".join(lines)


def details(audits: Iterable[FolderAudit]) -> str:
    lines = []
    for audit in audits:
        for f in audit.findings:
            lines.append(f"{audit.label}: {f.path}:{f.line}: {f.kind}: {f.text}")
        for rel in audit.unparsed:
            lines.append(f"{audit.label}: {rel}: not Python 3 (searched as text)")
    return "\n".join(lines)


# --- the benchmark set -----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("corpus", "cuda_mnist", "human_ports", "realworld")


def _benchmark_sources(work: Path, only: set[str]) -> Iterator[tuple[str, Path]]:
    """(label, folder to migrate) for each part of the benchmark set in ``only``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if "corpus" in only:
        for case in sorted((ROOT / "tests" / "fixtures" / "corpus").iterdir()):
            if case.is_dir():
                yield f"corpus/{case.name}", case
    if "cuda_mnist" in only:
        yield "examples/cuda_mnist", ROOT / "examples" / "cuda_mnist"
    if "human_ports" in only:
        import human_ports
        from realworld import MIRRORS, extract, mirrors_of

        for port in human_ports.PORTS:
            gitdir = mirrors_of(MIRRORS) / port.repo.replace("/", "+") / "repo"
            if gitdir.is_dir():
                dest = work / "src" / f"{port.slug}-original"
                extract(gitdir, port.parent, dest)
                yield f"{port.repo}#{port.pr}", dest
            else:
                print(f"not fetched: {port.repo} (no snapshot at {gitdir})", file=sys.stderr)
    if "realworld" in only:
        from realworld import MIRRORS, REPOS, extract, mirrors_of

        for repo in REPOS:
            gitdir = mirrors_of(MIRRORS) / repo.name.replace("/", "+") / "repo"
            if not gitdir.is_dir():
                print(f"not fetched: {repo.name} (no snapshot at {gitdir})", file=sys.stderr)
                continue
            dest = work / "src" / repo.title.replace("/", "-").replace(" ", "-")
            extract(gitdir, repo.commit, dest)
            yield repo.title, dest / repo.folder


def migrate_benchmarks(work: Path, only: set[str], facts: Facts) -> list[FolderAudit]:
    """Port each source to tpu under ``work`` (rules only, no verification), then audit it."""
    import shutil
    import subprocess

    audits = []
    torchport = [sys.executable, "-m", "torchport.cli"]
    for label, source in _benchmark_sources(work, only):
        out = work / "out" / re.sub(r"[^\w.-]+", "-", label)
        shutil.rmtree(out, ignore_errors=True)
        command = [*torchport, "migrate", str(source), "--target", "tpu", "--out", str(out)]
        command += ["--llm", "none", "--no-verify", "--quiet", "--exit-zero"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        if not out.is_dir():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            print(f"{label}: migrate failed (exit {done.returncode}): {tail[0]}", file=sys.stderr)
            continue
        audits.append(audit_folder(out, facts, label))
        print(table(audits[-1:]).splitlines()[-1], file=sys.stderr)
    return audits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, help="migrated tpu output folders")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--findings", action="store_true", help="list every finding")
    parser.add_argument("--torch", help="torch version to judge against (default: installed)")
    parser.add_argument("--migrate", type=Path, metavar="WORK", help="port the benchmark set")
    parser.add_argument(
        "--only", default=",".join(SOURCES), help="with --migrate: " + "|".join(SOURCES)
    )
    args = parser.parse_args(argv)
    if not args.folders and not args.migrate:
        parser.error("give migrated output folders, or --migrate WORK")
    for folder in args.folders:
        if not folder.is_dir():
            print(f"tpu_api_audit: not a folder: {folder}", file=sys.stderr)
            return 2
    only = {part.strip() for part in args.only.split(",") if part.strip()}
    if unknown := only - set(SOURCES):
        print(
            f"tpu_api_audit: unknown --only part(s) {sorted(unknown)}; expected {SOURCES}",
            file=sys.stderr,
        )
        return 2
    facts = Facts.for_torch(args.torch or installed_torch())
    audits = [audit_folder(folder, facts) for folder in args.folders]
    if args.migrate:
        audits += migrate_benchmarks(args.migrate, only, facts)
    if args.json:
        print(json.dumps([asdict(a) | {"counts": a.counts()} for a in audits], indent=2))
    else:
        print(table(audits))
        if args.findings and (listing := details(audits)):
            print(listing)
    return 1 if any(a.findings for a in audits) else 0


if __name__ == "__main__":
    sys.exit(main())
