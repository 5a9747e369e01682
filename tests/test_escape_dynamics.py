"""Tests of lib.networks.escape_dynamics: the α → 0 limit of the training run, direction
comparisons and weak balancedness (Bantzis, Simon & Jacot 2025, §2.1–2.2 and §5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lib.book.data import digits
from lib.networks import escape_dynamics as ed
from lib.networks import saddles
from lib.networks.relu_nets import gaussian_weights

DT = torch.float64


@pytest.fixture(scope="module")
def small_digits():
    x, y = digits(60, every=29)
    return x, y, saddles.cross_entropy_gradient(y, 10)


def _init(depth: int, width: int = 8, seed: int = 0) -> list[torch.Tensor]:
    return gaussian_weights([64] + [width] * (depth - 1) + [10], 1 / width,
                            np.random.RandomState(seed))  # fmt: skip


def _smooth_direction():
    """Positive data, G < 0, and the rank-1 network that is linear on them (an escape direction)."""
    rng = np.random.RandomState(0)
    X = torch.from_numpy(rng.uniform(0.1, 1, (12, 3)))
    G = torch.from_numpy(-rng.uniform(0.1, 1, (12, 1)) / 12)
    w1 = torch.zeros(4, 3, dtype=DT)
    w1[0] = -(G[:, 0] @ X) / (G[:, 0] @ X).norm()
    w2 = torch.zeros(4, 4, dtype=DT)
    w2[0, 0] = 1
    w3 = torch.zeros(1, 4, dtype=DT)
    w3[0, 0] = 1
    return [w1, w2, w3], X, G


def test_limit_flow_is_the_small_scale_training_run(small_digits):
    """While the outputs are tiny, the run from alpha * theta0 is alpha times the limit flow.

    The full loss is C(0) + L0 + O(|Y|^2): from alpha = 1e-40 at depth 4 the norm grows by less
    than 1e10 over these steps, the outputs stay below 1e-100, and the two iterations differ by
    rounding only (1e-9 allows the ~1e-12 per step of 300 steps of float64 sums in another
    order)."""
    x, y, G = small_digits
    alpha, steps = 1e-40, 300
    eta0 = 10 / 36 * 4
    run = saddles.saddle_to_saddle_run(x, y, depth=4, width=8, init_scale=alpha / 8, eta0=eta0,
                                       steps=steps, seed=0, record_every=50)  # fmt: skip
    flow = ed.limit_direction_flow(_init(4), x, G, eta0=eta0, steps=steps, record_every=50)
    assert np.array_equal(flow.times, run.times)
    radius0 = math.sqrt(sum(float((w**2).sum()) for w in _init(4)))
    for k in range(len(run.times)):
        weights = ed.trajectory_weights(run, k)
        radius = math.sqrt(sum(float((w**2).sum()) for w in weights)) / alpha
        assert radius == pytest.approx(radius0 * math.exp(flow.log_growth[k]), rel=1e-9)
        assert ed.output_cosine(weights, flow.direction(k), x) > 1 - 1e-9


def test_limit_flow_does_not_depend_on_the_scale(small_digits):
    """The iteration is scale-equivariant: from w and from 1e-30 w the records agree to rounding."""
    x, _, G = small_digits
    a = ed.limit_direction_flow(_init(3), x, G, eta0=0.5, steps=200, record_every=40)
    b = ed.limit_direction_flow([1e-30 * w for w in _init(3)], x, G, eta0=0.5, steps=200,
                                record_every=40)  # fmt: skip
    for wa, wb in zip(a.weights, b.weights, strict=True):
        np.testing.assert_allclose(wa, wb, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.log_growth, b.log_growth, rtol=0, atol=1e-10)


def test_limit_flow_records_speeds_on_the_sphere(small_digits):
    """speeds[k] is -L0 of the recorded direction, which lies on the sphere |theta|^2 = L."""
    x, _, G = small_digits
    flow = ed.limit_direction_flow(_init(3), x, G, eta0=0.5, steps=100, record_every=25)
    assert list(flow.times) == [0, 25, 50, 75, 100]
    for k in range(len(flow.times)):
        direction = flow.direction(k)
        assert sum(float((w**2).sum()) for w in direction) == pytest.approx(3, rel=1e-12)
        assert flow.speeds[k] == pytest.approx(float(saddles.speed_of(direction, x, G)), rel=1e-9)


def test_limit_flow_stays_on_an_escape_ray():
    """Started on an escape direction, the direction does not move and the norm grows by exactly
    1 + eta0 L^{1-L/2} s per step (Proposition 2.2's discrete form: grad L0(rho) = -s rho)."""
    rho, X, G = _smooth_direction()
    speed = float(saddles.speed_of(rho, X, G))
    flow = ed.limit_direction_flow(rho, X, G, eta0=0.1, steps=30, record_every=10)
    for k in range(len(flow.times)):
        assert ed.output_cosine(flow.direction(k), rho, X) > 1 - 1e-12
    growth = math.log1p(0.1 * 3 ** (1 - 1.5) * speed)
    np.testing.assert_allclose(flow.log_growth, growth * flow.times, rtol=1e-10)


def test_limit_flow_long_runs_renormalize(small_digits):
    """Growth beyond float64's range is kept in log_growth: a run whose norm grows by far more
    than 1e308 stays finite."""
    x, _, G = small_digits
    flow = ed.limit_direction_flow(_init(2), x, G, eta0=50.0, steps=3000, record_every=3000)
    assert flow.log_growth[-1] > math.log(1e308)
    assert np.isfinite(flow.weights[0]).all() and np.isfinite(flow.speeds).all()


def test_escape_residual_vanishes_on_an_escape_direction():
    rho, X, G = _smooth_direction()
    assert ed.escape_residual(rho, X, G) < 1e-12
    assert ed.escape_residual([5.0 * w for w in rho], X, G) < 1e-12  # any point of the ray
    rng = np.random.RandomState(1)
    other = [torch.from_numpy(rng.standard_normal(tuple(w.shape))) for w in rho]
    assert ed.escape_residual(other, X, G) > 1e-3


def test_output_cosine_ignores_permutations_and_rescalings():
    rng = np.random.RandomState(2)
    X = torch.from_numpy(rng.standard_normal((10, 3)))
    weights = [torch.from_numpy(rng.standard_normal(s)) for s in ((5, 3), (4, 5), (2, 4))]
    p, q = torch.from_numpy(rng.permutation(5)), torch.from_numpy(rng.permutation(4))
    other = [3.0 * weights[0][p], 0.5 * weights[1][q][:, p], 7.0 * weights[2][:, q]]
    assert ed.output_cosine(weights, other, X) == pytest.approx(1.0, abs=1e-12)
    flipped = [*weights[:2], -weights[2]]
    assert ed.output_cosine(weights, flipped, X) == pytest.approx(-1.0, abs=1e-12)


def test_compare_directions_of_a_direction_with_itself(small_digits):
    x, _, G = small_digits
    search = saddles.escape_search(x, G, depth=3, width=8, seeds=[0], steps=300)
    best = search.direction(0)
    same = ed.compare_directions([2.0 * w for w in best], best, x, G)
    assert same["speed_ratio"] == pytest.approx(1.0, abs=1e-12)
    assert same["output_cosine"] == pytest.approx(1.0, abs=1e-12)
    assert same["speed"] == pytest.approx(float(search.speeds[0]), rel=1e-9)
    np.testing.assert_allclose(same["tails"], same["reference_tails"], atol=1e-12)


def test_weak_balance_is_conserved_up_to_the_second_order_term(small_digits):
    """D_{k+1} - D_k = eta_k^2 (|g_row|^2 - |g_col|^2) exactly for a ReLU network (the first-order
    term cancels); checked to rounding (1e-12 of the neurons' norms) over 400 steps."""
    x, y, _ = small_digits
    drift = ed.balance_drift(_init(4, width=8), x, y, eta0=1.0, steps=400, record_every=100)
    change = drift.balance - drift.balance[0]
    assert np.abs(change).max() > 1e-6  # gradient descent does move D ...
    residual = np.abs(change - drift.second_order).max() / drift.size.max()
    assert residual < 1e-12  # ... by the second-order term only


def test_weak_balance_drift_shrinks_with_the_step(small_digits):
    """Over the same time s = eta0 k, the second-order drift sum_k eta_k^2 (...) is first order in
    eta0: halving the step halves it, up to the O(eta0) change of the trajectory itself (20 %)."""
    x, y, _ = small_digits
    coarse = ed.balance_drift(_init(3), x, y, eta0=0.4, steps=200, record_every=200)
    fine = ed.balance_drift(_init(3), x, y, eta0=0.2, steps=400, record_every=400)
    ratio = np.abs(coarse.second_order[-1]).max() / np.abs(fine.second_order[-1]).max()
    assert ratio == pytest.approx(2.0, rel=0.2)


def test_balance_drift_follows_the_training_run(small_digits):
    """The step-by-step loop is the iteration of saddle_to_saddle_run (1e-10, the library's
    agreement between orders of summation over a few hundred steps)."""
    x, y, _ = small_digits
    drift = ed.balance_drift(_init(4), x, y, eta0=1.0, steps=300, record_every=100)
    run = saddles.saddle_to_saddle_run(x, y, depth=4, width=8, init_scale=1 / 8, eta0=1.0,
                                       steps=300, seed=0, record_every=100)  # fmt: skip
    np.testing.assert_allclose(drift.losses, run.losses, rtol=1e-10)
    for mine, theirs in zip(drift.final, ed.trajectory_weights(run, -1), strict=True):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=0, atol=1e-10)


