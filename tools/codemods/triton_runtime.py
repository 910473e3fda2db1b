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
from .base import REMOVE_STATEMENT, FixContext, Fixed, code_of

RUNTIME_FILE = "triton_on_torch.py"  # tools/kernel_runtime's file, shipped as it is
MODULE = RUNTIME_FILE.removesuffix(".py")
ADVISORY = (
    "the kernel runs unchanged through triton_on_torch (shipped beside it): a Python loop "
    "over its program ids on the device, slow but correct; a PyTorch version of the call "
    "site (or Pallas on tpu, NKI on neuron) is the fast port"
)
# On a target that may have Triton, it compiles the kernels where it is installed.
ADVISORY_OFF_TRITON = "where Triton is not installed (no CUDA or ROCm GPU), " + ADVISORY


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


def imports_runtime(module: cst.Module) -> bool:
    """Whether the file imports triton_on_torch already (a port of it, migrated again)."""
    found: list[bool] = []

    class Imports(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> None:
            found.extend(code_of(a.name).split(".")[0] == MODULE for a in node.names)

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            first = code_of(node.module).split(".")[0] if node.module is not None else ""
            names = [] if isinstance(node.names, cst.ImportStar) else node.names
            found.append(first == MODULE or any(code_of(a.name) == MODULE for a in names))

    module.visit(Imports())
    return any(found)


def runtime_node(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    """The follow-up's rewrite of ``node``: a Triton import as the runtime's. On a target
    that may have Triton (``accelerator``), each run of lines that only import Triton
    becomes one ``try:`` them ``except ImportError:`` the runtime's, so Triton still
    compiles the kernels where it is installed. None for any other node."""
    if not ctx.profile.may_have_triton:
        return runtime_import(node, ctx.in_package)
    parent = ctx.parent(original)
    if _import_line(parent) is not None:
        return None  # the whole line is guarded, below
    if _import_line(original) is None:
        return runtime_import(node, ctx.in_package)
    run = _run_of(original, parent)
    if run[0] is not original:
        return REMOVE_STATEMENT  # in the try of the run's first line
    lines = [_import_line(line, ctx.in_package) for line in run]
    runtime = [cst.SimpleStatementLine([line]) for line in lines if line is not None]
    return _triton_first([run[0].with_changes(leading_lines=()), *run[1:]], runtime, run[0])


def _import_line(node: cst.CSTNode | None, package: bool = False) -> cst.BaseSmallStatement | None:
    """The runtime's import for a line that only imports Triton; None for anything else."""
    if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1:
        return runtime_import(node.body[0], package)
    return None


def _run_of(line: cst.CSTNode, block: cst.CSTNode | None) -> list[cst.SimpleStatementLine]:
    """The consecutive lines of ``block`` that only import Triton, ``line`` among them."""
    body = list(getattr(block, "body", ()))
    at = next(i for i, stmt in enumerate(body) if stmt is line)
    start = at
    while start > 0 and _import_line(body[start - 1]) is not None:
        start -= 1
    end = at
    while end + 1 < len(body) and _import_line(body[end + 1]) is not None:
        end += 1
    return body[start : end + 1]


def _triton_first(
    lines: list[cst.SimpleStatementLine],
    runtime: list[cst.SimpleStatementLine],
    first: cst.SimpleStatementLine,
) -> cst.Try:
    """``try: <lines> except ImportError: <runtime>``, where ``first`` stood."""
    comment = cst.Comment("# no Triton here: the kernels run on triton_on_torch")
    handler = cst.ExceptHandler(
        body=cst.IndentedBlock(
            runtime, header=cst.TrailingWhitespace(cst.SimpleWhitespace("  "), comment)
        ),
        type=cst.Name("ImportError"),
        whitespace_after_except=cst.SimpleWhitespace(" "),
    )
    return cst.Try(cst.IndentedBlock(lines), [handler], leading_lines=first.leading_lines)


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
