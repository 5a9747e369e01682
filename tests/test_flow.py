"""Unit tests of lib.engine.flow: gradient flow against exact solutions, gradient descent against
loops."""

import math

import numpy as np
import pytest
import torch
from conftest import DT, ones
from scipy.linalg import expm
from scipy.optimize import brentq

from lib.engine.flow import Trajectory, gradient_descent, gradient_flow


def _quadratic(gen, n=4):
    m = torch.randn(n, n, generator=gen, dtype=DT)
    q = m @ m.T / n + 0.1 * torch.eye(n, dtype=DT)
    return q


@pytest.mark.parametrize("log_time", [False, True])
@pytest.mark.parametrize("method", ["LSODA", "DOP853", "Radau"])
def test_gradient_flow_linear_ode_is_exact(gen, log_time, method):
    q = _quadratic(gen, 5)
    theta0 = torch.randn(5, generator=gen, dtype=DT)

    def loss(p):  # theta split over two tensors to exercise packing
        theta = torch.cat([p["u"], p["v"].reshape(-1)])
        return 0.5 * theta @ q @ theta

    times = np.array([0.0, 0.3, 1.0, 4.0, 20.0])
    traj = gradient_flow(
        loss,
        {"u": theta0[:2], "v": theta0[2:].reshape(3, 1)},
        times,
        log_time=log_time,
        method=method,
    )
    got = np.concatenate([traj["u"], traj["v"].reshape(len(times), 3)], axis=1)
    exact = np.stack([expm(-q.numpy() * t) @ theta0.numpy() for t in times])
    assert np.abs(got - exact).max() <= 1e-8
    np.testing.assert_allclose(traj.losses, [0.5 * e @ q.numpy() @ e for e in exact], rtol=1e-7)
    assert traj.times.tolist() == times.tolist()


def _plateau_time(a, a0, kappa, terms=200):
    """Exact time for dot a = 2(κ−1)(1 − a^{κ−1}) a^{κ−2} to move from a0 to a (a < 1).

    ∫ s^{−(κ−2)} / (1 − s^{κ−1}) ds = Σ_m s^{m(κ−1)−(κ−3)} / (m(κ−1) − (κ−3)), a convergent series.
    """

    def antiderivative(s):
        return sum(
            s ** (m * (kappa - 1) - (kappa - 3)) / (m * (kappa - 1) - (kappa - 3))
            for m in range(terms)
        )

    return (antiderivative(a) - antiderivative(a0)) / (2 * (kappa - 1))


def test_gradient_flow_long_plateau_escape_time():
    """The one-entry Theorem-1 flow: a plateau of length ≈ a0^{-(κ-3)}/(2(κ-1)(κ-3)) ≈ 2e10."""
    kappa, a0 = 7, 1e-3
    escape = _plateau_time(0.5, a0, kappa)
    assert escape == pytest.approx(a0 ** -(kappa - 3) / (2 * (kappa - 1) * (kappa - 3)), rel=1e-2)

    def loss(p):
        return (1 - p["a"].pow(kappa - 1).sum()) ** 2

    times = np.geomspace(1e3, 10 * escape, 400)
    for log_time in (False, True):
        traj = gradient_flow(loss, {"a": torch.tensor([a0], dtype=DT)}, times, log_time=log_time)
        a = traj["a"][:, 0]
        assert a[-1] == pytest.approx(1.0, abs=1e-6)
        # the exact a(t), by inverting the exact time map
        exact = np.array(
            [
                brentq(lambda v, t=t: _plateau_time(v, a0, kappa) - t, a0, 1 - 1e-9)
                if t < _plateau_time(1 - 1e-9, a0, kappa)
                else 1.0
                for t in times
            ]
        )
        assert np.abs(a - exact).max() <= 1e-6
        # points that have moved: recorded time matches the exact time to reach that value
        moved = (a > 1.01 * a0) & (a < 0.95)
        predicted = np.array([_plateau_time(v, a0, kappa) for v in a[moved]])
        np.testing.assert_allclose(predicted, times[moved], rtol=1e-5)
        # the simulated escape (first crossing of 1/2) brackets the exact escape time
        crossing = np.argmax(a >= 0.5)
        assert times[crossing - 1] < escape <= times[crossing]


