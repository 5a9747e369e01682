"""Limit directions of linear tensor networks beyond the three architectures of
:mod:`lib.networks.tensor_nets` (Yun, Krishnan & Mobahi 2021).

:mod:`lib.networks.tensor_nets` holds the diagonal, full-length convolutional and fully connected
networks and the limits of Theorems 4–6. This module holds what the paper proves for *any* data
tensor:

* general data tensors: :func:`conv_basis` builds the convolutional one for filters of any sizes
  k_1, …, k_L ≤ d (k_L = d; the paper's eq. (12)), :func:`contract` computes A ∘ (u_1, …, u_L)
  with one slot left open or none, :func:`coefficients` the linear coefficients
  β_i = M(e_i) ∘ (v_1, …, v_L), :func:`tensor_network_output` the (non-linear) tensor formulation
  of the paper's eq. (2), and :func:`multilinear_gradient` the gradient of the exponential or
  squared loss of f(x_i) = M(x_i) ∘ (v_1, …, v_L) for :mod:`lib.engine.flow`;
* Theorem 1 (limit directions are singular vectors of a tensor, Lim's definition, the paper's
  eq. (8)): :func:`singular_residual` measures how far unit vectors are from solving eq. (8),
  :func:`power_method` finds solutions, and :func:`direction_path` integrates the direction of
  gradient flow on one data point out to parameter norms no loss can reach in time;
* Theorem 3 and Corollary 4 (one data point, two layers, classification): the whole trajectory in
  closed form (:func:`one_point_curve`, its clock :func:`one_point_nu` and
  :func:`one_point_log_time`), its limit (:func:`one_point_limit`), the initialization condition
  (:func:`theorem3_gap`) and the small-filter directions of Corollary 4
  (:func:`corollary4_direction`);
* Corollary 6 off its hypothesis: :func:`even_part` and :func:`conv_modulus_minimizer`, the
  corollary's objective extended to data that are not even;
* Corollary 7 (deep matrix sensing with commuting sensors): :func:`simultaneous_eigenbasis`,
  :func:`matrix_sensing_gradient`, :func:`matrix_sensing_limit` and the optimality residual
  :func:`matrix_sensing_kkt`.

Indices are 0-based; the paper's are 1-based. Inputs are checked once at each public function and
rejected with a ValueError naming the argument.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence

import numpy as np
import torch
from scipy.integrate import quad, solve_ivp
from scipy.optimize import brentq, minimize

from lib.engine.validation import (
    NumericalFailure,
    as_array,
    as_bool,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_positive_float,
    as_tensor,
    check_finite_result,
)
from lib.networks import tensor_nets as tn

__all__ = [
    "coefficients",
    "conv_basis",
    "conv_modulus_minimizer",
    "contract",
    "corollary4_direction",
    "direction_path",
    "even_part",
    "matrix_sensing_gradient",
    "matrix_sensing_kkt",
    "matrix_sensing_limit",
    "multilinear_gradient",
    "one_point_curve",
    "one_point_limit",
    "one_point_log_time",
    "one_point_nu",
    "power_method",
    "simultaneous_eigenbasis",
    "singular_residual",
    "tensor_network_output",
    "theorem3_gap",
]

#: The largest number of entries of a data tensor (or of its basis) this module builds.
MAX_ENTRIES = 10**7
#: The largest order L of a tensor (einsum needs one letter per mode).
MAX_ORDER = 8
LOSSES = ("exp", "square")
ACTIVATIONS = ("linear", "relu")
_LETTERS = string.ascii_lowercase[:MAX_ORDER]
#: Relative size below which a singular value counts as zero (compact SVD), and relative gap
#: below which two count as equal (a tie of Theorem 3's top singular value).
_RANK_TOL = 1e-12


# ---------------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------------


def _array(value, name: str, ndim: int | None = None) -> np.ndarray:
    """A finite, non-empty float64 numpy copy of ``value`` (lists, numpy or float64 torch)."""
    return as_array(value, name, ndim=ndim, nonempty=True).astype(np.float64, copy=True)


def _finite(value, what: str):
    check_finite_result(value, what)
    return value


def _tensor(value, name: str) -> np.ndarray:
    """A data tensor of order 1 to :data:`MAX_ORDER` with at most :data:`MAX_ENTRIES` entries."""
    A = _array(value, name)
    if not 1 <= A.ndim <= MAX_ORDER:
        raise ValueError(f"{name} must have 1 to {MAX_ORDER} modes, got shape {A.shape}")
    if A.size > MAX_ENTRIES:
        raise ValueError(f"{name} has {A.size} entries, more than {MAX_ENTRIES:.0e}")
    return A


def _vectors(vectors, shape: tuple[int, ...], name: str, *, runs: bool = False) -> list:
    """One vector per mode of a tensor of ``shape``: ``vectors[l]`` has length ``shape[l]``
    (with ``runs``, a common leading run shape is allowed)."""
    items = as_list(vectors, name)
    if len(items) != len(shape):
        raise ValueError(f"{name} must hold {len(shape)} vectors (one per mode), got {len(items)}")
    out = [_array(v, f"{name}[{layer}]") for layer, v in enumerate(items)]
    lead = out[0].shape[:-1]
    for layer, (v, k) in enumerate(zip(out, shape, strict=True)):
        if v.ndim == 0 or v.shape[-1] != k or (not runs and v.ndim != 1):
            what = "(..., k)" if runs else "(k,)"
            raise ValueError(f"{name}[{layer}] must have shape {what} with k = {k}, got {v.shape}")
        if v.shape[:-1] != lead:
            raise ValueError(
                f"{name} must share one leading (run) shape, got {lead} and {v.shape[:-1]}"
            )
    return out


def _nonzero(v: np.ndarray, name: str) -> np.ndarray:
    if not np.any(v):
        raise ValueError(f"{name} must not be the zero vector (its direction is undefined)")
    return v


def _matrix(value, name: str = "matrix") -> np.ndarray:
    """A nonzero matrix M(x) of a two-layer network (k_1 × k_2)."""
    M = _array(value, name, 2)
    if M.size > MAX_ENTRIES:
        raise ValueError(f"{name} has {M.size} entries, more than {MAX_ENTRIES:.0e}")
    if not np.any(M):
        raise ValueError(f"{name} must not be zero (a data point x = 0 has no direction)")
    return M


def _two_layer_init(M: np.ndarray, v1_bar, v2_bar) -> tuple[np.ndarray, np.ndarray]:
    v1 = _array(v1_bar, "v1_bar", 1)
    v2 = _array(v2_bar, "v2_bar", 1)
    if v1.shape != (M.shape[0],) or v2.shape != (M.shape[1],):
        raise ValueError(
            f"v1_bar and v2_bar must have the lengths of matrix's rows and columns, "
            f"({M.shape[0]},) and ({M.shape[1]},), got {v1.shape} and {v2.shape}"
        )
    return v1, v2


def _label(y, name: str = "y") -> float:
    y = as_float(y, name)
    if y == 0:
        raise ValueError(f"{name} must be a nonzero label (its sign is the class), got 0")
    return y


def _normal_powers(alpha: float, scales: np.ndarray, powers: Sequence[float], what: str) -> None:
    """α^p·scale must be a positive normal float64 for each power p and scale, else a ValueError
    (an α or initialization so large or small that the closed forms overflow or vanish)."""
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        values = [np.float64(alpha) ** p * np.asarray(scales, dtype=float) for p in powers]
    tiny = np.finfo(float).tiny
    if not all(np.all(np.isfinite(v)) and np.all(np.abs(v) >= tiny) for v in values):
        raise ValueError(f"alpha = {alpha:g} with these {what} puts alpha^p x scale outside "
                         f"float64's normal range (p in {tuple(powers)})")


# ---------------------------------------------------------------------------------------------
# Data tensors, contractions and the tensor formulation (the paper's eqs. (2), (6), (12))
# ---------------------------------------------------------------------------------------------


def conv_basis(d: int, kernel_sizes: Sequence[int]) -> np.ndarray:
    """Basis tensors 𝕄[i] = M_conv(e_i) of an L-layer circular convolutional network with filters
    of sizes k_1, …, k_{L−1} ≤ d and k_L = d, shape (d, k_1, …, k_L), so that M(x) = Σ_i x_i 𝕄[i].

    The paper's eq. (12): M_conv(x)_{j_1 … j_L} = x_{(j_1 + … + j_L) mod d} (0-based), the data
    tensor of f(x) = ((x ⋆ w_1) ⋆ … ⋆ w_{L−1})ᵀ w_L with [a ⋆ b]_i = Σ_{j<k} a_{(i+j) mod d} b_j.
    ``kernel_sizes`` lists all L sizes (2 ≤ L ≤ :data:`MAX_ORDER`), the last one equal to d."""
    d = as_int(d, "d", minimum=1)
    sizes = [as_int(k, f"kernel_sizes[{layer}]", minimum=1, maximum=d)
             for layer, k in enumerate(as_list(kernel_sizes, "kernel_sizes"))]
    if not 2 <= len(sizes) <= MAX_ORDER:
        raise ValueError(f"kernel_sizes must list 2 to {MAX_ORDER} sizes, got {len(sizes)}")
    if sizes[-1] != d:
        raise ValueError(f"the last layer must be full length: kernel_sizes[-1] = d = {d}, "
                         f"got {sizes[-1]}")
    if d * math.prod(sizes) > MAX_ENTRIES:
        raise ValueError(f"the basis would hold {d * math.prod(sizes)} entries, more than "
                         f"{MAX_ENTRIES:.0e}")
    index = sum(np.ix_(*[np.arange(k) for k in sizes])) % d
    return (np.arange(d).reshape((d,) + (1,) * len(sizes)) == index).astype(np.float64)


def _contract(A: np.ndarray, vectors: list, open_slot: int | None = None):
    """A ∘ (u_1, …, u_L) (a number), or with slot ``open_slot`` left open (a vector)."""
    letters = _LETTERS[: A.ndim]
    inputs = [letters] + [letters[layer] for layer in range(A.ndim) if layer != open_slot]
    operands = [A] + [v for layer, v in enumerate(vectors) if layer != open_slot]
    out = "" if open_slot is None else letters[open_slot]
    return np.einsum(",".join(inputs) + "->" + out, *operands)


def contract(tensor, vectors, *, open_slot: int | None = None):
    """The multilinear product A ∘ (u_1, …, u_L) = Σ A_{j_1…j_L} [u_1]_{j_1} ⋯ [u_L]_{j_L}
    (the paper's §2), or, with ``open_slot`` = l, the vector A ∘ (u_1, …, I_{k_l}, …, u_L).

    ``tensor`` has L modes; ``vectors`` holds L vectors of lengths k_1, …, k_L (the one in the open
    slot is ignored but must have the right length)."""
    A = _tensor(tensor, "tensor")
    us = _vectors(vectors, A.shape, "vectors")
    if open_slot is not None:
        open_slot = as_int(open_slot, "open_slot", minimum=0, maximum=A.ndim - 1)
    with np.errstate(over="ignore", invalid="ignore"):
        out = _contract(A, us, open_slot)
    return _finite(float(out) if open_slot is None else out, "the contraction (it overflows)")


def coefficients(basis, vectors) -> np.ndarray:
    """The linear coefficients β_i = M(e_i) ∘ (v_1, …, v_L) of a linear tensor network (eq. (6):
    f(x) = M(x) ∘ (v_1, …, v_L) = xᵀβ).

    ``basis`` has shape (d, k_1, …, k_L) (e.g. :func:`conv_basis`); ``vectors`` holds L arrays of
    shapes (..., k_l) with one common leading (run) shape; the result has shape (..., d)."""
    B = _tensor(basis, "basis")
    if B.ndim < 3:
        raise ValueError(f"basis must have shape (d, k_1, ..., k_L) with L >= 2, got {B.shape}")
    vs = _vectors(vectors, B.shape[1:], "vectors", runs=True)
    letters = _LETTERS[: B.ndim - 1]
    spec = "z" + letters + "," + ",".join("..." + c for c in letters) + "->...z"
    with np.errstate(over="ignore", invalid="ignore"):
        return _finite(np.einsum(spec, B, *vs), "the coefficients beta (they overflow)")


def tensor_network_output(tensor, vectors, *, activation: str = "linear") -> float:
    """f(x; Θ) of the tensor formulation, the paper's eq. (2), for the data tensor M(x):

        H_1 = φ(M(x) ∘ (v_1, I, …, I)),  H_l = φ(H_{l−1} ∘ (v_l, I, …, I)),  f = H_{L−1} ∘ v_L,

    with φ the identity (``"linear"``: the linear tensor network of eq. (6)) or the ReLU
    (``"relu"``). ``tensor`` has L ≥ 2 modes and ``vectors`` one vector per mode."""
    A = _tensor(tensor, "tensor")
    if A.ndim < 2:
        raise ValueError(f"tensor must have at least 2 modes (L >= 2), got shape {A.shape}")
    vs = _vectors(vectors, A.shape, "vectors")
    activation = as_choice(activation, "activation", ACTIVATIONS)
    H = A
    with np.errstate(over="ignore", invalid="ignore"):
        for v in vs[:-1]:
            H = np.tensordot(v, H, axes=(0, 0))
            if activation == "relu":
                H = np.maximum(H, 0.0)
        out = float(H @ vs[-1])
    return _finite(out, "the network's output (it overflows)")


# ---------------------------------------------------------------------------------------------
# Gradient flow on f(x_i) = M(x_i) ∘ (v_1, …, v_L): the closed-form gradient for lib.engine.flow
# ---------------------------------------------------------------------------------------------


def _last(out: np.ndarray, v: np.ndarray, batched: bool) -> np.ndarray:
    """Contract the last mode of ``out`` with v (per run when ``batched``)."""
    return np.einsum("r...k,rk->r...", out, v) if batched else out @ v


def _first(out: np.ndarray, v: np.ndarray, batched: bool) -> np.ndarray:
    """Contract the first mode (after the run axis) of ``out`` with v."""
    if batched:
        return np.einsum("rk,rk...->r...", v, out)
    return (v @ out.reshape(out.shape[0], -1)).reshape(out.shape[1:])


def _gradients(Mr: np.ndarray, vs: list, batched: bool) -> list:
    """[Mr ∘ (v_1, …, I, …, v_L)]_l for every l: suffixes from the last mode, then the prefix."""
    suffixes = [Mr]
    for v in reversed(vs[1:]):
        suffixes.append(_last(suffixes[-1], v, batched))
    suffixes = suffixes[::-1]  # suffixes[l]: modes l+1, …, L contracted (0-based)
    grads = []
    for layer, out in enumerate(suffixes):
        for v in vs[:layer]:
            out = _first(out, v, batched)
        grads.append(out)
    return grads


def multilinear_gradient(tensors, y, *, loss: str = "exp", total: bool = False):
    """Closed-form ``params -> (loss, {"v1": ∇_{v_1}, …})`` for :mod:`lib.engine.flow`, for the
    network f(x_i) = M(x_i) ∘ (v_1, …, v_L) given its data tensors M(x_i) (the paper's §3).

    ``"exp"``: 𝓛 = Σ_i exp(−y_i f_i); ``"square"``: 𝓛 = ½ Σ_i (f_i − y_i)² (sums, §2.1). With the
    residuals r_i = ℓ'(f_i, y_i) (eq. (7)), ∇_{v_l} 𝓛 = M(Σ_i r_i x_i) ∘ (v_1, …, I, …, v_L).

    ``tensors`` has shape (n, k_1, …, k_L) and ``y`` shape (n,); for R independent runs, each with
    its own data, shapes (R, n, k_1, …, k_L) and (R, n), and the parameters v_l have shape
    (R, k_l). The loss then has one entry per run, or their sum with ``total=True`` (what
    :func:`lib.engine.flow.gradient_flow` integrates: the sum's gradient is each run's own). The
    closure checks the names and shapes of the parameters it gets (their values: the flows do)."""
    y_np = _array(y, "y")
    if y_np.ndim not in (1, 2):
        raise ValueError(f"y must have shape (n,) or (R, n), got {y_np.shape}")
    T = _tensor(tensors, "tensors")
    order = T.ndim - y_np.ndim
    if order < 2 or T.shape[: y_np.ndim] != y_np.shape:
        raise ValueError(
            f"tensors must have shape {y_np.shape} + (k_1, ..., k_L) with L >= 2 (y's shape "
            f"first), got {T.shape}"
        )
    loss = as_choice(loss, "loss", LOSSES)
    total = as_bool(total, "total")
    batched = y_np.ndim == 2
    names = [f"v{i + 1}" for i in range(order)]
    shapes = [(T.shape[0], k) if batched else (k,) for k in T.shape[y_np.ndim:]]
    # the data axis n moved last, so that contracting the k's from the end leaves (R?, n)
    forward = np.moveaxis(T, 1 if batched else 0, -1)

    def closure(params):
        if not isinstance(params, dict) or sorted(params) != sorted(names):
            raise ValueError(f"params must be a dict with keys {names}, got {params!r:.80}")
        vs = []
        for name, shape in zip(names, shapes, strict=True):
            v = params[name]
            if not isinstance(v, torch.Tensor) or v.dtype != torch.float64 or v.shape != shape:
                raise ValueError(f"params[{name!r}] must be a float64 tensor of shape {shape}, "
                                 f"got {v!r:.60}")
            vs.append(v.detach().numpy())
        f = _outputs(forward, vs, batched)
        if loss == "exp":
            e = np.exp(-y_np * f)
            r, value = -y_np * e, e.sum(-1)
        else:
            r = f - y_np
            value = 0.5 * (r * r).sum(-1)
        Mr = np.einsum("rn,rn...->r...", r, T) if batched else _first(T, r, False)
        grads = _gradients(Mr, vs, batched)
        value = value.sum() if total else value
        if not (np.all(np.isfinite(value)) and all(np.all(np.isfinite(g)) for g in grads)):
            raise NumericalFailure("multilinear_gradient: the loss or its gradient overflows "
                                   "float64 (data or parameters too large)")
        return torch.as_tensor(value), {k: torch.from_numpy(g) for k, g in zip(names, grads,
                                                                               strict=True)}

    return closure


def _outputs(forward: np.ndarray, vs: list, batched: bool) -> np.ndarray:
    """f_i = M(x_i) ∘ (v_1, …, v_L) from the data tensors with the example axis last."""
    out = forward
    for v in vs:
        out = _first(out, v, batched)
    return out


# ---------------------------------------------------------------------------------------------
# Theorem 1: singular vectors of tensors (Lim 2005; the paper's eq. (8))
# ---------------------------------------------------------------------------------------------


def _singular_residual(A: np.ndarray, vectors: list) -> tuple[float, float]:
    us = [v / np.linalg.norm(v) for v in vectors]
    s = float(_contract(A, us))
    gaps = [np.linalg.norm(_contract(A, us, layer) - s * u) for layer, u in enumerate(us)]
    return s, float(max(gaps) / np.linalg.norm(A))


def singular_residual(tensor, vectors) -> tuple[float, float]:
    """How far vectors are from a singular tuple of a tensor A (Lim 2005, the paper's eq. (8)):

        s u_l = A ∘ (u_1, …, u_{l−1}, I_{k_l}, u_{l+1}, …, u_L)   for every l.

    The vectors are normalized, u_l = v_l / ‖v_l‖, and s = A ∘ (u_1, …, u_L) (the only value that
    can solve eq. (8) for them). Returns (s, residual), the residual being
    max_l ‖A ∘ (…, I, …) − s u_l‖ / ‖A‖_F: zero exactly at a singular tuple, at most 2 otherwise.
    ``tensor`` has L ≥ 2 modes and is not zero; no vector is zero."""
    A = _tensor(tensor, "tensor")
    if A.ndim < 2 or not np.any(A):
        raise ValueError(f"tensor must be a nonzero tensor with at least 2 modes, got {A.shape}")
    vs = [_nonzero(v, f"vectors[{layer}]") for layer, v in
          enumerate(_vectors(vectors, A.shape, "vectors"))]
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        s, residual = _singular_residual(A, vs)
    return _finite(s, "the singular value"), _finite(residual, "the residual")


def power_method(tensor, start, *, steps: int = 10_000, tol: float = 1e-14):
    """A singular tuple of a tensor (eq. (8)) by the higher-order power method: each u_l in turn
    is replaced by A ∘ (…, I_{k_l}, …) / ‖·‖, until no u_l moves by more than ``tol`` in a sweep.

    It ascends s = A ∘ (u_1, …, u_L) on the product of unit spheres and stops at a singular tuple
    that is a local maximum (the best rank-one approximation is the global one); different
    ``start`` vectors can end at different tuples (the paper, §4.1: eq. (8) usually has many
    solutions). Returns (s, (u_1, …, u_L)); raises a NumericalFailure if an update is zero or
    ``steps`` sweeps do not converge."""
    A = _tensor(tensor, "tensor")
    if A.ndim < 2 or not np.any(A):
        raise ValueError(f"tensor must be a nonzero tensor with at least 2 modes, got {A.shape}")
    us = [_nonzero(v, f"start[{i}]") for i, v in enumerate(_vectors(start, A.shape, "start"))]
    steps = as_int(steps, "steps", minimum=1, maximum=10**7)
    tol = as_float(tol, "tol", minimum=0.0, maximum=1.0, open_minimum=True)
    us = [u / np.linalg.norm(u) for u in us]
    for _ in range(steps):
        moved = 0.0
        for layer in range(A.ndim):
            g = _contract(A, us, layer)
            norm = np.linalg.norm(g)
            if not norm > 0 or not np.isfinite(norm):
                raise NumericalFailure(
                    f"power_method: the update of u_{layer + 1} is zero or overflows"
                )
            new = g / norm
            moved = max(moved, float(np.abs(new - us[layer]).max()))
            us[layer] = new
        if moved <= tol:
            return float(_contract(A, us)), tuple(us)
    raise NumericalFailure(
        f"power_method: no convergence in {steps} sweeps (last move {moved:.1e})"
    )


def direction_path(tensor, vectors, log_norms) -> tuple[np.ndarray, ...]:
    """The direction of gradient flow on one data point, as a function of the parameters' norm.

    With one example (x, y) every loss moves v_l along ±M(x) ∘ (…, I, …) (the paper's §3) and only
    the speed depends on the loss: Θ(t) = V(ν(t)) with dV/dν = ∇p(V), p(Θ) = A ∘ (v_1, …, v_L),
    A = y M(x). Written as Θ = e^λ w with ‖w‖ = 1, λ = log ‖Θ‖, this is the autonomous ODE

        dw/dλ = ∇p(w) / (L p(w)) − w,

    whose rest points with balanced layers (‖w_l‖² = 1/L) are exactly the singular tuples of A
    (eq. (8)). It needs p > 0 (a correctly classified point, which Theorem 1 assumes after t_0).
    ``tensor`` is A (L ≥ 2 modes), ``vectors`` the parameters Θ(t_0) with p(Θ(t_0)) > 0, and
    ``log_norms`` increasing values λ ≥ log ‖Θ(t_0)‖. Returns one array per layer, shape
    (len(log_norms), k_l): the unit-norm w(λ) (so Θ = e^λ w). Integrated by DOP853 (rtol 1e-12)."""
    A = _tensor(tensor, "tensor")
    if A.ndim < 2:
        raise ValueError(f"tensor must have at least 2 modes, got shape {A.shape}")
    vs = _vectors(vectors, A.shape, "vectors")
    grid = _array(log_norms, "log_norms", 1)
    theta = np.concatenate(vs)
    start = float(np.log(np.linalg.norm(theta))) if np.any(theta) else -np.inf
    if not (np.all(np.diff(grid) > 0) and grid[0] >= start - 1e-12 and grid[-1] - start <= 700):
        raise ValueError(
            f"log_norms must increase from log ||Theta(t_0)|| = {start:.6g} on, by at most 700, "
            f"got {grid[0]:.6g} ... {grid[-1]:.6g}"
        )
    L = A.ndim
    if not _contract(A, vs) > 0:
        raise ValueError("the parameters must classify the point correctly: A o (v_1, ..., v_L) "
                         "> 0 (Theorem 1 starts once the loss is below 1)")
    cuts = np.cumsum([0] + list(A.shape))

    def rhs(_, w):
        parts = [w[cuts[layer]:cuts[layer + 1]] for layer in range(L)]
        p = _contract(A, parts)
        return np.concatenate([_contract(A, parts, layer) for layer in range(L)]) / (L * p) - w

    solution = solve_ivp(rhs, (start, grid[-1]), theta / np.linalg.norm(theta), method="DOP853",
                         t_eval=np.maximum(grid, start), rtol=1e-12, atol=1e-14)
    if not solution.success:
        raise NumericalFailure(f"direction_path: {solution.message}")
    W = _finite(solution.y.T, "the direction path")
    return tuple(W[:, cuts[layer]:cuts[layer + 1]] for layer in range(L))


# ---------------------------------------------------------------------------------------------
# Theorem 3 and Corollary 4: one data point, two layers
# ---------------------------------------------------------------------------------------------


def _compact_svd(M: np.ndarray):
    U1, s, U2t = np.linalg.svd(M, full_matrices=False)
    keep = s > _RANK_TOL * s[0]
    return U1[:, keep], s[keep], U2t[keep].T


def theorem3_gap(matrix, v1_bar, v2_bar) -> float:
    """λ = min_j ([U_1ᵀ v̄_1]_j² − [U_2ᵀ v̄_2]_j²) for the compact SVD M(x) = U_1 diag(s) U_2ᵀ
    (numpy's, with consistent signs): Theorems 3 and 5 need λ > 0.

    ``matrix`` is the nonzero k_1 × k_2 data matrix M(x); v̄_1, v̄_2 have lengths k_1, k_2. Where
    singular values repeat the SVD, hence λ, is not unique; the theorems need one SVD with λ > 0."""
    M = _matrix(matrix)
    v1, v2 = _two_layer_init(M, v1_bar, v2_bar)
    U1, _, U2 = _compact_svd(M)
    with np.errstate(over="ignore", invalid="ignore"):
        gap = float(np.min((U1.T @ v1) ** 2 - (U2.T @ v2) ** 2))
    return _finite(gap, "the gap (v1_bar or v2_bar too large for float64)")


def _one_point_parts(M, v1, v2):
    U1, s, U2 = _compact_svd(M)
    m1, m2 = U1.T @ v1, U2.T @ v2
    return U1, s, U2, m1, m2, v1 - U1 @ m1, v2 - U2 @ m2


def _one_point_scales(alpha: float, s, m1, m2) -> None:
    """α² times the curve's coefficients (Theorem 5's g) must stay in float64's normal range."""
    weights = np.concatenate([s * (m1**2 + m2**2), s**2 * (m1**2 + m2**2)])
    if not np.all(np.isfinite(weights)) or not np.any(weights):
        raise ValueError("v1_bar and v2_bar must be finite and not both orthogonal to M's range, "
                         "with squares that fit float64")
    _normal_powers(alpha, weights[weights > 0], (2,), "initial directions")


def one_point_curve(matrix, v1_bar, v2_bar, *, alpha: float, nu) -> tuple[np.ndarray, np.ndarray]:
    """The trajectory of gradient flow on one data point, for any loss, in closed form (the proof
    of the paper's Theorem 5, which holds for the exponential loss of Theorem 3 as well):

        v_1(ν) = α U_1(μ̄_1 ⊙ cosh(νs) + μ̄_2 ⊙ sinh(νs)) + α(I − U_1U_1ᵀ)v̄_1,
        v_2(ν) = α U_2(μ̄_1 ⊙ sinh(νs) + μ̄_2 ⊙ cosh(νs)) + α(I − U_2U_2ᵀ)v̄_2,

    with μ̄_l = U_lᵀ v̄_l and the clock ν(t) = −∫_0^t r. ``nu`` is a number or a 1-D array; returns
    arrays of shapes (len(nu), k_1) and (len(nu), k_2)."""
    M = _matrix(matrix)
    v1, v2 = _two_layer_init(M, v1_bar, v2_bar)
    alpha = as_positive_float(alpha, "alpha")
    nus = np.atleast_1d(_array(nu, "nu"))
    if nus.ndim != 1:
        raise ValueError(f"nu must be a number or a 1-D array, got shape {nus.shape}")
    U1, s, U2, m1, m2, f1, f2 = _one_point_parts(M, v1, v2)
    with np.errstate(over="ignore", invalid="ignore"):
        c, h = np.cosh(np.outer(nus, s)), np.sinh(np.outer(nus, s))
        V1 = alpha * ((m1 * c + m2 * h) @ U1.T + f1)
        V2 = alpha * ((m1 * h + m2 * c) @ U2.T + f2)
    return _finite(V1, "v1(nu) (cosh overflows)"), _finite(V2, "v2(nu) (cosh overflows)")


def one_point_limit(matrix, v1_bar, v2_bar, *, y) -> tuple[np.ndarray, np.ndarray]:
    """The limit directions of v_1 and v_2 on one example with label y (Theorem 3):
    ν → sign(y)·∞ on :func:`one_point_curve`, so the top singular pairs win,

        v_1 / ‖v_1‖ → U_1 c / ‖c‖,   v_2 / ‖v_2‖ → sign(y) U_2 c / ‖c‖,

    c_j = [U_1ᵀv̄_1]_j + sign(y)[U_2ᵀv̄_2]_j for the j with the largest s_j, 0 for the others
    (|η_1^∞| = |η_2^∞| and sign(η_1^∞) = sign(y) ⊙ sign(η_2^∞) as the theorem states; a tied top
    singular value shares the mass as the initialization decides). Needs c ≠ 0, which Theorem 3's
    condition (:func:`theorem3_gap` > 0) guarantees."""
    M = _matrix(matrix)
    v1, v2 = _two_layer_init(M, v1_bar, v2_bar)
    sign = math.copysign(1.0, _label(y))
    U1, s, U2, m1, m2, _, _ = _one_point_parts(M, v1, v2)
    c = np.where(s >= s[0] * (1 - _RANK_TOL), m1 + sign * m2, 0.0)
    if not np.any(c):
        raise ValueError("the top singular components of v1_bar and v2_bar cancel (c = 0): "
                         "Theorem 3's condition fails")
    c = c / np.linalg.norm(c)
    return U1 @ c, sign * (U2 @ c)


def _g(s, m1, m2, alpha, nu):
    """f(ν) = α² g(ν), g(ν) = Σ_j s_j(½(μ̄_1j² + μ̄_2j²) sinh(2s_jν) + μ̄_1j μ̄_2j cosh(2s_jν))."""
    return alpha**2 * np.sum(s * ((m1**2 + m2**2) / 2 * np.sinh(2 * s * nu)
                                  + m1 * m2 * np.cosh(2 * s * nu)))


def one_point_nu(matrix, v1_bar, v2_bar, *, alpha: float, output: float) -> float:
    """The clock ν at which the network's output on :func:`one_point_curve` is ``output``:
    f(ν) = α² g(ν) (Theorem 5's g, strictly increasing when :func:`theorem3_gap` > 0)."""
    M = _matrix(matrix)
    v1, v2 = _two_layer_init(M, v1_bar, v2_bar)
    alpha = as_positive_float(alpha, "alpha")
    output = as_float(output, "output")
    _, s, _, m1, m2, _, _ = _one_point_parts(M, v1, v2)
    _one_point_scales(alpha, s, m1, m2)
    if not np.all(m1**2 > m2**2):
        raise ValueError("theorem3_gap(matrix, v1_bar, v2_bar) must be > 0 (g is then increasing)")
    lo, hi = -1.0 / s[0], 1.0 / s[0]
    with np.errstate(over="ignore", invalid="ignore"):
        while _g(s, m1, m2, alpha, lo) > output and abs(lo) * s[0] <= 300:
            lo *= 2
        while _g(s, m1, m2, alpha, hi) < output and hi * s[0] <= 300:
            hi *= 2
        ends = _g(s, m1, m2, alpha, lo), _g(s, m1, m2, alpha, hi)
    if not (np.isfinite(ends).all() and ends[0] <= output <= ends[1]):
        raise ValueError(f"output = {output:g} lies beyond float64's reach on this curve "
                         f"(|nu| s_max up to 600)")
    return float(brentq(lambda v: _g(s, m1, m2, alpha, v) - output, lo, hi, xtol=1e-15,
                        rtol=4 * np.finfo(float).eps))


def one_point_log_time(matrix, v1_bar, v2_bar, *, alpha: float, y: float, nu: float) -> float:
    """log t at which gradient flow on the exponential loss exp(−y f) of one example reaches the
    clock ν of :func:`one_point_curve`: dν/dt = −r = y e^{−y f(ν)}, so

        t(ν) = ∫_0^ν e^{y f(u)} / y du,   f(u) = α² g(u),

    computed as y f(ν) + log ∫ e^{y f(u) − y f(ν)} |du| (quadrature), so that t far beyond 10^300
    stays finite. ``nu`` must have the sign of ``y`` (the clock moves that way) and the margin
    y f(ν) must be at most 10^6 (beyond, log t equals the margin to a relative 10^−5)."""
    M = _matrix(matrix)
    v1, v2 = _two_layer_init(M, v1_bar, v2_bar)
    alpha = as_positive_float(alpha, "alpha")
    y = _label(y)
    nu = as_float(nu, "nu")
    if nu * y <= 0:
        raise ValueError(f"nu must be nonzero with the sign of y (the clock moves that way), "
                         f"got nu = {nu:g}, y = {y:g}")
    _, s, _, m1, m2, _, _ = _one_point_parts(M, v1, v2)
    _one_point_scales(alpha, s, m1, m2)
    if abs(nu) * s[0] > 350:
        raise ValueError(f"|nu| s_max must be at most 350 (cosh overflows), got {abs(nu) * s[0]:g}")
    top = y * _g(s, m1, m2, alpha, nu)
    if top > 1e6:
        raise ValueError(
            f"the margin y f(nu) = {top:.3g} is above 1e6, where y f(u) - y f(nu) cannot be "
            "resolved in float64; there log t equals the margin to a relative 1e-5"
        )
    slope = alpha**2 * np.sum(2 * s**2 * ((m1**2 + m2**2) / 2 * np.cosh(2 * s * nu)
                                          + m1 * m2 * np.sinh(2 * s * nu)))
    # The integrand is e^{-w} in w = y f(ν) − y f(u): its mass sits within a few 1/f'(ν) of ν,
    # a scale that can be far below |ν|; break points at ν − δ, δ from 1/f'(ν) to |ν|
    # geometrically, guide the quadrature.
    width = min(1.0 / slope, abs(nu) / 2)
    points = nu - math.copysign(1.0, nu) * np.geomspace(width, abs(nu), 60)[:-1]
    integral, _ = quad(lambda u: math.exp(y * _g(s, m1, m2, alpha, u) - top),
                       min(0.0, nu), max(0.0, nu), points=points,
                       epsabs=0.0, epsrel=1e-12, limit=2000)
    if not integral > 0:
        raise NumericalFailure("one_point_log_time: the quadrature underflowed")
    return _finite(top + math.log(integral / abs(y)), "log t")


def corollary4_direction(x, y, *, kernel: int) -> np.ndarray:
    """The limit direction of β for a two-layer convolutional network with a first filter of
    size ``kernel`` ∈ {1, 2} (k_2 = d) on one example (x, y) (the paper's Corollary 4):

    * k_1 = 1: y x (the ℓ2 max-margin direction);
    * k_1 = 2: y(2x + ⟵x + ⟶x) if xᵀ⟵x > 0 (low-pass), y(2x − ⟵x − ⟶x) if xᵀ⟵x < 0
      (high-pass), with ⟵x = (x_2, …, x_d, x_1) and ⟶x = (x_d, x_1, …, x_{d−1}).

    Returns the unit vector. x is a nonzero vector (d ≥ 2 for k_1 = 2, with xᵀ⟵x ≠ 0 beyond
    rounding: the corollary does not decide the tie), y a nonzero label."""
    x = _nonzero(_array(x, "x", 1), "x")
    sign = math.copysign(1.0, _label(y))
    kernel = as_int(kernel, "kernel", minimum=1, maximum=2)
    x = x * np.ldexp(1.0, -np.frexp(np.abs(x).max())[1])  # an exact rescaling to max |x_j| < 1
    if kernel == 1:
        beta = sign * x
    else:
        if len(x) < 2:
            raise ValueError(f"a filter of size 2 needs d >= 2, got d = {len(x)}")
        left, right = np.roll(x, -1), np.roll(x, 1)
        autocorrelation = float(x @ left)
        if abs(autocorrelation) <= 1e-12 * float(x @ x):
            raise ValueError("x's autocorrelation x^T <-x is zero: Corollary 4 gives no direction")
        beta = sign * (2 * x + math.copysign(1.0, autocorrelation) * (left + right))
    with np.errstate(over="ignore", invalid="ignore"):
        norm = np.linalg.norm(beta)
    if not norm > 0:
        raise ValueError("the filtered x is zero: Corollary 4's direction is undefined")
    return _finite(beta / norm, "the direction (x overflows)")


# ---------------------------------------------------------------------------------------------
# Corollary 6 off its hypothesis: data that are not even
# ---------------------------------------------------------------------------------------------


def even_part(x) -> np.ndarray:
    """(x + Rx) / 2 with [Rx]_j = x_{(d−j) mod d} (0-based): the even part of x, the vectors of
    Corollary 6 (x_j = x_{d−j}: symmetric about x_0, whose DFT is real). Rows of a matrix are
    treated one by one."""
    x = _array(x, "x")
    if x.ndim not in (1, 2):
        raise ValueError(f"x must be a vector or a matrix of row vectors, got shape {x.shape}")
    return (x + np.roll(x[..., ::-1], 1, axis=-1)) / 2


def conv_modulus_minimizer(X, y, *, alpha: float, depth: int, w_bar) -> np.ndarray:
    """argmin over real z of Q_{L,α,|Fw̄|}(d^{−(L−1)/2} |Fz|) subject to Xz = y, F the unitary DFT.

    This is Corollary 6's objective (with the factor d^{−(L−1)/2} of its proof), extended to any
    real data through the moduli |[Fz]_j|. On even data and even w̄ its minimizer is Corollary 6's
    limit (the objective is convex and invariant under z ↦ Rz of :func:`even_part`); off even data
    it is only a candidate, and gradient flow does not go there. X is n × d with full row rank and
    n < d, y has shape (n,), w̄ has shape (d,) with no zero entry in Fw̄. BFGS over the null space
    of X with the exact gradient, from the minimum-ℓ2 interpolant."""
    X, y = _array(X, "X", 2), _array(y, "y", 1)
    n, d = X.shape
    if y.shape != (n,) or n >= d or np.linalg.matrix_rank(X) < n:
        raise ValueError(f"X must be n x d with n < d and full row rank and y of shape (n,), "
                         f"got {X.shape} and {y.shape}")
    alpha = as_positive_float(alpha, "alpha")
    depth = as_int(depth, "depth", minimum=2, maximum=tn.MAX_DEPTH)
    w = _array(w_bar, "w_bar", 1)
    if w.shape != (d,):
        raise ValueError(f"w_bar must have shape ({d},), got {w.shape}")
    F = np.exp(-2j * np.pi * np.outer(np.arange(d), np.arange(d)) / d) / np.sqrt(d)
    eta = np.abs(F @ w)
    if np.any(eta <= 1e-12 * eta.max()):
        raise ValueError("F w_bar must have no zero entry (Theorem 4 needs eta_j^2 >= lambda > 0)")
    _normal_powers(alpha, eta, (depth, 2), "F w_bar")
    scale = (alpha * eta) ** depth
    factor = d ** (-(depth - 1) / 2)
    z0 = np.linalg.lstsq(X, y, rcond=None)[0]
    null = np.linalg.svd(X)[2][n:].T

    def objective(u):
        z = z0 + null @ u
        rho = F @ z
        modulus = np.abs(rho)
        value = alpha**2 * np.sum(eta**2 * tn.H_L(factor * modulus / scale, depth))
        # d/dz H(c|ρ_j|/a_j) = h⁻¹(c|ρ_j|/a_j) (c/a_j) Re(conj(ρ_j) F_j)/|ρ_j|; h⁻¹(u) ~ u at 0
        slope = tn.h_L_inverse(factor * modulus / scale, depth) * factor / scale
        unit = np.where(modulus > 0, np.conj(rho) / np.where(modulus > 0, modulus, 1), 0)
        gradient = alpha**2 * np.real((eta**2 * slope * unit) @ F)
        return value, null.T @ gradient

    result = minimize(objective, np.zeros(d - n), jac=True, method="BFGS",
                      options={"gtol": 1e-13, "maxiter": 10_000})
    return _finite(z0 + null @ result.x, "the minimizer")


# ---------------------------------------------------------------------------------------------
# Corollary 7: deep matrix sensing with commuting sensors
# ---------------------------------------------------------------------------------------------


def _sensors(A) -> np.ndarray:
    A = _array(A, "A", 3)
    n, d, e = A.shape
    if d != e or n * d * d > MAX_ENTRIES:
        raise ValueError(f"A must hold n square d x d matrices (at most {MAX_ENTRIES:.0e} "
                         f"entries), got shape {A.shape}")
    scale = max(float(np.abs(A).max()), np.finfo(float).tiny)
    if np.abs(A - A.transpose(0, 2, 1)).max() > 1e-12 * scale:
        raise ValueError("A must hold symmetric matrices (Corollary 7)")
    return A


def simultaneous_eigenbasis(matrices) -> np.ndarray:
    """An orthogonal U with Uᵀ A_i U diagonal for every i, for commuting symmetric A_1, …, A_n
    (shape (n, d, d)); a ValueError if they do not commute (‖A_iA_j − A_jA_i‖ > 1e-10‖A_i‖‖A_j‖).

    Diagonalizes A_1, then A_2 inside each eigenspace of A_1, and so on (eigenvalues closer than
    1e-9 of the largest |eigenvalue| count as one eigenspace), so repeated eigenvalues are fine."""
    A = _sensors(matrices)
    # commutation and eigenvectors are scale-free: each A_i divided by the power of two nearest
    # its largest |entry| (exact) keeps the norms and products finite (entries of 1e300
    # overflowed ‖A_i‖ and passed any test)
    _, exponents = np.frexp(np.abs(A).max(axis=(1, 2), keepdims=True))
    A = np.ldexp(A, -exponents)
    norms = np.linalg.norm(A, axis=(1, 2))
    for i in range(len(A)):
        for j in range(i):
            if np.linalg.norm(A[i] @ A[j] - A[j] @ A[i]) > 1e-10 * norms[i] * norms[j]:
                raise ValueError(f"A[{i}] and A[{j}] do not commute (Corollary 7 needs commuting "
                                 "sensors)")
    return _eigenbasis(A)


def _eigenbasis(A: np.ndarray) -> np.ndarray:
    d = A.shape[1]
    U, groups = np.eye(d), [np.arange(d)]
    for matrix in A:
        tol = 1e-9 * max(float(np.abs(np.linalg.eigvalsh(matrix)).max()), np.finfo(float).tiny)
        refined = []
        for group in groups:
            block = U[:, group]
            values, vectors = np.linalg.eigh(block.T @ matrix @ block)
            U[:, group] = block @ vectors
            cuts = np.flatnonzero(np.diff(values) > tol) + 1
            refined += [group[part] for part in np.split(np.arange(len(group)), cuts)]
        groups = refined
    return U


def matrix_sensing_gradient(A, y):
    """Closed-form ``params -> (loss, gradients)`` of deep matrix sensing (the paper's eq. (13)),

        𝓛_ms(W_1, …, W_L) = Σ_i (y_i − ⟨A_i, W_1 ⋯ W_L⟩)²   (no ½, as in the paper),
        ∇_{W_l} = (W_1 ⋯ W_{l−1})ᵀ G (W_{l+1} ⋯ W_L)ᵀ,   G = 2 Σ_i r_i A_i,  r_i = ⟨A_i, P⟩ − y_i,

    for :mod:`lib.engine.flow`, with params {"W1", …, "WL"} of shape (d, d). A has shape (n, d, d)
    of symmetric matrices, y shape (n,)."""
    A = _sensors(A)
    y = _array(y, "y", 1)
    if y.shape != (A.shape[0],):
        raise ValueError(f"y must have shape ({A.shape[0]},), one entry per sensor, got {y.shape}")
    At, yt = torch.from_numpy(A), torch.from_numpy(y)
    d = A.shape[1]

    def closure(params):
        if not isinstance(params, dict) or not params:
            raise ValueError(f"params must be a dict {{'W1', ..., 'WL'}}, got {params!r:.60}")
        names = [f"W{layer}" for layer in range(1, len(params) + 1)]
        if sorted(params) != sorted(names):
            raise ValueError(f"params must have keys {names}, got {sorted(params)}")
        Ws = [as_tensor(params[k], f"params[{k!r}]", shape=(d, d)) for k in names]
        prefix = [torch.eye(d, dtype=At.dtype)]
        for W in Ws:
            prefix.append(prefix[-1] @ W)
        suffix = [torch.eye(d, dtype=At.dtype)]
        for W in reversed(Ws):
            suffix.append(W @ suffix[-1])
        suffix = suffix[::-1]  # suffix[layer] = W_{layer+1} ⋯ W_L (0-based layer)
        r = torch.einsum("nij,ij->n", At, prefix[-1]) - yt
        G = 2 * torch.einsum("n,nij->ij", r, At)
        grads = {k: prefix[layer].T @ G @ suffix[layer + 1].T for layer, k in enumerate(names)}
        value = (r * r).sum()
        if not (torch.isfinite(value) and all(torch.isfinite(g).all() for g in grads.values())):
            raise NumericalFailure("matrix_sensing_gradient: the loss or its gradient overflows "
                                   "float64 (sensors, labels or parameters too large)")
        return value, grads

    return closure


def _sensing_problem(A, y, alpha, depth):
    A = _sensors(A)
    y = _array(y, "y", 1)
    if y.shape != (A.shape[0],):
        raise ValueError(f"y must have shape ({A.shape[0]},), one entry per sensor, got {y.shape}")
    alpha = as_positive_float(alpha, "alpha")
    depth = as_int(depth, "depth", minimum=2, maximum=tn.MAX_DEPTH)
    return A, y, alpha, depth


def matrix_sensing_limit(A, y, *, alpha: float, depth: int) -> np.ndarray:
    """The limit of W_1(t) ⋯ W_L(t) under gradient flow on :func:`matrix_sensing_gradient` from
    W_l(0) = αI (l < L), W_L(0) = 0, for commuting symmetric, linearly independent sensors
    (n ≤ d) — the paper's Corollary 7:

        M^∞ = argmin_{M symmetric} Q_{L,α}(eig(M)) = α² Σ_j H_L(eig_j(M) / α^L)  s.t. 𝓛_ms(M) = 0.

    In a common eigenbasis U (:func:`simultaneous_eigenbasis`) the layers stay diagonal and the
    eigenvalues follow a diagonal network with w̄ = 1 on the inputs x_i = diag(UᵀA_iU)
    (Appendix F.5), so M^∞ = U diag(z) Uᵀ with z from
    :func:`lib.networks.tensor_nets.diagonal_net_limit`."""
    A, y, alpha, depth = _sensing_problem(A, y, alpha, depth)
    U = simultaneous_eigenbasis(A)
    X = np.einsum("ji,njk,ki->ni", U, A, U)
    z = tn.diagonal_net_limit(X, y, alpha=alpha, depth=depth, w_bar=np.ones(A.shape[1]))
    return (U * z) @ U.T


def matrix_sensing_kkt(A, M, *, alpha: float, depth: int) -> float:
    """How far a symmetric M is from optimal for Corollary 7's problem, as a relative residual:
    ‖G − Π G‖_F / ‖G‖_F, with G = V diag(Q'(λ)) Vᵀ the gradient of M ↦ Q_{L,α}(eig(M)) at
    M = V diag(λ) Vᵀ (Lewis' formula for spectral functions; Q'(λ) = α^{2−L} h_L^{−1}(λ/α^L)) and
    Π the orthogonal projection onto span{A_i}. Q∘eig is convex (Davis), so a feasible M with
    residual 0 is the global minimum over symmetric matrices, whatever basis it is written in.
    ``A`` holds symmetric sensors (n, d, d), ``M`` is d × d and symmetric, not zero."""
    A = _sensors(A)
    alpha = as_positive_float(alpha, "alpha")
    depth = as_int(depth, "depth", minimum=2, maximum=tn.MAX_DEPTH)
    M = _array(M, "M", 2)
    d = A.shape[1]
    if M.shape != (d, d) or np.abs(M - M.T).max() > 1e-10 * max(np.abs(M).max(), 1e-300):
        raise ValueError(f"M must be a symmetric ({d}, {d}) matrix, got shape {M.shape}")
    values, V = np.linalg.eigh((M + M.T) / 2)
    _normal_powers(alpha, [1.0], (depth, 2 - depth), "depth")
    with np.errstate(over="ignore", invalid="ignore"):
        slopes = alpha ** (2 - depth) * tn.h_L_inverse(values / alpha**depth, depth)
    G = (V * slopes) @ V.T
    basis = A.reshape(len(A), -1).T
    coefficients_, *_ = np.linalg.lstsq(basis, G.ravel(), rcond=None)
    norm = np.linalg.norm(G)
    if not norm > 0:
        raise ValueError("M must not be zero (the gradient of Q vanishes there)")
    return float(_finite(np.linalg.norm(G.ravel() - basis @ coefficients_) / norm, "the residual"))
