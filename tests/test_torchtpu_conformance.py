"""TorchTPU's own wheel as the oracle: the emulated ``tpu`` device, the ``tpu`` codemods and
the rule catalogue checked against what torch-tpu 0.2.0 states.

The facts are sandbox/data/torch_tpu.toml; the first test proves that file is exactly what
tools/torchtpu_wheel.py derives from the cached wheel (make test's set-up fetches it), the
others hold torchport to it. Each test is one fact, and its message names the fact, the
wheel file it comes from and what torchport does instead, so that a failure reads as a
to-do. The emulator is observed black-box, in one fresh interpreter that activates it (the
way a program sees it), not one per name.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import test_emulator
import torch
from golden import GOLDEN, REVIEW
from torchport.sandbox import torchtpu_facts as facts
from torchport.tools import torchtpu_wheel
from torchport.tools.catalogue import load_catalogue

ROOT = Path(__file__).resolve().parents[1]
backend = test_emulator.backend  # the fixture: each emulator in turn
CORPUS = Path(__file__).parent / "fixtures" / "corpus"

INTERNAL = facts.internal_for(torch.__version__)
PUBLIC = facts.public_names("torch.tpu")
PROPERTIES = facts.public_properties("torch.tpu")
DEVICE_MODULE = "torch_tpu/_internal/device/_device_module.py"
PUBLIC_API = "torch_tpu/_internal/public_api.py"
# How the probe calls each API that takes an argument (not facts: what a program passes);
# an API a newer wheel adds without an entry here is called with none, and its test says so.
ARGS = {
    "set_device": "0",
    "device": "0",
    "set_stream": "torch.accelerator.current_stream()",
    "stream": "torch.tpu.Stream()",
    "precision": "torch.tpu.Precision.HIGHEST",
    "set_eager_mode": "torch.tpu.EagerMode.DEFER_NEVER",
    "device_of": "torch.zeros(1, device='tpu')",
}


# --- (a) the committed facts are the wheel's ---------------------------------------------


@pytest.fixture
def wheel() -> Path:
    """Where the set-up put the wheel: conftest keeps that cache (torchtpu_wheel.CACHE_ENV)
    while it points TORCHPORT_HOME at a temporary folder, so this is read when a test runs."""
    path = torchtpu_wheel.cached_wheel()
    if not path.is_file():
        pytest.skip(
            f"the torch-tpu wheel is not cached ({path}); `make test` fetches it"
            " (scripts/fetch-torch-tpu)"
        )
    return path


def test_the_wheel_cache_is_the_real_one_while_torchport_home_is_temporary():
    import os

    home = Path(os.environ["TORCHPORT_HOME"])
    assert not torchtpu_wheel.cache_dir().is_relative_to(home), (
        "tests look for the torch-tpu wheel under the session's temporary TORCHPORT_HOME:"
        f" conftest must keep the real cache in {torchtpu_wheel.CACHE_ENV}"
    )


def test_the_committed_facts_are_what_the_wheel_says(wheel):
    derived = torchtpu_wheel.render(torchtpu_wheel.open_wheel(wheel))
    committed = facts.FACTS_FILE.read_text(encoding="utf-8")
    assert derived == committed, (
        f"sandbox/data/torch_tpu.toml is not what {wheel.name} says: run"
        " scripts/derive-torch-tpu-facts to see the difference, --write to take the wheel's"
    )


def test_deriving_from_a_file_that_is_no_wheel_says_so(tmp_path):
    bogus = tmp_path / "torch_tpu-0.2.0-cp311-cp311-manylinux_2_31_x86_64.whl"
    bogus.write_text("not a zip")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/derive-torch-tpu-facts"), "--wheel", str(bogus)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "is not a readable wheel" in done.stderr and "Traceback" not in done.stderr


def _glue_reading(tmp_path: Path, constants: list[str]) -> torchtpu_wheel.Wheel:
    """A zip holding only a glue library whose symbols read ``constants`` through
    GetRequired[Integer]EnvOnce (as the 2.13 glue's are mangled)."""
    symbols = [
        f"_ZN9torch_tpu25GetRequiredIntegerEnvOnceIiXadsoKcL_ZNS_{len(c) + 7}k{c}EnvVarEEEEEERKv"
        for c in constants
    ]
    path = tmp_path / "glue.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(torchtpu_wheel.GLUE, "\0".join(["\x7fELF", *symbols, ""]))
    return torchtpu_wheel.open_wheel(path)


def test_the_worker_requirements_are_derived_as_a_set_and_ordered_as_recorded(tmp_path):
    recorded = torchtpu_wheel.WORKER_REQUIRES_ORDER
    # the glue's constants: RANK -> kRankEnvVar, LOCAL_RANK -> kLocalRankEnvVar, ...
    shuffled = sorted(n.title().replace("_", "") for n in recorded)
    wheel = _glue_reading(tmp_path, shuffled)
    assert torchtpu_wheel.worker_requires(wheel) == list(recorded)
    (tmp_path / "fewer").mkdir()
    fewer = _glue_reading(tmp_path / "fewer", shuffled[1:])
    with pytest.raises(torchtpu_wheel.WheelError, match="WORKER_REQUIRES_ORDER"):
        torchtpu_wheel.worker_requires(fewer)


def test_fetching_without_a_registry_and_no_cached_wheel_says_what_is_missing(tmp_path):
    env = {"TORCHPORT_HOME": str(tmp_path), "PIP_NO_INDEX": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/fetch-torch-tpu")],
        capture_output=True,
        text=True,
        env=env,
    )
    wheel = facts.section("wheel")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"could not download {wheel['name']}=={wheel['version']}" in done.stderr
    assert wheel["file"] in done.stderr and "make test" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list((tmp_path / "torch-tpu").iterdir()), "nothing half-downloaded is kept"


def test_fetching_puts_the_wheel_in_the_cache_the_variable_names(tmp_path):
    cache = tmp_path / "kept"
    env = {
        "TORCHPORT_HOME": str(tmp_path / "home"),
        torchtpu_wheel.CACHE_ENV: str(cache),
        "PIP_NO_INDEX": "1",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/fetch-torch-tpu")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert str(cache / facts.section("wheel")["file"]) in done.stderr
    assert not (tmp_path / "home" / "torch-tpu").exists(), "not under TORCHPORT_HOME"


# --- (b) the emulated device's surface, seen by a program --------------------------------

SURFACE = """
import enum, os
F = json.loads({facts!r})
t = torch.tpu

def outcome(fn):
    try:
        value = fn()
        return ["ok", repr(value)[:200]]
    except BaseException as exc:
        return [type(exc).__name__, str(exc)]

def as_torch(expr):
    # a call from torch's own code: a function of a torch module, in a file under torch/
    where = {{"__name__": "torch._torchport_probe", "torch": torch}}
    path = os.path.join(os.path.dirname(torch.__file__), "_torchport_probe.py")
    exec(compile("def probe():\\n    return " + expr + "\\n", path, "exec"), where)
    return outcome(where["probe"])

result["missing"] = [n for n in F["public"] if not hasattr(t, n)]
props = {{}}
for name in F["properties"]:
    info = {{}}
    try:
        value = getattr(t, name)
        info["callable"] = callable(value)
        if isinstance(value, bool):
            new = not value
        elif isinstance(value, enum.Enum):
            new = next(m for m in type(value) if m != value)
        else:
            new = value
        setattr(t, name, new)
        info["reads_back"] = getattr(t, name) == new
    except BaseException as exc:
        info["error"] = f"{{type(exc).__name__}}: {{exc}}"
    props[name] = info
result["properties"] = props
cms = {{}}
for name, arg in F["context_managers"].items():
    def enter(name=name, arg=arg):
        manager = getattr(t, name)(eval(arg))
        with manager:
            pass
        return type(manager).__name__
    cms[name] = outcome(enter)
result["context_managers"] = cms
result["precision"] = outcome(lambda: [m.name for m in t.Precision])
result["eager_modes"] = outcome(lambda: [m.name for m in t.EagerMode if not m.name.startswith("_")])
result["internal_user"] = {{
    name: outcome(lambda name=name, arg=arg: eval(f"torch.tpu.{{name}}({{arg}})"))
    for name, arg in F["internal"].items()
}}
result["internal_torch"] = {{
    name: as_torch(f"torch.tpu.{{name}}({{arg}})") for name, arg in F["internal"].items()
}}
result["accelerator_device_count"] = outcome(torch.accelerator.device_count)
import torch.distributed as dist
result["backends"] = {{b: dist.Backend.backend_capability.get(b) for b in F["backends"]}}
def untimed():
    start, end = t.Event(), t.Event()
    start.record(); end.record(); end.synchronize()
    return start.elapsed_time(end)
result["untimed_elapsed"] = outcome(untimed)
"""


@pytest.fixture(scope="module")
def surface() -> dict:
    """What one program that activates the emulated tpu sees of torch.tpu."""
    probe = {
        "public": sorted(PUBLIC),
        "properties": sorted(PROPERTIES),
        "context_managers": {
            n: ARGS.get(n, "")
            for n in facts.section("device_module")["context_managers"]
            if n not in INTERNAL
        },
        "internal": {n: ARGS.get(n, "") for n in sorted(INTERNAL)},
        "backends": facts.section("distributed")["backends"],
    }
    code = SURFACE.format(facts=json.dumps(probe))
    return test_emulator.run_snippet(code, devices=1, backend="python")


def test_every_public_torch_tpu_name_exists(surface):
    assert not surface["missing"], (
        f"torch.tpu names public in the wheel ({PUBLIC_API}) that the emulated torch.tpu lacks:"
        f" {surface['missing']}"
    )


@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_settings_are_properties_that_read_back_what_was_assigned(surface, name):
    info = surface["properties"][name]
    assert info.get("callable") is False and info.get("reads_back") is True, (
        f"torch.tpu.{name} is a property in the wheel ({PUBLIC_API}, Property(...)): reading it"
        f" gives the value, assigning sets it; the emulator's: {info}"
    )


def test_the_wheels_context_managers_are_context_managers(surface):
    wrong = {n: r for n, r in surface["context_managers"].items() if r[0] != "ok"}
    assert not wrong, (
        "torch.tpu context managers in the wheel ([device_module].context_managers, from"
        f" {DEVICE_MODULE}) that `with torch.tpu.NAME(arg):` cannot enter on the emulator: {wrong}"
    )


def test_precision_has_exactly_the_wheels_members(surface):
    members = facts.section("precision")["members"]
    assert surface["precision"] == ["ok", repr(members)], (
        "torch.tpu.Precision's members (torch_tpu/_internal/precision/precision.py,"
        f" _VALID_PRECISIONS) are {members}; the emulator's: {surface['precision']}"
    )


def test_eager_mode_has_exactly_the_wheels_members(surface):
    members = facts.section("eager_mode")["members"]
    assert surface["eager_modes"] == ["ok", repr(members)], (
        "torch.tpu.EagerMode's public members (torch_tpu/_internal/execution_mode/__init__.py)"
        f" are {members}; the emulator's: {surface['eager_modes']}"
    )


def test_internal_apis_refuse_user_code_naming_the_replacement(surface):
    wrong = {
        name: got
        for name, got in surface["internal_user"].items()
        if got[0] != "RuntimeError" or INTERNAL[name].prefer not in got[1]
    }
    assert not wrong, (
        f"on torch {torch.__version__} TorchTPU refuses these torch.tpu APIs from user code"
        f" with a RuntimeError naming the replacement ({DEVICE_MODULE},"
        f" @internal_or_experimental); the emulator instead: {wrong}"
    )


def test_internal_apis_raise_torchtpus_own_message(surface):
    template = facts.section("device_module")["internal_error"]
    rows = {r["name"]: r for r in facts.facts()["internal"]}
    wrong = {
        name: got[1]
        for name, got in surface["internal_user"].items()
        if got[1] != template.format(**rows[name])
    }
    assert not wrong, (
        f"TorchTPU's error text for an internal API is {template!r}"
        f" (torch_tpu/_internal/utils/annotations.py); the emulator's: {wrong}"
    )


def test_internal_apis_still_work_when_torch_calls_them(surface):
    refused = {n: got for n, got in surface["internal_torch"].items() if got[0] != "ok"}
    assert not refused and surface["accelerator_device_count"][0] == "ok", (
        "TorchTPU lets torch's own code call its internal APIs (annotations.py,"
        " _is_framework_caller_frame: a caller in a torch.* module); the emulator refuses:"
        f" {refused}, torch.accelerator.device_count(): {surface['accelerator_device_count']}"
    )


def test_distributed_backends_are_registered_for_the_tpu_device(surface):
    devices = facts.section("distributed")["backend_devices"]
    wrong = {b: d for b, d in surface["backends"].items() if not d or set(devices) - set(d)}
    assert not wrong, (
        f"the wheel registers {list(surface['backends'])} for devices {devices}"
        f" (torch_tpu/_loader.py, register_backend); the emulator: {wrong}"
    )


def test_elapsed_time_of_events_without_timing_is_refused(surface):
    errors = facts.section("stream")["elapsed_time_errors"]
    got = surface["untimed_elapsed"]
    assert got[0] == "RuntimeError" and any(e.rstrip(".") in got[1] for e in errors), (
        "Event.elapsed_time needs events created with enable_timing=True"
        f" (torch_tpu/_internal/device/_device_ops_backend_*.so: {errors}); the emulator: {got}"
    )


# --- (c) what the tpu codemods and the catalogue emit --------------------------------------

TORCH_TPU_PATH = re.compile(
    r"torch\.tpu((?:\.[A-Za-z_]\w*)+)(?:\(\))?((?:\s*/\s*[A-Za-z_]\w*(?:\(\))?)*)"
)


def tpu_paths(text: str) -> set[str]:
    """Every ``torch.tpu.X[.Y]`` in ``text``; ``torch.tpu.A() / B / C`` names A, B and C."""
    found = set()
    for m in TORCH_TPU_PATH.finditer(text):
        found.add("torch.tpu" + m.group(1))
        parent = "torch.tpu" + m.group(1).rsplit(".", 1)[0]
        found |= {f"{parent}.{n}" for n in re.findall(r"[A-Za-z_]\w*", m.group(2))}
    return found


def not_accepted(paths: set[str]) -> dict[str, str]:
    """Each path TorchTPU does not accept from user code, with why. A path is a public
    module, or a name of the longest public module it starts with (``torch.tpu.Precision
    .HIGHEST`` is the name ``Precision``, then an attribute of it)."""
    modules = sorted(facts.public_modules(), key=len, reverse=True)
    bad = {}
    for path in sorted(paths):
        if path in modules:
            continue
        module = next(m for m in modules if path.startswith(m + "."))
        name = path[len(module) + 1 :].split(".", 1)[0]
        if name not in facts.public_names(module):
            bad[path] = "not public"
        elif module == "torch.tpu" and name in INTERNAL:
            bad[path] = f"internal on torch {torch.__version__}: use {INTERNAL[name].prefer}"
    return bad


def tpu_fix_texts() -> dict[str, str]:
    texts = {}
    for rule in load_catalogue():
        texts[rule.code] = rule.fixes["tpu"].hint
        if "tpu" in rule.text_fixes:
            texts[rule.code + " (text)"] = rule.text_fixes["tpu"].hint
    return texts


def codemod_strings() -> dict[str, str]:
    """The strings of every codemod module's tables (module-level values), by where."""
    import torchport.tools.codemods as package

    found: dict[str, str] = {}

    def walk(value, where: str) -> None:
        if isinstance(value, str):
            found[where] = value
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k, f"{where}[key]")
                walk(v, f"{where}[{k!r}]")
        elif isinstance(value, (list, tuple, set, frozenset)):
            for i, v in enumerate(
                sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
            ):
                walk(v, f"{where}[{i}]")

    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, value in vars(module).items():
            if not name.startswith("__"):
                walk(value, f"tools/codemods/{info.name}.py:{name}")
    return found


@pytest.fixture(scope="module")
def tpu_migration(tmp_path_factory) -> dict[str, str]:
    """The corpus migrated for tpu, and the tpu goldens: every file's text, by path."""
    from torchport.tools.migrate import migrate
    from torchport.tools.migration_result import MigrateOptions

    out = tmp_path_factory.mktemp("tpu") / "out"
    migrate(CORPUS, MigrateOptions(target="tpu", out=out))
    texts = {
        f"corpus/{p.relative_to(out)}": p.read_text(encoding="utf-8", errors="replace")
        for p in sorted(out.rglob("*"))
        if p.is_file() and "torchport-report" not in p.parts
    }
    for golden in sorted([*GOLDEN.glob("*.tpu.py"), *REVIEW.glob("*.tpu.py")]):
        texts[str(golden.relative_to(ROOT / "tests"))] = golden.read_text(encoding="utf-8")
    return texts


def _violations(texts: dict[str, str]) -> dict[str, dict[str, str]]:
    found = {}
    for where, text in texts.items():
        bad = not_accepted(tpu_paths(text))
        if bad:
            found[where] = bad
    return found


def test_catalogue_tpu_fixes_name_only_apis_torchtpu_accepts():
    bad = _violations(tpu_fix_texts())
    assert not bad, (
        "the catalogue's tpu fixes (tools/catalogue/data/*.toml) name torch.tpu APIs that"
        f" TorchTPU does not accept from user code ({PUBLIC_API}, {DEVICE_MODULE}): {bad}"
    )


def test_tpu_codemod_tables_name_only_apis_torchtpu_accepts():
    bad = _violations(codemod_strings())
    assert not bad, (
        "the codemods' tables (tools/codemods/*.py) write torch.tpu APIs that TorchTPU does"
        f" not accept from user code ({PUBLIC_API}, {DEVICE_MODULE}): {bad}"
    )


def test_tpu_migration_uses_only_apis_torchtpu_accepts(tpu_migration):
    bad = _violations(tpu_migration)
    assert not bad, (
        "the tpu migration of tests/fixtures/corpus and the tpu goldens call torch.tpu APIs"
        f" that TorchTPU does not accept from user code ({PUBLIC_API}, {DEVICE_MODULE}): {bad}"
    )


WRITTEN = facts.section("environment")["written_by_torchtpu"]
GLUE = "torch_tpu/csrc/common/glue_*/libpywrap_*_common.so"


def _writes(texts: dict[str, str]) -> dict[str, list[str]]:
    found = {}
    for where, text in texts.items():
        names = [v for v in WRITTEN if re.search(rf"\b{v}\b", text)]
        if names:
            found[where] = names
    return found


def test_catalogue_tpu_fixes_set_no_variable_torchtpu_writes():
    bad = _writes(tpu_fix_texts())
    assert not bad, (
        f"TorchTPU writes {WRITTEN} for each process itself ({GLUE}; a program that sets them"
        f" fights the runtime; TPU_VISIBLE_DEVICES chooses chips); the catalogue's tpu fixes"
        f" tell a program to set them: {bad}"
    )


def test_tpu_codemods_set_no_variable_torchtpu_writes(tpu_migration):
    bad = _writes({**codemod_strings(), **tpu_migration})
    assert not bad, (
        f"TorchTPU writes {WRITTEN} for each process itself ({GLUE}; TPU_VISIBLE_DEVICES"
        f" chooses chips); the tpu codemods write them: {bad}"
    )


# --- (d) the emulator's autocast lists are TorchTPU's ----------------------------------------

# CastPolicy -> the tuple of sandbox/emulator/autocast.py that holds the emulator's ops.
EMULATOR_LISTS = {
    "lower_precision_fp": "LOWER_PRECISION",
    "fp32": "FLOAT32",
    "fp32_set_opt_dtype": "FP32_SET_OPT_DTYPE",
    "fp32_append_dtype": "FP32_APPEND_DTYPE",
    "promote": "PROMOTE",
}


@pytest.mark.parametrize("policy", sorted(EMULATOR_LISTS))
def test_emulator_autocast_policy_is_torchtpus(policy):
    from torchport.sandbox.emulator import autocast

    wheel = set(facts.section("autocast")[policy])
    emulated = {op.replace(".", "_") for op in getattr(autocast, EMULATOR_LISTS[policy], ())}
    assert emulated == wheel, (
        f"TorchTPU's autocast runs these ops with CastPolicy {policy}"
        f" (WrapFunction_ symbols of {GLUE}); sandbox/emulator/autocast.py"
        f" {EMULATOR_LISTS[policy]} lacks {sorted(wheel - emulated)} and adds"
        f" {sorted(emulated - wheel)}"
    )


def _absent_from_torch(texts: dict[str, str]) -> dict[str, list[str]]:
    found = {}
    for where, text in texts.items():
        absent = []
        for path in sorted(set(re.findall(r"torch\.accelerator(?:\.[A-Za-z_]\w*)+", text))):
            value = torch
            for part in path.split(".")[1:]:
                value = getattr(value, part, None)
            if value is None:
                absent.append(path)
        if absent:
            found[where] = absent
    return found


def test_tpu_replacements_exist_in_the_installed_torch(tpu_migration):
    """TorchTPU's messages name replacements for every torch its pin allows; a port must
    call one that exists in the torch it runs on (torch.accelerator.random is not in 2.13)."""
    bad = _absent_from_torch({**tpu_fix_texts(), **codemod_strings(), **tpu_migration})
    assert not bad, (
        f"the tpu codemods and fixes call torch.accelerator APIs that torch {torch.__version__}"
        f" does not have: {bad}"
    )


# --- (e) ops torch has for accelerators only: the emulated tpu has those TorchTPU has --------


def test_the_op_reader_finds_torchtpus_own_batch_norm_kernels(wheel):
    """The reader is not vacuous: the glue registers native_batch_norm and the
    _native_batch_norm_legit overloads, and names none of SyncBatchNorm's ops."""
    names = torchtpu_wheel.glue_op_names(torchtpu_wheel.open_wheel(wheel))
    for op in ("native_batch_norm", "_native_batch_norm_legit.no_stats", "convolution"):
        assert torchtpu_wheel.op_registered(op, names), op
    assert not torchtpu_wheel.op_registered("batch_norm_stats", names)


def test_the_derived_op_list_is_the_emulators_kernels():
    from torchport.sandbox import device_only_ops

    listed = sorted(device_only_ops.op_name(op) for op in device_only_ops.KERNELS)
    section = facts.section("device_only_ops")
    assert torchtpu_wheel.device_only_op_names() == listed
    assert sorted(section["registered"] + section["absent"]) == listed, (
        "[device_only_ops] of sandbox/data/torch_tpu.toml is not about the ops of"
        " sandbox/device_only_ops.py KERNELS: run scripts/derive-torch-tpu-facts --write"
    )


DEVICE_ONLY = """
x = torch.randn(4, 3, 2, device=torch.accelerator.current_accelerator())
F = torch.nn.functional
result["batch_norm_stats"] = outcome(lambda: list(torch.batch_norm_stats(x, 1e-5)[0].shape))
result["batch_norm"] = outcome(lambda: list(F.batch_norm(x, None, None, training=True).shape))
"""
OUTCOME = """
def outcome(fn):
    try:
        return ["ok", fn()]
    except BaseException as exc:
        return [type(exc).__name__, str(exc)]
"""


@pytest.mark.parametrize("name", ["tpu", "neuron"])
def test_ops_torchtpu_lacks_are_refused_with_its_own_message(backend, name):
    """On tpu an op absent from the wheel raises TorchTPU's missing-op error, on both
    emulators; plain batch norm (native_batch_norm, which TorchTPU has) still runs, and
    neuron keeps the kernels (no evidence its runtime lacks them)."""
    section = facts.section("device_only_ops")
    got = test_emulator.run_snippet(OUTCOME + DEVICE_ONLY, name=name, devices=1, backend=backend)
    assert got["batch_norm"] == ["ok", [4, 3, 2]]
    if name == "tpu" and "batch_norm_stats" in section["absent"]:
        message = section["missing_op_error"].format(op="aten::batch_norm_stats")
        assert got["batch_norm_stats"] == ["NotImplementedError", message], (
            "TorchTPU has no kernel for batch_norm_stats (its glue library names it nowhere:"
            f" [device_only_ops].absent); the emulated tpu: {got['batch_norm_stats']}"
        )
    else:
        assert got["batch_norm_stats"] == ["ok", [3]]
