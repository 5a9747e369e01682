"""The compiled loops of lib.networks._saddle_kernels against the numpy and torch paths they
replace.

The compiled loops compute the same iterations as lib.networks.saddles' numpy loops and
lib.engine.flow's gradient descent; only the order of floating-point sums differs (rows split into
vector lanes, BLAS or hand-written products). Trajectories therefore agree up to rounding, which
these short runs (300 steps, fixed seeds) amplify by far less than the 1e-10 promised. Both product
paths (BLAS and loops) are checked.
"""

import math

import numpy as np
import pytest
import torch

from lib.book.data import digits
from lib.engine import flow
from lib.networks import _saddle_kernels as fast_relu
from lib.networks import saddles

TOL = 1e-10  # relative agreement promised by the compiled loops (order of sums only)


def _close(a, b, tol=TOL):
    """max |a − b| ≤ tol · max |a|: agreement relative to the size of the reference."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    return float(np.abs(a - b).max()) <= tol * max(float(np.abs(a).max()), 1e-300)


def _network(rng, widths):
    weights = [rng.standard_normal((o, i)) for i, o in zip(widths[:-1], widths[1:], strict=True)]
    return weights, np.concatenate([w.ravel() for w in weights])


@pytest.mark.parametrize("blas", [False, True])
@pytest.mark.parametrize("cost", ["localized", "cross_entropy"])
def test_value_and_gradient_match_autograd(cost, blas):
    rng = np.random.RandomState(0)
    widths = [3, 6, 5, 4]
    weights, theta = _network(rng, widths)
    x = rng.standard_normal((9, 3))
    if cost == "localized":
        target = rng.standard_normal((9, 4))
    else:
        target = np.eye(4)[rng.randint(0, 4, 9)]
    value, grad = fast_relu.value_and_gradient(theta, widths, x, target, cost=cost, blas=blas)
    leaves = [torch.from_numpy(w).requires_grad_(True) for w in weights]
    hidden = torch.from_numpy(x)
    for i, w in enumerate(leaves):
        hidden = hidden @ w.T
        if i < len(leaves) - 1:
            hidden = torch.relu(hidden)
    t = torch.from_numpy(target)
    if cost == "localized":
        reference = (hidden * t).sum()
    else:
        reference = -(torch.log_softmax(hidden, dim=1) * t).sum() / len(t)
    reference.backward()
    reference = reference.detach()
    expected = np.concatenate([w.grad.numpy().ravel() for w in leaves])
    assert value == pytest.approx(reference.item(), rel=1e-12)
    assert _close(expected, grad, 1e-12)


@pytest.mark.parametrize(
    "depth, width",
    [(3, 4), (3, 32), (5, 8)],  # width 32 at depth 3 takes the BLAS products, the others loops
)
def test_compiled_search_equals_numpy_search(depth, width):
    X, G = saddles.example1()
    kwargs = dict(depth=depth, width=width, seeds=[0, 1, 2, 3], steps=300)
    numpy_run = saddles.escape_search(X, G, engine="numpy", **kwargs)
    compiled = saddles.escape_search(X, G, engine="compiled", **kwargs)
    assert _close(numpy_run.history, compiled.history)
    for a, b in zip(numpy_run.weights, compiled.weights, strict=True):
        assert _close(a.numpy(), b.numpy())


@pytest.mark.parametrize("blas", [False, True])
def test_sphere_descent_both_product_paths(blas):
    X, G = saddles.example1()
    widths = [2, 16, 16, 1]
    rng = np.random.RandomState(5)
    theta0 = rng.standard_normal((3, int(fast_relu.layer_offsets(widths)[-1])))
    theta0 *= math.sqrt(3) / np.linalg.norm(theta0, axis=1, keepdims=True)
    angles = np.geomspace(0.1, 1e-3, 300)
    ref_history, ref_weights = saddles._sphere_descent(
        saddles._unflatten(theta0, widths), X.numpy(), G.numpy()[:, None], angles, math.sqrt(3)
    )
    history, final = fast_relu.sphere_descent(
        theta0, widths, X.numpy(), G.numpy()[:, None], angles, math.sqrt(3), blas=blas
    )
    assert _close(ref_history, history)
    assert _close(np.concatenate([w.reshape(3, -1) for w in ref_weights], axis=1), final)
    assert np.allclose(np.linalg.norm(final, axis=1), math.sqrt(3), rtol=1e-14)


@pytest.fixture(scope="module")
def small_digits():
    return digits(60, every=10)


def test_compiled_saddle_run_equals_numpy_run(small_digits):
    x, y = small_digits
    kwargs = dict(depth=6, width=12, init_scale=1 / 12, eta0=100.0, steps=300, seed=3,
                  record_every=25)  # fmt: skip
    numpy_run = saddles.saddle_to_saddle_run(x, y, engine="numpy", **kwargs)
    compiled = saddles.saddle_to_saddle_run(x, y, engine="compiled", **kwargs)
    assert np.array_equal(numpy_run.times, compiled.times)
    assert np.array_equal(numpy_run.step_sizes, compiled.step_sizes, equal_nan=True)
    assert numpy_run.info == compiled.info
    assert _close(numpy_run.losses, compiled.losses)
    assert numpy_run.losses[-1] < math.log(10) - 0.1  # the run has escaped the first plateau
    for name in numpy_run.params:
        assert _close(numpy_run[name], compiled[name])


@pytest.mark.parametrize("blas", [False, True])
def test_schedule_descent_both_product_paths(small_digits, blas):
    x, y = small_digits
    widths = [64, 12, 12, 12, 10]
    rng = np.random.RandomState(1)
    weights, theta0 = _network(rng, widths)
    theta0 /= 12
    onehot = np.eye(10)[y.numpy()]
    times, states, losses, etas, last, diverged = fast_relu.schedule_descent(
        theta0, widths, x.numpy(), onehot, cost="cross_entropy", eta0=5.0, power=2.0,
        steps=300, record_every=100, blas=blas,
    )  # fmt: skip
    names = [f"W{i + 1}" for i in range(4)]

    def gradient(params):
        ws = [params[n].numpy() for n in names]
        value, grad = fast_relu.value_and_gradient(
            np.concatenate([w.ravel() for w in ws]), widths, x.numpy(), onehot,
            cost="cross_entropy", blas=not blas,
        )  # fmt: skip
        factor = float(sum((w**2).sum() for w in ws)) ** -1.0
        grads = saddles._unflatten(grad * factor, widths)
        loss = torch.tensor(value, dtype=torch.float64)
        return loss, dict(zip(names, map(torch.from_numpy, grads), strict=True))

    start = {n: torch.from_numpy(w / 12) for n, w in zip(names, weights, strict=True)}
    reference = flow.gradient_descent(None, start, 5.0, 300, record_every=100, gradient=gradient)
    assert list(times) == [0, 100, 200, 300] and list(reference.times) == list(times)
    assert (last, diverged) == (300, False)
    assert _close(reference.losses, losses)
    flat = np.concatenate([reference[n].reshape(4, -1) for n in names], axis=1)
    assert _close(flat, states)


def test_localized_descent_equals_flow_gradient_descent():
    X, G = saddles.example1()
    rng = np.random.RandomState(2)
    # small enough that the flow, which blows up in finite time (Prop. 2.2), stays finite here
    weights = [torch.from_numpy(0.3 * rng.standard_normal(s)) for s in ((6, 2), (5, 6), (1, 5))]
    names = ["W1", "W2", "W3"]

    def gradient(params):
        value, grads = saddles.localized_gradient([params[n] for n in names], X, G)
        return value, dict(zip(names, grads, strict=True))

    start = dict(zip(names, weights, strict=True))
    reference = flow.gradient_descent(None, start, 1e-2, 300, record_every=30, gradient=gradient)
    compiled = saddles.localized_descent(weights, X, G, lr=1e-2, steps=300, record_every=30)
    assert np.array_equal(reference.times, compiled.times)
    assert _close(reference.losses, compiled.losses)
    for name in names:
        assert _close(reference[name], compiled[name])


def test_divergence_ends_the_run():
    rng = np.random.RandomState(0)
    widths = [2, 3, 1]
    _, theta0 = _network(rng, widths)
    x, g = rng.standard_normal((4, 2)), rng.standard_normal((4, 1))
    times, states, losses, etas, last, diverged = fast_relu.schedule_descent(
        theta0, widths, x, g, cost="localized", eta0=1e150, power=0.0, steps=50, record_every=1
    )
    assert diverged and last < 50
    assert times[-1] == last and not math.isfinite(losses[-1]) and math.isnan(etas[-1])
    assert np.isfinite(losses[:-1]).all()


def test_bad_inputs_are_value_errors():
    widths = [2, 3, 1]
    theta = np.ones(9)
    x, g = np.ones((4, 2)), np.ones((4, 1))
    angles = np.full(3, 0.1)
    call = fast_relu.value_and_gradient
    for bad in ([2], [2, 0, 1], "23", [2.5, 3, 1]):
        with pytest.raises(ValueError, match="width"):
            call(theta, bad, x, g)
    with pytest.raises(ValueError, match="theta"):
        call(np.ones(8), widths, x, g)
    with pytest.raises(ValueError, match="theta"):
        call(np.ones(9, dtype=np.float32), widths, x, g)
    with pytest.raises(ValueError, match="x"):
        call(theta, widths, np.ones((4, 3)), g)
    with pytest.raises(ValueError, match="x"):
        call(theta, widths, np.full((4, 2), np.nan), g)
    with pytest.raises(ValueError, match="x"):
        call(theta, widths, np.ones((0, 2)), np.ones((0, 1)))
    with pytest.raises(ValueError, match="target"):
        call(theta, widths, x, np.ones((5, 1)))
    with pytest.raises(ValueError, match="cost"):
        call(theta, widths, x, g, cost="squared")
    with pytest.raises(ValueError, match="blas"):
        call(theta, widths, x, g, blas="yes")
    with pytest.raises(ValueError, match="theta"):
        fast_relu.sphere_descent(theta, widths, x, g, angles, 1.0)  # needs (runs, P)
    with pytest.raises(ValueError, match="nonzero"):
        fast_relu.sphere_descent(np.zeros((2, 9)), widths, x, g, angles, 1.0)
    with pytest.raises(ValueError, match="angles"):
        fast_relu.sphere_descent(np.ones((2, 9)), widths, x, g, -angles, 1.0)
    with pytest.raises(ValueError, match="radius"):
        fast_relu.sphere_descent(np.ones((2, 9)), widths, x, g, angles, 0.0)
    kwargs = dict(cost="localized", eta0=0.1, power=1.0, steps=5, record_every=1)
    with pytest.raises(ValueError, match="zero"):
        fast_relu.schedule_descent(np.zeros(9), widths, x, g, **kwargs)
    for key, bad in (("eta0", -1.0), ("power", -1.0), ("steps", -1), ("record_every", 0)):
        with pytest.raises(ValueError, match=key):
            fast_relu.schedule_descent(theta, widths, x, g, **{**kwargs, key: bad})


def test_bad_engine_is_a_value_error(small_digits):
    X, G = saddles.example1()
    with pytest.raises(ValueError, match="engine"):
        saddles.escape_search(X, G, depth=3, width=2, seeds=[0], steps=2, engine="numba")
    with pytest.raises(ValueError, match="engine"):
        saddles.escape_speed(X, G, depth=3, width=2, seed=0, steps=2, engine=None)
    x, y = small_digits
    with pytest.raises(ValueError, match="engine"):
        saddles.saddle_to_saddle_run(x, y, depth=3, width=4, init_scale=0.1, eta0=1.0, steps=2,
                                     seed=0, engine="torch")  # fmt: skip


def test_localized_descent_rejects_bad_input():
    X, G = saddles.example1()
    good = saddles.example1_rank2_weights()
    with pytest.raises(ValueError, match="columns"):
        saddles.localized_descent([good[1], good[2]], X, G, lr=0.1, steps=2)
    with pytest.raises(ValueError, match="outputs"):
        saddles.localized_descent(good[:2] + [torch.ones((2, 1), dtype=torch.float64)], X, G,
                                  lr=0.1, steps=2)  # fmt: skip
    with pytest.raises(ValueError, match="lr must be"):  # the argument's own name
        saddles.localized_descent(good, X, G, lr=-0.1, steps=2)
