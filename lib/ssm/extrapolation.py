"""Linear RNNs that learn low-dimensional state spaces (Cohen-Karlik et al. 2023).

A single-input single-output linear RNN s_{t+1} = A s_t + B x_t, y_t = C s_t has the impulse
response h_j = C A^j B. With whitened inputs its population loss on sequences of length k is

    L(A, B, C) = Σ_{j<k} (h_j − w_j)²                                         (Lemma E.1)

for the teacher's impulse response w. A *balanced* student (B = Cᵀ, A symmetric, hence
diagonalizable to A = diag(a), B = Cᵀ = b) has h_j = Σ_i b_i² a_i^j: the j-th moment of the
discrete distribution with atoms a_i and masses b_i² (up to the total mass h_0). This module holds:

* teachers given as such distributions, and the Hankel and Gauss–Radau tools of the moment view
  (Lemma 7, Theorem 5, Lemma A.1);
* the balanced diagonal student's flow in closed form, with its Jacobian for the stiff solver, and
  :func:`extrapolation_sweep`, which trains it by gradient flow to (numerically) zero loss;
* the same student under Adam, and general (dense, non-symmetric, unbalanced) students, with
  closed-form gradients and per-run training lengths k, for
  :func:`lib.engine.flow.gradient_descent`.

The flows and the Adam runs go through the compiled kernels of
:mod:`lib.ssm._extrapolation_kernels` by default (``engine="compiled"``); ``engine="torch"`` runs
the same equations through the generic engines of :mod:`lib.engine.flow`, which the tests compare
them with. """

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numpy.polynomial import legendre
from scipy.integrate import odeint

from lib.engine.flow import Trajectory, gradient_descent, gradient_flow, log_grid
from lib.engine.validation import (
    DTYPE,
    MAX_ENTRIES,
    MAX_STEPS,
    NumericalFailure,
    as_array,
    as_callable,
    as_choice,
    as_int,
    as_list,
    as_positive_float,
    as_seed,
    as_seeds,
    as_size,
    as_steps,
    as_tensor,
    check_closure_params,
    check_finite_result,
    check_magnitude,
    check_params,
    describe,
)
from lib.ssm import _extrapolation_kernels as fx
from lib.ssm.diagonal import SSM, impulse_response

ENGINES = ("compiled", "torch")
"""``compiled``: the kernels of :mod:`lib.ssm._extrapolation_kernels`; ``torch``: lib.engine.flow's
engines."""

# --------------------------------------------------------------------------------------------
# Teachers and the moment view
# --------------------------------------------------------------------------------------------


def moment_teacher(eigenvalues, weights) -> SSM:
    """The balanced diagonal teacher A = diag(λ), B = Cᵀ = √p: impulse response w_j = Σ_i p_i λ_i^j.

    ``weights`` p must be non-negative (they are masses b_i²). The impulse response is then the
    moment sequence of the distribution with atoms λ_i and masses p_i.
    """
    eigenvalues = as_tensor(eigenvalues, "eigenvalues", ndim=1)
    weights = as_tensor(weights, "weights", ndim=1)
    if eigenvalues.shape != weights.shape or eigenvalues.numel() == 0:
        raise ValueError(
            f"eigenvalues and weights must be non-empty and of equal length, got "
            f"{eigenvalues.numel()} and {weights.numel()}"
        )
    if bool((weights < 0).any()):
        raise ValueError("weights of a balanced teacher are masses b_i² and must be >= 0")
    root = weights.sqrt()
    return SSM(eigenvalues.clone(), root, root.clone())


def moment_sequence(eigenvalues, weights, length: int) -> torch.Tensor:
    """w_j = Σ_i p_i λ_i^j for j = 0, …, length − 1 (the teacher's impulse response)."""
    return impulse_response(*moment_teacher(eigenvalues, weights), length)


def hankel(sequence, size: int) -> torch.Tensor:
    """The (size × size) Hankel matrix H_{ij} = m_{i+j}, built from m_0, …, m_{2·size−2}."""
    sequence = as_tensor(sequence, "sequence", ndim=1)
    size = as_int(size, "size", minimum=1)
    if sequence.numel() < 2 * size - 1:
        raise ValueError(
            f"a {size}×{size} Hankel matrix needs {2 * size - 1} entries, got {sequence.numel()}"
        )
    index = torch.arange(size)
    return sequence[index[:, None] + index[None, :]]


def hankel_rank(sequence, size: int, *, rtol: float = 1e-8) -> int:
    """Numerical rank of :func:`hankel`: singular values above rtol × the largest.

    For a moment sequence of a distribution with n atoms (and size > n) it equals n: the order
    of the smallest linear RNN with this impulse response (its McMillan degree).
    """
    rtol = as_positive_float(rtol, "rtol")
    singular = torch.linalg.svdvals(hankel(sequence, size))
    if singular[0] == 0:
        return 0
    return int((singular > rtol * singular[0]).sum())


