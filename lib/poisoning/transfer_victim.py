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


# ------------------------------------------------------------------------------------------
# The head's regularized optimum and the attack through it (implicit differentiation)
# ------------------------------------------------------------------------------------------
#
# With weight decay 0 and linearly separable features, (T.1)'s cross-entropy has no minimizer
# (the head's norm grows without bound along training); an explicit ridge term λ > 0 makes the
# optimum unique, and with it the head no longer depends on a seed.


def _with_bias(phi: torch.Tensor) -> torch.Tensor:
    """φ̃ = (φ, 1): the features with a constant 1 appended, so that θ = [W | b] acts as θ φ̃."""
    return torch.cat([phi, phi.new_ones(*phi.shape[:-1], 1)], -1)


class _HeadLoss:
    """L_r(θ_r) of (T.4) for R problems at once: rows ``shared`` (n₀, F+1) with labels ``y_shared``
    (n₀,) common to all, plus each problem's own rows ``own`` (R, p, F+1) with labels ``y_own``
    (R, p), p ≥ 0 (the poisons, appended); θ (R, K, F+1). ``grad`` caches the softmax at its θ,
    at which ``hvp`` and ``hessian`` then evaluate (T.5)'s H."""

    def __init__(self, shared, y_shared, own, y_own, classes: int, lam: float):
        self.shared, self.own, self.lam = shared, own, lam
        self.e_shared = torch.nn.functional.one_hot(y_shared, classes).to(shared.dtype)
        self.e_own = torch.nn.functional.one_hot(y_own, classes).to(shared.dtype)
        self.n = shared.shape[0] + own.shape[1]

    def _logits(self, th):
        return (torch.einsum("nf,rkf->rnk", self.shared, th),
                torch.einsum("rpf,rkf->rpk", self.own, th))

    def loss(self, th):
        zs, zo = self._logits(th)
        ce = (-(self.e_shared * torch.log_softmax(zs, -1)).sum((1, 2))
              - (self.e_own * torch.log_softmax(zo, -1)).sum((1, 2)))
        return ce / self.n + 0.5 * self.lam * (th * th).sum((1, 2))

    def grad(self, th):
        zs, zo = self._logits(th)
        self._ps, self._po = torch.softmax(zs, -1), torch.softmax(zo, -1)
        g = (torch.einsum("rnk,nf->rkf", self._ps - self.e_shared, self.shared)
             + torch.einsum("rpk,rpf->rkf", self._po - self.e_own, self.own))
        return g / self.n + self.lam * th

    def hvp(self, v):
        """H v at the θ of the last ``grad``: (1/N) Σ_n [(diag p − p pᵀ)(v φ̃_n)] φ̃_nᵀ + λ v."""
        zs = torch.einsum("nf,rkf->rnk", self.shared, v)
        zo = torch.einsum("rpf,rkf->rpk", self.own, v)
        ts = self._ps * (zs - (self._ps * zs).sum(-1, keepdim=True))
        to = self._po * (zo - (self._po * zo).sum(-1, keepdim=True))
        return ((torch.einsum("rnk,nf->rkf", ts, self.shared)
                 + torch.einsum("rpk,rpf->rkf", to, self.own)) / self.n + self.lam * v)

    def hessian(self):
        """The dense H (R, K(F+1), K(F+1)) at the θ of the last ``grad`` (one problem at a time)."""
        classes, width = self.e_shared.shape[1], self.shared.shape[1]
        out = []
        for r in range(self.own.shape[0]):
            x = torch.cat([self.shared, self.own[r]])
            p = torch.cat([self._ps[r], self._po[r]])
            u = (p[:, :, None] * x[:, None, :]).reshape(len(x), -1)
            h = -u.T @ u
            for k in range(classes):
                block = slice(k * width, (k + 1) * width)
                h[block, block] += (x * p[:, k : k + 1]).T @ x
            out.append(h / self.n + self.lam * torch.eye(len(h), dtype=x.dtype))
        return torch.stack(out)


def _cholesky(h: torch.Tensor) -> torch.Tensor:
    factor, info = torch.linalg.cholesky_ex(h)
    if not all_finite(h) or bool((info != 0).any()):
        raise ValueError("the head's Hessian is not finite or not positive definite in float64: "
                         "the features are too large (or lam too small) for this data")
    return factor


def _dense_solve(problem: _HeadLoss):
    def solve(g):
        factor = _cholesky(problem.hessian())
        return torch.cholesky_solve(g.flatten(1)[:, :, None], factor)[:, :, 0].reshape(g.shape)

    return solve


