"""Codemods for apex's mixed precision (TPK006, TPK015, TPK016).

apex AMP makes a model train in fp16 on CUDA: ``amp.initialize`` patches torch's functions
(O1) or casts the model (O2, O3), and ``amp.scale_loss`` scales the loss against fp16
underflow. On the targets mixed precision is ``torch.autocast`` in bfloat16, which needs no
loss scaling. So ``initialize`` becomes autocast around the model's forward (every call of
the model, wherever the program makes it, as O1's patching was), ``scale_loss``'s block
becomes its body, and what apex kept beside them (the loss scaler's state, fp32 master
copies that are the parameters themselves in fp32) becomes the plain thing.
"""

from __future__ import annotations

import libcst as cst

from .base import (
    REMOVE_STATEMENT,
    FixContext,
    Fixed,
    NotApplicable,
    arg_named,
    body_of,
    bound_arguments,
    code_of,
    dotted,
    fixer,
)

# amp.initialize(models, optimizers=None, enabled=True, opt_level="O1", ...): its
# parameters in order, and those that only tune fp16 loss scaling or logging (dropped)
INITIALIZE = (
    "models",
    "optimizers",
    "enabled",
    "opt_level",
    "cast_model_type",
    "patch_torch_functions",
    "keep_batchnorm_fp32",
    "master_weights",
    "loss_scale",
    "cast_model_outputs",
    "num_losses",
    "verbosity",
    "min_loss_scale",
    "max_loss_scale",
)
# explicit casts change what O1/O2 mean; autocast cannot say the same
REFUSED = frozenset({"cast_model_type", "patch_torch_functions", "master_weights"}) | {
    "cast_model_outputs"
}
AUTOCAST_LEVELS = ("O1", "O2")  # O2's fp32 master weights are autocast's fp32 parameters


def _autocast(ctx: FixContext, enabled: str | None) -> str:
    device = code_of(ctx.device_type_expr())
    extra = f", enabled={enabled}" if enabled else ""
    return f"torch.autocast({device}, dtype=torch.bfloat16{extra})"


@fixer("TPK015")
def initialize(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """``model, opt = amp.initialize(model, opt, opt_level="O1")`` ->
    ``model.forward = torch.autocast("tpu", dtype=torch.bfloat16)(model.forward)``."""
    if not isinstance(node, cst.Assign) or not isinstance(node.value, cst.Call):
        raise NotApplicable("not an assignment of amp.initialize(...)")
    args = bound_arguments(node.value, INITIALIZE)
    refused = sorted(REFUSED & {k for k, v in args.items() if code_of(v) != "None"})
    if refused:
        raise NotApplicable(
            f"{', '.join(refused)} given: explicit casts have no autocast equivalent"
        )
    unknown = sorted(set(args) - set(INITIALIZE))
    if unknown:
        raise NotApplicable(f"amp.initialize has no {', '.join(unknown)} argument")
    level = args.get("opt_level")
    level_text = code_of(level).strip("\"'") if level is not None else "O1"
    enabled = args.get("enabled")
    conditions = []
    if enabled is not None and code_of(enabled) != "True":
        if code_of(enabled) == "False":
            return REMOVE_STATEMENT
        conditions.append(code_of(enabled))
    if level is not None and not isinstance(level, cst.SimpleString):
        conditions.append(f'{code_of(level)} != "O0"')  # decided at run time
    elif level_text == "O0":
        return REMOVE_STATEMENT  # apex's "fp32 training": nothing to keep
    elif level_text not in AUTOCAST_LEVELS:
        raise NotApplicable(
            f"opt_level {level_text}: pure half precision (the model cast to fp16) has no "
            "autocast equivalent; cast the model to bfloat16 by hand if that is meant"
        )
    model = dotted(args["models"])
    if model is None:
        raise NotApplicable("the models are not one plainly named model")
    autocast = _autocast(ctx, " and ".join(conditions) or None)
    return cst.Assign(
        targets=[
            cst.AssignTarget(
                cst.ensure_type(cst.parse_expression(f"{model}.forward"), cst.Attribute)
            )
        ],
        value=ctx.expr(f"{autocast}({model}.forward)"),
    )


class _Reads(cst.CSTTransformer):
    """Every read of one name replaced by an expression."""

    def __init__(self, name: str, value: cst.BaseExpression) -> None:
        super().__init__()
        self.name, self.value = name, value

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.value if updated.value == self.name else updated


@fixer("TPK016")
def scale_loss(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """``with amp.scale_loss(loss, opt) as scaled: scaled.backward()`` -> ``loss.backward()``."""
    if not isinstance(node, cst.With) or len(node.items) != 1:
        raise NotApplicable("not a with-block of amp.scale_loss(...)")
    item = node.items[0]
    call, alias = item.item, item.asname
    if not isinstance(call, cst.Call) or alias is None or not isinstance(alias.name, cst.Name):
        raise NotApplicable("amp.scale_loss without `as name`")
    return body_of(node, _Reads(alias.name.value, call.args[0].value))


# -- the rest of apex.amp: what it means without fp16 ------------------------------------

MASTER_PARAMS = '(p for group in {opt}.param_groups for p in group["params"])'


@fixer("TPK006")
def amp_other(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    name = dotted(node.func if isinstance(node, cst.Call) else node)
    function = (name or "").rsplit(".", 1)[-1]
    if not isinstance(node, cst.Call):
        raise NotApplicable(f"amp.{function} referenced, not called")
    if function == "master_params":
        optimizer = arg_named(node, "optimizer", 0)
        if optimizer is None:
            raise NotApplicable("amp.master_params without its optimizer")
        # without O2's fp32 copies, the master parameters are the optimizer's own
        return cst.parse_expression(MASTER_PARAMS.format(opt=code_of(optimizer.value)))
    if function == "state_dict":
        return cst.Dict([])  # no loss scaler: nothing to keep (the checkpoint keeps its key)
    if function == "load_state_dict":
        return REMOVE_STATEMENT
    if function == "initialize":
        raise NotApplicable(
            "amp.initialize whose results are not bound to the names passed in "
            "(TPK015 ports `model, optimizer = amp.initialize(model, optimizer, ...)`)"
        )
    if function == "scale_loss":
        raise NotApplicable(
            "amp.scale_loss outside a plain `with amp.scale_loss(loss, opt) as name:` block "
            "(TPK016 ports that one)"
        )
    raise NotApplicable(f"amp.{function} has no counterpart under torch.autocast")