def lemma_a1_pair(n: int) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """Two balanced, stable, non-degenerate n-atom teachers that agree on w_0, …, w_{2n−2}.

    Lemma A.1 of Cohen-Karlik et al. 2023 asserts such a pair exists; we build one from the two
    n-point Gauss–Radau quadrature rules of the uniform distribution on [−1, 1], one with a node
    fixed at −1 and its mirror image with a node at +1. Each rule integrates every polynomial of
    degree ≤ 2n − 2 exactly, so both reproduce the uniform distribution's moments up to order
    2n − 2; the odd moment 2n − 1 of one is minus that of the other, and non-zero. Atoms lie in
    [−1, 1] (stable) and masses are positive and sum to 1.

    Returns ``((eigenvalues_1, weights_1), (eigenvalues_2, weights_2))``.
    """
    n = as_int(n, "n", minimum=1, maximum=math.isqrt(MAX_ENTRIES))  # Legendre series: n × n
    if n == 1:
        first = (torch.tensor([-1.0], dtype=DTYPE), torch.tensor([1.0], dtype=DTYPE))
    else:
        # Radau nodes with x = −1 fixed: −1 and the roots of (P_{n−1} + P_n)(x) / (1 + x).
        coefficients = np.zeros(n + 1)
        coefficients[n - 1] = coefficients[n] = 1.0
        roots = np.sort(legendre.legroots(coefficients).real)
        nodes = np.concatenate([[-1.0], roots[np.abs(roots + 1.0) > 1e-9]])
        p_previous = legendre.legval(nodes, np.eye(n)[n - 1])
        weights = (1.0 - nodes) / (n**2 * p_previous**2)
        weights[0] = 2.0 / n**2
        first = (torch.from_numpy(nodes), torch.from_numpy(weights / weights.sum()))
    second = (-first[0].flip(0), first[1].flip(0).clone())
    return first, second


def tail_error(h, w, k: int, horizon: int | None = None) -> torch.Tensor:
    """max_{k ≤ j < horizon} |h_j − w_j|: the error beyond the training window (the paper's metric).

    ``h`` has shape ``(..., L)``, ``w`` shape ``(L,)``; ``horizon`` defaults to L.
    """
    h = as_tensor(h, "h", min_ndim=1)
    w = as_tensor(w, "w", ndim=1)
    if h.shape[-1] != w.shape[0]:
        raise ValueError(f"h and w must have the same length, got {h.shape[-1]} and {w.shape[0]}")
    horizon = w.shape[0] if horizon is None else as_int(horizon, "horizon", minimum=1)
    k = as_int(k, "k", minimum=0)
    if not k < horizon <= w.shape[0]:
        raise ValueError(f"need k < horizon <= {w.shape[0]}, got k = {k}, horizon = {horizon}")
    return (h[..., k:horizon] - w[k:horizon]).abs().amax(-1)


def population_loss(h, w, k: int) -> torch.Tensor:
    """L = Σ_{j<k} (h_j − w_j)² (Lemma E.1: the expected square loss for whitened inputs)."""
    h = as_tensor(h, "h", min_ndim=1)
    w = as_tensor(w, "w", ndim=1)
    k = as_int(k, "k", minimum=1)
    if h.shape[-1] < k or w.shape[0] < k:
        raise ValueError(f"h and w need at least k = {k} entries")
    return check_finite_result(((h[..., :k] - w[:k]) ** 2).sum(-1), "the population loss")


# --------------------------------------------------------------------------------------------
# The balanced diagonal student: gradient flow on the invariant manifold B = Cᵀ = b
# --------------------------------------------------------------------------------------------


def _check_runs(tensor: torch.Tensor, runs: int) -> None:
    if tensor.ndim < 2 or tensor.shape[0] != runs:
        raise ValueError(
            f"one training length per run: {runs} lengths, but parameters of shape "
            f"{tuple(tensor.shape)} (expected a leading run axis of {runs})"
        )


def _masks(ks, length: int) -> torch.Tensor:
    ks = torch.as_tensor(list(ks))
    return (torch.arange(length)[None, :] < ks[:, None]).to(DTYPE)


