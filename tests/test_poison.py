"""Unit tests of lib.poisoning.theorem1: the Theorem-1 closed forms against lib.ssm.diagonal and
autograd, the flows against the paper's lemmas, and the dynamics experiments against single runs."""

import math

import numpy as np
import pytest
import torch
from conftest import DT, ones
from scipy.optimize import brentq

from lib.engine.flow import gradient_descent
from lib.poisoning.dynamics import (
    FIGURE2_SSM,
    FIGURE2_SSM_MLP,
    TABLE1_ROW3,
    dynamics_data,
    dynamics_init,
    ssm_mlp_loss_gradient,
    ssm_mlp_output,
    train_dynamics,
)
from lib.poisoning.theorem1 import (
    conserved_quantity,
    escape_time,
    saddle_hessian_eigenvalues,
    saddle_point,
    theorem1_error,
    theorem1_flow,
    theorem1_init,
    theorem1_loss,
    theorem1_lower_bound,
    theorem1_table,
    theorem1_training_set,
    theorem1_velocity,
    tie_gap,
)
from lib.ssm.diagonal import (
    SSM,
    square_loss,
    ssm_output,
    ssm_recurrence,
    theorem1_teacher,
    unit_impulse,
)

# --- initialization protocol ------------------------------------------------------------------


@pytest.mark.parametrize("init_scale,exponent", [(1e-3, 5.0), (1e-2, 20.0), (0.05, 0.5), (1.0, 3)])
def test_tie_gap_formula(init_scale, exponent):
    expected = 0.05 * math.exp(-exponent * math.log10(1.0 / init_scale))
    assert tie_gap(init_scale, exponent) == pytest.approx(expected, rel=1e-14)


def test_tie_gap_of_table1():
    # 0.05 * exp(-15) = 1.5295e-8
    assert tie_gap(1e-3, 5) == pytest.approx(1.53e-8, rel=1e-3)
    assert tie_gap(1e-3, 0) == 0.05


@pytest.mark.parametrize("d,seed", [(2, 0), (6, 3), (10, 242)])
def test_theorem1_init_protocol(d, seed):
    scale, diff = 0.01, 1e-7
    a = theorem1_init(d, seed, init_scale=scale, diff=diff)
    assert isinstance(a, torch.Tensor) and a.dtype == DT and a.shape == (d,)
    # numpy RandomState(seed).rand, scaled, sorted descending, then a_2 := a_1 - diff
    expected = np.sort(np.random.RandomState(seed).rand(d) * scale)[::-1].copy()
    expected[1] = expected[0] - diff
    np.testing.assert_array_equal(a.numpy(), expected)  # same numpy draws and one subtraction
    assert float(a[0] - a[1]) == pytest.approx(diff, abs=2 * np.spacing(float(a[0])))
    assert bool((a >= 0).all()) and bool((a < scale).all())
    assert bool((a[0] >= a[1:]).all())
    assert bool((a[2:].diff() <= 0).all())
    # reproducible, and another seed gives another draw
    torch.testing.assert_close(
        theorem1_init(d, seed, init_scale=scale, diff=diff), a, rtol=0, atol=0
    )
    assert not torch.equal(theorem1_init(d, seed + 1, init_scale=scale, diff=diff), a)


def test_theorem1_init_relative_gap_and_natural_gap():
    d, seed, scale = 6, 4, 0.02
    natural = np.sort(np.random.RandomState(seed).rand(d) * scale)[::-1]
    np.testing.assert_array_equal(theorem1_init(d, seed, init_scale=scale).numpy(), natural)
    a = theorem1_init(d, seed, init_scale=scale, relative_gap=1e-3)
    assert float((a[0] - a[1]) / a[0]) == pytest.approx(1e-3, rel=1e-9)
    np.testing.assert_array_equal(a[[0, *range(2, d)]].numpy(), natural[[0, *range(2, d)]])
    tied = theorem1_init(d, seed, init_scale=scale, relative_gap=0.0)
    assert float(tied[0]) == float(tied[1])


def test_theorem1_training_set_labels_are_the_teachers():
    d, kappa = 5, 7
    teacher = theorem1_teacher(d)
    x, y = theorem1_training_set(d, kappa, poisoned=False)
    torch.testing.assert_close(x, unit_impulse(kappa, 1), rtol=0, atol=0)
    torch.testing.assert_close(y, torch.ones(1, dtype=DT), rtol=0, atol=1e-14)
    torch.testing.assert_close(y, ssm_recurrence(*teacher, x), rtol=0, atol=1e-14)
    xp, yp = theorem1_training_set(d, kappa, poisoned=True)
    assert xp.shape == (2, kappa) and yp.shape == (2,)
    torch.testing.assert_close(xp[0], unit_impulse(kappa, 1)[0], rtol=0, atol=0)
    torch.testing.assert_close(xp[1], unit_impulse(kappa, kappa - 1)[0], rtol=0, atol=0)
    torch.testing.assert_close(yp, torch.ones(2, dtype=DT), rtol=0, atol=1e-14)
    torch.testing.assert_close(yp, ssm_recurrence(*teacher, xp), rtol=0, atol=1e-14)


# --- closed forms of the Theorem-1 student -------------------------------------------------------


