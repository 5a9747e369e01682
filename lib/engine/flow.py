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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.integrate import odeint, solve_ivp

from lib.engine.validation import (
    MAX_STEPS,
    NumericalFailure,
    as_array,
    as_bool,
    as_choice,
    as_float,
    as_int,
    as_positive_float,
    as_size,
    as_steps,
    check_params,
)

Params = dict[str, torch.Tensor]
Loss = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]
Gradient = Callable[[Mapping[str, torch.Tensor]], tuple[torch.Tensor, Mapping[str, torch.Tensor]]]

OPTIMIZERS = ("gd", "adaptive", "adam")
ADAM_FORMS = ("torch", "keras")
ODE_METHODS = ("LSODA", "RK45", "RK23", "DOP853", "Radau", "BDF")
LOG_TIME_LIMIT = 1e200
"""The longest horizon :func:`gradient_flow` integrates in log time."""
BLOW_UP = 1e150
"""A state entry beyond this, evaluation after evaluation, means the flow blows up."""
BLOW_UP_STREAK = 50


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
        index = as_int(index, "index", minimum=-len(self), maximum=len(self) - 1)
        return {k: torch.from_numpy(np.array(v[index])) for k, v in self.params.items()}

    @property
    def final(self) -> Params:
        """The last recorded parameters as float64 tensors."""
        return self.at(-1)


def log_grid(horizon: float, points: int) -> np.ndarray:
    """Recording times for long flows: 0, then ``points − 1`` geometrically spaced times from
    min(1e-2, horizon/100) to ``horizon`` (just [0, horizon] when ``points`` is 2)."""
    horizon = as_positive_float(horizon, "horizon")
    points = as_int(points, "points", minimum=2, maximum=10**7)
    if points == 2:
        return np.array([0.0, horizon])
    return np.concatenate([[0.0], np.geomspace(min(1e-2, horizon / 100), horizon, points - 1)])


class _Packer:
    """Flattens a parameter dict into one float64 vector and back."""

    def __init__(self, params: Params):
        self.names = list(params)
        self.shapes = [tuple(params[k].shape) for k in self.names]
        self.sizes = [math.prod(s) for s in self.shapes]

    def pack(self, params: Mapping[str, torch.Tensor]) -> np.ndarray:
        return np.concatenate([params[k].detach().reshape(-1).numpy() for k in self.names])

    def unpack(self, vector: np.ndarray, *, requires_grad: bool = False) -> Params:
        flat = torch.from_numpy(np.array(vector, dtype=np.float64))
        if len(self.names) == 1:  # the common case of one parameter tensor: no split
            name, shape = self.names[0], self.shapes[0]
            return {name: flat.reshape(shape).requires_grad_(requires_grad)}
        chunks = flat.split(self.sizes)
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
    _check_loss_dtype(value, "loss(params)")
    return value.reshape(())


def _check_loss_dtype(value: torch.Tensor, what: str) -> None:
    """A loss is a real float64 number: a complex one has no gradient descent (autograd refuses
    it deep inside), an integer one no gradient, a float32 one rounds the gaps this book studies."""
    if value.dtype != torch.float64:
        raise ValueError(f"{what} must return float64 losses, got dtype {value.dtype}")


