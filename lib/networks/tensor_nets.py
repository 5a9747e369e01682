"""Linear tensor networks and where gradient flow takes them (Yun, Krishnan & Mobahi 2021).

A linear tensor network computes f(x; Θ) = M(x) ∘ (v_1, …, v_L) (the paper's eq. (6)): an order-L
data tensor M(x), linear in x, contracted with one parameter vector per layer, so that
f(x) = xᵀβ(Θ) with β_i = M(e_i) ∘ (v_1, …, v_L). Three architectures are special cases:

* ``"diagonal"`` (eq. (11)): f(x) = ⟨x, w_1 ⊙ … ⊙ w_L⟩, M(x)_{j…j} = x_j;
* ``"conv"`` (eq. (12), full length, k_l = d): circular cross-correlations
  f(x) = ((x ⋆ w_1) ⋆ … ⋆ w_{L−1})ᵀ w_L, M(x)_{j_1…j_L} = x_{(j_1 + … + j_L) mod d} (0-based);
* ``"fc"`` (eq. (10)): f(x) = xᵀ W_1 ⋯ W_{L−1} w_L, for L = 2 M(x) = I ⊗ x with v_1 = vec(W_1)
  in column-major order.

This module holds

* the models as parameter dicts for :mod:`lib.engine.flow` (``"w1"``, …, ``"wL"``; ``"v1"``,
  ``"v2"`` for the two-layer tensor form) and their squared and exponential losses (sums over
  examples, §2.1);
* the special functions of Lemma 5.1 — h_L, its inverse, H_L(t) = ∫_0^t h_L^{−1} and
  Φ_L(t) = ∫_0^t h_L — in closed form (L = 2, 3, 4) and through the regularized incomplete beta
  function (every L ≥ 3);
* the limits gradient flow reaches: Theorem 4 / Corollary 5 (:func:`diagonal_net_limit`),
  Corollary 6 with and without the factor d^{−(L−1)/2} (:func:`conv_net_limit`), Theorem 5
  (:func:`two_layer_limit` and the curve ν ↦ β(ν) every iterate lies on), and the minimum-norm
  and max-margin reference solutions the limits approach (linear programs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import brentq, linprog, minimize
from scipy.special import beta as beta_function
from scipy.special import betainc, betaincinv

from lib.engine.validation import (
    DTYPE,
    NumericalFailure,
    as_bool,
    as_callable,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_positive_float,
    as_tensor,
    check_finite_result,
)

ARCHITECTURES = ("fc", "diagonal", "conv")
LOSSES = ("square", "exp")
MAX_DEPTH = 1000
"""The deepest network these functions accept: c_L ≈ √(π/(2L)) shrinks with L, and by L = 1000 the
closed forms run on arguments of size 1e-2 whose L-th powers already span hundreds of decades."""
MAX_ENTRIES = 10**8
"""The most entries (800 MB of float64) a data tensor 𝕄 of :func:`basis_tensors` may hold."""


# ---------------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------------


def _array(value, name: str, ndim: int) -> np.ndarray:
    """A finite float64 numpy array with ``ndim`` dimensions and at least one entry (lists,
    numpy or float64 torch)."""
    return as_tensor(value, name, ndim=ndim, nonempty=True).detach().numpy().copy()


def _values(value, name: str) -> np.ndarray:
    """A non-empty finite float64 array of any shape (a number gives a 0-d array)."""
    return as_tensor(value, name, nonempty=True).detach().numpy()


def _depth(depth) -> int:
    return as_int(depth, "depth", minimum=2, maximum=MAX_DEPTH)


def _regression_data(X, y, names: tuple[str, str] = ("X", "y")) -> tuple[np.ndarray, np.ndarray]:
    """X (n × d) of full row rank with n ≤ d, y (n,)."""
    X = _array(X, names[0], 2)
    y = _array(y, names[1], 1)
    n, d = X.shape
    if y.shape != (n,):
        raise ValueError(
            f"{names[1]} must have shape ({n},) to match {names[0]} of shape {X.shape}, "
            f"got {y.shape}"
        )
    if n > d:
        raise ValueError(f"the regression must be underdetermined (n <= d), got n = {n} > d = {d}")
    if np.linalg.matrix_rank(X) < n:
        raise ValueError(f"{names[0]} must have full row rank (linearly independent examples)")
    return X, y


def _architecture(architecture) -> str:
    return as_choice(architecture, "architecture", ARCHITECTURES)


def _finite(value, what: str):
    """``value`` if every entry is finite, else a :class:`NumericalFailure` naming ``what``."""
    check_finite_result(value, what)
    return value


def _power_of_two(scale):
    """2^−e with scale = m·2^e, ½ ≤ m < 1: an exact rescaling that brings ``scale`` to [½, 1)."""
    return np.ldexp(1.0, -np.frexp(scale)[1])


def _squarable(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """``tensor`` if the sum of its squares is a finite float64 (so a squared loss of the data,
    and its gradient at moderate parameters, are finite), else a ValueError."""
    if not bool(torch.isfinite((tensor * tensor).sum())):
        raise ValueError(
            f"{name} is too large for a squared loss: the sum of its squared entries overflows "
            f"float64 (largest |entry| {float(tensor.abs().max()):.3g})"
        )
    return tensor


def _scale_factors(alpha: float, scale: np.ndarray, depth: int) -> None:
    """Theorem 4's factors α^L|η̄_j|^L must be positive normal floats, else nothing is solvable."""
    with np.errstate(over="ignore", under="ignore"):
        powers = (alpha * scale) ** depth
    if not (np.all(np.isfinite(powers)) and np.all(powers >= np.finfo(float).tiny)):
        raise ValueError(
            f"alpha^depth |eta_bar_j|^depth must lie in float64's normal range, got alpha = "
            f"{alpha:g}, depth = {depth}, |eta_bar| in [{scale.min():g}, {scale.max():g}] "
            f"(products from {powers.min():g} to {powers.max():g})"
        )


# ---------------------------------------------------------------------------------------------
# Lemma 5.1: h_L, its inverse, H_L and Φ_L
# ---------------------------------------------------------------------------------------------


def pole(depth: int) -> float:
    """c_L, the end of the interval (−c_L, c_L) on which h_L lives (Lemma 5.1).

    c_2 = ∞ and c_L = ∫_0^{π/2} cos^{L−3} = ½ B(½, (L−2)/2) for L ≥ 3 (c_3 = π/2, c_4 = 1)."""
    return _pole(_depth(depth))


def _pole(depth: int) -> float:
    return math.inf if depth == 2 else 0.5 * float(beta_function(0.5, (depth - 2) / 2))


