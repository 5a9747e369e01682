"""From the training dynamics to escape directions (Bantzis, Simon & Jacot 2025, §2.1–2.2 and §5).

:mod:`lib.networks.saddles` computes escape directions by a search on the sphere. This module asks
whether
*gradient descent from a small initialization* goes where the search goes, and measures the two
laws that the paper's picture of the dynamics rests on:

* **The time s (§2.1, Proposition A.1).** With the step η_k = η₀/‖θ_k‖^{L−2}, gradient descent on
  the localized loss L₀(θ) = Tr[Gᵀ Y_θ] (homogeneous of degree L) is exactly scale-equivariant:
  since ∇L₀(θ) = ‖θ‖^{L−1} ∇L₀(θ̄), the step is θ_{k+1} = θ_k − η₀‖θ_k‖ ∇L₀(θ̄_k) and the direction
  follows

      θ̄_{k+1} = (θ̄_k − η₀ ∇L₀(θ̄_k)) / ‖θ̄_k − η₀ ∇L₀(θ̄_k)‖,

  whatever the scale α of θ₀ = α θ̄₀, while ‖θ_k‖ (proportional to α) grows by the factor
  ‖θ̄_k − η₀∇L₀(θ̄_k)‖ per step. So the step s₁ at which the direction reaches an escape direction
  does not depend on α, and ‖θ(s₁)‖ = Cα (§2.2). :func:`limit_direction_flow` runs this iteration:
  the α → 0 limit of the training run, which the full loss follows while its outputs are small.
* **Weak balancedness (§5, conjecture 3).** For every hidden neuron i of layer ℓ,
  D_{ℓ,i} = ‖row_i(W_ℓ)‖² − ‖column_i(W_{ℓ+1})‖² is conserved by gradient flow on any loss of the
  outputs, because ⟨row_i, ∂C/∂row_i⟩ = ⟨column_i, ∂C/∂column_i⟩ (σ(z) = σ'(z) z, also with
  σ'(0) = 0). Gradient descent with step η_k changes it by exactly
  η_k² (‖∂C/∂row_i‖² − ‖∂C/∂column_i‖²) per step (:func:`balance_drift`), a second-order term.

Directions of two networks are compared by quantities that hidden-neuron permutations and the
rescalings W_ℓ → a_ℓ W_ℓ (a_ℓ > 0, ∏ a_ℓ = 1) leave unchanged: the speed −L₀ on the sphere
‖θ‖² = L (Definition 2.1), the distance from being an escape direction (:func:`escape_residual`),
the cosine between the outputs on the data (:func:`output_cosine`) and the per-layer tails
Σ_{i≥2} ς_i²/Σ_i ς_i² of Theorem 3.1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from lib.engine.flow import Trajectory
from lib.engine.validation import (
    NumericalFailure,
    as_array,
    as_float,
    as_int,
    as_list,
    as_positive_float,
    as_steps,
    as_tensor,
    check_finite_result,
    check_magnitude,
)
from lib.networks import _saddle_kernels, saddles

__all__ = [
    "BalanceDrift",
    "DirectionFlow",
    "balance_drift",
    "compare_directions",
    "escape_residual",
    "limit_direction_flow",
    "on_sphere",
    "output_cosine",
    "plateau_exit",
    "trajectory_weights",
    "weak_balance",
]

DTYPE = torch.float64
MAX_LAYERS = 1000
"""The most layers a network here may have (as :data:`lib.networks.saddles.MAX_DEPTH`)."""
MAX_ENTRIES = 10**8
"""The most float64 entries one recorded array may hold (800 MB)."""
OUTPUT_RANGE = 150 * math.log(10)
"""How far log ‖Y_θ‖ may grow between two renormalizations of :func:`limit_direction_flow`: from
outputs of order one to 10¹⁵⁰, far from float64's overflow at 10³⁰⁸. With L layers, log ‖θ‖ may
grow by OUTPUT_RANGE/L."""


# --------------------------------------------------------------------------------------------
# Checking inputs
# --------------------------------------------------------------------------------------------


def _as_network(weights, name: str = "weights") -> list[torch.Tensor]:
    """Weight matrices W_ℓ (n_ℓ × n_{ℓ−1}) of one bias-free network that chain, at least two."""
    weights = as_list(weights, name)
    if not 2 <= len(weights) <= MAX_LAYERS:
        raise ValueError(f"{name} must hold 2 to {MAX_LAYERS} weight matrices, got {len(weights)}")
    weights = [as_tensor(w, f"{name}[{i}]", ndim=2, nonempty=True, detach=True)
               for i, w in enumerate(weights)]
    for i in range(1, len(weights)):
        if weights[i].shape[1] != weights[i - 1].shape[0]:
            raise ValueError(
                f"{name}[{i}] must have {weights[i - 1].shape[0]} columns (the rows of "
                f"{name}[{i - 1}]), got shape {tuple(weights[i].shape)}"
            )
    if not any(bool(w.abs().sum() > 0) for w in weights):
        raise ValueError(f"{name} must not all be zero: the origin has no direction")
    return weights


def _as_inputs(X, weights: list[torch.Tensor], name: str = "X") -> torch.Tensor:
    X = check_magnitude(as_tensor(X, name, ndim=2, nonempty=True, detach=True), name)
    if X.shape[1] != weights[0].shape[1]:
        raise ValueError(
            f"{name} must have one column per input of the first layer ({weights[0].shape[1]}), "
            f"got shape {tuple(X.shape)} (points as rows)"
        )
    return X


def _as_gradient(G, X: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    G = check_magnitude(as_tensor(G, "G", detach=True), "G")
    if G.ndim == 1:
        G = G.unsqueeze(-1)
    if G.shape != (X.shape[0], weights[-1].shape[0]):
        raise ValueError(
            f"G must have shape (N, d_out) = ({X.shape[0]}, {weights[-1].shape[0]}) (one row per "
            f"point, one column per output), got {tuple(G.shape)}"
        )
    if not bool(G.abs().sum() > 0):
        raise ValueError("G must not be zero: a zero gradient at the origin has no escape")
    return G


def _as_problem(weights, X, G):
    weights = _as_network(weights)
    X = _as_inputs(X, weights)
    return weights, X, _as_gradient(G, X, weights)


# --------------------------------------------------------------------------------------------
# Directions and how to compare them
# --------------------------------------------------------------------------------------------


def _squared_norm(weights: Sequence[torch.Tensor]) -> float:
    return float(sum((w.double() ** 2).sum() for w in weights))


def _on_sphere(weights: list[torch.Tensor]) -> list[torch.Tensor]:
    scale = math.sqrt(len(weights) / _squared_norm(weights))
    return [w * scale for w in weights]


def on_sphere(weights) -> list[torch.Tensor]:
    """θ √L/‖θ‖: the point of the sphere ‖θ‖² = L (Definition 2.1) in the direction of θ."""
    weights = _as_network(weights)
    big = max(float(w.abs().max()) for w in weights)
    scaled = [w / big for w in weights]  # exact enough, and no overflow in ‖θ‖²
    return _on_sphere(scaled)


def _outputs(weights: list[torch.Tensor], X: torch.Tensor) -> torch.Tensor:
    """f_θ(X) = W_L σ(W_{L−1} ⋯ σ(W_1 x)), one row per point."""
    hidden = X
    for index, w in enumerate(weights):
        hidden = hidden @ w.T
        if index < len(weights) - 1:
            hidden = torch.relu(hidden)
    return hidden


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    norms = float(torch.linalg.norm(a)) * float(torch.linalg.norm(b))
    return float((a * b).sum()) / norms if norms > 0 else 0.0


def output_cosine(weights, reference, X) -> float:
    """cos ∠(f_θ(X), f_ρ(X)), the outputs on the data flattened (0 if either is zero).

    Unchanged by permutations of hidden neurons and by the rescalings W_ℓ → a_ℓ W_ℓ (a_ℓ > 0) of
    either network, which leave their functions' directions unchanged; a cosine of the parameters
    would not be. Two networks of different depths can be compared this way.
    """
    weights = _as_network(weights)
    reference = _as_network(reference, "reference")
    X = _as_inputs(X, weights)
    _as_inputs(X, reference)
    if weights[-1].shape[0] != reference[-1].shape[0]:
        raise ValueError(
            f"reference must have {weights[-1].shape[0]} outputs like weights, got "
            f"{reference[-1].shape[0]}"
        )
    return _cosine(_outputs(on_sphere(weights), X), _outputs(on_sphere(reference), X))


def _residual(weights: list[torch.Tensor], X: torch.Tensor, G: torch.Tensor) -> float:
    _, grads = saddles.localized_gradient(weights, X, G)
    theta = torch.cat([w.ravel() for w in weights])
    grad = torch.cat([g.ravel() for g in grads])
    size = float(torch.linalg.norm(grad))
    if size == 0.0:
        return 1.0
    tangent = grad - theta * float(grad @ theta) / float(theta @ theta)
    return float(torch.linalg.norm(tangent)) / size


def escape_residual(weights, X, G) -> float:
    """‖(I − θ̄θ̄ᵀ)∇L₀(θ)‖ / ‖∇L₀(θ)‖, the sine of the angle between θ and ∇L₀(θ).

    Zero exactly at the critical points of L₀ on the sphere (Definition 2.1: ∇L₀(ρ) = −sρ), where
    the projected flow of Proposition A.1 stops; 1 where the gradient is tangent to the sphere (or
    zero: a network whose neurons are all off). The gradient is backpropagation's, with σ'(0) = 0,
    so on a ReLU kink an escape direction in the generalized sense can leave a small residual.
    """
    weights, X, G = _as_problem(weights, X, G)
    return _residual(on_sphere(weights), X, G)


def _tails(weights: list[torch.Tensor]) -> np.ndarray:
    return np.array([saddles.tail_mass(w) for w in weights])


def compare_directions(weights, reference, X, G) -> dict[str, object]:
    """How close the direction of ``weights`` is to the escape direction ``reference``.

    Returns ``speed`` and ``reference_speed`` (−L₀ of each on the sphere ‖θ‖² = L of its own
    depth), ``speed_ratio``, ``residual`` (:func:`escape_residual` of ``weights``),
    ``output_cosine`` (:func:`output_cosine`) and the per-layer ``tails`` and
    ``reference_tails`` Σ_{i≥2} ς_i²/Σ_i ς_i² of Theorem 3.1 (arrays of length L; the two depths
    may differ). An all-zero ``X``, or a ``reference`` of speed 0 on the data, leaves the ratio
    undefined: a ValueError.
    """
    weights, X, G = _as_problem(weights, X, G)
    reference = _as_network(reference, "reference")
    _as_inputs(X, reference)
    _as_gradient(G, X, reference)
    if not bool(X.abs().sum() > 0):
        raise ValueError(
            "X must not be all zero: every network's outputs vanish on it, so both speeds −L₀ are "
            "0 and their ratio is undefined"
        )
    mine, theirs = on_sphere(weights), on_sphere(reference)
    speed = float(saddles.speed_of(mine, X, G))
    reference_speed = float(saddles.speed_of(theirs, X, G))
    if reference_speed == 0.0:
        raise ValueError(
            "reference must have a non-zero speed −L₀ on (X, G) (an escape direction's is > 0), "
            "got 0: the speed ratio is undefined"
        )
    return {
        "speed": speed,
        "reference_speed": reference_speed,
        "speed_ratio": speed / reference_speed,
        "residual": _residual(mine, X, G),
        "output_cosine": _cosine(_outputs(mine, X), _outputs(theirs, X)),
        "tails": _tails(mine),
        "reference_tails": _tails(theirs),
    }


def trajectory_weights(run: Trajectory, index: int) -> list[torch.Tensor]:
    """The matrices W1 … WL of record ``index`` of a training run (negative counts from the end).

    ``run``: a :class:`~lib.engine.flow.Trajectory` with parameters ``"W1"``, ``"W2"``, … (as
    :func:`lib.networks.saddles.saddle_to_saddle_run` returns).
    """
    if not isinstance(run, Trajectory):
        raise ValueError(f"run must be a lib.engine.flow.Trajectory, got {type(run).__name__}")
    depth = 0
    while f"W{depth + 1}" in run.params:
        depth += 1
    if depth < 2:
        raise ValueError("run must hold the weight matrices 'W1', 'W2', … of a network")
    records = len(run.times)
    index = as_int(index, "index", minimum=-records, maximum=records - 1)
    return [torch.as_tensor(np.array(run[f"W{i + 1}"][index]), dtype=DTYPE) for i in range(depth)]


def plateau_exit(losses, *, height: float, drop: float = 0.02) -> int | None:
    """The last record of a first plateau at ``height`` (log K for a K-class cross-entropy at the
    origin): the record before the loss first falls more than ``drop`` below ``height``.

    A threshold criterion. The run must start on the plateau, its first record within ``drop`` of
    ``height``; the records up to the fall are not inspected otherwise (a catapult's rise above
    ``height`` stays part of the plateau). ``None`` when there is no such plateau: the first
    record is already below height − drop, or above height + drop (the run does not start at
    ``height``), or the loss never falls (the run ends on the plateau).

    :func:`lib.networks.saddles.find_plateaus` asks something else (windows of range below
    ``tolerance``, at any level, merged where they touch), so the two need not agree. With
    ``tolerance = drop`` both find the first plateau 0 … e, e the record returned here, when the
    fall is sharp after a flat start: records 0 … e lie less than drop/2 from ``height`` and number
    at least ``window``, record e + 1 lies below height − 3·drop/2, and the ``window`` records from
    e + 1 span at least ``drop`` (no flat window touches the plateau's end). On a slow descent the
    loss crosses height − drop at another record than the one where the windows stop being flat.
    """
    losses = as_array(losses, "losses", ndim=1, nonempty=True)
    height = as_float(height, "height")
    drop = as_positive_float(drop, "drop")
    if losses[0] > height + drop:
        return None
    below = np.flatnonzero(losses < height - drop)
    if len(below) == 0 or below[0] == 0:
        return None
    return int(below[0] - 1)


# --------------------------------------------------------------------------------------------
# The α → 0 limit of gradient descent with the step η₀/‖θ‖^{L−2}
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DirectionFlow:
    """Result of :func:`limit_direction_flow`, one entry per record.

    ``times``: the steps k; ``weights``: list of (records, n_ℓ, n_{ℓ−1}) arrays, the directions on
    the sphere ‖θ‖² = L; ``log_growth``: log(‖θ_k‖/‖θ_0‖) of the iteration on L₀ (the same for every
    scale α of θ₀); ``speeds``: −L₀ of the directions on the sphere ‖θ‖² = L.
    """

    times: np.ndarray
    weights: list[np.ndarray]
    log_growth: np.ndarray
    speeds: np.ndarray

    def direction(self, index: int) -> list[torch.Tensor]:
        """The matrices of record ``index`` (negative counts from the end), on the sphere."""
        records = len(self.times)
        index = as_int(index, "index", minimum=-records, maximum=records - 1)
        return [torch.from_numpy(w[index].copy()) for w in self.weights]


def _record_steps(steps: int, record_every: int) -> np.ndarray:
    """0, record_every, 2·record_every, …, and the last step (the protocol of lib.engine.flow)."""
    times = np.arange(0, steps + 1, record_every)
    return times if times[-1] == steps else np.append(times, steps)


def _as_record_steps(steps, record_every, *, per_record: int, what: str) -> np.ndarray:
    """The recorded steps of a run of ``steps`` steps (checked by
    :func:`lib.engine.validation.as_steps`), once their count ⌈steps/record_every⌉ + 1 times
    ``per_record`` entries is known to fit
    :data:`MAX_ENTRIES` (counted before anything is allocated)."""
    steps, record_every = as_steps(steps, record_every, per_record=per_record)
    records = -(-steps // record_every) + 1
    if records * per_record > MAX_ENTRIES:
        raise ValueError(
            f"steps = {steps} recorded every {record_every} would keep {records} records of "
            f"{per_record} numbers ({what}), more than {MAX_ENTRIES:.0e}: raise record_every or "
            "lower steps"
        )
    return _record_steps(steps, record_every)


def limit_direction_flow(
    weights, X, G, *, eta0: float, steps: int, record_every: int = 100
) -> DirectionFlow:
    """Gradient descent θ_{k+1} = θ_k − η₀‖θ_k‖^{2−L} ∇L₀(θ_k) on L₀, started at ``weights``.

    The α → 0 limit of :func:`lib.networks.saddles.saddle_to_saddle_run` started at α·``weights``
    (§2.1: the full loss is C(0) + L₀ + O(‖Y‖²), and L₀'s gradient is the run's while its outputs
    are small). The iteration is scale-equivariant (module docstring), so it runs on the unit
    sphere, renormalized whenever the outputs may have grown by a factor e^:data:`OUTPUT_RANGE`,
    and keeps the growth apart in ``log_growth``. ``G`` = ∇C(0)
    (:func:`lib.networks.saddles.cross_entropy_gradient` for the cross-entropy).
    """
    weights, X, G = _as_problem(weights, X, G)
    eta0 = as_positive_float(eta0, "eta0")
    widths = [X.shape[1]] + [w.shape[0] for w in weights]
    count = sum(w.numel() for w in weights)
    times = _as_record_steps(steps, record_every, per_record=count, what="the weights")
    return _limit_flow(weights, X.numpy(), G.numpy(), widths, eta0, times)


def _localized_value(theta: np.ndarray, widths: list[int], x, g) -> float:
    """L₀ of the flat θ (numpy; a compiled call would cost more in thread-pool set-up)."""
    offsets = _saddle_kernels.layer_offsets(widths)
    weights = [
        torch.from_numpy(theta[offsets[i] : offsets[i + 1]].reshape(o, n))
        for i, (n, o) in enumerate(zip(widths[:-1], widths[1:], strict=True))
    ]
    return float((_outputs(weights, torch.from_numpy(x)) * torch.from_numpy(g)).sum())


def _advance(theta, widths, x, g, eta0, steps, tries):
    """``steps`` steps of the iteration from the unit vector ``theta``, in pieces short enough that
    log ‖θ‖ grows by at most OUTPUT_RANGE/L in each (a piece that grew more is run again in
    pieces a quarter as long). Returns the unit vector, the log growth, and the piece length."""
    depth = len(widths) - 1
    growth, done = 0.0, 0
    while done < steps:
        n = min(tries, steps - done)
        result = _saddle_kernels.schedule_descent(
            theta, widths, x, g, cost="localized", eta0=eta0, power=depth - 2, steps=n,
            record_every=n,
        )  # fmt: skip
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowed piece is run again
            size = float(np.linalg.norm(result[1][-1]))
        if result[-1] or not math.isfinite(size) or math.log(size) > OUTPUT_RANGE / depth:
            if n == 1:
                check_finite_result(math.inf, "one step of the iteration on L₀")
            tries = max(1, n // 4)
            continue
        growth += math.log(size)
        theta = result[1][-1] / size
        done += n
    return theta, growth, tries


def _limit_flow(weights, x, g, widths, eta0, times) -> DirectionFlow:
    depth = len(weights)
    theta = torch.cat([w.ravel() for w in weights]).numpy().copy()
    theta /= np.linalg.norm(theta)
    states, growth, values = [], [], []
    log_growth, previous, tries = 0.0, 0, max(1, int(np.diff(times).max(initial=1)))
    for target in times:
        theta, grown, tries = _advance(theta, widths, x, g, eta0, target - previous, tries)
        log_growth += grown
        previous = target
        states.append(theta * math.sqrt(depth))
        growth.append(log_growth)
        # L₀(√L θ̄) = L^{L/2} L₀(θ̄)
        values.append(-_localized_value(theta, widths, x, g) * depth ** (depth / 2))
    flat = np.array(states)
    offsets = _saddle_kernels.layer_offsets(widths)
    matrices = [
        flat[:, offsets[i] : offsets[i + 1]].reshape(len(times), o, n)
        for i, (n, o) in enumerate(zip(widths[:-1], widths[1:], strict=True))
    ]
    return DirectionFlow(
        times=times, weights=matrices, log_growth=np.array(growth), speeds=np.array(values)
    )


# --------------------------------------------------------------------------------------------
# Weak balancedness (§5, conjecture 3)
# --------------------------------------------------------------------------------------------


def _balance(weights: Sequence[torch.Tensor], sign: float = -1.0) -> list[np.ndarray]:
    """‖row_i(W_ℓ)‖² + sign · ‖column_i(W_{ℓ+1})‖² for every hidden neuron, layer by layer."""
    return [
        ((a.numpy() ** 2).sum(axis=1) + sign * (b.numpy() ** 2).sum(axis=0))
        for a, b in zip(weights[:-1], weights[1:], strict=True)
    ]


def weak_balance(weights) -> list[np.ndarray]:
    """D_ℓ = diag(W_ℓ W_ℓᵀ) − diag(W_{ℓ+1}ᵀ W_{ℓ+1}) for ℓ = 1 … L−1, one entry per hidden neuron.

    Entry i is ‖row_i(W_ℓ)‖² − ‖column_i(W_{ℓ+1})‖², the squared norm of the neuron's incoming
    weights minus that of its outgoing weights: the paper's diag(W_ℓᵀW_ℓ) = diag(W_{ℓ−1}W_{ℓ−1}ᵀ)
    (§5) with the layers counted from the neuron's side. Gradient flow conserves each entry.
    """
    return _balance(_as_network(weights))


@dataclass(frozen=True)
class BalanceDrift:
    """Result of :func:`balance_drift`, one row per record.

    ``times``: the steps k; ``balance``: (records, hidden neurons) D_k, the layers of
    :func:`weak_balance` one after the other; ``size``: (records, hidden neurons) the neurons'
    ‖row_i‖² + ‖column_i‖², the scale D is measured against; ``second_order``: (records, hidden
    neurons) Σ_{j<k} η_j² (‖∂C/∂row_i‖² − ‖∂C/∂column_i‖²), what the identity says D_k − D_0 is;
    ``losses``: the cross-entropy at the records; ``final``: the weights after the last step.
    """

    times: np.ndarray
    balance: np.ndarray
    size: np.ndarray
    second_order: np.ndarray
    losses: np.ndarray
    final: list[torch.Tensor]


def _as_labels(labels, X: torch.Tensor, classes: int) -> np.ndarray:
    if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64 or labels.ndim != 1:
        raise ValueError("labels must be a 1-D int64 tensor of class indices")
    if len(labels) != X.shape[0]:
        raise ValueError(f"labels has {len(labels)} entries but X has {X.shape[0]} rows")
    if int(labels.min()) < 0 or int(labels.max()) >= classes:
        raise ValueError(
            f"labels must be class indices in [0, {classes}) (the outputs of the last layer), got "
            f"[{int(labels.min())}, {int(labels.max())}]"
        )
    return np.eye(classes)[labels.numpy()]


def balance_drift(
    weights, X, labels, *, eta0: float, steps: int, record_every: int = 50
) -> BalanceDrift:
    """Gradient descent with the step η_k = η₀/‖θ_k‖^{L−2} on the mean softmax cross-entropy,
    one step at a time, with the exact account of weak balancedness.

    The iteration of :func:`lib.networks.saddles.saddle_to_saddle_run` (the same trajectory up to
    the order of floating-point sums) from ``weights``. Per hidden neuron, with g the gradient,
    ‖row − η g_row‖² − ‖col − η g_col‖² = D − 2η(⟨row, g_row⟩ − ⟨col, g_col⟩) + η²(‖g_row‖² −
    ‖g_col‖²) and the middle term is zero for ReLU networks: D changes only by the second-order
    term, which ``second_order`` sums. A numpy loop, several times slower than the compiled run:
    for checks over a few thousand steps.
    """
    weights = _as_network(weights)
    X = _as_inputs(X, weights)
    onehot = _as_labels(labels, X, weights[-1].shape[0])
    eta0 = as_positive_float(eta0, "eta0")
    hidden = sum(w.shape[0] for w in weights[:-1])
    times = _as_record_steps(steps, record_every, per_record=hidden, what="one per hidden neuron")
    if times[-1] > MAX_ENTRIES:
        raise ValueError(
            f"steps = {times[-1]} is too many for a step-by-step account (at most "
            f"{MAX_ENTRIES:.0e})"
        )
    with threadpool_limits(limits=1, user_api="blas"):  # small products: one thread is faster
        return _balance_run(weights, X.numpy(), onehot, eta0, times)


def _cross_entropy_gradient(weights: list[np.ndarray], x: np.ndarray, onehot: np.ndarray):
    """Mean softmax cross-entropy of the network's outputs and its gradient in every W_ℓ.

    Backpropagation with σ'(0) = 0: Δ_L = (softmax(Y) − onehot)/N, ∂C/∂W_ℓ = Δ_ℓᵀ Z^σ_{ℓ−1},
    Δ_{ℓ−1} = (Δ_ℓ W_ℓ) ⊙ [Z_{ℓ−1} > 0] (the passes of :mod:`lib.networks._saddle_kernels`).
    """
    activations, pre = [x], []
    for index, w in enumerate(weights):
        z = activations[-1] @ w.T
        pre.append(z)
        activations.append(np.maximum(z, 0.0) if index < len(weights) - 1 else z)
    shifted = activations[-1] - activations[-1].max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    delta = (np.exp(log_p) - onehot) / len(x)
    grads = [np.empty(0)] * len(weights)
    for index in reversed(range(len(weights))):
        grads[index] = delta.T @ activations[index]
        if index > 0:
            delta = (delta @ weights[index]) * (pre[index - 1] > 0)
    return float(-(log_p * onehot).sum() / len(x)), grads


def _neuron_terms(grads: list[np.ndarray]) -> np.ndarray:
    """‖∂C/∂row_i(W_ℓ)‖² − ‖∂C/∂column_i(W_{ℓ+1})‖² for every hidden neuron (layers in order)."""
    return np.concatenate(
        [
            (a**2).sum(axis=1) - (b**2).sum(axis=0)
            for a, b in zip(grads[:-1], grads[1:], strict=True)
        ]
    )


def _squared_step(eta0: float, mats: list[np.ndarray], power: int) -> tuple[float, float]:
    """η_k = η₀/‖θ_k‖^{L−2} and η_k², or NumericalFailure where η_k² exceeds float64."""
    eta = eta0 / sum(float((w**2).sum()) for w in mats) ** (power / 2)
    try:
        return eta, eta**2
    except OverflowError:
        raise NumericalFailure(
            f"the step η_k = eta0/‖θ_k‖^(L−2) = {eta:.3g} (eta0 = {eta0:.3g}) squared overflows "
            "float64: lower eta0"
        ) from None


def _balance_run(weights, x, onehot, eta0, times) -> BalanceDrift:
    mats = [w.numpy().copy() for w in weights]
    power = len(mats) - 2
    balance, size, second, losses = [], [], [], []
    total = np.zeros(sum(w.shape[0] for w in mats[:-1]))
    k = 0
    loss, grads = _cross_entropy_gradient(mats, x, onehot)  # at θ_k, kept from step to step
    for target in times:
        while k < target:
            eta, eta_squared = _squared_step(eta0, mats, power)
            total += eta_squared * _neuron_terms(grads)
            mats = [w - eta * d for w, d in zip(mats, grads, strict=True)]
            k += 1
            loss, grads = _cross_entropy_gradient(mats, x, onehot)
        check_finite_result(loss, "the cross-entropy")
        tensors = [torch.from_numpy(w) for w in mats]
        balance.append(check_finite_result(np.concatenate(_balance(tensors)), "the balance D_k"))
        size.append(check_finite_result(np.concatenate(_balance(tensors, 1.0)), "the sizes"))
        second.append(check_finite_result(total.copy(), "the second-order sum"))
        losses.append(loss)
    return BalanceDrift(
        times=times, balance=np.array(balance), size=np.array(size), second_order=np.array(second),
        losses=np.array(losses), final=[torch.from_numpy(w) for w in mats],
    )  # fmt: skip
