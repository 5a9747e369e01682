"""Cases of :mod:`lib.networks.tensor_directions` for the bad-input fuzz (``cases()``, see
``tests/api_cases.py``).

One small valid call per public function, with a kind per argument. The oracles recompute the
answer independently (loops instead of einsum, autograd instead of the closed-form gradients, the
defining equations instead of the solvers), so that a bad input that is accepted but answered
wrongly shows up as a wrong answer rather than as "accepted".
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from api_cases import Arg, Case, applied, same, t

from lib.networks import tensor_directions as td

DT = torch.float64
P = Arg  # short


def _np(value) -> np.ndarray:
    return np.asarray(value.detach() if isinstance(value, torch.Tensor) else value, dtype=float)


def _vectors(vectors) -> list[np.ndarray]:
    return [_np(v) for v in vectors]


# ------------------------------------------------------------------------------------------
# Oracles
# ------------------------------------------------------------------------------------------


def _oracle_conv_basis(result, d, kernel_sizes) -> bool:
    sizes = list(kernel_sizes)
    expected = np.zeros((d, *sizes))
    for index in itertools.product(*[range(k) for k in sizes]):
        expected[(sum(index) % d, *index)] = 1.0
    return np.array_equal(result, expected)  # 0/1 entries: exact


def _loop_contract(A: np.ndarray, vectors: list, open_slot=None):
    """A ∘ (u_1, …) by an explicit sum over every index."""
    out = np.zeros(A.shape[open_slot]) if open_slot is not None else 0.0
    for index in itertools.product(*[range(k) for k in A.shape]):
        product = A[index]
        for mode, j in enumerate(index):
            if mode != open_slot:
                product *= vectors[mode][j]
        if open_slot is None:
            out += product
        else:
            out[index[open_slot]] += product
    return out


def _oracle_contract(result, tensor, vectors, open_slot) -> bool:
    return same(result, _loop_contract(_np(tensor), _vectors(vectors), open_slot), rtol=1e-10)


def _oracle_coefficients(result, basis, vectors) -> bool:
    B, vs = _np(basis), _vectors(vectors)
    expected = [_loop_contract(B[i], vs) for i in range(len(B))]
    return same(result, np.array(expected), rtol=1e-10)


def _oracle_output(result, tensor, vectors, activation) -> bool:
    H, vs = _np(tensor), _vectors(vectors)
    for v in vs[:-1]:
        H = sum(v[j] * H[j] for j in range(len(v)))
        if activation == "relu":
            H = np.maximum(H, 0.0)
    return same(result, float(H @ vs[-1]), rtol=1e-10)


def _oracle_gradient(result, tensors, y, loss, total) -> bool:
    value, grads = result
    params = {k: v.clone().requires_grad_(True) for k, v in _PARAMS3.items()}
    T, Y = torch.as_tensor(_np(tensors)), torch.as_tensor(_np(y))
    f = torch.einsum("nabc,a,b,c->n", T, *params.values())
    reference = torch.exp(-Y * f).sum() if loss == "exp" else 0.5 * ((f - Y) ** 2).sum()
    reference.backward()
    return same(value, reference.detach(), rtol=1e-10) and all(
        same(grads[k], params[k].grad, rtol=1e-9) for k in params)


def _oracle_residual(result, tensor, vectors) -> bool:
    A, vs = _np(tensor), [v / np.linalg.norm(v) for v in _vectors(vectors)]
    s = _loop_contract(A, vs)
    gaps = [np.linalg.norm(_loop_contract(A, vs, m) - s * vs[m]) for m in range(A.ndim)]
    return same(result, (s, max(gaps) / np.linalg.norm(A)), rtol=1e-9)


def _oracle_power(result, tensor, start, steps, tol) -> bool:
    s, vectors = result
    A, vectors = _np(tensor), list(vectors)
    scale = 1e-8 * np.abs(A).sum()
    return all(abs(np.linalg.norm(v) - 1) < 1e-12 for v in vectors) and all(
        np.linalg.norm(_loop_contract(A, vectors, m) - s * vectors[m]) < scale
        for m in range(A.ndim))


def _oracle_corollary4(result, x, y, kernel) -> bool:
    x = _np(x)
    x = x / np.abs(x).max()  # the direction is scale-free; this keeps 1e300 entries finite
    if kernel == 1:
        beta = math.copysign(1.0, y) * x
    else:
        left, right = np.roll(x, -1), np.roll(x, 1)
        beta = math.copysign(1.0, y) * (2 * x + np.sign(x @ left) * (left + right))
    return same(result, beta / np.linalg.norm(beta), rtol=1e-10)


def _oracle_even(result, x) -> bool:
    x = _np(x)
    d = x.shape[-1]
    reflected = x[..., [(-j) % d for j in range(d)]]
    return same(result, (x + reflected) / 2, rtol=1e-12)


def _oracle_eigenbasis(result, matrices) -> bool:
    U = _np(result)
    if np.abs(U.T @ U - np.eye(len(U))).max() > 1e-10:
        return False
    for A in _np(matrices):
        D = U.T @ A @ U
        if np.abs(D - np.diag(np.diag(D))).max() > 1e-9 * max(1.0, np.abs(A).max()):
            return False
    return True


def _oracle_sensing_gradient(result, A, y) -> bool:
    value, grads = result
    params = {k: v.clone().requires_grad_(True) for k, v in _SENSING.items()}
    product = params["W1"] @ params["W2"]
    residuals = torch.einsum("nij,ij->n", torch.as_tensor(_np(A)), product) - torch.as_tensor(
        _np(y))
    reference = (residuals**2).sum()
    reference.backward()
    return same(value, reference.detach(), rtol=1e-10) and all(
        same(grads[k], params[k].grad, rtol=1e-9) for k in params)


def _oracle_sensing_limit(result, A, y, alpha, depth) -> bool:
    """Feasible, symmetric, and optimal over symmetric matrices (the KKT residual, which uses no
    eigenbasis of the sensors)."""
    M = _np(result)
    feasible = np.allclose(np.einsum("nij,ij->n", _np(A), M), _np(y), atol=1e-8)
    return feasible and td.matrix_sensing_kkt(A, (M + M.T) / 2, alpha=alpha, depth=depth) < 1e-6


# ------------------------------------------------------------------------------------------
# The cases
# ------------------------------------------------------------------------------------------

_RNG = np.random.default_rng(0)
_A = torch.from_numpy(np.tensordot(_RNG.standard_normal(4), td.conv_basis(4, [2, 3, 4]), axes=1))
_V3 = [torch.from_numpy(_RNG.standard_normal(k)) for k in (2, 3, 4)]
_PARAMS3 = {f"v{i + 1}": v.clone() for i, v in enumerate(_V3)}
_M = t(1.0, 2.0, -0.5, 0.3, 2.0, -0.5, 0.3, 1.0).reshape(2, 4)  # M(x) for k1 = 2, x = (1, 2, ...)
_U1, _, _U2t = np.linalg.svd(_M.numpy(), full_matrices=False)
_V2BAR = torch.from_numpy(np.array([0.3, -0.2, 0.1, 0.4]))
_V1BAR = torch.from_numpy(_U1 @ (np.array([1.0, -1.0]) * np.sqrt((_U2t @ _V2BAR.numpy()) ** 2 + 1)))
_EIG = np.array([[1.0, -0.5, 2.0], [0.3, 1.0, -1.0]])
_Q = np.linalg.qr(np.array([[1.0, 0.2, 0.1], [0.3, 1.0, -0.2], [0.0, 0.4, 1.0]]))[0]
_SENSORS = torch.from_numpy(np.stack([(_Q * e) @ _Q.T for e in _EIG]))
_SENSING = {"W1": t(1.0, 0.2, 0.0, 0.1, 0.9, -0.3, 0.0, 0.2, 1.1).reshape(3, 3),
            "W2": t(0.5, 0.0, 0.1, -0.2, 0.4, 0.0, 0.3, 0.1, 0.6).reshape(3, 3)}


def _applied(factory, params):
    return applied(factory, params)


def _one_point_args():
    return [P("matrix", _M, "tensor"), P("v1_bar", _V1BAR, "tensor"),
            P("v2_bar", _V2BAR, "tensor")]


def cases() -> list[Case]:
    alpha = P("alpha", 0.5, "float", True)
    return [
        Case("networks.tensor_directions.conv_basis", td.conv_basis,
             [P("d", 4, "int"), P("kernel_sizes", [2, 3, 4], "seq")], oracle=_oracle_conv_basis),
        Case("networks.tensor_directions.contract", td.contract,
             [P("tensor", _A, "tensor"), P("vectors", _V3, "object"),
              P("open_slot", 1, "int", True)], oracle=_oracle_contract),
        Case("networks.tensor_directions.coefficients", td.coefficients,
             [P("basis", torch.from_numpy(td.conv_basis(4, [2, 3, 4])), "tensor"),
              P("vectors", _V3, "object")], oracle=_oracle_coefficients),
        Case("networks.tensor_directions.tensor_network_output", td.tensor_network_output,
             [P("tensor", _A, "tensor"), P("vectors", _V3, "object"),
              P("activation", "relu", "choice", True)], oracle=_oracle_output),
        Case("networks.tensor_directions.multilinear_gradient",
             _applied(td.multilinear_gradient, _PARAMS3),
             [P("tensors", torch.stack([_A, 0.5 * _A]), "tensor"), P("y", t(1.0, -1.0), "tensor"),
              P("loss", "exp", "choice", True), P("total", False, "bool", True)],
             oracle=_oracle_gradient),
        Case("networks.tensor_directions.singular_residual", td.singular_residual,
             [P("tensor", _A, "tensor"), P("vectors", _V3, "object")], oracle=_oracle_residual),
        Case("networks.tensor_directions.power_method", td.power_method,
             [P("tensor", _A, "tensor"), P("start", _V3, "object"), P("steps", 10_000, "int", True),
              P("tol", 1e-13, "float", True)], oracle=_oracle_power),
        Case("networks.tensor_directions.direction_path", td.direction_path,
             [P("tensor", _A, "tensor"),
              P("vectors", [v * np.sign(td.contract(_A, _V3)) if i == 0 else v
                            for i, v in enumerate(_V3)], "object"),
              P("log_norms", t(1.5, 2.0, 4.0), "tensor")]),
        Case("networks.tensor_directions.theorem3_gap", td.theorem3_gap, _one_point_args()),
        Case("networks.tensor_directions.one_point_curve", td.one_point_curve,
             [*_one_point_args(), alpha, P("nu", t(0.0, 0.5, -1.0), "tensor", True)]),
        Case("networks.tensor_directions.one_point_limit", td.one_point_limit,
             [*_one_point_args(), P("y", 1.0, "float", True)]),
        Case("networks.tensor_directions.one_point_nu", td.one_point_nu,
             [*_one_point_args(), alpha, P("output", 3.0, "float", True)]),
        Case("networks.tensor_directions.one_point_log_time", td.one_point_log_time,
             [*_one_point_args(), alpha, P("y", 1.0, "float", True),
              P("nu", 0.7, "float", True)]),
        Case("networks.tensor_directions.corollary4_direction", td.corollary4_direction,
             [P("x", t(1.0, 2.0, -0.5, 0.3), "tensor"), P("y", 1.0, "float"),
              P("kernel", 2, "int", True)], oracle=_oracle_corollary4),
        Case("networks.tensor_directions.even_part", td.even_part,
             [P("x", t(1.0, 2.0, -0.5, 0.3, 4.0), "tensor")], oracle=_oracle_even),
        Case("networks.tensor_directions.conv_modulus_minimizer", td.conv_modulus_minimizer,
             [P("X", t(1.0, 0.5, -0.3, 0.2, 0.1, -1.0, 0.4, 0.0, 0.6, 0.2).reshape(2, 5),
                "tensor"),
              P("y", t(0.7, -0.4), "tensor"), alpha, P("depth", 2, "int", True),
              P("w_bar", t(1.0, 0.8, 0.6, 0.6, 0.8), "tensor", True)]),
        Case("networks.tensor_directions.simultaneous_eigenbasis", td.simultaneous_eigenbasis,
             [P("matrices", _SENSORS, "tensor")], oracle=_oracle_eigenbasis),
        Case("networks.tensor_directions.matrix_sensing_gradient",
             _applied(td.matrix_sensing_gradient, _SENSING),
             [P("A", _SENSORS, "tensor"), P("y", t(0.5, -1.0), "tensor")],
             oracle=_oracle_sensing_gradient),
        Case("networks.tensor_directions.matrix_sensing_limit", td.matrix_sensing_limit,
             [P("A", _SENSORS, "tensor"), P("y", t(0.5, -1.0), "tensor"), alpha,
              P("depth", 2, "int", True)], oracle=_oracle_sensing_limit),
        Case("networks.tensor_directions.matrix_sensing_kkt", td.matrix_sensing_kkt,
             [P("A", _SENSORS, "tensor"),
              P("M", torch.from_numpy(td.matrix_sensing_limit(_SENSORS, [0.5, -1.0], alpha=0.5,
                                                              depth=2)), "tensor"),
              alpha, P("depth", 2, "int", True)]),
    ]