def _sin2_of_time(t: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """s = sin²θ and 1 − s for the angle θ with T_L(tan θ) = |t| (L ≥ 5), both accurate."""
    a, b = 0.5, (depth - 2) / 2
    fraction = np.abs(t) / _pole(depth)
    s = betaincinv(a, b, fraction)
    one_minus = betaincinv(b, a, 1.0 - fraction)  # I_x(a, b) = 1 − I_{1−x}(b, a)
    near_pole = fraction > 0.5
    s = np.where(near_pole, 1.0 - one_minus, s)
    one_minus = np.where(near_pole, one_minus, 1.0 - s)
    return s, one_minus


def _time_domain(t, depth: int, name: str = "t") -> np.ndarray:
    """``t`` as a non-empty finite array inside the domain |t| < c_L of h_L."""
    t = _values(t, name)
    if depth >= 3 and np.any(np.abs(t) >= _pole(depth)):
        raise ValueError(
            f"h_L with L = {depth} needs |{name}| < c_L = {_pole(depth):.6g} (its pole), "
            f"got max |{name}| = {np.abs(t).max():.6g}"
        )
    return t


def h_L(t, depth: int) -> np.ndarray:
    """h_L(t) = p_L(t)^{L−1} q_L(t) of Lemma 5.1, where ṗ = p^{L−2} q, q̇ = p^{L−1}, p(0)=1, q(0)=0.

    With p = sec θ, q = tan θ (p² − q² = 1 is conserved): h_L = sec^{L−1}θ tan θ, where
    t = ∫_0^θ cos^{L−3}. Closed forms h_2(t) = sinh(2t)/2, h_3(t) = tan t / cos² t,
    h_4(t) = t/(1 − t²)²; for L ≥ 5, sin²θ = I^{−1}(½, (L−2)/2; |t|/c_L) (regularized incomplete
    beta) and h_L = sign(t) sin θ / cos^L θ. Defined for |t| < c_L; a value beyond float64 (t
    within ~1e-100 of the pole, or |t| > 355 for L = 2) raises :class:`NumericalFailure`.
    """
    depth = _depth(depth)
    with np.errstate(over="ignore"):
        return _finite(_h(_time_domain(t, depth), depth), f"h_L(t) for L = {depth}")


def _h(t: np.ndarray, depth: int) -> np.ndarray:
    """h_L on a checked domain (see :func:`h_L`)."""
    if depth == 2:
        return np.sinh(2 * t) / 2
    if depth == 3:
        return np.tan(t) / np.cos(t) ** 2
    if depth == 4:
        return t / (1 - t * t) ** 2
    s, one_minus = _sin2_of_time(t, depth)
    return np.sign(t) * np.sqrt(s) * one_minus ** (-depth / 2)


def h_L_derivative(t, depth: int) -> np.ndarray:
    """h_L'(t) = (L−1) p^{2L−4} q² + p^{2L−2} = ((L−1) sin²θ + 1) / cos^{2L−2}θ (Newton steps)."""
    depth = _depth(depth)
    with np.errstate(over="ignore"):
        return _finite(
            _h_derivative(_time_domain(t, depth), depth), f"h_L'(t) for L = {depth}"
        )


def _h_derivative(t: np.ndarray, depth: int) -> np.ndarray:
    if depth == 2:
        return np.cosh(2 * t)
    if depth == 3:
        c2 = np.cos(t) ** 2
        return (2 * (1 - c2) + 1) / c2**2
    s, one_minus = _sin2_of_time(t, depth)
    return ((depth - 1) * s + 1) * one_minus ** (1 - depth)


def _w_of(y: np.ndarray, depth: int) -> np.ndarray:
    """w ≥ 0 with w (1 + w²)^{(L−1)/2} = |y| (so that h_L(T_L(w)) = |y|), by Newton in u = log w.

    F(u) = u + (L−1)/2 · log(1 + e^{2u}) − log|y| is increasing and convex, and Newton from
    u_0 = log|y| (where F ≥ 0) decreases monotonically to the root."""
    a = np.abs(y)
    out = np.zeros_like(a)
    pos = a > 0
    if not pos.any():
        return out
    target = np.log(a[pos])
    u = target.copy()
    for _ in range(200):
        e = np.exp(np.minimum(2 * u, 700.0))
        F = u + 0.5 * (depth - 1) * np.log1p(e) - target
        dF = 1 + (depth - 1) * e / (1 + e)
        step = F / dF
        u = u - step
        if np.all(np.abs(step) <= 1e-15 * np.maximum(1.0, np.abs(u))):
            break
    out[pos] = np.exp(u)
    return out


def _T_of(w: np.ndarray, depth: int) -> np.ndarray:
    """T_L(w) = ∫_0^{arctan w} cos^{L−3} (so h_L^{−1}(y) = sign(y) T_L(w(y)))."""
    if depth == 2:
        return np.arcsinh(w)
    if depth == 3:
        return np.arctan(w)
    if depth == 4:
        return w / np.sqrt(1 + w * w)
    a, b = 0.5, (depth - 2) / 2
    c = _pole(depth)
    small = c * betainc(a, b, w * w / (1 + w * w))
    large = c * (1 - betainc(b, a, 1 / (1 + w * w)))  # accurate when w²/(1+w²) is close to 1
    return np.where(w < 1, small, large)


def h_L_inverse(y, depth: int) -> np.ndarray:
    """h_L^{−1}(y) = sign(y) T_L(w), w (1 + w²)^{(L−1)/2} = |y| (h_2^{−1}(y) = asinh(2y)/2)."""
    depth = _depth(depth)
    return _finite(_h_inverse(_values(y, "y"), depth), f"h_L^-1(y) for L = {depth}")


def _h_inverse(y: np.ndarray, depth: int) -> np.ndarray:
    if depth == 2:
        return np.arcsinh(2 * y) / 2
    return np.sign(y) * _T_of(_w_of(y, depth), depth)


def H_L(y, depth: int) -> np.ndarray:
    """H_L(y) = ∫_0^y h_L^{−1}(τ) dτ (Theorem 4) = |y| T_L(w) − w²/2, w (1 + w²)^{(L−1)/2} = |y|.

    Integration by parts with ∫_0^T h_L = q_L(T)²/2 = w²/2. For L = 2:
    H_2(y) = (y/2) asinh(2y) − (√(1 + 4y²) − 1)/4. H_L(y) ≈ y²/2 near 0 and grows like
    c_L |y| (L ≥ 3) or (|y|/2) log|y| (L = 2) for large |y| (Remark 4)."""
    depth = _depth(depth)
    with np.errstate(over="ignore", invalid="ignore"):
        return _finite(_H(_values(y, "y"), depth), f"H_L(y) for L = {depth}")


def _H(y: np.ndarray, depth: int) -> np.ndarray:
    if depth == 2:
        return y / 2 * np.arcsinh(2 * y) - (np.sqrt(1 + 4 * y * y) - 1) / 4
    w = _w_of(y, depth)
    return np.abs(y) * _T_of(w, depth) - w * w / 2


def Phi_L(t, depth: int) -> np.ndarray:
    """Φ_L(t) = ∫_0^t h_L = q_L(t)²/2, the convex conjugate of H_L (Φ_2(t) = sinh²t/2)."""
    depth = _depth(depth)
    with np.errstate(over="ignore"):
        return _finite(_phi(_time_domain(t, depth), depth), f"Phi_L(t) for L = {depth}")


def _phi(t: np.ndarray, depth: int) -> np.ndarray:
    if depth == 2:
        return np.sinh(t) ** 2 / 2
    if depth == 3:
        return np.tan(t) ** 2 / 2
    if depth == 4:
        return t * t / (1 - t * t) / 2
    s, one_minus = _sin2_of_time(t, depth)
    return s / one_minus / 2


def Q_objective(rho, *, alpha: float, depth: int, eta_bar) -> float:
    """Q_{L,α,η̄}(ρ) = α² Σ_j η̄_j² H_L(ρ_j / (α^L |η̄_j|^L)) (Theorem 4).

    ``rho`` and ``eta_bar`` are vectors of the same length d; η̄ has no zero entry."""
    alpha = as_positive_float(alpha, "alpha")
    depth = _depth(depth)
    rho = _array(rho, "rho", 1)
    eta = np.abs(_weights(eta_bar, len(rho), "eta_bar"))
    _scale_factors(alpha, eta, depth)
    with np.errstate(over="ignore", invalid="ignore"):
        value = alpha**2 * np.sum(eta**2 * _H(rho / (alpha * eta) ** depth, depth))
    return float(_finite(value, "Q(rho) (rho / (alpha |eta_bar|)^depth overflows)"))


# ---------------------------------------------------------------------------------------------
# Theorem 4 / Corollary 5: diagonal networks (and Corollary 6: full-length conv, even data)
# ---------------------------------------------------------------------------------------------


def _weights(w_bar, d: int, name: str) -> np.ndarray:
    w = _array(w_bar, name, 1)
    if w.shape != (d,):
        raise ValueError(f"{name} must have shape ({d},), got {w.shape}")
    if np.any(w == 0):
        raise ValueError(
            f"{name} must have no zero entry: Theorem 4 needs η̄_j² ≥ λ > 0 for every j "
            "(a coordinate that starts at zero in every layer never moves)"
        )
    return w


def _rho_of_nu(Z: np.ndarray, nu: np.ndarray, scale: np.ndarray, alpha, depth):
    """ρ(ν) = α^L|η̄|^L ⊙ h_L(α^{L−2}|η̄|^{L−2} ⊙ Zᵀν), the closed-form trajectory of Theorem 4."""
    argument = alpha ** (depth - 2) * scale ** (depth - 2) * (Z.T @ nu)
    return (alpha * scale) ** depth * _h(argument, depth), argument


def dual_root(Z, y, *, alpha: float, depth: int, eta_bar, tol: float = 1e-14) -> np.ndarray:
    """ν* ∈ Rⁿ with Z ρ(ν*) = y, maximizing the smooth concave dual of Theorem 4:

        D(ν) = yᵀν − Σ_j α² η̄_j² Φ_L(α^{L−2}|η̄_j|^{L−2} [Zᵀν]_j),   ∇D(ν) = y − Z ρ(ν),

    where Z = X Sᵀ are the transformed inputs (Z = X for diagonal networks): n × d with full row
    rank and n ≤ d, y of shape (n,), η̄ of shape (d,) without zero entries, ``tol`` in (0, 1).
    Damped Newton with a backtracking line search that stays inside the domain
    |α^{L−2}|η̄_j|^{L−2}[Zᵀν]_j| < c_L. The residual ‖Zρ(ν) − y‖_∞ reaches ``tol``·max(1, ‖y‖_∞)
    in well-conditioned cases; when the solution sits close to the pole of h_L (L ≥ 3 and tiny
    α, e.g. L = 4, α = 1e-3) rounding of 1 − (t/c_L)² limits it to about 1e-9, and a residual
    above 1e-8 raises :class:`~lib.engine.validation.NumericalFailure` (a ValueError)."""
    Z, y = _regression_data(Z, y, ("Z", "y"))
    alpha = as_positive_float(alpha, "alpha")
    depth = _depth(depth)
    scale = np.abs(_weights(eta_bar, Z.shape[1], "eta_bar"))
    tol = as_float(tol, "tol", minimum=0.0, maximum=1.0, open_minimum=True, open_maximum=True)
    _scale_factors(alpha, scale, depth)
    return _dual_root(Z, y, alpha, depth, scale, tol)


def _dual_root(Z, y, alpha: float, depth: int, scale: np.ndarray, tol: float) -> np.ndarray:
    """The Newton iteration of :func:`dual_root` on checked input (``scale`` = |η̄|)."""
    inner = (alpha * scale) ** (depth - 2)
    c = _pole(depth)

    def dual(nu):
        argument = inner * (Z.T @ nu)
        if np.any(np.abs(argument) >= c):
            return -np.inf
        return float(y @ nu - np.sum(alpha**2 * scale**2 * _phi(argument, depth)))

    nu = np.zeros(Z.shape[0])
    y_scale = max(1.0, float(np.abs(y).max()))
    best, stalled = np.inf, 0
    # an overflowing trial step is rejected (value −inf); a non-finite iterate ends in the check
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(2000):
            rho, argument = _rho_of_nu(Z, nu, scale, alpha, depth)
            gradient = y - Z @ rho
            residual = np.abs(gradient).max()
            if residual <= tol * y_scale:
                return nu
            # Near the pole of h_L (L ≥ 3, tiny α) rounding puts a floor under the residual:
            # stop once 20 Newton steps in a row bring no improvement (or the residual is nan).
            best, stalled = (residual, 0) if residual < best else (best, stalled + 1)
            if stalled >= 20:
                break
            curvature = alpha**2 * scale**2 * inner**2 * _h_derivative(argument, depth)
            try:
                step = np.linalg.solve((Z * curvature) @ Z.T, gradient)
            except np.linalg.LinAlgError:
                break  # a singular Hessian (curvature underflowed): reported below
            current, t = dual(nu), 1.0
            while t > 1e-300:  # tiny α: the first Newton steps overshoot by many orders
                candidate = nu + t * step
                if dual(candidate) >= current + 1e-4 * t * (gradient @ step) - 1e-15 * abs(current):
                    break
                t /= 2
            nu = nu + t * step
        rho, _ = _rho_of_nu(Z, nu, scale, alpha, depth)
        residual = np.abs(y - Z @ rho).max()
    if not residual <= 1e-8 * y_scale:  # see the docstring: the floor is ~1e-9 near the pole
        raise NumericalFailure(
            f"dual_root: Newton did not converge (residual {residual:.2e}) for alpha = "
            f"{alpha:g}, depth = {depth}"
        )
    return nu


def diagonal_net_limit(X, y, *, alpha: float, depth: int, w_bar) -> np.ndarray:
    """β^∞ of gradient flow on the depth-L diagonal network (Theorem 4 / Corollary 5).

    The network f(x) = ⟨x, w_1 ⊙ … ⊙ w_L⟩ starts at w_l(0) = α w̄ (l < L), w_L(0) = 0 and is
    trained by gradient flow on ½ Σ_i (f(x_i) − y_i)². Its coefficients follow, for all t,

        β(t) = α^L |w̄|^L ⊙ h_L(α^{L−2} |w̄|^{L−2} ⊙ Xᵀν(t)),   ν(t) = −∫_0^t r,

    and converge to β^∞ = argmin_z Q_{L,α,w̄}(z) s.t. Xz = y, obtained here with ν(∞) = ν* from
    :func:`dual_root`. X is n × d with full row rank and n ≤ d, y has shape (n,), w̄ has no zero
    entry. Returns a float64 array of shape (d,)."""
    X, y = _regression_data(X, y)
    alpha = as_positive_float(alpha, "alpha")
    depth = _depth(depth)
    w = np.abs(_weights(w_bar, X.shape[1], "w_bar"))
    _scale_factors(alpha, w, depth)
    nu = _dual_root(X, y, alpha, depth, w, 1e-14)
    with np.errstate(over="ignore"):
        beta = _rho_of_nu(X, nu, w, alpha, depth)[0]
    return _finite(beta, "the limit beta")


def diagonal_net_path(X, nu, *, alpha: float, depth: int, w_bar) -> np.ndarray:
    """β(ν) = α^L|w̄|^L ⊙ h_L(α^{L−2}|w̄|^{L−2} ⊙ Xᵀν) for ν of shape (n,) or (T, n).

    X is n × d, w̄ has shape (d,) and no zero entry; for L ≥ 3 every α^{L−2}|w̄_j|^{L−2}[Xᵀν]_j
    must lie inside the domain (−c_L, c_L) of h_L (:func:`pole`)."""
    X = _array(X, "X", 2)
    alpha = as_positive_float(alpha, "alpha")
    depth = _depth(depth)
    w = np.abs(_weights(w_bar, X.shape[1], "w_bar"))
    _scale_factors(alpha, w, depth)
    nu = as_tensor(nu, "nu", min_ndim=1, nonempty=True).detach().numpy()
    if nu.ndim > 2 or nu.shape[-1] != X.shape[0]:
        raise ValueError(f"nu must have shape (n,) or (T, n) with n = {X.shape[0]}, got {nu.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        argument = (alpha * w) ** (depth - 2) * (nu @ X)
        if depth >= 3 and not np.all(np.abs(argument) < _pole(depth)):
            raise ValueError(
                f"nu is outside the path's domain: α^(L−2)|w̄|^(L−2) ⊙ Xᵀν must lie in "
                f"(−c_L, c_L) = ±{_pole(depth):.6g} for L = {depth}, got max "
                f"{np.abs(argument).max():.6g}"
            )
        beta = (alpha * w) ** depth * _h(argument, depth)
    return _finite(beta, "the path beta(nu)")


def dft_matrix(d: int) -> np.ndarray:
    """C = Re(F), the real part of the unitary DFT F_{jk} = d^{−1/2} e^{−2πi jk/d} (0-based).

    On even vectors (x_{j} = x_{d−j}, 0-based) F x = C x is real, which is what Corollary 6 uses.
    At most :data:`MAX_ENTRIES` entries (d ≤ 10⁴)."""
    d = as_int(d, "d", minimum=1, maximum=math.isqrt(MAX_ENTRIES))
    j = np.arange(d)
    return np.cos(2 * np.pi * np.outer(j, j) / d) / np.sqrt(d)


def _is_even(v: np.ndarray) -> bool:
    return bool(np.allclose(v, np.roll(v[..., ::-1], 1, axis=-1), rtol=0, atol=1e-12))


def conv_net_limit(X, y, *, alpha: float, depth: int, w_bar, corrected: bool = True) -> np.ndarray:
    """β^∞ of gradient flow on the full-length convolutional network, even data (Corollary 6).

    With S = d^{(L−1)/2} F (Theorem 4) and even x_i, w̄, the limit is
    argmin_{z even} Q_{L,α,Fw̄}(d^{−(L−1)/2} F z) s.t. Xz = y. The corollary as printed omits the
    factor d^{−(L−1)/2}, i.e. takes S = F; ``corrected=False`` computes that printed form, which
    does *not* match gradient flow for d ≥ 2 (Q is not homogeneous). Data and w̄ must be even
    (x_j = x_{d−j}, 0-based; every vector is even when d ≤ 2) and F w̄ must have no zero entry."""
    X, y = _regression_data(X, y)
    alpha = as_positive_float(alpha, "alpha")
    depth = _depth(depth)
    corrected = as_bool(corrected, "corrected")
    d = X.shape[1]
    w = _array(w_bar, "w_bar", 1)
    if w.shape != (d,):
        raise ValueError(f"w_bar must have shape ({d},), got {w.shape}")
    if not (_is_even(X) and _is_even(w)):
        raise ValueError("Corollary 6 needs even data and w_bar: x_j = x_{d-j} (0-based)")
    C = dft_matrix(d)
    scale = np.abs(_weights(C @ w, d, "F w_bar"))
    _scale_factors(alpha, scale, depth)
    S = C * (d ** ((depth - 1) / 2) if corrected else 1.0)
    Z = X @ S.T
    if np.linalg.matrix_rank(Z) < X.shape[0]:
        raise ValueError("the transformed inputs X Sᵀ must have full row rank")
    nu = _dual_root(Z, y, alpha, depth, scale, 1e-14)
    with np.errstate(over="ignore", invalid="ignore"):
        beta = S.T @ _rho_of_nu(Z, nu, scale, alpha, depth)[0]
    return _finite(beta, "the limit beta")


# ---------------------------------------------------------------------------------------------
# Reference solutions: minimum-norm interpolants and max-margin directions (linear programs)
# ---------------------------------------------------------------------------------------------


def min_l1_solution(X, y, *, transform=None, weights=None, margin: bool = False) -> np.ndarray:
    """argmin_z Σ_j c_j |[T z]_j| s.t. Xz = y (or y_i x_iᵀz ≥ 1 with ``margin=True``), by an LP.

    ``transform`` T (d × d, invertible; default I) gives e.g. the DFT-ℓ1 norm ‖Fz‖_1 of
    Corollary 3, ``weights`` c > 0 the weighted ℓ1 norms of Remark 4. The LP is over ρ = Tz split
    as ρ = u − v with u, v ≥ 0 (scipy.optimize.linprog, HiGHS). With ``margin=True`` y holds the
    labels' signs (no zero entry). An infeasible or failed LP raises a ValueError."""
    X = _array(X, "X", 2)
    y = _array(y, "y", 1)
    n, d = X.shape
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},) to match X of shape {X.shape}, got {y.shape}")
    margin = as_bool(margin, "margin")
    if margin and np.any(y == 0):
        raise ValueError("with margin=True, y must hold nonzero labels (the signs of the classes)")
    T = np.eye(d) if transform is None else _array(transform, "transform", 2)
    if T.shape != (d, d) or np.linalg.matrix_rank(T) < d:
        raise ValueError(f"transform must be an invertible ({d}, {d}) matrix, got shape {T.shape}")
    c = _positive_weights(weights, d)
    A = X @ np.linalg.inv(T)
    cost = np.concatenate([c, c])
    if margin:
        signed = -(y[:, None] * A)
        problem = dict(A_ub=np.hstack([signed, -signed]), b_ub=-np.ones(n))
    else:
        problem = dict(A_eq=np.hstack([A, -A]), b_eq=y)
    result = _linprog(cost, problem)
    rho = result.x[:d] - result.x[d:]
    return _finite(np.linalg.solve(T, rho), "the minimum-norm solution")


