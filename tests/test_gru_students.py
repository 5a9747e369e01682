"""Tests of lib.ssm.gru_students: the batched GRU is PyTorch's GRU, runs do not interact, and the
training length of a run is the output it learns.

In float64 the same arithmetic in another order agrees to ~1e-15 per operation; a few dozen Adam
steps keep differences below 1e-10, while a wrong gate or a leak between runs moves the weights
by the learning rate (1e-2) within one step.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lib.ssm import gru_students as gs

DT = torch.float64
TARGET = torch.tensor([0.8**j * np.cos(0.6 * j) for j in range(12)], dtype=DT)


def test_outputs_are_pytorch_gru_with_a_linear_readout():
    net = gs.gru_init(4, [0, 1], dtype="float64")
    x = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(0), dtype=DT)
    y = net.outputs(x)
    for run in range(2):
        gru = torch.nn.GRU(1, 4, batch_first=True, dtype=DT)
        with torch.no_grad():
            gru.weight_ih_l0.copy_(net.w_in[run][:, None])
            gru.weight_hh_l0.copy_(net.w_h[run].T)
            gru.bias_ih_l0.copy_(net.b_in[run])
            gru.bias_hh_l0.copy_(net.b_h[run])
            states, _ = gru(x[run].unsqueeze(-1))
        assert torch.allclose(states @ net.readout[run], y[run], rtol=0, atol=1e-13)


def test_initialization_is_pytorchs_uniform_and_scalable():
    net = gs.gru_init(16, [3], dtype="float64")
    bound = 1 / 16**0.5
    assert all(t.abs().max() <= bound for t in net.tensors())
    assert max(t.abs().max() for t in net.tensors()) > 0.9 * bound  # 800+ draws fill the range
    tiny = gs.gru_init(16, [3], scale=1e-6, dtype="float64")
    assert torch.allclose(tiny.w_h, net.w_h * 1e-6 / bound, rtol=1e-12)


def _students(teachers, ks, seeds):
    return gs.train_gru_students(teachers, ks, width=5, seeds=seeds, n_train=60, n_val=30,
                                 batch=20, lr=1e-2, max_steps=30, check_every=10, patience=100,
                                 length=6)


def test_runs_do_not_interact_and_each_learns_its_own_step():
    """Two runs trained together (lengths 3 and 6) end where each ends trained alone."""
    teachers = gs.train_gru_teachers(3, TARGET, [0, 1], steps=20, lr=1e-2, dtype="float64")
    together, _ = _students(teachers, [3, 6], [5, 6])
    for run, (k, seed) in enumerate(((3, 5), (6, 6))):
        alone, _ = _students(gs.select(teachers, [run]), [k], [seed])
        for mine, theirs in zip(together.tensors(), alone.tensors(), strict=True):
            assert torch.allclose(mine[run], theirs[0], rtol=0, atol=1e-10)


def test_teachers_learn_the_target_from_a_tiny_start():
    teachers = gs.train_gru_teachers(4, TARGET, [0], steps=300, lr=1e-2, dtype="float64")
    impulse = torch.zeros(1, 1, TARGET.shape[0], dtype=DT)
    impulse[0, 0, 0] = 1.0
    fit = ((teachers.outputs(impulse)[0, 0] - TARGET) ** 2).sum()
    # from scale 1e-6 the output is ~0, a loss of Σ target² ≈ 2.4; training must cut it tenfold
    assert fit < 0.1 * (TARGET**2).sum()


def test_tail_errors_zero_for_the_teacher_itself_and_the_zero_solution_baseline():
    teachers = gs.train_gru_teachers(3, TARGET, [0, 1], steps=20, lr=1e-2, dtype="float64")
    gap, zero = gs.gru_tail_errors(teachers, teachers, [2, 4], length=10, n=50)
    assert np.all(gap == 0)  # the same network on the same inputs: identical outputs
    x = torch.randn(50, 10, generator=torch.Generator().manual_seed(12345), dtype=DT)
    y = teachers.outputs(x.expand(2, 50, 10)).abs().mean(1)
    assert np.allclose(zero, [y[0, 2:].max().item(), y[1, 4:].max().item()], rtol=1e-12)


def test_early_stopping_returns_the_best_held_out_iterate():
    teachers = gs.train_gru_teachers(3, TARGET, [0], steps=20, lr=1e-2, dtype="float64")
    best, info = gs.train_gru_students(teachers, [4], width=5, seeds=[0], n_train=40, n_val=20,
                                       batch=20, lr=0.3, max_steps=200, check_every=5,
                                       patience=20)
    assert info.steps[0] - info.best_steps[0] >= 20 or info.steps[0] == 200
    held = torch.randn(20, 4, generator=torch.Generator().manual_seed(2 * 10**6), dtype=DT)[None]
    loss = ((best.outputs(held)[..., -1] - teachers.outputs(held)[..., -1]) ** 2).mean()
    assert np.isclose(loss.item(), info.held_out[0], rtol=1e-10)


def test_loss_all_weighs_every_output_of_the_window():
    """loss="all": the held-out loss kept is mean_x (1/k) Σ_{t<k} (y_t − y*_t)² of the best
    iterate (the docstring's formula, recomputed here)."""
    teachers = gs.train_gru_teachers(3, TARGET, [0], steps=20, lr=1e-2, dtype="float64")
    best, info = gs.train_gru_students(teachers, [4], width=5, seeds=[0], n_train=40, n_val=20,
                                       batch=20, lr=1e-2, max_steps=20, check_every=5,
                                       patience=100, loss="all")
    held = torch.randn(20, 4, generator=torch.Generator().manual_seed(2 * 10**6), dtype=DT)[None]
    loss = ((best.outputs(held) - teachers.outputs(held)) ** 2).mean(2).mean()
    assert np.isclose(loss.item(), info.held_out[0], rtol=1e-10)
    # the last output alone gives another number: the option changes the loss
    last = ((best.outputs(held)[..., -1] - teachers.outputs(held)[..., -1]) ** 2).mean()
    assert not np.isclose(last.item(), loss.item(), rtol=1e-3)


def test_students_start_from_init_scale_and_bad_options_are_refused():
    teachers = gs.train_gru_teachers(3, TARGET, [0], steps=20, lr=1e-2, dtype="float64")
    # at a learning rate of 1e-12 Adam moves each weight by at most ~1e-12 per step
    best, _ = gs.train_gru_students(teachers, [4], width=5, seeds=[7], n_train=40, n_val=20,
                                    batch=20, lr=1e-12, max_steps=2, check_every=1,
                                    patience=100, init_scale=1e-3)
    start = gs.gru_init(5, [7], scale=1e-3, dtype="float64")
    for mine, theirs in zip(best.tensors(), start.tensors(), strict=True):
        assert torch.allclose(mine, theirs, rtol=0, atol=1e-9)
    assert best.w_h.abs().max() <= 1e-3 + 1e-9  # PyTorch's default would reach 1/√5 ≈ 0.45
    for bad in ({"loss": "first"}, {"init_scale": 0.0}, {"init_scale": -1.0}):
        with pytest.raises(ValueError):
            gs.train_gru_students(teachers, [4], width=5, seeds=[0], n_train=40, n_val=20,
                                  batch=20, max_steps=2, **bad)


def test_states_are_what_the_readout_reads():
    net = gs.gru_init(4, [0, 1], dtype="float64")
    x = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(1), dtype=DT)
    states = net.states(x)
    assert states.shape == (2, 3, 5, 4)
    assert torch.allclose((states * net.readout[:, None, None, :]).sum(-1), net.outputs(x),
                          rtol=0, atol=0)


