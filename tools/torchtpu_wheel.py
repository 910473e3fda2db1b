"""Derive ``sandbox/data/torch_tpu.toml`` from the torch-tpu wheel FILE, never importing it.

The wheel is the oracle of what the emulated ``tpu`` device accepts and what the ``tpu``
codemods may emit, but it cannot be imported here (it needs libtpu and a TPU). So it is
read: the zip in memory, its Python layer as syntax trees, its libraries' printable
strings and symbol names scanned in pure Python. Each fact comes from one place in the
wheel, named in the comment above it in the rendered file; a fact the wheel does not
state outright (which variables TorchTPU writes for libtpu) says what it is inferred
from. ``scripts/derive-torch-tpu-facts`` shows the difference for a newer wheel and
``tests/test_torchtpu_conformance.py`` checks that the committed file is exactly this
rendering of the cached wheel.
"""

from __future__ import annotations

import ast
import email.parser
import hashlib
import json
import re
import textwrap
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from torchport.sandbox import astparse

# The torch whose glue library the per-torch facts (autocast, readers of variables) come
# from: torchport's pinned torch (the Makefile's TORCH, torch==2.13.0+cpu).
GLUE_TORCH = "2_13_0"
GLUE = f"torch_tpu/csrc/common/glue_{GLUE_TORCH}/libpywrap_{GLUE_TORCH}_common.so"
DEVICE_OPS = f"torch_tpu/_internal/device/_device_ops_backend_{GLUE_TORCH}.so"
PRECISION_SO = f"torch_tpu/_internal/precision/precision_impl_{GLUE_TORCH}.so"
EAGER_SO = f"torch_tpu/_internal/execution_mode/execution_mode_impl_{GLUE_TORCH}.so"
WARNINGS_SO = f"torch_tpu/_internal/warnings_impl_{GLUE_TORCH}.so"

DEVICE_MODULE = "torch_tpu/_internal/device/_device_module.py"
ANNOTATIONS = "torch_tpu/_internal/utils/annotations.py"
PUBLIC_API = "torch_tpu/_internal/public_api.py"
LOADER = "torch_tpu/_loader.py"
PRECISION_PY = "torch_tpu/_internal/precision/precision.py"
EXECUTION_MODE = "torch_tpu/_internal/execution_mode/__init__.py"
DISTRIBUTED = "torch_tpu/_internal/distributed/distributed.py"
STREAMS = "torch_tpu/_internal/stream/streams.py"
HARDWARE = "torch_tpu/_internal/utils/hardware.py"

# at::autocast::CastPolicy in torch 2.13's ATen/autocast_mode.h, in enum order: the
# number in a WrapFunction_<CastPolicy N, DeviceType 20 (PrivateUse1)> symbol.
CAST_POLICIES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote")
PRIVATEUSE1 = 20

# Which glue reader is which role in [environment] (roles other parts of torchport use).
ENV_ROLES = {"visible_devices": "TpuVisibleDevices", "launch_blocking": "TorchTpuLaunchBlocking"}


# Where the wheel is cached, when set (else under TORCHPORT_HOME): see cache_dir.
CACHE_ENV = "TORCHPORT_TORCH_TPU_CACHE"

# The worker's side of the launch step is compiled (GetDistributedWorkerConfiguration in the
# glue), so two of its facts are read from a disassembly of that function, not derived; the
# derivation only checks that the wheel still agrees with them.
# WORKER_GATE: the function reads the worker configuration only when this variable parses as
# an integer (a test-and-branch before the first GetRequired*EnvOnce call). Cited, not
# checked: the symbols cannot show a branch.
WORKER_GATE = "WORLD_SIZE"
# WORKER_REQUIRES_ORDER: the order it calls GetRequired[Integer]EnvOnce<&k...EnvVar> in, which
# is the order it names the unset ones in; the symbols give the set, checked against this.
WORKER_REQUIRES_ORDER = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCH_TPU_SLICEBUILDER_ADDRESSES",
    "TORCH_TPU_TOPOLOGY",
)
# MISSING_OP_NAME: how TorchTPU's missing-op messages name the op. TpuMissingOpFallback (a
# boxed fallback taking the c10::OperatorHandle, per its symbol) formats it at run time, and
# the message's one string opens with the quote that closes it: the op is quoted before it,
# INFERRED to be printed as torch prints a c10::OperatorName ("aten::name", ".overload" when
# there is one), not readable in the strings.
MISSING_OP_NAME = "'{op}"
# The emulator's kernels for ops torch has for accelerators only: their names are read from
# this file as syntax (KERNELS's keys, aten.NAME.OVERLOAD), so deriving needs no torch.
DEVICE_ONLY_OPS_PY = Path(astparse.__file__).with_name("device_only_ops.py")

# WORKER_MISSING_JOIN: what joins the ", "-joined names to the message's second string (too
# short to be one of the library's strings).
WORKER_MISSING_JOIN = "; "


class WheelError(Exception):
    """The wheel is missing, unreadable, or no longer states a fact the way this reads it."""


@dataclass
class Wheel:
    """One wheel file, opened read-only; members are read on demand and kept."""

    path: Path
    zip: zipfile.ZipFile
    _trees: dict[str, ast.Module] = field(default_factory=dict)
    _strings: dict[str, list[str]] = field(default_factory=dict)

    def text(self, member: str) -> str:
        try:
            return self.zip.read(member).decode("utf-8")
        except KeyError:
            raise WheelError(f"{self.path.name} has no {member}") from None

    def tree(self, member: str) -> ast.Module:
        if member not in self._trees:
            self._trees[member] = astparse.parse(self.text(member), filename=member)
        return self._trees[member]

    def strings(self, member: str) -> list[str]:
        """The printable runs of 4+ characters in a binary member (what ``strings`` prints)."""
        if member not in self._strings:
            try:
                data = self.zip.read(member)
            except KeyError:
                raise WheelError(f"{self.path.name} has no {member}") from None
            self._strings[member] = [
                m.decode("ascii") for m in re.findall(rb"[\x20-\x7e]{4,}", data)
            ]
        return self._strings[member]

    def python_files(self) -> list[str]:
        return sorted(n for n in self.zip.namelist() if n.endswith(".py"))