def _pair(result) -> tuple:
    """A closed-form gradient's answer, checked to be a pair (loss, {name: gradient})."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ValueError(
            f"gradient(params) must return a pair (loss, {{name: gradient}}), got {result!r:.80}"
        )
    return result


def _gradients(loss: Loss, params: Params) -> tuple[torch.Tensor, list[torch.Tensor]]:
    value = _scalar_loss(loss, params)
    leaves = list(params.values())
    if not value.requires_grad:  # the loss does not depend on any parameter
        return value.detach(), [torch.zeros_like(p) for p in leaves]
    grads = torch.autograd.grad(value, leaves, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(leaves, grads, strict=True)]
    return value.detach(), grads


def _check_loss_or_gradient(loss, gradient) -> None:
    if gradient is None and loss is None:
        raise ValueError("give a loss closure params -> scalar tensor, or a gradient closure")
    if gradient is not None:
        if not callable(gradient):
            raise ValueError(
                "gradient must be a callable params -> (loss, {name: gradient}), "
                f"got {type(gradient).__name__}"
            )
        if loss is not None and not callable(loss):
            raise ValueError(f"loss must be callable or None, got {type(loss).__name__}")
        return
    if not callable(loss):
        raise ValueError(
            f"loss must be a callable params -> scalar tensor, got {type(loss).__name__}"
        )


def _check_gradients(grads, params: Params) -> dict[str, torch.Tensor]:
    """Validate a closed-form gradient dict against the parameters it differentiates."""
    if not isinstance(grads, Mapping) or set(grads) != set(params):
        got = sorted(grads) if isinstance(grads, Mapping) else type(grads).__name__
        raise ValueError(
            f"gradient must return one entry per parameter {sorted(params)}, got {got}"
        )
    out = {}
    for k, p in params.items():
        g = grads[k]
        if not isinstance(g, torch.Tensor) or g.shape != p.shape or g.dtype != p.dtype:
            raise ValueError(
                f"gradient[{k!r}] must be a {p.dtype} tensor of shape {tuple(p.shape)}, got "
                f"{getattr(g, 'dtype', type(g).__name__)} {tuple(getattr(g, 'shape', ()))}"
            )
        out[k] = g
    return out


def gradient_flow(
    loss: Loss,
    params: Mapping[str, torch.Tensor],
    t_eval,
    *,
    log_time: bool = False,
    method: str = "LSODA",
    rtol: float = 1e-10,
    atol: float = 1e-12,
    gradient: Gradient | None = None,
    hessian: Callable[[Mapping[str, torch.Tensor]], torch.Tensor] | None = None,
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
        The ODE method and tolerances. LSODA (the default) switches to a stiff method by itself,
        which is what the long, flat plateaus of these losses need; it runs through
        :func:`scipy.integrate.odeint`, which drives the same Fortran LSODA as ``solve_ivp`` but
        without a Python round trip per step (half the time on these small systems, identical
        evaluation counts). The other methods run through :func:`scipy.integrate.solve_ivp`.
    gradient:
        Optional closed form ``gradient(params) -> (loss, {name: ∂loss/∂name})`` used instead of
        autograd (then ``loss`` may be ``None``). A closed form is several times faster on the
        small models of this book, and lets a chapter integrate the very equations a paper writes.
    hessian:
        Optional ``hessian(params) -> (P, P) tensor``: the Jacobian of the gradient map with respect
        to all P parameters, flattened in the order of ``params`` (the Hessian of the loss when the
        flow is its gradient flow). Handed to the solver as the ODE's Jacobian, −H (or −e^τ H in
        log time); for stiff flows near a degenerate minimum it saves LSODA most of its work,
        which otherwise goes into finite-difference Jacobians (P gradient calls each).

    Returns
    -------
    Trajectory with ``times = t_eval``; ``info`` holds the solver's evaluation count and message.

    Raises
    ------
    ValueError
        For malformed arguments (which one, what was expected, what came).
    lib.engine.validation.NumericalFailure
        (a ``ValueError`` and a ``RuntimeError``) when the solve fails or its result is not
        finite: the solver reports a failure, the gradient or the loss turns nan/inf along the
        way (e.g. ``sqrt(w)`` once w crosses 0), or the horizon is too long or too short for
        float64 (t = 1e100 without ``log_time``). A trajectory is never returned with nan in it.
    """
    _check_loss_or_gradient(loss, gradient)
    theta0 = check_params(params)
    log_time = as_bool(log_time, "log_time")
    method = as_choice(method, "method", ODE_METHODS)
    rtol = as_positive_float(rtol, "rtol")
    atol = as_positive_float(atol, "atol")
    times = as_array(t_eval, "t_eval", ndim=1, nonempty=True).copy()
    if times[0] < 0 or np.any(np.diff(times) <= 0):
        raise ValueError(f"t_eval must be non-negative and strictly increasing, got {_head(times)}")

    packer = _Packer(theta0)

    def loss_value(theta: Params) -> float:
        if gradient is None:
            return float(_scalar_loss(loss, theta))
        return float(_run_losses(_pair(gradient(theta))[0], None, "gradient(params)[0]")[0])

    streak = [0]  # consecutive evaluations at nan/inf or beyond BLOW_UP

    def negative_gradient(theta: np.ndarray) -> np.ndarray:
        # A rejected trial step may land anywhere once; a flow that blows up keeps landing there.
        if not np.isfinite(theta).all() or np.abs(theta).max(initial=0.0) > BLOW_UP:
            streak[0] += 1
            if streak[0] >= BLOW_UP_STREAK:
                raise NumericalFailure(
                    f"gradient_flow: the flow blows up (the solver's state stayed nan/inf or "
                    f"beyond {BLOW_UP:.0e} for {BLOW_UP_STREAK} evaluations in a row; the loss "
                    "or its gradient is not finite along the way)"
                )
        else:
            streak[0] = 0
        if gradient is None:
            _, grads = _gradients(loss, packer.unpack(theta, requires_grad=True))
        else:
            current = packer.unpack(theta)
            checked = _check_gradients(_pair(gradient(current))[1], current)
            grads = [checked[k] for k in packer.names]
        if len(grads) == 1:
            return -grads[0].reshape(-1).numpy()
        return -torch.cat([g.reshape(-1) for g in grads]).numpy()

    jacobian_options = {}
    if hessian is not None:
        if not callable(hessian):
            raise ValueError(f"hessian must be callable or None, got {type(hessian).__name__}")
        size = sum(packer.sizes)

        def negative_hessian(theta: np.ndarray) -> np.ndarray:
            matrix = hessian(packer.unpack(theta))
            if not isinstance(matrix, torch.Tensor) or tuple(matrix.shape) != (size, size):
                raise ValueError(
                    f"hessian(params) must return a torch tensor of shape ({size}, {size}), got "
                    f"{type(matrix).__name__} of shape {tuple(getattr(matrix, 'shape', ()))}"
                )
            return -matrix.detach().numpy()

        if log_time:
            jacobian_options["jac"] = lambda tau, theta: math.exp(tau) * negative_hessian(theta)
        else:
            jacobian_options["jac"] = lambda t, theta: negative_hessian(theta)
        if method not in ("LSODA", "Radau", "BDF"):
            raise ValueError(f"a hessian is only used by implicit methods, not by {method}")
        negative_hessian(packer.pack(theta0))  # validate once: a solver may never call it

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
    elif log_time and times[-1] > LOG_TIME_LIMIT:
        raise ValueError(
            f"t_eval[-1] = {times[-1]:.3g} is beyond {LOG_TIME_LIMIT:.0e}, the longest horizon "
            "in log time: the solver steps past the end, where e^τ overflows float64"
        )
    elif span[1] < 1e-150:
        raise ValueError(
            f"t_eval[-1] = {times[-1]:.3g} is too short to integrate in float64 (the solver's "
            "first step underflows); record only t = 0, or use a horizon above 1e-150"
        )
    elif method == "LSODA":
        states, info = _lsoda(rhs, packer.pack(theta0), grid, rtol, atol, jacobian_options)
    else:
        sol = solve_ivp(
            rhs,
            span,
            packer.pack(theta0),
            method=method,
            t_eval=grid,
            rtol=rtol,
            atol=atol,
            **jacobian_options,
        )
        if not sol.success:
            raise NumericalFailure(f"gradient_flow: the ODE solver failed ({sol.message})")
        states = sol.y.T
        info = {"nfev": int(sol.nfev), "njev": int(sol.njev), "message": sol.message}

    _check_finite_states(states, times, "gradient_flow: the parameters")
    with torch.no_grad():
        losses = np.array([loss_value(packer.unpack(s)) for s in states])
    _check_finite_states(losses[:, None], times, "gradient_flow: the loss")
    return Trajectory(times=times.copy(), params=packer.history(states), losses=losses, info=info)


