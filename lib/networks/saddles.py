"""The saddle at the origin of deep ReLU networks and its escape directions.

After Bantzis, Simon & Jacot 2025, "Saddle-to-saddle dynamics in deep ReLU networks".

Conventions (all functions of this module)
------------------------------------------
* Data ``X`` has shape ``(N, d_in)``: the N inputs are the **rows** (the paper stores them as
  columns, X ∈ R^{d_in×N}; only the orientation differs).
* ``G`` is the gradient of the cost at the zero output, G = ∇C(0): shape ``(N,)`` for a scalar
  output, or ``(N, d_out)``; row i belongs to input x_i. For the squared loss
  C(Y) = ‖Y − Y*‖²/(2N), G = −Y*/N; for the mean softmax cross-entropy,
  G = (1/N)(1/K − onehot(y)) (:func:`cross_entropy_gradient`).
* A network is a list of weight matrices W_1 ∈ R^{n_1×d_in}, …, W_L ∈ R^{d_out×n_{L−1}} (out ×
  in, as in the paper), without biases, ReLU σ after every layer but the last
  (:mod:`lib.networks.relu_nets`).
  Weights may carry a leading axis of independent runs (seeds).
* θ = (W_1, …, W_L) and ‖θ‖² = Σ_ℓ ‖W_ℓ‖_F².

Near θ = 0 the loss is C(0) + L₀(θ) + O(‖Y_θ‖²) with the *localized loss* (§2)

    L₀(θ) = Tr[Gᵀ Y_θ] = Σ_i ⟨G_i, f_θ(x_i)⟩,

positively homogeneous of degree L. An *escape direction* (Definition 2.1) is a ρ with ‖ρ‖² = L and
∇L₀(ρ) = −s ρ, s > 0 the *escape speed*; by Euler's identity s = −L₀(ρ) > 0 (the speed is minus
the value: L₀ < 0 means the loss goes down). The optimal speed is

    s*(L) = −min_{‖θ‖² = L} L₀(θ).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from lib.engine.flow import Trajectory, gradient_descent
from lib.engine.validation import (
    DTYPE,
    SEED_LIMIT,
    NumericalFailure,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_positive_float,
    as_seed,
    as_seeds,
    as_tensor,
    check_finite_result,
)
from lib.networks import _saddle_kernels
from lib.networks.relu_nets import relu_network

__all__ = [
    "EscapeSearch",
    "cross_entropy_gradient",
    "deepen",
    "escape_direction",
    "escape_search",
    "escape_speed",
    "example1",
    "example1_rank2_weights",
    "find_plateaus",
    "layer_statistics",
    "linear_escape_speed",
    "lipschitz_speed_bound",
    "localized_descent",
    "localized_gradient",
    "localized_loss",
    "proposition33_bound",
    "proposition34_bound",
    "radius_along_escape",
    "rank1_escape_speed",
    "rank1_speed_profile",
    "restart_seeds",
    "saddle_to_saddle_run",
    "speed_of",
    "speed_upper_bound",
    "stable_rank",
    "tail_mass",
    "theorem31_bound",
    "theorem31_constant",
]


MAX_DEPTH = 1000
"""The most layers a network here may have (a search at that depth already takes minutes)."""
MAX_WIDTH = 100_000
"""The widest hidden layer (as :func:`lib.networks.relu_nets.gaussian_weights`)."""
MAX_ENTRIES = 10**8
"""The most float64 entries (800 MB) one array of a run may hold: a network's parameters times its
runs, a recorded trajectory, a search's history, one-hot labels."""

# --------------------------------------------------------------------------------------------
# Data and the localized loss
# --------------------------------------------------------------------------------------------


def _finite(value, what: str):
    """``value`` if every entry is finite, else a :class:`NumericalFailure` naming ``what``."""
    check_finite_result(value.detach() if isinstance(value, torch.Tensor) else value, what)
    return value


def _entries(count: int, what: str) -> None:
    """Refuse an allocation of more than :data:`MAX_ENTRIES` float64 entries, before making it."""
    if count > MAX_ENTRIES:
        raise ValueError(f"{what} would hold {count:.3g} entries, more than {MAX_ENTRIES:.0e}")


_SAFE = 2.0**100
"""Entries of size in [2^−100, 2^100]: their squares and products of a few stay normal floats."""


def _binary_scale(values: torch.Tensor) -> float:
    """1, or the power of two c that brings max|values| to [½, 1) when it lies outside
    [2^−100, 2^100]. Scaling by a power of two is exact: homogeneous quantities computed on the
    scaled values and scaled back are the same numbers, without overflow or underflow."""
    largest = float(values.detach().abs().max()) if values.numel() else 0.0
    if largest == 0.0 or 1 / _SAFE <= largest <= _SAFE:
        return 1.0
    return math.ldexp(1.0, -math.frexp(largest)[1])


def _numpy(values: torch.Tensor) -> np.ndarray:
    """The float64 array of a tensor (detached: an input may require grad)."""
    return values.detach().numpy()


def _norm(values: torch.Tensor) -> float:
    """The Frobenius norm, without overflow or underflow in the sum of squares."""
    c = _binary_scale(values)
    return float(torch.linalg.norm(values.detach() * c)) / c


def _as_data(X, G) -> tuple[torch.Tensor, torch.Tensor]:
    """X as an (N, d_in) tensor and G as an (N, d_out) tensor (a (N,) G becomes one column)."""
    X = as_tensor(X, "X", ndim=2)
    G = as_tensor(G, "G")
    if G.ndim == 1:
        G = G.unsqueeze(-1)
    if G.ndim != 2:
        raise ValueError(f"G must have shape (N,) or (N, d_out), got shape {tuple(G.shape)}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X must hold at least one point of dimension >= 1, got {tuple(X.shape)}")
    if G.shape[0] != X.shape[0]:
        raise ValueError(
            f"G must have one row per data point: X has N = {X.shape[0]} rows (points as rows), "
            f"G has {G.shape[0]}"
        )
    if not bool(G.abs().sum() > 0):
        raise ValueError("G must not be zero: a zero gradient at the origin has no escape")
    return X, G


def _as_weights(
    weights, name: str = "weights", *, d_in: int | None = None, single: bool = False
) -> list[torch.Tensor]:
    """Weight matrices that chain (columns of W_ℓ = rows of W_{ℓ−1}), starting at width ``d_in``.

    With ``single=True`` they must be plain matrices (one network, no run axis).
    """
    weights = as_list(weights, name)
    if len(weights) > MAX_DEPTH:
        raise ValueError(f"{name} must hold at most {MAX_DEPTH} layers, got {len(weights)}")
    weights = [
        as_tensor(w, f"{name}[{i}]", min_ndim=2, nonempty=True) for i, w in enumerate(weights)
    ]
    if single and any(w.ndim != 2 for w in weights):
        raise ValueError(f"{name} must be the matrices of one network (no run axis)")
    runs = {tuple(w.shape[:-2]) for w in weights}
    if len(runs) > 1:
        raise ValueError(
            f"{name} must share one leading (run) shape, got "
            + ", ".join(f"{tuple(w.shape)}" for w in weights)
        )
    width = d_in
    for i, w in enumerate(weights):
        if width is not None and w.shape[-1] != width:
            raise ValueError(
                f"{name}[{i}] has {w.shape[-1]} columns but its input has width {width}"
            )
        width = w.shape[-2]
    return weights


