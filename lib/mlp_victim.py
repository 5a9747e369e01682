"""A small multilayer perceptron, trained in many independent runs at once: the positive control
of the real-data poisoning experiment.

Gradient matching ("Witches' Brew", Geiping et al. 2021) is known to poison networks that fit their
training set and are retrained from scratch. To tell a weak attack from a resistant victim, the
chapter runs the same attack against a victim of that kind on the same 8×8 digits: a one-hidden-
layer ReLU network

    f(x) = W₂ relu(W₁ x + b₁) + b₂,   x ∈ ℝ⁶⁴, W₁ ∈ ℝ^{H×64}, W₂ ∈ ℝ^{K×H},

trained with AdamW on the mean cross-entropy until it fits its training set (100 % training
accuracy on the digits, which are linearly separable; checked by the chapter).

**Independent runs.** As in :mod:`lib.s4d`, every parameter has a leading axis of length R that
indexes R independent networks; their losses are summed, so each run gets its own gradient, and
AdamW is elementwise, so the R runs train as if each ran alone. The network computes in float64
(it is cheap enough).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from lib._checks import DTYPE, as_int, as_positive_float, as_seeds, as_tensor, check_finite_result

MODEL_DTYPE = DTYPE

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class MLPConfig:
    """Sizes: ``inputs`` (the sequence length L), ``hidden`` units H, ``classes`` K."""

    inputs: int = 64
    hidden: int = 32
    classes: int = 10

    def __post_init__(self):
        as_int(self.inputs, "inputs", minimum=1)
        as_int(self.hidden, "hidden", minimum=1)
        as_int(self.classes, "classes", minimum=2)


@dataclass(frozen=True)
class TrainConfig:
    """AdamW (Loshchilov & Hutter) on shuffled minibatches, constant learning rate."""

    epochs: int = 30
    batch: int = 32
    lr: float = 1e-2
    weight_decay: float = 0.0

    def __post_init__(self):
        as_int(self.epochs, "epochs", minimum=1)
        as_int(self.batch, "batch", minimum=1)
        as_positive_float(self.lr, "lr")
        as_positive_float(self.weight_decay, "weight_decay", allow_zero=True)


def _check_config(config) -> MLPConfig:
    if not isinstance(config, MLPConfig):
        raise ValueError(f"config must be an MLPConfig, got {type(config).__name__}")
    return config


def init_params(config: MLPConfig, seeds) -> Params:
    """Parameters of R = len(seeds) networks, one per seed: PyTorch's default fan-in uniform
    initialization, W, b ~ U[−1/√fan_in, 1/√fan_in]."""
    config = _check_config(config)
    seeds = as_seeds(seeds)
    runs = []
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)

        def uniform(*shape, fan_in, g=g):
            return (torch.rand(*shape, generator=g, dtype=DTYPE) * 2 - 1) / math.sqrt(fan_in)

        h, d, k = config.hidden, config.inputs, config.classes
        runs.append(
            {
                "w1": uniform(h, d, fan_in=d),
                "b1": uniform(h, fan_in=d),
                "w2": uniform(k, h, fan_in=h),
                "b2": uniform(k, fan_in=h),
            }
        )
    return {name: torch.stack([p[name] for p in runs]).contiguous() for name in runs[0]}


def logits(params: Params, x: torch.Tensor) -> torch.Tensor:
    """Class scores of R networks: x (R, B, L) (or (B, L), shared) → (R, B, K)."""
    r = params["w1"].shape[0]
    if x.ndim == 2:
        x = x.expand(r, *x.shape)
    hidden = torch.relu(torch.baddbmm(params["b1"][:, None, :], x, params["w1"].transpose(1, 2)))
    return torch.baddbmm(params["b2"][:, None, :], hidden, params["w2"].transpose(1, 2))


def per_run_loss(params: Params, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of each run on its own batch: x (R, B, L), labels (R, B) → (R,)."""
    out = logits(params, x)
    r, b, k = out.shape
    ce = torch.nn.functional.cross_entropy(
        out.reshape(r * b, k), labels.reshape(r * b), reduction="none"
    )
    return ce.reshape(r, b).mean(-1)


