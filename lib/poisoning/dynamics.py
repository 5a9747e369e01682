"""Clean-label poisoning beyond Theorem 1: the dynamics experiments of Slutzky et al. (2025).

§4.1, Figure 2, Tables 1 and 3 rows 2–3, App. G–H. A student SSM, alone or followed by a
two-hidden-layer ReLU MLP, with A, B, C (and the MLP) all trained, on "baseline" sequences with or
without "special" ones; the paper's initialization, optimizers and stopping rule, run for several
seeds (and special-entry scales) at once. The Theorem-1 setting, where only diag(A) is trained,
lives in :mod:`lib.poisoning.theorem1`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from lib.engine.flow import ADAM_FORMS, OPTIMIZERS, Trajectory, gradient_descent
from lib.engine.validation import (
    DTYPE,
    MAX_STEPS,
    as_array,
    as_choice,
    as_int,
    as_list,
    as_positive_float,
    as_seed,
    as_seeds,
    as_size,
    as_steps,
    as_tensor,
    check_magnitude,
)
from lib.networks.relu_nets import gaussian_weights, relu_network
from lib.poisoning._dynamics_kernels import train_runs
from lib.poisoning.theorem1 import tie_gap
from lib.ssm.diagonal import (
    baseline_and_special,
    characterization_coefficients,
    impulse_response,
    ones_teacher,
    square_loss_gradient,
    ssm_output,
    ssm_output_vjp,
)


def sorted_with_tie(values: np.ndarray, diff: float | None) -> np.ndarray:
    """Sort descending, then set the second entry to the first minus ``diff`` (kept if None).

    ``values``: a 1-D float64 array of finite numbers; ``diff``: a finite number >= 0, or None.
    """
    values = as_array(values, "values", ndim=1)
    if diff is not None:
        diff = as_positive_float(diff, "diff", allow_zero=True)
    values = np.sort(values)[::-1].copy()
    if values.size >= 2 and diff is not None:
        values[1] = values[0] - diff
    return values


# --------------------------------------------------------------------------------------------
# Dynamics experiments: standalone SSM and SSM + ReLU MLP, A, B, C trained (Figure 2)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DynamicsSetting:
    """One experimental setting of the paper's App. H.1 (Tables 4–7) or H.2 (Tables 10–13).

    Sequences: ``n_baseline`` N(0, 1) sequences non-zero at ``baseline_positions`` and
    ``n_special`` at ``special_positions`` (1-indexed). Initialization: |N(0, sd_a)| sorted with
    a tie gap ``tie_gap(sd_a, tie_exponent)``, B likewise with sd_bc and the same gap,
    C = |N(0, sd_bc)| drawn independently: unsorted (``sort_c=False``, the book's rule) or
    sorted descending with no tie as the paper's App. H.1.1 says ("the same procedure" as B
    without modifying the second entry, ``sort_c=True``). Neither is the authors' code's rule,
    which builds C from B's draws in reverse order (rebuilt in
    :mod:`lib.poisoning.authors_protocol`). ``warm`` added to A and B; MLP weights N(0, sd_mlp²).
    ``tie_exponent=None`` forces no tie: the sorted entries keep their random gaps.
    Training: ``optimizer`` with learning rate ``lr_clean`` / ``lr_special``, until the loss is
    ≤ ``stop_loss``, then ``extra_steps`` more. ``optimizer="adaptive"`` is the authors' code's
    step (plain gradient norms, softening 1e-6) with its norm taken over A's diagonal only, where
    their code takes the full recurrent kernel and the paper's App. H.1.1 squared norms with
    softening 1e-5: a step rule of neither, so the chapter records its runs as illustrations and
    compares the paper's numbers with the paper's rule (``lib.poisoning.authors_protocol``).
    Adam runs in the authors' TensorFlow form by default
    (``adam_form="keras"``, ``adam_eps=1e-7``: ε added to the uncorrected √v_k, see
    :func:`lib.engine.flow.gradient_descent`). This matters: on the initial plateau the gradients
    (≈ 1e-11) are far below ε in either form, so Adam moves like momentum gradient descent with
    step lr/ε. PyTorch's ε = 1e-8 makes that step ten times larger, and its clean runs leave the
    plateau up to ten times sooner (1.7–9.9× on the committed seeds of Table 1, row 3). What they
    learn changes too, and restoring the plateau step (η = 1e-3) does not restore it; but that
    control also shrinks the later steps, the equal-ε control changes the errors in no consistent
    direction, and why the solution changes is not traced (see the poisoning-in-practice chapter).
    """

    name: str
    d: int
    kappa: int
    n_baseline: int
    n_special: int
    baseline_positions: tuple[int, ...]
    special_positions: tuple[int, ...]
    sd_a: float
    sd_bc: float
    tie_exponent: float | None
    optimizer: str
    lr_clean: float
    lr_special: float
    stop_loss: float
    extra_steps: int
    hidden: int | None = None
    sd_mlp: float | None = None
    warm: float = 0.0
    adam_eps: float = 1e-7
    adam_form: str = "keras"
    sort_c: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise ValueError(f"name must be a string, got {self.name!r:.60}")
        as_int(self.d, "d", minimum=1)
        kappa = as_int(self.kappa, "kappa", minimum=2)
        as_int(self.n_baseline, "n_baseline", minimum=0)
        as_int(self.n_special, "n_special", minimum=0)
        for field_name in ("baseline_positions", "special_positions"):
            positions = getattr(self, field_name)
            if not isinstance(positions, tuple) or not positions:
                raise ValueError(f"{field_name} must be a non-empty tuple, got {positions!r:.60}")
            for p in positions:
                as_int(p, field_name, minimum=1, maximum=kappa)
        for field_name in ("sd_a", "sd_bc", "lr_clean", "lr_special", "adam_eps"):
            as_positive_float(getattr(self, field_name), field_name)
        if self.tie_exponent is not None:
            as_positive_float(self.tie_exponent, "tie_exponent", allow_zero=True)
        as_positive_float(self.stop_loss, "stop_loss", allow_zero=True)
        as_positive_float(self.warm, "warm", allow_zero=True)
        as_int(self.extra_steps, "extra_steps", minimum=0)
        as_choice(self.optimizer, "optimizer", OPTIMIZERS)
        as_choice(self.adam_form, "adam_form", ADAM_FORMS)
        if not isinstance(self.sort_c, bool):
            raise ValueError(f"sort_c must be True or False, got {self.sort_c!r:.60}")
        if (self.hidden is None) != (self.sd_mlp is None):
            raise ValueError("hidden and sd_mlp go together: give both (an MLP) or neither")
        if self.hidden is not None:
            as_int(self.hidden, "hidden", minimum=1)
            as_positive_float(self.sd_mlp, "sd_mlp")

    @property
    def with_mlp(self) -> bool:
        return self.hidden is not None

    def teacher_labels(self, x: torch.Tensor) -> torch.Tensor:
        """y = Σ_l x_l (teacher A* = B* = C* = 1), then (d_h/2)·ReLU(·) with the MLP teacher.

        ``x`` has shape ``(n, length)``: the teacher labels sequences of any length (the test
        sequences of :func:`relative_test_error` are longer than κ). Checked by ssm_output.
        """
        y = ssm_output(*ones_teacher(), x)
        if self.with_mlp:
            y = 0.5 * self.hidden * torch.relu(y)
        return y


FIGURE2_SSM = DynamicsSetting(
    name="standalone SSM (Figure 2, left)",
    d=10,
    kappa=6,
    n_baseline=8,
    n_special=10,
    baseline_positions=(1, 2),
    special_positions=(5, 6),
    sd_a=1e-2,
    sd_bc=1e-2,
    tie_exponent=20.0,
    optimizer="adaptive",
    lr_clean=0.01,
    lr_special=0.01,
    stop_loss=0.01,
    extra_steps=5000,
)
"""Tables 4–7 of the paper, first rows: d = 10, κ = 6, 8 baseline and 10 special sequences."""

FIGURE2_SSM_MLP = replace(
    FIGURE2_SSM,
    name="SSM + two-hidden-layer ReLU MLP (Figure 2, right)",
    n_baseline=20,
    n_special=20,
    tie_exponent=0.5,
    optimizer="adam",
    lr_special=0.001,
    stop_loss=0.05,
    hidden=15,
    sd_mlp=0.03,
)
"""Tables 4–7, SSM + MLP rows: d = 10, d_h = 15, κ = 6, 20 + 20 sequences, Adam."""

TABLE1_ROW2 = replace(
    FIGURE2_SSM,
    name="standalone SSM beyond Theorem 1 (Table 1, row 2)",
    special_positions=(5,),
    sd_a=1e-3,
    sd_bc=1e-3,
    tie_exponent=5.0,
    extra_steps=1500,
    warm=0.1,
)
"""Tables 10–13, standalone row: special entries at the penultimate position only, warm init 0.1."""

TABLE3_ROW2 = replace(
    TABLE1_ROW2,
    name="standalone SSM beyond Theorem 1, longer sequences (Table 3, row 2)",
    d=20,
    kappa=10,
    baseline_positions=(1, 2, 3, 4, 5, 6, 7),
    special_positions=(9,),
    sd_a=1e-2,
    tie_exponent=3.0,
    lr_clean=0.001,
    lr_special=0.001,
)
"""Tables 10–13, standalone row at the longer length κ = 10 (d = 20)."""

TABLE1_ROW3 = replace(
    FIGURE2_SSM_MLP,
    name="SSM in a non-linear network (Table 1, row 3)",
    special_positions=(5,),
    lr_special=0.01,
    stop_loss=0.01,
    warm=0.001,
)
"""Tables 10–13, SSM + MLP row: d = 10, d_h = 15, κ = 6, 20 + 20 sequences, Adam."""

TABLE3_ROW3 = replace(
    TABLE1_ROW3,
    name="SSM in a non-linear network, longer sequences (Table 3, row 3)",
    d=20,
    kappa=10,
    baseline_positions=(1, 2, 3, 4, 5, 6, 7),
    special_positions=(9,),
    sd_a=1e-3,
    sd_bc=1e-3,
    tie_exponent=2.0,
    lr_special=5e-5,
    stop_loss=0.05,
    hidden=25,
    sd_mlp=0.1,
)
"""Tables 10–13, SSM + MLP row at κ = 10 (d = 20, d_h = 25; Adam 5e-5 with special sequences)."""


def impulse_error(runs: DynamicsRuns, *, length: int = 40) -> np.ndarray:
    """Row 2's metric for every run: max_{k < length} |h_k − 1| (teacher A* = B* = C* = 1, whose
    largest impulse entry is 1, so this is also the normalized error). Shape ``(R,)``."""
    _check_runs(runs)
    length = as_size(length, "length", per=runs.trajectory.params["a"][0].size)
    final = runs.trajectory.final
    h = impulse_response(final["a"], final["b"], final["c"], length)
    return (h - 1.0).abs().amax(-1).numpy()


def relative_test_error(
    runs: DynamicsRuns, *, n: int = 2000, length: int = 40, index: int = -1
) -> np.ndarray:
    """Row 3's metric for every run: ‖ŷ − y‖ / ‖y‖ on n N(0, 1) test sequences of the given
    length, drawn with the seed ``seed + 12`` of each run (the authors' convention), for the
    parameters recorded at position ``index`` of the trajectory (default: the end)."""
    _check_runs(runs)
    length = as_size(length, "length", per=runs.setting.d)
    n = as_size(n, "n", per=length + runs.setting.d + (runs.setting.hidden or 0))
    if not runs.setting.with_mlp:
        raise ValueError("relative_test_error is the metric of the SSM + MLP setting")
    final = runs.trajectory.at(index)
    errors = []
    for r, seed in enumerate(runs.seeds):
        generator = torch.Generator().manual_seed(seed + 12)
        x = torch.randn(n, length, generator=generator, dtype=DTYPE)
        params = {k: v[r : r + 1] for k, v in final.items()}
        prediction = ssm_mlp_output(params, x.unsqueeze(0))[0]
        y = runs.setting.teacher_labels(x)
        errors.append(float(torch.linalg.vector_norm(prediction - y) / torch.linalg.vector_norm(y)))
    return np.array(errors)


def dynamics_init(setting: DynamicsSetting, seed: int) -> dict[str, torch.Tensor]:
    """The paper's initialization (App. H.1.1) from ``numpy.random.RandomState(seed)``.

    a = |N(0, sd_a)| sorted descending with a_2 := a_1 − diff; b likewise with sd_bc; c =
    |N(0, sd_bc)| drawn independently, unsorted (the book's rule), or sorted descending (no tie)
    when ``setting.sort_c`` as the paper's text says (the authors' code instead reverses b's
    draws); ``warm`` added to a and b; with an MLP,
    D_in (d_h×1), D_hidden (d_h×d_h), D_out (1×d_h) with N(0, sd_mlp²) entries. The tie gaps of
    Figure 2 (≈ 2e-19) are below float64 resolution, i.e. exact ties, broken only through c.
    """
    _check_setting(setting)
    seed = as_seed(seed)
    rng = np.random.RandomState(seed)
    d = setting.d
    gap = None if setting.tie_exponent is None else tie_gap(setting.sd_a, setting.tie_exponent)
    a = sorted_with_tie(np.abs(rng.normal(0.0, setting.sd_a, d)), gap)
    b = sorted_with_tie(np.abs(rng.normal(0.0, setting.sd_bc, d)), gap)
    c = np.abs(rng.normal(0.0, setting.sd_bc, d))
    if setting.sort_c:
        c = sorted_with_tie(c, None)
    params = {"a": a + setting.warm, "b": b + setting.warm, "c": c}
    params = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in params.items()}
    if setting.with_mlp:
        names = ("d_in", "d_hidden", "d_out")
        widths = (1, setting.hidden, setting.hidden, 1)
        params.update(zip(names, gaussian_weights(widths, setting.sd_mlp, rng), strict=True))
    return params


def dynamics_data(
    setting: DynamicsSetting, seed: int, *, special_scale: float | None = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Training set ``(x, y)`` for one seed: baseline sequences, then the special ones times
    ``special_scale`` (none if it is None), with the teacher's labels.

    The baseline sequences are identical with and without the special ones (they are drawn first),
    so the special examples are *appended* to the clean training set, as in the paper.
    """
    _check_setting(setting)
    x_base, x_special = baseline_and_special(
        setting.kappa,
        setting.n_baseline,
        setting.n_special,
        baseline_positions=setting.baseline_positions,
        special_positions=setting.special_positions,
        seed=seed,
    )
    if special_scale is not None:
        special_scale = as_positive_float(special_scale, "special_scale", allow_zero=True)
        x_base = torch.cat([x_base, special_scale * x_special])
    return x_base, setting.teacher_labels(x_base)


def ssm_mlp_output(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """ŷ = D_out σ(D_hidden σ(D_in φ(x))) for per-run data ``x`` of shape ``(R, n, κ)``.

    ``params`` holds a, b, c of shape ``(R, d)`` and D_in, D_hidden, D_out of shapes
    ``(R, d_h, 1)``, ``(R, d_h, d_h)``, ``(R, 1, d_h)``. Returns ``(R, n)``.
    """
    params = _check_mlp_params(params, finite=True)
    runs = params["a"].shape[0]
    x = as_tensor(x, "x", shape=(runs, None, None))
    if x.shape[-1] < 1:
        raise ValueError(f"x must have shape (R, n, kappa) with kappa >= 1, got {tuple(x.shape)}")
    h = impulse_response(params["a"], params["b"], params["c"], x.shape[-1])
    z = (x * h.flip(-1).unsqueeze(-2)).sum(-1)
    weights = [params["d_in"], params["d_hidden"], params["d_out"]]
    return relu_network(weights, z.unsqueeze(-1)).squeeze(-1)


def ssm_mlp_loss_gradient(x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor):
    """ℓ = Σ_i w_i (ŷ_i − y_i)² of :func:`ssm_mlp_output` with its gradient, by hand (no autograd).

    Back-propagation through the two ReLU layers, then the SSM's closed-form pullback: about three
    times faster than autograd for these tiny networks, whose clean runs need 10⁴–10⁵ Adam steps.
    Data of shapes ``(R, n, κ)``, ``(R, n)``, ``(R, n)`` (weights non-negative); returns a
    ``gradient`` closure for :func:`lib.engine.flow.gradient_descent` with ``runs = R``. The
    closure checks the parameters' keys, dtypes and shapes against the data (not their finiteness:
    a diverging run is the optimizer's to report).
    """
    x = check_magnitude(as_tensor(x, "x", ndim=3), "x")
    runs, n, kappa = x.shape
    if runs == 0 or n == 0 or kappa == 0:
        raise ValueError(f"x must have shape (R, n, kappa) with R, n, kappa >= 1, got {x.shape}")
    y = check_magnitude(as_tensor(y, "y", shape=(runs, n)), "y")
    weights = as_tensor(weights, "weights", shape=(runs, n))
    if bool((weights < 0).any()):
        raise ValueError("weights must be non-negative (they weight squared residuals)")

    def gradient(params):
        params = _check_mlp_params(params, finite=False)
        if params["a"].shape[0] != runs:
            raise ValueError(
                f"params have {params['a'].shape[0]} runs but the data have R = {runs}"
            )
        z, ssm_backward = ssm_output_vjp(params["a"], params["b"], params["c"], x)
        d_in, d_hidden, d_out = params["d_in"], params["d_hidden"], params["d_out"]
        pre1 = z.unsqueeze(-1) * d_in.squeeze(-1).unsqueeze(-2)  # (R, n, h)
        post1 = torch.relu(pre1)
        pre2 = post1 @ d_hidden.transpose(-1, -2)
        post2 = torch.relu(pre2)
        residual = (post2 @ d_out.transpose(-1, -2)).squeeze(-1) - y  # (R, n)
        cotangent = 2.0 * weights * residual
        grad_out = cotangent.unsqueeze(-2) @ post2  # (R, 1, h)
        back2 = (cotangent.unsqueeze(-1) * d_out) * (pre2 > 0)  # (R, n, h)
        grad_hidden = back2.transpose(-1, -2) @ post1  # (R, h, h)
        back1 = (back2 @ d_hidden) * (pre1 > 0)
        grad_in = (back1 * z.unsqueeze(-1)).sum(-2).unsqueeze(-1)  # (R, h, 1)
        grads = ssm_backward((back1 * d_in.squeeze(-1).unsqueeze(-2)).sum(-1))
        grads.update(d_in=grad_in, d_hidden=grad_hidden, d_out=grad_out)
        return (weights * residual**2).sum(-1), grads

    return gradient


MLP_KEYS = ("a", "b", "c", "d_in", "d_hidden", "d_out")


def _check_mlp_params(params, *, finite: bool) -> dict[str, torch.Tensor]:
    """Keys, dtypes and shapes of SSM + MLP parameters with a run axis (finiteness optional)."""
    if not isinstance(params, dict) or set(params) != set(MLP_KEYS):
        got = sorted(params) if isinstance(params, dict) else type(params).__name__
        raise ValueError(f"params must be a dict with keys {list(MLP_KEYS)}, got {got}")
    for key in MLP_KEYS:
        value = params[key]
        if not isinstance(value, torch.Tensor) or value.dtype != DTYPE:
            raise ValueError(
                f"params[{key!r}] must be a float64 tensor, got {getattr(value, 'dtype', value)!r}"
            )
        if finite:
            as_tensor(value, f"params[{key!r}]")
    a = params["a"]
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"params['a'] must have shape (R, d) with R, d >= 1, got {tuple(a.shape)}")
    runs, d = a.shape
    hidden = params["d_hidden"].shape[-1] if params["d_hidden"].ndim == 3 else -1
    expected = {
        "b": (runs, d),
        "c": (runs, d),
        "d_in": (runs, hidden, 1),
        "d_hidden": (runs, hidden, hidden),
        "d_out": (runs, 1, hidden),
    }
    for key, shape in expected.items():
        if tuple(params[key].shape) != shape or hidden < 1:
            raise ValueError(
                f"params[{key!r}] must have shape {shape} (R = {runs}, d = {d}, d_h = {hidden}), "
                f"got {tuple(params[key].shape)}"
            )
    return params


def _check_setting(setting) -> None:
    if not isinstance(setting, DynamicsSetting):
        raise ValueError(f"setting must be a DynamicsSetting, got {type(setting).__name__}")


def _check_runs(runs) -> None:
    if not isinstance(runs, DynamicsRuns):
        raise ValueError(
            f"runs must be the DynamicsRuns of train_dynamics, got {type(runs).__name__}"
        )


@dataclass(frozen=True)
class DynamicsRuns:
    """Several training runs of one setting, advanced together (one per ``(seed, scale)``).

    ``trajectory`` has parameters of shape ``(T, R, ...)`` and losses ``(T, R)``. ``x``, ``y`` and
    ``weights`` are the padded per-run training sets ``(R, n, κ)``, ``(R, n)``, ``(R, n)``; run r
    uses its first ``sizes[r]`` rows. ``scales[r]`` is None for a clean run.
    """

    setting: DynamicsSetting
    seeds: list[int]
    scales: list[float | None]
    trajectory: Trajectory
    x: torch.Tensor
    y: torch.Tensor
    weights: torch.Tensor
    sizes: list[int]

    def run(self, r: int) -> tuple[dict[str, np.ndarray], torch.Tensor, torch.Tensor]:
        """Run r's parameter history ``{name: (T, ...)}`` and its unpadded data ``(x, y)``."""
        r = self._run_number(r)
        history = {k: v[:, r] for k, v in self.trajectory.params.items()}
        n = self.sizes[r]
        return history, self.x[r, :n], self.y[r, :n]

    def _run_number(self, r) -> int:
        count = len(self.seeds)
        return as_int(r, "r", minimum=-count, maximum=count - 1) % count

    def index(self, seed: int, scale: float | None) -> int:
        """The run number of a (seed, special scale) pair."""
        for r, pair in enumerate(zip(self.seeds, self.scales, strict=True)):
            if pair == (seed, scale):
                return r
        raise ValueError(f"no run with seed {seed} and special scale {scale}")

    def active(self, r: int) -> np.ndarray:
        """Mask of the recorded iterations up to the end of run r (afterwards it is frozen)."""
        r = self._run_number(r)
        return self.trajectory.times <= self.trajectory.info["steps_run"][r]

    def initial_gain(self, r: int) -> float:
        """The network's output at initialization on an SSM output of +1: D_out σ(D_hid σ(D_in)).

        The ReLU network is positively homogeneous, so this is its slope on positive SSM outputs.
        Only for the SSM + MLP setting.
        """
        r = self._run_number(r)
        if not self.setting.with_mlp:
            raise ValueError("initial_gain is defined for the SSM + MLP setting only")
        p = self.trajectory.at(0)
        hidden = torch.relu(p["d_hidden"][r] @ torch.relu(p["d_in"][r]))
        return (p["d_out"][r] @ hidden).item()

    def gamma0(self, r: int) -> np.ndarray:
        """γ^{(0)}(t) of Proposition 1 at every recorded iterate of run r (the paper's eq. (8)).

        For an SSM followed by the MLP the gains g_i of the network enter (the paper's eq. (10)).
        """
        history, x_r, y_r = self.run(r)
        params = [torch.from_numpy(history[k]) for k in "abc"]
        if not self.setting.with_mlp:
            return characterization_coefficients(*params, x_r, y_r)[:, 0].numpy()
        values = []
        for t in range(len(self.trajectory)):
            weights = [torch.from_numpy(history[k][t]) for k in ("d_in", "d_hidden", "d_out")]

            def head(z, weights=weights):
                return relu_network(weights, z.unsqueeze(-1)).squeeze(-1)

            step = [p[t] for p in params]
            values.append(characterization_coefficients(*step, x_r, y_r, head=head)[0].item())
        return np.array(values)


def train_dynamics(
    setting: DynamicsSetting,
    seeds: Sequence[int],
    *,
    special_scales: Sequence[float | None] = (None, 1.0),
    max_steps: int = 200_000,
    record_every: int = 100,
    engine: str = "compiled",
    init: Callable[[DynamicsSetting, int], dict[str, torch.Tensor]] | None = None,
) -> DynamicsRuns:
    """Train one run per (seed, special scale) pair, all at once, with the paper's protocol.

    ``None`` in ``special_scales`` is the clean run (baseline sequences only); a number s appends
    the special sequences multiplied by s (s = 1 is the paper's poisoned run). Each run has its own
    learning rate (``lr_clean`` or ``lr_special``), adaptive step or Adam state and stopping time
    (loss ≤ ``stop_loss``, then ``extra_steps``), capped at ``max_steps``. Gradients are computed
    in closed form (:func:`lib.ssm.diagonal.square_loss_gradient`, :func:`ssm_mlp_loss_gradient`).

    ``engine="compiled"`` (the default) runs each run's whole training loop compiled by numba
    (:mod:`lib.poisoning._dynamics_kernels`), some ten times faster per step; ``engine="torch"``
    runs the same protocol through :func:`lib.engine.flow.gradient_descent`. The two agree up to
    floating-point rounding (the order of sums differs), as the tests check.

    ``init`` (default :func:`dynamics_init`, the paper's draw): a function ``(setting, seed) ->``
    the initial parameters of that seed, the same tensors (names and shapes) as
    :func:`dynamics_init` returns, finite; e.g.
    :func:`lib.poisoning.authors_protocol.authors_init`, or a control that changes some entries of
    the paper's draw. """
    _check_setting(setting)
    seeds = as_seeds(seeds)
    if init is None:
        init = dynamics_init
    elif not callable(init):
        raise ValueError(f"init must be a function (setting, seed) -> parameters, got {init!r:.60}")
    special_scales = as_list(special_scales, "special_scales")
    max_steps = as_int(max_steps, "max_steps", minimum=0, maximum=MAX_STEPS)
    record_every = as_int(record_every, "record_every", minimum=1, maximum=MAX_STEPS)
    pairs = [(seed, scale) for seed in seeds for scale in special_scales]
    data = [dynamics_data(setting, seed, special_scale=scale) for seed, scale in pairs]
    sizes = [x.shape[0] for x, _ in data]
    n = max(sizes)
    x = torch.zeros(len(pairs), n, setting.kappa, dtype=DTYPE)
    y = torch.zeros(len(pairs), n, dtype=DTYPE)
    weights = torch.zeros(len(pairs), n, dtype=DTYPE)
    for r, ((x_r, y_r), size) in enumerate(zip(data, sizes, strict=True)):
        x[r, :size], y[r, :size], weights[r, :size] = x_r, y_r, 1.0 / size
    inits = [_checked_init(init(setting, seed), dynamics_init(setting, seed), seed)
             for seed, _ in pairs]
    params = {k: torch.stack([p[k] for p in inits]) for k in inits[0]}
    lrs = [setting.lr_clean if scale is None else setting.lr_special for _, scale in pairs]
    per_record = sum(v.numel() for v in params.values()) + 2 * len(pairs)
    as_steps(max_steps, record_every, per_record=per_record)

    engine = as_choice(engine, "engine", ENGINES)
    if engine == "compiled":
        trajectory = _train_compiled(setting, params, x, y, weights, sizes, lrs, max_steps,
                                     record_every)  # fmt: skip
        return DynamicsRuns(
            setting=setting,
            seeds=[seed for seed, _ in pairs],
            scales=[scale for _, scale in pairs],
            trajectory=trajectory,
            x=x,
            y=y,
            weights=weights,
            sizes=sizes,
        )
    if setting.with_mlp:
        gradient = ssm_mlp_loss_gradient(x, y, weights)
    else:
        gradient = square_loss_gradient(x, y, weights=weights)
    trajectory = gradient_descent(
        None,
        params,
        lrs,
        max_steps,
        record_every=record_every,
        optimizer=setting.optimizer,
        stop_loss=setting.stop_loss,
        extra_steps=setting.extra_steps,
        adam_eps=setting.adam_eps,
        adam_form=setting.adam_form,
        runs=len(pairs),
        gradient=gradient,
    )
    return DynamicsRuns(
        setting=setting,
        seeds=[seed for seed, _ in pairs],
        scales=[scale for _, scale in pairs],
        trajectory=trajectory,
        x=x,
        y=y,
        weights=weights,
        sizes=sizes,
    )


ENGINES = ("compiled", "torch")


def _checked_init(params, reference: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """The tensors ``init`` returned: those of ``reference`` (names, shapes), finite."""
    if not isinstance(params, dict) or set(params) != set(reference):
        raise ValueError(f"init(setting, {seed}) must return a dict with the keys "
                         f"{sorted(reference)}, got {params!r:.60}")
    checked = {}
    for k, ref in reference.items():
        value = torch.as_tensor(params[k]).detach().to(DTYPE)
        if tuple(value.shape) != tuple(ref.shape) or not bool(torch.isfinite(value).all()):
            raise ValueError(f"init(setting, {seed})[{k!r}] must be a finite tensor of shape "
                             f"{tuple(ref.shape)}, got shape {tuple(value.shape)}")
        checked[k] = value
    return checked


def _train_compiled(setting, params, x, y, weights, sizes, lrs, max_steps, record_every):
    """The runs of :func:`train_dynamics` through
    :func:`lib.poisoning._dynamics_kernels.train_runs`."""
    names = list(params)
    runs = len(lrs)
    shapes = [tuple(params[k].shape[1:]) for k in names]
    bounds = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
    theta0 = np.concatenate([params[k].reshape(runs, -1).numpy() for k in names], axis=1)
    times, states, losses, etas, info = train_runs(
        theta0,
        x.numpy(),
        y.numpy(),
        weights.numpy(),
        sizes,
        d=setting.d,
        hidden=setting.hidden or 0,
        bounds=bounds,
        lrs=np.asarray(lrs, dtype=np.float64),
        steps=max_steps,
        optimizer=setting.optimizer,
        stop_loss=setting.stop_loss,
        extra_steps=setting.extra_steps,
        record_every=record_every,
        adam_eps=setting.adam_eps,
        adam_form=setting.adam_form,
    )
    history = {
        k: states[:, :, bounds[i] : bounds[i + 1]].reshape((len(times), runs, *shapes[i]))
        for i, k in enumerate(names)
    }
    return Trajectory(times=times, params=history, losses=losses, step_sizes=etas, info=info)
