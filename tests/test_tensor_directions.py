"""Tests of lib.networks.tensor_directions: data tensors, eq. (2), Theorem 1's singular tuples,
Theorem 3 / Corollary 4's closed-form trajectory and limit, Corollary 6 off even data, Corollary 7.

Tolerances: 1e-12 for identities computed two ways in float64 (sums of a few dozen products of
order one); 1e-8 for comparisons with gradient flow (LSODA at rtol 1e-12 on a few thousand steps).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lib.engine.flow import gradient_flow, log_grid
from lib.networks import tensor_directions as td
from lib.networks import tensor_nets as tn


def correlate(a, w):
    """[a ⋆ w]_i = Σ_j a_{(i+j) mod d} w_j (the paper's circular convolution), by loops."""
    return np.array([sum(a[(i + j) % len(a)] * w[j] for j in range(len(w))) for i in range(len(a))])


def test_conv_basis_is_the_full_length_basis_of_tensor_nets():
    assert np.array_equal(td.conv_basis(4, [4, 4]), tn.basis_tensors("conv", 4))  # 0/1 entries


@pytest.mark.parametrize("sizes", [(1, 5), (2, 5), (3, 4, 5), (2, 2, 3, 5)])
def test_conv_basis_computes_the_convolutional_network(sizes):
    rng = np.random.default_rng(len(sizes))
    x, ws = rng.standard_normal(5), [rng.standard_normal(k) for k in sizes]
    h = x
    for w in ws[:-1]:
        h = correlate(h, w)
    beta = td.coefficients(td.conv_basis(5, sizes), ws)
    assert np.isclose(beta @ x, h @ ws[-1], rtol=1e-12)


def test_tensor_network_output_is_eq4_with_relu():
    rng = np.random.default_rng(0)
    sizes = (3, 4, 5)
    x, ws = rng.standard_normal(5), [rng.standard_normal(k) for k in sizes]
    relu = lambda z: np.maximum(z, 0.0)  # noqa: E731
    direct = relu(correlate(relu(correlate(x, ws[0])), ws[1])) @ ws[2]
    M = np.tensordot(x, td.conv_basis(5, sizes), axes=1)
    assert np.isclose(td.tensor_network_output(M, ws, activation="relu"), direct, rtol=1e-12)
    assert np.isclose(td.tensor_network_output(M, ws), td.contract(M, ws), rtol=1e-12)


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("loss", ["exp", "square"])
def test_multilinear_gradient_matches_autograd(batched, loss):
    rng = np.random.default_rng(1)
    sizes = (2, 3, 4)
    lead = (3,) if batched else ()
    T = rng.standard_normal(lead + (2,) + sizes)
    y = rng.standard_normal(lead + (2,))
    params = {f"v{i + 1}": torch.tensor(rng.standard_normal(lead + (k,)), requires_grad=True)
              for i, k in enumerate(sizes)}
    value, grads = td.multilinear_gradient(T, y, loss=loss, total=True)(
        {k: v.detach() for k, v in params.items()})
    spec = ("r" if batched else "") + "nabc," + ",".join(
        ("r" if batched else "") + c for c in "abc") + "->" + ("r" if batched else "") + "n"
    f = torch.einsum(spec, torch.from_numpy(T), *params.values())
    yt = torch.from_numpy(y)
    reference = torch.exp(-yt * f).sum() if loss == "exp" else 0.5 * ((f - yt) ** 2).sum()
    reference.backward()
    assert torch.isclose(value, reference.detach(), rtol=1e-12)
    for name, v in params.items():
        assert torch.allclose(grads[name], v.grad, rtol=1e-10, atol=1e-12)


def test_singular_residual_is_zero_exactly_at_matrix_singular_vectors():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((4, 3))
    U, s, Vt = np.linalg.svd(A)
    value, residual = td.singular_residual(A, [U[:, 1], Vt[1]])
    assert np.isclose(value, s[1], rtol=1e-12) and residual < 1e-14
    assert td.singular_residual(A, [U[:, 0], Vt[1]])[1] > 0.1  # not a pair


def test_power_method_finds_a_singular_tuple():
    rng = np.random.default_rng(3)
    A = np.tensordot(rng.standard_normal(5), td.conv_basis(5, [3, 3, 5]), axes=1)
    s, vectors = td.power_method(A, [rng.standard_normal(k) for k in A.shape])
    value, residual = td.singular_residual(A, vectors)
    assert residual < 1e-12 and np.isclose(value, s, rtol=1e-12)
    rank_one = np.einsum("a,b,c->abc", *vectors)  # a local best rank-one fit: A − s·u⊗u⊗u ⊥ it
    assert abs(np.sum((A - s * rank_one) * rank_one)) < 1e-12


def test_direction_path_follows_gradient_flow_for_any_loss():
    """One example: the exponential and the squared loss move Θ along the same path."""
    rng = np.random.default_rng(4)
    A = np.tensordot(rng.standard_normal(4), td.conv_basis(4, [2, 2, 4]), axes=1)
    start = [0.5 * rng.standard_normal(k) for k in A.shape]
    if td.contract(A, start) < 0:
        start[0] = -start[0]
    for loss, y in (("exp", 1.0), ("square", 5.0)):
        flow = gradient_flow(None, {f"v{i + 1}": torch.from_numpy(v) for i, v in enumerate(start)},
                             log_grid(30.0, 4), rtol=1e-12, atol=1e-14,
                             gradient=td.multilinear_gradient(A[None], [y], loss=loss))
        end = [flow[f"v{i + 1}"][-1] for i in range(3)]
        theta = np.concatenate(end)
        norms = [np.log(np.linalg.norm(np.concatenate(start))), np.log(np.linalg.norm(theta))]
        path = td.direction_path(A, start, norms)
        on_path = np.concatenate([w[-1] for w in path])
        assert np.abs(on_path - theta / np.linalg.norm(theta)).max() < 1e-8


def test_direction_path_ends_at_a_singular_tuple():
    rng = np.random.default_rng(5)
    A = np.tensordot(rng.standard_normal(5), td.conv_basis(5, [3, 3, 5]), axes=1)
    start = [rng.standard_normal(k) for k in A.shape]
    if td.contract(A, start) < 0:
        start[0] = -start[0]
    lam = np.log(np.linalg.norm(np.concatenate(start)))
    path = td.direction_path(A, start, [lam, lam + 200])
    assert td.singular_residual(A, [w[-1] for w in path])[1] < 1e-8


def _one_point(kernel, seed, d=6):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(d), rng.choice([-1.0, 1.0])
    basis = td.conv_basis(d, [kernel, d])
    M = np.tensordot(x, basis, axes=1)
    U1, _, U2t = np.linalg.svd(M, full_matrices=False)
    v2 = rng.standard_normal(d) / np.sqrt(d)
    v1 = U1 @ (rng.choice([-1.0, 1.0], len(U2t)) * np.sqrt((U2t @ v2) ** 2 + 1.0))
    return x, y, basis, M, v1, v2


@pytest.mark.parametrize("label_scale", [1.0, 2.0, 0.5])  # labels other than ±1 scale the clock
@pytest.mark.parametrize("kernel", [1, 2])
def test_one_point_curve_is_the_flow_for_the_exponential_loss(kernel, label_scale):
    x, y, _, M, v1, v2 = _one_point(kernel, 6)
    y *= label_scale
    alpha = 0.1
    assert np.isclose(td.theorem3_gap(M, v1, v2), 1.0, rtol=1e-12)
    flow = gradient_flow(None, {"v1": torch.from_numpy(alpha * v1),
                                "v2": torch.from_numpy(alpha * v2)},
                         np.array([0.0, 1e2, 1e6]), log_time=True, rtol=1e-12, atol=1e-14,
                         gradient=td.multilinear_gradient(M[None], [y]))
    for i, t in ((1, 1e2), (2, 1e6)):
        output = float(flow["v1"][i] @ M @ flow["v2"][i])
        nu = td.one_point_nu(M, v1, v2, alpha=alpha, output=output)
        c1, c2 = td.one_point_curve(M, v1, v2, alpha=alpha, nu=nu)
        reached = np.concatenate([flow["v1"][i], flow["v2"][i]])
        assert np.linalg.norm(reached - np.concatenate([c1[0], c2[0]])) < 1e-8 * np.linalg.norm(
            reached)
        assert abs(td.one_point_log_time(M, v1, v2, alpha=alpha, y=y, nu=nu) - np.log(t)) < 1e-7


def test_one_point_limit_is_the_top_singular_pair():
    _, y, _, M, v1, v2 = _one_point(2, 7)
    u1, u2 = td.one_point_limit(M, v1, v2, y=y)
    U1, s, U2t = np.linalg.svd(M)
    assert np.isclose(abs(u1 @ U1[:, 0]), 1.0, rtol=1e-12)
    assert np.isclose(abs(u2 @ U2t[0]), 1.0, rtol=1e-12)
    assert np.isclose(u1 @ M @ u2, np.sign(y) * s[0], rtol=1e-12)  # sign(μ1 μ2) = sign(y)
    far = td.one_point_curve(M, v1, v2, alpha=0.1, nu=np.sign(y) * 150 / s[0])
    for direction, v in zip((u1, u2), far, strict=True):
        assert abs(direction @ v[0] / np.linalg.norm(v[0]) - 1.0) < 1e-10


@pytest.mark.parametrize("kernel", [1, 2])
@pytest.mark.parametrize("seed", range(4))
def test_corollary4_direction_is_the_limit_of_the_curve(kernel, seed):
    x, y, basis, M, v1, v2 = _one_point(kernel, 10 + seed)
    beta = td.coefficients(basis, list(td.one_point_limit(M, v1, v2, y=y)))
    assert np.allclose(beta / np.linalg.norm(beta), td.corollary4_direction(x, y, kernel=kernel),
                       atol=1e-12)


def test_corollary4_low_and_high_pass():
    x = np.array([1.0, 2.0, 3.0, 2.0])  # positive autocorrelation
    low = td.corollary4_direction(x, 1.0, kernel=2)
    assert np.allclose(low, (2 * x + np.roll(x, -1) + np.roll(x, 1)) / np.linalg.norm(
        2 * x + np.roll(x, -1) + np.roll(x, 1)))
    alternating = x * (-1.0) ** np.arange(4)  # flips the sign of x^T <-x
    high = td.corollary4_direction(alternating, -1.0, kernel=2)
    target = -(2 * alternating - np.roll(alternating, -1) - np.roll(alternating, 1))
    assert np.allclose(high, target / np.linalg.norm(target))
    with pytest.raises(ValueError, match="autocorrelation"):
        td.corollary4_direction([1.0, 0.0, -1.0, 0.0], 1.0, kernel=2)


def test_conv_modulus_minimizer_is_corollary6_on_even_data():
    rng = np.random.default_rng(8)
    w = td.even_part(rng.uniform(0.5, 1.5, 5))
    X = td.even_part(rng.standard_normal((2, 5)))
    y = rng.standard_normal(2)
    for depth in (2, 3):
        assert np.allclose(td.conv_modulus_minimizer(X, y, alpha=0.5, depth=depth, w_bar=w),
                           tn.conv_net_limit(X, y, alpha=0.5, depth=depth, w_bar=w), atol=1e-8)


def _sensors(seed, d=4, n=2):
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((d, d)))[0]
    eig = rng.standard_normal((n, d))
    return U, eig, np.stack([(U * e) @ U.T for e in eig]), rng.standard_normal(n)


