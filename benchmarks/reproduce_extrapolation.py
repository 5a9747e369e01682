"""The long runs behind the extrapolation chapter (see benchmarks/reproduce.py).

The chapter computes its threshold sweep on its own teacher (d* = 3; gradient flow and Adam, 32
seeds per length) live. From here it quotes the runs in the paper's own settings and the long
budgets (about ten minutes of CPU in all, with the compiled loops of lib.fast_extrapolation and
lib.extrapolation_protocols; the five experiments run in parallel processes, one per core):

* ``delay``: the delay teacher at the chapter's reduced size (d* = 6, d = 30), dense students,
  Adam (lr 1e-3) on the population loss for 50 000 steps, 8 seeds;
* ``fig1a``: the paper's Figure 1(a) in its own setting: balanced diagonal students (d = 40) on
  32 teachers drawn by the generator of its App. C.2.1 (d̂ = 5), trained by gradient flow to zero
  loss and by Adam (lr 1e-3, 15 000 steps, App. C.1) on the population loss (eq. 3.4), on the
  empirical loss of N = 10 000 sequences (§5.1's remark) and on the accumulating loss (eq. D.3);
* ``fig1b``: the paper's Figure 1(b) and Figure 6 in its own setting: the delay teacher with
  d̂ = 10, dense students with d = 50, Adam on the empirical loss (N = 10 000, batches of 100)
  with early stopping (at most 50 000 steps), 8 seeds; and the same students on the population
  loss for 50 000 steps without early stopping (the chapter's protocol at the paper's size);
* ``fig3b``: the paper's Figure 3(b): random unbalanced teachers (App. C.2.2, d̂ = 5), dense
  students (d = 50), the protocol of ``fig1b``, 8 seeds;
* ``fig4``: the paper's Figure 4 (and its Figure 3(a), the smallest scale): dense students
  (d = 40) on App. C.2.1 teachers from five initialization scales, Adam with the MultiStepLR
  schedule of App. C.1 (milestones 5000, 10 000, 15 000, 30 000, factor 0.1), 40 000 steps,
  population loss, 4 seeds.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch

from lib import extrapolation as ex
from lib import extrapolation_protocols as xp

DELAY, D_DENSE, DELAY_INIT = 6, 30, 0.05
DELAY_KS = [6, 8, 10, 11, 12, 14]
DELAY_SEEDS = list(range(8))
DELAY_STEPS = 50_000
HORIZON = 40

# The paper's Figure 1(a): App. C.2.1 teachers, balanced diagonal students.
FIG1A = {"d_hat": 5, "d": 40, "init_scale": 1e-3, "horizon": 50, "adam_steps": 15_000, "lr": 1e-3,
         "n_train": 10_000, "ks": [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 20],
         "seeds": list(range(32))}
# The empirical-loss protocol of the paper's §5.2 (App. C.1), shared by Figures 1(b) and 3(b).
EMPIRICAL = {"n_train": 10_000, "batch": 100, "n_val": 1000, "check_every": 500,
             "patience": 5000, "max_steps": 50_000, "lr": 1e-3, "init_scale": 0.05}
FIG1B = {"d_hat": 10, "d": 50, "horizon": 60, "ks": [8, 12, 16, 17, 18, 19, 20, 22, 24],
         "seeds": list(range(8)), "impulse_ks": [8, 18, 20]}
FIG3B = {"d_hat": 5, "d": 50, "horizon": 30, "ks": [4, 5, 6, 7, 8, 9, 10, 11, 12, 14],
         "seeds": list(range(8))}
FIG4 = {"d_hat": 5, "d": 40, "horizon": 50, "scales": [1e-5, 1e-4, 1e-3, 1e-2, 1e-1],
        "ks": [4, 6, 8, 10, 12, 14, 16, 20], "seeds": list(range(4)), "steps": 40_000,
        "lr": 1e-3, "milestones": list(xp.PAPER_MILESTONES), "gamma": 0.1}


def delay_errors(steps: int, seeds: list[int]) -> np.ndarray:
    """Tail errors of dense students on the delay teacher, shape (len(DELAY_KS), len(seeds))."""
    w_delay = ex.linear_rnn_response(*ex.delay_teacher(DELAY), HORIZON)
    pairs = [(k, seed) for k in DELAY_KS for seed in seeds]
    trained = ex.train_adam(
        ex.general_descent_field(w_delay, [k for k, _ in pairs]),
        ex.general_init(D_DENSE, [s for _, s in pairs], init_scale=DELAY_INIT),
        len(pairs),
        lr=1e-3,
        steps=steps,
        record_every=steps,  # only the final students are read
    )
    f = trained.final
    h = ex.linear_rnn_response(f["A"], f["B"], f["C"], HORIZON)
    errors = [ex.tail_error(h[r], w_delay, k).item() for r, (k, _) in enumerate(pairs)]
    return np.array(errors).reshape(len(DELAY_KS), len(seeds))


def _grid(values: np.ndarray, ks: list[int]) -> list:
    """Per-run values in (k-major) run order as a (len(ks), seeds) nested list."""
    return np.asarray(values).reshape(len(ks), -1).tolist()


def fig1a() -> dict:
    """Figure 1(a) in the paper's setting: one App. C.2.1 teacher and one student per seed."""
    s = FIG1A
    ks, seeds, horizon = s["ks"], s["seeds"], s["horizon"]
    flow = {name: np.zeros((len(ks), len(seeds))) for name in ("errors", "losses", "max_abs_atom")}
    shape = (len(ks), len(seeds))
    adam = {loss: {"errors": np.zeros(shape), "losses": np.zeros(shape)}
            for loss in ("population", "empirical", "accumulating")}
    zero = np.zeros((len(ks), len(seeds)))
    for column, seed in enumerate(seeds):
        eigenvalues, masses = xp.paper_balanced_teacher(s["d_hat"], seed)
        w = ex.moment_sequence(eigenvalues, masses, horizon)
        swept = ex.extrapolation_sweep(eigenvalues, masses, ks, d=s["d"], seeds=[seed],
                                       init_scale=s["init_scale"], horizon=horizon,
                                       full_output=True)
        for name in flow:
            flow[name][:, column] = swept[name][:, 0]
        zero[:, column] = [w[k:].abs().max().item() for k in ks]
        start = ex.balanced_init(s["d"], seed, init_scale=s["init_scale"])
        params = {n: start[n].expand(len(ks), -1).clone() for n in ("a", "b")}
        for loss, runs in adam.items():
            trained = xp.train_students("balanced", w, ks, params, loss=loss, lr=s["lr"],
                                        steps=s["adam_steps"], n_train=s["n_train"],
                                        data_seeds=[seed] * len(ks))
            runs["errors"][:, column] = xp.tail_errors("balanced", trained.params, w, ks)
            runs["losses"][:, column] = trained.losses
    return {"flow": flow, "adam": adam, "zero_solution": zero}


