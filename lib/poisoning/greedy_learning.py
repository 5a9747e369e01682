"""Greedy low-rank learning of a standalone SSM across the settings of Slutzky et al. (2025).

The dynamics experiments of the paper's §4.1 and App. G.1 (Figures 2–19, settings in App. H.1.1,
Tables 4–7) train a diagonal student SSM by gradient descent with an adaptive step, from a
near-zero initialization, on "baseline" sequences with or without "special" ones, and watch the
entries of A leave zero one after another (greedy learning) or together. This module runs all of
the standalone ones:

* Figures 2 and 7 (κ = 6, d = 10) and 3 and 8 (κ = 10, d = 20): teacher A* = B* = C* = 1, the
  student's A, B and C all trained;
* Figures 4, 5 and 6: teachers of dimension 2, 3 and 4 (A* = diag(0.99, 0.8, 0.5, 0.3) cut to
  d*, B* = 1, C* = 1ᵀ), the student's B and C fixed at ones, at both lengths.

Two sources of random numbers (``streams``):

* ``"book"``: the book's own, as :func:`lib.poisoning.dynamics.dynamics_init` draws them
  (``numpy.random.RandomState(seed)``; a, then b, then an independent c) and as
  :func:`lib.ssm.diagonal.baseline_and_special` draws the sequences;
* ``"authors"``: the authors' own numbers, rebuilt (:mod:`lib.poisoning.keras_streams`): their Keras
  initializers cut A (d × d), B and C from one TensorFlow stream (B and C from its same first d
  numbers; C = |B|'s draws in reverse order), in float32; their sequences come from numpy's
  legacy generator seeded with the same seed. With these, a run reproduces the run their notebook
  shows for that seed.

Three forms of the adaptive step's gradient size G_k (``step_norm``, see
:mod:`lib.poisoning._greedy_kernels`): ``"authors"``, the Frobenius norm of the gradient of the
full d × d matrix A their SSM stores, plus the norms of the gradients of B and C (always trainable
variables in their code); ``"diagonal"``, the sum over the trained blocks of the norms of the
gradient of diag(A) (and B, C when trained), the form of
:func:`lib.poisoning.dynamics.train_dynamics`; both with the code's softening 10⁻⁶; and
``"text"``, the rule App. H.1.1 writes: the moving average of the *squared* norm of the gradient
over the trained parameters, G_k = ‖∇ℓ‖², with its softening 10⁻⁵ (``TEXT_SOFTENING``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from lib.engine.flow import Trajectory
from lib.engine.validation import (
    DTYPE,
    MAX_STEPS,
    as_bool,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_positive_float,
    as_seed,
    as_seeds,
    as_steps,
)
from lib.poisoning._greedy_kernels import train_runs
from lib.poisoning.keras_streams import stateless_normal
from lib.poisoning.theorem1 import tie_gap
from lib.ssm.diagonal import (
    baseline_and_special,
    characterization_coefficients,
    effective_rank,
    ssm_output,
)

STREAMS = ("book", "authors")
STEP_NORMS = ("authors", "diagonal", "text")
ENGINES = ("compiled", "numpy")
BETA, SOFTENING = 0.8, 1e-6
"""The adaptive step's averaging coefficient and softening constant (the authors' code)."""
TEXT_SOFTENING = 1e-5
"""The softening constant App. H.1.1 states (β = 0.8 there too), used with ``step_norm="text"``."""


def _positions(value, name: str, kappa: int) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not value:
        raise ValueError(f"{name} must be a non-empty tuple of positions, got {value!r:.60}")
    positions = tuple(as_int(p, name, minimum=1, maximum=kappa) for p in value)
    if len(set(positions)) != len(positions) or list(positions) != sorted(positions):
        raise ValueError(f"{name} must be increasing positions without repeats, got {positions}")
    return positions


@dataclass(frozen=True)
class GreedySetting:
    """One standalone setting of the paper's App. H.1.1 (Tables 4–7).

    Teacher: poles ``teacher`` (A* diagonal), B* = 1, C* = 1ᵀ. Sequences: ``n_baseline`` N(0, 1)
    sequences non-zero at ``baseline_positions``, ``n_special`` at ``special_positions``
    (1-indexed). Initialization: |N(0, sd_a²)| sorted descending, then a_{k+1} := a_1 − f_k·diff for
    the factors ``tie_factors`` (the paper's 1, 1.01, 1.05) with diff = ``tie_gap(sd_a,
    tie_exponent)`` (no tie if None); B likewise with sd_bc, C unsorted, or sorted descending (no
    tie) with ``sort_c``, as App. H.1.1's text says (our streams only; the authors' code reverses
    B's draws instead). ``fixed_bc``: B and C are ones and only A trains (Figures 4–6).
    Training: the adaptive step with base rate ``lr_clean`` / ``lr_special`` until the loss is ≤
    ``stop_loss``, then ``extra_steps`` more.
    """

    name: str
    teacher: tuple[float, ...]
    d: int
    kappa: int
    n_baseline: int
    n_special: int
    baseline_positions: tuple[int, ...]
    special_positions: tuple[int, ...]
    sd_a: float
    sd_bc: float
    tie_exponent: float | None
    lr_clean: float
    lr_special: float
    stop_loss: float
    extra_steps: int
    fixed_bc: bool = False
    tie_factors: tuple[float, ...] = (1.0,)
    step_norm: str = "authors"
    sort_c: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise ValueError(f"name must be a string, got {self.name!r:.60}")
        if not isinstance(self.teacher, tuple) or not self.teacher:
            raise ValueError(
                f"teacher must be a non-empty tuple of poles, got {self.teacher!r:.60}"
            )
        for pole in self.teacher:
            as_float(pole, "teacher", minimum=-1.0, maximum=1.0)
        d = as_int(self.d, "d", minimum=1, maximum=4096)
        kappa = as_int(self.kappa, "kappa", minimum=2, maximum=4096)
        as_int(self.n_baseline, "n_baseline", minimum=0, maximum=2**20)
        as_int(self.n_special, "n_special", minimum=0, maximum=2**20)
        _positions(self.baseline_positions, "baseline_positions", kappa)
        _positions(self.special_positions, "special_positions", kappa)
        for field_name in ("sd_a", "sd_bc", "lr_clean", "lr_special"):
            as_positive_float(getattr(self, field_name), field_name)
        if self.sd_a >= 1 or self.sd_bc >= 1:
            raise ValueError(
                f"sd_a and sd_bc are near-zero scales (< 1), got {self.sd_a}, {self.sd_bc}"
            )
        if self.tie_exponent is not None:
            tie_gap(self.sd_a, self.tie_exponent)  # checks the exponent
        as_positive_float(self.stop_loss, "stop_loss", allow_zero=True)
        as_int(self.extra_steps, "extra_steps", minimum=0, maximum=MAX_STEPS)
        as_bool(self.fixed_bc, "fixed_bc")
        as_bool(self.sort_c, "sort_c")
        if not isinstance(self.tie_factors, tuple) or not 1 <= len(self.tie_factors) < d:
            raise ValueError(
                f"tie_factors must be a tuple of 1 to d - 1 = {d - 1} factors, got "
                f"{self.tie_factors!r:.60}"
            )
        for factor in self.tie_factors:
            as_positive_float(factor, "tie_factors")
        as_choice(self.step_norm, "step_norm", STEP_NORMS)

    def teacher_labels(self, x) -> torch.Tensor:
        """y = Σ_l x_l h*_{κ−l}, h*_m = Σ_k (a*_k)^m: the teacher's output on sequences ``x``
        of shape ``(n, length)``."""
        poles = torch.tensor(self.teacher, dtype=DTYPE)
        ones = torch.ones_like(poles)
        return ssm_output(poles, ones, ones, x)


_STANDALONE = {"n_baseline": 8, "n_special": 10, "lr_clean": 0.01}
FIGURE2 = GreedySetting(
    name="standalone SSM, κ = 6 (Figures 2 and 7)", teacher=(1.0,), d=10, kappa=6,
    baseline_positions=(1, 2), special_positions=(5, 6), sd_a=1e-2, sd_bc=1e-2, tie_exponent=20.0,
    lr_special=0.01, stop_loss=0.01, extra_steps=5000, **_STANDALONE,
)  # fmt: skip
"""Tables 4–7, first rows; the stopping rule of the authors' notebook."""
FIGURE3 = GreedySetting(
    name="standalone SSM, κ = 10 (Figures 3 and 8)", teacher=(1.0,), d=20, kappa=10,
    baseline_positions=tuple(range(1, 8)), special_positions=(9, 10), sd_a=1e-3, sd_bc=5e-2,
    tie_exponent=20.0, lr_special=0.01, stop_loss=0.05, extra_steps=5000, **_STANDALONE,
)  # fmt: skip
"""Tables 4–7, 'SSM longer' rows; the notebook's threshold 0.05 at this length."""

