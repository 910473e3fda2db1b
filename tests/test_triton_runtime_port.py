"""TPK003 with no torch fallback (tools/codemods/triton_runtime.py): the kernels stay as
the author wrote them and run on triton_on_torch, shipped beside them; only the Triton
imports change. Where the runtime lacks a construct the file uses, the finding is refused
with each construct and its line. Real migrations and real runs of the ported code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torchport.tools.codemods import migrate_python
from torchport.tools.codemods.triton_runtime import ADVISORY
from torchport.tools.kernel_runtime import triton_on_torch
from torchport.tools.migrate import MigrateOptions, migrate
from torchport.tools.report.counts import count_constructs
from torchport.tools.report.migration import unified_diff
from torchport.tools.repowalk import SHIPPED_REASON
from torchport.tools.scanner import ScanOptions, scan

KERNEL = """\
@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, libdevice.tanh(x) * scale, mask=mask)


def scale_tanh(x, scale):
    out = torch.empty_like(x)
    _scale_kernel[(cdiv(x.numel(), 64),)](x, out, x.numel(), scale, BLOCK=64)
    return out
"""
IMPORTS = """\
import torch
import triton
import triton.language as tl
from triton import cdiv
from triton.language.extra import libdevice


"""
PACKAGE_IMPORTS = """\
import torch
from . import triton_on_torch as triton
from .triton_on_torch import language as tl
from .triton_on_torch import cdiv
from .triton_on_torch.language.extra import libdevice


"""
TOP_LEVEL_IMPORTS = """\
import torch
import triton_on_torch as triton
from triton_on_torch import language as tl
from triton_on_torch import cdiv
from triton_on_torch.language.extra import libdevice


"""
RUNTIME = Path(triton_on_torch.__file__).read_text(encoding="utf-8")


def _ported(tmp_path: Path, source: str, in_package: bool):
    path = tmp_path / "ops.py"
    path.write_text(source, encoding="utf-8")
    findings = [f for f in scan(path).findings if f.rule == "TPK003"]
    assert findings, "the scanner finds the kernel"
    return migrate_python(source, findings, "tpu", "ops.py", in_package=in_package)


@pytest.mark.parametrize(
    ("in_package", "imports"), [(True, PACKAGE_IMPORTS), (False, TOP_LEVEL_IMPORTS)]
)
def test_only_the_imports_change_and_the_runtime_is_asked_for(tmp_path, in_package, imports):
    result = _ported(tmp_path, IMPORTS + KERNEL, in_package)
    assert result.unapplied == []
    assert result.source == imports + KERNEL  # the kernel, byte for byte
    assert result.ships == ("triton_on_torch.py",)
    advised = [e for e in result.edits if e.advisory]
    assert [(e.rule, e.line) for e in advised] == [("TPK003", 8)]
    assert advised[0].advisory == ADVISORY


ACCELERATOR_IMPORTS = """\
import torch
try:
    import triton
    import triton.language as tl
    from triton import cdiv
    from triton.language.extra import libdevice
except ImportError:  # no Triton here: the kernels run on triton_on_torch
    from . import triton_on_torch as triton
    from .triton_on_torch import language as tl
    from .triton_on_torch import cdiv
    from .triton_on_torch.language.extra import libdevice


"""


def test_on_the_accelerator_target_triton_is_kept_where_it_is_installed(tmp_path):
    """Device-agnostic code may run on a CUDA or ROCm GPU: the Triton imports are tried
    first, as one block, and the runtime's are the ``except ImportError`` branch."""
    path = tmp_path / "ops.py"
    path.write_text(IMPORTS + KERNEL, encoding="utf-8")
    findings = [f for f in scan(path).findings if f.rule == "TPK003"]
    result = migrate_python(IMPORTS + KERNEL, findings, "accelerator", "ops.py", in_package=True)
    assert result.unapplied == []
    assert result.source == ACCELERATOR_IMPORTS + KERNEL
    assert result.ships == ("triton_on_torch.py",)
    (advisory,) = [e.advisory for e in result.edits if e.advisory]
    assert advisory.startswith("where Triton is not installed (no CUDA or ROCm GPU), ")


