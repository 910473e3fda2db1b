"""Imports a port adds, read as a reviewer would: no second ``import torch``, a new import in
its group, and the file's own name for torch (each a wrong output seen on real code)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import ScanOptions, scan


def _port(tmp_path: Path, source: str, target: str = "tpu") -> str:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(source))
    findings = [
        f
        for f in scan(path, ScanOptions(target=target)).findings
        if f.fix[target]["kind"] == "auto"
    ]
    result = migrate_python(path.read_text(), findings, target, path.name)
    assert not [why for _, why in result.unapplied if "semantic guard" in why]
    return result.source


def test_torch_imported_after_a_try_block_is_not_imported_again(tmp_path: Path) -> None:
    """yolov5: ``try: import comet_ml`` before ``import torch`` got a second ``import torch``
    above the try block, and the semantic guard then refused 9 fixes that used torch."""
    port = _port(
        tmp_path,
        """\
        import os

        try:
            import comet_ml
        except ImportError:
            comet_ml = None

        import torch

        torch.backends.cudnn.benchmark = True
        x = torch.randn(2).cuda()
        torch.cuda.synchronize()
        """,
    )
    assert port.count("import torch\n") == 1
    assert port.index("try:") < port.index("import torch\n")
    assert "torch.accelerator.synchronize()" in port and "cudnn" not in port


def test_a_standard_library_import_joins_its_group_before_torch(tmp_path: Path) -> None:
    port = _port(
        tmp_path,
        """\
        import torch

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        end.record()
        print(start.elapsed_time(end))
        """,
    )
    assert port.startswith("import time\n\nimport torch\n")


def test_a_file_that_calls_torch_th_keeps_calling_it_th(tmp_path: Path) -> None:
    port = _port(
        tmp_path,
        """\
        import torch as th

        x = th.randn(2).cuda()
        th.cuda.synchronize()
        """,
    )
    assert "th.accelerator.synchronize()" in port
    assert "import torch\n" not in port and re.search(r"(?<![\w.])torch\.", port) is None


def test_a_new_import_goes_above_the_first_line_that_reads_it() -> None:
    """A script whose imports go on after its code (pytorch/extension-cpp's JIT usage: the
    extension is built, put in ``sys.modules``, then ``from lltm import LLTM``): the new
    import joined that last group, after the line using it, and the semantic guard refused
    the fix (undefined name). An import nothing reads yet still joins its group."""
    import libcst as cst
    from torchport.tools.cst_imports import add_imports

    source = textwrap.dedent(
        """\
        import sys

        import torch

        ext = cudacpu_host.build("ext", "ext_host.cpp", __file__)
        sys.modules["ext"] = ext
        from lltm import LLTM
        """
    )
    port = add_imports(cst.parse_module(source), {"cudacpu_host", "other_helper"}).code
    lines = port.splitlines()
    assert lines.index("import cudacpu_host") < lines.index(
        'ext = cudacpu_host.build("ext", "ext_host.cpp", __file__)'
    )
    assert lines.index("import torch") < lines.index("import cudacpu_host")
    assert lines[-1] == "import other_helper"  # read by nothing: after from lltm import LLTM
