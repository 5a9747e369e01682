"""Tests of lib.networks.saddles against closed forms (Bantzis, Simon & Jacot 2025)."""

import math

import numpy as np
import pytest
import torch

from lib.engine import flow
from lib.networks import saddles

DT = torch.float64


@pytest.fixture(scope="module")
def circle():
    return saddles.example1()


def test_rank1_speed_of_example1_is_sqrt2_minus_1(circle):
    X, G = circle
    # exact enumeration: only floating-point rounding separates it from the closed form
    assert abs(saddles.rank1_escape_speed(X, G) - (math.sqrt(2) - 1)) < 1e-12


def test_rank1_speed_beats_every_sampled_direction_and_is_attained():
    rng = np.random.RandomState(3)
    X = torch.from_numpy(rng.standard_normal((30, 2)))
    for G in (
        torch.from_numpy(rng.standard_normal(30)),
        torch.from_numpy(rng.standard_normal((30, 3))),
    ):
        exact = saddles.rank1_escape_speed(X, G)
        angles = np.linspace(0, 2 * np.pi, 200_001)
        sampled = saddles.rank1_speed_profile(X, G, angles)
        assert sampled.max() <= exact + 1e-12
        # the objective is Lipschitz in φ with constant ≤ Σ|G_i|‖x_i‖; grid spacing 3e-5
        lipschitz = float(torch.linalg.norm(G.reshape(30, -1), dim=1) @ torch.linalg.norm(X, dim=1))
        assert exact - sampled.max() <= lipschitz * (angles[1] - angles[0])


def test_rank1_speed_in_one_dimension():
    X = torch.tensor([[1.0], [-2.0], [3.0]], dtype=DT)
    G = torch.tensor([1.0, -1.0, 0.5], dtype=DT)
    # w = +1: 1 + 1.5 = 2.5; w = −1: −1·2 = −2 -> |·| = 2
    assert saddles.rank1_escape_speed(X, G) == pytest.approx(2.5, abs=1e-14)


def test_rank1_speed_refuses_higher_dimensions():
    with pytest.raises(ValueError, match="d_in"):
        saddles.rank1_escape_speed(torch.ones((4, 3), dtype=DT), torch.ones(4, dtype=DT))


def test_linear_speed_and_upper_bound(circle):
    X, G = circle
    assert saddles.linear_escape_speed(X, G) == pytest.approx(0.0, abs=1e-14)
    assert saddles.speed_upper_bound(X, G) == pytest.approx(8.0, rel=1e-14)
    rng = np.random.RandomState(0)
    X2, G2 = torch.from_numpy(rng.standard_normal((9, 4))), torch.from_numpy(rng.standard_normal(9))
    assert saddles.linear_escape_speed(X2, G2) == pytest.approx(float((G2 @ X2).norm()), rel=1e-13)


def test_lipschitz_bound_of_example1_and_random_networks(circle):
    X, G = circle
    bound = saddles.lipschitz_speed_bound(X, G)
    # the cheapest plan pairs each point with a neighbour at distance 2 sin(pi/8)
    assert bound == pytest.approx(8 * math.sin(math.pi / 8), rel=1e-9)
    assert bound <= saddles.speed_upper_bound(X, G)
    # no network on its sphere beats it, whatever the depth (random draws, both signs of L0)
    rng = np.random.RandomState(1)
    for depth in (2, 3, 5):
        for _ in range(50):
            widths = [2] + [int(rng.randint(1, 6)) for _ in range(depth - 1)] + [1]
            shapes = zip(widths[1:], widths[:-1], strict=True)
            ws = [torch.from_numpy(rng.standard_normal(shape)) for shape in shapes]
            value = float(saddles.speed_of(ws, X, G))
            assert abs(value) <= bound + 1e-12
    assert float(saddles.speed_of(saddles.example1_rank2_weights(), X, G)) <= bound
    # unbalanced signs: the surplus goes to the origin at cost |G_i| ||x_i||
    X2 = torch.tensor([[1.0, 0.0], [3.0, 0.0]], dtype=DT)
    G2 = torch.tensor([2.0, -1.0], dtype=DT)
    assert saddles.lipschitz_speed_bound(X2, G2) == pytest.approx(2.0 + 1.0, rel=1e-9)


