"""A positive control in the setting of Poison Frogs: the extractor trained on other classes.

Design (written and committed before any run of the 32-target experiment).

Question. Does this book's gradient matching (lib.poisoning.gradient_matching, the control's
unregularized arm) poison a victim at the chapter's eps (2 gray levels of 16) and budget (40
poisons per target), by the chapter's criterion, in the setting where published clean-label
attacks succeed: a feature extractor trained on *other classes*, frozen, and a linear head retrained
from scratch on the victim's data (Shafahi et al. 2018, "Poison frogs!", their transfer-learning
experiment; Geiping et al. 2021 attack that setting too)? The committed control's extractor is
trained on the same ten classes as the head (every third training image); there gradient matching
flips about 1 target of 32 at this eps.

Setting.
  Data: scikit-learn's digits, the chapter's split (lib.book.data.digits_split) and the control's
    split of the training set (rp.split_for_transfer): every third training image is the
    pretraining set, the rest (958 images, all ten classes) the victim's clean set and the pool the
    poisons are drawn from.
  Extractor: trained only on the pretraining images of the digits OTHER_CLASSES = 0-4 (classes
    that are never targets nor adversarial classes below). MLP family: one hidden layer of
    rp.MLP_HIDDEN = 64 units, 5 outputs, rp.MLP_EXTRACTOR_TRAIN (AdamW, 60 epochs), seed
    rp.EXTRACTOR_SEED; phi its hidden layer (tv.mlp_features), frozen.
  Victim: the linear head (T.1) on phi, trained from scratch with rp.HEAD_TRAIN (the control's
    head: AdamW, 40 epochs, batch 32, lr 1e-2) on the victim's clean set (all ten classes) with the
    target's 40 poisons appended (gm.retrain). The attacker's surrogate: the same head on the clean
    set, seed rp.SURROGATE_SEED.
  Targets: 32 (rp.CONTROL_TARGETS) test images whose true class is one of TARGET_CLASSES = 5-9 and
    which the surrogate classifies correctly, drawn without replacement with rp.TARGET_SEED
    (draw_targets_among below); each target's adversarial class is drawn uniformly among the other
    four of 5-9. So the extractor has seen neither the targets' classes nor the adversarial ones.
  Poisons: 40 per target, the adversarial-class images of the victim's set nearest the target in
    phi's feature space (gm.choose_nearest). Chosen, before any run, over the control's random
    images because (i) they are the base images of the setting's own attack (Poison Frogs picks
    bases near the target), (ii) every committed transfer run in which an attack did best at this
    eps (the unrolled and implicit attacks, the diagnosis) uses them, so the result compares with
    those, and (iii) a positive control should give the attack its best fair chance; the random
    control perturbs the same images, so the criterion measures the perturbation, not the choice.
Arms (the same poison images):
  "attack": gm.brew with the control's unregularized arm, gm.AttackConfig(steps=rp.CONTROL_STEPS
      = 250, restarts=rp.CONTROL_RESTARTS = 2, step rule "constant", reg_factor 0), eps = 2 gray,
      seed rp.ATTACK_SEED;
  "random": gm.random_perturbations of the attack's l2 and l_inf size per poison (seed
      rp.ATTACK_SEED + 1), as in the control.
Victim seeds: the control's MLP-transfer seeds, rp.CONTROL_SETTINGS["MLP transfer"][2] = [0, 1]:
  64 (target, seed) pairs per arm. Also recorded: the clean heads of those seeds on the same pairs.
Outcome per pair: the retrained head classifies the target as its adversarial class
  (gm.target_outcome).
Criterion (the chapter's, section ctl-criterion): the arm is *poisoned* when its 95 % Wilson
  interval counted by target (gm.wilson_by_target: lower end from the targets flipped on every
  seed, upper end from those flipped on any seed) lies entirely above the random control's.
Pre-registered outcome: "success" (the positive control the chapter lacks: our attack poisons a
  victim at the chapter's eps where its random control does not) if the attack arm is poisoned by
  the criterion; "failure" otherwise. Resolution: if the random control flips no target, success
  needs at least 7 of the 32 targets flipped on both seeds (Wilson's lower end 0.110 > 0.107, the
  upper end of 0 of 32). Reported beside it, descriptive only: the counts by target (every seed /
  any seed) of both arms and of the clean heads, the paired sign tests (gm.paired_sign_test), the
  median matching loss of both arms on the surrogate, the extractor's held-out accuracy on the
  digits 0-4, the surrogate's held-out accuracy on all digits and on 5-9.

Second arm (the same task, family "S4D"), pre-registered here before any run: run only if the MLP
  arm's outcome is "success" and time remains; the same setting, data, targets rule, poisons rule,
  arms, seeds and criterion, with the extractor an S4D network (rp.MODEL, 5 outputs) trained on
  the same images of 0-4 for 2 * rp.S4D_CONTROL_EPOCHS = 20 epochs (the control's S4D extractor
  training, rp.train_config), seed rp.EXTRACTOR_SEED, phi its pooled features (tv.s4d_features),
  the head rp.HEAD_TRAIN in float32 (the control's S4D head). If it is not run, the chapter says so.

Pilots: a timing pilot on 2 targets (targets_n = 2) is run after this design is committed and before
the 32-target run; it is used for timing only (its outcomes are not read).

Second registered run: the remaining targets (written and committed after the 32-target run's
outcome, "failure", was known, and before any run of what follows).
  Why. With 32 targets the criterion resolves only a rate above about 11 % of targets flipped on
    every seed when the random control flips none (Wilson's lower end of 7 of 32); the first run's
    2 of 32 lies in the range 32 targets cannot tell from 0. The question stays the first run's;
    the first run's outcome stands and is reported first.
  What changes. Only the targets: every other test image of 5-9 the surrogate classifies correctly
    (all of them, so the count is fixed by the data, not chosen), none of the first run's 32; their
    adversarial classes drawn by the same rule with seed rp.TARGET_SEED + 1. Extractor, surrogate,
    poisons rule, arms, eps, budget, steps, restarts, attack seed and victim seeds are the first
    run's.
  Outcome. "success" by the same criterion on this sample alone (the attack's Wilson interval by
    target entirely above its random control's). Reported beside it, descriptive only: the first
    run's counts, the two samples pooled, the sign tests.
  S4D. The second arm's condition is unchanged: it runs only after an MLP "success", on the sample
    that succeeded, and then only if time remains; if it does not run, the chapter says so.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import reproduce_poisoning_real_data as rp
import torch

from lib.book import data
from lib.poisoning import gradient_matching as gm
from lib.poisoning import mlp_victim
from lib.poisoning import transfer_victim as tv
from lib.ssm import s4d

OTHER_CLASSES = (0, 1, 2, 3, 4)  # the extractor's classes
TARGET_CLASSES = (5, 6, 7, 8, 9)  # the targets' and the adversarial classes
ARMS = ("attack", "random")
FAMILIES = ("MLP", "S4D")


def key(family: str, eps_gray: float = rp.CONTROL_EPS_GRAY, remaining: bool = False
        ) -> tuple[str, str]:
    """The results path of one family's record (``remaining``: the second registered run's)."""
    return ("other_classes",
            f"{family} transfer {eps_gray:g} gray" + (", remaining targets" if remaining else ""))


def draw_targets_among(predicted: torch.Tensor, y_test: torch.Tensor, classes, count: int | None,
                       seed: int, exclude=()) -> tuple[list[int], list[int]]:
    """``count`` test indices (all of them if None) of true class in ``classes`` that ``predicted``
    gets right and that are not in ``exclude``, drawn without replacement with ``seed`` in the
    order drawn, and for each an adversarial class drawn uniformly among the other members of
    ``classes``:

        c = classes[(j + u) mod m],  j the true class's position in ``classes``, m = len(classes),
        u ~ U{1, ..., m - 1}.
    """
    classes = [int(c) for c in classes]
    if len(set(classes)) < 2:
        raise ValueError(f"classes must name at least two distinct classes, got {classes}")
    rng = np.random.default_rng(seed)
    pool = np.flatnonzero(((predicted == y_test) & torch.isin(y_test, torch.tensor(classes)))
                          .numpy())
    pool = pool[~np.isin(pool, np.asarray(list(exclude), dtype=int))]
    count = len(pool) if count is None else count
    if count > len(pool):
        raise ValueError(f"only {len(pool)} test images of classes {classes} are classified "
                         f"correctly; {count} targets asked")
    targets = [int(t) for t in rng.choice(pool, count, replace=False)]
    m = len(classes)
    adversarial = [classes[(classes.index(int(y_test[t])) + int(rng.integers(1, m))) % m]
                   for t in targets]
    return targets, adversarial


def extractor(family: str, x_pre: torch.Tensor, y_pre: torch.Tensor, seed: int):
    """The extractor trained on the pretraining images of OTHER_CLASSES (their labels are 0..4),
    its feature map phi, width and dtype, and its held-out accuracy function."""
    keep = torch.isin(y_pre, torch.tensor(OTHER_CLASSES))
    x_o, y_o = x_pre[keep], y_pre[keep]
    k = len(OTHER_CLASSES)
    if family == "MLP":
        config = mlp_victim.MLPConfig(hidden=rp.MLP_HIDDEN, classes=k)
        ext = mlp_victim.train(config, x_o, y_o, [seed], rp.MLP_EXTRACTOR_TRAIN)
        return ext, tv.mlp_features(ext), rp.MLP_HIDDEN, torch.float64, mlp_victim.accuracy
    if family == "S4D":
        config = dataclasses.replace(rp.MODEL, classes=k)
        ext = s4d.train(config, x_o, y_o, [seed], rp.train_config(2 * rp.S4D_CONTROL_EPOCHS))
        return ext, tv.s4d_features(ext), config.channels, torch.float32, s4d.accuracy
    raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")


def verdict(attack_success, random_success, seeds_per_target: int) -> dict:
    """The pre-registered outcome from the per-pair 0/1 outcomes (target-major) of both arms:
    "success" if the attack's Wilson interval by target lies entirely above the random
    control's (lower end of the attack > upper end of the random control), else "failure"."""
    a = gm.wilson_by_target(attack_success, seeds_per_target)
    r = gm.wilson_by_target(random_success, seeds_per_target)
    per = {name: gm._per_target(s, seeds_per_target)
           for name, s in (("attack", attack_success), ("random", random_success))}
    poisoned = bool(a[0] > r[1])
    return {"wilson_attack": [float(a[0]), float(a[1])],
            "wilson_random": [float(r[0]), float(r[1])],
            "targets_every_seed": {k: int(v.all(1).sum()) for k, v in per.items()},
            "targets_any_seed": {k: int(v.any(1).sum()) for k, v in per.items()},
            "margin_points": float(100 * (a[0] - r[1])),
            "sign_test": gm.paired_sign_test(attack_success, random_success, seeds_per_target),
            "poisoned": poisoned, "outcome": "success" if poisoned else "failure"}


