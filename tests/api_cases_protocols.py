"""Cases of :mod:`lib.ssm.extrapolation_protocols` and :mod:`lib.ssm.gru_students` for the
bad-input fuzz (``cases()``, see ``tests/api_cases.py``).

Results that are records (:class:`~lib.ssm.extrapolation_protocols.StudentRuns`,
:class:`~lib.ssm.gru_students.GRUBatch`) are unpacked into tuples of tensors, so that the fuzz
compares and checks their numbers. Oracles recompute an answer independently where one is cheap.
"""

from __future__ import annotations

import numpy as np
import torch
from api_cases import Arg, Case, same, t

from lib.ssm import extrapolation as ex
from lib.ssm import extrapolation_protocols as xp
from lib.ssm import gru_students as gs

DT = torch.float64
P = Arg  # short

RECORDS = {
    "ssm.extrapolation_protocols.StudentRuns": "the record train_students returns; nothing in lib "
    "reads one",
    "ssm.gru_students.GRUBatch": "R GRUs' weights, built by gru_init and the trainers; outputs() "
    "checks its input (case GRUBatch.outputs)",
}

_W = ex.moment_sequence([0.8, -0.4], [0.6, 0.4], 8)
_BALANCED = {"a": t(0.1, -0.2, 0.05)[None], "b": t(0.3, 0.2, -0.1)[None]}
_NET = gs.gru_init(2, [0], dtype="float64")


def _runs(result: xp.StudentRuns):
    return result.params, result.losses, result.steps, result.best_steps


def _batch(net: gs.GRUBatch):
    return tuple(net.tensors())


def _oracle_accumulating(result, h, w, k) -> bool:
    """eq. (D.3)'s weights k - i, along h's last axis (h may carry batch axes in front)."""
    h, w = np.asarray(h, float), np.asarray(w, float)
    if h.ndim < 1 or w.ndim != 1 or min(h.shape[-1], len(w)) < k:
        return False
    expected = sum((k - i) * (h[..., i] - w[i]) ** 2 for i in range(k))
    return same(result, np.asarray(expected, dtype=float))


def _oracle_responses(result, kind, params, length) -> bool:
    a, b = (np.asarray(params[n], float)[0] for n in ("a", "b"))
    return same(result, np.array([[float((b * b * a**j).sum()) for j in range(length)]]))


def cases() -> list[Case]:
    return [
        Case("ssm.extrapolation_protocols.paper_balanced_teacher", xp.paper_balanced_teacher,
             [P("d_hat", 5, "int"), P("seed", 0, "int"), P("eigenvalues", "even", "choice", True)]),
        Case("ssm.extrapolation_protocols.random_unbalanced_teacher", xp.random_unbalanced_teacher,
             [P("d_hat", 4, "int"), P("seed", 0, "int")]),
        Case("ssm.extrapolation_protocols.accumulating_loss", xp.accumulating_loss,
             [P("h", t(0.5, 0.2, 0.1), "tensor"), P("w", t(1.0, 0.0, 0.3), "tensor"),
              P("k", 3, "int")], oracle=_oracle_accumulating),
        Case("ssm.extrapolation_protocols.impulse_responses", xp.impulse_responses,
             [P("kind", "balanced", "choice"), P("params", _BALANCED, "params"),
              P("length", 4, "int")], oracle=_oracle_responses),
        Case("ssm.extrapolation_protocols.tail_errors", xp.tail_errors,
             [P("kind", "balanced", "choice"), P("params", _BALANCED, "params"),
              P("w", _W, "tensor"), P("ks", [3], "seq")]),
        Case(
            "ssm.extrapolation_protocols.train_students",
            lambda kind, w, ks, params, loss="empirical", lr=1e-2, steps=20, milestones=(5,),
            batch=4, patience=10: _runs(xp.train_students(
                kind, w, ks, params, loss=loss, lr=lr, steps=steps, milestones=milestones,
                batch=batch, n_train=12, n_val=6, patience=patience, check_every=2)),
            [P("kind", "balanced", "choice"), P("w", _W, "tensor"), P("ks", [4], "seq"),
             P("params", _BALANCED, "params"), P("loss", "empirical", "choice", True),
             P("lr", 1e-2, "float", True), P("steps", 20, "int", True),
             P("milestones", [5], "seq", True), P("batch", 4, "int", True),
             P("patience", 10, "int", True)],
            examples=6,
        ),
        Case("ssm.gru_students.gru_init", lambda width, seeds, scale=0.5, dtype="float64",
             device="cpu": _batch(gs.gru_init(width, seeds, scale=scale, dtype=dtype,
                                               device=device)),
             [P("width", 2, "int"), P("seeds", [0, 1], "seq"), P("scale", 0.5, "float", True),
              P("dtype", "float32", "choice", True), P("device", "cpu", "device", True)]),
        Case("ssm.gru_students.GRUBatch.outputs", lambda x: _NET.outputs(x),
             [P("x", torch.ones(1, 2, 3, dtype=DT) * 0.5, "tensor")]),
        Case("ssm.gru_students.GRUBatch.states", lambda x: _NET.states(x),
             [P("x", torch.ones(1, 2, 3, dtype=DT) * 0.5, "tensor")]),
        Case("ssm.gru_students.select", lambda runs: _batch(gs.select(_NET, runs)),
             [P("runs", [0, 0], "seq")]),
        Case("ssm.gru_students.train_gru_teachers",
             lambda width, target, seeds, steps=2, lr=1e-2, dtype="float64", device="cpu",
             fit="impulse", n_fit=3:
             _batch(gs.train_gru_teachers(width, target, seeds, steps=steps, lr=lr, dtype=dtype,
                                          device=device, fit=fit, n_fit=n_fit)),
             [P("width", 2, "int"), P("target", t(1.0, 0.5, 0.25), "tensor"),
              P("seeds", [0], "seq"), P("steps", 2, "int", True), P("lr", 1e-2, "float", True),
              P("dtype", "float32", "choice", True), P("device", "cpu", "device", True),
              P("fit", "filter", "choice", True), P("n_fit", 3, "int", True)],
             examples=5),
        Case("ssm.gru_students.train_gru_students",
             lambda ks, seeds, width=2, max_steps=3, batch=2, lr=1e-3: _batch(
                 gs.train_gru_students(_NET, ks, width=width, seeds=seeds, n_train=4, n_val=2,
                                       batch=batch, max_steps=max_steps, check_every=1,
                                       patience=2, lr=lr)[0]),
             [P("ks", [2], "seq"), P("seeds", [0], "seq"), P("width", 2, "int", True),
              P("max_steps", 3, "int", True), P("batch", 2, "int", True),
              P("lr", 1e-3, "float", True)],
             examples=5),
        Case("ssm.gru_students.gru_window_only_errors",
             lambda ks, length=4, n=5, chunk=2: gs.gru_window_only_errors(
                 _NET, ks, length=length, n=n, chunk=chunk),
             [P("ks", [2], "seq"), P("length", 4, "int", True), P("n", 5, "int", True),
              P("chunk", 2, "int", True)]),
        Case("ssm.gru_students.gru_tail_errors",
             lambda ks, length=4, n=5: gs.gru_tail_errors(_NET, _NET, ks, length=length, n=n),
             [P("ks", [2], "seq"), P("length", 4, "int", True), P("n", 5, "int", True)]),
    ]
