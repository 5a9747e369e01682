"""Many small GRUs trained at once: the non-linear experiment of Cohen-Karlik et al. (2023), §5.3.

A GRU of width H reads scalar inputs x_0, x_1, … and runs PyTorch's equations

    r_t = σ(W_ir x_t + b_ir + W_hr h_{t−1} + b_hr),
    z_t = σ(W_iz x_t + b_iz + W_hz h_{t−1} + b_hz),
    n_t = tanh(W_in x_t + b_in + r_t ⊙ (W_hn h_{t−1} + b_hn)),
    h_t = (1 − z_t) ⊙ n_t + z_t ⊙ h_{t−1},

from h_{−1} = 0, with the scalar output y_t = v·h_t (a linear readout without bias); steps
count from 0, so y_t has read the t + 1 inputs x_0, …, x_t. The paper's §5.3 and App. C.2.3
build a teacher GRU from a tiny initialization (scale 10⁻⁶) trained for 1000 Adam steps to mimic
a chosen impulse response, and train wider student GRUs from "standard near-zero initialization"
(here PyTorch's default, entries uniform in ±1/√H, or any scale) by Adam on an empirical loss
over sequences of length k_g, in batches of 100 with early stopping. The paper's error is "the
ℓ∞ distance between the response of the learned student and that of the teacher, averaged across
randomly generated input sequences", which fixes no order of the maximum and the mean; the order
here is the book's choice: the largest (over steps beyond k_g) mean (over random input sequences)
absolute gap between student and teacher outputs.

Here R GRUs (R teachers, or R students, one per seed) are one :class:`GRUBatch`: every weight has
a leading run axis and one batched matrix product advances all of them, so a sweep over seeds costs
little more than one run where the product is small. Runs never interact: the training loss is the
sum of the runs' own losses, and Adam is coordinate-wise. The paper does not say which outputs
enter the students' loss; :func:`train_gru_students` uses the last one by default (as in the linear
loss of its eq. 3.3) or every output of the window (its App. D, eq. D.1, ``loss="all"``), on a
fixed set of Gaussian training sequences, and stops each run early on held-out ones.
:func:`gru_window_only_errors` gives the error of the predictor that reproduces a teacher on the
last k inputs and forgets everything older, a bar that, unlike the zero solution, a student must
beat to show memory beyond its training window. Tensors are
float32 by default (PyTorch's default, which the paper used); ``dtype="float64"`` is available for
tests.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from lib.engine.validation import (
    NumericalFailure,
    as_choice,
    as_device,
    as_float,
    as_int,
    as_positive_float,
    as_seeds,
    as_tensor,
    describe,
)

DTYPES = {"float32": torch.float32, "float64": torch.float64}

__all__ = [
    "GRUBatch",
    "gru_init",
    "gru_tail_errors",
    "gru_window_only_errors",
    "select",
    "train_gru_students",
    "train_gru_teachers",
]


@dataclass
class GRUBatch:
    """R independent scalar-in, scalar-out GRUs of width H (module docstring).

    ``w_in`` (R, 3H): input weights (W_ir, W_iz, W_in stacked; input size 1); ``w_h`` (R, H, 3H):
    the transposes of PyTorch's ``weight_hh`` (so that h @ w_h gives the three recurrent terms);
    ``b_in``, ``b_h`` (R, 3H): PyTorch's ``bias_ih`` and ``bias_hh``; ``readout`` (R, H).
    """

    w_in: torch.Tensor
    w_h: torch.Tensor
    b_in: torch.Tensor
    b_h: torch.Tensor
    readout: torch.Tensor

    @property
    def runs(self) -> int:
        return self.w_h.shape[0]

    @property
    def width(self) -> int:
        return self.w_h.shape[1]

    def tensors(self) -> list[torch.Tensor]:
        return [self.w_in, self.w_h, self.b_in, self.b_h, self.readout]

    def detached(self) -> GRUBatch:
        """A copy that does not require gradients."""
        return GRUBatch(*[t.detach().clone() for t in self.tensors()])

    def outputs(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs y_t = v·h_t of every run on its own inputs: x of shape (R, N, T) -> (R, N, T).

        ``x`` must be a finite tensor of the GRUs' dtype and device, with T ≥ 1.
        """
        return (self.states(x) * self.readout[:, None, None, :]).sum(-1)

    def states(self, x: torch.Tensor) -> torch.Tensor:
        """States h_t (module docstring) of every run on its own inputs: x of shape (R, N, T) ->
        (R, N, T, H), with the same requirements on ``x`` as :meth:`outputs`."""
        dtype = self.w_h.dtype
        if not isinstance(x, torch.Tensor) or x.dtype != dtype or x.device != self.w_h.device:
            raise ValueError(f"x must be a {dtype} tensor on {self.w_h.device}, got "
                             f"{describe(x)}")
        if x.ndim != 3 or x.shape[0] != self.runs or x.shape[2] == 0:
            raise ValueError(f"x must have shape (R = {self.runs}, N, T ≥ 1), got "
                             f"{tuple(x.shape)}")
        if not bool(torch.isfinite(x).all()):
            raise ValueError("x must be finite, got nan or inf entries")
        width = self.width
        h = x.new_zeros(x.shape[0], x.shape[1], width)
        # input terms of every step at once, (R, N, T, 3H), split into the gates' and the
        # candidate's parts and unbound along time: views whose gradients are stacked once in
        # the backward pass (slicing one step at a time would allocate the whole tensor per step)
        drive = x.unsqueeze(-1) * self.w_in[:, None, None, :] + self.b_in[:, None, None, :]
        gates_in, candidate_in = (part.unbind(2) for part in drive.split([2 * width, width], -1))
        states = []
        for t in range(x.shape[2]):
            recurrent = torch.baddbmm(self.b_h.unsqueeze(1), h, self.w_h)
            gates_h, candidate_h = recurrent.split([2 * width, width], -1)
            reset, update = torch.sigmoid(gates_in[t] + gates_h).chunk(2, dim=-1)
            candidate = torch.tanh(candidate_in[t] + reset * candidate_h)
            h = candidate + update * (h - candidate)
            states.append(h)
        return torch.stack(states, 2)