def test_gradient_flow_log_time_matches_plain_time(gen):
    def loss(p):
        return ((p["w"] ** 3).sum() - 1.0) ** 2 + 0.1 * (p["w"] ** 2).sum()

    w0 = torch.tensor([0.3, 0.5, 0.2], dtype=DT)
    times = np.linspace(0, 50, 11)
    plain = gradient_flow(loss, {"w": w0}, times)
    logged = gradient_flow(loss, {"w": w0}, times, log_time=True)
    assert np.abs(plain["w"] - logged["w"]).max() < 1e-8


def test_gradient_flow_only_time_zero():
    traj = gradient_flow(lambda p: (p["x"] ** 2).sum(), {"x": torch.ones(2, dtype=DT)}, [0.0])
    assert len(traj) == 1 and traj.losses[0] == 2.0


def test_trajectory_accessors():
    traj = gradient_flow(lambda p: (p["x"] ** 2).sum(), {"x": torch.ones(2, dtype=DT)}, [0.0, 1.0])
    assert isinstance(traj, Trajectory)
    assert traj.final["x"].dtype == DT
    torch.testing.assert_close(traj.at(0)["x"], torch.ones(2, dtype=DT))
    with pytest.raises(ValueError):
        traj["y"]
    with pytest.raises(ValueError):
        traj.at(5)


def _ssm_like_loss(gen):
    x = torch.randn(6, 4, generator=gen, dtype=DT)
    y = torch.randn(6, generator=gen, dtype=DT)

    def loss(p):
        h = torch.stack([(p["b"] * p["c"] * p["a"] ** k).sum() for k in range(4)])
        return ((y - x @ h.flip(0)) ** 2).mean()

    params = {name: 0.3 * torch.rand(3, generator=gen, dtype=DT) + 0.1 for name in "abc"}
    return loss, params


def test_gradient_descent_matches_hand_written_loop(gen):
    loss, params = _ssm_like_loss(gen)
    lr, steps = 0.05, 40
    traj = gradient_descent(loss, params, lr, steps)
    theta = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    for k in range(steps):
        value = loss(theta)
        assert traj.losses[k] == pytest.approx(value.item(), rel=1e-13)
        grads = torch.autograd.grad(value, list(theta.values()))
        with torch.no_grad():
            for p, g in zip(theta.values(), grads, strict=True):
                p -= lr * g
    for name in theta:
        np.testing.assert_allclose(traj[name][-1], theta[name].detach().numpy(), rtol=1e-13)
    assert traj.times.tolist() == list(range(steps + 1))
    assert np.all(traj.step_sizes[:-1] == lr)


def test_adaptive_step_matches_hand_written_loop(gen):
    loss, params = _ssm_like_loss(gen)
    lr, steps, beta, soft = 0.01, 30, 0.8, 1e-6
    traj = gradient_descent(loss, params, lr, steps, optimizer="adaptive")
    theta = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    average = 0.0
    for k in range(steps):
        grads = torch.autograd.grad(loss(theta), list(theta.values()))
        average = beta * average + (1 - beta) * sum(g.norm().item() for g in grads)
        eta = lr / (math.sqrt(average / (1 - beta ** (k + 1))) + soft)
        assert traj.step_sizes[k] == pytest.approx(eta, rel=1e-13)
        with torch.no_grad():
            for p, g in zip(theta.values(), grads, strict=True):
                p -= eta * g
    for name in theta:
        np.testing.assert_allclose(traj[name][-1], theta[name].detach().numpy(), rtol=1e-12)


