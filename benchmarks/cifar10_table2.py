"""Rerun the paper's Table 2 (Slutzky et al. 2025): clean-label poisoning of S4 on CIFAR-10.

Not run by the book: it needs CIFAR-10 (the "python version", extracted) and, at the paper's size,
a GPU. Nothing is downloaded. Usage::

    BOOK_CIFAR10=/path/to/cifar-10-batches-py BOOK_DEVICE=cuda \\
        python benchmarks/cifar10_table2.py --row 1 --threat-model random-subset --reg-factor 1 \\
        --out table2-row1.json

What one row computes (Table 2's rows: 10 or 20 target test images, 500, 2500 or 5000 poisons):

1. CIFAR-10 by :func:`lib.book.data.cifar10`: the first 45000 training images (the paper's
   count; which images, it does not say), read as
   1024 steps of 3 values the way the authors' S4 victim reads them (``--reading pixels`` for
   pixel-by-pixel RGB steps instead).
2. A clean surrogate, :data:`lib.ssm.s4d.CIFAR10_VICTIM` (4 layers, 128 channels, state 64), trained
   as :data:`lib.ssm.s4d.CIFAR10_TRAIN` (the Table-2 version of the authors' code: AdamW, lr 0.01,
   weight decay 5e-4, batch 128, 40 epochs; ``--epochs`` to change), with a cosine schedule.
3. The threat model. ``--threat-model random-subset`` is the paper's (the ``random-subset`` of the
   gradient-matching code that produced Table 2): the targets are test images of *one* random
   class, with one shared intended class; the poisons are drawn at random from *all* 50000
   training images (each keeps its own label); one *joint* brew matches their gradient to that of
   the targets' mean loss (:func:`lib.poisoning.gradient_matching.brew_joint`, in batches of 500
   poisons, as the authors' code brews in batches); the clean set is 45000 images drawn at random
   from the images that are not poisoned. ``--threat-model per-target`` (this script's default, and
   the chapter's own protocol) instead draws random targets, each with a random adversarial class,
   splits the poisons evenly over them and brews each target's share from training images of its
   adversarial class (:func:`lib.poisoning.gradient_matching.brew`), with the first 45000 training
   images as the clean set. Both: ε = 16/255, 250 signed-Adam steps, the best of 8 random starts
   (the defaults of the authors' code), with the per-row penalty of weight ``--reg-factor`` (the
   paper's footnote 14 has 1, as in the usage line above; the default 0 turns the penalty off). The
   step rule is the authors' by default (``--step-rule authors``: steps of τ = 0.1 in the units
   of the standardized data, cut tenfold after steps 93, 156 and 218, from a Gaussian start; their
   "rule 2" for signed Adam); ``--step-rule constant`` takes this book's (0.1 ε, constant).
4. Victims retrained from scratch (``--victim-seeds``) on the clean training set and on the
   training set with all poisons appended; the row reports the share of targets each classifies
   correctly ("acc. without / with poison"), the share the poisoned victims put in the adversarial
   class, and the poisons' "last elements rel. size" (last 3 % of the 3072 entries).

Differences from the authors' setting (stated, not hidden): no data augmentation, no dropout, a
cosine learning-rate schedule instead of tenfold drops, the
victim of :mod:`lib.ssm.s4d` (see :data:`lib.ssm.s4d.CIFAR10_VICTIM`), one global standardization
instead of one per channel (so τ = 0.1 is a step in units of the global standard deviation, theirs
in units of each channel's), one retrained victim per seed in ``--victim-seeds`` (the authors'
Table-2 code validates one victim per row), and the per-row penalty of
:mod:`lib.poisoning.gradient_matching` with the weights of the paper's footnote 14 (31 − i on image
row i, counted from 0, the last row free) in both readings: with ``--reading pixels`` a
row of 96 entries of the sequence is one image row of all three channels; in the authors' reading
a row of 32 entries is one image row of one channel, and the three channels' rows i share the
weight of image row i (``AttackConfig(rows=32)``), as the authors' code weights the (3, 32, 32)
image before it reshapes it, so the last image row of all three channels is free.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.book import data  # noqa: E402
from lib.poisoning import gradient_matching  # noqa: E402
from lib.ssm import s4d  # noqa: E402

# Table 2 of the paper: (target test images, poison examples) per row
TABLE2_ROWS = ((10, 500), (10, 2500), (10, 5000), (20, 500), (20, 2500), (20, 5000))
LAST_FRACTION = 0.03  # Table 2's "last elements": the last 3 % of the sequence's entries
THREAT_MODELS = ("per-target", "random-subset")
PAPER_CLEAN = 45000  # the clean training images of the random-subset threat model


@dataclass(frozen=True)
class Settings:
    """One experiment; the defaults are the paper's (row 1 of Table 2)."""

    targets: int = 10
    poisons: int = 500
    eps_gray_levels: float = 16.0
    steps: int = 250
    restarts: int = 8
    step_size: float = 0.1  # "authors": tau in data units; "constant": in units of ε
    step_rule: str = "authors"  # the authors' rule (lib.poisoning.gradient_matching.AttackConfig)
    threat_model: str = "per-target"  # or "random-subset", the paper's (module docstring)
    poison_batch: int = 500  # poisons per batch of the joint brew (random-subset)
    reg_factor: float = 0.0
    # of the penalty; None: 96 for "pixels", and for "authors" 32 with rows=32 (image rows)
    row_length: int | None = None
    victim: s4d.S4DConfig = s4d.CIFAR10_VICTIM
    train: s4d.TrainConfig = s4d.CIFAR10_TRAIN
    n_train: int | None = 45000
    reading: str = "authors"
    surrogate_seed: int = 0
    victim_seeds: tuple[int, ...] = (1,)
    seed: int = 0
    # targets brewed in one batched call: a brew holds the activations of restarts × poisons per
    # target × targets_per_brew sequences through a double backward, so its memory grows with all
    # three (rows with many poisons per target need the most; not measured for this book)
    targets_per_brew: int = 1

    def __post_init__(self):
        if self.poisons < self.targets:
            raise ValueError(f"poisons ({self.poisons}) must be at least targets ({self.targets})")
        if not self.victim_seeds:
            raise ValueError("victim_seeds must name at least one seed")
        if self.threat_model not in THREAT_MODELS:
            raise ValueError(
                f"threat_model must be one of {THREAT_MODELS}, got {self.threat_model!r}"
            )


