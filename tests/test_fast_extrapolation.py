"""The compiled paths of lib.ssm.extrapolation (lib.ssm._extrapolation_kernels) against the torch
engine.

Both engines compute the same equations along different computation paths (the order of sums
differs, and the compiled Adam divides where torch divides a tensor), so they agree up to float64
rounding, not bit for bit. The kernels are compared at single points to 1e-12 relative: a few
dozen rounding errors of 1e-16, with room. Adam trajectories are compared step by step over 300
steps to 1e-10, relative to each run's largest parameter: a rounding difference grows along the
dynamics (Adam divides each gradient entry by its own running scale, which amplifies the rounding
of near-zero entries), but over this horizon the measured gap stays below 1e-14, and beyond a
few thousand steps at near-zero loss it grows as it would between two machines, which is why the
horizon is short. Flows are solved by the same LSODA with the same tolerances; the paths take the
same steps until a rounding difference flips one of the solver's step-size decisions, after which
both stay within the solver's error control of the true flow (rtol 1e-10, over a stiff flow to
t = 1e8): the measured gap is 3e-9, compared to 1e-7.
"""

import numpy as np
import pytest
import torch
from conftest import DT, ones

from lib.ssm import _extrapolation_kernels as fx
from lib.ssm import extrapolation as ex

KERNEL_TOL = 1e-12
ADAM_TOL = 1e-10
ADAM_STEPS = 300
FLOW_TOL = 1e-7

TEACHER = ([0.95, 0.6, -0.7], [0.4, 0.3, 0.3])