def _pcg(apply, b, precondition, rtol: float, max_iter: int = 500):
    """Batched preconditioned conjugate gradients for H x = b, each problem to ‖r‖ ≤ rtol ‖b‖."""
    x = torch.zeros_like(b)
    r = b.clone()
    z = precondition(r)
    p = z.clone()
    rz = (r * z).sum((1, 2))
    scale = b.flatten(1).norm(dim=1)
    tiny = torch.finfo(b.dtype).tiny
    for _ in range(max_iter):
        if bool((r.flatten(1).norm(dim=1) <= rtol * scale).all()):
            break
        hp = apply(p)
        alpha = rz / (p * hp).sum((1, 2)).clamp(min=tiny)
        x = x + alpha[:, None, None] * p
        r = r - alpha[:, None, None] * hp
        z = precondition(r)
        rz_new = (r * z).sum((1, 2))
        p = z + (rz_new / rz.clamp(min=tiny))[:, None, None] * p
        rz = rz_new
    return x


def _newton(problem: _HeadLoss, th: torch.Tensor, tol: float, max_iter: int, solve=None):
    """Damped Newton on (T.4) for all R problems: the step H⁻¹ ∇L (``solve``; dense Cholesky by
    default), halved per problem until Armijo's condition L(θ − t s) ≤ L(θ) − 10⁻⁴ t ⟨∇L, s⟩
    holds (up to the loss's rounding, 16 ulp), until every ‖∇L‖ < ``tol``. Returns θ, or
    raises ValueError after ``max_iter``."""
    solve = solve or _dense_solve(problem)
    for _ in range(max_iter + 1):
        g = problem.grad(th)
        norm = g.flatten(1).norm(dim=1)
        if not all_finite(norm):
            raise ValueError("the head's loss gradient is not finite in float64: the features "
                             "are too large for this data")
        if bool((norm < tol).all()):
            return th
        if _ == max_iter:
            break
        step = solve(g)
        f0, slope = problem.loss(th), (g * step).sum((1, 2))
        # near the optimum the decrease falls below the loss's rounding: allow that much
        rounding = 16 * torch.finfo(th.dtype).eps * f0.abs()
        t = torch.ones(len(th), dtype=th.dtype)
        for _halving in range(60):
            ok = problem.loss(th - t[:, None, None] * step) <= f0 - 1e-4 * t * slope + rounding
            if bool(ok.all()):
                break
            t = torch.where(ok, t, t / 2)
        th = th - t[:, None, None] * step
    raise ValueError(
        f"Newton's method did not reach a gradient norm below tol = {tol:g} in {max_iter} "
        f"iterations (largest norm {float(norm.max()):.3g}): tol is below what float64 resolves "
        "here, or lam is too small for these features; raise tol, lam or max_iter")


def _check_head(head, name: str, runs: int | None, classes: int, feature_dim: int) -> torch.Tensor:
    """θ = [W | b] (R, K, F+1) from a head {"w": (R, K, F), "b": (R, K)} (float64, finite)."""
    if not isinstance(head, dict) or set(head) != {"w", "b"}:
        raise ValueError(f"{name} must be a head {{'w': (R, K, F), 'b': (R, K)}}, got "
                         f"{describe(head)}")
    w = as_tensor(head["w"], f"{name}['w']", ndim=3, nonempty=True, detach=True)
    b = as_tensor(head["b"], f"{name}['b']", ndim=2, nonempty=True, detach=True)
    r = len(w) if runs is None else runs
    if tuple(w.shape) != (r, classes, feature_dim) or tuple(b.shape) != (r, classes):
        raise ValueError(f"{name} must have w of shape {(r, classes, feature_dim)} and b of "
                         f"shape {(r, classes)}, got {tuple(w.shape)} and {tuple(b.shape)}")
    return torch.cat([w, b[:, :, None]], -1)


