"""Compiled loops for small bias-free ReLU networks: the escape searches and the training runs.

The searches of :func:`lib.networks.saddles.escape_search` take thousands of steps on networks of a
few hundred weights and eight data points, and the digits run of
:func:`lib.networks.saddles.saddle_to_saddle_run` takes 10⁴ steps on matrices of a few thousand
entries. In numpy each step is some forty array operations, most of them on arrays too small to
amortize their per-call cost (and each allocating its result). Here the *whole* loop of a run
(forward pass, backpropagation, update, recording) is one function compiled by numba, in float64, on
preallocated buffers.

Conventions (those of :mod:`lib.networks.saddles`)
-----------------------------------------
The network has widths n₀ = d_in, n₁, …, n_L and weights W_ℓ ∈ ℝ^{n_ℓ×n_{ℓ−1}} stored one after the
other, row-major, in one flat vector θ (``offsets[ℓ−1]`` … ``offsets[ℓ]``). Data ``x`` has one
point per row (N × d_in). The forward and backward passes are those of
:func:`lib.networks.saddles._forward_backward`:

    Z_ℓ = Z^σ_{ℓ−1} W_ℓᵀ,   Z^σ_ℓ = σ(Z_ℓ) (ℓ < L),   Z^σ_0 = x,   Y = Z_L
    Δ_L = ∂C/∂Y,   ∂C/∂W_ℓ = Δ_ℓᵀ Z^σ_{ℓ−1},   Δ_{ℓ−1} = (Δ_ℓ W_ℓ) ⊙ [Z_{ℓ−1} > 0]   (σ'(0) = 0)

with two costs C of the outputs: the localized loss L₀ = Tr[GᵀY] (§2 of Bantzis et al. 2025,
Δ_L = G) and the mean softmax cross-entropy (Δ_L = (softmax(Y) − onehot)/N). For small products
(the eight points of Example 1) the loops are written here: the two backward products as sums of
rows scaled by one entry (an "axpy", skipping the entries that the ReLU set to zero), the forward
product and the norms as dot products whose sums the compiler may split into vector lanes
(``fastmath={"reassoc"}``, nothing else). Larger products go to BLAS (``BLAS_FROM``). Only the
order of floating-point sums differs from numpy's, so trajectories agree with the numpy loops of
:mod:`lib.networks.saddles` and with :func:`lib.engine.flow.gradient_descent` up to rounding
(tested to 1e-10 over 300 steps). Where an iteration amplifies rounding (optima on ReLU kinks,
unstable steps), long runs of the two paths drift apart like any two orders of summation would.

Its small helpers (the finiteness test, the recording buffers) repeat those of the other
compiled modules on purpose: numba's on-disk cache does not notice when a compiled function of
another file changes, so a cross-file call could run a stale copy.

Nothing here is public (``__all__`` is empty, and the API page lists no member): these are the
loops behind :func:`lib.networks.saddles.escape_search`,
:func:`lib.networks.saddles.saddle_to_saddle_run` and the other public functions of
:mod:`lib.networks.saddles`, which validate their inputs before they call them. (The Python entry
points below still check what they are given, as a second line of defence.) """

from __future__ import annotations

import math

import numpy as np
from numba import njit
from threadpoolctl import threadpool_limits

from lib.engine.validation import as_bool, as_choice, as_float, as_int, as_positive_float

LOCALIZED, CROSS_ENTROPY = 0, 1
COSTS = {"localized": LOCALIZED, "cross_entropy": CROSS_ENTROPY}
# The products go to BLAS when the largest of them has at least this many multiply-adds: on the
# eight points of Example 1 the loops are faster up to width 16 (2048) and BLAS from width 32
# (8192) on (measured on a 2-core x86 machine); the digits run (300·64·32) is far above.
BLAS_FROM = 4096

__all__: list[str] = []  # internal loops (see the module docstring)


# --------------------------------------------------------------------------------------------
# One forward and backward pass, on flat buffers
# --------------------------------------------------------------------------------------------
# Every matrix lives in a flat buffer (θ, ∂C/∂θ or the work buffer) at a start index, row-major.
# Indexing the buffers directly, rather than through per-layer array views, matters: a view costs
# some 25 ns to make, and at the widths of Example 1 a whole pass takes about a microsecond. The
# indices are unsigned (uint64 offsets, widths and starts): numba wraps negative indices around,
# and for a signed index it cannot prove non-negative that check stops the loops from being
# vectorized (measured: nine times slower).