def _normwise_gap(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """max |first − second| / max |second| per recorded step and run (arrays (T, R, ...))."""
    first = first.reshape(*first.shape[:2], -1)
    second = second.reshape(first.shape)
    return np.abs(first - second).max(-1) / np.abs(second).max(-1)


# --- the kernels --------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 5, 8])
def test_balanced_kernels_equal_balanced_field(gen, k):
    d = 6
    w = ex.moment_sequence(*TEACHER, 10)
    a = (torch.rand(d, generator=gen, dtype=DT) * 2 - 1) * 0.95
    b = torch.randn(d, generator=gen, dtype=DT) * 0.6
    gradient, jacobian = ex.balanced_field(w, k)
    loss, grads = gradient({"a": a, "b": b})
    theta, target = torch.cat([a, b]).numpy(), w[:k].numpy()
    grad = np.empty(2 * d)
    scratch = (np.empty((k, d)), np.empty((k, d)), np.empty(k))
    value = fx.balanced_loss_gradient(theta, target, grad, *scratch)
    assert value == pytest.approx(loss.item(), rel=KERNEL_TOL)
    reference = torch.cat([grads["a"], grads["b"]]).numpy()
    np.testing.assert_allclose(grad, reference, rtol=KERNEL_TOL, atol=KERNEL_TOL)
    matrix = np.empty((2 * d, 2 * d))
    fx.balanced_jacobian(theta, target, matrix)
    expected = jacobian({"a": a, "b": b}).numpy()
    np.testing.assert_allclose(matrix, expected, rtol=KERNEL_TOL, atol=KERNEL_TOL)
    # in log time τ the field and its Jacobian carry the factor −e^τ of dθ/dτ = −(1 + t) G
    tau = 1.7
    np.testing.assert_allclose(
        fx.balanced_log_time_rhs(tau, theta, target), -np.exp(tau) * reference, rtol=KERNEL_TOL
    )
    np.testing.assert_allclose(
        fx.balanced_log_time_jacobian(tau, theta, target),
        -np.exp(tau) * expected,
        rtol=KERNEL_TOL,
        atol=KERNEL_TOL,
    )


def test_general_kernel_equals_general_descent_field(gen):
    ks, d = [1, 2, 5, 9], 5
    w = ex.linear_rnn_response(*ex.delay_teacher(4), 12)
    a = torch.randn(len(ks), d, d, generator=gen, dtype=DT) * 0.4
    b = torch.randn(len(ks), d, generator=gen, dtype=DT)
    c = torch.randn(len(ks), d, generator=gen, dtype=DT)
    losses, grads = ex.general_descent_field(w, ks)({"A": a, "B": b, "C": c})
    for r, k in enumerate(ks):
        theta = torch.cat([a[r].reshape(-1), b[r], c[r]]).numpy()
        grad = np.empty_like(theta)
        work = np.empty(fx.general_work_size(d, k))
        value = fx.general_loss_gradient(theta, w[:k].numpy(), d, grad, work)
        assert value == pytest.approx(losses[r].item(), rel=KERNEL_TOL)
        reference = torch.cat([grads[n][r].reshape(-1) for n in ("A", "B", "C")]).numpy()
        np.testing.assert_allclose(grad, reference, rtol=KERNEL_TOL, atol=KERNEL_TOL)


# --- whole Adam runs ----------------------------------------------------------------------------


def _balanced_runs(pairs, d, init_scale):
    starts = [ex.balanced_init(d, seed, init_scale=init_scale) for _, seed in pairs]
    return {n: torch.stack([s[n] for s in starts]) for n in ("a", "b")}


PROBLEMS = {
    # the chapter's balanced students (d = 40, init 1e-3) and small ones that move a lot
    "balanced, chapter": lambda: (
        ex.balanced_descent_field(ex.moment_sequence(*TEACHER, 12), [3, 5, 7, 10]),
        _balanced_runs([(3, 0), (5, 1), (7, 2), (10, 3)], 40, 1e-3),
        1e-3,
    ),
    "balanced, small": lambda: (
        ex.balanced_descent_field(ex.moment_sequence(*TEACHER, 12), [2, 6, 9]),
        _balanced_runs([(2, 4), (6, 5), (9, 6)], 8, 0.1),
        1e-2,
    ),
    # the chapter's dense delay students (d = 30, init 0.05) and small ones
    "general, delay": lambda: (
        ex.general_descent_field(ex.linear_rnn_response(*ex.delay_teacher(6), 16), [6, 10, 14]),
        ex.general_init(30, [0, 1, 2], init_scale=0.05),
        1e-3,
    ),
    "general, small": lambda: (
        ex.general_descent_field(ex.linear_rnn_response(*ex.delay_teacher(4), 12), [1, 3, 8]),
        ex.general_init(6, [3, 4, 5], init_scale=0.2),
        1e-2,
    ),
}


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_compiled_adam_equals_torch_engine(name):
    field, params, lr = PROBLEMS[name]()
    runs = len(field.ks)
    kwargs = dict(lr=lr, steps=ADAM_STEPS, record_every=7)
    compiled = ex.train_adam(field, params, runs, **kwargs)
    reference = ex.train_adam(field, params, runs, engine="torch", **kwargs)
    assert compiled.times.tolist() == reference.times.tolist()  # integer step indices
    assert compiled.times[-1] == ADAM_STEPS and len(compiled.times) == ADAM_STEPS // 7 + 2
    for key in reference.params:
        assert compiled[key].shape == reference[key].shape
        assert _normwise_gap(compiled[key], reference[key]).max() <= ADAM_TOL
    # the loss is |r|² with residuals r = h − w, differences of O(1) numbers (|w_0| = 1 here) that
    # carry absolute rounding errors: compare |r| = √L to ADAM_TOL in absolute terms
    np.testing.assert_allclose(
        np.sqrt(compiled.losses), np.sqrt(reference.losses), rtol=ADAM_TOL, atol=ADAM_TOL
    )
    assert compiled.info["diverged"] == reference.info["diverged"] == [False] * runs
    # the runs moved and learned (a comparison of frozen runs would prove nothing); b and C move
    # for every k (A does not when k = 1)
    last = list(reference.params)[-1]
    assert _normwise_gap(compiled[last][-1:], compiled[last][:1]).min() > 1e-3
    assert (compiled.losses[-1] < compiled.losses[0]).all()


def test_compiled_adam_milestones_equal_torch_engine():
    field, params, lr = PROBLEMS["balanced, small"]()
    kwargs = dict(lr=lr, steps=120, milestones=(40, 90), record_every=1)
    compiled = ex.train_adam(field, params, 3, **kwargs)
    reference = ex.train_adam(field, params, 3, engine="torch", **kwargs)
    assert compiled.times.tolist() == list(range(121))
    for key in ("a", "b"):
        assert _normwise_gap(compiled[key], reference[key]).max() <= ADAM_TOL
    # Adam restarts at each milestone: its first step moves each coordinate by lr_p·|g|/(|g| + ε),
    # at most lr_p, and by nearly lr_p wherever |g| ≫ ε
    for p, start in enumerate((0, 40, 90)):
        step = np.abs(compiled["b"][start + 1] - compiled["b"][start])
        assert step.max() <= lr * 0.1**p * (1 + 1e-12) and step.max() >= 0.99 * lr * 0.1**p


def test_compiled_adam_divergence_is_flagged_and_frozen_like_torch():
    """A run whose loss overflows stops there and stays frozen, the others go on (both engines)."""
    # lr = 1e30: after one step |a|, |b| ≈ 1e30, and run 0's h_11 = Σ b² a^11 overflows, while
    # run 1 (k = 1: h_0 = Σ b² only, about 1e60) stays finite
    field = ex.balanced_descent_field(ex.moment_sequence(*TEACHER, 12), [12, 1])
    params = {"a": torch.tensor([[3.0, -2.0], [0.5, 0.1]], dtype=DT), "b": ones(2, 2)}
    kwargs = dict(lr=1e30, steps=40, record_every=3)
    compiled = ex.train_adam(field, params, 2, **kwargs)
    reference = ex.train_adam(field, params, 2, engine="torch", **kwargs)
    assert compiled.info["diverged"] == reference.info["diverged"] == [True, False]
    assert compiled.times.tolist() == reference.times.tolist()
    assert not np.isfinite(compiled.losses[-1, 0]) and np.isfinite(compiled.losses[-1, 1])
    for key in ("a", "b"):
        frozen = compiled[key][-1, 0]
        stop = np.flatnonzero((compiled[key][:, 0] == frozen).all(-1))[0]  # one run's own copy
        assert (compiled[key][stop:, 0] == frozen).all() and stop < len(compiled.times) - 1
        np.testing.assert_allclose(compiled[key], reference[key], rtol=ADAM_TOL)


# --- whole flows --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "d,k,seed,init_scale", [(10, 5, 0, 1e-3), (40, 8, 0, 1e-3), (6, 4, 2, 0.3)]
)
def test_compiled_balanced_flow_equals_torch_engine(d, k, seed, init_scale):
    w = ex.moment_sequence(*TEACHER, 30)
    start = ex.balanced_init(d, seed, init_scale=init_scale)
    compiled = ex.balanced_flow(w, k, start, time=1e8, points=9)
    reference = ex.balanced_flow(w, k, start, time=1e8, points=9, engine="torch")
    np.testing.assert_array_equal(compiled.times, reference.times)  # the same grid, not computed
    for key in ("a", "b"):
        assert _normwise_gap(compiled[key][:, None], reference[key][:, None]).max() <= FLOW_TOL
    np.testing.assert_allclose(compiled.losses, reference.losses, rtol=FLOW_TOL, atol=1e-10)
    assert compiled.losses[-1] < 1e-9 * compiled.losses[0]  # it reached (numerically) zero loss
    assert compiled.info["message"] == "Integration successful."