def optimal_head(phi_train, y_train, classes: int, lam: float, *, init: Params | None = None,
                 tol: float = 1e-10, max_iter: int = 100) -> Params:
    """The unique minimizer of the head's λ-regularized loss on fixed features:

        θ*_λ = argmin_θ L(θ),   L(θ) = (1/N) Σ_n ℓ(θ φ̃_n, y_n) + (λ/2) ‖θ‖²,                 (T.4)

    θ = [W | b] (K, F+1), φ̃_n = (φ(x_n), 1), ℓ the cross-entropy, ‖·‖ the Frobenius norm (the
    bias is penalized too). L is λ-strongly convex, so θ*_λ exists and is unique for every λ > 0,
    whatever the data (with λ = 0 and separable features it does not exist). Its Hessian is

        H = (1/N) Σ_n (diag p_n − p_n p_nᵀ) ⊗ φ̃_n φ̃_nᵀ + λ I,   p_n = softmax(θ φ̃_n).          (T.5)

    Solved by Newton's method, damped by Armijo backtracking (dense Cholesky of H, memory
    R · (K(F+1))² floats), from ``init`` (default θ = 0), until ‖∇L(θ)‖ < ``tol`` for every
    problem; after ``max_iter`` iterations without it, a ValueError.

    ``phi_train`` (n, F) or (R, n, F): the training set's features (float64), R independent
    problems; ``y_train`` (n,) or (R, n): their labels in 0..``classes``−1; ``lam`` > 0. Returns
    the head as the victim's parameters, ``{"w": (R, K, F), "b": (R, K)}`` float64 (R = 1 for a
    2-D ``phi_train``)."""
    phi = as_tensor(phi_train, "phi_train", nonempty=True, detach=True)
    if phi.ndim not in (2, 3):
        raise ValueError(f"phi_train must have shape (n, F) or (R, n, F), got {tuple(phi.shape)}")
    label_shape = tuple(phi.shape[:-1])
    if phi.ndim == 2:
        phi = phi[None]
    runs, n, width = phi.shape
    classes = as_size(classes, "classes", minimum=2, per=width + 1)
    labels = as_labels(y_train, "y_train", label_shape, classes).reshape(runs, n)
    lam = as_positive_float(lam, "lam")
    tol = as_positive_float(tol, "tol")
    max_iter = as_int(max_iter, "max_iter", minimum=1)
    if init is None:
        th = phi.new_zeros(runs, classes, width + 1)
    else:
        th = _check_head(init, "init", runs, classes, width).clone()
    problem = _HeadLoss(phi.new_zeros(0, width + 1), labels.new_zeros(0), _with_bias(phi),
                        labels, classes, lam)
    th = _newton(problem, th, tol, max_iter)
    return {"w": th[:, :, :-1].contiguous(), "b": th[:, :, -1].contiguous()}


def norm_matched_lambda(phi_train, y_train, classes: int, head: Params, *,
                        bracket: tuple[float, float] = (1e-8, 1e2), rtol: float = 1e-6,
                        tol: float = 1e-10) -> float:
    """The λ whose optimum (T.4) on (``phi_train``, ``y_train``) has the norm of a given head:

        λ such that ‖θ*_λ‖ = ‖[W | b]‖,   W, b = ``head`` (one run),

    a rule for an attacker who must name a λ and has only a head of its own (e.g. one trained by
    :func:`victim` without weight decay): the optimum at this λ is the regularized head of the same
    size. ‖θ*_λ‖ decreases as λ grows (differentiate (T.4)'s stationarity condition:
    d‖θ*‖²/dλ = −2 θ*ᵀ H⁻¹ θ* < 0), so the λ is unique; it is found by bisection on log λ
    inside ``bracket`` = (λ_lo, λ_hi) until λ_hi/λ_lo < 1 + ``rtol``, each optimum by
    :func:`optimal_head` to gradient norm ``tol``, warm-started from the last. Returns the
    geometric midpoint of the final bracket; a ValueError if the head's norm is not reached
    inside ``bracket`` (e.g. non-separable features bound ‖θ*_λ‖ as λ → 0)."""
    phi = as_tensor(phi_train, "phi_train", ndim=2, nonempty=True, detach=True)
    classes = as_size(classes, "classes", minimum=2, per=phi.shape[1] + 1)
    labels = as_labels(y_train, "y_train", (len(phi),), classes)
    target = float(_check_head(head, "head", 1, classes, phi.shape[1]).norm())
    if not isinstance(bracket, (tuple, list)) or len(bracket) != 2:
        raise ValueError(f"bracket must be a pair (lam_lo, lam_hi), got {describe(bracket)}")
    lo, hi = (as_positive_float(v, f"bracket[{i}]") for i, v in enumerate(bracket))
    if not lo < hi:
        raise ValueError(f"bracket must have lam_lo < lam_hi, got ({lo}, {hi})")
    rtol = as_positive_float(rtol, "rtol")
    tol = as_positive_float(tol, "tol")

    def norm(lam, init=None):
        opt = optimal_head(phi, labels, classes, lam, init=init, tol=tol)
        return float(torch.cat([opt["w"], opt["b"][:, :, None]], -1).norm()), opt

    low_norm, start = norm(hi)
    high_norm, _ = norm(lo)
    if not low_norm <= target <= high_norm:
        raise ValueError(f"the head's norm {target:.6g} is outside the optimum's norms "
                         f"[{low_norm:.6g}, {high_norm:.6g}] over bracket [{lo:g}, {hi:g}]")
    log_lo, log_hi = math.log(lo), math.log(hi)
    while log_hi - log_lo > math.log1p(rtol):
        mid = (log_lo + log_hi) / 2
        value, opt = norm(math.exp(mid), start)
        if value > target:
            log_lo = mid
        else:
            log_hi, start = mid, opt
    return math.exp((log_lo + log_hi) / 2)


