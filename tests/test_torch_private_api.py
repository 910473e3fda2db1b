"""sandbox/TORCH_PRIVATE_API.md is the upgrade checklist: it must name exactly the private
torch symbols the product uses (and where), and exactly the torch attributes it patches."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from collections import defaultdict

import pytest
import torch_source_scan

DOC = torch_source_scan.ROOT / "sandbox" / "TORCH_PRIVATE_API.md"
_CODE = re.compile(r"`([^`]+)`")


def _table(heading: str) -> list[list[str]]:
    """The cells of the table under ``## heading`` (header and rule rows left out)."""
    section = DOC.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _used() -> dict[str, set[str]]:
    where: dict[str, set[str]] = defaultdict(set)
    for use in torch_source_scan.uses():
        if torch_source_scan.is_private_symbol(use.symbol):
            symbol = torch_source_scan.private_symbol(use.symbol)
            where[symbol].add(f"{use.path}:{use.function}")
    return where


def test_the_doc_lists_every_private_torch_symbol_used_and_only_those() -> None:
    listed = {
        _CODE.findall(cells[0])[0]: set(_CODE.findall(cells[1]))
        for cells in _table("Private torch symbols")
    }
    used = _used()
    assert not (used.keys() - listed.keys()), (
        "private torch symbols used but not in TORCH_PRIVATE_API.md (add a row: where, "
        "why, what to check on an upgrade):\n"
        + "\n".join(
            f"| `{s}` | {', '.join(f'`{w}`' for w in sorted(used[s]))} |"
            for s in sorted(used.keys() - listed.keys())
        )
    )
    assert not (listed.keys() - used.keys()), (
        f"listed in TORCH_PRIVATE_API.md but no longer used: {sorted(listed.keys() - used.keys())}"
    )
    wrong = {
        symbol: ", ".join(f"`{w}`" for w in sorted(used[symbol]))
        for symbol in used
        if listed[symbol] != used[symbol]
    }
    assert not wrong, "the Where column should read:\n" + "\n".join(
        f"{symbol}: {cell}" for symbol, cell in sorted(wrong.items())
    )


def test_every_row_says_why_and_what_to_check() -> None:
    for cells in _table("Private torch symbols"):
        assert len(cells) == 4 and all(cells), cells


# Each kind of run the sandbox starts, as session.start sets it up (less the seeds).
_RUN = """
import sys
from torchport.sandbox import patching, rendezvous, synthetic
from torchport.sandbox.budget import Budget, install
if sys.argv[1] == "reference":
    from torchport.sandbox import shim
    from torchport.sandbox.shim import standins
    shim.activate(gpus=2)
    standins.install()
else:
    from torchport.sandbox import emulated
    emulated.activate("tpu", devices=2)
    if sys.argv[1] == "transfer":
        from torchport.evals import transfer
        transfer.install()
rendezvous.install()
synthetic.install()
install(Budget(max_steps=5))
for done in patching.active():
    print(done.by, done.name)
"""


@pytest.fixture(scope="module")
def patched() -> set[tuple[str, str]]:
    """(by, name) of every patch in effect in each kind of run, on each emulator backend
    (the native one, when built, patches less: its kernels are C++)."""
    found: set[tuple[str, str]] = set()
    for kind, backend in [("reference", "auto")] + [
        (k, b) for k in ("tpu", "transfer") for b in ("python", "auto")
    ]:
        run = subprocess.run(
            [sys.executable, "-c", _RUN, kind],
            env={**os.environ, "TORCHPORT_EMULATOR": backend},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        found |= {tuple(line.split(" ", 1)) for line in run.stdout.splitlines()}  # type: ignore[misc]
    return found


@pytest.mark.slow
def test_the_doc_lists_every_patched_torch_attribute_and_only_those(patched) -> None:
    rows = [
        (_CODE.findall(c[0])[0], _CODE.findall(c[1])[0]) for c in _table("Patched torch attributes")
    ]

    def covered(by: str, name: str) -> bool:
        return any(by == row_by and fnmatch.fnmatchcase(name, row) for row_by, row in rows)

    missing = sorted(f"{by} {name}" for by, name in patched if not covered(by, name))
    assert not missing, "patched but not in TORCH_PRIVATE_API.md:\n" + "\n".join(missing)
    unused = [
        row
        for row in rows
        if not any(by == row[0] and fnmatch.fnmatchcase(n, row[1]) for by, n in patched)
    ]
    assert not unused, f"listed in TORCH_PRIVATE_API.md but patched by nothing: {unused}"
