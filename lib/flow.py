"""One optimization engine for every model: gradient flow and gradient descent.

A *model* is a pure function of a parameter dict ``{name: float64 tensor}`` and a *loss* is a
closure ``loss(params) -> scalar tensor``. This module knows nothing about models.

* :func:`gradient_flow` solves the gradient-flow ODE  dθ/dt = −∇ℓ(θ)  (eq. (4) of Slutzky et al.
  2025; eq. (1) of Elkabetz & Cohen 2021) with :func:`scipy.integrate.solve_ivp`. With
  ``log_time=True`` it integrates in τ = log(1 + t), which turns the plateaus of length 1e11 met in
  the poisoning paper into an interval of length ≈ 25.
* :func:`gradient_descent` runs θ_{k+1} = θ_k − η_k ∇ℓ(θ_k) with a constant step (``"gd"``), the
  adaptive step of the poisoning paper (``"adaptive"``, its Appendix H), or Adam (``"adam"``).

Both return a :class:`Trajectory`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.integrate import solve_ivp

from lib._checks import as_int, as_positive_float, check_params

Params = dict[str, torch.Tensor]
Loss = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]

OPTIMIZERS = ("gd", "adaptive", "adam")
ODE_METHODS = ("LSODA", "RK45", "RK23", "DOP853", "Radau", "BDF")


@dataclass(frozen=True)
class Trajectory:
    """A recorded optimization run.

    Attributes
    ----------
    times:
        Shape ``(T,)``. Continuous time t (gradient flow) or the iteration index (descent).
    params:
        ``{name: array of shape (T, *shape)}``, the parameters at each recorded time.
    losses:
        Shape ``(T,)``, the loss at each recorded time.
    step_sizes:
        Shape ``(T,)``, the step size used at each recorded iteration (gradient descent only).
    info:
        Solver or optimizer details (function evaluations, convergence step, divergence flag, ...).
    """

    times: np.ndarray
    params: dict[str, np.ndarray]
    losses: np.ndarray
    step_sizes: np.ndarray | None = None
    info: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.times)

    def __getitem__(self, name: str) -> np.ndarray:
        """The history of one parameter, shape ``(T, *shape)``."""
        if name not in self.params:
            raise ValueError(
                f"unknown parameter {name!r}; this trajectory has {sorted(self.params)}"
            )
        return self.params[name]

    def at(self, index: int) -> Params:
        """The parameters at recorded position ``index`` as float64 tensors."""
        if not -len(self) <= index < len(self):
            raise ValueError(f"index must be in [-{len(self)}, {len(self)}), got {index}")
        return {k: torch.from_numpy(np.array(v[index])) for k, v in self.params.items()}

    @property
    def final(self) -> Params:
        """The last recorded parameters as float64 tensors."""
        return self.at(-1)


class _Packer:
    """Flattens a parameter dict into one float64 vector and back."""

    def __init__(self, params: Params):
        self.names = list(params)
        self.shapes = [tuple(params[k].shape) for k in self.names]
        self.sizes = [math.prod(s) for s in self.shapes]

    def pack(self, params: Mapping[str, torch.Tensor]) -> np.ndarray:
        return np.concatenate([params[k].detach().reshape(-1).numpy() for k in self.names])

    def unpack(self, vector: np.ndarray, *, requires_grad: bool = False) -> Params:
        chunks = torch.from_numpy(np.array(vector, dtype=np.float64)).split(self.sizes)
        return {
            k: c.reshape(s).requires_grad_(requires_grad)
            for k, c, s in zip(self.names, chunks, self.shapes, strict=True)
        }

    def history(self, vectors: np.ndarray) -> dict[str, np.ndarray]:
        """Split an array of shape (T, total) into ``{name: (T, *shape)}``."""
        out, start = {}, 0
        for k, size, shape in zip(self.names, self.sizes, self.shapes, strict=True):
            out[k] = vectors[:, start : start + size].reshape((len(vectors), *shape)).copy()
            start += size
        return out


def _scalar_loss(loss: Loss, params: Params) -> torch.Tensor:
    value = loss(params)
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise ValueError(f"loss(params) must return a scalar tensor, got {value!r:.80}")
    return value.reshape(())


def _gradients(loss: Loss, params: Params) -> tuple[torch.Tensor, list[torch.Tensor]]:
    value = _scalar_loss(loss, params)
    leaves = list(params.values())
    if not value.requires_grad:  # the loss does not depend on any parameter
        return value.detach(), [torch.zeros_like(p) for p in leaves]
    grads = torch.autograd.grad(value, leaves, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(leaves, grads, strict=True)]
    return value.detach(), grads


def _check_loss(loss) -> None:
    if not callable(loss):
        raise ValueError(
            f"loss must be a callable params -> scalar tensor, got {type(loss).__name__}"
        )


def gradient_flow(
    loss: Loss,
    params: Mapping[str, torch.Tensor],
    t_eval,
    *,
    log_time: bool = False,
    method: str = "LSODA",
    rtol: float = 1e-10,
    atol: float = 1e-12,
) -> Trajectory:
    """Solve the gradient-flow ODE  dθ/dt = −∇ℓ(θ),  θ(0) = ``params``.

    Parameters
    ----------
    loss:
        Closure ``loss(params) -> scalar tensor``, differentiable by autograd.
    params:
        The initial point θ(0), a dict of float64 tensors. Every entry is trained; keep fixed
        quantities inside the closure.
    t_eval:
        Increasing, non-negative times at which to record θ(t). Integration runs on [0, t_eval[-1]].
    log_time:
        Integrate in τ = log(1 + t), i.e. dθ/dτ = −(1 + t) ∇ℓ(θ) = −e^τ ∇ℓ(θ). Plateaus that last
        t ~ 1e11 then cost a few hundred solver steps.
    method, rtol, atol:
        Passed to :func:`scipy.integrate.solve_ivp`. LSODA switches to a stiff method by itself,
        which is what the long, flat plateaus of these losses need.

    Returns
    -------
    Trajectory with ``times = t_eval``; ``info`` holds the solver's evaluation count and message.
    """
    _check_loss(loss)
    theta0 = check_params(params)
    if method not in ODE_METHODS:
        raise ValueError(f"method must be one of {ODE_METHODS}, got {method!r}")
    rtol = as_positive_float(rtol, "rtol")
    atol = as_positive_float(atol, "atol")
    times = np.asarray(t_eval, dtype=np.float64)
    if times.ndim != 1 or times.size == 0:
        raise ValueError(f"t_eval must be a non-empty 1-D array of times, got shape {times.shape}")
    if not np.all(np.isfinite(times)) or times[0] < 0 or np.any(np.diff(times) <= 0):
        raise ValueError("t_eval must be finite, non-negative and strictly increasing")

    packer = _Packer(theta0)

    def negative_gradient(theta: np.ndarray) -> np.ndarray:
        _, grads = _gradients(loss, packer.unpack(theta, requires_grad=True))
        return -torch.cat([g.reshape(-1) for g in grads]).numpy()

    if log_time:

        def rhs(tau, theta):
            return math.exp(tau) * negative_gradient(theta)

        span = (0.0, float(np.log1p(times[-1])))
        grid = np.log1p(times)
    else:

        def rhs(t, theta):
            return negative_gradient(theta)

        span = (0.0, float(times[-1]))
        grid = times
    grid = np.clip(grid, span[0], span[1])  # guard against round-off at the ends

    if span[1] == 0.0:  # only t = 0 requested
        states = packer.pack(theta0)[None, :]
        info = {"nfev": 0, "message": "nothing to integrate"}
    else:
        sol = solve_ivp(
            rhs, span, packer.pack(theta0), method=method, t_eval=grid, rtol=rtol, atol=atol
        )
        if not sol.success:
            raise RuntimeError(f"gradient_flow: the ODE solver failed ({sol.message})")
        states = sol.y.T
        info = {"nfev": int(sol.nfev), "message": sol.message}

    with torch.no_grad():
        losses = np.array([float(_scalar_loss(loss, packer.unpack(s))) for s in states])
    return Trajectory(times=times.copy(), params=packer.history(states), losses=losses, info=info)


def gradient_descent(
    loss: Loss,
    params: Mapping[str, torch.Tensor],
    lr: float,
    steps: int,
    *,
    record_every: int = 1,
    optimizer: str = "gd",
    stop_loss: float | None = None,
    extra_steps: int = 0,
    beta: float = 0.8,
    softening: float = 1e-6,
    adam_betas: tuple[float, float] = (0.9, 0.999),
    adam_eps: float = 1e-8,
) -> Trajectory:
    """Full-batch gradient descent θ_{k+1} = θ_k − η_k u_k for at most ``steps`` iterations.

    Optimizers
    ----------
    ``"gd"``
        u_k = ∇ℓ(θ_k) and η_k = ``lr``: Euler's method on the gradient flow.
    ``"adaptive"``
        The step of Slutzky et al. 2025, Appendix H.1.1 (after Razin et al. 2022, App. D.2), in the
        form of the authors' code: with G_k = Σ_p ‖∇_p ℓ(θ_k)‖ (the sum over parameter tensors of
        their gradients' Frobenius norms), an exponential average m_k = β m_{k−1} + (1 − β) G_k
        (m_{−1} = 0) and η_k = lr / (√(m_k / (1 − β^{k+1})) + softening). Only the step size adapts;
        the direction is the gradient's. (The paper's text says squared norms and softening 1e-5;
        its code uses plain norms and 1e-6, which we follow.)
    ``"adam"``
        Adam (Kingma & Ba 2015) in PyTorch's form, with ``adam_betas`` and ``adam_eps``.

    Stopping rule
    -------------
    With ``stop_loss = ε``: run until ℓ(θ_k) ≤ ε, then ``extra_steps`` more iterations (the papers'
    "until the loss is below ε, then N more steps"), never beyond ``steps`` in total. A non-finite
    loss stops the run and sets ``info["diverged"] = True``.

    Returns
    -------
    Trajectory recorded at iteration 0, every ``record_every`` iterations, and at the last iterate;
    ``times`` are iteration indices; ``info["converged_step"]`` is the first iteration with
    ℓ ≤ ε (or ``None``); ``info["steps_run"]`` the number of updates made.
    """
    _check_loss(loss)
    theta = check_params(params)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    lr = as_positive_float(lr, "lr")
    steps = as_int(steps, "steps", minimum=0)
    record_every = as_int(record_every, "record_every", minimum=1)
    extra_steps = as_int(extra_steps, "extra_steps", minimum=0)
    if stop_loss is not None:
        stop_loss = as_positive_float(stop_loss, "stop_loss", allow_zero=True)
    if not 0 <= beta < 1:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    softening = as_positive_float(softening, "softening", allow_zero=True)
    b1, b2 = adam_betas
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ValueError(f"adam_betas must lie in [0, 1), got {adam_betas}")
    adam_eps = as_positive_float(adam_eps, "adam_eps")

    leaves = {k: v.requires_grad_(True) for k, v in theta.items()}
    avg_norm = 0.0
    first_moment = [torch.zeros_like(v) for v in leaves.values()]
    second_moment = [torch.zeros_like(v) for v in leaves.values()]

    rec_times: list[int] = []
    rec_states: list[dict[str, np.ndarray]] = []
    rec_losses: list[float] = []
    rec_steps: list[float] = []
    converged_step: int | None = None
    diverged = False
    last = steps

    def record(k: int, value: float, eta: float) -> None:
        rec_times.append(k)
        rec_states.append({n: v.detach().numpy().copy() for n, v in leaves.items()})
        rec_losses.append(value)
        rec_steps.append(eta)

    k = 0
    while True:
        value, grads = _gradients(loss, leaves)
        value = float(value)
        if not math.isfinite(value) or not all(bool(torch.isfinite(g).all()) for g in grads):
            diverged = True
            record(k, value, float("nan"))
            break
        if stop_loss is not None and converged_step is None and value <= stop_loss:
            converged_step = k
            last = min(steps, k + extra_steps)
        if k >= last:
            record(k, value, float("nan"))
            break

        if optimizer == "gd":
            eta, updates = lr, grads
        elif optimizer == "adaptive":
            norm_sum = sum(float(torch.linalg.vector_norm(g)) for g in grads)
            avg_norm = beta * avg_norm + (1 - beta) * norm_sum
            eta = lr / (math.sqrt(avg_norm / (1 - beta ** (k + 1))) + softening)
            updates = grads
        else:  # adam
            eta, updates = lr, []
            for g, m, v in zip(grads, first_moment, second_moment, strict=True):
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat = m / (1 - b1 ** (k + 1))
                v_hat = v / (1 - b2 ** (k + 1))
                updates.append(m_hat / (v_hat.sqrt() + adam_eps))
        if k % record_every == 0:
            record(k, value, eta)
        with torch.no_grad():
            for p, u in zip(leaves.values(), updates, strict=True):
                p.sub_(eta * u)
        k += 1

    history = {n: np.stack([s[n] for s in rec_states]) for n in leaves}
    info = {
        "converged_step": converged_step,
        "steps_run": k,
        "diverged": diverged,
        "optimizer": optimizer,
    }
    return Trajectory(
        times=np.array(rec_times, dtype=np.int64),
        params=history,
        losses=np.array(rec_losses),
        step_sizes=np.array(rec_steps),
        info=info,
    )