def test_adam_matches_torch_optim(gen):
    loss, params = _ssm_like_loss(gen)
    traj = gradient_descent(loss, params, 0.01, 50, optimizer="adam", adam_eps=1e-7)
    theta = [v.clone().requires_grad_(True) for v in params.values()]
    opt = torch.optim.Adam(theta, lr=0.01, eps=1e-7)
    for _ in range(50):
        opt.zero_grad()
        loss(dict(zip(params, theta, strict=True))).backward()
        opt.step()
    for name, p in zip(params, theta, strict=True):
        np.testing.assert_allclose(traj[name][-1], p.detach().numpy(), rtol=1e-10, atol=1e-14)


def test_adam_keras_form_matches_tensorflow_update_rule(gen):
    """TensorFlow's Adam (the poisoning paper's optimizer): lr_t = lr·√(1−β₂ᵗ)/(1−β₁ᵗ) and
    θ ← θ − lr_t·m_t/(√v_t + ε) with the *uncorrected* moments, written out here by hand."""
    loss, params = _ssm_like_loss(gen)
    lr, eps, steps, b1, b2 = 0.01, 1e-7, 40, 0.9, 0.999
    traj = gradient_descent(
        loss, params, lr, steps, optimizer="adam", adam_eps=eps, adam_form="keras"
    )
    theta = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    m = {k: torch.zeros_like(v) for k, v in params.items()}
    v = {k: torch.zeros_like(p) for k, p in params.items()}
    for t in range(1, steps + 1):
        grads = torch.autograd.grad(loss(theta), list(theta.values()))
        grads = dict(zip(theta, grads, strict=True))
        lr_t = lr * math.sqrt(1 - b2**t) / (1 - b1**t)
        with torch.no_grad():
            for k, p in theta.items():
                m[k] = b1 * m[k] + (1 - b1) * grads[k]
                v[k] = b2 * v[k] + (1 - b2) * grads[k] ** 2
                p -= lr_t * m[k] / (v[k].sqrt() + eps)
    for name in theta:
        np.testing.assert_allclose(
            traj[name][-1], theta[name].detach().numpy(), rtol=1e-10, atol=1e-14
        )


def test_adam_forms_differ_only_where_gradients_are_as_small_as_eps():
    """On f(x) = s·x the first Adam step is lr·g/(|g| + ε_1): the two forms agree for gradients
    far above ε and differ for gradients at ε's scale (Keras' ε_1 = ε/√(1−β₂) is 32× larger)."""
    eps = 1e-7
    for slope, same in ((1.0, True), (1e-7, False)):
        moved = {}
        for form in ("torch", "keras"):
            traj = gradient_descent(
                lambda p, s=slope: s * p["x"].sum(),
                {"x": ones(1)},
                0.1,
                1,
                optimizer="adam",
                adam_eps=eps,
                adam_form=form,
            )
            moved[form] = 1.0 - traj["x"][-1, 0]
        expected = 0.1 * slope / (slope + eps / math.sqrt(1 - 0.999))
        assert moved["keras"] == pytest.approx(expected, rel=1e-12)
        assert moved["torch"] == pytest.approx(0.1 * slope / (slope + eps), rel=1e-12)
        assert bool(moved["torch"] == pytest.approx(moved["keras"], rel=1e-5)) is same


def test_stopping_rule_and_recording():
    def loss(p):
        return (p["x"] ** 2).sum()

    x0 = {"x": torch.tensor([1.0, -2.0], dtype=DT)}
    lr, eps, extra = 0.1, 1e-4, 7
    traj = gradient_descent(loss, x0, lr, 10_000, stop_loss=eps, extra_steps=extra, record_every=5)
    # loss after k steps is 5 * 0.8^(2k); first k with loss <= eps:
    first = next(k for k in range(1000) if 5 * 0.8 ** (2 * k) <= eps)
    # the crossing is clear (7.1e-5 and 1.1e-4 around 1e-4), so the step is exact on any machine
    _assert_clear_crossing(5 * 0.8 ** (2 * np.arange(first + 1)), first, eps)
    assert traj.info["converged_step"] == first
    assert traj.info["steps_run"] == first + extra
    assert traj.times[-1] == first + extra
    assert all(t % 5 == 0 for t in traj.times[:-1])
    assert traj.losses[-1] == pytest.approx(5 * 0.8 ** (2 * (first + extra)), rel=1e-12)
    # without reaching eps, the cap wins
    capped = gradient_descent(loss, x0, lr, 3, stop_loss=1e-30, extra_steps=100)
    assert capped.info["converged_step"] is None and capped.info["steps_run"] == 3


