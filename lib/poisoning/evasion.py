"""A targeted evasion attack: how far a perturbation budget ε reaches on given data and victims.

A clean-label poison moves a victim at a target *through other images*: the victim is retrained on
perturbed images of the adversarial class and must then misclassify the target. An evasion attack
perturbs the target itself, against a fixed network. Its success at a given ε measures the data's
adversarial scale for that network, the yardstick that says whether an ε is small or large for a
data set (a relative share of the pixel range does not: the same share can be easy on one data set
and hard on another). It is not a bound on poisoning: a poisoned network may misclassify a target
that no ε-perturbation of it moves.

The attack is projected gradient ascent (PGD; Madry et al. 2018) with signed
steps on the targeted margin

    m_c(x) = z_c(x) − max_{j ≠ c} z_j(x),                                    (E.1)

where z are the victim's logits and c the adversarial class, over the box

    ‖δ‖_∞ ≤ ε,  lo ≤ x + δ ≤ hi:                                             (E.2)

    δ_0 = 0,  δ_{k+1} = Π(δ_k + α_k sign ∇_δ m_c(x + δ_k)),                   (E.3)

with Π the projection on (E.2) (coordinatewise clipping) and α_k = s·ε for the first half of the
steps, s·ε/5 for the rest (a coarse search, then a finer one). The attack succeeds on x when some
iterate is classified as c (m_c > 0); the margin reported is the largest over the iterates, and δ
the iterate that reached it. For a linear two-class victim (E.3) reaches the exact maximizer of
(E.1) over (E.2), δ_i = clip(ε sign(w_c − w_y)_i) (the test's oracle).
"""

from __future__ import annotations

import torch

from lib.engine.validation import as_float, as_int, as_labels
from lib.poisoning.gradient_matching import (
    Params,
    Victim,
    _check_box,
    _check_classes,
    _check_labels,
    _check_runs,
    _check_sequences,
    _check_victim,
)

__all__ = ["targeted_evasion"]

#: The second half of the steps is this many times finer than the first.
FINE_FACTOR = 5.0


def _margin(logits: torch.Tensor, adversarial: torch.Tensor) -> torch.Tensor:
    """(E.1) for logits (R, n, K) and adversarial classes (n,): z_c − max_{j≠c} z_j, (R, n)."""
    index = adversarial.expand(*logits.shape[:-1])[..., None]
    chosen = logits.gather(-1, index)[..., 0]
    others = logits.scatter(-1, index, float("-inf")).amax(-1)
    return chosen - others


def targeted_evasion(
    victim: Victim | None,
    params: Params,
    x,
    labels,
    adversarial,
    eps: float,
    data_range,
    *,
    steps: int = 200,
    step: float = 0.1,
) -> dict:
    """Targeted PGD (E.3) on each sequence x[i] (n, L) towards class ``adversarial[i]``.

    ``victim`` a :class:`~lib.poisoning.gradient_matching.Victim` (None: the default S4D family),
    ``params`` its R ≥ 1 runs, each attacked separately; ``labels`` the true classes (each
    adversarial class must differ from its label); ``eps`` the ℓ∞ bound, in (0, hi − lo];
    ``data_range`` (lo, hi), which x must lie in; ``steps`` ≥ 2 iterations, ``step`` s in (0, 1]
    the first half's step in units of ε.

    Returns a dict of numpy arrays of shape (R, n): ``success`` (some iterate classified as the
    adversarial class), ``margin`` (the largest (E.1) over the iterates, float64), ``clean_correct``
    (x itself classified as its label); and ``delta``, the (R, n, L) float64 perturbation that
    reached the margin.
    """
    victim = _check_victim(victim)
    runs = _check_runs(params)
    x = _check_sequences(x, "x")
    labels = _check_labels(x, labels, "labels")
    adversarial = as_labels(adversarial, "adversarial", (x.shape[0],), None)
    if bool((adversarial == labels).any()):
        i = int(torch.nonzero(adversarial == labels)[0, 0])
        raise ValueError(f"adversarial[{i}] equals labels[{i}] = {int(labels[i])}: a targeted "
                         "attack needs another class")
    eps, lo, hi = _check_box(eps, data_range, x, "x")
    steps = as_int(steps, "steps", minimum=2)
    step = as_float(step, "step", minimum=0.0, maximum=1.0, open_minimum=True)

    base = x.to(victim.dtype).expand(runs, *x.shape)
    with torch.no_grad():
        clean = victim._checked_logits(params, base)
    _check_classes({"labels": labels, "adversarial": adversarial}, clean.shape[-1])
    best = _margin(clean, adversarial).to(torch.float64)
    best_delta = torch.zeros(runs, *x.shape, dtype=torch.float64)
    delta = torch.zeros_like(base)
    for k in range(steps):
        alpha = step * eps / (1.0 if k < steps // 2 else FINE_FACTOR)
        delta.requires_grad_(True)
        margin = _margin(victim.logits(params, base + delta), adversarial)
        (grad,) = torch.autograd.grad(margin.sum(), delta)
        with torch.no_grad():
            delta = delta + alpha * grad.sign()
            delta = torch.minimum(torch.maximum(delta, (lo - base).clamp(min=-eps)),
                                  (hi - base).clamp(max=eps))
            now = _margin(victim._checked_logits(params, base + delta),
                                  adversarial).to(torch.float64)
            better = now > best
            best = torch.where(better, now, best)
            best_delta[better] = delta[better].to(torch.float64)
    return {
        "success": (best > 0).numpy(),
        "margin": best.numpy(),
        "clean_correct": (clean.argmax(-1) == labels).numpy(),
        "delta": best_delta,
    }

