"""Does the first divergence name the right place in real code? A bug put into real ports.

Each case takes a repository of ``benchmarks/realworld.py`` (extracted and given its data as
``benchmarks/realworld.py`` does), migrates it rules only without verifying, then puts one
deliberate bug into the port (a wrong scale, a missing term: one line of one module, as a
human port might get wrong), verifies the pair with torchport's verifier and checks what
the report says: the verdict must be ``failed`` and the first divergence must name the
module whose code holds the bug and the bug's line as a line the port changed. A case that
names another module, another line, or none, is a miss, printed with what it said.

    python benchmarks/divergence_bugs.py [--only NAME,...] [--mirrors DIR] [--work DIR]
                                         [--json FILE]

Not part of ``make test``: it needs the fetched snapshots (``TORCHPORT_MIRRORS`` or
``--mirrors``) and takes minutes per case.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realworld


@dataclass(frozen=True)
class Bug:
    repo: str  # a realworld.Repo's title
    file: str  # relative to the migrated folder
    old: str  # a line's text in the port, exactly once in the file
    new: str
    module: str  # the qualified module name (or its start) the divergence must name
    what: str


BUGS = (
    Bug(
        "ng-video-lecture",
        "gpt.py",
        "wei = q @ k.transpose(-2,-1) * k.shape[-1]**-0.5",
        "wei = q @ k.transpose(-2,-1) * k.shape[-1]**-0.25",
        "blocks.0.sa.heads.0",
        "attention scores scaled by d**-0.25 instead of d**-0.5 in one Head",
    ),
    Bug(
        "pytorch_resnet_cifar10",
        "resnet.py",
        "out += self.shortcut(x)",
        "out += 0.5 * self.shortcut(x)",
        "layer1.0",
        "half the shortcut added in each BasicBlock",
    ),
    Bug(
        "PyTorch-GAN dcgan",
        "dcgan.py",
        "validity = self.adv_layer(out)",
        "validity = self.adv_layer(out * 1.5)",
        "Discriminator",
        "the discriminator's features scaled before its last layer",
    ),
)


@dataclass
class Outcome:
    case: str
    result: str  # "named" | "miss" | "error"
    verdict: str = ""
    module: str = ""
    where: str = ""
    port_lines: list[int] | None = None
    bug_line: int = 0
    summary: str = ""
    wall_s: float = 0.0


def _migrated(repo: realworld.Repo, mirrors: Path, work: Path) -> tuple[Path, Path]:
    """(the original's folder, the migrated folder), rules only, not verified."""
    slug = repo.title.replace(" ", "-")
    root, out = work / "src" / slug, work / "out" / f"{slug}-tpu"
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    realworld.extract(mirrors / repo.name.replace("/", "+") / "repo", repo.commit, root)
    folder = root / repo.folder
    for step in repo.prepare:
        realworld.prepare(step, root, folder)
    migrate = [
        sys.executable,
        "-m",
        "torchport.cli.main",
        "migrate",
        str(folder),
        "--target",
        "tpu",
    ]
    migrate += ["--out", str(out), "--llm", "none", "--no-verify", "--quiet"]
    done = subprocess.run(migrate, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: migrated, with something left for a human
        raise OSError(f"migrate exited {done.returncode}: {done.stderr.strip()[-300:]}")
    shutil.rmtree(out / "torchport-report", ignore_errors=True)
    return folder, out


def _with_bug(port: Path, bug: Bug) -> int:
    path = port / bug.file
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if bug.old in line]
    if len(found) != 1:
        raise SystemExit(f"{bug.repo}: {bug.old!r} is on {len(found)} lines of {bug.file}")
    lines[found[0]] = lines[found[0]].replace(bug.old, bug.new)
    path.write_text("".join(lines), encoding="utf-8")
    return found[0] + 1


def run_case(bug: Bug, mirrors: Path, work: Path) -> Outcome:
    from torchport.agents.verifier import RunLimits, verify_tree

    repo = next(r for r in realworld.REPOS if r.title == bug.repo)
    started = time.monotonic()
    source, port = _migrated(repo, mirrors, work)
    line = _with_bug(port, bug)
    budget = RunLimits(steps=3, forwards=3, timeout_s=repo.budget_s / 2, memory_mb=repo.memory_mb)
    v, _ = verify_tree(source, port, repo.entry.split(), "tpu", budget, None)
    found = v.divergence or {}
    named = (
        v.verdict == "failed"
        and found.get("module", "").startswith(bug.module)
        and found.get("where", "").startswith(f"{bug.file}:")
        and line in (found.get("port_lines") or [])
    )
    return Outcome(
        bug.repo,
        "named" if named else "miss",
        v.verdict,
        found.get("module", ""),
        found.get("where", ""),
        found.get("port_lines"),
        line,
        found.get("summary", v.reason)[:400],
        round(time.monotonic() - started, 1),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated repository titles")
    parser.add_argument("--mirrors", type=Path, default=realworld.MIRRORS)
    parser.add_argument("--work", type=Path, default=Path("/tmp/torchport-divergence-bugs"))
    parser.add_argument("--json", type=Path, help="also write the outcomes here")
    args = parser.parse_args(argv)
    wanted = {name.strip() for name in args.only.split(",") if name.strip()}
    outcomes: list[dict[str, Any]] = []
    for bug in BUGS:
        if wanted and bug.repo not in wanted:
            continue
        try:
            outcome = run_case(bug, realworld.mirrors_of(args.mirrors), args.work)
        except (subprocess.CalledProcessError, OSError, SystemExit) as exc:
            outcome = Outcome(bug.repo, "error", summary=str(exc)[:400])
        outcomes.append(asdict(outcome))
        print(
            f"{outcome.result:5}  {bug.repo}: {bug.what}; bug at {bug.file}:{outcome.bug_line}; "
            f"verdict {outcome.verdict}; named {outcome.module or '-'} at {outcome.where or '-'} "
            f"lines {outcome.port_lines}; {outcome.wall_s} s\n       {outcome.summary}",
            flush=True,
        )
    named = sum(o["result"] == "named" for o in outcomes)
    print(f"{named} of {len(outcomes)} bugs named at their module and line")
    if args.json:
        args.json.write_text(json.dumps(outcomes, indent=2))
    return 0 if named == len(outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
