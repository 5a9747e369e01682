"""Fully connected ReLU networks without biases, batched over independent runs.

A network with weight matrices W_1 ∈ R^{h_1×m}, …, W_L ∈ R^{h_L×h_{L−1}} maps an input u ∈ R^m to

    f(u) = W_L σ(W_{L−1} ⋯ σ(W_1 u)),   σ(z) = max(z, 0),

ReLU after every layer but the last. In the poisoning paper (Slutzky et al. 2025, §4 and App. H)
such a network with two hidden layers follows an SSM: ŷ = D_out σ(D_hidden σ(D_in z)), z = φ(x).
:func:`relu_network_gradient` differentiates a loss of the outputs by backpropagation written out
(no autograd graph): the training step of the digits experiments of Elkabetz & Cohen 2021.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from lib.engine.validation import (
    DTYPE,
    as_int,
    as_positive_float,
    as_tensor,
    check_magnitude,
    describe,
)


def _check_network(weights, inputs) -> None:
    """Raise a ValueError unless ``weights`` and ``inputs`` fit :func:`relu_network`'s contract."""
    if not isinstance(weights, (list, tuple)) or len(weights) == 0:
        raise ValueError(f"weights must be a non-empty list of matrices, got {type(weights)}")
    if not isinstance(inputs, torch.Tensor) or inputs.dtype != DTYPE or inputs.ndim < 2:
        raise ValueError("inputs must be a float64 tensor of shape (..., n, m)")
    as_tensor(inputs, "inputs")  # finite (no copy)
    batches = {tuple(inputs.shape[:-2])}
    width = inputs.shape[-1]
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
        if w.shape[-1] != width:
            raise ValueError(
                f"weights[{index}] has {w.shape[-1]} columns but its input has width {width}"
            )
        width = w.shape[-2]


def relu_network(weights: Sequence[torch.Tensor], inputs: torch.Tensor) -> torch.Tensor:
    """Apply f(u) = W_L σ(⋯ σ(W_1 u)) to a batch of inputs.

    ``weights`` are matrices of shapes ``(..., h_1, m)``, …, ``(..., h_L, h_{L−1})`` sharing leading
    (run) dimensions; ``inputs`` has shape ``(..., n, m)`` with the same leading dimensions, or
    none (one data set shared by all runs), or weights without them (one network applied to each
    batch). Any other mismatch is rejected, not broadcast. Returns shape ``(..., n, h_L)``.
    Differentiable; weights are not copied, so autograd reaches them.
    """
    _check_network(weights, inputs)
    hidden = inputs
    for index, w in enumerate(weights):
        hidden = hidden @ w.transpose(-1, -2)
        if index < len(weights) - 1:
            hidden = torch.relu(hidden)
    return hidden


Head = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def relu_network_gradient(
    weights: Sequence[torch.Tensor], inputs: torch.Tensor, head: Head
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A loss of the network's outputs and its gradient in the weights, by backpropagation.

    With h_0 = u, a_l = W_l h_{l−1}, h_l = σ(a_l) (l < L) and f = a_L, the caller's ``head`` maps
    the outputs F (shape ``(..., n, h_L)``) to ``(losses, ∂(Σ losses)/∂F)``. Then, row by row over
    the n samples,

        δ_L = ∂ℓ/∂f,   ∂ℓ/∂W_l = Σ_i δ_l,i h_{l−1},iᵀ,   δ_{l−1} = (W_lᵀ δ_l) ⊙ σ'(a_{l−1}),

    with σ'(a) = 1 for a > 0 and 0 otherwise (autograd's convention at a = 0). The arithmetic is
    autograd's, written out, without building a graph. ``weights`` and ``inputs`` as in
    :func:`relu_network` (inputs of magnitude at most 1e100). A loss that overflows at the given
    weights comes back as inf, for lib.engine.flow's engines to flag the run as diverged.
    Returns ``(losses, [∂ℓ/∂W_1, …, ∂ℓ/∂W_L])`` with each gradient shaped like its weight.
    """
    _check_network(weights, inputs)
    check_magnitude(inputs, "inputs")
    if not callable(head):
        raise ValueError(
            "head must be a callable outputs -> (losses, d losses / d outputs), got "
            f"{type(head).__name__}"
        )
    # Columns: h_lᵀ of shape (..., h_l, n), so that every product is one matrix times a wide
    # matrix of n columns, the shape BLAS runs fastest (and a run axis folds into its rows).
    columns = [inputs.transpose(-1, -2)]  # h_0ᵀ, …, h_{L−1}ᵀ
    for w in weights[:-1]:
        columns.append(torch.relu(w @ columns[-1]))
    outputs = (weights[-1] @ columns[-1]).transpose(-1, -2)
    result = head(outputs)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ValueError(
            f"head must return a pair (losses, d losses / d outputs), got {describe(result)}"
        )
    losses, delta = result
    if not isinstance(delta, torch.Tensor) or delta.shape != outputs.shape or delta.dtype != DTYPE:
        got = (
            f"{getattr(delta, 'dtype', type(delta).__name__)} {tuple(getattr(delta, 'shape', ()))}"
        )
        raise ValueError(
            f"head must return the float64 gradient in the outputs, shape {tuple(outputs.shape)}, "
            f"got {got}"
        )
    if not isinstance(losses, torch.Tensor) or losses.dtype != DTYPE:
        raise ValueError(f"head must return float64 losses, got {describe(losses)}")
    # non-finite losses or δ pass on: at overflowing weights this is the gradient closure of
    # lib.engine.flow's engines, which flag the run as diverged
    delta = delta.transpose(-1, -2)  # δ_Lᵀ
    grads: list[torch.Tensor] = [delta] * len(weights)
    for index in range(len(weights) - 1, -1, -1):
        grad = delta @ columns[index].transpose(-1, -2)
        extra = grad.ndim - weights[index].ndim  # one network on many batches: sum over them
        grads[index] = grad.sum(dim=tuple(range(extra))) if extra else grad
        if index > 0:
            # σ'(a) masks where h = σ(a) is 0: autograd's own ReLU backward kernel
            delta = torch.ops.aten.threshold_backward(
                weights[index].transpose(-1, -2) @ delta, columns[index], 0.0
            )
    return losses, grads


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
