"""Unit tests of lib.s4d: the S4D kernel against its recurrence, the Toeplitz convolution, and
independent runs trained in one batch."""

import numpy as np
import pytest
import torch

from lib import s4d
from lib.data import digits_split

DT = torch.float64


def recurrence_kernel(log_dt, log_a_re, a_im, c_re, c_im, length):
    """Impulse response of the ZOH-discretized diagonal SSM, by running the recurrence."""
    a = torch.complex(-torch.exp(log_a_re), a_im)
    dt = torch.exp(log_dt)[..., None]
    a_bar = torch.exp(dt * a)
    b_bar = (a_bar - 1) / a  # ZOH with B = 1: (exp(ΔA) − 1) A⁻¹ B
    c = torch.complex(c_re, c_im)
    state = torch.zeros_like(a_bar)
    out = []
    for step in range(length):
        state = a_bar * state + b_bar * (1.0 if step == 0 else 0.0)
        out.append(2 * (c * state).sum(-1).real)
    return torch.stack(out, -1)


def test_kernel_matches_the_recurrence(gen):
    h, half, length = 3, 4, 20
    log_dt = torch.rand(h, generator=gen, dtype=DT) * 3 - 4
    log_a_re = torch.randn(h, half, generator=gen, dtype=DT) * 0.3 - 0.7
    a_im = torch.rand(h, half, generator=gen, dtype=DT) * 10
    c_re, c_im = torch.randn(2, h, half, generator=gen, dtype=DT)
    closed = s4d.s4d_kernel(log_dt, log_a_re, a_im, c_re, c_im, length)
    loop = recurrence_kernel(log_dt, log_a_re, a_im, c_re, c_im, length)
    # float64, two computation paths (powers vs repeated products): rounding only
    torch.testing.assert_close(closed, loop, rtol=1e-10, atol=1e-12)


def test_toeplitz_product_is_the_causal_convolution(gen):
    kernel = torch.randn(2, 9, generator=gen, dtype=DT)
    u = torch.randn(2, 9, generator=gen, dtype=DT)
    y = (s4d.toeplitz(kernel) @ u[..., None])[..., 0]
    for i in range(2):
        ref = np.convolve(kernel[i].numpy(), u[i].numpy())[:9]
        np.testing.assert_allclose(y[i].numpy(), ref, rtol=1e-12, atol=1e-12)


def test_logits_of_a_batch_of_runs_are_those_of_each_run_alone(gen):
    cfg = s4d.S4DConfig(channels=4, state=4, layers=2)
    p = s4d.init_params(cfg, [0, 1, 2])
    x = torch.randn(5, 16, generator=gen)
    out = s4d.logits(p, x)
    assert out.shape == (3, 5, 10)
    for r in range(3):
        # float32, a run inside a batch vs alone: same arithmetic, kernels may round differently
        torch.testing.assert_close(out[r : r + 1], s4d.logits(s4d.select_run(p, r), x))
    assert not torch.allclose(out[0], out[1])  # different seeds, different networks


def test_the_last_input_reaches_the_output_only_through_the_pooled_last_position(gen):
    # Causality of the Toeplitz convolution: the last input element moves only the last output
    # position, by K_0 (same computation path twice: exact zeros elsewhere).
    kernel = torch.randn(1, 3, 16, generator=gen)
    u = torch.randn(1, 3, 16, 2, generator=gen)
    bumped = u.clone()
    bumped[:, :, -1] += 1.0
    t = s4d.toeplitz(kernel)
    diff = t @ bumped - t @ u
    assert torch.equal(diff[:, :, :-1], torch.zeros_like(diff[:, :, :-1]))
    torch.testing.assert_close(diff[:, :, -1], kernel[..., :1].expand(1, 3, 2))


def test_init_is_deterministic_and_seeds_differ():
    cfg = s4d.S4DConfig(channels=4, state=4, layers=2)
    a, b = s4d.init_params(cfg, [3, 4]), s4d.init_params(cfg, [3])
    for name in a:
        assert torch.equal(a[name][:1], b[name])  # same draw, one path
    assert not torch.equal(a["w0"][0], a["w0"][1])


def test_batched_runs_train_as_if_alone():
    x, y, *_ = digits_split()
    x, y = x[:96], y[:96]
    cfg = s4d.S4DConfig(channels=4, state=4, layers=1)
    tc = s4d.TrainConfig(epochs=2, batch=32, lr=1e-2)
    both = s4d.train(cfg, x, y, [1, 2], tc)
    alone = s4d.train(cfg, x, y, [2], tc)
    for name in both:
        # float32 run inside a batch vs alone: the same arithmetic, rounding may differ by kernels
        torch.testing.assert_close(both[name][1:], alone[name], rtol=1e-4, atol=1e-5)


def test_training_learns_the_digits():
    x, y, xt, yt, _ = digits_split()
    p = s4d.train(
        s4d.S4DConfig(), x[:400], y[:400], [0], s4d.TrainConfig(epochs=6, batch=16, lr=3e-2)
    )
    # chance is 0.1; a model that learns anything from 400 images and 150 steps is far above it
    assert float(s4d.accuracy(p, xt, yt)[0]) > 0.3


def test_digits_split_is_a_partition():
    x, y, xt, yt, (lo, hi) = digits_split()
    assert x.shape == (1437, 64) and xt.shape == (360, 64)
    assert float(x.min()) == pytest.approx(lo) and float(x.max()) == pytest.approx(hi)
    assert abs(float(x.mean())) < 1e-12


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"state": 5}, "state"),
        ({"channels": 0}, "channels"),
        ({"dt_min": 1.0, "dt_max": 0.1}, "dt_min"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        s4d.S4DConfig(**kwargs)


def test_bad_training_input():
    x, y, *_ = digits_split()
    cfg = s4d.S4DConfig(channels=4, state=4, layers=1)
    with pytest.raises(ValueError, match="labels"):
        s4d.train(cfg, x[:10], y[:9], [0])
    with pytest.raises(ValueError, match="float64"):
        s4d.train(cfg, x[:10].float(), y[:10], [0])
    with pytest.raises(ValueError, match="seeds"):
        s4d.train(cfg, torch.stack([x[:10]] * 2), torch.stack([y[:10]] * 2), [0])
    with pytest.raises(ValueError, match="labels"):
        s4d.train(cfg, x[:10], y[:10] + 10, [0])
    with pytest.raises(ValueError, match="run"):
        s4d.select_run(s4d.init_params(cfg, [0]), 1)


def test_a_diverging_training_is_reported_not_returned():
    x, y, *_ = digits_split()
    cfg = s4d.S4DConfig(channels=4, state=4, layers=1)
    # finite float64 inputs beyond float32's range overflow in the victim's precision: the training
    # must say so (NumericalFailure, a ValueError) instead of returning nan parameters
    with pytest.raises(ValueError, match="not finite"):
        s4d.train(cfg, x[:64] * 1e300, y[:64], [0], s4d.TrainConfig(epochs=1, batch=32))
