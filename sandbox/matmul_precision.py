"""The float32 matmul precision a run can pin on the emulated device (``RunSpec``).

``None`` leaves the device as TorchTPU is: the program's ``torch.tpu.precision`` /
``torch.set_float32_matmul_precision`` decide, and the default is bf16 passes. A pinned
value (one of torch's names, ``"highest"`` for the verifier's tight check of a port's bugs)
makes every float32 matmul-class op run at that precision whatever the program sets. The
names are torch's, mapped onto TorchTPU's ``Precision`` by the wheel's own table
(``sandbox/data/torch_tpu.toml``, ``[precision]``). Stdlib only: the harness checks it
before a run, the launcher in every process of the run.
"""

from __future__ import annotations

from .torchtpu_facts import section


def choices() -> tuple[str, ...]:
    """The names a run may pin (torch's ``set_float32_matmul_precision`` names)."""
    return tuple(section("precision")["float32_matmul_precision"])


def check(value: object, error: type[ValueError] = ValueError) -> str | None:
    """``value`` if it is None or a pinnable name; else ``error`` naming the choices."""
    if value is None or (isinstance(value, str) and value in choices()):
        return value
    raise error(
        f"matmul_precision must be None (TorchTPU's own behaviour) or one of "
        f"{', '.join(repr(c) for c in choices())}, not {value!r}"
    )
