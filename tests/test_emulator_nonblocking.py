"""``x.to("cpu", non_blocking=True)`` of a device tensor works on both emulators.

torch allocates a non-blocking device-to-host copy's result in pinned memory, through the
PrivateUse1 hooks' pinned allocator; the native backend had none, so the copy raised
NotImplementedError (found by benchmarks/opinfo_coverage.py: op ``to``). Training loops
use it to fetch losses and predictions without a sync.
"""

from __future__ import annotations

import test_emulator
from test_emulator import run_snippet

backend = test_emulator.backend  # the fixture: both emulators

CODE = """
x = torch.arange(6.0).reshape(2, 3)
xd = x.to("tpu")
y = xd.to("cpu", non_blocking=True)
z = xd.cpu().to(torch.float64, non_blocking=True)
result["y"] = [str(y.device), y.equal(x)]
result["z"] = [str(z.device), z.equal(x.double())]
"""


def test_non_blocking_copy_to_host(backend: str) -> None:
    result = run_snippet(CODE, backend=backend)
    assert result == {"y": ["cpu", True], "z": ["cpu", True]}
