"""The long run behind the poisoning-theorem chapter (see benchmarks/reproduce.py).

The tie window of Theorem 1 (d = 10, κ = 7) over 32 seeds: the clean and poisoned normalized
errors Gen_20/d for two init scales and nine relative gaps between the two largest initial
entries. 18 pairs of exact flows per seed and init scale, about 0.15 s with the compiled flow
(lib.poison.theorem1_flow), some 10 s in all; the chapter runs the same sweep with a few seeds by
default, and over these 32 at BOOK_SCALE=full.
"""

from __future__ import annotations

from lib import poison

D, KAPPA = 10, 7
SEEDS = list(range(32))
INIT_SCALES = (1e-3, 1e-2)
RELATIVE_GAPS = (None, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8, 0.0)  # None: the random gap


def run() -> dict:
    window = poison.poisoning_window(
        D, KAPPA, SEEDS, init_scales=INIT_SCALES, relative_gaps=RELATIVE_GAPS
    )
    return {
        "results": {"window": {"clean": window["clean"], "poisoned": window["poisoned"]}},
        "settings": {
            "d": D,
            "kappa": KAPPA,
            "init_scales": INIT_SCALES,
            "relative_gaps": ["random" if g is None else g for g in RELATIVE_GAPS],
            "error": "Gen_20 / d of the limits of both flows (lib.poison.poisoning_window)",
            "array axes": "init scale, relative gap, seed",
        },
        "seeds": SEEDS,
    }