def _head(values: np.ndarray) -> str:
    text = np.array2string(values[:6], precision=3)
    return text if values.size <= 6 else text[:-1] + " ...]"


def _check_finite_states(values: np.ndarray, times: np.ndarray, what: str) -> None:
    """Raise :class:`NumericalFailure` at the first recorded time where ``values`` is not finite."""
    finite = np.isfinite(values).all(axis=-1)
    if not finite.all():
        first = int(np.argmin(finite))
        raise NumericalFailure(
            f"{what} turned nan/inf at the recorded time t = {times[first]:.6g} (position "
            f"{first}); the loss or its gradient is not finite there, or the horizon "
            f"{times[-1]:.3g} is beyond what float64 can integrate"
        )


def _lsoda(rhs, theta0: np.ndarray, grid: np.ndarray, rtol: float, atol: float, jacobian_options):
    """LSODA through ``odeint`` on ``grid`` (whose first point may lie after the start, 0)."""
    start = grid[0] > 0.0
    times = np.concatenate([[0.0], grid]) if start else grid
    states, out = odeint(
        rhs,
        theta0,
        times,
        Dfun=jacobian_options.get("jac"),
        tfirst=True,
        rtol=rtol,
        atol=atol,
        mxstep=10**8,
        full_output=True,
    )
    if out["message"] != "Integration successful.":
        raise NumericalFailure(f"gradient_flow: the ODE solver failed ({out['message']})")
    info = {"nfev": int(out["nfe"][-1]), "njev": int(out["nje"][-1]), "message": out["message"]}
    return (states[1:] if start else states), info


