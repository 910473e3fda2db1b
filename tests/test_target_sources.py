"""Every behaviour the emulator reproduces for ``neuron`` and every API the ``xla`` codemods emit
has a row in ``sandbox/data/target_sources.toml`` saying where it comes from.

The keys are taken from the live code, not restated: the emulated ``neuron`` device's surface is
read from a fresh interpreter that activates it (its device name, the public names of
``torch.neuron``, every attribute of torch the emulator patches, the process-group backends it
registers, its autocast device), and the xla API names from the codemods' source and the
catalogue's xla fixes (every ``torch_xla...`` / ``xm.`` name in a string, the ``xla://`` init
method, the values of each ``{"xla": ...}`` table). A behaviour or name added without a row,
or a row whose keys no longer exist, fails here.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "sandbox" / "data" / "target_sources.toml"

STATUSES = frozenset({"confirmed", "contradicted", "unverifiable-here", "mechanism"})
SUBJECTS = frozenset({"emulator", "codemod", "targets"})
NEEDS_SOURCE = frozenset({"confirmed", "contradicted"})
# a URL, or "<wheel> <path>:<line>" read statically (torch_xla-2.9.0 wheel, torch 2.13.0 ...)
CITATION = re.compile(r"^(https://\S+|[\w.\-]+ [\w.\-]+ [\w./\-]+\.py:\d+)$")

XLA_NAME = re.compile(r"(?<![\w.])torch_xla(?:\.[A-Za-z_]\w*)*")
XM_NAME = re.compile(r"(?<![\w.])xm\.([A-Za-z_]\w*)")
REQUIREMENT = re.compile(r"^[A-Za-z0-9_.\-]+(?:\[[^\]]*\])?\s*(?:==|>=|<=|~=|!=|<|>)")

NEURON_SURFACE = """
import json
import torch
import torch.distributed as dist
before = set(dist.Backend.backend_list)
from torchport.sandbox import emulated, patching
emulated.activate("neuron", backend="python")
surface = {
    "device": torch._C._get_privateuse1_backend_name(),
    "module": sorted(n for n in vars(torch.neuron) if not n.startswith("_")),
    "patched": sorted({p.name for p in patching.active("emulator")}),
    "dist": sorted(set(dist.Backend.backend_list) - before),
    "autocast": torch.amp.is_autocast_available("neuron"),
}
print("SURFACE=" + json.dumps(surface))
"""


def rows() -> list[dict[str, Any]]:
    return tomllib.loads(SOURCES.read_text(encoding="utf-8"))["row"]


def _matches(key: str, pattern: str) -> bool:
    """Exact, or a shell pattern (``patch:torch.cuda.*``); ``[tpu]`` in a pin is literal."""
    return key == pattern or ("*" in pattern and fnmatch.fnmatchcase(key, pattern))


def uncovered(table: list[dict[str, Any]], target: str, keys: set[str]) -> set[str]:
    """The keys no row of ``target`` covers (a row's ``covers`` may hold shell patterns)."""
    patterns = [p for row in table if row["target"] == target for p in row["covers"]]
    return {key for key in keys if not any(_matches(key, p) for p in patterns)}


def stale(table: list[dict[str, Any]], target: str, subjects: set[str], keys: set[str]) -> set[str]:
    """The patterns of ``target``'s rows about ``subjects`` that match no current key."""
    return {
        pattern
        for row in table
        if row["target"] == target and row["subject"] in subjects
        for pattern in row["covers"]
        if not any(_matches(key, pattern) for key in keys)
    }


def neuron_emulator_keys() -> set[str]:
    """What the emulated neuron device provides, read from a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(NEURON_SURFACE)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("SURFACE=")][-1]
    surface = json.loads(line.removeprefix("SURFACE="))
    keys = {f"device:{surface['device']}"}
    keys |= {f"torch.neuron.{name}" for name in surface["module"]}
    keys |= {f"patch:{name}" for name in surface["patched"]}
    keys |= {f"dist-backend:{name}" for name in surface["dist"]}
    if surface["autocast"]:
        keys.add("autocast:neuron")
    return keys


def _string_keys(text: str) -> set[str]:
    """The xla API keys one emitted string names (requirement strings only from xla tables)."""
    if REQUIREMENT.match(text):
        return set()
    keys = set(XLA_NAME.findall(text))
    keys |= {f"torch_xla.core.xla_model.{name}" for name in XM_NAME.findall(text)}
    if "xla://" in text:
        keys.add("init-method:xla://")
    return keys


def _xla_table_keys(value: ast.expr) -> set[str]:
    """``{"xla": <value>}`` in a codemod: what the value emits for xla."""
    items = value.elts if isinstance(value, ast.Tuple | ast.List) else [value]
    keys: set[str] = set()
    for item in items:
        if not (isinstance(item, ast.Constant) and isinstance(item.value, str)):
            continue
        text = item.value
        if REQUIREMENT.match(text):
            keys.add(f"requirement:{text}")
        else:
            keys |= _string_keys(text) or {f"xla-value:{text}"}
    return keys


# The xla profile's fields that the codemods write into code (tools/data/targets.toml): the
# profile is where the codemods' per-target values live since TargetProfile.
PROFILE_EMITTED = (
    "device",
    "device_expr",
    "dist_backend",
    "compile_backend",
    "word",
    "sync_call",
    "device_module",
    "torch_requirements",
    "dist_init_method",
    "dist_import",
    "matmul_precision_setter",
)


def _profile_xla_keys(root: Path) -> set[str]:
    """What the xla profile makes the codemods emit, keyed as a codemod's xla table is."""
    profiles = root / "tools" / "data" / "targets.toml"
    if not profiles.is_file():  # a tree made by a test: codemods only
        return set()
    data = tomllib.loads(profiles.read_text(encoding="utf-8"))
    xla = next((t for t in data.get("target", []) if t.get("name") == "xla"), {})
    values = [xla[f] for f in PROFILE_EMITTED if f in xla]
    texts = [v for value in values for v in (value if isinstance(value, list) else [value])]
    table = ast.List([ast.Constant(text) for text in texts if isinstance(text, str)])
    return _xla_table_keys(table)


def codemod_xla_keys(root: Path = ROOT) -> set[str]:
    """Every xla API name the codemods (tools/codemods/*.py) and the catalogue's xla fixes emit."""
    keys: set[str] = set()
    for path in sorted((root / "tools" / "codemods").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                keys |= _string_keys(node.value)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "xla":
                        keys |= _xla_table_keys(value)
    keys |= _profile_xla_keys(root)
    for path in sorted((root / "tools" / "catalogue" / "data").glob("*.toml")):
        for rule in tomllib.loads(path.read_text(encoding="utf-8")).get("rule", []):
            fix = rule.get("fix")
            if isinstance(fix, dict) and isinstance(fix.get("xla"), str):
                keys |= _string_keys(fix["xla"])
    return keys


@pytest.fixture(scope="module")
def table() -> list[dict[str, Any]]:
    return rows()


@pytest.fixture(scope="module")
def neuron_keys() -> set[str]:
    return neuron_emulator_keys()


def test_every_row_is_well_formed(table):
    problems = []
    for i, row in enumerate(table):
        where = f"row {i} ({row.get('fact', '')[:50]!r})"
        if row.get("target") not in ("neuron", "xla"):
            problems.append(f"{where}: target {row.get('target')!r}")
        if row.get("subject") not in SUBJECTS:
            problems.append(f"{where}: subject {row.get('subject')!r}")
        if row.get("status") not in STATUSES:
            problems.append(f"{where}: status {row.get('status')!r}")
        if not row.get("fact") or not isinstance(row.get("covers"), list):
            problems.append(f"{where}: needs fact and covers")
        source, note = row.get("source", ""), row.get("note", "")
        if row.get("status") in NEEDS_SOURCE and not source:
            problems.append(f"{where}: {row['status']} without a source")
        if source and not CITATION.match(source):
            problems.append(f"{where}: source {source!r} is neither a URL nor wheel path:line")
        if row.get("status") not in NEEDS_SOURCE and not note:
            problems.append(f"{where}: {row.get('status')} needs a note saying why")
    assert not problems, "\n".join(problems)


def test_every_emulated_neuron_behaviour_has_a_source_row(table, neuron_keys):
    # the surface really was read: the device, its module and its patches are all there
    assert {"device:neuron", "torch.neuron.synchronize", "patch:torch.compile"} <= neuron_keys
    missing = uncovered(table, "neuron", neuron_keys)
    assert not missing, f"emulated neuron behaviours without a row: {sorted(missing)}"


def test_no_neuron_emulator_row_covers_a_behaviour_that_is_gone(table, neuron_keys):
    gone = stale(table, "neuron", {"emulator"}, neuron_keys)
    assert not gone, f"rows for emulator behaviours that no longer exist: {sorted(gone)}"


def test_every_xla_emitted_api_has_a_source_row(table):
    keys = codemod_xla_keys()
    assert {"torch_xla.device", "torch_xla.sync", "init-method:xla://"} <= keys
    missing = uncovered(table, "xla", keys)
    assert not missing, f"xla APIs the codemods emit without a row: {sorted(missing)}"


def test_no_xla_codemod_row_covers_a_name_no_longer_emitted(table):
    gone = stale(table, "xla", {"codemod"}, codemod_xla_keys())
    assert not gone, f"rows for xla names the codemods no longer emit: {sorted(gone)}"


def test_a_new_xla_name_in_a_codemod_is_caught(tmp_path, table):
    """The scan sees a name a codemod starts to emit, and the table does not cover it."""
    codemods = tmp_path / "tools" / "codemods"
    codemods.mkdir(parents=True)
    (tmp_path / "tools" / "catalogue" / "data").mkdir(parents=True)
    (codemods / "new.py").write_text(
        'SETTER = {"xla": "torch_xla.experimental.brand_new", "tpu": "torch.tpu.x"}\n'
        'CALL = "xm.wait_device_ops()"\n'
        'PIN = {"xla": ("torch==2.10.*", "compile-value")}\n',
        encoding="utf-8",
    )
    keys = codemod_xla_keys(tmp_path)
    assert keys == {
        "torch_xla.experimental.brand_new",
        "torch_xla.core.xla_model.wait_device_ops",
        "requirement:torch==2.10.*",
        "xla-value:compile-value",
    }
    assert uncovered(table, "xla", keys) == keys


def test_a_new_neuron_behaviour_without_a_row_is_caught(table, neuron_keys):
    new = {"torch.neuron.brand_new_api", "dist-backend:neuron_experimental"}
    assert uncovered(table, "neuron", neuron_keys | new) == new