@pytest.mark.parametrize("poisoned", [False, True])
@pytest.mark.parametrize("d,kappa", [(2, 3), (6, 7), (10, 9)])
def test_theorem1_loss_equals_square_loss(gen, poisoned, d, kappa):
    a = (torch.rand(3, d, generator=gen, dtype=DT) * 2 - 1) * 0.9
    x, y = theorem1_training_set(d, kappa, poisoned=poisoned)
    expected = square_loss(SSM(a, ones(3, d), ones(3, d)), x, y)
    got = theorem1_loss(a, kappa, poisoned=poisoned)
    assert got.shape == (3,)
    torch.testing.assert_close(got, expected, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(theorem1_loss(a[1], kappa, poisoned=poisoned), expected[1])


@pytest.mark.parametrize("poisoned", [False, True])
@pytest.mark.parametrize("d,kappa", [(2, 3), (6, 7), (10, 9)])
def test_theorem1_velocity_is_minus_gradient(gen, poisoned, d, kappa):
    a = ((torch.rand(3, d, generator=gen, dtype=DT) * 2 - 1) * 0.9).requires_grad_(True)
    (grad,) = torch.autograd.grad(theorem1_loss(a, kappa, poisoned=poisoned).sum(), a)
    velocity = theorem1_velocity(a.detach(), kappa, poisoned=poisoned)
    assert velocity.shape == (3, d)
    torch.testing.assert_close(velocity, -grad, rtol=1e-12, atol=1e-14)


# --- the flows ---------------------------------------------------------------------------------


def test_clean_flow_conserves_q():
    kappa = 7
    a0 = torch.tensor([0.3, 0.25, 0.2, 0.15, 0.1, 0.05], dtype=DT)
    horizon = 100 * escape_time(0.3, kappa)
    traj = theorem1_flow(a0, kappa, poisoned=False, horizon=horizon, points=60)
    assert traj.losses[-1] < 1e-20  # the flow did escape and fit
    a = torch.from_numpy(traj["a"])
    assert float(a[-1, 0]) > 0.9 and float(a[0, 0]) == 0.3  # the largest entry moved a lot
    q = conserved_quantity(a, kappa)
    assert q.shape == (60, 6)
    assert float((q - q[0]).abs().max()) <= 1e-9 * float(q[0].abs().max())
    # Q_j = a_j^{-(kappa-3)} - a_1^{-(kappa-3)}, computed here from the definition
    expected = a0 ** (-(kappa - 3)) - a0[0] ** (-(kappa - 3))
    torch.testing.assert_close(q[0], expected, rtol=1e-14, atol=0)


def test_flow_tolerances_set_the_drift_of_the_conserved_quantity():
    # The drift of Q_2 along the clean flow is the solver's error: it shrinks with rtol (about in
    # proportion; a factor 10 is asked for a 100-fold tighter tolerance), on both engines.
    kappa = 7
    a0 = torch.tensor([0.05, 0.0499, 0.03, 0.02, 0.01], dtype=DT)
    horizon = 100 * escape_time(0.05, kappa)
    drift = {}
    for rtol in (1e-8, 1e-10):
        traj = theorem1_flow(a0, kappa, poisoned=False, horizon=horizon, points=50, rtol=rtol,
                             atol=1e-15)
        q = conserved_quantity(torch.from_numpy(traj["a"]), kappa)
        drift[rtol] = float((q[:, 1] - q[0, 1]).abs().max())
    assert drift[1e-10] < drift[1e-8] / 10, drift
    loose = theorem1_flow(a0, kappa, poisoned=False, horizon=horizon, points=5, rtol=1e-8,
                          engine="torch")
    tight = theorem1_flow(a0, kappa, poisoned=False, horizon=horizon, points=5)
    np.testing.assert_allclose(loose["a"], tight["a"], rtol=1e-5)


def test_escape_time_formula():
    assert escape_time(0.1, 7) == pytest.approx(0.1**-4 / (2 * 6 * 4), rel=1e-14)
    assert escape_time(1e-3, 9) == pytest.approx(1e-3**-6 / (2 * 8 * 6), rel=1e-14)


def test_escape_time_predicts_the_plateau():
    """a_1 crosses 1/2 inside bounds derived from eq. (21), and those bounds bracket t*.

    With r = 1 - Σ a_k^{κ-1} in (0, 1], d/dt a_1^{-(κ-3)} = -2(κ-1)(κ-3) r. Since r <= 1 the
    crossing of 1/2 comes no earlier than t*(1 - (2 a_1(0))^{κ-3}); since the order is kept and
    every a_k <= a_1 <= 1/2 before the crossing, r >= 1 - d 2^{-(κ-1)} and it comes no later than
    t* / (1 - d 2^{-(κ-1)}).
    """
    d, kappa = 6, 7
    a0 = torch.tensor([1e-2, 9e-3, 8e-3, 7e-3, 6e-3, 5e-3], dtype=DT)
    t_star = escape_time(1e-2, kappa)
    lower = t_star * (1 - (2 * 1e-2) ** (kappa - 3))
    upper = t_star / (1 - d * 2.0 ** (-(kappa - 1)))
    assert upper / lower < 1.12  # the check is sharp
    traj = theorem1_flow(a0, kappa, poisoned=False, horizon=4 * t_star, points=400)
    a1 = traj["a"][:, 0]
    assert a1[-1] > 0.5
    crossing = int(np.argmax(a1 >= 0.5))
    assert crossing > 0
    assert traj.times[crossing] >= lower
    assert traj.times[crossing - 1] <= upper
    # the grid is fine enough for the bracket to mean something
    assert traj.times[crossing] / traj.times[crossing - 1] < 1.1


def test_poisoned_flow_fits_and_keeps_the_order():
    kappa = 7
    a0 = torch.tensor([0.3, 0.25, 0.2, 0.15, 0.1, 0.05], dtype=DT)
    traj = theorem1_flow(a0, kappa, poisoned=True, horizon=1e5, points=80)
    assert traj.losses[-1] < 1e-20
    a = traj["a"]
    assert (np.diff(a, axis=1) < 0).all()  # Lemma 2: a_1 > a_2 > ... at every recorded time
    x, y = theorem1_training_set(6, kappa, poisoned=True)
    final = torch.from_numpy(a[-1])
    torch.testing.assert_close(ssm_output(final, ones(6), ones(6), x), y, rtol=0, atol=1e-9)


def test_theorem1_flow_batched_equals_single():
    kappa = 7
    a0 = torch.tensor([[0.3, 0.2, 0.1], [0.25, 0.24, 0.05]], dtype=DT)
    both = theorem1_flow(a0, kappa, poisoned=True, horizon=100.0, points=5)
    assert both["a"].shape == (5, 2, 3)
    for r in range(2):
        one = theorem1_flow(a0[r], kappa, poisoned=True, horizon=100.0, points=5)
        # different solver steps; local tolerance rtol = 1e-10 leaves global errors ~1e-9
        np.testing.assert_allclose(both["a"][:, r], one["a"], rtol=0, atol=1e-8)


# --- the compiled flow against the engine's ------------------------------------------------------


@pytest.mark.parametrize("kappa", [3, 7, 9])
@pytest.mark.parametrize("poisoned", [False, True])
def test_compiled_velocity_and_jacobian_are_the_closed_forms(kappa, poisoned):
    """The compiled right-hand side is e^τ times eq. (21)/(23), its Jacobian e^τ times minus the
    autograd Hessian of eq. (20)/(22), block diagonal over stacked runs (to rounding: 1e-12)."""
    from lib.poisoning.theorem1 import _theorem1_log_time_jacobian, _theorem1_log_time_velocity

    runs, d, tau = 3, 6, 1.7
    a = torch.rand(runs, d, generator=torch.Generator().manual_seed(kappa), dtype=DT) * 0.8 - 0.2
    flat = a.reshape(-1).numpy().copy()
    velocity = _theorem1_log_time_velocity(tau, flat, d, kappa, poisoned)
    expected = math.exp(tau) * theorem1_velocity(a, kappa, poisoned=poisoned).reshape(-1).numpy()
    np.testing.assert_allclose(velocity, expected, rtol=1e-12, atol=1e-14)
    jacobian = _theorem1_log_time_jacobian(tau, flat, d, kappa, poisoned)
    for r in range(runs):
        hessian = torch.autograd.functional.hessian(
            lambda x: theorem1_loss(x, kappa, poisoned=poisoned), a[r]
        ).numpy()
        block = jacobian[r * d : (r + 1) * d, r * d : (r + 1) * d]
        np.testing.assert_allclose(block, -math.exp(tau) * hessian, rtol=1e-12, atol=1e-13)
        off = np.delete(jacobian[r * d : (r + 1) * d], np.s_[r * d : (r + 1) * d], axis=1)
        assert not off.any()  # runs are independent


@pytest.mark.parametrize("seed", [242, 243])
@pytest.mark.parametrize("poisoned,horizon", [(False, 1e11), (True, 3.0)])
def test_compiled_flow_equals_the_engine_over_hundreds_of_steps(seed, poisoned, horizon):
    """Same solver, same tolerances, same equations: while the solver takes the same steps (a few
    hundred here, ~2700 evaluations for the clean plateau and escape), only rounding in the
    arithmetic differs, so the trajectories agree to 1e-10 relative (measured: below 1e-12)."""
    a0 = theorem1_init(10, seed, init_scale=1e-3, diff=tie_gap(1e-3, 5))
    compiled = theorem1_flow(a0, 7, poisoned=poisoned, horizon=horizon, points=200)
    engine = theorem1_flow(a0, 7, poisoned=poisoned, horizon=horizon, points=200, engine="torch")
    assert compiled.info["nfev"] > 150
    np.testing.assert_allclose(compiled["a"], engine["a"], rtol=1e-10, atol=0)
    np.testing.assert_allclose(compiled.losses, engine.losses, rtol=1e-8, atol=1e-25)
    np.testing.assert_array_equal(compiled.times, engine.times)


def test_compiled_flow_agrees_with_the_engine_past_the_saddle():
    """The poisoned flows of Table 1 to t = 1e4 pass the saddle s·1, whose weak instability
    (growth e^{|λ−|t}, |λ−| ≈ 3e-3, Lemma 8) magnifies each solver step's error (rtol = 1e-10)
    into global errors of some 1e-7 for either path (measured against rtol = 1e-13: 1e-7 to
    5e-7), and the two paths choose slightly different steps. They agree to that accuracy:
    states to 1e-6, the table's error Gen_20/d to 1e-5 relative; batched runs likewise."""
    a0 = torch.stack(
        [theorem1_init(10, s, init_scale=1e-3, diff=tie_gap(1e-3, 5)) for s in (242, 243, 244)]
    )
    for poisoned, horizon in ((False, 1e11), (True, 1e4)):
        compiled = theorem1_flow(a0, 7, poisoned=poisoned, horizon=horizon, points=50)
        for r in range(3):
            engine = theorem1_flow(
                a0[r], 7, poisoned=poisoned, horizon=horizon, points=50, engine="torch"
            )
            np.testing.assert_allclose(compiled["a"][:, r], engine["a"], rtol=0, atol=1e-6)
            error = theorem1_error(torch.from_numpy(compiled["a"][-1, r]), 10).item()
            expected = theorem1_error(torch.from_numpy(engine["a"][-1]), 10).item()
            assert error == pytest.approx(expected, rel=1e-5)


def test_compiled_flow_reports_what_it_cannot_integrate():
    from lib.engine.validation import NumericalFailure

    with pytest.raises(ValueError, match="engine"):
        theorem1_flow(ones(3) * 0.01, 7, poisoned=False, horizon=1.0, engine="numba")
    with pytest.raises(ValueError, match="log time"):
        theorem1_flow(ones(3) * 0.01, 7, poisoned=False, horizon=1e250)
    with pytest.raises(NumericalFailure, match="float64"):  # a^6 overflows at the start
        theorem1_flow(ones(3) * 1e60, 7, poisoned=False, horizon=1.0)


# --- the saddle of the poisoned loss (Lemmas 5-9) ----------------------------------------------

SADDLE_SETTINGS = [(8, 7), (10, 7), (20, 9)]


def _independent_saddle(d, kappa):
    """The root of the poisoned velocity (23) on the diagonal a = s·1, in (1/(2d), 3/(2d))."""

    def velocity(s):
        return (kappa - 1) * (1 - d * s ** (kappa - 1)) * s ** (kappa - 2) + (1 - d * s)

    return brentq(velocity, 0.5 / d, 1.5 / d, xtol=1e-16)


@pytest.mark.parametrize("d,kappa", SADDLE_SETTINGS)
def test_saddle_hessian_spectrum_from_autograd(d, kappa):
    """Lemmas 8-9 checked on the autograd Hessian of theorem1_loss at an independently found s·1.

    From eq. (22), H = [(κ-1)² s^{2κ-4} + 1] 11ᵀ - (κ-1)(κ-2)(1 - d s^{κ-1}) s^{κ-3} I at s·1, so
    λ_- = (κ-1)(κ-2)(d s^{κ-1} - 1) s^{κ-3} (d-1 times) and
    λ_+ = λ_- + d (κ-1)² s^{2κ-4} + d (once, eigenvector 1).
    """
    s = _independent_saddle(d, kappa)
    velocity = theorem1_velocity(s * ones(d), kappa, poisoned=True)
    torch.testing.assert_close(velocity, torch.zeros(d, dtype=DT), rtol=0, atol=1e-14)
    hessian = torch.autograd.functional.hessian(
        lambda a: theorem1_loss(a, kappa, poisoned=True), s * ones(d)
    )
    eigenvalues = torch.linalg.eigvalsh(hessian)  # ascending
    minus = (kappa - 1) * (kappa - 2) * (d * s ** (kappa - 1) - 1) * s ** (kappa - 3)
    plus = minus + d * (kappa - 1) ** 2 * s ** (2 * kappa - 4) + d
    expected = torch.tensor([minus] * (d - 1) + [plus], dtype=DT)
    torch.testing.assert_close(eigenvalues, expected, rtol=1e-9, atol=1e-13)
    torch.testing.assert_close(hessian @ ones(d), plus * ones(d), rtol=1e-12, atol=1e-12)
    # a strict saddle: λ_- in (-1, 0), hence λ_+ > d - 1, what Lemma 9's proof reaches. Lemma 9
    # bounds the eigenvalues of Lemma 8, those of the halved loss ℓ_{S2} of eq. (22), so its printed
    # "λ_+ > 2d - 1" fails (λ_+ ≈ d; the chapter files it so). Only the Hessian 2H of the un-halved
    # loss (1 - Σ a^{κ-1})² + (1 - Σ a)² would clear 2d - 1, a reading the lemma does not use.
    assert -1 < eigenvalues[0] and eigenvalues[-2] < 0
    assert eigenvalues[-1] > d - 1
    assert eigenvalues[-1] < 2 * d - 1


@pytest.mark.parametrize("d,kappa", SADDLE_SETTINGS)
def test_saddle_point_is_a_critical_point(d, kappa):
    s = saddle_point(d, kappa)
    assert 0.5 / d < s < 1.5 / d
    assert s == pytest.approx(_independent_saddle(d, kappa), rel=1e-13)
    velocity = theorem1_velocity(s * ones(d), kappa, poisoned=True)
    torch.testing.assert_close(velocity, torch.zeros(d, dtype=DT), rtol=0, atol=1e-14)


@pytest.mark.parametrize("d,kappa", SADDLE_SETTINGS)
def test_saddle_hessian_eigenvalues_match_autograd(d, kappa):
    plus, minus = saddle_hessian_eigenvalues(d, kappa)
    s = saddle_point(d, kappa)
    hessian = torch.autograd.functional.hessian(
        lambda a: theorem1_loss(a, kappa, poisoned=True), s * ones(d)
    )
    eigenvalues = torch.linalg.eigvalsh(hessian)  # ascending
    expected = torch.tensor([minus] * (d - 1) + [plus], dtype=DT)
    torch.testing.assert_close(eigenvalues, expected, rtol=1e-9, atol=1e-13)
    assert -1 < minus < 0 and plus > d - 1


# --- errors and the table ---------------------------------------------------------------------


def _normalized_error(a, d, length=20):
    """max_{k<length} |Σ_j a_j^k − h*_k| / d with h* = (d, 1, 1, ...), by a plain loop."""
    a = np.asarray(a, dtype=np.float64)
    teacher = np.array([d] + [1.0] * (length - 1))
    student = np.array([np.sum(a**k) for k in range(length)])
    return np.abs(student - teacher).max() / d


@pytest.mark.parametrize("d,kappa", [(2, 3), (10, 7), (20, 9)])
def test_theorem1_lower_bound_formula(d, kappa):
    expected = min(0.1, (1 - 0.6 ** (1 / (kappa - 1))) / (9 * d))
    assert theorem1_lower_bound(d, kappa) == pytest.approx(expected, rel=1e-14)
    assert 0 < theorem1_lower_bound(d, kappa) <= 0.1


def test_theorem1_error(gen):
    d = 6
    teacher_like = torch.zeros(d, dtype=DT)
    teacher_like[0] = 1.0
    assert float(theorem1_error(teacher_like, d)) == pytest.approx(0.0, abs=1e-15)
    # a = 0 still has h_0 = Σ_j b_j c_j = d; it misses h*_k = 1 for k >= 1: error 1, normalized 1/d
    assert float(theorem1_error(torch.zeros(d, dtype=DT), d)) == pytest.approx(1 / d, rel=1e-15)
    a = (torch.rand(4, 3, d, generator=gen, dtype=DT) * 2 - 1) * 0.9
    errors = theorem1_error(a, d)
    assert errors.shape == (4, 3)
    for i in range(4):
        for j in range(3):
            assert float(errors[i, j]) == pytest.approx(_normalized_error(a[i, j], d), rel=1e-12)
    short = theorem1_error(a[0, 0], d, length=3)
    assert float(short) == pytest.approx(_normalized_error(a[0, 0], d, length=3), rel=1e-12)


def test_theorem1_table_cheap_setting():
    d, kappa, seeds = 8, 7, [0, 5]
    scale, diff = 0.05, 1e-4
    table = theorem1_table(d, kappa, seeds, init_scale=scale, diff=diff, horizons=(1e5, 1e5))
    assert {"clean", "poisoned", "per_seed", "final", "loss", "seeds"} <= set(table)
    assert table["seeds"] == seeds
    for key in ("clean", "poisoned"):
        assert table["per_seed"][key].shape == (2,)
        assert table["final"][key].shape == (2, d)
        assert table["loss"][key].shape == (2,)
        assert table[key] == pytest.approx(float(np.mean(table["per_seed"][key])), rel=1e-14)
        assert (table["loss"][key] < 1e-20).all()
        for s in range(2):
            final = table["final"][key][s]
            expected = _normalized_error(final, d)
            assert table["per_seed"][key][s] == pytest.approx(expected, rel=1e-12)
            assert theorem1_loss(final, kappa, poisoned=key == "poisoned") < 1e-20
    # the final students come from the documented initialization and flow
    a0 = theorem1_init(d, 5, init_scale=scale, diff=diff)
    flow = theorem1_flow(a0, kappa, poisoned=True, horizon=1e5, points=2)
    np.testing.assert_allclose(table["final"]["poisoned"][1], flow["a"][-1], rtol=0, atol=1e-14)


def test_theorem1_table_reproduces_paper_table1():
    """Slutzky et al. 2025, Table 1 (d = 10, κ = 7): clean 1.27e-3, poisoned 5.01e-2."""
    d, kappa = 10, 7
    diff = 0.05 * math.exp(-5 * math.log10(1000))
    table = theorem1_table(d, kappa, (242, 243, 244, 246), init_scale=1e-3, diff=diff)
    assert table["clean"] == pytest.approx(1.27e-3, rel=0.02)
    assert table["poisoned"] == pytest.approx(5.01e-2, rel=0.02)
    # no comparison with the Theorem 1 floor here: the clean error exceeds it too (these starts are
    # outside the theorem's initialization set), so such an assert could not tell the two apart


# --- dynamics experiments ------------------------------------------------------------------------


@pytest.mark.parametrize("setting", [FIGURE2_SSM, FIGURE2_SSM_MLP], ids=["ssm", "ssm_mlp"])
@pytest.mark.parametrize("seed", [0, 105])
def test_dynamics_init_protocol(setting, seed):
    params = dynamics_init(setting, seed)
    d = setting.d
    expected_keys = {"a", "b", "c"}
    if setting is FIGURE2_SSM_MLP:
        expected_keys |= {"d_in", "d_hidden", "d_out"}
    assert set(params) == expected_keys
    for name in "abc":
        assert params[name].shape == (d,) and params[name].dtype == DT
    # the documented draws, from numpy.random.RandomState(seed): the same numpy arithmetic as
    # lib, one computation path, hence exact comparisons
    rng = np.random.RandomState(seed)
    gap_a = tie_gap(setting.sd_a, setting.tie_exponent)
    gap_b = tie_gap(setting.sd_bc, setting.tie_exponent)
    a = np.sort(np.abs(rng.normal(0.0, setting.sd_a, d)))[::-1].copy()
    b = np.sort(np.abs(rng.normal(0.0, setting.sd_bc, d)))[::-1].copy()
    c = np.abs(rng.normal(0.0, setting.sd_bc, d))
    np.testing.assert_array_equal(params["a"][[0, *range(2, d)]].numpy(), a[[0, *range(2, d)]])
    np.testing.assert_array_equal(params["b"][[0, *range(2, d)]].numpy(), b[[0, *range(2, d)]])
    np.testing.assert_array_equal(params["c"].numpy(), c)  # unsorted
    for name, gap in (("a", gap_a), ("b", gap_b)):
        top = float(params[name][0])
        assert top - float(params[name][1]) == pytest.approx(gap, abs=2 * np.spacing(top))
    if setting is FIGURE2_SSM_MLP:
        h = setting.hidden
        for name, shape in (("d_in", (h, 1)), ("d_hidden", (h, h)), ("d_out", (1, h))):
            assert params[name].shape == shape and params[name].dtype == DT
            np.testing.assert_array_equal(
                params[name].numpy(), rng.normal(0.0, setting.sd_mlp, shape)
            )
    again = dynamics_init(setting, seed)
    for name in params:
        torch.testing.assert_close(again[name], params[name], rtol=0, atol=0)


@pytest.mark.parametrize("setting", [FIGURE2_SSM, FIGURE2_SSM_MLP], ids=["ssm", "ssm_mlp"])
def test_dynamics_data(setting):
    seed, nb, ns = 7, setting.n_baseline, setting.n_special
    x_clean, y_clean = dynamics_data(setting, seed, special_scale=None)
    x, y = dynamics_data(setting, seed, special_scale=1.0)
    x2, _ = dynamics_data(setting, seed, special_scale=2.5)
    assert x_clean.shape == (nb, setting.kappa) and y_clean.shape == (nb,)
    assert x.shape == (nb + ns, setting.kappa) and y.shape == (nb + ns,)
    torch.testing.assert_close(x[:nb], x_clean, rtol=0, atol=0)
    torch.testing.assert_close(x2[:nb], x_clean, rtol=0, atol=0)
    torch.testing.assert_close(x2[nb:], 2.5 * x[nb:], rtol=0, atol=0)
    special = [p - 1 for p in setting.special_positions]
    baseline = [p - 1 for p in setting.baseline_positions]
    others = [k for k in range(setting.kappa) if k not in special]
    assert (x[nb:, special] != 0).all() and (x[nb:, others] == 0).all()
    assert (x[:nb, baseline] != 0).all()
    assert (x[:nb, [k for k in range(setting.kappa) if k not in baseline]] == 0).all()
    total = x.sum(-1)
    if setting.hidden is None:
        expected = total
    else:
        expected = 0.5 * setting.hidden * torch.clamp(total, min=0.0)
    torch.testing.assert_close(y, expected, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(y_clean, expected[:nb], rtol=1e-14, atol=1e-14)


def _mlp_params(gen, runs, d, hidden):
    params = {
        "a": (torch.rand(runs, d, generator=gen, dtype=DT) * 2 - 1) * 0.9,
        "b": torch.randn(runs, d, generator=gen, dtype=DT),
        "c": torch.randn(runs, d, generator=gen, dtype=DT),
        "d_in": torch.randn(runs, hidden, 1, generator=gen, dtype=DT),
        "d_hidden": torch.randn(runs, hidden, hidden, generator=gen, dtype=DT) / hidden**0.5,
        "d_out": torch.randn(runs, 1, hidden, generator=gen, dtype=DT),
    }
    return params


def _reference_mlp_output(params, x):
    """Run by run: z = lib.ssm.diagonal.ssm_output, then D_out relu(D_hidden relu(D_in z))."""
    out = []
    for r in range(x.shape[0]):
        z = ssm_output(params["a"][r], params["b"][r], params["c"][r], x[r])  # (n,)
        hidden_1 = torch.relu(params["d_in"][r] @ z.unsqueeze(0))  # (h, n)
        hidden_2 = torch.relu(params["d_hidden"][r] @ hidden_1)  # (h, n)
        out.append((params["d_out"][r] @ hidden_2).squeeze(0))  # (n,)
    return torch.stack(out)


def test_ssm_mlp_output_matches_reference(gen):
    runs, d, hidden, n, kappa = 3, 4, 5, 7, 6
    params = _mlp_params(gen, runs, d, hidden)
    x = torch.randn(runs, n, kappa, generator=gen, dtype=DT)
    got = ssm_mlp_output(params, x)
    assert got.shape == (runs, n)
    expected = _reference_mlp_output(params, x)
    assert bool((expected != 0).any())
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-13)


def test_ssm_mlp_loss_gradient_matches_autograd(gen):
    runs, d, hidden, n, kappa = 3, 4, 5, 7, 6
    params = _mlp_params(gen, runs, d, hidden)
    x = torch.randn(runs, n, kappa, generator=gen, dtype=DT)
    y = torch.randn(runs, n, generator=gen, dtype=DT)
    weights = torch.rand(runs, n, generator=gen, dtype=DT)
    weights[0, -2:] = 0.0
    loss, grads = ssm_mlp_loss_gradient(x, y, weights)(params)
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    expected = (weights * (_reference_mlp_output(leaves, x) - y) ** 2).sum(-1)
    assert loss.shape == (runs,)
    torch.testing.assert_close(loss, expected.detach(), rtol=1e-12, atol=1e-14)
    auto = torch.autograd.grad(expected.sum(), list(leaves.values()))
    assert set(grads) == set(params)
    for name, g in zip(leaves, auto, strict=True):
        assert grads[name].shape == params[name].shape
        assert bool((g != 0).any())
        torch.testing.assert_close(grads[name], g, rtol=1e-10, atol=1e-12)


@pytest.fixture
def one_thread():
    """torch on one thread: ~4x10 tiny batched products per step are slower to split than to do,
    and on a busy 2-core machine the split can cost 100x (timing only; results are unaffected)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_mlp_settings_train_with_the_authors_adam(one_thread):
    """The SSM + MLP settings use TensorFlow's Adam (ε = 1e-7 on the uncorrected √v), and
    train_dynamics passes it on: one run equals a direct gradient_descent call with that form,
    and differs from PyTorch's form (ε = 1e-8 on √v̂), because on the initial plateau the
    gradients are far below ε."""
    from dataclasses import replace

    setting, seed, steps = TABLE1_ROW3, 0, 200
    assert (setting.optimizer, setting.adam_form, setting.adam_eps) == ("adam", "keras", 1e-7)
    runs = train_dynamics(setting, [seed], special_scales=(None,), max_steps=steps)
    x, y = dynamics_data(setting, seed, special_scale=None)
    n = x.shape[0]
    direct = gradient_descent(
        None,
        {k: v[None] for k, v in dynamics_init(setting, seed).items()},
        setting.lr_clean,
        steps,
        optimizer="adam",
        adam_eps=1e-7,
        adam_form="keras",
        runs=1,
        gradient=ssm_mlp_loss_gradient(x[None], y[None], torch.full((1, n), 1.0 / n, dtype=DT)),
    )
    np.testing.assert_allclose(runs.trajectory["a"][-1, 0], direct["a"][-1, 0], rtol=1e-12)
    torch_form = train_dynamics(
        replace(setting, adam_form="torch", adam_eps=1e-8),
        [seed],
        special_scales=(None,),
        max_steps=steps,
    )
    moved = np.abs(runs.trajectory["a"][-1, 0] - runs.trajectory["a"][0, 0]).max()
    moved_torch = np.abs(torch_form.trajectory["a"][-1, 0] - runs.trajectory["a"][0, 0]).max()
    assert moved_torch > 10 * moved


def test_train_dynamics_runs_equal_single_runs(one_thread):
    setting, seeds, scales = FIGURE2_SSM, [0, 1], (None, 1.0)
    steps, every = 300, 50
    result = train_dynamics(
        setting, seeds, special_scales=scales, max_steps=steps, record_every=every
    )
    traj = result.trajectory
    assert result.seeds == [0, 0, 1, 1] and result.scales == [None, 1.0, None, 1.0]
    nb, ns = setting.n_baseline, setting.n_special
    assert result.sizes == [nb, nb + ns, nb, nb + ns]
    assert traj.losses.shape == (len(traj), 4)
    assert traj["a"].shape == (len(traj), 4, setting.d)
    assert result.x.shape == (4, nb + ns, setting.kappa)
    for r, (seed, scale) in enumerate(zip(result.seeds, result.scales, strict=True)):
        size = result.sizes[r]
        # padded rows carry no weight, real rows weight 1/n
        torch.testing.assert_close(
            result.weights[r, :size], torch.full((size,), 1.0 / size, dtype=DT)
        )
        assert bool((result.weights[r, size:] == 0).all())
        x, y = dynamics_data(setting, seed, special_scale=scale)
        history, x_r, y_r = result.run(r)
        torch.testing.assert_close(x_r, x, rtol=0, atol=0)
        torch.testing.assert_close(y_r, y, rtol=0, atol=0)
        lr = setting.lr_clean if scale is None else setting.lr_special
        single = gradient_descent(
            lambda p, x=x, y=y: square_loss(p, x, y),
            dynamics_init(setting, seed),
            lr,
            steps,
            record_every=every,
            optimizer=setting.optimizer,
            stop_loss=setting.stop_loss,
            extra_steps=setting.extra_steps,
        )
        assert single.times.tolist() == traj.times.tolist()
        assert traj.info["steps_run"][r] == single.info["steps_run"]
        assert traj.info["converged_step"][r] == single.info["converged_step"]
        assert traj.info["diverged"][r] is False
        np.testing.assert_allclose(traj.losses[:, r], single.losses, rtol=1e-12, atol=1e-15)
        for name in "abc":
            np.testing.assert_allclose(history[name], single[name], rtol=1e-12, atol=1e-15)
        # the parameters moved far more than the tolerance of the comparison
        assert np.abs(history["a"][-1] - history["a"][0]).max() > 1e-4


# --- bad input -----------------------------------------------------------------------------------

BAD_CALLS = [
    ("tie_gap scale 0", lambda: tie_gap(0.0, 5)),
    ("tie_gap negative exponent", lambda: tie_gap(1e-3, -1)),
    ("init d < 2", lambda: theorem1_init(1, 0, init_scale=0.1, diff=0.0)),
    ("init negative seed", lambda: theorem1_init(4, -1, init_scale=0.1, diff=0.0)),
    ("init diff >= scale", lambda: theorem1_init(4, 0, init_scale=0.1, diff=0.1)),
    ("init negative diff", lambda: theorem1_init(4, 0, init_scale=0.1, diff=-1e-3)),
    ("init zero scale", lambda: theorem1_init(4, 0, init_scale=0.0, diff=0.0)),
    ("init diff and gap", lambda: theorem1_init(4, 0, init_scale=0.1, diff=0.0, relative_gap=0)),
    ("init gap 1", lambda: theorem1_init(4, 0, init_scale=0.1, relative_gap=1.0)),
    ("init gap negative", lambda: theorem1_init(4, 0, init_scale=0.1, relative_gap=-0.1)),
    ("training set d < 2", lambda: theorem1_training_set(1, 7, poisoned=True)),
    ("training set kappa < 3", lambda: theorem1_training_set(4, 2, poisoned=True)),
    ("loss kappa < 3", lambda: theorem1_loss(ones(3), 2, poisoned=False)),
    ("loss float32", lambda: theorem1_loss(torch.ones(3), 7, poisoned=False)),
    ("loss scalar a", lambda: theorem1_loss(torch.tensor(1.0, dtype=DT), 7, poisoned=False)),
    ("velocity kappa < 3", lambda: theorem1_velocity(ones(3), 2, poisoned=True)),
    ("flow kappa < 3", lambda: theorem1_flow(ones(3), 2, poisoned=False, horizon=1.0)),
    ("flow horizon 0", lambda: theorem1_flow(ones(3), 7, poisoned=False, horizon=0.0)),
    ("flow points 1", lambda: theorem1_flow(ones(3), 7, poisoned=False, horizon=1.0, points=1)),
    ("conserved zero entry", lambda: conserved_quantity(torch.tensor([0.1, 0.0], dtype=DT), 7)),
    ("conserved negative", lambda: conserved_quantity(torch.tensor([0.1, -0.2], dtype=DT), 7)),
    ("conserved kappa < 4", lambda: conserved_quantity(ones(2), 3)),
    ("escape a1 <= 0", lambda: escape_time(0.0, 7)),
    ("flow rtol 0", lambda: theorem1_flow(ones(3), 7, poisoned=False, horizon=1.0, rtol=0.0)),
    ("flow rtol 1", lambda: theorem1_flow(ones(3), 7, poisoned=False, horizon=1.0, rtol=1.0)),
    ("flow atol < 0", lambda: theorem1_flow(ones(3), 7, poisoned=False, horizon=1.0, atol=-1.0)),
    ("escape kappa < 4", lambda: escape_time(0.1, 3)),
    ("saddle d < 2", lambda: saddle_point(1, 7)),
    ("saddle kappa < 3", lambda: saddle_point(5, 2)),
    ("hessian d < 2", lambda: saddle_hessian_eigenvalues(1, 7)),
    ("bound d < 2", lambda: theorem1_lower_bound(1, 7)),
    ("bound kappa < 3", lambda: theorem1_lower_bound(4, 2)),
    ("error wrong d", lambda: theorem1_error(ones(5), 6)),
    ("error d < 2", lambda: theorem1_error(ones(1), 1)),
    ("error length 0", lambda: theorem1_error(ones(3), 3, length=0)),
    (
        "table empty seeds",
        lambda: theorem1_table(4, 7, [], init_scale=0.1, diff=0.0, horizons=(1.0, 1.0)),
    ),
    (
        "table seeds int",
        lambda: theorem1_table(4, 7, 3, init_scale=0.1, diff=0.0, horizons=(1.0, 1.0)),
    ),
    (
        "table negative seed",
        lambda: theorem1_table(4, 7, [0, -2], init_scale=0.1, diff=0.0, horizons=(1.0, 1.0)),
    ),
    (
        "table diff >= scale",
        lambda: theorem1_table(4, 7, [0], init_scale=0.1, diff=0.2, horizons=(1.0, 1.0)),
    ),
    ("table kappa < 3", lambda: theorem1_table(4, 2, [0], init_scale=0.1, diff=0.0)),
    ("dynamics_init negative seed", lambda: dynamics_init(FIGURE2_SSM, -1)),
    ("dynamics_data negative seed", lambda: dynamics_data(FIGURE2_SSM, -1)),
    ("dynamics_data negative scale", lambda: dynamics_data(FIGURE2_SSM, 0, special_scale=-1.0)),
    ("train empty seeds", lambda: train_dynamics(FIGURE2_SSM, [], max_steps=1)),
    ("train seeds int", lambda: train_dynamics(FIGURE2_SSM, 0, max_steps=1)),
    ("train negative seed", lambda: train_dynamics(FIGURE2_SSM, [-1], max_steps=1)),
    ("train empty scales", lambda: train_dynamics(FIGURE2_SSM, [0], special_scales=[])),
    ("train scales number", lambda: train_dynamics(FIGURE2_SSM, [0], special_scales=1.0)),
    ("train negative steps", lambda: train_dynamics(FIGURE2_SSM, [0], max_steps=-1)),
    ("train init not callable", lambda: train_dynamics(FIGURE2_SSM, [0], max_steps=1, init=1.0)),
    ("train init wrong keys", lambda: train_dynamics(
        FIGURE2_SSM, [0], max_steps=1, init=lambda s, seed: {"a": dynamics_init(s, seed)["a"]})),
    ("train init wrong shape", lambda: train_dynamics(
        FIGURE2_SSM, [0], max_steps=1,
        init=lambda s, seed: dynamics_init(s, seed) | {"a": torch.zeros(FIGURE2_SSM.d + 1)})),
]


def test_train_dynamics_init(one_thread):
    """init=None is the paper's draw; another init starts every run from what it returns."""
    setting, seeds = FIGURE2_SSM, [0, 1]
    default = train_dynamics(setting, seeds, max_steps=20, record_every=10)
    same = train_dynamics(setting, seeds, max_steps=20, record_every=10, init=dynamics_init)
    np.testing.assert_array_equal(default.trajectory["a"], same.trajectory["a"])

    def doubled(s, seed):
        return {k: 2 * v for k, v in dynamics_init(s, seed).items()}

    other = train_dynamics(setting, seeds, max_steps=20, record_every=10, init=doubled)
    for r, seed in enumerate(other.seeds):
        np.testing.assert_array_equal(other.trajectory["a"][0, r],
                                      2 * dynamics_init(setting, seed)["a"].numpy())


@pytest.mark.parametrize("name,call", BAD_CALLS, ids=[name for name, _ in BAD_CALLS])
def test_bad_input_raises_value_error(name, call):
    with pytest.raises(ValueError):
        call()


NONE_LISTS = [
    ("table seeds None", lambda: theorem1_table(4, 7, None, init_scale=0.1, diff=0.0)),
    ("train seeds None", lambda: train_dynamics(FIGURE2_SSM, None, max_steps=1)),
    ("train scales None", lambda: train_dynamics(FIGURE2_SSM, [0], special_scales=None)),
]


@pytest.mark.parametrize("name,call", NONE_LISTS, ids=[name for name, _ in NONE_LISTS])
def test_none_instead_of_a_list_raises_value_error(name, call):
    with pytest.raises(ValueError):
        call()


def test_theorem1_init_rejects_a_gap_above_the_largest_entry():
    # RandomState(0).rand(2) * 0.1 = (0.0549, 0.0715): a_1 = 0.0715 < diff = 0.09
    with pytest.raises(ValueError, match="positive"):
        theorem1_init(2, 0, init_scale=0.1, diff=0.09)


def test_poisoning_window_matches_single_runs():
    """Each cell of the sweep is the error of the two flows from the corresponding init."""
    from lib.poisoning.theorem1 import escape_time, poisoning_window, theorem1_error, theorem1_flow

    d, kappa, seeds = 8, 7, [0, 1]
    window = poisoning_window(d, kappa, seeds, init_scales=[0.05], relative_gaps=[None, 0.0])
    assert window["clean"].shape == window["poisoned"].shape == (1, 2, 2)
    for j, gap in enumerate([None, 0.0]):
        for k, seed in enumerate(seeds):
            a0 = theorem1_init(d, seed, init_scale=0.05, relative_gap=gap)
            horizon = max(1e4, 100 * escape_time(float(a0[0]), kappa))
            flow = theorem1_flow(a0, kappa, poisoned=True, horizon=horizon, points=2)
            expected = theorem1_error(torch.from_numpy(flow["a"][-1]), d).item()
            assert window["poisoned"][0, j, k] == pytest.approx(expected, rel=1e-12)
    # an exact tie is never broken by the clean flow (eq. 21 treats tied entries alike)
    assert np.all(window["clean"][0, 1] > window["clean"][0, 0])
    with pytest.raises(ValueError, match="relative_gaps"):
        poisoning_window(d, kappa, seeds, init_scales=[0.05], relative_gaps=[])
    with pytest.raises(ValueError, match="relative_gap must lie"):
        theorem1_init(d, 0, init_scale=0.05, relative_gap=1.0)


def test_table_settings_follow_the_papers_tables_10_to_13():
    from lib.poisoning.dynamics import TABLE1_ROW2, TABLE1_ROW3, TABLE3_ROW2, TABLE3_ROW3

    for setting in (TABLE1_ROW2, TABLE1_ROW3, TABLE3_ROW2, TABLE3_ROW3):
        # the special entry sits at the penultimate position only (Table 10)
        assert setting.special_positions == (setting.kappa - 1,)
        assert max(setting.baseline_positions) <= setting.kappa - 2
    assert (TABLE1_ROW2.d, TABLE1_ROW2.kappa, TABLE1_ROW2.warm) == (10, 6, 0.1)
    assert (TABLE3_ROW2.d, TABLE3_ROW2.kappa, TABLE3_ROW2.lr_clean) == (20, 10, 0.001)
    assert (TABLE1_ROW3.hidden, TABLE1_ROW3.warm, TABLE1_ROW3.optimizer) == (15, 0.001, "adam")
    assert (TABLE3_ROW3.hidden, TABLE3_ROW3.lr_special) == (25, 5e-5)
    assert (TABLE1_ROW2.n_baseline, TABLE1_ROW2.n_special) == (8, 10)
    assert (TABLE1_ROW3.n_baseline, TABLE1_ROW3.n_special) == (20, 20)
    # warm init: every entry of a and b starts above the warm constant
    params = dynamics_init(TABLE1_ROW2, 0)
    assert bool((params["a"] >= 0.1).all()) and bool((params["b"] >= 0.1).all())
    assert bool((params["c"] < 0.01).all())


def test_row_metrics_against_direct_computation():
    from lib.poisoning.dynamics import TABLE1_ROW2, TABLE1_ROW3, impulse_error, relative_test_error

    runs = train_dynamics(TABLE1_ROW2, [0], max_steps=20)
    final = runs.trajectory.final
    for r in range(2):
        h = ssm_recurrence(
            final["a"][r], final["b"][r], final["c"][r], torch.eye(40, dtype=DT).flip(0)
        )
        assert impulse_error(runs)[r] == pytest.approx((h - 1).abs().max().item(), rel=1e-10)
    with pytest.raises(ValueError, match="SSM \\+ MLP"):
        relative_test_error(runs)
    mlp = train_dynamics(TABLE1_ROW3, [3], special_scales=(None,), max_steps=5)
    x = torch.randn(2000, 40, generator=torch.Generator().manual_seed(3 + 12), dtype=DT)
    params = {k: v[0:1] for k, v in mlp.trajectory.final.items()}
    prediction = ssm_mlp_output(params, x.unsqueeze(0))[0]
    y = TABLE1_ROW3.teacher_labels(x)
    expected = (prediction - y).norm() / y.norm()
    assert relative_test_error(mlp)[0] == pytest.approx(expected.item(), rel=1e-12)
    first = relative_test_error(mlp, index=0)[0]
    assert first == pytest.approx(1.0, abs=0.05)  # near-zero init: the zero map, error ~ 1


def test_dynamics_runs_index_active_and_gamma0():
    from lib.ssm.diagonal import characterization_coefficients

    runs = train_dynamics(FIGURE2_SSM, [0, 1], max_steps=40, record_every=10)
    assert runs.index(1, None) == 2 and runs.index(0, 1.0) == 1
    with pytest.raises(ValueError, match="no run"):
        runs.index(5, None)
    assert runs.active(0).dtype == bool and runs.active(0).all()
    history, x, y = runs.run(1)
    expected = [
        characterization_coefficients(*(torch.from_numpy(history[k][t]) for k in "abc"), x, y)[0]
        for t in range(len(runs.trajectory))
    ]
    np.testing.assert_allclose(runs.gamma0(1), np.array(expected), rtol=1e-12, atol=1e-15)
    assert np.all(runs.gamma0(0) == 0.0)  # no special sequences: penultimate column is zero
    mlp = train_dynamics(FIGURE2_SSM_MLP, [0], max_steps=20, record_every=10)
    assert np.all(mlp.gamma0(0) == 0.0) and np.abs(mlp.gamma0(1)).max() > 0


@pytest.mark.parametrize("poisoned", [False, True], ids=["clean", "poisoned"])
def test_theorem1_hessian_is_the_jacobian_of_the_gradient(poisoned):
    """The closed-form Jacobian handed to LSODA equals autograd's Jacobian of the gradient map,
    block-diagonal over a batch of runs."""
    from lib.poisoning.theorem1 import _theorem1_gradient, _theorem1_hessian

    kappa = 7
    a = torch.tensor([[0.4, 0.3, 0.1, 0.05], [0.2, 0.19, 0.02, 0.6]], dtype=DT)
    gradient = _theorem1_gradient(kappa, poisoned)

    def flat_gradient(flat):
        return gradient({"a": flat.reshape(a.shape)})[1]["a"].reshape(-1)

    # autograd cannot see through the NumPy closure: differentiate the public torch velocity
    def torch_gradient(flat):
        return -theorem1_velocity(flat.reshape(a.shape), kappa, poisoned=poisoned).reshape(-1)

    torch.testing.assert_close(flat_gradient(a.reshape(-1)), torch_gradient(a.reshape(-1)))
    expected = torch.autograd.functional.jacobian(torch_gradient, a.reshape(-1))
    got = _theorem1_hessian(kappa, poisoned)({"a": a})
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-14)
    assert float(got[:4, 4:].abs().max()) == 0.0  # runs do not interact


