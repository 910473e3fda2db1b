"""TPK003 where the code has no torch fallback: the kernels run, unchanged, on triton_on_torch.

triton_on_torch (tools/kernel_runtime) is a torch implementation of the Triton language
that a port can carry: the file is shipped beside the kernel module and only the module's
Triton imports change (``import triton`` -> ``import triton_on_torch as triton``, from the
package, ``from . import triton_on_torch as triton``, when the module is in one), so every
kernel's source stays byte for byte what the author wrote and every ``kernel[grid](...)``
launch runs it, one program id at a time, on the tensors' device. That is correct but
slow: the finding is converted and listed as a performance advisory.

Applied only where the runtime has every construct the file uses
(``kernel_runtime.support``); otherwise the reason names each missing one with its line.
"""

from __future__ import annotations

import libcst as cst

from ..kernel_runtime import support
from .base import code_of

RUNTIME_FILE = "triton_on_torch.py"  # tools/kernel_runtime's file, shipped as it is
MODULE = RUNTIME_FILE.removesuffix(".py")
ADVISORY = (
    "the kernel runs unchanged through triton_on_torch (shipped beside it): a Python loop "
    "over its program ids on the device, slow but correct; a PyTorch version of the call "
    "site (or Pallas on tpu, NKI on neuron) is the fast port"
)


def lacking(source: str) -> str:
    """Why triton_on_torch cannot run ``source``'s kernels ("" when it can): each Triton
    construct it lacks, with its line."""
    found = support.unsupported_in(source)
    if not found:
        return ""
    named = ", ".join(f"{construct} (line {line})" for construct, line in found)
    return f"triton_on_torch (the Triton runtime a port can ship) lacks {named}"


def _is_triton(module: str) -> bool:
    return module == "triton" or module.startswith("triton.")


def _module_expr(dotted: str) -> cst.Attribute | cst.Name:
    parsed = cst.parse_expression(dotted)
    assert isinstance(parsed, cst.Attribute | cst.Name)
    return parsed


def crowded_imports(module: cst.Module) -> list[cst.Import]:
    """``import torch, triton`` and the like: one statement importing Triton and more, which
    cannot become one import of the runtime's (from the package, each is a ``from``)."""
    found = []

    class Imports(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> None:
            names = [code_of(alias.name) for alias in node.names]
            if len(names) > 1 and any(map(_is_triton, names)):
                found.append(node)

    module.visit(Imports())
    return found


def runtime_import(small: cst.CSTNode, package: bool) -> cst.BaseSmallStatement | None:
    """``small`` (an import) with its Triton module replaced by the runtime's, the names it
    binds unchanged; None when it imports no Triton."""
    if isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
        module = code_of(small.module)
        if not _is_triton(module):
            return None
        new = MODULE + module[len("triton") :]
        dots = [cst.Dot()] if package else []
        return small.with_changes(module=_module_expr(new), relative=dots)
    if not isinstance(small, cst.Import):
        return None
    if len(small.names) != 1 or not _is_triton(code_of(small.names[0].name)):
        return None  # a crowded one is refused before (crowded_imports)
    return _one_import(small.names[0], package)


def _bound(alias: cst.ImportAlias) -> str:
    """The name ``import triton.x.y [as z]`` binds: z, or ``triton``."""
    if alias.asname is not None:
        return code_of(alias.asname.name)
    return code_of(alias.name).partition(".")[0]


def _one_import(alias: cst.ImportAlias, package: bool) -> cst.BaseSmallStatement:
    """``import triton[.a.b] [as x]`` as the same binding of the runtime's module."""
    module, bound = code_of(alias.name), _bound(alias)
    rest = module[len("triton") :] if alias.asname is not None else ""
    parent, _, leaf = (MODULE + rest).rpartition(".")
    if not parent and not package:
        return cst.Import([cst.ImportAlias(cst.Name(MODULE), cst.AsName(cst.Name(bound)))])
    name = cst.ImportAlias(cst.Name(leaf), cst.AsName(cst.Name(bound)))
    return cst.ImportFrom(
        module=_module_expr(parent) if parent else None,
        names=[name],
        relative=[cst.Dot()] if package else [],
    )
