"""A transfer-learning victim: a frozen feature extractor and a linear head retrained from scratch.

The setting in which clean-label poisons are known to work best (Shafahi et al. 2018, "Poison
frogs!"; Geiping et al. 2021, their transfer experiments): a network trained on *other* data
(here: another part of the training set) is frozen, and only its last, linear layer is trained
from scratch on the victim's (poisoned) training set,

    f(x) = W φ(x) + b,   φ: ℝ^L → ℝ^F frozen,  W ∈ ℝ^{K×F}, b ∈ ℝ^K,                     (T.1)

W and b trained with AdamW on the mean cross-entropy. The attack sees the victim as it sees any
:class:`lib.poisoning.gradient_matching.Victim`: its parameters are the head's (W, b), so the
matched gradients are the head's gradients, and ℳ's gradient in the perturbation runs through φ.

φ is a callable x (N, L) → (N, F), differentiable in x (e.g. :func:`mlp_features`, the hidden layer
of a :mod:`lib.poisoning.mlp_victim` network, or :func:`s4d_features`, the pooled output of a
:mod:`lib.ssm.s4d` network before its decoder). As in the other victims, every head parameter has a
leading axis of length R that indexes R independent runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from lib.engine import validation
from lib.engine.losses import per_run_cross_entropy
from lib.engine.validation import (
    all_finite,
    as_callable,
    as_int,
    as_labels,
    as_positive_float,
    as_seeds,
    as_size,
    as_tensor,
    check_result,
    describe,
)
from lib.poisoning import mlp_victim
from lib.ssm import s4d

Params = dict[str, torch.Tensor]
FEATURE_CHUNK = 8192  # sequences per call of φ when training (memory, not results)


@dataclass(frozen=True)
class HeadTrainConfig(mlp_victim.TrainConfig):
    """AdamW on shuffled minibatches of the head (T.1), constant learning rate: the fields and
    checks of :class:`lib.poisoning.mlp_victim.TrainConfig`, 40 epochs by default."""

    epochs: int = 40


def _one_run(params, name: str) -> Params:
    if not isinstance(params, dict) or not params:
        raise ValueError(f"{name} must be a parameter dict, got {describe(params)}")
    for key, value in params.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{name}[{key!r}] must be a tensor, got {describe(value)}")
    runs = {int(v.shape[0]) for v in params.values() if isinstance(v, torch.Tensor) and v.ndim}
    if runs != {1}:
        raise ValueError(f"{name} must hold exactly one run (the frozen extractor), got {runs}")
    return {k: v.detach() for k, v in params.items()}


def mlp_features(params: Params) -> Callable[[torch.Tensor], torch.Tensor]:
    """φ(x) = relu(W₁ x + b₁), the hidden layer of a one-run :mod:`lib.poisoning.mlp_victim` network
    (float64)."""
    params = _one_run(params, "params")
    mlp_victim._check_params(params)
    w1, b1 = params["w1"][0], params["b1"][0]

    def phi(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w1.T + b1)

    return phi


def s4d_features(params: Params) -> Callable[[torch.Tensor], torch.Tensor]:
    """φ(x), the pooled last-layer output of a one-run :mod:`lib.ssm.s4d` network
    (:func:`lib.ssm.s4d. features`, its decoder's input), in the network's float32."""
    params = _one_run(params, "params")
    s4d.check_s4d_params(params)

    def phi(x: torch.Tensor) -> torch.Tensor:
        out = s4d.pooled_features(params, x.to(s4d.MODEL_DTYPE), "auto")[0].T.to(x.device)
        return check_result(out, "the S4D features")

    return phi


def _features(features, x: torch.Tensor, dtype: torch.dtype, feature_dim: int) -> torch.Tensor:
    """φ(x) for x (n, L), checked: a finite tensor of ``dtype`` and shape (n, feature_dim)."""
    out = features(x)
    if not (isinstance(out, torch.Tensor) and out.dtype == dtype and out.ndim == 2
            and len(out) == len(x)):
        raise ValueError(f"features(x) must return a {dtype} tensor of shape ({len(x)}, "
                         f"{feature_dim}), got {describe(out)}")
    if out.shape[-1] != feature_dim:
        raise ValueError(f"features must return {feature_dim} values, got {out.shape[-1]}")
    return check_result(out, "the features φ(x)")


def _phi(features, x: torch.Tensor, dtype: torch.dtype, feature_dim: int) -> torch.Tensor:
    """φ on a batch of any leading shape (..., L) → (..., F)."""
    flat = _features(features, x.reshape(-1, x.shape[-1]), dtype, feature_dim)
    return flat.reshape(*x.shape[:-1], flat.shape[-1])


def victim(
    features: Callable[[torch.Tensor], torch.Tensor],
    feature_dim: int,
    classes: int = 10,
    train_config: HeadTrainConfig = HeadTrainConfig(),
    *,
    name: str = "transfer",
    dtype: torch.dtype = torch.float64,
):
    """The victim (T.1) as a :class:`lib.poisoning.gradient_matching.Victim`: head parameters ``w``
    (R, K, F) and ``b`` (R, K), PyTorch's fan-in uniform initialization U[−1/√F, 1/√F] from each
    run's seed, trained from scratch with ``train_config``; ``features`` is φ (frozen), ``dtype``
    the precision φ computes in (float64 for :func:`mlp_features`, float32 for
    :func:`s4d_features`)."""
    from lib.poisoning.gradient_matching import Victim

    as_callable(features, "features", "(x) -> phi(x)")
    feature_dim = as_size(feature_dim, "feature_dim")
    classes = as_size(classes, "classes", minimum=2, per=feature_dim)
    if not isinstance(train_config, HeadTrainConfig):
        raise ValueError(
            f"train_config must be a HeadTrainConfig, got {type(train_config).__name__}"
        )

    def init(seeds) -> Params:
        return init_head(feature_dim, classes, seeds, dtype)

    def head(params: Params, phi: torch.Tensor) -> torch.Tensor:
        if phi.ndim == 2:
            phi = phi.expand(params["w"].shape[0], *phi.shape)
        return torch.baddbmm(params["b"][:, None, :], phi, params["w"].transpose(1, 2))

    def logits(params: Params, x: torch.Tensor) -> torch.Tensor:
        return head(params, _phi(features, x.to(dtype), dtype, feature_dim))

    def train(x, labels, seeds) -> Params:
        seeds = as_seeds(seeds)
        x = as_tensor(x, "x", ndim=3, nonempty=True)
        r, n = len(seeds), x.shape[1]
        if x.shape[0] != r:
            raise ValueError(f"x holds {x.shape[0]} data sets but seeds has {r} entries")
        labels = as_labels(labels, "labels", (r, n), classes)
        with torch.no_grad():
            # the runs' training sets share most sequences (the clean set): φ once per distinct one
            flat, inverse = torch.unique(x.reshape(-1, x.shape[-1]), dim=0, return_inverse=True)
            flat = flat.to(dtype)
            phi = torch.cat(
                [_features(features, flat[i : i + FEATURE_CHUNK], dtype, feature_dim)
                 for i in range(0, len(flat), FEATURE_CHUNK)]
            )[inverse].reshape(r, n, -1)
        phi = check_result(phi, "the frozen features")
        params = {k: v.requires_grad_() for k, v in init(seeds).items()}
        opt = torch.optim.AdamW(
            list(params.values()), lr=train_config.lr, weight_decay=train_config.weight_decay
        )
        gens = [np.random.default_rng(s) for s in seeds]
        rows = torch.arange(r)[:, None]
        for _ in range(train_config.epochs):
            perm = torch.from_numpy(np.stack([g.permutation(n) for g in gens]))
            for j in range(0, n, train_config.batch):
                idx = perm[:, j : j + train_config.batch]
                loss = per_run_cross_entropy(head(params, phi[rows, idx]), labels[rows, idx])
                opt.zero_grad(set_to_none=True)
                loss.sum().backward()
                opt.step()
        return {k: check_result(v.detach(), f"the trained head's {k}") for k, v in params.items()}

    return Victim(name=name, init=init, logits=logits, train=train, dtype=dtype)


def accuracy(victim_, params: Params, x, labels) -> torch.Tensor:
    """Fraction of correct predictions of each run of a victim, shape (R,), float64; ``x`` (n, L)
    shared by all runs or (R, n, L)."""
    x = as_tensor(x, "x")
    if x.ndim not in (2, 3):
        raise ValueError(f"x must have shape (n, L) or (R, n, L), got {tuple(x.shape)}")
    runs = int(next(iter(params.values())).shape[0])
    if x.ndim == 2:
        x = x.expand(runs, *x.shape)
    elif x.shape[0] != runs:
        raise ValueError(f"x holds {x.shape[0]} data sets for {runs} runs")
    with torch.no_grad():
        pred = victim_._checked_logits(params, x.to(victim_.dtype)).argmax(-1)
    if isinstance(labels, torch.Tensor) and labels.ndim == 1:
        labels = labels.expand(runs, -1)
    labels = as_labels(labels, "labels", tuple(x.shape[:2]), None)
    return (pred == labels).double().mean(-1)


def unrolled_head(phi_clean: torch.Tensor, y_clean: torch.Tensor, phi_poison: torch.Tensor,
                  y_poison: torch.Tensor, seed: int, classes: int,
                  train_config: HeadTrainConfig = HeadTrainConfig()) -> Params:
    """The head (T.1) that :func:`victim`'s ``train`` returns for ``seed`` on the clean set with
    the poisons appended, computed differentiably in the poisons' features.

    ``phi_clean`` (n, F) and ``y_clean`` (n,): the clean set's features and labels; ``phi_poison``
    (A, P, F) and ``y_poison`` (A, P): A poison sets, one run each. The same initialization, the
    same shuffled minibatches and AdamW written out (Loshchilov & Hutter 2019, Alg. 2):

        θ ← θ (1 − η λ),  m ← β₁ m + (1 − β₁) g,  v ← β₂ v + (1 − β₂) g²,
        θ ← θ − η m̂ / (√v̂ + 10⁻⁸),   m̂ = m / (1 − β₁ᵗ), v̂ = v / (1 − β₂ᵗ),          (T.2)

    with g the mean cross-entropy's gradient in (W, b), (softmax(Wφ + b) − e_y) φᵀ and
    softmax(Wφ + b) − e_y averaged over the minibatch, β = (0.9, 0.999), η, λ of
    ``train_config``. Returns {"w": (A, K, F), "b": (A, K)}, which autograd differentiates through
    every step (memory grows with the steps × A × batch × F)."""
    if not isinstance(train_config, HeadTrainConfig):
        raise ValueError(
            f"train_config must be a HeadTrainConfig, got {type(train_config).__name__}"
        )
    phi_clean = as_tensor(phi_clean, "phi_clean", ndim=2, nonempty=True)
    if not isinstance(phi_poison, torch.Tensor) or phi_poison.ndim != 3 or (
        phi_poison.shape[-1] != phi_clean.shape[-1] or 0 in phi_poison.shape
        or phi_poison.dtype not in (torch.float32, torch.float64)
    ):
        raise ValueError(f"phi_poison must be a float tensor of shape (A, P, "
                         f"{phi_clean.shape[-1]}), got {describe(phi_poison)}")
    if not all_finite(phi_poison):
        raise ValueError("phi_poison must be finite, got nan or inf")
    runs, n_poison, width = phi_poison.shape
    y_clean = as_labels(y_clean, "y_clean", (len(phi_clean),), classes)
    y_poison = as_labels(y_poison, "y_poison", (runs, n_poison), classes)
    dtype = phi_poison.dtype
    params = init_head(width, classes, [as_seeds([seed])[0]], dtype)
    w = params["w"].expand(runs, -1, -1)
    b = params["b"].expand(runs, -1)
    phi = torch.cat([phi_clean.to(dtype).expand(runs, -1, -1), phi_poison], 1)
    onehot = torch.nn.functional.one_hot(torch.cat([y_clean.expand(runs, -1), y_poison], 1),
                                         classes).to(dtype)
    n = phi.shape[1]
    beta1, beta2, lr, decay = 0.9, 0.999, train_config.lr, train_config.weight_decay
    moments = [torch.zeros_like(w), torch.zeros_like(w), torch.zeros_like(b), torch.zeros_like(b)]
    gen, step = np.random.default_rng(seed), 0
    for _ in range(train_config.epochs):
        perm = torch.from_numpy(gen.permutation(n))
        for j in range(0, n, train_config.batch):
            idx = perm[j : j + train_config.batch]
            batch, target = phi[:, idx], onehot[:, idx]
            out = torch.baddbmm(b[:, None, :], batch, w.transpose(1, 2))
            residual = (torch.softmax(out, -1) - target) / len(idx)
            grads = (residual.transpose(1, 2) @ batch, residual.sum(1))
            step += 1
            new = []
            for k, (p, g) in enumerate(zip((w, b), grads, strict=True)):
                m = beta1 * moments[2 * k] + (1 - beta1) * g
                v = beta2 * moments[2 * k + 1] + (1 - beta2) * g * g
                moments[2 * k], moments[2 * k + 1] = m, v
                v_hat = v / (1 - beta2**step)
                # the 1e-300 keeps the square root's derivative finite where v = 0 (the value is
                # unchanged: sqrt(v + 1e-300) = sqrt(v) to float64 resolution for v > 1e-284)
                p = p * (1 - lr * decay) - lr * (m / (1 - beta1**step)) / (
                    torch.sqrt(v_hat + 1e-300) + 1e-8)
                new.append(p)
            w, b = new
    return {"w": w, "b": b}


def init_head(feature_dim: int, classes: int, seeds, dtype: torch.dtype = torch.float64) -> Params:
    """The head's initialization of :func:`victim`: W, b ~ U[−1/√F, 1/√F] (PyTorch's fan-in
    rule), drawn in float64 from each run's seed, then cast to ``dtype``."""
    feature_dim = as_size(feature_dim, "feature_dim")
    classes = as_size(classes, "classes", minimum=2, per=feature_dim)
    seeds = as_seeds(seeds)
    bound = 1 / math.sqrt(feature_dim)
    runs = []
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        w = (torch.rand(classes, feature_dim, generator=g, dtype=torch.float64) * 2 - 1) * bound
        b = (torch.rand(classes, generator=g, dtype=torch.float64) * 2 - 1) * bound
        runs.append((w, b))
    return {
        "w": torch.stack([w for w, _ in runs]).to(dtype),
        "b": torch.stack([b for _, b in runs]).to(dtype),
    }


