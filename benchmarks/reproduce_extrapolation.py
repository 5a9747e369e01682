"""The long runs behind the extrapolation chapter (see benchmarks/reproduce.py).

Two experiments at the sizes of ``BOOK_SCALE=full``, which the chapter quotes at its default scale:

- the threshold sweep: balanced diagonal students (d = 40) trained by gradient flow to zero loss on
  the first κ entries of the teacher λ = (0.95, 0.6, −0.7), masses (0.4, 0.3, 0.3), for κ = 3…10
  and 32 seeds (a few hundredths of a second per flow with the compiled field of
  lib.fast_extrapolation, about 5 s in all);
- the delay teacher (d* = 6) and dense students (d = 30) trained by Adam (lr 1e-3) for the paper's
  50 000 steps, for κ in {6, 8, 10, 11, 12, 14} and 8 seeds (about 20 s on one core with the
  compiled Adam loop).
"""

from __future__ import annotations

import numpy as np

from lib import extrapolation as ex

EIGENVALUES, WEIGHTS = [0.95, 0.6, -0.7], [0.4, 0.3, 0.3]
D, HORIZON, INIT_SCALE = 40, 100, 1e-3
KS = [3, 4, 5, 6, 7, 8, 10]
SEEDS = list(range(32))
DELAY, D_DENSE, DELAY_INIT = 6, 30, 0.05
DELAY_KS = [6, 8, 10, 11, 12, 14]
DELAY_SEEDS = list(range(8))
DELAY_STEPS = 50_000


def delay_errors(steps: int, seeds: list[int]) -> np.ndarray:
    """Tail errors of dense students on the delay teacher, shape (len(DELAY_KS), len(seeds))."""
    w_delay = ex.linear_rnn_response(*ex.delay_teacher(DELAY), 40)
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
    h = ex.linear_rnn_response(f["A"], f["B"], f["C"], 40)
    errors = [ex.tail_error(h[r], w_delay, k).item() for r, (k, _) in enumerate(pairs)]
    return np.array(errors).reshape(len(DELAY_KS), len(seeds))


def run() -> dict:
    flow = ex.extrapolation_sweep(
        EIGENVALUES, WEIGHTS, KS, d=D, seeds=SEEDS, init_scale=INIT_SCALE, horizon=HORIZON
    )
    delay = delay_errors(DELAY_STEPS, DELAY_SEEDS)
    return {
        "results": {"flow_errors": flow, "delay_errors": delay},
        "settings": {
            "teacher": {"eigenvalues": EIGENVALUES, "weights": WEIGHTS},
            "d": D,
            "horizon": HORIZON,
            "init_scale": INIT_SCALE,
            "ks": KS,
            "flow": "gradient flow to t = 1e8 (lib.extrapolation.extrapolation_sweep)",
            "engine": "compiled (lib.fast_extrapolation)",
            "delay": {
                "d_star": DELAY,
                "d": D_DENSE,
                "init_scale": DELAY_INIT,
                "ks": DELAY_KS,
                "adam_steps": DELAY_STEPS,
                "lr": 1e-3,
            },
            "array axes": "training length, seed",
        },
        "seeds": {"flow": SEEDS, "delay": DELAY_SEEDS},
    }
