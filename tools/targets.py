"""The targets torchport ports to, as data: one frozen ``TargetProfile`` per target.

A target's facts (its device string, distributed backend, autocast dtype, sync call,
install line, environment variables, launch step, emulator mode, the LLM's note) live in
``data/targets.toml``, so that a codemod asks ``profile.dist_backend`` instead of
branching on a target's name, and a new target is a new table rather than an edit of every
module that knows the four. ``TORCHPORT_TARGET_PROFILES`` names one more TOML file of the
same shape, read after the shipped one: a target added there is a target everywhere
(``TARGETS``, the catalogue's kind-keyed fixes, the codemods registered by kind).
"""

from __future__ import annotations

import functools
import os
import tomllib
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

from ..sandbox import torchtpu_facts
from ..sandbox.modes import EMULATED, GENERIC, DeviceNames, names_problem

KINDS: tuple[str, ...] = ("vendor", "agnostic")
EXTRA_PROFILES = "TORCHPORT_TARGET_PROFILES"


class ProfileError(ValueError):
    """A target table is malformed: raised at load so a bad target never ships silently."""


@dataclass(frozen=True, slots=True)
class TargetProfile:
    """What torchport knows of one target. Code fields hold Python source the codemods
    emit as written; ``None`` means the target has no such thing (the accelerator target
    has no device string of its own, only xla has a lazy step)."""

    name: str
    title: str
    word: str  # how prose names the device ("the TPU"): help texts the codemods rewrite
    kind: str  # one of KINDS
    device_expr: str  # the device to move things to when no device variable is in scope
    device_type_expr: str  # a device *string* (argparse defaults, config values)
    sync_call: str  # wait for the device (timing, CUDA-event replacements)
    llm_note: str  # what the rewriter's model is told about the target
    device: str | None = None  # the device string and torch.device type
    dist_backend: str | None = None  # torch.distributed backend name
    compile_backend: str | None = None  # torch.compile backend
    autocast_dtype: str | None = None  # torch.<dtype> a vendor's autocast runs in
    device_module: str | None = None  # module holding the device's RNG state functions
    device_import: str | None = None  # the import that registers the device type
    torch_requirements: tuple[str, ...] = ()  # what a CUDA torch pin becomes; () keeps it
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES's counterpart
    launch_blocking: str | None = None  # CUDA_LAUNCH_BLOCKING's counterpart
    launch_step: str | None = None  # the parent's call before workers start
    dist_init_method: str | None = None  # init_process_group's init_method for the backend
    dist_init_required: bool = False  # the program's own init_method cannot stay
    dist_import: str | None = None  # the import that registers the distributed backend
    matmul_precision_setter: str | None = None  # what allow_tf32 = x becomes (TPB002)
    launch_module: str | None = None  # the launch step as ``python -m`` in a shell line
    privateuse1: bool = False  # a PrivateUse1 backend (profiler activity, export_stacks)
    checkpoint_onto_device: bool = False  # torch.load's map_location is the device
    tensor_flag: str | None = None  # ``Tensor.is_<device>``, where the device has one
    # the sandbox mode that verifies it (sandbox.modes): its own device's, or the generic
    # mode's, which then runs under this profile's device and backend names
    emulator: str | None = None
    one_device_per_process: bool = False  # a process sees only its own device, index 0
    device_index_dropped: bool = False  # torch.device(type, i)'s index is not the program's
    lazy: bool = False  # lazy execution: a step boundary syncs the graph

    @property
    def is_vendor(self) -> bool:
        return self.kind == "vendor"

    @property
    def rng_module(self) -> str:
        """The module whose get_rng_state/set_rng_state a program's CUDA ones become."""
        return self.device_module or f'torch.get_device_module("{self.device}")'

    @property
    def may_have_triton(self) -> bool:
        """Device-agnostic code may run on a GPU Triton compiles for (CUDA, ROCm): a port
        keeps Triton where it is installed and takes a stand-in elsewhere."""
        return self.kind == "agnostic"

    @property
    def may_lack_device(self) -> bool:
        """Device calls raise on a CPU-only machine (device-agnostic code): guard them."""
        return self.kind == "agnostic"

    @property
    def emulated_names(self) -> DeviceNames | None:
        """The names the generic emulated device takes to verify this target: its device
        and backends, where it runs on the generic mode under a device of its own (a target
        of a profile file); None: the mode's own device is the target's."""
        device = self.device
        if self.emulator != GENERIC or device is None or device == GENERIC:
            return None
        return DeviceNames(device, self.dist_backend or device, self.compile_backend or device)


