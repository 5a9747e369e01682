"""The authors' TensorFlow protocol for the standalone-SSM rows of Slutzky et al. (2025), emulated.

:func:`lib.poisoning.dynamics.train_dynamics` follows the paper's App. H.2.2 in float64. The
authors' code (``common/`` of their repository) differs in details the paper does not state, and
this module reproduces each of them separately, so that a measurement can say which of them moves a
result:

- **arithmetic**: Keras computes in float32 (``dtype="float32"``);
- **the adaptive step** η_k = lr / (√(γ_k / (1 − β^{k+1})) + softening), γ_k = β γ_{k−1} +
  (1 − β) G_k (App. H.1.1), where the authors' G_k sums the Frobenius norms of the gradients of
  Keras's trainable tensors: B, C and the *full* d × d recurrent kernel, whose off-diagonal
  gradient is not zero although a diagonal constraint projects A back after every step
  (``step_norm="full"``); the paper's text says squared norms and softening 1e-5
  (``step_norm="squared"``); ``"diagonal"`` is :mod:`lib.poisoning.dynamics`'s G_k over (a, b, c);
- **the initialization**: seeded Keras initializers are stateless, so every tensor receives the
  first numbers of one and the same normal stream (:func:`authors_init`, ``init="authors"``);
- **the final evaluation**: the authors' notebooks report the error logged at the last multiple of
  100 epochs, 1401 steps after the loss threshold instead of 1500 (``extra_steps`` of the setting).

:func:`mean_of_k_probability` answers the question a four-seed table raises: how often does the mean
of k runs drawn from a measured distribution fall beyond the paper's value?
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from lib.engine.flow import Trajectory
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
    as_tensor,
)
from lib.poisoning._dynamics_kernels import train_runs
from lib.poisoning.dynamics import (
    DynamicsRuns,
    DynamicsSetting,
    dynamics_data,
    dynamics_init,
    sorted_with_tie,
)
from lib.poisoning.theorem1 import tie_gap

__all__ = ["authors_init", "train_authors", "mean_of_k_probability"]

DTYPES = {"float64": torch.float64, "float32": torch.float32}
STEP_NORMS = ("diagonal", "full", "squared")
INITS = ("independent", "authors")


def _check_setting(setting) -> DynamicsSetting:
    if not isinstance(setting, DynamicsSetting):
        raise ValueError(f"setting must be a DynamicsSetting, got {type(setting).__name__}")
    return setting


def authors_init(setting: DynamicsSetting, seed: int) -> dict[str, torch.Tensor]:
    """The initialization of the authors' ``train_helper``, TensorFlow's stateless stream shared.

    Every seeded Keras initializer draws the *first* numbers of one normal stream z (emulated by
    ``numpy.random.RandomState(seed)``): the recurrent kernel is sd_a·z[:d²] as a d × d matrix, of
    which A keeps the diagonal; B is sd_bc·z[:d] and C the same numbers; the MLP layers (if any)
    sd_mlp·z[:h], sd_mlp·z[:h²], sd_mlp·z[:h]. Then, as in the authors' code: |diag A| and |B|
    sorted descending with the tie a_2 := a_1 − diff, b_2 := b_1 − diff; C is |z[:d]| *reversed*
    (their sort acts along a singleton axis); ``warm`` added to A and B. Same distribution per
    entry as :func:`lib.poisoning.dynamics.dynamics_init`, different correlations.
    """
    setting = _check_setting(setting)
    seed = as_seed(seed)
    d, h = setting.d, setting.hidden or 0
    z = np.random.RandomState(seed).normal(size=max(d * d, h * h))
    gap = None if setting.tie_exponent is None else tie_gap(setting.sd_a, setting.tie_exponent)
    a = sorted_with_tie(np.abs(setting.sd_a * z[: d * d].reshape(d, d).diagonal()), gap)
    b = sorted_with_tie(np.abs(setting.sd_bc * z[:d]), gap)
    c = np.abs(setting.sd_bc * z[:d])[::-1]
    params = {"a": a + setting.warm, "b": b + setting.warm, "c": c}
    if setting.with_mlp:
        s = setting.sd_mlp
        params |= {"d_in": s * z[:h].reshape(h, 1),
                   "d_hidden": (s * z[: h * h].reshape(h, h)).T,  # Keras kernels are (in, out)
                   "d_out": s * z[:h].reshape(1, h)}
    return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64))
            for k, v in params.items()}


def _full_kernel_gradient(a, b, c, z):
    """∂ℓ/∂A over the full d × d matrix A at a diagonal point, for R runs: (R, d, d).

    With φ_i = Σ_m x_{i,κ−m} C A^m B, ∂φ_i/∂A_pq = Σ_m x_{i,κ−m} c_p b_q Σ_{r<m} a_p^r a_q^{m−1−r},
    so ∂ℓ/∂A = diag(c) P W Pᵀ diag(b) with P_{jr} = a_j^r (r = 0..κ−2) and the Hankel matrix
    W_{rs} = Σ_i u_i x_{i, κ−1−r−s} (u = ∂ℓ/∂φ; ``z[:, l]`` = Σ_i u_i x_{i,l}, 0-indexed). Its
    diagonal is the gradient of the diagonal entries a_j.
    """
    kappa = z.shape[1]
    r = torch.arange(kappa - 1)
    powers = a.unsqueeze(-1) ** r.to(a.dtype)  # (R, d, κ−1)
    m = r.view(-1, 1) + r.view(1, -1) + 1  # the power of A that the pair (r, s) comes from
    hankel = z[:, (kappa - 1 - m).clamp(min=0)] * (m <= kappa - 1).to(a.dtype)
    return c.unsqueeze(-1) * (powers @ hankel @ powers.transpose(1, 2)) * b.unsqueeze(1)


def _step_gradients(a, b, c, x, y, w):
    """ℓ (R,), ∇_a, ∇_b, ∇_c (R, d) and z = xᵀu (R, κ) of ℓ = Σ_i w_i (φ_i − y_i)² for R runs."""
    kappa = x.shape[-1]
    exponents = torch.arange(kappa - 1, -1, -1, dtype=a.dtype)  # position l multiplies a^{κ−1−l}
    powers = a.unsqueeze(1) ** exponents.view(1, -1, 1)  # (R, κ, d)
    lower = (exponents - 1).clamp(min=0).view(1, -1, 1)
    slopes = exponents.view(1, -1, 1) * a.unsqueeze(1) ** lower  # d/da of a^e
    phi = (x * (powers * (b * c).unsqueeze(1)).sum(-1).unsqueeze(1)).sum(-1)
    residual = phi - y
    u = 2 * w * residual
    z = (u.unsqueeze(-1) * x).sum(1)  # (R, κ)
    feature = (z.unsqueeze(-1) * powers).sum(1)  # Σ_i u_i K_ij
    slope = (z.unsqueeze(-1) * slopes).sum(1)  # Σ_i u_i K'_ij
    return (w * residual * residual).sum(-1), b * c * slope, c * feature, b * feature, z


def _gradient_measure(grads, z, a, b, c, step_norm: str):
    """G_k of the adaptive step: Σ ‖∇‖ over the trainable tensors, as ``step_norm`` says."""
    g_a, g_b, g_c = grads
    if step_norm == "full":
        norm_a = _full_kernel_gradient(a, b, c, z).flatten(1).norm(dim=-1)
    else:
        norm_a = g_a.norm(dim=-1)
    norms = (norm_a, g_b.norm(dim=-1), g_c.norm(dim=-1))
    if step_norm == "squared":
        return sum(n * n for n in norms)
    return sum(norms)


def _batch(setting, pairs, init, dtype):
    """Padded per-run data (x, y, weights), sizes and the stacked initial a, b, c."""
    data = [dynamics_data(setting, seed, special_scale=scale) for seed, scale in pairs]
    sizes = [x.shape[0] for x, _ in data]
    runs, n = len(pairs), max(sizes)
    x = torch.zeros(runs, n, setting.kappa, dtype=DTYPE)
    y = torch.zeros(runs, n, dtype=DTYPE)
    w = torch.zeros(runs, n, dtype=DTYPE)
    for r, ((x_r, y_r), size) in enumerate(zip(data, sizes, strict=True)):
        x[r, :size], y[r, :size], w[r, :size] = x_r, y_r, 1.0 / size
    draw = authors_init if init == "authors" else dynamics_init
    starts = [draw(setting, seed) for seed, _ in pairs]
    params = {k: torch.stack([p[k] for p in starts]) for k in "abc"}
    return x, y, w, sizes, params


def _run(setting, pairs, *, dtype, step_norm, softening, init, max_steps, beta=0.8):
    """The adaptive gradient descent of every run at once; finished runs stay frozen.

    Every ``COMPACT_EVERY`` steps the finished runs leave the batch (their final state is stored),
    so the long runs no longer carry the short ones; each run's arithmetic is row-wise and does
    not change."""
    x64, y64, w64, sizes, start = _batch(setting, pairs, init, dtype)
    x, y, w = (v.to(dtype) for v in (x64, y64, w64))
    a, b, c = (start[k].to(dtype) for k in "abc")
    lr = torch.tensor([setting.lr_clean if s is None else setting.lr_special for _, s in pairs],
                      dtype=dtype)
    runs = len(pairs)
    gamma = torch.zeros(runs, dtype=dtype)
    converged = [None] * runs
    last = [max_steps] * runs
    ends = torch.full((runs,), max_steps)  # the same ends as ``last``, as a tensor
    unfitted = torch.ones(runs, dtype=torch.bool)
    active = torch.ones(runs, dtype=torch.bool)
    rows = torch.arange(runs)  # the original run of each row of the batch
    out = {"a": a.clone(), "b": b.clone(), "c": c.clone()}
    for k in range(max_steps + 1):
        if k % COMPACT_EVERY == 0 and not bool(active.all()):
            done = ~active
            for key, value in (("a", a), ("b", b), ("c", c)):
                out[key][rows[done]] = value[done]
            a, b, c, x, y, w, lr, gamma, ends, unfitted, rows = (
                v[active] for v in (a, b, c, x, y, w, lr, gamma, ends, unfitted, rows))
            active = active[active]
        loss, g_a, g_b, g_c, z = _step_gradients(a, b, c, x, y, w)
        fits = unfitted & active & (loss <= setting.stop_loss)
        if bool(fits.any()):
            for i in torch.nonzero(fits).flatten().tolist():
                r = int(rows[i])
                converged[r] = k
                last[r] = min(max_steps, k + setting.extra_steps)
                ends[i] = last[r]
            unfitted &= ~fits
        active &= k < ends
        if not bool(active.any()):
            break
        measure = _gradient_measure((g_a, g_b, g_c), z, a, b, c, step_norm)
        gamma = beta * gamma + (1 - beta) * measure
        eta = lr / (torch.sqrt(gamma / (1 - beta ** (k + 1))) + softening)
        eta = torch.where(active, eta, torch.zeros_like(eta)).unsqueeze(-1)
        a, b, c = a - eta * g_a, b - eta * g_b, c - eta * g_c
    for key, value in (("a", a), ("b", b), ("c", c)):
        out[key][rows] = value
    final = {key: value.to(DTYPE) for key, value in out.items()}
    diverged = [not all(bool(torch.isfinite(final[k][r]).all()) for k in "abc")
                for r in range(runs)]
    return x64, y64, w64, sizes, start, final, converged, last, diverged


COMPACT_EVERY = 500
ENGINES = ("torch", "compiled")


def _run_compiled(setting, pairs, *, dtype, step_norm, softening, init, max_steps):
    """:func:`_run` through the compiled loop of :mod:`lib.poisoning._dynamics_kernels` (float64:
    ``dtype`` is checked by the caller), recording only the first and the last iterate."""
    x, y, w, sizes, start = _batch(setting, pairs, init, dtype)
    d = setting.d
    theta0 = torch.cat([start[k] for k in "abc"], dim=1).numpy()
    lrs = np.array([setting.lr_clean if s is None else setting.lr_special for _, s in pairs])
    _, states, _, _, info = train_runs(
        theta0, x.numpy(), y.numpy(), w.numpy(), sizes, d=d, hidden=0,
        bounds=np.array([0, d, 2 * d, 3 * d]), lrs=lrs, steps=max_steps, optimizer="adaptive",
        stop_loss=setting.stop_loss, extra_steps=setting.extra_steps,
        record_every=max(1, max_steps), softening=softening, step_norm=step_norm)
    final = {k: torch.from_numpy(states[-1, :, i * d : (i + 1) * d].copy())
             for i, k in enumerate("abc")}
    return (x, y, w, sizes, start, final, info["converged_step"], info["steps_run"],
            info["diverged"])


def train_authors(
    setting: DynamicsSetting,
    seeds: Sequence[int],
    *,
    special_scales: Sequence[float | None] = (None, 1.0),
    dtype: str = "float64",
    step_norm: str = "diagonal",
    softening: float = 1e-6,
    init: str = "independent",
    max_steps: int = 200_000,
    engine: str = "torch",
) -> DynamicsRuns:
    """Train a standalone-SSM setting (adaptive step) with the authors' details switched on or off.

    The protocol of :func:`lib.poisoning.dynamics.train_dynamics` (loss ≤ ``stop_loss``, then
    ``extra_steps`` more, capped at ``max_steps``; one run per seed and special scale), with the
    arithmetic in ``dtype``, the adaptive step's gradient measure G_k from ``step_norm`` and its
    ``softening``, and the initialization ``init`` (module docstring).

    ``engine="torch"`` (the default, the reference) advances every run together in torch;
    ``engine="compiled"`` (float64 only) runs each run's loop compiled by numba
    (:mod:`lib.poisoning._dynamics_kernels`), some ten times faster. The two compute the same
    protocol with sums in another order, so they agree up to rounding over a short horizon (tested),
    not bit for bit over a long run: after a fit the adaptive step grows and amplifies a rounding
    difference, as another machine's would. They differ only for a run that diverges: the compiled
    loop stops it at its first non-finite loss or gradient, the torch loop carries it to
    ``max_steps``. With ``dtype="float64"``, ``step_norm="diagonal"`` and ``init="independent"``
    this is the protocol of :func:`lib.poisoning.dynamics.train_dynamics`. Returns
    :class:`lib.poisoning.dynamics.DynamicsRuns` recording the initial and the final state only
    (``trajectory.times`` = [0, last step]).
    """
    setting = _check_setting(setting)
    if setting.optimizer != "adaptive" or setting.with_mlp:
        raise ValueError("setting must be a standalone SSM trained with the adaptive step "
                         f"(rows 2 of Tables 1 and 3), got {setting.name!r}")
    seeds = as_seeds(seeds)
    special_scales = [None if s is None else as_positive_float(s, "special_scales", allow_zero=True)
                      for s in as_list(special_scales, "special_scales")]
    dtype = DTYPES[as_choice(dtype, "dtype", tuple(DTYPES))]
    step_norm = as_choice(step_norm, "step_norm", STEP_NORMS)
    softening = as_positive_float(softening, "softening")
    init = as_choice(init, "init", INITS)
    max_steps = as_int(max_steps, "max_steps", minimum=0, maximum=min(MAX_STEPS, 10**7))
    engine = as_choice(engine, "engine", ENGINES)
    if engine == "compiled" and dtype != torch.float64:
        raise ValueError(f"engine='compiled' computes in float64, got dtype={dtype}; use "
                         "engine='torch' for float32")
    pairs = [(seed, scale) for seed in seeds for scale in special_scales]
    run = _run if engine == "torch" else _run_compiled
    x, y, w, sizes, start, final, converged, last, diverged = run(
        setting, pairs, dtype=dtype, step_norm=step_norm, softening=softening, init=init,
        max_steps=max_steps)
    history = {k: torch.stack([start[k], final[k]]).numpy() for k in "abc"}
    losses = _step_gradients(final["a"], final["b"], final["c"], x, y, w)[0]
    start_losses = _step_gradients(start["a"], start["b"], start["c"], x, y, w)[0]
    info = {"converged_step": converged, "steps_run": last, "diverged": diverged,
            "optimizer": "adaptive", "dtype": str(dtype), "step_norm": step_norm, "init": init}
    trajectory = Trajectory(times=np.array([0, max(last)]), params=history,
                            losses=torch.stack([start_losses, losses]).numpy(), info=info)
    return DynamicsRuns(setting=setting, seeds=[s for s, _ in pairs], scales=[s for _, s in pairs],
                        trajectory=trajectory, x=x, y=y, weights=w, sizes=sizes)


def mean_of_k_probability(
    values, paper_value: float, *, k: int = 4, side: str = "below", draws: int = 100_000,
    seed: int = 0,
) -> float:
    """How often the mean of ``k`` values drawn without replacement lies beyond ``paper_value``.

    ``side="below"``: the share of draws with mean ≤ paper_value; ``"above"``: mean ≥ paper_value.
    A Monte-Carlo estimate over ``draws`` subsets (numpy's generator seeded with ``seed``), for
    comparing a paper's mean over k seeds with a distribution measured over many seeds.
    """
    values = as_array(values, "values", ndim=1)
    paper_value = float(as_tensor(paper_value, "paper_value", ndim=0))
    k = as_int(k, "k", minimum=1, maximum=values.size)
    side = as_choice(side, "side", ("below", "above"))
    draws = as_size(as_int(draws, "draws", minimum=1), "draws", per=values.size)
    seed = as_seed(seed)
    rng = np.random.default_rng(seed)
    # k distinct indices per draw: the first k of a random permutation, drawn in blocks
    keys = rng.random((draws, values.size))
    subsets = np.argpartition(keys, k - 1, axis=1)[:, :k]
    means = values[subsets].mean(axis=1)
    share = means <= paper_value if side == "below" else means >= paper_value
    return float(share.mean())
