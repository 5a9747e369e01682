"""Unit tests of lib.engine.curvature: Hessian-vector products and eigenvalues against autograd."""

import numpy as np
import pytest
import torch
from conftest import DT, flat_hessian, ones

import lib.engine.curvature
from lib.engine.curvature import (
    dense_hessian,
    extreme_eigenvalues,
    hessian_vector_product,
    parameter_count,
)


def _flat_hessian(loss, params):
    return flat_hessian(loss, params)


def _two_layer(gen, d_in=4, hidden=3, d_out=2, samples=6):
    """Square loss of x ↦ W2 tanh(W1 x): smooth, non-convex, no special structure."""
    x = torch.randn(samples, d_in, generator=gen, dtype=DT)
    y = torch.randn(samples, d_out, generator=gen, dtype=DT)

    def loss(p):
        return ((torch.tanh(x @ p["W1"].T) @ p["W2"].T - y) ** 2).mean()

    params = {
        "W1": torch.randn(hidden, d_in, generator=gen, dtype=DT),
        "W2": torch.randn(d_out, hidden, generator=gen, dtype=DT),
    }
    return loss, params


def _quadratic(gen):
    """ℓ(θ) = ½ θᵀQθ − bᵀθ over θ = (u, v), v a 2×1 matrix: the Hessian is Q exactly."""
    m = torch.randn(4, 4, generator=gen, dtype=DT)
    q = m @ m.T - 1.5 * torch.eye(4, dtype=DT)  # indefinite
    b = torch.randn(4, generator=gen, dtype=DT)

    def loss(p):
        theta = torch.cat([p["u"], p["v"].reshape(-1)])
        return 0.5 * theta @ q @ theta - b @ theta

    params = {
        "u": torch.randn(2, generator=gen, dtype=DT),
        "v": torch.randn(2, 1, generator=gen, dtype=DT),
    }
    return loss, params, q


@pytest.mark.parametrize("problem", ["two_layer", "quadratic"])
def test_hessian_vector_product_equals_autograd_hessian(gen, problem):
    if problem == "two_layer":
        loss, params = _two_layer(gen)
    else:
        loss, params, q = _quadratic(gen)
    full = _flat_hessian(loss, params)
    size = full.shape[0]
    for _ in range(3):
        v = torch.randn(size, generator=gen, dtype=DT)
        got = hessian_vector_product(loss, params, v)
        assert got.shape == (size,) and got.dtype == DT
        torch.testing.assert_close(got, full @ v, rtol=1e-12, atol=1e-12)
        if problem == "quadratic":
            torch.testing.assert_close(got, q @ v, rtol=1e-12, atol=1e-12)
    # a list is accepted as the vector
    v = torch.randn(size, generator=gen, dtype=DT)
    torch.testing.assert_close(
        hessian_vector_product(loss, params, v.tolist()), full @ v, rtol=1e-12, atol=1e-12
    )


def test_hessian_vector_product_leaves_params_alone(gen):
    loss, params = _two_layer(gen)
    before = {k: v.clone() for k, v in params.items()}
    hessian_vector_product(loss, params, torch.ones(parameter_count(params), dtype=DT))
    dense_hessian(loss, params)
    for k, v in params.items():
        assert not v.requires_grad
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


@pytest.mark.parametrize("problem", ["two_layer", "quadratic"])
def test_dense_hessian_equals_autograd_and_is_symmetric(gen, problem):
    if problem == "two_layer":
        loss, params = _two_layer(gen)
    else:
        loss, params, q = _quadratic(gen)
        torch.testing.assert_close(dense_hessian(loss, params), q, rtol=1e-12, atol=1e-12)
    got = dense_hessian(loss, params)
    size = parameter_count(params)
    assert got.shape == (size, size) and got.dtype == DT
    torch.testing.assert_close(got, _flat_hessian(loss, params), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, got.T, rtol=0, atol=0)


@pytest.fixture
def eigsh_calls(monkeypatch):
    """Counts the Lanczos runs made by lib.engine.curvature (to know which branch ran)."""
    calls = []
    original = lib.engine.curvature._lanczos_extremes

    def spy(*args, **kwargs):
        calls.append("lanczos")
        return original(*args, **kwargs)

    monkeypatch.setattr(lib.engine.curvature, "_lanczos_extremes", spy)
    return calls


