"""Three operations of the S4D classifier with hand-written first *and second* derivatives.

The victim of :mod:`lib.ssm.s4d` is trained by backpropagation, and the gradient-matching attack of
:mod:`lib.poisoning.gradient_matching` differentiates *through* a backpropagation (a double
backward). For the GELU, the layer norm and the Toeplitz matrix of a kernel, PyTorch's autograd
assembles these derivatives from a dozen or more elementwise passes over the activations (the
double backward of GELU alone cost about ten times its forward pass in our measurements); here each
derivative is a closed form below, evaluated in one or two loops compiled by numba (layer norm,
Toeplitz) or in PyTorch's own GELU kernels and a few in-place passes (GELU).

**GELU** (Hendrycks & Gimpel), with Φ, φ the standard normal distribution and density:

    gelu(y) = y Φ(y),   gelu'(y) = Φ(y) + y φ(y),   gelu''(y) = φ(y) (2 − y²).

**Layer norm over channels** (no affine parameters): for the vector z of the H channels at one
position, c = z − mean(z), s = (mean(c²) + ε)^(−1/2), o = s c. Its vector-Jacobian product is

    ∂z = s (g − mean(g) − o mean(g o)),                                         (LN1)

which is linear in g with a symmetric matrix, so its derivative in g applied to a cotangent q is
(LN1) with q for g, and its derivative in z (differentiate s, c and o; ∂s/∂z = −s² o / H) is

    s² [ (3 mean(q o) mean(g o) − mean(q g) + mean(q) mean(g)) o
         − mean(g o) (q − mean(q)) − mean(q o) (g − mean(g)) ].                  (LN2)

**Toeplitz matrix** of a kernel K of length L: T[l, k] = K[l − k] for k ≤ l, else 0. Its adjoint
sums the diagonals, K̄[m] = Σ_l T̄[l, l − m]; both are linear, so each is the other's derivative.

All functions take non-empty, finite float32 or float64 tensors (anything else is a ValueError
naming the argument) and return the same dtype. The compiled kernels run
on the CPU; for tensors on another device (a GPU) the Toeplitz matrix and the layer norm are the
plain PyTorch formulas, differentiated by autograd (the same values up to rounding).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit

from lib.engine.validation import MODEL_DTYPES, all_finite, check_result, describe

LAYER_NORM_EPS = 1e-5
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=True, error_model="numpy")
def _toeplitz_fill(kernel, out):
    """out[i, l, k] = kernel[i, l − k] for k ≤ l, else 0; kernel (n, L), out (n, L, L)."""
    n, length = kernel.shape
    for i in range(n):
        k = kernel[i]
        t = out[i]
        for row in range(length):
            line = t[row]
            for col in range(row + 1):
                line[col] = k[row - col]
            for col in range(row + 1, length):
                line[col] = 0.0


@njit(cache=True, error_model="numpy")
def _diagonal_sums(t, out):
    """out[i, m] = Σ_l t[i, l, l − m] (lower diagonals); t (n, L, L), out (n, L)."""
    n, length = out.shape
    for i in range(n):
        acc = out[i]
        acc[:] = 0.0
        for row in range(length):
            line = t[i, row]
            for col in range(row + 1):
                acc[row - col] += line[col]


@njit(cache=True, error_model="numpy")
def _layer_norm_forward(z, out, rstd, eps):
    """Normalize z (R, H, M) over its axis 1 into out; rstd (R, M) receives s."""
    runs, h, m = z.shape
    mean = np.empty(m, z.dtype)
    var = np.empty(m, z.dtype)
    for r in range(runs):
        zr, outr, s = z[r], out[r], rstd[r]
        for j in range(m):
            mean[j] = 0.0
            var[j] = 0.0
        for c in range(h):
            for j in range(m):
                mean[j] += zr[c, j]
        for j in range(m):
            mean[j] /= h
        for c in range(h):
            for j in range(m):
                d = zr[c, j] - mean[j]
                var[j] += d * d
        for j in range(m):
            s[j] = 1.0 / math.sqrt(var[j] / h + eps)
        for c in range(h):
            for j in range(m):
                outr[c, j] = (zr[c, j] - mean[j]) * s[j]


@njit(cache=True, error_model="numpy")
def _channel_means(a, b, out):
    """out[0] = mean_c a[c], out[1] = mean_c a[c] b[c] over axis 0 of (H, M) arrays."""
    h, m = a.shape
    for j in range(m):
        out[0, j] = 0.0
        out[1, j] = 0.0
    for c in range(h):
        for j in range(m):
            out[0, j] += a[c, j]
            out[1, j] += a[c, j] * b[c, j]
    for j in range(m):
        out[0, j] /= h
        out[1, j] /= h


@njit(cache=True, error_model="numpy")
def _layer_norm_vjp(g, out, rstd, dz):
    """(LN1): dz = s (g − mean(g) − o mean(g o)), all of shape (R, H, M), rstd (R, M)."""
    runs, h, m = g.shape
    means = np.empty((2, m), g.dtype)
    for r in range(runs):
        gr, outr, s, dzr = g[r], out[r], rstd[r], dz[r]
        _channel_means(gr, outr, means)
        for c in range(h):
            for j in range(m):
                dzr[c, j] = s[j] * (gr[c, j] - means[0, j] - outr[c, j] * means[1, j])


@njit(cache=True, error_model="numpy")
def _layer_norm_vjp_z(q, g, out, rstd, dz):
    """(LN2): the derivative in z of ⟨q, (LN1)⟩, into dz (R, H, M)."""
    runs, h, m = g.shape
    mq = np.empty((2, m), g.dtype)  # mean(q), mean(q o)
    mg = np.empty((2, m), g.dtype)  # mean(g), mean(g o)
    mqg = np.empty((2, m), g.dtype)  # (mean(q), mean(q g))
    coef = np.empty(m, g.dtype)
    for r in range(runs):
        qr, gr, outr, s, dzr = q[r], g[r], out[r], rstd[r], dz[r]
        _channel_means(qr, outr, mq)
        _channel_means(gr, outr, mg)
        _channel_means(qr, gr, mqg)
        for j in range(m):
            coef[j] = 3.0 * mq[1, j] * mg[1, j] - mqg[1, j] + mq[0, j] * mg[0, j]
        for c in range(h):
            for j in range(m):
                dzr[c, j] = (
                    s[j]
                    * s[j]
                    * (
                        coef[j] * outr[c, j]
                        - mg[1, j] * (qr[c, j] - mq[0, j])
                        - mq[1, j] * (gr[c, j] - mg[0, j])
                    )
                )


def _np(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().contiguous().numpy()


def _check(value, name: str, *, ndim: int | None = None, min_ndim: int = 0) -> torch.Tensor:
    """A non-empty, finite float32 or float64 torch tensor (the model's precision or the book's) of
    the right rank, else a ValueError naming ``name``. Finiteness is not checked on PyTorch's
    "meta" device, which holds shapes only."""
    if not isinstance(value, torch.Tensor) or value.dtype not in MODEL_DTYPES:
        raise ValueError(
            f"{name} must be a float32 or float64 torch tensor, got {describe(value)}"
        )
    if (ndim is not None and value.ndim != ndim) or value.ndim < min_ndim:
        rank = f"{ndim}" if ndim is not None else f"at least {min_ndim}"
        raise ValueError(f"{name} must have {rank} dimensions, got shape {tuple(value.shape)}")
    if value.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(value.shape)}")
    if not all_finite(value):
        raise ValueError(f"{name} must be finite, got non-finite entries (nan or inf)")
    return value


class _Toeplitz(torch.autograd.Function):
    @staticmethod
    def forward(ctx, kernel):
        shape = kernel.shape
        flat = _np(kernel).reshape(-1, shape[-1])
        out = np.empty((flat.shape[0], shape[-1], shape[-1]), flat.dtype)
        _toeplitz_fill(flat, out)
        return torch.from_numpy(out).reshape(*shape, shape[-1])

    @staticmethod
    def backward(ctx, grad):
        return _DiagonalSums.apply(grad)


class _DiagonalSums(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        shape = t.shape
        flat = _np(t).reshape(-1, shape[-1], shape[-1])
        out = np.empty((flat.shape[0], shape[-1]), flat.dtype)
        _diagonal_sums(flat, out)
        return torch.from_numpy(out).reshape(shape[:-1])

    @staticmethod
    def backward(ctx, grad):
        return _Toeplitz.apply(grad)


def toeplitz(kernel: torch.Tensor) -> torch.Tensor:
    """Lower-triangular Toeplitz matrices T[..., l, k] = K[..., l − k] (0 for k > l) of K (..., L).

    (T u)_l = Σ_{k ≤ l} K_{l−k} u_k is the causal convolution. Differentiable to any order.
    """
    return _toeplitz(_check(kernel, "kernel", min_ndim=1))


def _toeplitz(kernel: torch.Tensor) -> torch.Tensor:
    """:func:`toeplitz` without the input check (for :mod:`lib.ssm.s4d`, which checked its
    input)."""
    if kernel.device.type != "cpu":
        return _plain_toeplitz(kernel)
    return _Toeplitz.apply(kernel)


def _plain_toeplitz(kernel: torch.Tensor) -> torch.Tensor:
    """T[..., l, k] = K[..., l − k] by indexing, on any device, differentiated by autograd."""
    steps = torch.arange(kernel.shape[-1], device=kernel.device)
    lag = steps[:, None] - steps[None, :]
    zero = torch.zeros((), dtype=kernel.dtype, device=kernel.device)
    return torch.where(lag >= 0, kernel[..., lag.clamp(min=0)], zero)


class _ChannelLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        zn = _np(z)
        out = np.empty_like(zn)
        rstd = np.empty((zn.shape[0], zn.shape[2]), zn.dtype)
        _layer_norm_forward(zn, out, rstd, LAYER_NORM_EPS)
        out, rstd = torch.from_numpy(out), torch.from_numpy(rstd)
        ctx.save_for_backward(z, out, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        z, out, rstd = ctx.saved_tensors
        return _ChannelLayerNormVjp.apply(grad, z, out, rstd)


class _ChannelLayerNormVjp(torch.autograd.Function):
    """(LN1) as a function of (g, z); ``out`` and ``rstd`` are z's normalization, passed along."""

    @staticmethod
    def forward(ctx, g, z, out, rstd):
        gn = _np(g)
        dz = np.empty_like(gn)
        _layer_norm_vjp(gn, _np(out), _np(rstd), dz)
        ctx.save_for_backward(g, out, rstd)
        return torch.from_numpy(dz)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, q):
        g, out, rstd = ctx.saved_tensors
        qn, on, sn = _np(q), _np(out), _np(rstd)
        dg = np.empty_like(qn)
        _layer_norm_vjp(qn, on, sn, dg)  # (LN1) is symmetric in g
        dz = np.empty_like(qn)
        _layer_norm_vjp_z(qn, _np(g), on, sn, dz)
        return torch.from_numpy(dg), torch.from_numpy(dz), None, None


