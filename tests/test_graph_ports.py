"""CUDA graphs ported to the eager code they captured (TPT005, TPT008): what is refused and
why, and a whole-step capture verified rules-only against the original's real replays on
the reference shim (sandbox/shim/graphs.py). The outputs are golden files
(tests/fixtures/golden/TPT008*.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from rules_run import migrate_rules_only
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import scan


def _port(tmp_path: Path, source: str) -> tuple[str, list[str]]:
    source = textwrap.dedent(source)
    path = tmp_path / "t.py"
    path.write_text(source)
    findings = [f for f in scan(path).findings if f.rule in ("TPT005", "TPT008")]
    result = migrate_python(source, findings, "tpu", "t.py")
    return result.source, [why for _, why in result.unapplied]


REFUSED = {
    # whether the replays overwrite or add to the gradients depends on .grad at capture
    """
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model(x).sum().backward()
    g.replay()
    """: "only if they were None at capture",
    # the graph handed on: its replays happen where this file cannot see them
    """
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    graphs.append(g)
    """: "used otherwise than captured and replayed",
    """
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    with torch.cuda.graph(g):
        z = model(x)
    """: "captured 2 time(s)",
    """
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    def g_replay():
        pass
    """: "is a name of this file already",
    # a context the eager function could not enter again at each replay
    """
    g = torch.cuda.CUDAGraph()
    with open("log.txt", "w") as log, torch.cuda.graph(g):
        y = model(x)
    g.replay()
    """: "would have to enter again",
}


@pytest.mark.parametrize("snippet", sorted(REFUSED), ids=range(len(REFUSED)))
def test_a_capture_whose_eager_meaning_is_not_certain_is_left_with_its_reason(tmp_path, snippet):
    source, reasons = _port(tmp_path, "import torch\n" + textwrap.dedent(snippet))
    assert "torch.cuda.graph(g)" in source and "g = torch.cuda.CUDAGraph()" in source
    assert reasons and all(REFUSED[snippet] in why for why in reasons), reasons


def test_names_the_capture_binds_stay_the_enclosing_functions(tmp_path):
    source, reasons = _port(
        tmp_path,
        """\
        import torch


        def run(model, x):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                hidden = model(x)
                out = hidden.relu()
            g.replay()
            return out
        """,
    )
    assert reasons == []
    assert "    out = None\n    def g_replay():\n        nonlocal out\n" in source
    assert "hidden = None" not in source  # read only inside the block: its own local
    assert "    g_replay()\n    return out\n" in source
    compile(source, "t.py", "exec")


PROGRAM = """\
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
model = model.cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
static_x = torch.zeros(8, 16, device="cuda")
static_y = torch.zeros(8, 1, device="cuda")
graph = torch.cuda.CUDAGraph()
optimizer.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    static_loss = torch.nn.functional.mse_loss(model(static_x), static_y)
    static_loss.backward()
    optimizer.step()
data = torch.Generator().manual_seed(1)
for step in range(10):
    static_x.copy_(torch.randn(8, 16, generator=data))
    static_y.copy_(torch.randn(8, 1, generator=data))
    graph.replay()
    print(f"step {step} loss {static_loss.item():.6f}")
"""


@pytest.mark.slow
def test_a_captured_training_step_verifies_against_the_originals_replays(tmp_path):
    """The loss is read from the graph's static output, never from a .backward() the
    budget sees: the comparison is of the printed outputs of both runs."""
    final = migrate_rules_only(tmp_path, PROGRAM, "tpu", steps=5)
    assert final["outcome"] == "verified", (final["verification"]["reason"], final["decisions"])
    migrated = (tmp_path / "out" / "train.py").read_text()
    assert "CUDAGraph" not in migrated and "graph_replay()" in migrated
    assert final["verification"]["parity"]["max_abs"] < 1e-6
