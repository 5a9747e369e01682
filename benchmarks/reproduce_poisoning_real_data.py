"""The long runs behind the poisoning-real-data chapter (see benchmarks/reproduce.py).

Tasks (:func:`tasks`): the preparation and three parts of the grid below, and the settings of the
positive control (further below: a frozen extractor with a retrained head, and a network retrained
from scratch, for an MLP and for S4D, 32 targets each, and S4D from scratch once more trained for
40 epochs). The grid's parts:

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

from lib.book import data
from lib.poisoning import evasion, mlp_victim
from lib.poisoning import gradient_matching as gm
from lib.poisoning import transfer_victim as tv
from lib.ssm import s4d

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
    victim: str = "S4D"  # or "MLP": the positive control's family (lib.poisoning.mlp_victim)


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


def draw_reachable_targets(victim: gm.Victim, surrogate: dict, x_test: torch.Tensor,
                           y_test: torch.Tensor, predicted: torch.Tensor, count: int, seed: int,
                           eps: float, data_range) -> tuple[list[int], list[int], dict]:
    """``count`` targets that the chapter's eps can reach directly: every test image the surrogate
    gets right is given an adversarial class by the control's rule (``seed``); the targeted
    evasion attack (lib.poisoning.evasion, defaults) at ``eps`` on the surrogate decides which are
    reachable; ``count`` of those are drawn without replacement (``seed + 1``), each with its
    adversarial class. Also returns the pool's sizes (images right, images reachable)."""
    rng = np.random.default_rng(seed)
    correct = np.flatnonzero((predicted == y_test).numpy())
    adversarial = [int((y_test[t] + rng.integers(1, 10)) % 10) for t in correct]
    index = torch.as_tensor(correct)
    out = evasion.targeted_evasion(victim, surrogate, x_test[index], y_test[index],
                                   torch.as_tensor(adversarial), eps, data_range)
    reachable = np.flatnonzero(out["success"][0])
    pick = np.random.default_rng(seed + 1).choice(reachable, min(count, len(reachable)),
                                                  replace=False)
    return ([int(correct[i]) for i in pick], [adversarial[i] for i in pick],
            {"right": len(correct), "reachable": len(reachable)})


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
    # the grid's random control as committed: the regularized arm's l2 norm before projection
    deltas["random"] = gm.random_perturbations(
        x[index], regularized.delta, eps, data_range, seed=seed + 1, match="l2-before-projection"
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


# ---------------------------------------------------------------------------------------------
# The positive control and S4D, separated: two settings per family, the same data and attack.
#
# The training set is split once: every third image (index % 3 == 0) is the *pretraining* set, on
# which the transfer setting's feature extractor is trained; the rest is the *victim's* set, the
# clean training data of every victim below, and the pool the poisons are drawn from. In the
# transfer setting the extractor is frozen and only a linear head is trained from scratch on the
# victim's (poisoned) set (lib.poisoning.transfer_victim); in the scratch setting the whole network
# is. The same test images serve as targets. Arms: the attack with this book's step rule
# ("attack"), with the authors' step rule ("authors"), and for each a random control of its own
# size ("random", "random_authors": the l2 norm and l_inf bound of the arm's perturbation, per
# poison).

CONTROL_DOSES = (1, 2, 3)  # multiples of the chapter's eps (2 gray levels)
CONTROL_BUDGET = 40
CONTROL_TARGETS = 32
CONTROL_STEPS, CONTROL_RESTARTS = 250, 2
CONTROL_EPS_GRAY = 2.0
MLP_HIDDEN = 64
EXTRACTOR_SEED = 200
ATTACK_SEED = 1
CONTROL_SETTINGS = {
    # name: (family, setting, victim seeds, arms, doses)
    "MLP transfer": ("MLP", "transfer", [0, 1], ("attack", "authors"), CONTROL_DOSES),
    "MLP scratch": ("MLP", "scratch", [0, 1], ("attack", "authors"), CONTROL_DOSES),
    "S4D transfer": ("S4D", "transfer", [0, 1], ("attack",), (1, 3)),
    "S4D scratch": ("S4D", "scratch", [0], ("attack",), (3,)),
    "S4D scratch, 40 epochs": ("S4D", "scratch", [0], ("attack",), (3,)),
}
# S4D runs the attack with this book's steps only (the two rules are compared on the MLP), and
# S4D from scratch only at three times the chapter's eps with one victim seed per target (after
# 10 epochs, and after 40 with a surrogate trained as long): its
# chapter's-eps point is the committed part C (16 targets x 2 seeds, no flip in any arm). Both
# cuts are for time: the machine these runs were made on was shared by several jobs.
S4D_CONTROL_EPOCHS = 10  # the chapter's default training of S4D victims
# A setting's epochs when not the default: S4D from scratch trained (surrogate, clean and poisoned
# victims alike) for the authors' 40 epochs, where it fits its clean set (the S4D-fit task below),
# at the dose where both MLP settings are poisoned.
CONTROL_EPOCHS = {"S4D scratch, 40 epochs": 40}
# the control on targets the chapter's eps reaches directly (benchmarks/evasion_scale.py)
REACHABLE_SETTINGS = ("MLP transfer", "MLP scratch", "S4D transfer", "S4D scratch")
HEAD_TRAIN = tv.HeadTrainConfig(epochs=40, batch=32, lr=1e-2)
MLP_CONTROL_TRAIN = mlp_victim.TrainConfig(epochs=30, batch=64, lr=1e-2)
MLP_EXTRACTOR_TRAIN = mlp_victim.TrainConfig(epochs=60, batch=32, lr=1e-2)


def split_for_transfer(x: torch.Tensor, y: torch.Tensor):
    """(pretraining x, y), (victim's x, y): every third training image pretrains the extractor."""
    pre = torch.arange(len(x)) % 3 == 0
    return (x[pre], y[pre]), (x[~pre], y[~pre])


def control_victim(family: str, setting: str, pretrain, extractor_seed: int,
                   s4d_epochs: int = S4D_CONTROL_EPOCHS):
    """The victim family of one setting (S4D trained for ``s4d_epochs``), and the extractor's
    held-out accuracy (transfer)."""
    if family == "MLP":
        config = mlp_victim.MLPConfig(hidden=MLP_HIDDEN)
        if setting == "scratch":
            return mlp_victim.victim(config, MLP_CONTROL_TRAIN), {}
        ext = mlp_victim.train(config, *pretrain, [extractor_seed], MLP_EXTRACTOR_TRAIN)
        phi, width, dtype = tv.mlp_features(ext), MLP_HIDDEN, torch.float64
        ext_acc = mlp_victim.accuracy
    elif family == "S4D":
        tc = train_config(s4d_epochs)
        if setting == "scratch":
            return gm.s4d_victim(MODEL, tc), {}
        ext = s4d.train(MODEL, *pretrain, [extractor_seed], train_config(2 * S4D_CONTROL_EPOCHS))
        phi, width, dtype = tv.s4d_features(ext), MODEL.channels, torch.float32
        ext_acc = s4d.accuracy
    else:
        raise ValueError(f"family must be 'MLP' or 'S4D', got {family!r}")
    v = tv.victim(phi, width, 10, HEAD_TRAIN, name=f"{family} head", dtype=dtype)
    return v, {"extractor": ext_acc, "extractor_params": ext}


def control_setting(
    name: str,
    *,
    surrogate_seed: int,
    extractor_seed: int,
    target_seed: int,
    attack_seed: int,
    victim_seeds: list[int],
    reachable: bool = False,
) -> dict:
    """One setting of the control: surrogate, targets, every (dose, arm)'s poisons, and victims
    retrained from scratch on each (one batched call), with per-pair outcomes (target-major).

    ``reachable``: the targets are drawn among those the chapter's eps reaches directly
    (draw_reachable_targets), at the chapter's eps only; the record is then written under
    ("reachable", name) (benchmarks/evasion_scale.py, the design)."""
    family, setting, _, arms, doses = CONTROL_SETTINGS[name]
    doses = (1,) if reachable else doses
    start, cpu = time.perf_counter(), time.process_time()
    x_all, y_all, xt, yt, data_range = data.digits_split()
    pretrain, (x, y) = split_for_transfer(x_all, y_all)
    gray = (data_range[1] - data_range[0]) / 16
    epochs = CONTROL_EPOCHS.get(name, S4D_CONTROL_EPOCHS)
    victim, extra = control_victim(family, setting, pretrain, extractor_seed, epochs)
    record: dict = {"family": family, "setting": setting, "n_victim_train": len(x)}
    if name in CONTROL_EPOCHS:
        record["epochs"] = epochs
    if extra:
        ext = extra["extractor_params"]
        record["extractor_held_out_accuracy"] = float(extra["extractor"](ext, xt, yt)[0])
    surrogate = victim.train(x[None], y[None], [surrogate_seed])
    clean = victim.train(x[None].expand(len(victim_seeds), -1, -1),
                         y[None].expand(len(victim_seeds), -1), victim_seeds)
    record["surrogate_held_out_accuracy"] = float(tv.accuracy(victim, surrogate, xt, yt)[0])
    record["clean_train_accuracy"] = tv.accuracy(victim, clean, x, y).numpy()
    record["clean_held_out_accuracy"] = tv.accuracy(victim, clean, xt, yt).numpy()
    with torch.no_grad():
        predicted = victim.logits(surrogate, xt[None].to(victim.dtype))[0].argmax(-1)
    if reachable:
        targets, adversarial, record["pool"] = draw_reachable_targets(
            victim, surrogate, xt, yt, predicted, CONTROL_TARGETS, target_seed,
            CONTROL_EPS_GRAY * gray, data_range)
    else:
        targets, adversarial = draw_targets(predicted, yt, CONTROL_TARGETS, target_seed)
    record.update(targets=targets, adversarial=adversarial)
    pair_t = [t for t in targets for _ in victim_seeds]
    pair_a = [a for a in adversarial for _ in victim_seeds]
    clean_runs = {k: v[[victim_seeds.index(s) for _ in targets for s in victim_seeds]]
                  for k, v in clean.items()}
    record["clean"] = {k: v.astype(int) if v.dtype == bool else v for k, v in
                       gm.target_outcome(victim, clean_runs, xt, yt, pair_t, pair_a).items()}
    deltas, index, cells = [], None, []
    for dose in doses:
        eps = dose * CONTROL_EPS_GRAY * gray
        cell = {"dose": dose, "eps_gray": dose * CONTROL_EPS_GRAY, "arms": {}}
        for arm in arms:
            rule = "constant" if arm == "attack" else "authors"
            config = gm.AttackConfig(steps=CONTROL_STEPS, restarts=CONTROL_RESTARTS,
                                     step_rule=rule)
            b = gm.brew(surrogate, x, y, xt, yt, targets, adversarial, CONTROL_BUDGET, eps,
                        data_range, config, seed=attack_seed, victim=victim)
            index = b.poison_index  # the same images for every dose and arm (drawn from the seed)
            rand = gm.random_perturbations(x[index], b.delta, eps, data_range,
                                           seed=attack_seed + 1)
            control = "random" if arm == "attack" else "random_authors"
            for name_, delta in ((arm, b.delta), (control, rand)):
                norms = torch.linalg.vector_norm(delta, dim=-1)
                cell["arms"][name_] = {
                    "l2_over_eps_median": float(norms.median() / eps),
                    "linf_over_eps_median": float(delta.abs().amax(-1).median() / eps),
                    "matching_loss": gm.matching_loss(surrogate, xt, b, x, delta, victim=victim),
                }
                deltas.append(delta)
            cell["arms"][control]["size_ratio"] = gm.size_ratio(rand, b.delta)
            cell["arms"][arm]["restart_losses"] = b.restart_losses
        cells.append(cell)
    order = [(i, a) for i, c in enumerate(cells) for a in c["arms"]]
    all_index = torch.cat([index] * len(order))
    params = gm.retrain(victim, x, y, all_index, torch.cat(deltas), victim_seeds)
    n_pairs = len(pair_t)
    out = gm.target_outcome(victim, params, xt, yt, pair_t * len(order), pair_a * len(order))
    held_out = tv.accuracy(victim, params, xt, yt).numpy()
    x_fit, y_fit = gm.poisoned_sets(x, y, all_index, torch.cat(deltas))
    reps = len(victim_seeds)
    fit = tv.accuracy(victim, params, x_fit.repeat_interleave(reps, 0),
                      y_fit.repeat_interleave(reps, 0)).numpy()
    for k, (i, arm) in enumerate(order):
        part = slice(k * n_pairs, (k + 1) * n_pairs)
        cells[i]["arms"][arm].update(
            success=out["success"][part].astype(int),
            correct=out["correct"][part].astype(int),
            p_adv=out["p_adv"][part],
            held_out_accuracy=held_out[part],
            train_accuracy=fit[part],
        )
    record["cells"] = cells
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    return {("reachable" if reachable else "control", name): record}


# ---------------------------------------------------------------------------------------------
# What is achievable at the chapter's eps: the white-box attack on the MLP with a retrained head.
#
# In the transfer setting the victim's retraining is a small, fixed computation (AdamW on a linear
# head over frozen features), so the poisons can be optimized through it: the unrolled attack
# (lib.poisoning.transfer_victim.unrolled_attack, eq. (T.3)) minimizes the target's loss under the
# head that the victim of seed ORACLE_SEED retrains on the poisons. It runs on the control's
# MLP-transfer victim, targets and surrogate, at the chapter's eps, with two choices of the poison
# images: the control's (random images of the adversarial class) and the adversarial-class images
# nearest the target in the extractor's feature space (gm.choose_nearest); gradient matching runs
# on the nearest images too. Every arm has its random control of its own size. The victims: the
# unrolled seed, and ORACLE_SEEDS[1:], which the attack never saw.

ORACLE_STEPS = 20
ORACLE_SEED = 0
ORACLE_SEEDS = [0, 1, 2, 3]
# (eps in gray levels, poison choices of the unrolled attack): the chapter's eps with both
# choices, and twice it (where gradient matching first poisons the MLP head) with the nearest
ORACLE_RUNS = ((CONTROL_EPS_GRAY, ("random images", "nearest images")),
               (2 * CONTROL_EPS_GRAY, ("nearest images",)))


def oracle_task(*, surrogate_seed: int, extractor_seed: int, target_seed: int, attack_seed: int,
                oracle_seed: int, victim_seeds: list[int], eps_gray: float = CONTROL_EPS_GRAY,
                choices: tuple[str, ...] = ("random images", "nearest images")) -> dict:
    """The unrolled (white-box) attack on the poison images of ``choices`` and gradient matching
    on the nearest images, against the MLP with a retrained head at ``eps_gray`` gray levels;
    per-pair outcomes (target-major) for every arm."""
    start, cpu = time.perf_counter(), time.process_time()
    x_all, y_all, xt, yt, data_range = data.digits_split()
    pretrain, (x, y) = split_for_transfer(x_all, y_all)
    gray = (data_range[1] - data_range[0]) / 16
    eps = eps_gray * gray
    victim, extra = control_victim("MLP", "transfer", pretrain, extractor_seed)
    phi = tv.mlp_features(extra["extractor_params"])
    surrogate = victim.train(x[None], y[None], [surrogate_seed])
    with torch.no_grad():
        predicted = victim.logits(surrogate, xt[None].to(victim.dtype))[0].argmax(-1)
    targets, adversarial = draw_targets(predicted, yt, CONTROL_TARGETS, target_seed)
    images = {
        "random images": torch.stack([gm.choose_poisons(y, c, CONTROL_BUDGET, attack_seed + a)
                                      for a, c in enumerate(adversarial)]),
        "nearest images": torch.stack([gm.choose_nearest(phi, x, y, xt[t], c, CONTROL_BUDGET)
                                       for t, c in zip(targets, adversarial, strict=True)]),
    }
    arms, seconds = {}, {}
    for choice in choices:
        index = images[choice]
        t0 = time.perf_counter()
        out = tv.unrolled_attack(phi, MLP_HIDDEN, x, y, xt, targets, adversarial, index, eps,
                                 data_range, classes=10, train_config=HEAD_TRAIN,
                                 seed=oracle_seed, steps=ORACLE_STEPS, chunk=16)
        seconds[f"unrolled, {choice}"] = time.perf_counter() - t0
        arms[f"unrolled, {choice}"] = (index, out["delta"])
    config = gm.AttackConfig(steps=CONTROL_STEPS, restarts=CONTROL_RESTARTS)
    t0 = time.perf_counter()
    b = gm.brew(surrogate, x, y, xt, yt, targets, adversarial, CONTROL_BUDGET, eps, data_range,
                config, seed=attack_seed, victim=victim, poison_index=images["nearest images"])
    seconds["matching, nearest images"] = time.perf_counter() - t0
    arms["matching, nearest images"] = (b.poison_index, b.delta)
    for name, (index, delta) in list(arms.items()):
        arms[f"random, size of {name}"] = (index, gm.random_perturbations(
            x[index], delta, eps, data_range, seed=attack_seed + 1))
    names = list(arms)
    all_index = torch.cat([arms[n][0] for n in names])
    all_delta = torch.cat([arms[n][1] for n in names])
    params = gm.retrain(victim, x, y, all_index, all_delta, victim_seeds)
    pair_t = [t for t in targets for _ in victim_seeds]
    pair_a = [a for a in adversarial for _ in victim_seeds]
    out = gm.target_outcome(victim, params, xt, yt, pair_t * len(names), pair_a * len(names))
    held_out = tv.accuracy(victim, params, xt, yt).numpy()
    n_pairs = len(pair_t)
    record: dict = {"targets": targets, "adversarial": adversarial, "eps_gray": eps_gray,
                    "victim_seeds": list(victim_seeds), "oracle_seed": oracle_seed,
                    "steps": ORACLE_STEPS, "attack_seconds": seconds, "arms": {}}
    for k, name in enumerate(names):
        part = slice(k * n_pairs, (k + 1) * n_pairs)
        index, delta = arms[name]
        norms = torch.linalg.vector_norm(delta, dim=-1)
        record["arms"][name] = {
            "success": out["success"][part].astype(int),
            "p_adv": out["p_adv"][part],
            "held_out_accuracy": held_out[part],
            "l2_over_eps_median": float(norms.median() / eps),
            "linf_over_eps_median": float(delta.abs().amax(-1).median() / eps),
        }
        if name.startswith("random, size of "):
            like = arms[name.removeprefix("random, size of ")][1]
            record["arms"][name]["size_ratio"] = gm.size_ratio(delta, like)
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    return {("oracle", f"MLP transfer {eps_gray:g} gray"): record}


# ---------------------------------------------------------------------------------------------
# The seed-free positive control: the implicit attack through the head's regularized optimum.
#
# The book's head (HEAD_TRAIN) has no weight decay, and on the MLP's features the victim's set is
# linearly separable, so that head has no optimum to aim at. The implicit attack
# (lib.poisoning.transfer_victim.implicit_attack, eqs. (T.6), (T.7)) aims at the optimum of the
# lambda-regularized head instead, with lambda fixed before any attack by a rule
# (tv.norm_matched_lambda): the optimum whose norm is that of the attacker's own surrogate head
# (the book's AdamW head, seed SURROGATE_SEED). It uses no victim seed. Victims: (i) the optimum
# at the attack's lambda (unique: no seed), (ii) the book's AdamW head retrained on the unseen
# seeds ORACLE_SEEDS for each of IMPLICIT_EPOCHS (the book's 40, and 4 times as long, both fixed
# before these runs). Each beside a random control of the arm's size (l2 and l_inf per poison).
# Poisons: the adversarial-class images nearest the target in the extractor's feature space, as
# the unrolled attack's. The same code runs on the MLP's and on S4D's frozen features.

IMPLICIT_STEPS = 100
IMPLICIT_EPOCHS = (40, 160)


def _as_float64(phi):
    """φ in float64 (the implicit attack's precision), differentiable as φ is."""
    def phi64(x: torch.Tensor) -> torch.Tensor:
        return phi(x).double()

    return phi64


def implicit_task(*, family: str, surrogate_seed: int, extractor_seed: int, target_seed: int,
                  attack_seed: int, victim_seeds: list[int], eps_gray: float = CONTROL_EPS_GRAY,
                  steps: int = IMPLICIT_STEPS, epochs: tuple[int, ...] = IMPLICIT_EPOCHS) -> dict:
    """The implicit attack and its random control against ``family``'s frozen features with a
    retrained head: per-target outcomes at the optimum, per-pair (target-major) for the AdamW
    heads of every entry of ``epochs``."""
    start, cpu = time.perf_counter(), time.process_time()
    x_all, y_all, xt, yt, data_range = data.digits_split()
    pretrain, (x, y) = split_for_transfer(x_all, y_all)
    gray = (data_range[1] - data_range[0]) / 16
    eps = eps_gray * gray
    victim, extra = control_victim(family, "transfer", pretrain, extractor_seed)
    ext = extra["extractor_params"]
    if family == "MLP":
        phi, width, dtype = tv.mlp_features(ext), MLP_HIDDEN, torch.float64
    else:
        phi, width, dtype = tv.s4d_features(ext), MODEL.channels, torch.float32
    phi64 = _as_float64(phi)
    surrogate = victim.train(x[None], y[None], [surrogate_seed])
    with torch.no_grad():
        predicted = victim.logits(surrogate, xt[None].to(victim.dtype))[0].argmax(-1)
        phi_train, phi_test = phi64(x), phi64(xt)
    targets, adversarial = draw_targets(predicted, yt, CONTROL_TARGETS, target_seed)
    head = {k: v.double() for k, v in surrogate.items()}
    t0 = time.perf_counter()
    lam = tv.norm_matched_lambda(phi_train, y, 10, head)
    lam_seconds = time.perf_counter() - t0
    clean_opt = tv.optimal_head(phi_train, y, 10, lam)
    index = torch.stack([gm.choose_nearest(phi, x, y, xt[t], c, CONTROL_BUDGET)
                         for t, c in zip(targets, adversarial, strict=True)])
    t0 = time.perf_counter()
    delta = tv.implicit_attack(phi64, x, y, index, xt[targets], adversarial, eps, lam, steps,
                               data_range=data_range)
    attack_seconds = time.perf_counter() - t0
    arms = {"implicit": delta,
            "random, size of implicit": gm.random_perturbations(x[index], delta, eps, data_range,
                                                                seed=attack_seed + 1)}
    adv = torch.tensor(adversarial)
    rows = torch.arange(len(targets))
    record: dict = {
        "family": family, "targets": targets, "adversarial": adversarial, "eps_gray": eps_gray,
        "steps": steps, "lambda": lam, "victim_seeds": list(victim_seeds),
        "surrogate_norm": float(torch.cat([head["w"], head["b"][:, :, None]], -1).norm()),
        "clean_optimum_norm": float(torch.cat([clean_opt["w"], clean_opt["b"][:, :, None]],
                                              -1).norm()),
        "clean_optimum_train_accuracy": float(
            ((phi_train @ clean_opt["w"][0].T + clean_opt["b"][0]).argmax(-1) == y)
            .double().mean()),
        "clean_optimum_held_out_accuracy": float(
            ((phi_test @ clean_opt["w"][0].T + clean_opt["b"][0]).argmax(-1) == yt)
            .double().mean()),
        "surrogate_held_out_accuracy": float(tv.accuracy(victim, surrogate, xt, yt)[0]),
        "extractor_held_out_accuracy": float(extra["extractor"](ext, xt, yt)[0]),
        "attack_seconds": attack_seconds, "lambda_seconds": lam_seconds, "arms": {},
    }
    n_pairs = len(targets) * len(victim_seeds)
    pair_t = [t for t in targets for _ in victim_seeds]
    pair_a = [a for a in adversarial for _ in victim_seeds]
    names = list(arms)
    for name in names:
        d = arms[name]
        norms = torch.linalg.vector_norm(d, dim=-1)
        entry = {"l2_over_eps_median": float(norms.median() / eps),
                 "linf_over_eps_median": float(d.abs().amax(-1).median() / eps)}
        if name.startswith("random, size of "):
            entry["size_ratio"] = gm.size_ratio(d, arms[name.removeprefix("random, size of ")])
        # (i) the optimum at the attack's lambda on each poisoned set: one victim per target
        t0 = time.perf_counter()
        x_p, y_p = gm.poisoned_sets(x, y, index, d)
        with torch.no_grad():
            phi_p = torch.cat([phi_train.expand(len(targets), -1, -1),
                               phi64(x_p[:, len(x):].reshape(-1, x.shape[1]))
                               .reshape(len(targets), -1, width)], 1)
        opt = tv.optimal_head(phi_p, y_p, 10, lam, init={k: v.expand(len(targets), *v.shape[1:])
                                                         for k, v in clean_opt.items()})
        z = torch.einsum("akf,af->ak", opt["w"], phi_test[targets]) + opt["b"]
        others = z.clone()
        others[rows, adv] = -float("inf")
        held = (torch.einsum("akf,nf->ank", opt["w"], phi_test) + opt["b"][:, None]).argmax(-1)
        entry["optimum"] = {
            "success": (z.argmax(-1) == adv).numpy().astype(int),
            "margin": (z[rows, adv] - others.max(-1).values).numpy(),
            "p_adv": torch.softmax(z, -1)[rows, adv].numpy(),
            "held_out_accuracy": (held == yt).double().mean(-1).numpy(),
            "seconds": time.perf_counter() - t0,
        }
        record["arms"][name] = entry
    # (ii) the book's AdamW head retrained on the unseen seeds, for each number of epochs
    all_index = torch.cat([index] * len(names))
    all_delta = torch.cat([arms[n] for n in names])
    for n_epochs in epochs:
        t0 = time.perf_counter()
        config = tv.HeadTrainConfig(epochs=n_epochs, batch=HEAD_TRAIN.batch, lr=HEAD_TRAIN.lr)
        head_victim = tv.victim(phi, width, 10, config, name=f"{family} head", dtype=dtype)
        params = gm.retrain(head_victim, x, y, all_index, all_delta, victim_seeds)
        out = gm.target_outcome(head_victim, params, xt, yt, pair_t * len(names),
                                pair_a * len(names))
        held_out = tv.accuracy(head_victim, params, xt, yt).numpy()
        seconds = time.perf_counter() - t0
        for k, name in enumerate(names):
            part = slice(k * n_pairs, (k + 1) * n_pairs)
            record["arms"][name][f"adamw {n_epochs}"] = {
                "success": out["success"][part].astype(int), "p_adv": out["p_adv"][part],
                "held_out_accuracy": held_out[part], "seconds": seconds}
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    return {("implicit", f"{family} transfer {eps_gray:g} gray"): record}


# ---------------------------------------------------------------------------------------------
# A from-scratch victim of enough capacity to fit its poisons, at the chapter's eps.
#
# The MLP of the scratch setting (64 hidden units, 30 epochs) is not poisoned at 2 gray levels.
# Here the victim is wider (WIDE_HIDDEN units) and trained until it fits its training set, poisons
# included (WIDE_TRAIN: 100 % on the training set and on the poisons in every run measured); the
# attacker's surrogate has the victim's architecture and training, on the clean victim's set (seed
# SURROGATE_SEED; WIDE_MEMBERS > 1 gives an ensemble of seeds SURROGATE_SEED.., whose matching
# losses are averaged, as Geiping et al. 2021 do for victims retrained from scratch); the attack is
# gradient matching with the authors' step rule (signed Adam, tau = 0.1, step decay, the best of
# 8 random starts of 250 steps), 40 random images of the adversarial class per target. The poisons
# replace their clean images (the authors' threat model: a perturbed training image, not an added
# copy) or are appended (this chapter's), per WIDE_PLACEMENTS. These settings were fixed before
# the run, after a search on 8 other targets and 2 other victim seeds (target seed 7, victim seeds
# 10 and 11) in which no setting flipped a target: one surrogate, appended; an ensemble of 4,
# appended; the ensemble, replacing (the ensemble at 32 targets did not fit the time available).
# The victims' seeds are seeds the search never used.

WIDE_HIDDEN = 512
WIDE_TRAIN = mlp_victim.TrainConfig(epochs=100, batch=32, lr=1e-2)
WIDE_MEMBERS = 1
WIDE_RESTARTS = 8
WIDE_PLACEMENTS = ("replace",)
WIDE_SEEDS = [0, 1]


def placed_sets(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor, delta: torch.Tensor,
                placement: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The poisoned training sets of A attacks (``index`` (A, P), ``delta`` (A, P, L)): the poisons
    appended to the clean set (``"append"``, gm.poisoned_sets) or replacing their clean images
    (``"replace"``); and the positions of the poisons in each set, (A, P)."""
    if placement == "append":
        xp, yp = gm.poisoned_sets(x, y, index, delta)
        where = torch.arange(len(x), len(x) + index.shape[1]).expand(index.shape[0], -1)
        return xp, yp, where
    if placement != "replace":
        raise ValueError(f"placement must be 'append' or 'replace', got {placement!r}")
    xp = x.expand(len(index), -1, -1).clone()
    rows = torch.arange(len(index))[:, None]
    xp[rows, index] = x[index] + delta
    return xp, y.expand(len(index), -1).clone(), index


def score_arms(record: dict, victim: gm.Victim, surrogate: dict, b: gm.Brew, x: torch.Tensor,
               y: torch.Tensor, xt: torch.Tensor, yt: torch.Tensor, eps: float, data_range,
               attack_seed: int, victim_seeds: list[int], placements: tuple[str, ...]) -> None:
    """The attack's poisons ``b`` beside a random control of their size (l2 and l-inf per poison):
    their sizes and matching losses on the surrogate, and, per placement, the victims retrained
    from scratch on each arm's poisoned sets (per-pair outcomes, target-major), written into
    ``record["arms"]``."""
    pair_t = [t for t in b.targets.tolist() for _ in victim_seeds]
    pair_a = [a for a in b.adversarial.tolist() for _ in victim_seeds]
    rand = gm.random_perturbations(x[b.poison_index], b.delta, eps, data_range,
                                   seed=attack_seed + 1)
    arms = {"attack": b.delta, "random": rand}
    record["arms"] = {}
    for name, d in arms.items():
        norms = torch.linalg.vector_norm(d, dim=-1)
        record["arms"][name] = {
            "l2_over_eps_median": float(norms.median() / eps),
            "linf_over_eps_median": float(d.abs().amax(-1).median() / eps),
            "matching_loss": gm.matching_loss(surrogate, xt, b, x, d, victim=victim),
        }
    record["arms"]["random"]["size_ratio"] = gm.size_ratio(rand, b.delta)
    record["arms"]["attack"]["restart_losses"] = b.restart_losses
    reps, n_pairs = len(victim_seeds), len(pair_t)
    index = torch.cat([b.poison_index] * len(arms))
    delta = torch.cat(list(arms.values()))
    adv = torch.tensor(pair_a * len(arms))
    for placement in placements:
        t0 = time.perf_counter()
        xp, yp, where = placed_sets(x, y, index, delta, placement)
        xp, yp = xp.repeat_interleave(reps, 0), yp.repeat_interleave(reps, 0)
        where = where.repeat_interleave(reps, 0)
        params = victim.train(xp, yp, victim_seeds * len(index))
        out = gm.target_outcome(victim, params, xt, yt, pair_t * len(arms), pair_a * len(arms))
        rows = torch.arange(len(xp))[:, None]
        with torch.no_grad():
            z = mlp_victim.logits(params, xt[pair_t * len(arms)][:, None, :])[:, 0]
            others = z.clone()
            others[torch.arange(len(z)), adv] = -float("inf")
            margin = (z[torch.arange(len(z)), adv] - others.max(-1).values).numpy()
        fit = mlp_victim.accuracy(params, xp, yp).numpy()
        poison_fit = mlp_victim.accuracy(params, xp[rows, where], yp[rows, where]).numpy()
        held_out = mlp_victim.accuracy(params, xt, yt).numpy()
        seconds = time.perf_counter() - t0
        for k, name in enumerate(arms):
            part = slice(k * n_pairs, (k + 1) * n_pairs)
            record["arms"][name][placement] = {
                "success": out["success"][part].astype(int), "p_adv": out["p_adv"][part],
                "margin": margin[part], "train_accuracy": fit[part],
                "poison_accuracy": poison_fit[part], "held_out_accuracy": held_out[part],
                "seconds": seconds}


def wide_setup(*, surrogate_seed: int, target_seed: int, victim_seeds: list[int], hidden: int,
               train: mlp_victim.TrainConfig, members: int, eps_gray: float, budget: int,
               targets_n: int, steps: int, restarts: int):
    """wide_scratch's setting: the digits (the victims' part), ε, the wide MLP family, the
    surrogate(s), the targets and their adversarial classes, and the record of the clean victims
    (``victim_seeds``) on them. Returns (x, y, xt, yt, data_range, eps, victim, surrogate,
    targets, adversarial, record)."""
    x_all, y_all, xt, yt, data_range = data.digits_split()
    _, (x, y) = split_for_transfer(x_all, y_all)
    gray = (data_range[1] - data_range[0]) / 16
    eps = eps_gray * gray
    victim = mlp_victim.victim(mlp_victim.MLPConfig(hidden=hidden), train)
    surrogate = victim.train(x, y, list(range(surrogate_seed, surrogate_seed + members)))
    first = {k: v[:1] for k, v in surrogate.items()}
    targets, adversarial = draw_targets(mlp_victim.predict(first, xt)[0], yt, targets_n,
                                        target_seed)
    clean = victim.train(x, y, victim_seeds)
    pair_t = [t for t in targets for _ in victim_seeds]
    pair_a = [a for a in adversarial for _ in victim_seeds]
    clean_runs = {k: v[[victim_seeds.index(s) for _ in targets for s in victim_seeds]]
                  for k, v in clean.items()}
    record: dict = {
        "hidden": hidden, "train": dataclasses.asdict(train), "members": members,
        "eps_gray": eps_gray, "budget": budget, "steps": steps, "restarts": restarts,
        "targets": targets, "adversarial": adversarial, "victim_seeds": list(victim_seeds),
        "n_victim_train": len(x),
        "surrogate_train_accuracy": mlp_victim.accuracy(surrogate, x, y).numpy(),
        "surrogate_held_out_accuracy": mlp_victim.accuracy(surrogate, xt, yt).numpy(),
        "clean_train_accuracy": mlp_victim.accuracy(clean, x, y).numpy(),
        "clean_held_out_accuracy": mlp_victim.accuracy(clean, xt, yt).numpy(),
        "clean": {k: v.astype(int) if v.dtype == bool else v for k, v in
                  gm.target_outcome(victim, clean_runs, xt, yt, pair_t, pair_a).items()},
    }
    return x, y, xt, yt, data_range, eps, victim, surrogate, targets, adversarial, record


def wide_scratch_task(*, surrogate_seed: int, target_seed: int, attack_seed: int,
                      victim_seeds: list[int], hidden: int = WIDE_HIDDEN,
                      train: mlp_victim.TrainConfig = WIDE_TRAIN, members: int = WIDE_MEMBERS,
                      placements: tuple[str, ...] = WIDE_PLACEMENTS,
                      eps_gray: float = CONTROL_EPS_GRAY, budget: int = CONTROL_BUDGET,
                      targets_n: int = CONTROL_TARGETS, steps: int = CONTROL_STEPS,
                      restarts: int = WIDE_RESTARTS) -> dict:
    """Gradient matching on an ensemble of ``members`` surrogates against the wide MLP retrained
    from scratch on every placement's poisoned sets, beside a random control of the attack's size;
    per-pair outcomes (target-major), the victims' fit of their training set and of the poisons."""
    start, cpu = time.perf_counter(), time.process_time()
    x, y, xt, yt, data_range, eps, victim, surrogate, targets, adversarial, record = wide_setup(
        surrogate_seed=surrogate_seed, target_seed=target_seed, victim_seeds=victim_seeds,
        hidden=hidden, train=train, members=members, eps_gray=eps_gray, budget=budget,
        targets_n=targets_n, steps=steps, restarts=restarts)
    t0 = time.perf_counter()
    config = gm.AttackConfig(steps=steps, restarts=restarts, step_rule="authors")
    b = gm.brew(surrogate, x, y, xt, yt, targets, adversarial, budget, eps, data_range, config,
                seed=attack_seed, victim=victim)
    record["attack_seconds"] = time.perf_counter() - t0
    score_arms(record, victim, surrogate, b, x, y, xt, yt, eps, data_range, attack_seed,
               victim_seeds, placements)
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    return {("wide_scratch", f"MLP {hidden} scratch {eps_gray:g} gray"): record}




# The published brew beside ours, on the wide setting: designed and committed before its run.
# benchmarks/published_matching.py transcribes the brewing loop of the gradient-matching code the
# paper ran (Geiping et al. 2021). With its three departures from gm.brew set to gm.brew's, it
# gives gm.brew's poisons (tests/test_published_matching.py). Here they are set to the published
# ones: the poisons augmented while brewing (their MNIST setting scaled to 8 pixels: shifts of at
# most half a pixel, left-right mirroring), a start not projected into the data range, the trial
# chosen by its loss during its last step. Everything else is wide_scratch's: its surrogate,
# targets, poison images (those gm.brew draws for target a with seed ATTACK_SEED + a), victims
# (WIDE_SEEDS, poisons replacing their images), 250 steps, the best of 8 trials, and a random
# control of the attack's size. Criterion (the chapter's): the attack's Wilson 95 % interval by
# target lies above its random control's.
PUBLISHED_SHIFT = 1


def published_brews(victim: gm.Victim, surrogate: dict, x: torch.Tensor, y: torch.Tensor,
                    xt: torch.Tensor, targets: list[int], adversarial: list[int],
                    index: torch.Tensor, eps: float, data_range, *, steps: int, restarts: int,
                    attack_seed: int) -> gm.Brew:
    """The published brew (as published) for each target a, on the poisons ``index[a]``, with the
    random stream ``attack_seed + a``; as a gm.Brew, each trial's score its restart loss."""
    import published_matching as pm

    deltas, scores = [], []
    for a, (t, c) in enumerate(zip(targets, adversarial, strict=True)):
        d, s = pm.brew(victim.logits, surrogate, xt[t], c, x[index[a]], y[index[a]], eps,
                       data_range, steps=steps, restarts=restarts, paugment=True,
                       shift=PUBLISHED_SHIFT, seed=attack_seed + a)
        deltas.append(d)
        scores.append(s)
    scores = torch.stack(scores)
    b = gm.Brew(poison_index=index, delta=torch.stack(deltas), matching_loss=scores.min(-1).values,
                targets=torch.tensor(targets), adversarial=torch.tensor(adversarial),
                restart_losses=scores)
    return b


def published_brew_task(*, surrogate_seed: int, target_seed: int, attack_seed: int,
                        victim_seeds: list[int], hidden: int = WIDE_HIDDEN,
                        train: mlp_victim.TrainConfig = WIDE_TRAIN,
                        eps_gray: float = CONTROL_EPS_GRAY, budget: int = CONTROL_BUDGET,
                        targets_n: int = CONTROL_TARGETS, steps: int = CONTROL_STEPS,
                        restarts: int = WIDE_RESTARTS) -> dict:
    """The published brew (benchmarks/published_matching.py, as published) against wide_scratch's
    victims, one target at a time, beside a random control of its size; per-pair outcomes."""
    start, cpu = time.perf_counter(), time.process_time()
    x, y, xt, yt, data_range, eps, victim, surrogate, targets, adversarial, record = wide_setup(
        surrogate_seed=surrogate_seed, target_seed=target_seed, victim_seeds=victim_seeds,
        hidden=hidden, train=train, members=1, eps_gray=eps_gray, budget=budget,
        targets_n=targets_n, steps=steps, restarts=restarts)
    t0 = time.perf_counter()
    index = torch.stack([gm.choose_poisons(y, c, budget, attack_seed + a)
                         for a, c in enumerate(adversarial)])
    b = published_brews(victim, surrogate, x, y, xt, targets, adversarial, index, eps,
                        data_range, steps=steps, restarts=restarts, attack_seed=attack_seed)
    record["attack_seconds"] = time.perf_counter() - t0
    record["published"] = {"paugment": True, "shift": PUBLISHED_SHIFT, "fliplr": True,
                           "project_start": False, "select": "last_step"}
    score_arms(record, victim, surrogate, b, x, y, xt, yt, eps, data_range, attack_seed,
               victim_seeds, ("replace",))
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    return {("published_brew", f"MLP {hidden} scratch {eps_gray:g} gray"): record}


# The published brew on the control's MLP transfer setting at the chapter's eps (designed and
# committed before its run): the control's extractor, surrogate head, targets and victim seeds, the
# poison images gm.brew draws (seed ATTACK_SEED + a for target a), appended as in the control,
# the published loop as published (augmentation, start, choice of trial) with the published 8
# trials of 250 steps, and a random control of the attack's size. Criterion: the chapter's.
def published_transfer_task(*, surrogate_seed: int, extractor_seed: int, target_seed: int,
                            attack_seed: int, victim_seeds: list[int],
                            eps_gray: float = CONTROL_EPS_GRAY, budget: int = CONTROL_BUDGET,
                            targets_n: int = CONTROL_TARGETS, steps: int = CONTROL_STEPS,
                            restarts: int = WIDE_RESTARTS) -> dict:
    """The published brew against the control's MLP head retrained on frozen features, beside a
    random control of its size; per-pair outcomes (target-major)."""
    start, cpu = time.perf_counter(), time.process_time()
    x_all, y_all, xt, yt, data_range = data.digits_split()
    pretrain, (x, y) = split_for_transfer(x_all, y_all)
    eps = eps_gray * (data_range[1] - data_range[0]) / 16
    victim, _ = control_victim("MLP", "transfer", pretrain, extractor_seed)
    surrogate = victim.train(x[None], y[None], [surrogate_seed])
    with torch.no_grad():
        predicted = victim.logits(surrogate, xt[None].to(victim.dtype))[0].argmax(-1)
    targets, adversarial = draw_targets(predicted, yt, targets_n, target_seed)
    index = torch.stack([gm.choose_poisons(y, c, budget, attack_seed + a)
                         for a, c in enumerate(adversarial)])
    t0 = time.perf_counter()
    b = published_brews(victim, surrogate, x, y, xt, targets, adversarial, index, eps,
                        data_range, steps=steps, restarts=restarts, attack_seed=attack_seed)
    record: dict = {"family": "MLP", "setting": "transfer", "eps_gray": eps_gray,
                    "budget": budget, "steps": steps, "restarts": restarts, "targets": targets,
                    "adversarial": adversarial, "victim_seeds": list(victim_seeds),
                    "attack_seconds": time.perf_counter() - t0,
                    "published": {"paugment": True, "shift": PUBLISHED_SHIFT, "fliplr": True,
                                  "project_start": False, "select": "last_step"}}
    rand = gm.random_perturbations(x[index], b.delta, eps, data_range, seed=attack_seed + 1)
    arms = {"attack": b.delta, "random": rand}
    params = gm.retrain(victim, x, y, torch.cat([index] * 2), torch.cat(list(arms.values())),
                        victim_seeds)
    pair_t = [t for t in targets for _ in victim_seeds]
    pair_a = [c for c in adversarial for _ in victim_seeds]
    out = gm.target_outcome(victim, params, xt, yt, pair_t * 2, pair_a * 2)
    n_pairs = len(pair_t)
    record["arms"] = {}
    for k, (name, d) in enumerate(arms.items()):
        part = slice(k * n_pairs, (k + 1) * n_pairs)
        record["arms"][name] = {
            "l2_over_eps_median": float(torch.linalg.vector_norm(d, dim=-1).median() / eps),
            "linf_over_eps_median": float(d.abs().amax(-1).median() / eps),
            "matching_loss": gm.matching_loss(surrogate, xt, b, x, d, victim=victim),
            "success": out["success"][part].astype(int), "p_adv": out["p_adv"][part]}
    record["arms"]["random"]["size_ratio"] = gm.size_ratio(rand, b.delta)
    record["arms"]["attack"]["restart_losses"] = b.restart_losses
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    return {("published_brew", f"MLP transfer {eps_gray:g} gray"): record}


# The wide setting with weight decay in the victim's and the surrogate's AdamW (the published
# victims train with weight decay 5e-4): two pre-registered pilots, on the search's targets and
# seeds (WIDE_WD_TARGET_SEED, WIDE_WD_SEEDS, WIDE_WD_TARGETS targets), everything else as in
# wide_scratch_task. 5e-4 is the published value; 1e-2 (PyTorch's default for AdamW) shrinks the
# weights over our 3000 steps by exp(-lr * 1e-2 * 3000) = exp(-0.3), of the order of a step-decayed
# SGD schedule with coupled decay 5e-4 on CIFAR-10, which 5e-4 in AdamW (exp(-0.015)) is not. The
# pilots' criterion (at least 3 of 8 targets flipped on both seeds, random none) was not met, so no
# 32-target run followed.
WIDE_WD = (5e-4, 1e-2)
WIDE_WD_TARGET_SEED, WIDE_WD_SEEDS, WIDE_WD_TARGETS = 7, [10, 11], 8


def wide_weight_decay_task(*, weight_decay: float, surrogate_seed: int, target_seed: int,
                           attack_seed: int, victim_seeds: list[int], targets_n: int,
                           **sizes) -> dict:
    """wide_scratch_task with AdamW weight decay ``weight_decay`` in the training of the victims
    and of the surrogate (``sizes``: its other keyword arguments, tests only)."""
    train = dataclasses.replace(sizes.pop("train", WIDE_TRAIN), weight_decay=weight_decay)
    out = wide_scratch_task(surrogate_seed=surrogate_seed, target_seed=target_seed,
                            attack_seed=attack_seed, victim_seeds=victim_seeds,
                            targets_n=targets_n, train=train, **sizes)
    (record,) = out.values()
    name = f"MLP {record['hidden']} scratch {record['eps_gray']:g} gray, decay {weight_decay:g}"
    return {("weight_decay", name): record | {"target_seed": target_seed}}


# A pre-registered search for a from-scratch positive control at the chapter's eps (2 gray levels)
# and budget (40 poisons), fixed in code before any of its runs. Three pilots, each a documented
# lever of the published attack or victim, combined with an ensemble of 4 surrogates (Geiping et
# al. 2021 average the matching over an ensemble for victims retrained from scratch; the ensemble
# alone, replacing, already flipped none of these pilot targets in the search recorded above, so it
# is not run again on its own):
#   "ensemble, 20 epochs": the victims and surrogates trained for 20 epochs instead of 100 (the
#       published victims train for a fixed short schedule, 40 epochs on CIFAR-10; at 20 epochs the
#       512-unit MLP fits its clean set, 100 % on surrogate seed 100, measured before this search;
#       hypothesis, untested: 100 epochs past a perfect fit let each poison be memorized on its
#       own, which a shorter schedule may not);
#   "ensemble, decay 1e-2": AdamW weight decay 1e-2 in victims and surrogates (the weight-decay
#       pilot's stronger value, closer to the published SGD's coupled decay: WIDE_WD), 100 epochs;
#   "ensemble, decay 1e-2, 20 epochs": both.
# The order is by cost, fixed now: the first pilot that meets the criterion is run at the chapter's
# 32 targets (TARGET_SEED) on WIDE_SEEDS, with the random control of the attack's size (l2 and
# l-inf per poison), and no later pilot is. Pilots run on the weight-decay pilots' targets and
# seeds (WIDE_WD_TARGET_SEED, WIDE_WD_SEEDS, WIDE_WD_TARGETS), poisons replacing their images;
# everything else as in wide_scratch_task. Criterion (the weight-decay pilots'): at least
# PILOT_MIN_FLIPS of the 8 targets flipped on both victim seeds, the random control flipping none
# (of the targets, on any seed); a pilot whose victims fit fewer than 99 % of their poisons in some
# run does not meet it (the victim must be able to fit its poisons).
WIDE_PILOTS = {
    "ensemble, 20 epochs": {"members": 4, "epochs": 20, "weight_decay": 0.0},
    "ensemble, decay 1e-2": {"members": 4, "epochs": 100, "weight_decay": 1e-2},
    "ensemble, decay 1e-2, 20 epochs": {"members": 4, "epochs": 20, "weight_decay": 1e-2},
}
PILOT_MIN_FLIPS, PILOT_MIN_POISON_FIT = 3, 0.99


def pilot_verdict(record: dict, *, min_flips: int = PILOT_MIN_FLIPS,
                  min_poison_fit: float = PILOT_MIN_POISON_FIT) -> dict:
    """The pilots' criterion on a wide_scratch_task record (placement "replace"): targets flipped
    on every victim seed and on any seed, per arm; the victims' worst fit of their poisons; met when
    the attack flips at least ``min_flips`` targets on every seed, the random control none on any
    seed, and every run fits at least ``min_poison_fit`` of its poisons."""
    reps = len(record["victim_seeds"])
    out = {}
    for arm in ("attack", "random"):
        got = record["arms"][arm]["replace"]
        s = np.asarray(got["success"]).reshape(-1, reps).astype(bool)
        out[arm] = {"every_seed": int(s.all(1).sum()), "any_seed": int(s.any(1).sum()),
                    "median_margin": float(np.median(got["margin"])),
                    "poison_fit_min": float(np.min(got["poison_accuracy"]))}
    fit = min(out[a]["poison_fit_min"] for a in out)
    out["met"] = bool(out["attack"]["every_seed"] >= min_flips and out["random"]["any_seed"] == 0
                      and fit >= min_poison_fit)
    return out


def wide_pilot_task(*, pilot: str, surrogate_seed: int, target_seed: int, attack_seed: int,
                    victim_seeds: list[int], targets_n: int, **sizes) -> dict:
    """One pre-registered pilot of WIDE_PILOTS: wide_scratch_task with the pilot's surrogates
    (``members``), epochs and AdamW weight decay in the training of victims and surrogates
    (``sizes``: wide_scratch_task's other keyword arguments, tests only)."""
    if pilot not in WIDE_PILOTS:
        raise ValueError(f"pilot must be one of {sorted(WIDE_PILOTS)}, got {pilot!r}")
    lever = WIDE_PILOTS[pilot]
    train = dataclasses.replace(sizes.pop("train", WIDE_TRAIN), epochs=lever["epochs"],
                                weight_decay=lever["weight_decay"])
    sizes.setdefault("members", lever["members"])
    out = wide_scratch_task(surrogate_seed=surrogate_seed, target_seed=target_seed,
                            attack_seed=attack_seed, victim_seeds=victim_seeds,
                            targets_n=targets_n, train=train, **sizes)
    (record,) = out.values()
    record = record | {"target_seed": target_seed, "pilot": pilot}
    record["criterion"] = pilot_verdict(record)
    return {("wide_pilot", pilot): record}


# ---------------------------------------------------------------------------------------------
# The paper's threat model at digit scale (the README's `random-subset` of the gradient-matching
# code the paper ran for Table 2), designed and committed before its runs: for each of JOINT_PAIRS
# (source class, intended class) pairs, drawn with JOINT_SEED (distinct source classes, the
# intended class uniform among the other nine), JOINT_TARGETS test images of the source class that
# the surrogate gets right, and JOINT_POISONS training images drawn at random from the whole
# victims' set (every class, each keeping its own label: clean-label), one joint brew
# (gm.brew_joint: the targets' mean loss towards the intended class, all poisons matched at once),
# the authors' step rule, CONTROL_RESTARTS starts of CONTROL_STEPS steps. JOINT_POISONS is the
# chapter's budget per target (40) times the targets, 17 % of the victims' 958 images (Table 2's
# rows add 1.1 to 11 % of theirs; written as 13 % when this design was committed, before the
# runs: a slip in this comment, not in the design). The poisons replace their clean images (the
# code's threat model).
# Victims: the control's from-scratch victims and training (MLP of MLP_HIDDEN units, 30 epochs;
# S4D, S4D_CONTROL_EPOCHS epochs), one surrogate of the victim's kind (SURROGATE_SEED), victims
# retrained with JOINT_SEEDS; at the chapter's eps and at three times it (where the per-target
# attack poisons the control's MLP from scratch), each dose's attack beside a random control of
# its size (l2 and l-inf per poison). Outcome per (pair, dose, arm, victim seed, target): classified
# as the intended class (the success), as its true class, and the intended logit minus the largest
# other. Success is read per pair as the share of its targets moved to the intended class, with
# Wilson's interval by target (every seed / any seed, as the criterion counts), pooled over pairs
# the same way.
JOINT_PAIRS, JOINT_SEED, JOINT_TARGETS = 4, 0, 4
JOINT_POISONS = CONTROL_BUDGET * JOINT_TARGETS
JOINT_DOSES = (1, 3)  # multiples of the chapter's eps
JOINT_SEEDS = [0, 1]
JOINT_FAMILIES = ("MLP", "S4D")
# Added after the runs above, before its own (its outcome unseen): S4D trained for 40 epochs,
# surrogate and victims (the control's "S4D scratch, 40 epochs"), where it fits its clean set; the
# 10-epoch S4D above fits 88-92 % of its clean set and as little as 46 % of its poisons, so it
# cannot say whether the joint brew reaches an S4D that fits them. Everything else as above.
JOINT_LONG = ("S4D", 40)


def joint_pairs(pairs_n: int, seed: int) -> list[tuple[int, int]]:
    """``pairs_n`` (source, intended) class pairs: distinct source classes drawn at random, each
    with an intended class drawn uniformly among the other nine."""
    rng = np.random.default_rng(seed)
    sources = rng.choice(10, pairs_n, replace=False)
    return [(int(c), int((c + rng.integers(1, 10)) % 10)) for c in sources]


def joint_task(*, family: str, surrogate_seed: int, pair_seed: int, attack_seed: int,
               victim_seeds: list[int], pairs_n: int = JOINT_PAIRS,
               targets_n: int = JOINT_TARGETS, poisons: int = JOINT_POISONS,
               doses: tuple[int, ...] = JOINT_DOSES, steps: int = CONTROL_STEPS,
               restarts: int = CONTROL_RESTARTS, epochs: int | None = None) -> dict:
    """The paper's threat model: one joint brew per (source, intended) pair and dose, victims of
    ``family`` retrained from scratch with the poisons replacing their images, beside a random
    control of the attack's size. ``epochs``: the surrogate's and victims' training when not the
    control's (the record is then named "<family>, <epochs> epochs")."""
    if family not in JOINT_FAMILIES:
        raise ValueError(f"family must be one of {JOINT_FAMILIES}, got {family!r}")
    start, cpu = time.perf_counter(), time.process_time()
    x_all, y_all, xt, yt, data_range = data.digits_split()
    pretrain, (x, y) = split_for_transfer(x_all, y_all)
    gray = (data_range[1] - data_range[0]) / 16
    victim, _ = control_victim(family, "scratch", pretrain, EXTRACTOR_SEED)
    if epochs is not None:
        victim = (mlp_victim.victim(mlp_victim.MLPConfig(hidden=MLP_HIDDEN),
                                    dataclasses.replace(MLP_CONTROL_TRAIN, epochs=epochs))
                  if family == "MLP" else gm.s4d_victim(MODEL, train_config(epochs)))
    surrogate = victim.train(x[None], y[None], [surrogate_seed])
    clean = victim.train(x[None].expand(len(victim_seeds), -1, -1),
                         y[None].expand(len(victim_seeds), -1), victim_seeds)
    with torch.no_grad():
        predicted = victim.logits(surrogate, xt[None].to(victim.dtype))[0].argmax(-1)
    record: dict = {
        "family": family, "n_victim_train": len(x), "targets_per_pair": targets_n,
        "poisons": poisons, "steps": steps, "restarts": restarts, "step_rule": "authors",
        "victim_seeds": list(victim_seeds), "placement": "replace",
        "surrogate_held_out_accuracy": float(tv.accuracy(victim, surrogate, xt, yt)[0]),
        "clean_train_accuracy": tv.accuracy(victim, clean, x, y).numpy(),
        "clean_held_out_accuracy": tv.accuracy(victim, clean, xt, yt).numpy(),
        "pairs": [],
    }
    rng = np.random.default_rng(attack_seed)
    deltas, indices, slots = [], [], []
    for source, intended in joint_pairs(pairs_n, pair_seed):
        pool = np.flatnonzero(((predicted == yt) & (yt == source)).numpy())
        if len(pool) < targets_n:
            raise ValueError(f"the surrogate gets {len(pool)} test images of class {source} "
                             f"right, fewer than targets_n = {targets_n}")
        targets = [int(t) for t in rng.choice(pool, targets_n, replace=False)]
        index = torch.as_tensor(np.sort(rng.choice(len(x), poisons, replace=False)))
        with torch.no_grad():
            z = victim.logits(clean, xt[targets][None].expand(len(victim_seeds), -1, -1)
                              .to(victim.dtype)).double()
        pair = {"source": source, "intended": intended, "targets": targets,
                "poison_index": index.numpy(),
                "poison_classes": np.bincount(y[index].numpy(), minlength=10),
                "clean": {"intended": (z.argmax(-1) == intended).numpy().astype(int),
                          "correct": (z.argmax(-1) == source).numpy().astype(int)},
                "doses": []}
        for dose in doses:
            eps = dose * CONTROL_EPS_GRAY * gray
            config = gm.AttackConfig(steps=steps, restarts=restarts, step_rule="authors")
            t0 = time.perf_counter()
            b = gm.brew_joint(surrogate, x, y, xt, targets, intended, index, eps, data_range,
                              config, seed=attack_seed, victim=victim)
            rand = gm.random_perturbations(x[index], b["delta"], eps, data_range,
                                           seed=attack_seed + 1)
            cell = {"dose": dose, "eps_gray": dose * CONTROL_EPS_GRAY,
                    "attack_seconds": time.perf_counter() - t0,
                    "restart_losses": b["restart_losses"], "arms": {}}
            for name, d in (("attack", b["delta"]), ("random", rand)):
                norms = torch.linalg.vector_norm(d, dim=-1)
                cell["arms"][name] = {
                    "l2_over_eps_median": float(norms.median() / eps),
                    "linf_over_eps_median": float(d.abs().amax(-1).median() / eps)}
                deltas.append(d)
                indices.append(index)
                slots.append((len(record["pairs"]), len(pair["doses"]), name))
            cell["arms"]["random"]["size_ratio"] = gm.size_ratio(rand, b["delta"])
            pair["doses"].append(cell)
        record["pairs"].append(pair)
    reps = len(victim_seeds)
    xp, yp, where = placed_sets(x, y, torch.stack(indices), torch.stack(deltas), "replace")
    xp, yp = xp.repeat_interleave(reps, 0), yp.repeat_interleave(reps, 0)
    where = where.repeat_interleave(reps, 0)
    t0 = time.perf_counter()
    params = victim.train(xp, yp, victim_seeds * len(slots))
    record["retrain_seconds"] = time.perf_counter() - t0
    rows = torch.arange(len(xp))[:, None]
    fit = tv.accuracy(victim, params, xp, yp).numpy()
    held_out = tv.accuracy(victim, params, xt, yt).numpy()
    with torch.no_grad():
        poison_fit = (victim.logits(params, xp[rows, where].to(victim.dtype)).argmax(-1)
                      == yp[rows, where]).double().mean(-1).numpy()
    for k, (i, j, name) in enumerate(slots):
        pair = record["pairs"][i]
        runs = slice(k * reps, (k + 1) * reps)
        sub = {key: v[runs] for key, v in params.items()}
        with torch.no_grad():
            z = victim.logits(sub, xt[pair["targets"]][None].expand(reps, -1, -1)
                              .to(victim.dtype)).double()  # (seeds, targets, classes)
        others = z.clone()
        others[..., pair["intended"]] = -float("inf")
        pair["doses"][j]["arms"][name].update(
            intended=(z.argmax(-1) == pair["intended"]).numpy().astype(int),
            correct=(z.argmax(-1) == pair["source"]).numpy().astype(int),
            margin=(z[..., pair["intended"]] - others.max(-1).values).numpy(),
            train_accuracy=fit[runs], poison_accuracy=poison_fit[runs],
            held_out_accuracy=held_out[runs])
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    if epochs is not None:
        record["epochs"] = epochs
        return {("joint", f"{family}, {epochs} epochs"): record}
    return {("joint", family): record}


# ---------------------------------------------------------------------------------------------
# The paper's penalized attack retrained: the footnote's lambda (PAPER_REG_FACTOR) at the grid's
# largest dose, the whole adversarial class at 4 gray levels (the one cell where the unregularized
# attack poisons the grid's MLP most), beside the grid's lambda, the unregularized attack and random
# controls of the lambda = 1 arm's and of the unregularized arm's size (l2 and l-inf, per poison).
# One batched brew: every arm attacks the same targets with the same poison images from the same
# random starts, so the arms differ only in the penalty. The family's grid part (PART_MLP or
# PART_B) gives the attack, the victims' training and, with 16 targets, the grid's own targets.

PAPER_REG_FACTOR = 1.0  # the paper's footnote 14: row weights 32 - i, i.e. lambda = 1
PENALIZED_EPS_GRAY = 4.0
PENALIZED_LAMBDAS = (PAPER_REG_FACTOR, REG_FACTOR, 0.0)
PENALIZED_ARMS = ("lambda 1", "lambda 0.01", "unregularized", "random lambda 1",
                  "random unregularized")
PENALIZED_RUNS = (("MLP", 16), ("MLP", 64), ("S4D", 16))


def penalized_task(*, kind: str, targets_n: int, seeds: list[int], attack_seed: int = 1,
                   surrogate_epochs: int = SURROGATE_EPOCHS, steps: int | None = None,
                   epochs: int | None = None) -> dict:
    """Gradient matching with the per-row penalty at λ = 1 and λ = REG_FACTOR and without it, and
    the random controls, against the grid's victims of ``kind`` ("MLP": PART_MLP's; "S4D": PART_B's)
    retrained from scratch with the whole adversarial class appended at ε = 4 gray levels;
    ``targets_n`` targets drawn as the grid draws them. Per-pair outcomes (target-major), the
    adversarial margin (logit of the adversarial class minus the largest other), the fit.
    ``steps`` and ``epochs`` shrink the attack and the training (tests only)."""
    if kind not in ("MLP", "S4D"):
        raise ValueError(f"kind must be 'MLP' or 'S4D', got {kind!r}")
    start, cpu = time.perf_counter(), time.process_time()
    torch.set_num_threads(1)
    base = PART_MLP if kind == "MLP" else PART_B
    part = dataclasses.replace(base, cells=((None, PENALIZED_EPS_GRAY, targets_n),),
                               steps=steps or base.steps, epochs=epochs or base.epochs)
    data_split = data.digits_split()
    x, y, xt, yt, data_range = data_split
    if kind == "MLP":
        surrogate, clean, pool, record = prepare_mlp(part, data_split, seeds)
        clean = clean[part.epochs]
    else:
        surrogate = s4d.train(MODEL, x, y, [SURROGATE_SEED], train_config(surrogate_epochs))
        clean = s4d.train(MODEL, x, y, seeds, train_config(part.epochs))
        pool = draw_targets(s4d.predict(surrogate, xt)[0], yt, targets_n, TARGET_SEED)
        record = {"surrogate_train_accuracy": s4d.accuracy(surrogate, x, y),
                  "clean_train_accuracy": s4d.accuracy(clean, x, y),
                  "clean_held_out_accuracy": s4d.accuracy(clean, xt, yt)}
    victim, accuracy = family(part)
    targets, adversarial = pool
    budget = whole_class(y)
    eps = PENALIZED_EPS_GRAY * (data_range[1] - data_range[0]) / 16
    torch.manual_seed(0)
    t0 = time.perf_counter()
    configs = [gm.AttackConfig(steps=part.steps, restarts=part.restarts, reg_factor=r,
                               row_length=ROW) for r in PENALIZED_LAMBDAS]
    brews = gm.brew(surrogate, x, y, xt, yt, targets, adversarial, budget, eps, data_range,
                    configs, seed=attack_seed, victim=victim)
    attack_seconds = time.perf_counter() - t0
    index = brews[0].poison_index
    deltas = dict(zip(PENALIZED_ARMS[:3], (b.delta for b in brews), strict=True))
    for k, arm in enumerate(("lambda 1", "unregularized")):
        deltas[f"random {arm}"] = gm.random_perturbations(x[index], deltas[arm], eps, data_range,
                                                          seed=attack_seed + 1 + k)
    params = gm.retrain(victim, x, y, torch.cat([index] * len(deltas)),
                        torch.cat([deltas[a] for a in PENALIZED_ARMS]), seeds)
    pair_t = [t for t in targets for _ in seeds]
    pair_a = [a for a in adversarial for _ in seeds]
    n_arms, n_pairs = len(PENALIZED_ARMS), len(pair_t)
    out = gm.target_outcome(victim, params, xt, yt, pair_t * n_arms, pair_a * n_arms)
    margin = adversarial_margin(victim, params, xt, pair_t * n_arms, pair_a * n_arms)
    x_fit, y_fit = gm.poisoned_sets(x, y, torch.cat([index] * n_arms),
                                    torch.cat([deltas[a] for a in PENALIZED_ARMS]))
    x_fit, y_fit = x_fit.repeat_interleave(len(seeds), 0), y_fit.repeat_interleave(len(seeds), 0)
    fit = accuracy(params, x_fit, y_fit).numpy()
    poison_fit = accuracy(params, x_fit[:, len(x):], y_fit[:, len(x):]).numpy()
    held_out = accuracy(params, xt, yt).numpy()
    runs_idx = [seeds.index(s) for _ in targets for s in seeds]
    clean_runs = {k: v[runs_idx] for k, v in clean.items()}
    record |= {
        "family": kind, "budget": budget, "eps_gray": PENALIZED_EPS_GRAY,
        "steps": part.steps, "restarts": part.restarts, "epochs": part.epochs,
        "lambdas": list(PENALIZED_LAMBDAS), "row_length": ROW, "targets": targets,
        "adversarial": adversarial, "victim_seeds": list(seeds), "attack_seconds": attack_seconds,
        "clean": {k: v.astype(int) if v.dtype == bool else v for k, v in
                  gm.target_outcome(victim, clean_runs, xt, yt, pair_t, pair_a).items()},
        "arms": {},
    }
    for k, arm in enumerate(PENALIZED_ARMS):
        part_slice = slice(k * n_pairs, (k + 1) * n_pairs)
        record["arms"][arm] = {
            "success": out["success"][part_slice].astype(int),
            "p_adv": out["p_adv"][part_slice], "margin": margin[part_slice],
            "train_accuracy": fit[part_slice], "poison_accuracy": poison_fit[part_slice],
            "held_out_accuracy": held_out[part_slice],
            "rel_row": gm.last_elements_rel_size(deltas[arm], ROW),
            "matching_loss": gm.matching_loss(surrogate, xt, brews[0], x, deltas[arm],
                                              victim=victim),
        }
    for arm in ("lambda 1", "unregularized"):
        record["arms"][f"random {arm}"]["size_ratio"] = gm.size_ratio(deltas[f"random {arm}"],
                                                                      deltas[arm])
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    return {("penalized", f"{kind} {targets_n} targets"): record}


# Does the free row's *position* matter? (Theorem 1's special sequences put the poison at the end
# of the sequence; Table 2's regularizer is the paper's bridge to them.) The penalized task's MLP
# run at 64 targets, with the penalty's weights reversed as the arm to compare: lambda = 1 leaving
# the last row free (the paper's) and lambda = 1 leaving the first row free, from one batched brew
# (the same poison images and starts), each beside a random control of its own size.

POSITION_TARGETS = 64
POSITION_FREE_ROWS = ("last", "first")
POSITION_ARMS = ("last row", "first row", "random last row", "random first row")
POSITION_SIZE_TOLERANCE = 0.10  # the two positional arms count as matched in l2 within 10 %


def arm_sizes(delta: torch.Tensor, row: int) -> dict:
    """The size of one arm's perturbations ``delta`` (A, P, L): the median and the mean over
    poisons of ‖δ_i‖₂ and ‖δ_i‖_∞, the root of the summed squares over every poison, and the
    share of ‖δ_i‖₂ in the last and in the first ``row`` positions (gm.last_elements_rel_size,
    averaged over poisons; the first row's on the sequence reversed)."""
    flat = delta.reshape(-1, delta.shape[-1])
    l2 = torch.linalg.vector_norm(flat, dim=-1)
    linf = flat.abs().amax(-1)
    return {"l2_median": float(l2.median()), "l2_mean": float(l2.mean()),
            "linf_median": float(linf.median()), "linf_mean": float(linf.mean()),
            "l2_total": float(torch.linalg.vector_norm(flat)),
            "last_row_share": gm.last_elements_rel_size(delta, row),
            "first_row_share": gm.last_elements_rel_size(delta.flip(-1), row)}


def position_deltas(brews: list, x: torch.Tensor, eps: float, data_range, attack_seed: int):
    """The position tasks' four perturbations (POSITION_ARMS): the two brews' (last row, first row
    spared) and a random control of each one's size (gm.random_perturbations, seeds
    attack_seed + 1 and + 2); the poisons' indices, and both concatenated in POSITION_ARMS order
    for one retraining."""
    index = brews[0].poison_index
    deltas = dict(zip(POSITION_ARMS[:2], (b.delta for b in brews), strict=True))
    for k, arm in enumerate(POSITION_ARMS[:2]):
        deltas[f"random {arm}"] = gm.random_perturbations(x[index], deltas[arm], eps, data_range,
                                                          seed=attack_seed + 1 + k)
    all_delta = torch.cat([deltas[a] for a in POSITION_ARMS])
    return index, deltas, torch.cat([index] * len(POSITION_ARMS)), all_delta


def position_outcomes(victim, params, xt, yt, targets: list, adversarial: list, seeds: list):
    """The (target, seed) pairs, target-major, and each arm's outcome (gm.target_outcome) and
    adversarial margin on them, the arms' runs in POSITION_ARMS order."""
    pair_t = [t for t in targets for _ in seeds]
    pair_a = [a for a in adversarial for _ in seeds]
    n_arms = len(POSITION_ARMS)
    out = gm.target_outcome(victim, params, xt, yt, pair_t * n_arms, pair_a * n_arms)
    margin = adversarial_margin(victim, params, xt, pair_t * n_arms, pair_a * n_arms)
    return pair_t, pair_a, out, margin


def position_arms(out: dict, margin: np.ndarray, fit: np.ndarray, held_out: np.ndarray,
                  deltas: dict, n_pairs: int, surrogate, xt: torch.Tensor, brew, x: torch.Tensor,
                  victim) -> dict:
    """The position tasks' record of each arm of POSITION_ARMS: its ``n_pairs`` (target, seed)
    outcomes, Pr(adversarial class) and margins (the arm's slice of the retrained runs, arms in
    POSITION_ARMS order), fits, sizes (:func:`arm_sizes`) and matching loss; each random control
    also gets its size ratio to its arm (gm.size_ratio)."""
    arms = {}
    for k, arm in enumerate(POSITION_ARMS):
        part_slice = slice(k * n_pairs, (k + 1) * n_pairs)
        arms[arm] = {
            "success": out["success"][part_slice].astype(int),
            "p_adv": out["p_adv"][part_slice], "margin": margin[part_slice],
            "train_accuracy": fit[part_slice], "held_out_accuracy": held_out[part_slice],
            "sizes": arm_sizes(deltas[arm], ROW),
            "matching_loss": gm.matching_loss(surrogate, xt, brew, x, deltas[arm], victim=victim),
        }
    for arm in POSITION_ARMS[:2]:
        arms[f"random {arm}"]["size_ratio"] = gm.size_ratio(deltas[f"random {arm}"], deltas[arm])
    return arms


def position_task(*, targets_n: int, seeds: list[int], attack_seed: int = 1,
                  steps: int | None = None, epochs: int | None = None) -> dict:
    """Does the position of the penalty's free row matter, at matched size? The setting of the
    penalized task's ("MLP", 64) run: the grid's MLP victims (PART_MLP) retrained from scratch on
    the clean set with the whole adversarial class appended at ε = 4 gray levels, ``targets_n``
    targets drawn as the grid draws them, the victim seeds ``seeds``, the same MLP surrogate (seed
    100) and attack length (PART_MLP's steps and starts). Arms, from one batched brew (the same
    poison images and random starts): λ = 1 sparing the last row (the paper's weights
    w_p = λ (R − 1 − r(p))), λ = 1 sparing the first row (the weights reversed, w_p = λ r(p)),
    and for each a random control of its own size (gm.random_perturbations: the arm's ℓ2 norm and
    ℓ∞ bound per poison). Records per (target, seed) pair (target-major) the outcome, Pr(adversarial
    class) and the adversarial margin, and per arm its sizes (:func:`arm_sizes`), each control's
    size ratio to its arm and the first-row arm's to the last-row arm's (gm.size_ratio).

    Pre-registered (written before the run): the outcome is the adversarial margin per (target,
    seed) pair, paired between the two positional arms; a one-sided sign test at the chapter's
    5 % level that the "last row" arm's margin exceeds the "first row" arm's, p = P(Bin(n, 1/2) ≥
    b) over the n pairs whose margins differ, b of them with the last row's larger; beside it
    the flips of every arm with Wilson's intervals counted by target. The two arms count as
    matched in size when the median per-poison ℓ2 ratio of the first-row arm to the last-row arm
    lies within POSITION_SIZE_TOLERANCE of 1; otherwise the comparison is confounded by size, by
    that ratio, and nothing is rescaled after the run. ``steps`` and ``epochs`` shrink the attack
    and the training (tests only)."""
    start, cpu = time.perf_counter(), time.process_time()
    torch.set_num_threads(1)
    part = dataclasses.replace(PART_MLP, cells=((None, PENALIZED_EPS_GRAY, targets_n),),
                               steps=steps or PART_MLP.steps, epochs=epochs or PART_MLP.epochs)
    data_split = data.digits_split()
    x, y, xt, yt, data_range = data_split
    surrogate, clean, (targets, adversarial), record = prepare_mlp(part, data_split, seeds)
    clean = clean[part.epochs]
    victim, accuracy = family(part)
    budget = whole_class(y)
    eps = PENALIZED_EPS_GRAY * (data_range[1] - data_range[0]) / 16
    torch.manual_seed(0)
    t0 = time.perf_counter()
    configs = [gm.AttackConfig(steps=part.steps, restarts=part.restarts,
                               reg_factor=PAPER_REG_FACTOR, row_length=ROW, free_row=f)
               for f in POSITION_FREE_ROWS]
    brews = gm.brew(surrogate, x, y, xt, yt, targets, adversarial, budget, eps, data_range,
                    configs, seed=attack_seed, victim=victim)
    attack_seconds = time.perf_counter() - t0
    index, deltas, all_index, all_delta = position_deltas(brews, x, eps, data_range, attack_seed)
    params = gm.retrain(victim, x, y, all_index, all_delta, seeds)
    pair_t, pair_a, out, margin = position_outcomes(victim, params, xt, yt, targets, adversarial,
                                                    seeds)
    n_pairs = len(pair_t)
    x_fit, y_fit = gm.poisoned_sets(x, y, all_index, all_delta)
    x_fit, y_fit = x_fit.repeat_interleave(len(seeds), 0), y_fit.repeat_interleave(len(seeds), 0)
    fit = accuracy(params, x_fit, y_fit).numpy()
    held_out = accuracy(params, xt, yt).numpy()
    runs_idx = [seeds.index(s) for _ in targets for s in seeds]
    clean_runs = {k: v[runs_idx] for k, v in clean.items()}
    record |= {
        "family": "MLP", "budget": budget, "eps_gray": PENALIZED_EPS_GRAY,
        "steps": part.steps, "restarts": part.restarts, "epochs": part.epochs,
        "reg_factor": PAPER_REG_FACTOR, "free_rows": list(POSITION_FREE_ROWS), "row_length": ROW,
        "targets": targets, "adversarial": adversarial, "victim_seeds": list(seeds),
        "attack_seconds": attack_seconds,
        "clean": {k: v.astype(int) if v.dtype == bool else v for k, v in
                  gm.target_outcome(victim, clean_runs, xt, yt, pair_t, pair_a).items()},
    }
    record["arms"] = position_arms(out, margin, fit, held_out, deltas, n_pairs,
                                   surrogate, xt, brews[0], x, victim)
    record["first_to_last_size_ratio"] = gm.size_ratio(deltas["first row"], deltas["last row"])
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    return {("position", f"MLP {targets_n} targets"): record}


POSITION_TRANSFER = "S4D transfer"
POSITION_TRANSFER_DOSE = 3  # 6 gray levels: the control's dose where gradient matching poisons it


def position_transfer_task(*, surrogate_seed: int, extractor_seed: int, target_seed: int,
                           attack_seed: int, victim_seeds: list[int],
                           dose: int = POSITION_TRANSFER_DOSE) -> dict:
    """The free row's position at matched size, on a victim that gradient matching does poison:
    the control's "S4D transfer" setting (a linear head retrained by AdamW on the features of a
    frozen S4D extractor; the control's surrogate, extractor, 32 targets, poison budget 40 and
    step rule) at ``dose`` times the chapter's ε, where the control's unpenalized attack flips
    targets. Arms, from one batched brew (the same poison images and random starts): λ = 1
    sparing the last row (the paper's weights) and λ = 1 sparing the first row (reversed), each
    beside a random control of its own size; records as :func:`position_task`.

    Pre-registered (written before the run, the same rule as the MLP run): the outcome is the
    adversarial margin per (target, seed) pair, paired between the two positional arms; a
    one-sided sign test at 5 % that the "last row" arm's margin exceeds the "first row" arm's
    over the pairs whose margins differ; flips per arm with Wilson intervals by target; the arms
    count as matched in size when the median per-poison ℓ2 ratio is within
    POSITION_SIZE_TOLERANCE of 1."""
    start, cpu = time.perf_counter(), time.process_time()
    torch.set_num_threads(1)
    family_, setting, _, _, _ = CONTROL_SETTINGS[POSITION_TRANSFER]
    x_all, y_all, xt, yt, data_range = data.digits_split()
    pretrain, (x, y) = split_for_transfer(x_all, y_all)
    eps = dose * CONTROL_EPS_GRAY * (data_range[1] - data_range[0]) / 16
    victim, extra = control_victim(family_, setting, pretrain, extractor_seed)
    surrogate = victim.train(x[None], y[None], [surrogate_seed])
    clean = victim.train(x[None].expand(len(victim_seeds), -1, -1),
                         y[None].expand(len(victim_seeds), -1), victim_seeds)
    with torch.no_grad():
        predicted = victim.logits(surrogate, xt[None].to(victim.dtype))[0].argmax(-1)
    targets, adversarial = draw_targets(predicted, yt, CONTROL_TARGETS, target_seed)
    configs = [gm.AttackConfig(steps=CONTROL_STEPS, restarts=CONTROL_RESTARTS,
                               reg_factor=PAPER_REG_FACTOR, row_length=ROW, free_row=f)
               for f in POSITION_FREE_ROWS]
    t0 = time.perf_counter()
    brews = gm.brew(surrogate, x, y, xt, yt, targets, adversarial, CONTROL_BUDGET, eps,
                    data_range, configs, seed=attack_seed, victim=victim)
    attack_seconds = time.perf_counter() - t0
    index, deltas, all_index, all_delta = position_deltas(brews, x, eps, data_range, attack_seed)
    params = gm.retrain(victim, x, y, all_index, all_delta, victim_seeds)
    pair_t, pair_a, out, margin = position_outcomes(victim, params, xt, yt, targets, adversarial,
                                                    victim_seeds)
    n_pairs = len(pair_t)
    x_fit, y_fit = gm.poisoned_sets(x, y, all_index, all_delta)
    reps = len(victim_seeds)
    fit = tv.accuracy(victim, params, x_fit.repeat_interleave(reps, 0),
                      y_fit.repeat_interleave(reps, 0)).numpy()
    held_out = tv.accuracy(victim, params, xt, yt).numpy()
    clean_runs = {k: v[[victim_seeds.index(s) for _ in targets for s in victim_seeds]]
                  for k, v in clean.items()}
    record = {
        "family": family_, "setting": setting, "budget": CONTROL_BUDGET,
        "eps_gray": dose * CONTROL_EPS_GRAY, "dose": dose,
        "steps": CONTROL_STEPS, "restarts": CONTROL_RESTARTS,
        "reg_factor": PAPER_REG_FACTOR, "free_rows": list(POSITION_FREE_ROWS), "row_length": ROW,
        "targets": targets, "adversarial": adversarial, "victim_seeds": list(victim_seeds),
        "extractor_held_out_accuracy": float(extra["extractor"](extra["extractor_params"], xt,
                                                                yt)[0]),
        "surrogate_held_out_accuracy": float(tv.accuracy(victim, surrogate, xt, yt)[0]),
        "clean_held_out_accuracy": tv.accuracy(victim, clean, xt, yt).numpy(),
        "attack_seconds": attack_seconds,
        "clean": {k: v.astype(int) if v.dtype == bool else v for k, v in
                  gm.target_outcome(victim, clean_runs, xt, yt, pair_t, pair_a).items()},
    }
    record["arms"] = position_arms(out, margin, fit, held_out, deltas, n_pairs,
                                   surrogate, xt, brews[0], x, victim)
    record["first_to_last_size_ratio"] = gm.size_ratio(deltas["first row"], deltas["last row"])
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    gray = f"{dose * CONTROL_EPS_GRAY:g} gray"
    return {("position", f"{POSITION_TRANSFER} {gray}"): record}


def adversarial_margin(victim, params, x_test, targets, adversarial) -> np.ndarray:
    """Run r's logit of ``adversarial[r]`` on test image ``targets[r]`` minus its largest other
    logit (> 0: the target is classified as the adversarial class)."""
    adv = torch.tensor(adversarial)
    rows = torch.arange(len(adv))
    with torch.no_grad():
        z = victim.logits(params, x_test[targets][:, None, :].to(victim.dtype))[:, 0].double()
    others = z.clone()
    others[rows, adv] = -float("inf")
    return (z[rows, adv] - others.max(-1).values).numpy()


S4D_FIT_EPOCHS = (10, 20, 40)


def s4d_fit_task(*, seeds: list[int]) -> dict:
    """How well S4D retrained from scratch fits the victims' clean set after the epochs of
    S4D_FIT_EPOCHS (the chapter's training, cosine decay over the whole run)."""
    x_all, y_all, xt, yt, _ = data.digits_split()
    _, (x, y) = split_for_transfer(x_all, y_all)
    record = {}
    for epochs in S4D_FIT_EPOCHS:
        params = s4d.train(MODEL, x, y, seeds, train_config(epochs))
        record[str(epochs)] = {"train_accuracy": s4d.accuracy(params, x, y),
                               "held_out_accuracy": s4d.accuracy(params, xt, yt)}
    return {("s4d_fit",): record}


def control_tasks() -> list:
    """One task per setting, each with its own seeds (the same for every setting: the settings
    differ only in the victim)."""
    from diagnose_matching import diagnose_task
    from evasion_scale import evasion_task
    from evasion_scale import key as evasion_key
    from other_classes_control import key as other_key
    from other_classes_control import other_classes_task
    from tasks import Task

    costs = {"MLP transfer": 120.0, "MLP scratch": 400.0, "S4D transfer": 300.0,
             "S4D scratch": 900.0, "S4D scratch, 40 epochs": 900.0}
    evasion_costs = {"MLP transfer": 5.0, "MLP scratch": 5.0, "S4D transfer": 15.0,
                     "S4D scratch": 15.0, "S4D scratch, 40 epochs": 20.0}  # measured, one thread
    return [
        Task(f"control {name}", control_setting,
             {"name": name, "surrogate_seed": SURROGATE_SEED, "extractor_seed": EXTRACTOR_SEED,
              "target_seed": TARGET_SEED, "attack_seed": ATTACK_SEED,
              "victim_seeds": CONTROL_SETTINGS[name][2]},
             costs[name], (("control", name),))
        for name in CONTROL_SETTINGS
    ] + [
        Task(f"oracle MLP transfer {eps_gray:g} gray", oracle_task,
             {"surrogate_seed": SURROGATE_SEED, "extractor_seed": EXTRACTOR_SEED,
              "target_seed": TARGET_SEED, "attack_seed": ATTACK_SEED, "oracle_seed": ORACLE_SEED,
              "victim_seeds": ORACLE_SEEDS, "eps_gray": eps_gray, "choices": choices},
             300.0 * len(choices), (("oracle", f"MLP transfer {eps_gray:g} gray"),))
        for eps_gray, choices in ORACLE_RUNS
    ] + [
        Task("S4D fit", s4d_fit_task, {"seeds": [0]}, 200.0, (("s4d_fit",),)),
    ] + [
        Task(f"implicit {fam} transfer", implicit_task,
             {"family": fam, "surrogate_seed": SURROGATE_SEED, "extractor_seed": EXTRACTOR_SEED,
              "target_seed": TARGET_SEED, "attack_seed": ATTACK_SEED,
              "victim_seeds": ORACLE_SEEDS},
             cost, (("implicit", f"{fam} transfer {CONTROL_EPS_GRAY:g} gray"),))
        for fam, cost in (("MLP", 480.0), ("S4D", 600.0))
    ] + [
        Task(f"wide MLP scratch {CONTROL_EPS_GRAY:g} gray", wide_scratch_task,
             {"surrogate_seed": SURROGATE_SEED, "target_seed": TARGET_SEED,
              "attack_seed": ATTACK_SEED, "victim_seeds": WIDE_SEEDS},
             900.0, (("wide_scratch", f"MLP {WIDE_HIDDEN} scratch {CONTROL_EPS_GRAY:g} gray"),)),
        Task(f"published brew, wide MLP scratch {CONTROL_EPS_GRAY:g} gray", published_brew_task,
             {"surrogate_seed": SURROGATE_SEED, "target_seed": TARGET_SEED,
              "attack_seed": ATTACK_SEED, "victim_seeds": WIDE_SEEDS},
             900.0, (("published_brew",
                      f"MLP {WIDE_HIDDEN} scratch {CONTROL_EPS_GRAY:g} gray"),)),
        Task(f"published brew, MLP transfer {CONTROL_EPS_GRAY:g} gray", published_transfer_task,
             {"surrogate_seed": SURROGATE_SEED, "extractor_seed": EXTRACTOR_SEED,
              "target_seed": TARGET_SEED, "attack_seed": ATTACK_SEED,
              "victim_seeds": CONTROL_SETTINGS["MLP transfer"][2]},
             300.0, (("published_brew", f"MLP transfer {CONTROL_EPS_GRAY:g} gray"),)),
    ] + [
        Task(f"penalized {kind} {n} targets", penalized_task,
             {"kind": kind, "targets_n": n, "seeds": list(VICTIM_SEEDS)},
             {"MLP": 1.5, "S4D": 40.0}[kind] * n, (("penalized", f"{kind} {n} targets"),))
        for kind, n in PENALIZED_RUNS
    ] + [
        Task(f"position MLP {POSITION_TARGETS} targets", position_task,
             {"targets_n": POSITION_TARGETS, "seeds": list(VICTIM_SEEDS)},
             1.5 * POSITION_TARGETS, (("position", f"MLP {POSITION_TARGETS} targets"),)),
        Task(f"position {POSITION_TRANSFER}", position_transfer_task,
             {"surrogate_seed": SURROGATE_SEED, "extractor_seed": EXTRACTOR_SEED,
              "target_seed": TARGET_SEED, "attack_seed": ATTACK_SEED,
              "victim_seeds": CONTROL_SETTINGS[POSITION_TRANSFER][2],
              "dose": POSITION_TRANSFER_DOSE},
             300.0, (("position", f"{POSITION_TRANSFER} "
                      f"{POSITION_TRANSFER_DOSE * CONTROL_EPS_GRAY:g} gray"),)),
    ] + [
        Task(f"wide MLP scratch {CONTROL_EPS_GRAY:g} gray, decay {w:g}", wide_weight_decay_task,
             {"weight_decay": w, "surrogate_seed": SURROGATE_SEED,
              "target_seed": WIDE_WD_TARGET_SEED, "attack_seed": ATTACK_SEED,
              "victim_seeds": WIDE_WD_SEEDS, "targets_n": WIDE_WD_TARGETS},
             200.0, (("weight_decay", f"MLP {WIDE_HIDDEN} scratch {CONTROL_EPS_GRAY:g} gray, "
                      f"decay {w:g}"),))
        for w in WIDE_WD
    ] + [
        Task(f"wide MLP scratch {CONTROL_EPS_GRAY:g} gray, pilot {name}", wide_pilot_task,
             {"pilot": name, "surrogate_seed": SURROGATE_SEED,
              "target_seed": WIDE_WD_TARGET_SEED, "attack_seed": ATTACK_SEED,
              "victim_seeds": WIDE_WD_SEEDS, "targets_n": WIDE_WD_TARGETS},
             600.0, (("wide_pilot", name),))
        for name in WIDE_PILOTS
    ] + [
        Task(f"joint {fam}", joint_task,
             {"family": fam, "surrogate_seed": SURROGATE_SEED, "pair_seed": JOINT_SEED,
              "attack_seed": ATTACK_SEED, "victim_seeds": JOINT_SEEDS},
             {"MLP": 300.0, "S4D": 900.0}[fam], (("joint", fam),))
        for fam in JOINT_FAMILIES
    ] + [
        Task(f"joint {JOINT_LONG[0]}, {JOINT_LONG[1]} epochs", joint_task,
             {"family": JOINT_LONG[0], "surrogate_seed": SURROGATE_SEED, "pair_seed": JOINT_SEED,
              "attack_seed": ATTACK_SEED, "victim_seeds": JOINT_SEEDS, "epochs": JOINT_LONG[1]},
             1800.0, (("joint", f"{JOINT_LONG[0]}, {JOINT_LONG[1]} epochs"),))
    ] + [
        # why gradient matching does not poison the retrained head (benchmarks/diagnose_matching)
        Task(f"diagnose MLP transfer {CONTROL_EPS_GRAY:g} gray", diagnose_task,
             {"surrogate_seed": SURROGATE_SEED, "extractor_seed": EXTRACTOR_SEED,
              "target_seed": TARGET_SEED, "attack_seed": ATTACK_SEED,
              "victim_seeds": ORACLE_SEEDS, "eps_gray": CONTROL_EPS_GRAY},
             420.0, (("diagnose", f"MLP transfer {CONTROL_EPS_GRAY:g} gray"),)),
    ] + [
        # the extractor trained on other classes (benchmarks/other_classes_control, pre-registered)
        Task(f"other classes {fam} transfer {CONTROL_EPS_GRAY:g} gray", other_classes_task,
             {"family": fam, "surrogate_seed": SURROGATE_SEED, "extractor_seed": EXTRACTOR_SEED,
              "target_seed": TARGET_SEED, "attack_seed": ATTACK_SEED,
              "victim_seeds": CONTROL_SETTINGS["MLP transfer"][2],
              "eps_gray": CONTROL_EPS_GRAY},
             cost, (other_key(fam),))
        for fam, cost in (("MLP", 300.0),)
    ] + [
        # its second registered run: every eligible target the first did not draw
        Task(f"other classes MLP transfer {CONTROL_EPS_GRAY:g} gray, remaining targets",
             other_classes_task,
             {"family": "MLP", "surrogate_seed": SURROGATE_SEED, "extractor_seed": EXTRACTOR_SEED,
              "target_seed": TARGET_SEED, "attack_seed": ATTACK_SEED,
              "victim_seeds": CONTROL_SETTINGS["MLP transfer"][2],
              "eps_gray": CONTROL_EPS_GRAY, "remaining": True},
             900.0, (other_key("MLP", CONTROL_EPS_GRAY, True),))
    ] + [
        # the data's adversarial scale: targeted evasion of each setting's own targets
        # (benchmarks/evasion_scale)
        Task(f"evasion {name}", evasion_task,
             {"name": name, "surrogate_seed": SURROGATE_SEED, "extractor_seed": EXTRACTOR_SEED,
              "target_seed": TARGET_SEED},
             evasion_costs[name], (evasion_key(name),))
        for name in CONTROL_SETTINGS
    ] + [
        # the control on targets the chapter's eps reaches directly (benchmarks/evasion_scale,
        # second design, registered before its runs)
        Task(f"reachable {name}", control_setting,
             {"name": name, "surrogate_seed": SURROGATE_SEED, "extractor_seed": EXTRACTOR_SEED,
              "target_seed": TARGET_SEED, "attack_seed": ATTACK_SEED,
              "victim_seeds": CONTROL_SETTINGS[name][2], "reachable": True},
             costs[name] / 2, (("reachable", name),))
        for name in REACHABLE_SETTINGS
    ]


def control_settings() -> dict:
    return {
        "doses_in_chapter_eps": list(CONTROL_DOSES),
        "chapter_eps_gray": CONTROL_EPS_GRAY,
        "budget": CONTROL_BUDGET,
        "targets": CONTROL_TARGETS,
        "attack": {"steps": CONTROL_STEPS, "restarts": CONTROL_RESTARTS,
                   "constant_lr_in_eps": gm.AttackConfig().lr, "authors_tau": 0.1},
        "mlp_hidden": MLP_HIDDEN,
        "mlp_train": dataclasses.asdict(MLP_CONTROL_TRAIN),
        "mlp_extractor_train": dataclasses.asdict(MLP_EXTRACTOR_TRAIN),
        "head_train": dataclasses.asdict(HEAD_TRAIN),
        "s4d_epochs": S4D_CONTROL_EPOCHS,
        "epochs_by_setting": dict(CONTROL_EPOCHS),
        "s4d_extractor_epochs": 2 * S4D_CONTROL_EPOCHS,
        "split": "pretraining: training images with index % 3 == 0; victim's set: the rest",
        "settings": {k: {"family": f, "setting": st, "victim_seeds": sd, "arms": list(a),
                         "doses": list(d)} for k, (f, st, sd, a, d) in CONTROL_SETTINGS.items()},
        "extractor_seed": EXTRACTOR_SEED,
        "attack_seed": ATTACK_SEED,
        "oracle": {"victim": "MLP transfer", "steps": ORACLE_STEPS, "lr_in_eps": 0.1,
                   "start": "zero", "unrolled_seed": ORACLE_SEED, "victim_seeds": ORACLE_SEEDS,
                   "runs": [{"eps_gray": e, "poison_choices": list(c)} for e, c in ORACLE_RUNS],
                   "poison_choices": {"random images": "random images of the adversarial class "
                                      "(the control's)", "nearest images": "nearest the target "
                                      "in the extractor's feature space"}},
        "s4d_fit_epochs": list(S4D_FIT_EPOCHS),
        "implicit": {"victims": "frozen extractor (MLP or S4D) with a retrained head",
                     "steps": IMPLICIT_STEPS, "lr_in_eps": 0.1, "start": "zero",
                     "lambda_rule": "the optimum's norm equals the surrogate head's (seed "
                     f"{SURROGATE_SEED}, the book's AdamW head)",
                     "poison_choice": "nearest the target in the extractor's feature space",
                     "victim_seeds": ORACLE_SEEDS, "adamw_epochs": list(IMPLICIT_EPOCHS),
                     "eps_gray": CONTROL_EPS_GRAY},
        "wide_scratch": {"victim": f"MLP, one hidden layer of {WIDE_HIDDEN}, from scratch",
                         "train": dataclasses.asdict(WIDE_TRAIN),
                         "surrogates": f"{WIDE_MEMBERS} of the victim's architecture and training "
                         f"on the clean victim's set, seeds {SURROGATE_SEED}..",
                         "attack": {"steps": CONTROL_STEPS, "restarts": WIDE_RESTARTS,
                                    "step_rule": "authors", "tau": 0.1},
                         "placements": list(WIDE_PLACEMENTS), "victim_seeds": WIDE_SEEDS,
                         "budget": CONTROL_BUDGET, "targets": CONTROL_TARGETS,
                         "eps_gray": CONTROL_EPS_GRAY},
        "published_brew": {"setting": "wide_scratch's (surrogate, targets, poison images, victims, "
                           "poisons replacing their images); and the control's MLP transfer "
                           "(extractor, surrogate head, targets, victims, poisons appended)",
                           "attack": "benchmarks/published_matching.py: the published brewing "
                           "loop, as published (poisons augmented while brewing, shift "
                           f"{PUBLISHED_SHIFT} of 8 pixels and left-right mirroring; start not "
                           "projected into the data range; the trial chosen by its loss during "
                           "its last step)", "steps": CONTROL_STEPS, "restarts": WIDE_RESTARTS,
                           "tau": 0.1, "victim_seeds": WIDE_SEEDS, "budget": CONTROL_BUDGET,
                           "targets": CONTROL_TARGETS, "eps_gray": CONTROL_EPS_GRAY,
                           "criterion": "the attack's Wilson 95 % interval by target above its "
                           "random control's"},
        "weight_decay": {"setting": "wide_scratch's, AdamW weight decay in the victims' and the "
                         "surrogate's training", "weight_decays": list(WIDE_WD),
                         "target_seed": WIDE_WD_TARGET_SEED, "victim_seeds": WIDE_WD_SEEDS,
                         "targets": WIDE_WD_TARGETS,
                         "criterion": "at least 3 of 8 targets flipped on both seeds, random none",
                         "criterion_met": False},
        "wide_pilots": {"setting": "wide_scratch's, poisons replacing their images, with the "
                        "pilot's levers", "pilots": WIDE_PILOTS,
                        "target_seed": WIDE_WD_TARGET_SEED, "victim_seeds": WIDE_WD_SEEDS,
                        "targets": WIDE_WD_TARGETS,
                        "criterion": f"at least {PILOT_MIN_FLIPS} of {WIDE_WD_TARGETS} targets "
                        "flipped on both seeds, random none on any seed, every run fitting at "
                        f"least {PILOT_MIN_POISON_FIT:.0%} of its poisons",
                        "order": "by cost; the first pilot that meets the criterion is run at "
                        f"{CONTROL_TARGETS} targets (target seed {TARGET_SEED}) on victim seeds "
                        f"{WIDE_SEEDS}"},
        "joint": {"threat_model": "the paper's (random-subset): targets of one source class, "
                  "one intended class, poisons drawn from every class keeping their labels, one "
                  "joint brew (gm.brew_joint), poisons replacing their images",
                  "victims": "the control's from-scratch MLP and S4D, retrained",
                  "pairs": JOINT_PAIRS, "pair_seed": JOINT_SEED, "targets_per_pair": JOINT_TARGETS,
                  "poisons": JOINT_POISONS, "doses_in_chapter_eps": list(JOINT_DOSES),
                  "victim_seeds": JOINT_SEEDS, "steps": CONTROL_STEPS,
                  "restarts": CONTROL_RESTARTS, "step_rule": "authors",
                  "success": "targets classified as the intended class; Wilson's interval by "
                  "target (every seed / any seed), per pair and pooled",
                  "long": {"family": JOINT_LONG[0], "epochs": JOINT_LONG[1],
                           "why": "added after the first runs, before its own: the 10-epoch S4D "
                           "does not fit its poisons"}},
        "penalized": {"victims": "the grid's (MLP: part MLP; S4D: part B), from scratch",
                      "budget": "the whole adversarial class", "eps_gray": PENALIZED_EPS_GRAY,
                      "lambdas": list(PENALIZED_LAMBDAS), "row_length": ROW,
                      "arms": list(PENALIZED_ARMS), "random_match": "l2-linf",
                      "runs": [{"family": k, "targets": n} for k, n in PENALIZED_RUNS],
                      "victim_seeds": list(VICTIM_SEEDS), "target_seed": TARGET_SEED},
        "position": {"victims": "the grid's MLP (part MLP), from scratch",
                     "budget": "the whole adversarial class", "eps_gray": PENALIZED_EPS_GRAY,
                     "reg_factor": PAPER_REG_FACTOR, "free_rows": list(POSITION_FREE_ROWS),
                     "row_length": ROW, "arms": list(POSITION_ARMS), "random_match": "l2-linf",
                     "targets": POSITION_TARGETS, "victim_seeds": list(VICTIM_SEEDS),
                     "target_seed": TARGET_SEED,
                     "size_tolerance_l2": POSITION_SIZE_TOLERANCE,
                     "preregistered": "outcome: the adversarial margin per (target, seed) pair, "
                     "paired between 'last row' and 'first row'; one-sided sign test at 5 % that "
                     "'last row' > 'first row'; flips per arm with Wilson intervals by target; "
                     "sizes matched when the median per-poison l2 ratio is within 10 % of 1",
                     "s4d_transfer": {
                         "victims": "the control's S4D transfer setting (a linear head on a frozen "
                         "S4D extractor)", "dose": POSITION_TRANSFER_DOSE,
                         "eps_gray": POSITION_TRANSFER_DOSE * CONTROL_EPS_GRAY,
                         "budget": CONTROL_BUDGET, "targets": CONTROL_TARGETS,
                         "victim_seeds": CONTROL_SETTINGS[POSITION_TRANSFER][2],
                         "steps": CONTROL_STEPS, "restarts": CONTROL_RESTARTS,
                         "preregistered": "the same rule as the MLP run"}},
    }


# ---------------------------------------------------------------------------------------------
# Tasks (benchmarks/reproduce.py): each carries its own seeds.


def prepare_task(seeds: list[int], surrogate_epochs: int) -> dict:
    """The S4D surrogate and clean victims of parts C and B, as recorded."""
    start = time.perf_counter()
    torch.set_num_threads(1)
    *_, record = prepare({"C": PART_C, "B": PART_B}, seeds, surrogate_epochs,
                         max(n for p in (PART_C, PART_B) for _, _, n in p.cells))
    record["prepare_seconds"] = time.perf_counter() - start
    return {(k,): v for k, v in record.items()}


PREPARE_KEYS = ("surrogate_train_accuracy", "surrogate_held_out_accuracy", "clean",
                "prepare_seconds")


def part_task(name: str, seeds: list[int], surrogate_epochs: int) -> dict:
    """One part of the grid (C, B or MLP), with the shared preparation recomputed (it is seeded)."""
    parts = {"C": PART_C, "B": PART_B, "MLP": PART_MLP}
    s4d_parts = {"C": PART_C, "B": PART_B}
    data_split, surrogate, clean, pool, _ = prepare(
        s4d_parts, seeds, surrogate_epochs,
        max(n for p in s4d_parts.values() for _, _, n in p.cells))
    _, record = _part((name, parts[name], surrogate, clean, data_split, seeds, pool))
    return {(name,): record}


def tasks() -> list:
    """The grid's preparation and three parts (as committed), and the control's four settings."""
    from tasks import Task

    seeds = list(VICTIM_SEEDS)
    grid = [Task("prepare", prepare_task, {"seeds": seeds, "surrogate_epochs": SURROGATE_EPOCHS},
                 300.0, tuple((k,) for k in PREPARE_KEYS))]
    grid += [Task(f"part {name}", part_task,
                  {"name": name, "seeds": seeds, "surrogate_epochs": SURROGATE_EPOCHS},
                  cost, ((name,),))
             for name, cost in (("C", 1200.0), ("B", 900.0), ("MLP", 120.0))]
    return grid + control_tasks()


def finish(results: dict) -> dict:
    """The results with the settings of every part and of the control."""
    parts = {"C": PART_C, "B": PART_B, "MLP": PART_MLP}
    x, y, xt, _, data_range = data.digits_split()
    settings = {
        "model": dataclasses.asdict(MODEL),
        "train": {"batch": 32, "lr": 3e-2, "weight_decay": s4d.TrainConfig().weight_decay,
                  "schedule": "cosine", "optimizer": "AdamW", "dtype": "float32"},
        "surrogate_epochs": SURROGATE_EPOCHS,
        "surrogate_seed": SURROGATE_SEED,
        "target_seed": TARGET_SEED,
        "reg_factor": REG_FACTOR,
        "row_length": ROW,
        "n_train": len(x),
        "n_test": len(xt),
        "whole_class": whole_class(y),
        "gray_level": (data_range[1] - data_range[0]) / 16,
        "parts": {n: dataclasses.asdict(p) for n, p in parts.items()},
        "threads_per_part": 1,
        "control": control_settings(),
    }
    seeds = {"victims": list(VICTIM_SEEDS),
             "control": {k: v[2] for k, v in CONTROL_SETTINGS.items()}}
    return {"results": results, "settings": settings, "seeds": seeds}
