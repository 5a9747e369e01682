"""The long runs behind the poisoning-in-practice chapter (see benchmarks/reproduce.py).

- Table 3, row 2 (standalone SSM, κ = 10, d = 20), 32 seeds: cheap enough for 32 seeds, too slow
  (learning rate 0.001) for the chapter's one-minute budget;
- Table 1, row 3 (SSM + ReLU MLP, κ = 6), 32 seeds, up to 50 000 Adam steps, in five variants:
  the authors' Adam (TensorFlow's ε-hat form, ε = 1e-7), PyTorch's Adam (ε = 1e-8), the
  authors' Adam with the correlation of their TensorFlow initialization, and two controls that
  separate Adam's plateau step η/ε from the size of ε: PyTorch's form with ε = 1e-7 (the
  authors' ε and plateau step), and PyTorch's form with ε = 1e-8 and η = 1e-3 (the authors'
  plateau step η/ε = 1e5, PyTorch's ε); clean runs only for the four variants;
- Table 3, row 3 (SSM + MLP, κ = 10, d = 20, width 25), 8 seeds, up to 100 000 steps: a few
  minutes on one core for eight seeds, so eight.

About ten minutes of one core in all.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses

import numpy as np
from row3_variants import correlated_init  # the authors' correlated TensorFlow initialization

from lib import poison_dynamics

ROW2_SEEDS = list(range(32))
ROW3_SEEDS = list(range(32))
ROW3_STEPS = 50_000
TABLE3_ROW3_SEEDS = list(range(8))
TABLE3_ROW3_STEPS = 100_000


def per_run(runs: poison_dynamics.DynamicsRuns) -> dict[str, list]:
    """Per-run errors, fitting steps and the two largest final |a_j| (run order of ``runs``)."""
    if runs.setting.with_mlp:
        errors = poison_dynamics.relative_test_error(runs)
    else:
        errors = poison_dynamics.impulse_error(runs)
    top = np.sort(np.abs(runs.trajectory.final["a"].numpy()), axis=-1)[:, ::-1]
    record = {
        "seed": runs.seeds,
        "poisoned": [scale is not None for scale in runs.scales],
        "error": errors,
        "fit_step": runs.trajectory.info["converged_step"],
        "top_a": top[:, :3],
    }
    if runs.setting.with_mlp:
        record["initial_gain"] = [runs.initial_gain(r) for r in range(len(runs.seeds))]
    return record


def _table3_row2() -> dict:
    runs = poison_dynamics.train_dynamics(
        poison_dynamics.TABLE3_ROW2, ROW2_SEEDS, max_steps=200_000
    )
    settings = dataclasses.asdict(poison_dynamics.TABLE3_ROW2) | {"max_steps": 200_000}
    return {"table3_row2": (per_run(runs), settings)}


def _row3_variant(key: str) -> dict:
    setting, scales, init = {
        "table1_row3": (poison_dynamics.TABLE1_ROW3, (None, 1.0), None),
        "table1_row3_pytorch_adam": (
            dataclasses.replace(poison_dynamics.TABLE1_ROW3, adam_form="torch", adam_eps=1e-8),
            (None,),
            None,
        ),
        "table1_row3_correlated_init": (poison_dynamics.TABLE1_ROW3, (None,), correlated_init),
        "table1_row3_pytorch_adam_eps1e-7": (
            dataclasses.replace(poison_dynamics.TABLE1_ROW3, adam_form="torch", adam_eps=1e-7),
            (None,),
            None,
        ),
        "table1_row3_pytorch_adam_lr1e-3": (
            dataclasses.replace(
                poison_dynamics.TABLE1_ROW3, adam_form="torch", adam_eps=1e-8, lr_clean=1e-3
            ),
            (None,),
            None,
        ),
    }[key]
    original = poison_dynamics.dynamics_init
    if init is not None:
        poison_dynamics.dynamics_init = init
    try:
        runs = poison_dynamics.train_dynamics(
            setting, ROW3_SEEDS, special_scales=scales, max_steps=ROW3_STEPS, record_every=1000
        )
    finally:
        poison_dynamics.dynamics_init = original
    settings = dataclasses.asdict(setting) | {
        "max_steps": ROW3_STEPS,
        "init": "authors' correlated (TensorFlow)" if init else "independent draws",
    }
    return {key: (per_run(runs), settings)}


def _table3_row3() -> dict:
    runs = poison_dynamics.train_dynamics(
        poison_dynamics.TABLE3_ROW3,
        TABLE3_ROW3_SEEDS,
        max_steps=TABLE3_ROW3_STEPS,
        record_every=1000,
    )
    settings = dataclasses.asdict(poison_dynamics.TABLE3_ROW3) | {"max_steps": TABLE3_ROW3_STEPS}
    return {"table3_row3": (per_run(runs), settings)}


def _stage(name: str) -> dict:
    if name.startswith("table1_row3"):
        return _row3_variant(name)
    return {"table3_row2": _table3_row2, "table3_row3": _table3_row3}[name]()


STAGES = (
    "table1_row3",
    "table3_row3",
    "table1_row3_pytorch_adam",
    "table1_row3_correlated_init",
    "table1_row3_pytorch_adam_eps1e-7",
    "table1_row3_pytorch_adam_lr1e-3",
    "table3_row2",
)


def run(workers: int = 2) -> dict:
    """All stages, in ``workers`` processes (the runs are independent and single-threaded)."""
    results, settings = {}, {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        for done in pool.map(_stage, STAGES):
            for key, (record, setting) in done.items():
                results[key], settings[key] = record, setting
    seeds = {
        "table3_row2": ROW2_SEEDS,
        "table1_row3 (all variants)": ROW3_SEEDS,
        "table3_row3": TABLE3_ROW3_SEEDS,
    }
    return {"results": results, "settings": settings, "seeds": seeds}
