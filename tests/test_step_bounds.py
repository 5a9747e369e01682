"""Unit tests of lib.networks.step_bounds: the step sizes, times and iteration counts of Elkabetz &
Cohen 2021 (Corollary 4, eqs. (21), (24), (34)-(36)) against hand-computed values and against
gradient descent and gradient flow, and the balanced point of Lemma 31."""

import math
import sys

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from lib.networks import linear_nets, step_bounds

DT = torch.float64


def test_corollary4_three_regimes():
    """Constant in t for m < 0, ∝ 1/t for m = 0, ∝ e^{-mt} for m > 0 (exactly, from the formula),
    and c = 1/(√(2β³f0) + β²ε) as printed: β = 1, f0 = 2, ε = 0.1 give c = 1/2.1."""
    c = 1 / (math.sqrt(2 * 2.0) + 0.1)
    assert step_bounds.corollary4_step_size(-3.0, 1.0, 2.0, 0.1, 5.0) == pytest.approx(c * 0.3)
    assert step_bounds.corollary4_step_size(-3.0, 1.0, 2.0, 0.1, 50.0) == pytest.approx(c * 0.3)
    ratio = (step_bounds.corollary4_step_size(0.0, 1.0, 2.0, 0.1, 2.0)
             / step_bounds.corollary4_step_size(0.0, 1.0, 2.0, 0.1, 8.0))
    assert ratio == pytest.approx(4.0, rel=1e-12)  # the same formula twice: rounding only
    late = [step_bounds.corollary4_step_size(1.5, 1.0, 2.0, 0.1, t) for t in (20.0, 21.0)]
    assert late[0] / late[1] == pytest.approx(math.exp(1.5), rel=1e-9)  # e^{-30}-size corrections
    # a start already outside the tube admits no step
    assert step_bounds.corollary4_step_size(1.0, 1.0, 2.0, 0.1, 5.0, start_gap=0.1) == 0.0


def test_corollary4_tiny_smoothness():
    """β = 1e-300 makes β³ and β² underflow to 0 (was a ZeroDivisionError). With a start gap
    0.01 above ε e^{−m t̃} = 0.1 e^{−3} no step qualifies: 0.0; with no gap the step is
    ε e^{−3} / (√(2β³f₀)(1 − e^{−3})) ≈ e^{1030}, beyond float64: a ValueError naming smoothness."""
    assert step_bounds.corollary4_step_size(1.0, 1e-300, 2.0, 0.1, 3.0, 0.01) == 0.0
    with pytest.raises(ValueError, match="smoothness"):
        step_bounds.corollary4_step_size(1.0, 1e-300, 2.0, 0.1, 3.0)


def test_corollary4_where_m_times_horizon_underflows():
    """m t̃ = 1e-600 rounds to 0 (was a ZeroDivisionError in m/(1 − e^{−m t̃})), and m t̃ = 1e-310
    is subnormal (m/(1 − e^{−m t̃}) loses digits): the m → 0 limit, the convex case's step (the
    same float products, so exactly equal; the two differ by the factor 1 + m t̃/2)."""
    convex = step_bounds.corollary4_step_size(0.0, 1.0, 2.0, 0.1, 1e-300)
    assert step_bounds.corollary4_step_size(1e-300, 1.0, 2.0, 0.1, 1e-300) == convex
    convex = step_bounds.corollary4_step_size(0.0, 1.0, 2.0, 0.1, 1e-10)
    assert step_bounds.corollary4_step_size(1e-300, 1.0, 2.0, 0.1, 1e-10) == convex


