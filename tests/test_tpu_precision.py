"""TorchTPU's matmul arithmetic on the emulated ``tpu`` device (sandbox/emulator/precision.py),
on both emulators, and the precision a run can pin for the verifier
(``RunSpec.matmul_precision``), carried to every process.

A TPU computes a float32 matmul, by default, as bfloat16 products accumulated in float32
(``Precision.DEFAULT``); ``HIGH`` in three bfloat16 passes; ``HIGHEST`` as float32. The
numbers below: a 256x256 product of standard normals is off by ~0.17 at DEFAULT, ~1e-3 at
HIGH, and equal at HIGHEST; accumulation-order error in float32 is ~1e-5 here.
"""

from __future__ import annotations

import json
import textwrap

import pytest
import test_emulator
from test_emulator import backend_env, run_snippet
from torchport.cli.main import main as cli
from torchport.sandbox import matmul_precision
from torchport.sandbox.harness import RunError, RunSpec, launcher_argv, run
from torchport.sandbox.session import RunConfig

backend = test_emulator.backend  # the fixture: the tests that take it run on both emulators
ORDER = 1e-4  # accumulation-order error of a 256-term float32 dot product of N(0,1) values


def test_a_run_pins_only_torchs_precision_names_and_says_which(tmp_path):
    assert RunSpec(root=tmp_path, command=["python", "x.py"]).matmul_precision is None
    assert RunSpec(root=tmp_path, command=["python", "x.py"], matmul_precision="highest")
    with pytest.raises(RunError, match=r"matmul_precision .*'highest'.*not 'HIGHEST'"):
        RunSpec(root=tmp_path, command=["python", "x.py"], matmul_precision="HIGHEST")
    assert set(matmul_precision.choices()) == {"medium", "high", "highest"}


def test_the_pinned_precision_reaches_the_launcher_and_every_child_of_the_run(tmp_path):
    spec = RunSpec(root=tmp_path, command=["python", "x.py"], mode="tpu", matmul_precision="high")
    argv = launcher_argv(spec, tmp_path, tmp_path)
    assert argv[argv.index("--matmul-precision") + 1] == "high"
    plain = launcher_argv(RunSpec(root=tmp_path, command=["python", "x.py"]), tmp_path, tmp_path)
    assert "--matmul-precision" not in plain
    config = RunConfig(mode="tpu", results=str(tmp_path), matmul_precision="highest")
    assert RunConfig.from_env(config.to_env()).matmul_precision == "highest"


PINNED = """\
import multiprocessing
import torch
from torchport.sandbox.emulator import precision


def child(queue):
    import torch  # the child's session activates the device as it imports torch
    from torchport.sandbox.emulator import precision
    queue.put(precision.pinned)


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    worker = context.Process(target=child, args=(queue,))
    worker.start()
    print("PINNED", precision.pinned, queue.get(timeout=120))
    worker.join()
"""


@pytest.mark.slow
def test_a_sandboxed_run_pins_the_precision_in_the_program_and_its_children(tmp_path):
    root = tmp_path / "prog"
    root.mkdir()
    (root / "main.py").write_text(textwrap.dedent(PINNED))
    result = run(
        RunSpec(
            root=root, command=["python", "main.py"], mode="tpu", timeout_s=180,
            matmul_precision="highest",
        )
    )  # fmt: skip
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert "PINNED highest highest" in result.stdout_tail


# A float32 256x256 product on the device, at each precision, beside the CPU's exact one and
# the product of the bfloat16-rounded inputs accumulated in float32.
MATMUL = """\
import json
import torch

torch.manual_seed(0)
a, b = torch.randn(256, 256), torch.randn(256, 256)
exact = a @ b  # a CPU tensor: torch's own float32 kernel
rounded = a.bfloat16().float() @ b.bfloat16().float()


def on_device():
    return (a.to("tpu") @ b.to("tpu")).cpu()


def gap(x, y):
    return (x - y).abs().max().item()


default = on_device()
with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
    highest = on_device()
setting = torch.get_float32_matmul_precision()
torch.set_float32_matmul_precision("highest")
after_set = on_device()
print("PRECISION=" + json.dumps({
    "default_vs_rounded": gap(default, rounded), "default_vs_exact": gap(default, exact),
    "highest_vs_exact": gap(highest, exact), "set_highest_vs_exact": gap(after_set, exact),
    "setting": setting,
}))
"""


