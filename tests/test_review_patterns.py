"""Whole small programs with the patterns a reviewer rejected in torchport's real-world ports
(issue 14), on every target: the reviewed output byte for byte, the wrong output each pattern
produced before pinned as what must not come back, and a second migration changes nothing.

Regenerate the outputs with ``python tests/golden.py`` after a deliberate change, then read
the diff as a reviewer would.
"""

from __future__ import annotations

import pytest
from golden import expected_path, migrate_file, review_inputs
from torchport.tools.catalogue import TARGETS

# program -> target ("*" for all) -> text the port once wrote and must never write again
NOT_BACK: dict[str, dict[str, tuple[str, ...]]] = {
    # `--no-cuda` and the MPS arm folded away: the accelerator was always taken
    "flag_device_choice": {
        "*": ("\n    device = torch.device(", "check_available=True"),
    },
    # device calls guarded as conditional expressions standing alone as statements
    "guarded_calls": {
        "accelerator": ("if torch.accelerator.is_available() else None)",),
    },
    # strings that list or name device kinds are not device choices (huggingface/accelerate)
    "device_kind_names": {
        "tpu": ('("xpu", "tpu"', '{"tpu"', 'CUDA = "tpu"', '"cpu", "xpu", "tpu"'),
        "neuron": ('("xpu", "neuron"', '{"neuron"', 'CUDA = "neuron"'),
        "accelerator": ('SUPPORTED = ("xpu", (', "CUDA = ("),
    },
    # a torchrun worker's rank-indexed device, device selection, streams and RNG state: on
    # TorchTPU a process sees one device (tpu:0), and these torch.tpu APIs are internal
    "rank_devices": {
        "tpu": (
            'torch.device("tpu", local_rank)',
            'f"tpu:{local_rank}"',
            "set_device_index(local_rank)",
            "device_index(local_rank)",
            "torch.tpu.current_stream",
            "torch.tpu.get_rng_state",
            "TPU_VISIBLE_CHIPS",
            "_BOUNDS",
            "device_ids=",
        ),
        "xla": ('torch.device("xla", local_rank)', "device_ids="),
        "neuron": ("device_ids=",),
    },
}
CASES = [(path, target) for path in review_inputs() for target in TARGETS]


def test_every_review_program_pins_what_must_not_come_back():
    assert {p.stem for p in review_inputs()} == set(NOT_BACK)


@pytest.mark.parametrize(("path", "target"), CASES, ids=lambda v: getattr(v, "stem", v))
def test_the_port_is_the_reviewed_one(path, target):
    out = migrate_file(path, target)
    assert out == expected_path(path, target).read_text(encoding="utf-8")
    wrong = NOT_BACK[path.stem]
    for text in (*wrong.get("*", ()), *wrong.get(target, ())):
        assert text not in out


@pytest.mark.parametrize(("path", "target"), CASES, ids=lambda v: getattr(v, "stem", v))
def test_migrating_the_port_again_changes_nothing(path, target):
    once = expected_path(path, target)
    assert migrate_file(once, target) == once.read_text(encoding="utf-8")
