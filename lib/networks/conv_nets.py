"""Convolutional networks as weight-sharing networks, after Elkabetz & Cohen 2021 (§4.2, App. C).

The paper's convolutional model (its eq. (28)) is the fully connected network of eq. (8) whose
layer matrices are *linear maps of weight vectors*: W_j = W_j(w_j) ∈ R^{d_j×d_{j−1}}, every entry
either fixed at zero or tied to one coordinate of w_j, no coordinate twice in a row,

    h_θ(x) = W_n(w_n) σ(W_{n−1}(w_{n−1}) ⋯ σ(W_1(w_1) x)),   θ = (w_1, …, w_n),

with a homogeneous activation σ (here ReLU) and no biases. This module builds the network of the
paper's Figure 3, right pair ("adapted": no biases, max pooling replaced by keeping the top-left
entry of every 2×2 window), scaled to the 8×8 digits: a few convolutions with square kernels,
padding k // 2 and stride 2 (a stride-2 convolution *is* the stride-1 one followed by top-left
subsampling), then fully connected layers.

* :func:`cnn_init`: Xavier-uniform weights (PyTorch's fans for convolutions: in·k², out·k²);
* :func:`cnn_output`, :func:`cnn_cross_entropy`: the network and its mean cross-entropy, through
  the index maps of W_j(·) (im2col by gather, so autograd and second derivatives work), for one
  network or a stack of R independent ones;
* :func:`layer_matrices`: the matrices W_j(w_j) themselves, eq. (28) made explicit;
* :func:`sharing_norms`: ‖W_j(·)‖_op, the operator norm of w_j ↦ W_j(w_j) induced by the
  Frobenius norm, i.e. √(largest number of entries tied to one coordinate) (the paper's
  footnote 27);
* :func:`lemma23_bound`: the lower bound on λ_min of the Hessian of the paper's eq. (31);
* :func:`norm_differences`: ‖w_{j+1}‖² − ‖w_j‖², constant along gradient flow (Du et al. 2018,
  Theorem 2.3; the paper's Proposition 24 rests on it).

Weights are stored as ``{"w1": …, "wn": …}``: convolution kernels of shape (c_out, c_in, k, k)
first, then fully connected matrices (d_out, d_in). Inputs are single-channel square images,
flattened: x of shape (N, side²).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from lib.engine.validation import as_int, as_seed, as_tensor, check_finite_result
from lib.networks.linear_nets import _class_labels

STRIDE = 2  # top-left subsampling of every 2×2 window


def _names(count: int) -> list[str]:
    return [f"w{j}" for j in range(1, count + 1)]


def _check_sizes(values, name: str, minimum_length: int) -> list[int]:
    if not isinstance(values, (list, tuple)) or len(values) < minimum_length:
        raise ValueError(
            f"{name} must be a list of at least {minimum_length} positive integers, got "
            f"{values!r:.60}"
        )
    return [as_int(v, f"{name}[{i}]", minimum=1, maximum=4096) for i, v in enumerate(values)]


def cnn_init(
    seed: int,
    *,
    side: int = 8,
    channels: Sequence[int] = (4, 8),
    hidden: Sequence[int] = (32, 16),
    classes: int = 10,
    kernel: int = 3,
) -> dict[str, torch.Tensor]:
    """Xavier-uniform weights of the adapted CNN, drawn from ``numpy.random.RandomState(seed)``.

    Convolutions 1 → c_1 → … → c_m (kernel k × k, stride 2, padding k // 2) on side × side
    images, then fully connected layers c_m s_m² → h_1 → … → classes, no biases. Each entry is
    U[−a, a], a = √(6/(fan_in + fan_out)), with fan_in = c_in k², fan_out = c_out k² for a
    convolution (PyTorch's ``xavier_uniform_``) and d_in, d_out for a matrix.
    """
    rng = np.random.RandomState(as_seed(seed))
    side = as_int(side, "side", minimum=1, maximum=4096)
    channels = _check_sizes(channels, "channels", 1)
    hidden = _check_sizes(hidden, "hidden", 0)
    classes = as_int(classes, "classes", minimum=1, maximum=4096)
    kernel = as_int(kernel, "kernel", minimum=1, maximum=side)
    shapes, size = [], side
    for c_in, c_out in zip([1, *channels[:-1]], channels, strict=True):
        shapes.append((c_out, c_in, kernel, kernel))
        size = _output_side(size, kernel)
    widths = [channels[-1] * size * size, *hidden, classes]
    shapes += [(d_out, d_in) for d_in, d_out in zip(widths[:-1], widths[1:], strict=True)]
    weights = []
    for shape in shapes:
        area = kernel * kernel if len(shape) == 4 else 1
        bound = math.sqrt(6.0 / ((shape[1] + shape[0]) * area))
        weights.append(torch.from_numpy(rng.uniform(-bound, bound, size=shape)))
    return dict(zip(_names(len(weights)), weights, strict=True))


def _output_side(size: int, kernel: int) -> int:
    """Side of a stride-2 convolution's output with padding k // 2."""
    return (size + 2 * (kernel // 2) - kernel) // STRIDE + 1


@functools.lru_cache(maxsize=64)
def _patch_index(c_in: int, size: int, kernel: int) -> np.ndarray:
    """For every output position (row-major) the input entries its kernel reads, shape
    (positions, c_in k²), ordered as a kernel (c_in, k, k) flattens; a position outside the image
    (the zero padding) points at index c_in·size², an appended zero."""
    pad, out = kernel // 2, _output_side(size, kernel)
    index = np.full((out * out, c_in * kernel * kernel), c_in * size * size, dtype=np.int64)
    for (i, j), (c, a, b) in itertools.product(
        itertools.product(range(out), range(out)),
        itertools.product(range(c_in), range(kernel), range(kernel)),
    ):
        y, x = STRIDE * i + a - pad, STRIDE * j + b - pad
        if 0 <= y < size and 0 <= x < size:
            index[i * out + j, (c * kernel + a) * kernel + b] = (c * size + y) * size + x
    return index


def _weights(params, *, runs: bool = True) -> list[torch.Tensor]:
    """[w_1, …, w_n] checked: kernels (4-D) first, then matrices (2-D), one optional run axis."""
    if not isinstance(params, Mapping) or not params:
        raise ValueError("params must be a non-empty dict {'w1': ..., 'wn': ...}")
    names = _names(len(params))
    if sorted(params) != sorted(names):
        raise ValueError(f"params must have keys {names}, got {sorted(params, key=str)}")
    weights = [as_tensor(params[name], name) for name in names]
    lead = weights[-1].ndim - 2 if runs else 0
    if lead not in (0, 1):
        raise ValueError(f"{names[-1]} must be a matrix (or a stack of them), got "
                         f"shape {tuple(weights[-1].shape)}")
    kinds = [w.ndim - lead for w in weights]
    if kinds != sorted(kinds, reverse=True) or set(kinds) - {2, 4} or kinds[0] != 4:
        raise ValueError(
            "params must hold convolution kernels (c_out, c_in, k, k) first, then matrices "
            f"(d_out, d_in), with the same run axis; got shapes {[tuple(w.shape) for w in weights]}"
        )
    if len({tuple(w.shape[:lead]) for w in weights}) > 1:
        raise ValueError(f"every weight needs the same run axis, got shapes "
                         f"{[tuple(w.shape) for w in weights]}")
    if any(w.numel() == 0 for w in weights):
        shapes = [tuple(w.shape) for w in weights]
        raise ValueError(f"weights must not be empty, got shapes {shapes}")
    return weights


def _geometry(weights: list[torch.Tensor], side: int) -> list[tuple[int, int]]:
    """(channels, side) of every convolution's input, checked against the next layer's shape."""
    lead = weights[-1].ndim - 2
    c_in, size, out = 1, side, []
    for j, w in enumerate(weights, start=1):
        shape = tuple(w.shape[lead:])
        if len(shape) == 4:
            if shape[1] != c_in or shape[2] != shape[3] or shape[2] > size:
                raise ValueError(
                    f"w{j} must be a square kernel (c_out, {c_in}, k, k) with k <= {size}, got "
                    f"{shape}"
                )
            out.append((c_in, size))
            c_in, size = shape[0], _output_side(size, shape[2])
        elif shape[1] != c_in * size * size:
            raise ValueError(
                f"w{j} must have {c_in * size * size} columns (its input), got {shape[1]}"
            )
        else:
            c_in, size = shape[0], 1
    return out


def _side(x: torch.Tensor) -> int:
    side = math.isqrt(x.shape[-1])
    if side * side != x.shape[-1]:
        raise ValueError(f"x must hold flattened square images, got rows of length {x.shape[-1]}")
    return side


def _forward(weights: list[torch.Tensor], x: torch.Tensor, geometry) -> torch.Tensor:
    """W_n σ(⋯ σ(W_1(w_1) x)) with every W_j(w_j) applied through its index map (eq. (28))."""
    lead = weights[-1].shape[:-2]
    hidden = x.expand(*lead, *x.shape) if lead else x
    count = x.shape[0]
    for j, w in enumerate(weights):
        if j < len(geometry):
            c_in, size = geometry[j]
            index = torch.from_numpy(_patch_index(c_in, size, w.shape[-1]))
            positions, width = index.shape
            padded = torch.cat([hidden, hidden.new_zeros(*hidden.shape[:-1], 1)], -1)
            # im2col by one index_select (its backward, one index_add): (..., N·positions, c_in k²)
            patches = padded.index_select(-1, index.reshape(-1)).reshape(
                *lead, count * positions, width)
            out = patches @ w.reshape(*lead, w.shape[-4], width).transpose(-1, -2)
            # (..., N, positions, c_out) -> channel-major rows (..., N, c_out·positions)
            hidden = out.reshape(*lead, count, positions, -1).transpose(-1, -2).reshape(
                *lead, count, -1)
        else:
            hidden = hidden @ w.transpose(-1, -2)
        if j < len(weights) - 1:
            hidden = torch.relu(hidden)
    return hidden


def cnn_output(params, x) -> torch.Tensor:
    """Logits h_θ(x) of the adapted CNN (eq. (28), ReLU, no biases) for images x of shape
    (N, side²); with a leading run axis of length R on every weight, shape (R, N, classes)."""
    weights = _weights(params)
    x = as_tensor(x, "x", ndim=2, nonempty=True)
    geometry = _geometry(weights, _side(x))
    logits = _forward(weights, x, geometry)
    check_finite_result(logits.detach(), "the network's output")
    return logits


def cnn_cross_entropy(params, x, labels) -> torch.Tensor:
    """Mean cross-entropy of :func:`cnn_output` (the paper's eq. (9)); shape (R,) with a run axis.

    ``labels``: integer classes of shape (N,). Differentiable twice (autograd reaches the weights),
    so :mod:`lib.engine.curvature` gives the Hessian where the activation pattern is locally
    constant. """
    logits = cnn_output(params, x)
    labels = _class_labels(labels, logits.shape[-2], logits.shape[-1])
    log_p = torch.log_softmax(logits, dim=-1)
    return -log_p.gather(-1, labels.expand(*logits.shape[:-2], -1)[..., None])[..., 0].mean(-1)


def layer_matrices(params, side: int = 8) -> list[torch.Tensor]:
    """The matrices W_j(w_j) ∈ R^{d_j×d_{j−1}} of eq. (28) for side × side inputs (one network).

    Row (o, p) of a convolution's matrix holds, at the input entries its kernel reads at output
    position p, the entries of the kernel of output channel o; every other entry is zero.
    """
    weights = _weights(params, runs=False)
    side = as_int(side, "side", minimum=1, maximum=4096)
    geometry = _geometry(weights, side)
    matrices = []
    for j, w in enumerate(weights):
        if j >= len(geometry):
            matrices.append(w)
            continue
        c_in, size = geometry[j]
        index = torch.from_numpy(_patch_index(c_in, size, w.shape[-1]))
        c_out, positions = w.shape[0], index.shape[0]
        matrix = w.new_zeros(c_out, positions, c_in * size * size + 1)
        rows = w.reshape(c_out, 1, -1).expand(c_out, positions, -1)
        matrix.scatter_(2, index.expand(c_out, -1, -1), rows)
        matrices.append(matrix[..., :-1].reshape(c_out * positions, -1))
    return matrices


def sharing_norms(params, side: int = 8) -> list[float]:
    """‖W_j(·)‖_op, j = 1, …, n: the operator norm of the linear map w_j ↦ W_j(w_j) induced by
    the Frobenius norm, √(largest number of entries of W_j(w_j) tied to one coordinate of w_j)
    (the paper's footnote 27); 1 for a fully connected layer."""
    weights = _weights(params, runs=False)
    side = as_int(side, "side", minimum=1, maximum=4096)
    geometry = _geometry(weights, side)
    norms = []
    for j, w in enumerate(weights):
        if j >= len(geometry):
            norms.append(1.0)
            continue
        c_in, size = geometry[j]
        index = _patch_index(c_in, size, w.shape[-1])
        inside = (index < c_in * size * size).sum(0)  # per kernel entry: positions it touches
        norms.append(math.sqrt(int(inside.max())))
    return norms


def lemma23_bound(params, x, labels) -> float:
    """The paper's eq. (31) (Lemma 23) for ReLU (max{|α|, |ᾱ|} = 1) and cross-entropy:

    λ_min(∇²f(θ)) ≥ −(n − 1)/|S| Σ_i ‖∇ℓ_i‖ ‖x_i‖ · Π_j ‖W_j(·)‖_op · max_{|J| = n−2}
    Π_{j∈J} ‖w_j‖, with ∇ℓ_i = softmax(h_θ(x_i)) − onehot(y_i), the gradient of the loss in the
    prediction.
    """
    weights = _weights(params, runs=False)
    x = as_tensor(x, "x", ndim=2, nonempty=True)
    side = _side(x)
    logits = _forward(weights, x, _geometry(weights, side))
    labels = _class_labels(labels, logits.shape[0], logits.shape[1])
    residual = torch.softmax(logits, 1)
    residual[torch.arange(len(labels)), labels] -= 1.0
    per_sample = float((residual.norm(dim=1) * x.norm(dim=1)).mean())
    norms = sorted((float(w.norm()) for w in weights), reverse=True)
    depth = len(weights)
    largest = math.prod(norms[: depth - 2]) if depth > 2 else 1.0
    bound = -(depth - 1) * per_sample * math.prod(sharing_norms(params, side)) * largest
    check_finite_result(bound, "Lemma 23's bound")
    return bound


def norm_differences(params) -> torch.Tensor:
    """‖w_{j+1}‖² − ‖w_j‖², j = 1, …, n − 1: conserved by gradient flow on any loss of
    h_θ (Du et al. 2018, Theorem 2.3; the paper's proof of Proposition 24). Shape (n − 1,), or
    (R, n − 1) with a run axis."""
    weights = _weights(params)
    lead = weights[-1].ndim - 2
    squares = torch.stack([w.pow(2).flatten(lead).sum(-1) for w in weights], -1)
    differences = squares[..., 1:] - squares[..., :-1]
    check_finite_result(differences.detach(), "the norm differences")
    return differences
