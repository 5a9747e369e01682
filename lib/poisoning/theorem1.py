"""Clean-label poisoning of the implicit bias of SSMs (Slutzky, Alexander, Razin & Cohen 2025).

**The Theorem-1 setting** (§3.2, App. E). Teacher of Assumption 1, student with B = 1 and C = 1ᵀ
fixed (Assumption 2), so only a = diag(A) is trained. The training set is S_1 = {(e_1, 1)}; the
poisoned one appends the clean example (e_{κ−1}, 1). Closed forms of the two losses and flows
(eqs. 20–23), the conservation law of the clean flow, the plateau escape time, the saddle s·1 of the
poisoned loss with its Hessian spectrum (Lemmas 8–9), and :func:`theorem1_table`, which runs the
paper's protocol for Table 1 / Table 3, row 1.

The experiments with A, B, C (and an MLP) all trained, Figure 2 and Tables 1/3 rows 2–3, live in
:mod:`lib.poisoning.dynamics`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from numba import njit
from scipy.integrate import odeint
from scipy.optimize import brentq

from lib.engine.flow import LOG_TIME_LIMIT, Trajectory, gradient_flow, log_grid
from lib.engine.validation import (
    MAX_ENTRIES,
    NumericalFailure,
    as_bool,
    as_choice,
    as_int,
    as_list,
    as_positive_float,
    as_seed,
    as_seeds,
    as_size,
    as_tensor,
    check_finite_result,
)
from lib.ssm.diagonal import SSM, generalization_error, ssm_output, theorem1_teacher, unit_impulse

# --------------------------------------------------------------------------------------------
# The tie of the initialization (shared with lib.poisoning.dynamics)
# --------------------------------------------------------------------------------------------


def tie_gap(init_scale: float, exponent: float) -> float:
    """The paper's gap between the two largest initial entries: 0.05·exp(−p·log10(1/sd)).

    (Slutzky et al. 2025, App. H, Tables 6, 8, 12; natural exponential of a base-10 logarithm,
    exactly as the authors' code writes it.) Table 1 row 1: sd = 1e-3, p = 5 gives ≈ 1.53e-8.
    """
    init_scale = as_positive_float(init_scale, "init_scale")
    exponent = as_positive_float(exponent, "exponent", allow_zero=True)
    power = -exponent * math.log10(1.0 / init_scale)
    if power > 700:
        raise ValueError(
            f"tie_gap(init_scale = {init_scale:g}, exponent = {exponent:g}) overflows float64; "
            "the gap is meant for init scales below 1"
        )
    return 0.05 * math.exp(power)


def _check_diff(diff: float, init_scale: float) -> float:
    diff = as_positive_float(diff, "diff", allow_zero=True)
    if diff >= init_scale:
        raise ValueError(f"diff must be smaller than init_scale = {init_scale}, got {diff}")
    return diff


# --------------------------------------------------------------------------------------------
# The Theorem-1 setting: losses, flows, closed forms
# --------------------------------------------------------------------------------------------


def _check_kappa(kappa: int) -> int:
    return as_int(kappa, "kappa", minimum=3, maximum=MAX_ENTRIES)


def theorem1_init(
    d: int,
    seed: int,
    *,
    init_scale: float,
    diff: float | None = None,
    relative_gap: float | None = None,
) -> torch.Tensor:
    """The initial diagonal a(0) of the paper's Theorem-1 experiments (App. H.2.1, Table 8).

    Entries init_scale·U[0, 1) from ``numpy.random.RandomState(seed)`` (the authors' code draws
    uniform entries, although the text says Gaussian), sorted descending, then a_2 := a_1 − diff,
    which places a(0) near the set of Theorem 1: tiny, positive, the top two entries nearly tied.
    Alternatively ``relative_gap = g`` sets a_2 := a_1 (1 − g); with neither, the random gap stays.
    The entries below a_2 are not re-sorted: when g > 1 − a_3/a_1 the third entry exceeds the new
    a_2, so the point is not sorted and its top gap is a_1 − a_3, smaller than g·a_1.
    """
    d = as_int(d, "d", minimum=2, maximum=10**7)
    seed = as_seed(seed)
    init_scale = as_positive_float(init_scale, "init_scale")
    if diff is not None and relative_gap is not None:
        raise ValueError("give at most one of diff and relative_gap")
    values = np.sort(np.random.RandomState(seed).rand(d) * init_scale)[::-1].copy()
    if diff is not None:
        diff = _check_diff(diff, init_scale)
        if diff >= values[0]:
            raise ValueError(
                f"diff = {diff} is not below the largest initial entry {values[0]:.3g} "
                f"(seed {seed}); the entries must stay positive"
            )
        values[1] = values[0] - diff
    elif relative_gap is not None:
        relative_gap = as_positive_float(relative_gap, "relative_gap", allow_zero=True)
        if relative_gap >= 1:
            raise ValueError(f"relative_gap must lie in [0, 1), got {relative_gap}")
        values[1] = values[0] * (1.0 - relative_gap)
    return torch.from_numpy(values)


def theorem1_training_set(
    d: int, kappa: int, *, poisoned: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """S_1 = {(e_1, y)} or S_2 = S_1 ∪ {(e_{κ−1}, y†)}, labelled by the teacher of Assumption 1.

    The labels are computed from the teacher (both equal 1: y = C*(A*)^{κ−1}B*, y† = C*A*B*);
    the appended example is *clean*. Returns ``(x, y)`` of shapes ``(n, κ)`` and ``(n,)``.
    """
    d = as_int(d, "d", minimum=2)
    kappa = as_size(_check_kappa(kappa), "kappa", minimum=3, per=d)  # the teacher's d × κ powers
    poisoned = as_bool(poisoned, "poisoned")
    rows = [unit_impulse(kappa, 1)]
    if poisoned:
        rows.append(unit_impulse(kappa, kappa - 1))
    x = torch.cat(rows)
    return x, ssm_output(*theorem1_teacher(d), x)


def _power_sums(a: torch.Tensor, kappa: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Residuals 1 − Σ_k a_k^{κ−1} (of e_1) and 1 − Σ_k a_k (of e_{κ−1})."""
    return 1.0 - (a ** (kappa - 1)).sum(-1), 1.0 - a.sum(-1)


def theorem1_loss(a, kappa: int, *, poisoned: bool) -> torch.Tensor:
    """The training loss of the Theorem-1 student (Slutzky et al. 2025, App. E.1).

        ℓ_{S1}(a) = (1 − Σ_k a_k^{κ−1})²                                    (eq. 20)
        ℓ_{S2}(a) = ½[(1 − Σ_k a_k^{κ−1})² + (1 − Σ_k a_k)²]                  (eq. 22)

    The same as :func:`lib.ssm.diagonal.square_loss` on :func:`theorem1_training_set` with B = C =
    1. ``a`` has shape ``(..., d)``; differentiable.
    """
    a = as_tensor(a, "a", min_ndim=1)
    kappa = _check_kappa(kappa)
    poisoned = as_bool(poisoned, "poisoned")
    long_residual, short_residual = _power_sums(a, kappa)
    if not poisoned:
        return check_finite_result(long_residual**2, "the loss")
    return check_finite_result(0.5 * (long_residual**2 + short_residual**2), "the loss")


def theorem1_velocity(a, kappa: int, *, poisoned: bool) -> torch.Tensor:
    """The gradient-flow velocity ȧ = −∇ℓ of the Theorem-1 student, in closed form.

        clean:     ȧ_j = 2(κ−1)(1 − Σ_k a_k^{κ−1}) a_j^{κ−2}                              (eq. 21)
        poisoned:  ȧ_j = (κ−1)(1 − Σ_k a_k^{κ−1}) a_j^{κ−2} + (1 − Σ_k a_k)              (eq. 23)

    The poisoned flow's second term is the same for every j: an additive drive, the γ^{(0)} term of
    Proposition 1, which pushes all entries together.
    """
    a = as_tensor(a, "a", min_ndim=1)
    kappa = _check_kappa(kappa)
    poisoned = as_bool(poisoned, "poisoned")
    long_residual, short_residual = _power_sums(a, kappa)
    growth = (kappa - 1) * long_residual.unsqueeze(-1) * a ** (kappa - 2)
    velocity = 2.0 * growth if not poisoned else growth + short_residual.unsqueeze(-1)
    return check_finite_result(velocity, "the velocity")


def _theorem1_gradient(kappa: int, poisoned: bool):
    """``gradient`` closure for lib.engine.flow: (ℓ summed over runs, {"a": −velocity}), eqs.
    (20)–(23).

    The arithmetic runs in NumPy on the tensors' float64 buffers (no copies): an ODE solve calls
    this a few thousand times on ten numbers, where torch's per-operation overhead would cost
    about ten times the arithmetic itself.
    """

    def gradient(params):
        a = params["a"].detach().numpy()
        power = a ** (kappa - 2)
        long_residual = 1.0 - (power * a).sum(-1, keepdims=True)
        velocity = (kappa - 1) * long_residual * power
        if poisoned:
            short_residual = 1.0 - a.sum(-1, keepdims=True)
            velocity = velocity + short_residual
            loss = 0.5 * (np.square(long_residual).sum() + np.square(short_residual).sum())
        else:
            velocity = 2.0 * velocity
            loss = np.square(long_residual).sum()
        return torch.from_numpy(np.asarray(loss)), {"a": torch.from_numpy(-velocity)}

    return gradient


def _theorem1_hessian(kappa: int, poisoned: bool):
    """``hessian`` closure for lib.engine.flow: the Jacobian of the gradient map −v(a) of eqs.
    (21), (23).

    With r = 1 − Σ_k a_k^{κ−1} and c = 2(κ−1) (clean) or κ−1 (poisoned):
    ∂v_i/∂a_j = c [δ_ij (κ−2) r a_i^{κ−3} − (κ−1) a_i^{κ−2} a_j^{κ−2}] (− 1 when poisoned, from
    the short residual 1 − Σ_k a_k). Block-diagonal over independent runs. Handing it to LSODA
    spares the d + 1 extra gradient evaluations of each finite-difference Jacobian.
    """
    scale = (kappa - 1) * (1.0 if poisoned else 2.0)

    def hessian(params):
        a = params["a"].detach().numpy().reshape(-1, params["a"].shape[-1])  # (R, d)
        runs, d = a.shape
        power = a ** (kappa - 2)
        residual = 1.0 - (power * a).sum(-1, keepdims=True)
        blocks = -(kappa - 1) * power[:, :, None] * power[:, None, :]
        blocks[:, np.arange(d), np.arange(d)] += (kappa - 2) * residual * a ** (kappa - 3)
        blocks *= scale
        if poisoned:
            blocks -= 1.0
        jacobian = np.zeros((runs * d, runs * d))
        for r in range(runs):
            jacobian[r * d : (r + 1) * d, r * d : (r + 1) * d] = -blocks[r]
        return torch.from_numpy(jacobian)

    return hessian


THEOREM1_RTOL, THEOREM1_ATOL = 1e-10, 1e-15
"""Tolerances of :func:`theorem1_flow`: fine enough to keep the tie gap of 5e-12 of Table 3."""

THEOREM1_ENGINES = ("compiled", "torch")


@njit(cache=True, error_model="numpy")
def _theorem1_log_time_velocity(
    tau: float, a: np.ndarray, d: int, kappa: int, poisoned: bool
) -> np.ndarray:
    """e^τ ȧ of eq. (21) or (23) in log time τ = log(1 + t), for R runs stacked in ``a`` (R·d,).

    The compiled right-hand side of :func:`theorem1_flow`: the arithmetic of
    :func:`theorem1_velocity` (residual r = 1 − Σ_k a_k^{κ−1}, drive 1 − Σ_k a_k), one loop per run.
    A non-finite entry makes the whole velocity nan, so the solver stops and the caller reports it.
    """
    out = np.empty_like(a)
    scale = math.exp(tau)
    for start in range(0, a.shape[0], d):
        long_sum = 0.0
        short_sum = 0.0
        for j in range(start, start + d):
            power = a[j] ** (kappa - 2)
            out[j] = power
            long_sum += power * a[j]
            short_sum += a[j]
        growth = (kappa - 1) * (1.0 - long_sum)
        drive = 1.0 - short_sum
        for j in range(start, start + d):
            if poisoned:
                out[j] = scale * (growth * out[j] + drive)
            else:
                out[j] = scale * (2.0 * growth * out[j])
    if not np.isfinite(out).all():
        out[:] = np.nan
    return out


@njit(cache=True, error_model="numpy")
def _theorem1_log_time_jacobian(
    tau: float, a: np.ndarray, d: int, kappa: int, poisoned: bool
) -> np.ndarray:
    """∂(e^τ ȧ)/∂a for :func:`_theorem1_log_time_velocity`: block diagonal over the runs.

    Per run, with r = 1 − Σ_k a_k^{κ−1} and c = 2(κ−1) (clean) or κ−1 (poisoned):
    ∂ȧ_i/∂a_j = c [δ_ij (κ−2) r a_i^{κ−3} − (κ−1) a_i^{κ−2} a_j^{κ−2}] (− 1 when poisoned),
    the Jacobian that :func:`_theorem1_hessian` hands to the engine (with the opposite sign).
    """
    size = a.shape[0]
    out = np.zeros((size, size))
    scale = math.exp(tau)
    factor = scale * (kappa - 1) * (1.0 if poisoned else 2.0)
    power = np.empty(d)
    for start in range(0, size, d):
        long_sum = 0.0
        for j in range(d):
            power[j] = a[start + j] ** (kappa - 2)
            long_sum += power[j] * a[start + j]
        residual = 1.0 - long_sum
        for i in range(d):
            for j in range(d):
                value = -(kappa - 1) * power[i] * power[j]
                if i == j:
                    value += (kappa - 2) * residual * a[start + i] ** (kappa - 3)
                value *= factor
                if poisoned:
                    value -= scale
                out[start + i, start + j] = value
    return out


def _theorem1_flow_compiled(
    a0: torch.Tensor,
    kappa: int,
    poisoned: bool,
    times: np.ndarray,
    rtol: float = THEOREM1_RTOL,
    atol: float = THEOREM1_ATOL,
) -> Trajectory:
    """LSODA (``odeint``, the solver and tolerances of the engine's path) on the compiled
    velocity and Jacobian, in log time; the checks of :func:`lib.engine.flow.gradient_flow` on the
    horizon, the solver's verdict and the finiteness of the result."""
    if times[-1] > LOG_TIME_LIMIT:
        raise ValueError(
            f"horizon = {times[-1]:.3g} is beyond {LOG_TIME_LIMIT:.0e}, the longest horizon in "
            "log time: the solver steps past the end, where e^τ overflows float64"
        )
    grid = np.log1p(times)
    if grid[-1] < 1e-150:
        raise ValueError(
            f"horizon = {times[-1]:.3g} is too short to integrate in float64 (the solver's first "
            "step underflows); use a horizon above 1e-150"
        )
    shape = tuple(a0.shape)
    d = shape[-1]
    states, out = odeint(
        _theorem1_log_time_velocity,
        a0.numpy().reshape(-1).copy(),
        grid,
        args=(d, kappa, poisoned),
        Dfun=_theorem1_log_time_jacobian,
        tfirst=True,
        rtol=rtol,
        atol=atol,
        mxstep=10**8,
        full_output=True,
    )
    if out["message"] != "Integration successful." or not np.isfinite(states).all():
        raise NumericalFailure(
            f"theorem1_flow: the flow could not be integrated in float64 ({out['message']}; "
            f"finite states: {bool(np.isfinite(states).all())})"
        )
    a = states.reshape((len(times), *shape))
    losses = theorem1_loss(torch.from_numpy(a), kappa, poisoned=poisoned).numpy()
    if losses.ndim == 2:  # R runs: their losses summed, as the engine reports them
        losses = losses.sum(-1)
    info = {"nfev": int(out["nfe"][-1]), "njev": int(out["nje"][-1]), "message": out["message"]}
    return Trajectory(times=times.copy(), params={"a": a}, losses=losses, info=info)


def theorem1_flow(
    a0,
    kappa: int,
    *,
    poisoned: bool,
    horizon: float,
    points: int = 400,
    engine: str = "compiled",
    rtol: float = THEOREM1_RTOL,
    atol: float = THEOREM1_ATOL,
) -> Trajectory:
    """Exact gradient flow of the Theorem-1 student from ``a0`` up to time ``horizon``.

    Integrates eq. (21) or (23) with LSODA in log time τ = log(1 + t) (no small-step gradient
    descent), with tolerances rtol = 1e-10, atol = 1e-15 fine enough to keep the tie gap of 5e-12
    of Table 3. ``a0`` may have shape ``(R, d)`` to integrate R independent students at once.
    Recorded at 0 and log-spaced times (:func:`lib.engine.flow.log_grid`). A flow that cannot be
    integrated in float64 raises :class:`lib.engine.validation.NumericalFailure`.

    ``engine="compiled"`` (the default) hands the solver the velocity and its Jacobian compiled by
    numba; ``engine="torch"`` runs the same equations through the engine's
    :func:`lib.engine.flow.gradient_flow`, about twenty times slower per flow (a right-hand-side
    call there costs some 25 µs of tensor handling around 1 µs of arithmetic). Same solver, same
    tolerances: the two agree to the solver's accuracy (only rounding in the arithmetic differs,
    and the adaptive solver may then choose other steps), as the tests check.

    ``rtol`` and ``atol`` override the solver's tolerances (both engines), for instance to see
    which part of an error shrinks with them (the solver's) and which does not.
    """
    a0 = as_tensor(a0, "a0", min_ndim=1, nonempty=True, detach=True)
    if a0.ndim > 2:
        raise ValueError(f"a0 must have shape (d,) or (R, d), got {tuple(a0.shape)}")
    kappa = _check_kappa(kappa)
    poisoned = as_bool(poisoned, "poisoned")
    engine = as_choice(engine, "engine", THEOREM1_ENGINES)
    rtol = as_positive_float(rtol, "rtol")
    atol = as_positive_float(atol, "atol")
    if rtol < 1e-14 or rtol >= 1:
        raise ValueError(f"rtol must lie in [1e-14, 1) (LSODA in float64), got {rtol:g}")
    times = log_grid(horizon, points)
    if engine == "compiled":
        return _theorem1_flow_compiled(a0, kappa, poisoned, times, rtol, atol)
    return gradient_flow(
        None,
        {"a": a0},
        times,
        log_time=True,
        rtol=rtol,
        atol=atol,
        gradient=_theorem1_gradient(kappa, poisoned),
        hessian=_theorem1_hessian(kappa, poisoned),
    )


def conserved_quantity(a, kappa: int) -> torch.Tensor:
    """Q_j = a_j^{−(κ−3)} − a_1^{−(κ−3)}, constant along the clean flow (proof of Prop. 6).

    From eq. (21), d/dt a_j^{−(κ−3)} = −2(κ−1)(κ−3)(1 − Σ_k a_k^{κ−1}), the same for every j.
    Needs positive entries; shape ``(..., d)``.
    """
    a = as_tensor(a, "a", min_ndim=1)
    kappa = as_int(kappa, "kappa", minimum=4, maximum=MAX_ENTRIES)
    if bool((a <= 0).any()):
        raise ValueError("the conservation law concerns positive entries a_j > 0")
    inverse = a ** (-(kappa - 3))
    if not bool(torch.isfinite(inverse).all()):
        raise ValueError(
            f"a_j^(-(kappa-3)) overflows float64 at kappa = {kappa} for the smallest entry "
            f"{float(a.min()):.3g}: the conserved quantity is not representable"
        )
    return inverse - inverse[..., :1]


def escape_time(a1: float, kappa: int) -> float:
    """Predicted end of the clean plateau: t* = a_1(0)^{−(κ−3)} / (2(κ−1)(κ−3)).

    While the residual 1 − Σ a^{κ−1} ≈ 1, eq. (21) gives a_1(t)^{−(κ−3)} = a_1(0)^{−(κ−3)} −
    2(κ−1)(κ−3)t, which reaches 0 (a_1 blows up towards 1) at t*.
    """
    a1 = as_positive_float(a1, "a1")
    kappa = as_int(kappa, "kappa", minimum=4)
    log10_time = -(kappa - 3) * math.log10(a1) - math.log10(2.0 * (kappa - 1) * (kappa - 3))
    if log10_time > 300:
        raise ValueError(
            f"the escape time for a1 = {a1:g}, kappa = {kappa} is about 1e{log10_time:.0f}, "
            "beyond float64"
        )
    return a1 ** (-(kappa - 3)) / (2.0 * (kappa - 1) * (kappa - 3))


def saddle_point(d: int, kappa: int) -> float:
    """The scalar s of the saddle s·1 of the poisoned loss (Lemmas 5–7, App. E.3).

    On the diagonal a = s·1 the poisoned velocity (23) vanishes where
    (κ−1)(1 − d s^{κ−1}) s^{κ−2} + (1 − d s) = 0; the root lies in (1/(2d), 3/(2d)), near 1/d.
    """
    d = as_int(d, "d", minimum=2)
    kappa = _check_kappa(kappa)

    def velocity(s: float) -> float:
        return (kappa - 1) * (1 - d * s ** (kappa - 1)) * s ** (kappa - 2) + (1 - d * s)

    return float(brentq(velocity, 0.5 / d, 1.5 / d, xtol=1e-17, rtol=1e-15))


def saddle_hessian_eigenvalues(d: int, kappa: int) -> tuple[float, float]:
    """The Hessian spectrum of the poisoned loss at s·1 (Lemma 8): (λ_+, λ_−).

    The Hessian there is (ω_1 − ω_2) I + ω_2 11ᵀ with ω_2 = (κ−1)² s^{2κ−4} + 1, so

        λ_− = ω_1 − ω_2 = (κ−1)(κ−2)(d s^{κ−1} − 1) s^{κ−3}    (eigenvectors e_1 − e_j, mult. d−1)
        λ_+ = λ_− + d ω_2 = (κ−1)((2κ−3) d s^{κ−1} − (κ−2)) s^{κ−3} + d    (eigenvector 1)

    (the power s^{κ−3} in λ_+ follows from the lemma's own proof; the OCR'd statement is garbled).
    Lemma 9: λ_− ∈ (−1, 0) and λ_+ > d − 1 > 0: a strict saddle, attracting along 1 and weakly
    repelling across it.
    """
    s = saddle_point(d, kappa)
    minus = (kappa - 1) * (kappa - 2) * (d * s ** (kappa - 1) - 1) * s ** (kappa - 3)
    plus = (kappa - 1) * ((2 * kappa - 3) * d * s ** (kappa - 1) - (kappa - 2)) * s ** (kappa - 3)
    return float(plus + d), float(minus)


def theorem1_lower_bound(d: int, kappa: int) -> float:
    """Theorem 1's lower bound on the poisoned Gen_k: min{0.1, (1 − 0.6^{1/(κ−1)})/(9d)}.

    For lengths k > κ + 2 and dimensions d > 8, as printed (App. E's Lemma 3 prints L' > L + 2).
    The formula itself is evaluated at any ``d >= 2`` and ``kappa >= 3``; a value outside the
    printed hypotheses is the formula's, not a bound the theorem asserts.

    In absolute units (divide by d for the normalization of the paper's tables). This is the
    constant of the theorem's statement in the main text. The proof applies Lemma 3 directly to
    the poisoned limit, and the lemma's argument gives the larger constant
    min{0.1, 0.9 (1 − 0.6^{1/(κ−1)})/d} (its second term is 8.1 times this one's at every d
    and κ), which implies the stated bound. (The concluding lines
    of App. E.3-E.4 write the constant with a leading factor the OCR'd text renders as "i" / "L";
    it does not weaken what Lemma 3 gives.)
    """
    d = as_int(d, "d", minimum=2)
    kappa = _check_kappa(kappa)
    return min(0.1, (1.0 - 0.6 ** (1.0 / (kappa - 1))) / (9.0 * d))


def theorem1_error(a, d: int, *, length: int = 20) -> torch.Tensor:
    """The error of the paper's Tables 1 and 3, row 1: Gen_length / max_k |h*_k| = Gen_length / d.

    The student is (a, 1, 1ᵀ), the teacher that of Assumption 1, and the authors' code compares the
    first 20 impulse entries (the text says 40). ``a`` has shape ``(..., d)``.
    """
    a = as_tensor(a, "a", min_ndim=1)
    d = as_int(d, "d", minimum=2)
    if a.shape[-1] != d:
        raise ValueError(f"a must have d = {d} entries in its last dimension, got {a.shape[-1]}")
    ones = torch.ones_like(a)
    return generalization_error(SSM(a, ones, ones), theorem1_teacher(d), length, normalize=True)


PAPER_HORIZONS = {(10, 7): (1e11, 1e4), (20, 9): (1e13, 1e7)}
"""(clean, poisoned) integration horizons of Table 9 for the two settings of Tables 1 and 3."""


def default_horizons(d: int, kappa: int, a1: float) -> tuple[float, float]:
    """The paper's horizons where it gives them, else 100 × the predicted escape time t*.

    The poisoned flow leaves the saddle on a time scale ~1/|λ_−|·log(1/α); integrating it as long as
    the clean one costs little in log time, so both get the clean horizon.
    """
    d = as_int(d, "d", minimum=2)
    kappa = as_int(kappa, "kappa", minimum=4)
    a1 = as_positive_float(a1, "a1")
    if (d, kappa) in PAPER_HORIZONS:
        return PAPER_HORIZONS[(d, kappa)]
    horizon = max(1e4, 100.0 * escape_time(a1, kappa))
    return horizon, horizon


def theorem1_table(
    d: int,
    kappa: int,
    seeds: Sequence[int],
    *,
    init_scale: float,
    diff: float,
    length: int = 20,
    horizons: tuple[float, float] | None = None,
) -> dict:
    """Run the paper's Theorem-1 experiment (Tables 1 and 3, row 1) for each seed.

    For every seed: a(0) from :func:`theorem1_init`; exact gradient flow (:func:`theorem1_flow`)
    on S_1 up to the clean horizon and on S_2 up to the poisoned one (the paper's Table 9 values,
    see :data:`PAPER_HORIZONS`); the normalized error :func:`theorem1_error` of each final student.

    Returns ``{"clean": mean, "poisoned": mean, "per_seed": {"clean": array, "poisoned": array},
    "final": {"clean": (S, d) array, "poisoned": (S, d) array}, "loss": {...}, "seeds": [...]}``.
    """
    d = as_int(d, "d", minimum=2)
    kappa = _check_kappa(kappa)
    length = as_int(length, "length", minimum=1)
    seeds = as_seeds(seeds)
    if horizons is not None:
        if not isinstance(horizons, (tuple, list)) or len(horizons) != 2:
            raise ValueError(f"horizons must be a pair (clean, poisoned), got {horizons!r:.60}")
        horizons = tuple(as_positive_float(h, f"horizons[{i}]") for i, h in enumerate(horizons))
    result: dict = {"seeds": seeds, "per_seed": {}, "final": {}, "loss": {}}
    for poisoned, key in ((False, "clean"), (True, "poisoned")):
        finals, losses = [], []
        for seed in seeds:
            a0 = theorem1_init(d, seed, init_scale=init_scale, diff=diff)
            horizon = (horizons or default_horizons(d, kappa, float(a0[0])))[int(poisoned)]
            trajectory = theorem1_flow(a0, kappa, poisoned=poisoned, horizon=horizon, points=2)
            finals.append(trajectory["a"][-1])
            losses.append(trajectory.losses[-1])
        final = np.stack(finals)
        errors = theorem1_error(torch.from_numpy(final), d, length=length).numpy()
        result["per_seed"][key] = errors
        result["final"][key] = final
        result["loss"][key] = np.array(losses)
        result[key] = float(errors.mean())
    return result


WINDOW_MAX_ESCAPE = 1e17
"""The longest predicted plateau (escape time t*) :func:`poisoning_window` accepts: the poisoned
flow to 100 t* then takes about a second here; at t* = 1e19 it took 75 s."""


def poisoning_window(
    d: int,
    kappa: int,
    seeds: Sequence[int],
    *,
    init_scales: Sequence[float],
    relative_gaps: Sequence[float | None],
    length: int = 20,
) -> dict:
    """Clean and poisoned errors over a grid of init scales and relative tie gaps.

    For each init scale α, relative gap g = (a_1 − a_2)/a_1 (``None``: the natural random gap) and
    seed, a(0) = :func:`theorem1_init` and both flows run to 100 × the predicted escape time
    t*(a_1(0)) (at least 1e4), long enough for every run that escapes at all. Theorem 1 asks for a
    gap above ~α^{κ−3} (so that the clean flow breaks the tie greedily) and below ~α (so that the
    poisoned flow forgets it near the saddle s·1): this sweep shows that window.

    Returns ``{"clean": array, "poisoned": array}`` of normalized errors (:func:`theorem1_error`)
    with shape ``(len(init_scales), len(relative_gaps), len(seeds))``, plus the grid itself.
    """
    d = as_int(d, "d", minimum=2)
    kappa = as_int(kappa, "kappa", minimum=4)
    seeds = as_seeds(seeds)
    init_scales = [
        as_positive_float(s, f"init_scales[{i}]")
        for i, s in enumerate(as_list(init_scales, "init_scales"))
    ]
    relative_gaps = as_list(relative_gaps, "relative_gaps")
    length = as_int(length, "length", minimum=1)
    for scale in init_scales:  # the largest escape time of the grid: a_1(0) >= scale / d roughly
        for seed in seeds:
            a1 = float(theorem1_init(d, seed, init_scale=scale)[0])
            if escape_time(a1, kappa) > WINDOW_MAX_ESCAPE:
                raise ValueError(
                    f"poisoning_window: init scale {scale:g} at kappa = {kappa} (seed {seed}) "
                    f"predicts an escape time t* = {escape_time(a1, kappa):.1e}, beyond the "
                    f"{WINDOW_MAX_ESCAPE:.0e} that LSODA integrates reliably in float64 (a_1 "
                    "moves by less than its round-off for most of the plateau); use a larger "
                    "init scale or a shorter kappa"
                )
    shape = (len(init_scales), len(relative_gaps), len(seeds))
    errors = {"clean": np.zeros(shape), "poisoned": np.zeros(shape)}
    for i, scale in enumerate(init_scales):
        for j, gap in enumerate(relative_gaps):
            for k, seed in enumerate(seeds):
                a0 = theorem1_init(d, seed, init_scale=scale, relative_gap=gap)
                horizon = max(1e4, 100.0 * escape_time(float(a0[0]), kappa))
                for poisoned, key in ((False, "clean"), (True, "poisoned")):
                    flow = theorem1_flow(a0, kappa, poisoned=poisoned, horizon=horizon, points=2)
                    final = torch.from_numpy(flow["a"][-1])
                    errors[key][i, j, k] = theorem1_error(final, d, length=length).item()
    return {
        **errors,
        "init_scales": list(init_scales),
        "relative_gaps": list(relative_gaps),
        "seeds": list(seeds),
    }
