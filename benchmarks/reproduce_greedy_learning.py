"""The long runs behind the greedy-learning chapter (see benchmarks/reproduce.py).

The right half of the paper's Figures 3 and 8: the SSM (d = 20) inside a two-hidden-layer ReLU
network of width 25, sequences of length 10, Adam in the authors' TensorFlow form (App. H.1.2,
Tables 4–7). A clean run that stalls costs all of its 200 000 Adam steps, too much for the
chapter's minute, so the runs are here:

- ``ours``: 32 seeds of the book's random streams (lib.poisoning.dynamics), clean and with special
  sequences, with the authors' extra steps after the loss threshold (20 000 clean, 5 000 with
  special sequences, as their notebook);
- ``authors``: the authors' own seeds of the two figures (4542 for Figure 3, 4603 for Figure 8),
  their initialization rebuilt from TensorFlow's stateless stream (lib.poisoning.keras_streams:
  every layer seeded with the same seed, so all weights are cut from one stream) and their data
  from numpy's legacy stream, through the public torch engine (lib.engine.flow.gradient_descent);
- ``authors_streams``: the left half of Figure 3 (the standalone SSM,
  ``lib.poisoning.greedy_learning.FIGURE3``) with the authors' own random streams on 32 fresh seeds
  (5000–5031), clean and with special sequences: the distribution of their protocol, whose C is
  |B|'s draw reversed where the book's is drawn independently, so that the chapter can place the
  authors' seeds 4000 and 4001 among runs of their own protocol and compare the two arms in it;
- ``paper_draw``: the same standalone setting with the paper's own draw of C (App. H.1.1: |N(0,
  sd_bc²)| draws sorted in descending order, the ties left alone), the book's streams otherwise,
  on the chapter's 32 seeds, clean and with special sequences: the paper's setting of Figures 3, 8,
  11 and 12 over many seeds;
- ``precision``: each of the authors' standalone seeds of Figures 3-6, rebuilt, rerun from its
  start multiplied entrywise by 1 ± 6e-8 (float32's unit roundoff, random signs) five times beside
  the unperturbed run: the spread of the final effective rank that rounding the start alone causes.

About ten minutes of one core in all.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import torch

from lib import effective_rank
from lib.engine.flow import gradient_descent
from lib.poisoning import dynamics as poison_dynamics
from lib.poisoning import greedy_learning
from lib.poisoning import theorem1 as poison
from lib.poisoning.keras_streams import stateless_normal

SEEDS = list(range(32))
MAX_STEPS = 200_000
EXTRA = {None: 20_000, 1.0: 5_000}  # the authors' notebook: extra steps after the threshold
AUTHORS = {"Figure 3": 4542, "Figure 8": 4603}
AUTHORS_STREAM_SEEDS = list(range(5000, 5032))  # fresh seeds, none of the authors' own
AUTHORS_EPOCHS = 1_000_000  # the authors' standalone notebooks' step budget (`epochs = int(1e6)`)

FIGURE3_SSM_MLP = dataclasses.replace(
    poison_dynamics.FIGURE2_SSM_MLP, name="SSM + MLP, κ = 10 (Figures 3 and 8, right)", d=20,
    kappa=10, baseline_positions=tuple(range(1, 8)), special_positions=(9, 10), sd_a=1e-3,
    sd_bc=1e-3, tie_exponent=2.0, lr_special=5e-5, hidden=25, sd_mlp=0.1,
)  # fmt: skip
"""Tables 4–7, 'SSM + MLP longer' rows (the stopping loss 0.05 of the authors' notebook)."""


def _summary(a_final, steps_fit, steps_run, loss, escape) -> dict:
    magnitudes = np.sort(np.abs(np.asarray(a_final)))[::-1]
    return {
        "fit_step": steps_fit, "steps_run": steps_run, "final_loss": float(loss),
        "final_abs_a": magnitudes, "escape": escape,
        "erank": effective_rank(torch.from_numpy(magnitudes.copy())).item(),
    }  # fmt: skip


def _escape(times, a_history) -> int | None:
    """First recorded iteration with max_j |a_j| > 1/2."""
    above = np.abs(a_history).max(-1) > 0.5
    return int(times[int(np.argmax(above))]) if above.any() else None


def ours(seed: int, key: str) -> dict:
    """One seed of the book's streams, clean (``key="clean"``) or with special sequences."""
    scale = None if key == "clean" else 1.0
    setting = dataclasses.replace(FIGURE3_SSM_MLP, extra_steps=EXTRA[scale])
    runs = poison_dynamics.train_dynamics(setting, [seed], special_scales=(scale,),
                                          max_steps=MAX_STEPS, record_every=100)  # fmt: skip
    traj = runs.trajectory
    summary = _summary(traj["a"][-1, 0], traj.info["converged_step"][0],
                       traj.info["steps_run"][0], traj.losses[-1, 0],
                       _escape(traj.times, traj["a"][:, 0]))
    return {("ours", key, SEEDS.index(seed)):
            summary | {"seed": runs.seeds[0], "initial_gain": runs.initial_gain(0)}}


def authors_init(setting: poison_dynamics.DynamicsSetting, seed: int) -> dict[str, torch.Tensor]:
    """The authors' Keras initialization of the SSM + MLP (one TensorFlow stream for all layers).

    A's diagonal from the d × d block, B and C from the first d numbers (B sorted with the tie
    gap, C reversed), the three layers' kernels from the first h, h² and h numbers, transposed
    from Keras's (inputs, outputs) layout to ours; products in float32 as TensorFlow does them.
    """
    d, h = setting.d, setting.hidden
    z = stateless_normal(max(d * d, h * h), seed)
    f32, gap = np.float32, poison.tie_gap(setting.sd_a, setting.tie_exponent)
    a = np.sort(np.abs(np.diagonal((f32(setting.sd_a) * z[: d * d]).reshape(d, d))))[::-1].copy()
    a[1] = f32(float(a[0]) - gap)
    kernel = f32(setting.sd_bc) * z[:d]
    b = np.sort(np.abs(kernel))[::-1].copy()
    b[1] = f32(float(b[0]) - gap)
    s = f32(setting.sd_mlp)
    params = {
        "a": a, "b": b, "c": np.abs(kernel)[::-1], "d_in": (s * z[:h]).reshape(h, 1),
        "d_hidden": (s * z[: h * h]).reshape(h, h).T, "d_out": (s * z[:h]).reshape(1, h),
    }  # fmt: skip
    return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64)).unsqueeze(0)
            for k, v in params.items()}  # fmt: skip


