"""The differential check: a port's kernel call sites against the original's kernels.

Matching losses say a port trains like the original; they do not say that the function
replacing a kernel computes what the kernel did (a wrong ``eps`` moves the losses by less
than the tolerance on some programs; a backward missing a term matches at step one). So
for every kernel call site (``tools.kernel_sites``) whose file the migration changed, the
verifier calls the site itself, in both programs, on the inputs the program gives it:

1. The original's reference run records the arguments of each site's first distinct calls
   (``sandbox.site_calls``: shapes, dtypes, ``requires_grad``, value statistics).
2. From those, seeded random inputs are drawn here (a tensor from N(mean, std) of the
   recorded one; integers within its range), saved once into this check's scratch folder
   and copied into two program trees.
3. ``sandbox.site_check`` runs in the sandbox twice: in the original's tree on the reference
   shim (its kernels through Triton's interpreter, or the CUDA kernel runner, whatever the
   reference run uses) and in the port's tree on the emulated device. Each reports the
   site's outputs, its tensor arguments after the call, and the gradients of a fixed random
   projection of the outputs with respect to the arguments that require grad.
4. ``compare`` holds each port tensor against the original's under the tolerance policy
   (fp32 unless the kernel computes in bfloat16/float16). A difference fails the
   verification with a reason that names the site, the input shapes and the worst one.

Nothing here runs the program's code outside the sandbox: this module only draws random
tensors and compares two JSON reports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from torchport.sandbox.isolation import owner
from torchport.sandbox.safepath import read_text_regular
from torchport.tools.kernel_sites import (
    MENTIONS,
    KernelSite,
    definition_line,
    kernel_sites,
    parameters,
    source_reader,
)

from .kernel_records import (
    CaseResult,
    DescribedCase,
    DrawnArg,
    KernelCheckRecord,
    RunBrief,
    SiteCase,
    SiteRow,
    TensorComparison,
)
from .run_record import FrameRecord, RunRecord
from .site_records import (
    ArgSpec,
    CaseReport,
    Signature,
    SiteCalls,
    TensorReport,
)

if TYPE_CHECKING:
    from .tolerance import Policy
from .workspace import materialize, write_over

CASES_FILE = ".torchport-site-check.pt"
DRIVER = ["python", "-m", "torchport.sandbox.site_check", CASES_FILE]
SEED = 1234
LOW_PRECISION = re.compile(r"bfloat16|float16|\bhalf\b|__half|__nv_bfloat16|tl\.bf16|fp16")
# The emulated device's counters a site's cost is told in: its ops, syncs and copies.
COSTS = ("ops", "host_syncs", "h2d_count", "h2d_bytes", "d2h_count", "d2h_bytes")
_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "torchport-report"}


class NotComparable(ValueError):
    """A recorded call cannot be repeated (an argument that is not a tensor or a value)."""


@dataclass
class KernelCheck:
    """The check's verdict and evidence (``verification.json``'s ``kernel_check``)."""

    holds: bool | None  # None: nothing was compared (then ``note`` says why)
    reason: str
    policy: str = ""
    sites: list[SiteRow] = field(default_factory=list)
    runs: dict[str, RunBrief] = field(default_factory=dict)
    note: str = ""
    frame: FrameRecord | None = None  # where the first differing site is, in the port

    def to_json(self) -> KernelCheckRecord:
        return cast(KernelCheckRecord, asdict(self))


# --- which sites ---------------------------------------------------------------------------


def discover(root: Path) -> list[KernelSite]:
    """Every kernel call site in the program's Python files."""
    sites: list[KernelSite] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _SKIP_DIRS.intersection(rel.parts) or path.is_symlink():
            continue
        try:  # a regular file (a FIFO named x.py would block the read)
            text = read_text_regular(path)
        except (OSError, UnicodeDecodeError):
            continue
        if MENTIONS.search(text):
            sites += kernel_sites(text, rel.as_posix(), source_reader(root, rel.as_posix()))
    return sites


def record_specs(sites: Iterable[KernelSite]) -> tuple[str, ...]:
    """What the reference run records: ``path:entry`` of every comparable entry."""
    return tuple(site.spec(entry) for site in sites for entry in site.comparable)


