"""Curvature of a loss along a trajectory: Hessian-vector products and extreme eigenvalues.

Elkabetz & Cohen 2021 bound the distance between gradient descent and gradient flow by the
integral of the negative curvature −λ_min(∇²f) along the flow (their Theorems 2–3), and gradient
descent is stable only while η < 2/λ_max(∇²f). This module computes those quantities for any loss
closure ``loss(params) -> scalar`` over a dict of float64 tensors (the engine's convention):

* :func:`hessian_vector_product`, by double back-propagation (exact, no finite differences: the
  almost-everywhere Hessian of a ReLU network, consistent with the paper's Lemma 9);
* :func:`dense_hessian` for small models;
* :func:`extreme_eigenvalues`, by Lanczos (``scipy.sparse.linalg.eigsh`` on a ``LinearOperator``)
  or, below ``dense_limit`` parameters, by a dense symmetric eigensolver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator, eigsh

from lib._checks import DTYPE, as_int, check_params

Loss = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]


def _leaves(params) -> dict[str, torch.Tensor]:
    return {k: v.requires_grad_(True) for k, v in check_params(params).items()}


def _check_loss(loss) -> None:
    if not callable(loss):
        raise ValueError(f"loss must be a callable params -> scalar, got {type(loss).__name__}")


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
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise ValueError(f"loss(params) must return a scalar tensor, got {value!r:.60}")
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
    vector = torch.as_tensor(vector, dtype=DTYPE).reshape(-1)
    size = sum(v.numel() for v in leaves.values())
    if vector.numel() != size:
        raise ValueError(f"vector must have P = {size} entries, got {vector.numel()}")
    gradient = _gradient(loss, leaves)
    return _second_derivative(gradient, list(leaves.values()), vector).detach()


def dense_hessian(loss: Loss, params) -> torch.Tensor:
    """The full (P × P) Hessian, one Hessian-vector product per column (for small models)."""
    _check_loss(loss)
    leaves = _leaves(params)
    gradient = _gradient(loss, leaves)
    inputs = list(leaves.values())
    basis = torch.eye(gradient.numel(), dtype=DTYPE)
    rows = [_second_derivative(gradient, inputs, e, retain_graph=True) for e in basis]
    hessian = torch.stack(rows).detach()
    return 0.5 * (hessian + hessian.T)


def extreme_eigenvalues(
    loss: Loss, params, *, dense_limit: int = 400, tol: float = 1e-10
) -> tuple[float, float]:
    """(λ_min, λ_max) of ∇²f(θ).

    Up to ``dense_limit`` parameters the Hessian is formed and diagonalized exactly; above, each
    end of the spectrum is found by Lanczos iteration (ARPACK through ``eigsh``) on Hessian-vector
    products, to relative tolerance ``tol``.
    """
    _check_loss(loss)
    dense_limit = as_int(dense_limit, "dense_limit", minimum=1)
    size = parameter_count(params)
    if size <= dense_limit:
        values = torch.linalg.eigvalsh(dense_hessian(loss, params))
        return float(values[0]), float(values[-1])
    leaves = _leaves(params)
    gradient = _gradient(loss, leaves)
    inputs = list(leaves.values())

    def matvec(v: np.ndarray) -> np.ndarray:
        direction = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64).reshape(-1))
        return _second_derivative(gradient, inputs, direction, retain_graph=True).numpy()

    operator = LinearOperator((size, size), matvec=matvec, dtype=np.float64)
    start = np.random.RandomState(0).normal(size=size)
    low = eigsh(operator, k=1, which="SA", tol=tol, v0=start, return_eigenvectors=False)[0]
    high = eigsh(operator, k=1, which="LA", tol=tol, v0=start, return_eigenvectors=False)[0]
    return float(low), float(high)