def _runs_view(params: Params, runs: int | None) -> Params:
    """Parameters with a leading run axis: added (length 1) when ``runs`` is None, else checked."""
    if runs is None:
        return {k: v.unsqueeze(0) for k, v in params.items()}
    for k, v in params.items():
        if v.ndim == 0 or v.shape[0] != runs:
            raise ValueError(
                f"with runs={runs} every parameter needs a leading axis of length {runs}; "
                f"params[{k!r}] has shape {tuple(v.shape)}"
            )
    return params


def _run_losses(values, runs: int | None, what: str) -> torch.Tensor:
    """The per-run losses as a tensor of shape (R,), or a ValueError naming ``what`` returned."""
    expected = (1,) if runs is None else (runs,)
    if not isinstance(values, torch.Tensor) or (
        values.numel() != expected[0] or (runs is not None and tuple(values.shape) != expected)
    ):
        shape = "a scalar tensor" if runs is None else f"a tensor of shape ({runs},)"
        raise ValueError(f"{what} must return {shape} of losses, got {values!r:.80}")
    _check_loss_dtype(values, what)
    return values.reshape(expected)


def _descent_oracle(loss: Loss | None, gradient: Gradient | None, runs: int | None):
    """A function θ (with run axis) -> (per-run losses (R,), gradients with run axis)."""

    def strip(theta: Params) -> Params:
        return theta if runs is not None else {k: v[0] for k, v in theta.items()}

    if gradient is not None:

        def oracle(theta: Params):
            with torch.no_grad():
                result = gradient(strip(theta))
            values, grads = _pair(result)
            values = _run_losses(values, runs, "gradient(params)[0]")
            grads = _check_gradients(grads, strip(theta))
            if runs is None:
                grads = {k: g.unsqueeze(0) for k, g in grads.items()}
            return values.detach(), [grads[k] for k in theta]

        return oracle

    def oracle(theta: Params):
        leaves = {k: v.detach().requires_grad_(True) for k, v in theta.items()}
        values = _run_losses(loss(strip(leaves)), runs, "loss(params)")
        if not values.requires_grad:
            return values.detach(), [torch.zeros_like(v) for v in leaves.values()]
        grads = torch.autograd.grad(values.sum(), list(leaves.values()), allow_unused=True)
        grads = [
            torch.zeros_like(p) if g is None else g
            for p, g in zip(leaves.values(), grads, strict=True)
        ]
        return values.detach(), grads

    return oracle


# --- gradient descent: one small step function per optimizer, around a common driver ------------