def test_weak_balance_of_a_balanced_network():
    """Rows and columns of equal norms give D = 0; the shapes follow the hidden layers."""
    w1 = torch.tensor([[3.0, 4.0], [1.0, 0.0]], dtype=DT)
    w2 = torch.tensor([[0.0, 1.0], [5.0, 0.0], [0.0, 0.0]], dtype=DT)
    (d,) = ed.weak_balance([w1, w2])
    np.testing.assert_allclose(d, [0.0, 0.0])
    shapes = [len(d) for d in ed.weak_balance(_init(4, width=6))]
    assert shapes == [6, 6, 6]


def test_on_sphere():
    weights = [torch.full((2, 3), 1e200, dtype=DT), torch.full((1, 2), 1e200, dtype=DT)]
    sphere = ed.on_sphere(weights)
    assert sum(float((w**2).sum()) for w in sphere) == pytest.approx(2.0, rel=1e-12)


def test_plateau_exit():
    losses = [2.3, 2.3, 2.29, 2.27, 1.0, 0.5]
    assert ed.plateau_exit(losses, height=2.3) == 2  # 2.27 is the first value 0.02 below
    assert ed.plateau_exit([2.0, 1.0], height=2.3) is None  # below from the start
    assert ed.plateau_exit([2.3, 2.3], height=2.3) is None  # never leaves
    assert ed.plateau_exit(losses, height=2.3, drop=0.5) == 3


