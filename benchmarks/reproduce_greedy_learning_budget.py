"""The clean arm of Figure 3's standalone runs in the authors' protocol, run to the authors' own
step budget (see benchmarks/reproduce.py; it writes book/results/greedy-learning-budget.json).

``reproduce_greedy_learning``'s ``authors_streams`` runs the left half of the paper's Figure 3
(``lib.poisoning.greedy_learning.FIGURE3``: the standalone SSM, κ = 10, d = 20) from the authors'
random streams on 32 fresh seeds (5000–5031), clean and with special sequences, and stops each run
at the chapter's cut-off of 200 000 steps. Every special run fits well within that cut-off, but 21
of the 32 clean runs do not, so the chapter's all-runs test of Figures 11 and 12 scores them at a
state the authors' protocol never records. Here the same clean runs go on to the authors'
notebooks' budget (``epochs = int(1e6)``): each ends where their protocol ends it, at the stopping
loss (then their extra steps) or after 1 000 000 steps, and the chapter's test can be made at the
authors' own stop.

Design fixed before the run (2 Dec 2026): the chapter repeats its one-sided Mann–Whitney test of
the final effective rank (special > clean, all runs, 5 % level) with these clean runs in place of
the cut-off ones and the committed special runs unchanged, and files it in the paper's setting; it
also checks that the runs that fit within the cut-off fit at the same step here (the same
arithmetic up to the stop). Nothing is tuned on these runs; the settings are ``FIGURE3``'s.
"""

from __future__ import annotations

from reproduce_greedy_learning import AUTHORS_EPOCHS, AUTHORS_STREAM_SEEDS, authors_streams


def _paths(seed: int) -> tuple:
    return (("authors_streams_full", "clean", AUTHORS_STREAM_SEEDS.index(seed)),)


def tasks() -> list:
    """One task per seed: a clean run that never fits takes all 1 000 000 compiled steps (about a
    second of one core)."""
    from tasks import Task

    return [Task(f"authors streams clean to their budget seed={seed}", authors_streams,
                 {"seed": seed, "budget": "authors"}, 2.0, _paths(seed))
            for seed in AUTHORS_STREAM_SEEDS]  # fmt: skip


def finish(results: dict) -> dict:
    return {
        "results": results,
        "settings": {"setting": "lib.poisoning.greedy_learning.FIGURE3", "streams": "authors",
                     "max_steps": AUTHORS_EPOCHS, "arm": "clean"},
        "seeds": {"authors_streams_full": AUTHORS_STREAM_SEEDS},
    }