def test_compiled_sweep_equals_torch_engine():
    ks, seeds = [3, 7], [0, 1]
    kwargs = dict(d=12, seeds=seeds, init_scale=1e-3, horizon=40)
    compiled = ex.extrapolation_sweep(*TEACHER, ks, **kwargs)
    reference = ex.extrapolation_sweep(*TEACHER, ks, engine="torch", **kwargs)
    # tail errors of flows that agree to FLOW_TOL, read out over 40 steps (powers up to a^39)
    np.testing.assert_allclose(compiled, reference, rtol=1e-5)


# --- bad input ----------------------------------------------------------------------------------

_FIELD = ex.balanced_descent_field(torch.linspace(1.0, 0.1, 8, dtype=DT), [3, 3])
_PARAMS = {"a": ones(2, 3) * 0.5, "b": ones(2, 3) * 0.5}
_GENERAL = ex.general_descent_field(torch.linspace(1.0, 0.1, 8, dtype=DT), [3, 3])
_DENSE = {"A": ones(2, 3, 3) * 0.1, "B": ones(2, 3), "C": ones(2, 3)}


def _plain_closure(params):
    return _FIELD(params)


BAD = {
    "engine unknown": lambda: ex.train_adam(_FIELD, _PARAMS, 2, lr=0.1, steps=5, engine="numba"),
    "engine not a string": lambda: ex.train_adam(_FIELD, _PARAMS, 2, lr=0.1, steps=5, engine=1),
    "compiled needs a DescentField": lambda: ex.train_adam(
        _plain_closure, _PARAMS, 2, lr=0.1, steps=5
    ),
    "compiled runs mismatch": lambda: ex.train_adam(_FIELD, _PARAMS, 3, lr=0.1, steps=5),
    "compiled wrong names": lambda: ex.train_adam(
        _FIELD, {"a": ones(2, 3), "c": ones(2, 3)}, 2, lr=0.1, steps=5
    ),
    "compiled extra name": lambda: ex.train_adam(
        _FIELD, {**_PARAMS, "c": ones(2, 3)}, 2, lr=0.1, steps=5
    ),
    "compiled shapes differ": lambda: ex.train_adam(
        _FIELD, {"a": ones(2, 3), "b": ones(2, 4)}, 2, lr=0.1, steps=5
    ),
    "compiled no run axis": lambda: ex.train_adam(
        _FIELD, {"a": ones(3), "b": ones(3)}, 2, lr=0.1, steps=5
    ),
    "compiled scalar params": lambda: ex.train_adam(
        _FIELD,
        {"a": torch.tensor(1.0, dtype=DT), "b": torch.tensor(1.0, dtype=DT)},
        2,
        lr=0.1,
        steps=5,
    ),
    "compiled A not square": lambda: ex.train_adam(
        _GENERAL, {**_DENSE, "A": ones(2, 3, 2)}, 2, lr=0.1, steps=5
    ),
    "compiled balanced params for general": lambda: ex.train_adam(
        _GENERAL, _PARAMS, 2, lr=0.1, steps=5
    ),
    "compiled float32": lambda: ex.train_adam(
        _FIELD, {"a": torch.ones(2, 3), "b": torch.ones(2, 3)}, 2, lr=0.1, steps=5
    ),
    "compiled nan params": lambda: ex.train_adam(
        _FIELD, {"a": ones(2, 3) * float("nan"), "b": ones(2, 3)}, 2, lr=0.1, steps=5
    ),
    "flow engine unknown": lambda: ex.balanced_flow(
        torch.linspace(1.0, 0.1, 8, dtype=DT), 3, {"a": ones(2), "b": ones(2)}, engine="fast"
    ),
    "sweep engine unknown": lambda: ex.extrapolation_sweep([0.5], [1.0], [2], d=2, engine=None),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_raises_value_error(name):
    with pytest.raises(ValueError):
        BAD[name]()


def test_compiled_engine_message_names_the_way_out():
    with pytest.raises(ValueError, match="engine='torch'"):
        ex.train_adam(_plain_closure, _PARAMS, 2, lr=0.1, steps=5)
    with pytest.raises(ValueError, match=r"balanced students need a \(R, d\), b \(R, d\)"):
        ex.train_adam(_FIELD, {"a": ones(2, 3), "b": ones(2, 4)}, 2, lr=0.1, steps=5)
