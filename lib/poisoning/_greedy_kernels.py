"""Compiled training loop of :mod:`lib.poisoning.greedy_learning` (standalone diagonal SSM,
adaptive step).

One run trains a diagonal SSM ``(a, b, c)`` on data ``x`` (n × κ), labels ``y`` and example
weights ``w`` by gradient descent with the adaptive step of Slutzky et al. (2025, App. H.1.1):

    μ_k = β μ_{k−1} + (1 − β) G_k,    η_k = η / (√(μ_k / (1 − β^{k+1})) + softening),

until the loss is ≤ ``stop_loss``, then ``extra_steps`` more. The loss, its gradient and the three
forms of G_k:

    h_m = Σ_j b_j c_j a_j^m,  φ_i = Σ_l x_il h_{κ−1−l},  ℓ = Σ_i w_i (φ_i − y_i)²,
    u_i = 2 w_i (φ_i − y_i),  z_m = Σ_i u_i x_{i,κ−1−m},
    ∂ℓ/∂a_j = b_j c_j Σ_m m z_m a_j^{m−1},
    ∂ℓ/∂b_j = c_j Σ_m z_m a_j^m,  ∂ℓ/∂c_j = b_j Σ_m z_m a_j^m,

* ``full_norm=False`` (the book's form): G_k = Σ over the trained blocks of ‖∇‖ (a alone when B
  and C are fixed);
* ``full_norm=True`` (the authors' Keras code): G_k = ‖∇_A ℓ‖_F + ‖∇_b ℓ‖ + ‖∇_c ℓ‖, where A is the
  full d × d matrix their SSM stores (projected onto its diagonal after each step) and B, C are
  always trainable variables. At a diagonal A, h_m = bᵀAᵐc gives

      ∂ℓ/∂A_jk = b_j c_k T_jk,  T_jk = Σ_{m≥1} z_m S_m(a_j, a_k),  S_m(s, t) = Σ_{p+q=m−1} s^p t^q,

  with S_1 = 1 and S_{m+1}(s, t) = s S_m(s, t) + t^m; its diagonal is ∂ℓ/∂a_j;
* ``squared=True`` (the paper's text, App. H.1.1: "an exponential moving average of squared
  gradient norms"): G_k = ‖∇ℓ‖², the squared norm of the whole gradient over the trained
  parameters (a; and b, c unless fixed), with the text's softening passed by the caller.

With ``fixed_bc`` only a moves and b, c are set to 1 after every step: the authors' scheme for
their Figures 4–6 (B and C trainable, reset to ones at the end of each epoch), whose first step uses
the initial b, c.

Nothing here is public (``__all__`` is empty): these kernels trust their caller,
:func:`lib.poisoning.greedy_learning.train_greedy`, which validates every input once. The compiled
modules of the book keep their own small helpers rather than call each other's (numba's on-disk
cache does not notice when a compiled function of another file changes).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__: list[str] = []  # internal kernels (see the module docstring)


@njit(cache=True, error_model="numpy")
def _loss_and_gradient(theta, grad, x, y, w, d, powers, h, z):
    """ℓ(θ) returned, ∇ℓ into ``grad`` (θ = a, b, c); a_j^m into ``powers`` (κ × d), the impulse
    response h_m into ``h`` and z_m into ``z`` (both of length κ)."""
    n, kappa = x.shape
    a, b, c = theta[:d], theta[d : 2 * d], theta[2 * d :]
    for j in range(d):
        value = 1.0
        for m in range(kappa):
            powers[m, j] = value
            value *= a[j]
    for m in range(kappa):
        total = 0.0
        for j in range(d):
            total += b[j] * c[j] * powers[m, j]
        h[m] = total
    loss = 0.0
    z[:] = 0.0
    for i in range(n):
        phi = 0.0
        for m in range(kappa):  # h_m multiplies x_{i, κ−1−m}
            phi += x[i, kappa - 1 - m] * h[m]
        residual = phi - y[i]
        loss += w[i] * residual * residual
        u = 2.0 * w[i] * residual
        for m in range(kappa):
            z[m] += u * x[i, kappa - 1 - m]
    for j in range(d):
        feature = 0.0  # Σ_m z_m a_j^m
        slope = 0.0  # Σ_m m z_m a_j^{m−1}
        for m in range(kappa):
            feature += z[m] * powers[m, j]
            if m > 0:
                slope += m * z[m] * powers[m - 1, j]
        grad[j] = b[j] * c[j] * slope
        grad[d + j] = c[j] * feature
        grad[2 * d + j] = b[j] * feature
    return loss


@njit(cache=True, error_model="numpy")
def _full_matrix_norm(theta, z, d, work):
    """‖∂ℓ/∂A‖_F over the full d × d matrix A at a diagonal point (module docstring), through
    K × K matrices (K = κ − 1) instead of the d × d gradient.

    With P_jp = a_j^p (p < K) and the Hankel matrix Z_pq = z_{p+q+1} (zero for p + q ≥ K),
    T = P Z Pᵀ, so ‖D_b T D_c‖_F² = tr(Z H_c Z H_b) with H_b = Pᵀ D_b² P, (H_b)_pq = s_b(p + q),
    s_b(r) = Σ_j b_j² a_j^r (and H_c, s_c likewise): O(dK + K³) operations, not O(d²K).
    ``work`` holds 2(2K − 1) + 2K² numbers.
    """
    size = z.shape[0] - 1
    a, b, c = theta[:d], theta[d : 2 * d], theta[2 * d :]
    moments = 2 * size - 1
    s_b, s_c = work[:moments], work[moments : 2 * moments]
    left = work[2 * moments : 2 * moments + size * size].reshape((size, size))
    right = work[2 * moments + size * size : 2 * moments + 2 * size * size].reshape((size, size))
    s_b[:] = 0.0
    s_c[:] = 0.0
    for j in range(d):
        value = 1.0
        bb, cc = b[j] * b[j], c[j] * c[j]
        for r in range(moments):
            s_b[r] += bb * value
            s_c[r] += cc * value
            value *= a[j]
    for p in range(size):  # left = Z H_c, right = Z H_b
        for q in range(size):
            total_c, total_b = 0.0, 0.0
            for t in range(size - p):  # Z_pt ≠ 0 only for p + t ≤ K − 1
                total_c += z[p + t + 1] * s_c[t + q]
                total_b += z[p + t + 1] * s_b[t + q]
            left[p, q], right[p, q] = total_c, total_b
    total = 0.0
    for p in range(size):
        for q in range(size):
            total += left[p, q] * right[q, p]
    return math.sqrt(max(total, 0.0))


@njit(cache=True, error_model="numpy")
def _block_norm(grad, start, stop):
    total = 0.0
    for p in range(start, stop):
        total += grad[p] * grad[p]
    return math.sqrt(total)


@njit(cache=True, error_model="numpy")
def _step_norm(theta, grad, z, d, fixed_bc, full_norm, squared, work):
    """G_k of the adaptive step (module docstring)."""
    if squared:
        stop = d if fixed_bc else 3 * d
        norm = _block_norm(grad, 0, stop)
        return norm * norm
    norm_a = _full_matrix_norm(theta, z, d, work) if full_norm else _block_norm(grad, 0, d)
    if full_norm or not fixed_bc:
        return norm_a + _block_norm(grad, d, 2 * d) + _block_norm(grad, 2 * d, 3 * d)
    return norm_a


@njit(cache=True, error_model="numpy")
def _finite(value, grad):
    bad = not math.isfinite(value)
    for p in range(grad.shape[0]):
        bad |= grad[p] - grad[p] != 0.0
    return not bad


@njit(cache=True, error_model="numpy")
def _train_run(theta0, x, y, w, d, fixed_bc, full_norm, squared, lr, steps, stop_loss,
               extra_steps, record_every, beta, softening):  # fmt: skip
    """One run; returns the records (first ``count`` rows), converged step (−1: none), last step
    and the divergence flag, as :func:`lib.poisoning._dynamics_kernels.train_runs` lays them out."""
    size = theta0.shape[0]
    capacity = steps // record_every + 2
    times = np.empty(capacity, np.int64)
    states = np.empty((capacity, size))
    losses = np.empty(capacity)
    etas = np.empty(capacity)
    theta = theta0.copy()
    grad = np.empty(size)
    powers = np.empty((x.shape[1], d))
    h = np.empty(x.shape[1])
    z = np.empty(x.shape[1])
    order = x.shape[1] - 1
    work = np.empty(2 * (2 * order - 1) + 2 * order * order)
    average = 0.0
    converged, last, diverged, count = -1, steps, False, 0
    for k in range(steps + 1):
        value = _loss_and_gradient(theta, grad, x, y, w, d, powers, h, z)
        if not _finite(value, grad) and not diverged and k < last:
            diverged, last = True, k
        if stop_loss >= 0.0 and value <= stop_loss and converged < 0 and not diverged:
            converged, last = k, min(steps, k + extra_steps)
        if k >= last:
            times[count], losses[count], etas[count] = k, value, np.nan
            states[count] = theta
            count += 1
            break
        size_k = _step_norm(theta, grad, z, d, fixed_bc, full_norm, squared, work)
        average = beta * average + (1.0 - beta) * size_k
        eta = lr / (math.sqrt(average / (1.0 - beta ** (k + 1))) + softening)
        if k % record_every == 0:
            times[count], losses[count], etas[count] = k, value, eta
            states[count] = theta
            count += 1
        for j in range(d):
            theta[j] -= eta * grad[j]
        if fixed_bc:
            theta[d:] = 1.0
        else:
            for p in range(d, size):
                theta[p] -= eta * grad[p]
    return times, states, losses, etas, count, converged, last, diverged


def train_runs(theta0, x, y, w, sizes, *, d, fixed_bc, full_norm, lrs, steps, stop_loss,
               extra_steps, record_every, squared=False, beta=0.8, softening=1e-6):  # fmt: skip
    """R independent runs; the record layout of :func:`lib.engine.flow.gradient_descent` for R runs.

    ``theta0`` is ``(R, 3d)`` (a, b, c); ``x``, ``y``, ``w`` the padded data ``(R, n, κ)``,
    ``(R, n)``, ``(R, n)``, of which run r uses its first ``sizes[r]`` rows. Records at every
    multiple of ``record_every`` before the last run stops, and at that final iteration; a finished
    run stays frozen at its last iterate with step size NaN. Returns ``times``, ``states``
    ``(T, R, 3d)``, ``losses``, ``step_sizes`` ``(T, R)`` and the ``info`` dict.
    """
    stop = -1.0 if stop_loss is None else float(stop_loss)
    results = [
        _train_run(np.ascontiguousarray(theta0[r]), np.ascontiguousarray(x[r, : sizes[r]]),
                   np.ascontiguousarray(y[r, : sizes[r]]), np.ascontiguousarray(w[r, : sizes[r]]),
                   d, fixed_bc, full_norm, squared, float(lrs[r]), steps, stop, extra_steps,
                   record_every, beta, softening)  # fmt: skip
        for r in range(theta0.shape[0])
    ]
    end = max(int(res[6]) for res in results)
    times = np.array([*range(0, end, record_every), end], dtype=np.int64)
    runs, size = theta0.shape
    states = np.empty((len(times), runs, size))
    losses = np.empty((len(times), runs))
    etas = np.empty((len(times), runs))
    for r, (_, rec_s, rec_l, rec_e, count, _, last, _) in enumerate(results):
        mine = np.searchsorted(times, last)  # grid times before the run's last step are its own
        states[:mine, r], losses[:mine, r] = rec_s[:mine], rec_l[:mine]
        etas[:mine, r] = rec_e[:mine]
        states[mine:, r], losses[mine:, r] = rec_s[count - 1], rec_l[count - 1]
        etas[mine:, r] = np.nan
    info = {
        "converged_step": [int(res[5]) if res[5] >= 0 else None for res in results],
        "steps_run": [int(res[6]) for res in results],
        "diverged": [bool(res[7]) for res in results],
        "optimizer": "adaptive",
    }
    return times, states, losses, etas, info