def test_divergence_is_reported_not_raised():
    traj = gradient_descent(
        lambda p: (p["x"] ** 4).sum(), {"x": torch.tensor([3.0], dtype=DT)}, 1.0, 100
    )
    assert traj.info["diverged"]
    assert traj.info["steps_run"] < 100


BAD = [
    ("loss not callable", lambda: gradient_flow(3, {"x": ones(1)}, [1.0])),
    ("params not dict", lambda: gradient_flow(lambda p: p["x"].sum(), [ones(1)], [1.0])),
    ("params empty", lambda: gradient_descent(lambda p: 0, {}, 0.1, 1)),
    ("params float32", lambda: gradient_flow(lambda p: p["x"].sum(), {"x": torch.ones(1)}, [1.0])),
    (
        "params nan",
        lambda: gradient_descent(lambda p: p["x"].sum(), {"x": ones(1) * math.nan}, 0.1, 1),
    ),
    (
        "t_eval decreasing",
        lambda: gradient_flow(lambda p: p["x"].sum(), {"x": ones(1)}, [2.0, 1.0]),
    ),
    ("t_eval negative", lambda: gradient_flow(lambda p: p["x"].sum(), {"x": ones(1)}, [-1.0, 1.0])),
    ("t_eval 2-D", lambda: gradient_flow(lambda p: p["x"].sum(), {"x": ones(1)}, [[1.0]])),
    (
        "method",
        lambda: gradient_flow(lambda p: p["x"].sum(), {"x": ones(1)}, [1.0], method="euler"),
    ),
    ("rtol", lambda: gradient_flow(lambda p: p["x"].sum(), {"x": ones(1)}, [1.0], rtol=0)),
    ("loss not scalar", lambda: gradient_flow(lambda p: p["x"], {"x": ones(2)}, [1.0])),
    ("lr negative", lambda: gradient_descent(lambda p: p["x"].sum(), {"x": ones(1)}, -0.1, 1)),
    ("steps float", lambda: gradient_descent(lambda p: p["x"].sum(), {"x": ones(1)}, 0.1, 2.5)),
    (
        "optimizer",
        lambda: gradient_descent(lambda p: p["x"].sum(), {"x": ones(1)}, 0.1, 1, optimizer="sgd"),
    ),
    (
        "record_every 0",
        lambda: gradient_descent(lambda p: p["x"].sum(), {"x": ones(1)}, 0.1, 1, record_every=0),
    ),
    ("beta", lambda: gradient_descent(lambda p: p["x"].sum(), {"x": ones(1)}, 0.1, 1, beta=1.0)),
    (
        "adam_form",
        lambda: gradient_descent(
            lambda p: p["x"].sum(), {"x": ones(1)}, 0.1, 1, optimizer="adam", adam_form="tf"
        ),
    ),
    (
        "stop_loss negative",
        lambda: gradient_descent(lambda p: p["x"].sum(), {"x": ones(1)}, 0.1, 1, stop_loss=-1),
    ),
]


@pytest.mark.parametrize("name,call", BAD, ids=[n for n, _ in BAD])
def test_bad_input_raises_value_error(name, call):
    with pytest.raises(ValueError):
        call()


# --- closed-form gradients ------------------------------------------------------------------------