def test_simultaneous_eigenbasis_with_a_repeated_eigenvalue():
    U, _, _, _ = _sensors(9)
    A = np.stack([(U * e) @ U.T for e in ([1.0, 1.0, 2.0, 3.0], [0.5, -1.0, 0.5, 0.5])])
    V = td.simultaneous_eigenbasis(A)
    for matrix in A:
        D = V.T @ matrix @ V
        assert np.abs(D - np.diag(np.diag(D))).max() < 1e-12
    with pytest.raises(ValueError, match="commute"):
        td.simultaneous_eigenbasis(np.stack([A[0], np.diag([1.0, 2.0, 3.0, 4.0])]))


def test_matrix_sensing_gradient_matches_autograd():
    _, _, A, y = _sensors(10)
    rng = np.random.default_rng(10)
    params = {f"W{i}": torch.tensor(rng.standard_normal((4, 4)), requires_grad=True)
              for i in (1, 2, 3)}
    value, grads = td.matrix_sensing_gradient(A, y)({k: v.detach() for k, v in params.items()})
    product = params["W1"] @ params["W2"] @ params["W3"]
    reference = ((torch.einsum("nij,ij->n", torch.from_numpy(A), product)
                  - torch.from_numpy(y)) ** 2).sum()
    reference.backward()
    assert torch.isclose(value, reference.detach(), rtol=1e-12)
    for name, v in params.items():
        assert torch.allclose(grads[name], v.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("depth", [2, 3])
def test_matrix_sensing_limit_matches_gradient_flow(depth):
    _, _, A, y = _sensors(11)
    alpha = 0.5
    params = {f"W{i}": torch.from_numpy(alpha * np.eye(4)) for i in range(1, depth)}
    params[f"W{depth}"] = torch.zeros(4, 4, dtype=torch.float64)
    flow = gradient_flow(None, params, log_grid(1e5, 2), log_time=True, rtol=1e-12, atol=1e-14,
                         gradient=td.matrix_sensing_gradient(A, y))
    product = np.linalg.multi_dot([flow.final[f"W{i}"].numpy() for i in range(1, depth + 1)])
    assert np.abs(product - td.matrix_sensing_limit(A, y, alpha=alpha, depth=depth)).max() < 1e-8


def test_matrix_sensing_limit_is_optimal_over_symmetric_matrices():
    _, _, A, y = _sensors(12)
    M = td.matrix_sensing_limit(A, y, alpha=0.3, depth=2)
    assert td.matrix_sensing_kkt(A, M, alpha=0.3, depth=2) < 1e-8
    assert np.allclose(np.einsum("nij,ij->n", A, M), y, atol=1e-10)
    # a feasible symmetric matrix that is not the minimizer: M plus a symmetric direction
    # orthogonal to every sensor
    rng = np.random.default_rng(12)
    E = rng.standard_normal((4, 4))
    E = E + E.T
    basis = A.reshape(2, -1).T
    E = (E.ravel() - basis @ np.linalg.lstsq(basis, E.ravel(), rcond=None)[0]).reshape(4, 4)
    assert td.matrix_sensing_kkt(A, M + 0.1 * E, alpha=0.3, depth=2) > 1e-3


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: td.conv_basis(4, [2, 3]), "full length"),
        (lambda: td.conv_basis(4, [5, 4]), "at most 4"),
        (lambda: td.contract(np.ones((2, 3)), [np.ones(2)]), "2 vectors"),
        (lambda: td.contract(np.ones((2, 3)), [np.ones(2), np.ones(2)]), "k = 3"),
        (lambda: td.singular_residual(np.ones((2, 2)), [np.zeros(2), np.ones(2)]), "zero vector"),
        (lambda: td.multilinear_gradient(np.ones((2, 3)), [1.0, 1.0]), "L >= 2"),
        (lambda: td.corollary4_direction([1.0, 2.0], 0.0, kernel=1), "nonzero label"),
        (lambda: td.corollary4_direction([1.0, 2.0], 1.0, kernel=3), "at most 2"),
        (lambda: td.one_point_log_time(np.ones((1, 2)), [2.0], [0.0, 0.0], alpha=1.0, y=1.0,
                                       nu=-1.0), "sign of y"),
        (lambda: td.matrix_sensing_limit(np.ones((1, 2, 3)), [1.0], alpha=1.0, depth=2),
         "square"),
        (lambda: td.matrix_sensing_limit(np.array([[[0.0, 1.0], [0.0, 0.0]]]), [1.0], alpha=1.0,
                                         depth=2), "symmetric"),
    ],
)
def test_bad_input_is_a_value_error_naming_it(call, match):
    with pytest.raises(ValueError, match=match):
        call()