@dataclass(frozen=True)
class _StepRule:
    """The constants of the three update rules (see :func:`gradient_descent`)."""

    groups: list[tuple[int, int]]  # column ranges of the parameter tensors in the flat (R, P) state
    beta: float
    softening: float
    b1: float
    b2: float
    adam_eps: float
    keras: bool


@dataclass
class _Memory:
    """What an optimizer carries from one step to the next, per run."""

    avg_norm: torch.Tensor  # (R,): the adaptive step's exponential average of gradient norms
    first: torch.Tensor  # (R, P): Adam's first moment
    second: torch.Tensor  # (R, P): Adam's second moment

    @classmethod
    def zeros(cls, flat: torch.Tensor) -> _Memory:
        average = torch.zeros(flat.shape[0], dtype=torch.float64)
        return cls(average, torch.zeros_like(flat), torch.zeros_like(flat))


def _gd_step(k, g, lrs, memory: _Memory, rule: _StepRule):
    """u_k = ∇ℓ(θ_k), η_k = lr: Euler's method on the gradient flow."""
    return lrs, g


def _adaptive_step(k, g, lrs, memory: _Memory, rule: _StepRule):
    """η_k = lr / (√(m_k / (1 − β^{k+1})) + softening), m_k = β m_{k−1} + (1 − β) Σ_p ‖∇_p ℓ‖."""
    norm_sum = sum(torch.linalg.vector_norm(g[:, lo:hi], dim=-1) for lo, hi in rule.groups)
    memory.avg_norm = rule.beta * memory.avg_norm + (1 - rule.beta) * norm_sum
    eta = lrs / (torch.sqrt(memory.avg_norm / (1 - rule.beta ** (k + 1))) + rule.softening)
    return eta, g


def _adam_step(k, g, lrs, memory: _Memory, rule: _StepRule):
    """u_k = m̂_k / (√v̂_k + ε_k), with ε_k = ε (PyTorch) or ε / √(1 − β₂^{k+1}) (Keras)."""
    memory.first.mul_(rule.b1).add_(g, alpha=1 - rule.b1)
    memory.second.mul_(rule.b2).addcmul_(g, g, value=1 - rule.b2)
    m_hat = memory.first / (1 - rule.b1 ** (k + 1))
    v_hat = memory.second / (1 - rule.b2 ** (k + 1))
    eps_k = rule.adam_eps
    if rule.keras:
        eps_k = rule.adam_eps / math.sqrt(1 - rule.b2 ** (k + 1))
    return lrs, m_hat / (v_hat.sqrt() + eps_k)


_STEPS = {"gd": _gd_step, "adaptive": _adaptive_step, "adam": _adam_step}


class _Stopping:
    """Per-run stopping rule: a non-finite loss or gradient, or ℓ ≤ ε then ``extra`` more steps."""

    def __init__(self, runs: int, steps: int, stop_loss: float | None, extra: int):
        self.steps, self.stop_loss, self.extra = steps, stop_loss, extra
        self.converged = np.full(runs, -1, dtype=np.int64)
        self.diverged = np.zeros(runs, dtype=bool)
        self.last = np.full(runs, steps, dtype=np.int64)

    def update(self, k: int, values: torch.Tensor, g: torch.Tensor) -> np.ndarray:
        """Take iterate k's losses and gradients into account; the runs still active."""
        finite = (torch.isfinite(values) & torch.isfinite(g).all(-1)).numpy()
        newly = ~finite & ~self.diverged & (k < self.last)
        if newly.any():
            self.diverged |= newly
            self.last[newly] = k
        if self.stop_loss is not None:
            hit = (values <= self.stop_loss).numpy() & (self.converged < 0) & ~self.diverged
            if hit.any():
                self.converged[hit] = k
                self.last[hit] = np.minimum(self.steps, k + self.extra)
        return k < self.last


