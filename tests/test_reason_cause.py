"""A failure's reason ends with what the run died of, however long the message.

A rank's failure re-raised by its launcher carries the rank's whole traceback in its
message ("-- Process 0 terminated with the following error: Traceback ..."); the reason
used to be that message's first line, or the first 2,000 characters of it, cut mid-frame,
so neither the exception nor the operator a backend lacks was shown.
"""

from __future__ import annotations

from torchport.agents import verifier
from torchport.agents.attribution import first_line
from torchport.agents.diagnose import diagnose
from torchport.sandbox.session import MESSAGE_MAX, clipped, error_of

_OP = "NotImplementedError: Could not run 'aten::_fake_op' with arguments from the 'tpu' backend."


def _rank_failure(frames: int) -> str:
    """What ``mp.spawn`` raises in the parent: the rank's traceback as the message."""
    body = "".join(
        f'  File "/x/lib{i}.py", line {i}, in f{i}\n    call{i}()\n' for i in range(frames)
    )
    return (
        "\n\n-- Process 0 terminated with the following error:\n"
        f"Traceback (most recent call last):\n{body}{_OP}\n"
    )


def test_a_long_message_keeps_its_end_in_whole_lines():
    message = _rank_failure(200)
    assert len(message) > MESSAGE_MAX
    kept = clipped(message)
    assert len(kept) <= MESSAGE_MAX
    assert kept.rstrip().endswith(_OP)  # the exception survives the cut
    assert kept.startswith("\n\n-- Process 0 terminated")
    assert clipped("short") == "short"


def test_the_error_of_a_raised_rank_failure_keeps_the_exception():
    try:
        raise RuntimeError(_rank_failure(300))
    except RuntimeError as exc:
        error = error_of(exc)
    assert error["message"].rstrip().endswith(_OP)
    assert first_line(error["message"]) == _OP


def test_the_reason_and_the_diagnosis_name_the_exception_and_the_operator():
    error = {"type": "ProcessRaisedException", "message": clipped(_rank_failure(300))}
    target = {"status": "failed", "exit_code": 1, "error": error, "losses": []}
    reference = {"status": "ok", "exit_code": 0, "losses": [1.0, 0.9], "steps": 2}
    v = verifier.judge(reference, target, verifier.choose_policy([], None), "tpu")
    assert v.verdict == "failed"
    assert v.reason.endswith(f"ProcessRaisedException: {_OP}"), v.reason
    assert diagnose(target, "tpu").signature != "unknown"
    # a message without a traceback still gives its first line
    assert first_line("ValueError: bad shape\nmore detail") == "ValueError: bad shape"


# torch's message for an op a backend lacks goes on after its exception line with one line
# per dispatch key, each of which reads like an exception line.
_DISPATCH_KEYS = "".join(
    f"Key{i}: fallthrough registered at /__w/aten/src/ATen/k{i}.cpp:{i} [backend fallback]\n"
    for i in range(60)
)
_CPU_OP = (
    "NotImplementedError: Could not run 'aten::batch_norm_stats' with arguments from the "
    "'CPU' backend. This could be because the operator doesn't exist for this backend.\n"
)


def test_a_long_exception_message_keeps_its_exception_line_not_only_its_end():
    message = _rank_failure(200).removesuffix(f"{_OP}\n") + _CPU_OP + _DISPATCH_KEYS
    assert len(message) - message.index(_CPU_OP) > MESSAGE_MAX // 2  # the old tail missed it
    kept = clipped(message)
    assert len(kept) <= MESSAGE_MAX
    assert _CPU_OP.strip() in kept.splitlines()
    assert first_line(kept) == _CPU_OP.strip()
    try:
        raise RuntimeError(message)
    except RuntimeError as exc:
        error = error_of(exc)
    assert error["message"] == kept
    assert error["full_message"] == message  # the whole traceback stays in the JSON
    target = {"status": "failed", "exit_code": 1, "error": error, "losses": []}
    d = diagnose(target, "tpu")
    assert d.signature == "emulator-op-missing-cpu-kernel"
    assert "aten::batch_norm_stats" in d.cause


def test_a_short_message_has_no_full_copy():
    try:
        raise ValueError("bad shape")
    except ValueError as exc:
        assert "full_message" not in error_of(exc)


def test_a_reason_shows_torchports_own_folders_shortened():
    """The dependency overlay, the scratch copy and torchport's code, as a user reads them:
    Image-Captioning's ImportError named a cache folder of torchport's."""
    from torchport.sandbox.launch import OWN_CODE

    overlay = "/root/.cache/torchport/envs/e164d01809624d6fc046798a/prefix/lib/python3.11"
    where = f"{overlay}/site-packages/scipy/misc/__init__.py"
    message = f"cannot import name 'imread' from 'scipy.misc' ({where})"
    assert first_line(message) == (
        "cannot import name 'imread' from 'scipy.misc' (site-packages/scipy/misc/__init__.py)"
    )
    scratch = "/tmp/torchport-run-4242-1733390000-ab12/program/train.py"
    assert first_line(f"at {scratch} via {OWN_CODE}/sandbox/x.py") == (
        "at train.py via torchport/sandbox/x.py"
    )
