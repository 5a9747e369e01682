"""Deep linear (and bias-free fully connected) networks, after Elkabetz & Cohen 2021.

A network of depth n has weight matrices W_1 ∈ R^{d_1×d_0}, …, W_n ∈ R^{d_n×d_{n−1}}, stored in a
parameter dict ``{"W1": …, "Wn": …}`` so that the engine (:mod:`lib.engine.flow`) and the curvature
tools (:mod:`lib.engine.curvature`) apply unchanged. With linear activation the network computes the
end-to-end matrix W_{n:1} = W_n ⋯ W_1 (eq. 10). This module holds:

* the forward maps (linear, or ReLU through :func:`lib.networks.relu_nets.relu_network`),
  cross-entropy, and Xavier-uniform initialization;
* the cross-entropy's gradient in closed form (:func:`cross_entropy_gradient`, for one network or
  a stack of independent runs): the fast training step of the digits experiments;
* deep linear *scalar regression*, f(θ) = ½‖W_{n:1} − λᵀ‖² (eq. 20 for whitened inputs), with its
  balanced initialization (Procedure 13) and end-to-end dynamics (Lemma 35);
* balancedness: the matrices W_{j+1}ᵀW_{j+1} − W_j W_jᵀ, conserved by gradient flow, and the
  unbalancedness of Definition 30;
* the rescaling W_j → c W_j, W_{j+1} → W_{j+1}/c, which leaves the function unchanged (Prop. 6).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from lib.engine.flow import Trajectory
from lib.engine.validation import (
    DTYPE,
    NumericalFailure,
    as_choice,
    as_float,
    as_int,
    as_positive_float,
    as_seed,
    as_steps,
    as_tensor,
    check_finite_result,
    check_magnitude,
)
from lib.networks._linear_kernels import _descent
from lib.networks.relu_nets import relu_network, relu_network_gradient

ACTIVATIONS = ("linear", "relu")


def layers(params: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
    """The weight matrices [W_1, …, W_n] of a parameter dict with keys W1, …, Wn."""
    return _weights(params, runs=False)


def _weights(params, *, runs: bool) -> list[torch.Tensor]:
    """[W_1, …, W_n], checked; with ``runs`` each may carry one leading run axis (all or none)."""
    if not isinstance(params, Mapping) or not params:
        raise ValueError("params must be a non-empty dict {'W1': ..., 'Wn': ...}")
    depth = len(params)
    names = [f"W{j}" for j in range(1, depth + 1)]
    if sorted(params) != sorted(names):
        raise ValueError(f"params must have keys {names}, got {sorted(params)}")
    weights = [params[name] for name in names]
    ndims = (2, 3) if runs else (2,)
    for j, (name, w) in enumerate(zip(names, weights, strict=True)):
        if not isinstance(w, torch.Tensor) or w.ndim not in ndims:
            what = "a matrix (2-D tensor)" + (", or a stack of them (3-D)" if runs else "")
            raise ValueError(f"{name} must be {what}, got {w!r:.60}")
        # float64 and finite, integers converted (no copy of a float64 w: autograd reaches it)
        weights[j] = w = as_tensor(w, name)
        if w.numel() == 0:
            raise ValueError(f"{name} must not be empty, got shape {tuple(w.shape)}")
    leading = {tuple(w.shape[:-2]) for w in weights}
    if len(leading) > 1:
        raise ValueError(
            f"every weight needs the same leading run axis (or none), got shapes "
            f"{[tuple(w.shape) for w in weights]}"
        )
    for j in range(1, depth):
        if weights[j].shape[-1] != weights[j - 1].shape[-2]:
            raise ValueError(
                f"W{j + 1} has {weights[j].shape[-1]} columns but W{j} has "
                f"{weights[j - 1].shape[-2]} rows"
            )
    return weights


def as_params(weights: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """{"W1": W_1, …} from a list of matrices."""
    if not isinstance(weights, (list, tuple)) or len(weights) == 0:
        raise ValueError(f"weights must be a non-empty list of matrices, got {weights!r:.60}")
    return {f"W{j}": as_tensor(w, f"W{j}", ndim=2) for j, w in enumerate(weights, start=1)}


def _check_widths(widths) -> list[int]:
    if not isinstance(widths, (list, tuple)):
        raise ValueError(f"widths must be a list of layer widths, got {widths!r:.60}")
    return [as_int(w, f"widths[{i}]", minimum=1, maximum=100_000) for i, w in enumerate(widths)]


def xavier_init(widths: Sequence[int], seed: int) -> dict[str, torch.Tensor]:
    """Xavier-uniform weights (gain 1): entries U[−a, a], a = √(6/(d_in + d_out)), per layer.

    ``widths`` = (d_0, d_1, …, d_n); drawn from ``numpy.random.RandomState(seed)``.
    """
    widths = _check_widths(widths)
    if len(widths) < 3:
        raise ValueError(f"need depth >= 2, i.e. at least three widths, got {widths}")
    rng = np.random.RandomState(as_seed(seed))
    weights = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        weights.append(torch.from_numpy(rng.uniform(-bound, bound, size=(fan_out, fan_in))))
    return as_params(weights)


def network_output(params, x: torch.Tensor, *, activation: str = "linear") -> torch.Tensor:
    """h_θ(x) = W_n σ(⋯ σ(W_1 x)) (eq. 8, no biases) for inputs x of shape (N, d_0): (N, d_n)."""
    activation = as_choice(activation, "activation", ACTIVATIONS)
    weights = layers(params)
    x = as_tensor(x, "x", shape=(None, weights[0].shape[1]))
    if activation == "relu":
        return relu_network(weights, x)
    out = x
    for w in weights:
        out = out @ w.T
    return out


def cross_entropy(params, x: torch.Tensor, labels: torch.Tensor, *, activation: str = "linear"):
    """Mean cross-entropy of the network's logits (eq. 9 with the logistic-type loss).

    ``labels`` is an integer tensor (or list) of shape (N,) with classes in 0, …, d_n − 1.
    """
    logits = network_output(params, x, activation=activation)
    labels = _class_labels(labels, logits.shape[0], logits.shape[1])
    return torch.nn.functional.cross_entropy(logits, labels)


def cross_entropy_gradient(
    params, x: torch.Tensor, labels, *, activation: str = "linear"
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The mean cross-entropy of :func:`cross_entropy` and its gradient, in closed form.

    Same loss as :func:`cross_entropy`, without autograd's graph: on the 64–32–32–10 digits
    networks a training step costs roughly half of the autograd one (less for the linear network,
    more for the ReLU one), and a sixth for 32 linear networks at once. With logits Z and labels
    y, the gradient in the logits is ∂ℓ/∂Z = (softmax(Z) − onehot(y)) / N.

    * ``"linear"``: the loss is φ(W_{n:1}) with φ(P) = ℓ(X Pᵀ), so (the chain rule of eq. 10)
      ∇_{W_j} f = W_{n:j+1}ᵀ ∇φ(W_{n:1}) W_{j−1:1}ᵀ with ∇φ(P) = (∂ℓ/∂Z)ᵀ X: the data enter only
      through the d_n × d_0 matrix ∇φ, never through the hidden widths.
    * ``"relu"``: backpropagation through :func:`lib.networks.relu_nets.relu_network_gradient`.

    Each weight may carry a leading run axis of length R (all of them or none): R independent
    networks on the same data. Returns ``(loss, {"W1": ∂ℓ/∂W_1, …})``; the loss is a scalar, or of
    shape ``(R,)`` with a run axis, and each gradient has its weight's shape. The values agree
    with autograd on :func:`cross_entropy` up to rounding (the sums are taken in another order).
    """
    activation = as_choice(activation, "activation", ACTIVATIONS)
    weights = _weights(params, runs=True)
    x = as_tensor(x, "x", shape=(None, weights[0].shape[-1]))
    labels = _class_labels(labels, x.shape[0], weights[-1].shape[-2])
    classes, count = weights[-1].shape[-2], x.shape[0]
    onehot = torch.zeros(classes, count, dtype=DTYPE).scatter_(0, labels[None], 1.0)  # Yᵀ

    def head(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean cross-entropy of logits (..., N, d_n) and its gradient in them."""
        # Worked on Zᵀ, which the callers below hold contiguous: torch's softmax over a short
        # last axis (d_n = 10 classes) is several times slower than over a long leading one.
        log_p = torch.log_softmax(logits.transpose(-1, -2), dim=-2)
        index = labels.expand(*log_p.shape[:-2], 1, count)
        losses = -log_p.gather(-2, index).mean((-1, -2))
        delta = log_p.exp_().sub_(onehot)  # softmax − onehot
        return losses, delta.div_(count).transpose(-1, -2)

    names = [f"W{j}" for j in range(1, len(weights) + 1)]
    if activation == "relu":
        losses, grads = relu_network_gradient(weights, x, head)
        return losses, dict(zip(names, grads, strict=True))
    below = [weights[0]]  # W_{j:1}, j = 1, …, n
    for w in weights[1:]:
        below.append(w @ below[-1])
    # Z = X W_{n:1}ᵀ computed as (W_{n:1} Xᵀ)ᵀ: a wide product, and a run axis folds into its rows
    losses, delta = head((below[-1] @ x.T).transpose(-1, -2))
    outer = delta.transpose(-1, -2) @ x  # ∇φ(W_{n:1}), shape (..., d_n, d_0)
    grads, above = {}, outer  # above = W_{n:j+1}ᵀ ∇φ, from j = n down to 1
    for j in range(len(weights), 0, -1):
        grads[f"W{j}"] = above @ below[j - 2].transpose(-1, -2) if j > 1 else above
        if j > 1:
            above = weights[j - 1].transpose(-1, -2) @ above
    return losses, {name: grads[name] for name in names}


def _class_labels(labels, count: int, classes: int) -> torch.Tensor:
    if isinstance(labels, (list, tuple, np.ndarray)):
        array = np.asarray(labels)
        if array.dtype.kind not in "iu" and array.size > 0:
            raise ValueError(f"labels must be integers, got a list of dtype {array.dtype}")
        labels = torch.as_tensor(array.astype(np.int64))
    if not isinstance(labels, torch.Tensor) or labels.dtype not in (
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
    ):
        raise ValueError(
            f"labels must be an integer tensor of shape ({count},), got "
            f"{getattr(labels, 'dtype', type(labels).__name__)}"
        )
    if tuple(labels.shape) != (count,):
        raise ValueError(f"labels must have shape ({count},) (one per input), got {labels.shape}")
    if count == 0:
        raise ValueError("the mean cross-entropy of zero inputs is undefined (x has no rows)")
    if bool(((labels < 0) | (labels >= classes)).any()):
        raise ValueError(
            f"labels must lie in 0..{classes - 1} (the network has {classes} outputs), got "
            f"values from {int(labels.min())} to {int(labels.max())}"
        )
    return labels.to(torch.int64)


def end_to_end(params) -> torch.Tensor:
    """W_{n:1} = W_n ⋯ W_1 (eq. 10)."""
    weights = layers(params)
    product = weights[0]
    for w in weights[1:]:
        product = w @ product
    return product


def scalar_regression_loss(params, target) -> torch.Tensor:
    """f(θ) = ½‖W_{n:1} − λᵀ‖² (eq. 20 up to its constant, for whitened data with Λ_yx = λᵀ)."""
    target = check_magnitude(as_tensor(target, "target", ndim=1), "target")
    product = end_to_end(params)
    if product.shape != (1, target.numel()):
        raise ValueError(
            f"the end-to-end matrix must be 1 × {target.numel()}, got {tuple(product.shape)}"
        )
    return 0.5 * ((product[0] - target) ** 2).sum()


def balanced_init(widths: Sequence[int], end_to_end_matrix) -> dict[str, torch.Tensor]:
    """Procedure 13: a balanced initialization with a prescribed end-to-end matrix A.

    With the compact SVD A = U Σ Vᵀ (rank r ≤ min_j d_j): W_n ≃ U Σ^{1/n}, W_j ≃ Σ^{1/n} for
    1 < j < n, W_1 ≃ Σ^{1/n} Vᵀ, where ≃ pads with zeros. Then W_{j+1}ᵀW_{j+1} = W_j W_jᵀ for all j
    and W_{n:1} = A.
    """
    widths = _check_widths(widths)
    depth = len(widths) - 1
    if depth < 2:
        raise ValueError(f"need depth >= 2, got widths {widths}")
    matrix = as_tensor(end_to_end_matrix, "end_to_end_matrix", ndim=2)
    if tuple(matrix.shape) != (widths[-1], widths[0]):
        raise ValueError(
            f"A must be {widths[-1]} × {widths[0]} (d_n × d_0), got {tuple(matrix.shape)}"
        )
    u, s, vt = torch.linalg.svd(matrix, full_matrices=False)
    rank = int((s > 1e-14 * max(float(s[0]), 1e-300)).sum()) if s.numel() else 0
    if rank > min(widths[1:-1]):
        narrowest = min(widths[1:-1])
        raise ValueError(f"A has rank {rank}, more than the narrowest hidden width {narrowest}")
    root = s[:rank] ** (1.0 / depth)
    weights = [torch.zeros(widths[j + 1], widths[j], dtype=DTYPE) for j in range(depth)]
    weights[0][:rank] = root[:, None] * vt[:rank]
    for j in range(1, depth - 1):
        weights[j][:rank, :rank] = torch.diag(root)
    weights[-1][:, :rank] = u[:, :rank] * root[None, :]
    return as_params(weights)


def balance_matrices(params) -> list[torch.Tensor]:
    """W_{j+1}ᵀW_{j+1} − W_j W_jᵀ, j = 1, …, n−1: constant along gradient flow (Du et al. 2018)."""
    weights = layers(params)
    if len(weights) < 2:
        raise ValueError(f"params must hold at least two layers W1, W2, got {len(weights)}")
    return [
        check_finite_result(
            weights[j + 1].T @ weights[j + 1] - weights[j] @ weights[j].T,
            f"the balance matrix W_{j + 2}ᵀW_{j + 2} − W_{j + 1}W_{j + 1}ᵀ",
        )
        for j in range(len(weights) - 1)
    ]


def unbalancedness(params) -> float:
    """Definition 30: max_j ‖W_{j+1}ᵀW_{j+1} − W_j W_jᵀ‖_nuclear (0 for a balanced network)."""
    norms = [float(torch.linalg.matrix_norm(m, ord="nuc")) for m in balance_matrices(params)]
    return check_finite_result(max(norms), "the unbalancedness")


def rescale(params, j: int, c: float) -> dict[str, torch.Tensor]:
    """W_j → c W_j and W_{j+1} → W_{j+1}/c: the same function, different curvature (Prop. 6)."""
    weights = [w.clone() for w in layers(params)]
    j = as_int(j, "j", minimum=1)
    if j >= len(weights):
        raise ValueError(f"j must be in 1..{len(weights) - 1}, got {j}")
    c = as_positive_float(c, "c")
    weights[j - 1] = weights[j - 1] * c
    weights[j] = weights[j] / c
    return as_params(weights)


def end_to_end_velocity(w, target, depth: int) -> torch.Tensor:
    """Lemma 35 (Arora et al. 2018): under gradient flow from a balanced start, w = W_{n:1} obeys
    ẇ = −(‖w‖^{2−2/n} (w − λ) + (n−1) ‖w‖^{−2/n} w wᵀ(w − λ)) for a 1 × d_0 end-to-end matrix."""
    w = as_tensor(w, "w", ndim=1)
    target = as_tensor(target, "target", ndim=1)
    depth = as_int(depth, "depth", minimum=2)
    if w.shape != target.shape:
        raise ValueError(
            f"w and target must have equal lengths, got {w.numel()} and {target.numel()}"
        )
    norm = torch.linalg.vector_norm(w)
    if norm == 0:
        return torch.zeros_like(w)
    residual = w - target
    velocity = -(
        norm ** (2 - 2 / depth) * residual + (depth - 1) * norm ** (-2 / depth) * w * (w @ residual)
    )
    return check_finite_result(velocity, "the end-to-end velocity")


def lemma7_bound(params, gradient_norm: float) -> float:
    """Lemma 7's lower bound on λ_min(∇²f(θ)) for a deep linear net with scalar output:

    λ_min ≥ −(n−1) √min{d_0, d_n} ‖∇φ(W_{n:1})‖_F max_{|J|=n−2} Π_{j∈J} ‖W_j‖_spectral.
    """
    weights = layers(params)
    gradient_norm = as_positive_float(gradient_norm, "gradient_norm", allow_zero=True)
    depth = len(weights)
    norms = sorted((float(torch.linalg.matrix_norm(w, ord=2)) for w in weights), reverse=True)
    product = math.prod(norms[: depth - 2]) if depth > 2 else 1.0
    rank_factor = math.sqrt(min(weights[0].shape[1], weights[-1].shape[0]))
    return -(depth - 1) * rank_factor * float(gradient_norm) * product


def theorem15_step_size(depth: int, norm0: float, alignment: float, accuracy: float) -> float:
    """The step size that Theorem 15 guarantees (eq. 23), for depth n, ‖W_{n:1,0}‖, ν and ε̃.

    η = ‖W‖⁵ min{1, ε̃} / (n^{17/2} e^{7n+6} max{1, κ}^{(11n−5)/2}) · ln(15 n max{1, κ} /
    (‖W‖ min{1, ε̃}))^{−2}, κ = (1 − ν)/(1 + ν).
    """
    depth = as_int(depth, "depth", minimum=2)
    norm0 = as_positive_float(norm0, "norm0")
    if norm0 > 0.2:
        raise ValueError(f"Theorem 15 assumes 0 < ‖W_(n:1)(0)‖ <= 0.2, got {norm0}")
    accuracy = as_positive_float(accuracy, "accuracy")
    alignment = as_float(alignment, "alignment", minimum=-1.0, maximum=1.0, open_minimum=True)
    kappa = max(1.0, (1 - alignment) / (1 + alignment))
    log_term = math.log(15 * depth * kappa / (norm0 * min(1.0, accuracy)))
    try:  # e^{7n+6} overflows float64 from n ≈ 100 on: the step size then underflows
        denominator = depth**8.5 * math.exp(7 * depth + 6) * kappa ** ((11 * depth - 5) / 2)
    except OverflowError:
        denominator = math.inf
    step = norm0**5 * min(1.0, accuracy) / denominator / log_term**2
    if not step > 0:
        log10_step = (
            5 * math.log(norm0)
            + math.log(min(1.0, accuracy))
            - 8.5 * math.log(depth)
            - (7 * depth + 6)
            - (11 * depth - 5) / 2 * math.log(kappa)
            - 2 * math.log(log_term)
        ) / math.log(10)
        raise NumericalFailure(
            f"the step size of Theorem 15 at depth {depth} is 10^{log10_step:.6g}, below the "
            "smallest float64"
        )
    return step


def cross_entropy_descent(
    params,
    x: torch.Tensor,
    labels,
    lr: float,
    steps: int,
    *,
    activation: str = "linear",
    record_every: int = 1,
) -> Trajectory:
    """Full-batch gradient descent on :func:`lib.networks.linear_nets.cross_entropy`, compiled.

    The same run as ``gradient_descent(loss, params, lr, steps, record_every=record_every)`` with
    ``loss = cross_entropy(·, x, labels, activation=activation)``, and the same
    :class:`~lib.engine.flow.Trajectory` (float64, recorded at iteration 0, every ``record_every``
    iterations and at the last; ``info`` with ``steps_run``, ``diverged``, ``converged_step``
    (``None``) and ``optimizer`` ``"gd"``), several times faster on the digits networks.

    ``params`` is one network ``{"W1": …, "Wn": …}``, or R independent ones stacked on a leading
    run axis (every W_j of shape (R, d_j, d_{j−1})), trained on the same data as
    ``gradient_descent(..., runs=R)`` trains them: the record then has shape (T, R, …), a run that
    stops early (diverges) stays frozen at its last iterate with step size NaN, and the ``info``
    entries are lists with one value per run. Stacked runs advance on as many threads as the
    machine has cores; each run is computed exactly as it would be alone.
    """
    weights = _weights(params, runs=True)
    activation = as_choice(activation, "activation", ACTIVATIONS)
    x = as_tensor(x, "x", shape=(None, weights[0].shape[-1]))
    labels = _class_labels(labels, x.shape[0], weights[-1].shape[-2])
    lr = as_positive_float(lr, "lr")
    per_record = sum(w.numel() for w in weights) + 2 * (
        1 if weights[0].ndim == 2 else len(weights[0])
    )
    steps, record_every = as_steps(steps, record_every, per_record=per_record)
    single = weights[0].ndim == 2
    stacks = [w.detach().unsqueeze(0) if single else w.detach() for w in weights]
    shapes = np.array([tuple(w.shape[1:]) for w in stacks], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(shapes[:, 0] * shapes[:, 1])]).astype(np.int64)
    theta0 = torch.cat([w.reshape(w.shape[0], -1) for w in stacks], dim=1).numpy()
    x_rows = np.ascontiguousarray(x.detach().numpy())
    x_columns = np.ascontiguousarray(x_rows.T)
    label_array = labels.numpy().astype(np.int64)
    relu = activation == "relu"

    def run(theta: np.ndarray):
        theta = np.ascontiguousarray(theta)
        return _descent(theta, bounds, shapes, x_columns, x_rows, label_array, relu, lr, steps,
                        record_every)  # fmt: skip

    # BLAS on one thread: these products are small, and a second thread that waits for a busy
    # core slows each one down tenfold on a shared machine. Stacked runs are independent, and the
    # compiled loop releases the GIL: one thread per core, each run computed as it would be alone.
    workers = min(len(theta0), os.cpu_count() or 1)
    with threadpool_limits(1, user_api="blas"):
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(run, theta0))
        else:
            results = [run(theta) for theta in theta0]
    times, states, losses, etas = _merge_runs([r[:4] for r in results], record_every)
    if single:
        states, losses, etas = states[:, 0], losses[:, 0], etas[:, 0]
    history = {
        f"W{j + 1}": states[..., bounds[j] : bounds[j + 1]].reshape((*states.shape[:-1], *shape))
        for j, shape in enumerate(shapes)
    }
    lasts = [int(r[4]) for r in results]
    diverged = [bool(r[5]) for r in results]
    info = {
        "converged_step": None if single else [None] * len(results),
        "steps_run": lasts[0] if single else lasts,
        "diverged": diverged[0] if single else diverged,
        "optimizer": "gd",
    }
    return Trajectory(times=times, params=history, losses=losses, step_sizes=etas, info=info)


def _merge_runs(records, record_every: int):
    """One record (T, R, …) from the runs' own records, as gradient_descent keeps R runs that
    advance together: a row at every multiple of ``record_every`` before the last run stops, and
    one at that iteration; a run that stopped earlier repeats its final record, with step NaN."""
    end = max(int(times[-1]) for times, _, _, _ in records)
    grid = np.array([*range(0, end, record_every), end], dtype=np.int64)
    columns = []
    for times, states, losses, etas in records:
        own = np.searchsorted(grid, times[-1])  # grid rows before the run's last iteration
        pad = len(grid) - own
        columns.append((
            np.concatenate([states[:own], np.repeat(states[-1:], pad, axis=0)]),
            np.concatenate([losses[:own], np.repeat(losses[-1:], pad)]),
            np.concatenate([etas[:own], np.full(pad, np.nan)]),
        ))  # fmt: skip
    states, losses, etas = (np.stack(parts, axis=1) for parts in zip(*columns, strict=True))
    return grid, states, losses, etas
