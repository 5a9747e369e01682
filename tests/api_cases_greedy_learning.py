"""Cases of :mod:`lib.poisoning.keras_streams` and :mod:`lib.poisoning.greedy_learning` for the
bad-input fuzz (``cases()``, see ``tests/api_cases.py``).

Oracles: Philox4x32 against a plain re-computation of its rounds; the stateless normal stream
against its own prefix property; the teacher's labels against the impulse response summed by hand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from api_cases import DT, Arg, Case

from lib.poisoning import greedy_learning as gl
from lib.poisoning import keras_streams as ks

P = Arg  # short

RECORDS = {
    "poisoning.greedy_learning.GreedyRuns": "the record train_greedy returns; its methods check "
                                            "their "
    "arguments (cases GreedyRuns.index, .active, .magnitudes, .effective_ranks, .gamma0, "
    ".escape_iteration)",
}


def _oracle_philox(result, counter, key):
    c, k = [int(v) for v in counter], [int(v) for v in key]
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k[1], p0 & 0xFFFFFFFF]
        k = [(k[0] + 0x9E3779B9) & 0xFFFFFFFF, (k[1] + 0xBB67AE85) & 0xFFFFFFFF]
    return tuple(result) == tuple(c)


def _oracle_normal(result, count, seed):
    longer = ks.stateless_normal(int(count) + 4, int(seed))
    return np.array_equal(result, longer[: int(count)])


def _oracle_labels(result, x):
    x = torch.as_tensor(np.asarray(x), dtype=DT)
    kappa = x.shape[1]
    h = torch.tensor([0.99**m + 0.8**m for m in range(kappa - 1, -1, -1)], dtype=DT)
    return torch.allclose(result, x @ h, rtol=1e-12, atol=1e-12)


def cases() -> list[Case]:
    small = dataclasses.replace(gl.FIGURE4_SHORT, n_baseline=3, n_special=2)
    trained = dataclasses.replace(gl.FIGURE2, n_baseline=3, n_special=2)
    runs = gl.train_greedy(trained, [0], max_steps=6, record_every=2)
    x = torch.linspace(-1, 1, 12, dtype=DT).reshape(2, 6)
    return [
        Case("poisoning.keras_streams.philox4x32", ks.philox4x32,
             [P("counter", (1, 2, 3, 4), "seq"), P("key", (5, 6), "seq")], oracle=_oracle_philox),
        Case("poisoning.keras_streams.stateless_normal", ks.stateless_normal,
             [P("count", 6, "int"), P("seed", 3, "int")], oracle=_oracle_normal),
        Case(
            "poisoning.greedy_learning.GreedySetting",
            lambda d, kappa, sd_a, step_norm, fixed_bc, sort_c: dataclasses.replace(
                small, d=d, kappa=kappa, sd_a=sd_a, step_norm=step_norm, fixed_bc=fixed_bc,
                sort_c=sort_c),
            [P("d", 10, "int"), P("kappa", 6, "int"), P("sd_a", 0.01, "float"),
             P("step_norm", "authors", "choice"), P("fixed_bc", True, "bool"),
             P("sort_c", False, "bool")],
        ),
        Case("poisoning.greedy_learning.GreedySetting.teacher_labels", small.teacher_labels,
             [P("x", x, "tensor")], oracle=_oracle_labels),
        Case("poisoning.greedy_learning.greedy_init", gl.greedy_init,
             [P("setting", small, "object"), P("seed", 0, "int"),
              P("streams", "authors", "choice", True)]),
        Case("poisoning.greedy_learning.greedy_data", gl.greedy_data,
             [P("setting", small, "object"), P("seed", 0, "int"),
              P("special_scale", 0.5, "float", True), P("streams", "book", "choice", True)]),
        Case(
            "poisoning.greedy_learning.train_greedy", gl.train_greedy,
            [P("setting", small, "object"), P("seeds", [0], "seq"),
             P("special_scales", [None, 1.0], "seq", True), P("streams", "book", "choice", True),
             P("max_steps", 4, "int", True), P("record_every", 2, "int", True),
             P("engine", "compiled", "choice", True)],
            examples=5,
        ),
        Case(
            "poisoning.greedy_learning.train_greedy[engine=numpy]",
            lambda setting, seeds, max_steps: gl.train_greedy(
                setting, seeds, max_steps=max_steps, record_every=1, engine="numpy"),
            [P("setting", trained, "object"), P("seeds", [0], "seq"), P("max_steps", 3, "int")],
            examples=5,
        ),
        Case("poisoning.greedy_learning.GreedyRuns.index", runs.index,
             [P("seed", 0, "int"), P("scale", 1.0, "float")]),
        Case("poisoning.greedy_learning.GreedyRuns.active", runs.active, [P("r", 0, "int")]),
        Case("poisoning.greedy_learning.GreedyRuns.magnitudes", runs.magnitudes, [P("r", 1,
            "int")]),
        Case("poisoning.greedy_learning.GreedyRuns.effective_ranks", runs.effective_ranks,
             [P("r", 0, "int")]),
        Case("poisoning.greedy_learning.GreedyRuns.gamma0", runs.gamma0, [P("r", 1, "int")]),
        Case("poisoning.greedy_learning.GreedyRuns.escape_iteration", runs.escape_iteration,
             [P("r", 1, "int"), P("rank", 1, "int", True), P("level", 0.01, "float", True)]),
    ]  # fmt: skip
