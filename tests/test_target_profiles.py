"""Targets are data (tools/data/targets.toml): the four shipped profiles say what the
codemods used to spell per target name, and a fifth target, added by a profile file alone,
is scanned and migrated end to end with its own device string and backend."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torchport.sandbox import torchtpu_facts
from torchport.sandbox.modes import EMULATED
from torchport.tools.catalogue import TARGETS, FixKind, load_catalogue
from torchport.tools.catalogue.doc_sections import target_notes, with_target_bullets
from torchport.tools.targets import EXTRA_PROFILES, ProfileError, load_profiles, profile, profiles

FIFTH = """
[[target]]
name = "fpx"
title = "FictitiousPU"
word = "FPX"
kind = "vendor"
device = "fpx"
device_expr = '"fpx"'
device_type_expr = '"fpx"'
dist_backend = "fpxccl"
compile_backend = "fpxc"
autocast_dtype = "bfloat16"
sync_call = "torch.accelerator.synchronize()"
llm_note = "a fictitious accelerator, for the tests"
"""

# the fifth target's table after its header, for tables that vary one field
FIFTH_FIELDS = FIFTH.split("[[target]]\n", 1)[1]

CUDA_PROGRAM = """\
import torch
import torch.distributed as dist

dist.init_process_group(backend="nccl")
model = torch.nn.Linear(4, 2).cuda()
x = torch.randn(3, 4, device="cuda")
with torch.autocast("cuda"):
    y = model(x)
torch.cuda.synchronize()
print(torch.cuda.is_available(), x.is_cuda)
"""


def test_targets_are_the_profiles_in_file_order():
    assert TARGETS == ("tpu", "neuron", "xla", "accelerator") == tuple(profiles())
    assert {profile(t).kind for t in TARGETS} == {"vendor", "agnostic"}
    assert [t for t in TARGETS if profile(t).kind == "agnostic"] == ["accelerator"]


def test_torchtpu_facts_come_from_the_wheel_facts_not_a_second_copy():
    tpu = profile("tpu")
    assert tpu.visible_devices == torchtpu_facts.section("environment")["visible_devices"]
    assert tpu.launch_blocking == torchtpu_facts.section("environment")["launch_blocking"]
    assert tpu.launch_step == torchtpu_facts.section("distributed")["launch_function"]
    assert tpu.dist_backend in torchtpu_facts.section("distributed")["backends"]


def test_the_tpu_install_line_is_the_wheels_own_torch_range():
    """The pin is written as ports have always had it (``torch>=2.11,<=2.15``); it must
    still mean the wheel's ``requires_torch``, bound for bound."""
    torch_pin, wheel = profile("tpu").torch_requirements
    assert wheel == torchtpu_facts.section("wheel")["name"]

    def bounds(spec: str) -> list[tuple[str, str]]:
        found = re.findall(r"([<>=!~]=?)\s*([0-9][0-9.]*)", spec)
        return [(op, re.sub(r"(\.0)+$", "", version)) for op, version in found]

    assert bounds(torch_pin) == bounds(torchtpu_facts.section("wheel")["requires_torch"])


def test_every_emulator_mode_a_profile_names_exists():
    assert {p.emulator for p in profiles().values()} - {None} <= set(EMULATED)


@pytest.mark.parametrize(
    "table, message",
    [
        ('name = "x"\nkind = "cloud"', "kind must be one of"),
        ('name = "x"\nkind = "vendor"\ncolour = "red"', "unknown target field"),
        ('name = "x"\nkind = "vendor"', "missing"),
        (FIFTH_FIELDS + 'emulator = "fpx"', "emulator must be one of"),
        (FIFTH_FIELDS + 'emulator = "tpu"', "only the 'neuron' emulator runs"),
        (
            FIFTH_FIELDS.replace('"fpxccl"', '"FPX-CCL"') + 'emulator = "neuron"',
            "dist_backend 'FPX-CCL' is not a lowercase name",
        ),
    ],
)
def test_a_malformed_profile_is_refused_at_load(table, message):
    with pytest.raises(ProfileError, match=message):
        load_profiles(f"[[target]]\n{table}\n", "extra.toml")


def test_a_kind_keyed_fix_reads_right_for_each_target_of_the_kind():
    rule = load_catalogue().get("TPA001")
    assert rule is not None
    assert rule.fixes["neuron"].hint == 'torch.autocast("neuron", dtype=torch.bfloat16)'
    assert rule.fixes["xla"].hint == 'torch.autocast("xla", dtype=torch.bfloat16)'