def _check_data(x, labels, config: MLPConfig) -> tuple[torch.Tensor, torch.Tensor]:
    x = as_tensor(x, "x")
    if x.ndim not in (2, 3) or x.shape[-1] != config.inputs:
        raise ValueError(
            f"x must have shape (n, {config.inputs}) or (R, n, {config.inputs}), "
            f"got {tuple(x.shape)}"
        )
    if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64:
        raise ValueError(f"labels must be an int64 torch tensor, got {labels!r:.60}")
    if tuple(labels.shape) != tuple(x.shape[:-1]):
        raise ValueError(
            f"labels must have shape {tuple(x.shape[:-1])} (one per sequence of x), "
            f"got {tuple(labels.shape)}"
        )
    if labels.numel() and (labels.min() < 0 or labels.max() >= config.classes):
        raise ValueError(f"labels must lie in 0..{config.classes - 1}")
    return x, labels


def train(config: MLPConfig, x, labels, seeds, train_config: TrainConfig = TrainConfig()) -> Params:
    """Train R = len(seeds) networks from scratch with AdamW; returns their parameters.

    ``x`` is (n, L) (all runs see the same data) or (R, n, L) (run r trains on x[r]); ``labels``
    (n,) or (R, n). Run r is initialized and shuffled with ``seeds[r]``.
    """
    config = _check_config(config)
    if not isinstance(train_config, TrainConfig):
        raise ValueError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    seeds = as_seeds(seeds)
    x, labels = _check_data(x, labels, config)
    r = len(seeds)
    if x.ndim == 3 and x.shape[0] != r:
        raise ValueError(f"x holds {x.shape[0]} data sets but seeds has {r} entries")
    if x.ndim == 2:
        x, labels = x.expand(r, *x.shape), labels.expand(r, *labels.shape)
    n = x.shape[1]
    params = {k: v.requires_grad_() for k, v in init_params(config, seeds).items()}
    opt = torch.optim.AdamW(
        list(params.values()), lr=train_config.lr, weight_decay=train_config.weight_decay
    )
    batches = max(1, math.ceil(n / train_config.batch))
    gens = [np.random.default_rng(s) for s in seeds]
    rows = torch.arange(r)[:, None]
    for _ in range(train_config.epochs):
        perm = torch.from_numpy(np.stack([g.permutation(n) for g in gens]))
        for j in range(batches):
            idx = perm[:, j * train_config.batch : (j + 1) * train_config.batch]
            loss = per_run_loss(params, x[rows, idx], labels[rows, idx]).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    for name, value in params.items():
        check_finite_result(value.detach(), f"the trained parameter {name}")
    return {k: v.detach() for k, v in params.items()}


def predict(params: Params, x) -> torch.Tensor:
    """Predicted classes (R, n) of R networks on x of shape (n, L) or (R, n, L)."""
    x = as_tensor(x, "x")
    if x.ndim not in (2, 3):
        raise ValueError(f"x must have shape (n, L) or (R, n, L), got {tuple(x.shape)}")
    with torch.no_grad():
        return logits(params, x).argmax(-1)


def accuracy(params: Params, x, labels) -> torch.Tensor:
    """Fraction of correct predictions of each run, shape (R,), float64."""
    config = MLPConfig(
        inputs=params["w1"].shape[-1], hidden=params["w1"].shape[1], classes=params["b2"].shape[-1]
    )
    x, labels = _check_data(x, labels, config)
    return (predict(params, x) == labels).double().mean(-1)


def victim(config: MLPConfig = MLPConfig(), train_config: TrainConfig = TrainConfig()):
    """This family as a :class:`lib.gradient_matching.Victim` (float64)."""
    from lib.gradient_matching import Victim

    config = _check_config(config)
    if not isinstance(train_config, TrainConfig):
        raise ValueError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    return Victim(
        name="MLP",
        init=lambda seeds: init_params(config, seeds),
        logits=logits,
        train=lambda x, labels, seeds: train(config, x, labels, seeds, train_config),
        dtype=MODEL_DTYPE,
    )
