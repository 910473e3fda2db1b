"""Compare torchport's ``accelerator`` port with ports that maintainers merged by hand.

Not part of ``make test``: it needs the snapshots of the repositories below fetched first
(``fetch github:OWNER/NAME`` puts them under ``/work/.mirror``; DEVELOPERS.md says how) and
migrates whole repositories (about a minute each on one core). Each entry is a merged public
pull request in which people replaced CUDA-only code (``torch.cuda.*``, ``.cuda()``, ``"cuda"``
device strings, CUDA-only AMP) with ``torch.accelerator`` or another device-agnostic form. The
PR's parent commit is the original, the merge (or squashed) commit is the human port. The
original is migrated with ``torchport migrate --target accelerator --llm none --no-verify``;
neither tree is kept in this checkout (their code is not ours to commit).

    python benchmarks/human_ports.py                      # every port
    python benchmarks/human_ports.py --only accelerate --files --json rows.json

Compared per file the human changed that holds CUDA statements, statement by statement:
every statement (a compound one by its header, docstrings left out) normalised with
``ast.unparse``, so quoting, wrapping and comments do not count. A statement of the original
is *changed* by a port when the port's file no longer holds it (as a multiset). Per row:

- human CUDA: the original's CUDA statements the human changed; ``also``: how many of
  those torchport changed too (the share is the benchmark's coverage);
- extra: statements torchport changed that the human kept, in those files; ``other files``:
  files the human did not touch that torchport rewrote;
- residue: ``torch.cuda``, ``.cuda(``, ``'cuda'`` left in the original / human / torchport;
- lines: lines added plus removed by the human and by torchport in those files.

With ``--runs``, whether each runs (``port_runs.py`` says how): every module the human
changed is imported, and the entry command run where there is one, in the human's tree and
in torchport's, on an emulated accelerator and on plain CPU torch; ``runs`` counts the
checks the human's port passes and how many of those torchport's passes too.
"""

from __future__ import annotations

import argparse
import ast
import copy
import difflib
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import port_runs  # sibling scripts, not a package
from realworld import MIRRORS, extract, mirrors_of


@dataclass(frozen=True)
class Port:
    repo: str  # owner/name, as fetched
    pr: int
    title: str
    parent: str  # the original
    commit: str  # the human port (merge or squashed commit)
    # the human's files with CUDA statements: a path, or a folder ending in "/" for every
    # Python file the human changed under it
    files: tuple[str, ...]
    entry: str | None = None
    # files a build step generates (setuptools-scm's version.py), written into both trees
    # before --runs: (path, text)
    generated: tuple[tuple[str, str], ...] = ()

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}/pull/{self.pr}"

    @property
    def slug(self) -> str:
        return f"{self.repo.replace('/', '-')}-{self.pr}"


# setuptools-scm writes it at build time; the package imports __version__ from it
SCM_VERSION = (
    "src/llmcompressor/version.py",
    '__version__ = version = "0.0.0"\n__version_tuple__ = version_tuple = (0, 0, 0)\n',
)