@pytest.mark.parametrize("widths", [(4, 3, 2), (5, 6, 3)])
@pytest.mark.parametrize("branch", ["dense", "lanczos"])
def test_extreme_eigenvalues_equal_eigvalsh(gen, eigsh_calls, widths, branch):
    loss, params = _two_layer(gen, d_in=widths[0], hidden=widths[1], d_out=widths[2])
    size = parameter_count(params)
    exact = np.linalg.eigvalsh(_flat_hessian(loss, params).numpy())
    assert exact[0] < -1e-3 < 1e-3 < exact[-1]  # indefinite: both ends are informative
    limit = size if branch == "dense" else 1
    low, high = extreme_eigenvalues(loss, params, dense_limit=limit)
    assert isinstance(low, float) and isinstance(high, float)
    assert low == pytest.approx(exact[0], rel=1e-8, abs=0)
    assert high == pytest.approx(exact[-1], rel=1e-8, abs=0)
    assert eigsh_calls == ([] if branch == "dense" else ["lanczos"])  # one run, both ends


def test_extreme_eigenvalues_of_a_quadratic(gen, eigsh_calls):
    loss, params, q = _quadratic(gen)
    exact = np.linalg.eigvalsh(q.numpy())
    for limit in (400, 1):
        low, high = extreme_eigenvalues(loss, params, dense_limit=limit)
        assert low == pytest.approx(exact[0], rel=1e-8, abs=0)
        assert high == pytest.approx(exact[-1], rel=1e-8, abs=0)
    assert len(eigsh_calls) == 1  # only the dense_limit=1 call used Lanczos


def test_parameter_count():
    params = {"a": ones(3, 4), "b": ones(5), "c": ones(2, 1, 3), "d": ones(())}
    assert parameter_count(params) == 12 + 5 + 6 + 1
    assert isinstance(parameter_count(params), int)


def test_relu_hvp_equals_frozen_activation_pattern_hvp(gen):
    """Lemma 9: a.e. the ReLU network's Hessian is that of the masked-linear network (Eq. 15)."""
    samples, widths = 7, (3, 5, 4, 3)
    x = torch.randn(samples, widths[0], generator=gen, dtype=DT)
    labels = torch.randint(0, widths[-1], (samples,), generator=gen)
    params = {
        f"W{j + 1}": torch.randn(widths[j + 1], widths[j], generator=gen, dtype=DT)
        for j in range(3)
    }

    def relu_loss(p):
        h = torch.relu(x @ p["W1"].T)
        h = torch.relu(h @ p["W2"].T)
        return torch.nn.functional.cross_entropy(h @ p["W3"].T, labels)

    # the activation pattern D'_{i,j} at θ, then frozen: a network linear in each layer
    with torch.no_grad():
        pre1 = x @ params["W1"].T
        pre2 = torch.relu(pre1) @ params["W2"].T
    assert pre1.abs().min() > 1e-6 and pre2.abs().min() > 1e-6  # θ is not on a kink
    mask1, mask2 = (pre1 > 0).to(DT), (pre2 > 0).to(DT)
    assert 0 < mask1.mean() < 1 and 0 < mask2.mean() < 1  # both patterns are non-trivial

    def masked_loss(p, mask1=mask1, mask2=mask2):
        h = (x @ p["W1"].T) * mask1
        h = (h @ p["W2"].T) * mask2
        return torch.nn.functional.cross_entropy(h @ p["W3"].T, labels)

    assert float(masked_loss(params)) == pytest.approx(float(relu_loss(params)), rel=1e-14, abs=0)
    masked = _flat_hessian(masked_loss, params)
    unmasked = _flat_hessian(
        lambda p: masked_loss(p, torch.ones_like(mask1), torch.ones_like(mask2)), params
    )
    size = parameter_count(params)
    for _ in range(3):
        v = torch.randn(size, generator=gen, dtype=DT)
        got = hessian_vector_product(relu_loss, params, v)
        torch.testing.assert_close(got, masked @ v, rtol=1e-12, atol=1e-12)
        assert (got - unmasked @ v).abs().max() > 1e-3  # the pattern matters
    torch.testing.assert_close(dense_hessian(relu_loss, params), masked, rtol=1e-12, atol=1e-12)


def _ok_loss(p):
    return (p["x"] ** 2).sum()


