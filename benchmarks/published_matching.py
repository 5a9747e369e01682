"""The published gradient-matching brew, transcribed step by step, to set beside ``lib``'s.

Geiping et al. 2021 ("Witches' Brew") published the code that Slutzky et al. 2025 ran for their
Table 2 (``JonasGeiping/poisoning-gradient-matching``). This module follows that code's brewing
loop for one network and one process, in this book's data units, so that the attack of
:mod:`lib.poisoning.gradient_matching` can be run beside it on the same victim, the same targets
and the same poison images. It is written anew from a reading of these parts of their code (their
defaults in brackets):

* ``forest/witchcoven/witch_base.py``: ``_brew`` (the best of ``restarts`` trials [8] by the
  trial's last target loss), ``_initialize_brew`` (the target gradient g_t of the mean
  cross-entropy of the targets towards the intended class, and its norm; the step τ₀ = τ ·
  pbatch/512 / ensemble for signed Adam, "rule 2" [τ = 0.1, pbatch = 512, ensemble = 1]),
  ``_run_trial`` (``attackiter`` steps [250]; Adam on δ fed the sign of δ's gradient; MultiStepLR
  ×0.1 at ``attackiter // 2.667``, ``// 1.6``, ``// 1.142``; after each step δ clamped to the
  ε-box, then to the data range) and ``_batched_step`` (the poisons x + δ, *augmented* when
  ``paugment`` [on], then the closure);
* ``forest/witchcoven/witch_matching.py``: ``_define_objective`` (the poisons' mean cross-entropy
  with their own labels, its gradient g_p with respect to every parameter, kept differentiable)
  and ``_passenger_loss`` for ``loss = "similarity"`` [the default]:

      ℳ = 1 − Σ_k ⟨g_t,k, g_p,k⟩ / (‖g_t‖ ‖g_p‖),

  summed over the parameter tensors k, with ‖·‖ the norm over all of them (Geiping et al. 2021,
  eq. (3));
* ``forest/data/kettle.py``: ``initialize_poison`` ("randn" [default]: ε · N(0, 1), clamped to the
  ε-box, *not* projected into the data range before the first step);
* ``forest/data/diff_data_augmentation.py``: ``RandomTransform``, the differentiable augmentation
  of the poisons while brewing: each image shifted by a uniform random amount, in both directions,
  of at most ``shift`` grid steps of an image of ``size`` pixels (bilinear resampling,
  ``align_corners=True``), and mirrored left-right with probability 1/2. Their MNIST setting (28
  pixels, shift 4) is the one nearest the digits; at 8 pixels it gives shift = 1 (a shift of at
  most 1/7 of the half-width, half a pixel).

What is left out, because it does nothing for one network on one process: distributed
synchronization, the ``repel``, ``centreg`` and ``normreg`` terms (0 by default), batches of
poisons (the budget here is below ``pbatch``, so all poisons are one batch), and ``step``
(retraining the surrogate while brewing, off by default).

The differences from ``lib.poisoning.gradient_matching.brew`` with ``step_rule="authors"``, each
an argument here, so that :func:`brew` can be run both as published and as ``lib`` runs it (a test
checks that it then gives ``lib``'s poisons):

1. ``paugment``: ``lib`` does not augment;
2. ``project_start``: ``lib`` projects the random start into the data range before the first step;
3. ``select``: ``lib`` keeps the trial with the lowest ℳ *after* its last step (``"final"``); the
   published loop keeps the lowest ℳ *evaluated during* its last step, before the update
   (``"last_step"``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from lib.engine.losses import per_run_cross_entropy

Logits = Callable[[dict[str, torch.Tensor], torch.Tensor], torch.Tensor]


def passenger_loss(g_p: list[torch.Tensor], g_t: list[torch.Tensor],
                   g_t_norm: torch.Tensor) -> torch.Tensor:
    """``_passenger_loss`` for ``loss="similarity"``: 1 − Σ_k ⟨g_t,k, g_p,k⟩ / (‖g_t‖ ‖g_p‖)."""
    loss = -sum((t * p).sum() for t, p in zip(g_t, g_p, strict=True)) / g_t_norm
    return 1 + loss / torch.sqrt(sum((p * p).sum() for p in g_p))


def shift_and_flip(images: torch.Tensor, size: int, shift: int, generator: torch.Generator,
                   fliplr: bool = True) -> torch.Tensor:
    """``RandomTransform``: (P, size·size) images, each resampled on a grid shifted by
    (u − 1/2) · 2 · s in each direction (u uniform, s = ``linspace(0, 1, size)[shift]``, in the
    grid's [−1, 1] units) and, where a third uniform exceeds 1/2, mirrored left-right."""
    n = len(images)
    x = images.reshape(n, 1, size, size)
    u = torch.rand(n, 4, generator=generator, dtype=x.dtype)
    line = torch.linspace(-1, 1, size, dtype=x.dtype)
    grid = torch.stack(torch.meshgrid(line, line, indexing="xy"), dim=-1)  # (size, size, (x, y))
    grid = grid.expand(n, size, size, 2).clone()
    step = torch.linspace(0, 1, size, dtype=x.dtype)[shift]
    grid[..., 0] += ((u[:, 0] - 0.5) * 2 * step)[:, None, None]
    grid[..., 1] += ((u[:, 1] - 0.5) * 2 * step)[:, None, None]
    if fliplr:
        grid[u[:, 2] > 0.5, :, :, 0] *= -1
    out = torch.nn.functional.grid_sample(x, grid, mode="bilinear", align_corners=True)
    return out.reshape(n, size * size)


def target_gradient(logits: Logits, params: dict[str, torch.Tensor], x_target: torch.Tensor,
                    intended: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``_initialize_brew``: g_t = ∇_θ of the targets' mean cross-entropy towards ``intended``,
    and ‖g_t‖ over every parameter tensor."""
    leaves = [p.detach().requires_grad_() for p in params.values()]
    loss = per_run_cross_entropy(logits(dict(zip(params, leaves, strict=True)),
                                        x_target[None, None]), intended[None]).sum()
    g_t = [g.detach() for g in torch.autograd.grad(loss, leaves)]
    return g_t, torch.sqrt(sum((g * g).sum() for g in g_t))


def brew(logits: Logits, params: dict[str, torch.Tensor], x_target: torch.Tensor,
         intended: int, poisons: torch.Tensor, labels: torch.Tensor, eps: float,
         data_range: tuple[float, float], *, steps: int = 250, restarts: int = 8,
         tau: float = 0.1, paugment: bool = True, image_size: int = 8, shift: int = 1,
         project_start: bool = False, select: str = "last_step", starts: torch.Tensor | None = None,
         seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The published brew against one network (``params``: one run, leading axis 1, of the family
    whose forward pass is ``logits``) for one target ``x_target`` (L,) and class ``intended``, with
    ``poisons`` (P, L) of ``labels`` (P,) in the data range ``(lo, hi)``, bound ε.

    ``starts`` (restarts, P, L), if given, replaces the random starts (the test gives both brews
    the same). Returns the chosen δ (P, L) and every trial's score (restarts,).
    """
    lo, hi = data_range
    generator = torch.Generator().manual_seed(seed)
    g_t, g_t_norm = target_gradient(logits, params, x_target, torch.tensor([intended]))
    leaves = {k: v.detach().requires_grad_() for k, v in params.items()}
    tau0 = tau * (512 / 512) / 1  # rule 2: τ · pbatch / 512 / ensemble, at their defaults
    milestones = [steps // 2.667, steps // 1.6, steps // 1.142]
    trials, scores = [], torch.empty(restarts, dtype=poisons.dtype)
    for trial in range(restarts):
        if starts is None:
            delta = torch.randn(poisons.shape, generator=generator, dtype=poisons.dtype) * eps
            delta = delta.clamp(-eps, eps)
        else:
            delta = starts[trial].clone()
        if project_start:
            delta = torch.maximum(torch.minimum(delta, hi - poisons), lo - poisons)
        delta.requires_grad_()
        optimizer = torch.optim.Adam([delta], lr=tau0, weight_decay=0)
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones,
                                                         gamma=0.1)
        delta.grad = torch.zeros_like(delta)
        for _ in range(steps):
            inputs = poisons + delta
            if paugment:
                inputs = shift_and_flip(inputs, image_size, shift, generator)
            loss = per_run_cross_entropy(logits(leaves, inputs[None]), labels[None]).sum()
            g_p = torch.autograd.grad(loss, list(leaves.values()), create_graph=True)
            matching = passenger_loss(list(g_p), g_t, g_t_norm)
            (grad,) = torch.autograd.grad(matching, [delta])
            delta.grad = grad.sign()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=False)
            with torch.no_grad():
                delta.copy_(delta.clamp(-eps, eps))
                delta.copy_(torch.maximum(torch.minimum(delta, hi - poisons), lo - poisons))
            last = float(matching.detach())
        if select == "final":
            inputs = poisons + delta.detach()
            loss = per_run_cross_entropy(logits(leaves, inputs[None]), labels[None]).sum()
            g_p = torch.autograd.grad(loss, list(leaves.values()))
            last = float(passenger_loss(list(g_p), g_t, g_t_norm))
        elif select != "last_step":
            raise ValueError(f"select must be 'last_step' or 'final', got {select!r}")
        trials.append(delta.detach())
        scores[trial] = last
    return trials[int(torch.argmin(scores))], scores