def localized_loss(weights: Sequence[torch.Tensor], X, G) -> torch.Tensor:
    """L₀(θ) = Tr[Gᵀ Y_θ] = Σ_i ⟨G_i, f_θ(x_i)⟩ (§2 of the paper), one value per run.

    ``weights`` as in :func:`lib.networks.relu_nets.relu_network` (optionally with a leading run
    axis); returns a tensor of shape ``(runs,)`` or a scalar. Differentiable.
    """
    X, G = _as_data(X, G)
    weights = _as_weights(weights, d_in=X.shape[1])
    if weights[-1].shape[-2] != G.shape[1]:
        raise ValueError(
            f"the last layer has {weights[-1].shape[-2]} outputs but G has d_out = {G.shape[1]}"
        )
    return _finite(_localized_loss(weights, X, G), "L0(theta) (weights or data too large)")


def _localized_loss(weights: list[torch.Tensor], X: torch.Tensor, G: torch.Tensor):
    outputs = relu_network(weights, X)  # (..., N, d_out)
    return (outputs * G).sum(dim=(-1, -2))


def _squared_norm(weights: Sequence[torch.Tensor]) -> torch.Tensor:
    return sum((w**2).sum(dim=(-1, -2)) for w in weights)


def speed_of(weights: Sequence[torch.Tensor], X, G) -> torch.Tensor:
    """The speed −L₀(ρ) of the direction ρ = √L θ/‖θ‖ of θ (the point of the √L-sphere on its ray).

    By homogeneity this is −L₀(θ) (√L/‖θ‖)^L. Positive means escaping. One value per run.
    """
    X, G = _as_data(X, G)
    weights = _as_weights(weights, d_in=X.shape[1])
    if weights[-1].shape[-2] != G.shape[1]:
        raise ValueError(
            f"the last layer has {weights[-1].shape[-2]} outputs but G has d_out = {G.shape[1]}"
        )
    depth = len(weights)
    # The speed depends on θ's direction only: an exact rescaling by a power of two (one per run)
    # keeps ‖θ‖² and L₀ finite and normal for weights of any size.
    largest = torch.stack([w.detach().abs().amax(dim=(-1, -2)) for w in weights]).amax(0)
    if not bool((largest > 0).all()):
        raise ValueError("the direction of θ = 0 is undefined: every run needs nonzero weights")
    scales = torch.tensor(
        [_binary_scale(m) for m in largest.reshape(-1)], dtype=DTYPE
    ).reshape(largest.shape)
    weights = [w * scales[..., None, None] for w in weights]
    norm = _squared_norm(weights)
    scale = (depth / norm) ** (depth / 2)
    speed = -_localized_loss(weights, X, G) * scale
    return _finite(speed, "the speed (the data are too large)")


def cross_entropy_gradient(labels, classes: int) -> torch.Tensor:
    """G = ∇C(0) = (1/N)(1/K − onehot(y)), shape (N, K), for the mean softmax cross-entropy.

    At the zero output every class has probability 1/K, so C(0) = log K: the first plateau.
    """
    classes = as_int(classes, "classes", minimum=2)
    labels = _labels(labels)
    if int(labels.max()) >= classes:
        raise ValueError(f"labels must lie in 0..{classes - 1}, got {int(labels.max())}")
    _entries(len(labels) * classes, "G (one row of classes per label)")
    onehot = torch.nn.functional.one_hot(labels, classes).to(DTYPE)
    return (1.0 / classes - onehot) / len(labels)


def _labels(labels) -> torch.Tensor:
    """A non-empty 1-D int64 tensor of class indices >= 0."""
    if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64 or labels.ndim != 1:
        raise ValueError(
            "labels must be a 1-D int64 tensor of class indices, got "
            + (
                f"a tensor of dtype {labels.dtype} and shape {tuple(labels.shape)}"
                if isinstance(labels, torch.Tensor)
                else type(labels).__name__
            )
        )
    if len(labels) == 0 or int(labels.min()) < 0:
        raise ValueError("labels must be non-empty class indices >= 0")
    return labels


def example1() -> tuple[torch.Tensor, torch.Tensor]:
    """Example 1: x_j = (sin(2πj/8), cos(2πj/8)), G_j = (−1)^j, j = 1, …, 8.

    The coordinates are set exactly (0, ±1, ±1/√2), so that points on the axes and diagonals sit
    exactly on the kinks of the eq. (2) network rather than one rounding error away.
    """
    s = math.sqrt(0.5)
    X = [[s, s], [1, 0], [s, -s], [0, -1], [-s, -s], [-1, 0], [-s, s], [0, 1]]
    G = [(-1.0) ** j for j in range(1, 9)]
    return torch.tensor(X, dtype=DTYPE), torch.tensor(G, dtype=DTYPE)


def example1_rank2_weights() -> list[torch.Tensor]:
    """The rank-2 escape direction of eq. (2), with speed ½ on :func:`example1`.

    W₁ = ½[[1, 0], [0, 1], [−1, 0], [0, −1]], W₂ = ½[1, −1, 1, −1], W₃ = [−1]. The paper prints
    W₃ = [1], which with G_j = (−1)^j gives L₀ = +½ (ascent); the sign here makes L₀ = −½.
    """
    w1 = 0.5 * torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]], dtype=DTYPE)
    w2 = 0.5 * torch.tensor([[1.0, -1.0, 1.0, -1.0]], dtype=DTYPE)
    w3 = torch.tensor([[-1.0]], dtype=DTYPE)
    return [w1, w2, w3]


# --------------------------------------------------------------------------------------------
# Closed forms for the speed
# --------------------------------------------------------------------------------------------