def balanced_field(w, k: int):
    """Closed forms of the balanced student's gradient flow, on its invariant manifold.

    Gradient flow on (A, B, C) from B = Cᵀ keeps B = Cᵀ (Lemma 6), so with A = diag(a) and
    B = Cᵀ = b it reduces to, with r_j = h_j − w_j and h_j = Σ_i b_i² a_i^j (j < k),

        ȧ_i = −∂L/∂a_i = −2 b_i² Σ_j j r_j a_i^{j−1},   ḃ_i = −∂L/∂B_i = −2 b_i Σ_j r_j a_i^j.

    (Differentiating L(a, b) with one shared b would double ḃ; see the note's pitfall 2.)
    Returns ``(gradient, jacobian)`` closures for :func:`lib.engine.flow.gradient_flow` on
    parameters ``{"a": (d,), "b": (d,)}``: the field (∂L/∂a, ∂L/∂B) and its (2d × 2d) Jacobian.
    """
    w = check_magnitude(as_tensor(w, "w", ndim=1, detach=True), "w")
    k = as_int(k, "k", minimum=1)
    if w.shape[0] < k:
        raise ValueError(f"w needs at least k = {k} entries, got {w.shape[0]}")
    # The arithmetic runs in NumPy on the tensors' buffers: an ODE solve calls these closures
    # thousands of times on a few dozen numbers, where torch's per-operation overhead would cost
    # several times the arithmetic.
    target = w[:k].numpy()
    j = np.arange(k, dtype=np.float64)[:, None]

    def pieces(a, b):
        powers = np.empty((k, a.size))  # a^j
        powers[0] = 1.0
        np.cumprod(np.broadcast_to(a, (k - 1, a.size)), axis=0, out=powers[1:])
        slopes = np.empty_like(powers)  # j a^{j−1}
        slopes[0] = 0.0
        np.multiply(j[1:], powers[:-1], out=slopes[1:])
        residual = powers @ (b * b) - target
        return powers, slopes, residual

    def parameters(params) -> tuple[np.ndarray, np.ndarray]:
        checked = check_closure_params(params, "params", {"a": (None,), "b": (None,)},
                                       what="balanced_field's closures", finite=False)
        a, b = checked["a"].detach().numpy(), checked["b"].detach().numpy()
        if a.shape != b.shape:
            raise ValueError(f"params['a'] and params['b'] must have equal shapes (d,), got "
                             f"{a.shape} and {b.shape}")
        return a, b

    def gradient(params):
        a, b = parameters(params)
        powers, slopes, residual = pieces(a, b)
        return torch.from_numpy(np.asarray((residual**2).sum())), {
            "a": torch.from_numpy(2 * b * b * (residual @ slopes)),
            "b": torch.from_numpy(2 * b * (residual @ powers)),
        }

    def jacobian(params):
        a, b = parameters(params)
        d = a.shape[0]
        powers, slopes, residual = pieces(a, b)
        curvature = np.zeros_like(slopes)  # j(j−1)a^{j−2}
        curvature[1:] = j[1:] * slopes[:-1]
        # d r_j / d(a, b): (k, 2d); the field F = Σ_j r_j G_j with G_j = (2 b² j a^{j−1}, 2 b a^j)
        dr = np.hstack([b * b * slopes, 2 * b * powers])
        g_rows = np.hstack([2 * b * b * slopes, 2 * b * powers])  # G_j, (k, 2d)
        matrix = g_rows.T @ dr
        index = np.arange(d)
        matrix[index, index] += 2 * b * b * (residual @ curvature)
        matrix[index, d + index] += 4 * b * (residual @ slopes)
        matrix[d + index, index] += 2 * b * (residual @ slopes)
        matrix[d + index, d + index] += 2 * (residual @ powers)
        return torch.from_numpy(matrix)

    return gradient, jacobian


def balanced_init(d: int, seed: int, *, init_scale: float) -> dict[str, torch.Tensor]:
    """a, b with i.i.d. N(0, init_scale²) entries from ``numpy.random.RandomState(seed)``."""
    d = as_int(d, "d", minimum=1, maximum=10**7)
    seed = as_seed(seed)
    init_scale = as_positive_float(init_scale, "init_scale")
    rng = np.random.RandomState(seed)
    return {
        "a": torch.from_numpy(rng.normal(0.0, init_scale, d)),
        "b": torch.from_numpy(rng.normal(0.0, init_scale, d)),
    }


BALANCED_FLOW_LIMIT = 1e12
"""The longest time :func:`balanced_flow` integrates (the book uses 1e8)."""


def balanced_flow(
    w,
    k: int,
    params: dict[str, torch.Tensor],
    *,
    time: float = 1e8,
    points: int = 2,
    engine: str = "compiled",
) -> Trajectory:
    """Gradient flow of the balanced student on Σ_{j<k}(h_j − w_j)², in log time up to ``time``.

    LSODA with the closed-form Jacobian of :func:`balanced_field`: the flow approaches a zero-loss
    set that is degenerate (many atoms, few constraints), where a stiff solver without a Jacobian
    would spend its effort on finite differences. Recorded at 0 and ``points − 1`` log-spaced times.

    ``engine="compiled"`` hands LSODA (:func:`scipy.integrate.odeint`, rtol 1e-10, atol 1e-14, in
    τ = log(1 + t) as :func:`lib.engine.flow.gradient_flow` integrates) the compiled field and
    Jacobian of
    :mod:`lib.ssm._extrapolation_kernels` directly, some fifteen times faster than
    ``engine="torch"``, which solves the same equations through
    :func:`lib.engine.flow.gradient_flow` and :func:`balanced_field`. """
    time = as_positive_float(time, "time")
    if time > BALANCED_FLOW_LIMIT:
        raise ValueError(
            f"time must be at most {BALANCED_FLOW_LIMIT:.0e}, got {time:.3g}: the flow has long "
            "reached zero loss there, and LSODA's work grows without end (t = 1e20 took 78 586 "
            "evaluations, twenty seconds)"
        )
    points = as_int(points, "points", minimum=2, maximum=10**6)
    engine = as_choice(engine, "engine", ENGINES)
    gradient, jacobian = balanced_field(w, k)
    params = check_params(params)
    if set(params) != {"a", "b"} or params["a"].ndim != 1 or params["a"].shape != params["b"].shape:
        raise ValueError(
            "params must be {'a': (d,), 'b': (d,)} of one length, got "
            + ", ".join(f"{key} {tuple(v.shape)}" for key, v in params.items())
        )
    grid = log_grid(time, points)
    if engine == "compiled":
        target = as_array(w, "w", ndim=1)[: as_int(k, "k", minimum=1)]
        return _compiled_balanced_flow(target, params, grid)
    return gradient_flow(
        None,
        params,
        grid,
        log_time=True,
        rtol=1e-10,
        atol=1e-14,
        gradient=gradient,
        hessian=jacobian,
    )


