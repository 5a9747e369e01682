"""Cases of :mod:`lib.networks.escape_dynamics` for the bad-input fuzz (``cases()``,
``tests/api_cases.py``).

The oracles recompute the answer independently, in plain numpy, point by point: the outputs'
cosine, the per-neuron balance, the end of the first plateau.
"""

from __future__ import annotations

import numpy as np
import torch
from api_cases import Arg, Case

from lib.networks import escape_dynamics as ed
from lib.networks import saddles

P = Arg  # short
DT = torch.float64
RECORDS = {
    "networks.escape_dynamics.DirectionFlow": "the record limit_direction_flow returns; its method "
                                              "checks "
    "its argument (case DirectionFlow.direction)",
    "networks.escape_dynamics.BalanceDrift": "the record balance_drift returns; every reader is "
                                             "the chapter",
}


def _np(value) -> np.ndarray:
    return np.asarray(value.tolist() if isinstance(value, torch.Tensor) else value, dtype=float)


def _network(value) -> list[np.ndarray] | None:
    """The weight matrices as numpy arrays, or None when they are not a chain of matrices."""
    try:
        weights = [_np(w) for w in value]
    except (TypeError, ValueError):
        return None
    if len(weights) < 2 or any(w.ndim != 2 for w in weights):
        return None
    return weights


def _outputs(weights: list[np.ndarray], X: np.ndarray) -> np.ndarray:
    rows = []
    for x in X:
        h = x
        for i, w in enumerate(weights):
            h = w @ h
            if i < len(weights) - 1:
                h = np.maximum(h, 0.0)
        rows.append(h)
    return np.array(rows)


def _oracle_output_cosine(result, weights, reference, X) -> bool:
    a, b = _network(weights), _network(reference)
    if a is None or b is None:
        return False
    ya, yb = _outputs(a, _np(X)), _outputs(b, _np(X))
    norms = np.linalg.norm(ya) * np.linalg.norm(yb)
    expected = float((ya * yb).sum() / norms) if norms > 0 else 0.0
    return abs(result - expected) <= 1e-9


def _oracle_weak_balance(result, weights) -> bool:
    w = _network(weights)
    if w is None:
        return False
    expected = [(a**2).sum(axis=1) - (b**2).sum(axis=0) for a, b in zip(w[:-1], w[1:], strict=True)]
    return len(result) == len(expected) and all(
        np.allclose(r, e, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(e).max(initial=0))))
        for r, e in zip(result, expected, strict=True)
    )


def _oracle_plateau_exit(result, losses, height, drop=0.02) -> bool:
    values = _np(losses)
    if values[0] > float(height) + float(drop):  # the run does not start on the plateau
        return result is None
    for k, v in enumerate(values):
        if v < float(height) - float(drop):
            return result == (k - 1 if k > 0 else None)
    return result is None


def cases() -> list[Case]:
    X, G = saddles.example1()
    rho = saddles.example1_rank2_weights()
    rng = np.random.RandomState(0)
    other = [torch.from_numpy(rng.standard_normal(tuple(w.shape))) for w in rho]
    x_ce = torch.from_numpy(rng.standard_normal((6, 2)))
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    net = [torch.from_numpy(rng.standard_normal(s) / 2) for s in ((4, 2), (4, 4), (3, 4))]
    data = [P("X", X, "tensor"), P("G", G, "tensor")]
    flow = ed.limit_direction_flow(other, X, G, eta0=0.1, steps=4, record_every=2)
    run = saddles.saddle_to_saddle_run(x_ce, labels, depth=3, width=4, init_scale=0.5, eta0=0.5,
                                       steps=4, seed=0, record_every=2)  # fmt: skip
    return [
        Case("networks.escape_dynamics.on_sphere", ed.on_sphere, [P("weights", other, "seq")]),
        Case(
            "networks.escape_dynamics.output_cosine",
            ed.output_cosine,
            [P("weights", other, "seq"), P("reference", rho, "seq"), P("X", X, "tensor")],
            oracle=_oracle_output_cosine,
        ),
        Case(
            "networks.escape_dynamics.escape_residual",
            ed.escape_residual,
            [P("weights", other, "seq"), *data],
        ),
        Case(
            "networks.escape_dynamics.compare_directions",
            ed.compare_directions,
            [P("weights", other, "seq"), P("reference", rho, "seq"), *data],
        ),
        Case(
            "networks.escape_dynamics.trajectory_weights",
            ed.trajectory_weights,
            [P("run", run, "object"), P("index", 1, "int")],
        ),
        Case(
            "networks.escape_dynamics.plateau_exit",
            ed.plateau_exit,
            [
                P("losses", torch.tensor([2.3, 2.3, 2.2, 1.0], dtype=DT), "tensor"),
                P("height", 2.3, "float", True),
                P("drop", 0.02, "float", True),
            ],
            oracle=_oracle_plateau_exit,
        ),
        Case(
            "networks.escape_dynamics.limit_direction_flow",
            ed.limit_direction_flow,
            [
                P("weights", other, "seq"),
                *data,
                P("eta0", 0.1, "float", True),
                P("steps", 6, "int", True),
                P("record_every", 3, "int", True),
            ],
            examples=6,
        ),
        Case("networks.escape_dynamics.DirectionFlow.direction", flow.direction, [P("index", 1,
            "int")]),
        Case(
            "networks.escape_dynamics.weak_balance",
            ed.weak_balance,
            [P("weights", net, "seq")],
            oracle=_oracle_weak_balance,
        ),
        Case(
            "networks.escape_dynamics.balance_drift",
            ed.balance_drift,
            [
                P("weights", net, "seq"),
                P("X", x_ce, "tensor"),
                P("labels", labels, "tensor"),
                P("eta0", 0.1, "float", True),
                P("steps", 5, "int", True),
                P("record_every", 2, "int", True),
            ],
            examples=6,
        ),
    ]
