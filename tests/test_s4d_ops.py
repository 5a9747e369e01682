"""Unit tests of lib.ssm._s4d_kernels: the closed-form first and second derivatives of GELU, the
channel layer norm and the Toeplitz matrix, against autograd of the plain formulas (float64)."""

import pytest
import torch

from lib.ssm import _s4d_kernels as s4d_ops

DT = torch.float64


def plain_layer_norm(z):
    centred = z - z.mean(1, keepdim=True)
    return centred * torch.rsqrt((centred * centred).mean(1, keepdim=True) + s4d_ops.LAYER_NORM_EPS)


def plain_toeplitz(kernel):
    length = kernel.shape[-1]
    lag = torch.arange(length)[:, None] - torch.arange(length)[None, :]
    return torch.where(lag >= 0, kernel[..., lag.clamp(min=0)], torch.zeros((), dtype=kernel.dtype))


def derivatives(op, x, seed):
    """Value, first derivative (a VJP) and the derivative of its squared norm (a second
    derivative) of tanh(op(x)): the tanh makes a second derivative through a linear op non-zero."""
    gen = torch.Generator().manual_seed(seed)
    cot = torch.randn(op(x).shape, generator=gen, dtype=x.dtype)
    value = torch.tanh(op(x))
    (first,) = torch.autograd.grad(value, x, cot, create_graph=True)
    (second,) = torch.autograd.grad((first * first).sum(), x)
    return value.detach(), first.detach(), second


@pytest.mark.parametrize(
    "fast,plain,shape",
    [
        (s4d_ops.gelu, torch.nn.functional.gelu, (3, 4, 5)),
        (s4d_ops.channel_layer_norm, plain_layer_norm, (2, 6, 7)),
        (s4d_ops.toeplitz, plain_toeplitz, (2, 3, 9)),
    ],
)
def test_values_and_two_derivatives_match_autograd_of_the_plain_formula(fast, plain, shape, gen):
    x = torch.randn(shape, generator=gen, dtype=DT).requires_grad_()
    for got, want in zip(derivatives(fast, x, 1), derivatives(plain, x, 1), strict=True):
        # float64, the same formulas summed in another order: rounding only
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "fast,fallback,shape",
    [
        (s4d_ops.channel_layer_norm, s4d_ops._plain_channel_layer_norm, (2, 6, 7)),
        (s4d_ops.toeplitz, s4d_ops._plain_toeplitz, (2, 3, 9)),
    ],
)
def test_the_fallbacks_off_the_cpu_match_the_compiled_kernels(fast, fallback, shape, gen):
    # off the CPU (a GPU) these plain formulas replace the numba kernels; compared here on the CPU,
    # float64, values and two derivatives: the same formulas summed in another order
    x = torch.randn(shape, generator=gen, dtype=DT).requires_grad_()
    for got, want in zip(derivatives(fallback, x, 2), derivatives(fast, x, 2), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fn", [s4d_ops.gelu, s4d_ops.channel_layer_norm, s4d_ops.toeplitz])
def test_gradcheck_and_gradgradcheck(fn, gen):
    # finite differences in float64 against the closed forms, to second order
    x = torch.randn(2, 4, 5, generator=gen, dtype=DT).requires_grad_()
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


def test_float32_follows_float64(gen):
    z = torch.randn(3, 8, 11, generator=gen, dtype=DT)
    # the model's precision: float32 rounding of O(1) values
    torch.testing.assert_close(
        s4d_ops.channel_layer_norm(z.float()).double(), plain_layer_norm(z), rtol=1e-5, atol=1e-5
    )


def test_layer_norm_normalizes_each_position():
    z = torch.arange(24, dtype=DT).reshape(1, 4, 6) ** 1.5
    out = s4d_ops.channel_layer_norm(z)
    torch.testing.assert_close(out.mean(1), torch.zeros(1, 6, dtype=DT), rtol=0, atol=1e-12)
    # variance 1 up to the ε in the denominator: var / (var + ε) for each position
    var = z.var(1, unbiased=False)
    torch.testing.assert_close(out.pow(2).mean(1), var / (var + s4d_ops.LAYER_NORM_EPS))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: s4d_ops.gelu([1.0, 2.0]), "float32 or float64"),
        (lambda: s4d_ops.gelu(torch.ones(3, dtype=torch.int64)), "float32 or float64"),
        (lambda: s4d_ops.channel_layer_norm(torch.ones(4, 5, dtype=DT)), "3 dimensions"),
        (lambda: s4d_ops.toeplitz(torch.tensor(1.0, dtype=DT)), "at least 1"),
        (lambda: s4d_ops.toeplitz(None), "float32 or float64"),
        (lambda: s4d_ops.gelu(torch.tensor([1.0, float("nan")], dtype=DT)), "finite"),
        (lambda: s4d_ops.toeplitz(torch.zeros(2, 0, dtype=DT)), "empty"),
        # finite input whose channel sum overflows: the result is reported, not returned as nan
        (
            lambda: s4d_ops.channel_layer_norm(torch.full((1, 3, 2), 1.5e308, dtype=DT)),
            "not finite",
        ),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
