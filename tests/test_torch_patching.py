"""The one way to patch torch (sandbox/patching.py): named, listed, undoable, stacked."""

from __future__ import annotations

import types

import pytest
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
