"""bitsandbytes' optimizers ported by the codemods (TPK017), checked against bitsandbytes
itself: its 0.50 release runs its 8-bit optimizers on a CPU, so the ported call and the
original call train the same model side by side here, and the reference run of a whole
program uses the real library. What the port refuses, and bitsandbytes' quantized layers
(TPK012), stay for a human with the reason. The outputs are golden files
(tests/fixtures/golden/TPK017*.py)."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
import torch
from rules_run import migrate_rules_only
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import scan

needs_bnb = pytest.mark.skipif(
    importlib.util.find_spec("bitsandbytes") is None,
    reason="bitsandbytes is not installed (pip install -e '.[reference]')",
)


def ported(tmp_path: Path, call: str, target: str = "tpu") -> tuple[str, list[str]]:
    """``opt = <call>`` in a file that imports bitsandbytes as people do, ported."""
    source = textwrap.dedent(
        f"""\
        import bitsandbytes as bnb
        import torch
        from bitsandbytes.optim import AdamW8bit as Fast

        model = torch.nn.Linear(4, 2)
        opt = {call}
        """
    )
    path = tmp_path / "t.py"
    path.write_text(source)
    findings = [f for f in scan(path).findings if f.rule.startswith("TPK")]
    result = migrate_python(source, findings, target, "t.py")
    return result.source, [why for _, why in result.unapplied]


def _ported_line(source: str) -> str:
    return next(line for line in source.splitlines() if line.startswith("opt = "))[6:]


# bitsandbytes call -> (the torch call the port writes); every one of them must compute what
# bitsandbytes computes (test below)
PORTS = {
    "bnb.optim.Adam(model.parameters(), lr=1e-2, optim_bits=8)": (
        "torch.optim.Adam(model.parameters(), lr=1e-2)"
    ),
    # bitsandbytes' Adam decays decoupled: AdamW; its positional order named
    "bnb.optim.Adam(model.parameters(), 1e-2, (0.9, 0.99), 1e-8, 0.1)": (
        "torch.optim.AdamW(model.parameters(), 1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)"
    ),
    "bnb.optim.PagedAdam32bit(model.parameters(), lr=1e-2, weight_decay=0, amsgrad=True)": (
        "torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=0)"
    ),
    "Fast(model.parameters(), lr=1e-2, is_paged=True, min_8bit_size=65536)": (
        "torch.optim.AdamW(model.parameters(), lr=1e-2)"
    ),
    "bnb.optim.PagedAdamW(model.parameters(), lr=1e-2, weight_decay=0.05)": (
        "torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)"
    ),
    # dampening and nesterov are accepted and ignored by bitsandbytes
    "bnb.optim.SGD8bit(model.parameters(), 0.1, 0.9, dampening=0.5, nesterov=True)": (
        "torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)"
    ),
    "bnb.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=0.1)": (
        "torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=0.1)"
    ),
    "bnb.optim.Adagrad8bit(model.parameters(), lr=0.1, weight_decay=0.1)": (
        "torch.optim.Adagrad(model.parameters(), lr=0.1, weight_decay=0.1)"
    ),
    "bnb.optim.RMSprop(model.parameters(), lr=1e-2, alpha=0.9, momentum=0)": (
        "torch.optim.RMSprop(model.parameters(), lr=1e-2, alpha=0.9)"
    ),
}


@pytest.mark.parametrize("call", sorted(PORTS))
def test_each_optimizer_becomes_the_torch_call(tmp_path, call):
    source, reasons = ported(tmp_path, call)
    assert (_ported_line(source), reasons) == (PORTS[call], [])
    if call.startswith("Fast("):
        assert "Fast" not in source  # the aliased import went with its last use


def _train(make_optimizer, steps: int = 6) -> torch.Tensor:
    """A small model (every tensor under 4096 elements: bitsandbytes keeps its state in
    fp32 there, so the update is the same to rounding) trained a few steps."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    optimizer = make_optimizer(model)
    data = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=data)
        y = torch.randint(0, 4, (8,), generator=data)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@needs_bnb