def test_trajectory_weights_reads_a_record(small_digits):
    x, y, _ = small_digits
    run = saddles.saddle_to_saddle_run(x, y, depth=3, width=4, init_scale=0.25, eta0=1.0,
                                       steps=20, seed=0, record_every=10)  # fmt: skip
    last = ed.trajectory_weights(run, -1)
    assert [tuple(w.shape) for w in last] == [(4, 64), (4, 4), (10, 4)]
    np.testing.assert_array_equal(last[1].numpy(), run["W2"][2])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda X, G: ed.escape_residual([torch.ones(2, 3, dtype=DT)], X, G), "2 to"),
        (lambda X, G: ed.escape_residual([torch.ones(2, 3, dtype=DT),
                                          torch.ones(1, 3, dtype=DT)], X, G), "columns"),
        (lambda X, G: ed.escape_residual([torch.zeros(2, 3, dtype=DT),
                                          torch.zeros(1, 2, dtype=DT)], X, G), "zero"),
        (lambda X, G: ed.escape_residual([torch.ones(2, 4, dtype=DT),
                                          torch.ones(1, 2, dtype=DT)], X, G), "X must"),
        (lambda X, G: ed.escape_residual([torch.ones(2, 3, dtype=DT),
                                          torch.ones(2, 2, dtype=DT)], X, G), "G must"),
        (lambda X, G: ed.plateau_exit([2.0, 1.0], height=2.0, drop=-1.0), "drop"),
    ],
)  # fmt: skip
def test_bad_inputs_name_the_argument(call, message):
    X = torch.ones(5, 3, dtype=DT)
    G = torch.ones(5, 1, dtype=DT)
    with pytest.raises(ValueError, match=message):
        call(X, G)


def test_balance_drift_rejects_labels_beyond_the_outputs(small_digits):
    x, y, _ = small_digits
    weights = [torch.ones(4, 64, dtype=DT), torch.ones(3, 4, dtype=DT)]  # 3 outputs, 10 classes
    with pytest.raises(ValueError, match="labels must be class indices"):
        ed.balance_drift(weights, x, y, eta0=1.0, steps=2)


# --------------------------------------------------------------------------------------------
# Bad input at the public boundary (the cases benchmarks/bad_inputs.py found)
# --------------------------------------------------------------------------------------------


