"""Figure 2 (left) in the authors' code's protocol, trained far past the authors' stop (see
benchmarks/reproduce.py; it writes book/results/dynamical-characterization.json).

The dynamical-characterization chapter runs the standalone SSM of the paper's Figure 2
(``lib.poisoning.greedy_learning.FIGURE2``: d = 10, κ = 6) from the authors' random streams on its
64 seeds and stops each run as the authors' code does: at the stopping loss 0.01, then
``FIGURE2.extra_steps`` = 5 000 more steps. At that stop the special sequences raise the error
over 40 entries of the impulse response. A referee's rerun found that the same runs, continued,
reverse the contrast: the error of the clean arm barely moves while that of the special arm falls.
Here every run goes on for ``EXTRA_STEPS`` = 395 000 steps past the stopping loss instead of
5 000, all else as in the chapter, and the final state of each arm is recorded.

Design fixed before the run (2 Dec 2026): the chapter repeats, on these runs, its two-sided
paired sign test of the error over 40 entries (special against clean, the seeds where both arms
reach the stopping loss, 5 % level) and its comparison of the final effective ranks, and reports
the medians beside those at the authors' stop; nothing is tuned on these runs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from lib.poisoning import dynamics as poison_dynamics
from lib.poisoning import greedy_learning

SEEDS = list(range(64))  # the chapter's seeds
EXTRA_STEPS = 395_000  # steps past the stopping loss, in place of the authors' 5 000
MAX_STEPS = 2_000_000  # a cap no run reaches before its extra steps end (the fit comes first)


def continued(seed: int) -> dict:
    """Both arms of one seed, continued ``EXTRA_STEPS`` past the stopping loss: per arm, the step
    at which the loss first falls below it, the steps run, the error over 40 entries
    max_k |h_k - 1| (k < 40), the final effective rank of A and the final loss."""
    seed = int(seed)
    if seed not in SEEDS:
        raise ValueError(f"seed must be one of the chapter's seeds 0-{SEEDS[-1]}, got {seed}")
    setting = dataclasses.replace(greedy_learning.FIGURE2, extra_steps=EXTRA_STEPS)
    runs = greedy_learning.train_greedy(setting, [seed], streams="authors", max_steps=MAX_STEPS)
    out = {}
    for arm, scale in (("clean", None), ("special", 1.0)):
        r = runs.index(seed, scale)
        final = {k: torch.from_numpy(np.asarray(runs.trajectory[k][-1, r])) for k in "abc"}
        error = (poison_dynamics.impulse_response(final["a"], final["b"], final["c"], 40) - 1)
        out[("continued", arm, SEEDS.index(seed))] = {
            "seed": seed,
            "fit_step": runs.trajectory.info["converged_step"][r],
            "steps_run": int(runs.trajectory.info["steps_run"][r]),
            "gen40": float(error.abs().max()),
            "erank": float(runs.effective_ranks(r)[-1]),
            "final_loss": float(runs.trajectory.losses[runs.active(r), r][-1]),
        }
    return out


def tasks() -> list:
    """One task per seed (both arms): about half a second of compiled steps."""
    from tasks import Task

    return [Task(f"figure 2 continued seed={seed}", continued, {"seed": seed}, 2.0,
                 tuple(("continued", arm, SEEDS.index(seed)) for arm in ("clean", "special")))
            for seed in SEEDS]  # fmt: skip


def finish(results: dict) -> dict:
    return {
        "results": results,
        "settings": {"setting": "lib.poisoning.greedy_learning.FIGURE2", "streams": "authors",
                     "extra_steps": EXTRA_STEPS, "max_steps": MAX_STEPS,
                     "authors_extra_steps": greedy_learning.FIGURE2.extra_steps},
        "seeds": {"continued": SEEDS},
    }
