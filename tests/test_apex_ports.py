"""apex ported by the codemods: fused optimizers and norms (TPK007, TPK008) and AMP
(TPK006, TPK015, TPK016). What is refused and why, and whole programs verified rules-only
against the original run on the reference shim, where apex is the stand-in
(sandbox/shim/standins/apex.py). The outputs themselves are golden files
(tests/fixtures/golden/TPK0{06,07,08,15,16}*.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from rules_run import migrate_rules_only
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import scan

REFUSED = {
    "FusedLAMB(model.parameters(), lr=1e-3)": "torch.optim has no LAMB",
    "FusedNovoGrad(model.parameters())": "torch.optim has no NovoGrad",
    "FusedAdam(model.parameters(), bias_correction=False)": "always corrects the moments' bias",
    "FusedAdam(model.parameters(), master_weights=True)": "no fp32 master copy",
    "FusedAdam(model.parameters(), adam_w_mode=args.w)": "decided at run time",
    "FusedAdam(model.parameters(), **options)": "its keys are not known",
    "FusedAdam(model.parameters(), *options)": "arguments passed with *",
    "FusedSGD(model.parameters(), 0.1, wd_after_momentum=True)": "before momentum",
    "FusedSGD(model.parameters(), 0.1, unknown=1)": "unknown= has no counterpart",
    "FusedAdagrad(model.parameters(), adagrad_w_mode=True)": "no decoupled weight decay",
    "make(FusedAdam)": "referenced, not called",
    "make(FusedRMSNorm)": "referenced, not called",
    # data parallelism: what torch's DDP does differently, and synchronized batch norm
    "ApexDDP(model, gradient_average=False)": "averages the gradients",
    "convert_syncbn_model(model)": "TPN004",
    # AMP: what autocast cannot say
    "amp.initialize(model, opt_level='O3')": "pure half precision",
    "amp.initialize(model, opt_level='O1', cast_model_type=torch.float16)": "explicit casts",
    "amp.initialize([model, model], opt_level='O1')": "not bound to the names passed in",
    "amp.half_function(torch.nn.functional.gelu)": "no counterpart under torch.autocast",
}


def ported(tmp_path: Path, line: str) -> tuple[str, list[str]]:
    source = textwrap.dedent(
        f"""\
        import torch
        from apex import amp
        from apex.normalization import FusedLayerNorm, FusedRMSNorm
        from apex.optimizers import FusedAdam as Adam
        from apex.parallel import DistributedDataParallel as ApexDDP, convert_syncbn_model
        from apex.optimizers import FusedAdagrad, FusedAdam, FusedLAMB, FusedNovoGrad, FusedSGD

        model = torch.nn.Linear(4, 2)
        {"model = " if line.startswith("amp.initialize(model") else "thing = "}{line}
        """
    )
    path = tmp_path / "t.py"
    path.write_text(source)
    findings = [f for f in scan(path).findings if f.rule.startswith("TPK")]
    result = migrate_python(source, findings, "tpu", "t.py")
    return result.source, [why for _, why in result.unapplied]


@pytest.mark.parametrize("line", sorted(REFUSED))
def test_what_torch_cannot_compute_the_same_is_refused_with_its_reason(tmp_path, line):
    source, reasons = ported(tmp_path, line)
    assert f"= {line}\n" in source  # left as it was, for a human
    assert len(reasons) == 1 and REFUSED[line] in reasons[0], reasons


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "FusedAdam(model.parameters())",
            "torch.optim.AdamW(model.parameters(), weight_decay=0.0)",
        ),
        ("FusedRMSNorm(4)", "torch.nn.RMSNorm(4, eps=1e-5)"),
        ("make(FusedLayerNorm)", "make(torch.nn.LayerNorm)"),  # the same defaults: no call needed
        # an alias names apex's class; bucketing settings change speed, not the result
        (
            "ApexDDP(model, delay_allreduce=True)",
            "torch.nn.parallel.DistributedDataParallel(model)",
        ),
        (
            "Adam(model.parameters(), 1e-3)",
            "torch.optim.AdamW(model.parameters(), 1e-3, weight_decay=0.0)",
        ),
    ],
)
def test_apex_defaults_torch_lacks_are_made_explicit(tmp_path, line, expected):
    source, reasons = ported(tmp_path, line)
    assert f"thing = {expected}\n" in source and reasons == []
    apex_class = line.replace("make(", "").split("(")[0].rstrip(")")
    assert f" {apex_class}," not in source and not source.count(f" {apex_class}\n")


SPREAD = """\
import torch
from apex.optimizers import FusedAdam, FusedSGD