def _compiled_balanced_flow(target: np.ndarray, params, grid: np.ndarray) -> Trajectory:
    """:func:`balanced_flow` with the compiled field: LSODA in τ = log(1 + t) on ``grid`` (t)."""
    target = np.ascontiguousarray(target, dtype=np.float64)
    theta0 = np.concatenate([params["a"].numpy(), params["b"].numpy()])
    taus = np.log1p(grid)
    states, out = odeint(
        fx.balanced_log_time_rhs,
        theta0,
        taus,
        args=(target,),
        Dfun=fx.balanced_log_time_jacobian,
        tfirst=True,
        rtol=1e-10,
        atol=1e-14,
        mxstep=10**8,
        full_output=True,
    )
    if out["message"] != "Integration successful." or not np.isfinite(states).all():
        raise NumericalFailure(f"balanced_flow: the ODE solver failed ({out['message']})")
    d = theta0.shape[0] // 2
    k = target.shape[0]
    scratch = (np.empty(2 * d), np.empty((k, d)), np.empty((k, d)), np.empty(k))
    losses = np.array([fx.balanced_loss_gradient(s, target, *scratch) for s in states])
    info = {"nfev": int(out["nfe"][-1]), "njev": int(out["nje"][-1]), "message": out["message"]}
    return Trajectory(
        times=grid.copy(),
        params={"a": states[:, :d].copy(), "b": states[:, d:].copy()},
        losses=losses,
        info=info,
    )


def extrapolation_sweep(
    eigenvalues,
    weights,
    ks: Sequence[int],
    *,
    d: int = 40,
    seeds: Sequence[int] = (0, 1, 2),
    init_scale: float = 1e-3,
    horizon: int = 100,
    time: float = 1e8,
    engine: str = "compiled",
    full_output: bool = False,
) -> np.ndarray | dict[str, np.ndarray]:
    """Tail errors max_{k≤j<horizon} |h_j − w_j| of balanced students trained to zero loss.

    For each k and seed: a balanced diagonal student of dimension d from :func:`balanced_init`,
    gradient flow on the population loss over the first k impulse entries of the teacher
    (:func:`moment_teacher`) up to ``time`` (log time), then the tail error of its impulse
    response. Returns an array of shape ``(len(ks), len(seeds))``. ``engine`` as in
    :func:`balanced_flow`.

    With ``full_output=True`` it returns a dict of three such arrays instead: ``"errors"`` (the
    tail errors), ``"losses"`` (the final population losses Σ_{j<k}(h_j − w_j)², Lemma E.1,
    where the solver stopped) and ``"max_abs_atom"`` (max_i |a_i| of the final student: above 1
    the tail grows without bound beyond the horizon).
    """
    ks = [as_int(k, "k", minimum=1) for k in as_list(ks, "ks")]
    seeds = as_seeds(seeds)
    horizon = as_size(horizon, "horizon", minimum=2, per=as_int(d, "d", minimum=1))
    if not isinstance(full_output, bool):
        raise ValueError(f"full_output must be True or False, got {full_output!r}")
    if not ks or not seeds or max(ks) >= horizon:
        raise ValueError(f"need non-empty ks and seeds with every k < horizon = {horizon}")
    w = moment_sequence(eigenvalues, weights, horizon)
    errors = np.zeros((len(ks), len(seeds)))
    losses = np.zeros_like(errors)
    max_abs_atom = np.zeros_like(errors)
    for row, k in enumerate(ks):
        for column, seed in enumerate(seeds):
            start = balanced_init(d, seed, init_scale=init_scale)
            flow = balanced_flow(w, k, start, time=time, engine=engine)
            final = flow.final
            h = impulse_response(final["a"], final["b"], final["b"], horizon)
            errors[row, column] = tail_error(h, w, k).item()
            losses[row, column] = population_loss(h, w, k).item()
            max_abs_atom[row, column] = final["a"].abs().max().item()
    if full_output:
        return {"errors": errors, "losses": losses, "max_abs_atom": max_abs_atom}
    return errors


