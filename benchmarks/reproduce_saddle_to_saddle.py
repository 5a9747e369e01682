"""The long runs behind the saddle-to-saddle chapter (see benchmarks/reproduce.py).

All on the chapter's data (300 of scikit-learn's 8×8 digits, every fifth, cross-entropy, 10
classes) and width 32, with the step rule η_k = c (√L/‖θ_k‖)^{L−2}, i.e. η₀ = c L^{L/2−1} in
η₀/‖θ_k‖^{L−2}: the same step in the time s of §2.1 at every depth, for a direction of a given
speed on the sphere ‖θ‖² = L. c = 10/36 is the paper's 10/‖θ‖⁴ at L = 6 (App. B).

* ``searches``: the escape search of :func:`lib.saddles.escape_search` at depths 2, 3, 4, 6,
  32 seeds each; its best direction is the reference the dynamics are compared with;
* ``limit``: the α → 0 limit of gradient descent (:func:`lib.escape_dynamics.limit_direction_flow`)
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
  (:func:`lib.escape_dynamics.balance_drift`), at η₀ = 100 and at the paper's η₀ = 10.

About ten minutes of CPU (45 minutes of wall time on a shared, loaded 2-core machine).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from lib import escape_dynamics as ed
from lib import saddles
from lib.data import digits
from lib.relu_nets import gaussian_weights

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


def data():
    x, y = digits(**DIGITS)
    return x, y, saddles.cross_entropy_gradient(y, CLASSES)


def initialization(depth: int, seed: int) -> list[torch.Tensor]:
    """The initialization of saddle_to_saddle_run(init_scale=1/WIDTH, seed=seed)."""
    widths = [64] + [WIDTH] * (depth - 1) + [CLASSES]
    return gaussian_weights(widths, 1 / WIDTH, np.random.RandomState(seed))


def norm(weights) -> float:
    return math.sqrt(sum(float((w**2).sum()) for w in weights))


def report(weights, best, x, G) -> dict:
    """The comparison of :func:`lib.escape_dynamics.compare_directions`, as plain numbers."""
    c = ed.compare_directions(weights, best, x, G)
    return {"speed_ratio": c["speed_ratio"], "output_cosine": c["output_cosine"],
            "residual": c["residual"], "tails": c["tails"].tolist()}  # fmt: skip


def searches(x, G) -> tuple[dict, dict]:
    out, best = {}, {}
    for depth in SEARCH["depths"]:
        found = saddles.escape_search(x, G, depth=depth, width=WIDTH, seeds=SEARCH["seeds"],
                                      steps=SEARCH["steps"])  # fmt: skip
        best[depth] = found.direction(found.best)
        out[str(depth)] = {"speeds": found.speeds.tolist(), "best": float(found.speeds.max())}
    return out, best


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


def dynamics(x, y, G, best) -> tuple[dict, dict]:
    limits, alphas = {}, {}
    for depth in DEPTHS:
        limits[str(depth)], alphas[str(depth)] = [], []
        for seed in SEEDS[depth]:
            limit = limit_flow(depth, seed, best[depth], x, G)
            alphas[str(depth)].append(
                [alpha_run(depth, seed, a, limit, best[depth], x, y, G) for a in ALPHAS]
            )
            limits[str(depth)].append(trimmed(limit, first=seed == SEEDS[depth][0]))
    return limits, alphas


def chapter_setting(x, y, G, best) -> tuple[list, list]:
    """The chapter's run (depth 6, eta0 = 100, alpha = 1) over seeds; then smaller alpha."""
    runs = []
    for seed in CHAPTER["seeds"]:
        run = saddles.saddle_to_saddle_run(x, y, depth=6, width=WIDTH, init_scale=1 / WIDTH,
                                           eta0=CHAPTER["eta0"], steps=CHAPTER["steps"],
                                           seed=seed, record_every=CHAPTER["every"])  # fmt: skip
        end = ed.plateau_exit(run.losses, height=math.log(CLASSES))
        entry = {"seed": seed, "exit": None if end is None else int(run.times[end])}
        if end is not None:
            entry |= report(ed.trajectory_weights(run, end), best, x, G)
        runs.append(entry)
    catapult = []
    for alpha in CATAPULT["alphas"]:
        for seed in CATAPULT["seeds"]:
            run = saddles.saddle_to_saddle_run(x, y, depth=6, width=WIDTH,
                                               init_scale=alpha / WIDTH, eta0=CHAPTER["eta0"],
                                               steps=CATAPULT["steps"], seed=seed,
                                               record_every=CATAPULT["steps"])  # fmt: skip
            final = ed.trajectory_weights(run, -1)
            catapult.append({"alpha": alpha, "seed": seed, "final_loss": float(run.losses[-1]),
                             "final_outputs": outputs_max(final, x)})  # fmt: skip
    return runs, catapult


def dominant(weights, fraction: float) -> list[int]:
    counts = []
    for w in weights:
        s = np.linalg.svd(w.numpy(), compute_uv=False)
        counts.append(int((s >= fraction * s[0]).sum()))
    return counts


def figure4(x, y) -> list:
    out = []
    for c in FIG4["cs"]:
        for depth in FIG4["depths"]:
            for seed in FIG4["seeds"]:
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
                out.append(entry)
    return out


def balance(x, y) -> dict:
    out = {}
    init = initialization(6, 0)
    for step, steps in BALANCE["steps"].items():
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
        out[str(step)] = {
            "steps": steps, "s_time": step * steps, "layers": per_layer,
            "identity_residual": float((residual / drift.size.max(axis=1, keepdims=True)).max()),
            "final_loss": float(drift.losses[-1]),
        }  # fmt: skip
    return out


def run() -> dict:
    x, y, G = data()
    search, best = searches(x, G)
    limits, alphas = dynamics(x, y, G, best)
    chapter, catapult = chapter_setting(x, y, G, best[6])
    results = {
        "searches": search,
        "limit": limits,
        "alpha": alphas,
        "chapter_setting": chapter,
        "catapult": catapult,
        "figure4": figure4(x, y),
        "balance": balance(x, y),
    }
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
