"""The long runs behind the saddle-to-saddle chapter (see benchmarks/reproduce.py).

All on the chapter's data (300 of scikit-learn's 8×8 digits, every fifth, cross-entropy, 10
classes) and width 32, with the step rule η_k = c (√L/‖θ_k‖)^{L−2}, i.e. η₀ = c L^{L/2−1} in
η₀/‖θ_k‖^{L−2}: the same step in the time s of §2.1 at every depth, for a direction of a given
speed on the sphere ‖θ‖² = L. c = 10/36 is the paper's 10/‖θ‖⁴ at L = 6 (App. B).

* ``searches``: the escape search of :func:`lib.networks.saddles.escape_search` at depths 2, 3, 4,
6,
  32 seeds each; its best direction is the reference the dynamics are compared with;
* ``limit``: the α → 0 limit of gradient descent
(:func:`lib.networks.escape_dynamics.limit_direction_flow`)
  from each seed's initial direction at depths 3, 4 (32 seeds) and 6 (8 seeds): when (the step
  s₁) and where it aligns with the search's direction;
* ``alpha``: training runs on the full loss from α times the same initializations, α = 1 (the
  paper's N(0, 1/width²)) down to 1e-48: the direction at the end of the first plateau against
  the search's, and ‖θ(s₁)‖/α against the limit's C (§2.2);
* ``chapter_setting``: the chapter's own run (depth 6, η₀ = 100, α = 1) over 32 seeds, and the
  same step at smaller α (``catapult``);
* ``figure4``: depth 4 against depth 6 with the same rule (c = 10/36 and the chapter's
  c = 100/36), 8 seeds, 20 000 steps: plateaus, final loss and spectra (the paper's Figure 4);
* ``balance``: weak balancedness on the chapter's run, step by step
  (:func:`lib.networks.escape_dynamics.balance_drift`), at η₀ = 100 and at the paper's η₀ = 10.

About ten minutes of CPU (45 minutes of wall time on a shared, loaded 2-core machine).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from lib.book.data import digits
from lib.networks import escape_dynamics as ed
from lib.networks import saddles
from lib.networks.relu_nets import gaussian_weights

DIGITS = {"n": 300, "every": 5}
WIDTH, CLASSES = 32, 10
RULE_C = 10 / 36  # the paper's 10/‖θ‖⁴ at L = 6, as c (√L/‖θ‖)^{L−2}
CHAPTER = {"depth": 6, "eta0": 100.0, "seeds": list(range(32)), "steps": 3000, "every": 50}
CATAPULT = {"alphas": [0.1, 1e-3], "seeds": list(range(8)), "steps": 3000}
SEARCH = {"depths": [2, 3, 4, 6], "seeds": list(range(32)), "steps": 1000}
DEPTHS = [3, 4, 6]
ALPHAS = [1.0, 1e-3, 1e-6, 1e-12, 1e-24, 1e-48]
SEEDS = {3: list(range(32)), 4: list(range(32)), 6: list(range(8))}
LIMIT = {3: {"steps": 1500, "every": 10}, 4: {"steps": 1500, "every": 10},
         6: {"steps": 20000, "every": 20}}  # fmt: skip
TRAJECTORY_EVERY = 5  # records of the first seed's limit trajectory kept in the file
AFTER = 1500  # steps of the full-loss runs after the limit's alignment (e^{-110} of growth)
RUN_EVERY = 10
ALIGNED = 0.99  # fixed before measuring: speed within 1 % of the search's, output cosine >= 0.99
LOCAL = 1e-3  # outputs below this at s1: the run is still in the localized regime
FIG4 = {"depths": [4, 6], "cs": [10 / 36, 100 / 36], "seeds": list(range(8)), "steps": 20000,
        "every": 100, "window": 5, "tolerance": 0.02, "dominant": 0.3,
        "spectra_every": 2}  # fmt: skip
BALANCE = {"steps": {100.0: 2000, 10.0: 20000}, "every": 50}


def eta0(depth: int, c: float = RULE_C) -> float:
    """η₀ of the rule η_k = c (√L/‖θ_k‖)^{L−2} = c L^{L/2−1}/‖θ_k‖^{L−2}."""
    return c * depth ** (depth / 2 - 1)


def initialization(depth: int, seed: int) -> list[torch.Tensor]:
    """The initialization of saddle_to_saddle_run(init_scale=1/WIDTH, seed=seed)."""
    widths = [64] + [WIDTH] * (depth - 1) + [CLASSES]
    return gaussian_weights(widths, 1 / WIDTH, np.random.RandomState(seed))


def norm(weights) -> float:
    return math.sqrt(sum(float((w**2).sum()) for w in weights))


def report(weights, best, x, G) -> dict:
    """The comparison of :func:`lib.networks.escape_dynamics.compare_directions`, as plain
    numbers."""
    c = ed.compare_directions(weights, best, x, G)
    return {"speed_ratio": c["speed_ratio"], "output_cosine": c["output_cosine"],
            "residual": c["residual"], "tails": c["tails"].tolist()}  # fmt: skip


@functools.cache
def data():
    x, y = digits(**DIGITS)
    return x, y, saddles.cross_entropy_gradient(y, CLASSES)


@functools.cache
def search(depth: int):
    """The escape search at ``depth`` over SEARCH's seeds (kept per worker process: the tasks
    that compare with its best direction recompute it once per process, not once per task)."""
    x, _, G = data()
    return saddles.escape_search(x, G, depth=depth, width=WIDTH, seeds=SEARCH["seeds"],
                                 steps=SEARCH["steps"])  # fmt: skip


def best_direction(depth: int):
    found = search(depth)
    return found.direction(found.best)


def search_task(depth: int) -> dict:
    found = search(depth)
    return {("searches", str(depth)): {"speeds": found.speeds.tolist(),
                                       "best": float(found.speeds.max())}}


def limit_flow(depth: int, seed: int, best, x, G) -> dict:
    """The α → 0 flow from one seed's initial direction: when and where it aligns."""
    init = initialization(depth, seed)
    flow = ed.limit_direction_flow(init, x, G, eta0=eta0(depth), steps=LIMIT[depth]["steps"],
                                   record_every=LIMIT[depth]["every"])  # fmt: skip
    s_best = float(saddles.speed_of(best, x, G))
    ratios = flow.speeds / s_best
    cosines = np.array([ed.output_cosine(flow.direction(i), best, x) for i in range(len(ratios))])
    aligned = np.flatnonzero((ratios >= ALIGNED) & (cosines >= ALIGNED))
    s1 = int(aligned[0]) if len(aligned) else None
    final = report(flow.direction(-1), best, x, G)
    return {
        "s1": None if s1 is None else int(flow.times[s1]),
        "C": None if s1 is None else norm(init) * math.exp(flow.log_growth[s1]),
        "final": final,
        "times": flow.times.tolist(),
        "ratios": ratios.tolist(),
        "cosines": cosines.tolist(),
        "log_growth": flow.log_growth.tolist(),
        "flow": flow,
    }


