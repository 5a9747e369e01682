"""Tests of lib.poisoning.authors_protocol: the authors' protocol details for rows 2 of Tables 1
and 3.

The torch loop is checked against the compiled loop of lib.poisoning.dynamics (same protocol in
float64), the full-kernel gradient against autograd through a full d × d transition matrix, the
initialization against the structure of the authors' code, and the resampling estimate against an
exact enumeration.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from lib.poisoning import authors_protocol as ap
from lib.poisoning import dynamics as pd
from lib.poisoning.authors_protocol import _full_kernel_gradient, _step_gradients

DT = torch.float64


def test_float64_diagonal_independent_is_the_compiled_protocol():
    # Up to the fit (extra_steps = 0): after it the adaptive step grows like lr / softening as the
    # gradient vanishes, and rounding differences are no longer damped.
    setting = dataclasses.replace(pd.TABLE1_ROW2, extra_steps=0)
    ours = ap.train_authors(setting, [0, 1], max_steps=50_000)
    compiled = pd.train_dynamics(setting, [0, 1], max_steps=50_000)
    assert ours.trajectory.info["converged_step"] == compiled.trajectory.info["converged_step"]
    for key in "abc":
        # sums in another order over thousands of adaptive steps (measured: 4e-6)
        np.testing.assert_allclose(ours.trajectory.final[key].numpy(),
                                   compiled.trajectory.final[key].numpy(), atol=1e-4, rtol=0)


STEP_RULES = {"diagonal": 1e-6, "full": 1e-6, "squared": 1e-5}  # step_norm: the rule's softening


@pytest.mark.parametrize("init", ap.INITS)
@pytest.mark.parametrize("step_norm", list(STEP_RULES))
def test_compiled_engine_is_the_torch_loop_up_to_rounding(step_norm, init):
    # The same arithmetic with sums in another order: agreement to the compiled engine's promise
    # (1e-10, tests/test_fast_dynamics.py) over 100 steps, short of the fast growth of rounding
    # differences once the squared rule's step takes off (measured gap here: below 1e-14).
    kwargs = dict(step_norm=step_norm, softening=STEP_RULES[step_norm], init=init, max_steps=100)
    ours = ap.train_authors(pd.TABLE1_ROW2, [0, 3], engine="compiled", **kwargs)
    reference = ap.train_authors(pd.TABLE1_ROW2, [0, 3], **kwargs)
    for key in "abc":
        final = reference.trajectory.final[key].numpy()
        moved = np.abs(final - reference.trajectory.params[key][0])
        assert moved.max() > 1e-3  # the runs moved: two frozen runs would agree trivially
        np.testing.assert_allclose(ours.trajectory.final[key].numpy(),
                                   reference.trajectory.final[key].numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ours.trajectory.losses, reference.trajectory.losses, rtol=1e-10)
    assert ours.trajectory.info == reference.trajectory.info


@pytest.mark.parametrize("step_norm", list(STEP_RULES))
def test_compiled_engine_stops_where_the_torch_loop_does(step_norm):
    # Up to the fit, as in the test above against the compiled protocol: the same fitting step,
    # final states within the drift that thousands of adaptive steps give rounding (atol 1e-4).
    setting = dataclasses.replace(pd.TABLE1_ROW2, extra_steps=0)
    kwargs = dict(step_norm=step_norm, softening=STEP_RULES[step_norm], max_steps=50_000)
    ours = ap.train_authors(setting, [0, 1], engine="compiled", **kwargs)
    reference = ap.train_authors(setting, [0, 1], **kwargs)
    assert ours.trajectory.info["converged_step"] == reference.trajectory.info["converged_step"]
    assert all(step is not None for step in ours.trajectory.info["converged_step"])
    for key in "abc":
        np.testing.assert_allclose(ours.trajectory.final[key].numpy(),
                                   reference.trajectory.final[key].numpy(), atol=1e-4, rtol=0)


def test_full_kernel_gradient_is_autograd_through_a_full_matrix():
    generator = torch.Generator().manual_seed(0)
    d, kappa, n = 4, 5, 3
    a = torch.rand(d, generator=generator, dtype=DT) * 0.8
    b, c = (torch.rand(d, generator=generator, dtype=DT) for _ in range(2))
    x = torch.randn(n, kappa, generator=generator, dtype=DT)
    y = torch.randn(n, generator=generator, dtype=DT)
    matrix = torch.diag(a).requires_grad_(True)
    phi = torch.zeros(n, dtype=DT)
    power = torch.eye(d, dtype=DT)
    for m in range(kappa):  # phi_i = sum_m x_{i, kappa - m} C A^m B (1-indexed positions)
        phi = phi + x[:, kappa - 1 - m] * (c @ power @ b)
        power = power @ matrix
    loss = ((phi - y) ** 2).mean()
    (expected,) = torch.autograd.grad(loss, matrix)
    w = torch.full((1, n), 1.0 / n, dtype=DT)
    *_, z = _step_gradients(a[None], b[None], c[None], x[None], y[None], w)
    torch.testing.assert_close(_full_kernel_gradient(a[None], b[None], c[None], z)[0], expected,
                               rtol=1e-12, atol=1e-14)


def test_step_gradients_are_autograd():
    generator = torch.Generator().manual_seed(1)
    a, b, c = (torch.rand(2, 3, generator=generator, dtype=DT).requires_grad_(True)
               for _ in range(3))
    x = torch.randn(2, 4, 5, generator=generator, dtype=DT)
    y = torch.randn(2, 4, generator=generator, dtype=DT)
    w = torch.full((2, 4), 0.25, dtype=DT)
    loss, g_a, g_b, g_c, _ = _step_gradients(a, b, c, x, y, w)
    expected = torch.autograd.grad(loss.sum(), (a, b, c))
    for got, want in zip((g_a, g_b, g_c), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


def test_authors_init_shares_one_stream():
    setting = pd.TABLE3_ROW2
    params = ap.authors_init(setting, 5)
    z = np.random.RandomState(5).normal(size=setting.d**2)
    raw = np.abs(setting.sd_bc * z[: setting.d])
    np.testing.assert_allclose(params["c"].numpy(), raw[::-1], rtol=0, atol=0)  # same numbers
    b = params["b"].numpy() - setting.warm
    np.testing.assert_allclose(np.delete(b, 1), np.delete(np.sort(raw)[::-1], 1), atol=1e-15)
    a = params["a"].numpy() - setting.warm
    assert a[0] == pytest.approx(np.abs(setting.sd_a * np.diag(z.reshape(setting.d, -1))).max())
    gap = pd.tie_gap(setting.sd_a, setting.tie_exponent)
    assert a[0] - a[1] == pytest.approx(gap, rel=1e-6)
    assert b[0] - b[1] == pytest.approx(gap, rel=1e-6)


def test_authors_init_of_a_network_setting_has_the_mlp_layers():
    params = ap.authors_init(pd.TABLE1_ROW3, 0)
    h = pd.TABLE1_ROW3.hidden
    assert params["d_hidden"].shape == (h, h) and params["d_in"].shape == (h, 1)
    torch.testing.assert_close(params["d_in"].reshape(-1), params["d_out"].reshape(-1))


def test_mean_of_k_probability_matches_exact_enumeration():
    values = np.array([0.1, 0.3, 0.2, 0.9, 0.5, 0.4])
    means = [np.mean(s) for s in itertools.combinations(values, 3)]
    # 0.305: no subset mean lies within rounding of it, so the order of the sums cannot matter
    exact = np.mean(np.array(means) <= 0.305)
    estimate = ap.mean_of_k_probability(values, 0.305, k=3, draws=200_000, seed=1)
    # binomial standard error sqrt(p(1-p)/draws) < 1.2e-3: five of them
    assert abs(estimate - exact) < 6e-3, (estimate, exact)
    above = ap.mean_of_k_probability(values, 0.305, k=3, side="above", draws=200_000, seed=1)
    assert abs(above - np.mean(np.array(means) >= 0.305)) < 6e-3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ap.train_authors(pd.TABLE1_ROW3, [0]), "standalone SSM"),
        (lambda: ap.train_authors(pd.TABLE1_ROW2, [0], dtype="float16"), "dtype"),
        (lambda: ap.train_authors(pd.TABLE1_ROW2, [0], step_norm="max"), "step_norm"),
        (lambda: ap.train_authors(pd.TABLE1_ROW2, [0], init="tf"), "init"),
        (lambda: ap.train_authors(pd.TABLE1_ROW2, [0], engine="gpu"), "engine"),
        (lambda: ap.train_authors(pd.TABLE1_ROW2, [0], dtype="float32", engine="compiled"),
         "float64"),
        (lambda: ap.authors_init("setting", 0), "setting must be a DynamicsSetting"),
        (lambda: ap.mean_of_k_probability([0.1, 0.2], 0.1, k=3), "k"),
        (lambda: ap.mean_of_k_probability([0.1, math.nan], 0.1), "values"),
        (lambda: ap.mean_of_k_probability([0.1, 0.2], 0.1, k=1, side="left"), "side"),
    ],
)
def test_bad_inputs_raise_value_errors_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()
