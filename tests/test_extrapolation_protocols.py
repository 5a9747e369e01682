"""Tests of lib.ssm.extrapolation_protocols: the paper's losses, schedule, teachers and early
stopping.

The compiled loop is compared with independent computations: lib.ssm.extrapolation's compiled Adam
on the population loss, and PyTorch's own Adam (with its MultiStepLR) on losses written out with
autograd. Tolerances: the same float64 arithmetic in another order agrees to ~1e-15 per step; a
few hundred Adam steps amplify that to ~1e-13, so 1e-10 leaves room without hiding a wrong
gradient (which moves the iterates by the learning rate, 1e-2, within one step).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lib.ssm import extrapolation as ex
from lib.ssm import extrapolation_protocols as xp

DT = torch.float64


def _torch_adam(start, loss_of, steps, lr, milestones=()):
    """PyTorch's Adam (and MultiStepLR, factor 0.1) on a dense student (A, B, C)."""
    a, b, c = (start[n][0].clone().requires_grad_() for n in ("A", "B", "C"))
    optimizer = torch.optim.Adam([a, b, c], lr=lr)
    schedule = torch.optim.lr_scheduler.MultiStepLR(optimizer, list(milestones), 0.1)
    for step in range(steps):
        optimizer.zero_grad()
        loss_of(ex.linear_rnn_response(a, b, c, 7), step).backward()
        optimizer.step()
        schedule.step()
    return a.detach()


@pytest.fixture
def dense():
    w = ex.linear_rnn_response(*ex.delay_teacher(3), 20)
    return w, ex.general_init(6, [0], init_scale=0.3)


def test_population_loss_agrees_with_lib_extrapolation():
    w = ex.moment_sequence([0.95, 0.6, -0.7], [0.4, 0.3, 0.3], 30)
    starts = [ex.balanced_init(12, s, init_scale=1e-2) for s in range(2)]
    params = {n: torch.stack([s[n] for s in starts]) for n in ("a", "b")}
    reference = ex.train_adam(ex.balanced_descent_field(w, [5, 8]), params, 2, lr=1e-2,
                              steps=400, record_every=400)
    mine = xp.train_students("balanced", w, [5, 8], params, lr=1e-2, steps=400)
    assert torch.allclose(mine.params["a"], reference.final["a"], rtol=0, atol=1e-10)
    assert torch.allclose(mine.params["b"], reference.final["b"], rtol=0, atol=1e-10)
    assert np.allclose(mine.losses, reference.losses[-1], rtol=1e-8)


def test_multisteplr_matches_pytorch(dense):
    w, start = dense
    mine = xp.train_students("general", w, [7], start, lr=1e-2, steps=300, milestones=[100, 200])
    reference = _torch_adam(start, lambda h, _: ((h - w[:7]) ** 2).sum(), 300, 1e-2, [100, 200])
    assert torch.allclose(mine.params["A"][0], reference, rtol=0, atol=1e-10)


def test_accumulating_loss_gradient_matches_autograd(dense):
    w, start = dense
    mine = xp.train_students("general", w, [7], start, loss="accumulating", lr=1e-2, steps=100)
    reference = _torch_adam(start, lambda h, _: xp.accumulating_loss(h, w, 7), 100, 1e-2)
    assert torch.allclose(mine.params["A"][0], reference, rtol=0, atol=1e-10)


@pytest.mark.parametrize("batch", [None, 10])
def test_empirical_loss_matches_autograd(dense, batch):
    """Full batch: eq. (3.3) on all 40 sequences; batch 10: the same epochs of a permutation."""
    w, start = dense
    mine = xp.train_students("general", w, [7], start, loss="empirical", n_train=40, batch=batch,
                             lr=1e-2, steps=60, data_seeds=[3])
    z = torch.from_numpy(np.random.RandomState(3).standard_normal((40 + 1000, 7))[:40])
    if batch is None:
        reference = _torch_adam(start, lambda h, _: ((z @ (h - w[:7])) ** 2).mean(), 60, 1e-2)
        assert torch.allclose(mine.params["A"][0], reference, rtol=0, atol=1e-10)
    else:  # a different batch order draws different rows: the same loss only in expectation
        assert mine.losses[0] < xp.tail_errors("general", start, w, [0])[0] ** 2 * 7