def test_dynamics_init_without_forced_tie_keeps_the_random_gaps():
    import dataclasses

    from lib.poisoning.dynamics import TABLE1_ROW2

    untied = dataclasses.replace(TABLE1_ROW2, tie_exponent=None)
    tied, free = dynamics_init(TABLE1_ROW2, 3), dynamics_init(untied, 3)
    rng = np.random.RandomState(3)
    a = np.sort(np.abs(rng.normal(0.0, untied.sd_a, untied.d)))[::-1] + untied.warm
    np.testing.assert_array_equal(free["a"].numpy(), a)
    # the same draws; only the second entries of a and b differ from the tied setting
    for name in "ab":
        np.testing.assert_array_equal(
            free[name][[0, *range(2, 10)]], tied[name][[0, *range(2, 10)]]
        )
        assert free[name][1] < tied[name][1]


def test_dynamics_init_sort_c_is_the_texts_draw_of_c():
    import dataclasses

    from lib.poisoning.dynamics import TABLE1_ROW2

    text = dataclasses.replace(TABLE1_ROW2, sort_c=True)
    code, sorted_c = dynamics_init(TABLE1_ROW2, 5), dynamics_init(text, 5)
    # the same numbers: C sorted descending with no tie (App. H.1.1), A and B untouched
    np.testing.assert_array_equal(sorted_c["c"].numpy(), np.sort(code["c"].numpy())[::-1])
    assert not np.array_equal(code["c"].numpy(), sorted_c["c"].numpy())
    for name in "ab":
        np.testing.assert_array_equal(sorted_c[name].numpy(), code[name].numpy())
    with pytest.raises(ValueError, match="sort_c"):
        dataclasses.replace(TABLE1_ROW2, sort_c=1)