def channel_layer_norm(z: torch.Tensor) -> torch.Tensor:
    """Layer norm over the channel axis 1 of z (R, H, M), without affine parameters (ε = 1e-5).

    First and second derivatives in closed form, (LN1) and (LN2) of the module docstring.
    """
    z = _check(z, "z", ndim=3)
    # entries beyond ~1e154 overflow (z − mean)²: the norm would come out 0 (1/√inf), silently
    centred = z.detach() - z.detach().mean(1, keepdim=True)
    check_result((centred * centred).sum(1), "the layer norm's variance of z")
    out = _channel_layer_norm(z)
    return check_result(out, "the layer norm of z")


def _channel_layer_norm(z: torch.Tensor) -> torch.Tensor:
    """:func:`channel_layer_norm` without the checks (for :mod:`lib.ssm.s4d`)."""
    if z.device.type != "cpu":
        return _plain_channel_layer_norm(z)
    return _ChannelLayerNorm.apply(z)


def _plain_channel_layer_norm(z: torch.Tensor) -> torch.Tensor:
    """o = (z − mean(z)) (mean(c²) + ε)^(−1/2) over axis 1, on any device, by autograd."""
    centred = z - z.mean(1, keepdim=True)
    return centred * torch.rsqrt((centred * centred).mean(1, keepdim=True) + LAYER_NORM_EPS)


class _Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        ctx.save_for_backward(y)
        return torch.nn.functional.gelu(y)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return _GeluVjp.apply(grad, y)


class _GeluVjp(torch.autograd.Function):
    """g gelu'(y) as a function of (g, y)."""

    @staticmethod
    def forward(ctx, g, y):
        ctx.save_for_backward(g, y)
        return torch.ops.aten.gelu_backward(g, y)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, q):
        g, y = ctx.saved_tensors
        dg = torch.ops.aten.gelu_backward(q, y)
        square = y * y
        dy = torch.exp(square * -0.5)  # in place from here: every pass stays in one buffer
        dy.mul_(square.neg_().add_(2.0)).mul_(q).mul_(g).mul_(_INV_SQRT_2PI)
        return dg, dy


def gelu(y: torch.Tensor) -> torch.Tensor:
    """GELU, y Φ(y) (exact, with erf), its second derivative in closed form (module docstring)."""
    return check_result(_gelu(_check(y, "y")), "gelu(y)")


def _gelu(y: torch.Tensor) -> torch.Tensor:
    """:func:`gelu` without the checks (for :mod:`lib.ssm.s4d`)."""
    return _Gelu.apply(y)
