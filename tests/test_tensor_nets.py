"""Tests of lib.networks.tensor_nets: the closed forms of Yun et al. 2021 against gradient flow and
GD."""

import numpy as np
import pytest
import torch
from scipy.integrate import quad, solve_ivp
from scipy.optimize import minimize

from lib.engine.flow import gradient_descent, gradient_flow, log_grid
from lib.networks import tensor_nets as tn

DT = torch.float64
X1 = np.array([[1.0, 2.0]])  # the single regression point of the paper's Figure 1
Y1 = np.array([1.0])


def random_instance(seed, n=2, d=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = rng.standard_normal(n)
    w_bar = rng.uniform(0.5, 1.5, d) * rng.choice([-1.0, 1.0], d)
    return X, y, w_bar


# --- Lemma 5.1: h_L and friends -----------------------------------------------------------


@pytest.mark.parametrize("depth", [2, 3, 4, 5, 6])
def test_h_L_solves_the_ode_of_lemma_5_1(depth):
    t = 0.45 * min(1.0, tn.pole(depth))
    sol = solve_ivp(
        lambda _, z: [z[0] ** (depth - 2) * z[1], z[0] ** (depth - 1)],
        (0, t),
        [1.0, 0.0],
        rtol=1e-12,
        atol=1e-14,
    )
    p, q = sol.y[:, -1]
    # tolerance: the ODE solver's accuracy at rtol 1e-12
    assert tn.h_L(t, depth) == pytest.approx(p ** (depth - 1) * q, rel=1e-9)
    assert tn.Phi_L(t, depth) == pytest.approx(q * q / 2, rel=1e-9)
    assert tn.h_L(-t, depth) == pytest.approx(-tn.h_L(t, depth), rel=1e-14)  # odd


@pytest.mark.parametrize("depth", [2, 3, 4, 5, 7])
def test_inverse_and_integrals(depth):
    ys = np.array([-50.0, -1.3, -1e-3, 0.0, 2e-4, 0.7, 8.0, 1e6])
    back = tn.h_L(tn.h_L_inverse(ys, depth), depth)
    np.testing.assert_allclose(back, ys, rtol=1e-10, atol=1e-15)  # round trip in float64
    for y in (0.3, 4.0, 60.0):
        integral = quad(lambda u: tn.h_L_inverse(u, depth), 0, y, epsabs=1e-13, epsrel=1e-12)[0]
        assert tn.H_L(y, depth) == pytest.approx(integral, rel=1e-9)  # quadrature accuracy
    assert tn.H_L(1e-4, depth) == pytest.approx(0.5e-8, rel=1e-6)  # H_L(y) ≈ y²/2 near 0
    # h_L' by central differences (step 1e-6: truncation ~1e-12, round-off ~1e-10)
    t = 0.3 * min(1.0, tn.pole(depth))
    slope = (tn.h_L(t + 1e-6, depth) - tn.h_L(t - 1e-6, depth)) / 2e-6
    assert tn.h_L_derivative(t, depth) == pytest.approx(slope, rel=1e-7)


def test_closed_forms_for_depth_2_and_3():
    y = np.array([0.2, 3.0, 40.0])
    w = np.array([brent_w(v, 2) for v in y])
    h2 = y / 2 * np.arcsinh(2 * y) - (np.sqrt(1 + 4 * y * y) - 1) / 4
    np.testing.assert_allclose(tn.H_L(y, 2), h2, rtol=1e-13)
    np.testing.assert_allclose(tn.H_L(y, 2), y * np.arcsinh(w) - w * w / 2, rtol=1e-12)
    t = np.array([0.1, 1.0, 1.5])
    np.testing.assert_allclose(tn.h_L(t, 3), np.tan(t) / np.cos(t) ** 2, rtol=1e-14)
    assert tn.pole(3) == pytest.approx(np.pi / 2, rel=1e-14)
    assert tn.pole(4) == pytest.approx(1.0, rel=1e-14)


def brent_w(y, depth):
    from scipy.optimize import brentq

    return brentq(lambda w: w * (1 + w * w) ** ((depth - 1) / 2) - y, 0, 2 * max(1, y))


# --- Theorem 4 / Corollary 5 --------------------------------------------------------------


@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("alpha", [0.3, 1.0])
def test_diagonal_net_limit_matches_gradient_flow(depth, alpha):
    X, y, w_bar = random_instance(10 * depth + int(10 * alpha))
    predicted = tn.diagonal_net_limit(X, y, alpha=alpha, depth=depth, w_bar=w_bar)
    assert predicted.shape == (5,) and predicted.dtype == np.float64
    params = tn.diagonal_params(torch.from_numpy(w_bar), alpha=alpha, depth=depth)
    loss = tn.regression_loss(tn.diagonal_coefficients, torch.from_numpy(X), torch.from_numpy(y))
    flow = gradient_flow(loss, params, log_grid(1e4, 20), log_time=True, rtol=1e-12, atol=1e-14)
    assert flow.losses[-1] < 1e-20
    reached = tn.diagonal_coefficients(flow.final).numpy()
    np.testing.assert_allclose(reached, predicted, rtol=0, atol=1e-8)


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_diagonal_gradient_matches_autograd(depth):
    X, y, w_bar = random_instance(8)
    params = tn.diagonal_params(
        torch.from_numpy(w_bar), alpha=0.7, depth=depth, last=torch.from_numpy(w_bar[::-1].copy())
    )
    value, grads = tn.diagonal_gradient(X, y)(params)
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    auto = tn.regression_loss(tn.diagonal_coefficients, X, y)(leaves)
    reference = torch.autograd.grad(auto, list(leaves.values()))
    torch.testing.assert_close(value, auto.detach(), rtol=1e-12, atol=0)
    for got, want in zip(grads.values(), reference, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_fc_gradient_matches_autograd(depth):
    X, y, _ = random_instance(12)
    gen = torch.Generator().manual_seed(depth)
    params = {f"W{j}": torch.randn(5, 5, generator=gen, dtype=DT) for j in range(1, depth)}
    params[f"w{depth}"] = torch.randn(5, generator=gen, dtype=DT)
    value, grads = tn.fc_gradient(X, y)(params)
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    auto = tn.regression_loss(tn.fc_coefficients, X, y)(leaves)
    reference = torch.autograd.grad(auto, list(leaves.values()))
    torch.testing.assert_close(value, auto.detach(), rtol=1e-12, atol=0)
    for name, want in zip(leaves, reference, strict=True):
        torch.testing.assert_close(grads[name], want, rtol=1e-11, atol=1e-12)


def test_every_iterate_follows_the_closed_form_path():
    """β(t) = α^L|w̄|^L h_L(α^{L−2}|w̄|^{L−2} Xᵀν(t)) along the flow, with ν = −∫ r."""
    X, y, w_bar = random_instance(3)
    alpha, depth = 0.5, 3
    params = tn.diagonal_params(torch.from_numpy(w_bar), alpha=alpha, depth=depth)
    loss = tn.regression_loss(tn.diagonal_coefficients, torch.from_numpy(X), torch.from_numpy(y))
    times = np.linspace(0, 40, 4001)
    flow = gradient_flow(loss, params, times, rtol=1e-12, atol=1e-14)
    betas = np.stack([tn.diagonal_coefficients(flow.at(i)).numpy() for i in range(len(times))])
    residuals = betas @ X.T - y
    # ν(t) = −∫ r by the trapezoid rule on a grid of step 0.01 (error ~1e-6 at these curvatures)
    nu = -np.concatenate([[np.zeros(2)], np.cumsum((residuals[1:] + residuals[:-1]) / 2, 0) * 0.01])
    path = tn.diagonal_net_path(X, nu, alpha=alpha, depth=depth, w_bar=w_bar)
    assert np.abs(path - betas).max() < 1e-4


def test_dual_agrees_with_direct_minimization_of_Q():
    X, y, w_bar = random_instance(7)
    alpha, depth = 0.5, 2
    limit = tn.diagonal_net_limit(X, y, alpha=alpha, depth=depth, w_bar=w_bar)
    particular = np.linalg.lstsq(X, y, rcond=None)[0]
    null = np.linalg.svd(X)[2][2:].T

    def objective(c):
        return tn.Q_objective(particular + null @ c, alpha=alpha, depth=depth, eta_bar=w_bar)

    best = minimize(objective, np.zeros(3), method="BFGS", options={"gtol": 1e-12})
    np.testing.assert_allclose(particular + null @ best.x, limit, atol=1e-5)  # BFGS accuracy
    assert objective(np.linalg.lstsq(null, limit - particular, rcond=None)[0]) <= best.fun + 1e-12


def test_small_alpha_approaches_the_minimum_l1_interpolant():
    X, y, _ = random_instance(5)
    l1 = tn.min_l1_solution(X, y)
    np.testing.assert_allclose(X @ l1, y, atol=1e-10)
    gaps = []
    for alpha in (1e-2, 1e-4, 1e-8, 1e-16, 1e-32):
        beta = tn.diagonal_net_limit(X, y, alpha=alpha, depth=2, w_bar=np.ones(5))
        gaps.append(np.linalg.norm(beta - l1))
    assert all(b < a for a, b in zip(gaps, gaps[1:], strict=False))
    assert gaps[-1] < 1e-6 * np.linalg.norm(l1)


def test_rate_of_the_l1_limit_on_one_point():
    """x = [1, 2], w̄ = 1, L = 2: β_2 → 1/2 forces e^{2ν} ≈ √2/α, so β_1 = α² sinh(2ν)/2 ≈ √2
    α/4."""
    for alpha in (1e-4, 1e-6):
        beta = tn.diagonal_net_limit(X1, Y1, alpha=alpha, depth=2, w_bar=[1.0, 1.0])
        assert beta[0] / alpha == pytest.approx(np.sqrt(2) / 4, rel=10 * alpha)  # O(α) terms


def test_large_alpha_approaches_weighted_l2():
    X, y, w_bar = random_instance(6)
    for depth in (2, 3):
        target = tn.min_l2_solution(X, y, weights=np.abs(w_bar) ** (2 * depth - 2))
        beta = tn.diagonal_net_limit(X, y, alpha=30.0, depth=depth, w_bar=w_bar)
        assert np.linalg.norm(beta - target) < 1e-3 * np.linalg.norm(target)


def test_reference_solutions_of_figure_1():
    np.testing.assert_allclose(tn.min_l2_solution(X1, Y1), [0.2, 0.4], atol=1e-14)
    np.testing.assert_allclose(tn.min_l1_solution(X1, Y1), [0.0, 0.5], atol=1e-9)
    dft = tn.min_l1_solution(X1, Y1, transform=tn.dft_matrix(2))
    np.testing.assert_allclose(dft, [1 / 3, 1 / 3], atol=1e-9)
    Xc, yc = np.array([[1.0, 2.0], [0.0, -3.0]]), np.array([1.0, -1.0])
    np.testing.assert_allclose(tn.max_margin_l2(Xc, yc), [0.2, 0.4], atol=1e-7)
    np.testing.assert_allclose(tn.min_l1_solution(Xc, yc, margin=True), [0, 0.5], atol=1e-9)


# --- Corollary 6 --------------------------------------------------------------------------


def test_corollary_6_needs_the_missing_factor():
    alpha, w_bar = 0.5, np.array([1.0, 0.3])
    corrected = tn.conv_net_limit(X1, Y1, alpha=alpha, depth=2, w_bar=w_bar)
    printed = tn.conv_net_limit(X1, Y1, alpha=alpha, depth=2, w_bar=w_bar, corrected=False)
    theorem5 = tn.two_layer_limit("conv", X1[0], 1.0, alpha=alpha, v1_bar=w_bar, v2_bar=[0, 0])
    np.testing.assert_allclose(corrected, theorem5.beta, atol=1e-10)
    assert np.abs(printed - theorem5.beta).max() > 1e-6  # far beyond the 1e-10 agreement above


@pytest.mark.parametrize("depth", [2, 3])
def test_conv_limit_matches_gradient_flow(depth):
    alpha, w_bar = 0.7, torch.tensor([1.0, 0.4], dtype=DT)
    predicted = tn.conv_net_limit(X1, Y1, alpha=alpha, depth=depth, w_bar=w_bar.numpy())

    def coefficients(params):  # depth-L full-length circular cross-correlation, d = 2, by hand
        out = params[f"w{depth}"]
        for j in range(depth - 1, 0, -1):
            w = params[f"w{j}"]
            out = torch.stack([w[0] * out[0] + w[1] * out[1], w[1] * out[0] + w[0] * out[1]])
        return out

    sample = tn.diagonal_params(
        torch.tensor([0.3, -1.2], dtype=DT),
        alpha=1.0,
        depth=depth,
        last=torch.tensor([0.5, 2.0], dtype=DT),
    )
    torch.testing.assert_close(tn.conv_coefficients(sample), coefficients(sample))

    params = tn.diagonal_params(w_bar, alpha=alpha, depth=depth)
    loss = tn.regression_loss(coefficients, torch.from_numpy(X1), torch.from_numpy(Y1))
    flow = gradient_flow(loss, params, log_grid(1e4, 10), log_time=True, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(coefficients(flow.final).numpy(), predicted, atol=1e-8)


# --- Theorem 5 ----------------------------------------------------------------------------


def test_conv_coefficients_is_the_convolutional_network():
    gen = np.random.default_rng(4)
    ws = [gen.standard_normal(4) for _ in range(3)]
    x = gen.standard_normal(4)

    def correlate(a, w):  # [a ⋆ w]_i = Σ_j a_{(i+j) mod d} w_j
        return np.array([sum(a[(i + j) % 4] * w[j] for j in range(4)) for i in range(4)])

    f = correlate(correlate(x, ws[0]), ws[1]) @ ws[2]
    beta = tn.conv_coefficients({f"w{j + 1}": torch.from_numpy(w) for j, w in enumerate(ws)})
    assert beta.numpy() @ x == pytest.approx(f, rel=1e-12)


def test_tensor_forms_compute_the_networks():
    gen = np.random.default_rng(0)
    W1, w2, x = gen.standard_normal((3, 4)), gen.standard_normal(4), gen.standard_normal(3)
    fc = tn.tensor_coefficients("fc", W1.reshape(-1, order="F"), w2).numpy()
    np.testing.assert_allclose(fc, W1 @ w2, rtol=1e-13)
    a, b = gen.standard_normal(3), gen.standard_normal(3)
    np.testing.assert_allclose(tn.tensor_coefficients("diagonal", a, b).numpy(), a * b)
    conv = tn.tensor_coefficients("conv", a, b).numpy()
    # f(x) = (x ⋆ a)ᵀ b with [x ⋆ a]_i = Σ_j x_{(i+j) mod d} a_j (0-based cross-correlation)
    corr = np.array([sum(x[(i + j) % 3] * a[j] for j in range(3)) for i in range(3)])
    assert conv @ x == pytest.approx(corr @ b, rel=1e-13)


@pytest.mark.parametrize("architecture", tn.ARCHITECTURES)
def test_closed_form_gradient_matches_autograd(architecture):
    gen = torch.Generator().manual_seed(1)
    k1 = 6 if architecture == "fc" else 3
    k2 = 2 if architecture == "fc" else 3
    v = {"v1": torch.randn(4, k1, generator=gen, dtype=DT), "v2": torch.randn(4, k2, dtype=DT)}
    X, y = torch.randn(2, 3, generator=gen, dtype=DT), torch.tensor([1.0, -1.0], dtype=DT)
    for kind in ("square", "exp"):
        value, grads = tn.two_layer_gradient(architecture, X, y, loss=kind)(v)
        leaves = {k: t.clone().requires_grad_(True) for k, t in v.items()}
        auto = tn.two_layer_loss(architecture, X, y, loss=kind)(leaves)
        reference = torch.autograd.grad(auto.sum(), list(leaves.values()))
        torch.testing.assert_close(value, auto.detach(), rtol=1e-12, atol=0)
        for got, want in zip(grads.values(), reference, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


def figure1_runs(architecture, alphas, thetas):
    z_bars = [[np.cos(t), np.sin(t)] for t in thetas]
    batch = tn.figure1_batch(architecture, alphas, z_bars, x=X1[0], y=1.0)
    return batch.params, batch.predicted


@pytest.mark.parametrize("architecture", tn.ARCHITECTURES)
def test_theorem5_against_gradient_flow_and_the_curve(architecture):
    alphas, thetas = (0.3, 1.0), np.deg2rad([20.0, 200.0])
    params, predicted = figure1_runs(architecture, alphas, thetas)
    gradient = tn.two_layer_gradient(architecture, X1, Y1, total=True)
    flow = gradient_flow(
        None, params, log_grid(1e3, 40), log_time=True, rtol=1e-12, atol=1e-14, gradient=gradient
    )
    betas = tn.tensor_coefficients(
        architecture, torch.tensor(flow["v1"]), torch.tensor(flow["v2"])
    ).numpy()
    np.testing.assert_allclose(betas[-1], predicted, atol=1e-8)
    for run, (alpha, theta) in enumerate((a, t) for a in alphas for t in thetas):
        v1, v2 = tn.figure1_init(architecture, [np.cos(theta), np.sin(theta)])
        distance = tn.curve_distance(
            architecture, X1[0], betas[:, run], alpha=alpha, v1_bar=v1, v2_bar=v2
        )
        assert distance.max() < 1e-8  # the ODE's accuracy at rtol 1e-12


@pytest.mark.parametrize("architecture", tn.ARCHITECTURES)
def test_figure1_gradient_descent_end_points(architecture):
    """The paper's setting: GD with η = 1e-3 for 5000 steps, α ∈ {0.01, 0.5, 1}."""
    thetas = np.random.default_rng(0).uniform(0, 2 * np.pi, 4)
    params, predicted = figure1_runs(architecture, (0.01, 0.5, 1.0), thetas)
    run = gradient_descent(
        None,
        params,
        1e-3,
        5000,
        record_every=5000,
        runs=12,
        gradient=tn.two_layer_gradient(architecture, X1, Y1),
    )
    end = tn.tensor_coefficients(
        architecture, torch.tensor(run["v1"][-1]), torch.tensor(run["v2"][-1])
    ).numpy()
    assert np.abs(end - predicted).max() < 1e-3


def test_small_alpha_limits_of_figure_1():
    for architecture, target in (
        ("fc", [0.2, 0.4]),
        ("diagonal", [0, 0.5]),
        ("conv", [1 / 3, 1 / 3]),
    ):
        v1, v2 = tn.figure1_init(architecture, [np.cos(1.0), np.sin(1.0)])
        gaps = [
            np.linalg.norm(
                tn.two_layer_limit(architecture, X1[0], 1.0, alpha=a, v1_bar=v1, v2_bar=v2).beta
                - target
            )
            for a in (1e-1, 1e-3, 1e-6)
        ]
        assert gaps[2] < gaps[0] and gaps[2] < 0.05


# --- Theorem 6 ----------------------------------------------------------------------------


def test_deep_fc_with_orthogonal_first_layer_is_min_l2():
    X, y, _ = random_instance(2)
    q = np.linalg.qr(np.random.default_rng(9).standard_normal((5, 5)))[0]
    params = {
        "W1": torch.tensor(0.7 * q),
        "W2": torch.eye(5, dtype=DT) * 0.7,
        "w3": torch.zeros(5, dtype=DT),
    }
    loss = tn.regression_loss(tn.fc_coefficients, torch.from_numpy(X), torch.from_numpy(y))
    flow = gradient_flow(loss, params, log_grid(1e4, 10), log_time=True)
    reached = tn.fc_coefficients(flow.final).numpy()
    np.testing.assert_allclose(reached, tn.min_l2_solution(X, y), atol=1e-8)


@pytest.mark.parametrize(("depth", "alpha"), [(2, 0.3), (3, 1.5), (4, 0.5)])
def test_orthogonal_starts_reach_min_l2_at_every_depth_and_scale(depth, alpha):
    # The chapter's symmetry argument: orthogonal W̄_l (l < L) and w̄_L = 0 give the minimum-l2
    # interpolant for every alpha and depth. Tolerance 1e-8: solver accuracy (rtol 1e-10).
    X, y, _ = random_instance(2)
    rng = np.random.default_rng(depth)
    params = {
        f"W{j}": torch.tensor(alpha * np.linalg.qr(rng.standard_normal((5, 5)))[0])
        for j in range(1, depth)
    }
    params[f"w{depth}"] = torch.zeros(5, dtype=DT)
    flow = gradient_flow(None, params, log_grid(1e5, 2), log_time=True, rtol=1e-11, atol=1e-13,
                         gradient=tn.fc_gradient(X, y))
    assert flow.losses[-1] < 1e-18
    reached = tn.fc_coefficients(flow.final).numpy()
    np.testing.assert_allclose(reached, tn.min_l2_solution(X, y), atol=1e-8)


# --- Bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: tn.diagonal_net_limit(
                np.ones((3, 2)), np.ones(3), alpha=1.0, depth=2, w_bar=np.ones(2)
            ),
            "n <= d",
        ),
        (lambda: tn.diagonal_net_limit(X1, Y1, alpha=1.0, depth=1, w_bar=[1.0, 1.0]), "depth"),
        (lambda: tn.diagonal_net_limit(X1, Y1, alpha=0.0, depth=2, w_bar=[1.0, 1.0]), "alpha"),
        (lambda: tn.diagonal_net_limit(X1, Y1, alpha=-1.0, depth=2, w_bar=[1.0, 1.0]), "alpha"),
        (lambda: tn.diagonal_net_limit(X1, Y1, alpha=1.0, depth=2, w_bar=[1.0, 0.0]), "zero"),
        (
            lambda: tn.diagonal_net_limit(X1, [1.0, 2.0], alpha=1.0, depth=2, w_bar=[1.0, 1.0]),
            "shape",
        ),
        (lambda: tn.diagonal_net_limit(X1, Y1, alpha=1.0, depth=2, w_bar=[1.0]), "shape"),
        (
            lambda: tn.diagonal_net_limit(
                np.ones((2, 3)), [1.0, 2.0], alpha=1.0, depth=2, w_bar=np.ones(3)
            ),
            "full row rank",
        ),
        (lambda: tn.diagonal_net_limit(X1, Y1, alpha=True, depth=2, w_bar=[1.0, 1.0]), "alpha"),
        (
            lambda: tn.two_layer_limit(
                "cnn", [1.0, 2.0], 1.0, alpha=1.0, v1_bar=[1, 1], v2_bar=[0, 0]
            ),
            "architecture",
        ),
        (
            lambda: tn.two_layer_limit(
                "diagonal", [1.0, 2.0], 1.0, alpha=1.0, v1_bar=[1.0, 0.1], v2_bar=[0.0, 0.5]
            ),
            "Theorem 5 needs",
        ),
        (
            lambda: tn.two_layer_limit(
                "conv", [1.0, 2.0], 1.0, alpha=1.0, v1_bar=[1.0, 0.1, 0.0], v2_bar=[0.0, 0.0]
            ),
            "length",
        ),
        (
            lambda: tn.conv_net_limit(
                np.array([[1.0, 2.0, 3.0]]), Y1, alpha=1.0, depth=2, w_bar=[1.0, 0.0, 0.0]
            ),
            "even",
        ),
        (
            lambda: tn.conv_net_limit(X1, Y1, alpha=1.0, depth=2, w_bar=[1.0, 0.0], corrected=1),
            "corrected must be True or False",
        ),
        (lambda: tn.h_L(2.0, 3), "pole"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- Bad input that used to give a silent wrong answer (issue: every module's bad input) -----


def test_two_layer_losses_reject_a_y_of_another_length():
    # one target for two examples used to broadcast: a loss of the wrong problem
    X = torch.tensor([[1.0, 2.0], [-0.5, 1.0]], dtype=DT)
    for factory in (tn.two_layer_loss, tn.two_layer_gradient):
        with pytest.raises(ValueError, match="y must have one entry per row of X"):
            factory("diagonal", X, torch.tensor([1.0], dtype=DT))


def test_two_layer_gradient_checks_the_params_it_meets():
    X, y = torch.tensor([[1.0, 2.0]], dtype=DT), torch.tensor([1.0], dtype=DT)
    closure = tn.two_layer_gradient("conv", X, y)
    good = {"v1": torch.tensor([0.5, 0.2], dtype=DT), "v2": torch.tensor([0.1, 0.3], dtype=DT)}
    value, _ = closure(good)
    with pytest.raises(ValueError, match="d = 2 columns"):
        closure({"v1": torch.ones(3, dtype=DT), "v2": torch.ones(3, dtype=DT)})
    with pytest.raises(ValueError, match="keys 'v1' and 'v2'"):
        closure({"v1": good["v1"]})
    # a checked structure is trusted afterwards: the same value on a second call (one path)
    assert closure(good)[0] == value


def test_dual_root_rejects_infinite_targets_and_takes_tensors():
    X, y, w = random_instance(4)
    with pytest.raises(ValueError, match="y must be finite"):
        tn.dual_root(X, np.array([np.inf, 1.0]), alpha=0.5, depth=3, eta_bar=w)
    from_numpy = tn.dual_root(X, y, alpha=0.5, depth=3, eta_bar=w)
    from_torch = tn.dual_root(torch.from_numpy(X), torch.from_numpy(y), alpha=0.5, depth=3,
                              eta_bar=torch.from_numpy(w))  # fmt: skip
    # the same float64 numbers through the same code path: equal
    np.testing.assert_array_equal(from_numpy, from_torch)
    with pytest.raises(ValueError, match="normal range"):  # alpha^L |eta|^L underflows
        tn.dual_root(X, y, alpha=1e-200, depth=3, eta_bar=w)


def test_angle_degrees_takes_one_direction_and_no_zero_row():
    betas = np.array([[1.0, 0.0], [0.0, 2.0]])
    with pytest.raises(ValueError, match="direction must have 1 dimension"):
        tn.angle_degrees(betas, np.array([[1.0, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="zero row"):
        tn.angle_degrees(np.array([[1.0, 0.0], [0.0, 0.0]]), [1.0, 0.0])
    # scale-free: 1e300-sized rows give the angles of the unit-sized ones (exact rescaling)
    np.testing.assert_array_equal(
        tn.angle_degrees(betas * 2.0**1000, [2.0**-1000, 0.0]), tn.angle_degrees(betas, [1.0, 0])
    )


def test_diagonal_params_needs_a_nonempty_direction():
    with pytest.raises(ValueError, match="w_bar must not be empty"):
        tn.diagonal_params(torch.zeros(0, dtype=DT), alpha=1.0, depth=2)
    with pytest.raises(ValueError, match="w_bar must not be empty"):
        tn.diagonal_params(torch.zeros((3, 0), dtype=DT), alpha=1.0, depth=2)


def test_coefficient_maps_check_their_params():
    with pytest.raises(ValueError, match="'w1', …, 'wL'"):
        tn.diagonal_coefficients({"w1": torch.ones(2, dtype=DT), "w3": torch.ones(2, dtype=DT)})
    with pytest.raises(ValueError, match="one shape"):
        tn.conv_coefficients({"w1": torch.ones(2, dtype=DT), "w2": torch.ones(3, dtype=DT)})
    with pytest.raises(ValueError, match="chain"):
        tn.fc_coefficients({"W1": torch.ones((2, 3), dtype=DT), "w2": torch.ones(2, dtype=DT)})
    loss = tn.regression_loss(tn.diagonal_coefficients, X1, Y1)
    with pytest.raises(ValueError, match="'w1', …, 'wL'"):
        loss({"w1": torch.ones(2, dtype=DT), "v2": torch.ones(2, dtype=DT)})
    with pytest.raises(ValueError, match="coefficients must be a callable"):
        tn.regression_loss("diagonal", X1, Y1)


def test_results_beyond_float64_raise():
    with pytest.raises(ValueError, match="h_L"):  # sinh(2t)/2 overflows for t > 355
        tn.h_L(400.0, 2)
    with pytest.raises(ValueError, match="too large for a squared loss"):
        tn.diagonal_gradient(np.array([[1e300, 1.0]]), [1.0])


def test_inputs_that_require_grad_are_numbers_too():
    t = torch.tensor([0.1, -0.2], dtype=DT, requires_grad=True)
    np.testing.assert_array_equal(tn.h_L(t, 3), tn.h_L(t.detach().numpy(), 3))
    np.testing.assert_array_equal(
        tn.angle_degrees(t, [1.0, 0.0]), tn.angle_degrees([0.1, -0.2], [1.0, 0.0])
    )
