"""A small S4D sequence classifier, trained in many independent runs at once.

The victim of the real-data poisoning experiment of Slutzky et al. 2025 (Table 2, App. H.2.4) is the
"minimal S4D" network of Gu et al. 2022 ("On the parameterization and initialization of diagonal
state space models"): an encoder, a stack of residual diagonal-SSM layers, mean pooling over the
sequence and a linear decoder. This module is a CPU-sized version of it for 8×8 digits read as
sequences of 64 pixels, and the paper's own size (4 layers, 128 channels, state 64, three input
channels: :data:`CIFAR10_VICTIM`) for CIFAR-10 images read as sequences of 1024 steps.

**Input channels.** A sequence of L steps with C values per step is passed *flat*, as a vector of
L·C numbers in which step p holds entries C·p, …, C·p + C − 1 (the memory layout of an (L, C)
array). For C = 1 that is the sequence itself. The flat form lets images in any reading order go
through the same code, :mod:`lib.poisoning.gradient_matching` included:
:func:`lib.book.data.cifar10` arranges the pixels so that this layout is the reading the caller
asks for.

**One S4D layer.** Each of the H channels carries its own diagonal SSM with N/2 complex-conjugate
pairs of state entries (state size N per channel). With A_j = −exp(log_a_re_j) + i·Im A_j (S4D-Lin
initialization: Re A_j = −½, Im A_j = π j, j = 0, …, N/2 − 1), a learned step size
Δ = exp(log Δ) and a complex output vector C (B is fixed to ones and folded into C, as in S4D),
zero-order-hold discretization gives the convolution kernel in closed form (Gu et al. 2022:
zero-order hold, a Vandermonde product)

    K_m = 2 · Re Σ_j C_j · b̄_j · ā_j^m,   ā_j = exp(Δ A_j),   b̄_j = (exp(Δ A_j) − 1) / A_j,

for m = 0, …, L − 1, and the layer's SSM output is the causal convolution
v_l = Σ_{p≤l} K_{l−p} u_p + D u_l with a skip term D. Unlike the SSMs of the theory, whose input
entries are parameters of their own, the discretized input entries b̄_j depend on A_j and Δ: even
K_0, the weight of the current input, moves with A. The convolution is one batched matrix product
with the Toeplitz matrix of K (O(L²) per channel; for L = 64 faster on this CPU than an FFT), and
past a crossover length :data:`FFT_MIN_LENGTH` a product of FFTs of length 2L (O(L log L)):
y = irfft(rfft(K) · rfft(u))[:L] with both zero-padded to 2L, which is the same causal
convolution without wrap-around. Never a loop over time. The block is post-norm by default, as
in the minimal S4 of the authors' current code: u ← LayerNorm(u + W·GELU(v) + b), v = K ∗ u; with
``prenorm`` it is u ← u + W·GELU(v) + b, v = K ∗ LayerNorm(u), as in the version of their code that
produced Table 2 (it passes ``prenorm='store_true'``, a true value).

**Independent runs.** Every parameter has a leading axis of length R that indexes R independent
networks (seeds, or victims trained on different poisoned data sets). Their losses are summed, so
autograd gives each run its own gradient, and AdamW is elementwise, so R runs train exactly as if
each ran alone, in one vectorized loop.

**Precision.** The victim computes in float32 (the book's default is float64). Nothing in this
experiment rests on a near-tie: the SSM entries are O(1), the decisions are argmaxes of logits that
differ by O(1). On the book's 2-core machine one training step (forward and backward) of 8 runs
on 64 digits took 0.057 s of CPU time in float32 against 0.137 s in float64 (2.4 times longer),
and retraining the victims is almost the whole of the chapter's time budget. Inputs are still
checked as float64 and converted inside.

**Device.** Parameters and data live on the CPU; the computation runs on the device that the
environment variable ``BOOK_DEVICE`` names (``cpu``, the default, or e.g. ``cuda``), see
:func:`compute_device`. :func:`train` keeps its parameters and data on that device while it trains;
:func:`logits` moves CPU parameters and inputs there and its result back to the inputs' device, so
callers that differentiate through it (the attack) see CPU tensors only. Off the CPU, the compiled
kernels of :mod:`lib.ssm._s4d_kernels` fall back to their plain PyTorch formulas, and the
convolution is always the FFT.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from lib.engine.losses import per_run_cross_entropy
from lib.engine.validation import (
    MODEL_DTYPES,
    all_finite,
    as_bool,
    as_choice,
    as_int,
    as_labels,
    as_model_tensor,
    as_positive_float,
    as_seeds,
    as_tensor,
    check_finite_result,
    check_result,
    describe,
)
from lib.ssm import _s4d_kernels

# the API (a few more public names serve the library's other folders)
__all__ = [
    "S4DConfig",
    "TrainConfig",
    "accuracy",
    "compute_device",
    "features",
    "fft_convolve",
    "init_params",
    "logits",
    "per_run_loss",
    "predict",
    "s4d_kernel",
    "select_run",
    "toeplitz",
    "train",
]

MODEL_DTYPE = torch.float32

Params = dict[str, torch.Tensor]

# Sequences at least this long are convolved by FFT, shorter ones by the Toeplitz product: the
# crossover measured by ``benchmarks/s4d_conv.py`` (``make bench``) on one CPU thread.
FFT_MIN_LENGTH = 256
CONV_METHODS = ("auto", "toeplitz", "fft")
# s4d_kernel's (..., H, N/2, L) intermediate may hold at most this many values (16 GiB in float64)
MAX_KERNEL_ENTRIES = 2**31


def compute_device() -> torch.device:
    """The device the victim computes on: ``BOOK_DEVICE`` (default ``cpu``), checked to exist."""
    name = os.environ.get("BOOK_DEVICE", "cpu").strip() or "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"BOOK_DEVICE={name!r} is not a torch device ({err})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"BOOK_DEVICE={name!r} but this torch sees no CUDA device")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"BOOK_DEVICE={name!r} but this torch sees no MPS device")
    return device


@dataclass(frozen=True)
class S4DConfig:
    """Sizes of the classifier: H channels, state size N per channel (N/2 conjugate pairs), C input
    values per sequence step (``inputs``), the range of the initial step sizes Δ, and whether the
    layer norm comes before each block (``prenorm``) or after its residual sum (the default)."""

    channels: int = 16
    state: int = 8
    layers: int = 2
    classes: int = 10
    dt_min: float = 1e-2
    dt_max: float = 1.0
    inputs: int = 1
    prenorm: bool = False

    def __post_init__(self):
        as_int(self.channels, "channels", minimum=1)
        as_int(self.inputs, "inputs", minimum=1)
        state = as_int(self.state, "state", minimum=2)
        if state % 2:
            raise ValueError(f"state must be even (conjugate pairs), got {state}")
        as_int(self.layers, "layers", minimum=1)
        as_int(self.classes, "classes", minimum=2)
        lo = as_positive_float(self.dt_min, "dt_min")
        hi = as_positive_float(self.dt_max, "dt_max")
        if lo > hi:
            raise ValueError(f"dt_min must be <= dt_max, got {lo} > {hi}")
        as_bool(self.prenorm, "prenorm")


# The paper's S4 victim (App. H.2.4; the authors' ``S4Model`` in the version of their code that
# produced Table 2, commit 74e2df7: 4 layers, d_model = 128, S4D kernels with d_state = 64 and Δ
# initialized in [0.001, 0.1], pre-norm, mean pooling) on RGB sequences. What differs from it: no
# dropout (theirs 0.1 after each block), a linear channel mixing after the GELU instead of their
# 1×1 convolution with a GLU, a layer norm without affine parameters, and one learning rate and
# weight decay for all parameters (theirs: 0.001 and none for the SSM parameters).
CIFAR10_VICTIM = S4DConfig(
    channels=128, state=64, layers=4, dt_min=1e-3, dt_max=0.1, inputs=3, prenorm=True
)


def init_params(config: S4DConfig, seeds) -> Params:
    """Parameters of R = len(seeds) networks, one per seed (S4D-Lin initialization).

    Per layer: log Δ ~ U[log dt_min, log dt_max]; Re A = −½ (stored as log ½ of its negative);
    Im A = π n; C ~ CN(0, 1) (real and imaginary parts N(0, ½)); D ~ N(0, 1); the mixing matrix W
    and the encoder / decoder with PyTorch's default uniform fan-in initialization. In a pre-norm
    network (``config.prenorm``) W and b are stored as ``w_pre{i}``, ``b_pre{i}``: the parameter
    dict alone tells :func:`logits` where the layer norm goes.
    """
    if not isinstance(config, S4DConfig):
        raise ValueError(f"config must be an S4DConfig, got {type(config).__name__}")
    seeds = as_seeds(seeds)
    h, half, k, c = config.channels, config.state // 2, config.classes, config.inputs
    runs = []
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)

        def uniform(*shape, bound, g=g):
            return (torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1) * bound

        # fan-in c: bound 1/sqrt(c); one input channel keeps the (H,) encoder of the digits
        enc_shape = (h,) if c == 1 else (h, c)
        p = {
            "enc_w": uniform(*enc_shape, bound=1 / math.sqrt(c)),
            "enc_b": uniform(h, bound=1 / math.sqrt(c)),
            "dec_w": uniform(k, h, bound=1 / math.sqrt(h)),
            "dec_b": uniform(k, bound=1 / math.sqrt(h)),
        }
        log_lo, log_hi = math.log(config.dt_min), math.log(config.dt_max)
        for i in range(config.layers):
            u = torch.rand(h, generator=g, dtype=torch.float64)
            p[f"log_dt{i}"] = log_lo + u * (log_hi - log_lo)
            p[f"log_a_re{i}"] = torch.full((h, half), math.log(0.5), dtype=torch.float64)
            p[f"a_im{i}"] = math.pi * torch.arange(half, dtype=torch.float64).expand(h, half)
            p[f"c_re{i}"] = torch.randn(h, half, generator=g, dtype=torch.float64) / math.sqrt(2)
            p[f"c_im{i}"] = torch.randn(h, half, generator=g, dtype=torch.float64) / math.sqrt(2)
            p[f"d{i}"] = torch.randn(h, generator=g, dtype=torch.float64)
            # the block's mixing; named w_pre / b_pre in a pre-norm network (how logits knows)
            mix = "_pre" if config.prenorm else ""
            p[f"w{mix}{i}"] = uniform(h, h, bound=1 / math.sqrt(h))
            p[f"b{mix}{i}"] = uniform(h, bound=1 / math.sqrt(h))
        runs.append(p)
    return {
        name: torch.stack([p[name] for p in runs]).to(MODEL_DTYPE).contiguous() for name in runs[0]
    }


@dataclass(frozen=True)
class _Network:
    """What a parameter dict holds: R runs of a network of H channels, N/2 conjugate pairs per
    channel, ``layers`` blocks (``prenorm[i]``: block i is pre-norm), K classes, C input values per
    step, in one dtype on one device."""

    runs: int
    channels: int
    half: int
    layers: int
    classes: int
    inputs: int
    prenorm: tuple[bool, ...]
    dtype: torch.dtype
    device: torch.device


_LAYER_SHAPES = {"log_dt": 1, "log_a_re": 2, "a_im": 2, "c_re": 2, "c_im": 2, "d": 1}


def _expected_shapes(net: _Network) -> dict[str, tuple[int, ...]]:
    """The shape of every parameter of ``net`` (the layout of :func:`init_params`)."""
    r, h, k = net.runs, net.channels, net.classes
    shapes = {
        "enc_w": (r, h) if net.inputs == 1 else (r, h, net.inputs),
        "enc_b": (r, h),
        "dec_w": (r, k, h),
        "dec_b": (r, k),
    }
    for i in range(net.layers):
        for name, rank in _LAYER_SHAPES.items():
            shapes[f"{name}{i}"] = (r, h) if rank == 1 else (r, h, net.half)
        mix = "_pre" if net.prenorm[i] else ""
        shapes[f"w{mix}{i}"], shapes[f"b{mix}{i}"] = (r, h, h), (r, h)
    return shapes


def _read_network(params, name: str) -> _Network:
    """The architecture ``params`` claims (read off a few entries; :func:`check_s4d_params` then
    checks every entry against it)."""
    if not isinstance(params, Mapping) or not params:
        raise ValueError(
            f"{name} must be a non-empty dict of S4D parameter tensors (as init_params returns), "
            f"got {describe(params)}"
        )
    for key, value in params.items():
        if not isinstance(key, str):
            raise ValueError(f"{name} keys must be strings, got {key!r:.40}")
        if not isinstance(value, torch.Tensor) or value.dtype not in MODEL_DTYPES:
            raise ValueError(
                f"{name}[{key!r}] must be a float32 or float64 tensor, got {describe(value)}"
            )
    for key, rank in (("enc_b", 2), ("dec_w", 3), ("enc_w", None), ("log_a_re0", 3)):
        if key not in params:
            raise ValueError(f"{name} is not an S4D parameter dict: it has no {key!r}")
        if rank is not None and params[key].ndim != rank:
            raise ValueError(
                f"{name}[{key!r}] must have {rank} dimensions, got shape {tuple(params[key].shape)}"
            )
    enc_w = params["enc_w"]
    if enc_w.ndim not in (2, 3) or (enc_w.ndim == 3 and enc_w.shape[-1] < 2):
        raise ValueError(
            f"{name}['enc_w'] must have shape (R, H) (one input value per step) or (R, H, C) with "
            f"C >= 2, got {tuple(enc_w.shape)}"
        )
    layers = 0
    while f"log_dt{layers}" in params:
        layers += 1
    runs, channels = params["enc_b"].shape
    dtypes = {v.dtype for v in params.values()}
    devices = {v.device for v in params.values()}
    if len(dtypes) > 1 or len(devices) > 1:
        raise ValueError(
            f"{name} must hold tensors of one dtype on one device, got {dtypes} {devices}"
        )
    return _Network(
        runs=int(runs),
        channels=int(channels),
        half=int(params["log_a_re0"].shape[-1]),
        layers=layers,
        classes=int(params["dec_w"].shape[1]),
        inputs=1 if enc_w.ndim == 2 else int(enc_w.shape[-1]),
        prenorm=tuple(f"w_pre{i}" in params for i in range(layers)),
        dtype=dtypes.pop(),
        device=devices.pop(),
    )


def check_s4d_params(params, name: str = "params") -> _Network:
    """The network ``params`` describes, after checking that it is one: every entry of
    :func:`init_params`'s layout present with its shape (no other entries), at least one run,
    channel, state pair and layer and two classes, one dtype (float32 or float64), all finite."""
    net = _read_network(params, name)
    expected = _expected_shapes(net)
    missing, extra = sorted(expected.keys() - params.keys()), sorted(params.keys() - expected)
    if missing or extra:
        raise ValueError(
            f"{name} is not an S4D parameter dict of {net.layers} layer(s): "
            f"missing {missing}, unexpected {extra}"
        )
    for key, shape in expected.items():
        if tuple(params[key].shape) != shape:
            raise ValueError(
                f"{name}[{key!r}] must have shape {shape} (runs, channels, ...) like "
                f"{name}['enc_b'] and {name}['dec_w'], got {tuple(params[key].shape)}"
            )
    if min(net.runs, net.channels, net.half) < 1 or net.classes < 2:
        raise ValueError(
            f"{name} must hold at least one run, channel and state pair and two classes, got "
            f"{net.runs} run(s), {net.channels} channel(s), {net.half} pair(s), "
            f"{net.classes} class(es)"
        )
    for key, value in params.items():
        if not all_finite(value):
            raise ValueError(f"{name}[{key!r}] must be finite, got nan or inf entries")
    return net


def _check_sequences(x, name: str, net: _Network, *, batched: bool = False) -> torch.Tensor:
    """Sequences for ``net``: (B, L·C) shared by the runs or (R, B, L·C) (only the latter with
    ``batched``), B, L ≥ 1, finite, float32/float64 (or convertible), in the network's dtype."""
    x = as_model_tensor(x, name, net.dtype)
    ranks = (3,) if batched else (2, 3)
    if x.ndim not in ranks:
        shapes = "(R, B, L·C)" if batched else "(B, L·C) or (R, B, L·C)"
        raise ValueError(f"{name} must have shape {shapes}, got {tuple(x.shape)}")
    if x.ndim == 3 and x.shape[0] != net.runs:
        raise ValueError(f"{name} holds {x.shape[0]} batches but params has {net.runs} run(s)")
    if x.shape[-2] == 0 or x.shape[-1] == 0:
        raise ValueError(
            f"{name} must hold at least one sequence of one step, got {tuple(x.shape)}"
        )
    if x.shape[-1] % net.inputs:
        raise ValueError(
            f"{name} has {x.shape[-1]} entries per sequence, not a multiple of C = {net.inputs}"
        )
    return x


