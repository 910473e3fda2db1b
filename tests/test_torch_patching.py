"""The one way to patch torch (sandbox/patching.py): named, listed, undoable, stacked; and
nothing in the product assigns a torch attribute any other way."""

from __future__ import annotations

import types

import pytest
import torch_source_scan
from torchport.sandbox import patching


class _Base:
    def greet(self) -> str:
        return "base"


class _Owner(_Base):
    own = "own"


@pytest.fixture
def owner() -> types.ModuleType:
    module = types.ModuleType("fake.torch.cuda")
    module.synchronize = lambda: "real"  # type: ignore[attr-defined]
    yield module
    patching.undo_all("test")


def test_a_patch_is_named_listed_and_undone(owner: types.ModuleType) -> None:
    real = owner.synchronize
    done = patching.patch(owner, "synchronize", lambda: "patched", by="test.one")
    assert owner.synchronize() == "patched"
    assert done.name == "fake.torch.cuda.synchronize"
    assert done.original is real
    assert patching.active("test") == [done]
    assert patching.active("test.one") == [done]
    assert patching.active("tes") == []  # a component, not a string prefix
    assert patching.original(owner, "synchronize") is real
    patching.undo(done)
    assert owner.synchronize is real
    assert patching.active("test") == []


def test_nested_patches_undo_in_either_order(owner: types.ModuleType) -> None:
    real = owner.synchronize
    for order in ((0, 1), (1, 0)):
        first = patching.patch(owner, "synchronize", lambda: "first", by="test.first")
        second = patching.patch(owner, "synchronize", lambda: "second", by="test.second")
        assert second.original is first.value
        assert patching.original(owner, "synchronize") is real
        patches = (first, second)
        patching.undo(patches[order[0]])
        # the newer one still in effect wins, whichever was undone
        assert owner.synchronize is patches[order[1]].value
        patching.undo(patches[order[1]])
        assert owner.synchronize is real


def test_undo_all_takes_back_one_component_only(owner: types.ModuleType) -> None:
    real = owner.synchronize
    kept = patching.patch(owner, "synchronize", lambda: "kept", by="test.kept")
    patching.patch(owner, "device_count", lambda: 2, by="test.gone.a")
    patching.patch(owner, "synchronize", lambda: "gone", by="test.gone.b")
    patching.undo_all("test.gone")
    assert patching.active("test") == [kept]
    assert owner.synchronize is kept.value
    assert not hasattr(owner, "device_count")  # added by a patch: undo deletes it
    patching.undo(kept)
    assert owner.synchronize is real


def test_an_inherited_attribute_is_shadowed_then_uncovered() -> None:
    done = patching.patch(_Owner, "greet", lambda self: "patched", by="test")
    assert done.name == f"{__name__}._Owner.greet"
    assert _Owner().greet() == "patched"
    assert done.original is _Base.greet
    patching.undo(done)
    assert "greet" not in vars(_Owner)
    assert _Owner().greet() == "base"


def test_no_torch_attribute_is_assigned_outside_the_patching_module() -> None:
    """`torch.x.y = v`, `setattr(torch.x, ...)`, `del torch.x.y` (through any import
    alias or local name bound to a torch object) must go through `patching.patch`, or the
    replacement is neither listed for a torch upgrade nor undoable. Limit: an owner that
    reaches a function only as a parameter (`def wrap(cls): cls.f = ...`) is not seen."""
    found = [
        f"{w.path}:{w.line} ({w.function}) assigns {w.symbol}"
        for w in torch_source_scan.writes()
        if w.path != "sandbox/patching.py"
    ]
    assert found == [], "use torchport.sandbox.patching.patch:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ntorch.cuda.is_available = f\n",
        "import torch.cuda as c\nc.is_available = f\n",
        "from torch import cuda\ncuda.is_available = f\n",
        "import torch\ndef g():\n    acc = torch.accelerator\n    acc.synchronize = f\n",
        "import torch\nfor o in (torch.cuda, torch.mps):\n    o.synchronize = f\n",
        "import torch\nsetattr(torch.cuda, name, f)\n",
        "from torch.utils.data import DataLoader\nDataLoader.__init__ = f\n",
    ],
)
def test_the_scan_sees_each_way_of_assigning(tmp_path, monkeypatch, source: str) -> None:
    path = tmp_path / "sandbox" / "x.py"
    path.parent.mkdir()
    path.write_text(source)
    monkeypatch.setattr(torch_source_scan, "ROOT", tmp_path)
    assert {w.path for w in torch_source_scan.writes()} == {"sandbox/x.py"}


def test_the_scan_leaves_other_assignments_alone(tmp_path, monkeypatch) -> None:
    path = tmp_path / "sandbox" / "x.py"
    path.parent.mkdir()
    path.write_text(
        "import torch\nimport numpy as np\nnp.fromfile = f\nx = torch.zeros(1)\n"
        "def g(torch_like):\n    torch_like.y = 1\n    cuda = object()\n    cuda.z = 2\n"
    )
    monkeypatch.setattr(torch_source_scan, "ROOT", tmp_path)
    assert list(torch_source_scan.writes()) == []