def _dtype(dtype: str) -> torch.dtype:
    return DTYPES[as_choice(dtype, "dtype", tuple(DTYPES))]


def gru_init(width: int, seeds, *, scale: float | None = None, dtype: str = "float32",
             device: str = "cpu") -> GRUBatch:
    """One GRU per seed, every weight i.i.d. uniform in [−s, s] with s = ``scale``, by default
    PyTorch's 1/√H; run r draws from ``torch.Generator().manual_seed(seeds[r])`` in the order
    w_in, w_h, b_in, b_h, readout."""
    width = as_int(width, "width", minimum=1, maximum=4096)
    seeds = as_seeds(seeds)
    kind = _dtype(dtype)
    device = as_device(device)
    # a scale beyond the dtype's largest number draws ±inf weights
    bound = 1 / math.sqrt(width) if scale is None else as_float(
        scale, "scale", minimum=0.0, open_minimum=True, maximum=torch.finfo(kind).max)
    shapes = [(3 * width,), (width, 3 * width), (3 * width,), (3 * width,), (width,)]
    draws = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        draws.append([(torch.rand(s, generator=generator, dtype=torch.float64) * 2 - 1) * bound
                      for s in shapes])
    return GRUBatch(*[torch.stack([d[i] for d in draws]).to(device=device, dtype=kind)
                      for i in range(len(shapes))])


def _adam(net: GRUBatch, lr: float) -> torch.optim.Adam:
    for tensor in net.tensors():
        tensor.requires_grad_(True)
    return torch.optim.Adam(net.tensors(), lr=lr)


