"""Compiled training loops for the small models of the poisoning experiments.

The Figure-2 and Table experiments of Slutzky et al. (2025) train a diagonal SSM (alone, or
followed by a two-hidden-layer ReLU MLP) for 10⁴–10⁵ full-batch steps. Through
:func:`lib.engine.flow.gradient_descent` each step is a few dozen torch operations on arrays of a
few hundred numbers, so nearly all of its cost is per-operation overhead. Here the *whole* loop of
one run (loss, closed-form gradient, optimizer, stopping rule, recording) is one function compiled
by numba, and runs are independent loops. The arithmetic is that of
:func:`lib.ssm.diagonal.square_loss_gradient`, :func:`lib.poisoning.dynamics.ssm_mlp_loss_gradient`
and the three optimizers of :func:`lib.engine.flow.gradient_descent`, whose docstring gives the
update rules; only the order of floating-point operations differs, so trajectories agree with the
torch engine up to rounding (tested). The adaptive step's gradient measure G_k can also be the
authors' code's (the full d × d recurrent kernel's gradient norm) or the paper's text's (squared
norms), the variants of :func:`lib.poisoning.authors_protocol.train_authors`, whose
``engine="compiled"`` runs them here.

The model, for a run with parameters a, b, c ∈ ℝ^d (and D_in ∈ ℝ^{h×1}, D_hid ∈ ℝ^{h×h},
D_out ∈ ℝ^{1×h}), data x ∈ ℝ^{n×κ}, labels y and example weights w:

    K_ij = Σ_l x_il a_j^{κ−1−l},  K'_ij = ∂K_ij/∂a_j = Σ_l (κ−1−l) x_il a_j^{κ−2−l}
    φ_i = Σ_j b_j c_j K_ij = Σ_l x_il k_l,  k_l = Σ_j b_j c_j a_j^{κ−1−l}   (eq. 2 of the paper)
    ŷ_i = φ_i, or ŷ_i = D_out σ(D_hid σ(D_in φ_i))
    ℓ = Σ_i w_i (ŷ_i − y_i)²

and a cotangent u_i = ∂ℓ/∂φ_i pulls back to ∂ℓ/∂a_j = b_j c_j Σ_i u_i K'_ij,
∂ℓ/∂b_j = c_j Σ_i u_i K_ij, ∂ℓ/∂c_j = b_j Σ_i u_i K_ij. The sums over i go through z = xᵀu
(Σ_i u_i K_ij = Σ_l z_l a_j^{κ−1−l}), so neither K nor K' is ever formed.

Every function is compiled with ``error_model="numpy"``: a division by zero gives inf or NaN, as
in torch (and the stopping rule then flags the run as diverged), instead of a per-division check
that would also keep the compiler from vectorizing the optimizer's loop.

The other compiled modules (:mod:`lib.ssm._extrapolation_kernels`,
:mod:`lib.networks._linear_kernels`,
:mod:`lib.networks._saddle_kernels`) keep their own copies of the small helpers here (finiteness,
Adam, recording) rather than call these: numba's on-disk cache does not notice when a compiled
function of another file changes, so a cross-file call could run a stale copy.

Nothing here is public (``__all__`` is empty, and the API page lists no member): these are the
kernels behind ``engine="compiled"`` of :func:`lib.poisoning.dynamics.train_dynamics`, which
validates every input once before it calls them; they trust their caller.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

GD, ADAPTIVE, ADAM = 0, 1, 2
OPTIMIZER_CODES = {"gd": GD, "adaptive": ADAPTIVE, "adam": ADAM}
DIAGONAL_NORM, FULL_NORM, SQUARED_NORM = 0, 1, 2
STEP_NORM_CODES = {"diagonal": DIAGONAL_NORM, "full": FULL_NORM, "squared": SQUARED_NORM}

__all__: list[str] = []  # internal kernels (see the module docstring)


@njit(cache=True, error_model="numpy")
def work_size(n: int, kappa: int, d: int, hidden: int) -> int:
    """Scratch entries for :func:`_loss_and_gradient`: 2κ(d + 1) + 2n, plus 3nh + h² with an MLP."""
    return 2 * kappa * (d + 1) + 2 * n + 3 * n * hidden + hidden * hidden


@njit(cache=True, error_model="numpy")
def _powers(a, powers, slopes):
    """powers[l, j] = a_j^{κ−1−l} and slopes[l, j] = (κ−1−l)·a_j^{κ−2−l} (κ × d), by recurrence."""
    kappa = powers.shape[0]
    for j in range(a.shape[0]):
        aj = a[j]
        value = 1.0  # a^e and its derivative e·a^{e−1}, for e = 0, 1, ..., κ − 1
        slope = 0.0
        for e in range(kappa):
            powers[kappa - 1 - e, j] = value
            slopes[kappa - 1 - e, j] = slope
            slope = slope * aj + value
            value = value * aj


@njit(cache=True, error_model="numpy")
def _mlp_loss_and_cotangent(phi, y, w, d_in, d_hid, d_out, g_in, g_hid, g_out, u, work):
    """ℓ = Σ_i w_i (D_out σ(D_hid σ(D_in φ_i)) − y_i)², its MLP gradients into g_*, ∂ℓ/∂φ into u.

    The examples are the rows of n × h matrices, so the two h × h products of each pass are
    matrix products (BLAS): layer-2 pre-activations P = A₁ D_hidᵀ, the hidden gradient
    ∂ℓ/∂D_hid = Gᵀ A₁ and the pulled-back cotangent G D_hid, with A₁ = σ(φ D_inᵀ) and G the
    cotangent of P. A ReLU that is off passes nothing forward or back (σ'(0) = 0, as in torch).
    """
    n = phi.shape[0]
    h = d_in.shape[0]
    a1 = work[: n * h].reshape((n, h))
    a2 = work[n * h : 2 * n * h].reshape((n, h))
    back = work[2 * n * h : 3 * n * h].reshape((n, h))
    hid_t = work[3 * n * h : 3 * n * h + h * h].reshape((h, h))
    for i in range(n):
        z = phi[i]
        a1i = a1[i]
        for k in range(h):
            a1i[k] = max(z * d_in[k], 0.0)
    for q in range(h):  # a row-major copy of D_hidᵀ: BLAS is twice as fast on it as on the view
        for k in range(h):
            hid_t[k, q] = d_hid[q, k]
    np.dot(a1, hid_t, a2)
    flat2 = a2.ravel()
    for t in range(n * h):  # A₂ = σ(P)
        flat2[t] = max(flat2[t], 0.0)
    u[:] = 0.0  # the network's outputs first, then ∂ℓ/∂φ
    for q in range(h):  # loops over examples innermost: independent sums, no serial chain
        dq = d_out[q]
        for i in range(n):
            u[i] += dq * a2[i, q]
    g_out[:] = 0.0
    loss = 0.0
    for i in range(n):
        r = u[i] - y[i]
        loss += w[i] * r * r
        cot = 2.0 * w[i] * r
        a2i = a2[i]
        for q in range(h):
            v = a2i[q]
            g_out[q] += cot * v
            a2i[q] = cot * d_out[q] if v > 0.0 else 0.0  # from here on: G, the cotangent of P
    np.dot(a2.T, a1, g_hid)
    np.dot(a2, d_hid, back)
    flat1 = a1.ravel()
    flat_back = back.ravel()
    for t in range(n * h):  # the cotangent of D_in φ: zero where the first ReLU is off
        flat_back[t] = flat_back[t] if flat1[t] > 0.0 else 0.0
    g_in[:] = 0.0
    for i in range(n):
        z = phi[i]
        bi = back[i]
        for k in range(h):
            g_in[k] += bi[k] * z
    u[:] = 0.0
    for k in range(h):
        dk = d_in[k]
        for i in range(n):
            u[i] += back[i, k] * dk
    return loss


@njit(cache=True, error_model="numpy")
def _loss_and_gradient(theta, grad, x, y, w, d, hidden, work):
    """ℓ(θ) into the return value and ∇ℓ(θ) into ``grad`` (θ = a, b, c[, D_in, D_hid, D_out]).

    ``x`` is the run's data (n × κ); ``work`` has :func:`work_size` entries. Through the kernel
    k_l = Σ_j b_j c_j a_j^{κ−1−l} (the SSM's impulse response, reversed), φ = x k and
    Σ_i u_i K_ij = Σ_l z_l a_j^{κ−1−l} with z = xᵀu: O(κ(n + d)) operations instead of O(nκd).
    """
    n, kappa = x.shape
    powers = work[: kappa * d].reshape((kappa, d))
    slopes = work[kappa * d : 2 * kappa * d].reshape((kappa, d))
    kernel = work[2 * kappa * d : 2 * kappa * d + kappa]
    z = work[2 * kappa * d + kappa : 2 * kappa * d + 2 * kappa]
    phi = work[2 * kappa * (d + 1) : 2 * kappa * (d + 1) + n]
    u = work[2 * kappa * (d + 1) + n : 2 * kappa * (d + 1) + 2 * n]
    a, b, c = theta[:d], theta[d : 2 * d], theta[2 * d : 3 * d]
    _powers(a, powers, slopes)
    for m in range(kappa):  # k_m = Σ_j b_j c_j a_j^{κ−1−m}
        total = 0.0
        for j in range(d):
            total += b[j] * c[j] * powers[m, j]
        kernel[m] = total
    for i in range(n):  # φ_i = Σ_m x_im k_m (eq. 2 of the paper)
        total = 0.0
        for m in range(kappa):
            total += x[i, m] * kernel[m]
        phi[i] = total
    if hidden == 0:
        loss = 0.0
        for i in range(n):
            r = phi[i] - y[i]
            loss += w[i] * r * r
            u[i] = 2.0 * w[i] * r
    else:
        h = hidden
        base = 3 * d
        cut = (base, base + h, base + h + h * h, base + 2 * h + h * h)
        loss = _mlp_loss_and_cotangent(
            phi, y, w, theta[cut[0] : cut[1]], theta[cut[1] : cut[2]].reshape((h, h)),
            theta[cut[2] : cut[3]], grad[cut[0] : cut[1]], grad[cut[1] : cut[2]].reshape((h, h)),
            grad[cut[2] : cut[3]], u, work[2 * kappa * (d + 1) + 2 * n :],
        )  # fmt: skip
    z[:] = 0.0
    for i in range(n):  # z = xᵀu
        ui = u[i]
        for m in range(kappa):
            z[m] += ui * x[i, m]
    s_slope = grad[:d]  # Σ_i u_i K'_ij = Σ_m z_m (κ−1−m) a_j^{κ−2−m}, then scaled in place
    s_feat = grad[d : 2 * d]  # Σ_i u_i K_ij = Σ_m z_m a_j^{κ−1−m}
    s_slope[:] = 0.0
    s_feat[:] = 0.0
    for m in range(kappa):
        zm = z[m]
        for j in range(d):
            s_feat[j] += zm * powers[m, j]
            s_slope[j] += zm * slopes[m, j]
    for j in range(d):  # the pull-back of u to a, b, c (module docstring)
        grad[2 * d + j] = b[j] * s_feat[j]
        s_feat[j] *= c[j]
        s_slope[j] *= b[j] * c[j]
    return loss


@njit(cache=True, error_model="numpy")
def _all_finite(value, grad):
    """Whether ℓ and every entry of ∇ℓ are finite (g − g is 0 exactly when g is finite).

    A branch-free OR over the entries, which the compiler vectorizes.
    """
    bad = not math.isfinite(value)
    for p in range(grad.shape[0]):
        bad |= grad[p] - grad[p] != 0.0
    return not bad


@njit(cache=True, error_model="numpy")
def _sum_of_block_norms(grad, bounds):
    """Σ_t ‖g_t‖ over the parameter blocks g_t = grad[bounds[t] : bounds[t + 1]] (App. H.1.1)."""
    total = 0.0
    for t in range(bounds.shape[0] - 1):
        s = 0.0
        for p in range(bounds[t], bounds[t + 1]):
            s += grad[p] * grad[p]
        total += math.sqrt(s)
    return total


@njit(cache=True, error_model="numpy")
def _full_kernel_norm(a, b, c, z, powers, v):
    """‖∂ℓ/∂A‖_F over the full d × d matrix A at a diagonal point (the authors' Keras kernel).

    ∂ℓ/∂A_pq = c_p b_q Σ_{r,s: r+s ≤ κ−2} a_p^r a_q^s z_{κ−2−r−s} with z = xᵀu, the formula of
    :func:`lib.poisoning.authors_protocol._full_kernel_gradient` summed in another order:
    v_qr = Σ_s z_{κ−2−r−s} a_q^s first, then Σ_r a_p^r v_qr. ``powers`` (κ × d) holds
    a_j^{κ−1−l} as :func:`_loss_and_gradient` left it, so a_j^r = powers[κ−1−r, j]; ``v`` is a
    d × (κ−1) scratch array.
    """
    kappa, d = powers.shape
    m = kappa - 1
    for q in range(d):
        for r in range(m):
            total = 0.0
            for s in range(m - r):
                total += z[m - 1 - r - s] * powers[m - s, q]
            v[q, r] = total
    square = 0.0
    for p in range(d):
        for q in range(d):
            h = 0.0
            for r in range(m):
                h += powers[m - r, p] * v[q, r]
            g = c[p] * h * b[q]
            square += g * g
    return math.sqrt(square)


@njit(cache=True, error_model="numpy")
def _adaptive_measure(theta, grad, bounds, d, kappa, work, step_norm, v):
    """G_k of the adaptive step (App. H.1.1): Σ_t ‖g_t‖ over the parameter blocks
    (``DIAGONAL_NORM``, a's gradient over A's diagonal), the same with a's block replaced by the
    full-kernel norm :func:`_full_kernel_norm` (``FULL_NORM``, the authors' code), or Σ_t ‖g_t‖²
    (``SQUARED_NORM``, the paper's text). ``work`` holds the powers of a and z = xᵀu where
    :func:`_loss_and_gradient` left them."""
    if step_norm == DIAGONAL_NORM:
        return _sum_of_block_norms(grad, bounds)
    if step_norm == SQUARED_NORM:
        total = 0.0
        for p in range(bounds[bounds.shape[0] - 1]):
            total += grad[p] * grad[p]
        return total
    powers = work[: kappa * d].reshape((kappa, d))
    z = work[2 * kappa * d + kappa : 2 * kappa * d + 2 * kappa]
    total = _full_kernel_norm(theta[:d], theta[d : 2 * d], theta[2 * d : 3 * d], z, powers, v)
    return total + _sum_of_block_norms(grad, bounds[1:])


@njit(cache=True, error_model="numpy")
def _adam_direction(k, grad, first, second, update, b1, b2, adam_eps, keras):
    """Adam's moments updated in place, and u_k = m̂_k / (√v̂_k + ε_k) into ``update``.

    ε_k = ε (PyTorch) or ε / √(1 − β₂^{k+1}) (Keras), as in
    :func:`lib.engine.flow.gradient_descent`. """
    c1 = 1.0 - b1 ** (k + 1)
    c2 = 1.0 - b2 ** (k + 1)
    eps_k = adam_eps / math.sqrt(c2) if keras else adam_eps
    inv_c1, inv_c2 = 1.0 / c1, 1.0 / c2  # one division per entry instead of three (≤ 1 ulp apart)
    for p in range(grad.shape[0]):
        g = grad[p]
        m = b1 * first[p] + (1.0 - b1) * g
        v = b2 * second[p] + (1.0 - b2) * g * g
        first[p] = m
        second[p] = v
        update[p] = (m * inv_c1) / (math.sqrt(v * inv_c2) + eps_k)


@njit(cache=True, error_model="numpy")
def _train_run(
    theta0, x, y, w, d, hidden, bounds, lr, steps, optimizer, stop_loss, extra_steps,
    record_every, beta, softening, b1, b2, adam_eps, keras, step_norm,
):  # fmt: skip
    """One run of the protocol of :func:`lib.engine.flow.gradient_descent`, compiled.

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
    work = np.empty(work_size(x.shape[0], x.shape[1], d, hidden))
    v = np.empty((d, max(x.shape[1] - 1, 1)))  # scratch of the full-kernel norm
    avg_norm = 0.0
    converged = -1
    last = steps
    diverged = False
    count = 0
    for k in range(steps + 1):
        value = _loss_and_gradient(theta, grad, x, y, w, d, hidden, work)
        if not _all_finite(value, grad) and not diverged and k < last:
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
        if optimizer == GD:
            eta = lr
            update[:] = grad
        elif optimizer == ADAPTIVE:
            measure = _adaptive_measure(theta, grad, bounds, d, x.shape[1], work, step_norm, v)
            avg_norm = beta * avg_norm + (1.0 - beta) * measure
            eta = lr / (math.sqrt(avg_norm / (1.0 - beta ** (k + 1))) + softening)
            update[:] = grad
        else:
            eta = lr
            _adam_direction(k, grad, first, second, update, b1, b2, adam_eps, keras)
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
    step_norm: str = "diagonal",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    """Train R independent runs with the compiled loop; the record layout of gradient_descent.

    ``theta0`` is ``(R, P)``, the flat parameters of each run (a, b, c, then the MLP's weights in
    row-major order); ``x``, ``y``, ``w`` the padded per-run data ``(R, n, κ)``, ``(R, n)``,
    ``(R, n)``, of which run r uses its first ``sizes[r]`` rows. Internal: callers validate (see
    :func:`lib.poisoning.dynamics.train_dynamics`). Returns ``times (T,)``, ``states (T, R, P)``,
    ``losses (T, R)``, ``step_sizes (T, R)`` and the ``info`` dict of gradient_descent, recorded
    exactly as gradient_descent records R runs advanced together: at every multiple of
    ``record_every`` before the last run stops, and at that final iteration; a finished run stays
    frozen at its last iterate with step size NaN. ``step_norm`` chooses the adaptive step's G_k
    (:func:`_adaptive_measure`; ``"full"`` and ``"squared"`` for the standalone SSM only).
    """
    code = OPTIMIZER_CODES[optimizer]
    norm_code = STEP_NORM_CODES[step_norm]
    stop = -1.0 if stop_loss is None else float(stop_loss)
    results = [
        _train_run(
            np.ascontiguousarray(theta0[r]),
            np.ascontiguousarray(x[r, : sizes[r]]),
            np.ascontiguousarray(y[r, : sizes[r]]),
            np.ascontiguousarray(w[r, : sizes[r]]),
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
            norm_code,
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
