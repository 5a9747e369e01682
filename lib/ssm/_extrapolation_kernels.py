"""Compiled kernels for :mod:`lib.ssm.extrapolation`: the balanced flow's field and Jacobian, and
whole Adam training loops for balanced and dense linear RNNs.

The chapter's experiments solve hundreds of small problems: gradient flows of a balanced diagonal
student with 2d = 80 parameters (LSODA calls the field thousands of times per flow) and Adam runs of
10⁴–5·10⁴ steps on students with 80 to 960 parameters. Through
:func:`lib.engine.flow.gradient_flow` and
:func:`lib.engine.flow.gradient_descent` nearly all of that time is per-call and per-operation
overhead, so here the field, its Jacobian, and the whole Adam loop of one run are compiled by
numba. The arithmetic is that of :func:`lib.ssm.extrapolation.balanced_field`,
:func:`lib.ssm.extrapolation.balanced_descent_field`,
:func:`lib.ssm.extrapolation.general_descent_field` and the Adam rule of
:func:`lib.engine.flow.gradient_descent` (PyTorch's form); only the order of the floating-point
operations differs, so results agree with those paths up to rounding (tested).

Models (r_j = h_j − w_j for j < k, the run's training length; L = Σ_{j<k} r_j²):

* balanced, θ = (a, b) ∈ ℝ^{2d}: h_j = Σ_i b_i² a_i^j and the field G(θ) = (∂L/∂a, ∂L/∂B)
  with ∂L/∂a_i = 2 b_i² Σ_j j r_j a_i^{j−1}, ∂L/∂B_i = 2 b_i Σ_j r_j a_i^j (B = Cᵀ = b, Lemma 6);
* dense, θ = (A row-major, B, C) ∈ ℝ^{d²+2d}: h_j = C A^j B, with u_m = A^m B, v_m = (Aᵀ)^m Cᵀ,
  ∂L/∂B = 2 Σ_j r_j v_j, ∂L/∂C = 2 Σ_j r_j u_j and ∂L/∂A = Σ_{m+n+1<k} 2 r_{m+n+1} v_m u_nᵀ.

Every function is compiled with ``error_model="numpy"`` (a division by zero gives inf or NaN as in
numpy, instead of a per-division check), and works in float64. The Adam step is written here and
not imported from :mod:`lib.poisoning._dynamics_kernels`: numba's on-disk cache does not notice
when a compiled function of another file changes, so a cross-file call could run a stale copy.

Nothing here is public (``__all__`` is empty, and the API page lists no member): these are the
kernels behind the ``engine="compiled"`` options of :mod:`lib.ssm.extrapolation`
(:func:`~lib.ssm.extrapolation.balanced_flow`, :func:`~lib.ssm.extrapolation.extrapolation_sweep`,
:func:`~lib.ssm.extrapolation.train_adam`), which validate every input once before they call them;
the kernels trust their caller.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

BALANCED, GENERAL = 0, 1
KINDS = {"balanced": BALANCED, "general": GENERAL}

__all__: list[str] = []  # internal kernels (see the module docstring)


# --- the balanced diagonal student --------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _balanced_pieces(theta, target, powers, slopes, residual):
    """powers[j, i] = a_i^j, slopes[j, i] = j a_i^{j−1} (k × d, by recurrence), r_j = h_j − w_j."""
    d = theta.shape[0] // 2
    k = target.shape[0]
    for i in range(d):
        ai = theta[i]
        value = 1.0
        slope = 0.0
        for j in range(k):
            powers[j, i] = value
            slopes[j, i] = slope
            slope = slope * ai + value
            value = value * ai
    for j in range(k):
        total = 0.0
        for i in range(d):
            bi = theta[d + i]
            total += powers[j, i] * (bi * bi)
        residual[j] = total - target[j]


@njit(cache=True, error_model="numpy")
def balanced_loss_gradient(theta, target, grad, powers, slopes, residual):
    """L(θ) as the return value and G(θ) = (∂L/∂a, ∂L/∂B) into ``grad`` (module docstring).

    ``target`` holds w_0, …, w_{k−1}; ``powers`` and ``slopes`` are (k × d) scratch, ``residual``
    (k,) scratch (left holding r).
    """
    d = theta.shape[0] // 2
    k = target.shape[0]
    _balanced_pieces(theta, target, powers, slopes, residual)
    grad[:] = 0.0
    loss = 0.0
    for j in range(k):
        rj = residual[j]
        loss += rj * rj
        for i in range(d):
            grad[i] += rj * slopes[j, i]
            grad[d + i] += rj * powers[j, i]
    for i in range(d):
        bi = theta[d + i]
        grad[i] *= 2.0 * bi * bi
        grad[d + i] *= 2.0 * bi
    return loss


@njit(cache=True, error_model="numpy")
def balanced_jacobian(theta, target, matrix):
    """∂G/∂θ (2d × 2d, rows: components of G) into ``matrix``, as in balanced_field's jacobian.

    G = Σ_j r_j g_j with g_j = (2 b² j a^{j−1}, 2 b a^j), so ∂G/∂θ = Σ_j g_j (∂r_j/∂θ)ᵀ plus the
    diagonal blocks Σ_j r_j ∂g_j/∂θ; ∂r_j/∂θ = (b² j a^{j−1}, 2 b a^j).
    """
    d = theta.shape[0] // 2
    k = target.shape[0]
    powers = np.empty((k, d))
    slopes = np.empty((k, d))
    residual = np.empty(k)
    _balanced_pieces(theta, target, powers, slopes, residual)
    g = np.empty(2 * d)
    dr = np.empty(2 * d)
    r_slope = np.zeros(d)  # Σ_j r_j j a^{j−1}
    r_power = np.zeros(d)  # Σ_j r_j a^j
    r_curve = np.zeros(d)  # Σ_j r_j j (j−1) a^{j−2}
    matrix[:, :] = 0.0
    for j in range(k):
        rj = residual[j]
        for i in range(d):
            bi = theta[d + i]
            g[i] = 2.0 * bi * bi * slopes[j, i]
            g[d + i] = 2.0 * bi * powers[j, i]
            dr[i] = bi * bi * slopes[j, i]
            dr[d + i] = 2.0 * bi * powers[j, i]
            r_slope[i] += rj * slopes[j, i]
            r_power[i] += rj * powers[j, i]
            if j >= 1:
                r_curve[i] += rj * (j * slopes[j - 1, i])
        for p in range(2 * d):
            gp = g[p]
            row = matrix[p]
            for q in range(2 * d):
                row[q] += gp * dr[q]
    for i in range(d):
        bi = theta[d + i]
        matrix[i, i] += 2.0 * bi * bi * r_curve[i]
        matrix[i, d + i] += 4.0 * bi * r_slope[i]
        matrix[d + i, i] += 2.0 * bi * r_slope[i]
        matrix[d + i, d + i] += 2.0 * r_power[i]


@njit(cache=True, error_model="numpy")
def balanced_log_time_rhs(tau, theta, target):
    """dθ/dτ = −e^τ G(θ): the gradient flow in log time τ = log(1 + t), as in lib.engine.flow."""
    d = theta.shape[0] // 2
    k = target.shape[0]
    out = np.empty(2 * d)
    balanced_loss_gradient(theta, target, out, np.empty((k, d)), np.empty((k, d)), np.empty(k))
    scale = -math.exp(tau)
    for p in range(2 * d):
        out[p] *= scale
    return out


@njit(cache=True, error_model="numpy")
def balanced_log_time_jacobian(tau, theta, target):
    """The Jacobian of :func:`balanced_log_time_rhs`, −e^τ ∂G/∂θ."""
    size = theta.shape[0]
    matrix = np.empty((size, size))
    balanced_jacobian(theta, target, matrix)
    scale = -math.exp(tau)
    for p in range(size):
        for q in range(size):
            matrix[p, q] *= scale
    return matrix


# --- the dense student --------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def general_work_size(d: int, k: int) -> int:
    """Scratch entries for :func:`general_loss_gradient`: Aᵀ (d²), u, v, W (3kd) and r (k)."""
    return d * d + 3 * k * d + k


@njit(cache=True, error_model="numpy")
def general_loss_gradient(theta, target, d, grad, work):
    """L(θ) as the return value and ∇L(θ) into ``grad`` for the dense student (module docstring).

    θ = (A row-major, B, C). The Krylov vectors u_m, v_m (m < k) take 2(k − 1) matrix-vector
    products and ∂L/∂A = Σ_m v_m W_mᵀ with W_m = Σ_n 2 r_{m+n+1} u_n another (k − 1) d²; every
    inner loop runs along a contiguous row, so the compiler vectorizes it.
    """
    k = target.shape[0]
    dd = d * d
    a = theta[:dd].reshape((d, d))
    b = theta[dd : dd + d]
    c = theta[dd + d : dd + 2 * d]
    a_t = work[:dd].reshape((d, d))
    u = work[dd : dd + k * d].reshape((k, d))
    v = work[dd + k * d : dd + 2 * k * d].reshape((k, d))
    wm = work[dd + 2 * k * d : dd + 3 * k * d].reshape((k, d))
    r = work[dd + 3 * k * d : dd + 3 * k * d + k]
    for p in range(d):
        for q in range(d):
            a_t[q, p] = a[p, q]
    u[0] = b
    v[0] = c
    for m in range(k - 1):
        now, nxt = u[m], u[m + 1]  # u_{m+1} = Σ_q u_m[q] A[:, q] = Σ_q u_m[q] Aᵀ[q, :]
        nxt[:] = 0.0
        for q in range(d):
            s = now[q]
            row = a_t[q]
            for p in range(d):
                nxt[p] += s * row[p]
        now, nxt = v[m], v[m + 1]  # v_{m+1} = Σ_p v_m[p] A[p, :]
        nxt[:] = 0.0
        for p in range(d):
            s = now[p]
            row = a[p]
            for q in range(d):
                nxt[q] += s * row[q]
    loss = 0.0
    for j in range(k):
        total = 0.0
        for p in range(d):
            total += c[p] * u[j, p]
        rj = total - target[j]
        r[j] = rj
        loss += rj * rj
    g_a = grad[:dd].reshape((d, d))
    g_b = grad[dd : dd + d]
    g_c = grad[dd + d : dd + 2 * d]
    g_b[:] = 0.0
    g_c[:] = 0.0
    for j in range(k):
        s = 2.0 * r[j]
        for p in range(d):
            g_b[p] += s * v[j, p]
            g_c[p] += s * u[j, p]
    for m in range(k - 1):  # W_m = Σ_{n ≤ k−2−m} 2 r_{m+n+1} u_n
        wm[m] = 0.0
        for n in range(k - 1 - m):
            s = 2.0 * r[m + n + 1]
            for q in range(d):
                wm[m, q] += s * u[n, q]
    g_a[:, :] = 0.0
    for m in range(k - 1):  # ∂L/∂A = Σ_m v_m W_mᵀ
        for p in range(d):
            s = v[m, p]
            row = g_a[p]
            for q in range(d):
                row[q] += s * wm[m, q]
    return loss


# --- one Adam run, compiled ---------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _adam_update(step, grad, first, second, theta, lr, b1, b2, eps):
    """θ ← θ − lr m̂/(√v̂ + ε), PyTorch's Adam (lib.engine.flow.gradient_descent), moments in
    place."""
    c1 = 1.0 - b1 ** (step + 1)
    c2 = 1.0 - b2 ** (step + 1)
    for p in range(grad.shape[0]):
        g = grad[p]
        m = b1 * first[p] + (1.0 - b1) * g
        v = b2 * second[p] + (1.0 - b2) * g * g
        first[p] = m
        second[p] = v
        theta[p] -= lr * ((m / c1) / (math.sqrt(v / c2) + eps))


@njit(cache=True, error_model="numpy")
def _finite(value, grad):
    """Whether ℓ and every entry of ∇ℓ are finite (branch-free: g − g is 0 exactly when finite)."""
    bad = not math.isfinite(value)
    for p in range(grad.shape[0]):
        bad |= grad[p] - grad[p] != 0.0
    return not bad


@njit(cache=True, error_model="numpy")
def _adam_run(theta0, target, kind, d, lr, steps, record_every, b1, b2, eps):
    """One run of gradient_descent(optimizer="adam") on the balanced or dense loss, compiled.

    Records iterate k (before its update) at every multiple of ``record_every``, and the final
    iterate; a non-finite loss or gradient stops the run there (the divergence rule). Returns the
    recorded steps, states and losses (the first ``count`` rows), the last step and the flag.
    """
    size = theta0.shape[0]
    k = target.shape[0]
    capacity = steps // record_every + 2
    times = np.empty(capacity, np.int64)
    states = np.empty((capacity, size))
    losses = np.empty(capacity)
    theta = theta0.copy()
    grad = np.empty(size)
    first = np.zeros(size)
    second = np.zeros(size)
    if kind == BALANCED:
        half = size // 2
        powers = np.empty((k, half))
        slopes = np.empty((k, half))
        residual = np.empty(k)
        work = np.empty(0)
    else:
        powers = np.empty((0, 0))
        slopes = np.empty((0, 0))
        residual = np.empty(0)
        work = np.empty(general_work_size(d, k))
    count = 0
    last = steps
    diverged = False
    for step in range(steps + 1):
        if kind == BALANCED:
            value = balanced_loss_gradient(theta, target, grad, powers, slopes, residual)
        else:
            value = general_loss_gradient(theta, target, d, grad, work)
        if not _finite(value, grad):
            diverged = True
            last = step
        if step >= last or step % record_every == 0:
            times[count] = step
            states[count] = theta
            losses[count] = value
            count += 1
        if step >= last:
            break
        _adam_update(step, grad, first, second, theta, lr, b1, b2, eps)
    return times, states, losses, count, last, diverged


def adam_runs(
    kind: str,
    theta0: np.ndarray,
    targets: list[np.ndarray],
    *,
    d: int,
    lr: float,
    steps: int,
    record_every: int,
    adam_betas: tuple[float, float] = (0.9, 0.999),
    adam_eps: float = 1e-8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[bool]]:
    """R independent Adam runs, each its own compiled loop; the record layout of gradient_descent.

    ``theta0`` is ``(R, P)`` (balanced: a then b; general: A row-major, B, C) and ``targets[r]``
    the w_0, …, w_{k_r − 1} of run r. Internal: :func:`lib.ssm.extrapolation.train_adam` validates.
    Returns ``times (T,)``, ``states (T, R, P)``, ``losses (T, R)`` and the divergence flags,
    recorded as gradient_descent records R runs advanced together: at every multiple of
    ``record_every`` before the last run stops and at that final step; a run that stopped early
    (diverged) stays frozen at its last iterate.
    """
    code = KINDS[kind]
    results = [
        _adam_run(
            np.ascontiguousarray(theta0[r], dtype=np.float64),
            np.ascontiguousarray(targets[r], dtype=np.float64),
            code,
            d,
            float(lr),
            steps,
            record_every,
            adam_betas[0],
            adam_betas[1],
            adam_eps,
        )
        for r in range(theta0.shape[0])
    ]
    end = max(int(res[4]) for res in results)
    times = np.array([*range(0, end, record_every), end], dtype=np.int64)
    runs, size = theta0.shape
    states = np.empty((len(times), runs, size))
    losses = np.empty((len(times), runs))
    for r, (_, rec_states, rec_losses, count, last, _) in enumerate(results):
        mine = np.searchsorted(times, last)  # the run recorded every grid time before its last
        states[:mine, r] = rec_states[:mine]
        losses[:mine, r] = rec_losses[:mine]
        states[mine:, r] = rec_states[count - 1]
        losses[mine:, r] = rec_losses[count - 1]
    return times, states, losses, [bool(res[5]) for res in results]