def test_compare_directions_rejects_an_all_zero_X():
    """On X = 0 every output vanishes, both speeds are 0 and their ratio undefined (was nan)."""
    rho, X, G = _smooth_direction()
    with pytest.raises(ValueError, match="X must not be all zero"):
        ed.compare_directions(rho, rho, torch.zeros_like(X), G)


def test_compare_directions_rejects_a_reference_of_speed_zero():
    """A reference whose first layer switches every neuron off on positive data has speed 0."""
    rho, X, G = _smooth_direction()
    dead = [-rho[0].abs() - 1.0, *rho[1:]]  # pre-activations < 0 on X > 0: all ReLUs off
    with pytest.raises(ValueError, match="reference must have a non-zero speed"):
        ed.compare_directions(rho, dead, X, G)


@pytest.mark.parametrize("steps", [10**12, 2**64])
def test_limit_direction_flow_rejects_absurd_steps_before_allocating(steps):
    """The record count is checked before any record exists (was a MemoryError)."""
    rho, X, G = _smooth_direction()
    with pytest.raises(ValueError, match="steps"):
        ed.limit_direction_flow(rho, X, G, eta0=0.1, steps=steps, record_every=3)


@pytest.mark.parametrize("steps", [10**12, 2**64])
def test_balance_drift_rejects_absurd_steps_before_allocating(small_digits, steps):
    """Too many records (10^12 / 2) or steps beyond MAX_STEPS (2^64): a ValueError naming steps,
    not a MemoryError or an OverflowError; nor does a single record make 10^12 steps pass."""
    x, y, _ = small_digits
    with pytest.raises(ValueError, match="steps"):
        ed.balance_drift(_init(3), x, y, eta0=0.1, steps=steps, record_every=2)
    with pytest.raises(ValueError, match="steps"):
        ed.balance_drift(_init(3), x, y, eta0=0.1, steps=steps, record_every=steps)


def test_balance_drift_rejects_a_step_whose_square_overflows(small_digits):
    """η₀ = 1e300 makes η_k² overflow float64 at the first step: a ValueError naming eta0 (a
    NumericalFailure), not Python's OverflowError."""
    x, y, _ = small_digits
    with pytest.raises(ValueError, match="eta0"):
        ed.balance_drift(_init(3), x, y, eta0=1e300, steps=3, record_every=1)


def test_plateau_exit_needs_a_start_on_the_plateau():
    """A loss that starts above height + drop is not on the plateau: no end of it to report
    (before, the record before the fall was returned: here record 0, the loss 5.0)."""
    assert ed.plateau_exit([5.0, 1.0], height=2.3) is None
    assert ed.plateau_exit([2.31, 2.3, 1.0], height=2.3) == 1  # within drop of height: on it
    assert ed.plateau_exit([2.3, 2.6, 1.0], height=2.3) == 1  # a rise after the start counts


def test_plateau_exit_agrees_with_find_plateaus_on_a_sharp_fall():
    """The docstring's sufficient condition, on random curves that meet it: records 0 … e less
    than drop/2 from the height, record e + 1 below height − 3 drop/2, and a window from e + 1
    that spans at least drop; then find_plateaus (tolerance = drop) starts with (0, e)."""
    rng = np.random.RandomState(0)
    height, drop, window = math.log(10), 0.02, 5
    for _ in range(200):
        e = int(rng.randint(window - 1, 40))
        flat = height + rng.uniform(-0.49, 0.49, e + 1) * drop
        # each further record at least 0.3 drop lower: any window from e + 1 spans >= 1.2 drop
        fall = height - drop * (1.21 + rng.uniform(0.3, 3, int(rng.randint(window, 30))).cumsum())
        tail = rng.uniform(0, 0.2, int(rng.randint(0, 20)))  # anything after the fall
        losses = np.concatenate([flat, fall, tail])
        first, last, _ = saddles.find_plateaus(losses, window=window, tolerance=drop)[0]
        assert (first, last) == (0, e)
        assert ed.plateau_exit(losses, height=height, drop=drop) == e


def test_plateau_exit_differs_from_find_plateaus_on_a_slow_descent():
    """A loss falling by 0.3 drop per record: record 4 is the first below height − drop (3 is
    returned), while no window of 5 records (range 1.2 drop) is flat, so find_plateaus has none."""
    losses = math.log(10) - 0.006 * np.arange(12)
    assert ed.plateau_exit(losses, height=math.log(10)) == 3
    assert saddles.find_plateaus(losses, window=5, tolerance=0.02) == []
