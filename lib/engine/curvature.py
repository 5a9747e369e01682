"""Curvature of a loss along a trajectory: Hessian-vector products and extreme eigenvalues.

Elkabetz & Cohen 2021 bound the distance between gradient descent and gradient flow by the
integral of the negative curvature −λ_min(∇²f) along the flow (their Theorems 2–3), and gradient
descent is stable only while η < 2/λ_max(∇²f). This module computes those quantities for any loss
closure ``loss(params) -> scalar`` over a dict of float64 tensors (the engine's convention):

* :func:`hessian_vector_product`, by double back-propagation (exact, no finite differences: the
  almost-everywhere Hessian of a ReLU network, consistent with the paper's Lemma 9);
* :func:`dense_hessian` for small models;
* :func:`extreme_eigenvalues`, by Lanczos iteration with full reorthogonalization on
  Hessian-vector products or, below ``dense_limit`` parameters, by a dense symmetric eigensolver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from scipy.linalg import eigh_tridiagonal

from lib.engine.validation import (
    DTYPE,
    NumericalFailure,
    as_callable,
    as_float,
    as_int,
    as_tensor,
    check_finite_result,
    check_params,
)

Loss = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]


def _leaves(params) -> dict[str, torch.Tensor]:
    return {k: v.requires_grad_(True) for k, v in check_params(params).items()}


def _check_loss(loss) -> None:
    as_callable(loss, "loss", "params -> scalar tensor")


def _flat(inputs, grads) -> torch.Tensor:
    """Concatenate gradients, with zeros for inputs the differentiated value does not use."""
    return torch.cat(
        [
            torch.zeros_like(p).reshape(-1) if g is None else g.reshape(-1)
            for p, g in zip(inputs, grads, strict=True)
        ]
    )


def _gradient(loss: Loss, leaves: dict[str, torch.Tensor]) -> torch.Tensor:
    value = loss(leaves)
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or value.dtype != DTYPE:
        raise ValueError(f"loss(params) must return a float64 scalar tensor, got {value!r:.60}")
    check_finite_result(value, "loss(params)")
    inputs = list(leaves.values())
    if not value.requires_grad:  # the loss does not depend on the parameters
        return _flat(inputs, [None] * len(inputs))
    grads = torch.autograd.grad(value.reshape(()), inputs, create_graph=True, allow_unused=True)
    return _flat(inputs, grads)


def _second_derivative(gradient: torch.Tensor, inputs, direction: torch.Tensor, **options):
    """∂(gradient · direction)/∂inputs, flattened (zeros where it does not depend on them)."""
    if not gradient.requires_grad:  # the loss is (at most) linear: zero Hessian
        return torch.zeros(gradient.numel(), dtype=DTYPE)
    grads = torch.autograd.grad(gradient @ direction, inputs, allow_unused=True, **options)
    return _flat(inputs, grads)


def parameter_count(params) -> int:
    """P, the total number of entries of all parameter tensors."""
    return sum(int(v.numel()) for v in check_params(params).values())


def hessian_vector_product(loss: Loss, params, vector) -> torch.Tensor:
    """∇²f(θ) v for the flattened parameter vector (tensors concatenated in dict order)."""
    _check_loss(loss)
    leaves = _leaves(params)
    vector = as_tensor(vector, "vector").reshape(-1)
    size = sum(v.numel() for v in leaves.values())
    if vector.numel() != size:
        raise ValueError(f"vector must have P = {size} entries, got {vector.numel()}")
    gradient = _gradient(loss, leaves)
    product = _second_derivative(gradient, list(leaves.values()), vector).detach()
    check_finite_result(product, "the Hessian-vector product")
    return product


def dense_hessian(loss: Loss, params) -> torch.Tensor:
    """The full (P × P) Hessian, one Hessian-vector product per column (for small models)."""
    _check_loss(loss)
    leaves = _leaves(params)
    gradient = _gradient(loss, leaves)
    inputs = list(leaves.values())
    basis = torch.eye(gradient.numel(), dtype=DTYPE)
    rows = [_second_derivative(gradient, inputs, e, retain_graph=True) for e in basis]
    hessian = torch.stack(rows).detach()
    check_finite_result(hessian, "the Hessian")
    return 0.5 * (hessian + hessian.T)


def extreme_eigenvalues(
    loss: Loss,
    params,
    *,
    dense_limit: int = 400,
    tol: float = 1e-10,
    max_steps: int = 300,
) -> tuple[float, float]:
    """(λ_min, λ_max) of ∇²f(θ).

    Up to ``dense_limit`` parameters the Hessian is formed and diagonalized exactly. Above, both
    ends of the spectrum come from one Lanczos iteration on Hessian-vector products, with full
    reorthogonalization, from a fixed random start (seed 0): after m steps the Ritz values (the
    eigenvalues of the m × m tridiagonal matrix T_m) bracket the spectrum from inside, and the
    iteration stops when the residual ‖∇²f y − θ y‖ of both extreme Ritz pairs is at most ``tol``
    times the largest |Ritz value|. An exactly invariant Krylov space (a Hessian with few distinct
    eigenvalues, or the zero Hessian of a deep linear network at zero weights) ends the iteration
    early with exact values: for a random start it holds every distinct eigenvalue.

    Raises :class:`lib.engine.validation.NumericalFailure` if the Hessian-vector products are not
    finite or the iteration has not converged after ``max_steps`` steps.
    """
    _check_loss(loss)
    dense_limit = as_int(dense_limit, "dense_limit", minimum=1)
    tol = as_float(tol, "tol", minimum=1e-15, maximum=1e-1)
    max_steps = as_int(max_steps, "max_steps", minimum=2)
    size = parameter_count(params)
    if size <= dense_limit:
        values = torch.linalg.eigvalsh(dense_hessian(loss, params))
        return float(values[0]), float(values[-1])
    leaves = _leaves(params)
    gradient = _gradient(loss, leaves)
    inputs = list(leaves.values())

    def matvec(v: np.ndarray) -> np.ndarray:
        product = _second_derivative(gradient, inputs, torch.from_numpy(v), retain_graph=True)
        check_finite_result(product, "a Hessian-vector product")
        return product.numpy()

    return _lanczos_extremes(matvec, size, tol, min(max_steps, size))


def _lanczos_extremes(matvec, size: int, tol: float, steps: int) -> tuple[float, float]:
    """Extreme eigenvalues of a symmetric operator by Lanczos with full reorthogonalization."""
    basis = np.zeros((steps, size))
    start = np.random.RandomState(0).normal(size=size)
    basis[0] = start / np.linalg.norm(start)
    alphas: list[float] = []
    betas: list[float] = []
    scale = 0.0
    for m in range(steps):
        w = matvec(basis[m])
        alphas.append(float(basis[m] @ w))
        w = w - alphas[-1] * basis[m] - (betas[-1] * basis[m - 1] if m > 0 else 0.0)
        for _ in range(2):  # twice is enough (Kahan–Parlett)
            w = w - basis[: m + 1].T @ (basis[: m + 1] @ w)
        beta = float(np.linalg.norm(w))
        ritz, vectors = eigh_tridiagonal(
            np.array(alphas), np.array(betas), eigvals_only=False, lapack_driver="stev"
        )
        scale = max(scale, float(np.abs(ritz).max()), float(np.abs(alphas).max()))
        if beta <= 1e-14 * max(scale, 1e-300) or scale == 0.0:  # invariant subspace: exact
            return float(ritz[0]), float(ritz[-1])
        residuals = beta * np.abs(vectors[-1, [0, -1]])
        if m >= 1 and residuals.max() <= tol * scale:
            return float(ritz[0]), float(ritz[-1])
        if m + 1 < steps:
            basis[m + 1] = w / beta
            betas.append(beta)
    raise NumericalFailure(
        f"extreme_eigenvalues: Lanczos did not converge to tol = {tol:g} in {steps} steps "
        f"(residual {residuals.max():.2e} against {tol * scale:.2e}); raise max_steps or tol"
    )