BAD = [
    ("hvp loss not callable", lambda: hessian_vector_product(3, {"x": ones(2)}, ones(2))),
    ("dense loss not callable", lambda: dense_hessian("f", {"x": ones(2)})),
    ("eig loss not callable", lambda: extreme_eigenvalues(None, {"x": ones(2)})),
    ("vector too short", lambda: hessian_vector_product(_ok_loss, {"x": ones(2)}, ones(1))),
    ("vector too long", lambda: hessian_vector_product(_ok_loss, {"x": ones(2)}, ones(3))),
    (
        "vector too long (two tensors)",
        lambda: hessian_vector_product(
            lambda p: (p["x"] ** 2).sum() + (p["y"] ** 2).sum(),
            {"x": ones(2), "y": ones(2, 2)},
            ones(7),
        ),
    ),
    (
        "hvp loss not scalar",
        lambda: hessian_vector_product(lambda p: p["x"] ** 2, {"x": ones(2)}, ones(2)),
    ),
    ("dense loss not scalar", lambda: dense_hessian(lambda p: p["x"] ** 2, {"x": ones(2)})),
    ("eig loss not scalar", lambda: extreme_eigenvalues(lambda p: p["x"] ** 2, {"x": ones(2)})),
    (
        "lanczos loss not scalar",
        lambda: extreme_eigenvalues(lambda p: p["x"] ** 2, {"x": ones(3)}, dense_limit=1),
    ),
    ("loss returns a float", lambda: dense_hessian(lambda p: 1.0, {"x": ones(2)})),
    ("params not a dict", lambda: dense_hessian(_ok_loss, [ones(2)])),
    ("params empty", lambda: hessian_vector_product(_ok_loss, {}, ones(0))),
    ("params float32", lambda: dense_hessian(_ok_loss, {"x": torch.ones(2)})),
    ("params nan", lambda: extreme_eigenvalues(_ok_loss, {"x": ones(2) * float("nan")})),
    ("parameter_count not dict", lambda: parameter_count(ones(2))),
    ("dense_limit 0", lambda: extreme_eigenvalues(_ok_loss, {"x": ones(2)}, dense_limit=0)),
    ("dense_limit float", lambda: extreme_eigenvalues(_ok_loss, {"x": ones(2)}, dense_limit=2.5)),
]


@pytest.mark.parametrize("name,call", BAD, ids=[n for n, _ in BAD])
def test_bad_input_raises_value_error(name, call):
    with pytest.raises(ValueError):
        call()


def _partly_linear(gen):
    """f(a, b) = cᵀa + ½ bᵀQb: a enters linearly, so its Hessian rows are zero."""
    c = torch.randn(2, generator=gen, dtype=DT)
    m = torch.randn(3, 3, generator=gen, dtype=DT)
    q = m @ m.T - torch.eye(3, dtype=DT)
    assert torch.linalg.eigvalsh(q)[0] < -0.1  # so λ_min is not the zero of the a-block

    def loss(p):
        return c @ p["a"] + 0.5 * p["b"] @ q @ p["b"]

    params = {
        "a": torch.randn(2, generator=gen, dtype=DT),
        "b": torch.randn(3, generator=gen, dtype=DT),
    }
    full = torch.zeros(5, 5, dtype=DT)
    full[2:, 2:] = q
    return loss, params, full


def test_partly_linear_loss_dense_branch(gen):
    loss, params, full = _partly_linear(gen)
    v = torch.randn(5, generator=gen, dtype=DT)
    torch.testing.assert_close(hessian_vector_product(loss, params, v), full @ v)
    torch.testing.assert_close(dense_hessian(loss, params), full)
    exact = np.linalg.eigvalsh(full.numpy())
    low, high = extreme_eigenvalues(loss, params)
    assert (low, high) == pytest.approx((exact[0], exact[-1]), rel=1e-12, abs=0)


def test_partly_linear_loss_lanczos_branch(gen):
    loss, params, full = _partly_linear(gen)
    exact = np.linalg.eigvalsh(full.numpy())
    low, high = extreme_eigenvalues(loss, params, dense_limit=1)
    assert (low, high) == pytest.approx((exact[0], exact[-1]), rel=1e-8, abs=0)


def test_linear_loss_has_zero_hessian(gen):
    c = torch.randn(3, generator=gen, dtype=DT)
    params = {"a": torch.randn(3, generator=gen, dtype=DT)}

    def loss(p):
        return c @ p["a"]

    v = torch.randn(3, generator=gen, dtype=DT)
    torch.testing.assert_close(hessian_vector_product(loss, params, v), torch.zeros(3, dtype=DT))
    torch.testing.assert_close(dense_hessian(loss, params), torch.zeros(3, 3, dtype=DT))
