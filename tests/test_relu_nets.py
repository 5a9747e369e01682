"""Unit tests of lib.networks.relu_nets: bias-free ReLU networks against explicit loops, Gaussian
weights."""

import numpy as np
import pytest
import torch
from conftest import DT, ones

from lib.networks.relu_nets import gaussian_weights, relu_network, relu_network_gradient


def _reference(weights, inputs):
    """f(u) = W_L σ(⋯ σ(W_1 u)) sample by sample, with numpy."""
    weights = [w.numpy() for w in weights]
    rows = []
    for u in inputs.numpy():
        hidden = u
        for index, w in enumerate(weights):
            hidden = w @ hidden
            if index < len(weights) - 1:
                hidden = np.maximum(hidden, 0.0)
        rows.append(hidden)
    return torch.from_numpy(np.stack(rows))


@pytest.mark.parametrize("widths", [(3, 2), (1, 15, 15, 1), (4, 6, 5, 3, 2)])
def test_relu_network_matches_explicit_loop(gen, widths):
    weights = [
        torch.randn(out, inp, generator=gen, dtype=DT)
        for inp, out in zip(widths[:-1], widths[1:], strict=True)
    ]
    inputs = torch.randn(9, widths[0], generator=gen, dtype=DT)
    out = relu_network(weights, inputs)
    assert out.shape == (9, widths[-1])
    torch.testing.assert_close(out, _reference(weights, inputs), rtol=1e-13, atol=1e-13)


def test_relu_network_single_layer_is_linear(gen):
    w = torch.randn(3, 4, generator=gen, dtype=DT)
    u = torch.randn(5, 4, generator=gen, dtype=DT)
    torch.testing.assert_close(relu_network([w], u), u @ w.T)
    assert bool((relu_network([w], u) < 0).any())  # no ReLU after the last layer


def test_relu_network_batched_runs(gen):
    widths = (2, 5, 4, 3)
    weights = [
        torch.randn(4, 3, out, inp, generator=gen, dtype=DT)
        for inp, out in zip(widths[:-1], widths[1:], strict=True)
    ]
    inputs = torch.randn(4, 3, 7, 2, generator=gen, dtype=DT)
    out = relu_network(weights, inputs)
    assert out.shape == (4, 3, 7, 3)
    for i in range(4):
        for j in range(3):
            expected = _reference([w[i, j] for w in weights], inputs[i, j])
            torch.testing.assert_close(out[i, j], expected, rtol=1e-13, atol=1e-13)


def test_relu_network_is_differentiable_in_the_weights(gen):
    w1 = torch.randn(4, 2, generator=gen, dtype=DT).requires_grad_(True)
    w2 = torch.randn(1, 4, generator=gen, dtype=DT).requires_grad_(True)
    u = torch.randn(6, 2, generator=gen, dtype=DT)
    g1, g2 = torch.autograd.grad(relu_network([w1, w2], u).sum(), [w1, w2])
    hidden = torch.relu(u @ w1.detach().T)  # (6, 4)
    torch.testing.assert_close(g2, hidden.sum(0, keepdim=True))
    mask = (u @ w1.detach().T > 0).to(DT)  # (6, 4)
    torch.testing.assert_close(g1, (mask * w2.detach()).T @ u)


def _square_head(targets):
    """ℓ = Σ_i ‖f(u_i) − t_i‖² per batch, and its gradient 2 (F − T) in the outputs."""

    def head(outputs):
        residual = outputs - targets
        return (residual**2).sum(dim=(-1, -2)), 2 * residual

    return head


def _autograd_gradient(weights, inputs, targets):
    leaves = [w.detach().clone().requires_grad_(True) for w in weights]
    value = ((relu_network(leaves, inputs) - targets) ** 2).sum(dim=(-1, -2))
    return value.detach(), list(torch.autograd.grad(value.sum(), leaves))


def _assert_gradients_close(got, expected):
    # autograd's own operations, in a transposed memory layout: rounding only, a few ulps of the
    # largest entry (sums of at most 25 terms here)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=0, atol=1e-12 * float(e.abs().max()))


@pytest.mark.parametrize("widths", [(3, 2), (1, 15, 15, 1), (4, 6, 5, 3, 2)])
def test_relu_network_gradient_matches_autograd(gen, widths):
    weights = [
        torch.randn(out, inp, generator=gen, dtype=DT)
        for inp, out in zip(widths[:-1], widths[1:], strict=True)
    ]
    inputs = torch.randn(25, widths[0], generator=gen, dtype=DT)
    targets = torch.randn(25, widths[-1], generator=gen, dtype=DT)
    value, grads = relu_network_gradient(weights, inputs, _square_head(targets))
    expected_value, expected = _autograd_gradient(weights, inputs, targets)
    torch.testing.assert_close(value, expected_value, rtol=1e-13, atol=0)
    _assert_gradients_close(grads, expected)


def test_relu_network_gradient_at_a_dead_unit_follows_autograd(gen):
    """A pre-activation of exactly 0 passes no gradient (autograd's convention for σ'(0))."""
    w1 = torch.tensor([[1.0, -1.0], [0.5, 2.0]], dtype=DT)
    w2 = torch.tensor([[1.0, 3.0]], dtype=DT)
    inputs = torch.tensor([[1.0, 1.0], [2.0, -1.0]], dtype=DT)  # unit 1 sits at 0 on sample 0
    targets = torch.zeros(2, 1, dtype=DT)
    _, grads = relu_network_gradient([w1, w2], inputs, _square_head(targets))
    _, expected = _autograd_gradient([w1, w2], inputs, targets)
    _assert_gradients_close(grads, expected)


