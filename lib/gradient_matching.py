"""Clean-label poisons by gradient matching ("Witches' Brew"), with a per-row regularizer.

The attack of Geiping et al. 2021, as adapted by Slutzky et al. 2025 (App. H.2.4) to push the
perturbation into the *last image row*. For one-channel images read row by row, as here, that row
is the end of the input sequence. (The authors' S4 victim reshapes a 3 × 32 × 32 CIFAR-10 image in
memory order into 1024 steps of 3 values, channel after channel, so there the last row of the red
and green channels lies inside the sequence and only the blue one at its end.)

**Threat model.** A target test image x_t of class y_t and an adversarial class y_adv ≠ y_t. The
attacker picks P training images of class y_adv (the *budget*), adds perturbations δ_i with
‖δ_i‖_∞ ≤ ε that keep every pixel inside the data range, and appends the P perturbed images, with
their *true* label y_adv, to the training set. The attack succeeds if a victim trained from scratch
on the enlarged set classifies x_t as y_adv.

**Gradient matching** (Geiping et al. 2021). On a surrogate network θ trained on clean
data, make the poisons' training gradient point where the adversarial target gradient points:

    ℳ(δ) = 1 − ⟨g_t, g_p(δ)⟩ / (‖g_t‖ ‖g_p(δ)‖),   g_t = ∇_θ ℓ(x_t, y_adv),
    g_p(δ) = ∇_θ (1/P) Σ_i ℓ(x_i + δ_i, y_adv),

minimized by *signed Adam* (Adam fed the sign of the gradient) with projection onto the ε-box and
the data range, from several random starts ("restarts"), keeping the start with the lowest ℳ.

**Per-row regularizer** (Slutzky et al. 2025, App. H.2.4, footnote 14). A weight decay on the
perturbation that grows with the distance of its image row from the last one: with the image read
row by row in rows of ``row_length`` positions, position p in row r(p) = p // row_length of R rows
gets the weight w_p = λ (R − 1 − r(p)), and the objective becomes ℳ(δ) + Σ_i Σ_p w_p δ_{i,p}². The
last row is free; the others are pushed to zero. (The paper's footnote 14 gives the weights 32 − i
for rows i = 1, …, 32, that is λ = 1, as in the authors' code of the Table-2 version; their later
code multiplies by a factor whose default is 10⁻⁷. The right λ depends on the scale of ℳ's
gradient, and the chapter states the one it uses.)

**Where the perturbation lives.** The paper's "last elements rel. size" is ‖δ_last‖₂ / ‖δ‖₂, the
norm of the perturbation on the last elements over its whole norm, averaged over poisons
(:func:`last_elements_rel_size`).

All attacks on one surrogate run at once: the surrogate is replicated once per (attack, restart)
along the run axis of :mod:`lib.s4d`, so each copy yields its own parameter gradients.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from lib import s4d
from lib._checks import DTYPE, as_int, as_list, as_positive_float, as_tensor, check_finite_result


@dataclass(frozen=True)
class AttackConfig:
    """Signed Adam on the matching objective: ``steps`` iterations from ``restarts`` random starts,
    step size ``lr`` (in units of ε), per-row weight ``reg_factor`` = λ (0: no regularizer)."""

    steps: int = 40
    restarts: int = 2
    lr: float = 0.1
    reg_factor: float = 0.0
    row_length: int = 8

    def __post_init__(self):
        as_int(self.steps, "steps", minimum=1)
        as_int(self.restarts, "restarts", minimum=1)
        as_positive_float(self.lr, "lr")
        as_positive_float(self.reg_factor, "reg_factor", allow_zero=True)
        as_int(self.row_length, "row_length", minimum=1)


@dataclass
class Brew:
    """The poisons of A attacks: ``poison_index`` (A, P) rows of the training set, ``delta``
    (A, P, L) their perturbations (float64), ``matching_loss`` (A,) ℳ at the end, ``targets`` (A,)
    test indices, ``adversarial`` (A,) adversarial classes; ``restart_losses`` (A, restarts) ℳ
    at the end of every start, of which ``matching_loss`` is the row minimum (empty if unknown)."""

    poison_index: torch.Tensor
    delta: torch.Tensor
    matching_loss: torch.Tensor
    targets: torch.Tensor
    adversarial: torch.Tensor
    restart_losses: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=DTYPE))


def row_weights(length: int, row_length: int) -> torch.Tensor:
    """Per-position weights w_p / λ = R − 1 − p // row_length for a sequence of R rows (float64)."""
    length = as_int(length, "length", minimum=1)
    row_length = as_int(row_length, "row_length", minimum=1)
    if length % row_length:
        raise ValueError(f"length {length} is not a whole number of rows of {row_length}")
    rows = length // row_length
    return (rows - 1 - torch.arange(length) // row_length).to(DTYPE)


def last_elements_rel_size(delta, last: int) -> float:
    """‖δ_i[−last:]‖₂ / ‖δ_i‖₂ averaged over the poisons i (rows of δ, shape (..., L)).

    Poisons with δ_i = 0 count as 0 (no perturbation, none of it at the end).
    """
    delta = as_tensor(delta, "delta", min_ndim=1)
    last = as_int(last, "last", minimum=1)
    if last > delta.shape[-1]:
        raise ValueError(f"last must be at most the sequence length {delta.shape[-1]}, got {last}")
    total = torch.linalg.vector_norm(delta, dim=-1)
    tail = torch.linalg.vector_norm(delta[..., -last:], dim=-1)
    ratio = torch.where(total > 0, tail / torch.where(total > 0, total, 1.0), 0.0)
    return float(ratio.mean())


def _check_labels(x: torch.Tensor, labels, name: str, x_name: str) -> torch.Tensor:
    if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64 or labels.ndim != 1:
        raise ValueError(f"{name} must be a 1-D int64 torch tensor, got {labels!r:.60}")
    if labels.shape[0] != x.shape[0]:
        raise ValueError(
            f"{name} has length {labels.shape[0]} but {x_name} has {x.shape[0]} sequences"
        )
    return labels


def choose_poisons(y_train, adversarial: int, budget: int, seed: int) -> torch.Tensor:
    """``budget`` distinct training indices of class ``adversarial``, drawn with ``seed``."""
    if not isinstance(y_train, torch.Tensor) or y_train.dtype != torch.int64 or y_train.ndim != 1:
        raise ValueError(f"y_train must be a 1-D int64 torch tensor, got {y_train!r:.60}")
    adversarial = as_int(adversarial, "adversarial class", minimum=0)
    budget = as_int(budget, "budget", minimum=1)
    members = torch.nonzero(y_train == adversarial).flatten()
    if budget > len(members):
        raise ValueError(
            f"budget {budget} is larger than the adversarial class {adversarial}, which has "
            f"{len(members)} training images"
        )
    pick = np.random.default_rng(as_int(seed, "seed", minimum=0)).choice(
        len(members), budget, replace=False
    )
    return members[torch.from_numpy(np.sort(pick))]


def _project(delta: torch.Tensor, base: torch.Tensor, eps: float, lo: float, hi: float):
    """Onto {‖δ‖_∞ ≤ ε, lo ≤ x + δ ≤ hi}: both are boxes, so clamp to their intersection."""
    return torch.maximum(
        torch.minimum(delta, (hi - base).clamp(max=eps)), (lo - base).clamp(min=-eps)
    )


def _check_range(data_range) -> tuple[float, float]:
    if not isinstance(data_range, (tuple, list)) or len(data_range) != 2:
        raise ValueError(f"data_range must be a pair (lo, hi), got {data_range!r:.60}")
    lo, hi = float(data_range[0]), float(data_range[1])
    if not lo < hi:
        raise ValueError(f"data_range must have lo < hi, got {data_range}")
    return lo, hi


class _Matching:
    """ℳ(δ) for R attacks at once, each on its own copy of the surrogate (run axis of lib.s4d):
    targets x_t (R, L) with classes adv (R,), poison images base (R, P, L) labelled adv."""

    def __init__(self, surrogate: s4d.Params, x_t: torch.Tensor, adv: torch.Tensor, base):
        runs = len(adv)
        self.params = {k: v.requires_grad_() for k, v in s4d.replicate(surrogate, runs).items()}
        target_loss = s4d.per_run_loss(self.params, x_t[:, None, :], adv[:, None]).sum()
        grads = torch.autograd.grad(target_loss, list(self.params.values()))
        self.g_t = [g.detach().reshape(runs, -1) for g in grads]
        self.g_t_norm = torch.sqrt(sum((g * g).sum(-1) for g in self.g_t))
        self.base, self.labels, self.runs = base, adv[:, None].expand(base.shape[:2]), runs

    def __call__(self, delta: torch.Tensor, *, create_graph: bool = False) -> torch.Tensor:
        loss = s4d.per_run_loss(self.params, self.base + delta, self.labels).sum()
        g_p = torch.autograd.grad(loss, list(self.params.values()), create_graph=create_graph)
        flat = [g.reshape(self.runs, -1) for g in g_p]
        dot = sum((a * b).sum(-1) for a, b in zip(self.g_t, flat, strict=True))
        norm = torch.sqrt(sum((b * b).sum(-1) for b in flat))
        return 1 - dot / (self.g_t_norm * norm)


def matching_loss(surrogate: s4d.Params, x_test, brew_result: Brew, x_train, delta) -> torch.Tensor:
    """ℳ of the perturbations ``delta`` (A, P, L) of the poisons of ``brew_result`` on ``surrogate``
    (one value per attack, float64): e.g. of a random control, to compare with the attack's own."""
    x_test = as_tensor(x_test, "x_test", ndim=2)
    x_train = as_tensor(x_train, "x_train", ndim=2)
    delta = as_tensor(delta, "delta", ndim=3)
    index = brew_result.poison_index
    if tuple(delta.shape[:2]) != tuple(index.shape):
        raise ValueError(
            f"delta must have shape {tuple(index.shape)} + (L,), got {tuple(delta.shape)}"
        )
    md = s4d.MODEL_DTYPE
    base = x_train[index].to(md)
    matching = _Matching(
        surrogate, x_test[brew_result.targets].to(md), brew_result.adversarial, base
    )
    return matching(delta.to(md)).detach().to(DTYPE)


def _check_configs(config) -> list[AttackConfig]:
    """One AttackConfig, or several that share the optimization loop (steps, restarts, lr)."""
    configs = [config] if isinstance(config, AttackConfig) else as_list(config, "config")
    for c in configs:
        if not isinstance(c, AttackConfig):
            raise ValueError(f"config must be an AttackConfig, got {type(c).__name__}")
    loop = {(c.steps, c.restarts, c.lr) for c in configs}
    if len(loop) > 1:
        raise ValueError(
            "attacks brewed together must share steps, restarts and lr, got "
            f"{sorted(loop)} (steps, restarts, lr)"
        )
    return configs


def brew(
    surrogate: s4d.Params,
    x_train,
    y_train,
    x_test,
    y_test,
    targets,
    adversarial,
    budget: int,
    eps: float,
    data_range,
    config: AttackConfig | list[AttackConfig] = AttackConfig(),
    *,
    seed: int = 0,
) -> Brew | list[Brew]:
    """Gradient-matching poisons for A attacks (target ``targets[a]``, class ``adversarial[a]``).

    ``surrogate`` is a one-run parameter dict of :mod:`lib.s4d` trained on clean data; ``x_train``
    (n, L), ``y_train`` (n,), ``x_test`` (m, L), ``y_test`` (m,); ``targets`` test indices and
    ``adversarial`` classes (each ≠ the target's true class); ``budget`` poisons per attack, ``eps``
    the ℓ∞ bound, ``data_range`` = (lo, hi) the pixel range. Attack a poisons the training images
    :func:`choose_poisons` (y_train, adversarial[a], budget, seed + a) draws. Returns a
    :class:`Brew`.

    ``config`` may also be a list of configs that differ only in their regularizer (``reg_factor``,
    ``row_length``): then every config attacks the same targets with the same poison images from
    the same random starts, all in one batched loop (what separate calls with the same ``seed``
    would compute), and the result is a list with one :class:`Brew` per config.
    """
    configs = _check_configs(config)
    x_train = as_tensor(x_train, "x_train", ndim=2)
    x_test = as_tensor(x_test, "x_test", ndim=2)
    y_train = _check_labels(x_train, y_train, "y_train", "x_train")
    y_test = _check_labels(x_test, y_test, "y_test", "x_test")
    eps = as_positive_float(eps, "eps")
    lo, hi = _check_range(data_range)
    targets = [as_int(t, "target index", minimum=0) for t in as_list(targets, "targets")]
    for t in targets:
        if t >= len(x_test):
            raise ValueError(f"target index {t} is out of range for a test set of {len(x_test)}")
    adversarial = [
        as_int(c, "adversarial class", minimum=0) for c in as_list(adversarial, "adversarial")
    ]
    if len(adversarial) != len(targets):
        raise ValueError(
            f"adversarial must have one class per target: {len(adversarial)} for {len(targets)}"
        )
    for t, c in zip(targets, adversarial, strict=True):
        if c == int(y_test[t]):
            raise ValueError(f"adversarial class {c} is the true class of target {t}")
    length = x_train.shape[1]
    weights = torch.stack([c.reg_factor * row_weights(length, c.row_length) for c in configs])
    index = torch.stack(
        [choose_poisons(y_train, c, budget, seed + a) for a, c in enumerate(adversarial)]
    )
    n_cfg, n_att, restarts = len(configs), len(targets), configs[0].restarts
    md = s4d.MODEL_DTYPE
    # runs in the order (config, attack, restart)
    t_idx = torch.tensor(targets).repeat_interleave(restarts).repeat(n_cfg)
    adv = torch.tensor(adversarial).repeat_interleave(restarts).repeat(n_cfg)
    base = x_train[index].repeat_interleave(restarts, dim=0).to(md)  # (A·restarts, P, L)
    matching = _Matching(surrogate, x_test[t_idx].to(md), adv, base.repeat(n_cfg, 1, 1))
    gen = torch.Generator().manual_seed(seed)
    start = (torch.rand(base.shape, generator=gen, dtype=torch.float64) * 2 - 1) * eps
    start = _project(start.to(md), base, eps, lo, hi)
    delta = start.repeat(n_cfg, 1, 1).requires_grad_()
    base = base.repeat(n_cfg, 1, 1)
    opt = torch.optim.Adam([delta], lr=configs[0].lr * eps)
    w = weights.to(md).repeat_interleave(n_att * restarts, dim=0)[:, None, :]  # (runs, 1, L)

    for _ in range(configs[0].steps):
        objective = matching(delta, create_graph=True).sum() + (w * delta * delta).sum()
        opt.zero_grad(set_to_none=True)
        (grad,) = torch.autograd.grad(objective, [delta])
        delta.grad = grad.sign()
        opt.step()
        with torch.no_grad():
            delta.copy_(_project(delta, base, eps, lo, hi))
    final = matching(delta.detach()).detach().reshape(n_cfg, n_att, restarts)
    check_finite_result(final, "the matching loss of the poisons")
    best = final.argmin(-1)  # (configs, attacks)
    chosen = delta.detach().reshape(n_cfg, n_att, restarts, budget, -1)
    rows = torch.arange(n_att)
    brews = [
        Brew(
            poison_index=index,
            delta=chosen[k, rows, best[k]].to(DTYPE),
            matching_loss=final[k, rows, best[k]].to(DTYPE),
            targets=torch.tensor(targets),
            adversarial=torch.tensor(adversarial),
            restart_losses=final[k].to(DTYPE),
        )
        for k in range(n_cfg)
    ]
    return brews[0] if isinstance(config, AttackConfig) else brews


def random_perturbations(base, like, eps: float, data_range, *, seed: int = 0) -> torch.Tensor:
    """The random control: for each poison a uniformly random direction scaled to the ℓ2 norm of the
    matching perturbation ``like`` of the same poison, then projected onto the ε-box and data range.

    ``base`` and ``like`` have the same shape (..., P, L); returns float64 δ of that shape.
    """
    base = as_tensor(base, "base", min_ndim=1)
    like = as_tensor(like, "like", min_ndim=1)
    if base.shape != like.shape:
        raise ValueError(
            "base and like must have the same shape, got "
            f"{tuple(base.shape)} and {tuple(like.shape)}"
        )
    eps = as_positive_float(eps, "eps")
    lo, hi = _check_range(data_range)
    gen = torch.Generator().manual_seed(as_int(seed, "seed", minimum=0))
    direction = torch.randn(base.shape, generator=gen, dtype=DTYPE)
    direction = direction / torch.linalg.vector_norm(direction, dim=-1, keepdim=True)
    delta = direction * torch.linalg.vector_norm(like, dim=-1, keepdim=True)
    return _project(delta, base, eps, lo, hi)


def poisoned_sets(x_train, y_train, poison_index, delta) -> tuple[torch.Tensor, torch.Tensor]:
    """Training sets with the poisons *appended*: for each attack a, x_train followed by
    x_train[poison_index[a]] + delta[a], labels y_train followed by the poisons' true labels.

    ``poison_index`` (A, P), ``delta`` (A, P, L) → x (A, n + P, L), labels (A, n + P).
    """
    x_train = as_tensor(x_train, "x_train", ndim=2)
    y_train = _check_labels(x_train, y_train, "y_train", "x_train")
    delta = as_tensor(delta, "delta", ndim=3)
    if not isinstance(poison_index, torch.Tensor) or poison_index.dtype != torch.int64:
        raise ValueError("poison_index must be an int64 torch tensor")
    if tuple(poison_index.shape) != tuple(delta.shape[:2]) or delta.shape[2] != x_train.shape[1]:
        raise ValueError(
            f"poison_index {tuple(poison_index.shape)} and delta {tuple(delta.shape)} do not match "
            f"(expected (A, P) and (A, P, {x_train.shape[1]}))"
        )
    n_att = delta.shape[0]
    x = torch.cat([x_train.expand(n_att, *x_train.shape), x_train[poison_index] + delta], dim=1)
    y = torch.cat([y_train.expand(n_att, -1), y_train[poison_index]], dim=1)
    return x, y


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval for a success probability from ``successes`` of ``trials``.

    (p̂ + z²/2n ± z √(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n); z = 1.96 gives 95 % coverage.
    """
    trials = as_int(trials, "trials", minimum=1)
    successes = as_int(successes, "successes", minimum=0)
    if successes > trials:
        raise ValueError(f"successes must be at most trials = {trials}, got {successes}")
    z = as_positive_float(z, "z")
    p = successes / trials
    centre = p + z * z / (2 * trials)
    half = z * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    scale = 1 + z * z / trials
    return max(0.0, (centre - half) / scale), min(1.0, (centre + half) / scale)