def test_corollary4_over_the_whole_float_range():
    """At log-uniform arguments over the float range (β, f₀, ε, t̃, the gap from 1e-300 to 1e300,
    |m| too), the step agrees with the 40-digit decimal formula of the bad-input fuzz's oracle
    to 1e-9, or is refused (a ValueError) exactly where that value exceeds float64. Before,
    β³ under- or overflowing in the formula gave steps wrong by orders of magnitude."""
    from api_cases_step_bounds import _oracle_corollary4

    rng = np.random.RandomState(0)
    for _ in range(2000):
        m = float(rng.choice([-1.0, 0.0, 1.0]) * 10 ** rng.uniform(-300, 300))
        beta, f0, eps, horizon, gap = (float(10 ** rng.uniform(-300, 300)) for _ in range(5))
        args = (m, beta, f0, eps, horizon, gap if rng.rand() < 0.5 else 0.0)
        try:
            step = step_bounds.corollary4_step_size(*args)
        except ValueError:
            assert not _oracle_corollary4(sys.float_info.max, *args[:5], start_gap=args[5]), args
            continue
        assert math.isfinite(step) and _oracle_corollary4(step, *args[:5], start_gap=args[5]), args


@pytest.mark.parametrize(
    ("gradient", "flow", "start", "m", "beta", "f"),
    [
        (lambda q: q, lambda t: np.exp(-t), 1.0, -1.0, 1.0, lambda q: 0.5 * q * q),
        (lambda q: -math.sin(q), lambda t: 2 * np.arctan(np.tan(0.05) * np.exp(t)), 0.1, 1.0,
         1.0, lambda q: 1 + math.cos(q)),
    ],
)
def test_corollary4_is_sufficient(gradient, flow, start, m, beta, f):
    """Descent at 0.99 times the corollary's step stays within ε of the flow up to the horizon."""
    for horizon in (1.0, 3.0):
        eta = 0.99 * step_bounds.corollary4_step_size(m, beta, f(start), 0.1, horizon)
        end = step_bounds.tracking_exit_times(gradient, flow, start, [eta], horizon, 0.1)[0]
        assert end > horizon


def test_tracking_exit_times_against_closed_form():
    """On ½q², θ_k = (1 − η)^k θ_0: the first k with |(1 − η)^k − e^{−kη}| > ε, by hand."""
    etas = [0.5, 0.2, 0.01]
    ends = step_bounds.tracking_exit_times(lambda q: q, lambda t: np.exp(-t), 1.0, etas, 3.0,
                                           0.05)
    for eta, end in zip(etas, ends, strict=True):
        k = np.arange(1, int(3.0 / eta + 1e-9) + 1)
        outside = np.flatnonzero(np.abs((1 - eta) ** k - np.exp(-k * eta)) > 0.05)
        expected = k[outside[0]] * eta if outside.size else (k[-1] + 1) * eta
        assert end == pytest.approx(expected, rel=1e-12)  # the same grid of times
    # a diverging descent (η = 3: θ_k = (−2)^k) leaves the ball of radius 1 at its first step
    assert step_bounds.tracking_exit_times(lambda q: q, lambda t: np.exp(-t), 1.0, [3.0], 9.0,
                                           1.0)[0] == 3.0  # k η with k = 1: exact


def test_tracking_exit_times_rejects_a_bad_flow():
    with pytest.raises(ValueError, match="flow"):
        step_bounds.tracking_exit_times(lambda q: q, lambda t: np.full(3, np.nan), 1.0, [0.1],
                                        1.0, 0.1)
    with pytest.raises(ValueError, match="descent steps"):
        step_bounds.tracking_exit_times(lambda q: q, lambda t: np.exp(-t), 1.0, [1e-9], 10.0, 0.1)


def _end_to_end_time(depth, w0, target, accuracy):
    def reached(t, w):
        return 0.5 * np.sum((w - target.numpy()) ** 2) - accuracy

    reached.terminal = True
    solution = solve_ivp(
        lambda t, w: linear_nets.end_to_end_velocity(torch.from_numpy(w), target, depth).numpy(),
        (0, 1e6), w0.numpy(), method="LSODA", rtol=1e-9, atol=1e-12, events=reached)
    return solution.t_events[0][0]


@pytest.mark.parametrize("nu", [0.9, 0.0, -0.7])
def test_proposition14_time_bounds_the_flow(nu):
    """Eq. (21): the balanced flow (Lemma 35's end-to-end ODE) is ε̄-optimal before t̄."""
    gen = np.random.RandomState(3)
    target = torch.from_numpy(gen.normal(size=4))
    target = target / target.norm()
    other = torch.from_numpy(gen.normal(size=4))
    other = other - (other @ target) * target
    w0 = 0.15 * (nu * target + math.sqrt(1 - nu**2) * other / other.norm())
    for depth in (2, 3, 4):
        time = _end_to_end_time(depth, w0, target, 1e-3)
        assert time <= step_bounds.proposition14_time(depth, 0.15, nu, 1e-3)


