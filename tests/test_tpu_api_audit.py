"""benchmarks/tpu_api_audit.py finds, in a migrated tpu port, each construct real TorchTPU
refuses (an internal ``torch.tpu`` API for the torch given, a rank-indexed device, DDP's
device_ids, a variable TorchTPU writes itself) and passes a clean port.

Run as the command it is, on small folders written here; the internal APIs and variables are
taken from torchport's TorchTPU facts, as the script takes them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from torchport.sandbox import torchtpu_facts

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "tpu_api_audit.py"

# torch 2.13: get_rng_state is internal since 2.13, synchronize since 2.11
INTERNAL_213 = torchtpu_facts.internal_for("2.13.0")
WRITTEN = torchtpu_facts.section("environment")["written_by_torchtpu"]


def audit(*args: str | Path) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    return done.returncode, done.stdout, done.stderr


def findings(folder: Path, *extra: str) -> list[tuple[str, str, int]]:
    code, out, err = audit(folder, "--json", *extra)
    assert code in (0, 1), err
    [result] = json.loads(out)
    return sorted((f["kind"], f["path"], f["line"]) for f in result["findings"])


def write(folder: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder


def test_the_facts_the_cases_rely_on():
    assert {"synchronize", "get_rng_state", "set_device"} <= set(INTERNAL_213)
    assert "TPU_VISIBLE_CHIPS" in WRITTEN
    assert "get_rng_state" not in torchtpu_facts.internal_for("2.12.0")


def test_internal_apis_are_found_in_every_spelling(tmp_path):
    port = write(
        tmp_path / "port",
        {
            "train.py": (
                "import torch\n"
                "import torch.tpu as tt\n"
                "from torch.tpu import get_rng_state\n"
                "torch.tpu.synchronize()\n"
                "tt.current_stream()\n"
                'state = torch.get_device_module("tpu").get_rng_state()\n'
                "torch.tpu.manual_seed(0)\n"  # public: not a finding
            ),
            "run.sh": "python -c 'import torch; torch.tpu.synchronize()'\n",
        },
    )
    assert findings(port) == [
        ("internal-api", "run.sh", 1),
        ("internal-api", "train.py", 3),
        ("internal-api", "train.py", 4),
        ("internal-api", "train.py", 5),
        ("internal-api", "train.py", 6),
    ]


def test_internal_is_judged_for_the_torch_given(tmp_path):
    port = write(tmp_path / "port", {"a.py": "import torch\nx = torch.tpu.get_rng_state()\n"})
    assert findings(port, "--torch", "2.13.0+cpu") == [("internal-api", "a.py", 2)]
    assert findings(port, "--torch", "2.12.1") == []


def test_rank_indexed_devices_are_found(tmp_path):
    port = write(
        tmp_path / "port",
        {
            "ddp.py": (
                "import torch\n"
                "from torch.accelerator import set_device_index\n"
                'a = torch.device("tpu", local_rank)\n'
                'b = f"tpu:{local_rank}"\n'
                'c = "tpu:" + str(rank)\n'
                'd = "tpu:{}".format(rank)\n'
                'e = "tpu:%d" % rank\n'
                'f = "tpu:1"\n'
                "torch.accelerator.set_device_index(local_rank)\n"
                "set_device_index(args.gpu)\n"
                "with torch.accelerator.device_index(rank):\n"
                "    pass\n"
                'g = torch.device(type="tpu", index=rank)\n'
            ),
            "launch.sh": "python train.py --device tpu:$LOCAL_RANK\n",
            "conf.yaml": "device: tpu:1\n",
        },
    )
    found = findings(port)
    assert [line for kind, path, line in found if path == "ddp.py"] == [
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        13,
    ]
    assert {(kind, path) for kind, path, _ in found} == {
        ("indexed-device", "ddp.py"),
        ("indexed-device", "launch.sh"),
        ("indexed-device", "conf.yaml"),
    }


def test_ddp_device_ids_and_output_device_are_found(tmp_path):
    port = write(
        tmp_path / "port",
        {
            "m.py": (
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                "import torch.nn as nn\n"
                "a = DDP(model, device_ids=[local_rank])\n"
                "b = nn.parallel.DistributedDataParallel(model, output_device=local_rank)\n"
                "c = DDP(model, [local_rank])\n"
                "d = DDP(model, device_ids=None)\n"  # fine: one device per process
                "e = DDP(model)\n"
            )
        },
    )
    assert findings(port) == [
        ("ddp-device-ids", "m.py", 3),
        ("ddp-device-ids", "m.py", 4),
        ("ddp-device-ids", "m.py", 5),
    ]


def test_variables_torchtpu_writes_are_found_in_code_not_comments(tmp_path):
    port = write(
        tmp_path / "port",
        {
            "env.py": (
                '"""Reads TPU_VISIBLE_CHIPS, in a docstring: not code."""\n'
                "import os\n"
                'os.environ["TPU_VISIBLE_CHIPS"] = "0"\n'
                f'bounds = os.environ.get("{WRITTEN[0]}")\n'
                "# TPU_VISIBLE_CHIPS in a comment\n"
            ),
            "run.sh": "# TPU_VISIBLE_CHIPS in a comment\nexport TPU_VISIBLE_CHIPS=0\n",
            "Makefile": "train:\n\tTPU_PROCESS_BOUNDS=1,1,1 python train.py\n",
            "job.yml": "env:\n  TPU_VISIBLE_CHIPS: '0'  # TPU_VISIBLE_CHIPS\n",
            "torchport-report/summary.md": "TPU_VISIBLE_CHIPS\n",
            "torchport-report/x.py": 'os.environ["TPU_VISIBLE_CHIPS"] = "0"\n',  # not the port
        },
    )
    assert findings(port) == [
        ("torchtpu-env", "Makefile", 2),
        ("torchtpu-env", "env.py", 3),
        ("torchtpu-env", "env.py", 4),
        ("torchtpu-env", "job.yml", 2),
        ("torchtpu-env", "run.sh", 2),
    ]


def test_notebook_cells_are_searched(tmp_path):
    cells = [
        {"cell_type": "markdown", "source": ["torch.tpu.synchronize()"]},
        {"cell_type": "code", "source": ["!pip install x\n", "torch.tpu.synchronize()\n"]},
    ]
    port = write(tmp_path / "port", {"nb.ipynb": json.dumps({"cells": cells})})
    assert findings(port) == [("internal-api", "nb.ipynb", 2)]


def test_a_clean_port_passes(tmp_path):
    port = write(
        tmp_path / "clean",
        {
            "train.py": (
                "import os\n"
                "import torch\n"
                "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                'device = torch.device("tpu")\n'
                'zero = torch.device("tpu", 0)\n'
                'x = torch.ones(2, device="tpu:0")\n'
                "torch.accelerator.set_device_index(0)\n"
                'own = torch.device("tpu", torch.accelerator.current_device_index())\n'
                'own2 = f"tpu:{torch.accelerator.current_device_index()}"\n'
                "torch.accelerator.synchronize()\n"
                "torch.tpu.manual_seed(0)\n"
                "model = DDP(model)\n"
                'os.environ["TPU_VISIBLE_DEVICES"] = "0"\n'
                'f"cuda:{rank}"  # not a tpu device\n'
            ),
            "launch.sh": (
                "python -m torch.tpu.distributed > env.sh\n"
                "torchrun --nproc_per_node=4 train.py --device tpu:0\n"
            ),
            "old.py": "print 'python 2'\n",
        },
    )
    code, out, err = audit(port, "--findings")
    assert code == 0, out + err
    assert "| clean | 3 | 0 | 0 | 0 | 0 | 0 |" in out


def test_the_table_counts_each_kind_and_the_exit_says_found(tmp_path):
    dirty = write(
        tmp_path / "dirty",
        {"a.py": 'import torch\ntorch.tpu.synchronize()\nd = f"tpu:{r}"\nd2 = "tpu:" + str(r)\n'},
    )
    clean = write(tmp_path / "clean", {"a.py": 'import torch\nd = torch.device("tpu")\n'})
    code, out, _ = audit(dirty, clean)
    assert code == 1
    assert "| dirty | 1 | 1 | 2 | 0 | 0 | 3 |" in out
    assert "| clean | 1 | 0 | 0 | 0 | 0 | 0 |" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [(("/nonexistent/port",), "not a folder"), ((), "give migrated output folders")],
)
def test_bad_input_is_a_clear_error(args, message):
    code, _, err = audit(*args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