def test_accumulating_loss_is_its_weighted_form_and_its_expectation():
    """Eq. (D.2) = eq. (D.3), and both are the expected sum of squared errors of every output."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(9, generator=gen, dtype=DT)
    h = torch.randn(9, generator=gen, dtype=DT)
    k = 6
    weighted = ((torch.arange(k, 0, -1, dtype=DT)) * (h[:k] - w[:k]) ** 2).sum()
    assert torch.isclose(xp.accumulating_loss(h, w, k), weighted, rtol=1e-13)
    x = torch.randn(200_000, k, generator=gen, dtype=DT)
    # output after reading x_1..x_t: Σ_{j<t} (h_j − w_j) x_{t−j}
    outputs = torch.stack([x[:, :t].flip(1) @ (h[:t] - w[:t]) for t in range(1, k + 1)], 1)
    monte_carlo = (outputs**2).sum(1).mean()
    # 2·10⁵ samples: relative standard error about √(2/2·10⁵) ≈ 0.3 %; 2 % is > 6 of them
    assert abs(monte_carlo / weighted - 1) < 0.02


def test_paper_balanced_teacher_follows_app_c21():
    eigenvalues, masses = xp.paper_balanced_teacher(5, 7)
    assert eigenvalues.min() >= 0.6 and eigenvalues.max() <= 1.05
    assert torch.isclose(masses.sum(), torch.tensor(1.0, dtype=DT), atol=1e-14)
    again = xp.paper_balanced_teacher(5, 7)
    assert torch.equal(again[0], eigenvalues)  # one RandomState stream: bit-identical by design


def test_paper_balanced_teacher_even_reading_spaces_the_eigenvalues_and_keeps_the_masses():
    iid, masses = xp.paper_balanced_teacher(5, 7)
    even, even_masses = xp.paper_balanced_teacher(5, 7, eigenvalues="even")
    # 0.6 + 0.45 i / 4: the interval's ends and three equal steps of 0.1125 between them
    assert torch.allclose(even, torch.tensor([0.6, 0.7125, 0.825, 0.9375, 1.05], dtype=DT),
                          rtol=0, atol=1e-15)
    assert torch.equal(even_masses, masses)  # the same stream: the masses do not depend on it
    assert not torch.equal(even, iid)
    with pytest.raises(ValueError, match="d_hat >= 2"):
        xp.paper_balanced_teacher(1, 7, eigenvalues="even")


def test_random_unbalanced_teacher_is_revealed_after_d_hat_steps():
    a, b, c = xp.random_unbalanced_teacher(5, 3)
    h = ex.linear_rnn_response(a, b, c, 8)
    assert h[:4].abs().max() == 0  # exact: products with structural zeros of the bidiagonal A
    assert torch.isclose(h[4], torch.diagonal(a, 1).prod(), rtol=1e-14)
    assert torch.count_nonzero(torch.triu(a, 2)) == 0
    assert torch.count_nonzero(torch.tril(a, -1)) == 0


def test_early_stopping_stops_after_patience_and_returns_the_best():
    """A student that already is the teacher cannot improve: it stops after ``patience`` steps,
    at its start."""
    a, b, c = ex.delay_teacher(3)
    teacher = {"A": a[None], "B": b[None], "C": c[None]}
    w = ex.linear_rnn_response(a, b, c, 10)
    runs = xp.train_students("general", w, [6], teacher, loss="empirical", batch=5, n_train=50,
                             steps=10_000, patience=40, check_every=10)
    assert runs.steps[0] == 40 and runs.best_steps[0] == 0
    assert torch.equal(runs.params["A"], teacher["A"])  # the best iterate is returned as kept


def test_divergence_is_flagged_and_returns_the_last_finite_iterate(dense):
    w, start = dense
    # entries of 1e60: h_6 = C A^6 B is of order 1e480, beyond float64, from the first step
    runs = xp.train_students("general", w, [7], {n: v * 1e60 for n, v in start.items()},
                             steps=10)
    assert runs.diverged[0]
    assert all(torch.isfinite(v).all() for v in runs.params.values())


def test_tail_errors_and_impulse_responses():
    w = ex.moment_sequence([0.9, -0.5], [0.5, 0.5], 12)
    student = {"a": torch.tensor([[0.9, -0.5]], dtype=DT),
               "b": torch.full((1, 2), 0.5**0.5, dtype=DT)}
    h = xp.impulse_responses("balanced", student, 12)
    assert torch.allclose(h[0], w, atol=1e-14)
    assert xp.tail_errors("balanced", student, w, [4])[0] < 1e-14