def _scaled_data(X: torch.Tensor, G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(c_X X, c_G G, 1/(c_X c_G)) with exact power-of-two scales (:func:`_binary_scale`): for the
    quantities here, of degree 1 in X and in G, value(X, G) = value(c_X X, c_G G) / (c_X c_G)."""
    cx, cg = _binary_scale(X), _binary_scale(G)
    return X.detach() * cx, G.detach() * cg, 1.0 / (cx * cg)  # numbers, not a graph


def _one_neuron_value(X: np.ndarray, G: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """‖Gᵀ σ(X w)‖₂ for each row w of ``directions`` (shape (M, d_in)) -> (M,)."""
    active = np.maximum(directions @ X.T, 0.0)  # (M, N)
    return np.linalg.norm(active @ G, axis=-1)


def rank1_escape_speed(X, G) -> float:
    """s₁ = max_{‖w‖=1} ‖Gᵀ σ(X w)‖₂, the best speed of a network whose layers are all rank 1.

    For a scalar output this is max_w |Σ_i G_i σ(x_i·w)|, the maximum of eq. (6) for Example 1;
    it is also the optimal speed of a shallow network, s*(2) = s₁ (the best shallow escape is a
    single neuron: W₁ = e₁wᵀ, W₂ = u e₁ᵀ with u = −Gᵀσ(Xw)/‖Gᵀσ(Xw)‖).

    Computed exactly, not by sampling: the maximum generally sits on a kink (a direction w ⟂ x_i).
    For d_in = 2 the kinks split the circle into arcs on which the active set A is fixed and the
    objective is ‖M_A w‖ with M_A = Σ_{i∈A} G_i x_iᵀ; its maximum over an arc is at an end (a kink)
    or at ± the top right singular vector of M_A if that lies inside. All candidates are
    enumerated. For d_in = 1 the candidates are w = ±1. For d_in ≥ 3 the problem is a
    difference-of-convex maximization (NP-hard in general) and a ``ValueError`` is raised: use
    :func:`escape_speed` with ``depth=2`` for a search (a lower bound).
    """
    X, G = _as_data(X, G)
    Xs, Gs, factor = _scaled_data(X, G)
    speed = _rank1_speed(Xs.numpy(), Gs.numpy()) * factor
    return float(_finite(speed, "the rank-1 speed (the data are too large)"))


def _rank1_speed(Xn: np.ndarray, Gn: np.ndarray) -> float:
    """:func:`rank1_escape_speed` on checked data."""
    d = Xn.shape[1]
    if d == 1:
        return float(_one_neuron_value(Xn, Gn, np.array([[1.0], [-1.0]])).max())
    if d != 2:
        raise ValueError(
            f"rank1_escape_speed is exact only for d_in <= 2 (X has d_in = {d}); for larger "
            "inputs use escape_speed(X, G, depth=2, ...) as a search"
        )
    keep = np.linalg.norm(Xn, axis=1) > 0
    Xn, Gn = Xn[keep], Gn[keep]
    if len(Xn) == 0:
        return 0.0
    point_angles = np.arctan2(Xn[:, 1], Xn[:, 0])
    kinks = np.concatenate([point_angles + np.pi / 2, point_angles - np.pi / 2]) % (2 * np.pi)
    kinks = np.unique(kinks)
    candidates = [kinks]
    ends = np.append(kinks[1:], kinks[0] + 2 * np.pi)
    for start, end in zip(kinks, ends, strict=True):
        middle = 0.5 * (start + end)
        w_mid = np.array([math.cos(middle), math.sin(middle)])
        active = Xn @ w_mid > 0
        m = Gn[active].T @ Xn[active]  # (d_out, 2) = M_A
        if not np.any(m):
            continue
        _, _, vt = np.linalg.svd(m)
        for sign in (1.0, -1.0):
            angle = math.atan2(sign * vt[0, 1], sign * vt[0, 0])
            offset = (angle - start) % (2 * np.pi)
            if offset <= end - start:
                candidates.append(np.array([angle]))
    angles = np.concatenate(candidates)
    directions = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    return float(_one_neuron_value(Xn, Gn, directions).max())


def rank1_speed_profile(X, G, angles) -> np.ndarray:
    """s(φ) = ‖Gᵀσ(X w_φ)‖, w_φ = (cos φ, sin φ), d_in = 2: eq. (6) of the paper for Example 1."""
    X, G = _as_data(X, G)
    if X.shape[1] != 2:
        raise ValueError(f"the angle profile needs d_in = 2, got d_in = {X.shape[1]}")
    angles = as_tensor(angles, "angles", ndim=1, nonempty=True).detach().numpy()
    directions = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    Xs, Gs, factor = _scaled_data(X, G)
    profile = _one_neuron_value(Xs.numpy(), Gs.numpy(), directions) * factor
    return _finite(profile, "the speed profile (the data are too large)")


def linear_escape_speed(X, G) -> float:
    """s*_lin = ‖Gᵀ X‖_op, the optimal speed of a deep *linear* network (σ = id), any L ≥ 2.

    With a scalar output, ‖Σ_i G_i x_i‖₂. The optimum is rank 1 in every layer, built on the top
    singular pair of −GᵀX (for the squared loss the input–output cross-covariance, as in Saxe et
    al.).
    """
    X, G = _as_data(X, G)
    Xs, Gs, factor = _scaled_data(X, G)
    speed = float(torch.linalg.matrix_norm(Gs.T @ Xs, ord=2)) * factor
    return float(_finite(speed, "the linear speed (the data are too large)"))


def speed_upper_bound(X, G) -> float:
    """‖X‖_F ‖G‖_F ≥ s*(L) for every depth (Cauchy–Schwarz; ∏‖W_ℓ‖_op ≤ 1 on the sphere)."""
    X, G = _as_data(X, G)
    return float(_finite(_norm(X) * _norm(G), "‖X‖_F ‖G‖_F (the data are too large)"))


def lipschitz_speed_bound(X, G) -> float:
    """An upper bound on s*(L) for a scalar output, valid at every depth L ≥ 2, by transport.

    On the sphere ‖θ‖² = L, ∏_ℓ ‖W_ℓ‖_op ≤ ∏_ℓ ‖W_ℓ‖_F ≤ 1 (AM–GM), so f_θ is 1-Lipschitz and
    f_θ(0) = 0. Split G = G⁺ − G⁻ and write it as a plan π_ij ≥ 0 that moves mass from points with
    G_i > 0 to points with G_j < 0, the rest (a_i, b_j) to the origin. Then

        |L₀(θ)| = |Σ_ij π_ij (f(x_i) − f(x_j)) + Σ_i a_i f(x_i) − Σ_j b_j f(x_j)|
                ≤ Σ_ij π_ij ‖x_i − x_j‖ + Σ_i a_i ‖x_i‖ + Σ_j b_j ‖x_j‖,

    and the cheapest plan (a linear program, :func:`scipy.optimize.linprog`) is returned. It is at
    most Σ_i |G_i| ‖x_i‖ ≤ ‖X‖_F‖G‖_F (everything to the origin). For Example 1 it pairs each point
    with a neighbour: 4 · 2 sin(π/8) ≈ 3.06, against ‖X‖_F‖G‖_F = 8. Raises ``ValueError`` for
    d_out > 1 (the vector-valued transport bound is not implemented).
    """
    X, G = _as_data(X, G)
    if G.shape[1] != 1:
        raise ValueError(
            f"lipschitz_speed_bound needs a scalar output (d_out = 1), got d_out = {G.shape[1]}"
        )
    x, g, factor = _scaled_data(X, G)  # the cheapest plan's cost has degree 1 in X and in G
    bound = _transport_cost(x.numpy(), g.numpy()[:, 0]) * factor
    return float(_finite(bound, "the transport bound (the data are too large)"))


def _transport_cost(x: np.ndarray, g: np.ndarray) -> float:
    """The linear program of :func:`lipschitz_speed_bound` on checked data."""
    from scipy.optimize import linprog

    pos, neg = np.flatnonzero(g > 0), np.flatnonzero(g < 0)
    if len(pos) == 0 and len(neg) == 0:
        return 0.0
    norms = np.linalg.norm(x, axis=1)
    cost_pairs = np.linalg.norm(x[pos][:, None, :] - x[neg][None, :, :], axis=-1).ravel()
    cost = np.concatenate([cost_pairs, norms[pos], norms[neg]])
    n_p, n_n = len(pos), len(neg)
    rows = []
    for a in range(n_p):  # Σ_j π_aj + a_a = G_a⁺
        row = np.zeros(len(cost))
        row[a * n_n : (a + 1) * n_n] = 1.0
        row[n_p * n_n + a] = 1.0
        rows.append(row)
    for b in range(n_n):  # Σ_i π_ib + b_b = G_b⁻
        row = np.zeros(len(cost))
        row[b : n_p * n_n : n_n] = 1.0
        row[n_p * n_n + n_p + b] = 1.0
        rows.append(row)
    rhs = np.concatenate([g[pos], -g[neg]])
    result = linprog(cost, A_eq=np.array(rows), b_eq=rhs, bounds=(0, None), method="highs")
    if not result.success:  # pragma: no cover - the plan "all to the origin" is always feasible
        raise NumericalFailure(f"the transport linear program failed: {result.message}")
    return float(result.fun)


# --------------------------------------------------------------------------------------------
# Searching for escape directions: projected gradient descent on the sphere
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EscapeSearch:
    """Result of :func:`escape_search`, one entry per seed.

    ``speeds``: (S,) final speeds −L₀; ``weights``: list of (S, n_ℓ, n_{ℓ−1}) tensors on the
    sphere ‖θ‖² = L; ``history``: (steps + 1, S) speed after each step; ``seeds``.
    """

    speeds: np.ndarray
    weights: list[torch.Tensor]
    history: np.ndarray
    seeds: tuple[int, ...]

    def __post_init__(self):
        """Check the fields (one entry per seed throughout) and store them as numpy/torch."""
        seeds = tuple(as_seeds(self.seeds))
        runs = len(seeds)
        speeds = _numpy(as_tensor(self.speeds, "speeds", shape=(runs,)))
        history = _numpy(as_tensor(self.history, "history", shape=(None, runs), nonempty=True))
        weights = _as_weights(self.weights)
        if any(w.ndim != 3 or w.shape[0] != runs for w in weights):
            raise ValueError(
                f"weights must be (S, n_out, n_in) tensors with S = {runs} runs, got "
                + ", ".join(f"{tuple(w.shape)}" for w in weights)
            )
        for name, value in (("seeds", seeds), ("speeds", speeds), ("history", history)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "weights", weights)

    def direction(self, index: int) -> list[torch.Tensor]:
        """The weights of run ``index`` (a list of matrices)."""
        index = as_int(index, "index", minimum=0)
        if index >= len(self.seeds):
            raise ValueError(f"index must be < {len(self.seeds)}, got {index}")
        return [w[index].clone() for w in self.weights]

    @property
    def best(self) -> int:
        """The index of the fastest run."""
        return int(np.argmax(self.speeds))


ENGINES = ("compiled", "numpy")


def _widths(X: torch.Tensor, G: torch.Tensor, depth: int, width: int) -> list[int]:
    return [X.shape[1]] + [width] * (depth - 1) + [G.shape[1]]


def _architecture(depth, width) -> tuple[int, int]:
    """A checked (depth, width) of the searched or trained networks."""
    depth = as_int(depth, "depth", minimum=2, maximum=MAX_DEPTH)
    width = as_int(width, "width", minimum=1, maximum=MAX_WIDTH)
    return depth, width


def _parameter_count(widths: list[int]) -> int:
    return sum(a * b for a, b in zip(widths[:-1], widths[1:], strict=True))


_INT64_MAX = 2**63 - 1


def _schedule(steps, record_every, size: int) -> tuple[int, int]:
    """Checked ``steps`` ≥ 0 and ``record_every`` ≥ 1 of a descent whose recorded trajectory (one
    θ of ``size`` entries per record) fits in :data:`MAX_ENTRIES`."""
    steps = as_int(steps, "steps", minimum=0, maximum=_INT64_MAX)  # the compiled loop's counters
    record_every = as_int(record_every, "record_every", minimum=1, maximum=_INT64_MAX)
    _entries((steps // record_every + 2) * size, "the recorded trajectory (records × parameters)")
    return steps, record_every


def _onto_sphere(weights: list[np.ndarray], radius: float) -> list[np.ndarray]:
    """Rescale each run's θ (leading axis) onto the sphere ‖θ‖ = radius."""
    scale = radius / np.sqrt(sum((w**2).sum(axis=(-1, -2)) for w in weights))
    return [w * scale[:, None, None] for w in weights]


def _forward_backward(
    weights: list[np.ndarray], X: np.ndarray, cost
) -> tuple[np.ndarray, list[np.ndarray]]:
    """A cost of the outputs and its gradient in every W_ℓ by backpropagation (σ'(0) = 0).

    ``cost(Y) -> (value, ∂value/∂Y)`` acts on the outputs Y (runs on the leading axis). Plain
    numpy: for these small networks it is several times faster than autograd (tested against
    autograd in the unit tests).
    """
    hidden, activations, pre = X[None], [X[None]], []
    for index, w in enumerate(weights):
        z = hidden @ np.swapaxes(w, -1, -2)
        pre.append(z)
        hidden = np.maximum(z, 0.0) if index < len(weights) - 1 else z
        activations.append(hidden)
    value, delta = cost(hidden)
    grads: list[np.ndarray] = [np.empty(0)] * len(weights)
    for index in reversed(range(len(weights))):
        grads[index] = np.swapaxes(delta, -1, -2) @ activations[index]
        if index > 0:
            delta = (delta @ weights[index]) * (pre[index - 1] > 0)
    return value, grads


def _localized_loss_and_gradient(
    weights: list[np.ndarray], X: np.ndarray, G: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]]:
    """L₀ per run and its gradient (runs on the leading axis of every W_ℓ)."""
    return _forward_backward(
        weights, X, lambda y: ((y * G).sum(axis=(-1, -2)), np.broadcast_to(G, y.shape))
    )