@njit(cache=True, error_model="numpy")
def _matrix(buffer, start, rows, cols):
    """buffer[start : start + rows·cols] as a (rows, cols) view (for the BLAS calls)."""
    return buffer[start : start + rows * cols].reshape((np.int64(rows), np.int64(cols)))


@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _forward_layer(work, h, z, theta, w, rows, inner, cols, blas):
    """Z = H Wᵀ, i.e. Z[n, j] = ⟨H[n, :], W[j, :]⟩, a dot product of two contiguous rows.

    H (rows × inner) at ``work[h:]``, W (cols × inner) at ``theta[w:]``, Z (rows × cols) into
    ``work[z:]``. The one sum here that is not an axpy: ``reassoc`` lets the compiler split it
    into vector lanes (the same terms in another order).
    """
    if blas:
        np.dot(_matrix(work, h, rows, inner), _matrix(theta, w, cols, inner).T,
               _matrix(work, z, rows, cols))  # fmt: skip
        return
    for n in range(rows):
        for j in range(cols):
            total = 0.0
            for k in range(inner):
                total += work[h + n * inner + k] * theta[w + j * inner + k]
            work[z + n * cols + j] = total


@njit(cache=True, error_model="numpy")
def _weight_gradient(work, delta, h, grad, gw, rows, cols, inner, blas):
    """∂C/∂W = Δᵀ H: row j is Σ_n Δ[n, j] H[n, :] over the nonzero Δ[n, j].

    Δ (rows × cols) at ``work[delta:]``, H (rows × inner) at ``work[h:]``, the result
    (cols × inner) into ``grad[gw:]``.
    """
    if blas:
        np.dot(_matrix(work, delta, rows, cols).T, _matrix(work, h, rows, inner),
               _matrix(grad, gw, cols, inner))  # fmt: skip
        return
    for p in range(gw, gw + cols * inner):
        grad[p] = 0.0
    for n in range(rows):
        for j in range(cols):
            d = work[delta + n * cols + j]
            if d != 0.0:
                for k in range(inner):
                    grad[gw + j * inner + k] += d * work[h + n * inner + k]


@njit(cache=True, error_model="numpy")
def _backpropagate(work, delta, theta, w, pre, out, rows, cols, inner, blas):
    """Δ_{ℓ−1} = (Δ_ℓ W_ℓ) ⊙ [Z_{ℓ−1} > 0], row n built from the nonzero Δ_ℓ[n, j].

    Δ_ℓ (rows × cols) at ``work[delta:]``, W_ℓ (cols × inner) at ``theta[w:]``, Z_{ℓ−1}
    (rows × inner) at ``work[pre:]``, the result into ``work[out:]``.
    """
    if blas:
        np.dot(_matrix(work, delta, rows, cols), _matrix(theta, w, cols, inner),
               _matrix(work, out, rows, inner))  # fmt: skip
    for n in range(rows):
        row = out + n * inner
        if not blas:
            for k in range(inner):
                work[row + k] = 0.0
            for j in range(cols):
                d = work[delta + n * cols + j]
                if d != 0.0:
                    for k in range(inner):
                        work[row + k] += d * theta[w + j * inner + k]
        for k in range(inner):
            if not work[pre + n * inner + k] > 0.0:
                work[row + k] = 0.0


@njit(cache=True, error_model="numpy")
def _cost(work, y, target, cost, delta, rows, cols):
    """C(Y) for Y (rows × cols) at ``work[y:]``, and ∂C/∂Y into ``work[delta:]``.

    L₀ = Σ G ⊙ Y (``target`` = G), or the mean cross-entropy (``target`` = the one-hot labels),
    written as :func:`lib.networks.saddles.saddle_to_saddle_run` writes it.
    """
    value = 0.0
    if cost == LOCALIZED:
        for n in range(rows):
            for o in range(cols):
                value += work[y + n * cols + o] * target[n, o]
                work[delta + n * cols + o] = target[n, o]
        return value
    for n in range(rows):  # log p = Y − max Y − log Σ exp(Y − max Y)
        row = y + n * cols
        top = work[row]
        for o in range(1, cols):
            top = max(top, work[row + o])
        total = 0.0
        for o in range(cols):
            total += math.exp(work[row + o] - top)
        log_total = math.log(total)
        for o in range(cols):
            log_p = (work[row + o] - top) - log_total
            value -= log_p * target[n, o]
            work[delta + n * cols + o] = (math.exp(log_p) - target[n, o]) / rows
    return value / rows