def test_window_only_errors_are_the_teacher_fed_its_last_k_inputs():
    """Brute force: for every t ≥ k, the teacher run from zero on x_{t−k+1..t}; and the runs of
    a batch with mixed lengths give what each gives alone."""
    teachers = gs.train_gru_teachers(3, TARGET, [0, 1], steps=20, lr=1e-2, dtype="float64")
    ks, length, n = [2, 4], 9, 40
    got = gs.gru_window_only_errors(teachers, ks, length=length, n=n, chunk=3)
    x = torch.randn(n, length, generator=torch.Generator().manual_seed(12345), dtype=DT)
    for run, k in enumerate(ks):
        one = gs.select(teachers, [run])
        y = one.outputs(x[None])[0]
        gaps = [(one.outputs(x[None, :, t - k + 1:t + 1])[0, :, -1] - y[:, t]).abs().mean().item()
                for t in range(k, length)]
        assert np.isclose(got[run], max(gaps), rtol=1e-12, atol=0)
        alone = gs.gru_window_only_errors(one, [k], length=length, n=n)
        assert np.isclose(alone[0], got[run], rtol=1e-12, atol=0)
    # a window as long as the evaluation is the teacher itself: no gap beyond it is possible
    with pytest.raises(ValueError):
        gs.gru_window_only_errors(teachers, [9, 9], length=9)
    with pytest.raises(ValueError):
        gs.gru_window_only_errors("teachers", [2], length=9)


def test_teachers_fit_as_a_filter_learn_the_target_on_gaussian_inputs():
    """fit="filter": the teacher's output on Gaussian inputs approaches Σ_j h_j x_{t−j}."""
    h = torch.tensor([0.9**j for j in range(8)], dtype=DT)
    x = torch.randn(200, 8, generator=torch.Generator().manual_seed(3), dtype=DT)
    goal = torch.stack([x[:, : t + 1].flip(-1) @ h[: t + 1] for t in range(8)], 1)
    teachers = gs.train_gru_teachers(3, h, [0], steps=300, lr=1e-2, dtype="float64",
                                     fit="filter", n_fit=100)
    gap = ((teachers.outputs(x[None])[0] - goal) ** 2).mean()
    # from scale 1e-6 the output is ~0, a loss of mean goal²; training must cut it fourfold
    assert gap < 0.25 * (goal**2).mean()
    with pytest.raises(ValueError):
        gs.train_gru_teachers(3, h, [0], steps=2, fit="noise")
