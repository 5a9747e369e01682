"""The training protocols of Cohen-Karlik et al. (2023) beyond the population loss.

:mod:`lib.ssm.extrapolation` trains linear RNN students on the population loss of the paper's
eq. (3.4), L = Σ_{j<k} r_j² with r_j = h_j − w_j. The paper's experiments also use

* the **empirical loss** of its eq. (3.3) on N Gaussian sequences of length k (its §5.1 remark,
  N = 10 000, and its §5.2, in batches of 100 with early stopping, App. C.1). With the sequence z
  written backwards (z_j the input j steps before the last), the prediction error on it is
  Σ_j r_j z_j = z·r, so the loss of a set Z of sequences is the quadratic form

      L_Z = (1/|Z|) Σ_{z∈Z} (z·r)² = rᵀ (ZᵀZ / |Z|) r;

* the **accumulating loss** of its App. D, summed over every output of the sequence, whose
  population version is its eq. (D.2) = eq. (D.3): Σ_{j<k} Σ_{i≤j} r_i² = Σ_{i<k} (k − i) r_i²;
* **Adam with a MultiStepLR schedule** (its App. C.1: milestones 5000, 10 000, 15 000, 30 000 and
  factor 0.1 for the initialization-scale study of its Figure 4), which divides the learning rate
  and keeps Adam's moment estimates, as ``torch.optim.lr_scheduler.MultiStepLR`` does;
* its **teacher generators**: the balanced teacher of App. C.2.1 (eigenvalues uniform in
  [0.6, 1.05], B̂ = Ĉᵀ with N(0.5, 1) entries normalized to ĈB̂ = 1) and the random unbalanced
  teacher of App. C.2.2 (upper bidiagonal Â, B̂ = e_d̂, Ĉ = e_1ᵀ).

Every loss here is rᵀ M r for a k × k matrix M (identity, diag(k − i), ZᵀZ/|Z|), so its gradient
is the population gradient with r replaced by M r. :func:`train_students` runs R students, each
through one compiled Adam loop (numba, float64, in :mod:`lib.ssm._extrapolation_kernels`, which
shares its forward and backward passes and its Adam step with :mod:`lib.ssm.extrapolation`):
balanced diagonal students θ = (a, b) with h_j = Σ_i b_i² a_i^j, or dense ones θ = (A, B, C)
with h_j = C A^j B. Early stopping (the paper does not state its rule) checks the loss on
held-out sequences every ``check_every`` steps, stops a run after ``patience`` steps without a
new best, and returns the best iterate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lib.engine.validation import (
    DTYPE,
    as_choice,
    as_int,
    as_list,
    as_positive_float,
    as_seed,
    as_seeds,
    as_tensor,
    check_finite_result,
    check_magnitude,
    check_params,
)
from lib.ssm._extrapolation_kernels import BALANCED, GENERAL, protocol_run

KINDS = ("balanced", "general")
LOSSES = ("population", "accumulating", "empirical")
PAPER_MILESTONES = (5000, 10_000, 15_000, 30_000)
"""App. C.1: the MultiStepLR milestones of the initialization-scale study (factor 0.1)."""

__all__ = [
    "KINDS",
    "LOSSES",
    "PAPER_MILESTONES",
    "StudentRuns",
    "accumulating_loss",
    "impulse_responses",
    "paper_balanced_teacher",
    "random_unbalanced_teacher",
    "tail_errors",
    "train_students",
]


# --------------------------------------------------------------------------------------------
# Teachers (App. C.2) and the accumulating loss (App. D)
# --------------------------------------------------------------------------------------------


#: The two readings of App. C.2.1's "we set the eigenvalues to distribute uniformly between 0.6
#: and 1.05": drawn i.i.d. uniform ("iid"), or spread evenly over the interval ("even").
EIGENVALUE_READINGS = ("iid", "even")


def paper_balanced_teacher(d_hat: int, seed: int, *, eigenvalues: str = "iid"
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The balanced teacher of App. C.2.1 as a distribution: (eigenvalues, masses).

    Eigenvalues uniform in [0.6, 1.05], by one of the two readings of the appendix
    (:data:`EIGENVALUE_READINGS`): i.i.d. draws (``"iid"``, the default) or the d̂ evenly spaced
    values 0.6 + 0.45 i/(d̂ − 1) (``"even"``, needs d̂ ≥ 2); B̂ = Ĉᵀ with i.i.d. N(0.5, 1)
    entries, normalized so that ĈB̂ = Σ_i B̂_i² = 1, so the masses are p_i = B̂_i² / Σ B̂². Both
    from ``numpy.random.RandomState(seed)`` (eigenvalues first, also drawn under ``"even"`` and
    then replaced, so that a seed gives the same masses under both readings). The impulse response
    is w_j = Σ_i p_i λ_i^j (:func:`lib.ssm.extrapolation.moment_sequence`).
    """
    d_hat = as_int(d_hat, "d_hat", minimum=1, maximum=10_000)
    if eigenvalues not in EIGENVALUE_READINGS:
        raise ValueError(f"eigenvalues must be one of {EIGENVALUE_READINGS}, "
                         f"got {eigenvalues!r:.40}")
    if eigenvalues == "even" and d_hat < 2:
        raise ValueError(f"evenly spaced eigenvalues need d_hat >= 2, got {d_hat}")
    rng = np.random.RandomState(as_seed(seed))
    drawn = rng.uniform(0.6, 1.05, d_hat)
    eigenvalues = drawn if eigenvalues == "iid" else np.linspace(0.6, 1.05, d_hat)
    b = rng.normal(0.5, 1.0, d_hat)
    return torch.from_numpy(eigenvalues), torch.from_numpy(b * b / (b * b).sum())


