"""Table 1, row 3 (SSM + ReLU network) over seeds 0–7 under three variants of the protocol.

The poisoning-in-practice chapter quotes these numbers beside the four seeds it runs:

- ``authors``: the library's setting, Adam in TensorFlow's form (ε = 1e-7 on the uncorrected √v),
  independent N(0, σ²) draws for every parameter;
- ``pytorch``: the same with PyTorch's Adam (ε = 1e-8 on the bias-corrected √v̂);
- ``correlated``: the authors' Adam and the correlation of their initialization. TensorFlow's
  seeded initializers are stateless, so with one seed for every layer each tensor receives the
  *first* numbers of one and the same normal stream: B and C get the same numbers (C in reverse
  order, after the authors' flip), A's diagonal is read off a d×d block of that stream, and the
  three network layers share their leading entries.

Run with ``.venv/bin/python benchmarks/row3_variants.py [max_steps]`` (about five minutes on one
core for the default 100 000 steps). Prints one Markdown table.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.poisoning import authors_protocol  # noqa: E402
from lib.poisoning import dynamics as poison_dynamics

SEEDS = list(range(8))


# The authors' initialization with TensorFlow's shared stateless stream (see module doc).
correlated_init = authors_protocol.authors_init


def run_variant(name: str, max_steps: int) -> list[list]:
    setting = poison_dynamics.TABLE1_ROW3
    if name == "pytorch":
        setting = dataclasses.replace(setting, adam_form="torch", adam_eps=1e-8)
    original = poison_dynamics.dynamics_init
    if name == "correlated":
        poison_dynamics.dynamics_init = correlated_init
    try:
        runs = poison_dynamics.train_dynamics(
            setting, SEEDS, max_steps=max_steps, record_every=1000
        )
    finally:
        poison_dynamics.dynamics_init = original
    errors = poison_dynamics.relative_test_error(runs).reshape(len(SEEDS), 2)
    steps = np.array(runs.trajectory.info["converged_step"], dtype=object).reshape(len(SEEDS), 2)
    top = np.sort(np.abs(runs.trajectory.final["a"].numpy()), axis=-1)[:, ::-1]
    rows = []
    for i, seed in enumerate(SEEDS):
        second = top[2 * i, 1]
        rows.append([name, seed, steps[i, 0], f"{second:.3f}", errors[i, 0], errors[i, 1]])
    fitted = steps[:, 0] != None  # noqa: E711 (element-wise on an object array)
    rows.append(
        [
            name,
            "median",
            f"{(~fitted).sum()} stalled",
            "",
            np.median(errors[fitted, 0]),
            np.median(errors[:, 1]),
        ]
    )
    return rows


def main() -> int:
    max_steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    print(f"Table 1, row 3; seeds {SEEDS[0]}–{SEEDS[-1]}; at most {max_steps} Adam steps\n")
    print(
        "| variant | seed | clean fits at step | 2nd largest clean abs(a_j) "
        "| clean error | poisoned error |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for name in ("authors", "pytorch", "correlated"):
        start = time.perf_counter()
        for row in run_variant(name, max_steps):
            cells = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in row]
            print("| " + " | ".join(cells) + " |")
        print(f"<!-- {name}: {time.perf_counter() - start:.0f} s -->", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
