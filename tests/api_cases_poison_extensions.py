"""Cases of :mod:`lib.poisoning.appendix_a` for the bad-input fuzz (``cases()``, see
``tests/api_cases.py``).

Oracles check what each answer must satisfy, computed independently: the App. A teacher's impulse
response is (d, 1, 1, …) by direct powers; the copies' labels are p_i and q_j (the teacher of
Assumption 1 maps e_l, l ≤ κ − 2, and e_{κ−1} to 1) and their rows the scaled unit impulses; a
gradient flow never raises the loss, which is recomputed from the final state by lib.ssm.diagonal.
"""

from __future__ import annotations

import numpy as np
import torch
from api_cases import Arg, Case

from lib.poisoning import appendix_a as ext
from lib.ssm import diagonal as ssm

P = Arg  # short
DT = torch.float64


def _oracle_teacher(result, d, d_star):
    a, b, c = (np.asarray(v, dtype=float) for v in result)
    h = [float(np.sum(b * c * a**k)) for k in range(5)]
    return len(a) == int(d_star) and np.allclose(h, [int(d), 1, 1, 1, 1], rtol=0, atol=1e-9)


def _oracle_copies(result, d, kappa, p, q=(), position=1):
    x, y = result
    p = [float(v) for v in p]
    q = [float(v) for v in q]
    expected = np.zeros((len(p) + len(q), int(kappa)))
    for i, value in enumerate(p):
        expected[i, int(position) - 1] = value
    for j, value in enumerate(q):
        expected[len(p) + j, int(kappa) - 2] = value
    return (np.array_equal(x.numpy(), expected)
            and np.allclose(y.numpy(), p + q, rtol=1e-12, atol=1e-12))


def _oracle_flow(result, a0, b0, c0, x, y, **_):
    final = ssm.SSM(*(torch.from_numpy(np.ascontiguousarray(result[k][-1])) for k in "abc"))
    x, y = torch.as_tensor(np.asarray(x, dtype=float)), torch.as_tensor(np.asarray(y, dtype=float))
    loss = float(ssm.square_loss(final, x, y))
    return (np.isclose(loss, result.losses[-1], rtol=1e-9, atol=1e-14)
            and result.losses[-1] <= result.losses[0] * (1 + 1e-9) + 1e-14)


def cases() -> list[Case]:
    x = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=DT)
    return [
        Case("poisoning.appendix_a.appendix_a_teacher", ext.appendix_a_teacher,
             [P("d", 6, "int"), P("d_star", 3, "int")], oracle=_oracle_teacher),
        Case("poisoning.appendix_a.scaled_copies_set", ext.scaled_copies_set,
             [P("d", 5, "int"), P("kappa", 6, "int"), P("p", [3.0, -1.0], "seq"),
              P("q", [1.0, 2.0], "seq"), P("position", 2, "int", True)],
             oracle=_oracle_copies),
        Case("poisoning.appendix_a.ssm_flow", ext.ssm_flow,
             [P("a0", torch.tensor([0.3, 0.1], dtype=DT), "tensor"),
              P("b0", torch.tensor([1.0, 1.0], dtype=DT), "tensor"),
              P("c0", torch.tensor([1.0, 0.5], dtype=DT), "tensor"),
              P("x", x, "tensor"), P("y", torch.tensor([1.0, 1.0], dtype=DT), "tensor"),
              P("horizon", 10.0, "float", True), P("eta", 0.5, "float", True),
              P("points", 3, "int", True)],
             oracle=_oracle_flow, examples=6),
    ]