def _torchport(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torchport.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_fifth_target_from_a_profile_file_is_scanned_and_migrated(tmp_path):
    """Only a profile file is added: the catalogue expands its kind's fixes to it, the
    codemods registered for its kind run for it, and its device string and backend come out."""
    extra = tmp_path / "targets.toml"
    extra.write_text(FIFTH, encoding="utf-8")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(CUDA_PROGRAM, encoding="utf-8")
    env = {**os.environ, EXTRA_PROFILES: str(extra)}
    scan = _torchport(
        "scan", str(repo), "--target", "fpx", "--format", "json", env=env, cwd=tmp_path
    )
    assert scan.returncode in (0, 1), scan.stderr
    findings = json.loads(scan.stdout)["findings"]
    fixes = {f["rule"]: f["fix"]["fpx"]["kind"] for f in findings}
    assert fixes["TPD001"] == FixKind.AUTO.value
    assert fixes["TPN001"] == FixKind.AUTO.value  # backend="nccl" -> the vendor's backend
    out = tmp_path / "out"
    migrate = _torchport(
        "migrate", str(repo), "--target", "fpx", "--out", str(out), "--no-verify",
        "--llm", "none", "--exit-zero", env=env, cwd=tmp_path,
    )  # fmt: skip
    assert migrate.returncode == 0, migrate.stderr
    ported = (out / "train.py").read_text(encoding="utf-8")
    assert 'dist.init_process_group(backend="fpxccl")' in ported
    assert 'model = torch.nn.Linear(4, 2).to("fpx")' in ported
    assert 'x = torch.randn(3, 4, device="fpx")' in ported
    assert 'with torch.autocast("fpx", dtype=torch.bfloat16):' in ported
    assert "torch.accelerator.synchronize()" in ported
    assert "torch.accelerator.is_available()" in ported
    assert 'x.device.type == "fpx"' in ported
    assert "cuda" not in ported
    doc = _torchport("rules", "TPD001", env=env, cwd=tmp_path).stdout
    assert '- **fpx** (auto): .to(device), else .to("fpx")' in doc  # from its profile


TRAINING = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 2).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(8, 4, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    torch.cuda.synchronize()
    print(x.is_cuda)
    print(step, loss.item())
"""


def _migrated(tmp_path: Path, profile_text: str) -> tuple[subprocess.CompletedProcess, Path]:
    extra = tmp_path / "targets.toml"
    extra.write_text(profile_text, encoding="utf-8")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(TRAINING, encoding="utf-8")
    out = tmp_path / "out"
    env = {**os.environ, EXTRA_PROFILES: str(extra)}
    done = _torchport(
        "migrate", str(repo), "--target", "fpx", "--out", str(out), "--llm", "none",
        "--exit-zero", env=env, cwd=tmp_path,
    )  # fmt: skip
    return done, out


def test_a_fifth_target_is_verified_on_the_generic_emulator_under_its_own_names(tmp_path):
    """``emulator = "neuron"`` in the profile: the port runs on the generic emulated device
    renamed to the profile's device, so ``.to("fpx")`` and ``autocast("fpx")`` reach it;
    on neuron's own name the port could not have run at all."""
    done, out = _migrated(tmp_path, FIFTH + 'emulator = "neuron"\n')
    assert done.returncode == 0, done.stderr
    assert 'x = torch.randn(8, 4, device="fpx")' in (out / "train.py").read_text(encoding="utf-8")
    report = json.loads((out / "torchport-report" / "verification.json").read_text())
    verification = report["verification"]
    assert verification["verdict"] == "verified", verification["reason"]
    assert verification["parity"]["steps"] == 3
    counters = verification["target"]["counters"]
    assert counters["ops"] > 0 and counters["cuda_calls"] == 0


def test_a_fifth_target_without_an_emulator_is_not_run(tmp_path):
    done, out = _migrated(tmp_path, FIFTH)
    assert "no emulated device for target 'fpx'" in done.stdout + done.stderr
    assert 'device="fpx"' in (out / "train.py").read_text(encoding="utf-8")


def test_a_fifth_target_named_as_a_torch_device_is_not_run(tmp_path):
    """PrivateUse1 renamed ``mps`` would be a second device of that name: refused before a
    run, so no failure of the emulator's making reaches the verdict."""
    text = FIFTH.replace('"fpx"', '"mps"') + 'emulator = "neuron"\n'
    done, _ = _migrated(tmp_path, text.replace('name = "mps"', 'name = "fpx"'))
    assert "device 'mps' is one torch already has" in done.stdout + done.stderr


def test_a_rule_doc_gains_a_bullet_only_for_the_targets_it_does_not_name():
    doc = (
        "# X\n\n## Why it breaks\n- **tpu**: no CUDA.\n\n## How it is fixed\n- **tpu** (auto): a.\n"
    )
    fixes = {"tpu": ("TorchTPU", "auto", "a"), "fpx": ("FictitiousPU", "manual", "by hand")}
    out = with_target_bullets(doc, "CUDA only", fixes)
    assert out == (
        "# X\n\n## Why it breaks\n- **tpu**: no CUDA.\n- **fpx**: on FictitiousPU: CUDA only\n"
        "\n## How it is fixed\n- **tpu** (auto): a.\n- **fpx** (manual): by hand\n"
    )
    assert target_notes(out, "fpx")["How it is fixed"] == "(manual) by hand"


def test_without_the_profile_file_the_fifth_target_is_unknown(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(CUDA_PROGRAM, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != EXTRA_PROFILES}
    scan = _torchport("scan", str(repo), "--target", "fpx", env=env, cwd=tmp_path)
    assert scan.returncode == 2 and "fpx" in scan.stderr


@pytest.mark.parametrize("target", TARGETS)
def test_every_shipped_target_has_a_note_for_the_llm_and_code_that_parses(target):
    import ast

    found = profile(target)
    assert found.llm_note.strip()
    for code in (found.device_expr, found.device_type_expr, found.sync_call):
        ast.parse(code, mode="eval")


def test_the_llm_is_told_each_targets_note_from_its_profile():
    from torchport.agents.llm.repair import TARGET_NOTES

    assert {t: profile(t).llm_note for t in TARGETS} == TARGET_NOTES
    assert textwrap.shorten(TARGET_NOTES["xla"], 30).startswith("PyTorch/XLA")


@pytest.mark.parametrize("name", ["tpu", "vendor", "all"])
def test_a_profile_file_cannot_redefine_a_target_or_take_a_kinds_name(tmp_path, name):
    extra = tmp_path / "targets.toml"
    extra.write_text(FIFTH.replace('name = "fpx"', f'name = "{name}"'), encoding="utf-8")
    env = {**os.environ, EXTRA_PROFILES: str(extra)}
    scan = _torchport("rules", env=env, cwd=tmp_path)
    assert scan.returncode != 0 and f"target {name!r} named twice" in scan.stderr
