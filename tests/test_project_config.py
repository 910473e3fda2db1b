"""A repository's own settings ([tool.torchport] or torchport.toml), under TORCHPORT_*
variables, under flags: read through the real command line (`torchport config`), so the
parser's default-or-given logic is what is tested, and every bad value is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torchport.agents import verifier
from torchport.agents.project_config import KEYS, overrides, resolve
from torchport.cli.main import main

# key -> (the file's TOML value, the environment's text, the flag's argv, and the three
# effective values as `torchport config -f json` shows them; {root} is the repository)
SCALARS = {
    "target": ('"neuron"', "xla", ["--target", "accelerator"], ("neuron", "xla", "accelerator")),
    "entry": (
        '"python a.py"',
        "python b.py --lr 1",
        ["--entry", "python c.py"],
        ("python a.py", "python b.py --lr 1", "python c.py"),
    ),
    # the flag gives the built-in default: given is given, it still wins
    "steps": ("2", "3", ["--steps", "5"], (2, 3, 5)),
    "tolerance": (
        '"fp32"',
        "bf16",
        ["--tolerance", "auto"],
        ({"policy": "fp32"}, {"policy": "bf16"}, {"policy": "auto"}),
    ),
    "deps": ('"req.txt"', "none", ["--deps", "auto"], ("{root}/req.txt", "none", "auto")),
    "baseline": (
        '"base.json"',
        "/elsewhere/env.json",
        ["--baseline", "flag.json"],
        ("{root}/base.json", "/elsewhere/env.json", "flag.json"),
    ),
    "fail-on": ('"error"', "warning", ["--fail-on", "info"], ("error", "warning", "info")),
    "keep-args": ("true", "off", ["--keep-args"], (True, False, True)),
}


def repo_with(tmp_path: Path, body: str, name: str = "pyproject.toml") -> Path:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    if name == "pyproject.toml":
        body = f'[project]\nname = "prog"\n\n[tool.torchport]\n{body}'
    (repo / name).write_text(body, encoding="utf-8")
    (repo / "req.txt").write_text("numpy\n")
    return repo


def config_json(repo: Path, *flags: str, capsys) -> dict:
    assert main(["config", str(repo), "-f", "json", *flags]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.fixture(autouse=True)
def _no_torchport_variables(monkeypatch):
    for variable in (key.env for key in KEYS.values()):
        monkeypatch.delenv(variable, raising=False)


@pytest.mark.parametrize("key", sorted(SCALARS))
def test_file_then_environment_then_flag(key, tmp_path, monkeypatch, capsys):
    toml, env_text, flag, (in_file, in_env, in_flag) = SCALARS[key]
    repo = repo_with(tmp_path, f"{key} = {toml}\n")
    root = str(repo.resolve())
    expect = [v.replace("{root}", root) if isinstance(v, str) else v for v in (in_file, in_env)]

    got = config_json(repo, capsys=capsys)["settings"][key]
    assert got == {"value": expect[0], "source": str(repo.resolve() / "pyproject.toml")}
    monkeypatch.setenv(KEYS[key].env, env_text)
    got = config_json(repo, capsys=capsys)["settings"][key]
    assert got == {"value": expect[1], "source": KEYS[key].env}
    got = config_json(repo, *flag, capsys=capsys)["settings"][key]
    assert got == {"value": in_flag, "source": KEYS[key].flag}


def test_a_default_is_said_as_one(tmp_path, capsys):
    repo = tmp_path / "plain"
    repo.mkdir()
    data = config_json(repo, capsys=capsys)
    assert data["file"] is None
    assert {k: s["source"] for k, s in data["settings"].items()} == dict.fromkeys(KEYS, "default")
    assert data["settings"]["steps"]["value"] == 5
    assert data["settings"]["tolerance"]["value"] == {"policy": "auto"}


def test_lists_add_up_in_order_and_say_every_source(tmp_path, monkeypatch, capsys):
    repo = repo_with(tmp_path, 'exclude = ["vendor/"]\nskip = ["tpp"]\n')
    monkeypatch.setenv("TORCHPORT_EXCLUDE", "gen/*.py, legacy.py")
    monkeypatch.setenv("TORCHPORT_SKIP", "TPB001")
    data = config_json(repo, "--exclude", "!gen/keep.py", "--skip", "TPC,TPM", capsys=capsys)
    exclude, skip = data["settings"]["exclude"], data["settings"]["skip"]
    assert exclude["value"] == ["vendor/", "gen/*.py", "legacy.py", "!gen/keep.py"]
    assert (
        exclude["source"] == f"{repo.resolve() / 'pyproject.toml'} + TORCHPORT_EXCLUDE + --exclude"
    )
    assert skip["value"] == ["TPP", "TPB001", "TPC", "TPM"]  # codes read upper-case


def test_a_later_policy_name_keeps_the_files_numbers(tmp_path, capsys):
    body = '[tool.torchport.tolerance]\npolicy = "fp32"\nbf16 = { rtol = 0.1, max_steps = 3 }\n'
    repo = repo_with(tmp_path, "", "pyproject.toml")
    (repo / "pyproject.toml").write_text(f'[project]\nname = "p"\n\n{body}')
    got = config_json(repo, "--tolerance", "bf16", capsys=capsys)["settings"]["tolerance"]
    assert got["value"] == {"policy": "bf16", "bf16": {"rtol": 0.1, "max_steps": 3}}
    assert got["source"].endswith("pyproject.toml + --tolerance")


def test_torchport_toml_is_read_at_its_top_level(tmp_path, capsys):
    repo = repo_with(
        tmp_path, 'target = "xla"\n[tolerance]\nfp32 = { atol = 1e-4 }\n', "torchport.toml"
    )
    data = config_json(repo, capsys=capsys)
    assert data["file"] == str(repo.resolve() / "torchport.toml")
    assert data["settings"]["target"]["value"] == "xla"
    assert data["settings"]["tolerance"]["value"] == {"policy": "auto", "fp32": {"atol": 0.0001}}


def test_the_text_form_names_each_source(tmp_path, monkeypatch, capsys):
    repo = repo_with(tmp_path, 'target = "neuron"\nexclude = ["vendor/"]\n')
    monkeypatch.setenv("TORCHPORT_STEPS", "3")
    assert main(["config", str(repo), "--exclude", "*.ipynb"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines if line.startswith("  ")}
    where = str(repo.resolve() / "pyproject.toml")
    assert lines[1] == f"config file: {where} [tool.torchport]"
    assert rows["target"].split()[1:] == ["neuron", where]
    assert rows["steps"].split()[1:] == ["3", "TORCHPORT_STEPS"]
    assert rows["exclude"].split()[1:] == ["vendor/,", "*.ipynb", where, "+", "--exclude"]
    assert rows["entry"].split()[1:] == ["-", "default"]


# (file name, its text, what the one-line error must say)
BAD_FILES = [
    ("pyproject.toml", "colour = 1\n", "[tool.torchport]: unknown key 'colour'"),
    ("pyproject.toml", 'steps = "three"\n', "steps: must be an integer"),
    ("pyproject.toml", "steps = 0\n", "steps: must be an integer"),
    ("pyproject.toml", "steps = true\n", "steps: must be an integer"),
    ("pyproject.toml", 'target = "gpu"\n', "target: must be one of tpu, neuron"),
    ("pyproject.toml", 'entry = "python \'unclosed"\n', "entry: does not parse as a command"),
    ("pyproject.toml", 'exclude = "vendor/"\n', "exclude: must be a list of strings"),
    ("pyproject.toml", 'exclude = ["\\\\"]\n', "exclude: bad exclude pattern"),
    ("pyproject.toml", 'skip = ["XYZ9"]\n', "skip: XYZ9 matches no rule"),
    ("pyproject.toml", 'tolerance = "fp16"\n', "tolerance: must be one of auto, fp32, bf16"),
    ("pyproject.toml", "tolerance = { bf16 = { rtl = 1 } }\n", "tolerance: bf16.rtl: unknown"),
    ("pyproject.toml", "tolerance = { bf16 = { rtol = -1 } }\n", "bf16.rtol: must be a number"),
    ("pyproject.toml", "tolerance = { bf16 = { max_steps = 1.5 } }\n", "max_steps: must be an"),
    ("pyproject.toml", 'deps = "missing.txt"\n', "deps: must be auto, none or a requirements"),
    ("pyproject.toml", 'deps = "../outside.txt"\n', "deps: must be auto, none or a requirements"),
    ("pyproject.toml", 'fail-on = "fatal"\n', "fail-on: must be one of info, warning, error"),
    ("pyproject.toml", "[broken\n", "not valid TOML"),
    ("torchport.toml", "steps = [\n", "torchport.toml: not valid TOML"),
    ("torchport.toml", '[tool.torchport]\ntarget = "tpu"\n', "holds the settings at its top level"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD_FILES, ids=lambda v: str(v)[:24])
def test_a_bad_file_is_one_line_naming_file_and_key(name, text, message, tmp_path, capsys):
    repo = repo_with(tmp_path, text, name)
    (tmp_path / "outside.txt").write_text("numpy\n")
    for argv in (["config", str(repo)], ["scan", str(repo)], ["migrate", str(repo), "--no-verify"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("torchport: error: "), err
        assert str(repo.resolve() / name) in err and message in err, err


def test_both_files_at_once_is_refused(tmp_path, capsys):
    repo = repo_with(tmp_path, 'target = "tpu"\n')
    (repo / "torchport.toml").write_text('target = "xla"\n')
    assert main(["config", str(repo)]) == 2
    err = capsys.readouterr().err
    assert "both torchport.toml and [tool.torchport] in pyproject.toml" in err and "keep one" in err


def test_someone_elses_broken_pyproject_is_not_ours_to_refuse(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("[project\nname = 'x'\n")
    assert config_json(repo, capsys=capsys)["file"] is None


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TORCHPORT_STEPS", "abc", "TORCHPORT_STEPS: must be an integer"),
        ("TORCHPORT_TARGET", "gpu", "TORCHPORT_TARGET: must be one of"),
        ("TORCHPORT_SKIP", "TPD,NOPE", "TORCHPORT_SKIP: NOPE matches no rule"),
        ("TORCHPORT_DEPS", "no-such-file.txt", "TORCHPORT_DEPS: must be auto, none"),
    ],
)
def test_a_bad_variable_is_one_line_naming_it(
    variable, value, message, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(variable, value)
    (tmp_path / "repo").mkdir()
    assert main(["config", str(tmp_path / "repo")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_bad_flags_are_refused_like_any_other(tmp_path, capsys):
    (tmp_path / "repo").mkdir()
    assert main(["scan", str(tmp_path / "repo"), "--skip", "TPD,NOPE"]) == 2
    assert "--skip: NOPE matches no rule" in capsys.readouterr().err
    assert main(["scan", str(tmp_path / "repo"), "--exclude", "\\"]) == 2
    assert "--exclude: bad exclude pattern" in capsys.readouterr().err
    assert main(["config", str(tmp_path / "repo"), "--tolerance", "fp16"]) == 2
    assert "must be one of auto, fp32, bf16" in capsys.readouterr().err


def test_the_tolerance_flag_names_every_policy_of_the_verifier():
    """--tolerance's help lists the policies by name: the verifier's table is the truth."""
    from torchport.cli.main import _build_parser

    migrate = _build_parser()._subparsers._group_actions[0].choices["migrate"]
    action = next(a for a in migrate._actions if "--tolerance" in a.option_strings)
    assert action.metavar.split("|") == ["auto", *verifier.policies()]


def test_the_project_s_tolerance_is_the_verifier_s_policy():
    """Forced (named) and renumbered policies are what `choose_policy` hands the judge."""
    fp32_program, bf16_program = ["x = torch.ones(2)"], ["with torch.autocast('xla'): y()"]
    assert verifier.choose_policy(fp32_program).name == "fp32"
    assert verifier.choose_policy(bf16_program).name == "bf16"
    forced = verifier.choose_policy(fp32_program, {"policy": "bf16"})
    assert (forced.name, forced.rtol, forced.label) == (
        "bf16",
        5e-2,
        "bf16 (chosen by the project)",
    )
    numbers = {"policy": "auto", "fp32": {"rtol": 0.5, "atol": 0.25}}
    loose = verifier.choose_policy(fp32_program, numbers)
    assert (loose.rtol, loose.atol, loose.max_steps) == (
        0.5,
        0.25,
        verifier.policies()["fp32"].max_steps,
    )
    assert loose.label == "fp32 (rtol 0.5, atol 0.25 from the project)"
    # a loss 10% off fails the file's fp32 and passes the project's looser one
    reference = {"status": "ok", "losses": [1.0, 0.9]}
    target = {"status": "ok", "losses": [1.1, 0.99], "device": "xla"}
    assert not verifier.compare_series(
        reference["losses"], target["losses"], verifier.policies()["fp32"]
    ).holds
    assert verifier.compare_series(reference["losses"], target["losses"], loose).holds


def test_overrides_travel_as_data_to_a_batch_job(tmp_path):
    """A batch reads TORCHPORT_* and its flags once; each job puts its repository's file
    under them (agents.batch.job.project_settings)."""
    repo = repo_with(tmp_path, 'steps = 2\nentry = "python a.py"\nexclude = ["vendor/"]\n')
    above = overrides({"TORCHPORT_STEPS": "4"}, {"exclude": ["gen/"]}, {"steps": 5})
    config = resolve(repo, above)
    assert config["steps"] == 4 and config["entry"] == "python a.py"
    assert config["exclude"] == ["vendor/", "gen/"]
    assert resolve(None, above)["steps"] == 4  # the batch's own, for its summary


@pytest.mark.slow
def test_a_migration_runs_as_the_project_says(tmp_path, monkeypatch, capsys):
    """Target, entry, steps and tolerance from the repository's file reach the verifier:
    the runs make the file's steps, and the verdict is judged by the file's policy."""
    import shutil

    repo = tmp_path / "mnist"
    shutil.copytree(Path(__file__).parent / "fixtures" / "corpus" / "mnist_basic", repo)
    (repo / "torchport.toml").write_text(
        'target = "tpu"\nentry = "python train.py"\nsteps = 2\ntolerance = "bf16"\n'
    )
    out = tmp_path / "out"
    argv = ["migrate", str(repo), "--llm", "none", "-q", "-f", "json", "--out", str(out)]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)["verification"]
    verification = record["verification"]
    assert (record["target"], record["verdict"]) == ("tpu", "verified")
    assert record["plan"]["entry"] == ["python", "train.py"]
    assert verification["policy"] == "bf16"  # fp32 on its own: the program has no autocast
    assert "bf16 (chosen by the project) policy" in verification["reason"]
    assert verification["parity"]["steps"] == 2