def train_gru_teachers(width: int, target, seeds, *, init_scale: float = 1e-6, steps: int = 1000,
                       lr: float = 1e-3, dtype: str = "float32", device: str = "cpu",
                       fit: str = "impulse", n_fit: int = 100, fit_seed: int = 7) -> GRUBatch:
    """Teachers as in App. C.2.3: from :func:`gru_init` at scale ``init_scale``, ``steps`` Adam
    steps towards the impulse response h = ``target`` (length T). ``fit="impulse"`` (default):
    the loss is Σ_t (y_t(impulse) − h_t)², the impulse being (1, 0, 0, …) of length T.
    ``fit="filter"``: the loss is the mean over ``n_fit`` fixed standard Gaussian sequences x of
    length T (from ``fit_seed``, shared by all runs) and over t < T of (y_t(x) − Σ_{j≤t} h_j
    x_{t−j})², i.e. the teacher learns the linear filter with impulse response h on the paper's
    inputs (App. C: Gaussian, zero mean, scale 1), not on the impulse alone. One teacher per
    seed; returned frozen (no gradients)."""
    target = as_tensor(target, "target", ndim=1, nonempty=True)
    steps = as_int(steps, "steps", minimum=1, maximum=10**7)
    fit = as_choice(fit, "fit", ("impulse", "filter"))
    n_fit = as_int(n_fit, "n_fit", minimum=1, maximum=10**6)
    # the optimizer holds lr in the weights' dtype: beyond its largest number, torch's
    # RuntimeError ("cannot be converted ... without overflow") at the first step
    lr = as_float(lr, "lr", minimum=0.0, open_minimum=True, maximum=torch.finfo(_dtype(dtype)).max)
    net = gru_init(width, seeds, scale=init_scale, dtype=dtype, device=device)
    device = net.w_h.device
    goal = target.to(device=device, dtype=net.w_h.dtype)
    length = goal.shape[0]
    if fit == "impulse":
        inputs = torch.zeros(net.runs, 1, length, dtype=goal.dtype, device=device)
        inputs[:, 0, 0] = 1.0
        labels = goal.expand(net.runs, 1, length)
    else:
        generator = torch.Generator().manual_seed(as_seeds([fit_seed])[0])
        x = torch.randn(n_fit, length, generator=generator, dtype=torch.float64)
        h = target.detach().to("cpu", torch.float64)
        # (h * x)_t = Σ_{j ≤ t} h_j x_{t−j}, one step at a time (T is small)
        y = torch.stack([x[:, : t + 1].flip(-1) @ h[: t + 1] for t in range(length)], 1)
        inputs = x.to(device=device, dtype=goal.dtype).expand(net.runs, n_fit, length)
        labels = y.to(device=device, dtype=goal.dtype).expand(net.runs, n_fit, length)
    optimizer = _adam(net, lr)
    for _ in range(steps):
        optimizer.zero_grad()
        squares = (net.outputs(inputs) - labels) ** 2
        loss = squares.sum() if fit == "impulse" else squares.mean((1, 2)).sum()
        loss.backward()
        optimizer.step()
    teachers = net.detached()
    if not all(bool(torch.isfinite(p).all()) for p in teachers.tensors()):
        raise NumericalFailure(
            f"the teachers' training diverged (parameters not finite) at lr = {lr:g}"
        )
    return teachers


@dataclass(frozen=True)
class StudentInfo:
    """Per run: Adam steps taken, step of the returned (best held-out) iterate, and its
    held-out loss; and whether the time limit stopped the runs still going."""

    steps: np.ndarray
    best_steps: np.ndarray
    held_out: np.ndarray
    timed_out: bool = False