def test_eq2_direction_has_speed_one_half(circle):
    X, G = circle
    rho = saddles.example1_rank2_weights()
    assert float(sum((w**2).sum() for w in rho)) == pytest.approx(3.0, rel=1e-15)
    assert float(saddles.localized_loss(rho, X, G)) == pytest.approx(-0.5, abs=1e-15)
    flipped = [rho[0], rho[1], -rho[2]]  # the sign printed in the paper: ascent
    assert float(saddles.localized_loss(flipped, X, G)) == pytest.approx(0.5, abs=1e-15)
    stats = saddles.layer_statistics(rho, X)
    assert np.allclose(stats["singular_values"][0], [math.sqrt(0.5)] * 2, atol=1e-15)
    assert stats["tail_weights"][1] == pytest.approx(0.0, abs=1e-15)


def test_backprop_gradient_matches_autograd():
    rng = np.random.RandomState(1)
    X = torch.from_numpy(rng.standard_normal((7, 3)))
    G = torch.from_numpy(rng.standard_normal((7, 2)))
    weights = [torch.from_numpy(rng.standard_normal(s)) for s in ((5, 3), (4, 5), (2, 4))]
    value, grads = saddles.localized_gradient(weights, X, G)
    leaves = [w.clone().requires_grad_(True) for w in weights]
    reference = saddles.localized_loss(leaves, X, G)
    auto = torch.autograd.grad(reference, leaves)
    # two summation orders of the same float64 sums
    assert float(value) == pytest.approx(float(reference.detach()), rel=1e-12)
    for g, a in zip(grads, auto, strict=True):
        assert torch.allclose(g, a, rtol=1e-12, atol=1e-14)


def test_search_stays_on_sphere_and_below_the_bounds(circle):
    X, G = circle
    result = saddles.escape_search(X, G, depth=2, width=6, seeds=list(range(8)), steps=600)
    norms = sum((w**2).sum(dim=(-1, -2)) for w in result.weights)
    assert torch.allclose(norms, torch.full_like(norms, 2.0), rtol=1e-12)
    # depth 2: no direction beats the one-neuron speed s*(2) = s₁
    assert result.speeds.max() <= math.sqrt(2) - 1 + 1e-9
    assert result.speeds.max() >= math.sqrt(2) - 1 - 1e-3
    assert float(saddles.speed_of(result.direction(result.best), X, G)) == pytest.approx(
        result.speeds.max(), rel=1e-12
    )


def test_depth3_search_finds_the_rank2_escape(circle):
    X, G = circle
    result = saddles.escape_search(X, G, depth=3, width=16, seeds=list(range(16)), steps=2000)
    assert result.speeds.max() <= saddles.speed_upper_bound(X, G)
    assert result.speeds.max() >= 0.5 - 1e-3
    best = saddles.layer_statistics(result.direction(result.best), X)
    # the rank-2 first layer of eq. (2): two equal singular values, the rest ~0
    s = best["singular_values"][0]
    assert s[1] / s[0] > 0.9


def test_escape_speed_and_direction_agree(circle):
    X, G = circle
    speed = saddles.escape_speed(X, G, depth=3, width=4, seed=5, steps=300)
    direction = saddles.escape_direction(X, G, depth=3, width=4, seed=5, steps=300)
    assert float(saddles.speed_of(direction, X, G)) == pytest.approx(speed, rel=1e-12)


def test_restarts_take_the_best_start(circle):
    X, G = circle
    assert saddles.restart_seeds(5, 1) == [5] and saddles.restart_seeds(5, 3) == [15, 16, 17]
    starts = saddles.escape_search(X, G, depth=3, width=4, seeds=[15, 16, 17], steps=300)
    best = saddles.escape_speed(X, G, depth=3, width=4, seed=5, steps=300, restarts=3)
    assert best == starts.speeds.max()  # the same batched search: one computation path, exact
    assert len(set(starts.speeds.round(6))) > 1  # the starts differ, so "best" means something
    direction = saddles.escape_direction(X, G, depth=3, width=4, seed=5, steps=300, restarts=3)
    assert float(saddles.speed_of(direction, X, G)) == pytest.approx(best, rel=1e-12)
    with pytest.raises(ValueError, match="restarts"):
        saddles.escape_speed(X, G, depth=3, width=4, seed=5, restarts=0)


