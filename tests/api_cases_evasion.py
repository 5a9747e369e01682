"""Cases of :mod:`lib.poisoning.evasion` for the bad-input fuzz (``cases()``, see
``tests/api_cases.py``).

The oracle recomputes what an answer must satisfy, with the victim's own logits: the returned δ lies
in the ε-box and the data range, the margin it reports is (E.1) at x + δ and no smaller than at x,
and success means a positive margin.
"""

from __future__ import annotations

import numpy as np
import torch
from api_cases import Arg, Case
from api_cases_s4d_viz import MLP_TINY, _mlp_params, _mlp_victim

from lib.poisoning import evasion, mlp_victim

P = Arg  # short
DT = torch.float64
RANGE = (-1.0, 1.0)


def _margins(params, x, adversarial) -> np.ndarray:
    z = mlp_victim.logits(params, x[None])[0]
    idx = torch.as_tensor(np.asarray(adversarial, dtype=np.int64))
    chosen = z[torch.arange(len(idx)), idx]
    z = z.clone()
    z[torch.arange(len(idx)), idx] = -torch.inf
    return (chosen - z.amax(-1)).detach().numpy()


def _oracle(result, victim, params, x, labels, adversarial, eps, data_range, **_):
    x = torch.as_tensor(np.asarray(x, dtype=float))
    lo, hi = (float(v) for v in data_range)
    delta = result["delta"][0]
    inside = (float(delta.abs().max()) <= float(eps) * (1 + 1e-12)
              and float((x + delta).min()) >= lo - 1e-12 and float((x + delta).max()) <= hi + 1e-12)
    at_delta = _margins(params, x + delta, adversarial)
    at_x = _margins(params, x, adversarial)
    margin = result["margin"][0]
    return (inside and np.allclose(margin, at_delta, rtol=1e-9, atol=1e-12)
            and (margin >= at_x - 1e-12).all()
            and (result["success"][0] == (margin > 0)).all())


def cases() -> list[Case]:
    g = torch.Generator().manual_seed(5)
    x = torch.rand(4, MLP_TINY.inputs, generator=g, dtype=DT) * 2 - 1
    labels = torch.tensor([0, 1, 2, 0])
    return [
        Case("poisoning.evasion.targeted_evasion", evasion.targeted_evasion,
             [P("victim", _mlp_victim(), "object"), P("params", _mlp_params(), "params"),
              P("x", x, "tensor"), P("labels", labels, "tensor"),
              P("adversarial", torch.tensor([1, 2, 0, 2]), "tensor"), P("eps", 0.3, "float"),
              P("data_range", RANGE, "object"), P("steps", 6, "int", True),
              P("step", 0.1, "float", True)],
             oracle=_oracle, examples=6),
    ]