def _numbers(stdout: str) -> dict:
    line = [ln for ln in stdout.splitlines() if ln.startswith("PRECISION=")][-1]
    return json.loads(line[len("PRECISION=") :])


def _program(tmp_path, text: str):
    root = tmp_path / "prog"
    root.mkdir()
    (root / "main.py").write_text(text)
    return root


@pytest.mark.slow
def test_torchport_run_computes_a_float32_matmul_as_a_tpu_does(
    tmp_path, backend, monkeypatch, capsys
):
    """The acceptance check: under ``torchport run --target tpu`` a 256x256 float32 matmul is
    the product of bfloat16-rounded inputs accumulated in float32, not the exact product;
    ``torch.tpu.precision(Precision.HIGHEST)`` and ``set_float32_matmul_precision("highest")``
    give the exact product."""
    for name, value in backend_env(backend).items():
        monkeypatch.setenv(name, value)
    root = _program(tmp_path, MATMUL)
    code = cli(["run", "--target", "tpu", "--root", str(root), "-f", "json", "--", "python",
                "main.py"])  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["status"] == "ok", result["error"]
    got = _numbers(result["stdout_tail"])
    assert got["default_vs_rounded"] <= ORDER, got
    assert got["default_vs_exact"] > 0.05, got  # bfloat16 inputs: ~0.17 off
    assert got["highest_vs_exact"] <= ORDER and got["set_highest_vs_exact"] <= ORDER, got
    assert got["setting"] == "medium"  # TorchTPU's global DEFAULT, in torch's words


@pytest.mark.slow
def test_a_run_pinned_at_highest_computes_exactly_whatever_the_program_sets(
    tmp_path, backend, monkeypatch
):
    for name, value in backend_env(backend).items():
        monkeypatch.setenv(name, value)
    root = _program(tmp_path, MATMUL)
    spec = RunSpec(root=root, command=["python", "main.py"], mode="tpu", timeout_s=180,
                   matmul_precision="highest")  # fmt: skip
    result = run(spec)
    assert result.status == "ok", (result.error, result.stderr_tail)
    got = _numbers(result.stdout_tail)
    assert got["default_vs_exact"] <= ORDER, got  # the program's DEFAULT is overridden
    assert got["setting"] == "medium"  # the pin is not the program's setting


