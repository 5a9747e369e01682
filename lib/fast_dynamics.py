"""Compiled training loops for the small models of the poisoning experiments.

The Figure-2 and Table experiments of Slutzky et al. (2025) train a diagonal SSM (alone, or
followed by a two-hidden-layer ReLU MLP) for 10⁴–10⁵ full-batch steps. Through
:func:`lib.flow.gradient_descent` each step is a few dozen torch operations on arrays of a few
hundred numbers, so nearly all of its cost is per-operation overhead. Here the *whole* loop of one
run (loss, closed-form gradient, optimizer, stopping rule, recording) is one function compiled by
numba, and runs are independent loops. The arithmetic is that of
:func:`lib.ssm.square_loss_gradient`, :func:`lib.poison_dynamics.ssm_mlp_loss_gradient` and the
three optimizers of :func:`lib.flow.gradient_descent`, whose docstring gives the update rules; only
the order of floating-point sums differs, so trajectories agree with the torch engine up to
rounding (tested).

The model, for a run with parameters a, b, c ∈ ℝ^d (and D_in ∈ ℝ^{h×1}, D_hid ∈ ℝ^{h×h},
D_out ∈ ℝ^{1×h}), data x ∈ ℝ^{n×κ}, labels y and example weights w:

    K_ij = Σ_l x_il a_j^{κ−1−l},  K'_ij = Σ_l (κ−1−l) x_il a_j^{κ−2−l}   (Horner's rule)
    φ_i = Σ_j b_j c_j K_ij                                                 (eq. 2 of the paper)
    ŷ_i = φ_i, or ŷ_i = D_out σ(D_hid σ(D_in φ_i))
    ℓ = Σ_i w_i (ŷ_i − y_i)²

and a cotangent u_i = ∂ℓ/∂φ_i pulls back to ∂ℓ/∂a_j = b_j c_j Σ_i u_i K'_ij,
∂ℓ/∂b_j = c_j Σ_i u_i K_ij, ∂ℓ/∂c_j = b_j Σ_i u_i K_ij.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

GD, ADAPTIVE, ADAM = 0, 1, 2
OPTIMIZER_CODES = {"gd": GD, "adaptive": ADAPTIVE, "adam": ADAM}


@njit(cache=True)
def _loss_and_gradient(theta, grad, x, y, w, n, d, hidden, work):
    """ℓ(θ) into the return value and ∇ℓ(θ) into ``grad`` (θ = a, b, c[, D_in, D_hid, D_out]).

    ``work`` is scratch space of at least 2·n·d + 2n + 3h entries.
    """
    kappa = x.shape[1]
    feats = work[: n * d].reshape((n, d))
    slopes = work[n * d : 2 * n * d].reshape((n, d))
    phi = work[2 * n * d : 2 * n * d + n]
    u = work[2 * n * d + n : 2 * n * d + 2 * n]
    for i in range(n):
        for j in range(d):
            aj = theta[j]
            value = 0.0
            slope = 0.0
            for m in range(kappa):  # Horner: value ← value·a + x_im, slope ← slope·a + value
                slope = slope * aj + value
                value = value * aj + x[i, m]
            feats[i, j] = value
            slopes[i, j] = slope
    for i in range(n):
        total = 0.0
        for j in range(d):
            total += theta[d + j] * theta[2 * d + j] * feats[i, j]
        phi[i] = total
    loss = 0.0
    for k in range(grad.shape[0]):
        grad[k] = 0.0
    if hidden == 0:
        for i in range(n):
            r = phi[i] - y[i]
            loss += w[i] * r * r
            u[i] = 2.0 * w[i] * r
    else:
        h = hidden
        base = 3 * d
        d_in = theta[base : base + h]
        d_hid = theta[base + h : base + h + h * h].reshape((h, h))
        d_out = theta[base + h + h * h : base + 2 * h + h * h]
        g_in = grad[base : base + h]
        g_hid = grad[base + h : base + h + h * h].reshape((h, h))
        g_out = grad[base + h + h * h : base + 2 * h + h * h]
        offset = 2 * n * d + 2 * n
        pre1 = work[offset : offset + h]
        pre2 = work[offset + h : offset + 2 * h]
        back2 = work[offset + 2 * h : offset + 3 * h]
        on1 = np.empty(h, np.int64)  # indices of the active units of each layer: a ReLU that is
        on2 = np.empty(h, np.int64)  # off contributes nothing, forward or backward
        for i in range(n):
            z = phi[i]
            n1 = 0
            for k in range(h):
                pre1[k] = z * d_in[k]
                if pre1[k] > 0.0:
                    on1[n1] = k
                    n1 += 1
            out = 0.0
            n2 = 0
            for q in range(h):
                s = 0.0
                for t in range(n1):
                    s += d_hid[q, on1[t]] * pre1[on1[t]]
                pre2[q] = s
                if s > 0.0:
                    out += d_out[q] * s
                    on2[n2] = q
                    n2 += 1
            r = out - y[i]
            loss += w[i] * r * r
            cot = 2.0 * w[i] * r
            for t in range(n2):
                q = on2[t]
                g_out[q] += cot * pre2[q]
                back2[q] = cot * d_out[q]
            ui = 0.0
            for t1 in range(n1):
                k = on1[t1]
                s = 0.0
                for t in range(n2):
                    q = on2[t]
                    s += back2[q] * d_hid[q, k]
                    g_hid[q, k] += back2[q] * pre1[k]
                g_in[k] += s * z
                ui += s * d_in[k]
            u[i] = ui
    for j in range(d):
        s_feat = 0.0
        s_slope = 0.0
        for i in range(n):
            s_feat += u[i] * feats[i, j]
            s_slope += u[i] * slopes[i, j]
        b, c = theta[d + j], theta[2 * d + j]
        grad[j] = b * c * s_slope
        grad[d + j] = c * s_feat
        grad[2 * d + j] = b * s_feat
    return loss


@njit(cache=True)
def _train_run(
    theta0, x, y, w, n, d, hidden, bounds, lr, steps, optimizer, stop_loss, extra_steps,
    record_every, beta, softening, b1, b2, adam_eps, keras,
):  # fmt: skip
    """One run of the protocol of :func:`lib.flow.gradient_descent`, compiled.

    Returns the recorded iterations, states, losses and step sizes (the first ``count`` rows),
    and the converged step (−1 if none), the last step and the divergence flag.
    """
    size = theta0.shape[0]
    capacity = steps // record_every + 2
    times = np.empty(capacity, np.int64)
    states = np.empty((capacity, size))
    losses = np.empty(capacity)
    etas = np.empty(capacity)
    theta = theta0.copy()
    grad = np.empty(size)
    first = np.zeros(size)
    second = np.zeros(size)
    update = np.empty(size)
    work = np.empty(2 * n * d + 2 * n + 4 * max(hidden, 1))
    avg_norm = 0.0
    converged = -1
    last = steps
    diverged = False
    count = 0
    for k in range(steps + 1):
        value = _loss_and_gradient(theta, grad, x, y, w, n, d, hidden, work)
        finite = math.isfinite(value)
        for p in range(size):
            if not math.isfinite(grad[p]):
                finite = False
        if not finite and not diverged and k < last:
            diverged = True
            last = k
        if stop_loss >= 0.0 and value <= stop_loss and converged < 0 and not diverged:
            converged = k
            last = min(steps, k + extra_steps)
        if k >= last:
            times[count] = k
            states[count] = theta
            losses[count] = value
            etas[count] = np.nan
            count += 1
            break
        if optimizer == 0:
            eta = lr
            for p in range(size):
                update[p] = grad[p]
        elif optimizer == 1:
            norm_sum = 0.0
            for t in range(bounds.shape[0] - 1):
                s = 0.0
                for p in range(bounds[t], bounds[t + 1]):
                    s += grad[p] * grad[p]
                norm_sum += math.sqrt(s)
            avg_norm = beta * avg_norm + (1.0 - beta) * norm_sum
            eta = lr / (math.sqrt(avg_norm / (1.0 - beta ** (k + 1))) + softening)
            for p in range(size):
                update[p] = grad[p]
        else:
            eta = lr
            c1 = 1.0 - b1 ** (k + 1)
            c2 = 1.0 - b2 ** (k + 1)
            eps_k = adam_eps / math.sqrt(c2) if keras else adam_eps
            for p in range(size):
                first[p] = b1 * first[p] + (1.0 - b1) * grad[p]
                second[p] = b2 * second[p] + (1.0 - b2) * grad[p] * grad[p]
                update[p] = (first[p] / c1) / (math.sqrt(second[p] / c2) + eps_k)
        if k % record_every == 0:
            times[count] = k
            states[count] = theta
            losses[count] = value
            etas[count] = eta
            count += 1
        for p in range(size):
            theta[p] -= eta * update[p]
    return times, states, losses, etas, count, converged, last, diverged


def train_runs(
    theta0: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    sizes: list[int],
    *,
    d: int,
    hidden: int,
    bounds: np.ndarray,
    lrs: np.ndarray,
    steps: int,
    optimizer: str,
    stop_loss: float | None,
    extra_steps: int,
    record_every: int,
    beta: float = 0.8,
    softening: float = 1e-6,
    adam_betas: tuple[float, float] = (0.9, 0.999),
    adam_eps: float = 1e-8,
    adam_form: str = "torch",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    """Train R independent runs with the compiled loop; the record layout of gradient_descent.

    ``theta0`` is ``(R, P)``, the flat parameters of each run (a, b, c, then the MLP's weights in
    row-major order); ``x``, ``y``, ``w`` the padded per-run data ``(R, n, κ)``, ``(R, n)``,
    ``(R, n)``, of which run r uses its first ``sizes[r]`` rows. Internal: callers validate (see
    :func:`lib.poison_dynamics.train_dynamics`). Returns ``times (T,)``, ``states (T, R, P)``,
    ``losses (T, R)``, ``step_sizes (T, R)`` and the ``info`` dict of gradient_descent, recorded
    exactly as gradient_descent records R runs advanced together: at every multiple of
    ``record_every`` before the last run stops, and at that final iteration; a finished run stays
    frozen at its last iterate with step size NaN.
    """
    code = OPTIMIZER_CODES[optimizer]
    stop = -1.0 if stop_loss is None else float(stop_loss)
    results = [
        _train_run(
            np.ascontiguousarray(theta0[r]),
            np.ascontiguousarray(x[r, : sizes[r]]),
            np.ascontiguousarray(y[r, : sizes[r]]),
            np.ascontiguousarray(w[r, : sizes[r]]),
            sizes[r],
            d,
            hidden,
            bounds,
            float(lrs[r]),
            steps,
            code,
            stop,
            extra_steps,
            record_every,
            beta,
            softening,
            adam_betas[0],
            adam_betas[1],
            adam_eps,
            adam_form == "keras",
        )  # fmt: skip
        for r in range(theta0.shape[0])
    ]
    lasts = [int(res[6]) for res in results]
    end = max(lasts)
    times = np.array([*range(0, end, record_every), end], dtype=np.int64)
    runs, size = theta0.shape
    states = np.empty((len(times), runs, size))
    losses = np.empty((len(times), runs))
    etas = np.empty((len(times), runs))
    for r, (_, rec_s, rec_l, rec_e, count, _, last, _) in enumerate(results):
        # the run's own records cover every grid time before its last step; after it, frozen
        mine = np.searchsorted(times, last)  # grid times < last are recorded by the run itself
        states[:mine, r] = rec_s[:mine]
        losses[:mine, r] = rec_l[:mine]
        etas[:mine, r] = rec_e[:mine]
        states[mine:, r] = rec_s[count - 1]
        losses[mine:, r] = rec_l[count - 1]
        etas[mine:, r] = np.nan
    info = {
        "converged_step": [int(res[5]) if res[5] >= 0 else None for res in results],
        "steps_run": lasts,
        "diverged": [bool(res[7]) for res in results],
        "optimizer": optimizer,
    }
    return times, states, losses, etas, info