TEACHER_POLES = (0.99, 0.8, 0.5, 0.3)
"""The poles of the higher-dimensional teachers (App. H.1.1): the first d* of them."""


def _higher(d_star: int, kappa: int) -> GreedySetting:
    short = kappa == 6
    figure = {2: 4, 3: 5, 4: 6}[d_star]
    return GreedySetting(
        name=f"teacher of dimension {d_star}, κ = {kappa} (Figure {figure})",
        teacher=TEACHER_POLES[:d_star], d=10 if short else 20, kappa=kappa,
        baseline_positions=(1, 2) if short else tuple(range(1, 8)), special_positions=(kappa - 1,),
        sd_a=1e-2, sd_bc=1e-2 if short else 1e-3, tie_exponent=2.0 if short else 3.0,
        n_baseline=8, n_special=10, lr_clean=0.01 if short else 1e-3, lr_special=1e-3,
        stop_loss=0.01, extra_steps=1500, fixed_bc=True,
        tie_factors=(1.0, 1.01, 1.05)[: d_star - 1],
    )  # fmt: skip


FIGURE4_SHORT, FIGURE4_LONG = _higher(2, 6), _higher(2, 10)
FIGURE5_SHORT, FIGURE5_LONG = _higher(3, 6), _higher(3, 10)
FIGURE6_SHORT, FIGURE6_LONG = _higher(4, 6), _higher(4, 10)
"""Figures 4–6 (Tables 4–7, 'SSM higher dimension' rows): B and C fixed, special entries at the
penultimate position only; the stopping rule (0.01, then 1500 steps) of the authors' notebooks."""