OPS = """
torch.manual_seed(0)
r = lambda t: t.bfloat16().float()  # the TPU's DEFAULT rounding of a float32 operand
gap = lambda x, y: (x.detach().cpu() - y.detach().cpu()).abs().max().item()
dev = lambda t: t.to("tpu")
a, b = torch.randn(4, 64, 96), torch.randn(4, 96, 32)
c = torch.randn(4, 64, 32)
result["bmm"] = gap(torch.bmm(dev(a), dev(b)), torch.bmm(r(a), r(b)))
result["bmm_exact"] = gap(torch.bmm(dev(a), dev(b)), torch.bmm(a, b))
result["matmul_batched"] = gap(dev(a) @ dev(b), r(a) @ r(b))
result["einsum"] = gap(torch.einsum("bij,bjk->bik", dev(a), dev(b)), r(a) @ r(b))
result["baddbmm"] = gap(torch.baddbmm(dev(c), dev(a), dev(b), beta=0.5, alpha=2.0),
                        torch.baddbmm(c, r(a), r(b), beta=0.5, alpha=2.0))
result["mv"] = gap(dev(a[0]) @ dev(b[0, :, 0]), r(a[0]) @ r(b[0, :, 0]))

# linear, forward and backward: with loss = y.sum() the output's gradient is all ones, so the
# weight's gradient is ones^T @ x: exact only if x is not rounded
lin = nn.Linear(96, 32)
x = torch.randn(64, 96)
w, bias = lin.weight.detach().clone(), lin.bias.detach().clone()
lin = lin.to("tpu")
xd = dev(x).requires_grad_()
y = lin(xd)
y.sum().backward()
result["linear"] = gap(y, r(x) @ r(w).T + bias)
result["linear_exact"] = gap(y, x @ w.T + bias)
result["linear_grad_weight"] = gap(lin.weight.grad, torch.ones(64, 32).T @ r(x))
result["linear_grad_weight_exact"] = gap(lin.weight.grad, torch.ones(64, 32).T @ x)
result["linear_grad_input"] = gap(xd.grad, torch.ones(64, 32) @ r(w))

# convolution (and transposed), forward and backward; the bias's gradient is a sum, not a
# product, and stays exact
conv = nn.Conv2d(3, 8, 3, padding=1)
img = torch.randn(2, 3, 12, 12)
cw, cb = conv.weight.detach().clone(), conv.bias.detach().clone()
conv = conv.to("tpu")
imgd = dev(img).requires_grad_()
out = conv(imgd)
gout = torch.randn(out.shape)
out.backward(dev(gout))
result["conv"] = gap(out, F.conv2d(r(img), r(cw), cb, padding=1))
result["conv_exact"] = gap(out, F.conv2d(img, cw, cb, padding=1))
ref_in = torch.nn.grad.conv2d_input(img.shape, r(cw), r(gout), padding=1)
ref_w = torch.nn.grad.conv2d_weight(r(img), cw.shape, r(gout), padding=1)
result["conv_grad_input"] = gap(imgd.grad, ref_in)
result["conv_grad_weight"] = gap(conv.weight.grad, ref_w)
result["conv_grad_bias"] = gap(conv.bias.grad, gout.sum((0, 2, 3)))
tw = torch.randn(3, 5, 3, 3)
result["conv_transpose"] = gap(F.conv_transpose2d(dev(img), dev(tw)),
                               F.conv_transpose2d(r(img), r(tw)))

# bfloat16 operands and CPU tensors are computed as they are
a16, b16 = a.bfloat16(), b.bfloat16()
result["bf16"] = gap(torch.bmm(dev(a16), dev(b16)), torch.bmm(a16, b16))
result["cpu"] = gap(torch.bmm(a, b), torch.bmm(a.double(), b.double()).float())
"""


def test_matmul_class_ops_round_float32_operands_to_bfloat16_forward_and_backward(backend):
    r = run_snippet(OPS, backend=backend)
    rounded = ("bmm", "matmul_batched", "einsum", "baddbmm", "mv", "linear", "conv",
               "conv_transpose", "linear_grad_weight", "linear_grad_input", "conv_grad_input",
               "conv_grad_weight")  # fmt: skip
    assert all(r[k] <= ORDER for k in rounded), r
    for exact in ("bmm_exact", "linear_exact", "conv_exact", "linear_grad_weight_exact"):
        assert r[exact] > 10 * ORDER, (exact, r)  # the exact result is not what ran
    assert r["conv_grad_bias"] <= ORDER and r["bf16"] == 0.0 and r["cpu"] <= ORDER, r


def test_high_precision_on_every_op_is_three_bfloat16_passes_not_one(backend):
    """HIGH (bf16_3x) on the same ops, forward and backward, out/in-place forms and the
    bias terms included: within ~2e-3 of float32 here, where DEFAULT is off by ~0.1."""
    code = "torch.set_float32_matmul_precision('high')\n" + OPS.replace(
        "r = lambda t: t.bfloat16().float()", "r = lambda t: t"
    )
    code += """
out = torch.empty(4, 64, 32, device="tpu")
torch.bmm(dev(a), dev(b), out=out)
result["bmm_out"] = gap(out, torch.bmm(a, b))
acc = dev(c)
acc.baddbmm_(dev(a), dev(b), alpha=0.5)
result["baddbmm_"] = gap(acc, torch.baddbmm(c, a, b, alpha=0.5))
"""
    r = run_snippet(code, backend=backend)
    close = ("bmm", "matmul_batched", "einsum", "baddbmm", "mv", "linear", "conv",
             "conv_transpose", "linear_grad_weight", "linear_grad_input", "conv_grad_input",
             "conv_grad_weight", "bmm_out", "baddbmm_")  # fmt: skip
    assert all(r[k] <= 2e-3 for k in close), r
    assert r["bmm"] > 0 and r["conv_grad_bias"] <= ORDER and r["bf16"] == 0.0, r


