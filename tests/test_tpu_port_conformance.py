"""Every tpu port torchport writes uses only what the torch-tpu wheel accepts, on every torch
the wheel allows (sandbox/data/torch_tpu.toml): no torch.tpu API the wheel makes internal, no
rank-indexed device (a TorchTPU process sees one device, tpu:0), no variable TorchTPU writes
for each process itself. Checked on every golden tpu output, reviewed tpu program and eval-suite
tpu answer, and the names the codemods emit are checked against the installed torch."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from golden import GOLDEN, REVIEW
from torchport.sandbox import torchtpu_facts
from torchport.tools.codemods import torchtpu
from torchport.tools.codemods.runtime import STREAM_APIS, _tpu_rng_callee
from torchport.tools.codemods.visible_devices import RENAMED

NEWEST = torchtpu.newest_allowed_torch()
INTERNAL = torchtpu_facts.internal_for(NEWEST)
# the eval suite's hand-written tpu ports are the answers ports are scored against
EVAL_PORTS = Path(__file__).parents[1] / "evals" / "suite"
TPU_OUTPUTS = sorted(
    [*GOLDEN.glob("*.tpu.py"), *REVIEW.glob("*.tpu.py"), *EVAL_PORTS.glob("*/golden/tpu/**/*.py")]
)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def problems(source: str) -> list[str]:
    """What in ``source`` real TorchTPU would refuse (see the module's docstring)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        name = _dotted(node) if isinstance(node, ast.Attribute) else None
        if name and name.startswith("torch.tpu.") and name not in torchtpu_facts.public_modules():
            module, _, api = name.rpartition(".")
            if module not in torchtpu_facts.public_modules():
                continue  # an attribute of a public name (torch.tpu.Precision.HIGHEST)
            if module == "torch.tpu" and api in INTERNAL:
                found.append(f"{name} is internal on torch {NEWEST}")
            elif api not in torchtpu_facts.public_names(module):
                found.append(f"{name} is not a public {module} name")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"tpu:(?!0$)\d+", node.value):
                found.append(f"{node.value!r} names a device the process cannot see")
            if node.value in torchtpu.written_by_torchtpu():
                found.append(f"{node.value} is written by TorchTPU itself")
        if isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if isinstance(head, ast.Constant) and str(head.value).startswith("tpu:"):
                found.append(f"a device built at run time: {ast.unparse(node)}")
        callee = _dotted(node.func) if isinstance(node, ast.Call) else None
        if callee == "torch.device":
            given = [*node.args[1:], *(k.value for k in node.keywords if k.arg == "index")]
            if any(not _zero(a) for a in given):
                found.append(f"a device indexed at run time: {ast.unparse(node)}")
        if callee in SELECT_DEVICE and not all(_zero(a) for a in node.args):
            found.append(f"selects a device the process may not have: {ast.unparse(node)}")
    return found


SELECT_DEVICE = frozenset({"torch.accelerator.set_device_index", "torch.accelerator.device_index"})


def _zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0


def test_the_check_sees_what_torchtpu_refuses():
    source = (
        "import os, torch\n"
        "s = torch.tpu.current_stream()\n"
        "r = torch.tpu.get_rng_state()\n"
        'd = torch.device("tpu", local_rank)\n'
        'e = f"tpu:{local_rank}"\n'
        'f = "tpu:1"\n'
        'os.environ["TPU_VISIBLE_CHIPS"] = "0"\n'
        "torch.accelerator.set_device_index(local_rank)\n"
        "with torch.accelerator.device_index(local_rank): pass\n"
    )
    assert len(problems(source)) == 8
    ok = 'import torch\nx = torch.device("tpu", 0)\ny = "tpu:0"\ns = torch.tpu.Stream()\n'
    assert problems(ok) == []


@pytest.mark.parametrize("path", TPU_OUTPUTS, ids=lambda p: "/".join(p.parts[-3:]))
def test_every_tpu_output_is_accepted_by_torchtpu(path: Path):
    assert problems(path.read_text(encoding="utf-8")) == []


def _resolves(dotted: str) -> bool:
    obj = torch
    for part in dotted.split(".")[1:]:
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def test_tpu_streams_are_torchtpus_public_names_or_the_replacement_it_names():
    for cuda_name, callee in STREAM_APIS["tpu"].items():
        if callee.startswith("torch.tpu."):
            assert torchtpu.keeps(cuda_name), callee
        else:
            assert cuda_name in INTERNAL and INTERNAL[cuda_name].prefer == callee
            assert _resolves(callee), f"{callee} is not in the installed torch {torch.__version__}"
    assert STREAM_APIS["tpu"]["current_stream"] == "torch.accelerator.current_stream"
    assert STREAM_APIS["tpu"]["set_stream"] == "torch.accelerator.set_stream"


def test_rng_state_form_avoids_what_the_wheel_makes_internal_on_any_allowed_torch():
    # the wheel's own suggestion does not exist in the installed torch: it cannot be the port
    assert INTERNAL["get_rng_state"].prefer == "torch.accelerator.random.get_rng_state"
    if torchtpu_facts.version_tuple(torch.__version__)[:2] == (2, 13):
        assert not _resolves(INTERNAL["get_rng_state"].prefer)
    assert _tpu_rng_callee("get_rng_state") == "torch.tpu.default_generators[0].get_state"
    assert _tpu_rng_callee("set_rng_state") == "torch.tpu.set_rng_state"
    assert torchtpu.keeps("default_generators") and torchtpu.keeps("set_rng_state")


def test_visible_devices_is_the_variable_torchtpu_reads():
    environment = torchtpu_facts.section("environment")
    assert RENAMED["tpu"] == environment["visible_devices"]
    assert RENAMED["tpu"] not in environment["written_by_torchtpu"]