def _positive_weights(weights, d: int) -> np.ndarray:
    """The weights c of a weighted norm: d positive numbers (all ones when None)."""
    if weights is None:
        return np.ones(d)
    c = _array(weights, "weights", 1)
    if c.shape != (d,) or np.any(c <= 0):
        raise ValueError(f"weights must be {d} positive numbers, got shape {c.shape}")
    return c


def _linprog(cost: np.ndarray, problem: dict):
    """scipy's linprog over u, v ≥ 0; a failure (infeasible, or numbers HiGHS cannot scale) is a
    ValueError that says so."""
    if not all(np.all(np.isfinite(v)) for v in (cost, *problem.values())):
        raise NumericalFailure("the linear program's data overflow float64 (inputs too large)")
    try:
        result = linprog(cost, bounds=(0, None), **problem)
    except ValueError as error:  # scipy's own checks of the LP data
        raise NumericalFailure(f"the linear program could not be set up: {error}") from None
    if not result.success:
        raise ValueError(f"the linear program has no solution ({result.message})")
    return result


def min_l2_solution(X, y, *, weights=None) -> np.ndarray:
    """argmin_z Σ_j z_j² / c_j s.t. Xz = y, i.e. D Xᵀ(X D Xᵀ)^{−1} y with D = diag(c).

    X is n × d with full row rank and n ≤ d, y has shape (n,), c > 0 has shape (d,)."""
    X, y = _regression_data(X, y)
    c = _positive_weights(weights, X.shape[1])
    XD = X * c
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            solution = XD.T @ np.linalg.solve(XD @ X.T, y)
        except np.linalg.LinAlgError:
            raise NumericalFailure("X D Xᵀ is numerically singular (weights too uneven)") from None
    return _finite(solution, "the minimum-norm solution")


