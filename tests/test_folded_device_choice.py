"""TPD007 on xla: ``torch.cuda.is_available()`` is always true there, so a device choice
folds to the arm it takes. An ``if`` written on one line (``if ...: device = "cuda"``) holds
small statements, not lines: the fold crashed on them (no ``leading_lines``) and left the
choice for a human as a torchport bug."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import scan

ONE_LINE = (
    "import torch\n\n"
    '# where to run\nif torch.cuda.is_available(): device = "cuda"\n'
    'else: device = "cpu"\n'
    "x = torch.ones(2).to(device)\n"
)
INDENTED = (
    "import torch\n\n"
    '# where to run\nif torch.cuda.is_available():\n    device = "cuda"\n'
    'else:\n    device = "cpu"\n'
    "x = torch.ones(2).to(device)\n"
)


@pytest.mark.parametrize("source", [ONE_LINE, INDENTED], ids=["one-line", "indented"])
def test_a_device_choice_folds_to_its_cuda_arm_on_xla(tmp_path: Path, source: str):
    path = tmp_path / "m.py"
    path.write_text(source)
    findings = [f for f in scan(path).findings if f.rule == "TPD007"]
    assert findings, "the scanner finds the choice"
    result = migrate_python(source, findings, "xla", "m.py")
    assert result.unapplied == []
    assert result.source == (
        "import torch\nimport torch_xla\n\n"
        '# where to run\ndevice = "xla"\n'
        "x = torch.ones(2).to(device)\n"
    ), result.source
