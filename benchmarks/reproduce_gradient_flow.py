"""The long runs behind the gradient-flow chapter (see benchmarks/reproduce.py): the paper's
Figure 3 (Appendix H.1), the convolutional network adapted to its theory, on the digits.

Elkabetz & Cohen compare full-batch gradient descent at η0 = 1e-3 with runs at η0/r, r ∈ {2, 5,
10, 20}, for 10 000 η0-iterations on 1000 MNIST images, for a LeNet without biases whose max
pooling is replaced by top-left subsampling (:mod:`lib.networks.conv_nets`). We run that protocol
on the chapter's 1000 digits with the adapted CNN of :func:`lib.networks.conv_nets.cnn_init`
(convolutions 1 → 4 → 8, 3 × 3, stride 2; then 32 → 32 → 16 → 10), η0 = 0.005 (η0 λ_max ≤ 0.5 along
seed 0's run, whose sharpness grows to about 90 by t = 10), horizon t = 10 (2000 η0-steps): every
ratio for seeds 0–7, and η0 against η0/2 for seeds 0–31. That is 752 000 descent steps of a few
milliseconds each: about 20 minutes on two cores, a few on sixteen (the runs are independent and
single-threaded: one task per seed, spread over the executor of benchmarks/tasks.py).
"""

from __future__ import annotations

import numpy as np
import torch

from lib.book import data
from lib.engine import curvature
from lib.engine.flow import gradient_descent
from lib.networks import conv_nets

N_IMAGES, EVERY = 1000, 1
ETA0, HORIZON = 0.005, 10.0
RATIOS = (1, 2, 5, 10, 20)
FULL_SEEDS = list(range(8))  # every ratio
PAIR_SEEDS = list(range(32))  # eta0 and eta0 / 2
SNAPSHOT = 0.1  # time between recorded states
CHECK_TIME = 0.5  # the chapter reruns seed 0 at eta0 up to this time against the stored state
EIG_TIMES = (0.0, 2.0, 4.0, 6.0, 8.0, 10.0)  # curvature along seed 0's eta0/20 run
TIMES = np.round(np.arange(int(round(HORIZON / SNAPSHOT)) + 1) * SNAPSHOT, 9)


def _data():
    return data.digits(N_IMAGES, every=EVERY)


def _loss(x, y):
    def loss(params):
        return conv_nets.cnn_cross_entropy(params, x, y)

    return loss


def _flat(traj, names) -> np.ndarray:
    return np.concatenate([traj[k].reshape(len(traj), -1) for k in names], axis=1)


def _unflat(vector: np.ndarray, template: dict) -> dict:
    out, start = {}, 0
    for name, value in template.items():
        block = vector[start:start + value.numel()]
        out[name] = torch.from_numpy(block.reshape(value.shape).copy())
        start += value.numel()
    return out


def descend(job: tuple[int, int]) -> dict:
    """Gradient descent at η0 / r from seed ``seed``'s initialization up to HORIZON, its states
    and losses recorded every SNAPSHOT time units, and its layer-norm differences at the end."""
    seed, ratio = job
    torch.set_num_threads(1)
    x, y = _data()
    start = conv_nets.cnn_init(seed)
    eta = ETA0 / ratio
    run = gradient_descent(_loss(x, y), start, eta, int(round(HORIZON / eta)),
                           record_every=int(round(SNAPSHOT / eta)))
    return {"seed": seed, "ratio": ratio, "states": _flat(run, list(start)),
            "losses": np.asarray(run.losses),
            "norm_differences": conv_nets.norm_differences(run.final).numpy()}


def _curvature_along(states: np.ndarray, seed: int) -> dict:
    """λ_min, λ_max and Lemma 23's bound at EIG_TIMES along one recorded run."""
    torch.set_num_threads(1)
    x, y = _data()
    template = conv_nets.cnn_init(seed)
    rows = {"times": list(EIG_TIMES), "lambda_min": [], "lambda_max": [], "lemma23": []}
    for t in EIG_TIMES:
        params = _unflat(states[int(round(t / SNAPSHOT))], template)
        low, high = curvature.extreme_eigenvalues(_loss(x, y), params)
        rows["lambda_min"].append(low)
        rows["lambda_max"].append(high)
        rows["lemma23"].append(conv_nets.lemma23_bound(params, x, y))
    return rows