def max_margin_l2(X, y) -> np.ndarray:
    """argmin ‖z‖² s.t. y_i x_iᵀz ≥ 1 (the FC limit direction, Corollary 1), by SLSQP.

    X is n × d, y of shape (n,) holds nonzero labels; the data must be linearly separable."""
    X = _array(X, "X", 2)
    y = _array(y, "y", 1)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
    start = min_l1_solution(X, y, margin=True)  # checks the labels; fails if not separable
    signed = y[:, None] * X
    with np.errstate(over="ignore", invalid="ignore"):
        result = minimize(
            lambda z: z @ z,
            start,
            jac=lambda z: 2 * z,
            constraints=[
                {"type": "ineq", "fun": lambda z: signed @ z - 1, "jac": lambda z: signed}
            ],
            method="SLSQP",
            options={"ftol": 1e-15, "maxiter": 500},
        )
    if not result.success:
        raise ValueError(f"the max-margin problem has no solution ({result.message})")
    return _finite(result.x, "the max-margin direction")


# ---------------------------------------------------------------------------------------------
# Two-layer tensor networks (L = 2) and Theorem 5
# ---------------------------------------------------------------------------------------------


def basis_tensors(architecture: str, d: int, *, hidden: int | None = None) -> np.ndarray:
    """𝕄[i] = M(e_i) for a two-layer network, shape (d, k_1, k_2), so M(x) = Σ_i x_i 𝕄[i].

    ``"diagonal"``: M(x) = diag(x); ``"conv"``: M(x)_{ab} = x_{(a+b) mod d} (k_1 = k_2 = d);
    ``"fc"``: M(x) = I_{hidden} ⊗ x, k_1 = d·hidden, k_2 = hidden (v_1 = vec(W_1), column-major;
    ``hidden`` defaults to d and is only for fc). At most :data:`MAX_ENTRIES` entries."""
    architecture = _architecture(architecture)
    d = as_int(d, "d", minimum=1)
    if architecture == "fc":
        k = _hidden(hidden, d)
    elif hidden is not None:
        raise ValueError(f"hidden is the width of an fc network; {architecture!r} takes none")
    else:
        k = d
    if d * (d * k if architecture == "fc" else d) * k > MAX_ENTRIES:
        raise ValueError(
            f"the basis tensors of a {architecture} network with d = {d}"
            + (f", hidden = {k}" if architecture == "fc" else "")
            + f" would hold more than {MAX_ENTRIES:.0e} entries"
        )
    return _basis(architecture, d, k)


def _hidden(hidden, d: int) -> int:
    """The hidden width of a two-layer fc network (d when None)."""
    return d if hidden is None else as_int(hidden, "hidden", minimum=1)


def _basis(architecture: str, d: int, k: int) -> np.ndarray:
    """:func:`basis_tensors` on checked input (k: the fc hidden width, else d)."""
    if architecture == "fc":
        out = np.zeros((d, d * k, k))
        for j in range(k):
            out[np.arange(d), j * d + np.arange(d), j] = 1.0
        return out
    out = np.zeros((d, d, d))
    a, b = np.meshgrid(np.arange(d), np.arange(d), indexing="ij")
    if architecture == "diagonal":
        out[np.arange(d), np.arange(d), np.arange(d)] = 1.0
    else:
        out[(a + b) % d, a, b] = 1.0
    return out


def _basis_torch(architecture: str, d: int, k: int) -> torch.Tensor:
    return torch.from_numpy(_basis(architecture, d, k))


