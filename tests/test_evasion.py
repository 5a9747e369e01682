"""lib.poisoning.evasion: targeted PGD against an oracle (a linear victim, whose best perturbation
is known in closed form), its box, and the rejection of bad input."""

import numpy as np
import pytest
import torch

from lib.poisoning import evasion
from lib.poisoning import gradient_matching as gm

DT = torch.float64
LO, HI = 0.0, 1.0


def linear_victim(w: torch.Tensor, b: torch.Tensor) -> tuple[gm.Victim, dict]:
    """logits = x Wᵀ + b (one run), as a Victim."""

    def logits(params, x):
        return x @ params["w"].transpose(1, 2) + params["b"][:, None, :]

    victim = gm.Victim("linear", init=lambda s: {}, logits=logits, train=lambda *a: {})
    return victim, {"w": w[None], "b": b[None]}


def best_margin(w, b, x, y, c, eps):
    """The maximum of (E.1) over the box (E.2) for two classes: each coordinate moves by ε in the
    direction of (w_c − w_y)_i, clipped to the data range."""
    d = w[c] - w[y]
    step = torch.where(d > 0, torch.clamp(HI - x, max=eps), torch.clamp(LO - x, min=-eps))
    step = torch.where(d == 0, torch.zeros_like(step), step)
    return (d * (x + step)).sum(-1) + (b[c] - b[y])


def test_pgd_reaches_the_exact_optimum_of_a_linear_two_class_victim():
    g = torch.Generator().manual_seed(0)
    n, length = 200, 16
    w, b = torch.randn(2, length, generator=g, dtype=DT), torch.randn(2, generator=g, dtype=DT)
    x = torch.rand(n, length, generator=g, dtype=DT)  # many coordinates near the box's faces
    y = (x @ w.T + b).argmax(-1)  # the clean prediction as the label
    c = 1 - y
    eps = 0.15
    victim, params = linear_victim(w, b)
    out = evasion.targeted_evasion(victim, params, x, y, c, eps, (LO, HI), steps=40)
    exact = torch.stack([best_margin(w, b, x[i], int(y[i]), int(c[i]), eps) for i in range(n)])
    # 20 coarse steps of 0.1 eps reach every corner of the box; the margins are sums of 16
    # float64 products (rounding ~1e-15)
    np.testing.assert_allclose(out["margin"][0], exact.numpy(), rtol=1e-10, atol=1e-10)
    clear = exact.abs() > 1e-9
    assert (out["success"][0][clear] == (exact[clear] > 0).numpy()).all()
    assert 0 < out["success"].sum() < n  # the case tells successes from failures
    assert out["clean_correct"].all()
    delta = out["delta"][0]
    assert float(delta.abs().max()) <= eps + 1e-12
    assert float((x + delta).min()) >= LO - 1e-12 and float((x + delta).max()) <= HI + 1e-12


def test_a_larger_eps_reaches_at_least_as_far():
    g = torch.Generator().manual_seed(1)
    w, b = torch.randn(4, 8, generator=g, dtype=DT), torch.randn(4, generator=g, dtype=DT)
    x = torch.rand(60, 8, generator=g, dtype=DT)
    y = (x @ w.T + b).argmax(-1)
    c = (y + 1) % 4
    victim, params = linear_victim(w, b)
    small = evasion.targeted_evasion(victim, params, x, y, c, 0.05, (LO, HI))
    large = evasion.targeted_evasion(victim, params, x, y, c, 0.5, (LO, HI))
    assert (large["margin"] >= small["margin"] - 1e-12).all()
    assert large["success"].sum() > small["success"].sum()


def test_runs_are_attacked_separately():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(2, 2, 6, generator=g, dtype=DT)
    b = torch.zeros(2, 2, dtype=DT)
    x = torch.rand(10, 6, generator=g, dtype=DT)
    y = (x @ w[0].T).argmax(-1)

    def logits(params, v):
        return v @ params["w"].transpose(1, 2) + params["b"][:, None, :]

    victim = gm.Victim("linear", init=lambda s: {}, logits=logits, train=lambda *a: {})
    both = evasion.targeted_evasion(victim, {"w": w, "b": b}, x, y, 1 - y, 0.2, (LO, HI))
    for r in range(2):
        alone = evasion.targeted_evasion(victim, {"w": w[r:r + 1], "b": b[r:r + 1]}, x, y,
                                         1 - y, 0.2, (LO, HI))
        np.testing.assert_allclose(both["margin"][r], alone["margin"][0], rtol=1e-12)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"eps": 0.0}, "eps"),
        ({"eps": 2.0}, "at most the data range"),
        ({"data_range": (0.0, 0.5)}, "inside data_range"),
        ({"adversarial": "same"}, "a targeted attack needs another class"),
        ({"adversarial": "big"}, "victim's classes"),
        ({"steps": 1}, "steps"),
        ({"step": 0.0}, "step"),
        ({"step": 1.5}, "step"),
        ({"labels": "short"}, "labels"),
        ({"params": "two sizes"}, "runs"),
        ({"victim": "not a victim"}, "Victim"),
    ],
)
def test_bad_input_is_a_value_error(change, match):
    g = torch.Generator().manual_seed(3)
    w, b = torch.randn(2, 4, generator=g, dtype=DT), torch.zeros(2, dtype=DT)
    x = torch.rand(5, 4, generator=g, dtype=DT)
    y = torch.zeros(5, dtype=torch.int64)
    victim, params = linear_victim(w, b)
    args = {"victim": victim, "params": params, "x": x, "labels": y,
            "adversarial": torch.ones(5, dtype=torch.int64), "eps": 0.1,
            "data_range": (LO, HI), "steps": 10, "step": 0.1}
    special = {"same": y.clone(), "big": torch.full((5,), 7), "short": y[:3],
               "two sizes": {"w": params["w"], "b": torch.zeros(2, 2, dtype=DT)}}
    for k, v in change.items():
        args[k] = special.get(v, v) if isinstance(v, str) and v in special else v
    with pytest.raises(ValueError, match=match):
        evasion.targeted_evasion(args.pop("victim"), args.pop("params"), args.pop("x"),
                                 args.pop("labels"), args.pop("adversarial"), args.pop("eps"),
                                 args.pop("data_range"), **args)