def replaced(source: Path, tree: Path, sites: Iterable[KernelSite]) -> list[KernelSite]:
    """The sites whose file the migration changed (a site it left alone still launches its
    kernel, and the program's own run on the target says what that does)."""
    out = []
    for site in sites:
        before, after = source / site.path, tree / site.path
        try:
            changed = not after.is_file() or before.read_bytes() != after.read_bytes()
        except OSError:
            changed = True
        if changed:
            out.append(site)
    return out


# --- the inputs ----------------------------------------------------------------------------


def draw(spec: ArgSpec, gen: Any) -> DrawnArg:
    """A case argument from a recorded one: a tensor drawn like the recorded tensor."""
    import torch

    kind = spec.get("kind")
    if kind == "tensor":
        dtype = getattr(torch, str(spec["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise NotComparable(f"a tensor of dtype {spec['dtype']}")
        shape = [int(n) for n in spec["shape"]]
        tensor = _tensor(shape, dtype, spec, gen)
        grad = bool(spec.get("requires_grad")) and (dtype.is_floating_point or dtype.is_complex)
        return {"kind": "tensor", "tensor": tensor, "requires_grad": grad}
    if kind in ("list", "tuple"):
        return {"kind": kind, "items": [draw(item, gen) for item in spec.get("items", [])]}
    if kind in ("value", "dtype"):
        return {"kind": kind, "value": spec.get("value")}
    raise NotComparable(f"an argument of type {spec.get('type', kind)}")


def _tensor(shape: list[int], dtype: Any, spec: ArgSpec, gen: Any) -> Any:
    import torch

    lo, hi = spec.get("min"), spec.get("max")
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if dtype.is_floating_point or dtype.is_complex:
        mean, std = _finite(spec.get("mean"), 0.0), _finite(spec.get("std"), 1.0)
        if std == 0.0:  # a constant (a weight of ones): vary it a little around its value
            std = max(abs(mean) * 0.1, 1e-3)
        real = torch.float32 if dtype != torch.float64 else torch.float64
        values = torch.randn(shape, generator=gen, dtype=real) * std + mean
        if isinstance(lo, int | float) and lo >= 0:
            values = values.abs()
        return values.to(dtype)
    low = int(lo) if isinstance(lo, int | float) and math.isfinite(lo) else 0
    high = int(hi) if isinstance(hi, int | float) and math.isfinite(hi) else low + 16
    return torch.randint(low, max(high, low) + 1, shape, generator=gen, dtype=dtype)


def _finite(value: Any, default: float) -> float:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else default


def cases(
    calls: list[SiteCalls], specs: Iterable[str]
) -> tuple[list[SiteCase], list[DescribedCase]]:
    """The cases to run (``sandbox.site_check``'s input) and, for each, what it is for the
    report: the site and its recorded signature. Seeded: the same calls give the same
    tensors. A recorded call that cannot be repeated is listed with why, not run."""
    import torch

    wanted = set(specs)
    runnable: list[SiteCase] = []
    described: list[DescribedCase] = []
    for record in calls:
        if record.get("site") not in wanted:
            continue
        for signature in record.get("signatures") or []:
            gen = torch.Generator().manual_seed(SEED + len(described))
            entry: DescribedCase = {"site": record["site"], "signature": signature}
            try:
                args = [draw(a, gen) for a in signature.get("args", [])]
                kwargs = {k: draw(v, gen) for k, v in (signature.get("kwargs") or {}).items()}
            except (NotComparable, KeyError, TypeError, ValueError, RuntimeError) as exc:
                described.append({**entry, "skipped": f"not repeatable: {exc}"})
                continue
            described.append(entry)
            runnable.append(
                {
                    "site": record["site"],
                    "module": record["module"],
                    "root": record.get("root") or ".",
                    "entry": record["site"].partition(":")[2],
                    "args": args,
                    "kwargs": kwargs,
                }
            )
    return runnable, described


# --- the runs ------------------------------------------------------------------------------


def run_site_check(root: Path, cases_file: Path, mode: str, runner: Runner) -> RunRecord:
    """``sandbox.site_check`` over ``cases_file`` in a copy of ``root``, by ``runner``."""
    with owner.temp_dir() as tmp:
        copy = materialize(root, {}, Path(tmp) / "program")
        # the copy keeps the repository's links: a committed CASES_FILE link is replaced
        write_over(copy, CASES_FILE, cases_file.read_bytes())
        return runner(copy, mode)


def _run_brief(result: RunRecord) -> RunBrief:
    return {
        "status": result.get("status"),
        "error": result.get("error"),
        "elapsed_s": result.get("elapsed_s"),
        "reference_interpreters": result.get("reference_interpreters") or [],
        "stderr_tail": (result.get("stderr_tail") or "")[-800:],
        # what the emulated device counted while the sites ran (a fallback's cost)
        "counters": _costs(result.get("counters")),
    }


def _costs(counters: object) -> dict[str, int]:
    """The emulated device's ``COSTS`` of a run (none for a run on the reference shim)."""
    if not isinstance(counters, dict):
        return {}
    return {k: int(v) for k, v in counters.items() if k in COSTS and isinstance(v, int)}


# --- the comparison ------------------------------------------------------------------------


def compare_tensor(
    label: str, ref: TensorReport, port: TensorReport, policy: Policy, same_dtype: bool = True
) -> TensorComparison:
    """One tensor of the port against the original's: ``holds``, and the worst element.
    ``same_dtype`` False: only the values count (a caller that shows both dtypes itself)."""
    out: TensorComparison = {"label": label, "holds": False}
    if ref.get("none") or port.get("none"):
        if ref.get("none") and port.get("none"):
            return {**out, "holds": True}
        side = "the port's" if port.get("none") else "the original's"
        return {**out, "why": f"is None in {side} run only"}
    if ref.get("shape") != port.get("shape"):
        return {**out, "why": f"has shape {port.get('shape')}, the original's {ref.get('shape')}"}
    if same_dtype and ref.get("dtype") != port.get("dtype"):
        return {**out, "why": f"is {port.get('dtype')}, the original's {ref.get('dtype')}"}
    a, b = port.get("values") or [], ref.get("values") or []
    if len(a) != len(b):
        return {**out, "why": f"has {len(a)} values, the original's {len(b)}"}
    worst, worst_at, worst_rel, excess = 0.0, None, 0.0, 0.0
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        x, y = float(x), float(y)
        if math.isnan(x) or math.isnan(y):
            if math.isnan(x) and math.isnan(y):
                continue
            diff, rel, over = math.inf, math.inf, math.inf
        elif x == y:
            continue
        else:
            diff = abs(x - y)
            rel = diff / abs(y) if y else math.inf
            over = diff / (policy.atol + policy.rtol * abs(y))
        if over > excess or worst_at is None:
            worst, worst_at, worst_rel, excess = diff, i, rel, max(excess, over)
    out["holds"], out["max_abs"], out["max_rel"] = excess <= 1.0, worst, worst_rel
    if worst_at is not None:
        out["index"] = _index(worst_at, ref)
    if not out["holds"]:
        out["why"] = (
            f"differs from the original's by up to {worst:.3g} (rel {worst_rel:.3g}) at "
            f"{out['index']} under the {policy.label} policy"
        )
    return out


def _index(flat: int, ref: TensorReport) -> list[int] | str:
    if ref.get("sampled"):
        return f"sampled value {flat}"
    shape, index = list(ref.get("shape") or []), []
    for size in reversed(shape):
        index.append(flat % size if size else 0)
        flat //= size if size else 1
    return list(reversed(index))


def compare_case(ref: CaseReport, port: CaseReport, policy: Policy) -> CaseResult:
    """Every output, argument after the call and gradient of one case."""
    if ref.get("error"):
        return {"holds": None, "note": f"the original raised on these inputs: {ref['error']}"}
    if ref.get("missing") or port.get("missing"):
        side = "the original" if ref.get("missing") else "the port"
        return {
            "holds": None,
            "note": f"not compared: in {side}, {ref.get('missing') or port['missing']}",
        }
    if port.get("error"):
        return {"holds": False, "worst": {"label": "the call", "why": f"raised {port['error']}"}}
    if len(ref["outputs"]) != len(port.get("outputs") or []):
        why = (
            f"returned {len(port.get('outputs') or [])} tensors, the original {len(ref['outputs'])}"
        )
        return {"holds": False, "worst": {"label": "the call", "why": why}}
    checks = [
        compare_tensor(f"output {i}", r, p, policy)
        for i, (r, p) in enumerate(zip(ref["outputs"], port["outputs"], strict=True))
    ]
    kinds: tuple[tuple[Literal["after", "grads"], str], ...] = (
        ("after", "argument {} after the call"),
        ("grads", "the gradient of {}"),
    )
    for kind, label in kinds:
        ported = {t.get("name"): t for t in port.get(kind) or []}
        for tensor in ref.get(kind) or []:
            other = ported.get(tensor.get("name"))
            name = label.format(tensor.get("name"))
            if other is None:
                checks.append(
                    {"label": name, "holds": False, "why": "is missing in the port's run"}
                )
            else:
                checks.append(compare_tensor(name, tensor, other, policy))
    failing = [c for c in checks if not c["holds"]]
    worst = max(
        failing or checks,
        key=lambda c: (not c["holds"], c.get("max_abs", math.inf)),
        default=None,
    )
    return {"holds": not failing, "worst": worst, "compared": len(checks)}


def describe_signature(signature: Signature, names: list[str]) -> str:
    """``x: float32[8, 16, 32] (requires grad), eps: 1e-06``: a recorded call, readable."""
    parts = []
    args = list(signature.get("args") or [])
    for i, arg in enumerate(args):
        name = names[i] if i < len(names) else f"argument {i}"
        parts.append(f"{name}: {_describe(arg)}")
    for name, arg in (signature.get("kwargs") or {}).items():
        parts.append(f"{name}: {_describe(arg)}")
    return ", ".join(parts)


def _describe(arg: ArgSpec) -> str:
    kind = arg.get("kind")
    if kind == "tensor":
        grad = " (requires grad)" if arg.get("requires_grad") else ""
        return f"{arg.get('dtype')}{list(arg.get('shape') or [])}{grad}"
    if kind in ("list", "tuple"):
        inner = ", ".join(_describe(a) for a in arg.get("items") or [])
        return f"[{inner}]" if kind == "list" else f"({inner})"
    if kind == "opaque":
        return f"<{arg.get('type')}>"
    return repr(arg.get("value"))


def _policy_for(
    site: KernelSite, signatures: list[Signature], policies: dict[str, Policy]
) -> Policy:
    """fp32, unless the kernel computes in bfloat16/float16 (its source, or its inputs)."""
    dtypes = " ".join(
        str(a.get("dtype"))
        for s in signatures
        for a in [*s.get("args", []), *s.get("kwargs", {}).values()]
    )
    low = LOW_PRECISION.search(site.kernel_source) or LOW_PRECISION.search(dtypes)
    return policies["bf16" if low else "fp32"]


# --- the check -----------------------------------------------------------------------------


Runner = Callable[[Path, str], RunRecord]  # (a program tree, a mode) -> its run


def check(
    source: Path,
    tree: Path,
    sites: list[KernelSite],
    reference: RunRecord,
    mode: str | tuple[str, str],
    runner: Runner,
    policies: dict[str, Policy],
    run_both: Callable[..., Any] | None = None,
) -> KernelCheck:
    """Run the original's and the port's sites on the recorded calls' inputs; compare.

    ``mode``: the port's run mode, or (the original's, the port's) when ``source`` is not
    to run on the reference shim (a verified port as the reference: the target's mode).
    ``runner(tree, mode)`` runs ``DRIVER`` in the sandbox (the verifier's ``run_program``
    with its limits); ``run_both(original, port)`` runs the two calls (together when the
    machine has room), by default one after the other."""
    import torch

    original_mode, mode = mode if isinstance(mode, tuple) else ("reference", mode)

    calls = reference.get("kernel_site_calls") or []
    specs = record_specs(sites)
    runnable, described = cases(calls, specs)
    never = [s for s in specs if s not in {c["site"] for c in calls}]
    if not runnable:
        why = "; ".join(d["skipped"] for d in described if d.get("skipped"))
        note = why or (
            f"{', '.join(never) or 'no site'}: not called in the original's run"
            if specs
            else "; ".join(s.why_not for s in sites if s.why_not) or "no comparable site"
        )
        return _nothing(note)
    with owner.temp_dir() as tmp:
        cases_file = Path(tmp) / "cases.pt"
        torch.save(runnable, cases_file)

        def original() -> RunRecord:
            return run_site_check(source, cases_file, original_mode, runner)

        def port() -> RunRecord:
            return run_site_check(tree, cases_file, mode, runner)

        ref_run, port_run = (original(), port()) if run_both is None else run_both(original, port)
    return judge_runs(source, tree, sites, described, ref_run, port_run, policies, never)


def _nothing(note: str, **evidence: Any) -> KernelCheck:
    return KernelCheck(
        None, f"the kernel call sites were not compared: {note}", note=note, **evidence
    )


def judge_runs(
    source: Path,
    tree: Path,
    sites: list[KernelSite],
    described: list[DescribedCase],
    ref_run: RunRecord,
    port_run: RunRecord,
    policies: dict[str, Policy],
    never: Iterable[str] = (),
) -> KernelCheck:
    """The check's verdict from the two driver runs (pure: tested without a sandbox)."""
    runs = {"original": _run_brief(ref_run), "port": _run_brief(port_run)}
    reports = []
    for side, result in (("original's", ref_run), ("port's", port_run)):
        got = (result.get("site_check") or {}).get("cases")
        if result.get("status") != "ok" or got is None:
            error = result.get("error") or {}
            why = f"{error.get('type')}: {error.get('message')}"
            return _nothing(f"the {side} sites could not be run: {why}", runs=runs)
        reports.append(iter(got))
    rows: dict[str, SiteRow] = {}
    policy_used, first_failure = "", None
    for item in described:
        site = next(s for s in sites if item["site"] in record_specs([s]))
        entry = item["site"].partition(":")[2]
        inputs = describe_signature(item["signature"], parameters(_text(source / site.path), entry))
        row = rows.setdefault(item["site"], {"site": item["site"], "cases": []})
        if item.get("skipped"):
            row["cases"].append({"inputs": inputs, "holds": None, "note": item["skipped"]})
            continue
        policy = _policy_for(site, [item["signature"]], policies)
        policy_used = "bf16" if "bf16" in (policy_used, policy.name) else policy.name
        case: CaseResult = {"inputs": inputs, "policy": policy.name}
        ref_case, port_case = next(reports[0]), next(reports[1])
        case.update(compare_case(ref_case, port_case, policy))
        if "seconds" in ref_case and "seconds" in port_case:
            case["seconds_original"], case["seconds_port"] = (
                ref_case["seconds"],
                port_case["seconds"],
            )
        row["cases"].append(case)
        if case["holds"] is False and first_failure is None:
            first_failure = (site, entry, case)
    return _verdict(tree, _statuses(rows, never), runs, policy_used, first_failure)


def _statuses(rows: dict[str, SiteRow], never: Iterable[str]) -> list[SiteRow]:
    """Each site's status from its cases; a site the original never called, not compared."""
    for row in rows.values():
        verdicts = [c["holds"] for c in row["cases"]]
        row["status"] = (
            "differs" if False in verdicts else "matched" if True in verdicts else "not compared"
        )
        timed = [c for c in row["cases"] if "seconds_port" in c and "seconds_original" in c]
        original = sum(c["seconds_original"] for c in timed)
        if original > 0:
            row["time_ratio"] = sum(c["seconds_port"] for c in timed) / original
    for spec in never:
        note = "not called in the original's run"
        rows[spec] = {"site": spec, "cases": [], "status": "not compared", "note": note}
    return list(rows.values())


def _verdict(
    tree: Path,
    rows: list[SiteRow],
    runs: dict[str, RunBrief],
    policy: str,
    first_failure: tuple[KernelSite, str, CaseResult] | None,
) -> KernelCheck:
    if first_failure is not None:
        site, entry, result = first_failure
        worst: TensorComparison = result.get("worst") or {}
        reason = (
            f"the differential check fails at the kernel call site {site.spec(entry)}: on "
            f"inputs ({result['inputs']}), {worst['label']} {worst['why']}"
        )
        line = definition_line(_text(tree / site.path), entry)
        frame: FrameRecord = {"file": site.path, "line": line, "function": entry, "code": None}
        return KernelCheck(False, reason, policy, rows, runs, frame=frame if line else None)
    matched = [r for r in rows if r["status"] == "matched"]
    if not matched:
        notes = "; ".join(c.get("note", "") for r in rows for c in r["cases"]) or "nothing ran"
        return _nothing(notes, policy=policy, sites=rows, runs=runs)
    compared = sum(1 for r in matched for c in r["cases"] if c["holds"])
    worst_abs = max(
        (w.get("max_abs", 0.0) for r in matched for c in r["cases"] if (w := c.get("worst"))),
        default=0.0,
    )
    reason = (
        f"the differential check matches the original's kernels at "
        f"{', '.join(r['site'] for r in matched)} on {compared} recorded input "
        f"signature{'s' if compared != 1 else ''} (outputs, arguments after the call and "
        f"gradients; max abs {worst_abs:.3g}, {policy} policy)"
    )
    return KernelCheck(True, reason, policy, rows, runs)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