def random_unbalanced_teacher(d_hat: int, seed: int) -> tuple[torch.Tensor, ...]:
    """The random unbalanced teacher of App. C.2.2: (Â, B̂, Ĉ).

    Â is upper bidiagonal, its diagonal i.i.d. N(0, 0.1²) and its superdiagonal i.i.d.
    N(0.7, 0.1²) (``numpy.random.RandomState(seed)``, diagonal first); B̂ = e_d̂ and Ĉ = e_1ᵀ as
    in the delay teacher (eq. C.1), so the first d̂ − 1 entries of the impulse response vanish and
    h_{d̂−1} = Π (superdiagonal).
    """
    d_hat = as_int(d_hat, "d_hat", minimum=1, maximum=10_000)
    rng = np.random.RandomState(as_seed(seed))
    diagonal = rng.normal(0.0, 0.1, d_hat)
    upper = rng.normal(0.7, 0.1, d_hat - 1)
    a = np.diag(diagonal) + np.diag(upper, 1)
    b = np.zeros(d_hat)
    b[-1] = 1.0
    c = np.zeros(d_hat)
    c[0] = 1.0
    return torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)


def accumulating_loss(h, w, k: int) -> torch.Tensor:
    """The population accumulating loss, eq. (D.2): Σ_{j<k} Σ_{i≤j} (h_i − w_i)².

    Summed as written (one inner sum per output), not through the weights k − i of eq. (D.3), so
    that the two can be compared. ``h`` has shape ``(..., L)`` with L ≥ k, ``w`` shape ``(L',)``.
    """
    h = as_tensor(h, "h", min_ndim=1)
    w = as_tensor(w, "w", ndim=1)
    k = as_int(k, "k", minimum=1)
    if h.shape[-1] < k or w.shape[0] < k:
        raise ValueError(
            f"h and w need at least k = {k} entries, got {h.shape[-1]} and {w.shape[0]}"
        )
    squared = (h[..., :k] - w[:k]) ** 2
    return check_finite_result(sum(squared[..., : j + 1].sum(-1) for j in range(k)),
                               "the accumulating loss")


# --------------------------------------------------------------------------------------------
# The public loop
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StudentRuns:
    """What :func:`train_students` returns, one entry per run along the leading axis.

    ``params``: the returned students (the best iterate under early stopping, else the last);
    ``losses``: their population losses Σ_{j<k} (h_j − w_j)² (eq. 3.4); ``steps``: the Adam steps
    each run took; ``best_steps``: the step of the returned iterate; ``diverged``: runs stopped by
    a non-finite loss or gradient (returned at their last finite iterate).
    """

    params: dict[str, torch.Tensor]
    losses: np.ndarray
    steps: np.ndarray
    best_steps: np.ndarray
    diverged: np.ndarray


_NAMES = {"balanced": ("a", "b"), "general": ("A", "B", "C")}