@pytest.mark.parametrize("call", sorted(PORTS))
def test_the_port_computes_what_bitsandbytes_computes(call):
    """The table's claims (Adam's decoupled decay, the arguments bitsandbytes ignores) are
    bitsandbytes' own behaviour: each original call and its port train the same."""
    import bitsandbytes as bnb

    def make(code: str):
        names = {"bnb": bnb, "torch": torch, "Fast": bnb.optim.AdamW8bit}
        return lambda model: eval(code, {**names, "model": model})

    original, port = _train(make(call)), _train(make(PORTS[call]))
    assert not torch.equal(original, _train(lambda m: torch.optim.SGD(m.parameters(), lr=0.0)))
    torch.testing.assert_close(port, original, rtol=1e-5, atol=1e-6)


REFUSED = {
    "bnb.optim.Lion8bit(model.parameters(), lr=1e-4)": "torch.optim has no Lion",
    "bnb.optim.LAMB(model.parameters())": "torch.optim has no LAMB",
    "bnb.optim.RMSprop(model.parameters(), momentum=0.9)": "computes another update",
    "bnb.optim.Adam8bit(model.parameters(), percentile_clipping=5)": "percentile",
    "bnb.optim.AdamW(model.parameters(), args=config)": "config object",
    "make(bnb.optim.Adam8bit)": "referenced, not called",
    "bnb.nn.Linear8bitLt(4, 2, has_fp16_weights=False)": "memory and accuracy decision",
}


@pytest.mark.parametrize("call", sorted(REFUSED))
def test_what_torch_cannot_compute_the_same_is_left_with_its_reason(tmp_path, call):
    source, reasons = ported(tmp_path, call)
    assert f"opt = {call}\n" in source
    if call.startswith("bnb.nn."):  # TPK012 is manual: the reason is its catalogue text
        findings = [f for f in scan(tmp_path / "t.py").findings if f.rule == "TPK012"]
        assert REFUSED[call] in findings[0].fix["tpu"]["hint"]
    else:
        assert len(reasons) == 1 and REFUSED[call] in reasons[0], reasons


def test_global_optim_manager_overrides_are_removed_only_as_statements(tmp_path):
    source = textwrap.dedent(
        """\
        import bitsandbytes as bnb
        import torch

        model = torch.nn.Embedding(10, 4)
        bnb.optim.GlobalOptimManager.get_instance().register_module_override(
            model, "weight", {"optim_bits": 32}
        )
        manager = bnb.optim.GlobalOptimManager.get_instance()
        opt = bnb.optim.Adam8bit(model.parameters(), lr=1e-3)
        """
    )
    path = tmp_path / "t.py"
    path.write_text(source)
    findings = [f for f in scan(path).findings if f.rule == "TPK017"]
    result = migrate_python(source, findings, "tpu", "t.py")
    assert "register_module_override" not in result.source
    assert "manager = bnb.optim.GlobalOptimManager.get_instance()" in result.source
    assert [why for _, why in result.unapplied] == [
        "GlobalOptimManager is kept in a variable or passed on: remove its per-parameter "
        "8-bit settings by hand (the ported optimizer keeps every state in fp32)"
    ]


PROGRAM = """\
import bitsandbytes as bnb
import torch

torch.manual_seed(0)
# 64 x 128 weights: over bitsandbytes' min_8bit_size, so the original keeps 8-bit state
model = torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
model = model.cuda()
head = torch.nn.Linear(128, 1).cuda()
optimizer = bnb.optim.AdamW8bit(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
head_optimizer = bnb.optim.SGD8bit(head.parameters(), 0.05, momentum=0.9, nesterov=True)
for step in range(10):
    x = torch.randn(16, 128, device="cuda")
    loss = model(x).pow(2).mean() + head(x).pow(2).mean()
    optimizer.zero_grad()
    head_optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    head_optimizer.step()
"""


@needs_bnb
@pytest.mark.slow
@pytest.mark.parametrize("target", ["tpu", "neuron"])
def test_a_program_on_bitsandbytes_verifies_rules_only_against_bitsandbytes(tmp_path, target):
    """The reference runs bitsandbytes itself (8-bit state); the port keeps fp32 state: the
    same losses to the 8-bit rounding of the moments, within the fp32 policy."""
    final = migrate_rules_only(tmp_path, PROGRAM, target, steps=5)
    assert final["outcome"] == "verified", (final["verification"]["reason"], final["decisions"])
    migrated = (tmp_path / "out" / "train.py").read_text()
    assert "bnb" not in migrated and "torch.optim.AdamW(model.parameters()" in migrated
    assert final["verification"]["policy"] == "fp32"
    # bitsandbytes' quantized moments are not fp32 Adam's: the losses differ, a little
    assert 0 < final["verification"]["parity"]["max_rel"] < 1e-4
