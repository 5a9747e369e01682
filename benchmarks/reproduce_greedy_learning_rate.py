"""The base-rate control of the greedy-learning chapter's Figures 13–15 tests at κ = 6, run to the
authors' step budget (see benchmarks/reproduce.py; it writes
book/results/greedy-learning-rate.json).

At κ = 6 the paper's Table 7 gives the clean and the special arm different base rates (0.01 and
0.001), so the chapter reruns the clean arm at the special arm's rate to see whether the
effective-rank difference survives. At a tenth of the rate a clean run needs up to ten times the
steps, and the chapter's own cut-off (100 000 steps, a tenth of the authors' budget) stops many of
them before they fit; counting those against the claim then undoes it. Here the same rate-matched
clean runs (lib.poisoning.greedy_learning.FIGURE4_SHORT, FIGURE5_SHORT, FIGURE6_SHORT with
``lr_clean = lr_special``; the chapter's 32 seeds) go on to the authors' notebooks' budget of
1 000 000 steps, so each ends where the authors' protocol would end it.

Design fixed before the run (2 Dec 2026): the chapter repeats its one-sided Mann–Whitney test
(special > clean, final effective rank) with these runs, over the runs that fit and with the runs
that do not fit counted against the claim, at the 5 % level; nothing is tuned on these runs.
"""

from __future__ import annotations

import dataclasses

from reproduce_greedy_learning import AUTHORS_EPOCHS

from lib.poisoning import greedy_learning

SEEDS = list(range(32))
SETTINGS = {f"Figure {figure}, κ = 6": f"FIGURE{figure}_SHORT" for figure in (4, 5, 6)}


def rate_matched(name: str, seed: int) -> dict:
    """The clean run of setting ``name`` at the special arm's base rate, to the authors' budget:
    the step at which the loss falls below the threshold (None if it never does), the steps run,
    the final effective rank of A and the final loss."""
    if name not in SETTINGS:
        raise ValueError(f"name must be one of {sorted(SETTINGS)}, got {name!r}")
    setting = getattr(greedy_learning, SETTINGS[name])
    matched = dataclasses.replace(setting, lr_clean=setting.lr_special)
    runs = greedy_learning.train_greedy(matched, [seed], special_scales=(None,),
                                        max_steps=AUTHORS_EPOCHS)  # fmt: skip
    info = runs.trajectory.info
    return {("rate_matched", name, SEEDS.index(seed)): {
        "seed": seed, "fit_step": info["converged_step"][0], "steps_run": int(info["steps_run"][0]),
        "erank": float(runs.effective_ranks(0)[-1]),
        "final_loss": float(runs.trajectory.losses[-1, 0]),
    }}  # fmt: skip


def tasks() -> list:
    """One task per (setting, seed): a run that never fits takes all 1 000 000 compiled steps."""
    from tasks import Task

    return [Task(f"rate matched {name} seed={seed}", rate_matched, {"name": name, "seed": seed},
                 2.0, (("rate_matched", name, SEEDS.index(seed)),))
            for name in SETTINGS for seed in SEEDS]  # fmt: skip


def finish(results: dict) -> dict:
    return {
        "results": results,
        "settings": {"settings": SETTINGS, "lr_clean": "the setting's lr_special",
                     "max_steps": AUTHORS_EPOCHS, "arm": "clean"},
        "seeds": {"rate_matched": SEEDS},
    }
