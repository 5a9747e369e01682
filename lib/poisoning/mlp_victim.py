"""A small multilayer perceptron, trained in many independent runs at once: the positive control
of the real-data poisoning experiment.

Gradient matching ("Witches' Brew", Geiping et al. 2021) is known to poison networks that fit their
training set and are retrained from scratch. To tell a weak attack from a resistant victim, the
chapter runs the same attack against a victim of that kind on the same 8×8 digits: a one-hidden-
layer ReLU network

    f(x) = W₂ relu(W₁ x + b₁) + b₂,   x ∈ ℝ⁶⁴, W₁ ∈ ℝ^{H×64}, W₂ ∈ ℝ^{K×H},

trained with AdamW on the mean cross-entropy until it fits its training set (100 % training
accuracy on the digits, which are linearly separable; checked by the chapter).

**Independent runs.** As in :mod:`lib.ssm.s4d`, every parameter has a leading axis of length R that
indexes R independent networks; their losses are summed, so each run gets its own gradient, and
AdamW is elementwise, so the R runs train as if each ran alone. The network computes in float64
(it is cheap enough).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from lib.engine.losses import per_run_cross_entropy
from lib.engine.validation import (
    DTYPE,
    as_int,
    as_labels,
    as_positive_float,
    as_seeds,
    as_tensor,
    check_finite_result,
    check_result,
    describe,
)

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


_SHAPES = {"w1": ("runs", "hidden", "inputs"), "b1": ("runs", "hidden"),
           "w2": ("runs", "classes", "hidden"), "b2": ("runs", "classes")}  # fmt: skip


def _check_params(params, name: str = "params") -> dict[str, int]:
    """The sizes (runs, hidden, inputs, classes) of an MLP parameter dict of :func:`init_params`'s
    layout, after checking it: exactly w1, b1, w2, b2, finite float64 tensors of consistent shapes,
    at least one run, hidden unit and input, and two classes."""
    if not isinstance(params, dict) or set(params) != set(_SHAPES):
        keys = sorted(params) if isinstance(params, dict) else describe(params)
        raise ValueError(f"{name} must be an MLP parameter dict {sorted(_SHAPES)}, got {keys}")
    tensors = {}
    for key, axes in _SHAPES.items():
        if not isinstance(params[key], torch.Tensor) or params[key].dtype != torch.float64:
            raise ValueError(
                f"{name}[{key!r}] must be a float64 tensor, got {describe(params[key])}"
            )
        tensors[key] = as_tensor(params[key], f"{name}[{key!r}]", ndim=len(axes))
    sizes: dict[str, int] = {}
    for key, axes in _SHAPES.items():
        for axis, size in zip(axes, tensors[key].shape, strict=True):
            if sizes.setdefault(axis, int(size)) != size:
                raise ValueError(
                    f"{name}[{key!r}] has shape {tuple(tensors[key].shape)}, which disagrees with "
                    f"the other parameters on the number of {axis} ({sizes[axis]})"
                )
    if min(sizes["runs"], sizes["hidden"], sizes["inputs"]) < 1 or sizes["classes"] < 2:
        raise ValueError(
            f"{name} must hold a run, a hidden unit, an input and two classes: {sizes}"
        )
    return sizes


def _check_x(x, sizes: dict[str, int]) -> torch.Tensor:
    """Finite float64 x of shape (B, L) or (R, B, L), B ≥ 1, L the network's inputs."""
    x = as_tensor(x, "x")
    length, runs = sizes["inputs"], sizes["runs"]
    if x.ndim not in (2, 3) or x.shape[-1] != length or x.shape[-2] == 0:
        raise ValueError(
            f"x must have shape (n, {length}) or ({runs}, n, {length}) with n >= 1, "
            f"got {tuple(x.shape)}"
        )
    if x.ndim == 3 and x.shape[0] != runs:
        raise ValueError(f"x holds {x.shape[0]} batches but params has {runs} run(s)")
    return x


def logits(params: Params, x: torch.Tensor) -> torch.Tensor:
    """Class scores of R networks: x (R, B, L) (or (B, L), shared) → (R, B, K), float64."""
    x = _check_x(x, _check_params(params))
    return check_result(_logits(params, x), "the MLP's logits")


def _logits(params: Params, x: torch.Tensor) -> torch.Tensor:
    """:func:`logits` of checked input."""
    r = params["w1"].shape[0]
    if x.ndim == 2:
        x = x.expand(r, *x.shape)
    hidden = torch.relu(torch.baddbmm(params["b1"][:, None, :], x, params["w1"].transpose(1, 2)))
    return torch.baddbmm(params["b2"][:, None, :], hidden, params["w2"].transpose(1, 2))


def _check_data(x, labels, config: MLPConfig) -> tuple[torch.Tensor, torch.Tensor]:
    x = as_tensor(x, "x")
    if x.ndim not in (2, 3) or x.shape[-1] != config.inputs or x.shape[-2] == 0:
        raise ValueError(
            f"x must have shape (n, {config.inputs}) or (R, n, {config.inputs}) with n >= 1, "
            f"got {tuple(x.shape)}"
        )
    return x, as_labels(labels, "labels", tuple(x.shape[:-1]), config.classes)


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
            out = _logits(params, x[rows, idx])
            loss = per_run_cross_entropy(out, labels[rows, idx]).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    for name, value in params.items():
        check_finite_result(value.detach(), f"the trained parameter {name}")
    return {k: v.detach() for k, v in params.items()}


def predict(params: Params, x) -> torch.Tensor:
    """Predicted classes (R, n) of R networks on x of shape (n, L) or (R, n, L)."""
    x = _check_x(x, _check_params(params))
    with torch.no_grad():
        return check_result(_logits(params, x), "the MLP's logits").argmax(-1)


def accuracy(params: Params, x, labels) -> torch.Tensor:
    """Fraction of correct predictions of each run, shape (R,), float64."""
    sizes = _check_params(params)
    x = _check_x(x, sizes)
    labels = as_labels(labels, "labels", tuple(x.shape[:-1]), sizes["classes"])
    return (predict(params, x) == labels).double().mean(-1)


def victim(config: MLPConfig = MLPConfig(), train_config: TrainConfig = TrainConfig()):
    """This family as a :class:`lib.poisoning.gradient_matching.Victim` (float64)."""
    from lib.poisoning.gradient_matching import Victim

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
