"""nn.DataParallel on one-device-per-process targets (TPN009): the model is unwrapped, and
what depended on the wrapper (``.module``, ``module.``-prefixed checkpoints) keeps working.

The program below is the pre-DDP research idiom: wrap, resume from a checkpoint saved while
wrapped, save again through ``.module`` in a helper defined *above* the wrap.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torchport.agents.verifier import RunLimits, verify_tree
from torchport.cli.main import main as cli

TRAIN = textwrap.dedent(
    """
    import sys
    import torch
    import torch.nn as nn


    def export(model, path):
        torch.save(model.module.state_dict(), path)


    def main(resume):
        torch.manual_seed(0)
        model = nn.DataParallel(nn.Linear(4, 1)).cuda()
        model.load_state_dict(torch.load(resume)["state_dict"])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(8, 4).cuda(), torch.randn(8, 1).cuda()
        for _ in range(3):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        export(model, "weights.pt")


    if __name__ == "__main__":
        main(sys.argv[1])
    """
)


def _checkpoint_saved_under_data_parallel(path: Path) -> None:
    torch.manual_seed(1)
    layer = torch.nn.Linear(4, 1)
    state = {f"module.{key}": value for key, value in layer.state_dict().items()}
    torch.save({"state_dict": state}, path)


@pytest.mark.slow
def test_the_port_unwraps_the_model_and_still_loads_the_originals_checkpoint(tmp_path: Path):
    source = tmp_path / "repo"
    source.mkdir()
    (source / "train.py").write_text(TRAIN)
    _checkpoint_saved_under_data_parallel(source / "resume.pt")
    out = tmp_path / "tpu"
    assert cli(["migrate", str(source), "-t", "tpu", "--llm", "none", "--no-verify", "-q",
                "--out", str(out)]) == 0  # fmt: skip
    port = (out / "train.py").read_text()
    assert "DataParallel" not in port and ".module" not in port
    assert "model = nn.Linear(4, 1).to(" in port
    assert 'k.removeprefix("module.")' in port  # the original's checkpoint keys
    budget = RunLimits(steps=3, timeout_s=120, memory_mb=2048)
    command = ["python", "train.py", "resume.pt"]
    verification, reference = verify_tree(source, out, command, "tpu", budget, None)
    assert reference["status"] == "ok", reference
    assert (verification.verdict, verification.parity.steps) == ("verified", 3), verification.reason


def test_a_wrapper_the_code_asks_about_is_left_for_a_human(tmp_path: Path):
    source = tmp_path / "repo"
    source.mkdir()
    (source / "train.py").write_text(
        "import torch.nn as nn\n"
        "model = nn.DataParallel(nn.Linear(4, 1), device_ids=[0, 1]).cuda()\n"
        "print(len(model.device_ids))\n"
    )
    out = tmp_path / "tpu"
    left_for_a_human = 1  # migrate's exit status when constructs remain
    assert cli(["migrate", str(source), "-t", "tpu", "--llm", "none", "--no-verify", "-q",
                "--out", str(out)]) == left_for_a_human  # fmt: skip
    assert "model = nn.DataParallel(nn.Linear(4, 1))" in (out / "train.py").read_text()
    manual = (out / "torchport-report" / "manual.md").read_text()
    assert "— TPN005" in manual and "— TPN009" not in manual  # the scanner saw device_ids read


BOTH_WRAPPERS = textwrap.dedent(
    """
    import argparse
    import os

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main(argv=None):
        parser = argparse.ArgumentParser()
        parser.add_argument("--distributed", action="store_true")
        parser.add_argument("--resume", default="")
        args = parser.parse_args(argv)
        model = nn.Linear(4, 1)
        if args.distributed:
            store = "file://" + os.path.abspath("rendezvous")
            dist.init_process_group("nccl", init_method=store, rank=0, world_size=1)
            model.cuda()
            model = DDP(model)
        else:
            model = nn.DataParallel(model).cuda()
        if args.resume:
            model.load_state_dict(torch.load(args.resume)["state_dict"])
            print("resumed", "ddp" if args.distributed else "dp", model.module.bias.item())


    if __name__ == "__main__":
        main()
    """
)
# runs the port's two resume paths in one sandboxed process: unwrapped, then under DDP
BOTH_PATHS = (
    "import train\n"
    'train.main(["--resume", "resume.pt"])\n'
    'train.main(["--distributed", "--resume", "resume.pt"])\n'
)


@pytest.mark.slow
def test_keys_keep_their_prefix_where_ddp_still_wraps_the_model(tmp_path: Path):
    """DataParallel goes, DistributedDataParallel of the same variable stays: the resume of a
    wrapped checkpoint must strip ``module.`` on the unwrapped path only (under DDP the keys
    match as they are), and ``.module`` must still reach the model under DDP."""
    source = tmp_path / "repo"
    source.mkdir()
    (source / "train.py").write_text(BOTH_WRAPPERS)
    out = tmp_path / "tpu"
    assert cli(["migrate", str(source), "-t", "tpu", "--llm", "none", "--no-verify", "-q",
                "--out", str(out)]) == 0  # fmt: skip
    port = (out / "train.py").read_text()
    assert "DataParallel(" not in port and "DDP(model)" in port
    torch.manual_seed(1)
    wrapped = torch.nn.DataParallel(torch.nn.Linear(4, 1))  # on CPU: the keys DDP saves too
    bias = wrapped.module.bias.item()
    torch.save({"state_dict": wrapped.state_dict()}, out / "resume.pt")
    (out / "both.py").write_text(BOTH_PATHS)
    command = [sys.executable, "-m", "torchport.cli", "run", "--target", "tpu", "--root",
               str(out), "--steps", "1", "--timeout", "240", "-f", "json", "--",
               "python", "both.py"]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=400)
    result = json.loads(proc.stdout)
    assert result["status"] == "ok", (result["error"], result["stderr_tail"][-3000:])
    lines = [line.split() for line in result["stdout_tail"].splitlines()]
    assert [(word, path) for word, path, _ in lines] == [("resumed", "dp"), ("resumed", "ddp")]
    assert [float(value) for *_, value in lines] == pytest.approx([bias, bias])