def _empirical_runs(w: torch.Tensor, ks: list[int], seeds: list[int], d: int, *,
                    early_stopping: bool) -> dict:
    """Dense students on ``w``: the paper's empirical protocol (EMPIRICAL), or with
    ``early_stopping=False`` the population loss for the same maximal budget."""
    e = EMPIRICAL
    pairs = [(k, seed) for k in ks for seed in seeds]
    start = ex.general_init(d, [seed for _, seed in pairs], init_scale=e["init_scale"])
    options = ({"loss": "empirical", "batch": e["batch"], "patience": e["patience"]}
               if early_stopping else {"loss": "population"})
    trained = xp.train_students("general", w, [k for k, _ in pairs], start, lr=e["lr"],
                                steps=e["max_steps"], n_train=e["n_train"], n_val=e["n_val"],
                                check_every=e["check_every"],
                                data_seeds=[seed for _, seed in pairs], **options)
    errors = xp.tail_errors("general", trained.params, w, [k for k, _ in pairs])
    return {"trained": trained, "errors": _grid(errors, ks), "losses": _grid(trained.losses, ks),
            "steps": _grid(trained.steps, ks), "best_steps": _grid(trained.best_steps, ks),
            "diverged": _grid(trained.diverged, ks)}


def fig1b() -> dict:
    """Figures 1(b) and 6 in the paper's setting (delay teacher d̂ = 10, d = 50)."""
    s = FIG1B
    w = ex.linear_rnn_response(*ex.delay_teacher(s["d_hat"]), s["horizon"])
    out = {}
    for name, early in (("empirical", True), ("population", False)):
        runs = _empirical_runs(w, s["ks"], s["seeds"], s["d"], early_stopping=early)
        trained = runs.pop("trained")
        if early:  # Figure 6: the impulse responses of the students at k = 8, 18, 20
            h = xp.impulse_responses("general", trained.params, s["horizon"]).numpy()
            per_k = h.reshape(len(s["ks"]), len(s["seeds"]), -1)
            runs["impulse_responses"] = {str(k): per_k[s["ks"].index(k)].tolist()
                                         for k in s["impulse_ks"]}
        out[name] = runs
    return out


