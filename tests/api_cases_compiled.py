"""Cases for the engine options and the compiled paths, and the public callables the main table
of ``tests/api_cases.py`` does not name: the ``engine=`` alternative of every function that has
one (the main table fuzzes each function through its default engine), the compiled descent of
:mod:`lib.networks._linear_kernels`, the closed-form gradients of :mod:`lib.networks.linear_nets`
and
:mod:`lib.networks.relu_nets`, and the public methods of the classes of
:mod:`lib.ssm.extrapolation` and
:mod:`lib.poisoning.dynamics`.

A case named ``module.function[engine=…]`` is a variant: it is fuzzed like the others, and does
not count as the case of ``module.function`` (whose own case fuzzes the default engine).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from api_cases import DT, Arg, Case, t

from lib.networks import linear_nets, relu_nets
from lib.poisoning import dynamics as dyn
from lib.poisoning import theorem1 as poison
from lib.ssm import extrapolation

P = Arg  # short


def _net_and_data():
    net = linear_nets.xavier_init((3, 4, 2), 0)
    x = torch.linspace(-1, 1, 12, dtype=DT).reshape(4, 3)
    labels = torch.tensor([0, 1, 1, 0], dtype=torch.int64)
    return net, x, labels


def _cross_entropy_head(outputs: torch.Tensor):
    """Mean squared outputs as a 'loss' head: (losses per row, their gradient)."""
    return (outputs**2).sum(-1), 2 * outputs


def _descent_field_case() -> Case:
    """A hand-built DescentField handed to train_adam (its compiled engine reads kind/target/ks)."""
    field = extrapolation.balanced_descent_field(t(1.0, 0.5, 0.25, 0.125), [3])
    params = {"a": t(0.1, 0.2).unsqueeze(0), "b": t(0.1, -0.1).unsqueeze(0)}

    def call(kind, target, ks):
        built = extrapolation.DescentField(kind, target, ks, field.gradient)
        return extrapolation.train_adam(built, params, 1, lr=0.01, steps=4, record_every=2)

    return Case(
        "ssm.extrapolation.DescentField",
        call,
        [
            P("kind", "balanced", "choice"),
            P("target", np.array([1.0, 0.5, 0.25, 0.125]), "object"),
            P("ks", (3,), "seq"),
        ],
    )


def _engine_cases() -> list[Case]:
    w = t(1.0, 0.5, 0.25, 0.125, 0.0625, 0.03, 0.015, 0.007)
    balanced = {"a": t(0.1, 0.2), "b": t(0.1, -0.1)}
    setting = dataclasses.replace(dyn.FIGURE2_SSM, n_baseline=3, n_special=2)
    return [
        Case(
            "ssm.extrapolation.balanced_flow[engine=torch]",
            lambda w, k, params, time: extrapolation.balanced_flow(
                w, k, params, time=time, points=3, engine="torch"
            ),
            [
                P("w", w, "tensor"),
                P("k", 3, "int"),
                P("params", balanced, "params"),
                P("time", 100.0, "float"),
            ],
            examples=5,
        ),
        Case(
            "ssm.extrapolation.train_adam[engine=torch]",
            lambda lr, steps, milestones, runs: extrapolation.train_adam(
                extrapolation.balanced_descent_field(w, [3]),
                {k: v.unsqueeze(0) for k, v in balanced.items()},
                runs,
                lr=lr,
                steps=steps,
                milestones=milestones,
                record_every=2,
                engine="torch",
            ),
            [
                P("lr", 0.01, "float"),
                P("steps", 6, "int"),
                P("milestones", [3], "seq"),
                P("runs", 1, "int"),
            ],
            examples=5,
        ),
        Case(
            "poisoning.theorem1.theorem1_flow[engine=torch]",
            lambda a0, kappa, horizon: poison.theorem1_flow(
                a0, kappa, poisoned=True, horizon=horizon, points=3, engine="torch"
            ),
            [
                P("a0", t(0.03, 0.02, 0.01), "tensor"),
                P("kappa", 5, "int"),
                P("horizon", 1e3, "float"),
            ],
            examples=5,
        ),
        Case(
            "poisoning.dynamics.train_dynamics[engine=torch]",
            lambda setting, seeds, special_scales, max_steps, record_every: dyn.train_dynamics(
                setting,
                seeds,
                special_scales=special_scales,
                max_steps=max_steps,
                record_every=record_every,
                engine="torch",
            ),
            [
                P("setting", setting, "object"),
                P("seeds", [0], "seq"),
                P("special_scales", [None, 1.0], "seq"),
                P("max_steps", 3, "int"),
                P("record_every", 1, "int"),
            ],
            examples=5,
        ),
    ]


def _class_method_cases() -> list[Case]:
    gru = extrapolation.GRUNet(2, 0)
    setting = dyn.FIGURE2_SSM
    mlp_setting = dataclasses.replace(dyn.FIGURE2_SSM_MLP, n_baseline=3, n_special=2, hidden=3)
    mlp_runs = dyn.train_dynamics(mlp_setting, [0], max_steps=4, record_every=2)
    x = torch.linspace(-1, 1, 2 * setting.kappa, dtype=DT).reshape(2, setting.kappa)
    return [
        Case(
            "ssm.extrapolation.GRUNet.forward",
            gru.forward,
            [P("x", torch.linspace(-1, 1, 10, dtype=DT).reshape(2, 5), "tensor")],
        ),
        Case(
            "poisoning.dynamics.DynamicsSetting.teacher_labels",
            setting.teacher_labels,
            [P("x", x, "tensor")],
        ),
        Case(
            "poisoning.dynamics.DynamicsRuns.initial_gain",
            mlp_runs.initial_gain,
            [P("r", 0, "int")],
        ),
    ]


def _gradient_cases() -> list[Case]:
    net, x, labels = _net_and_data()
    return [
        Case(
            "networks.linear_nets.cross_entropy_descent",
            linear_nets.cross_entropy_descent,
            [
                P("params", net, "params"),
                P("x", x, "tensor"),
                P("labels", labels, "tensor"),
                P("lr", 0.1, "float"),
                P("steps", 4, "int"),
                P("activation", "relu", "choice", True),
                P("record_every", 2, "int", True),
            ],
            examples=6,
        ),
        Case(
            "networks.linear_nets.cross_entropy_gradient",
            linear_nets.cross_entropy_gradient,
            [
                P("params", net, "params"),
                P("x", x, "tensor"),
                P("labels", labels, "tensor"),
                P("activation", "linear", "choice", True),
            ],
        ),
        Case(
            "networks.relu_nets.relu_network_gradient",
            relu_nets.relu_network_gradient,
            [
                P("weights", [torch.ones(2, 3, dtype=DT), torch.ones(1, 2, dtype=DT)], "seq"),
                P("inputs", x, "tensor"),
                P("head", _cross_entropy_head, "callable"),
            ],
            # its docstring: an overflowing loss comes back as it is, for lib.engine.flow's engines
            # to flag the run (a gradient closure of cross_entropy_descent's reference engine)
            overflow_passes=("head",),
        ),
    ]


def cases() -> list[Case]:
    return [_descent_field_case(), *_engine_cases(), *_class_method_cases(), *_gradient_cases()]