def localized_gradient(weights: Sequence[torch.Tensor], X, G):
    """``(L₀, [∂L₀/∂W_ℓ])`` for one network (no run axis), by backpropagation with σ'(0) = 0.

    The same values as autograd on :func:`localized_loss`, faster; usable as the ``gradient``
    closure of :func:`lib.engine.flow.gradient_descent` (wrap the list into the parameter dict).
    """
    X, G = _as_data(X, G)
    weights = _as_weights(weights, d_in=X.shape[1], single=True)
    if weights[-1].shape[0] != G.shape[1]:
        raise ValueError(
            f"the last layer has {weights[-1].shape[0]} outputs but G has d_out = {G.shape[1]}"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        value, grads = _localized_loss_and_gradient(
            [_numpy(w)[None] for w in weights], _numpy(X), _numpy(G)
        )
    for part in (value, *grads):
        _finite(part, "L0 or its gradient (weights or data too large)")
    return torch.tensor(float(value[0]), dtype=DTYPE), [torch.from_numpy(g[0]) for g in grads]


def localized_descent(
    weights: Sequence[torch.Tensor], X, G, *, lr: float, steps: int, record_every: int = 1
) -> Trajectory:
    """Gradient descent θ_{k+1} = θ_k − η ∇L₀(θ_k) on the localized loss, from one network.

    Euler's method with step η = ``lr`` on the gradient flow of §2.1 (Prop. A.1) and Prop. 2.2,
    compiled (:func:`lib.networks._saddle_kernels.schedule_descent` with power 0). Returns the
    :class:`~lib.engine.flow.Trajectory` that :func:`lib.engine.flow.gradient_descent` returns with
    :func:`localized_gradient` as its gradient (parameters ``"W1"`` … ``"WL"``), up to the order
    of floating-point sums (tested). ``lr`` > 0, ``steps`` ≥ 0, ``record_every`` ≥ 1; a run whose
    loss turns non-finite stops there with ``info["diverged"] = True``, as in
    :mod:`lib.engine.flow`. """
    X, G = _as_data(X, G)
    weights = _as_weights(weights, d_in=X.shape[1], single=True)
    if weights[-1].shape[0] != G.shape[1]:
        raise ValueError(
            f"the last layer has {weights[-1].shape[0]} outputs but G has d_out = {G.shape[1]}"
        )
    lr = as_positive_float(lr, "lr")
    steps, record_every = _schedule(steps, record_every, sum(w.numel() for w in weights))
    widths = [X.shape[1]] + [w.shape[0] for w in weights]
    theta0 = np.concatenate([_numpy(w).ravel() for w in weights])
    result = _saddle_kernels.schedule_descent(
        theta0, widths, _numpy(X), _numpy(G), cost="localized", eta0=lr, power=0.0, steps=steps,
        record_every=record_every,
    )  # fmt: skip
    return _trajectory(widths, *result)


def escape_search(
    X,
    G,
    *,
    depth: int,
    width: int,
    seeds: Sequence[int],
    steps: int = 6000,
    lr: tuple[float, float] = (0.1, 1e-5),
    engine: str = "compiled",
) -> EscapeSearch:
    """Projected gradient descent of L₀ on the sphere ‖θ‖² = L, one run per seed.

    Each seed draws θ₀ with i.i.d. standard normal entries (hidden widths all equal to ``width``)
    and rescales it onto the sphere. Each step moves along the tangent part of the gradient,
    g_⊥ = ∇L₀ − θ⟨θ, ∇L₀⟩/‖θ‖², by a fixed *angle* η_k (the step is η_k √L g_⊥/‖g_⊥‖), then
    rescales onto the sphere. Normalizing the step matters at depth: at a random point the gradient
    is of order n^{−L/2} and plain projected descent stalls. The angle decays geometrically from
    ``lr[0]`` to ``lr[1]``: optimal directions sit on ReLU kinks, where a fixed step oscillates.
    The fixed points of a fixed-angle iteration are the critical points of L₀ on the sphere
    (Definition 2.1); with the decaying angle a run also stops moving once the angle is small,
    critical or not, so the speed it ends at is a lower bound on s*(L), and the end point is an
    escape direction only where a separate criticality check says so.

    ``engine="compiled"`` (the default) runs each seed's whole loop compiled by numba
    (:func:`lib.networks._saddle_kernels.sphere_descent`); ``engine="numpy"`` runs the same
    iteration vectorized over the seeds in numpy. They differ only in the order of floating-point
    sums (tested to 1e-10 over a few hundred steps).
    """
    X, G = _as_data(X, G)
    depth, width = _architecture(depth, width)
    seeds = tuple(as_seeds(seeds))
    steps = as_int(steps, "steps", minimum=1)
    lr = as_list(lr, "lr")
    if len(lr) != 2:
        raise ValueError(f"lr must be a pair (first angle, last angle), got {lr}")
    lr_first, lr_last = (
        as_float(v, f"lr[{i}]", minimum=0.0, maximum=math.pi, open_minimum=True)
        for i, v in enumerate(lr)
    )
    engine = as_choice(engine, "engine", ENGINES)
    widths = _widths(X, G, depth, width)
    _entries(_parameter_count(widths) * len(seeds), "the searched networks (parameters × seeds)")
    _entries((steps + 1) * len(seeds), "the search's history (steps × seeds)")
    runs = []
    for seed in seeds:
        rng = np.random.RandomState(seed)
        runs.append(
            [rng.standard_normal((o, i)) for i, o in zip(widths[:-1], widths[1:], strict=False)]
        )
    weights = [np.stack([run[layer] for run in runs]) for layer in range(depth)]
    radius = math.sqrt(depth)
    weights = _onto_sphere(weights, radius)
    angles = np.geomspace(lr_first, lr_last, steps)
    x, g = _numpy(X), _numpy(G)
    if engine == "compiled":
        flat = np.concatenate([w.reshape(len(seeds), -1) for w in weights], axis=1)
        history, flat = _saddle_kernels.sphere_descent(flat, widths, x, g, angles, radius)
        weights = _unflatten(flat, widths)
    else:
        with threadpool_limits(limits=1, user_api="blas"), np.errstate(all="ignore"):
            history, weights = _sphere_descent(weights, x, g, angles, radius)
    _finite(history, "the search's speeds (the data are too large)")
    weights = [torch.from_numpy(w) for w in weights]
    return EscapeSearch(speeds=history[-1].copy(), weights=weights, history=history, seeds=seeds)


def _unflatten(flat: np.ndarray, widths: list[int]) -> list[np.ndarray]:
    """The matrices W_ℓ (leading axes kept) of flat θ vectors in the layout of
    lib.networks._saddle_kernels."""
    offsets = _saddle_kernels.layer_offsets(widths)
    return [
        flat[..., offsets[i] : offsets[i + 1]].reshape((*flat.shape[:-1], o, n))
        for i, (n, o) in enumerate(zip(widths[:-1], widths[1:], strict=True))
    ]


def _sphere_descent(weights, x, g, angles, radius):
    """The loop of :func:`escape_search` (numpy; one BLAS thread: these matrices are tiny)."""
    depth, steps = len(weights), len(angles)
    history = np.empty((steps + 1, weights[0].shape[0]))
    for k in range(steps + 1):
        value, grads = _localized_loss_and_gradient(weights, x, g)
        history[k] = -value
        if k == steps:
            break
        radial = (
            sum((dw * w).sum(axis=(-1, -2)) for dw, w in zip(grads, weights, strict=False)) / depth
        )
        tangent = [dw - radial[:, None, None] * w for dw, w in zip(grads, weights, strict=False)]
        norm = np.sqrt(sum((t**2).sum(axis=(-1, -2)) for t in tangent))
        step = angles[k] * radius / np.maximum(norm, 1e-300)
        weights = _onto_sphere(
            [w - step[:, None, None] * t for w, t in zip(weights, tangent, strict=False)], radius
        )
    return history, weights


def restart_seeds(seed: int, restarts: int) -> list[int]:
    """The seeds of ``restarts`` random starts for ``seed``: restarts·seed + i, i < restarts.

    Disjoint for different seeds, and just ``[seed]`` for a single start.
    The largest, restarts·(seed + 1) − 1, must be a valid seed (at most 2³² − 1).
    """
    seed = as_seed(seed)
    restarts = as_int(restarts, "restarts", minimum=1)
    if restarts * (seed + 1) - 1 > SEED_LIMIT:
        raise ValueError(
            f"restarts·(seed + 1) − 1 must be a valid seed (<= {SEED_LIMIT}), got "
            f"{restarts} restarts of seed {seed}"
        )
    return [restarts * seed + i for i in range(restarts)]


def _best_start(X, G, depth, width, seed, steps, restarts, engine) -> tuple[EscapeSearch, int]:
    seeds = restart_seeds(seed, restarts)
    search = escape_search(X, G, depth=depth, width=width, seeds=seeds, steps=steps, engine=engine)
    return search, search.best


def escape_speed(
    X,
    G,
    *,
    depth: int,
    width: int,
    seed: int,
    steps: int = 6000,
    restarts: int = 1,
    engine: str = "compiled",
) -> float:
    """The speed −L₀ that :func:`escape_search` reaches from ``seed`` (a lower bound on s*(L)).

    The search is a non-convex ascent on the sphere, and a single start can end at a slower
    escape direction (on Example 1 at depth 3 and width 8, most single starts stop at the rank-1
    speed √2 − 1). With ``restarts = k`` it runs k starts (:func:`restart_seeds`) in one
    search and returns the best. ``engine`` as in :func:`escape_search`.
    """
    search, best = _best_start(X, G, depth, width, seed, steps, restarts, engine)
    return float(search.speeds[best])


def escape_direction(
    X,
    G,
    *,
    depth: int,
    width: int,
    seed: int,
    steps: int = 6000,
    restarts: int = 1,
    engine: str = "compiled",
) -> list[torch.Tensor]:
    """The direction (weights on ‖θ‖² = L) whose speed :func:`escape_speed` reports."""
    search, best = _best_start(X, G, depth, width, seed, steps, restarts, engine)
    return search.direction(best)


# --------------------------------------------------------------------------------------------
# Proposition 2.2: blow-up along an escape direction
# --------------------------------------------------------------------------------------------

NORMALIZATIONS = ("sphere", "printed")


def radius_along_escape(
    times, *, radius0: float, speed: float, depth: int, normalization: str = "sphere"
) -> np.ndarray:
    """‖θ(t)‖ under gradient flow on L₀ started at θ(0) = radius0 · ρ/‖ρ‖ on an escape ray.

    Proposition 2.2 (proof in App. A.2): the direction stays put and R = ‖θ‖ solves
    dR/dt = L s_u R^{L−1}, so

        R(t) = (R₀^{2−L} + (2−L) L s_u t)^{1/(2−L)}   (L ≠ 2),    R(t) = R₀ exp(2 s_u t)   (L = 2),

    where s_u = −L₀(ρ/‖ρ‖) is the speed measured on the **unit** sphere. With the speed s of
    Definition 2.1 (measured on the sphere ‖ρ‖² = L) one has s_u = s L^{−L/2}:
    ``normalization="sphere"`` (default) makes this conversion, ``"printed"`` plugs s in for s_u
    as the paper's statement reads, which is off by the factor L^{L/2} in the rate. Beyond the
    finite blow-up time T* = R₀^{2−L}/((L−2) L s_u) (L > 2) the radius is infinite and the result
    is ``inf``; a finite radius beyond float64 (before T*, or for L = 2) raises
    :class:`~lib.engine.validation.NumericalFailure`. Computed as R₀ (1 − (L−2) L s_u R₀^{L−2}
    t)^{−1/(L−2)}, which has no intermediate overflow for tiny R₀.
    """
    times = as_tensor(times, "times", ndim=1, nonempty=True).detach().numpy()
    if np.any(times < 0):
        raise ValueError(f"times must be >= 0, got min {times.min():g}")
    radius0 = np.float64(as_positive_float(radius0, "radius0"))
    speed = as_positive_float(speed, "speed")
    depth = as_int(depth, "depth", minimum=2, maximum=MAX_DEPTH)
    normalization = as_choice(normalization, "normalization", NORMALIZATIONS)
    unit_speed = speed * depth ** (-depth / 2) if normalization == "sphere" else speed
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        if depth == 2:
            return _finite(radius0 * np.exp(2 * unit_speed * times), "R(t) (exp(2 s t) overflows)")
        rate = (depth - 2) * depth * unit_speed * radius0 ** (depth - 2)
        base = 1.0 - np.where(times > 0, rate * times, 0.0)
        radius = np.where(base > 0, radius0 * np.abs(base) ** (-1.0 / (depth - 2)), np.inf)
    _finite(radius[base > 0], "R(t) before the blow-up time (beyond float64)")
    return radius


# --------------------------------------------------------------------------------------------
# Low rank: tail mass, stable rank and the bounds of Theorem 3.1, Propositions 3.3–3.4
# --------------------------------------------------------------------------------------------


def _as_matrix(A, name: str) -> torch.Tensor:
    A = as_tensor(A, name, ndim=2, nonempty=True)
    if not bool(A.abs().sum() > 0):
        raise ValueError(f"{name} must not be the zero matrix")
    return A


def stable_rank(A) -> float:
    """srank(A) = ‖A‖_F² / ‖A‖_op² ∈ [1, rank A], for a nonzero matrix of any scale."""
    return _stable_rank(_as_matrix(A, "A"))


def _stable_rank(A: torch.Tensor) -> float:
    """srank of a nonzero matrix. It is scale-free: an exact power-of-two rescaling first keeps
    ‖A‖² normal for entries of 1e-200 or 1e200 (and changes nothing for ordinary ones)."""
    A = A.detach() * _binary_scale(A)
    return float(torch.linalg.norm(A) ** 2 / torch.linalg.matrix_norm(A, ord=2) ** 2)


def tail_mass(A) -> float:
    """tail(A) = Σ_{i≥2} s_i² / Σ_i s_i² = 1 − 1/srank(A), the quantity Theorem 3.1 bounds."""
    return _tail_mass(_as_matrix(A, "A"))


def _tail_mass(A: torch.Tensor) -> float:
    return max(0.0, 1.0 - 1.0 / _stable_rank(A))  # rounding can put srank a hair below 1


def layer_statistics(weights: Sequence[torch.Tensor], X) -> dict[str, np.ndarray]:
    """Per-layer measures of Theorem 3.1 for one network (no run axis) on data X (rows = points).

    Returns arrays indexed by layer:

    * ``tail_weights[ℓ−1]`` = tail(W_ℓ), ℓ = 1…L;
    * ``tail_activations[ℓ−1]`` = tail(Z^σ_ℓ) and ``nonlinearity[ℓ−1]`` =
      ‖Z^σ_ℓ − Z_ℓ‖_F²/‖Z_ℓ‖_F² for the hidden layers ℓ = 1…L−1 (``nan`` where Z_ℓ = 0);
    * ``log_stable_rank[ℓ]`` = log srank(Z^σ_ℓ), ℓ = 0…L−1 (Z^σ_0 = X), the budget of Prop. 3.4;
    * ``singular_values[ℓ−1]``: the singular values of W_ℓ (a list of arrays).

    ``tail_weights`` is ``nan`` for a zero W_ℓ. All ratios are scale-free and computed on
    activations rescaled by powers of two, so tiny or huge (finite) activations are measured too;
    activations beyond float64 raise :class:`~lib.engine.validation.NumericalFailure`.
    """
    X = _as_matrix(X, "X").detach()  # measurements only: no graph
    weights = [w.detach() for w in _as_weights(weights, d_in=X.shape[1], single=True)]
    tails, tail_z, nonlin, logs, svals = [], [], [], [], []
    hidden = X
    logs.append(math.log(_stable_rank(X)))
    for index, w in enumerate(weights):
        tails.append(_tail_mass(w) if bool(w.abs().sum() > 0) else np.nan)
        svals.append(torch.linalg.svdvals(w.detach()).numpy())
        z = _finite(hidden @ w.T, f"the pre-activations Z_{index + 1} (beyond float64)")
        if index == len(weights) - 1:
            break
        z = z * _binary_scale(z)  # σ commutes with positive scales: the ratios are unchanged
        hidden = torch.relu(z)
        total = float((z**2).sum())
        if total == 0 or not bool(hidden.abs().sum() > 0):
            tail_z.append(np.nan)
            nonlin.append(np.nan)
            logs.append(np.nan)
            continue
        tail_z.append(_tail_mass(hidden))
        nonlin.append(float(((hidden - z) ** 2).sum()) / total)
        logs.append(math.log(_stable_rank(hidden)))
    return {
        "tail_weights": np.array(tails),
        "tail_activations": np.array(tail_z),
        "nonlinearity": np.array(nonlin),
        "log_stable_rank": np.array(logs),
        "singular_values": svals,
    }


def _ratio(X, G, speed: float) -> float:
    """r = ‖X‖_F‖G‖_F / s, which is >= 1 for any achievable speed s."""
    speed = as_positive_float(speed, "speed")
    bound = speed_upper_bound(X, G)
    if speed > bound * (1 + 1e-12):
        raise ValueError(
            f"speed {speed} exceeds the upper bound ‖X‖_F‖G‖_F = {bound}: no direction is that fast"
        )
    return max(bound / speed, 1.0)


def theorem31_constant(X, G, speed: float) -> float:
    """c = r √(2 log r), r = ‖X‖_F‖G‖_F / s* (Theorem 3.1; A.7 writes it unnormalized)."""
    r = _ratio(X, G, speed)
    return r * math.sqrt(2 * math.log(r))


def theorem31_bound(X, G, speed: float, layer) -> np.ndarray:
    """8 c ℓ^{−1/2} / (1 − c ℓ^{−1/2}) for layers ℓ ≥ 1 (Theorem 3.1); ``inf`` where c ℓ^{−1/2} ≥ 1.

    Bounds tail(W_ℓ), tail(Z^σ_ℓ) and ‖Z^σ_ℓ − Z_ℓ‖²/‖Z_ℓ‖² at an optimal escape direction. These
    quantities are at most 1, so the bound says something only where it is below 1, i.e. for
    ℓ > (9c)², roughly.
    """
    c = theorem31_constant(X, G, speed)
    layer = np.atleast_1d(as_tensor(layer, "layer", nonempty=True).detach().numpy())
    if layer.ndim > 1 or np.any(layer < 1) or np.any(layer != np.round(layer)):
        raise ValueError(
            f"layer must be a layer index or a list of them (integers >= 1), got {layer!r:.60}"
        )
    x = c / np.sqrt(layer)
    with np.errstate(divide="ignore"):
        return np.where(x < 1, 8 * x / (1 - x), np.inf)


def proposition33_bound(G, epsilon: float, speed: float) -> float:
    """8 ‖G‖_F ε / (s* − ‖G‖_F ε) (Proposition 3.3), ``inf`` when ‖G‖_F ε ≥ s*.

    For inputs u vᵀ + E with u, v ≥ 0 and ‖E‖_F ≤ ε, every layer of the optimal escape direction
    has tails and nonlinearity below this bound.
    """
    G = as_tensor(G, "G", nonempty=True)
    if G.ndim not in (1, 2):
        raise ValueError(f"G must have shape (N,) or (N, d_out), got shape {tuple(G.shape)}")
    epsilon = as_positive_float(epsilon, "epsilon", allow_zero=True)
    speed = as_positive_float(speed, "speed")
    shift = _norm(G) * epsilon  # inf (a vacuous bound) only where ‖G‖ ε is beyond float64
    return 8 * shift / (speed - shift) if shift < speed else math.inf


def proposition34_bound(X, G, speed: float, depth: int, p: float) -> float:
    """2 log(‖X‖_F‖G‖_F/s₀) / (p L) (Proposition 3.4).

    Any θ with ‖θ‖² ≤ L and L₀(θ) ≤ −s₀ has at least (1 − p)L of its activations Z^σ_ℓ
    (ℓ = 0…L−1) with tail(Z^σ_ℓ) below this value; behind it is the budget
    Σ_ℓ log srank(Z^σ_ℓ) ≤ 2 log(‖X‖_F‖G‖_F/s₀).
    """
    depth = as_int(depth, "depth", minimum=1, maximum=MAX_DEPTH)
    p = as_float(p, "p", minimum=0.0, maximum=1.0, open_minimum=True, open_maximum=True)
    return 2 * math.log(_ratio(X, G, speed)) / (p * depth)


# --------------------------------------------------------------------------------------------
# Proposition 3.2: a deeper network is at least as fast
# --------------------------------------------------------------------------------------------


def deepen(weights: Sequence[torch.Tensor], X, G, extra: int) -> list[torch.Tensor]:
    """The construction of Proposition 3.2 (App. A.3): depth L → L + ``extra``, no slower.

    Writes L₀ as a sum over the neurons i of the last hidden layer (incoming row r_i of W_{L−1},
    outgoing column c_i of W_L), keeps the neuron i* with the most negative normalized
    contribution ⟨G, (c_i/‖c_i‖) σ(Z^σ_{L−2} r_i/‖r_i‖)⟩, and routes it through ``extra`` identity
    layers e₁e₁ᵀ: W̃_{L−1} = √a e₁ r̄ᵀ, W̃_ℓ = e₁e₁ᵀ, W̃_{L+k} = √a c̄ e₁ᵀ with a = Σ_i ‖c_i‖‖r_i‖.
    The result is rescaled onto the sphere ‖θ‖² = L + extra. If θ is on its sphere ‖θ‖² = L with
    L₀(θ) < 0, then L₀(θ̃) ≤ L₀(θ).
    """
    X, G = (v.detach() for v in _as_data(X, G))  # a construction: no graph
    weights = [w.detach() for w in _as_weights(weights, d_in=X.shape[1], single=True)]
    if len(weights) < 2 or weights[-1].shape[0] != G.shape[1]:
        raise ValueError("deepen needs a network of depth >= 2 whose output width is G's d_out")
    extra = as_int(extra, "extra", minimum=1, maximum=MAX_DEPTH - len(weights))
    _entries(extra * weights[-2].shape[0] ** 2, "the identity layers (extra × width²)")
    hidden = X
    for w in weights[:-2]:
        hidden = torch.relu(hidden @ w.T)
    rows, cols = weights[-2], weights[-1]
    row_norms, col_norms = torch.linalg.norm(rows, dim=1), torch.linalg.norm(cols, dim=0)
    alive = (row_norms > 0) & (col_norms > 0)
    if not bool(alive.any()):
        raise ValueError("the last hidden layer has no neuron with nonzero weights")
    contributions = torch.full((rows.shape[0],), math.inf, dtype=DTYPE)
    for i in torch.nonzero(alive).flatten().tolist():
        r_bar, c_bar = rows[i] / row_norms[i], cols[:, i] / col_norms[i]
        contributions[i] = (torch.relu(hidden @ r_bar)[:, None] * c_bar[None, :] * G).sum()
    best = int(torch.argmin(contributions))
    if not bool(contributions[best] < 0):
        raise ValueError("no neuron of the last hidden layer escapes (all contributions >= 0)")
    a = float((row_norms * col_norms).sum())
    width = rows.shape[0]
    new_rows = torch.zeros_like(rows)
    new_rows[0] = math.sqrt(a) * rows[best] / row_norms[best]
    identity = torch.zeros((width, width), dtype=DTYPE)
    identity[0, 0] = 1.0
    new_cols = torch.zeros_like(cols)
    new_cols[:, 0] = math.sqrt(a) * cols[:, best] / col_norms[best]
    deeper = [*weights[:-2], new_rows, *[identity.clone() for _ in range(extra)], new_cols]
    squared = float(_squared_norm(deeper))
    if not 0 < squared < math.inf:
        raise NumericalFailure(f"deepen: ‖θ̃‖² = {squared} (the weights are beyond float64's "
                               f"range)")
    scale = math.sqrt(len(deeper) / squared)
    return [_finite(w * scale, "the deeper network") for w in deeper]


# --------------------------------------------------------------------------------------------
# Training from a small initialization with the paper's schedule
# --------------------------------------------------------------------------------------------


def saddle_to_saddle_run(
    X,
    labels,
    *,
    depth: int,
    width: int,
    init_scale: float,
    eta0: float,
    steps: int,
    seed: int,
    record_every: int = 50,
    engine: str = "compiled",
) -> Trajectory:
    """Full-batch gradient descent on the mean softmax cross-entropy of a bias-free ReLU network.

    Widths (d_in, width, …, width, K) with L = ``depth`` weight matrices ``"W1"`` … ``"WL"``,
    entries i.i.d. N(0, init_scale²) from ``numpy.random.RandomState(seed)``. The step size
    follows the paper's schedule (App. B: 10/‖θ‖⁴ for L = 6)

        η_k = η₀ / ‖θ_k‖^{L−2},

    gradient descent in the time s of §2.1 (ds = ‖θ‖^{L−2} dt), in which the plateau lengths do
    not grow as the initialization shrinks. Returns the :class:`~lib.engine.flow.Trajectory` of
    :func:`lib.engine.flow.gradient_descent`, recorded every ``record_every`` steps (the schedule
    enters through the gradient, so the recorded ``step_sizes`` are η₀).

    ``engine="compiled"`` (the default) runs the whole loop compiled by numba
    (:func:`lib.networks._saddle_kernels.schedule_descent`); ``engine="numpy"`` runs
    :func:`lib.engine.flow.gradient_descent` with a numpy gradient. They differ only in the order of
    floating-point sums (tested to 1e-10 over a few hundred steps).
    """
    from lib.networks.relu_nets import gaussian_weights

    X = as_tensor(X, "X", ndim=2, nonempty=True)
    labels = _labels(labels)
    if len(labels) != X.shape[0]:
        raise ValueError(f"labels has {len(labels)} entries but X has {X.shape[0]} rows")
    depth, width = _architecture(depth, width)
    init_scale = as_positive_float(init_scale, "init_scale")
    eta0 = as_positive_float(eta0, "eta0")
    seed = as_seed(seed)
    engine = as_choice(engine, "engine", ENGINES)
    classes = int(labels.max()) + 1
    _entries(len(labels) * classes, "the one-hot labels")
    widths = [X.shape[1]] + [width] * (depth - 1) + [max(classes, 2)]
    steps, record_every = _schedule(steps, record_every, _parameter_count(widths))
    init = gaussian_weights(widths, init_scale, np.random.RandomState(seed))
    names = [f"W{i + 1}" for i in range(depth)]

    x = _numpy(X)
    onehot = np.eye(widths[-1])[labels.numpy()]
    if engine == "compiled":
        return _compiled_run(init, widths, x, onehot, eta0, steps, record_every)

    def cross_entropy(logits: np.ndarray):
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        value = -(log_p * onehot).sum(axis=(-1, -2)) / len(onehot)
        return value, (np.exp(log_p) - onehot) / len(onehot)

    def gradient(params):
        ws = [params[n].numpy()[None] for n in names]
        value, grads = _forward_backward(ws, x, cross_entropy)
        factor = float(sum((w**2).sum() for w in ws)) ** ((2 - depth) / 2)
        loss = torch.tensor(float(value[0]), dtype=DTYPE)
        return loss, {n: torch.from_numpy(g[0] * factor) for n, g in zip(names, grads, strict=True)}

    with threadpool_limits(limits=1, user_api="blas"):
        return gradient_descent(
            None,
            dict(zip(names, init, strict=False)),
            eta0,
            steps,
            record_every=record_every,
            gradient=gradient,
        )


def _compiled_run(init, widths, x, onehot, eta0, steps, record_every) -> Trajectory:
    """The loop of :func:`saddle_to_saddle_run` in
    :func:`lib.networks._saddle_kernels.schedule_descent`."""
    theta0 = np.concatenate([w.numpy().ravel() for w in init])
    result = _saddle_kernels.schedule_descent(
        theta0, widths, x, onehot, cost="cross_entropy", eta0=eta0, power=len(widths) - 3,
        steps=steps, record_every=record_every,
    )  # fmt: skip
    return _trajectory(widths, *result)


def _trajectory(widths, times, states, losses, etas, last, diverged) -> Trajectory:
    """A :class:`~lib.engine.flow.Trajectory` of the records of
    :func:`lib.networks._saddle_kernels.schedule_descent`."""
    matrices = _unflatten(states, widths)
    info = {"converged_step": None, "steps_run": last, "diverged": diverged, "optimizer": "gd"}
    return Trajectory(
        times=times,
        params={f"W{i + 1}": m for i, m in enumerate(matrices)},
        losses=losses,
        step_sizes=etas,
        info=info,
    )


def find_plateaus(losses, *, window: int, tolerance: float) -> list[tuple[int, int, float]]:
    """Plateaus of a recorded loss curve: maximal stretches that stay within ``tolerance``.

    Record k starts a flat window if max − min of ``losses[k : k + window]`` is below
    ``tolerance``; flat windows that overlap or touch merge into one plateau. Returns a list of
    ``(first, last, median loss)`` with record indices (inclusive), in order.
    """
    losses = as_tensor(losses, "losses", ndim=1, nonempty=True).detach().numpy()
    window = as_int(window, "window", minimum=2)
    tolerance = as_positive_float(tolerance, "tolerance")
    if len(losses) < window:
        return []
    views = np.lib.stride_tricks.sliding_window_view(losses, window)
    flat = views.max(axis=1) - views.min(axis=1) < tolerance
    plateaus: list[tuple[int, int, float]] = []
    k = 0
    while k < len(flat):
        if not flat[k]:
            k += 1
            continue
        start = k
        while k + 1 < len(flat) and flat[k + 1]:
            k += 1
        last = k + window - 1
        if plateaus and start <= plateaus[-1][1] + 1:  # overlaps the previous one: merge
            start = plateaus.pop()[0]
        plateaus.append((start, last, float(np.median(losses[start : last + 1]))))
        k += 1
    return plateaus
