"""Operator coverage of the emulated device, measured with PyTorch's own OpInfo samples.

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` that the
CPU supports in float32, the first ``--samples`` sample inputs run on the CPU and on the
emulated device (each emulator in a fresh process: activation is for good), and each op
lands in one bucket:

- ``matched``: every sample ran on the device and its results equal the CPU's
  (``torch.testing.assert_close``, float32 tolerances, NaNs equal);
- ``differed``: a sample ran but its results are not the CPU's;
- ``differed_marked``: the same, for an op whose CPU-versus-device comparison PyTorch's own
  OpInfo skips or expects to fail on every device (``empty``, random ops...);
- ``not_implemented``: a sample raised NotImplementedError (the device lacks the op);
- ``error``: a sample raised anything else (the message is kept);
- ``crashed``: the worker process died in the op (it resumes after it).

Samples the CPU itself refuses are skipped; an op none of whose samples the CPU ran is
``cpu_refused``. Matmul-class ops run at ``--matmul-precision highest`` by default (exact
float32, as the CPU): the figure is about coverage, not TorchTPU's bfloat16 passes. Prints
one line per backend and writes everything to ``--json``. Needs ``expecttest`` (PyTorch's
test utilities import it). Not a test. Usage:

    python benchmarks/opinfo_coverage.py [--backends python,native] [--device tpu]
        [--samples 3] [--ops add,sum,nn.functional.conv2d] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BUCKETS = (
    "matched",
    "differed",
    "differed_marked",
    "not_implemented",
    "error",
    "crashed",
    "cpu_refused",
)

WORKER = r"""
import itertools, json, signal, sys, warnings
import torch
from torch.utils._pytree import tree_map
from torchport.sandbox import emulated as emulator

backend, device_name, samples, progress, precision = sys.argv[1:6]
wanted = set(json.loads(sys.argv[6]))
warnings.filterwarnings("ignore")
device = emulator.activate(device_name, devices=1, backend=backend,
                           matmul_precision=None if precision == "device" else precision)
from torch.testing._internal.common_methods_invocations import op_db

def key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")

def to(x, dev):
    return x.to(dev) if isinstance(x, torch.Tensor) else x

def host(x):
    return x.cpu() if isinstance(x, torch.Tensor) else x

class Timeout(Exception):
    pass

def alarm(*_):
    raise Timeout("over 60 s")

signal.signal(signal.SIGALRM, alarm)

# PyTorch itself skips or expects failure of this op's CPU-versus-device comparison
# (TestCommon.test_compare_cpu) on every device: uninitialised memory, random draws.
def marked(op):
    return any(getattr(d, "test_name", None) == "test_compare_cpu"
               and getattr(d, "device_type", None) is None for d in op.decorators or ())

def one(op):
    result = {"samples": 0}
    for sample in itertools.islice(op.sample_inputs("cpu", torch.float32), int(samples)):
        parts = (sample.input, sample.args, sample.kwargs)
        try:
            on_device = tree_map(lambda x: to(x, device), parts)
        except Exception as exc:  # the sample cannot even be put on the device
            why = str(exc).split("\n")[0][:300]
            return {"bucket": "error", "why": f"to device: {type(exc).__name__}: {why}"}
        torch.manual_seed(0)
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # the CPU refuses this sample: nothing to compare
        result["samples"] += 1
        torch.manual_seed(0)
        try:
            got = tree_map(host, op(on_device[0], *on_device[1], **on_device[2]))
        except NotImplementedError as exc:
            return {"bucket": "not_implemented", "why": str(exc).split("\n")[0][:300]}
        except Exception as exc:
            why = str(exc).split("\n")[0][:300]
            return {"bucket": "error", "why": f"{type(exc).__name__}: {why}"}
        try:
            torch.testing.assert_close(got, expected, equal_nan=True, check_stride=False)
        except Exception as exc:
            bucket = "differed_marked" if marked(op) else "differed"
            return {"bucket": bucket, "why": str(exc).split("\n")[0][:300]}
    return {"bucket": "matched" if result["samples"] else "cpu_refused"}

with open(progress, "a") as out:
    for op in op_db:
        name = key(op)
        if name not in wanted:
            continue
        out.write(json.dumps({"op": name, "start": True}) + "\n")
        out.flush()
        signal.alarm(60)
        try:
            r = one(op)
        except Timeout as exc:
            r = {"bucket": "error", "why": f"Timeout: {exc}"}
        except Exception as exc:
            r = {"bucket": "error", "why": f"harness {type(exc).__name__}: {exc}"[:300]}
        finally:
            signal.alarm(0)
        out.write(json.dumps({"op": name, **r}) + "\n")
        out.flush()