class _Implicit:
    """The implicit attack's pieces for A attacks: the clean rows φ̃(x_train), the targets'
    φ̃(x_t) (A, F+1) with classes ``adversarial``, the poisons' clean images ``base`` (A, P, L)
    labelled ``y_poison`` (A, P), the clean optimum θ₀ and, as the preconditioner of the conjugate
    gradients, the Cholesky factor of (n₀/N) H_ce(θ₀) + λ I (the poisoned problems' H at δ = 0
    but for the P poisons' own curvature)."""

    def __init__(self, features, feature_dim, x_train, y_train, base, y_poison, x_target,
                 adversarial, classes, lam, tol, max_iter):
        self.features, self.feature_dim, self.base, self.y_poison = features, feature_dim, base, \
            y_poison
        self.classes, self.lam, self.tol, self.max_iter = classes, lam, tol, max_iter
        self.adversarial = adversarial
        with torch.no_grad():
            self.shared = _with_bias(_phi(features, x_train, torch.float64, feature_dim))
            self.target = _with_bias(_phi(features, x_target, torch.float64, feature_dim))
        self.y_train = y_train
        clean = _HeadLoss(self.shared, y_train, self.shared.new_zeros(1, 0, feature_dim + 1),
                          y_train.new_zeros(1, 0), classes, lam)
        self.th0 = _newton(clean, self.shared.new_zeros(1, classes, feature_dim + 1), tol,
                           max_iter)
        clean.grad(self.th0)
        n0, n = len(x_train), len(x_train) + base.shape[1]
        h0 = (clean.hessian()[0] - lam * torch.eye(classes * (feature_dim + 1),
                                                   dtype=torch.float64)) * (n0 / n)
        self._factor = _cholesky(h0 + lam * torch.eye(len(h0), dtype=torch.float64))

    def _precondition(self, r):
        flat = torch.cholesky_solve(r.flatten(1).T, self._factor).T
        return flat.reshape(r.shape)

    def _poisons(self, delta):
        return _with_bias(_phi(self.features, self.base + delta, torch.float64, self.feature_dim))

    def optimum(self, delta, th, rtol: float = 1e-8):
        """θ*(δ) of (T.4) on the clean set with the poisons x + δ appended, by damped Newton
        with conjugate-gradient steps (relative residual ``rtol``), warm-started at ``th``."""
        with torch.no_grad():
            problem = _HeadLoss(self.shared, self.y_train, self._poisons(delta), self.y_poison,
                                self.classes, self.lam)

            def solve(g):
                return _pcg(problem.hvp, g, self._precondition, rtol)

            th = _newton(problem, th, self.tol, self.max_iter, solve)
            problem.grad(th)  # H at θ* for the caller's hvp
        return th, problem

    def gradient(self, delta, th, rtol: float = 1e-8):
        """The target losses 𝒜(δ) (A,) of (T.6), their gradient (T.7) in δ (A, P, L) and θ*(δ)."""
        th, problem = self.optimum(delta, th, rtol)
        rows = torch.arange(len(th))
        with torch.no_grad():
            p = torch.softmax(torch.einsum("akf,af->ak", th, self.target), -1)
            loss = -torch.log(p[rows, self.adversarial])
            residual = p - torch.nn.functional.one_hot(self.adversarial, self.classes).double()
            v = _pcg(problem.hvp, torch.einsum("ak,af->akf", residual, self.target),
                     self._precondition, rtol)
        delta = delta.detach().requires_grad_()
        poisons = self._poisons(delta)
        if not poisons.requires_grad:
            raise ValueError("features must be differentiable in x (the attack follows their "
                             "gradient), got a result without a gradient")
        p_own = torch.softmax(torch.einsum("apf,akf->apk", poisons, th), -1)
        e_own = torch.nn.functional.one_hot(self.y_poison, self.classes).double()
        grad_poisons = torch.einsum("apk,apf->akf", p_own - e_own, poisons) / problem.n
        (grad,) = torch.autograd.grad(-(grad_poisons * v).sum(), [delta])
        return loss, check_result(grad, "the implicit gradient"), th


