"""CUDA graphs on the reference shim (sandbox/shim/graphs.py): capture runs nothing that
lasts, replay recomputes on the captured tensors, as a GPU does. Each test would fail with
an eager stand-in (a graph whose capture runs the block, or whose replay reruns nothing)."""

from __future__ import annotations

import pytest
import torch
from torchport.sandbox import replays, shim


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return model.cuda(), torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.0)


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)) for _ in range(n)]


def test_a_captured_training_step_replays_like_the_eager_loop(active):
    model, optimizer = _model()
    static_x, static_y = torch.zeros(16, 4).cuda(), torch.zeros(16, 1).cuda()
    before = [p.detach().clone() for p in model.parameters()]
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        assert torch.cuda.is_current_stream_capturing()
        static_loss = torch.nn.functional.mse_loss(model(static_x), static_y)
        static_loss.backward()
        optimizer.step()
    assert not torch.cuda.is_current_stream_capturing()
    # on a GPU nothing ran during capture: the parameters are as they were
    for p, b in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, b)
    replayed = []
    for x, y in _batches(5):
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        replayed.append(static_loss.item())

    eager_model, eager_optimizer = _model()
    eager = []
    for x, y in _batches(5):
        eager_optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(eager_model(x), y)
        loss.backward()
        eager_optimizer.step()
        eager.append(loss.item())
    assert replayed == pytest.approx(eager, rel=1e-6)
    assert len(set(replayed)) == 5  # each replay read the new batch
    for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(p, q)  # and the gradients were fresh each time


def test_replay_reruns_inference_on_the_static_input(active):
    model, _ = _model()
    static_in = torch.zeros(3, 4).cuda()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = model(static_in)
    x = torch.randn(3, 4)
    static_in.copy_(x)
    graph.replay()
    torch.testing.assert_close(static_out, model(x))


def test_memory_written_during_capture_is_restored(active):
    counter = torch.zeros(2).cuda()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        counter.add_(1)
        counter[0].mul_(3)  # a write through a view of the same memory
    assert counter.tolist() == [0.0, 0.0]
    graph.replay()
    graph.replay()
    assert counter.tolist() == [12.0, 2.0]  # [1, 1] -> [3, 1], then [4, 2] -> [12, 2]


def test_graphed_callables_compute_what_the_callables_do(active):
    model, _ = _model()
    x = torch.randn(2, 4).cuda()
    graphed = torch.cuda.make_graphed_callables(model, (x,))
    torch.testing.assert_close(graphed(x), model(x))
    assert "torch.cuda.make_graphed_callables" in {e["api"] for e in shim.intercepted()}


def test_each_replay_tells_the_step_budget_its_loss_and_steps(active):
    """The capture is no step (nothing ran on a GPU); each replay is one, with its loss."""
    told: list[tuple[list[float], int]] = []

    def watcher(losses, steps):
        told.append(([t.item() for t in losses], steps))

    replays.watch(watcher)
    try:
        model, optimizer = _model()
        static_x, static_y = torch.zeros(16, 4).cuda(), torch.zeros(16, 1).cuda()
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            assert replays.capturing()
            static_loss = torch.nn.functional.mse_loss(model(static_x), static_y)
            static_loss.backward()
            optimizer.step()
        assert told == [] and not replays.capturing()
        seen = []
        for x, y in _batches(3):
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            seen.append(static_loss.item())
    finally:
        replays.unwatch(watcher)
    assert told == [([loss], 1) for loss in seen]