def settings_for_row(row: int, **overrides) -> Settings:
    """The settings of Table 2's row ``row`` (1..6), with keyword overrides."""
    if not 1 <= row <= len(TABLE2_ROWS):
        raise ValueError(f"row must be 1..{len(TABLE2_ROWS)}, got {row}")
    targets, poisons = TABLE2_ROWS[row - 1]
    return replace(Settings(), targets=targets, poisons=poisons, **overrides)


def _choose_targets(y_test, classes, settings: Settings) -> tuple[list[int], list[int]]:
    rng = np.random.default_rng(settings.seed)
    targets = rng.choice(len(y_test), size=settings.targets, replace=False).tolist()
    adversarial = [
        int(rng.choice([c for c in classes if c != int(y_test[t])])) for t in targets
    ]
    return targets, adversarial


def _random_subset(y_train, y_test, settings: Settings):
    """The threat model of the authors' code as we read it (the paper does not state it): targets
    of one class with one intended class, poisons from the whole training set, the clean set drawn
    from the rest (module docstring)."""
    rng = np.random.default_rng(settings.seed)
    classes = sorted(set(y_test.tolist()))
    target_class = int(rng.choice(classes))
    intended = int(rng.choice([c for c in classes if c != target_class]))
    members = np.flatnonzero(y_test.numpy() == target_class)
    if settings.targets > len(members):
        raise ValueError(
            f"{settings.targets} targets asked, class {target_class} has {len(members)}"
        )
    targets = sorted(rng.choice(members, settings.targets, replace=False).tolist())
    n = len(y_train)
    poisons = np.sort(rng.choice(n, settings.poisons, replace=False))
    rest = np.setdiff1d(np.arange(n), poisons)
    clean = np.sort(rng.choice(rest, min(PAPER_CLEAN, len(rest)), replace=False))
    return targets, intended, torch.from_numpy(poisons), torch.from_numpy(clean)


