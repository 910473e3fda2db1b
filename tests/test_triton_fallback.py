"""TPK003's codemod (tools/codemods/triton_fallback.py): a Triton kernel whose file has a
torch fallback becomes that fallback; where the fallback is not evidently there, the
kernels run on triton_on_torch (tests/test_triton_runtime_port.py), and where that runtime
lacks a construct too, the refusal says why for both. The ported output itself is a
golden file (tests/fixtures/golden/TPK003*.py); the suite's triton-with-fallback task is
the whole program."""

from __future__ import annotations

import ast
import shutil
import textwrap
from pathlib import Path

import pytest
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import scan

IMPORT = """\
import torch

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False


@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def _double(x):
    out = torch.empty_like(x)
    _double_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out

"""


# The same file with a kernel triton_on_torch cannot run (an atomic, line 16).
ATOMIC = IMPORT.replace("    tl.store(out_ptr", "    tl.atomic_add(out_ptr")


def ported(
    tmp_path: Path, rest: str, target: str = "tpu", head: str = IMPORT
) -> tuple[str, list[str]]:
    source = head + textwrap.dedent(rest)
    path = tmp_path / "ops.py"
    path.write_text(source)
    findings = [f for f in scan(path).findings if f.rule == "TPK003"]
    assert findings, "the scanner finds the kernel"
    result = migrate_python(source, findings, target, "ops.py")
    return result.source, [why for _, why in result.unapplied]


REFUSED = {
    # no fallback at all: the kernel is the only implementation
    "def double(x):\n    return _double(x)\n": "no torch fallback in this file",
    # chosen for speed, not where Triton cannot run: the torch branch is for small inputs
    "def double(x):\n    if x.numel() > 4096:\n        return _double(x)\n    return x * 2\n": (
        "is chosen by `x.numel() > 4096`"
    ),
    "def double(x):\n    if HAS_TRITON:\n        y = _double(x)\n    return y\n": (
        "neither returns nor has an else"
    ),
    "def double(x):\n    if HAS_TRITON:\n        return _double(x)\n"
    "    elif x.is_cuda:\n        return x + x\n    else:\n        return x * 2\n": "elif chain",
    "def double(x):\n    if HAS_TRITON and x.is_cuda:\n        return _double(x)\n"
    "    else:\n        raise NotImplementedError\n": "only raises",
    "def double(x):\n    if HAS_TRITON and x.is_cuda:\n        return _double(x)\n"
    "    return _double(x.cuda())\n": "outside a guard with a torch fallback",
    # a public launcher may be imported by another module: removing it could break that one
    "def double_triton(x):\n    return _double(x)\n\n\ndef double(x):\n"
    "    if HAS_TRITON and x.is_cuda:\n        return double_triton(x)\n    return x * 2\n": (
        "`double_triton`: Triton code with a public name"
    ),
}


@pytest.mark.parametrize("rest", sorted(REFUSED), ids=lambda r: REFUSED[r][:30])
def test_no_evident_fallback_and_no_runtime_is_refused_with_both_reasons(tmp_path, rest):
    source, reasons = ported(tmp_path, rest, head=ATOMIC)
    assert source == ATOMIC + rest, "a refused file is left as it was"
    assert any(REFUSED[rest] in why for why in reasons), reasons
    assert all("lacks tl.atomic_add (line 16)" in why for why in reasons), reasons


@pytest.mark.parametrize("rest", sorted(REFUSED), ids=lambda r: REFUSED[r][:30])
def test_no_evident_fallback_runs_the_kernels_on_the_runtime(tmp_path, rest):
    source, reasons = ported(tmp_path, rest)
    assert reasons == []
    runtime_imports = (
        "    import triton_on_torch as triton\n    from triton_on_torch import language as tl\n"
    )
    want = IMPORT.replace("    import triton\n    import triton.language as tl\n", runtime_imports)
    assert source == want + rest, "only the imports change"


@pytest.mark.parametrize("target", ["tpu", "neuron", "xla", "accelerator"])
def test_the_fallback_stays_and_triton_goes(tmp_path, target):
    rest = """\
    def double(x):
        if HAS_TRITON and x.is_cuda:  # contiguous CUDA tensors
            return _double(x)
        return x * 2
    """
    source, reasons = ported(tmp_path, rest, target)
    assert reasons == []
    assert "triton" not in source.replace("HAS_TRITON", "") and "tl." not in source
    tree = ast.parse(source)
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert names == {"double"}
    assert "HAS_TRITON = False" in source  # other modules may read the flag
    namespace: dict = {}
    exec(compile(source, "ops.py", "exec"), namespace)
    import torch

    x = torch.arange(4.0)
    assert torch.equal(namespace["double"](x), x * 2)


def test_an_else_branch_takes_the_place_of_the_if(tmp_path):
    rest = """\
    def double(x):
        if HAS_TRITON and x.device.type == "cuda":
            y = _double(x)
        else:
            y = x + x
        return y
    """
    source, reasons = ported(tmp_path, rest)
    assert reasons == []
    assert source.endswith("def double(x):\n    y = x + x\n    return y\n"), source


def test_a_one_line_else_takes_the_place_of_the_if(tmp_path):
    """``else: y = x + x`` holds small statements, not lines: the follow-up crashed the
    whole file's migration on them (AttributeError: no leading_lines)."""
    rest = """\
    def double(x):
        if HAS_TRITON and x.device.type == "cuda":
            y = _double(x)
        else: y = x + x; y = y * 1
        return y
    """
    source, reasons = ported(tmp_path, rest)
    assert reasons == []
    assert source.endswith("def double(x):\n    y = x + x; y = y * 1\n    return y\n"), source


@pytest.mark.slow
def test_the_suite_task_ports_to_its_fallback_and_verifies(tmp_path):
    """triton-with-fallback, rules only: with triton importable on the reference, the
    port used to keep the kernel behind `x.is_tpu` (TPD004's rewrite of the guard) and
    launch it on the device; now the kernel file is the fallback, and it verifies."""
    from torchport.agents import graph, runs
    from torchport.evals.tasks import load_suite

    task = load_suite("builtin", ["triton-with-fallback"])[0]
    src = tmp_path / "src"
    shutil.copytree(task.repo, src)
    settings = {"source": str(src), "target": "tpu", "out": str(tmp_path / "out"), "llm": "none"}
    final = graph.start({**settings, "steps": 3}, graph.Runtime(runs.new_run_id()))
    assert final["outcome"] == "verified", final["verification"]["reason"]
    kernels = (tmp_path / "out" / "kernels" / "softmax.py").read_text()
    assert "triton" not in kernels.replace("HAS_TRITON", "")
    assert "return torch.softmax(x, dim=dim)" in kernels
