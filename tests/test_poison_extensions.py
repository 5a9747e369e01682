"""Tests of lib.poisoning.appendix_a: the paper's App. A (Slutzky et al. 2025).

The compiled flow is checked against independent computations: its velocity against autograd of
lib.ssm.diagonal.square_loss, its Jacobian against central finite differences of the velocity, and
the flow with B and C fixed against lib.poisoning.theorem1.theorem1_flow.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lib.poisoning import appendix_a as ext
from lib.poisoning import theorem1 as poison
from lib.poisoning.appendix_a import _log_time_jacobian, _log_time_velocity
from lib.ssm import diagonal as ssm

DT = torch.float64
D, KAPPA = 10, 7
TIE = 0.05 * math.exp(-5 * math.log10(1e3))  # Table 1's gap


def _random_problem(seed: int = 0, d: int = 4, kappa: int = 6, n: int = 3):
    generator = torch.Generator().manual_seed(seed)
    theta = torch.rand(3 * d, generator=generator, dtype=DT) * 0.8 - 0.2
    x = torch.randn(n, kappa, generator=generator, dtype=DT)
    y = torch.randn(n, generator=generator, dtype=DT)
    return theta, x, y, d


@pytest.mark.parametrize("eta", [0.0, 0.3, 1.0])
def test_velocity_is_minus_the_scaled_autograd_gradient(eta):
    theta, x, y, d = _random_problem()
    leaf = theta.clone().requires_grad_(True)
    loss = ssm.square_loss(ssm.SSM(leaf[:d], leaf[d : 2 * d], leaf[2 * d :]), x, y)
    (grad,) = torch.autograd.grad(loss, leaf)
    rates = torch.cat([torch.ones(d, dtype=DT), torch.full((2 * d,), eta, dtype=DT)])
    tau = 0.7  # log time: the velocity carries the factor e^tau = dt/dtau
    velocity = _log_time_velocity(tau, theta.numpy(), x.numpy(), y.numpy(), d, eta)
    np.testing.assert_allclose(velocity, -(math.exp(tau) * rates * grad).numpy(), rtol=1e-12,
                               atol=1e-14)


@pytest.mark.parametrize("eta", [0.0, 0.5])
def test_jacobian_matches_finite_differences_of_the_velocity(eta):
    theta, x, y, d = _random_problem(seed=1)
    args = (x.numpy(), y.numpy(), d, eta)
    jacobian = _log_time_jacobian(0.2, theta.numpy(), *args)
    step = 1e-6
    numeric = np.empty_like(jacobian)
    for p in range(theta.numel()):
        shift = np.zeros(theta.numel())
        shift[p] = step
        numeric[:, p] = (_log_time_velocity(0.2, theta.numpy() + shift, *args)
                         - _log_time_velocity(0.2, theta.numpy() - shift, *args)) / (2 * step)
    # central differences: error O(step^2) times third derivatives of size ~10 here
    np.testing.assert_allclose(jacobian, numeric, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("poisoned", [False, True])
def test_fixed_b_c_is_theorem1_flow(poisoned):
    a0 = poison.theorem1_init(D, 242, init_scale=1e-3, diff=TIE)
    horizon = poison.PAPER_HORIZONS[(D, KAPPA)][int(poisoned)]
    x, y = poison.theorem1_training_set(D, KAPPA, poisoned=poisoned)
    ones = torch.ones(D, dtype=DT)
    flow = ext.ssm_flow(a0, ones, ones, x, y, horizon=horizon, points=50)
    reference = poison.theorem1_flow(a0, KAPPA, poisoned=poisoned, horizon=horizon, points=50)
    # same equations, same solver and tolerance (rtol 1e-10): the limits agree far inside the
    # 1e-6 asked (a relative 1e-10 of the state moves the tie's relative gap 1.5e-5 by < 1e-5)
    np.testing.assert_allclose(flow["a"], reference["a"], rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(flow["b"], np.ones((50, D)))  # eta = 0: B and C never move
    assert flow.losses[-1] < 1e-25


def test_learned_b_c_moves_them_and_never_raises_the_loss():
    a0 = poison.theorem1_init(D, 242, init_scale=1e-3, diff=TIE)
    x, y = poison.theorem1_training_set(D, KAPPA, poisoned=True)
    ones = torch.ones(D, dtype=DT)
    flow = ext.ssm_flow(a0, ones, ones, x, y, horizon=1e4, eta=1.0, points=200)
    assert np.abs(flow["b"][-1] - 1).max() > 1e-3
    # gradient flow does not increase the loss (the paper's Lemma 22), up to the solver's rounding
    assert np.all(np.diff(flow.losses) <= 1e-12)
    assert flow.losses[-1] < 1e-20


@pytest.mark.parametrize("d_star", [2, 3, 5, 8])
def test_appendix_a_teacher_realizes_the_mapping_of_assumption_1(d_star):
    teacher = ext.appendix_a_teacher(D, d_star)
    assert teacher.dim == d_star
    h = ssm.impulse_response(*teacher, 30)
    expected = torch.ones(30, dtype=DT)
    expected[0] = D
    torch.testing.assert_close(h, expected, rtol=0, atol=1e-12)


def test_appendix_a_teacher_of_dimension_2_is_assumption_1():
    for got, want in zip(ext.appendix_a_teacher(D, 2), ssm.theorem1_teacher(D), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)  # the same arithmetic: sqrt(d - 1)


def test_scaled_copies_default_is_s2_and_losses_are_multiples():
    x, y = ext.scaled_copies_set(D, KAPPA, (1.0,), (1.0,))
    x2, y2 = poison.theorem1_training_set(D, KAPPA, poisoned=True)
    torch.testing.assert_close(x, x2, rtol=0, atol=0)
    torch.testing.assert_close(y, y2, rtol=0, atol=1e-15)
    a = torch.rand(4, D, generator=torch.Generator().manual_seed(3), dtype=DT) * 0.5
    student = ssm.SSM(a, torch.ones_like(a), torch.ones_like(a))
    p, q = (3.0, -1.0), (1.0, 2.0, -2.0, 1.0)  # sum of squares 10 each
    copies = ssm.square_loss(student, *ext.scaled_copies_set(D, KAPPA, p, q))
    torch.testing.assert_close(copies, 2 * 10 / 6 * poison.theorem1_loss(a, KAPPA, poisoned=True))
    clean = ssm.square_loss(student, *ext.scaled_copies_set(D, KAPPA, p))
    torch.testing.assert_close(clean, 10 / 2 * poison.theorem1_loss(a, KAPPA, poisoned=False))


def test_training_sequence_e_l_probes_the_power_kappa_minus_l():
    x, y = ext.scaled_copies_set(D, 8, (1.0,), (1.0,), position=2)
    a = torch.rand(D, generator=torch.Generator().manual_seed(4), dtype=DT) * 0.5
    student = ssm.SSM(a, torch.ones_like(a), torch.ones_like(a))
    torch.testing.assert_close(ssm.square_loss(student, x, y),
                               poison.theorem1_loss(a, 7, poisoned=True))


def test_scaled_teacher_labels_scale_with_the_product():
    base = ssm.theorem1_teacher(D)
    teacher = {"a": base.a, "b": 3 * base.b, "c": 0.5 * base.c}
    _, y = ext.scaled_copies_set(D, KAPPA, (2.0,), (1.0,), teacher=teacher)
    torch.testing.assert_close(y, torch.tensor([3.0, 1.5], dtype=DT))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ext.appendix_a_teacher(10, 1), "d_star"),
        (lambda: ext.scaled_copies_set(10, 7, (0.0, 0.0)), "p must hold at least one non-zero"),
        (lambda: ext.scaled_copies_set(10, 7, (1.0,), position=6), "position"),
        (lambda: ext.scaled_copies_set(10, 7, 1.0), "p must be a list"),
        (lambda: ext.scaled_copies_set(10, 7, (1.0,), teacher=(1, 2)), "teacher"),
        (lambda: ext.ssm_flow([0.1, 0.2], [1.0], [1.0, 1.0], [[1.0, 0.0]], [1.0], horizon=1.0),
         "b0 must have the d = 2"),
        (lambda: ext.ssm_flow([0.1], [1.0], [1.0], [[1.0, 0.0]], [1.0, 2.0], horizon=1.0),
         "one label per sequence"),
        (lambda: ext.ssm_flow([0.1], [1.0], [1.0], [[1.0, 0.0]], [1.0], horizon=1.0, eta=-1.0),
         "eta"),
        (lambda: ext.ssm_flow([0.1], [1.0], [1.0], [[1.0, 0.0]], [1.0], horizon=0.0), "horizon"),
        (lambda: ext.ssm_flow([0.1], [1.0], [1.0], [[1.0]], [1.0], horizon=1.0), "kappa >= 2"),
    ],
)
def test_bad_inputs_raise_value_errors_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()