def test_a_guarded_import_counts_too(tmp_path):
    source = (
        textwrap.dedent("""\
        import torch

        try:
            import triton
            import triton.language as tl
            HAS_TRITON = True
        except ImportError:
            HAS_TRITON = False
        from triton import cdiv
        from triton.language.extra import libdevice


        """)
        + KERNEL
    )
    result = _ported(tmp_path, source, in_package=False)
    assert result.unapplied == []
    want = source.replace("    import triton\n", "    import triton_on_torch as triton\n")
    runtime_language = "from triton_on_torch import language as tl"
    want = want.replace("import triton.language as tl", runtime_language)
    want = want.replace("from triton import", "from triton_on_torch import")
    want = want.replace("from triton.language.extra", "from triton_on_torch.language.extra")
    assert result.source == want


def _repository(root: Path, kernel: str = KERNEL) -> Path:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "__init__.py").write_text(
        "from .ops import scale_tanh\nfrom .more import scale_tanh as again\n"
    )
    (root / "kernels" / "ops.py").write_text(IMPORTS + kernel)
    (root / "kernels" / "more.py").write_text(IMPORTS + kernel)
    (root / "top_ops.py").write_text(IMPORTS + kernel)
    return root


RUN = """\
import sys
import torch
import kernels, top_ops
x = torch.randn(300)
want = torch.tanh(x) * 3.0
for fn in (kernels.scale_tanh, kernels.again, top_ops.scale_tanh):
    torch.testing.assert_close(fn(x, 3.0), want)
print(json.dumps({"triton": "triton" in sys.modules}))
"""