# --------------------------------------------------------------------------------------------
# Many students at once under Adam: balanced diagonal, and general dense
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DescentField:
    """The closed-form gradient of R students' population losses, with what defines it.

    Calling it, ``field(params) -> (losses (R,), {name: gradient})``, is the torch closure that
    :func:`lib.engine.flow.gradient_descent` takes; ``kind`` ("balanced" or "general"), ``target``
    (w_0, …, w_{max k − 1}) and ``ks`` (run r's loss covers its first ks[r] entries) let
    :func:`train_adam` run the same loss through its compiled loop instead.
    """

    kind: str
    target: np.ndarray
    ks: tuple[int, ...]
    gradient: Callable

    def __post_init__(self):
        """Check what the compiled loop reads: a known kind, a finite float64 target of at least
        max(ks) entries, positive training lengths, a callable gradient."""
        as_choice(self.kind, "kind", tuple(fx.KINDS))
        target = self.target
        if not isinstance(target, np.ndarray) or target.dtype != np.float64 or target.ndim != 1:
            raise ValueError(
                f"target must be a 1-D float64 numpy array (w_0, …), got {describe(target)}"
            )
        if not np.all(np.isfinite(target)):
            raise ValueError("target must be finite, got non-finite entries (nan or inf)")
        if not isinstance(self.ks, tuple):
            raise ValueError(f"ks must be a tuple of training lengths, got {describe(self.ks)}")
        ks = [as_int(k, f"ks[{i}]", minimum=1) for i, k in enumerate(as_list(self.ks, "ks"))]
        if max(ks) > target.shape[0]:
            raise ValueError(
                f"target needs at least max(ks) = {max(ks)} entries, got {target.shape[0]}"
            )
        as_callable(self.gradient, "gradient", "params -> (losses, gradients)")

    def __call__(self, params):
        return self.gradient(params)


def balanced_descent_field(w, ks: Sequence[int]):
    """The balanced field of :func:`balanced_field` for R runs with training lengths ``ks``.

    Parameters ``{"a": (R, d), "b": (R, d)}``; run r's loss covers the first ks[r] entries.
    A :class:`DescentField`: a ``gradient`` closure for :func:`lib.engine.flow.gradient_descent`
    with ``runs = R``, which :func:`train_adam` also runs compiled.
    """
    w = check_magnitude(as_tensor(w, "w", ndim=1, detach=True), "w")
    ks = [as_int(k, "k", minimum=1) for k in as_list(ks, "ks")]
    length = max(ks)
    if w.shape[0] < length:
        raise ValueError(f"w needs at least max(ks) = {length} entries")
    mask = _masks(ks, length)  # (R, K)
    j = torch.arange(length, dtype=DTYPE).unsqueeze(-1)
    target = w[:length]

    def gradient(params):
        checked = check_closure_params(params, "params", {"a": None, "b": None}, finite=False,
                                       what="balanced_descent_field's gradient")
        a, b = checked["a"], checked["b"]  # (R, d)
        _check_runs(a, len(ks))
        if a.ndim != 2 or b.shape != a.shape:
            raise ValueError(f"params['a'] and params['b'] must both have shape (R, d), got "
                             f"{tuple(a.shape)} and {tuple(b.shape)}")
        repeated = a.unsqueeze(-2).expand(*a.shape[:-1], length - 1, a.shape[-1])
        powers = torch.cat([torch.ones_like(a).unsqueeze(-2), torch.cumprod(repeated, -2)], -2)
        shifted = torch.cat([torch.zeros_like(a).unsqueeze(-2), powers[..., :-1, :]], -2)
        residual = mask * ((powers @ (b * b).unsqueeze(-1)).squeeze(-1) - target)  # (R, K)
        u = residual.unsqueeze(-2)
        grad_a = 2 * b * b * (u @ (j * shifted)).squeeze(-2)
        grad_b = 2 * b * (u @ powers).squeeze(-2)
        return (residual**2).sum(-1), {"a": grad_a, "b": grad_b}

    return DescentField("balanced", target.numpy(), tuple(ks), gradient)


def linear_rnn_response(a, b, c, length: int) -> torch.Tensor:
    """h_j = C A^j B for j < length; dense A of shape ``(..., d, d)``, B and C of shape (..., d)."""
    a = as_tensor(a, "A", min_ndim=2)
    b = as_tensor(b, "B", min_ndim=1)
    c = as_tensor(c, "C", min_ndim=1)
    length = as_int(length, "length", minimum=1, maximum=10**6)
    if a.shape[-1] != a.shape[-2] or b.shape != a.shape[:-1] or c.shape != b.shape:
        raise ValueError(
            f"expected A (..., d, d), B and C (..., d); got {tuple(a.shape)}, {tuple(b.shape)}, "
            f"{tuple(c.shape)}"
        )
    as_size(length, "length", per=b.numel())
    response = (_krylov(a, b, length) * c.unsqueeze(-2)).sum(-1)
    return check_finite_result(response, "the impulse response")