def s4d_kernel(log_dt, log_a_re, a_im, c_re, c_im, length: int) -> torch.Tensor:
    """The ZOH convolution kernel K of shape (..., H, L) from S4D parameters of shape (..., H, N/2).

    K_m = 2 Re Σ_j C_j b̄_j exp(Δ A_j)^m with b̄_j = (exp(Δ A_j) − 1)/A_j, A_j = −exp(log_a_re_j)
    + i a_im_j, Δ = exp(log_dt) (Gu et al. 2022; the Vandermonde form of the kernel). Evaluated in
    real arithmetic: exp(Δ A_j)^m = e^{mΔ Re A_j} (cos mΔ Im A_j + i sin mΔ Im A_j).

    ``log_dt`` has shape (..., H), the other four (..., H, N/2), all finite, in one dtype (float32
    or float64) on one device; ``length`` L ≥ 1. A kernel that comes out non-finite (Δ A_j
    overflowing) is a :class:`~lib.engine.validation.NumericalFailure`.
    """
    given = {"log_dt": log_dt, "log_a_re": log_a_re, "a_im": a_im, "c_re": c_re, "c_im": c_im}
    p = {name: as_model_tensor(value, name) for name, value in given.items()}
    if len({v.dtype for v in p.values()}) > 1 or len({v.device for v in p.values()}) > 1:
        found = ", ".join(f"{k} {v.dtype} on {v.device}" for k, v in p.items())
        raise ValueError(f"the S4D parameters must share one dtype and device, got {found}")
    shape = tuple(p["log_a_re"].shape)
    if len(shape) < 1 or p["log_a_re"].numel() == 0:
        raise ValueError(f"log_a_re must have a non-empty shape (..., H, N/2), got {shape}")
    for name in ("a_im", "c_re", "c_im"):
        if tuple(p[name].shape) != shape:
            raise ValueError(
                f"{name} must have log_a_re's shape {shape}, got {tuple(p[name].shape)}"
            )
    if tuple(p["log_dt"].shape) != shape[:-1]:
        raise ValueError(
            f"log_dt must have shape {shape[:-1]} (log_a_re's without N/2), "
            f"got {tuple(p['log_dt'].shape)}"
        )
    length = as_int(length, "length", minimum=1)
    if p["log_a_re"].numel() * length > MAX_KERNEL_ENTRIES:
        raise ValueError(
            f"length {length} with {p['log_a_re'].numel()} state entries needs more than "
            f"{MAX_KERNEL_ENTRIES} intermediate values"
        )
    return check_result(_s4d_kernel(*p.values(), length), "the S4D kernel")


