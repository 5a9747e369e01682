"""Cases of :mod:`lib.networks.tensor_nets` and :mod:`lib.networks.saddles` for the bad-input fuzz
(``cases()``).

One small valid call per public callable, with a kind per argument (see ``tests/api_cases.py``,
whose :class:`Case`/:class:`Arg` and outcome classes these share). Oracles recompute an answer
independently, so that a bad input that is accepted but answered wrongly (a broadcast, a mixed
row) shows up as a wrong answer rather than as "accepted".

Three saddles functions answer ``inf`` or ``nan`` on purpose where the quantity is undefined or
infinite (Theorem 3.1's and Proposition 3.3's bounds are vacuous, the radius of Proposition 2.2
has blown up, a layer's activations are zero). Their cases split the answer into the finite
entries and the mask of non-finite ones, and the oracle checks both: the mask must be exactly
where the documented condition holds, recomputed here.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from api_cases import Arg, Case, applied, same, t
from scipy.integrate import quad
from scipy.optimize import brentq

from lib.networks import saddles
from lib.networks import tensor_nets as tn

DT = torch.float64
P = Arg  # short


def _np(value) -> np.ndarray:
    return np.asarray(value.detach() if isinstance(value, torch.Tensor) else value, dtype=float)


def _close(result, expected, rtol: float = 1e-9) -> bool:
    return same(result, expected, rtol=rtol)


# ------------------------------------------------------------------------------------------
# Oracles for lib.networks.tensor_nets
# ------------------------------------------------------------------------------------------


def _h_by_quadrature(t_value: float, depth: int) -> float:
    """h_L(t) = sec^{L−1}θ tanθ with ∫_0^θ cos^{L−3} = |t| (Lemma 5.1), θ by root finding."""
    if depth == 2:
        return math.sinh(2 * t_value) / 2

    def time_of(theta):
        return quad(lambda u: math.cos(u) ** (depth - 3), 0.0, theta, epsabs=1e-15)[0]

    theta = brentq(lambda th: time_of(th) - abs(t_value), 0.0, math.pi / 2, xtol=1e-15)
    return math.copysign(math.tan(theta) / math.cos(theta) ** (depth - 1), t_value)


def _oracle_h(result, t, depth) -> bool:
    values = _np(t)
    expected = np.vectorize(lambda v: _h_by_quadrature(float(v), int(depth)))(values)
    # quadrature and root finding to ~1e-12 relative; h is steep near its pole: allow 1e-7
    return bool(np.allclose(np.asarray(result), expected, rtol=1e-7, atol=1e-12))


def _oracle_two_layer_loss(result, architecture, X, y, loss) -> bool:
    """½ Σ_i (v_1ᵀ M(x_i) v_2 − y_i)² (or Σ_i exp(−y_i f_i)), example by example."""
    X, y = _np(X), _np(y)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        return False
    basis = tn.basis_tensors(architecture, X.shape[1])
    v1, v2 = _np(_PARAMS2["v1"]), _np(_PARAMS2["v2"])
    f = [v1 @ np.tensordot(x, basis, axes=1) @ v2 for x in X]
    terms = [
        0.5 * (fi - yi) ** 2 if loss == "square" else math.exp(-yi * fi)
        for fi, yi in zip(f, y, strict=True)
    ]
    return _close(result, sum(terms))


def _oracle_two_layer_gradient(result, architecture, X, y, loss, total) -> bool:
    value, grads = result
    params = {k: v.clone().requires_grad_(True) for k, v in _PARAMS2.items()}
    if not _oracle_two_layer_loss(value.detach(), architecture, X, y, loss):
        return False
    X_t, y_t = torch.as_tensor(_np(X)), torch.as_tensor(_np(y))
    beta = tn.tensor_coefficients(architecture, params["v1"], params["v2"])
    f = X_t @ beta
    reference = 0.5 * ((f - y_t) ** 2).sum() if loss == "square" else torch.exp(-y_t * f).sum()
    reference.backward()
    return all(_close(grads[k], params[k].grad) for k in ("v1", "v2"))


def _oracle_angles(result, betas, direction) -> bool:
    """The angle of each row of betas with direction, one row at a time."""
    B, u = _np(betas), _np(direction)
    if u.ndim != 1 or B.shape[-1:] != u.shape:
        return False
    rows = B.reshape(-1, u.size)
    unit = u / np.abs(u).max()  # angles are scale-free; this keeps 1e300 inputs finite

    def angle(r):
        # Kahan's 2 atan2(|a − b|, |a + b|) of the unit vectors: accurate at 0° and 180°, where
        # the arccos of a rounded cosine is off by up to √(2ε) rad
        a, b = r / np.linalg.norm(r / np.abs(r).max()) / np.abs(r).max(), unit / np.linalg.norm(
            unit)
        return math.degrees(2 * math.atan2(np.linalg.norm(a - b), np.linalg.norm(a + b)))

    expected = np.array([angle(r) for r in rows])
    got = np.asarray(result, dtype=np.float64).reshape(-1)
    if got.shape != expected.shape:
        return False
    # lib takes the arccos of a cosine rounded to ε: its angle is off by up to √(2ε) rad
    # (1.2e-6°) near 0° and 180°, and by a few ε relative elsewhere
    return bool(np.all(np.abs(got - expected) <= 1e-7 * np.abs(expected) + math.degrees(
        math.sqrt(2 * np.finfo(float).eps))))


def _oracle_tensor_coefficients(result, architecture, v1, v2) -> bool:
    """β_i = v_1ᵀ M(e_i) v_2 with M(e_i) written out for d = 2 (conv: M(e_i)_{ab} = [a+b ≡ i])."""
    a, b = _np(v1), _np(v2)
    if a.shape != (2,) or b.shape != (2,) or architecture != "conv":
        return False
    expected = [a[0] * b[0] + a[1] * b[1], a[0] * b[1] + a[1] * b[0]]
    return _close(result, np.array(expected))


def _oracle_diagonal_params(result, w_bar, alpha, depth, last) -> bool:
    w = _np(w_bar)
    lst = np.zeros_like(w) if last is None else _np(last)
    if w.shape != (2,) or lst.shape != (2,):
        return False
    names = [f"w{j}" for j in range(1, int(depth) + 1)]
    if sorted(result) != sorted(names):
        return False
    return all(_close(result[n], alpha * w) for n in names[:-1]) and _close(
        result[names[-1]], alpha * lst
    )


def _oracle_diagonal_coefficients(result, params) -> bool:
    layers = [_np(params[k]) for k in sorted(params)]
    if any(layer.shape != (2,) for layer in layers):
        return False
    return _close(result, np.prod(layers, axis=0))


def _oracle_curve_distance(result, architecture, x, betas, alpha, v1_bar, v2_bar) -> bool:
    B = _np(betas)
    if B.ndim not in (1, 2) or B.shape[-1] != 2 or _np(x).shape != (2,):
        return False
    return np.asarray(result).shape == B.shape[:-1] and bool(np.all(np.asarray(result) >= 0))


def _oracle_regression_loss(result, coefficients, X, y) -> bool:
    X, y = _np(X), _np(y)
    if X.shape != (2, 2) or y.shape != (2,):
        return False
    beta = _np(tn.diagonal_coefficients(_DIAG_PARAMS))
    return _close(result, 0.5 * ((X @ beta - y) ** 2).sum())


# ------------------------------------------------------------------------------------------
# Oracles for lib.networks.saddles
# ------------------------------------------------------------------------------------------


def _data(X, G) -> tuple[np.ndarray, np.ndarray]:
    X, G = _np(X), _np(G)
    return X, G.reshape(len(G), -1) if G.ndim == 1 else G


def _unit_data(X, G) -> tuple[np.ndarray, np.ndarray, float]:
    """X/max|X|, G/max|G| and the product of the two maxima: every speed here has degree 1 in X
    and in G, so the oracles compute on the unit-scale data (no overflow for 1e300 inputs)."""
    X, G = _data(X, G)
    mx, mg = np.abs(X).max(initial=0.0), np.abs(G).max(initial=0.0)
    if mx == 0 or mg == 0:
        return X, G, 0.0
    return X / mx, G / mg, float(mx) * float(mg)


def _oracle_upper_bound(result, X, G) -> bool:
    X, G, scale = _unit_data(X, G)
    return _close(result, np.linalg.norm(X) * np.linalg.norm(G) * scale)


def _oracle_linear_speed(result, X, G) -> bool:
    X, G, scale = _unit_data(X, G)
    if scale == 0:
        return result == 0
    expected = np.linalg.svd(G.T @ X, compute_uv=False)[0]
    # rounding in GᵀX is relative to ‖X‖_F‖G‖_F, not to the (possibly cancelling) answer
    return abs(result / scale - expected) <= 1e-12 * np.linalg.norm(X) * np.linalg.norm(G)


def _oracle_rank1(result, X, G) -> bool:
    """At least the best of 4096 directions on the circle, at most ‖X‖_F‖G‖_F (d_in = 2)."""
    X, G, factor = _unit_data(X, G)
    if X.ndim != 2 or X.shape[1] != 2 or G.shape[0] != X.shape[0]:
        return False
    angles = np.linspace(0, 2 * np.pi, 4096, endpoint=False)
    w = np.stack([np.cos(angles), np.sin(angles)], 1)
    sampled = np.linalg.norm(np.maximum(w @ X.T, 0) @ G, axis=-1).max()
    scale = np.linalg.norm(X) * np.linalg.norm(G)
    unit = result / factor
    return bool(sampled - 1e-12 * scale <= unit <= scale * (1 + 1e-12))


def _oracle_localized_loss(result, weights, X, G) -> bool:
    """Tr[Gᵀ f(X)] with the network applied point by point."""
    X, G = _data(X, G)
    Ws = [_np(w) for w in weights]
    if any(w.ndim != 2 for w in Ws) or len(X) != len(G):
        return False
    total = 0.0
    for x, g in zip(X, G, strict=True):
        h = x
        for index, w in enumerate(Ws):
            h = w @ h
            h = np.maximum(h, 0) if index < len(Ws) - 1 else h
        total += float(g @ h)
    return _close(result, total)


def _svals(A) -> np.ndarray:
    return np.linalg.svd(_np(A), compute_uv=False)


def _oracle_stable_rank(result, A) -> bool:
    s = _svals(A)
    s = s / s.max()  # scale-free: srank is homogeneous of degree 0
    return _close(result, (s**2).sum() / s[0] ** 2)


def _oracle_tail_mass(result, A) -> bool:
    s = _svals(A)
    s = s / s.max()
    return abs(result - (s[1:] ** 2).sum() / (s**2).sum()) <= 1e-12


def _split(values) -> tuple[np.ndarray, np.ndarray]:
    """(finite entries with the non-finite ones zeroed, mask of the non-finite ones)."""
    values = np.asarray(values, dtype=float)
    mask = ~np.isfinite(values)
    return np.where(mask, 0.0, values), mask


def _theorem31_bound(X, G, speed, layer):
    return _split(saddles.theorem31_bound(X, G, speed, layer))


def _oracle_theorem31(result, X, G, speed, layer) -> bool:
    X, G = _data(X, G)
    r = np.linalg.norm(X) * np.linalg.norm(G) / speed
    c = r * math.sqrt(2 * math.log(r))
    x = c / np.sqrt(np.atleast_1d(_np(layer)))
    values, mask = result
    expected = np.where(x < 1, 8 * x / np.where(x < 1, 1 - x, 1.0), 0.0)
    return bool(np.array_equal(mask, x >= 1)) and _close(values, expected)


def _proposition33_bound(G, epsilon, speed):
    return _split([saddles.proposition33_bound(G, epsilon, speed)])


def _oracle_proposition33(result, G, epsilon, speed) -> bool:
    shift = np.linalg.norm(_np(G)) * epsilon
    values, mask = result
    if shift >= speed:
        return bool(mask[0])
    return not mask[0] and _close(values[0], 8 * shift / (speed - shift))


def _radius(times, radius0, speed, depth, normalization):
    return _split(
        saddles.radius_along_escape(
            times, radius0=radius0, speed=speed, depth=depth, normalization=normalization
        )
    )


def _oracle_radius(result, times, radius0, speed, depth, normalization) -> bool:
    """R(t) of Proposition 2.2 by integrating dR/dt = L s_u R^{L−1} (scipy, tight tolerances)."""
    from scipy.integrate import solve_ivp

    times = _np(times)
    if times.ndim != 1 or np.any(times < 0) or isinstance(depth, bool):
        return False
    L = int(depth)
    s_u = speed * L ** (-L / 2) if normalization == "sphere" else speed
    blow_up = math.inf if L == 2 else radius0 ** (2 - L) / ((L - 2) * L * s_u)
    values, mask = result
    if not np.array_equal(mask, times >= blow_up):
        return False
    inside = times[times < 0.9 * blow_up]
    if len(inside) == 0:
        return True
    order = np.argsort(inside)
    solution = solve_ivp(
        lambda _, r: L * s_u * r ** (L - 1),
        (0.0, float(inside.max())),
        [radius0],
        t_eval=inside[order],
        rtol=1e-11,
        atol=1e-14,
        method="DOP853",
    )
    expected = np.empty_like(inside)
    expected[order] = solution.y[0]
    return bool(np.allclose(values[times < 0.9 * blow_up], expected, rtol=1e-7))


def _layer_statistics(weights, X):
    """layer_statistics with its documented nans (a layer whose Z_ℓ is zero) split off."""
    stats = saddles.layer_statistics(weights, X)
    out = {}
    for key, value in stats.items():
        if key == "singular_values":
            out[key] = value
        else:
            out[key], out[key + " nan"] = _split(value)
    return out


def _oracle_layer_statistics(result, weights, X) -> bool:
    """The nans sit exactly on the hidden layers whose pre-activation or activation is zero."""
    hidden, dead = _np(X), []
    Ws = [_np(w) for w in weights]
    for w in Ws[:-1]:
        z = hidden @ w.T
        hidden = np.maximum(z, 0)
        dead.append(not np.any(z) or not np.any(hidden))
    tails = [(s[1:] ** 2).sum() / (s**2).sum() for s in map(_svals, Ws)]
    return (
        np.array_equal(result["nonlinearity nan"], dead)
        and not result["tail_weights nan"].any()
        and _close(result["tail_weights"], np.array(tails), rtol=1e-7)
    )


# ------------------------------------------------------------------------------------------
# The cases
# ------------------------------------------------------------------------------------------

_PARAMS2 = {"v1": t(0.6, -0.4), "v2": t(0.3, 0.5)}
_DIAG_PARAMS = {"w1": t(0.5, 0.3), "w2": t(0.4, -0.2), "w3": t(0.1, 0.2)}


def tensor_nets_cases() -> list[Case]:
    X1, x1 = t(1.0, 2.0).reshape(1, 2), t(1.0, 2.0)
    X23 = t(1.0, 0.5, -0.3, 0.2, 1.0, 0.4).reshape(2, 3)
    y2 = t(0.7, -0.4)
    w3 = t(1.0, -0.8, 0.6)
    X22 = t(1.0, 2.0, -0.5, 1.0).reshape(2, 2)
    v1_bar, v2_bar = (torch.from_numpy(v) for v in tn.figure1_init("diagonal", [0.3, 0.2]))
    betas = torch.from_numpy(
        tn.two_layer_curve("diagonal", x1, alpha=0.5, v1_bar=v1_bar, v2_bar=v2_bar, nu=[0.1, 0.4])
    )
    betas = betas + t(0.01, -0.02)
    X_cls = t(1.0, 2.0, -1.0, 0.5).reshape(2, 2)
    fc_params = {
        "W1": t(1.0, 0.2, -0.3, 0.8).reshape(2, 2),
        "W2": t(0.5, 0.1, 0.0, 0.7).reshape(2, 2),
        "w3": t(0.2, -0.4),
    }

    depth = [P("depth", 3, "int")]
    kw_depth = [P("depth", 3, "int", True)]
    two_layer = [
        P("alpha", 0.5, "float", True),
        P("v1_bar", v1_bar, "tensor", True),
        P("v2_bar", v2_bar, "tensor", True),
    ]
    return [
        Case("networks.tensor_nets.pole", tn.pole, depth),
        Case(
            "networks.tensor_nets.h_L",
            tn.h_L,
            [P("t", t(0.1, -0.5, 1.0), "tensor"), *depth],
            oracle=_oracle_h,
        ),
        Case(
            "networks.tensor_nets.h_L_derivative",
            tn.h_L_derivative,
            [P("t", t(0.1, -0.5, 1.0), "tensor"), *depth],
        ),
        Case(
            "networks.tensor_nets.h_L_inverse",
            tn.h_L_inverse,
            [P("y", t(0.1, -2.0, 30.0), "tensor"), *depth],
        ),
        Case("networks.tensor_nets.H_L", tn.H_L, [P("y", t(0.1, -2.0, 30.0), "tensor"), *depth]),
        Case("networks.tensor_nets.Phi_L", tn.Phi_L, [P("t", t(0.1, -0.5, 1.0), "tensor"), *depth]),
        Case(
            "networks.tensor_nets.Q_objective",
            tn.Q_objective,
            [
                P("rho", t(0.3, -0.2), "tensor"),
                P("alpha", 0.5, "float", True),
                *kw_depth,
                P("eta_bar", t(1.0, 0.3), "tensor", True),
            ],
        ),
        Case(
            "networks.tensor_nets.dual_root",
            tn.dual_root,
            [
                P("Z", X23, "tensor"),
                P("y", y2, "tensor"),
                P("alpha", 0.5, "float", True),
                *kw_depth,
                P("eta_bar", w3, "tensor", True),
                P("tol", 1e-14, "float", True),
            ],
        ),
        Case(
            "networks.tensor_nets.diagonal_net_limit",
            tn.diagonal_net_limit,
            [
                P("X", X23, "tensor"),
                P("y", y2, "tensor"),
                P("alpha", 0.5, "float", True),
                *kw_depth,
                P("w_bar", w3, "tensor", True),
            ],
        ),
        Case(
            "networks.tensor_nets.diagonal_net_path",
            tn.diagonal_net_path,
            [
                P("X", X23, "tensor"),
                P("nu", t(0.1, -0.2, 0.3, 0.0).reshape(2, 2), "tensor"),
                P("alpha", 0.5, "float", True),
                *kw_depth,
                P("w_bar", w3, "tensor", True),
            ],
        ),
        Case("networks.tensor_nets.dft_matrix", tn.dft_matrix, [P("d", 4, "int")]),
        Case(
            "networks.tensor_nets.conv_net_limit",
            tn.conv_net_limit,
            [
                P("X", X1, "tensor"),
                P("y", t(1.0), "tensor"),
                P("alpha", 0.5, "float", True),
                *kw_depth,
                P("w_bar", t(1.0, 0.3), "tensor", True),
                P("corrected", True, "bool", True),
            ],
        ),
        Case(
            "networks.tensor_nets.min_l1_solution",
            tn.min_l1_solution,
            [
                P("X", X23, "tensor"),
                P("y", y2, "tensor"),
                P(
                    "transform",
                    t(1.0, 0.2, 0.0, 0.0, 1.0, 0.3, 0.1, 0.0, 1.0).reshape(3, 3),
                    "tensor",
                    True,
                ),
                P("weights", t(1.0, 2.0, 0.5), "tensor", True),
                P("margin", False, "bool", True),
            ],
        ),
        Case(
            "networks.tensor_nets.min_l2_solution",
            tn.min_l2_solution,
            [
                P("X", X23, "tensor"),
                P("y", y2, "tensor"),
                P("weights", t(1.0, 2.0, 0.5), "tensor", True),
            ],
        ),
        Case(
            "networks.tensor_nets.max_margin_l2",
            tn.max_margin_l2,
            [P("X", X_cls, "tensor"), P("y", t(1.0, -1.0), "tensor")],
        ),
        Case(
            "networks.tensor_nets.basis_tensors",
            tn.basis_tensors,
            [P("architecture", "fc", "choice"), P("d", 2, "int"), P("hidden", 3, "int", True)],
        ),
        Case(
            "networks.tensor_nets.tensor_coefficients",
            tn.tensor_coefficients,
            [
                P("architecture", "conv", "choice"),
                P("v1", t(0.6, -0.4), "tensor"),
                P("v2", t(0.3, 0.5), "tensor"),
            ],
            oracle=_oracle_tensor_coefficients,
        ),
        Case(
            "networks.tensor_nets.two_layer_loss",
            applied(tn.two_layer_loss, _PARAMS2),
            [
                P("architecture", "diagonal", "choice"),
                P("X", X22, "tensor"),
                P("y", y2, "tensor"),
                P("loss", "square", "choice", True),
            ],
            oracle=_oracle_two_layer_loss,
        ),
        Case(
            "networks.tensor_nets.two_layer_gradient",
            applied(tn.two_layer_gradient, _PARAMS2),
            [
                P("architecture", "diagonal", "choice"),
                P("X", X22, "tensor"),
                P("y", y2, "tensor"),
                P("loss", "exp", "choice", True),
                P("total", False, "bool", True),
            ],
            oracle=_oracle_two_layer_gradient,
        ),
        Case(
            "networks.tensor_nets.data_svd",
            tn.data_svd,
            [P("architecture", "fc", "choice"), P("x", x1, "tensor"), P("hidden", 2, "int", True)],
        ),
        Case(
            "networks.tensor_nets.two_layer_limit",
            tn.two_layer_limit,
            [
                P("architecture", "diagonal", "choice"),
                P("x", x1, "tensor"),
                P("y", 1.0, "float"),
                *two_layer,
            ],
        ),
        Case(
            "networks.tensor_nets.two_layer_curve",
            tn.two_layer_curve,
            [
                P("architecture", "diagonal", "choice"),
                P("x", x1, "tensor"),
                *two_layer,
                P("nu", t(0.1, 0.5), "tensor", True),
            ],
        ),
        Case(
            "networks.tensor_nets.curve_distance",
            tn.curve_distance,
            [
                P("architecture", "diagonal", "choice"),
                P("x", x1, "tensor"),
                P("betas", betas, "tensor"),
                *two_layer,
            ],
            oracle=_oracle_curve_distance,
        ),
        Case(
            "networks.tensor_nets.figure1_init",
            tn.figure1_init,
            [
                P("architecture", "conv", "choice"),
                P("z_bar", t(0.3, 0.2), "tensor"),
                P("margin", 1e-3, "float", True),
            ],
        ),
        Case(
            "networks.tensor_nets.figure1_batch",
            tn.figure1_batch,
            [
                P("architecture", "diagonal", "choice"),
                P("alphas", [0.5, 1.0], "seq"),
                P("z_bars", [[0.3, 0.2], [-0.1, 0.4]], "seq"),
                P("x", x1, "tensor", True),
                P("y", 1.0, "float", True),
            ],
            examples=6,
        ),
        Case(
            "networks.tensor_nets.angle_degrees",
            tn.angle_degrees,
            [
                P("betas", t(1.0, 0.0, 0.5, 0.5, -1.0, 2.0).reshape(3, 2), "tensor"),
                P("direction", t(1.0, 2.0), "tensor"),
            ],
            oracle=_oracle_angles,
        ),
        Case(
            "networks.tensor_nets.diagonal_params",
            tn.diagonal_params,
            [
                P("w_bar", t(1.0, 0.3), "tensor"),
                P("alpha", 0.5, "float", True),
                *kw_depth,
                P("last", t(0.2, -0.1), "tensor", True),
            ],
            oracle=_oracle_diagonal_params,
        ),
        Case(
            "networks.tensor_nets.diagonal_coefficients",
            tn.diagonal_coefficients,
            [P("params", _DIAG_PARAMS, "params")],
            oracle=_oracle_diagonal_coefficients,
        ),
        Case(
            "networks.tensor_nets.conv_coefficients",
            tn.conv_coefficients,
            [P("params", _DIAG_PARAMS, "params")],
        ),
        Case("networks.tensor_nets.fc_coefficients", tn.fc_coefficients, [P("params", fc_params,
            "params")]),
        Case(
            "networks.tensor_nets.diagonal_gradient",
            applied(tn.diagonal_gradient, _DIAG_PARAMS),
            [P("X", X22, "tensor"), P("y", y2, "tensor")],
        ),
        Case(
            "networks.tensor_nets.fc_gradient",
            applied(tn.fc_gradient, fc_params),
            [P("X", X22, "tensor"), P("y", y2, "tensor")],
        ),
        Case(
            "networks.tensor_nets.TwoLayerSVD",
            tn.TwoLayerSVD,
            [
                P("U1", t(0.6, 0.8, -0.8, 0.6).reshape(2, 2), "tensor"),
                P("s", t(2.0, 0.5), "tensor"),
                P("U2", torch.eye(2, dtype=DT), "tensor"),
            ],
        ),
        Case(
            "networks.tensor_nets.TwoLayerLimit",
            tn.TwoLayerLimit,
            [
                P("beta", t(0.2, 0.4), "tensor"),
                P("v1", t(0.5, 0.6), "tensor"),
                P("v2", t(0.4, 0.7), "tensor"),
                P("nu", 0.3, "float"),
            ],
        ),
        Case(
            "networks.tensor_nets.RunBatch",
            tn.RunBatch,
            [
                P(
                    "params",
                    {"v1": t(0.5, 0.6).reshape(1, 2), "v2": t(0.4, 0.7).reshape(1, 2)},
                    "params",
                ),
                P("settings", [(0.5, np.array([1.0, 1.2]), np.array([0.8, 1.4]))], "seq"),
                P("predicted", t(0.2, 0.4).reshape(1, 2), "tensor"),
            ],
        ),
        Case(
            "networks.tensor_nets.regression_loss",
            applied(tn.regression_loss, _DIAG_PARAMS),
            [
                P("coefficients", tn.diagonal_coefficients, "callable"),
                P("X", X22, "tensor"),
                P("y", y2, "tensor"),
            ],
            oracle=_oracle_regression_loss,
            # a loss closure for lib.engine.flow: a coefficient map's overflow is passed on (its
            # docstring: values are the engines' to check)
            overflow_passes=("coefficients",),
        ),
    ]


def saddles_cases() -> list[Case]:
    X, G = saddles.example1()
    rho = saddles.example1_rank2_weights()
    labels = torch.tensor([0, 1, 1, 0, 2, 1, 0, 2])
    search = saddles.escape_search(X, G, depth=3, width=4, seeds=[0, 1], steps=20)
    data = [P("X", X, "tensor"), P("G", G, "tensor")]
    searching = [
        P("depth", 3, "int", True),
        P("width", 4, "int", True),
    ]
    return [
        Case(
            "networks.saddles.cross_entropy_gradient",
            saddles.cross_entropy_gradient,
            [P("labels", labels, "tensor"), P("classes", 3, "int")],
        ),
        Case(
            "networks.saddles.localized_loss",
            saddles.localized_loss,
            [P("weights", rho, "seq"), *data],
            oracle=_oracle_localized_loss,
        ),
        Case("networks.saddles.speed_of", saddles.speed_of, [P("weights", rho, "seq"), *data]),
        Case("networks.saddles.rank1_escape_speed", saddles.rank1_escape_speed, data,
            oracle=_oracle_rank1),
        Case(
            "networks.saddles.rank1_speed_profile",
            saddles.rank1_speed_profile,
            [*data, P("angles", t(0.0, 0.5, 2.0), "tensor")],
        ),
        Case(
            "networks.saddles.linear_escape_speed",
            saddles.linear_escape_speed,
            data,
            oracle=_oracle_linear_speed,
        ),
        Case(
            "networks.saddles.speed_upper_bound", saddles.speed_upper_bound, data,
                oracle=_oracle_upper_bound
        ),
        Case("networks.saddles.lipschitz_speed_bound", saddles.lipschitz_speed_bound, data),
        Case(
            "networks.saddles.localized_gradient",
            saddles.localized_gradient,
            [P("weights", rho, "seq"), *data],
        ),
        Case(
            "networks.saddles.localized_descent",
            saddles.localized_descent,
            [
                P("weights", rho, "seq"),
                *data,
                P("lr", 0.01, "float", True),
                P("steps", 5, "int", True),
                P("record_every", 1, "int", True),
            ],
        ),
        Case(
            "networks.saddles.escape_search",
            saddles.escape_search,
            [
                *data,
                *searching,
                P("seeds", [0, 1], "seq", True),
                P("steps", 20, "int", True),
                P("lr", [0.1, 1e-3], "seq", True),
                P("engine", "compiled", "choice", True),
            ],
            examples=6,
        ),
        Case(
            "networks.saddles.EscapeSearch",
            saddles.EscapeSearch,
            [
                P("speeds", torch.from_numpy(search.speeds), "tensor"),
                P("weights", search.weights, "seq"),
                P("history", torch.from_numpy(search.history[-3:]), "tensor"),
                P("seeds", [0, 1], "seq"),
            ],
        ),
        Case("networks.saddles.EscapeSearch.direction", search.direction, [P("index", 1, "int")]),
        Case(
            "networks.saddles.restart_seeds",
            saddles.restart_seeds,
            [P("seed", 3, "int"), P("restarts", 4, "int")],
        ),
        Case(
            "networks.saddles.escape_speed",
            saddles.escape_speed,
            [
                *data,
                *searching,
                P("seed", 0, "int", True),
                P("steps", 20, "int", True),
                P("restarts", 2, "int", True),
                P("engine", "numpy", "choice", True),
            ],
            examples=6,
        ),
        Case(
            "networks.saddles.escape_direction",
            saddles.escape_direction,
            [
                *data,
                *searching,
                P("seed", 0, "int", True),
                P("steps", 20, "int", True),
                P("restarts", 2, "int", True),
                P("engine", "compiled", "choice", True),
            ],
            examples=6,
        ),
        Case(
            "networks.saddles.radius_along_escape",
            _radius,
            [
                P("times", t(0.0, 1.0, 2.0, 40.0), "tensor"),
                P("radius0", 0.2, "float"),
                P("speed", 0.5, "float"),
                P("depth", 3, "int"),
                P("normalization", "sphere", "choice"),
            ],
            oracle=_oracle_radius,
        ),
        Case(
            "networks.saddles.stable_rank",
            saddles.stable_rank,
            [P("A", t(1.0, 0.5, -0.3, 2.0, 0.1, 0.4).reshape(2, 3), "tensor")],
            oracle=_oracle_stable_rank,
        ),
        Case(
            "networks.saddles.tail_mass",
            saddles.tail_mass,
            [P("A", t(1.0, 0.5, -0.3, 2.0, 0.1, 0.4).reshape(2, 3), "tensor")],
            oracle=_oracle_tail_mass,
        ),
        Case(
            "networks.saddles.layer_statistics",
            _layer_statistics,
            [P("weights", rho, "seq"), P("X", X, "tensor")],
            oracle=_oracle_layer_statistics,
        ),
        Case(
            "networks.saddles.theorem31_constant",
            saddles.theorem31_constant,
            [*data, P("speed", 0.5, "float")],
        ),
        Case(
            "networks.saddles.theorem31_bound",
            _theorem31_bound,
            [*data, P("speed", 0.5, "float"), P("layer", t(1.0, 5000.0), "tensor")],
            oracle=_oracle_theorem31,
        ),
        Case(
            "networks.saddles.proposition33_bound",
            _proposition33_bound,
            [P("G", G, "tensor"), P("epsilon", 0.01, "float"), P("speed", 0.5, "float")],
            oracle=_oracle_proposition33,
        ),
        Case(
            "networks.saddles.proposition34_bound",
            saddles.proposition34_bound,
            [*data, P("speed", 0.5, "float"), P("depth", 6, "int"), P("p", 0.5, "float")],
        ),
        Case(
            "networks.saddles.deepen",
            saddles.deepen,
            [P("weights", rho, "seq"), *data, P("extra", 2, "int")],
        ),
        Case(
            "networks.saddles.saddle_to_saddle_run",
            saddles.saddle_to_saddle_run,
            [
                P("X", X, "tensor"),
                P("labels", labels, "tensor"),
                P("depth", 3, "int", True),
                P("width", 4, "int", True),
                P("init_scale", 0.1, "float", True),
                P("eta0", 0.5, "float", True),
                P("steps", 6, "int", True),
                P("seed", 0, "int", True),
                P("record_every", 2, "int", True),
                P("engine", "compiled", "choice", True),
            ],
            examples=6,
        ),
        Case(
            "networks.saddles.find_plateaus",
            saddles.find_plateaus,
            [
                P("losses", t(2.0, 2.0, 2.0, 1.5, 1.0, 1.0, 1.0, 1.0), "tensor"),
                P("window", 3, "int", True),
                P("tolerance", 0.01, "float", True),
            ],
        ),
    ]


def cases() -> list[Case]:
    return tensor_nets_cases() + saddles_cases()