def authors_data(setting, seed: int, special: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """numpy's legacy stream: each sequence draws its non-zero entries in turn, baseline first."""
    rng = np.random.RandomState(seed)
    rows = []
    for count, positions in ((setting.n_baseline, setting.baseline_positions),
                             (setting.n_special if special else 0, setting.special_positions)):
        for _ in range(count):
            x = np.zeros(setting.kappa)
            x[[p - 1 for p in positions]] = rng.normal(0.0, 1.0, size=(len(positions), 1))[:, 0]
            rows.append(x)  # fmt: skip
    x = torch.from_numpy(np.array(rows))
    return x, setting.teacher_labels(x)


def authors(figure: str, key: str) -> dict:
    """The authors' own seed of ``figure``, clean or with special sequences."""
    setting, seed, scale = FIGURE3_SSM_MLP, AUTHORS[figure], None if key == "clean" else 1.0
    x, y = authors_data(setting, seed, scale is not None)
    n = x.shape[0]
    gradient = poison_dynamics.ssm_mlp_loss_gradient(
        x.unsqueeze(0), y.unsqueeze(0), torch.full((1, n), 1.0 / n, dtype=torch.float64))
    lr = setting.lr_clean if scale is None else setting.lr_special
    traj = gradient_descent(
        None, authors_init(setting, seed), [lr], MAX_STEPS, record_every=100,
        optimizer="adam", stop_loss=setting.stop_loss, extra_steps=EXTRA[scale],
        adam_eps=setting.adam_eps, adam_form=setting.adam_form, runs=1, gradient=gradient,
    )  # fmt: skip
    summary = _summary(traj["a"][-1, 0], traj.info["converged_step"][0],
                       traj.info["steps_run"][0], traj.losses[-1, 0],
                       _escape(traj.times, traj["a"][:, 0]))
    return {("authors", f"{figure}, {key}"): summary | {"seed": seed}}


def authors_streams(seed: int, key: str = "clean", budget: str = "cut-off") -> dict:
    """The standalone run of Figure 3 (``lib.poisoning.greedy_learning.FIGURE3``) from the authors'
    random streams of ``seed``, clean (``key="clean"``) or with special sequences: when the largest
    |a_j| passes 1/2 (first record), the step at which the loss falls below the threshold, the final
    effective rank and loss. ``budget="cut-off"`` stops at the chapter's cut-off (MAX_STEPS);
    ``budget="authors"`` runs to the authors' notebooks' budget (AUTHORS_EPOCHS steps, their
    ``epochs = int(1e6)``), so that a run which does not fit ends where their protocol ends it, and
    also records the steps run and the largest |a_j| at the end."""
    if key not in ("clean", "special"):
        raise ValueError(f"key must be 'clean' or 'special', got {key!r}")
    if budget not in ("cut-off", "authors"):
        raise ValueError(f"budget must be 'cut-off' or 'authors', got {budget!r}")
    scale = None if key == "clean" else 1.0
    steps = MAX_STEPS if budget == "cut-off" else AUTHORS_EPOCHS
    runs = greedy_learning.train_greedy(greedy_learning.FIGURE3, [seed], special_scales=(scale,),
                                        streams="authors", max_steps=steps)  # fmt: skip
    summary = {
        "seed": seed, "escape": runs.escape_iteration(0),
        "fit_step": runs.trajectory.info["converged_step"][0],
        "erank": float(runs.effective_ranks(0)[-1]),
        "final_loss": float(runs.trajectory.losses[-1, 0]),
    }  # fmt: skip
    if budget == "cut-off":
        return {("authors_streams", key, AUTHORS_STREAM_SEEDS.index(seed)): summary}
    summary |= {"steps_run": int(runs.trajectory.info["steps_run"][0]),
                "final_top": float(runs.magnitudes(0)[-1][0])}
    return {("authors_streams_full", key, AUTHORS_STREAM_SEEDS.index(seed)): summary}


def paper_init(setting, seed: int, *, streams: str = "book") -> dict[str, torch.Tensor]:
    """The paper's initialization (App. H.1.1): the book's draws of a, b and c
    (:func:`lib.poisoning.greedy_learning.greedy_init`), with c's |N(0, sd_bc²)| draws arranged in
    descending order as the paper's text does ("we followed the same procedure, without modifying
    the second ... entries"); a and b as before."""
    init = _BOOK_INIT(setting, seed, streams=streams)
    if streams == "book" and not setting.fixed_bc:
        init["c"] = torch.sort(init["c"], descending=True).values
    return init


_BOOK_INIT = greedy_learning.greedy_init


@contextlib.contextmanager
def _paper_draw():
    """train_greedy with :func:`paper_init` in place of the book's draw (restored on exit)."""
    greedy_learning.greedy_init = paper_init
    try:
        yield
    finally:
        greedy_learning.greedy_init = _BOOK_INIT


def paper_draw(seed: int, key: str) -> dict:
    """One seed of Figure 3's standalone setting with the paper's draw of C, clean or special:
    escape of the largest |a_j| past 1/2, the second / largest at that record, the step the loss
    falls below the threshold, the final effective rank and loss (the chapter's cut-off)."""
    scale = None if key == "clean" else 1.0
    with _paper_draw():
        runs = greedy_learning.train_greedy(greedy_learning.FIGURE3, [seed],
                                            special_scales=(scale,), max_steps=MAX_STEPS)
    escape = runs.escape_iteration(0)
    ratio = None
    if escape is not None:
        top = runs.magnitudes(0)[int(np.searchsorted(runs.trajectory.times, escape))]
        ratio = float(top[1] / top[0])
    return {("paper_draw", key, SEEDS.index(seed)): {
        "seed": seed, "escape": escape, "ratio": ratio,
        "fit_step": runs.trajectory.info["converged_step"][0],
        "erank": float(runs.effective_ranks(0)[-1]),
        "final_loss": float(runs.trajectory.losses[-1, 0]),
        "steps_run": int(runs.trajectory.info["steps_run"][0]),
    }}  # fmt: skip


PRECISION_STARTS = 6  # the unperturbed start and five perturbed ones
UNIT_ROUNDOFF_F32 = 2.0**-24  # float32's unit roundoff, about 6e-8


def _perturbed_init(k: int):
    """The authors' rebuilt start, each entry times 1 ± u (u = float32's unit roundoff, signs from
    ``numpy.random.default_rng(k)``); k = 0 leaves it unperturbed."""
    rng = np.random.default_rng(k)

    def init(setting, seed: int, *, streams: str = "book") -> dict[str, torch.Tensor]:
        start = _BOOK_INIT(setting, seed, streams=streams)
        if k == 0:
            return start
        return {name: value * (1 + UNIT_ROUNDOFF_F32 * torch.from_numpy(
                    rng.choice([-1.0, 1.0], tuple(value.shape))))
                for name, value in start.items()}  # fmt: skip

    return init


def precision(figure: str, key: str) -> dict:
    """Final effective rank of the authors' seed of ``figure`` (rebuilt, their streams), clean or
    special, from PRECISION_STARTS starts: unperturbed, then perturbed at float32's roundoff."""
    setting, seed = greedy_learning.AUTHORS_SEEDS[figure]
    scale = None if key == "clean" else 1.0
    eranks = []
    for k in range(PRECISION_STARTS):
        greedy_learning.greedy_init = _perturbed_init(k)
        try:
            runs = greedy_learning.train_greedy(setting, [seed], special_scales=(scale,),
                                                streams="authors", max_steps=400_000)
        finally:
            greedy_learning.greedy_init = _BOOK_INIT
        eranks.append(float(runs.effective_ranks(0)[-1]))
    return {("precision", figure, key): {"seed": seed, "eranks": eranks,
                                         "spread": max(eranks) - min(eranks)}}


PRECISION_FIGURES = [name for name in greedy_learning.AUTHORS_SEEDS
                     if name not in ("Figure 2", "Figure 7")]


def tasks() -> list:
    """One task per (seed, clean or special) and per authors' run; costs in seconds of one core
    (a clean run that stalls takes all 200 000 compiled steps; the torch engine is slower)."""
    from tasks import Task

    out = [Task(f"ours {key} seed={seed}", ours, {"seed": seed, "key": key},
                10.0 if key == "clean" else 2.0, (("ours", key, SEEDS.index(seed)),))
           for key in ("clean", "special") for seed in SEEDS]
    out += [Task(f"authors {figure} {key}", authors, {"figure": figure, "key": key}, 120.0,
                 (("authors", f"{figure}, {key}"),))
            for figure in AUTHORS for key in ("clean", "special")]
    out += [Task(f"authors streams clean seed={seed}", authors_streams, {"seed": seed}, 1.0,
                 (("authors_streams", "clean", AUTHORS_STREAM_SEEDS.index(seed)),))
            for seed in AUTHORS_STREAM_SEEDS]
    out += [Task(f"authors streams special seed={seed}", authors_streams,
                 {"seed": seed, "key": "special"}, 1.0,
                 (("authors_streams", "special", AUTHORS_STREAM_SEEDS.index(seed)),))
            for seed in AUTHORS_STREAM_SEEDS]
    out += [Task(f"paper draw {key} seed={seed}", paper_draw, {"seed": seed, "key": key}, 1.0,
                 (("paper_draw", key, SEEDS.index(seed)),))
            for key in ("clean", "special") for seed in SEEDS]
    out += [Task(f"precision {figure} {key}", precision, {"figure": figure, "key": key}, 10.0,
                 (("precision", figure, key),))
            for figure in PRECISION_FIGURES for key in ("clean", "special")]
    return out


def finish(results: dict) -> dict:
    settings = dataclasses.asdict(FIGURE3_SSM_MLP) | {"max_steps": MAX_STEPS,
                                                      "extra_steps": {"clean": 20_000,
                                                                      "special": 5_000}}
    return {"results": results, "settings": settings,
            "seeds": {"ours": SEEDS, "authors": AUTHORS,
                      "authors_streams": AUTHORS_STREAM_SEEDS, "paper_draw": SEEDS,
                      "precision": {figure: greedy_learning.AUTHORS_SEEDS[figure][1]
                                    for figure in PRECISION_FIGURES}}}  # fmt: skip