def outputs_max(weights, x) -> float:
    hidden = x
    for i, w in enumerate(weights):
        hidden = hidden @ w.T
        if i < len(weights) - 1:
            hidden = torch.relu(hidden)
    return float(hidden.abs().max())


def alpha_run(depth: int, seed: int, alpha: float, limit: dict, best, x, y, G) -> dict:
    """A full-loss run from alpha times the seed's initialization, against the limit flow."""
    steps = (limit["s1"] if limit["s1"] is not None else LIMIT[depth]["steps"]) + AFTER
    run = saddles.saddle_to_saddle_run(x, y, depth=depth, width=WIDTH, init_scale=alpha / WIDTH,
                                       eta0=eta0(depth), steps=steps, seed=seed,
                                       record_every=RUN_EVERY)  # fmt: skip
    out = {"alpha": alpha, "steps": steps}
    end = ed.plateau_exit(run.losses, height=math.log(CLASSES))
    out["exit"] = None if end is None else int(run.times[end])
    if end is not None:
        weights = ed.trajectory_weights(run, end)
        out |= report(weights, best, x, G)
        out["norm_over_alpha"] = norm(weights) / alpha
    if limit["s1"] is not None and limit["s1"] <= steps:
        index = int(np.flatnonzero(run.times == limit["s1"])[0])
        weights = ed.trajectory_weights(run, index)
        flow_index = limit["times"].index(limit["s1"])
        out["s1_outputs"] = outputs_max(weights, x)
        out["s1_relative"] = abs(norm(weights) / alpha - limit["C"]) / limit["C"]
        out["s1_cosine"] = ed.output_cosine(weights, limit["flow"].direction(flow_index), x)
    return out


