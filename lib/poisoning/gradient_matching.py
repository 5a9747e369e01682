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
gradient, and the chapter states the one it uses.) A positional control reverses the weights,
w_p = λ r(p), so that the *first* row is the free one (``AttackConfig(free_row="first")``).
Where the sequence holds the image's channels one after another (the authors' S4 victim reads a
(3, 32, 32) CIFAR image in its memory order: all red rows, then all green, then all blue), an image
row is every ``rows``-th row of the sequence: with ``rows`` = 32, r(p) = (p // row_length) mod 32,
and the last image row of all three channels is free, as the authors' code weights the image before
it reshapes it (``AttackConfig(rows=...)``).

**Where the perturbation lives.** The paper's "last elements rel. size" is ‖δ_last‖₂ / ‖δ‖₂, the
norm of the perturbation on the last elements over its whole norm, averaged over poisons
(:func:`last_elements_rel_size`).

**Victims.** The attack needs three things of a victim family, gathered in a :class:`Victim`:
parameters of R independent runs (a dict of tensors whose leading axis indexes the runs), the logits
of each run on its own batch, and training R runs from scratch on their own (poisoned) training
sets. :func:`s4d_victim` wraps :mod:`lib.ssm.s4d`; :func:`lib.poisoning.mlp_victim.victim` a small
MLP. Every function here that takes a surrogate also takes ``victim=`` (default: the S4D family).

All attacks on one surrogate run at once: the surrogate is replicated once per (attack, restart)
along the run axis, so each copy yields its own parameter gradients.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from lib.engine.losses import per_run_cross_entropy
from lib.engine.validation import (
    DTYPE,
    MODEL_DTYPES,
    all_finite,
    as_callable,
    as_float,
    as_indices,
    as_int,
    as_labels,
    as_list,
    as_model_tensor,
    as_positive_float,
    as_seed,
    as_seeds,
    as_tensor,
    check_result,
    describe,
)
from lib.ssm import s4d

Params = dict[str, torch.Tensor]

MAX_INDEX = 2**63 - 1  # class and test indices are int64 tensors
MAX_LENGTH = 2**31  # sequence positions (row_weights holds one float64 per position: 16 GiB)


@dataclass(frozen=True)
class Victim:
    """A victim family, as the attack sees it.

    ``init(seeds)`` returns the parameters of R = len(seeds) independent runs, a dict of tensors
    whose leading axis (length R) indexes the runs; ``logits(params, x)`` maps a batch per run,
    x of shape (R, B, L), to class scores (R, B, K), differentiably (twice: the attack
    differentiates through a parameter gradient); ``train(x, labels, seeds)`` trains R runs from
    scratch, run r on x[r] (R, n, L) with labels[r] (R, n), initialized and shuffled with
    ``seeds[r]``. ``dtype`` is the precision ``logits`` computes in. The per-run loss is the mean
    cross-entropy of the logits (:meth:`per_run_loss`). The attack checks its inputs once and the
    logits of the first call (shape (R, B, K), finite); ``logits`` itself need not check.
    """

    name: str
    init: Callable[[list[int]], Params]
    logits: Callable[[Params, torch.Tensor], torch.Tensor]
    train: Callable[[torch.Tensor, torch.Tensor, list[int]], Params]
    dtype: torch.dtype = DTYPE

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r:.60}")
        as_callable(self.init, "init", "(seeds) -> params")
        as_callable(self.logits, "logits", "(params, x) -> logits")
        as_callable(self.train, "train", "(x, labels, seeds) -> params")
        if self.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {self.dtype!r}")

    def per_run_loss(self, params: Params, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of each run on its own batch: x (R, B, L), labels (R, B) → (R,).

        ``params`` R runs of this family (finite float32/float64 tensors), ``x`` finite (computed
        in :attr:`dtype`), ``labels`` integer classes 0..K−1 of the logits' K classes.
        """
        runs = _check_runs(params)
        x = as_model_tensor(x, "x", self.dtype)
        if x.ndim != 3 or x.shape[0] != runs or 0 in x.shape:
            raise ValueError(
                f"x must have shape ({runs}, B, L) with B, L >= 1 (one batch per run), "
                f"got {tuple(x.shape)}"
            )
        out = self._checked_logits(params, x)
        labels = as_labels(labels, "labels", tuple(x.shape[:2]), out.shape[-1])
        return per_run_cross_entropy(out, labels)

    def _checked_logits(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        """``logits(params, x)``, which must be finite and of shape (R, B, K) with K ≥ 2."""
        out = self.logits(params, x)
        runs, batch = x.shape[:2]
        if (
            not isinstance(out, torch.Tensor)
            or out.ndim != 3
            or tuple(out.shape[:2]) != (runs, batch)
            or out.shape[2] < 2
        ):
            raise ValueError(
                f"the {self.name} victim's logits must have shape ({runs}, {batch}, K) with "
                f"K >= 2, got {describe(out)}"
            )
        return check_result(out, f"the {self.name} victim's logits")


def s4d_victim(
    config: s4d.S4DConfig | None = None, train_config: s4d.TrainConfig | None = None
) -> Victim:
    """The S4D family of :mod:`lib.ssm.s4d` (computing in its float32) as a :class:`Victim`, with
    its sizes ``config`` and training ``train_config`` (defaults: those of :mod:`lib.ssm.s4d`)."""
    config = s4d.S4DConfig() if config is None else config
    train_config = s4d.TrainConfig() if train_config is None else train_config
    if not isinstance(config, s4d.S4DConfig):
        raise ValueError(f"config must be an S4DConfig, got {type(config).__name__}")
    if not isinstance(train_config, s4d.TrainConfig):
        raise ValueError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    return Victim(
        name="S4D",
        init=lambda seeds: s4d.init_params(config, seeds),
        logits=s4d.logits,
        train=lambda x, labels, seeds: s4d.train(config, x, labels, seeds, train_config),
        dtype=s4d.MODEL_DTYPE,
    )


_S4D_DEFAULT = s4d_victim()


def _check_victim(victim) -> Victim:
    """``victim``, or the S4D family when None (the attack uses only its logits and dtype)."""
    if victim is None:
        return _S4D_DEFAULT
    if not isinstance(victim, Victim):
        raise ValueError(f"victim must be a Victim, got {type(victim).__name__}")
    return victim


def runs_of(params, name: str = "params") -> int:
    """The number of runs R ≥ 1 of a parameter dict (the common length of its leading axes)."""
    if not isinstance(params, dict) or not params:
        raise ValueError(f"{name} must be a non-empty dict of tensors, got {describe(params)}")
    lengths = set()
    for key, value in params.items():
        if not isinstance(key, str):
            raise ValueError(f"{name} keys must be strings, got {key!r:.40}")
        if not isinstance(value, torch.Tensor) or value.ndim < 1:
            raise ValueError(
                f"{name}[{key!r}] must be a tensor with a leading run axis, got {describe(value)}"
            )
        lengths.add(int(value.shape[0]))
    if len(lengths) != 1:
        raise ValueError(f"the parameters disagree on the number of runs: {sorted(lengths)}")
    runs = lengths.pop()
    if runs < 1:
        raise ValueError(f"{name} must hold at least one run, got a leading axis of length 0")
    return runs


def _check_runs(params, name: str = "params") -> int:
    """R, the runs of ``params``, whose entries must be finite float32 or float64 tensors (what
    the victim family itself requires of them its ``logits`` checks, or the logits show)."""
    runs = runs_of(params, name)
    for key, value in params.items():
        if value.dtype not in MODEL_DTYPES or not all_finite(value):
            raise ValueError(
                f"{name}[{key!r}] must be a finite float32 or float64 tensor, got "
                f"{describe(value)}" + ("" if value.dtype not in MODEL_DTYPES else " with nan/inf")
            )
    return runs


STEP_RULES = ("constant", "authors")
#: Which end of the sequence the per-row penalty leaves free: the paper's last row, or the first.
FREE_ROWS = ("last", "first")


@dataclass(frozen=True)
class AttackConfig:
    """Signed Adam on the matching objective: ``steps`` iterations from ``restarts`` random starts,
    per-row weight ``reg_factor`` = λ (0: no regularizer), the row the penalty spares
    ``free_row``, and one of two step rules.

    ``rows`` (None: every row of the sequence is its own) counts the distinct image rows when the
    sequence repeats them, one block per channel (:func:`row_weights`).

    ``free_row`` is one of :data:`FREE_ROWS`: ``"last"`` (the paper's, App. H.2.4: the weight
    w_p = λ (R − 1 − r(p)) of position p in row r(p) = p // ``row_length`` of R rows leaves the
    last row, the end of the sequence, unpenalized) or ``"first"`` (the positional control: the
    weights reversed, w_p = λ r(p), leaving the first row, the start of the sequence, free;
    :func:`row_weights`). The step rules:

    * ``"constant"`` (this book's): Adam's step ``lr`` · ε, constant, from a uniform start in the
      ε-box;
    * ``"authors"`` (the gradient-matching code of Geiping et al. 2021 that the paper ran, its
      "rule 2" for signed Adam): Adam's step ``lr`` in the units of the (standardized) data, their
      τ = 0.1 by default, multiplied by 0.1 after steps ⌊steps/2.667⌋, ⌊steps/1.6⌋ and
      ⌊steps/1.142⌋ (93, 156 and 218 of 250: their MultiStepLR), from a Gaussian start ε·N(0, 1)
      clipped to the ε-box (their "randn" start). Both starts are then projected into the data
      range.
    """

    steps: int = 40
    restarts: int = 2
    lr: float = 0.1
    reg_factor: float = 0.0
    row_length: int = 8
    step_rule: str = "constant"
    free_row: str = "last"
    rows: int | None = None

    def __post_init__(self):
        as_int(self.steps, "steps", minimum=1)
        as_int(self.restarts, "restarts", minimum=1)
        as_positive_float(self.lr, "lr")
        as_positive_float(self.reg_factor, "reg_factor", allow_zero=True)
        as_int(self.row_length, "row_length", minimum=1)
        if self.rows is not None:
            as_int(self.rows, "rows", minimum=1)
        if self.step_rule not in STEP_RULES:
            raise ValueError(f"step_rule must be one of {STEP_RULES}, got {self.step_rule!r:.40}")
        if not isinstance(self.free_row, str) or self.free_row not in FREE_ROWS:
            raise ValueError(f"free_row must be one of {FREE_ROWS}, got {self.free_row!r:.40}")

    def step_sizes(self, eps: float) -> np.ndarray:
        """Adam's step size at each of the ``steps`` iterations (the rule above, for bound ε)."""
        eps = as_positive_float(eps, "eps")
        if self.step_rule == "constant":
            return np.full(self.steps, self.lr * eps)
        milestones = [int(self.steps // d) for d in (2.667, 1.6, 1.142)]
        k = np.arange(self.steps)
        return self.lr * 0.1 ** sum((k >= m).astype(int) for m in milestones)


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

    def __post_init__(self):
        """Fields of matching shapes: A, P ≥ 1, indices ≥ 0, finite float64 values."""
        self.poison_index = as_indices(
            self.poison_index, "poison_index", (None, None), None, "training indices"
        )
        a, p = self.poison_index.shape
        if a == 0 or p == 0:
            raise ValueError(f"poison_index must be (A, P) with A, P >= 1, got {(a, p)}")
        self.delta = as_tensor(self.delta, "delta", shape=(a, p, None), nonempty=True)
        self.matching_loss = as_tensor(self.matching_loss, "matching_loss", shape=(a,))
        self.targets = as_indices(self.targets, "targets", (a,), None, "test indices")
        self.adversarial = as_labels(self.adversarial, "adversarial", (a,), None)
        self.restart_losses = as_tensor(self.restart_losses, "restart_losses")
        if self.restart_losses.numel() and (
            self.restart_losses.ndim != 2 or self.restart_losses.shape[0] != a
        ):
            raise ValueError(
                f"restart_losses must be empty or of shape ({a}, restarts), "
                f"got {tuple(self.restart_losses.shape)}"
            )


def row_weights(
    length: int, row_length: int, free_row: str = "last", rows: int | None = None
) -> torch.Tensor:
    """Per-position weights w_p / λ of the per-row penalty for a sequence of R rows (float64).

    With r(p) = p // row_length the row of position p (App. H.2.4, footnote 14, of Slutzky et al.
    2025, with rows counted from 0), or, given ``rows`` = R, r(p) = (p // row_length) mod R (the
    sequence then holds length / (R · row_length) blocks of R rows, e.g. the three channels of an
    image read channel after channel, and position p is in image row r(p) of its block):

        free_row = "last":   w_p / λ = R − 1 − r(p)   (the paper's: the last row is free),
        free_row = "first":  w_p / λ = r(p)           (reversed: the first row is free).

    The two are the same weights in reverse order of rows, so a perturbation of a given size pays
    the same penalty in the one as its row-mirror image pays in the other.
    """
    length = as_int(length, "length", minimum=1, maximum=MAX_LENGTH)
    row_length = as_int(row_length, "row_length", minimum=1)
    if not isinstance(free_row, str) or free_row not in FREE_ROWS:
        raise ValueError(f"free_row must be one of {FREE_ROWS}, got {free_row!r:.40}")
    if length % row_length:
        raise ValueError(f"length {length} is not a whole number of rows of {row_length}")
    if rows is None:
        rows = length // row_length
    rows = as_int(rows, "rows", minimum=1)
    if length % (rows * row_length):
        raise ValueError(
            f"length {length} is not a whole number of blocks of {rows} rows of {row_length}"
        )
    row = (torch.arange(length) // row_length) % rows
    return (row if free_row == "first" else rows - 1 - row).to(DTYPE)


def _row_scale(x: torch.Tensor) -> torch.Tensor:
    """Each row's largest |entry| (1 for a zero row), (..., 1): dividing by it keeps the squares
    of a norm finite and normal (entries of 1e200 overflow them, of 1e-200 underflow them)."""
    top = x.abs().amax(-1, keepdim=True)
    return torch.where(top > 0, top, torch.ones_like(top))


def last_elements_rel_size(delta, last: int) -> float:
    """‖δ_i[−last:]‖₂ / ‖δ_i‖₂ averaged over the poisons i (rows of δ, shape (..., L)).

    Poisons with δ_i = 0 count as 0 (no perturbation, none of it at the end).
    """
    delta = as_tensor(delta, "delta", min_ndim=1, nonempty=True)
    last = as_int(last, "last", minimum=1)
    if last > delta.shape[-1]:
        raise ValueError(f"last must be at most the sequence length {delta.shape[-1]}, got {last}")
    delta = delta / _row_scale(delta)  # the ratio is scale-free: no underflow at 1e-200
    total = torch.linalg.vector_norm(delta, dim=-1)
    tail = torch.linalg.vector_norm(delta[..., -last:], dim=-1)
    ratio = torch.where(total > 0, tail / torch.where(total > 0, total, 1.0), 0.0)
    return float(check_result(ratio.mean(), "the last elements' relative size"))


def _check_labels(x: torch.Tensor, labels, name: str) -> torch.Tensor:
    """One class label ≥ 0 per sequence of x (their upper end is the victim's classes)."""
    return as_labels(labels, name, (x.shape[0],), None)


def _check_sequences(x, name: str, length: int | None = None) -> torch.Tensor:
    """A finite float64 (n, L) set of n ≥ 1 sequences of L ≥ 1 steps (L = ``length`` if given)."""
    # data, not a graph: a tensor that requires grad gives its values (the attack optimizes its
    # own δ; a graph kept into the victim's training loop is backwarded twice)
    x = as_tensor(x, name, ndim=2, nonempty=True, detach=True)
    if length is not None and x.shape[1] != length:
        raise ValueError(
            f"{name} must hold sequences of x_train's length {length}, got length {x.shape[1]}"
        )
    return x


def choose_poisons(y_train, adversarial: int, budget: int, seed: int) -> torch.Tensor:
    """``budget`` distinct training indices of class ``adversarial``, drawn with ``seed``."""
    y_train = as_labels(y_train, "y_train", (None,), None)
    adversarial = as_int(adversarial, "adversarial class", minimum=0, maximum=MAX_INDEX)
    budget = as_int(budget, "budget", minimum=1)
    seed = as_seed(seed)
    members = torch.nonzero(y_train == adversarial).flatten()
    if budget > len(members):
        raise ValueError(
            f"budget {budget} is larger than the adversarial class {adversarial}, which has "
            f"{len(members)} training images"
        )
    pick = np.random.default_rng(seed).choice(len(members), budget, replace=False)
    return members[torch.from_numpy(np.sort(pick))]


def choose_nearest(features, x_train, y_train, x_target, adversarial: int,
                   budget: int) -> torch.Tensor:
    """The ``budget`` training images of class ``adversarial`` nearest the target ``x_target``
    (L,) in the feature space of ``features`` (a callable x (n, L) → φ(x) (n, F)): the indices
    i minimizing ‖φ(x_i) − φ(x_target)‖₂, in increasing index order (ties: the smaller index).

    The base images of a feature-collision attack (Shafahi et al. 2018) are the adversarial-class
    images whose features already lie closest to the target's; here the same rule picks the
    images a perturbation of bounded size has the shortest way to move."""
    as_callable(features, "features", "(x) -> phi(x)")
    x_train = _check_sequences(x_train, "x_train")
    y_train = _check_labels(x_train, y_train, "y_train")
    x_target = as_tensor(x_target, "x_target", shape=(x_train.shape[1],), detach=True)
    adversarial = as_int(adversarial, "adversarial class", minimum=0, maximum=MAX_INDEX)
    budget = as_int(budget, "budget", minimum=1)
    members = torch.nonzero(y_train == adversarial).flatten()
    if budget > len(members):
        raise ValueError(
            f"budget {budget} is larger than the adversarial class {adversarial}, which has "
            f"{len(members)} training images"
        )
    with torch.no_grad():
        phi = features(torch.cat([x_target[None], x_train[members]]))
    if not isinstance(phi, torch.Tensor) or phi.ndim != 2 or len(phi) != len(members) + 1:
        raise ValueError(f"features must map (n, L) to (n, F), got {describe(phi)}")
    phi = check_result(phi.to(DTYPE), "the features")
    dist = torch.linalg.vector_norm(phi[1:] - phi[0], dim=-1)
    order = np.lexsort((members.numpy(), dist.numpy()))[:budget]
    return members[torch.from_numpy(np.sort(order))]


def _project(delta: torch.Tensor, base: torch.Tensor, eps: float, lo: float, hi: float):
    """Onto {‖δ‖_∞ ≤ ε, lo ≤ x + δ ≤ hi}: both are boxes, so clamp to their intersection."""
    return torch.maximum(
        torch.minimum(delta, (hi - base).clamp(max=eps)), (lo - base).clamp(min=-eps)
    )


def _start(config: AttackConfig, base: torch.Tensor, eps: float, lo: float, hi: float,
           seed: int) -> torch.Tensor:
    """The random start of ``config``'s step rule (uniform in the ε-box, or the authors'
    ε·N(0, 1) clipped to it), drawn with ``seed`` and projected into the data range."""
    gen = torch.Generator().manual_seed(seed)
    if config.step_rule == "authors":
        start = torch.randn(base.shape, generator=gen, dtype=torch.float64).clamp(-1, 1) * eps
    else:
        start = (torch.rand(base.shape, generator=gen, dtype=torch.float64) * 2 - 1) * eps
    return _project(start.to(base.dtype), base, eps, lo, hi)


def _signed_adam(matching, w: torch.Tensor, start: torch.Tensor, base: torch.Tensor, eps: float,
                 lo: float, hi: float, config: AttackConfig) -> torch.Tensor:
    """Signed Adam on ℳ(δ) + Σ w δ² from ``start``: ``config.steps`` steps of the sizes
    :meth:`AttackConfig.step_sizes`, each followed by the projection onto the ε-box and the data
    range. Returns the final δ (detached)."""
    delta = start.clone().requires_grad_()
    sizes = config.step_sizes(eps)
    opt = torch.optim.Adam([delta], lr=float(sizes[0]))
    for step in range(config.steps):
        for group in opt.param_groups:
            group["lr"] = float(sizes[step])
        objective = matching(delta, create_graph=True).sum() + (w * delta * delta).sum()
        opt.zero_grad(set_to_none=True)
        (grad,) = torch.autograd.grad(objective, [delta])
        delta.grad = grad.sign()
        opt.step()
        with torch.no_grad():
            delta.copy_(_project(delta, base, eps, lo, hi))
    return delta.detach()


def _check_range(data_range) -> tuple[float, float]:
    if not isinstance(data_range, (tuple, list)) or len(data_range) != 2:
        raise ValueError(f"data_range must be a pair (lo, hi), got {describe(data_range)}")
    lo, hi = as_float(data_range[0], "data_range[0]"), as_float(data_range[1], "data_range[1]")
    if not lo < hi:
        raise ValueError(f"data_range must have lo < hi, got {data_range}")
    return lo, hi


def _check_box(eps, data_range, images: torch.Tensor, what: str) -> tuple[float, float, float]:
    """ε in (0, hi − lo] (a larger ε bounds nothing), (lo, hi), and ``images`` inside [lo, hi].

    The images are compared with a slack of 1e-9 (hi − lo): a data range is computed from the same
    standardization as the images but by another expression, which may round differently.
    """
    lo, hi = _check_range(data_range)
    eps = as_positive_float(eps, "eps")
    if eps > hi - lo:
        raise ValueError(f"eps must be at most the data range's width {hi - lo}, got {eps}")
    slack = 1e-9 * (hi - lo)
    low, high = float(images.min()), float(images.max())
    if low < lo - slack or high > hi + slack:
        raise ValueError(
            f"{what} must lie inside data_range [{lo}, {hi}] (perturbed images are projected "
            f"back into it), got values in [{low}, {high}]"
        )
    return eps, lo, hi


class _Matching:
    """ℳ(δ) for R attacks at once, each on its own copies of the surrogates (along the run axis):
    targets x_t (R, L) with classes adv (R,), poison images base (R, P, L) labelled adv. With an
    ensemble of K surrogates, ℳ is the mean over the K members of each member's ℳ."""

    def __init__(
        self, victim: Victim, surrogate: Params, x_t: torch.Tensor, adv, base, poison_labels=None
    ):
        # one target per run (x_t (R, L), adv (R,)), or T per run (x_t (R, T, L), adv (R, T)),
        # whose mean loss gives g_t; the poisons are labelled adv unless poison_labels (R, P)
        if x_t.ndim == 2:
            x_t, adv = x_t[:, None, :], adv[:, None]
        runs, members = len(adv), runs_of(surrogate)
        self.logits = victim.logits
        # runs in the order (member, attack): member k's copies are rows k·R … (k + 1)·R − 1
        copies = {
            k: v.to(victim.dtype).repeat_interleave(runs, dim=0).contiguous()
            for k, v in surrogate.items()
        }
        self.params = {k: v.requires_grad_() for k, v in copies.items()}
        self.members, self.runs = members, runs * members
        labels = adv[:, :1].expand(base.shape[:2]) if poison_labels is None else poison_labels
        x_t, adv = x_t.repeat(members, 1, 1), adv.repeat(members, 1)
        out = victim._checked_logits(self.params, x_t)
        self.classes = int(out.shape[-1])
        if int(adv.max()) >= out.shape[-1]:
            raise ValueError(
                f"adversarial classes must lie in 0..{out.shape[-1] - 1} (the surrogate's "
                f"classes), got {int(adv.max())}"
            )
        target_loss = per_run_cross_entropy(out, adv).sum()
        grads = torch.autograd.grad(target_loss, list(self.params.values()))
        self.g_t = [g.detach().reshape(self.runs, -1) for g in grads]
        self.g_t_norm = torch.sqrt(sum((g * g).sum(-1) for g in self.g_t))
        self.base = base.repeat(members, 1, 1)
        self.labels = labels.repeat(members, 1)

    def __call__(self, delta: torch.Tensor, *, create_graph: bool = False) -> torch.Tensor:
        x = self.base + delta.repeat(self.members, 1, 1)
        loss = per_run_cross_entropy(self.logits(self.params, x), self.labels).sum()
        g_p = torch.autograd.grad(loss, list(self.params.values()), create_graph=create_graph)
        flat = [g.reshape(self.runs, -1) for g in g_p]
        dot = sum((a * b).sum(-1) for a, b in zip(self.g_t, flat, strict=True))
        norm = torch.sqrt(sum((b * b).sum(-1) for b in flat))
        return (1 - dot / (self.g_t_norm * norm)).reshape(self.members, -1).mean(0)


def _check_classes(labels: dict[str, torch.Tensor], classes: int) -> None:
    """Every label must be one of the victim's ``classes`` classes."""
    for name, values in labels.items():
        if int(values.max()) >= classes:
            raise ValueError(
                f"{name} must lie in 0..{classes - 1} (the victim's classes), "
                f"got a label {int(values.max())}"
            )


def _check_surrogate(surrogate) -> Params:
    """A parameter dict of K ≥ 1 runs: one surrogate, or an ensemble of K (finite floats)."""
    _check_runs(surrogate, "surrogate")
    return surrogate


def _check_brew(brew_result, n_train: int, n_test: int) -> Brew:
    """A :class:`Brew` whose poisons index the training set and targets the test set."""
    if not isinstance(brew_result, Brew):
        raise ValueError(
            f"brew_result must be a Brew (as brew returns), got {describe(brew_result)}"
        )
    as_indices(
        brew_result.poison_index, "brew_result.poison_index", None, n_train, "training indices"
    )
    as_indices(brew_result.targets, "brew_result.targets", None, n_test, "test indices")
    return brew_result


def matching_loss(
    surrogate: Params, x_test, brew_result: Brew, x_train, delta, *, victim: Victim | None = None
) -> torch.Tensor:
    """ℳ of the perturbations ``delta`` (A, P, L) of the poisons of ``brew_result`` on ``surrogate``
    (one value per attack, float64): e.g. of a random control, to compare with the attack's own.
    ``victim`` is the surrogate's family (default: S4D); an ensemble gives the members' mean."""
    victim = _check_victim(victim)
    surrogate = _check_surrogate(surrogate)
    x_train = _check_sequences(x_train, "x_train")
    x_test = _check_sequences(x_test, "x_test", x_train.shape[1])
    brew_result = _check_brew(brew_result, len(x_train), len(x_test))
    delta = as_tensor(delta, "delta", ndim=3)
    index = brew_result.poison_index
    if tuple(delta.shape) != (*index.shape, x_train.shape[1]):
        raise ValueError(
            f"delta must have shape {(*index.shape, x_train.shape[1])} (the brew's poisons, "
            f"x_train's length), got {tuple(delta.shape)}"
        )
    md = victim.dtype
    base = x_train[index].to(md)
    matching = _Matching(
        victim, surrogate, x_test[brew_result.targets].to(md), brew_result.adversarial, base
    )
    return check_result(matching(delta.to(md)).detach().to(DTYPE), "the matching loss")


def _check_configs(config) -> list[AttackConfig]:
    """One AttackConfig, or several that share the optimization loop (steps, restarts, lr)."""
    configs = [config] if isinstance(config, AttackConfig) else as_list(config, "config")
    for c in configs:
        if not isinstance(c, AttackConfig):
            raise ValueError(f"config must be an AttackConfig, got {type(c).__name__}")
    loop = {(c.steps, c.restarts, c.lr, c.step_rule) for c in configs}
    if len(loop) > 1:
        raise ValueError(
            "attacks brewed together must share steps, restarts, lr and step_rule, got "
            f"{sorted(loop)} (steps, restarts, lr, step_rule)"
        )
    return configs


def brew(
    surrogate: Params,
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
    victim: Victim | None = None,
    poison_index=None,
) -> Brew | list[Brew]:
    """Gradient-matching poisons for A attacks (target ``targets[a]``, class ``adversarial[a]``).

    ``surrogate`` is a one-run parameter dict of the family ``victim`` (default: :mod:`lib.ssm.s4d`)
    trained on clean data, or a K-run dict: an ensemble of surrogates, whose ℳ is the mean of the
    members' ℳ (Geiping et al. 2021, who average over an ensemble for victims retrained from
    scratch); ``x_train``
    (n, L), ``y_train`` (n,), ``x_test`` (m, L), ``y_test`` (m,); ``targets`` test indices and
    ``adversarial`` classes (each ≠ the target's true class); ``budget`` poisons per attack, ``eps``
    the ℓ∞ bound, ``data_range`` = (lo, hi) the pixel range. Attack a poisons the training images
    :func:`choose_poisons` (y_train, adversarial[a], budget, seed + a) draws. Returns a
    :class:`Brew`. ``poison_index`` (A, ``budget``), if given, names attack a's poisons instead
    (training images of class ``adversarial[a]``, e.g. :func:`choose_nearest`'s).

    ``config`` may also be a list of configs that differ only in their regularizer (``reg_factor``,
    ``row_length``, ``free_row``, ``rows``): then every config attacks the same targets with the
    same poison images from the same random starts, all in one batched loop (what separate calls
    with the same ``seed`` would compute), and the result is a list with one :class:`Brew` per
    config.
    """
    configs = _check_configs(config)
    victim = _check_victim(victim)
    surrogate = _check_surrogate(surrogate)
    x_train = _check_sequences(x_train, "x_train")
    x_test = _check_sequences(x_test, "x_test", x_train.shape[1])
    y_train = _check_labels(x_train, y_train, "y_train")
    y_test = _check_labels(x_test, y_test, "y_test")
    eps, lo, hi = _check_box(eps, data_range, x_train, "x_train")
    seed = as_seed(seed)
    budget = as_int(budget, "budget", minimum=1)
    targets = [
        as_int(t, "target index", minimum=0, maximum=MAX_INDEX) for t in as_list(targets, "targets")
    ]
    for t in targets:
        if t >= len(x_test):
            raise ValueError(f"target index {t} is out of range for a test set of {len(x_test)}")
    adversarial = [
        as_int(c, "adversarial class", minimum=0, maximum=MAX_INDEX)
        for c in as_list(adversarial, "adversarial")
    ]
    if len(adversarial) != len(targets):
        raise ValueError(
            f"adversarial must have one class per target: {len(adversarial)} for {len(targets)}"
        )
    for t, c in zip(targets, adversarial, strict=True):
        if c == int(y_test[t]):
            raise ValueError(f"adversarial class {c} is the true class of target {t}")
    length = x_train.shape[1]
    weights = torch.stack(
        [c.reg_factor * row_weights(length, c.row_length, c.free_row, c.rows) for c in configs]
    )
    if poison_index is None:
        index = torch.stack(
            [choose_poisons(y_train, c, budget, seed + a) for a, c in enumerate(adversarial)]
        )
    else:
        index = as_indices(poison_index, "poison_index", (len(targets), budget), len(x_train),
                            "training indices")
        for a, c in enumerate(adversarial):
            if len(set(index[a].tolist())) != budget or bool((y_train[index[a]] != c).any()):
                raise ValueError(f"poison_index[{a}] must hold {budget} distinct training "
                                 f"images of the adversarial class {c}")
    n_cfg, n_att, restarts = len(configs), len(targets), configs[0].restarts
    md = victim.dtype
    # runs in the order (config, attack, restart)
    t_idx = torch.tensor(targets).repeat_interleave(restarts).repeat(n_cfg)
    adv = torch.tensor(adversarial).repeat_interleave(restarts).repeat(n_cfg)
    base = x_train[index].repeat_interleave(restarts, dim=0).to(md)  # (A·restarts, P, L)
    matching = _Matching(victim, surrogate, x_test[t_idx].to(md), adv, base.repeat(n_cfg, 1, 1))
    _check_classes({"y_train": y_train, "y_test": y_test}, matching.classes)
    start = _start(configs[0], base, eps, lo, hi, seed).repeat(n_cfg, 1, 1)
    base = base.repeat(n_cfg, 1, 1)
    w = weights.to(md).repeat_interleave(n_att * restarts, dim=0)[:, None, :]  # (runs, 1, L)
    delta = _signed_adam(matching, w, start, base, eps, lo, hi, configs[0])
    final = matching(delta).detach().reshape(n_cfg, n_att, restarts)
    check_result(final, "the matching loss of the poisons")
    best = final.argmin(-1)  # (configs, attacks)
    chosen = delta.reshape(n_cfg, n_att, restarts, budget, -1)
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


def brew_joint(
    surrogate: Params,
    x_train,
    y_train,
    x_test,
    targets,
    intended: int,
    poison_index,
    eps: float,
    data_range,
    config: AttackConfig = AttackConfig(),
    *,
    batch: int | None = None,
    seed: int = 0,
    victim: Victim | None = None,
) -> dict:
    """One *joint* brew (the "random-subset" threat model of the gradient-matching code that the
    paper ran for Table 2): T target test images ``targets`` with one shared ``intended`` class,
    and P poisons ``poison_index`` drawn from the whole training set (any class), each keeping
    its own label. The target gradient is that of the targets' mean loss,
    g_t = ∇_θ (1/T) Σ_j ℓ(x_{t_j}, intended); the poisons are matched to it in batches of
    ``batch`` poisons (default: all P in one), each batch with its own ℳ of eq. (ℳ) above, and
    the objective is the sum over batches (as the authors' code sums over its poison batches).
    The optimization is :func:`brew`'s (``config``'s step rule, restarts; one config). Returns
    ``{"poison_index" (P,), "delta" (P, L) float64, "matching_loss" (float, summed over batches),
    "restart_losses" (restarts,)}``.
    """
    if not isinstance(config, AttackConfig):
        raise ValueError(f"config must be an AttackConfig, got {type(config).__name__}")
    victim = _check_victim(victim)
    surrogate = _check_surrogate(surrogate)
    x_train = _check_sequences(x_train, "x_train")
    x_test = _check_sequences(x_test, "x_test", x_train.shape[1])
    y_train = _check_labels(x_train, y_train, "y_train")
    eps, lo, hi = _check_box(eps, data_range, x_train, "x_train")
    seed = as_seed(seed)
    intended = as_int(intended, "intended class", minimum=0, maximum=MAX_INDEX)
    targets = [
        as_int(t, "target index", minimum=0, maximum=MAX_INDEX) for t in as_list(targets, "targets")
    ]
    if not targets or len(set(targets)) != len(targets):
        raise ValueError(f"targets must be distinct test indices, got {targets!r:.80}")
    for t in targets:
        if t >= len(x_test):
            raise ValueError(f"target index {t} is out of range for a test set of {len(x_test)}")
    index = as_indices(poison_index, "poison_index", (None,), len(x_train), "training indices")
    n_poisons = len(index)
    if n_poisons == 0 or len(set(index.tolist())) != n_poisons:
        raise ValueError("poison_index must hold at least one distinct training index")
    batch = n_poisons if batch is None else as_int(batch, "batch", minimum=1)
    if n_poisons % batch:
        raise ValueError(f"batch {batch} must divide the number of poisons {n_poisons}")
    chunks, restarts, md = n_poisons // batch, config.restarts, victim.dtype
    runs = chunks * restarts  # in the order (restart, chunk)
    base = x_train[index].reshape(chunks, batch, -1).repeat(restarts, 1, 1).to(md)
    labels = y_train[index].reshape(chunks, batch).repeat(restarts, 1)
    x_t = x_test[targets].to(md)[None].expand(runs, -1, -1)
    adv = torch.full((runs, len(targets)), intended, dtype=torch.int64)
    matching = _Matching(victim, surrogate, x_t, adv, base, poison_labels=labels)
    _check_classes({"y_train": y_train, "intended": torch.tensor([intended])}, matching.classes)
    w = (config.reg_factor
         * row_weights(x_train.shape[1], config.row_length, config.free_row, config.rows)
         ).to(md)
    delta = _signed_adam(matching, w, _start(config, base, eps, lo, hi, seed), base, eps, lo, hi,
                         config)
    final = matching(delta).detach().reshape(restarts, chunks).sum(-1)
    check_result(final, "the matching loss of the poisons")
    best = int(final.argmin())
    chosen = delta.reshape(restarts, n_poisons, -1)[best]
    return {
        "poison_index": index,
        "delta": chosen.to(DTYPE),
        "matching_loss": float(final[best]),
        "restart_losses": final.to(DTYPE),
    }


def random_perturbations(
    base, like, eps: float, data_range, *, seed: int = 0, match: str = "l2-linf"
) -> torch.Tensor:
    """The random control: for each poison a random perturbation of the size of the perturbation
    ``like`` of the same poison (the arm it is compared with), inside the ε-box and the data range.

    A Gaussian direction d is drawn per poison. With ``match="l2-linf"`` (the default) the control
    is δ(s) = clip(s d, box), the box being the data range and the ℓ∞ ball of radius ‖like‖_∞ (so
    its ℓ∞ norm is at most that of ``like``), with the scale s found by bisection such that
    ‖δ(s)‖₂ = ‖like‖₂ (‖δ(s)‖₂ grows with s; where even s → ∞ stays below, s is that limit, and
    :func:`size_ratio` shows the shortfall; a pixel at an end of the data range, which can move
    one way only, takes that way, as an attack's must). With ``match="l2-before-projection"`` the
    direction is scaled to ‖like‖₂ and then projected onto the ε-box and the data range (its ℓ2
    norm then ends below ``like``'s).

    ``base`` and ``like`` have the same shape (..., P, L); returns float64 δ of that shape.
    """
    base = as_tensor(base, "base", min_ndim=1, nonempty=True)
    like = as_tensor(like, "like", min_ndim=1)
    if base.shape != like.shape:
        raise ValueError(
            "base and like must have the same shape, got "
            f"{tuple(base.shape)} and {tuple(like.shape)}"
        )
    if match not in ("l2-linf", "l2-before-projection"):
        raise ValueError(f"match must be 'l2-linf' or 'l2-before-projection', got {match!r:.40}")
    eps, lo, hi = _check_box(eps, data_range, base, "base")
    largest = float(like.abs().max())
    if largest > eps * (1 + 1e-6):
        raise ValueError(f"like must lie in the eps-box (|like| <= {eps}), got {largest}")
    gen = torch.Generator().manual_seed(as_seed(seed))
    direction = torch.randn(base.shape, generator=gen, dtype=DTYPE)
    direction = direction / torch.linalg.vector_norm(direction, dim=-1, keepdim=True)
    target = torch.linalg.vector_norm(like, dim=-1, keepdim=True)
    if match == "l2-before-projection":
        delta = _project(direction * target, base, eps, lo, hi)
        return check_result(delta, "the random perturbations")
    radius = like.abs().amax(-1, keepdim=True).clamp(max=eps)
    upper = torch.minimum(hi - base, radius)
    lower = torch.maximum(lo - base, -radius)
    # a pixel at an end of the data range can move one way only: its direction takes that way
    direction = torch.where(upper <= 0, -direction.abs(), direction)
    direction = torch.where(lower >= 0, direction.abs(), direction)

    def clipped(scale):
        return torch.maximum(torch.minimum(direction * scale, upper), lower)

    # ‖clip(s d)‖₂ is continuous and non-decreasing in s; bracket [0, s_max], s_max saturating
    # every coordinate (|d_p| s ≥ radius wherever d_p ≠ 0).
    small = direction.abs().where(direction != 0, torch.ones_like(direction)).amin(-1, keepdim=True)
    s_lo = torch.zeros_like(target)
    s_hi = radius / small + 1.0
    for _ in range(60):  # halves the bracket 60 times: below float64 resolution
        mid = (s_lo + s_hi) / 2
        below = torch.linalg.vector_norm(clipped(mid), dim=-1, keepdim=True) < target
        s_lo, s_hi = torch.where(below, mid, s_lo), torch.where(below, s_hi, mid)
    return check_result(clipped(s_hi), "the random perturbations")


def size_ratio(delta, like) -> dict[str, float]:
    """Median over poisons of ‖δ‖₂ / ‖like‖₂ and of ‖δ‖_∞ / ‖like‖_∞ (poisons with like = 0 left
    out): how well a control ``delta`` matches the size of the arm ``like`` (both (..., P, L))."""
    delta = as_tensor(delta, "delta", min_ndim=1, nonempty=True)
    like = as_tensor(like, "like", min_ndim=1)
    if delta.shape != like.shape:
        raise ValueError(
            f"delta and like must have the same shape, got {tuple(delta.shape)} and "
            f"{tuple(like.shape)}"
        )
    out = {}
    s_delta, s_like = _row_scale(delta), _row_scale(like)
    for name, order in (("l2", 2.0), ("linf", float("inf"))):
        a = torch.linalg.vector_norm(delta / s_delta, ord=order, dim=-1).flatten()
        b = torch.linalg.vector_norm(like / s_like, ord=order, dim=-1).flatten()
        keep = b > 0
        if not bool(keep.any()):
            raise ValueError("like is zero for every poison: no size to match")
        ratio = a[keep] / b[keep] * (s_delta.flatten()[keep] / s_like.flatten()[keep])
        out[name] = float(check_result(ratio.median(), f"the {name} size ratio"))
    return out


def poisoned_sets(x_train, y_train, poison_index, delta) -> tuple[torch.Tensor, torch.Tensor]:
    """Training sets with the poisons *appended*: for each attack a, x_train followed by
    x_train[poison_index[a]] + delta[a], labels y_train followed by the poisons' true labels.

    ``poison_index`` (A, P), ``delta`` (A, P, L) → x (A, n + P, L), labels (A, n + P).
    """
    x_train = _check_sequences(x_train, "x_train")
    y_train = _check_labels(x_train, y_train, "y_train")
    delta = as_tensor(delta, "delta", ndim=3, nonempty=True, detach=True)
    if delta.shape[2] != x_train.shape[1]:
        raise ValueError(
            f"delta must have shape (A, P, {x_train.shape[1]}) (x_train's length), "
            f"got {tuple(delta.shape)}"
        )
    poison_index = as_indices(
        poison_index, "poison_index", tuple(delta.shape[:2]), len(x_train), "training indices"
    )
    n_att = delta.shape[0]
    x = torch.cat([x_train.expand(n_att, *x_train.shape), x_train[poison_index] + delta], dim=1)
    y = torch.cat([y_train.expand(n_att, -1), y_train[poison_index]], dim=1)
    return x, y


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval for a success probability from ``successes`` of ``trials``.

    (p̂ + z²/2n ± z √(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n); z = 1.96 gives 95 % coverage.
    """
    trials = as_int(trials, "trials", minimum=1, maximum=2**53)  # exact as a float
    successes = as_int(successes, "successes", minimum=0)
    if successes > trials:
        raise ValueError(f"successes must be at most trials = {trials}, got {successes}")
    # a normal quantile: z = 40 leaves 1e-350 outside, below any float64 probability
    z = as_float(z, "z", minimum=0.0, maximum=40.0, open_minimum=True)
    p = successes / trials
    centre = p + z * z / (2 * trials)
    half = z * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    scale = 1 + z * z / trials
    return max(0.0, (centre - half) / scale), min(1.0, (centre + half) / scale)


def wilson_by_target(success, seeds_per_target: int, z: float = 1.96) -> tuple[float, float]:
    """An approximate 95 % interval for the success rate when the pairs share their targets.

    ``success`` holds one 0/1 outcome per (target, victim seed) pair, target-major, with
    ``seeds_per_target`` seeds per target. Pairs that share a target share its poisons, so their
    outcomes may be correlated; counting targets instead, the lower end is Wilson's lower end for
    the targets flipped by *every* seed and the upper end Wilson's upper end for the targets flipped
    by *any* seed (:func:`wilson_interval`, n = the number of targets). Both counts bound the
    per-target rate whatever the correlation within a target, so the pair of counts is conservative;
    the interval is not, since Wilson's ends are approximate: with n = 32 targets the one-sided miss
    rate of the lower end exceeds its nominal 2.5 % and reaches about 16 % for rates near 0.005.
    """
    per_target = _per_target(success, seeds_per_target)
    n_targets = per_target.shape[0]
    lo, _ = wilson_interval(int(per_target.all(1).sum()), n_targets, z)
    _, hi = wilson_interval(int(per_target.any(1).sum()), n_targets, z)
    return lo, hi


def _per_target(success, seeds_per_target, name: str = "success") -> np.ndarray:
    """0/1 outcomes per (target, seed) pair, target-major, as a (targets, seeds) bool array."""
    seeds_per_target = as_int(seeds_per_target, "seeds_per_target", minimum=1)
    if isinstance(success, torch.Tensor):
        success = success.detach().cpu().numpy()
    outcome = np.asarray(success) if isinstance(success, (list, tuple, np.ndarray)) else None
    if (
        outcome is None
        or outcome.ndim != 1
        or outcome.size == 0
        or outcome.dtype.kind not in "biuf"
        or not np.isin(outcome, (0, 1)).all()
    ):
        raise ValueError(
            f"{name} must be a non-empty 1-D array of 0/1 outcomes, got {describe(success)}"
        )
    if outcome.size % seeds_per_target:
        raise ValueError(
            f"{outcome.size} outcomes are not a whole number of targets of {seeds_per_target} seeds"
        )
    return outcome.reshape(-1, seeds_per_target).astype(bool)


def paired_sign_test(success, control, seeds_per_target: int) -> dict:
    """One-sided exact McNemar tests that an arm flips more targets than a control on the same
    (target, seed) pairs.

    ``success`` and ``control`` hold one 0/1 outcome per pair, target-major, in the same order. Over
    the units where exactly one of the two flips, with ``b`` units where only the arm flips and
    ``c`` where only the control does, the p-value is

        p = P(Bin(b + c, 1/2) ≥ b)  (p = 1 when b + c = 0),               (S.1)

    the chance of a split at least this uneven if the arm and the control were exchangeable on each
    unit. It is computed twice: over the pairs (``"pairs"``), which treats the seeds of a target as
    independent, and over the targets (``"targets"``), a target counting as flipped when any of its
    seeds flips it. Returns both p-values and their discordant counts ``(b, c)``.
    """
    arm = _per_target(success, seeds_per_target)
    ctl = _per_target(control, seeds_per_target, "control")
    if arm.shape != ctl.shape:
        raise ValueError(f"success and control must have the same length, got {arm.size} and "
                         f"{ctl.size}")

    def sign(a: np.ndarray, c: np.ndarray) -> tuple[float, tuple[int, int]]:
        b_only, c_only = int((a & ~c).sum()), int((c & ~a).sum())
        n = b_only + c_only
        if n == 0:
            return 1.0, (0, 0)
        # P(Bin(n, 1/2) >= b_only), summed exactly in integers
        tail = sum(math.comb(n, k) for k in range(b_only, n + 1))
        return float(tail / 2**n), (b_only, c_only)

    p_pairs, pairs = sign(arm.reshape(-1), ctl.reshape(-1))
    p_targets, targets = sign(arm.any(1), ctl.any(1))
    return {"pairs": p_pairs, "targets": p_targets, "discordant_pairs": pairs,
            "discordant_targets": targets}


def retrain(victim: Victim, x_train, y_train, poison_index, delta, seeds) -> Params:
    """Victims trained from scratch on the poisoned sets: for every attack a (rows of
    ``poison_index`` (A, P) and ``delta`` (A, P, L)) and every seed s of ``seeds`` (S of them), one
    run of ``victim`` trained on x_train with attack a's poisons appended (:func:`poisoned_sets`),
    initialized and shuffled with s. Returns A·S runs in the order (attack, seed)."""
    if victim is None:  # no default here: the trainer's settings are the experiment's choice
        raise ValueError("victim must be a Victim (e.g. s4d_victim(config, train)), got None")
    victim = _check_victim(victim)
    seeds = as_seeds(seeds)
    x, y = poisoned_sets(x_train, y_train, poison_index, delta)
    n_att, n_seeds = x.shape[0], len(seeds)
    xs = x.repeat_interleave(n_seeds, dim=0)
    ys = y.repeat_interleave(n_seeds, dim=0)
    trained = victim.train(xs, ys, seeds * n_att)
    if _check_runs(trained, f"the {victim.name} victim's trained parameters") != n_att * n_seeds:
        raise ValueError(
            f"the {victim.name} victim's train returned {runs_of(trained)} runs for "
            f"{n_att * n_seeds} (attack, seed) pairs"
        )
    return trained


def target_outcome(victim: Victim, params: Params, x_test, y_test, targets, adversarial) -> dict:
    """How R trained runs treat their targets: run r is asked about test image ``targets[r]`` and
    its adversarial class ``adversarial[r]`` (one each per run). Returns numpy arrays of length R:
    ``success`` (the target classified as the adversarial class), ``correct`` (as its true class)
    and ``p_adv`` (the softmax probability of the adversarial class)."""
    victim = _check_victim(victim)
    runs = _check_runs(params)
    x_test = _check_sequences(x_test, "x_test")
    y_test = _check_labels(x_test, y_test, "y_test")
    targets = [
        as_int(t, "target index", minimum=0, maximum=MAX_INDEX) for t in as_list(targets, "targets")
    ]
    adversarial = [
        as_int(c, "adversarial class", minimum=0, maximum=MAX_INDEX)
        for c in as_list(adversarial, "adversarial")
    ]
    if len(targets) != runs or len(adversarial) != runs:
        raise ValueError(
            f"targets and adversarial need one entry per run ({runs}), "
            f"got {len(targets)} and {len(adversarial)}"
        )
    for t in targets:
        if t >= len(x_test):
            raise ValueError(f"target index {t} is out of range for a test set of {len(x_test)}")
    t_idx, adv = torch.tensor(targets), torch.tensor(adversarial)
    with torch.no_grad():
        out = victim._checked_logits(params, x_test[t_idx].to(victim.dtype)[:, None, :])[:, 0]
    if not bool((adv < out.shape[-1]).all()):
        raise ValueError(f"adversarial classes must lie in 0..{out.shape[-1] - 1}")
    _check_classes({"y_test": y_test[t_idx]}, out.shape[-1])
    p_adv = torch.softmax(out.double(), -1)[torch.arange(runs), adv]
    pred = out.argmax(-1)
    return {
        "success": (pred == adv).numpy(),
        "correct": (pred == y_test[t_idx]).numpy(),
        "p_adv": p_adv.numpy(),
    }