LEVELS = """
torch.manual_seed(0)
a, b = torch.randn(256, 256), torch.randn(256, 256)
exact = (a.double() @ b.double()).float()
P = torch.tpu.Precision
gap = lambda x: (x.cpu() - exact).abs().max().item()
mm = lambda: a.to("tpu") @ b.to("tpu")
result["initial"] = torch.get_float32_matmul_precision()
result["default"] = gap(mm())
with torch.tpu.precision(P.HIGH):
    result["high"] = gap(mm())
    with torch.tpu.precision(P.HIGHEST):
        result["nested_highest"] = gap(mm())
    result["back_to_high"] = gap(mm())
torch.set_float32_matmul_precision("high")
result["set_high"] = (torch.get_float32_matmul_precision(), gap(mm()))
torch.set_float32_matmul_precision("highest")
with torch.tpu.precision(P.DEFAULT):  # the block overrides the global setting
    result["block_over_global"] = gap(mm())
    result["global_inside_block"] = torch.get_float32_matmul_precision()
for bad in (lambda: torch.set_float32_matmul_precision("HIGHEST"),
            lambda: torch.tpu.precision("highest").__enter__()):
    try:
        bad()
        result.setdefault("refused", []).append(None)
    except ValueError as exc:
        result.setdefault("refused", []).append(str(exc))
"""


def test_precision_levels_follow_torch_tpu_precision_and_set_float32_matmul_precision(backend):
    r = run_snippet(LEVELS, backend=backend)
    assert r["initial"] == "medium"
    assert r["default"] > 0.05 and r["nested_highest"] <= ORDER, r
    # HIGH (three bfloat16 passes): far closer than DEFAULT, not float32
    assert 0 < r["high"] < r["default"] / 50 and r["back_to_high"] == r["high"], r
    assert r["set_high"] == ["high", r["high"]], r
    assert r["block_over_global"] == r["default"] and r["global_inside_block"] == "highest"
    assert "expected to be one of 'highest', 'high', or 'medium', got 'HIGHEST'" in r["refused"][0]
    assert "'PrecisionConfig.HIGHEST', got 'highest'" in r["refused"][1]


PINNED_SNIPPET = """
emu.activate("tpu", devices=1, matmul_precision="highest")
torch.manual_seed(0)
a, b = torch.randn(256, 256), torch.randn(256, 256)
gap = lambda x: (x.cpu() - a @ b).abs().max().item()
torch.set_float32_matmul_precision("medium")
with torch.tpu.precision(torch.tpu.Precision.DEFAULT):
    result["pinned"] = gap(a.to("tpu") @ b.to("tpu"))
result["setting"] = torch.get_float32_matmul_precision()
"""


def test_a_pinned_precision_overrides_every_program_setting(backend):
    r = run_snippet(PINNED_SNIPPET, activate=False, backend=backend)
    assert r["pinned"] <= ORDER and r["setting"] == "medium", r


def test_the_neuron_device_keeps_float32_matmuls_exact(backend):
    code = """
a, b = torch.randn(256, 256), torch.randn(256, 256)
result["gap"] = ((a.to("neuron") @ b.to("neuron")).cpu() - a @ b).abs().max().item()
result["setting"] = torch.get_float32_matmul_precision()
"""
    r = run_snippet(code, name="neuron", backend=backend)
    assert r["gap"] <= ORDER and r["setting"] == "highest", r