def test_radius_formula_against_gradient_flow():
    # a smooth escape direction: positive data, G < 0, the rank-1 linear direction
    rng = np.random.RandomState(0)
    X = torch.from_numpy(rng.uniform(0.1, 1, (12, 3)))
    G = torch.from_numpy(-rng.uniform(0.1, 1, 12) / 12)
    v = -(G @ X) / (G @ X).norm()
    w1 = torch.zeros(4, 3, dtype=DT)
    w1[0] = v
    w2 = torch.zeros(4, 4, dtype=DT)
    w2[0, 0] = 1
    w3 = torch.zeros(1, 4, dtype=DT)
    w3[0, 0] = 1
    rho = [w1, w2, w3]
    speed = float(saddles.speed_of(rho, X, G))
    assert speed == pytest.approx(saddles.linear_escape_speed(X, G), rel=1e-12)
    names = ["W1", "W2", "W3"]
    start = {n: 0.1 * w for n, w in zip(names, rho, strict=True)}
    traj = flow.gradient_flow(
        lambda p: saddles.localized_loss([p[n] for n in names], X, G), start, np.linspace(0, 8, 9)
    )
    radius = np.sqrt(sum((traj[n] ** 2).sum(axis=(1, 2)) for n in names))
    formula = saddles.radius_along_escape(
        traj.times, radius0=0.1 * math.sqrt(3), speed=speed, depth=3
    )
    # solver tolerances rtol 1e-10, atol 1e-12
    assert np.max(np.abs(radius - formula)) < 1e-7
    printed = saddles.radius_along_escape(
        traj.times, radius0=0.1 * math.sqrt(3), speed=speed, depth=3, normalization="printed"
    )
    assert np.max(np.abs(radius - printed)[np.isfinite(printed)]) > 1e-2


def test_radius_two_layers_is_exponential():
    r = saddles.radius_along_escape(np.array([0.0, 1.0]), radius0=0.5, speed=0.3, depth=2)
    # s_u = s/2 and R = R0 exp(2 s_u t)
    assert r[1] == pytest.approx(0.5 * math.exp(0.3), rel=1e-14)


def test_deepen_is_never_slower():
    rng = np.random.RandomState(2)
    X = torch.from_numpy(rng.standard_normal((10, 3)))
    G = torch.from_numpy(rng.standard_normal(10))
    checked = 0
    for _ in range(20):
        weights = [torch.from_numpy(rng.standard_normal(s)) for s in ((5, 3), (5, 5), (1, 5))]
        scale = math.sqrt(3 / float(sum((w**2).sum() for w in weights)))
        weights = [w * scale for w in weights]
        speed = float(saddles.speed_of(weights, X, G))
        if speed <= 0:
            continue
        for extra in (1, 3):
            deeper = saddles.deepen(weights, X, G, extra)
            assert len(deeper) == 3 + extra
            assert float(sum((w**2).sum() for w in deeper)) == pytest.approx(3 + extra, rel=1e-12)
            assert float(saddles.speed_of(deeper, X, G)) >= speed - 1e-12
        checked += 1
    assert checked >= 5


def test_theorem_constants_for_example1(circle):
    X, G = circle
    r = 16.0  # ‖X‖_F‖G‖_F / s* = 8 / 0.5
    assert saddles.theorem31_constant(X, G, 0.5) == pytest.approx(r * math.sqrt(2 * math.log(r)))
    bound = saddles.theorem31_bound(X, G, 0.5, [1, 10_000])
    assert np.isinf(bound[0]) and 0 < bound[1] < 8
    assert saddles.proposition33_bound(G, 0.0, 0.5) == 0.0
    assert math.isinf(saddles.proposition33_bound(G, 1.0, 0.5))
    assert saddles.proposition34_bound(X, G, 0.5, 6, 0.5) == pytest.approx(2 * math.log(r) / 3)


def test_log_stable_rank_budget_of_prop34(circle):
    X, G = circle
    result = saddles.escape_search(X, G, depth=4, width=8, seeds=list(range(6)), steps=800)
    for i in range(6):
        if result.speeds[i] <= 0:
            continue
        stats = saddles.layer_statistics(result.direction(i), X)
        budget = 2 * math.log(saddles.speed_upper_bound(X, G) / result.speeds[i])
        assert np.nansum(stats["log_stable_rank"]) <= budget + 1e-9