def _quadratic_problem(gen):
    """ℓ(θ) = ½ θᵀQθ − bᵀθ over θ = (u, v) with v a 2×1 matrix, and its closed-form gradient."""
    q = _quadratic(gen, 4)
    b = torch.randn(4, generator=gen, dtype=DT)

    def theta_of(p):
        return torch.cat([p["u"], p["v"].reshape(-1)])

    def loss(p):
        theta = theta_of(p)
        return 0.5 * theta @ q @ theta - b @ theta

    def gradient(p):
        theta = theta_of(p)
        g = q @ theta - b
        return 0.5 * theta @ q @ theta - b @ theta, {"u": g[:2], "v": g[2:].reshape(2, 1)}

    params = {
        "u": torch.randn(2, generator=gen, dtype=DT),
        "v": torch.randn(2, 1, generator=gen, dtype=DT),
    }
    return loss, gradient, params


def test_gradient_flow_closed_form_gradient_equals_autograd(gen):
    loss, gradient, params = _quadratic_problem(gen)
    times = np.array([0.0, 0.5, 2.0, 10.0])
    for log_time in (False, True):
        auto = gradient_flow(loss, params, times, log_time=log_time)
        closed = gradient_flow(None, params, times, log_time=log_time, gradient=gradient)
        for name in params:
            np.testing.assert_allclose(closed[name], auto[name], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(closed.losses, auto.losses, rtol=1e-10, atol=1e-12)
        assert np.abs(closed["u"][-1] - closed["u"][0]).max() > 1e-2  # it did move


@pytest.mark.parametrize("optimizer", ["gd", "adaptive", "adam"])
def test_gradient_descent_closed_form_gradient_equals_autograd(gen, optimizer):
    loss, gradient, params = _quadratic_problem(gen)
    auto = gradient_descent(loss, params, 0.05, 60, optimizer=optimizer, record_every=7)
    closed = gradient_descent(
        None, params, 0.05, 60, optimizer=optimizer, record_every=7, gradient=gradient
    )
    assert closed.times.tolist() == auto.times.tolist()
    for name in params:
        np.testing.assert_allclose(closed[name], auto[name], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(closed.losses, auto.losses, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(closed.step_sizes, auto.step_sizes, rtol=1e-12)
    assert closed.info == auto.info
    assert closed.losses[-1] < closed.losses[0]


# --- independent runs -----------------------------------------------------------------------------

RUNS = 3


def _per_run_problem(gen, runs=RUNS):
    """Per-run least squares with a product parameterization: ŷ = s_r · X_r w_r."""
    x = torch.randn(runs, 6, 3, generator=gen, dtype=DT)
    target = torch.randn(runs, 3, generator=gen, dtype=DT)
    y = (x @ target.unsqueeze(-1)).squeeze(-1)

    def joint_loss(p):
        prediction = p["s"].unsqueeze(-1) * (x @ p["w"].unsqueeze(-1)).squeeze(-1)
        return ((prediction - y) ** 2).mean(-1)

    def single_loss(r):
        def loss(p):
            return ((p["s"] * (x[r] @ p["w"]) - y[r]) ** 2).mean()

        return loss

    params = {
        "w": 0.5 * torch.randn(runs, 3, generator=gen, dtype=DT),
        "s": 1.0 + 0.1 * torch.rand(runs, generator=gen, dtype=DT),
    }
    return joint_loss, single_loss, params


# A run inside a batch and the same run alone take different computation paths (the batched
# reductions may sum in another order), so they agree up to float64 rounding, not bit for bit.
# Each step adds a relative error of a few ulps (~1e-16); over these ≤ 300 steps of a
# well-conditioned least-squares problem that stays far below 1e-12, which a wrong run index, a
# wrong per-run learning rate or a run that kept moving after its stop would exceed by many orders.
RUN_RTOL, RUN_ATOL = 1e-12, 1e-14
# A converged step can be compared exactly across the two paths only if the loss crosses the
# threshold by far more than rounding can move it (relative 1e-9 against ~1e-13 of rounding).
CROSSING_MARGIN = 1e-9


def _assert_clear_crossing(losses, step, stop):
    """The loss crosses ``stop`` at ``step`` by a margin no rounding difference can undo."""
    assert losses[step] <= stop * (1 - CROSSING_MARGIN), "crossing too close to call"
    if step > 0:
        assert losses[step - 1] > stop * (1 + CROSSING_MARGIN), "crossing too close to call"


def _assert_run_equals_single(joint, r, single, stop=None):
    """Run r of a joint trajectory (recorded every step) equals a separate single run."""
    n = len(single)
    assert joint.times[:n].tolist() == single.times.tolist()  # integer step indices
    for name in single.params:
        np.testing.assert_allclose(joint[name][:n, r], single[name], rtol=RUN_RTOL, atol=RUN_ATOL)
        # a finished run stays frozen: its tail equals *its own* last iterate, exactly (the
        # engine copies the frozen state, so this comparison is on one computation path)
        frozen = np.broadcast_to(joint[name][n - 1, r], joint[name][n:, r].shape)
        np.testing.assert_array_equal(joint[name][n:, r], frozen)
    np.testing.assert_allclose(joint.losses[:n, r], single.losses, rtol=RUN_RTOL, atol=RUN_ATOL)
    np.testing.assert_allclose(joint.step_sizes[:n, r], single.step_sizes, rtol=RUN_RTOL)
    assert np.isnan(joint.step_sizes[n - 1 :, r]).all()
    if single.info["converged_step"] is not None:
        _assert_clear_crossing(single.losses, single.info["converged_step"], stop)
    for key in ("converged_step", "steps_run", "diverged"):
        assert joint.info[key][r] == single.info[key], key


@pytest.mark.parametrize("optimizer", ["adaptive", "adam"])
def test_runs_equal_separate_single_runs(gen, optimizer):
    joint_loss, single_loss, params = _per_run_problem(gen)
    lrs = [0.01, 0.03, 0.002]
    steps, stop, extra = 300, 1e-3, 5
    joint = gradient_descent(
        joint_loss,
        params,
        lrs,
        steps,
        optimizer=optimizer,
        stop_loss=stop,
        extra_steps=extra,
        runs=RUNS,
    )
    assert joint.losses.shape == (len(joint), RUNS)
    assert joint.step_sizes.shape == (len(joint), RUNS)
    assert joint["w"].shape == (len(joint), RUNS, 3) and joint["s"].shape == (len(joint), RUNS)
    singles = [
        gradient_descent(
            single_loss(r),
            {k: v[r] for k, v in params.items()},
            lrs[r],
            steps,
            optimizer=optimizer,
            stop_loss=stop,
            extra_steps=extra,
        )
        for r in range(RUNS)
    ]
    for r, single in enumerate(singles):
        _assert_run_equals_single(joint, r, single, stop)
    # the stopping rule did act, at different steps, so the comparison covers frozen runs
    assert len(set(joint.info["steps_run"])) == RUNS
    assert sum(c is not None for c in joint.info["converged_step"]) >= 2
    assert joint.times[-1] == max(joint.info["steps_run"])
    assert joint.info["diverged"] == [False] * RUNS


def test_runs_with_one_scalar_lr_equal_list_of_equal_lrs(gen):
    joint_loss, _, params = _per_run_problem(gen)
    scalar = gradient_descent(joint_loss, params, 0.01, 20, optimizer="adaptive", runs=RUNS)
    listed = gradient_descent(
        joint_loss, params, [0.01] * RUNS, 20, optimizer="adaptive", runs=RUNS
    )
    # one computation path: a scalar lr becomes the same per-run tensor as the list, so exact
    np.testing.assert_array_equal(scalar["w"], listed["w"])
    np.testing.assert_array_equal(scalar.step_sizes, listed.step_sizes)


@pytest.mark.parametrize("optimizer", ["gd", "adaptive", "adam"])
def test_diverging_run_is_flagged_alone(gen, optimizer):
    joint_loss, single_loss, params = _per_run_problem(gen)
    lrs = {"gd": [0.02, 50.0, 0.01], "adaptive": [0.01, 1e200, 0.02], "adam": [0.01, 1e150, 0.02]}
    lrs = lrs[optimizer]
    steps = 60
    joint = gradient_descent(joint_loss, params, lrs, steps, optimizer=optimizer, runs=RUNS)
    assert joint.info["diverged"] == [False, True, False]
    assert joint.info["steps_run"][1] < steps
    assert joint.info["steps_run"][0] == joint.info["steps_run"][2] == steps
    for r in range(RUNS):
        single = gradient_descent(
            single_loss(r), {k: v[r] for k, v in params.items()}, lrs[r], steps, optimizer=optimizer
        )
        _assert_run_equals_single(joint, r, single)
    assert np.isfinite(joint.losses[:, [0, 2]]).all()
    assert not np.isfinite(joint.losses[-1, 1])


def test_closed_form_gradient_with_runs(gen):
    joint_loss, _, params = _per_run_problem(gen)

    def gradient(p):
        leaves = {k: v.clone().requires_grad_(True) for k, v in p.items()}
        with torch.enable_grad():
            values = joint_loss(leaves)
            grads = torch.autograd.grad(values.sum(), list(leaves.values()))
        return values.detach(), dict(zip(leaves, grads, strict=True))

    lrs = [0.01, 0.02, 0.005]
    auto = gradient_descent(joint_loss, params, lrs, 40, optimizer="adam", runs=RUNS)
    closed = gradient_descent(None, params, lrs, 40, optimizer="adam", runs=RUNS, gradient=gradient)
    for name in params:  # two gradient paths (closed form vs the engine's autograd): rounding
        np.testing.assert_allclose(closed[name], auto[name], rtol=RUN_RTOL, atol=RUN_ATOL)
    assert np.abs(closed["w"][-1] - closed["w"][0]).max() > 0.1


def _joint_call(**overrides):
    """A valid runs = 2 call of gradient_descent, with some arguments replaced."""
    arguments = {
        "loss": lambda p: (p["x"] ** 2).sum(-1),
        "params": {"x": ones(2, 3)},
        "lr": [0.1, 0.2],
        "steps": 2,
        "runs": 2,
    }
    arguments.update(overrides)
    loss, params, lr = (arguments.pop(name) for name in ("loss", "params", "lr"))
    return lambda: gradient_descent(loss, params, lr, **arguments)


def _fixed_gradient(value, grads):
    return lambda p: (value, grads)


BAD_RUNS = [
    ("lr list without runs", _joint_call(params={"x": ones(3)}, runs=None)),
    ("lr list too short", _joint_call(lr=[0.1])),
    ("lr list too long", _joint_call(lr=[0.1, 0.1, 0.1])),
    ("lr list negative entry", _joint_call(lr=[0.1, -0.1])),
    ("runs 0", _joint_call(runs=0, lr=0.1)),
    ("params without run axis", _joint_call(params={"x": ones(3)})),
    ("params with a wrong run axis", _joint_call(params={"x": ones(2, 3), "y": ones(3, 2)})),
    ("params scalar with runs", _joint_call(params={"x": torch.tensor(1.0, dtype=DT)})),
    ("loss scalar with runs", _joint_call(loss=lambda p: (p["x"] ** 2).sum())),
    ("loss (R, 1) with runs", _joint_call(loss=lambda p: (p["x"] ** 2).sum(-1, keepdim=True))),
    ("loss (R+1,) with runs", _joint_call(loss=lambda p: torch.cat([ones(1), p["x"].sum(-1)]))),
    (
        "gradient wrong keys",
        _joint_call(loss=None, gradient=_fixed_gradient(ones(2), {"y": ones(2, 3)})),
    ),
    (
        "gradient extra key",
        _joint_call(
            loss=None, gradient=_fixed_gradient(ones(2), {"x": ones(2, 3), "y": ones(2, 3)})
        ),
    ),
    (
        "gradient wrong shape",
        _joint_call(loss=None, gradient=_fixed_gradient(ones(2), {"x": ones(3, 2)})),
    ),
    (
        "gradient float32",
        _joint_call(loss=None, gradient=_fixed_gradient(ones(2), {"x": torch.ones(2, 3)})),
    ),
    (
        "gradient not a tensor",
        _joint_call(loss=None, gradient=_fixed_gradient(ones(2), {"x": np.ones((2, 3))})),
    ),
    ("gradient not a pair", _joint_call(loss=None, gradient=lambda p: ones(2))),
    (
        "gradient loss wrong shape",
        _joint_call(loss=None, gradient=_fixed_gradient(ones(3), {"x": ones(2, 3)})),
    ),
    ("gradient not callable", _joint_call(loss=None, gradient=3)),
    ("neither loss nor gradient", _joint_call(loss=None)),
    (
        "single run gradient wrong shape",
        lambda: gradient_descent(
            None, {"x": ones(3)}, 0.1, 2, gradient=_fixed_gradient(ones(1), {"x": ones(1, 3)})
        ),
    ),
    (
        "flow gradient wrong keys",
        lambda: gradient_flow(
            None, {"x": ones(3)}, [0.0, 1.0], gradient=_fixed_gradient(ones(1), {"y": ones(3)})
        ),
    ),
    (
        "flow gradient wrong dtype",
        lambda: gradient_flow(
            None,
            {"x": ones(3)},
            [0.0, 1.0],
            gradient=_fixed_gradient(ones(1), {"x": torch.ones(3)}),
        ),
    ),
    (
        "flow gradient non-scalar loss",
        lambda: gradient_flow(
            None, {"x": ones(3)}, [0.0, 1.0], gradient=_fixed_gradient(ones(2), {"x": ones(3)})
        ),
    ),
    ("flow neither loss nor gradient", lambda: gradient_flow(None, {"x": ones(3)}, [0.0, 1.0])),
]


@pytest.mark.parametrize("name,call", BAD_RUNS, ids=[n for n, _ in BAD_RUNS])
def test_bad_runs_and_gradient_input_raises_value_error(name, call):
    with pytest.raises(ValueError):
        call()


def test_valid_joint_call_of_the_bad_input_table_runs():
    """The base call that BAD_RUNS perturbs is itself valid (so each row tests one defect)."""
    traj = _joint_call()()
    # x_{k+1} = (1 - 2 lr) x_k
    np.testing.assert_allclose(traj["x"][-1, 0], 0.8**2 * np.ones(3), rtol=1e-14)
    np.testing.assert_allclose(traj["x"][-1, 1], 0.6**2 * np.ones(3), rtol=1e-14)
    ok = _joint_call(loss=None, gradient=lambda p: ((p["x"] ** 2).sum(-1), {"x": 2 * p["x"]}))()
    # closed form vs autograd: both gradients are 2·x, one exactly rounded product; still compared
    # with a rounding tolerance, as any two computation paths are
    np.testing.assert_allclose(ok["x"], traj["x"], rtol=1e-15, atol=0)


def test_log_grid():
    from lib.engine.flow import log_grid

    grid = log_grid(1e11, 5)
    np.testing.assert_allclose(grid, [0.0, *np.logspace(-2, 11, 4)], rtol=1e-12)
    np.testing.assert_allclose(log_grid(0.005, 3), [0.0, 5e-5, 5e-3], rtol=1e-12)
    np.testing.assert_array_equal(log_grid(7.0, 2), [0.0, 7.0])
    for bad in ((0.0, 3), (1.0, 1)):
        with pytest.raises(ValueError):
            log_grid(*bad)