def _s4d_kernel(log_dt, log_a_re, a_im, c_re, c_im, length: int) -> torch.Tensor:
    """:func:`s4d_kernel` without the checks (for :func:`logits`, which checked its parameters)."""
    alpha, omega = -torch.exp(log_a_re), a_im
    dt = torch.exp(log_dt)[..., None]
    decay, turn = torch.exp(dt * alpha), dt * omega
    # p + iq = exp(ΔA) − 1; C̃ = C (p + iq) / (α + iω)
    p, q = decay * torch.cos(turn) - 1, decay * torch.sin(turn)
    norm = alpha**2 + omega**2
    ratio_re, ratio_im = (p * alpha + q * omega) / norm, (q * alpha - p * omega) / norm
    ct_re = c_re * ratio_re - c_im * ratio_im
    ct_im = c_re * ratio_im + c_im * ratio_re
    steps = torch.arange(length, dtype=log_dt.dtype, device=log_dt.device)
    radius = torch.exp(dt[..., None] * alpha[..., None] * steps)  # (..., H, N/2, L)
    angle = turn[..., None] * steps
    terms = ct_re[..., None] * torch.cos(angle) - ct_im[..., None] * torch.sin(angle)
    return 2 * (radius * terms).sum(-2)


def toeplitz(kernel: torch.Tensor) -> torch.Tensor:
    """Lower-triangular Toeplitz matrices T[..., l, k] = K[..., l − k] (0 for k > l) of K (..., L).

    Then (T u)_l = Σ_{k ≤ l} K_{l−k} u_k is the causal convolution (see
    :func:`lib.ssm._s4d_kernels.toeplitz`, whose derivatives, sums of T's diagonals, are one
    compiled pass). ``kernel`` is a non-empty, finite float32 or float64 tensor with at least one
    dimension. """
    return _s4d_kernels.toeplitz(as_model_tensor(kernel, "kernel"))