def test_theorem15_iterations_eq24():
    """Eq. (24) by hand for n = 3, ‖W‖ = 0.1, ν = 0 (κ = 1), ε̃ = 0.01, η = 1e-3."""
    expected = math.ceil(2 * 3 * 1.5**3 / (0.1 * 1e-3) * math.log(15 * 3 / (0.1 * 0.01)) + 1)
    assert step_bounds.theorem15_iterations(3, 0.1, 0.0, 0.01, 1e-3) == pytest.approx(expected)
    # exponential in the depth beyond the step of eq. (23): more than e^7 per layer
    counts = [step_bounds.theorem15_iterations(n, 0.1, 0.5, 0.01,
                                               linear_nets.theorem15_step_size(n, 0.1, 0.5, 0.01))
              for n in (3, 4)]
    assert counts[1] / counts[0] > math.exp(7)


def test_theorem32_formulas():
    """Eqs. (34)-(36) by hand at n = 3, ‖W‖ = 0.1, ν = 0 (K = 3), ε̃ = 0.1; and the depth guard."""
    log_term = math.log(23 * 3 * 3 / (0.1 * 0.1))
    eps_hat = 0.1**8 * 0.1**2 / (3**15 * math.exp(42) * 3**22 * log_term**2)
    eta = 0.1**5 * 0.1 / (3**8.5 * math.exp(31) * 3**14) / log_term**2
    assert step_bounds.theorem32_unbalancedness(3, 0.1, 0.0, 0.1) == pytest.approx(eps_hat)
    assert step_bounds.theorem32_step_size(3, 0.1, 0.0, 0.1) == pytest.approx(eta)
    k = 3 * 3 * 4.5**3 / (0.1 * 1e-3) * log_term + 1
    assert step_bounds.theorem32_iterations(3, 0.1, 0.0, 0.1, 1e-3) == pytest.approx(k)
    with pytest.raises(ValueError, match="float range"):
        step_bounds.theorem32_iterations(2000, 0.1, 0.0, 0.1, 1e-3)
    with pytest.raises(ValueError, match="0.1"):
        step_bounds.theorem32_step_size(3, 0.15, 0.0, 0.1)


def test_nearest_balanced_is_balanced_and_within_lemma31():
    """Balanced to rounding, W_n kept, and within 2.61 √ε̂ (what the construction guarantees at
    depth 3, below Lemma 31's 3^1.5 √ε̂) for perturbed balanced starts and for Xavier starts."""
    gen = np.random.RandomState(0)
    starts = []
    for delta in (1e-3, 1e-1, 1.0):
        a = torch.from_numpy(gen.normal(size=(1, 4)))
        balanced = linear_nets.balanced_init([4, 4, 4, 1], 0.1 * a / a.norm())
        starts.append({k: w + delta * torch.from_numpy(gen.normal(size=tuple(w.shape)))
                       for k, w in balanced.items()})
    starts.append(linear_nets.xavier_init([4, 4, 4, 1], 5))
    for start in starts:
        hat = step_bounds.nearest_balanced(start)
        assert linear_nets.unbalancedness(hat) < 1e-10  # rounding of products of O(1) entries
        torch.testing.assert_close(hat["W3"], start["W3"], rtol=0, atol=0)  # copied, exactly
        distance = math.sqrt(sum(((start[k] - hat[k]) ** 2).sum().item() for k in start))
        eps_hat = linear_nets.unbalancedness(start)
        assert distance <= math.sqrt(1 + (1 + math.sqrt(2)) ** 2) * math.sqrt(eps_hat) + 1e-12


def test_nearest_balanced_needs_square_hidden_layers():
    with pytest.raises(ValueError, match="square hidden layers"):
        step_bounds.nearest_balanced(linear_nets.xavier_init([4, 3, 3, 1], 0))
