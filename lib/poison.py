"""Clean-label poisoning of the implicit bias of SSMs (Slutzky, Alexander, Razin & Cohen 2025).

Two groups of tools.

**The Theorem-1 setting** (§3.2, App. E). Teacher of Assumption 1, student with B = 1 and C = 1ᵀ
fixed (Assumption 2), so only a = diag(A) is trained. The training set is S_1 = {(e_1, 1)}; the
poisoned one appends the clean example (e_{κ−1}, 1). Closed forms of the two losses and flows
(eqs. 20–23), the conservation law of the clean flow, the plateau escape time, the saddle s·1 of the
poisoned loss with its Hessian spectrum (Lemmas 8–9), and :func:`theorem1_table`, which runs the
paper's protocol for Table 1 / Table 3, row 1.

**The dynamics experiments** (§4.1, Figure 2, App. G–H). A student SSM, alone or followed by a
two-hidden-layer ReLU MLP, with A, B, C (and the MLP) all trained, on "baseline" sequences with
or without "special" ones; the paper's initialization, optimizers and stopping rule, run for
several seeds (and special-entry scales) at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from scipy.optimize import brentq

from lib._checks import DTYPE, as_int, as_positive_float, as_tensor
from lib.flow import Trajectory, gradient_descent, gradient_flow, log_grid
from lib.relu_nets import gaussian_weights, relu_network
from lib.ssm import (
    SSM,
    _ssm_output_vjp,
    baseline_and_special,
    characterization_coefficients,
    generalization_error,
    impulse_response,
    ones_teacher,
    square_loss_gradient,
    ssm_output,
    theorem1_teacher,
    unit_impulse,
)

# --------------------------------------------------------------------------------------------
# Initialization protocol shared by all experiments
# --------------------------------------------------------------------------------------------


def tie_gap(init_scale: float, exponent: float) -> float:
    """The paper's gap between the two largest initial entries: 0.05·exp(−p·log10(1/sd)).

    (Slutzky et al. 2025, App. H, Tables 6, 8, 12; natural exponential of a base-10 logarithm,
    exactly as the authors' code writes it.) Table 1 row 1: sd = 1e-3, p = 5 gives ≈ 1.53e-8.
    """
    init_scale = as_positive_float(init_scale, "init_scale")
    exponent = as_positive_float(exponent, "exponent", allow_zero=True)
    return 0.05 * math.exp(-exponent * math.log10(1.0 / init_scale))


def _sorted_with_tie(values: np.ndarray, diff: float) -> np.ndarray:
    """Sort descending, then set the second entry to the first minus ``diff``."""
    values = np.sort(values)[::-1].copy()
    if values.size >= 2:
        values[1] = values[0] - diff
    return values


def _check_list(values, name: str) -> list:
    """A non-empty list/tuple/array of values, else a ValueError naming what came."""
    if not isinstance(values, (list, tuple, np.ndarray)) or len(values) == 0:
        raise ValueError(f"{name} must be a non-empty list, got {values!r:.60}")
    return list(values)


def _check_seeds(seeds) -> list[int]:
    return [as_int(s, "seed", minimum=0) for s in _check_list(seeds, "seeds")]


def _check_diff(diff: float, init_scale: float) -> float:
    diff = as_positive_float(diff, "diff", allow_zero=True)
    if diff >= init_scale:
        raise ValueError(f"diff must be smaller than init_scale = {init_scale}, got {diff}")
    return diff


# --------------------------------------------------------------------------------------------
# The Theorem-1 setting: losses, flows, closed forms
# --------------------------------------------------------------------------------------------


def _check_kappa(kappa: int) -> int:
    return as_int(kappa, "kappa", minimum=3)


def theorem1_init(
    d: int,
    seed: int,
    *,
    init_scale: float,
    diff: float | None = None,
    relative_gap: float | None = None,
) -> torch.Tensor:
    """The initial diagonal a(0) of the paper's Theorem-1 experiments (App. H.2.1, Table 8).

    Entries init_scale·U[0, 1) from ``numpy.random.RandomState(seed)`` (the authors' code draws
    uniform entries, although the text says Gaussian), sorted descending, then a_2 := a_1 − diff,
    which places a(0) near the set of Theorem 1: tiny, positive, the top two entries nearly tied.
    Alternatively ``relative_gap = g`` sets a_2 := a_1 (1 − g); with neither, the random gap stays.
    """
    d = as_int(d, "d", minimum=2)
    seed = as_int(seed, "seed", minimum=0)
    init_scale = as_positive_float(init_scale, "init_scale")
    if diff is not None and relative_gap is not None:
        raise ValueError("give at most one of diff and relative_gap")
    values = np.sort(np.random.RandomState(seed).rand(d) * init_scale)[::-1].copy()
    if diff is not None:
        diff = _check_diff(diff, init_scale)
        if diff >= values[0]:
            raise ValueError(
                f"diff = {diff} is not below the largest initial entry {values[0]:.3g} "
                f"(seed {seed}); the entries must stay positive"
            )
        values[1] = values[0] - diff
    elif relative_gap is not None:
        relative_gap = as_positive_float(relative_gap, "relative_gap", allow_zero=True)
        if relative_gap >= 1:
            raise ValueError(f"relative_gap must lie in [0, 1), got {relative_gap}")
        values[1] = values[0] * (1.0 - relative_gap)
    return torch.from_numpy(values)


def theorem1_training_set(
    d: int, kappa: int, *, poisoned: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """S_1 = {(e_1, y)} or S_2 = S_1 ∪ {(e_{κ−1}, y†)}, labelled by the teacher of Assumption 1.

    The labels are computed from the teacher (both equal 1: y = C*(A*)^{κ−1}B*, y† = C*A*B*);
    the appended example is *clean*. Returns ``(x, y)`` of shapes ``(n, κ)`` and ``(n,)``.
    """
    d = as_int(d, "d", minimum=2)
    kappa = _check_kappa(kappa)
    rows = [unit_impulse(kappa, 1)]
    if poisoned:
        rows.append(unit_impulse(kappa, kappa - 1))
    x = torch.cat(rows)
    return x, ssm_output(*theorem1_teacher(d), x)


def _power_sums(a: torch.Tensor, kappa: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Residuals 1 − Σ_k a_k^{κ−1} (of e_1) and 1 − Σ_k a_k (of e_{κ−1})."""
    return 1.0 - (a ** (kappa - 1)).sum(-1), 1.0 - a.sum(-1)


def theorem1_loss(a, kappa: int, *, poisoned: bool) -> torch.Tensor:
    """The training loss of the Theorem-1 student (Slutzky et al. 2025, App. E.1).

        ℓ_{S1}(a) = (1 − Σ_k a_k^{κ−1})²                                    (eq. 20)
        ℓ_{S2}(a) = ½[(1 − Σ_k a_k^{κ−1})² + (1 − Σ_k a_k)²]                  (eq. 22)

    The same as :func:`lib.ssm.square_loss` on :func:`theorem1_training_set` with B = C = 1.
    ``a`` has shape ``(..., d)``; differentiable.
    """
    a = as_tensor(a, "a", min_ndim=1)
    kappa = _check_kappa(kappa)
    long_residual, short_residual = _power_sums(a, kappa)
    if not poisoned:
        return long_residual**2
    return 0.5 * (long_residual**2 + short_residual**2)


def theorem1_velocity(a, kappa: int, *, poisoned: bool) -> torch.Tensor:
    """The gradient-flow velocity ȧ = −∇ℓ of the Theorem-1 student, in closed form.

        clean:     ȧ_j = 2(κ−1)(1 − Σ_k a_k^{κ−1}) a_j^{κ−2}                              (eq. 21)
        poisoned:  ȧ_j = (κ−1)(1 − Σ_k a_k^{κ−1}) a_j^{κ−2} + (1 − Σ_k a_k)              (eq. 23)

    The poisoned flow's second term is the same for every j: an additive drive, the γ^{(0)} term of
    Proposition 1, which pushes all entries together.
    """
    a = as_tensor(a, "a", min_ndim=1)
    kappa = _check_kappa(kappa)
    long_residual, short_residual = _power_sums(a, kappa)
    growth = (kappa - 1) * long_residual.unsqueeze(-1) * a ** (kappa - 2)
    if not poisoned:
        return 2.0 * growth
    return growth + short_residual.unsqueeze(-1)


def _theorem1_gradient(kappa: int, poisoned: bool):
    """``gradient`` closure for lib.flow: (ℓ summed over runs, {"a": −velocity}), eqs. (20)–(23).

    The arithmetic runs in NumPy on the tensors' float64 buffers (no copies): an ODE solve calls
    this a few thousand times on ten numbers, where torch's per-operation overhead would cost
    about ten times the arithmetic itself.
    """

    def gradient(params):
        a = params["a"].detach().numpy()
        power = a ** (kappa - 2)
        long_residual = 1.0 - (power * a).sum(-1, keepdims=True)
        velocity = (kappa - 1) * long_residual * power
        if poisoned:
            short_residual = 1.0 - a.sum(-1, keepdims=True)
            velocity = velocity + short_residual
            loss = 0.5 * (np.square(long_residual).sum() + np.square(short_residual).sum())
        else:
            velocity = 2.0 * velocity
            loss = np.square(long_residual).sum()
        return torch.from_numpy(np.asarray(loss)), {"a": torch.from_numpy(-velocity)}

    return gradient


def _theorem1_hessian(kappa: int, poisoned: bool):
    """``hessian`` closure for lib.flow: the Jacobian of the gradient map −v(a) of eqs. (21), (23).

    With r = 1 − Σ_k a_k^{κ−1} and c = 2(κ−1) (clean) or κ−1 (poisoned):
    ∂v_i/∂a_j = c [δ_ij (κ−2) r a_i^{κ−3} − (κ−1) a_i^{κ−2} a_j^{κ−2}] (− 1 when poisoned, from
    the short residual 1 − Σ_k a_k). Block-diagonal over independent runs. Handing it to LSODA
    spares the d + 1 extra gradient evaluations of each finite-difference Jacobian.
    """
    scale = (kappa - 1) * (1.0 if poisoned else 2.0)

    def hessian(params):
        a = params["a"].detach().numpy().reshape(-1, params["a"].shape[-1])  # (R, d)
        runs, d = a.shape
        power = a ** (kappa - 2)
        residual = 1.0 - (power * a).sum(-1, keepdims=True)
        blocks = -(kappa - 1) * power[:, :, None] * power[:, None, :]
        blocks[:, np.arange(d), np.arange(d)] += (kappa - 2) * residual * a ** (kappa - 3)
        blocks *= scale
        if poisoned:
            blocks -= 1.0
        jacobian = np.zeros((runs * d, runs * d))
        for r in range(runs):
            jacobian[r * d : (r + 1) * d, r * d : (r + 1) * d] = -blocks[r]
        return torch.from_numpy(jacobian)

    return hessian


def theorem1_flow(
    a0, kappa: int, *, poisoned: bool, horizon: float, points: int = 400
) -> Trajectory:
    """Exact gradient flow of the Theorem-1 student from ``a0`` up to time ``horizon``.

    Integrates eq. (21) or (23) with LSODA in log time τ = log(1 + t) (no small-step gradient
    descent), with tolerances rtol = 1e-10, atol = 1e-15 fine enough to keep the tie gap of 5e-12
    of Table 3. ``a0`` may have shape ``(R, d)`` to integrate R independent students at once.
    Recorded at 0 and log-spaced times (:func:`lib.flow.log_grid`).
    """
    a0 = as_tensor(a0, "a0", min_ndim=1)
    kappa = _check_kappa(kappa)
    return gradient_flow(
        None,
        {"a": a0},
        log_grid(horizon, points),
        log_time=True,
        rtol=1e-10,
        atol=1e-15,
        gradient=_theorem1_gradient(kappa, bool(poisoned)),
        hessian=_theorem1_hessian(kappa, bool(poisoned)),
    )


def conserved_quantity(a, kappa: int) -> torch.Tensor:
    """Q_j = a_j^{−(κ−3)} − a_1^{−(κ−3)}, constant along the clean flow (proof of Prop. 6).

    From eq. (21), d/dt a_j^{−(κ−3)} = −2(κ−1)(κ−3)(1 − Σ_k a_k^{κ−1}), the same for every j.
    Needs positive entries; shape ``(..., d)``.
    """
    a = as_tensor(a, "a", min_ndim=1)
    kappa = as_int(kappa, "kappa", minimum=4)
    if bool((a <= 0).any()):
        raise ValueError("the conservation law concerns positive entries a_j > 0")
    inverse = a ** (-(kappa - 3))
    return inverse - inverse[..., :1]


def escape_time(a1: float, kappa: int) -> float:
    """Predicted end of the clean plateau: t* = a_1(0)^{−(κ−3)} / (2(κ−1)(κ−3)).

    While the residual 1 − Σ a^{κ−1} ≈ 1, eq. (21) gives a_1(t)^{−(κ−3)} = a_1(0)^{−(κ−3)} −
    2(κ−1)(κ−3)t, which reaches 0 (a_1 blows up towards 1) at t*.
    """
    a1 = as_positive_float(a1, "a1")
    kappa = as_int(kappa, "kappa", minimum=4)
    return a1 ** (-(kappa - 3)) / (2.0 * (kappa - 1) * (kappa - 3))


def saddle_point(d: int, kappa: int) -> float:
    """The scalar s of the saddle s·1 of the poisoned loss (Lemmas 5–7, App. E.3).

    On the diagonal a = s·1 the poisoned velocity (23) vanishes where
    (κ−1)(1 − d s^{κ−1}) s^{κ−2} + (1 − d s) = 0; the root lies in (1/(2d), 3/(2d)), near 1/d.
    """
    d = as_int(d, "d", minimum=2)
    kappa = _check_kappa(kappa)

    def velocity(s: float) -> float:
        return (kappa - 1) * (1 - d * s ** (kappa - 1)) * s ** (kappa - 2) + (1 - d * s)

    return float(brentq(velocity, 0.5 / d, 1.5 / d, xtol=1e-17, rtol=1e-15))


def saddle_hessian_eigenvalues(d: int, kappa: int) -> tuple[float, float]:
    """The Hessian spectrum of the poisoned loss at s·1 (Lemma 8): (λ_+, λ_−).

    The Hessian there is (ω_1 − ω_2) I + ω_2 11ᵀ with ω_2 = (κ−1)² s^{2κ−4} + 1, so

        λ_− = ω_1 − ω_2 = (κ−1)(κ−2)(d s^{κ−1} − 1) s^{κ−3}    (eigenvectors e_1 − e_j, mult. d−1)
        λ_+ = λ_− + d ω_2 = (κ−1)((2κ−3) d s^{κ−1} − (κ−2)) s^{κ−3} + d    (eigenvector 1)

    (the power s^{κ−3} in λ_+ follows from the lemma's own proof; the OCR'd statement is garbled).
    Lemma 9: λ_− ∈ (−1, 0) and λ_+ > d − 1 > 0: a strict saddle, attracting along 1 and weakly
    repelling across it.
    """
    s = saddle_point(d, kappa)
    minus = (kappa - 1) * (kappa - 2) * (d * s ** (kappa - 1) - 1) * s ** (kappa - 3)
    plus = (kappa - 1) * ((2 * kappa - 3) * d * s ** (kappa - 1) - (kappa - 2)) * s ** (kappa - 3)
    return float(plus + d), float(minus)


def theorem1_lower_bound(d: int, kappa: int) -> float:
    """Theorem 1's lower bound on the poisoned Gen_k, k ≥ κ+2: min{0.1, (1 − 0.6^{1/(κ−1)})/(9d)}.

    In absolute units (divide by d for the normalization of the paper's tables). The constant is
    loose, and partly garbled in the paper's appendix; the measured errors are far larger.
    """
    d = as_int(d, "d", minimum=2)
    kappa = _check_kappa(kappa)
    return min(0.1, (1.0 - 0.6 ** (1.0 / (kappa - 1))) / (9.0 * d))


def theorem1_error(a, d: int, *, length: int = 20) -> torch.Tensor:
    """The error of the paper's Tables 1 and 3, row 1: Gen_length / max_k |h*_k| = Gen_length / d.

    The student is (a, 1, 1ᵀ), the teacher that of Assumption 1, and the authors' code compares the
    first 20 impulse entries (the text says 40). ``a`` has shape ``(..., d)``.
    """
    a = as_tensor(a, "a", min_ndim=1)
    d = as_int(d, "d", minimum=2)
    if a.shape[-1] != d:
        raise ValueError(f"a must have d = {d} entries in its last dimension, got {a.shape[-1]}")
    ones = torch.ones_like(a)
    return generalization_error(SSM(a, ones, ones), theorem1_teacher(d), length, normalize=True)


PAPER_HORIZONS = {(10, 7): (1e11, 1e4), (20, 9): (1e13, 1e7)}
"""(clean, poisoned) integration horizons of Table 9 for the two settings of Tables 1 and 3."""


def default_horizons(d: int, kappa: int, a1: float) -> tuple[float, float]:
    """The paper's horizons where it gives them, else 100 × the predicted escape time t*.

    The poisoned flow leaves the saddle on a time scale ~1/|λ_−|·log(1/α); integrating it as long as
    the clean one costs little in log time, so both get the clean horizon.
    """
    if (d, kappa) in PAPER_HORIZONS:
        return PAPER_HORIZONS[(d, kappa)]
    horizon = max(1e4, 100.0 * escape_time(a1, kappa))
    return horizon, horizon


def theorem1_table(
    d: int,
    kappa: int,
    seeds: Sequence[int],
    *,
    init_scale: float,
    diff: float,
    length: int = 20,
    horizons: tuple[float, float] | None = None,
) -> dict:
    """Run the paper's Theorem-1 experiment (Tables 1 and 3, row 1) for each seed.

    For every seed: a(0) from :func:`theorem1_init`; exact gradient flow (:func:`theorem1_flow`)
    on S_1 up to the clean horizon and on S_2 up to the poisoned one (the paper's Table 9 values,
    see :data:`PAPER_HORIZONS`); the normalized error :func:`theorem1_error` of each final student.

    Returns ``{"clean": mean, "poisoned": mean, "per_seed": {"clean": array, "poisoned": array},
    "final": {"clean": (S, d) array, "poisoned": (S, d) array}, "loss": {...}, "seeds": [...]}``.
    """
    d = as_int(d, "d", minimum=2)
    kappa = _check_kappa(kappa)
    length = as_int(length, "length", minimum=1)
    seeds = _check_seeds(seeds)
    result: dict = {"seeds": seeds, "per_seed": {}, "final": {}, "loss": {}}
    for poisoned, key in ((False, "clean"), (True, "poisoned")):
        finals, losses = [], []
        for seed in seeds:
            a0 = theorem1_init(d, seed, init_scale=init_scale, diff=diff)
            horizon = (horizons or default_horizons(d, kappa, float(a0[0])))[int(poisoned)]
            trajectory = theorem1_flow(a0, kappa, poisoned=poisoned, horizon=horizon, points=2)
            finals.append(trajectory["a"][-1])
            losses.append(trajectory.losses[-1])
        final = np.stack(finals)
        errors = theorem1_error(torch.from_numpy(final), d, length=length).numpy()
        result["per_seed"][key] = errors
        result["final"][key] = final
        result["loss"][key] = np.array(losses)
        result[key] = float(errors.mean())
    return result


def poisoning_window(
    d: int,
    kappa: int,
    seeds: Sequence[int],
    *,
    init_scales: Sequence[float],
    relative_gaps: Sequence[float | None],
    length: int = 20,
) -> dict:
    """Clean and poisoned errors over a grid of init scales and relative tie gaps.

    For each init scale α, relative gap g = (a_1 − a_2)/a_1 (``None``: the natural random gap) and
    seed, a(0) = :func:`theorem1_init` and both flows run to 100 × the predicted escape time
    t*(a_1(0)) (at least 1e4), long enough for every run that escapes at all. Theorem 1 asks for a
    gap above ~α^{κ−3} (so that the clean flow breaks the tie greedily) and below ~α (so that the
    poisoned flow forgets it near the saddle s·1): this sweep shows that window.

    Returns ``{"clean": array, "poisoned": array}`` of normalized errors (:func:`theorem1_error`)
    with shape ``(len(init_scales), len(relative_gaps), len(seeds))``, plus the grid itself.
    """
    d = as_int(d, "d", minimum=2)
    kappa = as_int(kappa, "kappa", minimum=4)
    seeds = _check_seeds(seeds)
    init_scales = _check_list(init_scales, "init_scales")
    relative_gaps = _check_list(relative_gaps, "relative_gaps")
    shape = (len(init_scales), len(relative_gaps), len(seeds))
    errors = {"clean": np.zeros(shape), "poisoned": np.zeros(shape)}
    for i, scale in enumerate(init_scales):
        for j, gap in enumerate(relative_gaps):
            for k, seed in enumerate(seeds):
                a0 = theorem1_init(d, seed, init_scale=scale, relative_gap=gap)
                horizon = max(1e4, 100.0 * escape_time(float(a0[0]), kappa))
                for poisoned, key in ((False, "clean"), (True, "poisoned")):
                    flow = theorem1_flow(a0, kappa, poisoned=poisoned, horizon=horizon, points=2)
                    final = torch.from_numpy(flow["a"][-1])
                    errors[key][i, j, k] = theorem1_error(final, d, length=length).item()
    return {
        **errors,
        "init_scales": list(init_scales),
        "relative_gaps": list(relative_gaps),
        "seeds": list(seeds),
    }


# --------------------------------------------------------------------------------------------
# Dynamics experiments: standalone SSM and SSM + ReLU MLP, A, B, C trained (Figure 2)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DynamicsSetting:
    """One experimental setting of the paper's App. H.1 (Tables 4–7) or H.2 (Tables 10–13).

    Sequences: ``n_baseline`` N(0, 1) sequences non-zero at ``baseline_positions`` and
    ``n_special`` at ``special_positions`` (1-indexed). Initialization: |N(0, sd_a)| sorted with
    a tie gap ``tie_gap(sd_a, tie_exponent)``, B likewise with sd_bc and the same gap,
    C = |N(0, sd_bc)| unsorted, ``warm`` added to A and B; MLP weights N(0, sd_mlp²).
    Training: ``optimizer`` with learning rate ``lr_clean`` / ``lr_special``, until the loss is
    ≤ ``stop_loss``, then ``extra_steps`` more. Adam runs in the authors' TensorFlow form by default
    (``adam_form="keras"``, ``adam_eps=1e-7``: ε added to the uncorrected √v_k, see
    :func:`lib.flow.gradient_descent`). This matters: on the initial plateau the gradients are far
    below ε, so Adam moves like gradient descent with rate lr/ε and keeps the slow, greedy
    escape; with PyTorch's ε = 1e-8 the clean runs leave the plateau two to ten times sooner
    (measured: 1.7–9.5× on seeds 0–7 of Table 1, row 3) and learn more entries of A (see the
    poisoning-in-practice chapter).
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
    tie_exponent: float
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

    @property
    def with_mlp(self) -> bool:
        return self.hidden is not None

    def teacher_labels(self, x: torch.Tensor) -> torch.Tensor:
        """y = Σ_l x_l (teacher A* = B* = C* = 1), then (d_h/2)·ReLU(·) with the MLP teacher."""
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
    length = as_int(length, "length", minimum=1)
    final = runs.trajectory.final
    h = impulse_response(final["a"], final["b"], final["c"], length)
    return (h - 1.0).abs().amax(-1).numpy()


def relative_test_error(
    runs: DynamicsRuns, *, n: int = 2000, length: int = 40, index: int = -1
) -> np.ndarray:
    """Row 3's metric for every run: ‖ŷ − y‖ / ‖y‖ on n N(0, 1) test sequences of the given
    length, drawn with the seed ``seed + 12`` of each run (the authors' convention), for the
    parameters recorded at position ``index`` of the trajectory (default: the end)."""
    n = as_int(n, "n", minimum=1)
    length = as_int(length, "length", minimum=1)
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
    |N(0, sd_bc)| unsorted (as in the authors' code); ``warm`` added to a and b; with an MLP,
    D_in (d_h×1), D_hidden (d_h×d_h), D_out (1×d_h) with N(0, sd_mlp²) entries. The tie gaps of
    Figure 2 (≈ 2e-19) are below float64 resolution, i.e. exact ties, broken only through c.
    """
    seed = as_int(seed, "seed", minimum=0)
    rng = np.random.RandomState(seed)
    d = setting.d
    a = _sorted_with_tie(
        np.abs(rng.normal(0.0, setting.sd_a, d)), tie_gap(setting.sd_a, setting.tie_exponent)
    )
    b = _sorted_with_tie(
        np.abs(rng.normal(0.0, setting.sd_bc, d)), tie_gap(setting.sd_a, setting.tie_exponent)
    )
    c = np.abs(rng.normal(0.0, setting.sd_bc, d))
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
    h = impulse_response(params["a"], params["b"], params["c"], x.shape[-1])
    z = (x * h.flip(-1).unsqueeze(-2)).sum(-1)
    weights = [params["d_in"], params["d_hidden"], params["d_out"]]
    return relu_network(weights, z.unsqueeze(-1)).squeeze(-1)


def ssm_mlp_loss_gradient(x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor):
    """ℓ = Σ_i w_i (ŷ_i − y_i)² of :func:`ssm_mlp_output` with its gradient, by hand (no autograd).

    Back-propagation through the two ReLU layers, then the SSM's closed-form pullback: about three
    times faster than autograd for these tiny networks, whose clean runs need 10⁴–10⁵ Adam steps.
    Data of shapes ``(R, n, κ)``, ``(R, n)``, ``(R, n)``; returns a ``gradient`` closure for
    :func:`lib.flow.gradient_descent` with ``runs = R``.
    """

    def gradient(params):
        z, ssm_backward = _ssm_output_vjp(params["a"], params["b"], params["c"], x)
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
        history = {k: v[:, r] for k, v in self.trajectory.params.items()}
        n = self.sizes[r]
        return history, self.x[r, :n], self.y[r, :n]

    def index(self, seed: int, scale: float | None) -> int:
        """The run number of a (seed, special scale) pair."""
        for r, pair in enumerate(zip(self.seeds, self.scales, strict=True)):
            if pair == (seed, scale):
                return r
        raise ValueError(f"no run with seed {seed} and special scale {scale}")

    def active(self, r: int) -> np.ndarray:
        """Mask of the recorded iterations up to the end of run r (afterwards it is frozen)."""
        return self.trajectory.times <= self.trajectory.info["steps_run"][r]

    def gamma0(self, r: int) -> np.ndarray:
        """γ^{(0)}(t) of Proposition 1 at every recorded iterate of run r (eq. 8).

        For an SSM followed by the MLP the gains g_i of the network enter (eq. 10).
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
) -> DynamicsRuns:
    """Train one run per (seed, special scale) pair, all at once, with the paper's protocol.

    ``None`` in ``special_scales`` is the clean run (baseline sequences only); a number s appends
    the special sequences multiplied by s (s = 1 is the paper's poisoned run). Each run has its own
    learning rate (``lr_clean`` or ``lr_special``), adaptive step or Adam state and stopping time
    (loss ≤ ``stop_loss``, then ``extra_steps``), capped at ``max_steps``. Gradients are computed
    in closed form (:func:`lib.ssm.square_loss_gradient`, :func:`ssm_mlp_loss_gradient`).
    """
    seeds = _check_seeds(seeds)
    special_scales = _check_list(special_scales, "special_scales")
    pairs = [(seed, scale) for seed in seeds for scale in special_scales]
    data = [dynamics_data(setting, seed, special_scale=scale) for seed, scale in pairs]
    sizes = [x.shape[0] for x, _ in data]
    n = max(sizes)
    x = torch.zeros(len(pairs), n, setting.kappa, dtype=DTYPE)
    y = torch.zeros(len(pairs), n, dtype=DTYPE)
    weights = torch.zeros(len(pairs), n, dtype=DTYPE)
    for r, ((x_r, y_r), size) in enumerate(zip(data, sizes, strict=True)):
        x[r, :size], y[r, :size], weights[r, :size] = x_r, y_r, 1.0 / size
    inits = [dynamics_init(setting, seed) for seed, _ in pairs]
    params = {k: torch.stack([p[k] for p in inits]) for k in inits[0]}
    lrs = [setting.lr_clean if scale is None else setting.lr_special for _, scale in pairs]

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