AUTHORS_SEEDS = {
    "Figure 2": (FIGURE2, 105), "Figure 7": (FIGURE2, 100),
    "Figure 3": (FIGURE3, 4000), "Figure 8": (FIGURE3, 4001),
    "Figure 4, κ = 6": (FIGURE4_SHORT, 302), "Figure 4, κ = 10": (FIGURE4_LONG, 1202),
    "Figure 5, κ = 6": (FIGURE5_SHORT, 401), "Figure 5, κ = 10": (FIGURE5_LONG, 1201),
    "Figure 6, κ = 6": (FIGURE6_SHORT, 403), "Figure 6, κ = 10": (FIGURE6_LONG, 1201),
}  # fmt: skip
"""The seed of each standalone figure in the authors' notebooks (one seed per figure)."""


def _check_setting(setting) -> GreedySetting:
    if not isinstance(setting, GreedySetting):
        raise ValueError(f"setting must be a GreedySetting, got {type(setting).__name__}")
    return setting


def _tied(values: np.ndarray, diff: float | None, factors: tuple[float, ...], dtype) -> np.ndarray:
    """Sorted descending, then entry k + 1 := entry 1 − f_k·diff, rounded to ``dtype``."""
    values = np.sort(values)[::-1].astype(dtype)
    if diff is not None:
        for k, factor in enumerate(factors):
            values[k + 1] = dtype(float(values[0]) - factor * diff)
    return values


