"""Appendix A of Slutzky, Alexander, Razin & Cohen (2025): extending Proposition 2 and Theorem 1.

The appendix outlines five ways to leave the exact setting of Theorem 1 (Assumptions 1–2, the
training set S_1 = {(e_1, 1)} and the special example (e_{κ−1}, 1)) without changing its
conclusions:

- a **teacher of any dimension** d* ≥ 2 (:func:`appendix_a_teacher`), which realizes the same
  mapping as the teacher of Assumption 1;
- **scaled input and output matrices**, the teacher (A*, α_1 B*, α_2 C*) with the student's fixed
  B and C scaled alike: outputs scale by α_1 α_2, the loss by (α_1 α_2)²;
- **learned B and C** at a learning-rate ratio η (the paper's eq. (12)):
  Ȧ = −∂ℓ/∂A, Ḃ = −η ∂ℓ/∂B, Ċ = −η ∂ℓ/∂C; the appendix argues that the trajectory tends to the
  A-only one as η → 0 (:func:`ssm_flow`, any η ≥ 0);
- the training sequence **e_l instead of e_1**, l ≤ κ − 2, with the conditions on κ moved to
  κ − l + 1 (the student's output on e_l is h_{κ−l} = Σ_j b_j c_j a_j^{κ−l});
- **several scaled copies** p_i e_1 and q_j e_{κ−1}, labelled by the teacher: with
  Σ p_i² = Σ q_j² the loss is a scalar multiple of the original (:func:`scaled_copies_set`).

:func:`ssm_flow` integrates gradient flow of a diagonal SSM (a, b, c) on any training set with
LSODA in log time, as :func:`lib.poisoning.theorem1.theorem1_flow` does for a alone, on a velocity
and Jacobian compiled by numba.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from numba import njit
from scipy.integrate import odeint

from lib.engine.flow import LOG_TIME_LIMIT, Trajectory, log_grid
from lib.engine.validation import (
    DTYPE,
    MAX_ENTRIES,
    NumericalFailure,
    as_int,
    as_positive_float,
    as_size,
    as_tensor,
    check_magnitude,
)
from lib.ssm.diagonal import SSM, as_ssm, ssm_output, theorem1_teacher, unit_impulse

__all__ = ["appendix_a_teacher", "scaled_copies_set", "ssm_flow"]

FLOW_RTOL, FLOW_ATOL = 1e-10, 1e-15
"""Default tolerances of :func:`ssm_flow`: those of :func:`lib.poisoning.theorem1.theorem1_flow`,
fine enough to keep the tie gap of 1.5e-8 of the paper's Table 1 initialization."""


def appendix_a_teacher(d: int, d_star: int) -> SSM:
    """The teacher of dimension d* ≥ 2 of the paper's App. A, for a student of dimension d.

    A* = diag(1, 0, …, 0) ∈ R^{d*×d*} and B* = C*ᵀ = (1, √((d−1)/(d*−1)), …, √((d−1)/(d*−1))):
    its impulse response is h*_0 = 1 + (d*−1)(d−1)/(d*−1) = d and h*_k = 1 for k ≥ 1, the mapping
    of the teacher of Assumption 1 (the paper's eq. (11); d* = 2 gives that teacher). The OCR'd
    display is garbled; this is the reading under which "the mapping is the same", as the appendix
    states.
    """
    d = as_int(d, "d", minimum=2, maximum=MAX_ENTRIES)
    d_star = as_int(d_star, "d_star", minimum=2, maximum=MAX_ENTRIES)
    root = math.sqrt((d - 1) / (d_star - 1))
    a = torch.zeros(d_star, dtype=DTYPE)
    a[0] = 1.0
    b = torch.full((d_star,), root, dtype=DTYPE)
    b[0] = 1.0
    return SSM(a=a, b=b, c=b.clone())


def _as_factors(values, name: str, *, allow_empty: bool) -> torch.Tensor:
    if not isinstance(values, (list, tuple, np.ndarray, torch.Tensor)):
        raise ValueError(f"{name} must be a list of scaling factors, got {type(values).__name__}")
    values = as_tensor(list(values) if isinstance(values, tuple) else values, name, ndim=1)
    if values.numel() == 0 and not allow_empty:
        raise ValueError(f"{name} must hold at least one scaling factor, got none")
    if values.numel() and not bool((values != 0).any()):
        raise ValueError(f"{name} must hold at least one non-zero factor (App. A), got all zeros")
    check_magnitude(values, name)
    return values