def _check_students(kind: str, params, runs: int) -> tuple[dict[str, torch.Tensor], int]:
    """Parameters of R students of ``kind``: balanced {a, b} (R, d), general {A (R, d, d),
    B, C (R, d)}. Returns them and d."""
    params = check_params(params)
    names = _NAMES[kind]
    axes = {"a": 1, "b": 1, "A": 2, "B": 1, "C": 1}
    d = params[names[-1]].shape[-1] if set(params) == set(names) and params[names[-1]].ndim else 0
    if d == 0 or any(tuple(params[n].shape) != (runs, *(d,) * axes[n]) for n in names):
        wanted = ", ".join(f"{n} (R, {', '.join(['d'] * axes[n])})" for n in names)
        got = ", ".join(f"{key} {tuple(value.shape)}" for key, value in params.items())
        raise ValueError(f"{kind} students need {wanted} with R = {runs}; got {got}")
    return {n: params[n] for n in names}, d


def _sequences(seed: int, count: int, k: int) -> np.ndarray:
    """``count`` Gaussian sequences of length k, written backwards (column j: j steps back)."""
    return np.random.RandomState(seed).standard_normal((count, k))


def _options(loss, batch, n_train, n_val, patience, check_every, steps, milestones):
    """Checked scalar options of :func:`train_students`."""
    loss = as_choice(loss, "loss", LOSSES)
    steps = as_int(steps, "steps", minimum=1, maximum=10**9)
    if batch is not None:
        batch = as_int(batch, "batch", minimum=1, maximum=10**6)
        if loss != "empirical":
            raise ValueError(f"batch is for loss='empirical' only, got loss={loss!r}")
    n_train = as_int(n_train, "n_train", minimum=1, maximum=10**6)
    if batch is not None and batch > n_train:
        raise ValueError(f"batch must be at most n_train = {n_train}, got {batch}")
    n_val = as_int(n_val, "n_val", minimum=1, maximum=10**6)
    patience = 0 if patience is None else as_int(patience, "patience", minimum=1, maximum=10**9)
    check_every = as_int(check_every, "check_every", minimum=1, maximum=10**9)
    if not isinstance(milestones, (list, tuple, range)):
        raise ValueError(f"milestones must be a list of step numbers, got {milestones!r:.60}")
    checked = [as_int(m, f"milestones[{i}]", minimum=1, maximum=10**9)
               for i, m in enumerate(milestones)]
    if any(b <= a for a, b in zip(checked, checked[1:], strict=False)):
        raise ValueError(f"milestones must be strictly increasing, got {checked}")
    return loss, batch, n_train, n_val, patience, check_every, steps, np.array(checked, np.int64)


def _fixed_metric(loss: str, k: int, train: np.ndarray) -> np.ndarray:
    """M of the loss rᵀ M r: identity (eq. 3.4), diag(k − i) (eq. D.3), ZᵀZ/N (eq. 3.3)."""
    if loss == "population":
        return np.eye(k)
    if loss == "accumulating":
        return np.diag(np.arange(k, 0, -1, dtype=np.float64))
    return train.T @ train / train.shape[0]


