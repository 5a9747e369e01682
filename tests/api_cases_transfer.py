"""Cases of :mod:`lib.poisoning.transfer_victim` and of the newer functions of
:mod:`lib.poisoning.gradient_matching`
and :mod:`lib.ssm.s4d` (``AttackConfig.step_sizes``, ``brew_joint``, ``size_ratio``, ``features``)
for the bad-input fuzz (``cases()``, see ``tests/api_cases.py``).

The tiny networks and toy data are those of ``tests/api_cases_s4d_viz.py``.
"""

from __future__ import annotations

from functools import cache

import torch
from api_cases import Arg, Case
from api_cases_s4d_viz import (
    LENGTH,
    MLP_TINY,
    S4D_TINY,
    _mlp_params,
    _s4d_params,
    _toy_data,
)

from lib.poisoning import gradient_matching as gm
from lib.poisoning import transfer_victim as tv
from lib.ssm import s4d

DT = torch.float64
P = Arg

RECORDS = {}


@cache
def _s4d_params_float32():
    """The tiny S4D network in its own float32 (s4d_features computes in the network's dtype)."""
    return s4d.init_params(S4D_TINY, [0])


@cache
def _victim():
    return tv.victim(tv.mlp_features(_mlp_params()), MLP_TINY.hidden, MLP_TINY.classes,
                     tv.HeadTrainConfig(epochs=1, batch=4))


@cache
def _head():
    x, y, _, _ = _toy_data()
    return _victim().train(x[None], y[None], [0])


def _train_with(features, feature_dim, classes=3):
    """A transfer victim on ``features``, trained one epoch: the closure is called."""
    x, y, _, _ = _toy_data()
    victim = tv.victim(features, feature_dim, classes, tv.HeadTrainConfig(epochs=1, batch=4))
    return victim.train(x[None], y[None], [0])


def _features_of(factory):
    def call(params):
        x, _, _, _ = _toy_data()
        return factory(params)(x[:3])

    return call


@cache
def _optimum():
    """The tiny head's optimum (T.4) at λ = 0.1: the head whose norm norm_matched_lambda matches."""
    x, y, _, _ = _toy_data()
    return tv.optimal_head(tv.mlp_features(_mlp_params())(x), y, 3, 0.1)


def _stationary(result, phi_train, y_train, classes, lam) -> bool:
    """Oracle: the answer is a stationary point of (T.4), ‖∇L‖ ≤ 1e-9, recomputed with autograd
    on the canonical labels (the features as given, converted to float64)."""
    phi = torch.as_tensor(phi_train, dtype=DT)
    labels = torch.as_tensor(y_train).long()
    w = result["w"][0].clone().requires_grad_()
    b = result["b"][0].clone().requires_grad_()
    loss = torch.nn.functional.cross_entropy(phi @ w.T + b, labels) + 0.5 * lam * (
        (w * w).sum() + (b * b).sum())
    gw, gb = torch.autograd.grad(loss, [w, b])
    return float(torch.cat([gw.flatten(), gb]).norm()) <= 1e-9