def open_wheel(path: Path) -> Wheel:
    try:
        return Wheel(path, zipfile.ZipFile(path))
    except FileNotFoundError:
        raise WheelError(f"no wheel at {path}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise WheelError(f"{path} is not a readable wheel: {exc}") from None


# --- reading Python syntax ---------------------------------------------------------------


_Node = TypeVar("_Node", bound=ast.AST)


def _expect(node: ast.AST | None, kind: type[_Node], where: str) -> _Node:
    """``node`` as the syntax this reads it as; a WheelError when the wheel says it otherwise."""
    if not isinstance(node, kind):
        found = ast.unparse(node) if node is not None else "nothing"
        raise WheelError(f"{where}: expected {kind.__name__}, found {found}")
    return node


def _const(node: ast.AST | None, where: str) -> object:
    if node is None:
        raise WheelError(f"{where}: expected a literal, found nothing")
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise WheelError(f"{where}: expected a literal, found {ast.unparse(node)}") from None


def _kw(call: ast.AST, name: str) -> ast.expr | None:
    call = _expect(call, ast.Call, f"the {name}= keyword")
    return next((k.value for k in call.keywords if k.arg == name), None)


def _decorator_calls(node: ast.AST, name: str) -> Iterator[ast.Call]:
    for deco in getattr(node, "decorator_list", ()):
        if isinstance(deco, ast.Call):
            func = deco.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if fname == name:
                yield deco


def _decorator_names(node: ast.AST) -> set[str]:
    names = set()
    for deco in getattr(node, "decorator_list", ()):
        target = deco.func if isinstance(deco, ast.Call) else deco
        names.add(ast.unparse(target))
    return names


def _module_assignments(tree: ast.Module) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            if isinstance(stmt.targets[0], ast.Name):
                found[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
            found[stmt.target.id] = stmt.value
    return found


def _functions(tree: ast.AST) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _classes(tree: ast.AST) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _fstring(node: ast.AST | None, tree: ast.Module, env: dict[str, str] | None = None) -> str:
    """A string expression of the module evaluated: constants, module-level names,
    f-strings of them and calls of the module's one-line f-string helpers."""
    env = env or {}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        value = _module_assignments(tree).get(node.id)
        if value is not None:
            return _fstring(value, tree)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            _fstring(v.value if isinstance(v, ast.FormattedValue) else v, tree, env)
            for v in node.values
        )
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        helper = _functions(tree).get(node.func.id)
        if helper and isinstance(helper.body[-1], ast.Return):
            params = [a.arg for a in helper.args.args]
            bound = {p: _fstring(a, tree, env) for p, a in zip(params, node.args, strict=False)}
            return _fstring(helper.body[-1].value, tree, bound)
    found = ast.unparse(node) if node is not None else "nothing"
    raise WheelError(f"cannot evaluate {found} as a string")


def _template(node: ast.AST) -> str:
    """An f-string as a template: ``f"{name} is ..."`` -> ``"{name} is ..."``."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            "{" + ast.unparse(v.value) + "}"
            if isinstance(v, ast.FormattedValue)
            else str(_expect(v, ast.Constant, "an f-string's text").value)
            for v in node.values
        )
    raise WheelError(f"expected an f-string, found {ast.unparse(node)}")


# --- the facts, one section each ---------------------------------------------------------


@dataclass(frozen=True)
class Internal:
    name: str
    since: str
    prefer: str
    error_name: str


def wheel_section(wheel: Wheel) -> dict[str, str]:
    info = next(n for n in wheel.zip.namelist() if n.endswith(".dist-info/METADATA"))
    meta = email.parser.Parser().parsestr(wheel.text(info), headersonly=True)
    torch_req = next(
        (r for r in meta.get_all("Requires-Dist") or [] if re.match(r"torch\s*[<>=!~]", r)), None
    )
    if torch_req is None:
        raise WheelError(f"{info} names no torch requirement")
    return {
        "name": re.sub(r"[-_.]+", "-", meta["Name"]).lower(),
        "version": meta["Version"],
        "requires_torch": re.sub(r"^torch\s*", "", torch_req).replace(" ", ""),
        "requires_python": meta["Requires-Python"],
        "file": wheel.path.name,
        "sha256": hashlib.sha256(wheel.path.read_bytes()).hexdigest(),
    }


def _class_aliases(tree: ast.Module) -> dict[str, str]:
    """``device = _DeviceContext`` in a class body: the public name of a decorated class."""
    aliases = {}
    for cls in _classes(tree).values():
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        aliases[stmt.value.id] = target.id
    return aliases


def internal_apis(wheel: Wheel) -> list[Internal]:
    """Every ``@annotations.internal_or_experimental(internal_when=get_torch_version() >=
    (X, Y), prefer=...)`` of the device module."""
    tree = wheel.tree(DEVICE_MODULE)
    aliases = _class_aliases(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for call in _decorator_calls(node, "internal_or_experimental"):
            when = _kw(call, "internal_when")
            if not (isinstance(when, ast.Compare) and isinstance(when.ops[0], ast.GtE)):
                raise WheelError(
                    f"{DEVICE_MODULE}:{node.lineno}: internal_when is not a torch >= gate"
                )
            since = _const(when.comparators[0], DEVICE_MODULE)
            if not isinstance(since, tuple):
                raise WheelError(f"{DEVICE_MODULE}:{node.lineno}: internal_when is not (X, Y)")
            prefer = _kw(call, "prefer")
            found.append(
                Internal(
                    name=aliases.get(node.name, node.name),
                    since=".".join(str(n) for n in since),
                    prefer=str(_const(prefer, DEVICE_MODULE)) if prefer else "",
                    error_name=node.name,
                )
            )
    if not found:
        raise WheelError(f"{DEVICE_MODULE} marks no API internal_or_experimental")
    return sorted(found, key=lambda i: i.name)


def internal_error(wheel: Wheel) -> str:
    """The RuntimeError an internal API raises from user code, as a template."""
    tree = wheel.tree(ANNOTATIONS)
    wrapper = _functions(tree)["_create_warning_wrapper"]
    msg = next(
        s.body[0].value
        for s in ast.walk(wrapper)
        if isinstance(s, ast.If)
        and ast.unparse(s.test) == "raises"
        and isinstance(s.body[0], ast.Assign)
    )
    deco = _functions(tree)["internal_or_experimental"]
    reason = next(
        s.value.body
        for s in ast.walk(deco)
        if isinstance(s, ast.Assign)
        and ast.unparse(s.targets[0]) == "reason"
        and isinstance(s.value, ast.IfExp)
    )
    return f"{_template(msg)} {_template(reason)}".replace("{name}", "{error_name}")


def strict_variable(wheel: Wheel) -> str:
    """The variable that turns the internal APIs' error into a warning (``strict=``)."""
    tree = wheel.tree(DEVICE_MODULE)
    call = next(c for n in ast.walk(tree) for c in _decorator_calls(n, "internal_or_experimental"))
    strict = _kw(call, "strict")
    value = _module_assignments(tree)[strict.id] if isinstance(strict, ast.Name) else strict
    if value is None:
        raise WheelError(f"{DEVICE_MODULE}: internal_or_experimental has no strict=")
    for node in ast.walk(value):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("_env_once"):
            return str(_const(node.args[0], DEVICE_MODULE))
    raise WheelError(f"{DEVICE_MODULE}: strict= reads no environment variable")


@dataclass(frozen=True)
class PublicModule:
    module: str
    names: tuple[str, ...]
    properties: tuple[str, ...]
    targets: dict[str, str]
    main: str | None


def public_modules(wheel: Wheel) -> list[PublicModule]:
    """``_PUBLIC_MODULES`` of public_api.py: each module's exports; ``Property(...)`` ones
    are properties; ``main=`` makes ``python -m`` run it."""
    tree = wheel.tree(PUBLIC_API)
    table = _module_assignments(tree).get("_PUBLIC_MODULES")
    if not isinstance(table, ast.Dict):
        raise WheelError(f"{PUBLIC_API} has no _PUBLIC_MODULES table")
    modules = []
    for key, spec in zip(table.keys, table.values, strict=True):
        exports = _expect(_kw(spec, "exports"), ast.Dict, f"{PUBLIC_API}: exports=")
        targets, props = {}, []
        for name_node, target in zip(exports.keys, exports.values, strict=True):
            name = str(_const(name_node, PUBLIC_API))
            if isinstance(target, ast.Call) and ast.unparse(target.func) == "Property":
                props.append(name)
                target = target.args[0]
            targets[name] = _fstring(target, tree)
        main = _kw(spec, "main")
        modules.append(
            PublicModule(
                module=str(_const(key, PUBLIC_API)),
                names=tuple(sorted(targets)),
                properties=tuple(sorted(props)),
                targets=targets,
                main=_fstring(main, tree) if main else None,
            )
        )
    return modules


def experimental_values(wheel: Wheel) -> list[str]:
    """``__tt_api_stages__`` entries of the device module at Stage.EXPERIMENTAL."""
    stages = _expect(
        _module_assignments(wheel.tree(DEVICE_MODULE)).get("__tt_api_stages__"),
        ast.Dict,
        f"{DEVICE_MODULE}: __tt_api_stages__",
    )
    return sorted(
        str(_const(k, DEVICE_MODULE))
        for k, v in zip(stages.keys, stages.values, strict=True)
        if ast.unparse(_expect(_kw(v, "stage"), ast.expr, f"{DEVICE_MODULE}: stage=")).endswith(
            "Stage.EXPERIMENTAL"
        )
    )


def _member_file(member: str) -> str:
    return member.replace(".", "/") + ".py"


def _resolve(wheel: Wheel, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
    """The definition ``module.name`` stands for, following assignments and imports."""
    if depth > 8:
        return None
    candidates = [_member_file(module), _member_file(module)[:-3] + "/__init__.py"]
    member = next((c for c in candidates if c in wheel.zip.namelist()), None)
    if member is None:
        return None
    tree = wheel.tree(member)
    defs: dict[str, ast.ClassDef | ast.FunctionDef] = {**_classes(tree), **_functions(tree)}
    head, _, rest = name.partition(".")
    found = defs.get(head)
    if found is not None and not rest:
        return member, found
    if isinstance(found, ast.ClassDef):
        return _resolve_in_class(wheel, module, found, rest, depth)
    imports = _imports(tree)
    value = _module_assignments(tree).get(head)
    if value is not None and not rest:
        return _resolve_expr(wheel, module, value, imports, depth)
    if head in imports:
        return _resolve_import(wheel, *imports[head], rest, depth)
    return None


def _resolve_import(
    wheel: Wheel, module: str, name: str, rest: str, depth: int
) -> tuple[str, ast.AST] | None:
    """``from module import name`` then ``.rest``: name may be a submodule or an attribute."""
    sub = f"{module}.{name}" if name else module
    files = (_member_file(sub), _member_file(sub)[:-3] + "/__init__.py")
    if any(f in wheel.zip.namelist() for f in files):
        return _resolve(wheel, sub, rest, depth + 1) if rest else None
    return _resolve(wheel, module, ".".join(p for p in (name, rest) if p), depth + 1)


def _resolve_in_class(
    wheel: Wheel, module: str, cls: ast.ClassDef, name: str, depth: int
) -> tuple[str, ast.AST] | None:
    member = _member_file(module)
    tree = wheel.tree(member)
    chain = [cls]
    classes = _classes(tree)
    while chain:
        current = chain.pop(0)
        for stmt in current.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                return member, stmt
            if isinstance(stmt, ast.Assign) and any(ast.unparse(t) == name for t in stmt.targets):
                return _resolve_expr(wheel, module, stmt.value, _imports(tree), depth)
        chain += [
            classes[b.id] for b in current.bases if isinstance(b, ast.Name) and b.id in classes
        ]
    return None


def _resolve_expr(
    wheel: Wheel, module: str, value: ast.AST, imports: dict[str, tuple[str, str]], depth: int
) -> tuple[str, ast.AST] | None:
    if isinstance(value, ast.Name):
        return _resolve(wheel, module, value.id, depth + 1)
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        base = value.value.id
        if base in imports:
            return _resolve_import(wheel, *imports[base], value.attr, depth)
    return None


def _imports(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """Local name -> (module, attribute or "") for the module's imports."""
    found = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                found[alias.asname or alias.name] = (alias.name, "")
        elif isinstance(stmt, ast.ImportFrom) and stmt.module:
            for alias in stmt.names:
                found[alias.asname or alias.name] = (stmt.module, alias.name)
    return found


def _is_context_manager(wheel: Wheel, member: str, node: ast.AST) -> bool:
    """A ``@contextlib.contextmanager`` function, a class with ``__enter__`` (or a base
    with one), or a function that returns an instance of such a class."""
    tree = wheel.tree(member)
    classes = _classes(tree)

    def enters(cls: ast.ClassDef) -> bool:
        if any(isinstance(s, ast.FunctionDef) and s.name == "__enter__" for s in cls.body):
            return True
        return any(
            isinstance(b, ast.Name) and b.id in classes and enters(classes[b.id]) for b in cls.bases
        )

    if isinstance(node, ast.ClassDef):
        return enters(node)
    if "contextlib.contextmanager" in _decorator_names(node):
        return True
    returns = [s.value for s in ast.walk(node) if isinstance(s, ast.Return) and s.value is not None]
    return bool(returns) and all(
        isinstance(r, ast.Call)
        and isinstance(r.func, ast.Name)
        and r.func.id in classes
        and enters(classes[r.func.id])
        for r in returns
    )


def context_managers(wheel: Wheel, module: PublicModule) -> list[str]:
    found = []
    for name, target in module.targets.items():
        if name in module.properties:
            continue
        mod, _, qual = target.partition(":")
        resolved = _resolve(wheel, mod, qual)
        if resolved and _is_context_manager(wheel, *resolved):
            found.append(name)
    return sorted(found)


def eager_modes(wheel: Wheel) -> list[str]:
    """The public members of ``torch.tpu.EagerMode`` (each also a string of the pybind
    enum it wraps)."""
    enum = _classes(wheel.tree(EXECUTION_MODE))["EagerMode"]
    members = [
        t.id
        for s in enum.body
        if isinstance(s, ast.Assign)
        for t in s.targets
        if isinstance(t, ast.Name) and not t.id.startswith("_")
    ]
    _in_strings(wheel, EAGER_SO, members)
    return members


def _in_strings(wheel: Wheel, member: str, names: list[str]) -> None:
    strings = set(wheel.strings(member))
    missing = [n for n in names if n not in strings]
    if missing:
        raise WheelError(
            f"{member} does not name {missing}: the Python layer and its library disagree"
        )


def precision_members(wheel: Wheel) -> list[str]:
    """``_VALID_PRECISIONS`` of precision.py: what ``torch.tpu.precision(mode)`` accepts,
    each a member string of the pybind enum in precision_impl."""
    valid = _module_assignments(wheel.tree(PRECISION_PY)).get("_VALID_PRECISIONS")
    if not isinstance(valid, (ast.List, ast.Tuple, ast.Set)):
        raise WheelError(f"{PRECISION_PY} has no _VALID_PRECISIONS collection")
    members = [_expect(e, ast.Attribute, PRECISION_PY).attr for e in valid.elts]
    _in_strings(wheel, PRECISION_SO, members)
    return members


def float32_matmul_mapping(wheel: Wheel) -> dict[str, str]:
    """The ``match precision: case "medium": ..._set_global_precision(Precision.DEFAULT)``
    of _loader.py's replacement for torch.set_float32_matmul_precision."""
    fn = _functions(wheel.tree(LOADER)).get("_tpu_set_precision")
    match = next((s for s in ast.walk(fn) if isinstance(s, ast.Match)), None) if fn else None
    if match is None:
        raise WheelError(f"{LOADER}: no match statement in _tpu_set_precision")
    mapping = {}
    for case in match.cases:
        if isinstance(case.pattern, ast.MatchValue):
            call = _expect(_expect(case.body[0], ast.Expr, LOADER).value, ast.Call, LOADER)
            precision = _expect(call.args[0], ast.Attribute, LOADER).attr
            mapping[str(_const(case.pattern.value, LOADER))] = precision
    return mapping


def _docstring_says(wheel: Wheel, member: str, function: str, phrase: str) -> str:
    doc = " ".join((ast.get_docstring(_functions(wheel.tree(member))[function]) or "").split())
    if phrase not in doc:
        raise WheelError(f"{member}:{function}'s docstring no longer says {phrase!r}")
    return phrase


def backends(wheel: Wheel) -> list[tuple[str, list[str]]]:
    """``torch.distributed.Backend.register_backend(name, ..., devices=[...])`` in _loader.py."""
    found = []
    for node in ast.walk(wheel.tree(LOADER)):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("register_backend"):
            devices = _const(_kw(node, "devices"), LOADER)
            if not isinstance(devices, (list, tuple)):
                raise WheelError(f"{LOADER}: register_backend's devices= is not a list")
            found.append((str(_const(node.args[0], LOADER)), [str(d) for d in devices]))
    if not found:
        raise WheelError(f"{LOADER} registers no distributed backend")
    return found


def launch_sets(wheel: Wheel) -> tuple[list[str], list[str]]:
    """The variables ``set_tpu_launch_env`` sets (``env_utils.get_and_set_str_env_once``),
    on one host and on several: the ``if is_multihost:`` branch and its ``else``."""
    fn = _functions(wheel.tree(DISTRIBUTED))["set_tpu_launch_env"]

    def sets(nodes: list[ast.stmt]) -> set[str]:
        return {
            str(_const(n.args[0], DISTRIBUTED))
            for s in nodes
            for n in ast.walk(s)
            if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("get_and_set_str_env_once")
        }

    branch = next(
        s for s in fn.body if isinstance(s, ast.If) and ast.unparse(s.test) == "is_multihost"
    )
    common = sets([s for s in fn.body if s is not branch])
    return sorted(common | sets(branch.orelse)), sorted(common | sets(branch.body))


def fork_error(wheel: Wheel) -> str:
    fn = _functions(wheel.tree(DEVICE_MODULE))["_lazy_init"]
    raised = next(s.exc for s in ast.walk(fn) if isinstance(s, ast.Raise))
    return str(_const(_expect(raised, ast.Call, DEVICE_MODULE).args[0], DEVICE_MODULE))


def internal_warning_prefix(wheel: Wheel) -> str:
    """The prefix of an internal API's warning: annotations.py's ``Stage.INTERNAL`` warns in
    ``warnings.X_Y`` (WarningCategory), whose prefix ``<TorchTpu/.../XY/> `` is a string of
    warnings_impl (the categories are C++; warnings.py documents the format)."""
    stage = _classes(wheel.tree(ANNOTATIONS))["Stage"]
    category = next(
        (
            s.body[0].value
            for s in ast.walk(_functions(stage)["warning_category"])
            if isinstance(s, ast.If)
            and ast.unparse(s.test) == "self == Stage.INTERNAL"
            and isinstance(s.body[0], ast.Return)
        ),
        None,
    )
    if not isinstance(category, ast.Attribute):
        raise WheelError(f"{ANNOTATIONS}: Stage.INTERNAL names no warning category")
    camel = "".join(part.capitalize() for part in category.attr.split("_"))
    found = [
        s for s in wheel.strings(WARNINGS_SO) if re.fullmatch(rf"<TorchTpu/(\w+/)*{camel}/> ", s)
    ]
    if len(found) != 1:
        raise WheelError(f"{WARNINGS_SO} has {len(found)} prefixes of {category.attr}: {found}")
    return found[0]


def worker_requires(wheel: Wheel) -> list[str]:
    """The variables the worker's configuration requires, in WORKER_REQUIRES_ORDER: the
    glue's ``GetRequired[Integer]EnvOnce<..., &k...EnvVar>`` symbols give the set."""
    blob = "\n".join(s for s in wheel.strings(GLUE) if s.startswith("_Z"))
    read = re.findall(
        r"GetRequired(?:Integer)?EnvOnceI\w*?XadsoKcL_ZNS_\d+k([A-Z]\w*?)EnvVar", blob
    )
    found = {_env_name(c) for c in read}
    if found != set(WORKER_REQUIRES_ORDER):
        raise WheelError(
            f"{GLUE} reads {sorted(found)} through GetRequired[Integer]EnvOnce, not the recorded"
            f" {sorted(WORKER_REQUIRES_ORDER)}: disassemble GetDistributedWorkerConfiguration"
            " again for the order it checks them in (WORKER_REQUIRES_ORDER)"
        )
    return list(WORKER_REQUIRES_ORDER)


def worker_missing_error(wheel: Wheel) -> str:
    """The RuntimeError naming the unset ones: the glue's two strings around ``{missing}``."""
    strings = wheel.strings(GLUE)
    head = [s for s in strings if s.startswith("missing required environment variables for ")]
    tail = [s for s in strings if s.startswith("please run the program via torchrun")]
    if len(head) != 1 or len(tail) != 1:
        raise WheelError(f"{GLUE} no longer states the missing-variables error in two strings")
    return f"{head[0]}{{missing}}{WORKER_MISSING_JOIN}{tail[0]}"


def launch_single_host_address(wheel: Wheel) -> str:
    """One rank's address on one host: the f-string of set_tpu_launch_env's
    pick_slicebuilder_addresses, its unused-port call as ``{port}``."""
    fn = _functions(wheel.tree(DISTRIBUTED)).get("pick_slicebuilder_addresses")
    fstrings = [n for n in ast.walk(fn) if isinstance(n, ast.JoinedStr)] if fn else []
    if len(fstrings) != 1:
        raise WheelError(f"{DISTRIBUTED}: pick_slicebuilder_addresses builds no one f-string")
    parts = []
    for value in fstrings[0].values:
        if not isinstance(value, ast.FormattedValue):
            parts.append(str(_expect(value, ast.Constant, DISTRIBUTED).value))
        elif ast.unparse(value.value).endswith("pick_unused_port()"):
            parts.append("{port}")
        else:
            raise WheelError(f"{DISTRIBUTED}: the address formats {ast.unparse(value.value)}")
    return "".join(parts)


def launch_prints(wheel: Wheel) -> tuple[list[str], list[str]]:
    """(the variables ``python -m`` of the launch module always prints, in order; those it
    prints where set): the print calls of distributed.py's _print_launch_env, ``NAME=...``
    directly in its body, then a loop over a tuple of names."""
    fn = _functions(wheel.tree(DISTRIBUTED)).get("_print_launch_env")
    if fn is None:
        raise WheelError(f"{DISTRIBUTED} has no _print_launch_env")

    def printed(stmt: ast.stmt) -> str | None:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "print" and call.args:
            text = _template(call.args[0])
            return text.split("=", 1)[0] if "=" in text else None
        return None

    always = [name for s in fn.body if (name := printed(s))]
    where_set = [
        str(_const(e, DISTRIBUTED))
        for s in fn.body
        if isinstance(s, ast.For)
        and isinstance(s.iter, ast.Tuple)
        and any(printed(n) for n in ast.walk(s) if isinstance(n, ast.Expr))
        for e in s.iter.elts
    ]
    if not always:
        raise WheelError(f"{DISTRIBUTED}: _print_launch_env prints no variable")
    return always, where_set


def _immutable_dict(node: ast.AST, tree: ast.Module) -> dict:
    """``immutabledict.immutabledict({...})`` of hardware.py: its literal, a module-level name
    standing for its value."""
    if isinstance(node, ast.Name):
        node = _module_assignments(tree).get(node.id, node)
    if (
        isinstance(node, ast.Call)
        and ast.unparse(node.func).endswith("immutabledict")
        and node.args
    ):
        node = node.args[0]
    if not isinstance(node, ast.Dict):
        raise WheelError(
            f"{HARDWARE}: expected an immutabledict literal, found {ast.unparse(node)}"
        )
    return {
        _const(k, HARDWARE): _immutable_dict(v, tree)
        if isinstance(v, (ast.Name, ast.Call))
        else _const(v, HARDWARE)
        for k, v in zip(node.keys, node.values, strict=True)
    }


def topology(wheel: Wheel) -> tuple[str, dict[str, dict[int, str]]]:
    """(get_tpu_topology's error for a count with no topology, as a template; generation name
    -> chip count -> TORCH_TPU_TOPOLOGY): hardware.py's _TOPOLOGY_BY_TPU_PCI_DEVICE_ID, its PCI
    device ids named by _PCI_DEVICE_ID_TO_NAME."""
    tree = wheel.tree(HARDWARE)
    tables = _module_assignments(tree)
    if "_TOPOLOGY_BY_TPU_PCI_DEVICE_ID" not in tables or "_PCI_DEVICE_ID_TO_NAME" not in tables:
        raise WheelError(
            f"{HARDWARE} has no _TOPOLOGY_BY_TPU_PCI_DEVICE_ID or _PCI_DEVICE_ID_TO_NAME"
        )
    by_id = _immutable_dict(tables["_TOPOLOGY_BY_TPU_PCI_DEVICE_ID"], tree)
    names = _immutable_dict(tables["_PCI_DEVICE_ID_TO_NAME"], tree)
    unnamed = [i for i in by_id if i not in names]
    if unnamed:
        raise WheelError(f"{HARDWARE}: _PCI_DEVICE_ID_TO_NAME does not name {unnamed}")
    fn = _functions(tree).get("get_tpu_topology")
    raised = next((s.exc for s in ast.walk(fn) if isinstance(s, ast.Raise)), None) if fn else None
    if not (isinstance(raised, ast.Call) and raised.args):
        raise WheelError(f"{HARDWARE}: get_tpu_topology raises no error")
    values = raised.args[0].values if isinstance(raised.args[0], ast.JoinedStr) else []
    counts = [v for v in values if isinstance(v, ast.FormattedValue)]
    if len(counts) != 1:
        raise WheelError(f"{HARDWARE}: get_tpu_topology's error does not name one count")
    error = _template(raised.args[0]).replace("{" + ast.unparse(counts[0].value) + "}", "{count}")
    return error, {names[i]: table for i, table in by_id.items()}


def python_reads(wheel: Wheel) -> dict[str, set[str]]:
    """Variable -> files of the Python layer that read it: ``env.get_*_env_once("X")``,
    ``get_and_set_str_env_once("X", ...)``, ``os.environ.get("X")``, ``os.getenv("X")``,
    ``os.environ["X"]`` (a name bound to a string at module level counts as its string)."""
    reads: dict[str, set[str]] = {}
    for member in wheel.python_files():
        tree = wheel.tree(member)
        for node in ast.walk(tree):
            arg = None
            if isinstance(node, ast.Call) and node.args:
                func = ast.unparse(node.func)
                if func.endswith("_env_once") or func in ("os.environ.get", "os.getenv"):
                    arg = node.args[0]
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and ast.unparse(node.value) == "os.environ"
            ):
                arg = node.slice
            if arg is None:
                continue
            values = arg.elts if isinstance(arg, ast.Tuple) else [arg]
            for value in values:
                try:
                    name = _fstring(value, tree)
                except WheelError:
                    continue
                if re.fullmatch(r"[A-Z][A-Z0-9_]+", name):
                    reads.setdefault(name, set()).add(member)
    return reads


def _env_name(constant: str) -> str:
    """``TorchTpuLaunchBlocking`` (of ``k...EnvVar``) -> ``TORCH_TPU_LAUNCH_BLOCKING``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", constant).upper()


def glue_variables(wheel: Wheel) -> tuple[dict[str, str], set[str]]:
    """(constant -> variable for every ``k...EnvVar`` of the glue, the constants read
    through its ``Get*EnvOnce<&k...EnvVar>`` readers). Each variable's name must also be
    one of the library's strings."""
    strings = wheel.strings(GLUE)
    blob = "\n".join(s for s in strings if s.startswith("_Z"))
    constants = {c: _env_name(c) for c in set(re.findall(r"k([A-Z][A-Za-z0-9]*)EnvVar", blob))}
    read = set(re.findall(r"Get[A-Za-z]*EnvOnceIXadsoKcL_ZNS_\d+k([A-Z][A-Za-z0-9]*)EnvVar", blob))
    _in_strings(wheel, GLUE, sorted(constants.values()))
    return constants, read


def autocast_policy(wheel: Wheel) -> dict[str, list[str]]:
    """CastPolicy -> the at::_ops structs TorchTPU wraps for AutocastPrivateUse1:
    ``at::autocast::WrapFunction_<CastPolicy N, DeviceType 20, ..., &at::_ops::OP::call>``."""
    pattern = re.compile(
        rf"WrapFunction_ILNS0_10CastPolicyE(\d+)ELN3c1010DeviceTypeE{PRIVATEUSE1}E.*?XadL_ZNS_4_ops(\d+)"
    )
    policy: dict[str, set[str]] = {p: set() for p in CAST_POLICIES}
    for s in wheel.strings(GLUE):
        for m in pattern.finditer(s):
            length = int(m.group(2))
            policy[CAST_POLICIES[int(m.group(1))]].add(s[m.end() : m.end() + length])
    if not any(policy.values()):
        raise WheelError(f"{GLUE} wraps no op for AutocastPrivateUse1")
    return {p: sorted(ops) for p, ops in policy.items()}


def device_only_op_names(source: Path = DEVICE_ONLY_OPS_PY) -> list[str]:
    """The ops of ``device_only_ops.KERNELS`` as ``name`` (the default overload) or
    ``name.overload``, from the keys ``aten.NAME.OVERLOAD`` of its dict literal."""
    tree = astparse.parse(source.read_text(encoding="utf-8"), filename=str(source))
    table = _module_assignments(tree).get("KERNELS")
    if not isinstance(table, ast.Dict):
        raise WheelError(f"{source.name} has no KERNELS dict literal")
    names = []
    for key in table.keys:
        parts = ast.unparse(key).split(".") if key is not None else []
        if len(parts) != 3 or parts[0] != "aten":
            raise WheelError(f"{source.name}: KERNELS key is not aten.NAME.OVERLOAD")
        names.append(parts[1] if parts[2] == "default" else f"{parts[1]}.{parts[2]}")
    return sorted(names)


def glue_op_names(wheel: Wheel) -> set[str]:
    """Every op name the glue library states: its registration strings (``name``,
    ``name.overload``), its ``aten::name[.overload]`` strings, and the at::_ops struct names
    of its symbols (``_ZN2at4_ops<len>name_overload``) in both spellings' struct form."""
    names: set[str] = set()
    for s in wheel.strings(GLUE):
        if re.fullmatch(r"(aten::)?[A-Za-z_]\w*(\.\w+)?", s):
            names.add(s.removeprefix("aten::"))
        for m in re.finditer(r"_ZN2at4_ops(\d+)", s):
            names.add(s[m.end() : m.end() + int(m.group(1))])
    return names


def op_registered(name: str, glue_names: set[str]) -> bool:
    """An op counts as registered when the glue names it (as a string or an at::_ops
    struct: ``name.overload`` is the struct ``name_overload``)."""
    return name in glue_names or name.replace(".", "_") in glue_names


def missing_op_messages(wheel: Wheel) -> tuple[str, str]:
    """(the error of an op TorchTPU has no kernel for, the warning when its CPU fallback is
    enabled): each the glue's one string after the quoted op (MISSING_OP_NAME)."""
    strings = wheel.strings(GLUE)
    if "TpuMissingOpFallback" not in strings:
        raise WheelError(f"{GLUE} no longer names TpuMissingOpFallback")
    found = []
    for tail in ("Please file a feature request", "Falling back to CPU"):
        texts = [s for s in strings if s == f"' is not implemented for TPU. {tail}"]
        if len(texts) != 1:
            raise WheelError(f"{GLUE} no longer states the missing-op message ending {tail!r}")
        found.append(MISSING_OP_NAME + texts[0])
    return found[0], found[1]


def event_requirements(wheel: Wheel) -> list[str]:
    return [s for s in wheel.strings(DEVICE_OPS) if re.fullmatch(r"Both events must be .*\.", s)]


def sdpa_statements(wheel: Wheel) -> tuple[list[str], list[str], list[str], list[str]]:
    """(backends TorchTPU states conditions for, the condition lines, the fallback error,
    the argument lists of kernels whose cache key marks dropout_p unused)."""
    strings = wheel.strings(GLUE)
    heads = [
        m.group(1)
        for s in strings
        if (
            m := re.fullmatch(
                r"TorchTPU only supports (.+?) SDPBackend.* when these conditions are met:", s
            )
        )
    ]
    conditions = sorted(
        {re.sub(r" \((current|query): ?$", "", s[2:]) for s in strings if s.startswith("- ")}
    )
    fallback = [s for s in strings if s.startswith("no viable SDPBackend found")]
    unused = sorted({s for s in strings if 'IgnoreInCacheKey(dropout_p, "Unused")' in s})
    return heads, conditions, fallback, unused


# --- rendering ------------------------------------------------------------------------------


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def _long_list(key: str, values: list) -> list[str]:
    if not values:
        return [f"{key} = []"]
    return [f"{key} = [", *(f"    {_value(v)}," for v in values), "]"]


def _comment(text: str) -> list[str]:
    return [
        "# " + line
        for line in textwrap.wrap(text, 92, break_on_hyphens=False, break_long_words=False)
    ]


HEADER = (
    "What the torch-tpu wheel says about TorchTPU, derived from the wheel FILE by"
    " tools/torchtpu_wheel.py (its Python layer read as syntax, its libraries' strings and"
    " symbols): the authority the emulator, the rule catalogue's tpu fixes and the codemods are"
    " checked against (tests/test_torchtpu_conformance.py). Do not edit by hand; for a newer"
    " wheel: scripts/derive-torch-tpu-facts --wheel PATH (prints the difference), then --write."
)


def _wheel_lines(wheel: Wheel) -> list[str]:
    return [
        *_comment(
            "The wheel (its METADATA); make test's set-up fetches this file and checks its"
            " sha256 (scripts/fetch-torch-tpu)."
        ),
        "[wheel]",
        *(f"{k} = {_value(v)}" for k, v in wheel_section(wheel).items()),
    ]


def _internal_lines(wheel: Wheel) -> list[str]:
    out = _comment(
        "torch.tpu.<name> raises RuntimeError from user code on torch >= since_torch, naming"
        f" prefer ({DEVICE_MODULE}, @annotations.internal_or_experimental); error_name is the"
        " decorated definition's own name, the {error_name} of [device_module].internal_error."
    )
    for api in internal_apis(wheel):
        out += ["[[internal]]", f"name = {_value(api.name)}", f"since_torch = {_value(api.since)}"]
        out += [f"prefer = {_value(api.prefer)}", f"error_name = {_value(api.error_name)}", ""]
    return out[:-1]


def _public_lines(wheel: Wheel) -> list[str]:
    out = _comment(
        f"The public modules and their names ({PUBLIC_API}, _PUBLIC_MODULES; the internal names"
        " above are listed there too, for torch to find); properties are set by assignment"
        " (torch.tpu.eager_mode = ...), not called; runs_as_module: `python -m MODULE` runs it."
    )
    for m in public_modules(wheel):
        out += ["[[public]]", f"module = {_value(m.module)}", f"names = {_value(list(m.names))}"]
        out += [f"properties = {_value(list(m.properties))}"]
        out += [f"runs_as_module = {_value(m.main is not None)}", ""]
    return out[:-1]


def _device_module_lines(wheel: Wheel) -> list[str]:
    tpu = next(m for m in public_modules(wheel) if m.module == "torch.tpu")
    return [
        "[device_module]",
        *_comment(
            "Stage EXPERIMENTAL names (warn, work): torch.tpu.<name> in the __tt_api_stages__ of"
            f" {DEVICE_MODULE}."
        ),
        f"experimental_values = {_value(experimental_values(wheel))}",
        *_comment(
            "Context managers (@contextlib.contextmanager, a class with __enter__, or a"
            " function returning one), not setters."
        ),
        f"context_managers = {_value(context_managers(wheel, tpu))}",
        *_comment(f"The RuntimeError of an internal API ({ANNOTATIONS}, _create_warning_wrapper)."),
        f"internal_error = {_value(internal_error(wheel))}",
        *_comment(
            "The prefix of an internal API's one-time warning"
            f" ({strict_variable(wheel)}=1): WarningCategory.INTERNAL_API's, from the strings of"
            " warnings_impl_<torch>.so."
        ),
        f"internal_warning_prefix = {_value(internal_warning_prefix(wheel))}",
        "",
        "[eager_mode]",
        *_comment(
            f"torch.tpu.EagerMode's public members ({EXECUTION_MODE}); each wraps the pybind"
            f" enum member of the same name in {EAGER_SO.rsplit('/', 1)[1]}."
        ),
        f"members = {_value(eager_modes(wheel))}",
    ]


def _precision_lines(wheel: Wheel) -> list[str]:
    native = "float32 matrix multiplications are natively executed in bfloat16"
    override = "This setting overrides `torch.set_float32_matmul_precision`"
    return [
        "[precision]",
        *_comment(
            f"torch.tpu.Precision: what torch.tpu.precision(mode) accepts ({PRECISION_PY},"
            " _VALID_PRECISIONS), each a member of the pybind enum of mlir::stablehlo::Precision"
            f" in {PRECISION_SO.rsplit('/', 1)[1]}."
        ),
        f"members = {_value(precision_members(wheel))}",
        *_comment(
            f"TorchTPU replaces torch.set_float32_matmul_precision ({LOADER}, the match statement"
            " of _tpu_set_precision): each torch setting is one global Precision."
        ),
        f"float32_matmul_precision = {_value(float32_matmul_mapping(wheel))}",
        *_comment(
            "The global precision before any setting: the docstring of precision.precision says"
            f' "{_docstring_says(wheel, PRECISION_PY, "precision", native)}", which is'
            " Precision.DEFAULT (one bf16 pass)."
        ),
        'initial = "DEFAULT"',
        *_comment(
            "torch.tpu.precision(mode) pushes mode for the block; its docstring:"
            f' "{_docstring_says(wheel, PRECISION_PY, "precision", override)}".'
        ),
        "context_overrides_global = true",
    ]


def _distributed_lines(wheel: Wheel) -> list[str]:
    launcher = next(
        m for m in public_modules(wheel) if m.main == DISTRIBUTED[:-3].replace("/", ".")
    )
    launch = next(n for n, t in launcher.targets.items() if t.endswith(":set_tpu_launch_env"))
    single, multi = launch_sets(wheel)
    registered = backends(wheel)
    prints, where_set = launch_prints(wheel)
    return [
        "[distributed]",
        *_comment(f"torch.distributed.Backend.register_backend(name, ..., devices) in {LOADER}."),
        f"backends = {_value([name for name, _ in registered])}",
        f"backend_devices = {_value(sorted({d for _, devs in registered for d in devs}))}",
        *_comment(
            "The parent's launch step, before workers start: the function, or `python -m` of the"
            f" module whose main is {DISTRIBUTED} (it prints the variables for a shell); the"
            " variables it sets (get_and_set_str_env_once) on one host and on several."
        ),
        f"launch_function = {_value(launcher.module + '.' + launch)}",
        f"launch_module = {_value(launcher.module)}",
        f"launch_sets_single_host = {_value(single)}",
        f"launch_sets_multi_host = {_value(multi)}",
        *_comment(f"A forked child that touches the device ({DEVICE_MODULE}, _lazy_init)."),
        f"fork_error = {_value(fork_error(wheel))}",
        *_comment(
            f"The worker's side of the launch step ({GLUE.rsplit('/', 1)[1]}): a tpu process whose"
            " worker_gate variable is an integer reads its distributed worker configuration when"
            " the device initialises (PjrtBackend::InitializeInternal calls"
            " GetDistributedWorkerConfiguration), i.e. at its first use. Each of worker_requires"
            " is read through GetRequired[Integer]EnvOnce (their symbols); the unset ones are"
            ' named, ", "-joined in this order (the order the function checks them, from its'
            " disassembly), in worker_missing_error, a RuntimeError at that first use."
        ),
        f"worker_gate = {_value(WORKER_GATE)}",
        f"worker_requires = {_value(worker_requires(wheel))}",
        f"worker_missing_error = {_value(worker_missing_error(wheel))}",
        *_comment(
            "set_tpu_launch_env on one host (distributed.py): one address per rank on this host,"
            f" each an unused port (portpicker); `python -m {launcher.module}` prints these"
            " assignments, in order (_print_launch_env; WORLD_SIZE unquoted, then"
            f" {', '.join(where_set)} where set)."
        ),
        f"launch_single_host_address = {_value(launch_single_host_address(wheel))}",
        f"launch_prints = {_value(prints)}",
        f"launch_prints_where_set = {_value(where_set)}",
    ]


def _topology_lines(wheel: Wheel) -> list[str]:
    error, generations = topology(wheel)
    return [
        "[topology]",
        *_comment(
            f"TORCH_TPU_TOPOLOGY by chip count, per TPU generation ({HARDWARE},"
            " _TOPOLOGY_BY_TPU_PCI_DEVICE_ID): get_tpu_topology(count) on one host; a count the"
            " generation's table lacks is a RuntimeError, no_topology_error."
        ),
        f"no_topology_error = {_value(error)}",
        "",
        "[topology.generations]",
        *(f"{_value(name)} = {_value(table)}" for name, table in generations.items()),
    ]


def _environment_lines(wheel: Wheel) -> list[str]:
    constants, read = glue_variables(wheel)
    reads = python_reads(wheel)
    for constant in read:
        reads.setdefault(constants[constant], set()).add(GLUE)
    written = sorted(v for c, v in constants.items() if c not in read)
    return [
        "[environment]",
        *_comment(f"Read by the glue library through its Get*EnvOnce readers ({GLUE})."),
        *(f"{role} = {_value(_env_name(c))}" for role, c in ENV_ROLES.items()),
        *_comment(f"Read by {DEVICE_MODULE}: set to 1, internal APIs warn instead of raising."),
        f"allow_legacy_device_apis = {_value(strict_variable(wheel))}",
        *_comment(
            "Written for each process by TorchTPU, for libtpu: a program that sets them fights"
            " the runtime. INFERRED, not shown: the glue names each as a k...EnvVar constant but"
            " never reads it through its Get*EnvOnce readers, it imports setenv, and"
            " env_utils.py says the C++ SetEnv() calls setenv(); the code that writes them is"
            " compiled and not readable here."
        ),
        f"written_by_torchtpu = {_value(written)}",
        *_comment(
            "Every variable TorchTPU reads, with the files that read it (the Python layer's"
            " env.get_*_env_once and os.environ reads, the glue's Get*EnvOnce readers)."
        ),
        "read = [",
        *(f"    {_value({'name': n, 'files': sorted(reads[n])})}," for n in sorted(reads)),
        "]",
    ]


def _stream_and_sdpa_lines(wheel: Wheel) -> list[str]:
    heads, conditions, fallback, unused = sdpa_statements(wheel)
    return [
        "[stream]",
        *_comment(
            "Event.elapsed_time's refusals: both events need enable_timing=True, record() and"
            f" completion ({DEVICE_OPS}; {STREAMS} says the same)."
        ),
        *_long_list("elapsed_time_errors", event_requirements(wheel)),
        "",
        "[sdpa]",
        *_comment(
            f"scaled_dot_product_attention's backends (strings of {GLUE}). The library's strings"
            " are pooled, so which backend each condition line belongs to is not readable here."
        ),
        f"backends_with_conditions = {_value(heads)}",
        *_long_list("conditions", conditions),
        f"no_backend_error = {_value(fallback[0] if fallback else '')}",
        *_comment('Argument lists of SDPA kernels whose cache key marks dropout_p "Unused".'),
        *_long_list("kernels_ignoring_dropout", unused),
    ]


def _autocast_lines(wheel: Wheel) -> list[str]:
    policy = autocast_policy(wheel)
    out = [
        "[autocast]",
        *_comment(
            "torch's CastPolicy of each op TorchTPU registers for AutocastPrivateUse1 (at::_ops"
            " struct names: name_overload), read from the WrapFunction_ symbols of"
            f" {GLUE.rsplit('/', 1)[1]}; a policy with no op is listed empty."
        ),
        f"torch = {_value(GLUE_TORCH.replace('_', '.').removesuffix('.0'))}",
    ]
    for name in CAST_POLICIES:
        out += _long_list(name, policy[name])
    return out


def _device_only_ops_lines(wheel: Wheel) -> list[str]:
    glue_names = glue_op_names(wheel)
    ops = device_only_op_names()
    error, warning = missing_op_messages(wheel)
    return [
        "[device_only_ops]",
        *_comment(
            "The ops torch implements for accelerators only that the emulator brings kernels"
            " for (sandbox/device_only_ops.py, KERNELS: SyncBatchNorm's with world_size > 1):"
            f" registered when {GLUE.rsplit('/', 1)[1]} names the op (a registration string"
            " name[.overload], an aten:: string or an at::_ops symbol), absent when it does"
            " not; TorchTPU has no kernel for an absent op, so its missing-op fallback"
            " (TpuMissingOpFallback) raises missing_op_error."
        ),
        *_long_list("registered", [o for o in ops if op_registered(o, glue_names)]),
        *_long_list("absent", [o for o in ops if not op_registered(o, glue_names)]),
        *_comment(
            f"The fallback's messages (strings of {GLUE.rsplit('/', 1)[1]}); {{op}} is the"
            ' operator as torch prints it, "aten::batch_norm_stats" (INFERRED: formatted at'
            " run time). With its CPU fallback enabled (enable_cpu_fallback of"
            f" {EXECUTION_MODE}, not a public API), TorchTPU warns cpu_fallback_warning and"
            " runs the op's CPU kernel instead (cpu_fallback symbols), which these ops lack"
            " as well."
        ),
        f"missing_op_error = {_value(error)}",
        f"cpu_fallback_warning = {_value(warning)}",
    ]


# The file's sections, in order: each renders its facts with the comment saying where from.
SECTIONS = (
    _wheel_lines,
    _internal_lines,
    _public_lines,
    _device_module_lines,
    _precision_lines,
    _distributed_lines,
    _topology_lines,
    _environment_lines,
    _stream_and_sdpa_lines,
    _autocast_lines,
    _device_only_ops_lines,
)


def render(wheel: Wheel) -> str:
    """The complete text of sandbox/data/torch_tpu.toml for ``wheel``."""
    blocks = [_comment(HEADER), *(section(wheel) for section in SECTIONS)]
    return "\n\n".join("\n".join(block) for block in blocks) + "\n"


def cache_dir() -> Path:
    """Where ``make test``'s set-up keeps the wheel: ``$TORCHPORT_TORCH_TPU_CACHE`` (CACHE_ENV;
    the tests keep the real cache there while TORCHPORT_HOME points at a temporary folder),
    else ``$TORCHPORT_HOME/torch-tpu``, else ``~/.cache/torchport/torch-tpu`` (as the native
    emulator and the model parts)."""
    import os

    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    home = os.environ.get("TORCHPORT_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".cache" / "torchport") / "torch-tpu"


def cached_wheel() -> Path:
    """The committed facts' wheel file in the cache (it may not be there yet)."""
    from ..sandbox import torchtpu_facts

    meta = torchtpu_facts.section("wheel")
    name = meta["name"].replace("-", "_")
    return cache_dir() / meta.get(
        "file", f"{name}-{meta['version']}-cp311-cp311-manylinux_2_31_x86_64.whl"
    )
