"""Time one training step of the poisoning experiments: torch engine, compiled loop, a floor.

For the two hot paths of the book (a standalone diagonal SSM, Table 1 row 2; an SSM followed by a
two-hidden-layer ReLU MLP, Table 1 row 3), measured side by side in one run:

- *torch engine*: :func:`lib.engine.flow.gradient_descent` with the closed-form gradients, all runs
  advanced together (``train_dynamics(engine="torch")``);
- *compiled loop*: :mod:`lib.poisoning._dynamics_kernels`, the whole loop of each run compiled with
numba
  (``train_dynamics(engine="compiled")``, the default);
- *arithmetic floor*: the compiled loss-and-gradient kernel alone, called in a compiled loop with
  no optimizer, no stopping rule and no recording: what the model's arithmetic costs by itself.

Costs are per step of the whole batch of runs (R runs, as the chapters run them), in microseconds
of this process's CPU time (``time.process_time``): on an idle machine that is the wall-clock time,
and it stays so when other processes share the cores. Both engines run on one thread.
For scale: the authors' Keras loop (their TensorFlow 2.4 code, one run of Table 1 row 2) took about
129 ms per step in an earlier measurement on a 2-core machine of this class; it is not re-measured
here, because that code's pinned dependencies cannot be installed offline.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from numba import njit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.poisoning import dynamics as pdyn  # noqa: E402
from lib.poisoning._dynamics_kernels import _loss_and_gradient, work_size  # noqa: E402

AUTHORS_MS = 129.0  # the authors' Keras step on a 2-core machine (see the docstring)
CASES = [
    ("SSM (Table 1 row 2), 32 seeds x 2", pdyn.TABLE1_ROW2, 32),
    ("SSM + MLP (Table 1 row 3), 8 seeds x 2", pdyn.TABLE1_ROW3, 8),
]


@njit(cache=True)
def _floor_loop(theta, x, y, w, d, hidden, steps):
    grad = np.empty(theta.shape[0])
    work = np.empty(work_size(x.shape[0], x.shape[1], d, hidden))
    total = 0.0
    for _ in range(steps):
        total += _loss_and_gradient(theta, grad, x, y, w, d, hidden, work)
    return total


def _per_step_us(setting, seeds, engine, steps):
    never = replace(setting, stop_loss=0.0)  # no run stops early: every step is a full step
    pdyn.train_dynamics(never, seeds[:1], max_steps=2, engine=engine)  # compile / warm up
    start = time.process_time()
    pdyn.train_dynamics(never, seeds, max_steps=steps, record_every=steps, engine=engine)
    return (time.process_time() - start) / steps * 1e6


def _floor_us(setting, seeds, steps):
    runs = pdyn.train_dynamics(setting, seeds, max_steps=1, record_every=1)
    first = runs.trajectory.at(0)
    total = 0.0
    for r in range(len(runs.seeds)):
        theta = np.concatenate([first[k][r].reshape(-1).numpy() for k in first])
        n = runs.sizes[r]
        x, y, w = (np.ascontiguousarray(t[r, :n].numpy()) for t in (runs.x, runs.y, runs.weights))
        args = (theta, x, y, w, setting.d, setting.hidden or 0)
        _floor_loop(*args, 2)
        start = time.process_time()
        _floor_loop(*args, steps)
        total += time.process_time() - start
    return total / steps * 1e6


def run() -> list[tuple[str, float, float, float]]:
    rows = []
    for label, setting, n_seeds in CASES:
        seeds = list(range(n_seeds))
        old = _per_step_us(setting, seeds, "torch", 300)
        new = _per_step_us(setting, seeds, "compiled", 3000)
        floor = _floor_us(setting, seeds, 3000)
        rows.append((label, old, new, floor))
    return rows


def table(rows) -> str:
    lines = [
        "| training step (whole batch) | torch engine | compiled loop | arithmetic floor "
        "| speed-up | vs the authors' 129 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, old, new, floor in rows:
        lines.append(
            f"| {label} | {old:.0f} µs | {new:.1f} µs | {floor:.1f} µs | {old / new:.1f}x "
            f"| {AUTHORS_MS * 1e3 / new:.0f}x |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