_FIELDS = {f.name for f in fields(TargetProfile)}


def _profile(table: dict, source: str) -> TargetProfile:
    """One ``[[target]]`` table; ``from_facts`` fields are read from TorchTPU's wheel facts
    (sandbox/data/torch_tpu.toml, ``section.key``), the one source of those facts."""
    table = dict(table)
    for field, key in table.pop("from_facts", {}).items():
        section, _, name = key.partition(".")
        table[field] = torchtpu_facts.section(section)[name]
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise ProfileError(f"{source}: unknown target field(s) {unknown}")
    if table.get("kind") not in KINDS:
        raise ProfileError(f"{source}: target {table.get('name')!r} kind must be one of {KINDS}")
    if "torch_requirements" in table:
        table["torch_requirements"] = tuple(table["torch_requirements"])
    try:
        found = TargetProfile(**table)
    except TypeError as exc:
        raise ProfileError(f"{source}: {exc}") from exc
    if problem := _emulator_problem(found):
        raise ProfileError(f"{source}: target {found.name!r}: {problem}")
    return found


def _emulator_problem(found: TargetProfile) -> str | None:
    """Why the sandbox could not verify ``found`` on the emulator its profile names."""
    if found.emulator is None:
        return None
    if found.emulator not in EMULATED:
        return f"emulator must be one of {EMULATED}, not {found.emulator!r}"
    if found.device in (None, found.emulator):
        return None
    names = found.emulated_names
    if names is None:
        return f"only the {GENERIC!r} emulator runs a device of the target's own"
    return names_problem(names)


def load_profiles(text: str, source: str) -> tuple[TargetProfile, ...]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{source}: {exc}") from exc
    return tuple(_profile(t, source) for t in data.get("target", []))


@functools.cache
def _shipped() -> tuple[TargetProfile, ...]:
    shipped = resources.files(__package__).joinpath("data", "targets.toml")
    return load_profiles(shipped.read_text(encoding="utf-8"), "targets.toml")


def shipped_names() -> frozenset[str]:
    """The targets of the shipped file: the catalogue must say how each is fixed."""
    return frozenset(p.name for p in _shipped())


@functools.cache
def profiles() -> dict[str, TargetProfile]:
    """Every target by name: the shipped ones, then those of ``TORCHPORT_TARGET_PROFILES``."""
    found = list(_shipped())
    extra = os.environ.get(EXTRA_PROFILES)
    if extra:
        found.extend(load_profiles(Path(extra).read_text(encoding="utf-8"), extra))
    by_name: dict[str, TargetProfile] = {}
    for profile in found:
        if profile.name in by_name or profile.name in KINDS or profile.name == "all":
            raise ProfileError(f"target {profile.name!r} named twice, or named as a kind")
        by_name[profile.name] = profile
    return by_name


def profile(name: str) -> TargetProfile:
    try:
        return profiles()[name]
    except KeyError:
        raise ProfileError(f"unknown target {name!r}") from None


def of_kind(kind: str) -> frozenset[str]:
    return frozenset(name for name, p in profiles().items() if p.kind == kind)


def expand(selectors: frozenset[str] | set[str] | tuple[str, ...]) -> frozenset[str]:
    """Target names for a set of target names and kind names (``{"vendor"}``)."""
    names: set[str] = set()
    for selector in selectors:
        if selector in KINDS:
            names |= of_kind(selector)
        elif selector in profiles():
            names.add(selector)
        else:
            raise ProfileError(f"neither a target nor a kind: {selector!r}")
    return frozenset(names)