def run_random_subset(settings: Settings = Settings(), folder=None, *, log=print) -> dict:
    """One Table-2 row under the authors' code's threat model as we read it
    (``threat_model="random-subset"``)."""
    clock = {}
    start = time.perf_counter()
    x_all, y_all, x_test, y_test, data_range = data.cifar10(folder, reading=settings.reading)
    lo, hi = data_range
    eps = settings.eps_gray_levels * (hi - lo) / 255
    targets, intended, poison_index, clean_index = _random_subset(y_all, y_test, settings)
    x_clean, y_clean = x_all[clean_index], y_all[clean_index]
    log(f"{len(x_clean)} clean + {len(poison_index)} poisons; targets of class "
        f"{int(y_test[targets[0]])}, intended class {intended}")
    t0 = time.perf_counter()
    surrogate = s4d.train(settings.victim, x_clean, y_clean, [settings.surrogate_seed],
                          settings.train)
    clock["surrogate_s"] = time.perf_counter() - t0
    attack = _attack(settings)
    t0 = time.perf_counter()
    batch = min(settings.poison_batch, len(poison_index))
    joint = gradient_matching.brew_joint(
        surrogate, x_all, y_all, x_test, targets, intended, poison_index, eps, data_range, attack,
        batch=batch, seed=settings.seed,
    )
    clock["brew_s"] = time.perf_counter() - t0
    delta = joint["delta"]
    x_poisoned = torch.cat([x_clean, x_all[poison_index] + delta])
    y_poisoned = torch.cat([y_clean, y_all[poison_index]])
    report, pred_poisoned = _victims(
        settings, (x_clean, y_clean), (x_poisoned, y_poisoned), x_test, y_test, targets, delta,
        clock, start,
    )
    return report | {
        "intended": intended,
        "poison_index": poison_index.tolist(),
        "eps_standardized": eps,
        "matching_loss": joint["matching_loss"],
        "intended_with_poison": (pred_poisoned == intended).double().mean(-1).tolist(),
    }


def _victims(settings: Settings, clean_set, poisoned_set, x_test, y_test, targets, delta, clock,
             start) -> tuple[dict, torch.Tensor]:
    """Victims trained from scratch on the clean and on the poisoned set (one per victim seed),
    and the measurements both threat models report: (the report, the poisoned victims'
    predictions on the targets)."""
    seeds = list(settings.victim_seeds)
    t0 = time.perf_counter()
    clean = s4d.train(settings.victim, *clean_set, seeds, settings.train)
    poisoned = s4d.train(settings.victim, *poisoned_set, seeds, settings.train)
    clock["victims_s"] = time.perf_counter() - t0
    x_t, y_t = x_test[targets], y_test[targets]
    pred_clean, pred_poisoned = s4d.predict(clean, x_t), s4d.predict(poisoned, x_t)
    last = max(1, round(LAST_FRACTION * delta.shape[-1]))
    clock["total_s"] = time.perf_counter() - start
    report = {
        "settings": asdict(settings),
        "device": str(s4d.compute_device()),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "targets": targets,
        "last_elements_rel_size": gradient_matching.last_elements_rel_size(delta, last),
        "acc_without_poison": (pred_clean == y_t).double().mean(-1).tolist(),
        "acc_with_poison": (pred_poisoned == y_t).double().mean(-1).tolist(),
        "test_acc_clean": s4d.accuracy(clean, x_test, y_test).tolist(),
        "test_acc_poisoned": s4d.accuracy(poisoned, x_test, y_test).tolist(),
        "seconds": clock,
    }
    return report, pred_poisoned


def _attack(settings: Settings) -> gradient_matching.AttackConfig:
    return gradient_matching.AttackConfig(
        steps=settings.steps,
        restarts=settings.restarts,
        lr=settings.step_size,
        reg_factor=settings.reg_factor,
        row_length=settings.row_length or (96 if settings.reading == "pixels" else 32),
        step_rule=settings.step_rule,
        # the authors' reading holds the channels one after another: 32 image rows per channel
        rows=None if settings.reading == "pixels" or settings.row_length else 32,
    )