def _ran(out: Path, before: str = "") -> dict:
    """RUN in a fresh interpreter in the port's folder (``before`` first): what it prints."""
    run = subprocess.run(
        [sys.executable, "-c", before + "import json\n" + RUN],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def test_the_runtime_is_shipped_once_per_folder_and_the_port_runs(tmp_path):
    root = _repository(tmp_path / "repo")
    out = tmp_path / "out"
    result = migrate(root, MigrateOptions(target="tpu", out=out))
    added = {c.path: c for c in result.changes if c.before == ""}
    assert sorted(added) == ["kernels/triton_on_torch.py", "triton_on_torch.py"]
    assert all(c.after == RUNTIME for c in added.values())  # verbatim
    assert (out / "kernels" / "triton_on_torch.py").read_text() == RUNTIME
    assert (out / "kernels" / "ops.py").read_text() == PACKAGE_IMPORTS + KERNEL
    assert (out / "top_ops.py").read_text() == TOP_LEVEL_IMPORTS + KERNEL
    assert _ran(out) == {"triton": False}  # the real triton is never imported
    advisories = count_constructs(result).advisory
    assert sorted((f.path, f.rule, why) for f, why in advisories) == [
        (path, "TPK003", ADVISORY) for path in ("kernels/more.py", "kernels/ops.py", "top_ops.py")
    ]
    assert "# Performance advisories" in (out / "torchport-report" / "manual.md").read_text()
    patch = unified_diff(result)
    assert "new file mode 100644\n--- /dev/null\n+++ b/kernels/triton_on_torch.py\n" in patch
    again = migrate(out, MigrateOptions(target="tpu", dry_run=True))
    assert [c for c in again.changes if "triton" in c.after] == []
    # the shipped runtime is torchport's code: a scan of the port leaves it out, unless edited
    found = scan(out, ScanOptions(target="tpu"))
    assert ("kernels/triton_on_torch.py", SHIPPED_REASON) in {
        (s.path, s.reason) for s in found.skipped
    }
    assert not [f for f in found.findings if f.path.endswith("triton_on_torch.py")]
    (out / "triton_on_torch.py").write_text(RUNTIME + "\nx = torch.zeros(2).double()\n")
    found = scan(out, ScanOptions(target="tpu"))
    assert [f.rule for f in found.findings if f.path == "triton_on_torch.py"].count("TPF001") == 3


# A machine without Triton, as the target runs see it (sandbox/target_imports.py).
NO_TRITON = """\
import importlib.abc, sys
class NoTriton(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "triton":
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, NoTriton())
"""


def test_an_accelerator_port_runs_on_the_runtime_where_triton_is_absent(tmp_path):
    root = _repository(tmp_path / "repo")
    out = tmp_path / "out"
    migrate(root, MigrateOptions(target="accelerator", out=out))
    assert (out / "kernels" / "ops.py").read_text() == ACCELERATOR_IMPORTS + KERNEL
    assert (out / "kernels" / "triton_on_torch.py").read_text() == RUNTIME
    assert _ran(out, NO_TRITON) == {"triton": False}
    # the port still has Triton kernels (for where Triton is installed): migrated again,
    # nothing changes
    again = migrate(out, MigrateOptions(target="accelerator", dry_run=True))
    assert (again.changes, again.edits, again.unapplied) == ([], [], [])


def test_a_construct_the_runtime_lacks_is_refused_with_its_line(tmp_path):
    atomic = KERNEL.replace("    tl.store(out_ptr + offs,", "    tl.atomic_add(out_ptr + offs,")
    root = _repository(tmp_path / "repo", atomic)
    result = migrate(root, MigrateOptions(target="neuron", dry_run=True))
    names = ("ops.py", "more.py", "triton_on_torch.py")
    assert not [c.path for c in result.changes if c.path.endswith(names)]  # left as they were
    reasons = {(f.path, why) for f, why in result.unapplied if f.rule == "TPK003"}
    assert {path for path, _ in reasons} == {"kernels/ops.py", "kernels/more.py", "top_ops.py"}
    assert all("lacks tl.atomic_add (line 13)" in why for _, why in reasons), reasons
    assert all("no torch fallback in this file" in why for _, why in reasons), reasons


@pytest.mark.slow
def test_the_rmsnorm_task_verifies_rules_only_on_the_runtime(tmp_path):
    """triton-fused-rmsnorm has no fallback: rules alone port it to tpu by shipping the
    runtime, and the port trains as the original did (its kernel in Triton's interpreter)."""
    import shutil

    from torchport.agents import graph, runs
    from torchport.evals.tasks import load_suite

    task = load_suite("builtin", ["triton-fused-rmsnorm"])[0]
    src = tmp_path / "src"
    shutil.copytree(task.repo, src)
    settings = {"source": str(src), "target": "tpu", "out": str(tmp_path / "out"), "llm": "none"}
    final = graph.start({**settings, "steps": 3}, graph.Runtime(runs.new_run_id()))
    assert final["outcome"] == "verified", final["verification"]["reason"]
    port = tmp_path / "out" / "kernels"
    assert (port / "triton_on_torch.py").read_text() == RUNTIME
    original = (src / "kernels" / "fused_norm.py").read_text()
    ported = (port / "fused_norm.py").read_text()
    kernel = original[original.index("@triton.jit") :]
    assert ported.endswith(kernel)  # the kernel and everything after it, unchanged
    assert "from . import triton_on_torch as triton\n" in ported


def test_a_branch_and_an_in_place_migration_add_the_shipped_file(tmp_path):
    root = _repository(tmp_path / "repo")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "cuda"], check=True)
    migrate(root, MigrateOptions(target="tpu", branch="port"))
    shown = subprocess.run(
        [*git, "show", "port:kernels/triton_on_torch.py"], capture_output=True, text=True
    )
    assert shown.stdout == RUNTIME
    assert not (root / "kernels" / "triton_on_torch.py").exists()  # the checkout stays
    migrate(root, MigrateOptions(target="tpu", in_place=True))
    assert (root / "kernels" / "triton_on_torch.py").read_text() == RUNTIME
    assert (root / "kernels" / "ops.py").read_text() == PACKAGE_IMPORTS + KERNEL