def _krylov(a: torch.Tensor, start: torch.Tensor, length: int) -> torch.Tensor:
    """(start, A start, …, A^{length−1} start), shape (..., length, d)."""
    vectors = [start]
    for _ in range(length - 1):
        vectors.append((a @ vectors[-1].unsqueeze(-1)).squeeze(-1))
    return torch.stack(vectors, dim=-2)


def general_descent_field(w, ks: Sequence[int]):
    """Closed-form gradient of Σ_{j<k_r} (C A^j B − w_j)² for R dense students.

    With u_m = A^m B, v_m = (Aᵀ)^m Cᵀ and r_j = h_j − w_j (zero for j ≥ k_r):

        ∂L/∂B = 2 Σ_j r_j v_j,   ∂L/∂C = 2 Σ_j r_j u_j,   ∂L/∂A = Σ_{m,n} 2 r_{m+n+1} v_m u_nᵀ,

    the last a Hankel matrix of residuals sandwiched between Krylov bases (no matrix powers).
    Parameters ``{"A": (R, d, d), "B": (R, d), "C": (R, d)}``; a :class:`DescentField`.
    """
    w = check_magnitude(as_tensor(w, "w", ndim=1, detach=True), "w")
    ks = [as_int(k, "k", minimum=1) for k in as_list(ks, "ks")]
    length = max(ks)
    if w.shape[0] < length:
        raise ValueError(f"w needs at least max(ks) = {length} entries")
    mask = _masks(ks, length)
    index = torch.arange(length)
    shift = index[:, None] + index[None, :] + 1  # m + n + 1
    valid = shift < length
    shift = shift.clamp(max=length - 1)
    target = w[:length]

    def gradient(params):
        checked = check_closure_params(params, "params", {"A": None, "B": None, "C": None},
                                       finite=False, what="general_descent_field's gradient")
        a, b, c = checked["A"], checked["B"], checked["C"]
        _check_runs(b, len(ks))
        if b.ndim != 2 or c.shape != b.shape or a.shape != (*b.shape, b.shape[-1]):
            raise ValueError(f"params must have A (R, d, d), B and C (R, d), got "
                             f"{tuple(a.shape)}, {tuple(b.shape)}, {tuple(c.shape)}")
        u = _krylov(a, b, length)  # (R, K, d)
        v = _krylov(a.transpose(-1, -2), c, length)
        residual = mask * ((u * c.unsqueeze(-2)).sum(-1) - target)  # (R, K)
        hankel_residual = 2 * residual[..., shift] * valid  # (R, K, K)
        grad_a = v.transpose(-1, -2) @ hankel_residual @ u
        grad_b = 2 * (residual.unsqueeze(-2) @ v).squeeze(-2)
        grad_c = 2 * (residual.unsqueeze(-2) @ u).squeeze(-2)
        return (residual**2).sum(-1), {"A": grad_a, "B": grad_b, "C": grad_c}

    return DescentField("general", target.numpy(), tuple(ks), gradient)


def general_init(d: int, seeds: Sequence[int], *, init_scale: float) -> dict[str, torch.Tensor]:
    """Dense A, B, C with i.i.d. N(0, init_scale²) entries, one student per seed (RandomState)."""
    d = as_int(d, "d", minimum=1, maximum=10**4)
    init_scale = as_positive_float(init_scale, "init_scale")
    draws = []
    for seed in as_seeds(seeds):
        rng = np.random.RandomState(seed)
        draws.append([rng.normal(0.0, init_scale, shape) for shape in ((d, d), (d,), (d,))])
    return {
        name: torch.from_numpy(np.stack([draw[i] for draw in draws]))
        for i, name in enumerate(("A", "B", "C"))
    }