def trimmed(limit: dict, first: bool) -> dict:
    """What the chapter reads of a limit flow: the speed ratios of the first seed's trajectory,
    every TRAJECTORY_EVERY-th record (the file stays small), and the summaries of every seed."""
    out = {key: limit[key] for key in ("s1", "C", "final")}
    if first:
        every = TRAJECTORY_EVERY
        out["times"], out["ratios"] = limit["times"][::every], limit["ratios"][::every]
    return out


def dynamics_task(depth: int, seed: int) -> dict:
    """One seed's α → 0 limit flow at ``depth`` and its full-loss runs at every α."""
    x, y, G = data()
    best = best_direction(depth)
    limit = limit_flow(depth, seed, best, x, G)
    i = SEEDS[depth].index(seed)
    return {("limit", str(depth), i): trimmed(limit, first=seed == SEEDS[depth][0]),
            ("alpha", str(depth), i): [alpha_run(depth, seed, a, limit, best, x, y, G)
                                       for a in ALPHAS]}


def chapter_task(seed: int) -> dict:
    """The chapter's run (depth 6, eta0 = 100, alpha = 1) from one seed."""
    x, y, G = data()
    run = saddles.saddle_to_saddle_run(x, y, depth=6, width=WIDTH, init_scale=1 / WIDTH,
                                       eta0=CHAPTER["eta0"], steps=CHAPTER["steps"],
                                       seed=seed, record_every=CHAPTER["every"])  # fmt: skip
    end = ed.plateau_exit(run.losses, height=math.log(CLASSES))
    entry = {"seed": seed, "exit": None if end is None else int(run.times[end])}
    if end is not None:
        entry |= report(ed.trajectory_weights(run, end), best_direction(6), x, G)
    return {("chapter_setting", CHAPTER["seeds"].index(seed)): entry}


def catapult_task(alpha: float, seed: int) -> dict:
    """The chapter's step from alpha times one seed's initialization (depth 6)."""
    x, y, _ = data()
    run = saddles.saddle_to_saddle_run(x, y, depth=6, width=WIDTH,
                                       init_scale=alpha / WIDTH, eta0=CHAPTER["eta0"],
                                       steps=CATAPULT["steps"], seed=seed,
                                       record_every=CATAPULT["steps"])  # fmt: skip
    final = ed.trajectory_weights(run, -1)
    index = CATAPULT["alphas"].index(alpha) * len(CATAPULT["seeds"]) + CATAPULT["seeds"].index(seed)
    return {("catapult", index): {"alpha": alpha, "seed": seed,
                                  "final_loss": float(run.losses[-1]),
                                  "final_outputs": outputs_max(final, x)}}  # fmt: skip


def dominant(weights, fraction: float) -> list[int]:
    counts = []
    for w in weights:
        s = np.linalg.svd(w.numpy(), compute_uv=False)
        counts.append(int((s >= fraction * s[0]).sum()))
    return counts


def figure4_task(c: float, depth: int, seed: int) -> dict:
    """One run of the paper's Figure 4 comparison: rule constant c, depth, seed."""
    x, y, _ = data()
    run = saddles.saddle_to_saddle_run(x, y, depth=depth, width=WIDTH,
                                       init_scale=1 / WIDTH, eta0=eta0(depth, c),
                                       steps=FIG4["steps"], seed=seed,
                                       record_every=FIG4["every"])  # fmt: skip
    found = saddles.find_plateaus(run.losses, window=FIG4["window"],
                                  tolerance=FIG4["tolerance"])  # fmt: skip
    last = len(run.times) - 1
    entry = {
        "c": c, "depth": depth, "seed": seed, "eta0": eta0(depth, c),
        "plateaus": [[int(run.times[a]), int(run.times[b]), v] for a, b, v in found],
        "left": sum(b < last for _, b, _ in found),
        "final_loss": float(run.losses[-1]),
        "dominant": dominant(ed.trajectory_weights(run, -1), FIG4["dominant"]),
        "diverged": bool(run.info["diverged"]),
    }  # fmt: skip
    if seed == FIG4["seeds"][0] and c == FIG4["cs"][1]:  # the figure's runs
        every = FIG4["spectra_every"]  # records kept for the figure
        entry["times"] = run.times[::every].tolist()
        entry["losses"] = run.losses[::every].tolist()
        entry["spectra"] = [
            np.linalg.svd(run[f"W{i + 1}"][::every], compute_uv=False)[:, :10].tolist()
            for i in range(depth)
        ]
    return {("figure4", _figure4_index(c, depth, seed)): entry}


