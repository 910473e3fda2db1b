"""GRU and LSTM on the emulated device, computed as the CPU computes them.

ATen sends RNN cells on any non-CPU device (CUDA, XPU, PrivateUse1) to fused
kernels (``_thnn_fused_gru_cell`` / ``_thnn_fused_lstm_cell``) that exist only
for CUDA, so ``nn.GRU``, ``nn.LSTM`` and their cells fail on a device backed by
CPU kernels. Registering the cells and the whole-sequence ops for
AutogradPrivateUse1 routes them, before that choice is made, to the sequence of
ops the CPU path runs (ATen's ``GRUCell``/``LSTMCell``/``FullLayer`` in RNN.cpp,
input projections precomputed for the whole sequence as on CPU), so the numbers
match plain CPU's and autograd differentiates those ops as usual. Packed
sequences (``gru.data`` / ``lstm.data``) and LSTM projections are not covered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

# One step of a cell: (the input's gates at t, the state, w_hh, b_hh) -> the next state
# (h for a GRU, (h, c) for an LSTM).
Step = Callable[[Tensor, Any, Tensor, Tensor | None], Any]
# ATen's trailing arguments of gru.input and lstm.input:
# (has_biases, num_layers, dropout, train, bidirectional, batch_first)
RnnOptions = tuple[bool, int, float, bool, bool, bool]

_KEY = "AutogradPrivateUse1"
_libraries: list[torch.library.Library] = []


def _gru_step(gi: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    i_r, i_z, i_n = gi.chunk(3, 1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, 1)
    reset = (h_r + i_r).sigmoid()
    update = (h_z + i_z).sigmoid()
    new = (i_n + h_n * reset).tanh()
    return (h - new) * update + new


def _lstm_step(
    gi: Tensor, state: tuple[Tensor, Tensor], w_hh: Tensor, b_hh: Tensor | None
) -> tuple[Tensor, Tensor]:
    h, c = state
    i, f, g, o = (F.linear(h, w_hh, b_hh) + gi).chunk(4, 1)
    cy = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * cy.tanh(), cy


def gru_cell(
    input: Tensor,
    hx: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
) -> Tensor:
    return _gru_step(F.linear(input, w_ih, b_ih), hx, w_hh, b_hh)


def lstm_cell(
    input: Tensor,
    hx: Sequence[Tensor],
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    h, c = hx
    return _lstm_step(F.linear(input, w_ih, b_ih), (h, c), w_hh, b_hh)


def _layers(
    step: Step,
    x: Tensor,
    states: Callable[[int], Any],
    params: Sequence[Tensor],
    options: RnnOptions,
) -> tuple[Tensor, list[Any]]:
    """Run every layer and direction over time-major ``x``; returns output, final states."""
    has_biases, num_layers, dropout, train, bidirectional, _ = options
    per = 4 if has_biases else 2
    directions = 2 if bidirectional else 1
    finals = []
    for layer in range(num_layers):
        outputs = []
        for d in range(directions):
            index = layer * directions + d
            w_ih, w_hh, *biases = params[index * per : (index + 1) * per]
            b_ih, b_hh = biases if biases else (None, None)
            seq = x if d == 0 else x.flip(0)
            gates = F.linear(seq, w_ih, b_ih)  # the whole sequence at once, as on CPU
            state = states(index)
            steps = []
            for t in range(seq.shape[0]):
                state = step(gates[t], state, w_hh, b_hh)
                steps.append(state[0] if isinstance(state, tuple) else state)
            out = torch.stack(steps)
            outputs.append(out if d == 0 else out.flip(0))
            finals.append(state)
        x = outputs[0] if directions == 1 else torch.cat(outputs, dim=2)
        if dropout and train and layer < num_layers - 1:
            x = F.dropout(x, p=dropout, training=True)
    return x, finals


def gru_input(
    input: Tensor, hx: Tensor, params: Sequence[Tensor], *options: *RnnOptions
) -> tuple[Tensor, Tensor]:
    batch_first = options[5]
    x = input.transpose(0, 1) if batch_first else input
    out, finals = _layers(_gru_step, x, lambda i: hx[i], params, options)
    return (out.transpose(0, 1) if batch_first else out), torch.stack(finals)


def lstm_input(
    input: Tensor, hx: Sequence[Tensor], params: Sequence[Tensor], *options: *RnnOptions
) -> tuple[Tensor, Tensor, Tensor]:
    has_biases, num_layers, _, _, bidirectional, batch_first = options
    if len(params) != num_layers * (2 if bidirectional else 1) * (4 if has_biases else 2):
        raise NotImplementedError("LSTM with proj_size is not emulated")
    h0, c0 = hx
    x = input.transpose(0, 1) if batch_first else input
    out, finals = _layers(_lstm_step, x, lambda i: (h0[i], c0[i]), params, options)
    out = out.transpose(0, 1) if batch_first else out
    return out, torch.stack([h for h, _ in finals]), torch.stack([c for _, c in finals])


def register() -> None:
    if _libraries:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("gru_cell", gru_cell, _KEY)
    lib.impl("lstm_cell", lstm_cell, _KEY)
    lib.impl("gru.input", gru_input, _KEY)
    lib.impl("lstm.input", lstm_input, _KEY)
    _libraries.append(lib)  # a Library's registrations live as long as the object