def delay_teacher(d_hat: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The delay teacher of App. C.2.2: Â the upper shift, B̂ = e_{d̂}, Ĉ = e_1ᵀ.

    Its impulse response is 1 at j = d̂ − 1 and 0 elsewhere: long memory, low dimension, and not
    representable by a balanced symmetric student (its h_0 = 0 would force zero mass).
    """
    d_hat = as_int(d_hat, "d_hat", minimum=1, maximum=math.isqrt(MAX_ENTRIES))  # Â is d̂ × d̂
    a = torch.diag(torch.ones(d_hat - 1, dtype=DTYPE), 1)
    b = torch.zeros(d_hat, dtype=DTYPE)
    b[-1] = 1.0
    c = torch.zeros(d_hat, dtype=DTYPE)
    c[0] = 1.0
    return a, b, c


def train_adam(
    field,
    params: dict[str, torch.Tensor],
    runs: int,
    *,
    lr: float,
    steps: int,
    milestones: Sequence[int] = (),
    record_every: int = 100,
    engine: str = "compiled",
) -> Trajectory:
    """Adam on R runs at once, with the learning rate divided by 10 at each of ``milestones``.

    (A MultiStepLR schedule as in App. B.1.2; each phase is one call of the engine, continuing
    from where the previous ended, so Adam's moment estimates restart at each milestone.)

    ``engine="torch"`` runs each phase through :func:`lib.engine.flow.gradient_descent` with
    ``field`` as its closed-form gradient. ``engine="compiled"`` (the default) runs each run's
    whole loop compiled (:func:`lib.ssm._extrapolation_kernels.adam_runs`), ten to forty times
    faster; it needs a
    :class:`DescentField` from :func:`balanced_descent_field` or :func:`general_descent_field`.
    Both record at every multiple of ``record_every`` and at the last step; ``info["diverged"]``
    flags the runs stopped (and frozen) by a non-finite loss or gradient.
    """
    as_callable(field, "field", "params -> (losses, gradients)")
    runs = as_int(runs, "runs", minimum=1)
    lr = as_positive_float(lr, "lr")
    params = check_params(params)
    per_record = sum(v.numel() for v in params.values()) + runs
    steps, record_every = as_steps(steps, record_every, per_record=per_record, minimum=1)
    engine = as_choice(engine, "engine", ENGINES)
    if not isinstance(milestones, (list, tuple, range)):
        raise ValueError(f"milestones must be a list of step numbers, got {milestones!r:.60}")
    checked = [as_int(m, f"milestones[{i}]", minimum=1) for i, m in enumerate(milestones)]
    if any(later <= earlier for earlier, later in zip(checked, checked[1:], strict=False)):
        raise ValueError(f"milestones must be strictly increasing, got {checked}")
    if engine == "compiled":
        params = _check_compiled_params(field, params, runs)

        def phase(current, rate, count):
            return _compiled_adam(field, current, rate, count, record_every)

    else:

        def phase(current, rate, count):
            return gradient_descent(
                None,
                current,
                rate,
                count,
                optimizer="adam",
                runs=runs,
                gradient=field,
                record_every=record_every,
            )

    bounds = [0, *[m for m in checked if m < steps], steps]
    pieces, current = [], params
    for number, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        piece = phase(current, lr * 0.1**number, stop - start)
        pieces.append((start, piece))
        current = piece.final
    times = np.concatenate([p.times[:-1] + s for s, p in pieces] + [[steps]])
    history = {
        k: np.concatenate([p.params[k][:-1] for _, p in pieces] + [pieces[-1][1].params[k][-1:]])
        for k in params
    }
    losses = np.concatenate([p.losses[:-1] for _, p in pieces] + [pieces[-1][1].losses[-1:]])
    diverged = np.any([p.info["diverged"] for _, p in pieces], axis=0).tolist()
    info = {"optimizer": "adam", "engine": engine, "diverged": diverged}
    return Trajectory(times=times, params=history, losses=losses, info=info)


_COMPILED_SHAPES = {"balanced": {"a": 1, "b": 1}, "general": {"A": 2, "B": 1, "C": 1}}


def _check_compiled_params(field, params: dict[str, torch.Tensor], runs: int):
    """The parameters of R runs of ``field``'s students, checked for the compiled engine."""
    if not isinstance(field, DescentField):
        raise ValueError(
            "engine='compiled' needs a field from balanced_descent_field or general_descent_field"
            f", got {type(field).__name__}; use engine='torch' for other gradients"
        )
    if len(field.ks) != runs:
        raise ValueError(f"one training length per run: {len(field.ks)} lengths, runs = {runs}")
    shapes = _COMPILED_SHAPES[field.kind]  # name: number of axes of length d after the run axis
    last = list(shapes)[-1]
    d = params[last].shape[-1] if set(params) == set(shapes) and params[last].ndim else 0
    if d == 0 or any(tuple(params[n].shape) != (runs, *(d,) * m) for n, m in shapes.items()):
        wanted = ", ".join(f"{name} (R, {', '.join(['d'] * m)})" for name, m in shapes.items())
        got = ", ".join(f"{key} {tuple(v.shape)}" for key, v in params.items())
        raise ValueError(f"{field.kind} students need {wanted} with R = {runs}; got {got}")
    return {name: params[name] for name in shapes}


def _compiled_adam(field: DescentField, params, lr: float, steps: int, record_every: int):
    """One phase of :func:`train_adam` through the compiled loop, as a Trajectory with run axis."""
    names = list(_COMPILED_SHAPES[field.kind])
    runs, d = params[names[-1]].shape
    flat = np.concatenate([params[n].reshape(runs, -1).numpy() for n in names], axis=1)
    targets = [field.target[:k] for k in field.ks]
    times, states, losses, diverged = fx.adam_runs(
        field.kind, flat, targets, d=d, lr=lr, steps=steps, record_every=record_every
    )
    history, start = {}, 0
    for name in names:
        shape = tuple(params[name].shape)
        size = int(np.prod(shape[1:]))
        history[name] = states[:, :, start : start + size].reshape((len(times), *shape))
        start += size
    return Trajectory(times=times, params=history, losses=losses, info={"diverged": diverged})


# --------------------------------------------------------------------------------------------
# Non-linear RNNs: GRU teacher and student (the paper's §5.3, scaled down)
# --------------------------------------------------------------------------------------------


class GRUNet(torch.nn.Module):
    """Scalar-in, scalar-out GRU: a GRU layer of width ``hidden`` and a bias-free linear readout.

    ``forward(x)`` maps inputs of shape ``(n, T)`` to outputs of shape ``(n, T)``, one per step.
    """

    def __init__(self, hidden: int, seed: int):
        super().__init__()
        hidden = as_int(hidden, "hidden", minimum=1, maximum=10_000)
        seed = as_seed(seed)
        with torch.random.fork_rng():  # a seeded init that leaves the global RNG alone
            torch.manual_seed(seed)
            self.gru = torch.nn.GRU(1, hidden, batch_first=True, dtype=DTYPE)
            self.readout = torch.nn.Linear(hidden, 1, bias=False, dtype=DTYPE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = as_tensor(x, "x", ndim=2)
        if x.shape[1] == 0:
            raise ValueError(f"x must hold at least one time step, got shape {tuple(x.shape)}")
        states, _ = self.gru(x.unsqueeze(-1))
        return self.readout(states).squeeze(-1)


def gru_teacher(hidden: int, target, *, steps: int = 300, lr: float = 1e-2, seed: int = 0):
    """A GRU teacher built as in App. C.2.3: trained (Adam) so its impulse response mimics
    ``target``, then frozen. Random GRUs mostly decay or saturate; this gives a teacher whose
    response carries information for as long as the target does.
    """
    target = as_tensor(target, "target", ndim=1, nonempty=True, detach=True)
    steps = as_int(steps, "steps", minimum=1, maximum=MAX_STEPS)
    net = GRUNet(hidden, seed)
    impulse = torch.zeros(1, target.shape[0], dtype=DTYPE)
    impulse[0, 0] = 1.0
    optimizer = torch.optim.Adam(net.parameters(), lr=as_positive_float(lr, "lr"))
    for _ in range(steps):
        optimizer.zero_grad()
        loss = ((net(impulse)[0] - target) ** 2).sum()
        loss.backward()
        optimizer.step()
    for name, parameter in net.named_parameters():
        check_finite_result(parameter.detach(), f"the trained teacher's {name} (lower lr)")
        parameter.requires_grad_(False)
    return net


def train_gru_student(
    teacher: GRUNet,
    k: int,
    *,
    hidden: int = 16,
    steps: int = 600,
    lr: float = 3e-3,
    batch: int = 64,
    seed: int = 0,
) -> GRUNet:
    """Train a GRU student (Adam, fresh N(0, 1) sequences of length k each step) on the teacher's
    output at the last step, the non-linear analogue of the linear setting (App. C.2.3)."""
    _check_gru(teacher, "teacher")
    hidden = as_int(hidden, "hidden", minimum=1, maximum=10_000)
    k = as_size(k, "k", per=hidden)
    steps = as_int(steps, "steps", minimum=1, maximum=MAX_STEPS)
    batch = as_size(batch, "batch", per=k * hidden)
    seed = as_int(seed, "seed", minimum=0, maximum=2**32 - 2)  # the student's init uses seed + 1
    student = GRUNet(hidden, seed + 1)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(student.parameters(), lr=as_positive_float(lr, "lr"))
    for _ in range(steps):
        x = torch.randn(batch, k, generator=generator, dtype=DTYPE)
        optimizer.zero_grad()
        loss = ((student(x)[:, -1] - teacher(x)[:, -1]) ** 2).mean()
        loss.backward()
        optimizer.step()
    for name, value in student.named_parameters():
        check_finite_result(value.detach(), f"the trained student's {name} (lower lr)")
    return student


def _check_gru(net, name: str) -> None:
    if not isinstance(net, GRUNet):
        raise ValueError(f"{name} must be a GRUNet, got {type(net).__name__}")


def gru_tail_error(student: GRUNet, teacher: GRUNet, k: int, *, length: int = 48, n: int = 256):
    """The paper's GRU metric beyond the training length: max over steps k ≤ t < length of the
    mean (over n random N(0, 1) sequences, fixed seed) absolute output difference."""
    _check_gru(student, "student")
    _check_gru(teacher, "teacher")
    k = as_int(k, "k", minimum=0)
    length = as_size(length, "length", minimum=k + 1)
    n = as_size(n, "n", per=length * (student.gru.hidden_size + teacher.gru.hidden_size + 1))
    x = torch.randn(n, length, generator=torch.Generator().manual_seed(12345), dtype=DTYPE)
    with torch.no_grad():
        gap = (student(x) - teacher(x)).abs().mean(0)
    return float(gap[k:].max())
