"""Match the catalogue's rules against one Python module.

A rule's ``match`` table names one or more matcher kinds; any of them matching
is a finding. The kinds:

- ``ref``: qualified-name patterns (fnmatch) of a referenced name or attribute
  chain, e.g. ``torch.cuda.synchronize``. Modifiers, all of which must hold:
  ``called`` (the reference is called; ``false``: it is not), ``decorator`` (used as a decorator),
  ``str_arg = {pos, kw, pattern, missing}`` (that argument is a string literal
  matching ``pattern``; ``missing = true`` also matches when it is absent),
  ``kw_contains = {kw, pos, pattern}`` (a string inside that keyword's value, or the
  positional argument ``pos`` when the keyword is absent, matches),
  ``without_kw`` and ``max_pos`` (the keyword is absent and at most that many
  positional arguments are given). ``any_str`` / ``has_kw`` are evidence: when
  given, at least one of them must hold.
- ``method``: a method of that name called on an object that is not an import (the
  ``ref`` modifiers that concern the call, ``str_arg`` and the rest, apply to it too).
- ``attr``: an attribute of that name read from an object that is not an import.
- ``kwarg = {name, value}``: a keyword argument (with that constant value) in any call.
- ``string``: a string literal (not a docstring) matching the regex.
- ``built_string``: an f-string, ``.format``, ``%`` or ``+`` string whose literal
  head matches the regex.
- ``import``: an import of a module matching one of the fnmatch patterns.
- ``custom``: a named matcher from ``tools.pycustom``.
``in_training_loop = true`` limits ``method`` matches to loops that call ``.backward()``.

The analysis uses the standard library's ``ast`` (C-speed parsing); the
rewriter uses libcst and finds the nodes again by the spans reported here.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections import defaultdict
from dataclasses import dataclass, field

from . import pystartmethod  # noqa: F401 - registers its custom matcher
from .catalogue import Rule
from .pycustom import (
    CUSTOM_MATCHERS,
    FALLBACK_PREFIXES,
    CustomMatcher,
    Located,
    MatchContext,
    calls_backward,
    runs_every_step,
    tests_another_value,
)
from .pyimports import collect_aliases, imported_modules, module_aliases, qualified_name


@dataclass(frozen=True, slots=True)
class Span:
    line: int
    col: int
    end_line: int
    end_col: int

    def contains(self, other: Span) -> bool:
        return (self.line, self.col) <= (other.line, other.col) and (
            self.end_line,
            self.end_col,
        ) >= (other.end_line, other.end_col)


@dataclass(frozen=True, slots=True)
class RawFinding:
    code: str
    span: Span


def _literal_chunks(pattern: str) -> list[str]:
    return [c for c in re.split(r"[*?\[\]]+", pattern) if c]


@dataclass
class CompiledRules:
    """The catalogue indexed for one pass over a module's nodes."""

    rules: list[Rule]
    ref_exact: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))
    ref_glob: list[tuple[re.Pattern[str], Rule]] = field(default_factory=list)
    methods: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))
    attrs: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))
    kwargs: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))
    strings: list[tuple[re.Pattern[str], Rule]] = field(default_factory=list)
    built: list[tuple[re.Pattern[str], Rule]] = field(default_factory=list)
    imports: list[tuple[re.Pattern[str], Rule]] = field(default_factory=list)
    custom: dict[type, list[tuple[Rule, CustomMatcher]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    fallbacks: list[tuple[str, Rule]] = field(default_factory=list)
    claimed: list[re.Pattern[str]] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set)
    prefilter_regexes: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, rules: list[Rule], catalogue: list[Rule] | None = None) -> CompiledRules:
        """Index ``rules``; ``catalogue`` (all rules) keeps fallbacks off names that a rule
        left out by ``--select`` or by the target would have claimed."""
        self = cls(rules=[r for r in rules if r.match])
        chosen = {r.code for r in self.rules}
        for rule in catalogue or ():
            if rule.code not in chosen:
                for pattern in rule.match.get("ref", ()):
                    self.claimed.append(re.compile(fnmatch.translate(pattern)))
        for rule in self.rules:
            m = rule.match
            for pattern in m.get("ref", ()):
                if any(ch in pattern for ch in "*?["):
                    self.ref_glob.append((re.compile(fnmatch.translate(pattern)), rule))
                else:
                    self.ref_exact[pattern].append(rule)
                self.tokens.add(_ref_token(pattern))
            for name in m.get("method", ()):
                self.methods[name].append(rule)
                # Loop-bound rules need a .backward() call in the file, a rarer word.
                self.tokens.add("backward" if m.get("in_training_loop") else name)
            for name in m.get("attr", ()):
                self.attrs[name].append(rule)
                self.tokens.add(name)
            if "kwarg" in m:
                self.kwargs[m["kwarg"]["name"]].append(rule)
                self.tokens.add(m["kwarg"]["name"])
            if "string" in m:
                self.strings.append((re.compile(m["string"]), rule))
            if "built_string" in m:
                self.built.append((re.compile(m["built_string"]), rule))
            for pattern in m.get("import", ()):
                self.imports.append((re.compile(fnmatch.translate(pattern)), rule))
                self.tokens.add(_ref_token(pattern))
            if "custom" in m:
                matcher = CUSTOM_MATCHERS[m["custom"]]
                if matcher.name in FALLBACK_PREFIXES:
                    self.fallbacks.append((FALLBACK_PREFIXES[matcher.name], rule))
                for node_type in matcher.node_types:
                    self.custom[node_type].append((rule, matcher))
                self.prefilter_regexes.append(matcher.prefilter)
            if "string" in m or "built_string" in m:
                self.prefilter_regexes.extend(_string_prefilter(rule))
        return self

    def prefilter(self) -> re.Pattern[bytes]:
        """A byte regex that every file with a possible finding matches.

        Rules are only evaluated on files it accepts; a test checks that the
        findings on the fixture corpus are the same with and without it.
        """
        parts = [re.escape(t) for t in sorted(self.tokens) if t]
        parts += self.prefilter_regexes
        return re.compile("|".join(parts).encode())

    def ref_rules(self, qualname: str) -> list[Rule]:
        found = list(self.ref_exact.get(qualname, ()))
        found += [rule for rx, rule in self.ref_glob if rx.match(qualname) and rule not in found]
        return found