def fft_convolve(kernel: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Causal convolution by FFT: kernels K (..., H, L), signals u (..., H, L, B) → (..., H, L, B).

    y_l = Σ_{k ≤ l} K_{l−k} u_k, computed as irfft(rfft(K) · rfft(u)) with both zero-padded to
    length 2L (so the circular convolution of the FFT has no wrap-around) and cut to the first L
    entries. O(L log L) per channel against the Toeplitz product's O(L²); differentiable to any
    order (the FFTs are linear maps with FFTs as their adjoints). ``u`` must have the shape of
    ``kernel`` plus one axis of B ≥ 1 signals, both finite, one dtype.
    """
    kernel = as_model_tensor(kernel, "kernel")
    u = as_model_tensor(u, "u")
    if kernel.ndim < 1 or kernel.numel() == 0:
        raise ValueError(
            f"kernel must have a non-empty shape (..., H, L), got {tuple(kernel.shape)}"
        )
    if u.ndim != kernel.ndim + 1 or tuple(u.shape[:-1]) != tuple(kernel.shape) or not u.shape[-1]:
        raise ValueError(
            f"u must have shape {tuple(kernel.shape)} + (B,) (kernel's shape and B >= 1 "
            f"signals), got {tuple(u.shape)}"
        )
    if kernel.dtype != u.dtype:
        raise ValueError(f"kernel and u must share one dtype, got {kernel.dtype} and {u.dtype}")
    return check_result(_fft_convolve(kernel, u), "the FFT convolution")


def _fft_convolve(kernel: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """:func:`fft_convolve` without the checks (for :func:`logits`)."""
    length = kernel.shape[-1]
    n = 2 * length
    kf = torch.fft.rfft(kernel, n=n, dim=-1)
    uf = torch.fft.rfft(u.transpose(-1, -2), n=n, dim=-1)  # (..., H, B, L + 1)
    y = torch.fft.irfft(uf * kf[..., None, :], n=n, dim=-1)[..., :length]
    return y.transpose(-1, -2)


def _method(method: str, length: int, device: torch.device) -> str:
    """The convolution ``"auto"`` stands for at this length and device (others stay)."""
    if method == "auto":
        fft = length >= FFT_MIN_LENGTH or device.type != "cpu"
        return "fft" if fft else "toeplitz"
    return method


def logits(params: Params, x: torch.Tensor, *, method: str = "auto") -> torch.Tensor:
    """Class scores of R networks: x of shape (R, B, L·C) (or (B, L·C), shared) → (R, B, classes).

    Encoder u = W_enc x_p + b_enc at each step p (C input values, flat as in the module docstring);
    per layer the S4D convolution with skip D, GELU, channel mixing W, residual and LayerNorm over
    channels (post-norm; pre-norm networks normalize the block's input instead, see the module
    docstring); mean over positions; decoder. The skip term is folded into the kernel (K_0 + D: the
    convolution with it is y = T u + D u). The convolution is the Toeplitz product (``method=
    "toeplitz"``) or the FFT product of :func:`fft_convolve` (``"fft"``); ``"auto"`` takes the FFT
    for L ≥ :data:`FFT_MIN_LENGTH` and off the CPU. GELU, LayerNorm and the Toeplitz matrix come
    from :mod:`lib.ssm._s4d_kernels`, whose first and second derivatives are closed forms (the
    attack differentiates through a backward pass). Runs on :func:`compute_device`; the result is
    on x's device.

    ``params`` is a parameter dict of :func:`init_params`'s layout (float32 or float64, finite);
    ``x`` finite, float32 or float64 (or convertible), computed in the parameters' dtype. Logits
    that come out non-finite are a :class:`~lib.engine.validation.NumericalFailure`.
    """
    net = check_s4d_params(params)
    method = as_choice(method, "method", CONV_METHODS)
    x = _check_sequences(x, "x", net)
    return check_result(_logits(params, x, method), "the logits")


def features(params: Params, x: torch.Tensor, *, method: str = "auto") -> torch.Tensor:
    """The decoder's input of R networks, the mean over positions of the last layer's output:
    x (R, B, L·C) (or (B, L·C), shared) → (R, B, H), the features φ(x) with logits
    W_dec φ(x) + b_dec (:func:`logits`). A frozen extractor for a retrained head (transfer)."""
    net = check_s4d_params(params)
    method = as_choice(method, "method", CONV_METHODS)
    x = _check_sequences(x, "x", net)
    out = pooled_features(params, x, method).transpose(-1, -2).to(x.device)
    return check_result(out, "the features")


def _logits(params: Params, x: torch.Tensor, method: str) -> torch.Tensor:
    """:func:`logits` of checked parameters and sequences."""
    home = x.device
    pooled = pooled_features(params, x.to(compute_device()), method)  # (R, H, B)
    dec_w, dec_b = params["dec_w"].to(pooled.device), params["dec_b"].to(pooled.device)
    out = (dec_w @ pooled).transpose(-1, -2) + dec_b[:, None, :]
    return out.to(home)


def pooled_features(params: Params, x: torch.Tensor, method: str) -> torch.Tensor:
    """The mean over positions of the last layer's output, (R, H, B), on the compute device."""
    device = compute_device()
    if params["enc_w"].device != device:
        params = {k: v.to(device) for k, v in params.items()}
    x = x.to(device)
    r = int(params["enc_b"].shape[0])
    c = 1 if params["enc_w"].ndim == 2 else int(params["enc_w"].shape[-1])
    if x.ndim == 2:
        x = x.expand(r, *x.shape)
    length = x.shape[-1] // c
    method = _method(method, length, device)
    h = params["enc_w"].shape[1]
    # Activations in layout (R, H, L, B): the Toeplitz convolution is a batched (L, L) @ (L, B)
    # product with the matrix of each channel, the mixing an (H, H) @ (H, L·B) product.
    enc_b = params["enc_b"][:, :, None, None]
    if c == 1:
        xt = x.transpose(-1, -2)  # (R, L, B)
        enc_w = params["enc_w"][:, :, None, None]
        u = enc_w * xt[:, None] + enc_b
    else:
        steps = x.reshape(r, x.shape[1], length, c)  # (R, B, L, C)
        u = torch.einsum("rhc,rblc->rhlb", params["enc_w"], steps) + enc_b
    layers = sum(1 for name in params if name.startswith("log_dt"))
    for i in range(layers):
        kernel = _s4d_kernel(
            params[f"log_dt{i}"],
            params[f"log_a_re{i}"],
            params[f"a_im{i}"],
            params[f"c_re{i}"],
            params[f"c_im{i}"],
            length,
        )
        kernel = kernel + torch.nn.functional.pad(params[f"d{i}"][..., None], (0, length - 1))
        prenorm = f"w_pre{i}" in params
        v = _s4d_kernels._channel_layer_norm(u.reshape(r, h, -1)).reshape(u.shape) if prenorm else u
        if method == "fft":
            conv = _fft_convolve(kernel, v)
        elif i == 0 and c == 1 and not prenorm:
            # The encoder's output w x + b has one input channel: T (w x + b) = w (T x) + b (T 1),
            # one (H·L, L) @ (L, B) product per run, and (T 1)_l = Σ_{m ≤ l} K_m.
            t = _s4d_kernels._toeplitz(kernel)
            tx = (t.reshape(r, h * length, length) @ xt).reshape(r, h, length, -1)
            conv = torch.addcmul(enc_b * kernel.cumsum(-1)[..., None], enc_w, tx)
        else:
            conv = _s4d_kernels._toeplitz(kernel) @ v
        y = _s4d_kernels._gelu(conv)
        mix = "_pre" if prenorm else ""
        mixed = torch.baddbmm(
            params[f"b{mix}{i}"][:, :, None], params[f"w{mix}{i}"], y.reshape(r, h, -1)
        )
        if prenorm:
            u = u + mixed.reshape(u.shape)
        else:
            u = _s4d_kernels._channel_layer_norm(u.reshape(r, h, -1) + mixed).reshape(u.shape)
    return u.mean(2)  # (R, H, B)


def per_run_loss(params: Params, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of each run on its own batch: x (R, B, L·C), labels (R, B) → (R,).

    ``params`` and ``x`` as for :func:`logits`; ``labels`` integer class indices 0..K−1.
    """
    net = check_s4d_params(params)
    x = _check_sequences(x, "x", net, batched=True)
    labels = as_labels(labels, "labels", tuple(x.shape[:2]), net.classes)
    out = check_result(_logits(params, x, "auto"), "the logits")
    return per_run_cross_entropy(out, labels.to(out.device))


@dataclass(frozen=True)
class TrainConfig:
    """AdamW (Loshchilov & Hutter) with a cosine learning-rate decay, on shuffled minibatches."""

    epochs: int = 12
    batch: int = 64
    lr: float = 1e-2
    weight_decay: float = 1e-2

    def __post_init__(self):
        as_int(self.epochs, "epochs", minimum=1)
        as_int(self.batch, "batch", minimum=1)
        as_positive_float(self.lr, "lr")
        as_positive_float(self.weight_decay, "weight_decay", allow_zero=True)


# The authors' training of every network in the version of their code that produced Table 2
# (commit 74e2df7, its default "conservative" strategy with AdamW for SGD): 40 epochs, batch 128,
# lr 0.01, weight decay 5e-4. Their learning rate drops tenfold at epochs 15, 25 and 35; ours
# decays on TrainConfig's cosine schedule. (Their later code trains S4 for 100 epochs of 64.)
CIFAR10_TRAIN = TrainConfig(epochs=40, batch=128, lr=1e-2, weight_decay=5e-4)


def _check_data(x, labels, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Data of R runs: x (R, n, L) or (n, L) float64, n, L ≥ 1; labels (R, n) or (n,), integers
    0..classes−1 (as int64)."""
    x = as_tensor(x, "x")
    if x.ndim not in (2, 3):
        raise ValueError(f"x must have shape (n, L) or (R, n, L), got {tuple(x.shape)}")
    if x.shape[-2] == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must hold at least one sequence of one step, got {tuple(x.shape)}")
    return x, as_labels(labels, "labels", tuple(x.shape[:-1]), classes)


def _check_init(init, config: S4DConfig, runs: int) -> None:
    """``init`` must be a network of ``config``'s architecture with one run or ``runs`` runs."""
    net = check_s4d_params(init, "init")
    want = (
        config.channels,
        config.state // 2,
        config.layers,
        config.classes,
        config.inputs,
        (config.prenorm,) * config.layers,
    )
    have = (net.channels, net.half, net.layers, net.classes, net.inputs, net.prenorm)
    if have != want:
        raise ValueError(
            "init must be a network of config's architecture (channels, state/2, layers, classes, "
            f"inputs, pre-norm per layer) = {want}, got {have}"
        )
    if net.runs not in (1, runs):
        raise ValueError(f"init must hold 1 run or one per seed ({runs}), got {net.runs}")


def _adamw(params: list[torch.Tensor], train_config: TrainConfig) -> torch.optim.AdamW:
    """AdamW, in PyTorch's fused implementation where it has one for the CPU (torch ≥ 2.4): one
    call per step instead of about ten per parameter tensor, the same update up to rounding."""
    settings = {"lr": train_config.lr, "weight_decay": train_config.weight_decay}
    try:
        return torch.optim.AdamW(params, fused=True, **settings)
    except (RuntimeError, ValueError):  # no fused CPU kernel in this torch
        return torch.optim.AdamW(params, **settings)


def train(
    config: S4DConfig,
    x,
    labels,
    seeds,
    train_config: TrainConfig = TrainConfig(),
    *,
    init: Params | None = None,
) -> Params:
    """Train R = len(seeds) networks from scratch with AdamW; returns their parameters.

    ``x`` is (n, L·C) (all runs see the same data) or (R, n, L·C) (run r trains on x[r], e.g. clean
    data plus its own poisons); ``labels`` (n,) or (R, n). Trains on :func:`compute_device`;
    returns CPU tensors. Run r is initialized and shuffled with
    ``seeds[r]``. The loss is the mean cross-entropy over a minibatch; the runs' losses are summed,
    which leaves each run's gradient its own. With ``init`` (a parameter dict of R runs, or of one
    run, copied to all) training starts there instead of at the seeds' initialization: fine-tuning.
    """
    if not isinstance(config, S4DConfig):
        raise ValueError(f"config must be an S4DConfig, got {describe(config)}")
    if not isinstance(train_config, TrainConfig):
        raise ValueError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    seeds = as_seeds(seeds)
    x, labels = _check_data(x, labels, config.classes)
    if x.shape[-1] % config.inputs:
        raise ValueError(
            f"x has {x.shape[-1]} entries per sequence, not a multiple of inputs = {config.inputs}"
        )
    r = len(seeds)
    if x.ndim == 3 and x.shape[0] != r:
        raise ValueError(f"x holds {x.shape[0]} data sets but seeds has {r} entries")
    if init is not None:
        _check_init(init, config, r)
    if x.ndim == 2:
        x, labels = x.expand(r, *x.shape), labels.expand(r, *labels.shape)
    device = compute_device()
    x, labels = x.to(device, MODEL_DTYPE), labels.to(device)
    n = x.shape[1]
    if init is None:
        start = init_params(config, seeds)
    else:
        start = init if _runs(init) == r else _replicate(init, r)
    params = {
        k: v.detach().clone().to(device, MODEL_DTYPE).requires_grad_() for k, v in start.items()
    }
    opt = _adamw(list(params.values()), train_config)
    batches = max(1, n // train_config.batch)
    total = train_config.epochs * batches
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: 0.5 * (1 + math.cos(math.pi * min(k, total) / total))
    )
    gens = [np.random.default_rng(s) for s in seeds]
    rows = torch.arange(r, device=device)[:, None]
    for _ in range(train_config.epochs):
        perm = torch.from_numpy(np.stack([g.permutation(n) for g in gens])).to(device)
        for j in range(batches):
            idx = perm[:, j * train_config.batch : (j + 1) * train_config.batch]
            out = _logits(params, x[rows, idx], "auto")
            loss = per_run_cross_entropy(out, labels[rows, idx]).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    for name, value in params.items():
        check_finite_result(value.detach(), f"the trained parameter {name}")
    return {k: v.detach().cpu() for k, v in params.items()}


def predict(params: Params, x, *, batch: int = 512) -> torch.Tensor:
    """Predicted classes (R, n) of R networks on x of shape (n, L·C) or (R, n, L·C), float64,
    evaluated ``batch`` sequences at a time. Non-finite logits are a
    :class:`~lib.engine.validation.NumericalFailure`, never a prediction."""
    net = check_s4d_params(params)
    batch = as_int(batch, "batch", minimum=1)
    x = _check_sequences(as_tensor(x, "x"), "x", net)
    return _predict(params, x, batch)


def _predict(params: Params, x: torch.Tensor, batch: int) -> torch.Tensor:
    parts = []
    with torch.no_grad():
        for i in range(0, x.shape[-2], batch):
            out = _logits(params, x[..., i : i + batch, :], "auto")
            parts.append(check_result(out, "the logits").argmax(-1))
    return torch.cat(parts, dim=-1)


def accuracy(params: Params, x, labels) -> torch.Tensor:
    """Fraction of correct predictions of each run, shape (R,), float64: x as for
    :func:`predict`, labels (n,) or (R, n) integer classes."""
    net = check_s4d_params(params)
    x, labels = _check_data(x, labels, net.classes)
    x = _check_sequences(x, "x", net)
    return (_predict(params, x, 512) == labels).double().mean(-1)


def select_run(params: Params, run: int) -> Params:
    """The parameters of run ``run`` alone, as a one-run parameter dict."""
    net = check_s4d_params(params)
    run = as_int(run, "run", minimum=0)
    if run >= net.runs:
        raise ValueError(f"run must be < {net.runs}, got {run}")
    return {k: v[run : run + 1] for k, v in params.items()}


def _runs(params: Params) -> int:
    return int(params["enc_b"].shape[0])


def _replicate(params: Params, copies: int) -> Params:
    """``copies`` identical runs of a one-run network (an ``init`` for R seeds)."""
    return {k: v.expand(copies, *v.shape[1:]).contiguous() for k, v in params.items()}