def _work_starts(rows: int, widths: np.ndarray) -> np.ndarray:
    """Block starts in the work buffer: Z^σ_0 = x, then Z_ℓ and Z^σ_ℓ for ℓ = 1…L, then two Δ."""
    sizes = [rows * widths[0]]
    for width in widths[1:]:
        sizes += [rows * width, rows * width]
    sizes += [rows * widths.max()] * 2
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint64)


@njit(cache=True, error_model="numpy")
def _relu(work, z, a, size):
    """Z^σ = max(Z, 0) for the ``size`` entries of Z at ``work[z:]``, into ``work[a:]``."""
    for p in range(size):
        work[a + p] = max(work[z + p], 0.0)


@njit(cache=True, error_model="numpy")
def _value_and_gradient(theta, grad, offsets, widths, target, cost, work, starts, blas):
    """C(Y_θ), and ∂C/∂θ into ``grad`` (flat, θ's layout).

    ``work`` holds, from ``starts`` (:func:`_work_starts`), the data Z^σ_0 = x (written by the
    caller), Z_ℓ and Z^σ_ℓ for ℓ = 1…L, then two buffers for Δ. ``offsets``, ``widths`` and
    ``starts`` are uint64 arrays. With ``blas`` the three products go to BLAS (``np.dot``), else
    to the loops above.
    """
    depth = widths.shape[0] - 1
    rows = (starts[1] - starts[0]) // widths[0]
    for layer in range(1, depth + 1):  # Z_ℓ at block 2ℓ − 1, Z^σ_ℓ at block 2ℓ
        z, h = starts[2 * layer - 1], starts[2 * layer - 2]
        _forward_layer(work, h, z, theta, offsets[layer - 1], rows, widths[layer - 1],
                       widths[layer], blas)  # fmt: skip
        if layer < depth:
            _relu(work, z, starts[2 * layer], rows * widths[layer])
    spare = 2 * depth + 1  # the Δ buffers are blocks 2L + 1 and 2L + 2
    delta = starts[spare]
    value = _cost(work, starts[2 * depth - 1], target, cost, delta, rows, widths[depth])
    for layer in range(depth, 0, -1):
        _weight_gradient(work, delta, starts[2 * layer - 2], grad, offsets[layer - 1], rows,
                         widths[layer], widths[layer - 1], blas)  # fmt: skip
        if layer > 1:
            spare = 4 * depth + 3 - spare
            _backpropagate(work, delta, theta, offsets[layer - 1], starts[2 * layer - 3],
                           starts[spare], rows, widths[layer], widths[layer - 1], blas)  # fmt: skip
            delta = starts[spare]
    return value


@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _dot(a, b):
    """⟨a, b⟩; ``reassoc`` lets the compiler split the sum into vector lanes (as numpy does)."""
    total = 0.0
    for p in range(a.shape[0]):
        total += a[p] * b[p]
    return total


@njit(cache=True, error_model="numpy")
def _finite(value, grad):
    """Whether C and every entry of ∂C/∂θ are finite (g − g is 0 exactly for a finite g)."""
    bad = not math.isfinite(value)
    for p in range(grad.shape[0]):
        bad |= grad[p] - grad[p] != 0.0
    return not bad


# --------------------------------------------------------------------------------------------
# The two loops
# --------------------------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _sphere_runs(theta0, offsets, widths, target, angles, radius, work, starts, blas):
    """The loop of :func:`sphere_descent`, one run (row of θ₀) after the other."""
    runs, size = theta0.shape
    depth = widths.shape[0] - 1
    steps = angles.shape[0]
    history = np.empty((steps + 1, runs))
    final = np.empty((runs, size))
    grad = np.empty(size)
    tangent = np.empty(size)
    for r in range(runs):
        theta = theta0[r].copy()
        for k in range(steps + 1):
            value = _value_and_gradient(
                theta, grad, offsets, widths, target, LOCALIZED, work, starts, blas
            )
            history[k, r] = -value
            if k == steps:
                break
            radial = _dot(grad, theta) / depth  # the radial part (Euler: ⟨θ, ∇L₀⟩ = L L₀)
            for p in range(size):
                tangent[p] = grad[p] - radial * theta[p]
            step = angles[k] * radius / max(math.sqrt(_dot(tangent, tangent)), 1e-300)
            for p in range(size):
                theta[p] = theta[p] - step * tangent[p]
            scale = radius / math.sqrt(_dot(theta, theta))
            for p in range(size):
                theta[p] = theta[p] * scale
        final[r] = theta
    return history, final