SDPA = """
torch.manual_seed(0)
q, k, v = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8)
r = lambda t: t.bfloat16().float()
s = 8 ** -0.25  # torch's math kernel scales q and k by sqrt(1/sqrt(head_dim)) each
weights = torch.softmax(r(q * s) @ r(k * s).transpose(-2, -1), dim=-1)
reference = r(weights) @ r(v)
out = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu")).cpu()
result["rounded"] = (out - reference).abs().max().item()
result["exact"] = (out - F.scaled_dot_product_attention(q, k, v)).abs().max().item()
"""


def test_attention_matmuls_follow_the_precision(backend):
    r = run_snippet(SDPA, backend=backend)
    assert r["rounded"] <= ORDER and r["exact"] > 10 * ORDER, r


AUTOCAST = """
dev = {name!r}
x = torch.randn(8, 16, device=dev)
w = torch.randn(16, 16, device=dev)
h = x.bfloat16()
kinds = {{}}
with torch.autocast(dev):
    kinds["matmul"] = x @ w
    kinds["linear"] = F.linear(x, w)
    kinds["conv2d"] = F.conv2d(torch.randn(1, 2, 5, 5, device=dev), w.view(4, 4, 4, 4)[:, :2])
    kinds["sdpa"] = F.scaled_dot_product_attention(*[torch.randn(1, 2, 4, 8, device=dev)] * 3)
    kinds["softmax_bf16"] = torch.softmax(h, -1)
    kinds["layer_norm_bf16"] = F.layer_norm(h, (16,))
    kinds["exp_bf16"] = torch.exp(h)
    kinds["sum_bf16"] = h.sum()
    kinds["softmax_f32"] = torch.softmax(x, -1)
    kinds["mse_loss_bf16"] = F.mse_loss(h, h)
    kinds["prod_bf16"] = h.prod()
    kinds["inv_bf16"] = torch.linalg.inv(h[:, :8] + 4 * torch.eye(8, device=dev))
    if dev == "tpu":  # torch's CPU kernel has no bfloat16 avg_pool3d: fails uncast
        kinds["avg_pool3d_bf16"] = F.avg_pool3d(h.view(1, 1, 2, 8, 8), 2)
result.update({{k: str(v.dtype) for k, v in kinds.items()}})
"""


def test_autocast_on_tpu_follows_torchtpus_op_lists(backend):
    """TorchTPU's AutocastPrivateUse1 lists: matmul/linear/conv/SDPA in bfloat16, float32 for
    losses, linalg and 3-D pooling, prod given a float32 dtype, and nothing else cast (CUDA's
    lists would run softmax, layer_norm, exp and sum in float32)."""
    r = run_snippet(AUTOCAST.format(name="tpu"), backend=backend)
    bf16 = ("matmul", "linear", "conv2d", "sdpa", "softmax_bf16", "layer_norm_bf16", "exp_bf16",
            "sum_bf16")  # fmt: skip
    assert {k: r[k] for k in bf16} == dict.fromkeys(bf16, "torch.bfloat16"), r
    fp32 = ("softmax_f32", "mse_loss_bf16", "prod_bf16", "inv_bf16", "avg_pool3d_bf16")
    assert {k: r[k] for k in fp32} == dict.fromkeys(fp32, "torch.float32"), r


def test_autocast_on_neuron_keeps_cudas_op_lists(backend):
    r = run_snippet(AUTOCAST.format(name="neuron"), name="neuron", backend=backend)
    assert r["matmul"] == "torch.bfloat16" and r["softmax_bf16"] == "torch.float32", r


def test_every_autocast_op_torchtpu_registers_is_an_aten_op_here():
    """The facts name at::_ops structs (``conv1d_padding``); each must resolve, or the
    emulator would silently leave that op out of autocast."""
    from torchport.sandbox.emulator import autocast
    from torchport.sandbox.torchtpu_facts import section

    facts = section("autocast")
    for kind in ("lower_precision_fp", "fp32", "fp32_set_opt_dtype"):
        for struct in facts[kind]:
            qualified = autocast.resolve(struct)
            assert qualified is not None and qualified.replace(".", "_") == struct, struct
    assert autocast.resolve("conv1d_padding") == "conv1d.padding"