def _figure4_index(c: float, depth: int, seed: int) -> int:
    d, n = len(FIG4["depths"]), len(FIG4["seeds"])
    return (FIG4["cs"].index(c) * d + FIG4["depths"].index(depth)) * n + FIG4["seeds"].index(seed)


def balance_task(step: float) -> dict:
    """Weak balancedness along the chapter's run (seed 0), step by step, at eta0 = ``step``."""
    x, y, _ = data()
    init = initialization(6, 0)
    steps = BALANCE["steps"][step]
    drift = ed.balance_drift(init, x, y, eta0=step, steps=steps, record_every=BALANCE["every"])
    change = np.abs(drift.balance - drift.balance[0])
    residual = np.abs(drift.balance - drift.balance[0] - drift.second_order)
    per_layer, offsets = [], np.cumsum([0] + [WIDTH] * 5)
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        scale = drift.size[:, a:b].max(axis=1)
        per_layer.append({
            "drift": float((change[:, a:b].max(axis=1) / scale).max()),
            "final_drift": float(change[-1, a:b].max() / scale[-1]),
            "initial_size": float(scale[0]), "final_size": float(scale[-1]),
            "initial_balance": float(np.abs(drift.balance[0, a:b]).max()),
        })  # fmt: skip
    return {("balance", str(step)): {
        "steps": steps, "s_time": step * steps, "layers": per_layer,
        "identity_residual": float((residual / drift.size.max(axis=1, keepdims=True)).max()),
        "final_loss": float(drift.losses[-1]),
    }}  # fmt: skip


def tasks() -> list:
    """Every independent run as a task; costs are rough seconds of one core (a task that needs a
    search's best direction pays for the search once in its worker process)."""
    from tasks import Task

    out = [Task(f"search depth={d}", search_task, {"depth": d}, 60.0,
                (("searches", str(d)),)) for d in SEARCH["depths"]]
    out += [Task(f"dynamics depth={d} seed={s}", dynamics_task, {"depth": d, "seed": s},
                 150.0 if d == 6 else 30.0,
                 (("limit", str(d), SEEDS[d].index(s)), ("alpha", str(d), SEEDS[d].index(s))))
            for d in DEPTHS for s in SEEDS[d]]
    out += [Task(f"chapter seed={s}", chapter_task, {"seed": s}, 70.0,
                 (("chapter_setting", CHAPTER["seeds"].index(s)),)) for s in CHAPTER["seeds"]]
    out += [Task(f"catapult alpha={a:g} seed={s}", catapult_task, {"alpha": a, "seed": s}, 8.0,
                 (("catapult", i * len(CATAPULT["seeds"]) + j),))
            for i, a in enumerate(CATAPULT["alphas"]) for j, s in enumerate(CATAPULT["seeds"])]
    out += [Task(f"figure4 c={c:.4f} depth={d} seed={s}", figure4_task,
                 {"c": c, "depth": d, "seed": s}, 60.0, (("figure4", _figure4_index(c, d, s)),))
            for c in FIG4["cs"] for d in FIG4["depths"] for s in FIG4["seeds"]]
    out += [Task(f"balance eta0={step:g}", balance_task, {"step": step}, 120.0,
                 (("balance", str(step)),)) for step in BALANCE["steps"]]
    return out


def finish(results: dict) -> dict:
    """The tasks' results in the file's order, with the settings."""
    results = {name: results[name] for name in ("searches", "limit", "alpha", "chapter_setting",
                                                "catapult", "figure4", "balance")}
    settings = {
        "digits": DIGITS, "width": WIDTH, "rule_c": RULE_C, "chapter": CHAPTER,
        "catapult": CATAPULT, "search": SEARCH, "depths": DEPTHS, "alphas": ALPHAS,
        "limit": {str(k): v for k, v in LIMIT.items()}, "after": AFTER, "run_every": RUN_EVERY,
        "trajectory_every": TRAJECTORY_EVERY,
        "aligned": ALIGNED, "local": LOCAL, "figure4": FIG4,
        "balance": {"steps": {str(k): v for k, v in BALANCE["steps"].items()},
                    "every": BALANCE["every"]},
    }  # fmt: skip
    seeds = {"search": SEARCH["seeds"], "dynamics": {str(k): v for k, v in SEEDS.items()},
             "chapter": CHAPTER["seeds"], "figure4": FIG4["seeds"]}  # fmt: skip
    return {"results": results, "settings": settings, "seeds": seeds}
