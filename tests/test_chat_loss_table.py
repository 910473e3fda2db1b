"""/verify's losses table in chat: a rank column where the runs trained several ranks."""

from __future__ import annotations

from dataclasses import asdict

from torchport.agents.chat.views import loss_table
from torchport.agents.verifier import compare_ranks, policies

# What the harness returns for a 2-rank run (RunResult.ranks): each rank's own losses.
ORIGINAL = {
    "losses": [2.0, 1.5],
    "ranks": [{"rank": 0, "losses": [2.0, 1.5]}, {"rank": 1, "losses": [2.25, 1.75]}],
}
PORT = {
    "losses": [2.0, 1.5],
    "ranks": [{"rank": 0, "losses": [2.0, 1.5]}, {"rank": 1, "losses": [2.25, 1.8]}],
}


def test_a_two_rank_verification_shows_each_ranks_steps_apart():
    parity = asdict(compare_ranks(ORIGINAL, PORT, policies()["fp32"]))
    columns, rows = loss_table(parity["per_step"])
    assert columns == ["rank", "step", "original (shim)", "migrated (emulated)"]
    assert rows == [
        [0, 1, "2", "2"],
        [0, 2, "1.5", "1.5"],
        [1, 1, "2.25", "2.25"],
        [1, 2, "1.75", "1.8"],  # the rank that differs, named on its row
    ]


def test_a_one_process_verification_has_no_rank_column():
    single = {"losses": [2.0, 1.5]}
    parity = asdict(compare_ranks(single, single, policies()["fp32"]))
    columns, rows = loss_table(parity["per_step"])
    assert columns == ["step", "original (shim)", "migrated (emulated)"]
    assert rows == [[1, "2", "2"], [2, "1.5", "1.5"]]