def _two_layer_sizes(architecture: str, k1: int, k2: int, d: int | None = None) -> tuple[int, int]:
    """(d, k) of two layers of lengths k1 and k2, or a ValueError (d, when given, must match)."""
    if architecture == "fc":
        if k1 % k2:
            raise ValueError(f"fc: len(v1) must be d × len(v2), got {k1} and {k2}")
        sizes = (k1 // k2, k2)
    else:
        if k2 != k1:
            raise ValueError(f"{architecture}: v1 and v2 must both have length d, got {k1}, {k2}")
        sizes = (k1, k1)
    if d is not None and sizes[0] != d:
        raise ValueError(
            f"{architecture}: v1 and v2 (lengths {k1}, {k2}) make a network on inputs of "
            f"dimension {sizes[0]}, but X has d = {d} columns"
        )
    if sizes[0] * k1 * k2 > MAX_ENTRIES:
        raise ValueError(f"a two-layer network with layers of {k1} and {k2} is too large")
    return sizes


def tensor_coefficients(architecture: str, v1, v2) -> torch.Tensor:
    """β_i = v_1ᵀ M(e_i) v_2 of a two-layer tensor network; leading run axes are kept.

    ``v1`` and ``v2`` have shapes (..., k_1) and (..., k_2) with the same leading (run) shape:
    k_1 = k_2 = d for "diagonal" and "conv", k_1 = d·k_2 for "fc" (v_1 = vec(W_1))."""
    architecture = _architecture(architecture)
    v1 = as_tensor(v1, "v1", min_ndim=1, nonempty=True)
    v2 = as_tensor(v2, "v2", min_ndim=1, nonempty=True)
    if v1.shape[:-1] != v2.shape[:-1]:
        raise ValueError(
            f"v1 and v2 must have the same leading (run) shape, got {tuple(v1.shape)} and "
            f"{tuple(v2.shape)}"
        )
    d, k = _two_layer_sizes(architecture, v1.shape[-1], v2.shape[-1])
    beta = torch.einsum("iab,...a,...b->...i", _basis_torch(architecture, d, k), v1, v2)
    return _finite(beta, "the coefficients beta")


def _two_layer_data(architecture, X, y, loss) -> tuple[str, torch.Tensor, torch.Tensor, str]:
    """Checked (architecture, X (n, d), y (n,), loss) of a two-layer regression/classification."""
    architecture = _architecture(architecture)
    X = _squarable(as_tensor(X, "X", ndim=2, nonempty=True), "X")
    y = _squarable(as_tensor(y, "y", ndim=1), "y")
    if y.shape != X.shape[:1]:
        raise ValueError(
            f"y must have one entry per row of X: shape ({X.shape[0]},), got {tuple(y.shape)}"
        )
    return architecture, X, y, as_choice(loss, "loss", LOSSES)


def _two_layers(params, architecture: str, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """params["v1"], params["v2"] after a structural check (names, dtype, shapes; no copy)."""
    if not isinstance(params, Mapping) or set(params) != {"v1", "v2"}:
        raise ValueError(f"params must be a dict with keys 'v1' and 'v2', got {_keys(params)}")
    v1, v2 = (as_tensor(params[k], f"params[{k!r}]", min_ndim=1) for k in ("v1", "v2"))
    if v1.shape[:-1] != v2.shape[:-1]:
        raise ValueError(
            f"params['v1'] and params['v2'] must have the same leading (run) shape, got "
            f"{tuple(v1.shape)} and {tuple(v2.shape)}"
        )
    _two_layer_sizes(architecture, v1.shape[-1], v2.shape[-1], d)
    return v1, v2


def two_layer_loss(architecture: str, X, y, *, loss: str = "square"):
    """Closure ``params -> loss`` for the two-layer tensor network with params {"v1", "v2"}.

    ``"square"``: ½ Σ_i (f(x_i) − y_i)²; ``"exp"``: Σ_i exp(−y_i f(x_i)) (§2.1; sums, not means).
    X is n × d and y has shape (n,). With a leading run axis on the parameters the closure returns
    one loss per run."""
    architecture, X, y, loss = _two_layer_data(architecture, X, y, loss)

    def closure(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        v1, v2 = _two_layers(params, architecture, X.shape[1])
        f = tensor_coefficients(architecture, v1, v2) @ X.T
        if loss == "square":
            return 0.5 * ((f - y) ** 2).sum(-1)
        return torch.exp(-y * f).sum(-1)

    return closure


def two_layer_gradient(architecture: str, X, y, *, loss: str = "square", total: bool = False):
    """Closed-form ``params -> (loss, {"v1": ∇_{v1}, "v2": ∇_{v2}})`` for :func:`lib.engine.flow`
    (the same loss as :func:`two_layer_loss`, several times faster than autograd on these tiny
    nets).

    With residuals r_i = ℓ'(f(x_i), y_i) (eq. (7)): ∇_{v1} = M(Xᵀr) v_2, ∇_{v2} = M(Xᵀr)ᵀ v_1.
    Parameters may carry a leading run axis; the loss then has one entry per run, or, with
    ``total=True``, is their sum: independent runs whose gradient flows one ODE solve integrates
    together (the sum's gradient is each run's own gradient). The closure checks the structure of
    the first params of each shape it meets (names and shapes), not their values: the flows of
    :mod:`lib.engine.flow` check those."""
    total = as_bool(total, "total")
    architecture, X, y, loss = _two_layer_data(architecture, X, y, loss)
    cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def closure(params: Mapping[str, torch.Tensor]):
        key = _params_key(params)
        if key in cache:
            v1, v2 = params["v1"], params["v2"]
            to_outputs, from_residuals = cache[key]
        else:
            v1, v2 = _two_layers(params, architecture, X.shape[1])
            k1, k2 = v1.shape[-1], v2.shape[-1]
            hidden = k2 if architecture == "fc" else X.shape[1]
            flat = _basis_torch(architecture, X.shape[1], hidden).reshape(X.shape[1], k1 * k2)
            to_outputs, from_residuals = flat.T @ X.T, X @ flat  # (k1 k2, n) and (n, k1 k2)
            if key is not None:
                cache[key] = (to_outputs, from_residuals)
        k1, k2 = v1.shape[-1], v2.shape[-1]
        outer = (v1.unsqueeze(-1) * v2.unsqueeze(-2)).reshape(*v1.shape[:-1], k1 * k2)
        f = outer @ to_outputs
        if loss == "square":
            r = f - y
            value = 0.5 * (r * r).sum(-1)
        else:
            e = torch.exp(-y * f)
            r, value = -y * e, e.sum(-1)
        M = (r @ from_residuals).reshape(*r.shape[:-1], k1, k2)  # M(Xᵀr)
        g1 = (M @ v2.unsqueeze(-1)).squeeze(-1)
        g2 = (v1.unsqueeze(-2) @ M).squeeze(-2)
        return (value.sum() if total else value), {"v1": g1, "v2": g2}

    return closure


@dataclass(frozen=True)
class TwoLayerSVD:
    """M(x) = U_1 diag(s) U_2ᵀ with s > 0 (compact SVD, Theorem 5): U_1 (k_1, r), s (r,) and
    U_2 (k_2, r), finite (checked on construction; arrays are stored as float64 numpy)."""

    U1: np.ndarray
    s: np.ndarray
    U2: np.ndarray

    def __post_init__(self):
        U1, s, U2 = _array(self.U1, "U1", 2), _array(self.s, "s", 1), _array(self.U2, "U2", 2)
        if U1.shape[1] != len(s) or U2.shape[1] != len(s):
            raise ValueError(
                f"U1 and U2 must have one column per singular value: s has {len(s)}, got U1 "
                f"{U1.shape} and U2 {U2.shape}"
            )
        if np.any(s <= 0):
            raise ValueError("s must hold positive singular values (a compact SVD)")
        _set_fields(self, U1=U1, s=s, U2=U2)


def _set_fields(instance, **values) -> None:
    """Store checked values on a frozen dataclass (in ``__post_init__``)."""
    for name, value in values.items():
        object.__setattr__(instance, name, value)


def data_svd(architecture: str, x, *, hidden: int | None = None) -> TwoLayerSVD:
    """A compact SVD of M(x). Where singular values repeat the basis is not unique; we use the
    canonical one (diagonal: U_1 = diag(sign x), U_2 = I on the support; fc: U_1 = I ⊗ x/‖x‖,
    U_2 = I, s = ‖x‖), else numpy's consistent (U_1, s, U_2). ``x`` is a nonzero vector;
    ``hidden`` (default d) is the width of an fc network and only for fc."""
    architecture = _architecture(architecture)
    x = _point(x)
    if architecture == "fc":
        k = _hidden(hidden, len(x))
        _two_layer_sizes(architecture, len(x) * k, k)
    elif hidden is not None:
        raise ValueError(f"hidden is the width of an fc network; {architecture!r} takes none")
    else:
        k = len(x)
        _two_layer_sizes(architecture, k, k)
    return _data_svd(architecture, x, k)


def _point(x) -> np.ndarray:
    """The single data point of Theorem 5: a nonzero vector."""
    x = _array(x, "x", 1)
    if not np.any(x):
        raise ValueError("x must not be the zero vector")
    return x


def _data_svd(architecture: str, x: np.ndarray, k: int) -> TwoLayerSVD:
    """:func:`data_svd` on checked input (k: the fc hidden width)."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        factors = _svd_factors(architecture, x, k)
    for value in factors:
        _finite(value, "the SVD of M(x) (x too large or too small for float64)")
    return TwoLayerSVD(*factors)


def _svd_factors(architecture: str, x: np.ndarray, k: int):
    d = len(x)
    if architecture == "diagonal":
        keep = np.flatnonzero(x)
        eye = np.eye(d)[:, keep]
        return eye * np.sign(x[keep]), np.abs(x[keep]), eye
    if architecture == "fc":
        U1 = np.kron(np.eye(k), (x / np.linalg.norm(x))[:, None])
        return U1, np.full(k, np.linalg.norm(x)), np.eye(k)
    M = np.tensordot(x, _basis(architecture, d, d), axes=1)
    U1, s, U2t = np.linalg.svd(M, full_matrices=False)
    keep = s > 1e-12 * s.max()
    return U1[:, keep], s[keep], U2t[keep].T


@dataclass(frozen=True)
class TwoLayerLimit:
    """The limit of Theorem 5: coefficients β^∞, parameters v_1^∞, v_2^∞ and ν* = ν(∞) (vectors
    and a number, finite; checked on construction)."""

    beta: np.ndarray
    v1: np.ndarray
    v2: np.ndarray
    nu: float

    def __post_init__(self):
        vectors = {name: _array(getattr(self, name), name, 1) for name in ("beta", "v1", "v2")}
        _set_fields(self, **vectors, nu=as_float(self.nu, "nu"))


class _TwoLayerProblem:
    """The quantities of Theorem 5 for one point x and an initialization α(v̄_1, v̄_2)."""

    def __init__(self, architecture, x, alpha, v1_bar, v2_bar):
        self.architecture = _architecture(architecture)
        self.x = _point(x)
        self.alpha = as_positive_float(alpha, "alpha")
        d = len(self.x)
        self.v2_bar = _array(v2_bar, "v2_bar", 1)
        self.hidden = len(self.v2_bar) if self.architecture == "fc" else d
        self.v1_bar = self._first_layer(v1_bar, d)
        if self.architecture != "fc" and len(self.v2_bar) != d:
            raise ValueError(
                f"{self.architecture}: v2_bar must have length d = {d}, got {self.v2_bar.shape}"
            )
        _two_layer_sizes(self.architecture, len(self.v1_bar), len(self.v2_bar), d)
        self.svd = _data_svd(self.architecture, self.x, self.hidden)
        with np.errstate(over="ignore", invalid="ignore"):
            self.eta1 = self.svd.U1.T @ self.v1_bar
            self.eta2 = self.svd.U2.T @ self.v2_bar
            gap = self.eta1**2 - self.eta2**2
        _finite(gap, "[U_1ᵀv̄_1]² − [U_2ᵀv̄_2]² (inputs too large)")
        if np.any(gap <= 0):
            raise ValueError(
                "Theorem 5 needs [U_1ᵀv̄_1]_j² > [U_2ᵀv̄_2]_j² for every singular direction j of "
                f"M(x); got differences {np.array2string(gap, precision=3)}"
            )

    def _first_layer(self, v1_bar, d: int) -> np.ndarray:
        """v̄_1 as a vector: for fc, vec(W̄_1) (column-major) of a d × k matrix, or that vector."""
        v1 = as_tensor(v1_bar, "v1_bar", nonempty=True).detach().numpy()
        if self.architecture == "fc" and v1.shape == (d, self.hidden):
            return v1.reshape(-1, order="F").astype(np.float64)  # vec(W̄_1), column-major
        expected = d * self.hidden if self.architecture == "fc" else d
        if v1.shape != (expected,):
            matrix = f" or the ({d}, {self.hidden}) matrix W̄_1" if self.architecture == "fc" else ""
            raise ValueError(
                f"{self.architecture}: v1_bar must be a vector of length {expected}{matrix}, "
                f"got shape {v1.shape}"
            )
        return v1.astype(np.float64, copy=True)

    def g(self, nu):
        """g(ν) = Σ_j s_j ((η̄_1j² + η̄_2j²)/2 · sinh(2 s_j ν) + η̄_1j η̄_2j cosh(2 s_j ν))."""
        s, a, b = self.svd.s, self.eta1, self.eta2
        nu = np.asarray(nu, dtype=np.float64)[..., None]
        return np.sum(
            s * ((a * a + b * b) / 2 * np.sinh(2 * s * nu) + a * b * np.cosh(2 * s * nu)), -1
        )

    def nu_of_output(self, value: float) -> float:
        """ν with α² g(ν) = value (g is strictly increasing), or NumericalFailure if that ν is
        beyond the range where g is finite."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            target = np.float64(value) / np.float64(self.alpha) ** 2  # inf, not an error
            lo, hi = -1.0, 1.0
            while self.g(lo) > target and math.isfinite(lo):
                lo *= 2
            while self.g(hi) < target and math.isfinite(hi):
                hi *= 2
            ends = self.g(lo) - target, self.g(hi) - target
        if not (math.isfinite(target) and np.all(np.isfinite(ends))):
            raise NumericalFailure(
                f"no finite ν solves α² g(ν) = {value:g} with alpha = {self.alpha:g}: the output, "
                "x or the initialization is too large or alpha too small for float64"
            )
        return brentq(lambda v: float(self.g(v)) - target, lo, hi, xtol=1e-300, rtol=1e-15)

    def parameters(self, nu):
        """v_1(ν), v_2(ν): cosh/sinh in ν plus the frozen parts α(I − U Uᵀ)v̄ (eq. (75))."""
        U1, s, U2 = self.svd.U1, self.svd.s, self.svd.U2
        nu = np.asarray(nu, dtype=np.float64)[..., None]
        c, sh = np.cosh(s * nu), np.sinh(s * nu)
        frozen1 = self.v1_bar - U1 @ self.eta1
        frozen2 = self.v2_bar - U2 @ self.eta2
        v1 = self.alpha * ((self.eta1 * c + self.eta2 * sh) @ U1.T + frozen1)
        v2 = self.alpha * ((self.eta1 * sh + self.eta2 * c) @ U2.T + frozen2)
        return v1, v2

    def beta(self, nu) -> np.ndarray:
        v1, v2 = self.parameters(nu)
        basis = _basis(self.architecture, len(self.x), self.hidden)
        return np.einsum("iab,...a,...b->...i", basis, v1, v2)


def two_layer_limit(architecture: str, x, y, *, alpha: float, v1_bar, v2_bar) -> TwoLayerLimit:
    """The limit of gradient flow on a two-layer tensor network fitted to one point (Theorem 5).

    With M(x) = U_1 diag(s) U_2ᵀ, η̄_l = U_lᵀ v̄_l and v_l(0) = α v̄_l, if η̄_1j² > η̄_2j² for all
    j, gradient flow on ½(f(x) − y)² converges to

        v_1^∞ = α U_1(η̄_1 ⊙ cosh(ν* s) + η̄_2 ⊙ sinh(ν* s)) + α(I − U_1U_1ᵀ) v̄_1,
        v_2^∞ = α U_2(η̄_1 ⊙ sinh(ν* s) + η̄_2 ⊙ cosh(ν* s)) + α(I − U_2U_2ᵀ) v̄_2,

    with ν* = g^{−1}(y/α²) (:meth:`_TwoLayerProblem.g`). ``x`` is a nonzero vector of length d,
    ``y`` a number; ``architecture`` is "fc" (v̄_1 = vec(W̄_1) of length d·k, or the d × k matrix
    W̄_1; v̄_2 of length k), "diagonal" or "conv" (both of length d)."""
    problem = _TwoLayerProblem(architecture, x, alpha, v1_bar, v2_bar)
    nu = problem.nu_of_output(as_float(y, "y"))
    with np.errstate(over="ignore", invalid="ignore"):
        v1, v2 = problem.parameters(nu)
        beta = problem.beta(nu)
    for value, name in ((beta, "beta"), (v1, "v1"), (v2, "v2")):
        _finite(value, f"the limit's {name}")
    return TwoLayerLimit(beta=beta, v1=v1, v2=v2, nu=float(nu))


def two_layer_curve(architecture: str, x, *, alpha: float, v1_bar, v2_bar, nu) -> np.ndarray:
    """β(ν) along the curve of Theorem 5's proof, for ν of any shape: (..., d).

    Every iterate of gradient flow (square or exponential loss) lies on this curve, at
    ν(t) = −∫_0^t r. Arguments as in :func:`two_layer_limit`; ``nu`` is a non-empty array."""
    problem = _TwoLayerProblem(architecture, x, alpha, v1_bar, v2_bar)
    nu = _values(nu, "nu")
    with np.errstate(over="ignore", invalid="ignore"):
        beta = problem.beta(nu)
    return _finite(beta, "beta(nu) (cosh(s ν) overflows: |nu| too large)")


def curve_distance(architecture: str, x, betas, *, alpha: float, v1_bar, v2_bar) -> np.ndarray:
    """Distance of each row of ``betas`` (T, d) (or of one β of shape (d,), as a row) from the
    curve ν ↦ β(ν), at the ν fixed by the output: α² g(ν) = xᵀβ determines ν uniquely, so β(t) is
    on the curve iff β(t) = β(ν). Returns shape (T,)."""
    problem = _TwoLayerProblem(architecture, x, alpha, v1_bar, v2_bar)
    betas = as_tensor(betas, "betas", min_ndim=1, nonempty=True).detach().numpy()
    d = len(problem.x)
    if betas.ndim > 2 or betas.shape[-1] != d:
        raise ValueError(f"betas must have shape (d,) or (T, d) with d = {d}, got {betas.shape}")
    betas = np.atleast_2d(betas)
    with np.errstate(over="ignore", invalid="ignore"):
        nus = np.array([problem.nu_of_output(float(b @ problem.x)) for b in betas])
        distance = np.linalg.norm(problem.beta(nus) - betas, axis=-1)
    return _finite(distance, "the distance from the curve")


def figure1_init(architecture: str, z_bar, *, margin: float = 1e-3):
    """Initial directions (v̄_1, v̄_2) with β(v̄_1, v̄_2) = z̄ ∈ R² that satisfy Theorem 5's gap.

    diagonal: w̄_1 = √(2|z̄|) + margin, w̄_2 = z̄ / w̄_1 (entrywise); conv (d = 2, diagonal in the
    sum/difference basis): the same construction on σ± = z̄_1 ± z̄_2; fc (width 2): W̄_1 = 1.5 I,
    w̄_2 = z̄ / 1.5. (The paper does not give its construction.)"""
    architecture = _architecture(architecture)
    z = _array(z_bar, "z_bar", 1)
    if z.shape != (2,):
        raise ValueError(f"z_bar must have shape (2,), got {z.shape}")
    margin = as_positive_float(margin, "margin")
    with np.errstate(over="ignore", invalid="ignore"):
        pair = _figure1_init(architecture, z, margin)
    return tuple(_finite(v, "the initial direction") for v in pair)


def _figure1_init(architecture: str, z: np.ndarray, margin: float):
    if architecture == "diagonal":
        w1 = np.sqrt(2 * np.abs(z)) + margin
        return w1, z / w1
    if architecture == "conv":
        sigma = np.array([z[0] + z[1], z[0] - z[1]])
        a = np.sqrt(2 * np.abs(sigma)) + margin
        A = sigma / a
        return np.array([a[0] + a[1], a[0] - a[1]]) / 2, np.array([A[0] + A[1], A[0] - A[1]]) / 2
    return (1.5 * np.eye(2)).reshape(-1, order="F"), z / 1.5


@dataclass(frozen=True)
class RunBatch:
    """Independent two-layer runs stacked along a leading axis: their initial parameters, the
    settings (α, v̄_1, v̄_2) of each run and, for regression, Theorem 5's predicted limits."""

    params: dict[str, torch.Tensor]
    settings: list[tuple[float, np.ndarray, np.ndarray]]
    predicted: np.ndarray | None

    def __post_init__(self):
        if not isinstance(self.params, Mapping) or set(self.params) != {"v1", "v2"}:
            raise ValueError(
                f"params must be a dict with keys 'v1', 'v2', got {_keys(self.params)}"
            )
        params = {k: as_tensor(self.params[k], f"params[{k!r}]", ndim=2) for k in ("v1", "v2")}
        runs = params["v1"].shape[0]
        if params["v2"].shape[0] != runs:
            raise ValueError(
                f"params['v1'] and params['v2'] must have one row per run, got "
                f"{tuple(params['v1'].shape)} and {tuple(params['v2'].shape)}"
            )
        settings = as_list(self.settings, "settings")
        if len(settings) != runs:
            raise ValueError(f"settings must have one entry per run ({runs}), got {len(settings)}")
        settings = [_setting(entry, f"settings[{i}]") for i, entry in enumerate(settings)]
        predicted = None
        if self.predicted is not None:
            predicted = _array(self.predicted, "predicted", 2)
            if predicted.shape[0] != runs:
                raise ValueError(f"predicted must have {runs} rows, got {predicted.shape}")
        _set_fields(self, params=params, settings=settings, predicted=predicted)


def _setting(entry, name: str) -> tuple[float, np.ndarray, np.ndarray]:
    """One run's (α, v̄_1, v̄_2)."""
    if not isinstance(entry, (tuple, list)) or len(entry) != 3:
        raise ValueError(f"{name} must be a triple (alpha, v1_bar, v2_bar), got {entry!r:.60}")
    alpha, v1, v2 = entry
    return (
        as_positive_float(alpha, f"{name}[0]"),
        _array(v1, f"{name}[1]", 1),
        _array(v2, f"{name}[2]", 1),
    )


def figure1_batch(architecture: str, alphas, z_bars, *, x=None, y=None) -> RunBatch:
    """Runs over every α in ``alphas`` and direction z̄ in ``z_bars`` (the initial β is α² z̄,
    :func:`figure1_init`); with a point (x, y), Theorem 5's limit of each run as well.

    ``alphas`` is a non-empty list of positive numbers, ``z_bars`` a non-empty list of vectors of
    length 2; ``x`` and ``y`` come together or not at all."""
    architecture = _architecture(architecture)
    alphas = [as_positive_float(a, f"alphas[{i}]") for i, a in enumerate(as_list(alphas, "alphas"))]
    z_bars = as_list(z_bars, "z_bars")
    if (x is None) != (y is None):
        raise ValueError(
            "x and y must be given together (Theorem 5's point) or not at all, got "
            f"x = {'None' if x is None else 'a value'} and y = {'None' if y is None else 'a value'}"
        )
    inits = [figure1_init(architecture, z) for z in z_bars]
    settings, v1s, v2s, predicted = [], [], [], []
    for alpha in alphas:
        for v1, v2 in inits:
            settings.append((alpha, v1, v2))
            v1s.append(alpha * v1)
            v2s.append(alpha * v2)
            if x is not None:
                limit = two_layer_limit(architecture, x, y, alpha=alpha, v1_bar=v1, v2_bar=v2)
                predicted.append(limit.beta)
    params = {"v1": torch.from_numpy(np.array(v1s)), "v2": torch.from_numpy(np.array(v2s))}
    for name, value in params.items():
        _finite(value, f"the initial {name} (alpha times the direction overflows)")
    return RunBatch(params, settings, np.array(predicted) if x is not None else None)


def angle_degrees(betas, direction) -> np.ndarray:
    """The angle, in degrees, between each β (the rows of ``betas``, any leading shape (..., d))
    and the vector ``direction`` of length d. Neither may be zero (its angle is undefined)."""
    betas = as_tensor(betas, "betas", min_ndim=1, nonempty=True).detach().numpy()
    u = _array(direction, "direction", 1)
    if betas.shape[-1:] != u.shape:
        raise ValueError(
            f"betas must have rows of the direction's length {len(u)}: shape (..., {len(u)}), "
            f"got {betas.shape}"
        )
    if not np.any(u):
        raise ValueError("direction must not be the zero vector (its angle is undefined)")
    row_scale = np.abs(betas).max(axis=-1, keepdims=True)
    if np.any(row_scale == 0):
        raise ValueError("betas must have no zero row (the angle of 0 is undefined)")
    # Angles are scale-free: dividing by powers of two first keeps the norms finite (1e300
    # entries) and normal (1e-300 entries) and, being exact, changes no other answer by a bit.
    rows, unit_u = betas * _power_of_two(row_scale), u * _power_of_two(np.abs(u).max())
    cosine = rows @ unit_u / (np.linalg.norm(rows, axis=-1) * np.linalg.norm(unit_u))
    return np.degrees(np.arccos(np.clip(cosine, -1.0, 1.0)))


# ---------------------------------------------------------------------------------------------
# Depth-L models for the engine: diagonal, convolutional and fully connected networks
# ---------------------------------------------------------------------------------------------


def diagonal_params(w_bar, *, alpha: float, depth: int, last=None) -> dict[str, torch.Tensor]:
    """{"w1": α w̄, …, "w{L-1}": α w̄, "wL": α·last} (``last`` defaults to 0, Theorem 4's init).

    ``w_bar`` has shape (d,), or (R, d) for R independent runs, with d ≥ 1; ``last`` its shape."""
    depth = _depth(depth)
    alpha = as_positive_float(alpha, "alpha")
    w = as_tensor(w_bar, "w_bar", min_ndim=1, nonempty=True)
    params = {f"w{j}": alpha * w.clone() for j in range(1, depth)}
    if last is None:
        params[f"w{depth}"] = torch.zeros_like(w)
    else:
        last = as_tensor(last, "last")
        if last.shape != w.shape:
            raise ValueError(
                f"last must have the shape of w_bar {tuple(w.shape)}, got {tuple(last.shape)}"
            )
        params[f"w{depth}"] = alpha * last.clone()
    for name, value in params.items():
        _finite(value, f"params[{name!r}] (alpha times the direction overflows)")
    return params


def _params_key(params) -> tuple | None:
    """(name, shape) of every entry if ``params`` is a dict of float64 tensors, else None. A
    closure checks the structure of params once per key and trusts params with a known key."""
    if not isinstance(params, Mapping):
        return None
    key = []
    for name, value in params.items():
        if not (isinstance(value, torch.Tensor) and value.dtype == DTYPE):
            return None
        key.append((name, value.shape))
    return tuple(key)


def _keys(params) -> str:
    return repr(sorted(map(str, params))) if isinstance(params, Mapping) else type(params).__name__


def _named_layers(params, names: list[str], form: str) -> dict[str, torch.Tensor]:
    """``params`` with its entries as float64 tensors (no copy), if it has exactly these keys."""
    if not isinstance(params, Mapping) or set(params) != set(names):
        raise ValueError(f"params must be a dict with keys {form}, got {_keys(params)}")
    return {n: as_tensor(params[n], f"params[{n!r}]", min_ndim=1, nonempty=True) for n in names}


def _depth_of(params) -> int:
    """L = len(params) for a depth-L network's dict, 2 ≤ L ≤ MAX_DEPTH."""
    if not isinstance(params, Mapping):
        raise ValueError(f"params must be a dict of float64 tensors, got {type(params).__name__}")
    if not 2 <= len(params) <= MAX_DEPTH:
        raise ValueError(
            f"params must hold the L layers of a network, 2 <= L <= {MAX_DEPTH}, got "
            f"{len(params)} entries"
        )
    return len(params)


def _diagonal_layers(params) -> dict[str, torch.Tensor]:
    """The layers w_1, …, w_L of a diagonal or convolutional network: one shape (..., d)."""
    depth = _depth_of(params)
    layers = _named_layers(params, [f"w{j}" for j in range(1, depth + 1)], "'w1', …, 'wL'")
    if len({w.shape for w in layers.values()}) > 1:
        shapes = ", ".join(f"{n} {tuple(w.shape)}" for n, w in layers.items())
        raise ValueError(f"params' layers must all have one shape (..., d), got {shapes}")
    return layers


def diagonal_coefficients(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """β = w_1 ⊙ … ⊙ w_L (eq. (11)); params {"w1", …, "wL"} of one shape (..., d)."""
    return _finite(_diagonal_coefficients(_diagonal_layers(params)), "beta (the product overflows)")


def _diagonal_coefficients(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
    depth = len(params)
    out = params["w1"]
    for j in range(2, depth + 1):
        out = out * params[f"w{j}"]
    return out


def conv_coefficients(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """β = w_1 ∗ (w_2 ∗ (⋯ ∗ w_L)) for the full-length convolutional network of eq. (12).

    The adjoint of x ↦ x ⋆ w (circular cross-correlation) is u ↦ w ∗ u (circular convolution,
    [w ∗ u]_k = Σ_j w_j u_{(k−j) mod d}), so f(x) = ⟨x ⋆ w_1 ⋆ ⋯ ⋆ w_{L−1}, w_L⟩ = ⟨x, β⟩.
    params {"w1", …, "wL"} of one shape (..., d)."""
    layers = _diagonal_layers(params)
    return _finite(_conv_coefficients(layers), "beta (the convolutions overflow)")


def _conv_coefficients(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
    depth = len(params)
    out = params[f"w{depth}"]
    d = out.shape[-1]
    index = (torch.arange(d).unsqueeze(1) - torch.arange(d).unsqueeze(0)) % d  # [k, j] = k − j
    for j in range(depth - 1, 0, -1):
        out = (params[f"w{j}"].unsqueeze(-2) * out[..., index]).sum(-1)
    return out


def _regression_tensors(X, y) -> tuple[torch.Tensor, torch.Tensor]:
    """X (n, d) and y (n,) as float64 tensors whose squares sum to finite numbers."""
    X = _squarable(as_tensor(X, "X", ndim=2, nonempty=True), "X")
    y = _squarable(as_tensor(y, "y", ndim=1), "y")
    if y.shape != X.shape[:1]:
        raise ValueError(f"X has {X.shape[0]} rows but y has shape {tuple(y.shape)}")
    return X, y


def _checked_once(check):
    """``params -> params`` for a closure: ``check(params)`` (which returns params with its entries
    as float64 tensors) runs on params of a new structure (:func:`_params_key`) and on anything
    that is not a dict of float64 tensors; params of a structure seen before pass unchanged."""
    seen: set = set()

    def run(params):
        key = _params_key(params)
        if key is not None and key in seen:
            return params
        checked = check(params)
        if key is not None:
            seen.add(key)
        return checked

    return run


def diagonal_gradient(X, y):
    """Closed-form ``params -> (loss, gradients)`` of ½ Σ_i (x_iᵀβ − y_i)², β = w_1 ⊙ … ⊙ w_L:
    ∇_{w_l} = (Xᵀr) ⊙ Π_{k≠l} w_k with r = Xβ − y (the same loss as :func:`regression_loss`
    with :func:`diagonal_coefficients`, without autograd's overhead). X is n × d, y has shape
    (n,); the closure takes params {"w1", …, "wL"} of shape (d,) (it checks their structure once
    per structure, not their values: the flows of :mod:`lib.engine.flow` check those)."""
    X, y = _regression_tensors(X, y)

    def check(params):
        layers = _diagonal_layers(params)
        if layers["w1"].shape != X.shape[1:]:
            raise ValueError(
                f"params' layers must have shape ({X.shape[1]},) (one run, d = X's columns), "
                f"got {tuple(layers['w1'].shape)}"
            )
        return layers

    checked = _checked_once(check)

    def closure(params: Mapping[str, torch.Tensor]):
        params = checked(params)
        names = [f"w{j}" for j in range(1, len(params) + 1)]
        layers = [params[k] for k in names]
        residual = X @ _diagonal_coefficients(params) - y
        signal = X.T @ residual
        grads = {}
        for index, name in enumerate(names):
            others = torch.ones_like(signal)
            for k, w in enumerate(layers):
                if k != index:
                    others = others * w
            grads[name] = signal * others
        return 0.5 * (residual * residual).sum(), grads

    return closure


def _fc_layers(params) -> dict[str, torch.Tensor]:
    """W_1, …, W_{L−1}, w_L of a fully connected network: matrices that chain, then a vector, all
    with one leading (run) shape."""
    depth = _depth_of(params)
    names = [f"W{j}" for j in range(1, depth)] + [f"w{depth}"]
    layers = _named_layers(params, names, "'W1', …, 'W{L-1}', 'wL'")
    last = layers[names[-1]]
    runs, width = last.shape[:-1], last.shape[-1]
    for name in reversed(names[:-1]):
        W = layers[name]
        if W.ndim < 2 or W.shape[:-2] != runs or W.shape[-1] != width:
            raise ValueError(
                f"params[{name!r}] must have shape {(*runs, '*', width)} to chain with the next "
                f"layer, got {tuple(W.shape)}"
            )
        width = W.shape[-2]
    return layers


def fc_coefficients(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """β = W_1 W_2 ⋯ W_{L−1} w_L (eq. (10)); params {"W1", …, "W{L-1}", "wL"} whose shapes chain
    ((..., d, k_1), (..., k_1, k_2), …, (..., k_{L−1})), with one leading (run) shape."""
    return _finite(_fc_coefficients(_fc_layers(params)), "beta (the product overflows)")


def _fc_coefficients(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
    depth = len(params)
    out = params[f"w{depth}"]
    for j in range(depth - 1, 0, -1):
        W = params[f"W{j}"]
        out = W @ out if out.ndim == 1 else (W @ out.unsqueeze(-1)).squeeze(-1)
    return out


def fc_gradient(X, y):
    """Closed-form ``params -> (loss, gradients)`` of ½ Σ_i (x_iᵀβ − y_i)², β = W_1 ⋯ W_{L−1} w_L:
    with u = Xᵀ(Xβ − y), ∇_{W_l} = (W_{l−1}ᵀ ⋯ W_1ᵀ u)(W_{l+1} ⋯ w_L)ᵀ and
    ∇_{w_L} = W_{L−1}ᵀ ⋯ W_1ᵀ u (the loss of :func:`regression_loss` with
    :func:`fc_coefficients`). X is n × d, y has shape (n,); the closure takes the params of one
    network (no run axis) with W1 of d rows, and checks their structure once per structure."""
    X, y = _regression_tensors(X, y)

    def check(params):
        layers = _fc_layers(params)
        if layers["W1"].ndim != 2 or layers["W1"].shape[0] != X.shape[1]:
            raise ValueError(
                f"params must be one network (no run axis) whose W1 has d = {X.shape[1]} rows, "
                f"got W1 of shape {tuple(layers['W1'].shape)}"
            )
        return layers

    checked = _checked_once(check)

    def closure(params: Mapping[str, torch.Tensor]):
        params = checked(params)
        depth = len(params)
        layers = [params[f"W{j}"] for j in range(1, depth)] + [params[f"w{depth}"]]
        tails = [layers[-1]]  # tails[k] = W_{L−k} ⋯ w_L, built from the output end
        for W in reversed(layers[:-1]):
            tails.append(W @ tails[-1])
        residual = X @ tails[-1] - y
        head = X.T @ residual  # W_{l−1}ᵀ ⋯ W_1ᵀ u, grown from the input end
        grads = {}
        for index in range(depth - 1):
            grads[f"W{index + 1}"] = torch.outer(head, tails[depth - 2 - index])
            head = layers[index].T @ head
        grads[f"w{depth}"] = head
        return 0.5 * (residual * residual).sum(), grads

    return closure


def regression_loss(coefficients, X, y):
    """Closure ``params -> ½ Σ_i (x_iᵀβ(params) − y_i)²`` for a coefficient map β(params).

    With X of shape (R, n, d), y (R, n) and parameters with a leading run axis of length R, the
    closure returns the sum of the R runs' losses: one ODE then integrates R independent flows.
    ``coefficients`` is a callable params -> β of shape (d,) (or (R, d)), e.g.
    :func:`diagonal_coefficients`, :func:`conv_coefficients` or :func:`fc_coefficients`; the
    closure checks the structure of params once per structure (values: see
    :mod:`lib.engine.flow`)."""
    coefficients = as_callable(coefficients, "coefficients", "params -> beta")
    X = _squarable(as_tensor(X, "X", nonempty=True), "X")
    y = _squarable(as_tensor(y, "y"), "y")
    if X.ndim not in (2, 3) or y.shape != X.shape[:-1]:
        raise ValueError(
            f"X must be (n, d) or (R, n, d) and y its leading shape, got {tuple(X.shape)} and "
            f"{tuple(y.shape)}"
        )
    trusted = next((fast for public, fast in _TRUSTED if coefficients is public), None)
    checked = _checked_once(next((c for public, c in _CHECKS if coefficients is public), _no_check))
    beta_of = trusted or coefficients

    def closure(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        beta = beta_of(checked(params))
        if not (
            isinstance(beta, torch.Tensor)
            and beta.dtype == X.dtype
            and beta.shape[-1:] == X.shape[-1:]
            and (X.ndim == 2 or beta.shape[:-1] == X.shape[:1])
        ):
            raise ValueError(
                f"coefficients(params) must be a float64 tensor of shape (d,) or (R, d) matching "
                f"X {tuple(X.shape)}, got {_describe(beta)}"
            )
        outputs = (X @ beta.unsqueeze(-1)).squeeze(-1)
        return 0.5 * ((outputs - y) ** 2).sum()

    return closure


def _no_check(params):
    """A caller's own coefficient map checks its params itself."""
    return params


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


_TRUSTED = (
    (diagonal_coefficients, _diagonal_coefficients),
    (conv_coefficients, _conv_coefficients),
    (fc_coefficients, _fc_coefficients),
)
_CHECKS = (
    (diagonal_coefficients, _diagonal_layers),
    (conv_coefficients, _diagonal_layers),
    (fc_coefficients, _fc_layers),
)


__all__ = [
    "ARCHITECTURES",
    "DTYPE",
    "H_L",
    "Phi_L",
    "Q_objective",
    "TwoLayerLimit",
    "TwoLayerSVD",
    "RunBatch",
    "angle_degrees",
    "basis_tensors",
    "conv_coefficients",
    "conv_net_limit",
    "curve_distance",
    "data_svd",
    "dft_matrix",
    "diagonal_coefficients",
    "diagonal_gradient",
    "diagonal_net_limit",
    "diagonal_net_path",
    "diagonal_params",
    "dual_root",
    "fc_coefficients",
    "fc_gradient",
    "figure1_batch",
    "figure1_init",
    "h_L",
    "h_L_derivative",
    "h_L_inverse",
    "max_margin_l2",
    "min_l1_solution",
    "min_l2_solution",
    "pole",
    "regression_loss",
    "tensor_coefficients",
    "two_layer_curve",
    "two_layer_gradient",
    "two_layer_limit",
    "two_layer_loss",
]