def _ref_token(pattern: str) -> str:
    """A word that must appear in any source referring to ``pattern``.

    Every segment of a resolved qualified name is spelled out somewhere in the
    file (in the import that binds its root, or in the attribute chain), so any
    of them is a sound trigger; the rarest-looking one makes the best filter.
    """
    segments = [max(_literal_chunks(s), key=len, default="") for s in pattern.split(".")]
    segments = [s for s in segments if s]
    if any("cuda" in s for s in segments):
        return "cuda"
    if segments[0] != "torch":
        return segments[0]
    return max(segments[1:] or segments, key=len)


def _string_prefilter(rule: Rule) -> list[str]:
    """The rule's own regex, unanchored: a literal's value appears verbatim in the file."""
    pattern = str(rule.match.get("string") or rule.match["built_string"])
    return [pattern.removeprefix("^").removesuffix("$")]


class ModuleAnalyzer(ast.NodeVisitor):
    """One pass over a module, producing raw findings for the compiled rules."""

    def __init__(self, rules: CompiledRules, source: str) -> None:
        self.rules = rules
        self.source_lines = source.splitlines()
        self.findings: list[RawFinding] = []
        self.parents: dict[int, ast.AST] = {}
        self.ctx: MatchContext | None = None

    # -- helpers ---------------------------------------------------------
    def span(self, node: Located) -> Span:
        return Span(
            node.lineno,
            self._char_col(node.lineno, node.col_offset) + 1,
            node.end_lineno or node.lineno,
            self._char_col(node.end_lineno or node.lineno, node.end_col_offset or 0) + 1,
        )

    def _char_col(self, line: int, byte_col: int) -> int:
        text = self.source_lines[line - 1] if 0 < line <= len(self.source_lines) else ""
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def add(self, rule: Rule, node: Located) -> None:
        self.findings.append(RawFinding(rule.code, self.span(node)))

    # -- entry -----------------------------------------------------------
    def run(self, tree: ast.Module, scope: ast.AST | None = None) -> list[RawFinding]:
        """``scope``: where imports are collected (a notebook's cells share one namespace)."""
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent
        self.ctx = MatchContext(
            aliases=collect_aliases(scope or tree),
            parents=self.parents,
            modules=module_aliases(scope or tree),
        )
        self.visit(tree)
        return self.findings

    @property
    def context(self) -> MatchContext:
        """The module's aliases and parents: ``run`` sets them before any node is visited."""
        if self.ctx is None:
            raise RuntimeError("ModuleAnalyzer.run() sets the match context first")
        return self.ctx

    def generic_visit(self, node: ast.AST) -> None:
        ctx = self.context
        if isinstance(node, ast.Name | ast.Attribute):
            self._reference(node)
        for rule, matcher in self.rules.custom.get(type(node), ()):
            if matcher.name not in FALLBACK_PREFIXES and matcher.match(node, ctx):
                self.add(rule, matcher.anchor(node, ctx))
        if isinstance(node, ast.For | ast.While | ast.AsyncFor):
            training = calls_backward(node)
            ctx.loop_stack.append(training)
            super().generic_visit(node)
            ctx.loop_stack.pop()
            return
        super().generic_visit(node)

    # -- node kinds ------------------------------------------------------
    def _reference(self, node: ast.Name | ast.Attribute) -> None:
        ctx = self.context
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return  # not the whole chain
        if isinstance(node, ast.Name) and (
            not isinstance(node.ctx, ast.Load) or node.id in ctx.modules
        ):
            return  # rebinding a name, or a bare module object: no API is used
        qualname = qualified_name(node, ctx.aliases)
        if qualname is None:
            if isinstance(node, ast.Attribute):
                self._attribute_of_object(node)
            return
        matched = False
        for rule in self.rules.ref_rules(qualname):
            anchor = _ref_matches(rule.match, node, parent, ctx)
            if anchor is not None:
                self.add(rule, anchor)
                matched = True
        if not matched and not any(rx.match(qualname) for rx in self.rules.claimed):
            for prefix, rule in self.rules.fallbacks:
                if qualname.startswith(prefix) or qualname == prefix.rstrip("."):
                    called = isinstance(parent, ast.Call) and parent.func is node
                    self.add(rule, parent if isinstance(parent, ast.Call) and called else node)
                    break

    def _attribute_of_object(self, node: ast.Attribute) -> None:
        for rule in self.rules.attrs.get(node.attr, ()):
            self.add(rule, node)

    def visit_Call(self, node: ast.Call) -> None:
        func, ctx = node.func, self.context
        is_method = isinstance(func, ast.Attribute) and func.attr in self.rules.methods
        if (
            isinstance(func, ast.Attribute)
            and is_method
            and qualified_name(func, ctx.aliases) is None
        ):
            for rule in self.rules.methods[func.attr]:
                if rule.match.get("in_training_loop") and not (
                    ctx.in_training_loop and runs_every_step(node, ctx)
                ):
                    continue
                # the ref modifiers (str_arg, without_kw, ...) hold for methods too
                if _ref_matches(rule.match, func, node, ctx) is not None:
                    self.add(rule, node)
        for kw in node.keywords:
            for rule in self.rules.kwargs.get(kw.arg or "", ()):
                want = rule.match["kwarg"].get("value", ...)
                if want is ... or (isinstance(kw.value, ast.Constant) and kw.value.value is want):
                    self.add(rule, kw)
        for rx, rule in self.rules.built:
            if _built_string_head(node, rx):
                self.add(rule, node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if (
            isinstance(node.value, str)
            and not _is_docstring(node, self.parents)
            and not _names_a_device_kind(node, self.parents)
            and not _names_an_attribute(node, self.parents)
            and not tests_another_value(node, self.context)
        ):
            for rx, rule in self.rules.strings:
                if rx.search(node.value):
                    self.add(rule, node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        head = node.values[0] if node.values else None
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            for rx, rule in self.rules.built:
                if rx.search(head.value):
                    self.add(rule, node)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Mod | ast.Add) and _str_value(node.left) is not None:
            parent = self.parents.get(id(node))
            # "cuda:" + str(a) + str(b) is nested BinOps; report the outermost once.
            if not (isinstance(parent, ast.BinOp) and parent.left is node):
                for rx, rule in self.rules.built:
                    if rx.search(_leftmost_str(node)):
                        self.add(rule, node)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        modules = imported_modules(node)
        for rx, rule in self.rules.imports:
            if any(rx.match(m) for m in modules):
                self.add(rule, node)

    visit_ImportFrom = visit_Import


def _is_called(node: ast.AST, parent: ast.AST | None) -> bool:
    return isinstance(parent, ast.Call) and parent.func is node


def _ref_matches(
    m: dict, node: ast.expr, parent: ast.AST | None, ctx: MatchContext
) -> ast.expr | None:
    """The node to report when this reference satisfies the rule's modifiers, else None."""
    called = _is_called(node, parent)
    if m.get("called") is False:
        return None if called else node
    if m.get("decorator"):
        target = parent if isinstance(parent, ast.Call) and called else node
        holder = ctx.parents.get(id(target))
        if not (
            isinstance(holder, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and target in holder.decorator_list
        ):
            return None
        return target
    needs_call = m.get("called") or any(
        k in m for k in ("str_arg", "kw_contains", "without_kw", "any_str", "has_kw")
    )
    if needs_call and not called:
        return None
    if not called or not isinstance(parent, ast.Call):
        return node
    call = parent
    if "str_arg" in m and not _str_arg_matches(call, m["str_arg"]):
        return None
    if "kw_contains" in m:
        spec = m["kw_contains"]
        value = next((k.value for k in call.keywords if k.arg == spec["kw"]), None)
        if value is None and "pos" in spec and len(call.args) > spec["pos"]:
            value = call.args[spec["pos"]]
        if value is None or not _subtree_has_str(value, re.compile(spec["pattern"])):
            return None
    if "without_kw" in m:
        if any(k.arg == m["without_kw"] for k in call.keywords):
            return None
        if len(call.args) > m.get("max_pos", 1 << 30):
            return None
    evidence = []
    if "any_str" in m:
        evidence.append(_subtree_has_str(call, re.compile(m["any_str"])))
    if "has_kw" in m:
        evidence.append(any(k.arg in m["has_kw"] for k in call.keywords))
    if evidence and not any(evidence):
        return None
    return call


def _str_arg_matches(call: ast.Call, spec: dict) -> bool:
    value = None
    if "kw" in spec:
        value = next((k.value for k in call.keywords if k.arg == spec["kw"]), None)
    if value is None and "pos" in spec and len(call.args) > spec["pos"]:
        value = call.args[spec["pos"]]
    if value is None:
        return bool(spec.get("missing"))
    text = _str_value(value)
    return text is not None and re.search(spec["pattern"], text) is not None


def _subtree_has_str(node: ast.AST, rx: re.Pattern[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and rx.search(sub.value):
            return True
    return False


def _str_value(node: ast.AST | None) -> str | None:
    """The string a literal ``"..."`` is; None for any other node."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _leftmost_str(node: ast.AST) -> str:
    while isinstance(node, ast.BinOp):
        node = node.left
    return _str_value(node) or ""


def _built_string_head(call: ast.Call, rx: re.Pattern[str]) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "format"
        and (head := _str_value(func.value)) is not None
        and rx.search(head) is not None
    )


# Device kinds other than CUDA: a string beside one of these names a kind, not a choice.
OTHER_DEVICE_KINDS = frozenset(
    {"cpu", "xpu", "mps", "npu", "hpu", "mlu", "musa", "mtia", "xla", "tpu", "neuron", "meta"}
)


def _base_name(base: ast.expr) -> str:
    """``Enum`` of ``class C(Enum)`` and of ``class C(enum.Enum)``; "" for anything else."""
    if isinstance(base, ast.Name):
        return base.id
    return base.attr if isinstance(base, ast.Attribute) else ""


def _names_a_device_kind(node: ast.Constant, parents: dict[int, ast.AST]) -> bool:
    """``("xpu", "cuda", "npu")``, ``Literal["cpu", "cuda"]``, ``{"cuda": ..., "cpu": ...}``,
    ``CUDA = "cuda"`` in an Enum: the program lists or names device kinds. Rewriting one of
    them makes a list with the target twice, or an enum member that lies."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.Tuple | ast.List | ast.Set):
        if isinstance(parents.get(id(parent)), ast.Compare):
            return False  # `d.type in ("cuda", "xpu")` tests the device: it must follow the port
        items = parent.elts
    elif isinstance(parent, ast.Dict) and node in parent.keys:
        items = [k for k in parent.keys if k is not None]
    elif isinstance(parent, ast.Assign) and parent.value is node:
        owner = parents.get(id(parent))
        return isinstance(owner, ast.ClassDef) and any("Enum" in _base_name(b) for b in owner.bases)
    else:
        return False
    return any(
        isinstance(i, ast.Constant) and isinstance(i.value, str) and i.value in OTHER_DEVICE_KINDS
        for i in items
    )


# Keywords whose string names a Python attribute, never a device: `dest="cuda"` is `args.cuda`.
ATTRIBUTE_KEYWORDS = frozenset({"dest", "metavar"})


def _names_an_attribute(node: ast.Constant, parents: dict[int, ast.AST]) -> bool:
    parent = parents.get(id(node))
    return isinstance(parent, ast.keyword) and parent.arg in ATTRIBUTE_KEYWORDS


def _is_docstring(node: ast.Constant, parents: dict[int, ast.AST]) -> bool:
    """Docstrings and other bare string statements document code; they never run."""
    return isinstance(parents.get(id(node)), ast.Expr)


def apply_supersedes(findings: list[RawFinding], by_code: dict[str, Rule]) -> list[RawFinding]:
    """Drop findings that a more specific finding around them already explains."""
    dropped: set[int] = set()
    for outer in findings:
        hidden = by_code[outer.code].supersedes
        if not hidden:
            continue
        for i, inner in enumerate(findings):
            if inner.code in hidden and outer.span.contains(inner.span):
                dropped.add(i)
    unique: dict[tuple[str, Span], RawFinding] = {}
    for i, f in enumerate(findings):
        if i not in dropped:
            unique.setdefault((f.code, f.span), f)
    return sorted(unique.values(), key=lambda f: (f.span.line, f.span.col, f.code))


def analyze_module(
    tree: ast.Module, source: str, rules: CompiledRules, scope: ast.AST | None = None
) -> list[RawFinding]:
    raw = ModuleAnalyzer(rules, source).run(tree, scope)
    return apply_supersedes(raw, {r.code: r for r in rules.rules})
