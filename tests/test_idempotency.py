"""Property: migrating twice equals migrating once, for generated variants of the
common CUDA patterns (names, spacing, aliases and combinations vary)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torchport.tools.catalogue import TARGETS
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import ScanOptions, scan

NAMES = st.sampled_from(["model", "net", "x", "batch", "self.encoder", "inputs[0]"])
SPACE = st.sampled_from(["", " "])
INDEX = st.sampled_from(["", "0", "rank", "local_rank"])

PATTERNS = [
    st.builds(lambda n, s, i: f"{n} = {n}.cuda({s}{i}{s})", NAMES, SPACE, INDEX),
    st.builds(lambda n: f"{n} = {n}.to('cuda', non_blocking=True)", NAMES),
    st.builds(lambda i: f'device = torch.device("cuda{":" + i if i.isdigit() else ""}")', INDEX),
    st.just('device = "cuda" if torch.cuda.is_available() else "cpu"'),
    st.just("torch.cuda.synchronize()"),
    st.just("torch.cuda.manual_seed_all(seed)"),
    st.just("torch.backends.cudnn.benchmark = True"),
    st.just("peak = torch.cuda.max_memory_allocated() / 2**20"),
    st.builds(lambda s: f"scaler = torch.cuda.amp.GradScaler({s}enabled=use_amp{s})", SPACE),
    st.just("loader = DataLoader(ds, batch_size=8, pin_memory=True)"),
    st.just('state = torch.load(path, map_location="cuda:0")'),
    st.just('dist.init_process_group("nccl")'),
    st.just("opt = torch.optim.AdamW(params, lr=1e-3, fused=True)"),
    st.builds(lambda n: f"if {n}.is_cuda:\n    print('on gpu')", NAMES),
    st.just("with torch.cuda.amp.autocast():\n    loss = model(x).sum()"),
]

PROGRAM = st.lists(st.one_of(PATTERNS), min_size=1, max_size=6)


def _auto_findings(tmp: Path, source: str, target: str):
    path = tmp / "prog.py"
    path.write_text(source)
    return [
        f
        for f in scan(path, ScanOptions(target=target)).findings
        if f.fix[target]["kind"] == "auto"
    ]


def _migrate(tmp: Path, source: str, target: str) -> str:
    findings = _auto_findings(tmp, source, target)
    return migrate_python(source, findings, target, "prog.py").source


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=PROGRAM, target=st.sampled_from(TARGETS))
def test_a_second_migration_changes_nothing(tmp_path, lines, target):
    body = textwrap.indent("\n".join(lines), "    ")
    source = (
        "import torch\nimport torch.distributed as dist\nfrom torch.utils.data import DataLoader\n"
        f"\n\ndef main(ds, params, path, seed, use_amp, rank, local_rank, inputs, self):\n{body}\n"
    )
    once = _migrate(tmp_path, source, target)
    compile(once, "prog.py", "exec")
    assert _auto_findings(tmp_path, once, target) == []
    assert _migrate(tmp_path, once, target) == once
