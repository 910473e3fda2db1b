"""Pretrained weights that are a download: offline, the model keeps its own (seeded)
initialisation in both runs, the run records it and the report says the weights were not
the pretrained ones. Downloads here go to a closed loopback port: no test leaves the machine."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torchport.agents.data_notes import data_notes
from torchport.sandbox.harness import RunSpec, run
from torchport.sandbox.synthetic import weights

# nothing listens on the discard port: the download fails at once, as it does offline
URL = "http://127.0.0.1:9/models/linear-0123abcd.pth"


@pytest.fixture
def offline_weights():
    weights.install()
    yield
    weights.uninstall()


def test_a_failed_download_loads_as_the_models_own_parameters(offline_weights):
    model = torch.nn.Linear(2, 1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    keys = model.load_state_dict(torch.hub.load_state_dict_from_url(URL, progress=False))
    assert keys.missing_keys == [] and keys.unexpected_keys == []
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # model_zoo's name for the same function, and a non-strict load
    model.load_state_dict(torch.utils.model_zoo.load_url(URL), strict=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_reading_the_entries_of_weights_not_downloaded_fails_naming_them(offline_weights):
    state = torch.hub.load_state_dict_from_url(URL)
    assert "model" not in state and state.get("model", state) is state
    for read in (lambda: state["fc.weight"], lambda: list(state.items()), lambda: dict(state)):
        with pytest.raises(weights.PretrainedWeightsUnavailable, match=r"127\.0\.0\.1:9/models"):
            read()


def test_a_local_checkpoint_and_a_real_state_dict_are_untouched(offline_weights, tmp_path):
    model = torch.nn.Linear(2, 1)
    torch.save({"weight": torch.zeros(1, 2), "bias": torch.ones(1)}, tmp_path / "local.pth")
    model.load_state_dict(torch.load(tmp_path / "local.pth"))
    assert model.bias.item() == 1.0 and model.weight.abs().sum().item() == 0.0
    with pytest.raises(RuntimeError, match="Missing key"):
        model.load_state_dict({"weight": torch.zeros(1, 2)})  # strict as ever


def test_uninstall_restores_the_download_and_load_state_dict(offline_weights):
    weights.uninstall()
    try:
        assert torch.nn.Module.load_state_dict.__module__ == "torch.nn.modules.module"
        with pytest.raises(OSError):
            torch.hub.load_state_dict_from_url(URL)
    finally:
        weights.install()


PRETRAINED = """\
import torch
torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
model.load_state_dict(torch.hub.load_state_dict_from_url("{url}"))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(10):
    loss = (model(torch.ones(4, 2)) - 3).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_both_runs_start_from_the_same_initialisation_and_the_report_says_so(tmp_path):
    """The original (reference) and the port (tpu) of a program whose weights are a
    download train from the same parameters: the same losses, the stand-in in both."""
    root = tmp_path / "prog"
    root.mkdir()
    (root / "train.py").write_text(textwrap.dedent(PRETRAINED.format(url=URL)))
    results = [
        run(RunSpec(root=root, command=["python", "train.py"], mode=mode, steps=3))
        for mode in ("reference", "tpu")
    ]
    for result in results:
        assert result.status == "ok" and result.steps == 3, (result.error, result.stderr_tail)
        assert [r["path"] for r in result.synthetic_data] == [URL]
    assert len(results[0].losses) == 3
    assert results[0].losses == pytest.approx(results[1].losses, rel=1e-5)
    (note,) = data_notes(results[1].to_json())
    assert note.startswith("pretrained weights NOT loaded") and note.endswith(URL)