def run(settings: Settings = Settings(), folder=None, *, log=print) -> dict:
    """Run one Table-2 experiment; returns its settings, measurements and timings (JSON-ready)."""
    if settings.threat_model == "random-subset":
        return run_random_subset(settings, folder, log=log)
    clock = {}
    start = time.perf_counter()
    x_train, y_train, x_test, y_test, data_range = data.cifar10(
        folder, reading=settings.reading, n_train=settings.n_train
    )
    lo, hi = data_range
    eps = settings.eps_gray_levels * (hi - lo) / 255
    classes = sorted(set(y_train.tolist()))
    budget = settings.poisons // settings.targets
    log(f"{len(x_train)} training, {len(x_test)} test images; device {s4d.compute_device()}")

    t0 = time.perf_counter()
    surrogate = s4d.train(settings.victim, x_train, y_train, [settings.surrogate_seed],
                          settings.train)
    clock["surrogate_s"] = time.perf_counter() - t0
    log(f"surrogate trained in {clock['surrogate_s']:.0f} s")

    targets, adversarial = _choose_targets(y_test, classes, settings)
    attack = _attack(settings)
    t0 = time.perf_counter()
    index, deltas, losses = [], [], []
    chunk = settings.targets_per_brew
    for first in range(0, len(targets), chunk):
        result = gradient_matching.brew(
            surrogate, x_train, y_train, x_test, y_test,
            targets[first : first + chunk], adversarial[first : first + chunk],
            budget, eps, data_range, attack, seed=settings.seed + first,
        )
        index.append(result.poison_index)
        deltas.append(result.delta)
        losses.append(result.matching_loss)
    clock["brew_s"] = time.perf_counter() - t0
    index, delta = torch.cat(index), torch.cat(deltas)  # (targets, budget), (targets, budget, L)
    log(f"poisons brewed in {clock['brew_s']:.0f} s")

    # one training set with every target's poisons appended (the clean originals stay in it)
    x_poisoned, y_poisoned = gradient_matching.poisoned_sets(
        x_train, y_train, index.reshape(1, -1), delta.reshape(1, -1, delta.shape[-1])
    )
    report, pred_poisoned = _victims(
        settings, (x_train, y_train), (x_poisoned[0], y_poisoned[0]), x_test, y_test, targets,
        delta, clock, start,
    )
    adv = torch.tensor(adversarial)
    return report | {
        "adversarial": adversarial,
        "poisons_per_target": budget,
        "eps_standardized": eps,
        "matching_loss": torch.cat(losses).tolist(),
        "adversarial_with_poison": (pred_poisoned == adv).double().mean(-1).tolist(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--row", type=int, default=1, help="Table 2 row, 1..6")
    parser.add_argument("--cifar10", default=None, help="folder (default: $BOOK_CIFAR10)")
    parser.add_argument("--reading", choices=data.CIFAR10_READINGS, default="authors")
    parser.add_argument("--epochs", type=int, default=s4d.CIFAR10_TRAIN.epochs)
    parser.add_argument("--reg-factor", type=float, default=0.0,
                        help="weight of the per-row penalty (footnote 14: 1; default 0, off)")
    parser.add_argument("--victim-seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--targets-per-brew", type=int, default=1)
    parser.add_argument("--threat-model", choices=THREAT_MODELS, default="per-target")
    parser.add_argument("--step-rule", choices=gradient_matching.STEP_RULES, default="authors")
    parser.add_argument("--out", default=None, help="JSON file for the result")
    args = parser.parse_args(argv)
    settings = settings_for_row(
        args.row,
        reading=args.reading,
        train=replace(Settings().train, epochs=args.epochs),
        reg_factor=args.reg_factor,
        victim_seeds=tuple(args.victim_seeds),
        targets_per_brew=args.targets_per_brew,
        threat_model=args.threat_model,
        step_rule=args.step_rule,
    )
    result = run(settings, args.cifar10)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