def fig3b() -> dict:
    """Figure 3(b): one App. C.2.2 random unbalanced teacher per seed, the empirical protocol."""
    s = FIG3B
    errors, zero, losses, steps = [], [], [], []
    for seed in s["seeds"]:
        w = ex.linear_rnn_response(*xp.random_unbalanced_teacher(s["d_hat"], seed), s["horizon"])
        runs = _empirical_runs(w, s["ks"], [seed], s["d"], early_stopping=True)
        errors.append([row[0] for row in runs["errors"]])
        losses.append([row[0] for row in runs["losses"]])
        steps.append([row[0] for row in runs["steps"]])
        zero.append([w[k:].abs().max().item() for k in s["ks"]])
    transpose = lambda rows: np.array(rows).T.tolist()  # noqa: E731 - (seed, k) -> (k, seed)
    return {"errors": transpose(errors), "zero_solution": transpose(zero),
            "losses": transpose(losses), "steps": transpose(steps)}


def fig4() -> dict:
    """Figure 4 (and 3(a)): dense students from several initialization scales, MultiStepLR."""
    s = FIG4
    errors = np.zeros((len(s["scales"]), len(s["ks"]), len(s["seeds"])))
    losses, imbalance = np.zeros_like(errors), np.zeros_like(errors)
    zero = np.zeros((len(s["ks"]), len(s["seeds"])))
    for column, seed in enumerate(s["seeds"]):
        eigenvalues, masses = xp.paper_balanced_teacher(s["d_hat"], seed)
        w = ex.moment_sequence(eigenvalues, masses, s["horizon"])
        zero[:, column] = [w[k:].abs().max().item() for k in s["ks"]]
        for row, scale in enumerate(s["scales"]):
            # the same draw at every scale (seed), scaled, so the scales differ in size only
            start = ex.general_init(s["d"], [seed], init_scale=scale)
            params = {n: v.expand(len(s["ks"]), *v.shape[1:]).clone() for n, v in start.items()}
            trained = xp.train_students("general", w, s["ks"], params, lr=s["lr"],
                                        steps=s["steps"], milestones=s["milestones"],
                                        gamma=s["gamma"])
            errors[row, :, column] = xp.tail_errors("general", trained.params, w, s["ks"])
            losses[row, :, column] = trained.losses
            b, c = trained.params["B"], trained.params["C"]
            imbalance[row, :, column] = ((b - c).norm(dim=-1) / (b + c).norm(dim=-1)).numpy()
    return {"errors": errors, "losses": losses, "imbalance": imbalance, "zero_solution": zero}


PARTS = {"fig4": lambda: fig4(), "fig1b": lambda: fig1b(), "fig1a": lambda: fig1a(),
         "fig3b": lambda: fig3b(), "delay_errors": lambda: delay_errors(DELAY_STEPS, DELAY_SEEDS)}
"""The independent experiments, longest first (each about one to four minutes of one core)."""


def _part(name: str):
    return PARTS[name]()


def run() -> dict:
    """Every experiment, in parallel processes, one per core (they share nothing)."""
    workers = max(1, min(os.cpu_count() or 1, len(PARTS)))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = dict(zip(PARTS, pool.map(_part, PARTS), strict=True))
    return {
        "results": {name: results[name] for name in ("delay_errors", "fig1a", "fig1b", "fig3b",
                                                     "fig4")},
        "settings": {
            "engine": "compiled (lib.fast_extrapolation, lib.extrapolation_protocols)",
            "processes": workers,
            "delay": {
                "d_star": DELAY,
                "d": D_DENSE,
                "init_scale": DELAY_INIT,
                "ks": DELAY_KS,
                "adam_steps": DELAY_STEPS,
                "lr": 1e-3,
                "horizon": HORIZON,
            },
            "fig1a": FIG1A,
            "empirical_protocol": EMPIRICAL,
            "fig1b": FIG1B,
            "fig3b": FIG3B,
            "fig4": FIG4,
            "array axes": "training length, seed (fig4: scale, training length, seed)",
        },
        "seeds": {"delay": DELAY_SEEDS, "fig1a": FIG1A["seeds"], "fig1b": FIG1B["seeds"],
                  "fig3b": FIG3B["seeds"], "fig4": FIG4["seeds"]},
    }