class _Recorder:
    """The recorded iterates of a descent, and the Trajectory they make."""

    def __init__(self):
        self.times: list[int] = []
        self.states: list[np.ndarray] = []
        self.losses: list[np.ndarray] = []
        self.steps: list[np.ndarray] = []

    def add(self, k: int, flat: torch.Tensor, values: torch.Tensor, eta: np.ndarray) -> None:
        self.times.append(k)
        self.states.append(flat.numpy().copy())
        self.losses.append(values.numpy().copy())
        self.steps.append(eta.copy())

    def trajectory(self, names, shapes, bounds, stopping: _Stopping, optimizer: str, *, single):
        states = np.stack(self.states)  # (T, R, P)
        runs = states.shape[1]
        history = {
            k: states[:, :, bounds[i] : bounds[i + 1]].reshape((len(states), runs, *shapes[i]))
            for i, k in enumerate(names)
        }
        losses, step_sizes = np.stack(self.losses), np.stack(self.steps)
        steps_run = [int(s) for s in stopping.last]
        conv = [int(c) if c >= 0 else None for c in stopping.converged]
        div = [bool(x) for x in stopping.diverged]
        if single:
            history = {n: h[:, 0] for n, h in history.items()}
            losses, step_sizes = losses[:, 0], step_sizes[:, 0]
            steps_run, conv, div = steps_run[0], conv[0], div[0]
        info = {
            "converged_step": conv,
            "steps_run": steps_run,
            "diverged": div,
            "optimizer": optimizer,
        }
        return Trajectory(
            times=np.array(self.times, dtype=np.int64),
            params=history,
            losses=losses,
            step_sizes=step_sizes,
            info=info,
        )


