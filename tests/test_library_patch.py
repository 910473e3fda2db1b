"""CUDA inside an installed library the repository pins: the failing file is ported as the
repository was, the port verifies with it, and the report carries the patch.

A library that builds a tensor with ``device='cuda'`` by default (timm 0.3.2's Mixup did)
fails the port on the target though the repository's own code is ported: no edit of the
repository reaches that line. torchport ports the library file in a private copy that the
port's run imports first, says the verdict holds only with it, writes the patch beside the
report, and leaves the installed library as it was.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_environment import build_wheel, wheels, write  # noqa: F401  (wheels: fixture)
from torchport.cli.main import main as cli

ONE_HOT = """\
import torch


def one_hot(x, num_classes, device='cuda'):
    return torch.zeros(x.size(0), num_classes, device=device).scatter_(1, x.view(-1, 1), 1.0)
"""

TRAIN = """\
import torch
from onehotlib import one_hot

torch.manual_seed(0)
model = torch.nn.Linear(4, 3).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
for step in range(3):
    loss = ((model(x.cuda()) - one_hot(y.cuda(), 3)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, "loss", loss.item())
"""


@pytest.mark.slow
def test_a_library_file_with_cuda_defaults_is_ported_and_delivered_as_a_patch(
    tmp_path: Path,
    wheels: Path,  # noqa: F811
):
    build_wheel(wheels, "onehotlib", "0.3.2", ONE_HOT)
    source = write(tmp_path / "repo", {"requirements.txt": "onehotlib==0.3.2\n", "train.py": TRAIN})
    out = tmp_path / "port"
    code = cli(["migrate", str(source), "-t", "tpu", "--llm", "none", "--steps", "3",
                "--entry", "python train.py", "--out", str(out)])  # fmt: skip
    report = out / "torchport-report"
    v = json.loads((report / "verification.json").read_text())["verification"]
    assert (code, v["verdict"]) == (0, "verified"), v["reason"]
    [patch] = v["library_patches"]
    assert (patch["distribution"], patch["version"], patch["file"]) == (
        "onehotlib",
        "0.3.2",
        "onehotlib/__init__.py",
    )
    # said before the comparison: the verdict holds only with the patch
    assert v["reason"].index("with 1 installed library file(s) ported as the repository was") < (
        v["reason"].index("3 steps match the original")
    )
    assert "library-onehotlib-0.3.2.patch" in v["next_step"]
    diff = (report / "library-onehotlib-0.3.2.patch").read_text()
    assert "-def one_hot(x, num_classes, device='cuda'):" in diff
    assert "+def one_hot(x, num_classes, device='tpu'):" in diff
    # the patch applies to the installed library as the next step says
    site = tmp_path / "site"
    write(site, {"onehotlib/__init__.py": ONE_HOT})
    patched = subprocess.run(
        ["patch", "-p1", "-d", str(site)], input=diff, text=True, capture_output=True
    )
    assert patched.returncode == 0, patched.stdout + patched.stderr
    assert "device='tpu'" in (site / "onehotlib" / "__init__.py").read_text()
    # the repository's own files hold no library code
    assert not (out / "onehotlib").exists()


def test_a_library_file_is_patched_only_inside_the_dependency_overlay(tmp_path: Path):
    """A failure in a file outside what torchport installed (the interpreter's own site, a
    path the frame names that is not there) is nobody's to patch."""
    from torchport.agents.library_patch import failing_file

    site = write(tmp_path / "site-packages", {"lib/__init__.py": ONE_HOT})
    frame = {"file": f"{site}/lib/__init__.py", "line": 5, "function": "one_hot", "code": ""}
    error = {
        "type": "AssertionError",
        "message": "Torch not compiled with CUDA enabled",
        "frame": {"file": "train.py", "line": 9},
        "traceback": [{"file": "train.py", "line": 9}, frame],
    }
    result = {"status": "failed", "error": error}
    assert failing_file(result, "tpu", (str(site),)) == "lib/__init__.py"
    assert failing_file(result, "tpu", (str(tmp_path / "elsewhere"),)) is None
    not_cuda = {**error, "type": "ValueError", "message": "bad shape"}
    assert failing_file({"status": "failed", "error": not_cuda}, "tpu", (str(site),)) is None
