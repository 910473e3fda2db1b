"""Golden before/after pairs for the codemods: tests/fixtures/golden/<CODE>.py is the input,
<CODE>.<target>.py the expected output, byte for byte; the same for the whole programs
of tests/fixtures/review.

Regenerate the outputs after a deliberate codemod change, then review the diff:
    python tests/golden.py            (writes every <CODE>.<target>.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

from torchport.tools.catalogue import TARGETS
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import ScanOptions, scan

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
# whole small programs with the patterns a reviewer rejected in real ports (issue 14)
REVIEW = Path(__file__).parent / "fixtures" / "review"


def inputs() -> list[Path]:
    return sorted(p for p in GOLDEN.glob("TP*.py") if p.stem.count(".") == 0)


def review_inputs() -> list[Path]:
    return sorted(p for p in REVIEW.glob("*.py") if p.stem.count(".") == 0)


def migrate_file(path: Path, target: str) -> str:
    source = path.read_text(encoding="utf-8")
    findings = [
        f
        for f in scan(path, ScanOptions(target=target)).findings
        if f.fix[target]["kind"] == "auto"
    ]
    return migrate_python(source, findings, target, path.name).source


def expected_path(path: Path, target: str) -> Path:
    return path.with_name(f"{path.stem}.{target}.py")


if __name__ == "__main__":
    paths = inputs() + review_inputs()
    for path in paths:
        for target in TARGETS:
            expected_path(path, target).write_text(migrate_file(path, target), encoding="utf-8")
    print(f"wrote {len(paths) * len(TARGETS)} golden outputs", file=sys.stderr)