def scaled_copies_set(
    d: int,
    kappa: int,
    p: Sequence[float],
    q: Sequence[float] = (),
    *,
    position: int = 1,
    teacher=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training set {(p_i e_position, y_i)} ∪ {(q_j e_{κ−1}, y†_j)} of the paper's App. A.

    Every label comes from the teacher (an :class:`lib.ssm.diagonal.SSM` or a dict with keys a, b,
    c; default: Assumption 1's for dimension d), so the set is clean. ``q`` empty gives the clean
    set; ``p = (1,)``, ``q = (1,)`` and ``position = 1`` the paper's S_2. For the student
    (a, 1, 1ᵀ) of Theorem 1, with l = ``position``, the loss is
    (1/(n+m)) [Σ p_i² (1 − h_{κ−l})² + Σ q_j² (1 − h_1)²], a multiple of ℓ_{S_2} (the paper's
    eq. (22)) when Σ p_i² = Σ q_j², and of ℓ_{S_1} when there is no q.
    Returns ``(x, y)`` of shapes ``(n + m, κ)`` and ``(n + m,)``.
    """
    d = as_int(d, "d", minimum=2, maximum=MAX_ENTRIES)
    kappa = as_size(as_int(kappa, "kappa", minimum=3), "kappa", per=d)
    position = as_int(position, "position", minimum=1, maximum=kappa - 2)
    p = _as_factors(p, "p", allow_empty=False)
    q = _as_factors(q, "q", allow_empty=True)
    as_size(p.numel() + q.numel(), "the number of copies", per=kappa)
    teacher = theorem1_teacher(d) if teacher is None else as_ssm(teacher, "teacher")
    if teacher.a.ndim != 1:
        raise ValueError(f"teacher parameters must be 1-D, got shape {tuple(teacher.a.shape)}")
    check_magnitude(torch.cat(list(teacher)), "teacher")
    x = torch.cat([p.unsqueeze(1) * unit_impulse(kappa, position),
                   q.unsqueeze(1) * unit_impulse(kappa, kappa - 1)])
    return x, ssm_output(*teacher, x)


# --------------------------------------------------------------------------------------------
# Gradient flow of (a, b, c) with B and C at the learning-rate ratio η (the paper's eq. (12))
# --------------------------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _features(a, x, order):
    """K, K', K'' of shape (n, d): K_ij = Σ_l x_il a_j^{κ−l} (1-indexed l) and its a_j-derivatives.

    φ(x_i) = Σ_j b_j c_j K_ij (the paper's eq. (2)); ``order`` = 1 skips K''.
    """
    n, kappa = x.shape
    d = a.shape[0]
    k0 = np.zeros((n, d))
    k1 = np.zeros((n, d))
    k2 = np.zeros((n, d))
    powers = np.empty(kappa)
    for j in range(d):
        powers[0] = 1.0
        for m in range(1, kappa):
            powers[m] = powers[m - 1] * a[j]
        for i in range(n):
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            for col in range(kappa):
                m = kappa - 1 - col  # x_{col+1} multiplies a^{κ−(col+1)}
                value = x[i, col]
                if value == 0.0:
                    continue
                s0 += value * powers[m]
                if m >= 1:
                    s1 += value * m * powers[m - 1]
                if order >= 2 and m >= 2:
                    s2 += value * m * (m - 1) * powers[m - 2]
            k0[i, j] = s0
            k1[i, j] = s1
            k2[i, j] = s2
    return k0, k1, k2


@njit(cache=True, error_model="numpy")
def _residual_weights(theta, x, y, d):
    """u_i = −(2/n) (y_i − φ_i): ∂ℓ/∂φ_i of ℓ = (1/n) Σ_i (y_i − φ_i)², and the features."""
    a = theta[:d]
    b = theta[d : 2 * d]
    c = theta[2 * d :]
    k0, k1, k2 = _features(a, x, 2)
    n = x.shape[0]
    u = np.empty(n)
    for i in range(n):
        phi = 0.0
        for j in range(d):
            phi += b[j] * c[j] * k0[i, j]
        u[i] = -2.0 * (y[i] - phi) / n
    return u, k0, k1, k2


@njit(cache=True, error_model="numpy")
def _log_time_velocity(tau, theta, x, y, d, eta):
    """e^τ θ̇ with θ̇ = −D ∇ℓ, D = diag(1 on a, η on b and c): the paper's eq. (12), log time."""
    u, k0, k1, _ = _residual_weights(theta, x, y, d)
    b = theta[d : 2 * d]
    c = theta[2 * d :]
    scale = math.exp(tau)
    out = np.zeros(3 * d)
    for i in range(x.shape[0]):
        for j in range(d):
            out[j] -= u[i] * b[j] * c[j] * k1[i, j]
            out[d + j] -= eta * u[i] * c[j] * k0[i, j]
            out[2 * d + j] -= eta * u[i] * b[j] * k0[i, j]
    out *= scale
    if not np.isfinite(out).all():
        out[:] = np.nan
    return out


@njit(cache=True, error_model="numpy")
def _log_time_jacobian(tau, theta, x, y, d, eta):
    """∂(e^τ θ̇)/∂θ = −e^τ D H, H = (2/n) Σ_i J_i J_iᵀ + Σ_i u_i ∇²φ_i (Gauss–Newton plus
    curvature).

    J_i = ∇φ_i = (b⊙c⊙K'_i, c⊙K_i, b⊙K_i); ∇²φ_i couples only (a_j, b_j, c_j) of one j:
    ∂²φ/∂a_j² = b_j c_j K''_ij, ∂²φ/∂a_j∂b_j = c_j K'_ij, ∂²φ/∂a_j∂c_j = b_j K'_ij,
    ∂²φ/∂b_j∂c_j = K_ij.
    """
    u, k0, k1, k2 = _residual_weights(theta, x, y, d)
    b = theta[d : 2 * d]
    c = theta[2 * d :]
    n = x.shape[0]
    size = 3 * d
    hess = np.zeros((size, size))
    jac = np.empty(size)
    for i in range(n):
        for j in range(d):
            jac[j] = b[j] * c[j] * k1[i, j]
            jac[d + j] = c[j] * k0[i, j]
            jac[2 * d + j] = b[j] * k0[i, j]
        for p in range(size):
            for r in range(size):
                hess[p, r] += 2.0 / n * jac[p] * jac[r]
        for j in range(d):
            ja, jb, jc = j, d + j, 2 * d + j
            hess[ja, ja] += u[i] * b[j] * c[j] * k2[i, j]
            hess[ja, jb] += u[i] * c[j] * k1[i, j]
            hess[jb, ja] += u[i] * c[j] * k1[i, j]
            hess[ja, jc] += u[i] * b[j] * k1[i, j]
            hess[jc, ja] += u[i] * b[j] * k1[i, j]
            hess[jb, jc] += u[i] * k0[i, j]
            hess[jc, jb] += u[i] * k0[i, j]
    scale = math.exp(tau)
    for p in range(size):
        rate = 1.0 if p < d else eta
        for r in range(size):
            hess[p, r] *= -scale * rate
    return hess


def _check_training_set(x, y) -> tuple[torch.Tensor, torch.Tensor]:
    x = as_tensor(x, "x", ndim=2, detach=True)
    if x.shape[0] == 0 or x.shape[1] < 2:
        raise ValueError(f"x must have shape (n, kappa) with n >= 1 and kappa >= 2, got "
                         f"{tuple(x.shape)}")
    y = as_tensor(y, "y", ndim=1, detach=True)
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"y must have one label per sequence: {x.shape[0]} sequences, got "
                         f"{y.shape[0]} labels")
    check_magnitude(x, "x")
    check_magnitude(y, "y")
    return x, y


def _check_start(a0, b0, c0) -> np.ndarray:
    a0 = as_tensor(a0, "a0", ndim=1, nonempty=True, detach=True)
    b0 = as_tensor(b0, "b0", ndim=1, detach=True)
    c0 = as_tensor(c0, "c0", ndim=1, detach=True)
    d = a0.shape[0]
    for name, value in (("b0", b0), ("c0", c0)):
        if value.shape[0] != d:
            raise ValueError(f"{name} must have the d = {d} entries of a0, got {value.shape[0]}")
        check_magnitude(value, name)
    check_magnitude(a0, "a0")
    if abs(float(a0.abs().max())) > 10:
        raise ValueError(f"a0 must lie in [-10, 10] (a_j^kappa overflows beyond), got "
                         f"max |a0| = {float(a0.abs().max()):.3g}")
    return np.concatenate([a0.numpy(), b0.numpy(), c0.numpy()])


def _loss(theta: np.ndarray, x: np.ndarray, y: np.ndarray, d: int) -> np.ndarray:
    """ℓ = (1/n) Σ_i (y_i − Σ_j b_j c_j K_ij)² at every recorded state (rows of ``theta``)."""
    out = np.empty(theta.shape[0])
    for t, state in enumerate(theta):
        u, _, _, _ = _residual_weights(state, x, y, d)
        out[t] = float(np.mean((u * x.shape[0] / 2.0) ** 2))
    return out


def ssm_flow(
    a0,
    b0,
    c0,
    x,
    y,
    *,
    horizon: float,
    eta: float = 0.0,
    points: int = 400,
    rtol: float = FLOW_RTOL,
    atol: float = FLOW_ATOL,
) -> Trajectory:
    """Exact gradient flow of a diagonal SSM (a, b, c) on ℓ = (1/n) Σ_i (y_i − φ(x_i))² (eq. (3)).

    A is learned at rate 1 and B, C at the ratio ``eta`` (the paper's eq. (12)):
    ȧ = −∂ℓ/∂a, ḃ = −η ∂ℓ/∂b, ċ = −η ∂ℓ/∂c. ``eta = 0`` keeps B and C fixed (Assumption 2),
    the flow of :func:`lib.poisoning.theorem1.theorem1_flow` when B = 1, C = 1ᵀ and the training
    set is S_1 or S_2. Integrated with LSODA in log time τ = log(1 + t) on a velocity and Jacobian
    compiled by numba, recorded at 0 and log-spaced times up to ``horizon``
    (:func:`lib.engine.flow.log_grid`). ``x`` has shape ``(n, κ)``, ``y`` shape ``(n,)``; ``a0``,
    ``b0``, ``c0`` shape ``(d,)``, with the entries of ``a0`` in [−10, 10] (beyond, a_j^κ overflows
    for the lengths of the paper). A flow that cannot be integrated in float64 raises
    :class:`lib.engine.validation.NumericalFailure`. Returns a :class:`lib.engine.flow.Trajectory`
    with parameters a, b, c and the loss. """
    start = _check_start(a0, b0, c0)
    d = start.shape[0] // 3
    x, y = _check_training_set(x, y)
    as_size(x.numel(), "x", per=d)
    eta = as_positive_float(eta, "eta", allow_zero=True)
    if eta > 1e6:
        raise ValueError(f"eta must be at most 1e6 (a ratio of learning rates), got {eta:g}")
    rtol = as_positive_float(rtol, "rtol")
    atol = as_positive_float(atol, "atol")
    if rtol < 1e-14 or rtol >= 1:
        raise ValueError(f"rtol must lie in [1e-14, 1) (LSODA in float64), got {rtol:g}")
    times = log_grid(horizon, points)
    if times[-1] > LOG_TIME_LIMIT:
        raise ValueError(f"horizon = {times[-1]:.3g} is beyond {LOG_TIME_LIMIT:.0e}, the longest "
                         "horizon in log time (e^τ overflows float64 past it)")
    grid = np.log1p(times)
    if grid[-1] < 1e-150:
        raise ValueError(f"horizon = {times[-1]:.3g} is too short to integrate in float64")
    xs, ys = x.numpy(), y.numpy()
    states, out = odeint(_log_time_velocity, start, grid, args=(xs, ys, d, eta),
                         Dfun=_log_time_jacobian, tfirst=True, rtol=rtol, atol=atol,
                         mxstep=10**8, full_output=True)
    if out["message"] != "Integration successful." or not np.isfinite(states).all():
        raise NumericalFailure(
            f"ssm_flow: the flow could not be integrated in float64 ({out['message']}; finite "
            f"states: {bool(np.isfinite(states).all())})"
        )
    params = {"a": states[:, :d], "b": states[:, d : 2 * d], "c": states[:, 2 * d :]}
    info = {"nfev": int(out["nfe"][-1]), "njev": int(out["nje"][-1]), "message": out["message"],
            "eta": eta}
    return Trajectory(times=times.copy(), params=params, losses=_loss(states, xs, ys, d), info=info)
