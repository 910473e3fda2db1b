"""Unused imports decided by counting names agree with libcst's scope analysis, byte for byte.

``tools.cst_imports.unused`` replaces ``RemoveImportsVisitor``'s whole-module scope
analysis with one ``ast`` count where that count is conclusive; each case here is run
both ways and must come out the same. A case the count cannot decide is decided by
libcst itself, and the tests say which cases those are, so a change that made every
file fall back (no speed-up) fails here too.
"""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import RemoveImportsVisitor
from torchport.tools.cst_imports import remove_unused_imports, unused_names

AMP = [("torch.cuda.amp", "autocast", None), ("torch.cuda.amp", "GradScaler", None)]
CUDNN = [("torch.backends.cudnn", None, "cudnn")]

# (source, imports to drop if unused, decided without libcst)
CASES = {
    "one of two names used": (
        "from torch.cuda.amp import autocast, GradScaler\n\nscaler = GradScaler()\n",
        AMP,
        True,
    ),
    "neither used, parenthesised with comments": (
        "import os\nfrom torch.cuda.amp import (  # mixed precision\n"
        "    autocast,  # the context\n    GradScaler,\n)\n\nprint(os.sep)\n",
        AMP,
        True,
    ),
    "aliased module, unused": (
        "import torch\nimport torch.backends.cudnn as cudnn\n\nx = torch.ones(1)\n",
        CUDNN,
        True,
    ),
    "aliased module, used in a function": (
        "import torch.backends.cudnn as cudnn\n\n\ndef setup():\n    cudnn.benchmark = True\n",
        CUDNN,
        True,
    ),
    "used in an f-string, a decorator and a default": (
        "from torch.cuda.amp import autocast, GradScaler\n\n\n@autocast()\n"
        'def f(s=GradScaler()):\n    return f"{autocast}"\n',
        AMP,
        True,
    ),
    "only as an attribute, a keyword and a class attribute": (
        "from torch.cuda.amp import autocast, GradScaler\n\n\nclass A:\n    autocast = 1\n\n\n"
        "print(A.autocast, dict(GradScaler=2))\n",
        AMP,
        True,
    ),
    "imported in a function, unused there": (
        "def f():\n    from torch.cuda.amp import autocast\n    return 1\n",
        AMP[:1],
        True,
    ),
    "imported in a function, used there": (
        "def f():\n    from torch.cuda.amp import autocast\n    with autocast():\n        pass\n",
        AMP[:1],
        False,
    ),
    "shadowed by a parameter": (
        "from torch.cuda.amp import autocast\n\n\ndef f(autocast):\n    return autocast\n",
        AMP[:1],
        False,
    ),
    "bound twice (try/except import)": (
        "try:\n    from torch.cuda.amp import autocast\nexcept ImportError:\n"
        "    from torch.amp import autocast\nwith autocast():\n    pass\n",
        AMP[:1],
        False,
    ),
    "named in __all__": (
        'from torch.cuda.amp import autocast\n\n__all__ = ["autocast"]\n',
        AMP[:1],
        False,
    ),
    "named in a string annotation": (
        'from torch.cuda.amp import GradScaler\n\n\ndef f(s: "GradScaler") -> None:\n    pass\n',
        AMP[1:],
        False,
    ),
    "named in a plain string and an f-string": (
        'import torch.backends.cudnn as cudnn\n\nprint("cudnn off", f"cudnn {1}")\n',
        CUDNN,
        True,
    ),
    "named in a TypeVar bound": (
        "from torch.cuda.amp import GradScaler\nfrom typing import TypeVar\n\n"
        'T = TypeVar("T", bound="GradScaler")\n',
        AMP[1:],
        False,
    ),
    "deleted": ("from torch.cuda.amp import autocast\n\ndel autocast\n", AMP[:1], False),
    "a comprehension's variable of the same name": (
        "from torch.cuda.amp import autocast\n\nx = [autocast for autocast in range(3)]\n",
        AMP[:1],
        False,
    ),
    "several statements on a line": (
        "import torch.backends.cudnn as cudnn; import os\nprint(os.sep)\n",
        CUDNN,
        True,
    ),
}


def _libcst(source: str, imports) -> str:
    context = CodemodContext()
    for module, obj, alias in imports:
        RemoveImportsVisitor.remove_unused_import(context, module, obj, alias)
    return RemoveImportsVisitor(context).transform_module(cst.parse_module(source)).code


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_count_and_libcst_agree(case):
    source, imports, decided = CASES[case]
    names = {alias or obj or module for module, obj, alias in imports}
    assert (unused_names(source, names) is not None) == decided
    expected = _libcst(source, imports)
    assert remove_unused_imports(cst.parse_module(source), imports).code == expected


def test_the_cases_remove_something_and_keep_something():
    """The agreement above means something only if both outcomes occur in it."""
    outcomes = {_libcst(s, i) == s for s, i, _ in CASES.values()}
    assert outcomes == {True, False}