def train_students(
    kind: str,
    w,
    ks,
    params: dict[str, torch.Tensor],
    *,
    loss: str = "population",
    lr: float = 1e-3,
    steps: int = 15_000,
    milestones=(),
    gamma: float = 0.1,
    n_train: int = 10_000,
    batch: int | None = None,
    n_val: int = 1000,
    patience: int | None = None,
    check_every: int = 500,
    data_seeds=None,
) -> StudentRuns:
    """Adam on R linear-RNN students at once; run r learns the first ``ks[r]`` entries of ``w``.

    ``kind``: ``"balanced"`` (params {a, b}, each (R, d)) or ``"general"`` (params {A (R, d, d),
    B (R, d), C (R, d)}). ``loss``: ``"population"`` (eq. 3.4), ``"accumulating"`` (eq. D.3) or
    ``"empirical"`` (eq. 3.3 on ``n_train`` Gaussian sequences; full batch, or minibatches of
    ``batch`` drawn epoch by epoch). The learning rate ``lr`` is multiplied by ``gamma`` at each of
    ``milestones`` (MultiStepLR). With ``patience``, early stopping on ``n_val`` held-out Gaussian
    sequences (eq. 3.3), checked every ``check_every`` steps (module docstring). Run r's
    sequences and batch order come from ``data_seeds[r]`` (default: r).
    """
    kind = as_choice(kind, "kind", KINDS)
    w = check_magnitude(as_tensor(w, "w", ndim=1, detach=True), "w")
    ks = [as_int(k, f"ks[{i}]", minimum=1, maximum=10_000) for i, k in enumerate(as_list(ks, "ks"))]
    if max(ks) > w.shape[0]:
        raise ValueError(f"w needs at least max(ks) = {max(ks)} entries, got {w.shape[0]}")
    params, d = _check_students(kind, params, len(ks))
    for name, value in params.items():
        check_magnitude(value, f"params[{name!r}]")
    options = _options("population" if loss is None else loss, batch, n_train, n_val, patience,
                       check_every, steps, milestones)
    loss, batch, n_train, n_val, patience, check_every, steps, milestone_array = options
    lr = as_positive_float(lr, "lr")
    gamma = as_positive_float(gamma, "gamma")
    seeds = list(range(len(ks))) if data_seeds is None else as_seeds(data_seeds, "data_seeds")
    if len(seeds) != len(ks):
        raise ValueError(f"one data seed per run: {len(ks)} runs, {len(seeds)} data_seeds")
    names = _NAMES[kind]
    flat = np.concatenate([params[n].reshape(len(ks), -1).numpy() for n in names], axis=1)
    target = w.numpy()
    out, taken, best, flags = [], [], [], []
    for r, k in enumerate(ks):
        needs_data = loss == "empirical" or patience > 0
        data = _sequences(seeds[r], n_train + n_val, k) if needs_data else np.zeros((1, k))
        train, held_out = data[:n_train], data[n_train:]
        val_metric = held_out.T @ held_out / n_val if patience > 0 else np.eye(k)
        metric = _fixed_metric(loss, k, train)
        theta, count, best_step, diverged = protocol_run(
            np.ascontiguousarray(flat[r]), np.ascontiguousarray(target[:k]),
            BALANCED if kind == "balanced" else GENERAL, d, metric,
            np.ascontiguousarray(train), 0 if batch is None else batch, val_metric, lr,
            milestone_array, gamma, steps, check_every, patience, seeds[r], 0.9, 0.999, 1e-8)
        out.append(theta)
        taken.append(count)
        best.append(best_step)
        flags.append(diverged)
    stacked = np.stack(out)
    final, start = {}, 0
    for n in names:
        shape = tuple(params[n].shape)
        size = int(np.prod(shape[1:]))
        final[n] = torch.from_numpy(stacked[:, start : start + size].reshape(shape).copy())
        start += size
    h = _responses(kind, final, max(ks))
    losses = np.array([((h[r, :k] - w[:k]) ** 2).sum().item() for r, k in enumerate(ks)])
    return StudentRuns(final, losses, np.array(taken), np.array(best), np.array(flags))


def impulse_responses(kind: str, params: dict[str, torch.Tensor], length: int) -> torch.Tensor:
    """Impulse responses h_0, …, h_{length−1} of R students of ``kind``, shape (R, length):
    Σ_i b_i² a_i^j (balanced) or C A^j B (general)."""
    kind = as_choice(kind, "kind", KINDS)
    length = as_int(length, "length", minimum=1, maximum=100_000)
    last = _NAMES[kind][-1]
    runs = params[last].shape[0] if isinstance(params, dict) and last in params else 0
    params, _ = _check_students(kind, params, max(runs, 1))
    return check_finite_result(_responses(kind, params, length), "the impulse responses")


def _responses(kind: str, params: dict[str, torch.Tensor], length: int) -> torch.Tensor:
    """:func:`impulse_responses` without the checks."""
    if kind == "balanced":
        a, b = params["a"], params["b"]
        powers = a.unsqueeze(-2) ** torch.arange(length, dtype=DTYPE)[:, None]  # (R, length, d)
        return ((b * b).unsqueeze(-2) * powers).sum(-1)
    vectors = [params["B"]]
    for _ in range(length - 1):
        vectors.append((params["A"] @ vectors[-1].unsqueeze(-1)).squeeze(-1))
    return (torch.stack(vectors, -2) * params["C"].unsqueeze(-2)).sum(-1)


def tail_errors(kind: str, params: dict[str, torch.Tensor], w, ks) -> np.ndarray:
    """max_{k_r ≤ j < L} |h_j − w_j| for each run r (the paper's metric, App. C.3), L = len(w)."""
    kind = as_choice(kind, "kind", KINDS)
    w = as_tensor(w, "w", ndim=1)
    ks = [as_int(k, f"ks[{i}]", minimum=0) for i, k in enumerate(as_list(ks, "ks"))]
    if max(ks) >= w.shape[0]:
        raise ValueError(f"every k must be below len(w) = {w.shape[0]}, got max {max(ks)}")
    params, _ = _check_students(kind, params, len(ks))
    h = check_finite_result(_responses(kind, params, w.shape[0]), "the impulse responses")
    return np.array([(h[r, k:] - w[k:]).abs().max().item() for r, k in enumerate(ks)])