@njit(cache=True, error_model="numpy")
def _schedule_run(
    theta0, offsets, widths, target, cost, eta0, power, steps, record_every, work, starts, blas
):
    """The loop of :func:`schedule_descent`."""
    size = theta0.shape[0]
    depth = widths.shape[0] - 1
    capacity = steps // record_every + 2
    times = np.empty(capacity, np.int64)
    states = np.empty((capacity, size))
    losses = np.empty(capacity)
    etas = np.empty(capacity)
    theta = theta0.copy()
    grad = np.empty(size)
    count = 0
    last = steps
    diverged = False
    for k in range(steps + 1):
        value = _value_and_gradient(theta, grad, offsets, widths, target, cost, work, starts, blas)
        if not _finite(value, grad):
            diverged = True
            last = k
        if k >= last:
            times[count] = k
            states[count] = theta
            losses[count] = value
            etas[count] = np.nan
            count += 1
            break
        squared = 0.0  # ‖θ‖², summed layer by layer
        for layer in range(depth):
            block = theta[offsets[layer] : offsets[layer + 1]]
            squared += _dot(block, block)
        factor = squared ** (-power / 2)  # η_k = η₀ ‖θ_k‖^{−power}
        if k % record_every == 0:
            times[count] = k
            states[count] = theta
            losses[count] = value
            etas[count] = eta0
            count += 1
        for p in range(size):
            theta[p] -= eta0 * (grad[p] * factor)
    return times[:count], states[:count], losses[:count], etas[:count], last, diverged


# --------------------------------------------------------------------------------------------
# Checked entry points
# --------------------------------------------------------------------------------------------


def layer_offsets(widths) -> np.ndarray:
    """Where each W_ℓ starts in the flat θ: 0, n₁n₀, n₁n₀ + n₂n₁, …, P (shape (L + 1,))."""
    widths = _as_widths(widths)
    return np.concatenate([[0], np.cumsum(widths[1:] * widths[:-1])]).astype(np.int64)


def _as_widths(widths) -> np.ndarray:
    if not isinstance(widths, (list, tuple, np.ndarray)) or len(widths) < 2:
        raise ValueError(f"widths must list at least an input and an output width, got {widths!r}")
    return np.array([as_int(int(w) if isinstance(w, np.integer) else w, "width", minimum=1)
                     for w in widths], dtype=np.int64)  # fmt: skip


def _as_array(value, name: str, shape: tuple) -> np.ndarray:
    """A finite float64 array of the given shape (None in ``shape`` matches any length)."""
    if not isinstance(value, np.ndarray) or value.dtype != np.float64:
        raise ValueError(f"{name} must be a float64 numpy array, got {type(value).__name__}")
    wrong = [s is not None and s != v for s, v in zip(shape, value.shape, strict=False)]
    if value.ndim != len(shape) or any(wrong):
        raise ValueError(f"{name} must have shape {shape} (None: any), got {value.shape}")
    if not np.isfinite(value).all():
        raise ValueError(f"{name} must be finite")
    return np.ascontiguousarray(value)


def _as_problem(theta, widths, x, target, *, runs: bool):
    """Checked arrays, and the widths and offsets as uint64 (see the kernels' comment)."""
    widths = _as_widths(widths)
    offsets = layer_offsets(widths)
    size = int(offsets[-1])
    theta = _as_array(theta, "theta", (None, size) if runs else (size,))
    x = _as_array(x, "x", (None, int(widths[0])))
    if x.shape[0] == 0:
        raise ValueError("x must hold at least one data point")
    target = _as_array(target, "target", (x.shape[0], int(widths[-1])))
    return theta, widths.astype(np.uint64), offsets.astype(np.uint64), x, target


def _use_blas(blas, x: np.ndarray, widths: np.ndarray) -> bool:
    """``blas`` as given, or (None) BLAS from ``BLAS_FROM`` multiply-adds in a product on."""
    if blas is None:
        return x.shape[0] * int((widths[1:] * widths[:-1]).max()) >= BLAS_FROM
    return as_bool(blas, "blas")