PORTS: tuple[Port, ...] = (
    Port(
        "nrflynn2/ml-drug-discovery",
        28,
        "refactor(CH12): hardware-agnostic accelerator detection",
        "1643fb23795d961e9da983177d527bfaffb91316",
        "072ed1db9b88202c5ee1f5a2e2b2eb85bbda13e6",
        ("CH12_FLYNN_ML4DD/src/utils.py",),
    ),
    Port(
        "Ancientea/CannotMax",
        44,
        "feat: support torch xpu training",
        "7c990abf7b03cb7ac23144bff9b2b019c2512e6d",
        "4d524a473cb219ab5924fa65664a9f22719f6333",
        ("train.py", "predict.py"),
        entry="python train.py",
    ),
    Port(
        "meta-pytorch/autoparallel",
        434,
        "Add preliminary XPU support using `torch.accelerator`",
        "0896730520159395c7296578bfc91546706bfc24",
        "d3612e8e064353066fc8e10addf3b2f749202e0f",
        (
            "autoparallel/cost_models/compute_estimation.py",
            "autoparallel/graph_passes/autobucketing_inductor/estimation_utils.py",
        ),
    ),
    Port(
        "IST-DASLab/FP-Quant",
        11,
        "enable FP_Qaunt on xpu, validated",
        "0a9389ee3d37b849220b030c50a53b85b42f9094",
        "617317dd0c87318d3863490e9fdbf998567b9f53",
        ("inference_lib/src/", "model_quant.py", "src/quantization/", "src/transforms/"),
    ),
    Port(
        "vllm-project/llm-compressor",
        1736,
        "Enable xpu device",
        "ec07a8318c129fd26496e3819935924b59bcfb84",
        "6af07785e15c597f3c1f2330ee41a2b6f5ea2ac2",
        ("examples/", "src/"),
        generated=(SCM_VERSION,),
    ),
    Port(
        "vllm-project/llm-compressor",
        2611,
        "Replace `torch.cuda` with `torch.accelerator` and add XPU emulation tests",
        "30845208edb975b44f8f7d8828b3c1f9465c9ed5",
        "a30f74a7562f2b6d3b8c49bfe49986cf72999364",
        ("src/",),
        generated=(SCM_VERSION,),
    ),
    Port(
        "vllm-project/llm-compressor",
        2884,
        "Replace torch.cuda with torch.accelerator in main code path.",
        "e48fec881f1394b18fa56969d555c79b9278be8e",
        "49e51709818b4437a1eeaccd39096402c34680ef",
        ("src/llmcompressor/pipelines/cache.py", "tools/collect_env.py"),
        generated=(SCM_VERSION,),
    ),
    Port(
        "vllm-project/speculators",
        819,
        "refactor: replace torch.cuda.synchronize() with device-agnostic"
        " torch.accelerator.synchronize()",
        "2190f10323550864464eeb527b8a08c4b8d41b86",
        "b8d5a8b577dd92892fc9adbb5f4d22649c1a0658",
        ("src/speculators/train/trainer.py",),
    ),
    Port(
        "huggingface/accelerate",
        3588,
        "add device-agnostic GradScaler",
        "07f2392f40a92710b4fb7e51b2de1d40f24d44e2",
        "43526c5c089cc831530f42bbbe66a0cb0b0ea461",
        (
            "src/accelerate/checkpointing.py",
            "src/accelerate/optimizer.py",
            "src/accelerate/utils/dataclasses.py",
        ),
    ),
    Port(
        "huggingface/accelerate",
        3890,
        "enhance new codes to XPU, and make them be device agnostic",
        "363816a8ad733ae53a18a4c49de2570ffff0fd27",
        "00e4d264f66d9694ba6116a0dbe7ecec83655b43",
        ("benchmarks/", "examples/", "src/"),
    ),
)

# what a port should leave no trace of (the definition of residue)
RESIDUE = re.compile(r"torch\.cuda\b|\.cuda\(|f?'cuda(?::[^']*)?'")
# a statement that is CUDA-specific: residue, or CUDA-only AMP and backend names
CUDA_STATEMENT = re.compile(RESIDUE.pattern + r"|\bGradScaler\b|\bautocast\b|\bis_cuda\b|\bnccl\b")
BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def header(node: ast.stmt) -> str:
    """A statement as ``ast.unparse`` writes it; a compound one by its header alone, so a
    change inside a body is counted once, at the statement that changed."""
    if not any(hasattr(node, name) for name in BODIES):
        return ast.unparse(node)
    shell = copy.copy(node)
    for name in BODIES:
        if hasattr(shell, name):
            setattr(shell, name, [ast.Pass()] if name == "body" else [])
    lines = ast.unparse(shell).splitlines()
    return "\n".join(line for line in lines if line.strip() != "pass")


def statements(source: str) -> Counter[str]:
    """Every statement of a module, docstrings left out (they are prose, not code)."""
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        found[header(node)] += 1
    return found


def residue(found: Counter[str]) -> int:
    return sum(len(RESIDUE.findall(text)) * n for text, n in found.items())


def lines_changed(before: str, after: str) -> int:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm="")
    return sum(1 for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))


@dataclass
class FileRow:
    path: str
    human_cuda: int = 0
    also: int = 0
    extra: int = 0
    residue: tuple[int, int, int] = (0, 0, 0)  # original, human, torchport
    lines: tuple[int, int] = (0, 0)  # human, torchport
    missed: list[str] = field(default_factory=list)  # human's CUDA changes torchport did not make
    error: str = ""


def compare_file(path: str, original: str, human: str, ported: str) -> FileRow:
    try:
        before, by_human, by_tool = statements(original), statements(human), statements(ported)
    except SyntaxError as error:
        return FileRow(path, error=f"does not parse: {error.msg} (line {error.lineno})")
    changed_by_human = before - by_human
    changed_by_tool = before - by_tool
    cuda = Counter({s: n for s, n in changed_by_human.items() if CUDA_STATEMENT.search(s)})
    also = cuda & changed_by_tool
    return FileRow(
        path,
        human_cuda=sum(cuda.values()),
        also=sum(also.values()),
        extra=sum((changed_by_tool - changed_by_human).values()),
        residue=(residue(before), residue(by_human), residue(by_tool)),
        lines=(lines_changed(original, human), lines_changed(original, ported)),
        missed=sorted((cuda - also).elements()),
    )