"""

LIST_OPS = r"""
import json, torch
from torch.testing._internal.common_methods_invocations import op_db
names = [o.name + ("." + o.variant_test_name if o.variant_test_name else "")
         for o in op_db if torch.float32 in o.supported_dtypes("cpu")]
print(json.dumps(names))
"""


def _python() -> str:
    return sys.executable


def _env(backend: str) -> dict[str, str]:
    return {**os.environ, "TORCHPORT_EMULATOR": backend, "OMP_NUM_THREADS": "1"}


def all_ops() -> list[str]:
    """The op_db entries (``name.variant``) the CPU supports in float32."""
    proc = subprocess.run([_python(), "-c", LIST_OPS], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"cannot load PyTorch's OpInfo database: {last}")
    return json.loads(proc.stdout)


def run_backend(
    backend: str, device: str, ops: list[str], samples: int, precision: str
) -> dict[str, dict[str, Any]]:
    """Every op in ``ops`` on ``backend``; a worker that dies is restarted after its op."""
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="opinfo-") as tmp:
        progress = Path(tmp) / "progress.jsonl"
        while remaining := [o for o in ops if o not in results]:
            args = [backend, device, str(samples), str(progress), precision, json.dumps(remaining)]
            proc = subprocess.run(
                [_python(), "-c", WORKER, *args],
                capture_output=True,
                text=True,
                env=_env(backend),
                check=False,
            )
            started = None
            lines = progress.read_text().splitlines() if progress.exists() else []
            for line in lines:
                row = json.loads(line)
                if row.get("start"):
                    started = row["op"]
                else:
                    results[row["op"]] = {k: v for k, v in row.items() if k != "op"}
                    started = None
            progress.unlink(missing_ok=True)
            if proc.returncode == 0 and started is None:
                continue
            culprit = started or remaining[0]
            tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            if started is None and not lines:  # died before the first op: nothing to resume
                raise SystemExit(f"the {backend} worker failed to start: {tail}")
            results[culprit] = {"bucket": "crashed", "why": tail[:300]}
    return results


def summarise(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Counts per bucket, and the commonest reasons of the not-implemented and errors."""
    counts = collections.Counter(r["bucket"] for r in results.values())
    by_bucket: dict[str, list[str]] = {b: [] for b in BUCKETS}
    for op, r in sorted(results.items()):
        by_bucket[r["bucket"]].append(op)
    return {
        "counts": {b: counts.get(b, 0) for b in BUCKETS},
        "compared": len(results) - counts.get("cpu_refused", 0),
        "ops": by_bucket,
    }


def figure(backend: str, device: str, summary: dict[str, Any]) -> str:
    c = summary["counts"]
    missing = ", ".join(summary["ops"]["not_implemented"]) or "none"
    return (
        f"{c['matched']} of {summary['compared']} ops ran and matched the CPU on the emulated "
        f"{device} device ({backend} backend); {c['differed']} differed "
        f"(+{c['differed_marked']} PyTorch marks not comparable), {c['not_implemented']} "
        f"not implemented ({missing}), {c['error']} other errors, {c['crashed']} crashed "
        f"({c['cpu_refused']} more op_db entries: the CPU refused every sample)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="python,native")
    parser.add_argument("--device", default="tpu", choices=("tpu", "neuron"))
    parser.add_argument("--samples", type=int, default=3, help="sample inputs per op")
    parser.add_argument("--ops", default="", help="comma-separated op_db names (default: all)")
    parser.add_argument(
        "--matmul-precision",
        default="highest",
        choices=("highest", "high", "medium", "device"),
        help="device: the device's own default (TorchTPU: bfloat16 passes)",
    )
    parser.add_argument("--json", default="opinfo_coverage.json", help="where to write results")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    known = all_ops()
    ops = [o.strip() for o in args.ops.split(",") if o.strip()] or known
    unknown = sorted(set(ops) - set(known))
    if unknown:
        parser.error(f"not float32 OpInfo names in op_db: {', '.join(unknown)}")
    report: dict[str, Any] = {
        "device": args.device,
        "samples": args.samples,
        "matmul_precision": args.matmul_precision,
        "backends": {},
    }
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        results = run_backend(backend, args.device, ops, args.samples, args.matmul_precision)
        summary = summarise(results)
        report["backends"][backend] = {**summary, "results": results}
        print(figure(backend, args.device, summary), flush=True)
    Path(args.json).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
