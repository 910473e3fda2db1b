"""TPK010: flash-attn 2's attention functions become ``scaled_dot_product_attention``.

flash-attn computes exact softmax attention; SDPA computes the same, so a port is a
change of layout and of argument names, exact where the code shows what flash-attn's
defaults and conventions would do:

- ``(batch, seq, heads, dim)`` in and out, SDPA's ``(batch, heads, seq, dim)`` between:
  ``q.transpose(1, 2)`` in, ``.transpose(1, 2)`` back (``qkv.permute(2, 0, 3, 1, 4)
  .unbind(0)`` for a packed tensor);
- ``causal`` is aligned to the bottom-right corner of the score matrix, SDPA's
  ``is_causal`` to the top-left: ``is_causal`` where the lengths are evidently equal,
  else ``attn_mask=torch.nn.attention.bias.causal_lower_right(len_q, len_k)``;
- fewer key/value heads than query heads are read in groups, as SDPA's ``enable_gqa``;
- ``softmax_scale`` is ``scale``, ``dropout_p`` the same (both drop whenever it is > 0);
  ``deterministic`` only picks the backward kernel;
- the varlen forms (sequences packed along dim 0, delimited by ``cu_seqlens``) become one
  SDPA over all tokens with a block-diagonal mask, written once per file as a small
  function, ``varlen_attention``.

Refused with the reason: sliding windows, softcapping, ALiBi, returned probabilities,
arguments passed with ``*``/``**``, positions past ``causal`` (their meaning changed
between releases), and everything else under ``flash_attn`` (kv-cache, layers, padding
utilities). The reference stand-in (``sandbox/shim/standins/flash.py``) follows the same
documented semantics, and the parity tests compare the two.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from . import attention_port as port
from .attention_shapes import Shapes
from .base import TORCH_NAME, FixContext, Fixed, NotApplicable, code_of, dotted, fixer, prescan
from .library_names import imported_names, last_name
from .sdpa import SDPA, SDPA_NAME, Call, Inputs, sdpa_spelling, template

ALIASES = "flash_attn_aliases"
OPTIONS = ("dropout_p", "softmax_scale", "causal")  # the same positions in every 2.x release
KEYWORDS = {
    "window_size": ("(-1,-1)", "[-1,-1]"),
    "softcap": ("0", "0.0", "0."),
    "alibi_slopes": ("None",),
    "return_attn_probs": ("False",),
    "deterministic": port.ANY,  # which backward kernel runs: the same gradients
}
REFUSED = {
    "window_size": "sliding-window (local) attention has no SDPA argument; a banded "
    "attn_mask would be exact but is not written for you",
    "softcap": "softcapping (tanh of the scores) has no SDPA argument",
    "alibi_slopes": "ALiBi's position biases are not ported (an additive attn_mask per head "
    "would be exact but is not written for you)",
    "return_attn_probs": "SDPA returns neither the softmax's log-sum-exp nor the probabilities",
    "block_table": "the paged KV cache has no SDPA counterpart",
}
BEYOND = (
    "a positional argument after causal: its meaning changed between flash-attn releases "
    "(window_size since 2.3, return_attn_probs before): pass it by keyword"
)


@dataclass(frozen=True)
class Form:
    """One flash-attn function: its leading parameters, and whether it is a varlen one."""

    inputs: tuple[str, ...]
    varlen: bool = False

    def signature(self, name: str) -> port.Signature:
        keywords = {**KEYWORDS, "block_table": ("None",)} if self.varlen else KEYWORDS
        return port.Signature(
            f"flash_attn.{name}", (*self.inputs, *OPTIONS), keywords, REFUSED, BEYOND
        )


FORMS = {
    "flash_attn_func": Form(("q", "k", "v")),
    "flash_attn_qkvpacked_func": Form(("qkv",)),
    "flash_attn_kvpacked_func": Form(("q", "kv")),
    "flash_attn_varlen_func": Form(
        ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"), True
    ),
    "flash_attn_varlen_qkvpacked_func": Form(("qkv", "cu_seqlens", "max_seqlen"), True),
    "flash_attn_varlen_kvpacked_func": Form(
        ("q", "kv", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"), True
    ),
}
NOT_PORTED = {
    "flash_attn_with_kvcache": "it updates the KV cache in place: write the cache update "
    "and an SDPA call by hand",
}

# (batch, seq, 2 or 3, heads, dim) -> 2 or 3 tensors of (batch, heads, seq, dim)
UNPACK = "PACKED.permute(2, 0, 3, 1, 4).unbind(0)"
TO_SDPA = "X.transpose(1, 2)"

VARLEN = "varlen_attention"
VARLEN_CODE = '''\
def varlen_attention(
    q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p=0.0, scale=None, causal=False
):
    """flash-attn's variable-length attention as one masked scaled_dot_product_attention.

    q is (total_q, heads, dim), k and v (total_k, kv_heads, dim): sequence b is rows
    cu_seqlens[b]:cu_seqlens[b + 1]. A token attends to the keys of its own sequence
    and, when causal, to those no nearer the sequence's end than itself (flash-attn
    aligns the mask to each sequence's bottom-right corner). A query with no key gets 0.
    """
    ends_q, ends_k = cu_seqlens_q[1:], cu_seqlens_k[1:]
    i = torch.arange(q.size(0), device=q.device)
    j = torch.arange(k.size(0), device=k.device)
    seq_q = torch.searchsorted(ends_q, i, right=True)
    seq_k = torch.searchsorted(ends_k, j, right=True)
    mask = (seq_q[:, None] == seq_k[None, :]) & (seq_q < ends_q.numel())[:, None]
    if causal:
        last = ends_q.numel() - 1
        to_end_q = ends_q[seq_q.clamp(max=last)] - i
        to_end_k = ends_k[seq_k.clamp(max=last)] - j
        mask &= to_end_k[None, :] >= to_end_q[:, None]
    out = SDPA(
        q.transpose(0, 1),
        k.transpose(0, 1),
        v.transpose(0, 1),
        attn_mask=mask,
        dropout_p=dropout_p,
        scale=scale,
        enable_gqa=True,
    )
    return out.transpose(0, 1).contiguous()
'''


@prescan("TPK010")
def _file_facts(module: cst.Module, lines: list[int], target: str) -> dict:
    """The file's aliases of flash-attn's names, how it spells SDPA, and whether it
    defines ``varlen_attention`` already (and how)."""
    defined = {
        s.name.value: code_of(s.with_changes(leading_lines=()))
        for s in module.body
        if isinstance(s, cst.FunctionDef | cst.ClassDef)
    }
    assigned = {
        t.target.value
        for s in module.body
        if isinstance(s, cst.SimpleStatementLine)
        for small in s.body
        if isinstance(small, cst.Assign)
        for t in small.targets
        if isinstance(t.target, cst.Name)
    }
    return {
        ALIASES: imported_names(module, ("flash_attn",)),
        SDPA_NAME: sdpa_spelling(module),
        VARLEN: defined.get(VARLEN, "<assigned>" if VARLEN in assigned else None),
    }


def _sdpa(ctx: FixContext) -> str:
    return ctx.state.get(SDPA_NAME, SDPA)


@fixer("TPK010")
def flash_attention(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    name = last_name(
        node, ctx, ALIASES, lambda: NotApplicable("the flash-attn function is not named plainly")
    )
    form = FORMS.get(name)
    if form is None:
        why = NOT_PORTED.get(name, "only flash-attn's attention functions are ported")
        raise NotApplicable(f"flash_attn's {name}: {why}")
    if not isinstance(node, cst.Call):
        raise NotApplicable(
            f"{name} is referenced, not called: each call needs its own port (its layout and "
            "causal mask)"
        )
    args = port.bind(node, form.signature(name))
    missing = [p for p in form.inputs if p not in args]
    if missing:
        raise NotApplicable(f"{name} without {', '.join(missing)}")
    if form.varlen:
        return _varlen(node, name, args, ctx)
    return _dense(node, args, ctx)


SDPA_KEYWORDS = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")  # its order


def _options(args: dict[str, cst.BaseExpression]) -> list[tuple[str, cst.BaseExpression]]:
    """dropout_p and scale, as SDPA names them (left out where flash-attn's default)."""
    out = []
    if not port.literal(args.get("dropout_p"), "0.0", "0", "0."):
        out.append(("dropout_p", args["dropout_p"]))
    if not port.literal(args.get("softmax_scale"), "None"):
        out.append(("scale", args["softmax_scale"]))
    return out


def _dense(
    node: cst.Call, args: dict[str, cst.BaseExpression], ctx: FixContext
) -> cst.BaseExpression:
    shapes = Shapes(ctx)
    causal = args.get("causal")
    inputs: Inputs
    if "qkv" in args:  # one tensor: the same lengths and heads
        inputs = [("*", template(ctx, UNPACK, PACKED=args["qkv"]))]
        same_length = same_heads = True
        q = k = args["qkv"]
    else:
        q = args["q"]
        inputs = [("", template(ctx, TO_SDPA, X=q))]
        if "kv" in args:
            k = args["kv"]
            inputs.append(("*", template(ctx, UNPACK, PACKED=k)))
            same_length = same_heads = False
        else:
            k = args["k"]
            inputs += [("", template(ctx, TO_SDPA, X=args[p])) for p in ("k", "v")]
            same_length, same_heads = shapes.same(q, k, 1), shapes.same(q, k, 2)
    keywords = dict(_options(args))
    if causal is None or port.literal(causal, "False"):
        pass
    elif same_length:
        keywords["is_causal"] = causal
    else:
        kv = "k" if "k" in args else "kv"
        keywords["attn_mask"] = port.lower_right(
            ctx, port.reusable(q, "q"), port.reusable(k, kv), causal
        )
    if not same_heads:
        keywords["enable_gqa"] = cst.Name("True")
    after = ["transpose(1, 2)"] + (["contiguous()"] if port.needs_contiguous(ctx) else [])
    ordered = [(name, keywords[name]) for name in SDPA_KEYWORDS if name in keywords]
    return Call(_sdpa(ctx), inputs, ordered, after).render(ctx, node)


def _varlen(
    node: cst.Call, name: str, args: dict[str, cst.BaseExpression], ctx: FixContext
) -> cst.BaseExpression:
    defined = ctx.state.get(VARLEN)
    code = _varlen_code(ctx)
    if defined is not None and defined != code.rstrip("\n"):
        raise NotApplicable(
            f"the file already defines {VARLEN}, the name the port's helper would take"
        )
    inputs: Inputs
    if "qkv" in args:
        cu = args["cu_seqlens"]
        if dotted(cu) is None:
            raise NotApplicable(
                "cu_seqlens is computed in the call and serves queries and keys: assign it to "
                "a name first"
            )
        inputs = [("*", template(ctx, "QKV.unbind(1)", QKV=args["qkv"])), ("", cu), ("", cu)]
    else:
        inputs = [("", args["q"])]
        if "kv" in args:
            inputs.append(("*", template(ctx, "KV.unbind(1)", KV=args["kv"])))
        else:
            inputs += [("", args["k"]), ("", args["v"])]
        inputs += [("", args["cu_seqlens_q"]), ("", args["cu_seqlens_k"])]
    keywords = _options(args)
    if not port.literal(args.get("causal"), "False"):
        keywords.append(("causal", args["causal"]))
    ctx.define(VARLEN, code)
    return Call(VARLEN, inputs, keywords).render(ctx, node)


def _varlen_code(ctx: FixContext) -> str:
    """The helper in the file's own spelling of torch and of SDPA."""
    code = VARLEN_CODE.replace("SDPA(", f"{_sdpa(ctx)}(")
    if ctx.torch_alias:
        return TORCH_NAME.sub(ctx.torch_alias + ".", code)
    ctx.need("torch")
    return code
