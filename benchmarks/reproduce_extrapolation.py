"""The long runs behind the extrapolation chapter (see benchmarks/reproduce.py).

The chapter computes its threshold sweep (gradient flow and Adam, 32 seeds per length) live. What
it quotes from here is the delay teacher at a long budget: the delay teacher (d* = 6) and
dense students (d = 30) trained by Adam (lr 1e-3) on the population loss for 50 000 steps (the
paper's cap; the paper stopped early, most runs before 10 000 steps, and used the empirical loss,
d̂ = 10 and d = 50), for κ in {6, 8, 10, 11, 12, 14} and 8 seeds (about 18 s of CPU with the
compiled Adam loop of lib.fast_extrapolation, beyond the chapter's share of its minute;
``BOOK_SCALE=full`` runs the same experiment live).
"""

from __future__ import annotations

import numpy as np

from lib import extrapolation as ex

DELAY, D_DENSE, DELAY_INIT = 6, 30, 0.05
DELAY_KS = [6, 8, 10, 11, 12, 14]
DELAY_SEEDS = list(range(8))
DELAY_STEPS = 50_000
HORIZON = 40


def delay_errors(steps: int, seeds: list[int]) -> np.ndarray:
    """Tail errors of dense students on the delay teacher, shape (len(DELAY_KS), len(seeds))."""
    w_delay = ex.linear_rnn_response(*ex.delay_teacher(DELAY), HORIZON)
    pairs = [(k, seed) for k in DELAY_KS for seed in seeds]
    trained = ex.train_adam(
        ex.general_descent_field(w_delay, [k for k, _ in pairs]),
        ex.general_init(D_DENSE, [s for _, s in pairs], init_scale=DELAY_INIT),
        len(pairs),
        lr=1e-3,
        steps=steps,
        record_every=steps,  # only the final students are read
    )
    f = trained.final
    h = ex.linear_rnn_response(f["A"], f["B"], f["C"], HORIZON)
    errors = [ex.tail_error(h[r], w_delay, k).item() for r, (k, _) in enumerate(pairs)]
    return np.array(errors).reshape(len(DELAY_KS), len(seeds))


def run() -> dict:
    return {
        "results": {"delay_errors": delay_errors(DELAY_STEPS, DELAY_SEEDS)},
        "settings": {
            "engine": "compiled (lib.fast_extrapolation)",
            "delay": {
                "d_star": DELAY,
                "d": D_DENSE,
                "init_scale": DELAY_INIT,
                "ks": DELAY_KS,
                "adam_steps": DELAY_STEPS,
                "lr": 1e-3,
                "horizon": HORIZON,
            },
            "array axes": "training length, seed",
        },
        "seeds": {"delay": DELAY_SEEDS},
    }
