"""Cases of :mod:`lib.poisoning.authors_protocol` for the bad-input fuzz (``cases()``, see
``tests/api_cases.py``).

Oracles: the authors' initialization is recomputed from its definition (one normal stream, C the
reversed |B| draw); the resampling probability is compared with an exact enumeration of the
subsets (small inputs), within a Monte-Carlo margin.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from api_cases import Arg, Case

from lib.poisoning import authors_protocol as ap
from lib.poisoning import dynamics as pd

P = Arg  # short
DT = torch.float64


def _oracle_init(result, setting, seed):
    z = np.random.RandomState(int(seed)).normal(size=setting.d**2)
    return np.array_equal(result["c"].numpy(), np.abs(setting.sd_bc * z[: setting.d])[::-1])


def _oracle_probability(result, values, paper_value, k=4, side="below", **_):
    values = np.asarray(values, dtype=float)
    means = np.array([np.mean(s) for s in itertools.combinations(values, int(k))])
    share = means <= float(paper_value) if side == "below" else means >= float(paper_value)
    near = np.abs(means - float(paper_value)) < 1e-12  # ties: rounding decides either way
    low, high = share[~near].sum() / len(means), (share | near).sum() / len(means)
    return low - 0.02 <= result <= high + 0.02  # 0.02: over 6 binomial standard errors


def cases() -> list[Case]:
    short = pd.TABLE1_ROW2
    return [
        Case("poisoning.authors_protocol.authors_init", ap.authors_init,
             [P("setting", short, "object"), P("seed", 3, "int")], oracle=_oracle_init),
        Case("poisoning.authors_protocol.train_authors", ap.train_authors,
             [P("setting", short, "object"), P("seeds", [0], "seq"),
              P("special_scales", [None], "object", True), P("dtype", "float32", "choice", True),
              P("step_norm", "full", "choice", True), P("max_steps", 30, "int", True),
              P("engine", "torch", "choice", True)],
             examples=4),
        Case("poisoning.authors_protocol.mean_of_k_probability", ap.mean_of_k_probability,
             [P("values", torch.tensor([0.1, 0.4, 0.2, 0.9, 0.5], dtype=DT), "tensor"),
              P("paper_value", 0.33, "float"), P("k", 3, "int", True),
              P("side", "below", "choice", True), P("draws", 20_000, "int", True)],
             oracle=_oracle_probability),
    ]