def unrolled_attack(features: Callable[[torch.Tensor], torch.Tensor], feature_dim: int, x_train,
                    y_train, x_test, targets, adversarial, poison_index, eps: float, data_range,
                    *, classes: int = 10, train_config: HeadTrainConfig = HeadTrainConfig(),
                    seed: int = 0, steps: int = 60, lr: float = 0.1, chunk: int = 8) -> dict:
    """The white-box attack on the transfer victim: poisons that minimize the target's loss under
    the head retrained on them, differentiated through the whole retraining.

    For attack a (target x_{t_a}, adversarial class c_a, poisons ``poison_index[a]`` (P,)):

        min_δ  ℓ(W_T(δ) φ(x_{t_a}) + b_T(δ), c_a)   s.t. ‖δ‖_∞ ≤ ε, lo ≤ x + δ ≤ hi,      (T.3)

    (W_T, b_T)(δ) the head after the T steps (T.2) of :func:`unrolled_head` from the
    initialization and minibatches of ``seed`` (the victim's own training, bit for bit in
    float64), ℓ the cross-entropy. Where gradient matching aligns the poisons' gradient with the
    target's on one fixed surrogate, (T.3) follows the whole retraining: it is the attack against
    which the victim of that seed has no room left, an upper bound for a bounded attacker who
    knows it (a bilevel attack, as in MetaPoison, Huang et al. 2020, unrolled to the end here).
    Signed Adam with steps ``lr`` · ε, constant, from δ = 0, ``steps`` ≥ 0 steps, each projected
    onto the box; attacks in chunks of ``chunk`` (memory). Returns ``{"delta" (A, P, L) float64,
    "loss" (A,) the target's loss (T.3) at the end}``."""
    as_callable(features, "features", "(x) -> phi(x)")
    feature_dim = as_size(feature_dim, "feature_dim")
    if not isinstance(train_config, HeadTrainConfig):
        raise ValueError(
            f"train_config must be a HeadTrainConfig, got {type(train_config).__name__}"
        )
    from lib.poisoning import gradient_matching as gm

    x_train = gm._check_sequences(x_train, "x_train")
    x_test = gm._check_sequences(x_test, "x_test", x_train.shape[1])
    y_train = as_labels(y_train, "y_train", (len(x_train),), classes)
    eps, lo, hi = gm._check_box(eps, data_range, x_train, "x_train")
    targets = [as_int(t, "target index", minimum=0, maximum=len(x_test) - 1)
               for t in gm.as_list(targets, "targets")]
    adversarial = as_labels(adversarial, "adversarial", (len(targets),), classes)
    index = validation.as_indices(poison_index, "poison_index", (len(targets), None), len(x_train),
                           "training indices")
    steps = as_int(steps, "steps", minimum=0)
    lr = as_positive_float(lr, "lr")
    chunk = as_int(chunk, "chunk", minimum=1)
    seed = gm.as_seed(seed)
    with torch.no_grad():
        phi_clean = _features(features, x_train.to(torch.float64), torch.float64, feature_dim)
    deltas, losses = [], []
    for first in range(0, len(targets), chunk):
        rows = slice(first, first + chunk)
        base, adv = x_train[index[rows]], adversarial[rows]
        x_t = x_test[targets[rows]]
        delta = torch.zeros_like(base, requires_grad=True)
        opt = torch.optim.Adam([delta], lr=lr * eps)
        for _ in range(steps + 1):
            phi_p = _phi(features, base + delta, torch.float64, feature_dim)
            head = unrolled_head(phi_clean, y_train, phi_p, y_train[index[rows]], seed, classes,
                                 train_config)
            phi_t = _phi(features, x_t, torch.float64, feature_dim)
            out = torch.einsum("akf,af->ak", head["w"], phi_t) + head["b"]
            loss = torch.nn.functional.cross_entropy(out, adv, reduction="none")
            if _ == steps:
                break
            if not loss.requires_grad:
                raise ValueError("features must be differentiable in x (the attack follows "
                                 "their gradient), got a result without a gradient")
            (grad,) = torch.autograd.grad(loss.sum(), [delta])
            delta.grad = grad.sign()
            opt.step()
            with torch.no_grad():
                delta.copy_(gm._project(delta, base, eps, lo, hi))
        deltas.append(delta.detach())
        losses.append(check_result(loss.detach(), "the target's loss"))
    return {"delta": torch.cat(deltas), "loss": torch.cat(losses)}