def test_cross_entropy_gradient_and_digits_run():
    from lib.book.data import digits

    x, y = digits(60, every=20)
    G = saddles.cross_entropy_gradient(y, 10)
    assert torch.allclose(G.sum(dim=1), torch.zeros(60, dtype=DT), atol=1e-15)
    traj = saddles.saddle_to_saddle_run(
        x, y, depth=4, width=8, init_scale=1 / 8, eta0=1.0, steps=20, seed=0, record_every=10
    )
    # outputs of a small initialization are ~0: the loss starts at log 10
    assert traj.losses[0] == pytest.approx(math.log(10), abs=1e-3)


@pytest.mark.parametrize(
    "call",
    [
        lambda X, G: saddles.rank1_escape_speed(X, G[:5]),
        lambda X, G: saddles.rank1_escape_speed(X, torch.zeros(8, dtype=DT)),
        lambda X, G: saddles.rank1_escape_speed(X.float(), G),
        lambda X, G: saddles.escape_search(X, G, depth=1, width=4, seeds=[0]),
        lambda X, G: saddles.escape_search(X, G, depth=3, width=True, seeds=[0]),
        lambda X, G: saddles.escape_search(X, G, depth=3, width=4, seeds=[0], lr=(0.1,)),
        lambda X, G: saddles.radius_along_escape(
            [1.0], radius0=1, speed=1, depth=3, normalization="x"
        ),
        lambda X, G: saddles.theorem31_constant(X, G, 9.0),
        lambda X, G: saddles.proposition34_bound(X, G, 0.5, 3, 1.5),
        lambda X, G: saddles.deepen(saddles.example1_rank2_weights(), X, G, 0),
        lambda X, G: saddles.lipschitz_speed_bound(X, torch.ones((8, 2), dtype=DT)),
        lambda X, G: saddles.cross_entropy_gradient(torch.tensor([0, 11]), 10),
        lambda X, G: saddles.speed_of([torch.zeros((2, 2), dtype=DT)] * 2, X, G),
        lambda X, G: saddles.layer_statistics([torch.ones((4, 3), dtype=DT)], X),
        lambda X, G: saddles.localized_gradient([torch.ones((1, 2), dtype=DT)] * 2, X, G),
        lambda X, G: saddles.deepen(
            [torch.ones((3, 2), dtype=DT), torch.ones((2, 3), dtype=DT)], X, G, 1
        ),
        lambda X, G: saddles.saddle_to_saddle_run(
            X, torch.tensor([-1] * 8), depth=3, width=2, init_scale=0.1, eta0=1.0, steps=1, seed=0
        ),
    ],
)
def test_bad_input_raises(circle, call):
    X, G = circle
    with pytest.raises(ValueError):
        call(X, G)


def test_find_plateaus():
    losses = np.concatenate([np.full(10, 2.3), np.linspace(2.3, 1.8, 5), np.full(8, 1.8)])
    found = saddles.find_plateaus(losses, window=4, tolerance=0.01)
    assert [(a, b) for a, b, _ in found] == [(0, 10), (14, 22)]
    assert found[0][2] == pytest.approx(2.3) and found[1][2] == pytest.approx(1.8)
    with pytest.raises(ValueError):
        saddles.find_plateaus(losses, window=1, tolerance=0.01)


def test_find_plateaus_merges_overlapping_stretches():
    # a blip separates two plateaus; flat windows that overlap are one plateau
    losses = np.concatenate([np.full(8, 2.0), [2.05], np.full(8, 2.0)])
    found = saddles.find_plateaus(losses, window=3, tolerance=0.01)
    assert [(a, b) for a, b, _ in found] == [(0, 7), (9, 16)]
    wiggle = np.array([1.0, 1.0, 1.0, 1.0, 1.008, 1.0, 1.0, 1.0, 1.0])
    merged = saddles.find_plateaus(wiggle, window=4, tolerance=0.005)
    assert [(a, b) for a, b, _ in merged] == [(0, 3), (5, 8)]
    joined = saddles.find_plateaus(np.full(12, 1.0), window=3, tolerance=0.01)
    assert [(a, b) for a, b, _ in joined] == [(0, 11)]


# --- Tiny and huge inputs, sizes (issue: every module's bad input) ---------------------------


