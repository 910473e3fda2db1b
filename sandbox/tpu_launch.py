"""TorchTPU's launch step and the worker's side of it, on the emulated host.

A TorchTPU job decides ``TORCH_TPU_SLICEBUILDER_ADDRESSES`` and ``TORCH_TPU_TOPOLOGY`` in the
parent, before any launcher starts workers (``torch.tpu.distributed.set_tpu_launch_env()``,
or ``eval`` of what ``python -m torch.tpu.distributed`` prints); a worker whose ``WORLD_SIZE``
is set fails its device's first use when any of them is missing. The facts come from the
wheel (``sandbox/data/torch_tpu.toml``, ``[distributed]`` and ``[topology]``); this module
is their one implementation, used by the emulated ``torch.tpu.distributed``, by the device's
first use on both emulator backends, and by ``sandbox.launch_step`` (torchrun's parent).

Stdlib only: ``sandbox.launch_step`` runs it before torch is imported. One host only: a
sandboxed run has no other (the multi-host layout is refused with a clear error).
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import MutableMapping

from . import torchtpu_facts

# The TPU generation the emulated host is (torchport's choice, not a fact of the wheel): its
# table in hardware.py sizes every host of 1, 2, 4 and 8 chips, as TPU v4's does.
EMULATED_GENERATION = "TPU v5p"
# set_tpu_launch_env reads these to choose the multi-host layout (distributed.py).
MULTI_HOST_SIGNS = ("TPU_WORKER_HOSTNAMES", "JOB_COMPLETION_INDEX")
XPROF = "TORCH_TPU_XPROF_SESSION_ID"
ADDRESSES = "TORCH_TPU_SLICEBUILDER_ADDRESSES"
TOPOLOGY = "TORCH_TPU_TOPOLOGY"


class LaunchError(RuntimeError):
    """What TorchTPU's launch step raises (RuntimeError, as hardware.py's)."""


def topology(count: int) -> str:
    """``hardware.get_tpu_topology(count)`` on the emulated host's generation."""
    table = torchtpu_facts.section("topology")
    known = table["generations"][EMULATED_GENERATION]
    if str(count) not in known:
        raise LaunchError(table["no_topology_error"].format(count=count))
    return known[str(count)]


def unused_port() -> int:
    """A free TCP port on loopback (what ``portpicker.pick_unused_port`` gives TorchTPU)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _hosts(environ: MutableMapping[str, str]) -> list[str]:
    return [h for h in environ.get(MULTI_HOST_SIGNS[0], "").split(",") if h]


def set_launch_env(
    devices: int,
    *,
    nnodes: int | None = None,
    nproc_per_node: int | None = None,
    environ: MutableMapping[str, str] | None = None,
) -> None:
    """``set_tpu_launch_env`` on a host of ``devices`` chips: each variable it decides is
    set only where unset (an operator may pin any of them; a second call changes nothing).

    As the wheel's: the topology is looked up first (a count the table lacks raises even
    when ``TORCH_TPU_TOPOLOGY`` is set), the addresses are ``localhost:<unused port>``, one
    per rank (``nproc_per_node``, else one per chip)."""
    env = os.environ if environ is None else environ
    env.setdefault(XPROF, str(time.time_ns()))
    hosts = _hosts(env)
    if nnodes is not None and hosts and nnodes != len(hosts):
        raise ValueError(
            "set_tpu_launch_env(): expected nnodes to match the number of hosts in environment "
            f'variable TPU_WORKER_HOSTNAMES ({len(hosts)}: "{env[MULTI_HOST_SIGNS[0]]}"), '
            f"got {nnodes}"
        )
    if (nnodes or 1) > 1 or len(hosts) > 1 or MULTI_HOST_SIGNS[1] in env:
        raise LaunchError(
            "set_tpu_launch_env(): several hosts are not emulated: a sandboxed run has one "
            "host (unset TPU_WORKER_HOSTNAMES / JOB_COMPLETION_INDEX, nnodes=None or 1)"
        )
    shape = topology(nproc_per_node if nproc_per_node is not None else devices)
    count = nproc_per_node if nproc_per_node is not None else devices
    if ADDRESSES not in env:
        address = torchtpu_facts.section("distributed")["launch_single_host_address"]
        env[ADDRESSES] = ",".join(address.format(port=unused_port()) for _ in range(count))
    env.setdefault(TOPOLOGY, shape)


def printed(devices: int, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """What ``python -m torch.tpu.distributed`` prints (``_print_launch_env``): the launch
    step's variables as shell assignments, after taking the step in ``environ``."""
    env = os.environ if environ is None else environ
    set_launch_env(devices, environ=env)
    facts = torchtpu_facts.section("distributed")
    addresses = env.get(ADDRESSES, "")
    values = {
        **{name: env.get(name, "") for name in facts["launch_prints"]},
        "WORLD_SIZE": str(len(addresses.split(",")) if addresses else devices),
        "NODE_RANK": env.get("NODE_RANK", "0"),
    }
    lines = [
        f"{name}={values[name]}" if name == "WORLD_SIZE" else f'{name}="{values[name]}"'
        for name in facts["launch_prints"]
    ]
    return lines + [f'{n}="{env[n]}"' for n in facts["launch_prints_where_set"] if n in env]


_INTEGER = re.compile(r"\s*[+-]?\d+\s*")


def worker_error(environ: MutableMapping[str, str] | None = None) -> str:
    """TorchTPU's error at a worker's first device use ("" when it starts): with an integer
    ``WORLD_SIZE``, every variable of the distributed worker configuration must be set."""
    env = os.environ if environ is None else environ
    facts = torchtpu_facts.section("distributed")
    if not _INTEGER.fullmatch(env.get(facts["worker_gate"], "")):
        return ""  # one process: the configuration is not read
    missing = [name for name in facts["worker_requires"] if name not in env]
    if not missing:
        return ""
    return facts["worker_missing_error"].format(missing=", ".join(missing))