def cases() -> list[Case]:
    x, y, xt, yt = _toy_data()
    delta = torch.linspace(-0.1, 0.1, 2 * LENGTH, dtype=DT).reshape(2, LENGTH)
    like = torch.linspace(0.05, 0.2, 2 * LENGTH, dtype=DT).reshape(2, LENGTH)
    authors = gm.AttackConfig(steps=8, restarts=1, step_rule="authors")
    return [
        Case("poisoning.gradient_matching.AttackConfig.step_sizes", authors.step_sizes,
             [P("eps", 0.1, "float")]),
        Case("poisoning.gradient_matching.size_ratio", gm.size_ratio,
             [P("delta", delta, "tensor"), P("like", like, "tensor")]),
        Case(
            "poisoning.gradient_matching.brew_joint",
            lambda surrogate, x_train, targets, intended, poison_index, eps: gm.brew_joint(
                surrogate, x_train, y, xt, targets, intended, poison_index, eps, (-1.0, 1.0),
                gm.AttackConfig(steps=1, restarts=1)),
            [P("surrogate", _s4d_params(), "params"), P("x_train", x, "tensor"),
             P("targets", [0, 1], "seq"), P("intended", 2, "int"),
             P("poison_index", [1, 2], "seq"), P("eps", 0.1, "float")],
            examples=5,
        ),
        Case("ssm.s4d.features", s4d.features,
             [P("params", _s4d_params(), "params"),
              P("x", x[:3], "tensor"),
              P("method", "auto", "choice", True)]),
        Case("poisoning.transfer_victim.HeadTrainConfig", tv.HeadTrainConfig,
             [P("epochs", 1, "int", True), P("batch", 4, "int", True),
              P("lr", 1e-2, "float", True), P("weight_decay", 0.0, "float", True)]),
        Case("poisoning.transfer_victim.mlp_features", _features_of(tv.mlp_features),
             [P("params", _mlp_params(), "params")]),
        Case("poisoning.transfer_victim.s4d_features", _features_of(tv.s4d_features),
             [P("params", _s4d_params_float32(), "params")]),
        Case("poisoning.transfer_victim.victim", _train_with,
             [P("features", tv.mlp_features(_mlp_params()), "callable"),
              P("feature_dim", MLP_TINY.hidden, "int"), P("classes", 3, "int", True)],
             examples=5),
        Case("poisoning.gradient_matching.choose_nearest",
             lambda features, x_train, x_target, adversarial, budget: gm.choose_nearest(
                 features, x_train, y, x_target, adversarial, budget),
             [P("features", tv.mlp_features(_mlp_params()), "callable"),
              P("x_train", x, "tensor"), P("x_target", xt[0], "tensor"),
              P("adversarial", 1, "int"), P("budget", 2, "int")], examples=5),
        Case("poisoning.transfer_victim.init_head", tv.init_head,
             [P("feature_dim", MLP_TINY.hidden, "int"), P("classes", 3, "int"),
              P("seeds", [0, 1], "seq")]),
        Case("poisoning.transfer_victim.unrolled_head",
             lambda phi_clean, phi_poison, seed: tv.unrolled_head(
                 phi_clean, y, phi_poison, y[:2][None], seed, 3,
                 tv.HeadTrainConfig(epochs=1, batch=4)),
             [P("phi_clean", tv.mlp_features(_mlp_params())(x), "tensor"),
              P("phi_poison", tv.mlp_features(_mlp_params())(x[:2])[None], "tensor"),
              P("seed", 0, "int")], examples=5),
        Case("poisoning.transfer_victim.unrolled_attack",
             lambda features, x_train, poison_index, eps, steps: tv.unrolled_attack(
                 features, MLP_TINY.hidden, x_train, y, xt, [0], [1], poison_index, eps,
                 (-1.0, 1.0), classes=3, train_config=tv.HeadTrainConfig(epochs=1, batch=4),
                 steps=steps),
             [P("features", tv.mlp_features(_mlp_params()), "callable"),
              P("x_train", x, "tensor"), P("poison_index", [[1, 4]], "seq"),
              P("eps", 0.1, "float"), P("steps", 1, "int")], examples=5),
        Case("poisoning.transfer_victim.optimal_head",
             lambda phi_train, y_train, classes, lam: tv.optimal_head(
                 phi_train, y_train, classes, lam, max_iter=30),
             [P("phi_train", tv.mlp_features(_mlp_params())(x), "tensor"),
              P("y_train", y, "tensor"), P("classes", 3, "int"), P("lam", 0.1, "float")],
             oracle=_stationary),
        Case("poisoning.transfer_victim.norm_matched_lambda",
             lambda phi_train, head: tv.norm_matched_lambda(
                 phi_train, y, 3, head, bracket=(1e-3, 10.0), rtol=1e-3),
             [P("phi_train", tv.mlp_features(_mlp_params())(x), "tensor"),
              P("head", _optimum(), "params")], examples=5),
        Case("poisoning.transfer_victim.implicit_attack",
             lambda features, x_train, poison_index, x_target, eps, lam, steps: tv.implicit_attack(
                 features, x_train, y, poison_index, x_target, [1], eps, lam, steps,
                 data_range=(-1.0, 1.0), classes=3, max_iter=30),
             [P("features", tv.mlp_features(_mlp_params()), "callable"),
              P("x_train", x, "tensor"), P("poison_index", [[1, 4]], "seq"),
              P("x_target", xt[:1], "tensor"), P("eps", 0.1, "float"), P("lam", 0.1, "float"),
              P("steps", 1, "int")], examples=5),
        Case("poisoning.transfer_victim.accuracy",
             lambda x, labels: tv.accuracy(_victim(), _head(), x, labels),
             [P("x", xt, "tensor"), P("labels", yt, "tensor")]),
    ]