def _sequences(runs: int, count: int, length: int, seeds, dtype, device) -> torch.Tensor:
    """Gaussian inputs (R, count, length); run r from ``torch.Generator().manual_seed(seeds[r])``.
    """
    return torch.stack([
        torch.randn(count, length, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
        for s in seeds[:runs]]).to(device=device, dtype=dtype)


def _check_runs(teachers, ks, seeds) -> tuple[list[int], list[int]]:
    """Per-run training lengths and seeds, one of each per teacher."""
    if not isinstance(teachers, GRUBatch):
        raise ValueError(f"teachers must be a GRUBatch, got {type(teachers).__name__}")
    if isinstance(ks, (int, np.integer)) and not isinstance(ks, bool):
        ks = [ks] * teachers.runs
    if not isinstance(ks, (list, tuple, range, np.ndarray)) or len(ks) != teachers.runs:
        raise ValueError(f"ks must be one training length per teacher ({teachers.runs}), got "
                         f"{ks!r:.60}")
    ks = [as_int(k, f"ks[{i}]", minimum=1, maximum=10_000) for i, k in enumerate(ks)]
    seeds = as_seeds(seeds)
    if len(seeds) != teachers.runs:
        raise ValueError(f"one seed per teacher: {teachers.runs} teachers, {len(seeds)} seeds")
    return ks, seeds


def train_gru_students(teachers: GRUBatch, ks, *, width: int, seeds, n_train: int = 10_000,
                       n_val: int = 1000, batch: int = 100, lr: float = 1e-3,
                       max_steps: int = 50_000, check_every: int = 500,
                       patience: int = 5000, time_limit: float | None = None,
                       length: int | None = None, init_scale: float | None = None,
                       loss: str = "last") -> tuple[GRUBatch, StudentInfo]:
    """Student r (width ``width``, seed ``seeds[r]``) learns teacher r from its output at step
    ``ks[r]`` (an int: the same for all) on ``n_train`` Gaussian sequences: Adam (``lr``) on the
    mean square error of batches of ``batch`` sequences (epochs of a random permutation).
    The students start from :func:`gru_init` at ``init_scale`` (default PyTorch's 1/√H).
    ``loss="last"`` (default): the loss of run r is mean_x (y_{k−1} − y*_{k−1})², the output at
    step k = ks[r] only (0-based index k − 1, as in the linear loss of the paper's eq. 3.3);
    ``loss="all"``: mean_x (1/k) Σ_{t<k} (y_t − y*_t)², every output of the training window.
    All runs read sequences of ``length`` steps (default max(ks)); the
    output at step k depends on the first k inputs only, so run r trains on sequences of length
    ks[r]. (A run's sequences depend on its seed and on ``length``: to repeat a run of a batch
    alone, pass the batch's length.) Every
    ``check_every`` steps each run's loss on ``n_val`` held-out sequences is compared with its
    best; a run stops after ``patience`` steps without a new best, and its best iterate is
    returned. The training sequences of run r come from seed 10⁶ + seeds[r], the held-out ones
    from 2·10⁶ + seeds[r], the batch order from 3·10⁶ + seeds[r]. With ``time_limit`` (seconds
    of wall time), every run still going stops at the first check after it (``info.timed_out``).
    """
    ks, seeds = _check_runs(teachers, ks, seeds)
    limit = math.inf if time_limit is None else as_positive_float(time_limit, "time_limit")
    started = time.perf_counter()
    timed_out = False
    n_train = as_int(n_train, "n_train", minimum=1, maximum=10**6)
    n_val = as_int(n_val, "n_val", minimum=1, maximum=10**6)
    batch = as_int(batch, "batch", minimum=1, maximum=n_train)
    max_steps = as_int(max_steps, "max_steps", minimum=1, maximum=10**8)
    check_every = as_int(check_every, "check_every", minimum=1, maximum=10**8)
    patience = as_int(patience, "patience", minimum=1, maximum=10**8)
    dtype, device = teachers.w_h.dtype, teachers.w_h.device
    lr = as_float(lr, "lr", minimum=0.0, open_minimum=True, maximum=torch.finfo(dtype).max)
    dtype_name = next(n for n, t in DTYPES.items() if t == dtype)
    loss = as_choice(loss, "loss", ("last", "all"))
    if init_scale is not None:
        init_scale = as_float(init_scale, "init_scale", minimum=0.0, open_minimum=True,
                              maximum=torch.finfo(dtype).max)
    runs = teachers.runs
    length = max(ks) if length is None else as_int(length, "length", minimum=max(ks),
                                                   maximum=100_000)
    index = torch.arange(runs, device=device)[:, None]
    last = torch.tensor(ks, device=device)[:, None] - 1  # the output each run learns

    # loss="all": the outputs t < ks[r] of run r, each weighted 1 / ks[r]
    window = (torch.arange(length, device=device)[None, :] <= last).to(dtype) / (last + 1)

    def at_k(outputs: torch.Tensor) -> torch.Tensor:  # (R, N, T) -> (R, N)
        return outputs.gather(2, last[:, :, None].expand(-1, outputs.shape[1], 1))[..., 0]

    def squared(outputs: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:  # -> (R, N)
        if loss == "last":
            return (at_k(outputs) - goal) ** 2
        return ((outputs - goal) ** 2 * window[:, None, :]).sum(2)

    def targets(outputs: torch.Tensor) -> torch.Tensor:
        return at_k(outputs) if loss == "last" else outputs

    train = _sequences(runs, n_train, length, [10**6 + s for s in seeds], dtype, device)
    held = _sequences(runs, n_val, length, [2 * 10**6 + s for s in seeds], dtype, device)
    with torch.no_grad():
        labels, held_labels = targets(teachers.outputs(train)), targets(teachers.outputs(held))
    student = gru_init(width, seeds, scale=init_scale, dtype=dtype_name, device=device)
    best = student.detached()
    optimizer = _adam(student, lr)
    generators = [torch.Generator().manual_seed(3 * 10**6 + s) for s in seeds]
    orders = [torch.randperm(n_train, generator=g) for g in generators]
    position = 0
    best_loss = torch.full((runs,), math.inf, dtype=torch.float64)
    best_step = np.zeros(runs, dtype=np.int64)
    stopped = np.full(runs, -1, dtype=np.int64)
    for step in range(max_steps + 1):
        if step % check_every == 0:
            with torch.no_grad():
                held_loss = squared(student.outputs(held), held_labels).mean(1).double().cpu()
            improved = (held_loss < best_loss).numpy() & (stopped < 0)
            for run in np.flatnonzero(improved):
                for mine, kept in zip(student.tensors(), best.tensors(), strict=True):
                    kept[run] = mine.detach()[run]
                best_loss[run] = held_loss[run]
                best_step[run] = step
            late = (step - best_step >= patience) & (stopped < 0)
            stopped[late] = step
            timed_out = time.perf_counter() - started > limit and (stopped < 0).any()
            if (stopped >= 0).all() or step == max_steps or timed_out:
                break
        if position + batch > n_train:
            orders = [torch.randperm(n_train, generator=g) for g in generators]
            position = 0
        rows = torch.stack([o[position : position + batch] for o in orders]).to(device)
        position += batch
        optimizer.zero_grad()
        squared(student.outputs(train[index, rows]), labels[index, rows]).mean(1).sum().backward()
        optimizer.step()
    stopped[stopped < 0] = step
    return best, StudentInfo(stopped, best_step, best_loss.numpy(), timed_out)


def gru_tail_errors(students: GRUBatch, teachers: GRUBatch, ks, *, length: int,
                    n: int = 1000, seed: int = 12345) -> tuple[np.ndarray, np.ndarray]:
    """Per run r: the GRU error in the book's order of operations (the paper's words, "the ℓ∞
    distance ... averaged across randomly generated input sequences", fix no order),
    max_{ks[r] ≤ t < length} mean_x |y_t(student) − y_t(teacher)| over ``n`` Gaussian sequences
    (one set, ``seed``), and the zero solution's
    max_{ks[r] ≤ t < length} mean_x |y_t(teacher)| (0-based t: output t has read t + 1 inputs)."""
    if not isinstance(students, GRUBatch):
        raise ValueError(f"students must be a GRUBatch, got {type(students).__name__}")
    if students.runs != getattr(teachers, "runs", students.runs):
        raise ValueError(f"one student per teacher: {students.runs} and {teachers.runs} runs")
    ks, _ = _check_runs(teachers, ks, [0] * students.runs)
    length = as_int(length, "length", minimum=max(ks) + 1, maximum=100_000)
    n = as_int(n, "n", minimum=1, maximum=10**6)
    generator = torch.Generator().manual_seed(as_seeds([seed])[0])
    x = torch.randn(n, length, generator=generator, dtype=torch.float64)
    x = x.to(device=teachers.w_h.device, dtype=teachers.w_h.dtype).expand(teachers.runs, n, length)
    with torch.no_grad():
        y_teacher = teachers.outputs(x).double()
        y_student = students.outputs(x).double()
    gaps = (y_student - y_teacher).abs().mean(1)
    sizes = y_teacher.abs().mean(1)
    gap = [gaps[r, k:].max().item() for r, k in enumerate(ks)]
    zero = [sizes[r, k:].max().item() for r, k in enumerate(ks)]
    return np.array(gap), np.array(zero)


def select(net: GRUBatch, runs) -> GRUBatch:
    """The GRUs ``runs`` (indices, repeats allowed) of ``net`` as a new batch (copies)."""
    if not isinstance(net, GRUBatch):
        raise ValueError(f"net must be a GRUBatch, got {type(net).__name__}")
    index = [as_int(r, f"runs[{i}]", minimum=0, maximum=net.runs - 1)
             for i, r in enumerate(runs)] if isinstance(runs, (list, tuple, range)) else None
    if not index:
        raise ValueError(f"runs must be a non-empty list of run indices, got {runs!r:.60}")
    chosen = torch.tensor(index, device=net.w_h.device)
    return GRUBatch(*[t.detach()[chosen].clone() for t in net.tensors()])


def gru_window_only_errors(teachers: GRUBatch, ks, *, length: int, n: int = 1000,
                           seed: int = 12345, chunk: int = 12) -> np.ndarray:
    """Per run r: the error of the predictor that fits the training window and forgets, in the
    order of :func:`gru_tail_errors`: max_{k ≤ t < length} mean_x |y_t − y^(k)_t| with k = ks[r],
    y_t teacher r's output and y^(k)_t its output on the last k inputs x_{t−k+1}, …, x_t alone
    (state zero before them), on the same ``n`` Gaussian sequences (``seed``). y^(k) equals the
    teacher on every training sequence of length k (output k − 1 has read k inputs) and carries
    nothing older than k steps; for a linear teacher with impulse response h its error is
    √(2/π)·(Σ_{k ≤ j < length} h_j²)^½."""
    if not isinstance(teachers, GRUBatch):
        raise ValueError(f"teachers must be a GRUBatch, got {type(teachers).__name__}")
    ks, _ = _check_runs(teachers, ks, [0] * teachers.runs)
    length = as_int(length, "length", minimum=max(ks) + 1, maximum=100_000)
    n = as_int(n, "n", minimum=1, maximum=10**6)
    chunk = as_int(chunk, "chunk", minimum=1, maximum=100_000)
    generator = torch.Generator().manual_seed(as_seeds([seed])[0])
    x = torch.randn(n, length, generator=generator, dtype=torch.float64)
    x = x.to(device=teachers.w_h.device, dtype=teachers.w_h.dtype).expand(teachers.runs, n, length)
    out = np.zeros(teachers.runs)
    with torch.no_grad():
        y = teachers.outputs(x).double()
        for k in sorted(set(ks)):
            runs = [r for r, kr in enumerate(ks) if kr == k]
            sub, xs, ys = select(teachers, runs), x[runs], y[runs]
            gaps = []
            for start in range(k, length, chunk):
                steps = list(range(start, min(length, start + chunk)))
                windows = torch.cat([xs[:, :, t - k + 1:t + 1] for t in steps], 1)
                y_k = sub.outputs(windows)[:, :, -1].double().reshape(len(runs), len(steps), n)
                gaps.append((y_k - ys[:, :, steps].transpose(1, 2)).abs().mean(2))
            out[runs] = torch.cat(gaps, 1).max(1).values.cpu().numpy()
    return out
