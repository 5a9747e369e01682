"""The long runs behind the poisoning-real-data chapter (see benchmarks/reproduce.py).

Three parts, in two single-threaded processes (C on one core, about 14 minutes of CPU; B and then
the MLP line on the other, about 11):

- **C, the paper's attack budget** at the chapter's dose (40 poisons per target, ε = 2 gray
  levels): the best of 8 random starts of 250 signed-Adam steps, as the paper ran it, against S4D
  victims retrained from scratch for 40 epochs (the authors' code trains every network for 40),
  16 targets × 2 victim seeds = 32 (target, seed) pairs, regularized / unregularized / random;
- **B, a dose–response** over the budget (40 poisons per target, and the whole adversarial class,
  that is as many poisons as the smallest class has training images) and ε (1, 2 and 4 gray
  levels), the same three arms, with a lighter attack (the best of 2 starts of 100 steps) and
  victims trained for 20 epochs; the largest cell (the whole class at 4 gray levels) has 32 pairs,
  the others 4 targets × 2 seeds = 8;
- **the positive control's line**: the same grid and attack against the chapter's MLP (its own
  surrogate and targets), 16 targets × 2 seeds = 32 pairs in every cell (about a minute).

The S4D surrogate (seed 100) and the clean victims are trained once, before the parts. Every S4D
network is the chapter's (16 channels, 2 layers, state 8), trained with the chapter's AdamW
(batch 32, learning rate 0.03). Targets are test images the surrogate classifies correctly, each
with a random adversarial class; one attack per target, poisons appended to the clean set.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time

import numpy as np
import torch

from lib import data, mlp_victim, s4d
from lib import gradient_matching as gm

MODEL = s4d.S4DConfig(channels=16, state=8, layers=2)
SURROGATE_SEED = 100
VICTIM_SEEDS = [0, 1]
TARGET_SEED = 0  # draws the targets and their adversarial classes
REG_FACTOR = 0.01  # the chapter's lambda
ROW = 8
ARMS = ("regularized", "unregularized", "random")


@dataclasses.dataclass(frozen=True)
class Part:
    """One part's sizes: the attack (steps, restarts), the victims' epochs, and its cells
    (budget, eps in gray levels, number of targets); budget None means the whole adversarial class
    (the smallest class's size, so that every class can supply it)."""

    steps: int
    restarts: int
    epochs: int
    cells: tuple[tuple[int | None, float, int], ...]
    victim: str = "S4D"  # or "MLP": the positive control's family (lib.mlp_victim)


PART_C = Part(steps=250, restarts=8, epochs=40, cells=((40, 2.0, 16),))
PART_B = Part(
    steps=100,
    restarts=2,
    epochs=20,
    cells=(
        (40, 1.0, 4), (40, 2.0, 4), (40, 4.0, 4),
        (None, 1.0, 4), (None, 2.0, 4), (None, 4.0, 16),
    ),
)  # fmt: skip
# The positive control's MLP (the chapter's §7.4: 32 hidden units, AdamW, 30 epochs of 64, lr
# 0.01) under the dose-response's attack, 16 targets × 2 seeds in every cell: cheap enough for all.
MLP_MODEL = mlp_victim.MLPConfig(hidden=32)
PART_MLP = Part(
    steps=100,
    restarts=2,
    epochs=30,
    cells=tuple((b, e, 16) for b in (40, None) for e in (1.0, 2.0, 4.0)),
    victim="MLP",
)
SURROGATE_EPOCHS = 40


def family(part: Part):
    """The victim family of ``part`` as (Victim, accuracy function), trained for its epochs."""
    if part.victim == "S4D":
        return gm.s4d_victim(MODEL, train_config(part.epochs)), s4d.accuracy
    if part.victim == "MLP":
        config = mlp_victim.TrainConfig(epochs=part.epochs, batch=64, lr=1e-2)
        return mlp_victim.victim(MLP_MODEL, config), mlp_victim.accuracy
    raise ValueError(f"victim must be 'S4D' or 'MLP', got {part.victim!r}")


def train_config(epochs: int) -> s4d.TrainConfig:
    """The chapter's training (AdamW, batch 32, learning rate 0.03, cosine decay) for ``epochs``."""
    return s4d.TrainConfig(epochs=epochs, batch=32, lr=3e-2)


def draw_targets(predicted: torch.Tensor, y_test: torch.Tensor, count: int, seed: int):
    """``count`` test indices the surrogate gets right, in the order drawn, and for each a random
    adversarial class ≠ its true class (the chapter's rule)."""
    rng = np.random.default_rng(seed)
    correct = np.flatnonzero((predicted == y_test).numpy())
    targets = [int(t) for t in rng.choice(correct, count, replace=False)]
    adversarial = [int((y_test[t] + rng.integers(1, 10)) % 10) for t in targets]
    return targets, adversarial


def whole_class(y_train: torch.Tensor) -> int:
    """The largest budget every class can supply: the size of the smallest class."""
    return int(torch.bincount(y_train).min())


def run_cell(
    surrogate,
    x,
    y,
    xt,
    yt,
    targets,
    adversarial,
    budget,
    eps,
    data_range,
    part,
    seeds,
    *,
    clean_params=None,
    seed: int = 1,
) -> dict:
    """Brew the regularized and unregularized attacks (one batched loop) and the random control,
    retrain ``len(seeds)`` victims per (arm, target) from scratch in one batched call, and return
    per-pair outcomes (pairs ordered target-major), the poisons' metrics and the fit."""
    configs = [
        gm.AttackConfig(steps=part.steps, restarts=part.restarts, reg_factor=r, row_length=ROW)
        for r in (REG_FACTOR, 0.0)
    ]
    victim, accuracy = family(part)
    regularized, unregularized = gm.brew(
        surrogate,
        x,
        y,
        xt,
        yt,
        targets,
        adversarial,
        budget,
        eps,
        data_range,
        configs,
        seed=seed,
        victim=victim,
    )
    index = regularized.poison_index
    deltas = {"regularized": regularized.delta, "unregularized": unregularized.delta}
    deltas["random"] = gm.random_perturbations(
        x[index], regularized.delta, eps, data_range, seed=seed + 1
    )
    match_random = gm.matching_loss(surrogate, xt, regularized, x, deltas["random"], victim=victim)
    all_index = torch.cat([index] * len(ARMS))
    all_delta = torch.cat([deltas[a] for a in ARMS])
    params = gm.retrain(victim, x, y, all_index, all_delta, seeds)
    n_pairs = len(targets) * len(seeds)
    pair_t = [t for t in targets for _ in seeds]
    pair_a = [a for a in adversarial for _ in seeds]
    out = gm.target_outcome(victim, params, xt, yt, pair_t * len(ARMS), pair_a * len(ARMS))
    x_fit, y_fit = gm.poisoned_sets(x, y, all_index, all_delta)
    runs = len(seeds)
    fit = accuracy(
        params, x_fit.repeat_interleave(runs, 0), y_fit.repeat_interleave(runs, 0)
    ).numpy()
    held_out = accuracy(params, xt, yt).numpy()
    cell = {"targets": targets, "adversarial": adversarial, "n_pairs": n_pairs, "arms": {}}
    for i, arm in enumerate(ARMS):
        part_slice = slice(i * n_pairs, (i + 1) * n_pairs)
        cell["arms"][arm] = {
            "success": out["success"][part_slice].astype(int),
            "correct": out["correct"][part_slice].astype(int),
            "p_adv": out["p_adv"][part_slice],
            "train_accuracy": fit[part_slice],
            "held_out_accuracy": held_out[part_slice],
            "rel_row": gm.last_elements_rel_size(deltas[arm], ROW),
            "rel_two": gm.last_elements_rel_size(deltas[arm], 2),
        }
    for arm, b in (("regularized", regularized), ("unregularized", unregularized)):
        cell["arms"][arm]["matching_loss"] = b.matching_loss
        cell["arms"][arm]["restart_losses"] = b.restart_losses
    cell["arms"]["random"]["matching_loss"] = match_random
    if clean_params is not None:  # the clean victims (one run per seed) on the same pairs
        runs_idx = [seeds.index(s) for _ in targets for s in seeds]
        clean = {k: v[runs_idx] for k, v in clean_params.items()}
        cell["clean"] = {
            k: v.astype(int) if v.dtype == bool else v
            for k, v in gm.target_outcome(victim, clean, xt, yt, pair_t, pair_a).items()
        }
    return cell


def run_part(part: Part, surrogate, clean_by_epochs, data_split, seeds, target_pool) -> dict:
    """Every cell of ``part``; a cell with k targets takes the first k of ``target_pool``."""
    x, y, xt, yt, data_range = data_split
    gray = (data_range[1] - data_range[0]) / 16
    targets, adversarial = target_pool
    torch.manual_seed(0)
    cells = []
    for budget, eps_gray, n_targets in part.cells:
        used = whole_class(y) if budget is None else budget
        cell = run_cell(
            surrogate,
            x,
            y,
            xt,
            yt,
            targets[:n_targets],
            adversarial[:n_targets],
            used,
            eps_gray * gray,
            data_range,
            part,
            seeds,
            clean_params=clean_by_epochs[part.epochs],
        )
        cell.update(budget=used, whole_class=budget is None, eps_gray=eps_gray)
        cells.append(cell)
    return {"cells": cells}


def _part(args) -> tuple[str, dict]:
    name, part, surrogate, clean, data_split, seeds, pool = args
    torch.set_num_threads(1)
    start, cpu = time.perf_counter(), time.process_time()
    extra = {}
    if part.victim == "MLP":  # its own surrogate, clean victims and targets (those it gets right)
        surrogate, clean, pool, extra = prepare_mlp(part, data_split, seeds)
    record = run_part(part, surrogate, clean, data_split, seeds, pool) | extra
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    return name, record


def prepare_mlp(part: Part, data_split, seeds):
    """The MLP surrogate (seed 100), its clean victims and its target pool, as for S4D."""
    x, y, xt, yt, _ = data_split
    victim, accuracy = family(part)
    surrogate = victim.train(x, y, [SURROGATE_SEED])
    clean = {part.epochs: victim.train(x, y, seeds)}
    max_targets = max(n for _, _, n in part.cells)
    pool = draw_targets(mlp_victim.predict(surrogate, xt)[0], yt, max_targets, TARGET_SEED)
    record = {
        "surrogate_train_accuracy": accuracy(surrogate, x, y),
        "clean_train_accuracy": accuracy(clean[part.epochs], x, y),
        "clean_held_out_accuracy": accuracy(clean[part.epochs], xt, yt),
    }
    return surrogate, clean, pool, record


def prepare(parts: dict[str, Part], seeds, surrogate_epochs: int, max_targets: int):
    """The digits, the surrogate, the clean victims for every epoch count used, the target pool."""
    data_split = data.digits_split()
    x, y, xt, yt, _ = data_split
    surrogate = s4d.train(MODEL, x, y, [SURROGATE_SEED], train_config(surrogate_epochs))
    clean = {}
    for epochs in sorted({p.epochs for p in parts.values() if p.victim == "S4D"}):
        clean[epochs] = s4d.train(MODEL, x, y, seeds, train_config(epochs))
    predicted = s4d.predict(surrogate, xt)[0]
    pool = draw_targets(predicted, yt, max_targets, TARGET_SEED)
    record = {
        "surrogate_train_accuracy": s4d.accuracy(surrogate, x, y),
        "surrogate_held_out_accuracy": s4d.accuracy(surrogate, xt, yt),
        "clean": {
            str(e): {
                "train_accuracy": s4d.accuracy(p, x, y),
                "held_out_accuracy": s4d.accuracy(p, xt, yt),
            }
            for e, p in clean.items()
        },
    }
    return data_split, surrogate, clean, pool, record


def run_all(
    parts: dict[str, Part] | None = None,
    seeds=None,
    surrogate_epochs: int = SURROGATE_EPOCHS,
    workers: int = 2,
) -> dict:
    """Both parts (or ``parts``), in ``workers`` processes (0: in this process)."""
    parts = {"C": PART_C, "B": PART_B, "MLP": PART_MLP} if parts is None else parts
    seeds = list(VICTIM_SEEDS if seeds is None else seeds)
    max_targets = max(
        [n for p in parts.values() if p.victim == "S4D" for _, _, n in p.cells], default=1
    )
    torch.set_num_threads(1)
    start = time.perf_counter()
    data_split, surrogate, clean, pool, record = prepare(
        parts, seeds, surrogate_epochs, max_targets
    )
    record["prepare_seconds"] = time.perf_counter() - start
    jobs = [(n, p, surrogate, clean, data_split, seeds, pool) for n, p in parts.items()]
    if workers:
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as ex:
            done = dict(ex.map(_part, jobs))
    else:
        done = dict(map(_part, jobs))
    x, y = data_split[0], data_split[1]
    gray = (data_split[4][1] - data_split[4][0]) / 16
    settings = {
        "model": dataclasses.asdict(MODEL),
        "train": {
            "batch": 32,
            "lr": 3e-2,
            "weight_decay": s4d.TrainConfig().weight_decay,
            "schedule": "cosine",
            "optimizer": "AdamW",
            "dtype": "float32",
        },
        "surrogate_epochs": surrogate_epochs,
        "surrogate_seed": SURROGATE_SEED,
        "target_seed": TARGET_SEED,
        "reg_factor": REG_FACTOR,
        "row_length": ROW,
        "n_train": len(x),
        "n_test": len(data_split[2]),
        "whole_class": whole_class(y),
        "gray_level": gray,
        "parts": {n: dataclasses.asdict(p) for n, p in parts.items()},
        "threads_per_part": 1,
    }
    return {"results": record | done, "settings": settings, "seeds": {"victims": seeds}}


def run() -> dict:
    """The entry point of benchmarks/reproduce.py."""
    return run_all()
