"""Unit tests of lib.flow: gradient flow against exact solutions, gradient descent against loops."""

import math

import numpy as np
import pytest
import torch
from conftest import DT, ones
from scipy.linalg import expm
from scipy.optimize import brentq

from lib.flow import Trajectory, gradient_descent, gradient_flow


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


def test_stopping_rule_and_recording():
    def loss(p):
        return (p["x"] ** 2).sum()

    x0 = {"x": torch.tensor([1.0, -2.0], dtype=DT)}
    lr, eps, extra = 0.1, 1e-4, 7
    traj = gradient_descent(loss, x0, lr, 10_000, stop_loss=eps, extra_steps=extra, record_every=5)
    # loss after k steps is 5 * 0.8^(2k); first k with loss <= eps:
    first = next(k for k in range(1000) if 5 * 0.8 ** (2 * k) <= eps)
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
        "stop_loss negative",
        lambda: gradient_descent(lambda p: p["x"].sum(), {"x": ones(1)}, 0.1, 1, stop_loss=-1),
    ),
]


@pytest.mark.parametrize("name,call", BAD, ids=[n for n, _ in BAD])
def test_bad_input_raises_value_error(name, call):
    with pytest.raises(ValueError):
        call()