def gradient_descent(
    loss: Loss | None,
    params: Mapping[str, torch.Tensor],
    lr: float | Sequence[float],
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
    adam_form: str = "torch",
    runs: int | None = None,
    gradient: Gradient | None = None,
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
        Adam (Kingma & Ba 2015) with ``adam_betas`` = (β₁, β₂) and ``adam_eps`` = ε:
        u_k = m̂_k / (√v̂_k + ε_k) with the bias-corrected moments m̂_k, v̂_k. In PyTorch's form
        (``adam_form="torch"``) ε_k = ε. In Keras/TensorFlow's form (``"keras"``, the
        "ε-hat" variant of Kingma & Ba's §2, which the poisoning paper's code ran, with ε = 1e-7)
        ε is added to the *uncorrected* √v_k, i.e. ε_k = ε / √(1 − β₂^{k+1}). The two differ
        only where gradients are as small as ε, which is exactly the near-zero plateau of
        greedy learning.

    Stopping rule
    -------------
    With ``stop_loss = ε``: run until ℓ(θ_k) ≤ ε, then ``extra_steps`` more iterations (the papers'
    "until the loss is below ε, then N more steps"), never beyond ``steps`` in total. A non-finite
    loss stops the run and sets ``info["diverged"] = True``.

    Independent runs
    ----------------
    With ``runs = R`` every parameter carries a leading axis of length R that indexes R independent
    runs (seeds, settings), and the loss returns the R per-run losses, shape ``(R,)``. Each run gets
    its own adaptive step, its own stopping time and its own divergence flag, exactly as if it ran
    alone, but all R advance in one vectorized step. A finished run stays frozen. ``lr`` may then
    be a list of R learning rates.

    Closed-form gradients
    ---------------------
    ``gradient(params) -> (loss, {name: ∂loss/∂name})`` replaces autograd (pass ``loss=None``); with
    ``runs`` the loss has shape ``(R,)`` and each gradient that of its parameter.

    Returns
    -------
    Trajectory recorded at iteration 0, every ``record_every`` iterations, and at the last iterate;
    ``times`` are iteration indices; ``info["converged_step"]`` is the first iteration with
    ℓ ≤ ε (or ``None``); ``info["steps_run"]`` the number of updates made. With ``runs`` the losses
    and step sizes have shape ``(T, R)``, parameters ``(T, R, ...)``, and the three ``info`` entries
    are lists with one value per run.
    """
    _check_loss_or_gradient(loss, gradient)
    theta = check_params(params)
    optimizer = as_choice(optimizer, "optimizer", OPTIMIZERS)
    per_record = sum(v.numel() for v in theta.values()) + 2  # parameters, loss and step size
    steps, record_every = as_steps(steps, record_every, per_record=per_record)
    extra_steps = as_int(extra_steps, "extra_steps", minimum=0, maximum=MAX_STEPS)
    if runs is not None:
        runs = as_size(runs, "runs")
    if isinstance(lr, (list, tuple, np.ndarray)):
        if runs is None or len(lr) != runs:
            raise ValueError(
                f"a list of learning rates needs runs = its length; got {len(lr)} rates and "
                f"runs = {runs}"
            )
        lrs = torch.tensor(
            [as_positive_float(v, f"lr[{i}]") for i, v in enumerate(lr)], dtype=torch.float64
        )
    else:
        lrs = torch.full((runs or 1,), as_positive_float(lr, "lr"), dtype=torch.float64)
    if stop_loss is not None:
        stop_loss = as_positive_float(stop_loss, "stop_loss", allow_zero=True)
    beta = as_float(beta, "beta", minimum=0.0, maximum=1.0, open_maximum=True)
    softening = as_positive_float(softening, "softening", allow_zero=True)
    if not isinstance(adam_betas, (tuple, list)) or len(adam_betas) != 2:
        raise ValueError(f"adam_betas must be a pair (beta1, beta2), got {adam_betas!r:.60}")
    b1 = as_float(adam_betas[0], "adam_betas[0]", minimum=0.0, maximum=1.0, open_maximum=True)
    b2 = as_float(adam_betas[1], "adam_betas[1]", minimum=0.0, maximum=1.0, open_maximum=True)
    adam_eps = as_positive_float(adam_eps, "adam_eps")
    adam_form = as_choice(adam_form, "adam_form", ADAM_FORMS)

    theta = _runs_view(theta, runs)
    n_runs = runs or 1
    oracle = _descent_oracle(loss, gradient, runs)
    # All parameters live in one (R, P) tensor: the optimizer's arithmetic is then a handful of
    # tensor operations per step whatever the number of parameter tensors (these runs take 1e5
    # steps on models with 30 parameters, so per-operation overhead is what costs time).
    names = list(theta)
    shapes = [tuple(theta[k].shape[1:]) for k in names]
    bounds = np.cumsum([0] + [math.prod(s) for s in shapes])
    flat = torch.cat([theta[k].reshape(n_runs, -1) for k in names], dim=1)

    def unflatten(vector: torch.Tensor) -> Params:
        return {
            k: vector[:, bounds[i] : bounds[i + 1]].reshape((n_runs, *shapes[i]))
            for i, k in enumerate(names)
        }

    step = _STEPS[optimizer]
    rule = _StepRule(
        groups=[(int(bounds[i]), int(bounds[i + 1])) for i in range(len(names))],
        beta=beta,
        softening=softening,
        b1=b1,
        b2=b2,
        adam_eps=adam_eps,
        keras=adam_form == "keras",
    )
    memory = _Memory.zeros(flat)
    stopping = _Stopping(n_runs, steps, stop_loss, extra_steps)
    recorder = _Recorder()
    k = 0
    while True:
        values, grads = oracle(unflatten(flat))
        g = torch.cat([gr.reshape(n_runs, -1) for gr in grads], dim=1)
        active = stopping.update(k, values, g)
        if not active.any():
            recorder.add(k, flat, values, np.full(n_runs, np.nan))
            break
        eta, update = step(k, g, lrs, memory, rule)
        if k % record_every == 0:
            recorder.add(k, flat, values, np.where(active, eta.numpy(), np.nan))
        if active.all():
            flat = flat - eta.unsqueeze(-1) * update
        else:  # a finished run stays frozen: its state is copied, not updated
            mask = torch.from_numpy(active).unsqueeze(-1)
            flat = torch.where(
                mask, flat - torch.where(mask, eta.unsqueeze(-1), 0.0) * update, flat
            )
        k += 1
    return recorder.trajectory(names, shapes, bounds, stopping, optimizer, single=runs is None)