def greedy_init(
    setting: GreedySetting, seed: int, *, streams: str = "book"
) -> dict[str, torch.Tensor]:
    """The initial ``a``, ``b``, ``c`` (float64 tensors of length d) for one seed.

    ``streams="book"``: ``RandomState(seed)`` draws |N(0, sd_a²)| for a, then b, then c, as
    :func:`lib.poisoning.dynamics.dynamics_init`, c sorted descending when ``setting.sort_c``
    (App. H.1.1's text); with ``fixed_bc``, b = c = 1.
    ``streams="authors"``: the authors' Keras initialization rebuilt (module docstring), in float32
    and then widened: a from the diagonal of sd_a·z (z = TensorFlow's stream of the seed, d × d), b
    from sd_bc·z[:d] sorted, c = |sd_bc·z[:d]| reversed; ties set in float32 as their code sets
    them. With ``fixed_bc`` their b and c serve the first step only (then B and C are reset to
    ones). """
    setting = _check_setting(setting)
    seed = as_seed(seed)
    choice = as_choice(streams, "streams", STREAMS)
    if setting.sort_c and choice == "authors":
        raise ValueError("sort_c applies to streams='book': the authors' code sets c from B's "
                         "draws reversed, not sorted")
    d = setting.d
    diff = None if setting.tie_exponent is None else tie_gap(setting.sd_a, setting.tie_exponent)
    factors = setting.tie_factors
    if choice == "book":
        rng = np.random.RandomState(seed)
        a = _tied(np.abs(rng.normal(0.0, setting.sd_a, d)), diff, factors, np.float64)
        b = _tied(np.abs(rng.normal(0.0, setting.sd_bc, d)), diff, factors, np.float64)
        c = np.abs(rng.normal(0.0, setting.sd_bc, d))
        if setting.sort_c:
            c = np.sort(c)[::-1]
        if setting.fixed_bc:
            b, c = np.ones(d), np.ones(d)
    else:
        if seed >= 2**31:
            raise ValueError(f"the authors' seeds are int32 (TensorFlow), got seed = {seed}")
        z = stateless_normal(d * d, seed)
        recurrent = (np.float32(setting.sd_a) * z).reshape(d, d)
        a = _tied(np.abs(np.diagonal(recurrent)), diff, factors, np.float32)
        kernel = np.float32(setting.sd_bc) * z[:d]
        b = _tied(np.abs(kernel), diff, factors, np.float32)
        c = np.abs(kernel)[::-1]
    return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64)) for k, v in
            (("a", a), ("b", b), ("c", c))}  # fmt: skip


def _authors_sequences(setting: GreedySetting, seed: int, n_special: int):
    """numpy's legacy stream after ``np.random.seed(seed)``: each sequence draws its non-zero
    entries in turn, the baseline ones first (the authors' ``generate_inputs``)."""
    rng = np.random.RandomState(seed)
    blocks = []
    for count, positions in ((setting.n_baseline, setting.baseline_positions),
                             (n_special, setting.special_positions)):  # fmt: skip
        x = np.zeros((count, setting.kappa))
        for i in range(count):
            x[i, [p - 1 for p in positions]] = rng.normal(0.0, 1.0, size=(len(positions), 1))[:, 0]
        blocks.append(torch.from_numpy(x))
    return blocks


