"""What Elkabetz & Cohen 2021 guarantee, as numbers: step sizes, times, iteration counts.

* :func:`corollary4_step_size`: the step below which gradient descent stays ε-close to gradient
  flow up to a horizon t̃, for a non-negative, globally β-smooth loss with a constant curvature
  bound m (the paper's Corollary 4): constant in t̃ for m < 0, ∝ 1/t̃ for m = 0, ∝ e^{−m t̃} for
  m > 0;
* :func:`tracking_exit_times`: the same question answered by running gradient descent on a
  one-dimensional loss against its exact flow, for a list of steps;
* :func:`proposition14_time`, :func:`theorem15_iterations`: the time of the paper's eq. (21) by
  which the flow of deep linear scalar regression is ε̄-optimal, and the iteration count of its
  eq. (24) (Remark 17: exponential in the depth);
* :func:`theorem32_unbalancedness`, :func:`theorem32_step_size`, :func:`theorem32_iterations`:
  the unbalancedness, step and iteration count of Theorem 32 (Appendix G, eqs. (34)–(36));
* :func:`nearest_balanced`: a balanced weight setting near an unbalanced one, as Lemma 31
  promises.

The step of Theorem 15 itself (eq. (23)) is :func:`lib.networks.linear_nets.theorem15_step_size`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence

import numpy as np
import torch

from lib.engine.validation import (
    NumericalFailure,
    as_callable,
    as_float,
    as_int,
    as_list,
    as_positive_float,
    check_finite_result,
    closure_number,
    describe,
)
from lib.networks.linear_nets import as_params, layers

MAX_STEPS = 10**7
"""The most descent steps :func:`tracking_exit_times` runs for one step size."""


def corollary4_step_size(
    curvature: float,
    smoothness: float,
    start_loss: float,
    radius: float,
    horizon: float,
    start_gap: float = 0.0,
) -> float:
    """The step size of Corollary 4: gradient descent with any η below it stays within ε of the
    flow, ‖θ_k − θ(kη)‖ ≤ ε for k ≤ t̃/η.

    For f ≥ 0, β-smooth on all of space, m = −inf_q λ_min(∇²f(q)) (``curvature``), ε (``radius``),
    t̃ (``horizon``), ‖θ_0 − θ(0)‖ (``start_gap``) and c = (√(2β³ f(θ(0))) + β²ε)^{−1}:

    * m < 0 (strongly convex): c (ε − ‖θ_0 − θ(0)‖) |m|, independent of t̃;
    * m = 0 (convex): c (ε − ‖θ_0 − θ(0)‖) / t̃;
    * m > 0 (non-convex): c (ε − ‖θ_0 − θ(0)‖ e^{m t̃}) m / (e^{m t̃} − 1), about e^{−m t̃}.

    Returns 0.0 where no positive step qualifies (the start is already too far), and a
    NumericalFailure where the step exceeds the float64 range (a tiny β or a huge |m|). Where a
    product in the formula would leave the normal floats (β³ underflows below β ≈ 1e-103, or
    overflows above β ≈ 1e102), the step is computed from logarithms instead.
    """
    m = as_float(curvature, "curvature")
    beta = as_positive_float(smoothness, "smoothness")
    f0 = as_positive_float(start_loss, "start_loss", allow_zero=True)
    eps = as_positive_float(radius, "radius")
    horizon = as_positive_float(horizon, "horizon")
    gap = as_positive_float(start_gap, "start_gap", allow_zero=True)
    room, times, over, log_room = _corollary4_terms(m, eps, gap, horizon)
    if log_room == -math.inf:
        return 0.0
    step = _direct_step(beta, f0, eps, room, times, over)
    if step is not None:
        return step
    # 1/c = β^{3/2} (√(2 f(θ(0))) + √β ε), in logarithms
    log_root = 0.5 * math.log(2.0 * f0) if f0 > 0 else -math.inf
    log_denominator = 1.5 * math.log(beta) + float(
        np.logaddexp(log_root, 0.5 * math.log(beta) + math.log(eps))
    )
    log_step = log_room + math.log(times) - math.log(over) - log_denominator
    if log_step > _LOG_LARGEST:
        raise NumericalFailure(
            f"the step of Corollary 4 is e^{log_step:.4g}, beyond the float64 range: smoothness "
            f"= {beta:.3g} is too small (or |curvature| = {abs(m):.3g} too large) for a finite "
            "bound"
        )
    return math.exp(log_step)


_LOG_LARGEST = math.log(sys.float_info.max)


def _corollary4_terms(m: float, eps: float, gap: float, horizon: float):
    """(room, times, over, log room) with Corollary 4's step c · room · times / over.

    For m > 0 the e^{−m t̃}-scaled form, finite for any m t̃; where m t̃ lies below the normal
    floats, its m → 0 limit (the convex case). With a zero start gap, log room = log ε − m t̃
    stays exact where e^{−m t̃} underflows. A log room of −inf: no step qualifies."""
    if m < 0:
        room, times, over = max(eps - gap, 0.0), abs(m), 1.0
    elif m * horizon < sys.float_info.min:  # m = 0, or m t̃ subnormal: 1 + O(1e-308) away
        room, times, over = max(eps - gap, 0.0), 1.0, horizon
    else:
        decay = math.exp(-m * horizon) if m * horizon < 745 else 0.0
        room, times, over = max(eps * decay - gap, 0.0), m, -math.expm1(-m * horizon)
        if gap == 0.0:
            return room, times, over, math.log(eps) - m * horizon
    return room, times, over, (math.log(room) if room > 0 else -math.inf)


def _normal_product(*factors: float) -> float | None:
    """The product of positive factors, left to right, or None where a partial product leaves
    the normal floats (then an underflow or overflow, not a rounding, would change it)."""
    product = 1.0
    for factor in factors:
        product *= factor
        if not sys.float_info.min <= product <= sys.float_info.max:
            return None
    return product


def _direct_step(beta, f0, eps, room, times, over) -> float | None:
    """c · room · times / over with c = 1/(√(2β³f₀) + β²ε) in float64 products (not powers), or
    None where a product leaves the normal floats."""
    cube = 0.0 if f0 == 0.0 else _normal_product(2.0, f0, beta, beta, beta)
    square = _normal_product(beta, beta, eps)
    if cube is None or square is None:
        return None
    scaled = _normal_product(1.0 / (math.sqrt(cube) + square), room, times)
    if scaled is None or not sys.float_info.min <= scaled / over <= sys.float_info.max:
        return None
    return scaled / over


def tracking_exit_times(
    gradient: Callable[[float], float],
    flow: Callable[[np.ndarray], np.ndarray],
    start: float,
    step_sizes: Sequence[float],
    horizon: float,
    radius: float,
) -> np.ndarray:
    """For each step η, the first time kη at which gradient descent on a one-dimensional loss is
    found outside the ε-ball around the flow, |θ_k − θ(kη)| > ε, or, if it stays inside up to t̃,
    the first time kη beyond t̃ (where the check stops). Either way, descent at step η tracks the
    flow up to a horizon s ≤ t̃ exactly when s is below this time.

    ``gradient(q)`` is f'(q) at a float q; ``flow(times)`` the exact flow θ(t) from ``start`` at
    an array of times (a closed form, vectorized). The iterates are θ_0 = ``start``,
    θ_{k+1} = θ_k − η f'(θ_k) (the paper's eq. (6)); an iterate that overflows has left every
    ball. The empirical counterpart of :func:`corollary4_step_size`.
    """
    gradient = as_callable(gradient, "gradient", "f'(q) -> float")
    flow = as_callable(flow, "flow", "theta(times) -> array")
    start = as_float(start, "start")
    steps = [as_positive_float(e, f"step_sizes[{i}]")
             for i, e in enumerate(as_list(step_sizes, "step_sizes"))]
    horizon = as_positive_float(horizon, "horizon")
    radius = as_positive_float(radius, "radius")
    if horizon / min(steps) > MAX_STEPS:
        raise ValueError(
            f"horizon / min(step_sizes) must be at most {MAX_STEPS} descent steps, got "
            f"{horizon / min(steps):.3g}"
        )
    return np.array([_exit_time(gradient, flow, start, eta, horizon, radius) for eta in steps])


def _exit_time(gradient, flow, start: float, eta: float, horizon: float, radius: float) -> float:
    """One step size of :func:`tracking_exit_times`."""
    count = int(math.floor(horizon / eta + 1e-9))
    times = eta * np.arange(1, count + 1)
    answer = flow(times)
    if isinstance(answer, torch.Tensor):
        answer = answer.detach()
    if not (isinstance(answer, (np.ndarray, torch.Tensor, list, tuple))
            and np.asarray(answer).dtype.kind in "fiu"):
        raise ValueError(f"flow(times) must return {count} real numbers, got {describe(answer)}")
    if np.asarray(answer).dtype.kind == "f" and np.asarray(answer).dtype != np.float64:
        raise ValueError(f"flow(times) must return float64 values, got {describe(answer)}")
    with np.errstate(all="ignore"):
        targets = np.asarray(answer, dtype=np.float64)
    if targets.shape != times.shape or not np.all(np.isfinite(targets)):
        raise NumericalFailure(
            f"flow(times) must return {count} finite values, got shape {targets.shape}"
            + ("" if targets.shape != times.shape else " with non-finite entries")
        )
    q = start
    for k in range(count):
        with np.errstate(all="ignore"):
            q = float(q - eta * closure_number(gradient(q), f"gradient(q) at q = {q!r}"))
        if not math.isfinite(q) or abs(q - targets[k]) > radius:
            return float(times[k])
    return (count + 1) * eta


def _exp(log_value: float, what: str) -> float:
    """e^{log_value}, or a ValueError where it exceeds the float range."""
    if log_value > 709.0:
        raise ValueError(f"{what} is e^{log_value:.4g}, beyond the float range")
    return math.exp(log_value)


def _regression_constants(depth, norm0, alignment, accuracy, *, largest: float):
    depth = as_int(depth, "depth", minimum=2, maximum=10_000)
    norm0 = as_positive_float(norm0, "norm0")
    if norm0 > largest:
        raise ValueError(f"the theorem assumes 0 < ‖W_(n:1)(0)‖ <= {largest}, got {norm0}")
    alignment = as_float(alignment, "alignment", minimum=-1.0, maximum=1.0, open_minimum=True)
    accuracy = as_positive_float(accuracy, "accuracy")
    return depth, norm0, alignment, accuracy


def proposition14_time(depth: int, norm0: float, alignment: float, accuracy: float) -> float:
    """The time t̄ of Proposition 14 (the paper's eq. (21)) by which gradient flow on deep linear
    scalar regression from a balanced start is ε̄-optimal:

    t̄ = 2n (max{1, (3/2) κ})^n / ‖W_{n:1,s}‖ · ln(15 n max{1, κ} / (‖W_{n:1,s}‖ min{1, 2ε̄})),
    κ = (1 − ν)/(1 + ν), ν the cosine between W_{n:1,s} and Λ_yx (``alignment``).
    """
    n, w, nu, eps = _regression_constants(depth, norm0, alignment, accuracy, largest=0.2)
    kappa = (1 - nu) / (1 + nu)
    log_term = math.log(15 * n * max(1.0, kappa) / (w * min(1.0, 2 * eps)))
    log_value = math.log(2 * n * log_term / w) + n * math.log(max(1.0, 1.5 * kappa))
    return _exp(log_value, "the time of eq. (21)")


def theorem15_iterations(
    depth: int, norm0: float, alignment: float, accuracy: float, step: float
) -> float:
    """The iteration count k of Theorem 15 (the paper's eq. (24)) at step η:

    k = ⌈2n (max{1, (3/2) κ})^n / (‖W_{n:1,0}‖ η) · ln(15 n max{1, κ} / (‖W_{n:1,0}‖
    min{1, ε̃})) + 1⌉, with eq. (21)'s product (3/2)κ: the proof (Appendix I.13) takes k so that
    kη ≥ t̄ of eq. (21), which only the product guarantees. (The text of the paper we read shows a
    list max{1, 3/2, κ} in eq. (24) and eqs. (74)–(76), the product in eqs. (21), (77) and (78).)
    A float, since k exceeds any integer type at eq. (23)'s step.
    """
    n, w, nu, eps = _regression_constants(depth, norm0, alignment, accuracy, largest=0.2)
    step = as_positive_float(step, "step")
    kappa = (1 - nu) / (1 + nu)
    log_term = math.log(15 * n * max(1.0, kappa) / (w * min(1.0, eps)))
    log_value = math.log(2 * n * log_term / (w * step)) + n * math.log(max(1.0, 1.5 * kappa))
    return float(math.ceil(_exp(log_value, "the iteration count of eq. (24)") + 1))


def _theorem32_terms(depth, norm0, alignment, accuracy):
    n, w, nu, eps = _regression_constants(depth, norm0, alignment, accuracy, largest=0.1)
    big = max(3.0, (3 - nu) / (1 + nu))
    return n, w, eps, big, math.log(23 * n * big / (w * min(1.0, eps)))


def theorem32_unbalancedness(depth: int, norm0: float, alignment: float, accuracy: float) -> float:
    """The unbalancedness ε̂ that Theorem 32 tolerates at the start (the paper's eq. (34)):

    ε̂ = ‖W_{n:1,0}‖⁸ min{1, ε̃²} / (n^15 e^{12n+6} K^{9n−5} ln(23 n K / (‖W_{n:1,0}‖
    min{1, ε̃}))²), K = max{3, (3 − ν)/(1 + ν)}: the form the last lines of the proof (Appendix
    I.20) arrive at, the squared logarithm dividing (the smaller value). The text of eq. (34) we
    read shows the power −2 inside the denominator, which would make the logarithm multiply.
    """
    n, w, eps, big, log_term = _theorem32_terms(depth, norm0, alignment, accuracy)
    log_value = (
        8 * math.log(w) + 2 * math.log(min(1.0, eps)) - 15 * math.log(n) - (12 * n + 6)
        - (9 * n - 5) * math.log(big) - 2 * math.log(log_term)
    )
    return math.exp(log_value)


def theorem32_step_size(depth: int, norm0: float, alignment: float, accuracy: float) -> float:
    """The step of Theorem 32 (the paper's eq. (35)):

    η = ‖W_{n:1,0}‖⁵ min{1, ε̃} / (n^{17/2} e^{7n+10} K^{(11n−5)/2}) · ln(23 n K / (‖W_{n:1,0}‖
    min{1, ε̃}))^{−2}, K = max{3, (3 − ν)/(1 + ν)}.
    """
    n, w, eps, big, log_term = _theorem32_terms(depth, norm0, alignment, accuracy)
    log_value = (
        5 * math.log(w) + math.log(min(1.0, eps)) - 8.5 * math.log(n) - (7 * n + 10)
        - (11 * n - 5) / 2 * math.log(big) - 2 * math.log(log_term)
    )
    return math.exp(log_value)


def theorem32_iterations(
    depth: int, norm0: float, alignment: float, accuracy: float, step: float
) -> float:
    """The bound on the iteration count of Theorem 32 (the paper's eq. (36)) at step η:

    k ≤ 3n ((3/2) K)^n / (‖W_{n:1,0}‖ η) · ln(23 n K / (‖W_{n:1,0}‖ min{1, ε̃})) + 1.
    """
    n, w, eps, big, log_term = _theorem32_terms(depth, norm0, alignment, accuracy)
    step = as_positive_float(step, "step")
    log_value = math.log(3 * n * log_term / (w * step)) + n * math.log(1.5 * big)
    return _exp(log_value, "the iteration count of eq. (36)") + 1


def nearest_balanced(params) -> dict[str, torch.Tensor]:
    """A balanced weight setting near ``params`` (Lemma 31, Appendix G), for square hidden layers
    (d_0 = d_1 = … = d_{n−1}, any d_n).

    Our construction, along the reduction of the paper's proof (which keeps W_n): Ŵ_n = W_n, and
    for j = n − 1, …, 1, with the polar decomposition W_j = (W_j W_jᵀ)^{1/2} R_j (R_j orthogonal),
    Ŵ_j = (Ŵ_{j+1}ᵀ Ŵ_{j+1})^{1/2} R_j, so that Ŵ_j Ŵ_jᵀ = Ŵ_{j+1}ᵀ Ŵ_{j+1} (balanced, the
    paper's eq. (19)). Then ‖W_j − Ŵ_j‖_F ≤ √ε̂ + √2 ‖W_{j+1} − Ŵ_{j+1}‖_F (Powers–Størmer for the
    first term, Araki–Yamagami for the second), ε̂ the unbalancedness of Definition 30: for
    n = 3 the distance is at most √(1 + (1 + √2)²) √ε̂ ≈ 2.61 √ε̂, below Lemma 31's n^{1.5} √ε̂.
    """
    weights = [w.detach() for w in layers(params)]
    d0 = weights[0].shape[1]
    for j, w in enumerate(weights[:-1], start=1):
        if tuple(w.shape) != (d0, d0):
            raise ValueError(
                f"Lemma 31 needs square hidden layers d_0 = d_1 = ... = d_(n-1) = {d0}: W{j} must "
                f"be {d0} × {d0}, got {tuple(w.shape)}"
            )
    balanced = [None] * len(weights)
    balanced[-1] = weights[-1].clone()
    for j in range(len(weights) - 2, -1, -1):
        u, _, vt = torch.linalg.svd(weights[j])
        rotation = u @ vt  # W_j = (W_j W_jᵀ)^{1/2} R_j with R_j = U Vᵀ
        balanced[j] = _psd_sqrt(balanced[j + 1].T @ balanced[j + 1]) @ rotation
    for j, w in enumerate(balanced, start=1):
        check_finite_result(w, f"the balanced W{j}")
    return as_params(balanced)


def _psd_sqrt(matrix: torch.Tensor) -> torch.Tensor:
    """The square root of a symmetric positive semi-definite matrix (negative rounding clipped)."""
    values, vectors = torch.linalg.eigh(0.5 * (matrix + matrix.T))
    return (vectors * values.clamp(min=0).sqrt()) @ vectors.T