def create(args, parameters):
    opt_args = dict(lr=args.lr, weight_decay=args.wd)
    if args.eps is not None:
        opt_args["eps"] = args.eps
    if args.opt == "sgd":
        opt_args.pop("eps", None)
        return FusedSGD(parameters, momentum=0.9, nesterov=True, **opt_args)
    return FusedAdam(parameters, adam_w_mode=False, **opt_args)


def sometimes_decayed(args, parameters):
    kwargs = {"lr": args.lr}
    if args.wd:
        kwargs["weight_decay"] = args.wd
    return FusedAdam(parameters, **kwargs)


def handed_on(args, parameters, extra):
    kwargs = dict(lr=args.lr)
    kwargs.update(extra)
    return FusedAdam(parameters, **kwargs)


def apex_only(parameters):
    kwargs = dict(lr=1e-3, set_grad_none=True)
    return FusedSGD(parameters, **kwargs)
"""


def test_a_dict_of_options_is_ported_when_its_keys_are_known(tmp_path):
    """timm's optimizer factory builds ``opt_args`` and spreads it: its keys decide."""
    path = tmp_path / "factory.py"
    path.write_text(SPREAD)
    findings = [f for f in scan(path).findings if f.rule == "TPK007"]
    result = migrate_python(SPREAD, findings, "tpu", "factory.py")
    assert "return torch.optim.SGD(parameters, momentum=0.9, nesterov=True, **opt_args)" in (
        result.source
    )
    # weight_decay is always in the dict: no explicit default, and L2 mode is Adam
    assert "return torch.optim.Adam(parameters, **opt_args)" in result.source
    reasons = sorted(why for _, why in result.unapplied)
    assert len(reasons) == 3, reasons
    for expected in ("weight_decay= on some paths only", "kwargs.update(...)", "set_grad_none="):
        assert any(expected in why for why in reasons), (expected, reasons)
    assert result.source.count("FusedAdam(parameters, **kwargs)") == 2


PROGRAM = """\
import torch
from apex.normalization import FusedLayerNorm, FusedRMSNorm
from apex.optimizers import FusedAdam, FusedSGD

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(16, 32), FusedLayerNorm(32), torch.nn.Linear(32, 32), FusedRMSNorm(32),
    torch.nn.Linear(32, 1),
).cuda()
head = torch.nn.Linear(16, 1).cuda()
optimizer = FusedAdam(model.parameters(), 1e-2, True, (0.9, 0.99))
head_optimizer = FusedSGD(head.parameters(), lr=0.05, momentum=0.9, set_grad_none=True)
for step in range(10):
    x = torch.randn(8, 16).cuda()
    loss = model(x).pow(2).mean() + head(x).pow(2).mean()
    optimizer.zero_grad()
    head_optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    head_optimizer.step()
"""


@pytest.mark.slow
@pytest.mark.parametrize("target", ["tpu", "neuron"])
def test_a_program_on_apex_verifies_rules_only_with_the_same_numbers(tmp_path, target):
    final = migrate_rules_only(tmp_path, PROGRAM, target, steps=5)
    assert final["outcome"] == "verified", (final["verification"]["reason"], final["decisions"])
    migrated = (tmp_path / "out" / "train.py").read_text()
    assert "apex" not in migrated and "torch.optim.AdamW(" in migrated
    assert "stand-ins" in final["verification"]["reason"]  # the original ran apex's stand-in
    assert final["verification"]["parity"]["max_abs"] < 1e-6


AMP_PROGRAM = """\
import torch
from apex import amp
from apex.optimizers import FusedAdam

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
model = model.cuda()
optimizer = FusedAdam(model.parameters(), lr=1e-2)
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
for step in range(10):
    x = torch.randn(8, 16).cuda()
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), max_norm=1.0)
    optimizer.step()
torch.save({"model": model.state_dict(), "amp": amp.state_dict()}, "checkpoint.pt")
"""


@pytest.mark.slow
def test_a_program_on_apex_amp_verifies_rules_only_under_bf16_autocast(tmp_path):
    final = migrate_rules_only(tmp_path, AMP_PROGRAM, "tpu", steps=5)
    assert final["outcome"] == "verified", (final["verification"]["reason"], final["decisions"])
    migrated = (tmp_path / "out" / "train.py").read_text()
    assert "apex" not in migrated and "amp." not in migrated
    assert 'model.forward = torch.autocast("tpu", dtype=torch.bfloat16)(model.forward)' in migrated
    assert "bf16 policy" in final["verification"]["reason"]  # the port runs in bf16, not fp32