@dataclass
class PortRow:
    title: str
    url: str
    files: list[FileRow] = field(default_factory=list)
    other_files: int = 0  # files the human left alone that torchport rewrote
    other_lines: int = 0
    wall_s: float = 0.0
    error: str = ""
    # --runs, per mode: checks the human's port passes, of those torchport's passes too,
    # what torchport's port fails with where the human's runs, what the human's fails with
    runs: dict[str, tuple[int, int, list[str], list[str]]] = field(default_factory=dict)

    def total(self, name: str) -> int:
        return sum(getattr(f, name) for f in self.files)

    def pair(self, name: str, i: int) -> int:
        return sum(getattr(f, name)[i] for f in self.files)


def changed_python_files(gitdir: Path, parent: str, commit: str) -> list[str]:
    out = subprocess.run(
        ["git", f"--git-dir={gitdir}", "diff", "--name-only", "--diff-filter=M", parent, commit],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [p for p in out.splitlines() if p.endswith(".py")]


def selected(port: Port, changed: list[str]) -> list[str]:
    return [
        p
        for p in changed
        if any(p == f or (f.endswith("/") and p.startswith(f)) for f in port.files)
    ]


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def other_changes(original: Path, ported: Path, skip: set[str]) -> tuple[int, int]:
    """Python files outside ``skip`` that torchport rewrote, and their lines changed."""
    files = lines = 0
    for source in original.rglob("*.py"):
        rel = source.relative_to(original).as_posix()
        target = ported / rel
        if rel in skip or not target.is_file() or target.read_bytes() == source.read_bytes():
            continue
        files += 1
        lines += lines_changed(read(source), read(target))
    return files, lines


def run_one(
    port: Port, mirrors: Path, work: Path, torchport: list[str], budget_s: int, runs: bool
) -> PortRow:
    row = PortRow(f"{port.repo}#{port.pr}", port.url)
    gitdir = mirrors / port.repo.replace("/", "+") / "repo"
    if not gitdir.is_dir():
        row.error = f"not fetched: no snapshot at {gitdir}"
        return row
    original, human, ported = (work / port.slug / part for part in ("original", "human", "out"))
    shutil.rmtree(work / port.slug, ignore_errors=True)
    extract(gitdir, port.parent, original)
    extract(gitdir, port.commit, human)
    started = time.monotonic()
    command = [*torchport, "migrate", str(original), "--target", "accelerator"]
    command += ["--out", str(ported), "--llm", "none", "--no-verify", "--quiet"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=budget_s)
    except subprocess.TimeoutExpired:
        row.wall_s, row.error = budget_s, f"timeout: migrate past its {budget_s} s budget"
        return row
    row.wall_s = round(time.monotonic() - started, 1)
    if not (ported / "torchport-report").is_dir():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        row.error = f"migrate exit {done.returncode}: {tail[0][:200]}"
        return row
    paths = selected(port, changed_python_files(gitdir, port.parent, port.commit))
    for rel in paths:
        row.files.append(
            compare_file(rel, read(original / rel), read(human / rel), read(ported / rel))
        )
    row.other_files, row.other_lines = other_changes(original, ported, set(paths))
    if runs:
        for tree in (human, ported):
            for rel, text in port.generated:
                if not (tree / rel).exists():
                    (tree / rel).write_text(text, encoding="utf-8")
        entry = shlex.split(port.entry) if port.entry else None
        found = port_runs.check({"human": human, "torchport": ported}, paths, entry)
        for mode in port_runs.MODES:
            row.runs[mode] = port_runs.verdict(found["human"][mode], found["torchport"][mode])
    return row


def runs_cell(row: PortRow) -> str:
    """``torchport/human`` checks passed per mode: ``3/3 accel, 3/3 cpu``."""
    names = {"tpu": "accel", "plain": "cpu"}
    return ", ".join(f"{v[1]}/{v[0]} {names[m]}" for m, v in row.runs.items())


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def table(rows: list[PortRow], per_file: bool) -> str:
    lines = [
        "| port | files | human CUDA stmts | torchport also | share | extra stmts | other files "
        "| residue orig/human/torchport | lines human/torchport | runs torchport/human | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|",
    ]
    for r in rows:
        if r.error:
            lines.append(f"| {r.title} | {r.error} ||||||||||")
            continue
        human_cuda, also = r.total("human_cuda"), r.total("also")
        lines.append(
            f"| [{r.title}]({r.url}) | {len(r.files)} | {human_cuda} | {also} "
            f"| {share(also, human_cuda)} | {r.total('extra')} | {r.other_files} "
            f"| {r.pair('residue', 0)}/{r.pair('residue', 1)}/{r.pair('residue', 2)} "
            f"| {r.pair('lines', 0)}/{r.pair('lines', 1)} | {runs_cell(r) or '-'} | {r.wall_s:g} |"
        )
        if per_file:
            for f in r.files:
                lines.append(
                    f"| &nbsp;&nbsp;{f.path} {f.error} | | {f.human_cuda} | {f.also} "
                    f"| {share(f.also, f.human_cuda)} | {f.extra} | "
                    f"| {'/'.join(map(str, f.residue))} | {'/'.join(map(str, f.lines))} | | |"
                )
    done = [r for r in rows if not r.error]
    human_cuda = sum(r.total("human_cuda") for r in done)
    also = sum(r.total("also") for r in done)
    residue_totals = "/".join(str(sum(r.pair("residue", i) for r in done)) for i in range(3))
    lines.append("")
    lines.append(
        f"Totals over {len(done)} ports: torchport made {also} of the humans' {human_cuda} "
        f"CUDA-statement changes ({share(also, human_cuda)}); "
        f"{sum(r.total('extra') for r in done)} statements changed that the humans kept, "
        f"{sum(r.other_files for r in done)} other files rewritten "
        f"({sum(r.other_lines for r in done)} lines); "
        f"residue original/human/torchport {residue_totals}; lines changed in the humans' "
        f"files: human {sum(r.pair('lines', 0) for r in done)}, "
        f"torchport {sum(r.pair('lines', 1) for r in done)}."
    )
    ran = [r for r in done if r.runs]
    if ran:
        for mode, name in (("tpu", "an emulated accelerator"), ("plain", "plain CPU torch")):
            passed = sum(r.runs[mode][0] for r in ran)
            both = sum(r.runs[mode][1] for r in ran)
            lines.append(
                f"Runs on {name}: of the {passed} checks the humans' ports pass, "
                f"torchport's pass {both} ({share(both, passed)})."
            )
        for r in ran:
            for mode, (_, _, failing, unrunnable) in r.runs.items():
                lines += [f"- {r.title} ({mode}) torchport fails {f}" for f in failing]
                lines += [f"- {r.title} ({mode}) the human's port fails: {f}" for f in unrunnable]
    return "\n".join(lines)


def missed(rows: list[PortRow]) -> str:
    """The humans' CUDA-statement changes torchport did not make, to read one by one."""
    out = []
    for r in rows:
        for f in r.files:
            for statement in f.missed:
                out.append(f"{r.title} {f.path}: {statement.splitlines()[0][:140]}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated parts of 'owner/name#pr'")
    parser.add_argument("--work", type=Path, default=Path("/tmp/torchport-human-ports"))
    parser.add_argument("--mirrors", type=Path, default=MIRRORS)
    parser.add_argument("--files", action="store_true", help="a row per file under each port")
    parser.add_argument("--missed", action="store_true", help="list the changes not made")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--runs", action="store_true", help="also run both ports (imports, entry) in the sandbox"
    )
    parser.add_argument("--budget", type=int, default=300, help="seconds per migration")
    parser.add_argument(
        "--torchport",
        default=f"{shlex.quote(sys.executable)} -m torchport.cli",
        help="the command that runs torchport",
    )
    options = parser.parse_args(argv)
    wanted = [w.strip().lower() for w in options.only.split(",") if w.strip()]
    ports = [p for p in PORTS if not wanted or any(w in f"{p.repo}#{p.pr}".lower() for w in wanted)]
    rows = []
    for port in ports:
        print(f"{port.repo}#{port.pr}: migrating ...", file=sys.stderr, flush=True)
        row = run_one(
            port,
            mirrors_of(options.mirrors),
            options.work,
            shlex.split(options.torchport),
            options.budget,
            options.runs,
        )
        print(f"  {row.error or 'compared'} ({row.wall_s:g} s)", file=sys.stderr, flush=True)
        rows.append(row)
    print(table(rows, options.files))
    if options.missed:
        print("\nNot made by torchport:\n" + missed(rows))
    if options.json:
        options.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
