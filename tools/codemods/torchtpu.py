"""What the tpu codemods may emit, read from the torch-tpu wheel's facts (torch_tpu.toml).

A port must run on every torch the TorchTPU release allows (its ``requires_torch`` range), not
only on the torch installed here. TorchTPU's internal gates are "torch >= since", so an API
that is internal on any allowed torch is internal on the newest one: that one decides.
"""

from __future__ import annotations

import functools
import re

from ...sandbox import torchtpu_facts


@functools.cache
def newest_allowed_torch() -> str:
    """The newest torch the wheel allows (``"<=2.15.0"`` in ``requires_torch``)."""
    spec = torchtpu_facts.section("wheel")["requires_torch"]
    found = re.search(r"<=?\s*([0-9][0-9.]*)", spec)
    if found is None:
        raise ValueError(f"torch-tpu's requires_torch has no upper bound: {spec!r}")
    return found.group(1)


def internal_somewhere(name: str) -> bool:
    """Whether ``torch.tpu.<name>`` is internal on some torch the wheel allows."""
    return name in torchtpu_facts.internal_for(newest_allowed_torch())


def keeps(name: str) -> bool:
    """Whether a port may call ``torch.tpu.<name>``: public, and internal on no allowed torch."""
    return name in torchtpu_facts.public_names() and not internal_somewhere(name)


def visible_devices_variable() -> str:
    """The variable that decides which chips a TorchTPU process sees."""
    return torchtpu_facts.section("environment")["visible_devices"]


def written_by_torchtpu() -> frozenset[str]:
    """Variables TorchTPU writes for each process itself: a port must not set them."""
    return frozenset(torchtpu_facts.section("environment")["written_by_torchtpu"])


def launch_function() -> str:
    """The parent's launch step as a Python call target (before spawning workers)."""
    return torchtpu_facts.section("distributed")["launch_function"]


def launch_module() -> str:
    """The launch step as a module a shell runs (``python -m <module>`` prints assignments)."""
    return torchtpu_facts.section("distributed")["launch_module"]
