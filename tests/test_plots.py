"""Each verification draws both runs' losses per step with the tolerance band it was judged
by (``losses.png`` beside ``verification.md``), a panel per rank."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from torchport.agents.plots import loss_figure, loss_png
from torchport.cli.main import main as cli

_TWO_RANKS = [
    {"rank": r, "step": s, "reference": 1.0 / s, "target": 1.0 / s + 0.01 * r}
    for r in (0, 1)
    for s in (1, 2, 3)
]


def test_a_panel_per_rank_with_both_runs_and_the_band():
    fig = loss_figure(_TWO_RANKS, (1e-4, 1e-5), "title")
    axes = fig.get_axes()
    assert [ax.get_ylabel() for ax in axes] == ["loss, rank 0", "loss, rank 1"]
    for ax, rank in zip(axes, (0, 1), strict=True):
        original, port = ax.get_lines()
        assert list(original.get_ydata()) == [1.0, 0.5, 1.0 / 3]
        expected = [v + 0.01 * rank for v in (1.0, 0.5, 1.0 / 3)]
        assert list(port.get_ydata()) == pytest.approx(expected)
        [band] = ax.collections  # the tolerance around the original
        low, high = band.get_paths()[0].get_extents().y0, band.get_paths()[0].get_extents().y1
        assert low == pytest.approx(1.0 / 3 - (1e-5 + 1e-4 / 3))
        assert high == pytest.approx(1.0 + 1e-5 + 1e-4)
    assert loss_figure([], (0, 0), "nothing") is None


def test_the_png_is_an_image_and_only_for_compared_losses():
    import matplotlib.image

    record = {"verdict": "failed", "policy": "fp32", "parity": {"compared": "losses", "steps": 3}}
    record["parity"]["per_step"] = _TWO_RANKS
    data = loss_png(record, (1e-4, 1e-5))
    assert data is not None and data.startswith(b"\x89PNG\r\n\x1a\n")
    height, width, _ = matplotlib.image.imread(io.BytesIO(data), format="png").shape
    assert width > 300 and height > 300
    outputs = {**record, "parity": {"compared": "outputs", "per_step": []}}
    assert loss_png(outputs, (1e-4, 1e-5)) is None


_TRAIN = """import torch
from torch import nn

torch.manual_seed(1)
net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).cuda()
sgd = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
inputs, labels = torch.randn(6, 3).cuda(), torch.tensor([0, 1, 1, 0, 1, 0]).cuda()
for _ in range(3):
    sgd.zero_grad()
    nn.functional.cross_entropy(net(inputs), labels).backward()
    sgd.step()
"""


@pytest.mark.slow
def test_a_verified_port_has_its_picture_beside_the_report(tmp_path: Path):
    source = tmp_path / "repo"
    source.mkdir()
    (source / "train.py").write_text(_TRAIN)
    out = tmp_path / "port"
    code = cli(["migrate", str(source), "-t", "tpu", "--llm", "none", "--steps", "3",
                "--entry", "python train.py", "--out", str(out)])  # fmt: skip
    assert code == 0
    report = out / "torchport-report"
    assert (report / "losses.png").read_bytes().startswith(b"\x89PNG")
    assert "](losses.png)" in (report / "verification.md").read_text()
