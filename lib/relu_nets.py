"""Fully connected ReLU networks without biases, batched over independent runs.

A network with weight matrices W_1 ∈ R^{h_1×m}, …, W_L ∈ R^{h_L×h_{L−1}} maps an input u ∈ R^m to

    f(u) = W_L σ(W_{L−1} ⋯ σ(W_1 u)),   σ(z) = max(z, 0),

ReLU after every layer but the last. In the poisoning paper (Slutzky et al. 2025, §4 and App. H)
such a network with two hidden layers follows an SSM: ŷ = D_out σ(D_hidden σ(D_in z)), z = φ(x).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from lib._checks import DTYPE, as_int, as_positive_float, as_tensor


def relu_network(weights: Sequence[torch.Tensor], inputs: torch.Tensor) -> torch.Tensor:
    """Apply f(u) = W_L σ(⋯ σ(W_1 u)) to a batch of inputs.

    ``weights`` are matrices of shapes ``(..., h_1, m)``, …, ``(..., h_L, h_{L−1})`` sharing leading
    (run) dimensions; ``inputs`` has shape ``(..., n, m)`` with the same leading dimensions, or
    none (one data set shared by all runs), or weights without them (one network applied to each
    batch). Any other mismatch is rejected, not broadcast. Returns shape ``(..., n, h_L)``.
    Differentiable; weights are not copied, so autograd reaches them.
    """
    if not isinstance(weights, (list, tuple)) or len(weights) == 0:
        raise ValueError(f"weights must be a non-empty list of matrices, got {type(weights)}")
    if not isinstance(inputs, torch.Tensor) or inputs.dtype != DTYPE or inputs.ndim < 2:
        raise ValueError("inputs must be a float64 tensor of shape (..., n, m)")
    as_tensor(inputs, "inputs")  # finite (no copy)
    batches = {tuple(inputs.shape[:-2])}
    hidden = inputs
    for index, w in enumerate(weights):
        if not isinstance(w, torch.Tensor) or w.dtype != DTYPE or w.ndim < 2:
            raise ValueError(f"weights[{index}] must be a float64 matrix, got {w!r:.60}")
        as_tensor(w, f"weights[{index}]")
        batches.add(tuple(w.shape[:-2]))
        if len(batches - {()}) > 1:
            raise ValueError(
                f"weights[{index}] has run dimensions {tuple(w.shape[:-2])} but the inputs or "
                f"earlier weights have {sorted(batches - {()})}: they must agree (or be absent)"
            )
        if w.shape[-1] != hidden.shape[-1]:
            raise ValueError(
                f"weights[{index}] has {w.shape[-1]} columns but its input has width "
                f"{hidden.shape[-1]}"
            )
        hidden = hidden @ w.transpose(-1, -2)
        if index < len(weights) - 1:
            hidden = torch.relu(hidden)
    return hidden


def gaussian_weights(
    widths: Sequence[int], scale: float, rng: np.random.RandomState
) -> list[torch.Tensor]:
    """Matrices with i.i.d. N(0, scale²) entries for the layer widths (m, h_1, …, h_L).

    Drawn from a numpy ``RandomState`` so that a seed fixes them on every platform.
    """
    if not isinstance(widths, (list, tuple)):
        raise ValueError(f"widths must be a list of layer widths, got {widths!r:.60}")
    widths = [as_int(w, "width", minimum=1, maximum=100_000) for w in widths]
    if len(widths) < 2:
        raise ValueError(f"widths must list at least an input and an output width, got {widths}")
    scale = as_positive_float(scale, "scale")
    if not isinstance(rng, np.random.RandomState):
        raise ValueError(f"rng must be a numpy RandomState, got {type(rng).__name__}")
    return [
        as_tensor(rng.normal(0.0, scale, size=(out, inp)), "weights")
        for inp, out in zip(widths[:-1], widths[1:], strict=True)
    ]