def test_stable_rank_and_tail_mass_are_scale_free():
    # a 1e-200 matrix used to give srank nan and tail 0 (its squared norms underflow)
    A = torch.tensor([[1.0, 0.5, -0.3], [2.0, 0.1, 0.4]], dtype=DT)
    for scale in (1e-200, 1e200):
        # the scaled entries are rounded once (relative 1e-16); srank moves by about as much
        assert saddles.stable_rank(A * scale) == pytest.approx(saddles.stable_rank(A), rel=1e-13)
        assert saddles.tail_mass(A * scale) == pytest.approx(saddles.tail_mass(A), rel=1e-13)
    with pytest.raises(ValueError, match="zero matrix"):
        saddles.stable_rank(torch.zeros((2, 2), dtype=DT))


def test_speeds_and_bounds_of_huge_data_are_finite(circle):
    X, G = circle
    # powers of two: the scaled data are exact, and so are the homogeneous answers
    big = 2.0**900
    assert saddles.speed_upper_bound(X * big, G) == saddles.speed_upper_bound(X, G) * big
    assert saddles.rank1_escape_speed(X, G * big) == saddles.rank1_escape_speed(X, G) * big
    rho = saddles.example1_rank2_weights()
    assert float(saddles.speed_of([w * 2.0**-400 for w in rho], X, G)) == float(
        saddles.speed_of(rho, X, G)
    )
    with pytest.raises(ValueError, match="not finite"):  # ‖X‖‖G‖ itself beyond float64
        saddles.speed_upper_bound(X * 1e300, G * 1e300)


def test_radius_is_inf_only_after_the_blow_up():
    # L = 3, R0 = 1, s_u = 1 ("printed"): T* = 1/3; exp overflow for L = 2 is an error
    radius = saddles.radius_along_escape([0.0, 0.1, 0.5], radius0=1.0, speed=1.0, depth=3,
                                         normalization="printed")  # fmt: skip
    assert np.isfinite(radius[:2]).all() and radius[2] == np.inf
    with pytest.raises(ValueError, match="overflows"):
        saddles.radius_along_escape([1e3], radius0=1.0, speed=1.0, depth=2,
                                    normalization="printed")  # fmt: skip
    with pytest.raises(ValueError, match="depth must be at most"):
        saddles.radius_along_escape([1.0], radius0=1.0, speed=1.0, depth=10**12)


def test_sizes_are_checked_before_anything_is_allocated(circle):
    X, G = circle
    with pytest.raises(ValueError, match="restarts"):
        saddles.restart_seeds(0, 10**12)
    with pytest.raises(ValueError, match="width must be at most"):
        saddles.escape_search(X, G, depth=3, width=2**64, seeds=[0], steps=2)
    with pytest.raises(ValueError, match="history"):
        saddles.escape_search(X, G, depth=3, width=2, seeds=[0, 1], steps=10**12)
    with pytest.raises(ValueError, match="recorded trajectory"):
        saddles.localized_descent(saddles.example1_rank2_weights(), X, G, lr=0.1, steps=10**12)
    with pytest.raises(ValueError, match="extra must be at most"):
        saddles.deepen(saddles.example1_rank2_weights(), X, G, 10**12)


def test_escape_search_result_checks_its_fields(circle):
    X, G = circle
    search = saddles.escape_search(X, G, depth=3, width=2, seeds=[0, 1], steps=3)
    with pytest.raises(ValueError, match="speeds must have shape"):
        saddles.EscapeSearch(search.speeds[:1], search.weights, search.history, search.seeds)
    with pytest.raises(ValueError, match="S = 1 runs"):
        saddles.EscapeSearch(search.speeds[:1], search.weights, search.history[:, :1], (0,))


def test_inputs_that_require_grad_are_numbers_too(circle):
    X, G = (v.clone().requires_grad_(True) for v in circle)
    rho = [w.clone().requires_grad_(True) for w in saddles.example1_rank2_weights()]
    # the same float64 numbers through the same code: equal answers
    assert saddles.rank1_escape_speed(X, G) == saddles.rank1_escape_speed(*circle)
    assert saddles.lipschitz_speed_bound(X, G) == saddles.lipschitz_speed_bound(*circle)
    stats = saddles.layer_statistics(rho, X)
    np.testing.assert_array_equal(
        stats["tail_weights"], saddles.layer_statistics(saddles.example1_rank2_weights(),
                                                        circle[0])["tail_weights"]
    )  # fmt: skip
    assert saddles.speed_of(rho, X, G).requires_grad  # still differentiable
