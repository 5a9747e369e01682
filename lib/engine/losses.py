"""Losses more than one part of the library computes.

:func:`per_run_cross_entropy`: the mean cross-entropy of each of R independent runs on its own
batch, the one per-run loss of every victim family of gradient matching (S4D, the MLP of the
positive control, the frozen-feature head).
"""

from __future__ import annotations

import torch

# not in the API page (no reader calls it): the victims' public functions check its input first
__all__: list[str] = []


def per_run_cross_entropy(out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of each run on its own batch: logits (R, B, K), labels (R, B) → (R,).

    The one per-run loss of every victim family (:mod:`lib.poisoning.mlp_victim`, :class:`lib.
    poisoning.gradient_matching.Victim`): the runs' losses are summed for training, so each run's
    gradient is its own."""
    r, b, k = out.shape
    ce = torch.nn.functional.cross_entropy(
        out.reshape(r * b, k), labels.reshape(r * b), reduction="none"
    )
    return ce.reshape(r, b).mean(-1)
