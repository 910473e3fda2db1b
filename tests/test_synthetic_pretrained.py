"""Hugging Face ``from_pretrained`` in the sandbox (no network): a model whose config ships
with transformers (a config class whose defaults are that checkpoint) is built at its own
initialisation and the run says so; one whose config is not known offline fails naming
what was asked for and the next step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from torchport.agents.data_notes import data_notes
from torchport.sandbox.harness import RunSpec, run

pytest.importorskip("transformers", reason="transformers is not installed here")

GPT2_FINE_TUNE = """\
import torch
from transformers import AutoModelForCausalLM, GPT2LMHeadModel

model = AutoModelForCausalLM.from_pretrained("gpt2", n_layer=1, n_embd=32, n_head=2)
assert isinstance(model, GPT2LMHeadModel) and not model.training  # as from_pretrained returns it
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
seeded = torch.Generator().manual_seed(0)
tokens = torch.randint(0, model.config.vocab_size, (2, 16), generator=seeded)
for _ in range(10):
    loss = model(input_ids=tokens, labels=tokens).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_from_pretrained_of_a_shipped_config_trains_from_its_own_initialisation(tmp_path):
    root = tmp_path / "prog"
    root.mkdir()
    (root / "train.py").write_text(GPT2_FINE_TUNE)
    result = run(RunSpec(root=root, command=["python", "train.py"], steps=2, timeout_s=300))
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert result.steps == 2
    weights = [r for r in result.synthetic_data if r["dataset"] == "pretrained weights"]
    assert weights and weights[0]["library"] == "transformers" and weights[0]["path"] == "gpt2"
    notes = data_notes({"synthetic_data": result.synthetic_data})
    assert any("pretrained weights NOT loaded" in line and "gpt2" in line for line in notes)


def test_from_pretrained_without_a_known_config_fails_naming_it_and_the_next_step(tmp_path):
    code = textwrap.dedent(
        """\
        import json
        from torchport.sandbox import synthetic
        synthetic.install()
        from transformers import AutoModel, BertConfig, BertModel
        seen = {}
        try:
            AutoModel.from_pretrained("some-org/private-encoder")
        except OSError as exc:
            seen["auto"] = str(exc)
        model = BertModel.from_pretrained("google-bert/bert-base-uncased")
        seen["bert"] = [model.config.hidden_size, model.config.num_hidden_layers]
        config = BertConfig.from_pretrained("bert-base-uncased", num_hidden_layers=2)
        seen["config"] = config.num_hidden_layers
        print(json.dumps(seen))
        """
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}  # an empty cache
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert "'some-org/private-encoder'" in seen["auto"]
    assert "no network" in seen["auto"] and "Next step" in seen["auto"]
    assert seen["bert"] == [768, 12]  # bert-base's architecture: BertConfig's defaults
    assert seen["config"] == 2