def greedy_data(
    setting: GreedySetting, seed: int, *, special_scale: float | None = 1.0, streams: str = "book"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Training set ``(x, y)``: the baseline sequences, then the special ones times
    ``special_scale`` (none if None), labelled by the teacher (clean labels).

    The baseline sequences are the same with and without the special ones (drawn first).
    """
    setting = _check_setting(setting)
    seed = as_seed(seed)
    choice = as_choice(streams, "streams", STREAMS)
    if special_scale is not None:
        special_scale = as_float(special_scale, "special_scale", minimum=0.0, maximum=1e6)
    if choice == "book":
        x_base, x_special = baseline_and_special(
            setting.kappa, setting.n_baseline, setting.n_special,
            baseline_positions=list(setting.baseline_positions),
            special_positions=list(setting.special_positions), seed=seed,
        )  # fmt: skip
    else:
        x_base, x_special = _authors_sequences(setting, seed, setting.n_special)
    x = x_base if special_scale is None else torch.cat([x_base, special_scale * x_special])
    if x.shape[0] == 0:
        raise ValueError("the training set is empty: n_baseline = 0 and no special sequences")
    return x, setting.teacher_labels(x)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def _reference_gradient(a, b, c, x, y, w):
    """ℓ and ∇ℓ of one run through the kernel matrices K_ij = Σ_l x_il a_j^{κ−1−l} and K' = ∂K/∂a
    (the formulas of the paper's eqs. (2)–(3), written out), and the gradient of the full d × d
    matrix A at diag(a), summed term by term."""
    kappa = x.shape[1]
    exponents = np.arange(kappa - 1, -1, -1)  # position l multiplies a^(κ−1−l)
    kernel = x @ (a[None, :] ** exponents[:, None])  # (n, d)
    slope = x @ (exponents[:, None] * a[None, :] ** np.maximum(exponents - 1, 0)[:, None])
    residual = kernel @ (b * c) - y
    u = 2 * w * residual
    grads = (b * c * (u @ slope), c * (u @ kernel), b * (u @ kernel))
    z = u @ x[:, ::-1]  # z_m = Σ_i u_i x_{i, κ−1−m}: the weight of h_m = bᵀAᵐc
    full = np.zeros((a.size, a.size))
    for m in range(1, kappa):  # ∂h_m/∂A_jk = Σ_{p+q=m−1} (b_j a_j^p)(c_k a_k^q)
        for p in range(m):
            full += z[m] * np.outer(b * a**p, c * a ** (m - 1 - p))
    return float(w @ residual**2), grads, full


def _reference_run(theta, x, y, w, d, fixed_bc, full_norm, squared, softening, lr, steps, stop,
                   extra, record_every):  # fmt: skip
    """The protocol of :mod:`lib.poisoning._greedy_kernels`, step by step in numpy (the reference
    engine)."""
    theta = theta.copy()
    records, average, converged, last = [], 0.0, None, steps
    for k in range(steps + 1):
        a, b, c = theta[:d], theta[d : 2 * d], theta[2 * d :]
        loss, (ga, gb, gc), full = _reference_gradient(a, b, c, x, y, w)
        if stop is not None and loss <= stop and converged is None:
            converged, last = k, min(steps, k + extra)
        if k >= last:
            records.append((k, theta.copy(), loss, math.nan))
            break
        if squared:
            size = float(ga @ ga) + (0.0 if fixed_bc else float(gb @ gb + gc @ gc))
        else:
            norm_a = np.linalg.norm(full) if full_norm else np.linalg.norm(ga)
            bc_norms = np.linalg.norm(gb) + np.linalg.norm(gc) if full_norm or not fixed_bc else 0
            size = norm_a + bc_norms
        average = BETA * average + (1 - BETA) * size
        eta = lr / (math.sqrt(average / (1 - BETA ** (k + 1))) + softening)
        if k % record_every == 0:
            records.append((k, theta.copy(), loss, eta))
        theta[:d] -= eta * ga
        theta[d:] = 1.0 if fixed_bc else theta[d:] - eta * np.concatenate([gb, gc])
    return records, converged, last


def _train_reference(theta0, x, y, w, sizes, *, d, fixed_bc, full_norm, lrs, steps, stop_loss,
                     extra_steps, record_every, squared=False, softening=SOFTENING):  # fmt: skip
    runs = [_reference_run(theta0[r], x[r, : sizes[r]], y[r, : sizes[r]], w[r, : sizes[r]], d,
                           fixed_bc, full_norm, squared, softening, lrs[r], steps, stop_loss,
                           extra_steps, record_every) for r in range(theta0.shape[0])]  # fmt: skip
    end = max(last for _, _, last in runs)
    times = np.array([*range(0, end, record_every), end], dtype=np.int64)
    states = np.empty((len(times), len(runs), theta0.shape[1]))
    losses, etas = np.empty((len(times), len(runs))), np.empty((len(times), len(runs)))
    for r, (records, _, _) in enumerate(runs):
        by_time = {k: (s, lo, e) for k, s, lo, e in records}
        final = records[-1]
        for t, k in enumerate(times):
            s, lo, e = by_time.get(int(k), (final[1], final[2], math.nan)) if k <= final[0] else (
                final[1], final[2], math.nan)  # fmt: skip
            states[t, r], losses[t, r], etas[t, r] = s, lo, e
    info = {"converged_step": [c for _, c, _ in runs], "steps_run": [last for _, _, last in runs],
            "diverged": [False] * len(runs), "optimizer": "adaptive"}  # fmt: skip
    return times, states, losses, etas, info


@dataclass(frozen=True)
class GreedyRuns:
    """Several runs of one setting (one per ``(seed, special scale)``), advanced together.

    ``trajectory.params`` holds ``a``, ``b``, ``c`` of shape ``(T, R, d)``; ``x``, ``y``,
    ``weights`` the padded training sets ``(R, n, κ)``, ``(R, n)``, ``(R, n)``, of which run r uses
    its first ``sizes[r]`` rows; ``scales[r]`` is None for a clean run.
    """

    setting: GreedySetting
    streams: str
    seeds: list[int]
    scales: list[float | None]
    trajectory: Trajectory
    x: torch.Tensor
    y: torch.Tensor
    weights: torch.Tensor
    sizes: list[int]

    def _run_number(self, r) -> int:
        count = len(self.seeds)
        return as_int(r, "r", minimum=-count, maximum=count - 1) % count

    def index(self, seed: int, scale: float | None) -> int:
        """The run number of a (seed, special scale) pair."""
        seed = as_seed(seed)
        if scale is not None:
            scale = as_float(scale, "scale")
        for r, pair in enumerate(zip(self.seeds, self.scales, strict=True)):
            if pair == (seed, scale):
                return r
        raise ValueError(f"no run with seed {seed} and special scale {scale}")

    def active(self, r: int) -> np.ndarray:
        """Mask of the recorded iterations up to the end of run r (afterwards it is frozen)."""
        r = self._run_number(r)
        return self.trajectory.times <= self.trajectory.info["steps_run"][r]

    def magnitudes(self, r: int) -> np.ndarray:
        """|a_j| along run r, sorted descending at every recorded iterate: shape ``(T, d)``."""
        r = self._run_number(r)
        return np.sort(np.abs(self.trajectory["a"][:, r]), axis=-1)[:, ::-1]

    def effective_ranks(self, r: int) -> np.ndarray:
        """The effective rank of A along run r (the paper's Figures 9–15), shape ``(T,)``."""
        r = self._run_number(r)
        return effective_rank(torch.from_numpy(self.trajectory["a"][:, r])).numpy()

    def gamma0(self, r: int) -> np.ndarray:
        """γ^{(0)}(t) of Proposition 1 (the paper's eq. (8), Figures 16–19) along run r."""
        r = self._run_number(r)
        n = self.sizes[r]
        params = [torch.from_numpy(self.trajectory[k][:, r]) for k in "abc"]
        return characterization_coefficients(*params, self.x[r, :n], self.y[r, :n])[:, 0].numpy()

    def escape_iteration(self, r: int, *, rank: int = 1, level: float = 0.5) -> int | None:
        """The first recorded iteration at which the ``rank``-th largest |a_j| of run r exceeds
        ``level`` (None if it never does before the run ends)."""
        r = self._run_number(r)
        rank = as_int(rank, "rank", minimum=1, maximum=self.setting.d)
        level = as_positive_float(level, "level")
        above = (self.magnitudes(r)[:, rank - 1] > level) & self.active(r)
        return int(self.trajectory.times[int(np.argmax(above))]) if above.any() else None


def train_greedy(
    setting: GreedySetting,
    seeds: Sequence[int],
    *,
    special_scales: Sequence[float | None] = (None, 1.0),
    streams: str = "book",
    max_steps: int = 200_000,
    record_every: int = 100,
    engine: str = "compiled",
) -> GreedyRuns:
    """Train one run per (seed, special scale) pair with the paper's protocol (module docstring).

    ``None`` in ``special_scales`` is the clean run; a number s appends the special sequences times
    s. Each run has its own base rate (``lr_clean`` or ``lr_special``), adaptive step and stopping
    time (loss ≤ ``stop_loss``, then ``extra_steps``), capped at ``max_steps``. ``engine="numpy"``
    runs the same protocol in plain numpy (the reference the tests hold the compiled loop to).
    """
    setting = _check_setting(setting)
    seeds = as_seeds(seeds)
    scales = as_list(special_scales, "special_scales")
    choice = as_choice(streams, "streams", STREAMS)
    engine = as_choice(engine, "engine", ENGINES)
    pairs = [(seed, scale) for seed in seeds for scale in scales]
    steps, record_every = as_steps(max_steps, record_every,
                                   per_record=len(pairs) * (3 * setting.d + 2))  # fmt: skip
    data = [greedy_data(setting, seed, special_scale=scale, streams=choice)
            for seed, scale in pairs]  # fmt: skip
    sizes = [x.shape[0] for x, _ in data]
    n = max(sizes)
    x = torch.zeros(len(pairs), n, setting.kappa, dtype=DTYPE)
    y = torch.zeros(len(pairs), n, dtype=DTYPE)
    weights = torch.zeros(len(pairs), n, dtype=DTYPE)
    for r, ((x_r, y_r), size) in enumerate(zip(data, sizes, strict=True)):
        x[r, :size], y[r, :size], weights[r, :size] = x_r, y_r, 1.0 / size
    theta0 = np.stack([torch.cat(list(greedy_init(setting, seed, streams=choice).values())).numpy()
                       for seed, _ in pairs])  # fmt: skip
    lrs = np.array([setting.lr_clean if s is None else setting.lr_special for _, s in pairs])
    train = train_runs if engine == "compiled" else _train_reference
    times, states, losses, etas, info = train(
        theta0, x.numpy(), y.numpy(), weights.numpy(), sizes, d=setting.d,
        fixed_bc=setting.fixed_bc, full_norm=setting.step_norm == "authors", lrs=lrs, steps=steps,
        stop_loss=setting.stop_loss, extra_steps=setting.extra_steps, record_every=record_every,
        squared=setting.step_norm == "text",
        softening=TEXT_SOFTENING if setting.step_norm == "text" else SOFTENING,
    )  # fmt: skip
    d = setting.d
    params = {k: states[:, :, i * d : (i + 1) * d] for i, k in enumerate("abc")}
    trajectory = Trajectory(times=times, params=params, losses=losses, step_sizes=etas, info=info)
    return GreedyRuns(setting=setting, streams=choice, seeds=[s for s, _ in pairs],
                      scales=[s for _, s in pairs], trajectory=trajectory, x=x, y=y,
                      weights=weights, sizes=sizes)  # fmt: skip