def seed_task(seed: int) -> dict:
    """Every run of one seed (all ratios for FULL_SEEDS, η0 and η0/2 for the others) and what the
    results file keeps of them: ``{path: value}`` (benchmarks/tasks.py)."""
    ratios = RATIOS if seed in FULL_SEEDS else (1, 2)
    done = {r: descend((seed, r)) for r in ratios}

    def drift(ratio):  # the paper's distance: eta0 run against the eta0 / r run, same times
        return np.linalg.norm(done[1]["states"] - done[ratio]["states"], axis=1)

    travel = np.linalg.norm(done[1]["states"] - done[1]["states"][0], axis=1)
    out = {
        ("pair", "drift_end", seed): drift(2)[-1],
        ("pair", "drift_max", seed): drift(2).max(),
        ("pair", "travel_end", seed): travel[-1],
        ("pair", "final_loss", seed): done[1]["losses"][-1],
        ("pair", "norm_differences_start", seed):
            conv_nets.norm_differences(conv_nets.cnn_init(seed)).numpy(),
        ("pair", "norm_differences_end", seed): [done[r]["norm_differences"] for r in (1, 2)],
    }
    if seed in FULL_SEEDS:
        out |= {
            ("full", "drift_end", seed): [drift(r)[-1] for r in RATIOS[1:]],
            ("full", "drift_max", seed): [drift(r).max() for r in RATIOS[1:]],
            ("full", "travel_end", seed): travel[-1],
            ("full", "final_loss", seed): [done[r]["losses"][-1] for r in RATIOS],
            ("full", "norm_differences_end", seed): [done[r]["norm_differences"] for r in RATIOS],
        }
    if seed == 0:
        out |= {
            ("seed0", "loss"): {str(r): done[r]["losses"] for r in RATIOS},
            ("seed0", "travel"): travel,
            ("seed0", "drift"): {str(r): drift(r) for r in RATIOS[1:]},
            ("seed0", "state_at_check_time"):
                done[1]["states"][int(round(CHECK_TIME / SNAPSHOT))],
            ("seed0", "final_state"): done[1]["states"][-1],
            ("seed0", "curvature_smallest_step"):
                _curvature_along(done[RATIOS[-1]]["states"], 0),
        }
    return out


def _writes(seed: int) -> tuple:
    names = ("drift_end", "drift_max", "travel_end", "final_loss", "norm_differences_start",
             "norm_differences_end")
    paths = [("pair", name, seed) for name in names]
    if seed in FULL_SEEDS:
        paths += [("full", name, seed) for name in names if name != "norm_differences_start"]
    if seed == 0:
        paths += [("seed0", name) for name in ("loss", "travel", "drift", "state_at_check_time",
                                               "final_state", "curvature_smallest_step")]
    return tuple(paths)


def tasks() -> list:
    """One task per seed; its cost counts descent steps (about 3 ms each on one core)."""
    from tasks import Task

    def cost(seed):
        ratios = RATIOS if seed in FULL_SEEDS else (1, 2)
        return 0.003 * sum(HORIZON / (ETA0 / r) for r in ratios)

    return [Task(f"seed={seed}", seed_task, {"seed": seed}, cost(seed), _writes(seed))
            for seed in sorted(set(FULL_SEEDS) | set(PAIR_SEEDS))]


def finish(results: dict) -> dict:
    """The tasks' results, with the record times and the check time added."""
    results = {"times": TIMES, **results}
    results["seed0"] = {**results["seed0"], "check_time": CHECK_TIME}
    order = ("loss", "travel", "drift", "check_time", "state_at_check_time", "final_state",
             "curvature_smallest_step")
    results["seed0"] = {k: results["seed0"][k] for k in order}
    results = {k: results[k] for k in ("times", "full", "pair", "seed0")}
    return {
        "results": results,
        "settings": {
            "data": f"scikit-learn digits, the first {N_IMAGES} (stride {EVERY}), standardized",
            "network": "lib.networks.conv_nets.cnn_init defaults: conv 1->4->8 (3x3, stride 2, "
                       "padding 1, "
                       "no bias, ReLU), then 32->32->16->10 (no bias, ReLU between)",
            "loss": "mean cross-entropy, full batch",
            "eta0": ETA0, "ratios": list(RATIOS), "horizon": HORIZON, "snapshot": SNAPSHOT,
            "engine": "lib.engine.flow.gradient_descent (autograd), float64, one thread per run",
            "array axes": "full: seed (FULL_SEEDS), ratio (RATIOS[1:] for drifts, RATIOS for "
                          "losses and norm differences), layer pair; pair: seed (PAIR_SEEDS), "
                          "ratio (1, 2), layer pair",
        },
        "seeds": {"full": FULL_SEEDS, "pair": PAIR_SEEDS},
    }