def test_relu_network_gradient_with_run_axes(gen):
    widths, runs = (3, 5, 4, 2), 3
    weights = [
        torch.randn(runs, out, inp, generator=gen, dtype=DT)
        for inp, out in zip(widths[:-1], widths[1:], strict=True)
    ]
    shared = torch.randn(10, 3, generator=gen, dtype=DT)
    targets = torch.randn(10, 2, generator=gen, dtype=DT)
    # runs of weights on one shared data set: one value and one gradient per run
    values, grads = relu_network_gradient(weights, shared, _square_head(targets))
    assert values.shape == (runs,)
    for r in range(runs):
        value, expected = _autograd_gradient([w[r] for w in weights], shared, targets)
        torch.testing.assert_close(values[r], value, rtol=1e-13, atol=0)
        _assert_gradients_close([g[r] for g in grads], expected)
    # one network on batches of data: the loss of each batch, the gradient of their sum
    single = [w[0] for w in weights]
    batches = torch.randn(runs, 10, 3, generator=gen, dtype=DT)
    values, grads = relu_network_gradient(single, batches, _square_head(targets))
    assert values.shape == (runs,)
    _, expected = _autograd_gradient(single, batches, targets)
    _assert_gradients_close(grads, expected)


def test_gaussian_weights_shapes_and_reproducibility():
    widths, scale = (1, 15, 15, 1), 0.03
    weights = gaussian_weights(widths, scale, np.random.RandomState(7))
    assert [tuple(w.shape) for w in weights] == [(15, 1), (15, 15), (1, 15)]
    assert all(w.dtype == DT for w in weights)
    rng = np.random.RandomState(7)
    for w, shape in zip(weights, [(15, 1), (15, 15), (1, 15)], strict=True):
        # the same numpy draws, copied: one computation path, exact
        np.testing.assert_array_equal(w.numpy(), rng.normal(0.0, scale, size=shape))
    again = gaussian_weights(widths, scale, np.random.RandomState(7))
    for w, v in zip(weights, again, strict=True):
        torch.testing.assert_close(w, v, rtol=0, atol=0)
    other = gaussian_weights(widths, scale, np.random.RandomState(8))
    assert not torch.equal(weights[1], other[1])
    # the scale is the standard deviation
    many = gaussian_weights((200, 300), 0.5, np.random.RandomState(0))[0]
    assert float(many.std()) == pytest.approx(0.5, rel=0.02)


BAD_CALLS = [
    ("no weights", lambda: relu_network([], ones(2, 3))),
    ("weights not a list", lambda: relu_network(ones(2, 3), ones(2, 3))),
    ("width mismatch", lambda: relu_network([ones(4, 3)], ones(2, 2))),
    ("inner width mismatch", lambda: relu_network([ones(4, 3), ones(2, 5)], ones(2, 3))),
    ("weights float32", lambda: relu_network([torch.ones(4, 3)], ones(2, 3))),
    ("weights 1-D", lambda: relu_network([ones(3)], ones(2, 3))),
    ("inputs 1-D", lambda: relu_network([ones(4, 3)], ones(3))),
    ("inputs float32", lambda: relu_network([ones(4, 3)], torch.ones(2, 3))),
    ("inputs numpy", lambda: relu_network([ones(4, 3)], np.ones((2, 3)))),
    ("gradient: no weights", lambda: relu_network_gradient([], ones(2, 3), _square_head(0))),
    (
        "gradient: width mismatch",
        lambda: relu_network_gradient([ones(4, 3)], ones(2, 2), _square_head(0)),
    ),
    (
        "gradient: run axes differ",
        lambda: relu_network_gradient([ones(2, 4, 3)], ones(3, 2, 3), _square_head(0)),
    ),
    ("gradient: head not callable", lambda: relu_network_gradient([ones(4, 3)], ones(2, 3), 1.0)),
    (
        "gradient: head returns a wrong shape",
        lambda: relu_network_gradient([ones(4, 3)], ones(2, 3), lambda f: (f.sum(), f[:, :1])),
    ),
    (
        "gradient: head returns float32",
        lambda: relu_network_gradient([ones(4, 3)], ones(2, 3), lambda f: (f.sum(), f.float())),
    ),
    (
        "gradient: head returns no tensor",
        lambda: relu_network_gradient([ones(4, 3)], ones(2, 3), lambda f: (f.sum(), 0.0)),
    ),
    ("width 0", lambda: gaussian_weights((1, 0, 1), 0.1, np.random.RandomState(0))),
    ("width negative", lambda: gaussian_weights((1, -2), 0.1, np.random.RandomState(0))),
    ("width float", lambda: gaussian_weights((1, 2.0), 0.1, np.random.RandomState(0))),
    ("one width", lambda: gaussian_weights((3,), 0.1, np.random.RandomState(0))),
    ("scale 0", lambda: gaussian_weights((1, 2), 0.0, np.random.RandomState(0))),
    ("scale negative", lambda: gaussian_weights((1, 2), -0.1, np.random.RandomState(0))),
    ("rng not RandomState", lambda: gaussian_weights((1, 2), 0.1, np.random.default_rng(0))),
]


@pytest.mark.parametrize("name,call", BAD_CALLS, ids=[name for name, _ in BAD_CALLS])
def test_bad_input_raises_value_error(name, call):
    with pytest.raises(ValueError):
        call()