def _work(x: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The work buffer of :func:`_value_and_gradient` with the data in place, and its starts."""
    starts = _work_starts(x.shape[0], widths)
    work = np.empty(int(starts[-1]))
    work[: x.size] = x.ravel()
    return work, starts


def value_and_gradient(theta, widths, x, target, *, cost: str = "localized", blas=None):
    """C(Y_θ) and ∂C/∂θ (flat, θ's layout) for one network; see the module docstring.

    ``cost="localized"``: L₀ = Tr[Gᵀ Y_θ] with ``target`` = G (N × n_L). ``"cross_entropy"``: the
    mean softmax cross-entropy with ``target`` the one-hot labels (N × n_L). ``blas``: the
    products in BLAS (True) or in the compiled loops (False); None picks the faster by size
    (``BLAS_FROM``).
    """
    cost = as_choice(cost, "cost", tuple(COSTS))
    theta, widths, offsets, x, target = _as_problem(theta, widths, x, target, runs=False)
    blas = _use_blas(blas, x, widths)
    grad = np.empty_like(theta)
    work, starts = _work(x, widths)
    with threadpool_limits(limits=1, user_api="blas"):
        value = _value_and_gradient(theta, grad, offsets, widths, target, COSTS[cost], work,
                                    starts, blas)  # fmt: skip
    return float(value), grad


def sphere_descent(theta0, widths, x, g, angles, radius: float, *, blas=None):
    """Projected descent of L₀ on the sphere ‖θ‖ = ``radius``, fixed angles, one run per row.

    The iteration of :func:`lib.networks.saddles.escape_search`: g_⊥ = ∇L₀ − θ⟨θ, ∇L₀⟩/L (the
    tangent part; Euler's identity gives ⟨θ, ∇L₀⟩ = L L₀), θ ← θ − η_k ``radius`` g_⊥/‖g_⊥‖, then θ
    rescaled onto the sphere. ``theta0``: (runs, P) starting points on the sphere; ``angles``: the
    η_k; ``blas`` as in :func:`value_and_gradient`. Returns the speeds −L₀ after each step, shape
    (steps + 1, runs), and the final θ, shape (runs, P).
    """
    theta0, widths, offsets, x, g = _as_problem(theta0, widths, x, g, runs=True)
    angles = _as_array(angles, "angles", (None,))
    if len(angles) == 0 or not (angles > 0).all():
        raise ValueError("angles must be a non-empty array of positive step angles")
    radius = as_positive_float(radius, "radius")
    if not (theta0**2).sum(axis=1).min(initial=1.0) > 0:
        raise ValueError("every row of theta0 must be nonzero (a point of the sphere)")
    blas = _use_blas(blas, x, widths)
    work, starts = _work(x, widths)
    with threadpool_limits(limits=1, user_api="blas"):
        return _sphere_runs(theta0, offsets, widths, g, angles, radius, work, starts, blas)


def schedule_descent(
    theta0,
    widths,
    x,
    target,
    *,
    cost: str,
    eta0: float,
    power: float,
    steps: int,
    record_every: int,
    blas=None,
):
    """Gradient descent θ_{k+1} = θ_k − η₀ ‖θ_k‖^{−power} ∇C(θ_k).

    ``power = L − 2`` is the schedule of the time s of §2.1 (ds = ‖θ‖^{L−2} dt), ``power = 0``
    plain gradient descent (Euler's method on the gradient flow, step η₀). The protocol of
    :func:`lib.engine.flow.gradient_descent` with ``optimizer="gd"``: the iterate is recorded at
    step 0, every ``record_every`` steps and at the last step (step size ``nan`` there); a
    non-finite loss or gradient ends the run. ``blas`` as in :func:`value_and_gradient`. Returns
    ``(times, states, losses, step_sizes, steps_run, diverged)``, with the recorded step size
    η₀ (the schedule enters through the gradient).
    """
    cost = as_choice(cost, "cost", tuple(COSTS))
    theta0, widths, offsets, x, target = _as_problem(theta0, widths, x, target, runs=False)
    eta0 = as_positive_float(eta0, "eta0")
    power = as_float(power, "power", minimum=0.0)
    steps = as_int(steps, "steps", minimum=0)
    record_every = as_int(record_every, "record_every", minimum=1)
    if power > 0 and not (theta0**2).sum() > 0:
        raise ValueError("theta0 must not be zero: the schedule divides by a power of ‖θ‖")
    blas = _use_blas(blas, x, widths)
    work, starts = _work(x, widths)
    with threadpool_limits(limits=1, user_api="blas"):
        times, states, losses, etas, last, diverged = _schedule_run(
            theta0, offsets, widths, target, COSTS[cost], eta0, power, steps, record_every, work,
            starts, blas,
        )  # fmt: skip
    return times, states, losses, etas, int(last), bool(diverged)