def implicit_attack(features: Callable[[torch.Tensor], torch.Tensor], x_train, y_train,
                    poison_index, x_target, adversarial, eps: float, lam: float,
                    steps: int = 100, *, data_range, classes: int = 10, lr: float = 0.1,
                    tol: float = 1e-9, max_iter: int = 50) -> torch.Tensor:
    """Poisons against the head's regularized optimum (T.4), differentiated implicitly: no seed,
    no unrolled training.

    For attack a (target x_t = ``x_target[a]``, adversarial class c = ``adversarial[a]``, poisons
    the training images ``poison_index[a]`` (P,), perturbed by δ and appended to the clean set
    with their own labels, as :func:`lib.poisoning.gradient_matching.poisoned_sets` does):

        min_δ 𝒜(δ) = ℓ(θ*(δ) φ̃(x_t), c)   s.t. ‖δ‖_∞ ≤ ε, lo ≤ x + δ ≤ hi,                  (T.6)

    θ*(δ) the optimum (T.4) of the head on the clean + poisoned set at ``lam``. At the optimum
    ∇_θ L(θ*(δ), δ) = 0, so dθ*/dδ = −H⁻¹ ∂²L/∂θ∂δ with H of (T.5), and

        ∇_δ 𝒜 = −∂/∂δ ⟨∇_θ L(θ, δ), v⟩ |_{θ = θ*(δ)},   v = H⁻¹ ∇_θ ℓ(θ* φ̃(x_t), c),           (T.7)

    where only the poisons' rows of ∇_θ L depend on δ (autograd through φ). θ*(δ) is solved
    each step by damped Newton to ‖∇_θ L‖ < ``tol`` (at most ``max_iter`` iterations),
    warm-started from the last step's, and v and the Newton steps by conjugate gradients
    preconditioned with the clean Hessian. Signed Adam with steps ``lr`` · ε from δ = 0,
    ``steps`` ≥ 0 steps, each projected onto the box, as :func:`unrolled_attack`; all A attacks
    at once. ``features`` is φ (float64, differentiable), ``x_train`` (n, L), ``y_train`` (n,),
    ``poison_index`` (A, P), ``x_target`` (A, L), ``adversarial`` (A,), ``data_range`` (lo, hi).
    Returns δ (A, P, L) float64."""
    from lib.poisoning import gradient_matching as gm

    as_callable(features, "features", "(x) -> phi(x)")
    x_train = gm._check_sequences(x_train, "x_train")
    x_target = gm._check_sequences(x_target, "x_target", x_train.shape[1])
    classes = as_size(classes, "classes", minimum=2)
    y_train = as_labels(y_train, "y_train", (len(x_train),), classes)
    adversarial = as_labels(adversarial, "adversarial", (len(x_target),), classes)
    index = validation.as_indices(poison_index, "poison_index", (len(x_target), None),
                                  len(x_train), "training indices")
    if index.shape[1] == 0:
        raise ValueError("poison_index must name at least one poison per attack, got none")
    eps, lo, hi = gm._check_box(eps, data_range, x_train, "x_train")
    lam = as_positive_float(lam, "lam")
    steps = as_int(steps, "steps", minimum=0)
    lr = as_positive_float(lr, "lr")
    tol = as_positive_float(tol, "tol")
    max_iter = as_int(max_iter, "max_iter", minimum=1)
    with torch.no_grad():
        probe = features(x_train[:1])
    if not (isinstance(probe, torch.Tensor) and probe.ndim == 2 and len(probe) == 1
            and probe.shape[1] >= 1):
        raise ValueError(f"features(x) must return a tensor of shape (n, F), got "
                         f"{describe(probe)}")
    feature_dim = as_size(int(probe.shape[1]), "the feature dimension", per=classes)
    base = x_train[index]
    attack = _Implicit(features, feature_dim, x_train, y_train, base, y_train[index], x_target,
                       adversarial, classes, lam, tol, max_iter)
    delta = torch.zeros_like(base, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=lr * eps)
    th = attack.th0.expand(len(base), -1, -1).clone()
    for _ in range(steps):
        _loss, grad, th = attack.gradient(delta, th)
        delta.grad = grad.sign()
        opt.step()
        with torch.no_grad():
            delta.copy_(gm._project(delta, base, eps, lo, hi))
    return delta.detach()