def other_classes_task(*, family: str, surrogate_seed: int, extractor_seed: int,
                       target_seed: int, attack_seed: int, victim_seeds: list[int],
                       eps_gray: float = rp.CONTROL_EPS_GRAY,
                       targets_n: int | None = None, remaining: bool = False) -> dict:
    """The design above for one extractor family: per (target, seed) pair the outcomes of both
    arms and of the clean heads (target-major), the sizes and matching losses of the arms, the
    extractor's and surrogate's accuracies, and the pre-registered verdict. ``remaining``: the
    second registered run, on the eligible targets the first run did not draw (``targets_n`` of
    them if given, for tests; all otherwise)."""
    torch.set_num_threads(1)
    start, cpu = time.perf_counter(), time.process_time()
    n_targets = rp.CONTROL_TARGETS if targets_n is None else targets_n
    x_all, y_all, xt, yt, data_range = data.digits_split()
    (x_pre, y_pre), (x, y) = rp.split_for_transfer(x_all, y_all)
    eps = eps_gray * (data_range[1] - data_range[0]) / 16
    ext, phi, width, dtype, ext_acc = extractor(family, x_pre, y_pre, extractor_seed)
    victim = tv.victim(phi, width, 10, rp.HEAD_TRAIN, name=f"{family} head, other classes",
                       dtype=dtype)
    surrogate = victim.train(x[None], y[None], [surrogate_seed])
    seen = torch.isin(yt, torch.tensor(OTHER_CLASSES))
    unseen = torch.isin(yt, torch.tensor(TARGET_CLASSES))
    with torch.no_grad():
        predicted = victim.logits(surrogate, xt[None].to(victim.dtype))[0].argmax(-1)
    record: dict = {
        "family": family, "eps_gray": eps_gray, "budget": rp.CONTROL_BUDGET,
        "other_classes": list(OTHER_CLASSES), "target_classes": list(TARGET_CLASSES),
        "n_extractor_train": int(torch.isin(y_pre, torch.tensor(OTHER_CLASSES)).sum()),
        "n_victim_train": len(x), "victim_seeds": list(victim_seeds),
        "extractor_held_out_accuracy_other": float(ext_acc(ext, xt[seen], yt[seen])[0]),
        "surrogate_held_out_accuracy": float((predicted == yt).double().mean()),
        "surrogate_held_out_accuracy_targets_classes": float(
            (predicted[unseen] == yt[unseen]).double().mean()),
    }
    first, _ = draw_targets_among(predicted, yt, TARGET_CLASSES, rp.CONTROL_TARGETS, target_seed)
    if remaining:
        targets, adversarial = draw_targets_among(predicted, yt, TARGET_CLASSES, targets_n,
                                                  target_seed + 1, exclude=first)
        record.update(remaining=True, excluded=first)
    else:
        targets, adversarial = draw_targets_among(predicted, yt, TARGET_CLASSES, n_targets,
                                                  target_seed)
    record.update(targets=targets, adversarial=adversarial)
    index = torch.stack([gm.choose_nearest(phi, x, y, xt[t], c, rp.CONTROL_BUDGET)
                         for t, c in zip(targets, adversarial, strict=True)])
    config = gm.AttackConfig(steps=rp.CONTROL_STEPS, restarts=rp.CONTROL_RESTARTS)
    t0 = time.perf_counter()
    b = gm.brew(surrogate, x, y, xt, yt, targets, adversarial, rp.CONTROL_BUDGET, eps,
                data_range, config, seed=attack_seed, victim=victim, poison_index=index)
    seconds = {"attack": time.perf_counter() - t0}
    rand = gm.random_perturbations(x[index], b.delta, eps, data_range, seed=attack_seed + 1)
    deltas = {"attack": b.delta, "random": rand}
    t0 = time.perf_counter()
    clean = victim.train(x[None].expand(len(victim_seeds), -1, -1),
                         y[None].expand(len(victim_seeds), -1), victim_seeds)
    pair_t = [t for t in targets for _ in victim_seeds]
    pair_a = [a for a in adversarial for _ in victim_seeds]
    clean_runs = {k: v[[victim_seeds.index(s) for _ in targets for s in victim_seeds]]
                  for k, v in clean.items()}
    out = gm.target_outcome(victim, clean_runs, xt, yt, pair_t, pair_a)
    record["clean"] = {"success": out["success"].astype(int), "p_adv": out["p_adv"],
                       "held_out_accuracy": tv.accuracy(victim, clean, xt, yt).numpy()}
    params = gm.retrain(victim, x, y, torch.cat([index] * len(ARMS)),
                        torch.cat([deltas[a] for a in ARMS]), victim_seeds)
    out = gm.target_outcome(victim, params, xt, yt, pair_t * len(ARMS), pair_a * len(ARMS))
    held_out = tv.accuracy(victim, params, xt, yt).numpy()
    seconds["victims"] = time.perf_counter() - t0
    n_pairs = len(pair_t)
    record["arms"] = {}
    for k, name in enumerate(ARMS):
        part = slice(k * n_pairs, (k + 1) * n_pairs)
        delta = deltas[name]
        norms = torch.linalg.vector_norm(delta, dim=-1)
        record["arms"][name] = {
            "success": out["success"][part].astype(int),
            "p_adv": out["p_adv"][part],
            "held_out_accuracy": held_out[part],
            "matching_loss": gm.matching_loss(surrogate, xt, b, x, delta, victim=victim).numpy(),
            "l2_over_eps_median": float(norms.median() / eps),
            "linf_over_eps_median": float(delta.abs().amax(-1).median() / eps),
        }
    record["arms"]["random"]["size_ratio"] = gm.size_ratio(rand, b.delta)
    record["verdict"] = verdict(record["arms"]["attack"]["success"],
                                record["arms"]["random"]["success"], len(victim_seeds))
    record["attack_seconds"] = seconds
    record["seconds"] = time.perf_counter() - start
    record["cpu_seconds"] = time.process_time() - cpu
    return {key(family, eps_gray, remaining): record}
