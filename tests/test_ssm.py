"""Unit tests of lib.ssm.diagonal: closed forms against brute force, Proposition 1 against
autograd."""

import math

import numpy as np
import pytest
import torch
from conftest import DT, ones, random_ssm

from lib.ssm import diagonal as ssm
from lib.ssm.diagonal import (
    SSM,
    baseline_and_special,
    characterization_coefficients,
    characterization_velocity,
    effective_rank,
    fit_impulse_response,
    generalization_error,
    impulse_response,
    ones_teacher,
    proposition3_student,
    random_sequences,
    square_loss,
    square_loss_gradient,
    ssm_output,
    ssm_recurrence,
    theorem1_teacher,
    unit_impulse,
)


def brute_force_impulse(a, b, c, length):
    """C A^k B with dense matrices and repeated matrix products."""
    A = torch.diag(a)
    B = b.reshape(-1, 1)
    C = c.reshape(1, -1)
    out, power = [], torch.eye(len(a), dtype=DT)
    for _ in range(length):
        out.append((C @ power @ B).item())
        power = power @ A
    return torch.tensor(out, dtype=DT)


@pytest.mark.parametrize("d,length", [(1, 1), (3, 5), (10, 12), (25, 40)])
def test_impulse_response_matches_matrix_powers(gen, d, length):
    for _ in range(5):
        a, b, c = random_ssm(gen, d)
        h = impulse_response(a, b, c, length)
        assert h.shape == (length,)
        torch.testing.assert_close(h, brute_force_impulse(a, b, c, length), rtol=0, atol=1e-12)


@pytest.mark.parametrize("d,kappa,n", [(1, 2, 3), (4, 6, 8), (10, 7, 20), (20, 40, 5)])
def test_closed_form_equals_recurrence(gen, d, kappa, n):
    for _ in range(5):
        a, b, c = random_ssm(gen, d)
        x = torch.randn(n, kappa, generator=gen, dtype=DT)
        closed, recurrent = ssm_output(a, b, c, x), ssm_recurrence(a, b, c, x)
        assert closed.shape == (n,)
        assert (closed - recurrent).abs().max() <= 1e-12 * max(1.0, recurrent.abs().max())


def test_batched_parameters_match_loop(gen):
    a, b, c = random_ssm(gen, 6, batch=(3, 2))
    x = torch.randn(4, 5, generator=gen, dtype=DT)
    y = ssm_output(a, b, c, x)
    assert y.shape == (3, 2, 4)
    for i in range(3):
        for j in range(2):
            torch.testing.assert_close(
                y[i, j], ssm_output(a[i, j], b[i, j], c[i, j], x), rtol=0, atol=1e-13
            )
    torch.testing.assert_close(y, ssm_recurrence(a, b, c, x), rtol=0, atol=1e-12)


def test_output_is_convolution_with_impulse_response(gen):
    a, b, c = random_ssm(gen, 5)
    kappa = 6
    h = impulse_response(a, b, c, kappa)
    for position in range(1, kappa + 1):
        # e_l produces h_{kappa-l}
        y = ssm_output(a, b, c, unit_impulse(kappa, position))
        torch.testing.assert_close(y, h[kappa - position].reshape(1), rtol=0, atol=1e-14)


def test_gradient_of_output_at_zero_poles_is_finite():
    a = torch.zeros(4, dtype=DT, requires_grad=True)
    b = torch.ones(4, dtype=DT)
    x = unit_impulse(5, 1)
    (grad,) = torch.autograd.grad(ssm_output(a, b, b, x).sum(), a)
    assert torch.isfinite(grad).all()
    assert grad.abs().max() == 0  # d/da a^4 = 4 a^3 = 0 at a = 0


def test_teachers():
    for d in (2, 10, 20):
        teacher = theorem1_teacher(d)
        h = impulse_response(*teacher, 30)
        expected = torch.ones(30, dtype=DT)
        expected[0] = d
        torch.testing.assert_close(h, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(impulse_response(*ones_teacher(), 9), torch.ones(9, dtype=DT))


def test_generalization_error_definition_1(gen):
    teacher = ones_teacher()
    a, b, c = random_ssm(gen, 4)
    h = impulse_response(a, b, c, 8)
    for k in (1, 4, 8):
        expected = (h[:k] - 1).abs().max()
        torch.testing.assert_close(generalization_error((a, b, c), teacher, k), expected)
    # normalized: the zero map scores exactly 1
    zero = SSM(*(torch.zeros(3, dtype=DT) for _ in range(3)))
    assert float(generalization_error(zero, theorem1_teacher(10), 20, normalize=True)) == 1.0
    # batched students
    a2, b2, c2 = random_ssm(gen, 4, batch=(5,))
    errors = generalization_error({"a": a2, "b": b2, "c": c2}, teacher, 8)
    assert errors.shape == (5,)
    assert float(errors[2]) == pytest.approx(
        float(generalization_error((a2[2], b2[2], c2[2]), teacher, 8))
    )


def _autograd_velocity(a, b, c, x, y, head=None):
    a = a.clone().requires_grad_(True)
    prediction = ssm_output(a, b, c, x)
    if head is not None:
        prediction = head(prediction)
    loss = ((y - prediction) ** 2).mean()
    (grad,) = torch.autograd.grad(loss, a)
    return -grad


def _assert_relative(actual, expected, tol):
    scale = expected.abs().max()
    assert (actual - expected).abs().max() <= tol * scale, (actual, expected)


@pytest.mark.parametrize("d,kappa,n", [(3, 2, 4), (10, 6, 18), (7, 11, 9)])
def test_proposition1_standalone_matches_autograd(gen, d, kappa, n):
    for _ in range(4):
        a, b, c = random_ssm(gen, d)
        x = torch.randn(n, kappa, generator=gen, dtype=DT)
        y = torch.randn(n, generator=gen, dtype=DT)
        gammas = characterization_coefficients(a, b, c, x, y)
        assert gammas.shape == (kappa - 1,)
        _assert_relative(
            characterization_velocity(a, b, c, gammas), _autograd_velocity(a, b, c, x, y), 1e-9
        )


def test_proposition1_with_relu_mlp_head_matches_autograd(gen):
    d, kappa, n, hidden = 10, 6, 20, 15
    a, b, c = random_ssm(gen, d)
    d_in = torch.randn(hidden, 1, generator=gen, dtype=DT)
    d_hidden = torch.randn(hidden, hidden, generator=gen, dtype=DT) / math.sqrt(hidden)
    d_out = torch.randn(1, hidden, generator=gen, dtype=DT)

    def head(z):  # two hidden ReLU layers, no biases, applied sample by sample
        hidden_1 = torch.relu(z.unsqueeze(-1) @ d_in.T)
        hidden_2 = torch.relu(hidden_1 @ d_hidden.T)
        return (hidden_2 @ d_out.T).squeeze(-1)

    x = torch.randn(n, kappa, generator=gen, dtype=DT)
    y = torch.randn(n, generator=gen, dtype=DT)
    gammas = characterization_coefficients(a, b, c, x, y, head=head)
    _assert_relative(
        characterization_velocity(a, b, c, gammas), _autograd_velocity(a, b, c, x, y, head), 1e-9
    )


def test_gamma0_depends_only_on_penultimate_element(gen):
    a, b, c = random_ssm(gen, 5)
    x = torch.randn(6, 7, generator=gen, dtype=DT)
    x[:, 5] = 0.0  # penultimate position (1-indexed 6) is zero
    y = torch.randn(6, generator=gen, dtype=DT)
    gammas = characterization_coefficients(a, b, c, x, y)
    assert gammas[0] == 0.0
    assert (gammas[1:] != 0).all()
    x[:, 5] = 1.0
    assert characterization_coefficients(a, b, c, x, y)[0] != 0.0


def test_effective_rank():
    assert float(effective_rank(torch.tensor([0.0, 3.0, 0.0], dtype=DT))) == pytest.approx(1.0)
    assert float(effective_rank(torch.full((6,), -0.2, dtype=DT))) == pytest.approx(6.0)
    batch = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=DT)
    torch.testing.assert_close(effective_rank(batch), torch.tensor([1.0, 2.0], dtype=DT))


def test_sequences_baseline_identical_with_and_without_special():
    base_only, special_none = baseline_and_special(
        6, 8, 0, baseline_positions=[1, 2], special_positions=[5, 6], seed=105
    )
    base, special = baseline_and_special(
        6, 8, 10, baseline_positions=[1, 2], special_positions=[5, 6], seed=105
    )
    assert special_none.shape == (0, 6)
    torch.testing.assert_close(base, base_only, rtol=0, atol=0)
    assert special.shape == (10, 6)
    assert (base[:, 2:] == 0).all() and (base[:, :2] != 0).all()
    assert (special[:, :4] == 0).all() and (special[:, 4:] != 0).all()
    other = random_sequences(3, 4, 2, torch.Generator().manual_seed(0))
    assert other.shape == (3, 4) and (other[:, [0, 2, 3]] == 0).all()


def test_square_loss_is_eq3(gen):
    a, b, c = random_ssm(gen, 4, batch=(2,))
    x = torch.randn(5, 3, generator=gen, dtype=DT)
    y = torch.randn(5, generator=gen, dtype=DT)
    losses = square_loss((a, b, c), x, y)
    for i in range(2):
        residuals = [y[m] - ssm_recurrence(a[i], b[i], c[i], x[m : m + 1])[0] for m in range(5)]
        expected = sum(r**2 for r in residuals) / 5
        assert losses[i].item() == pytest.approx(expected.item(), rel=1e-12)
    with pytest.raises(ValueError, match="one label per sequence"):
        square_loss((a[0], b[0], c[0]), x, y[:4])


def test_unit_impulse():
    x = unit_impulse(7, 6)
    assert x.shape == (1, 7) and x[0, 5] == 1 and x.sum() == 1


@pytest.mark.parametrize("epsilon", [0.0, 0.5, 10.0, 1e3])
def test_proposition3_student_fits_kappa_entries_and_misses_the_next(epsilon):
    teacher = theorem1_teacher(10)
    kappa = 7
    student = proposition3_student(teacher, kappa, epsilon)
    assert float(generalization_error(student, teacher, kappa)) <= 1e-9 * max(1, epsilon)
    gap = float(generalization_error(student, teacher, kappa + 1))
    assert gap == pytest.approx(epsilon, rel=1e-9, abs=1e-9)
    # zero training loss on arbitrary length-kappa data
    x = torch.randn(30, kappa, generator=torch.Generator().manual_seed(3), dtype=DT)
    torch.testing.assert_close(
        ssm_output(*student, x), ssm_output(*teacher, x), rtol=1e-9, atol=1e-9 * max(1, epsilon)
    )


def test_fit_impulse_response_exact():
    poles = torch.tensor([0.9, 0.5, -0.3, 0.1], dtype=DT)
    targets = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=DT)
    student = fit_impulse_response(poles, targets)
    torch.testing.assert_close(impulse_response(*student, 4), targets, rtol=0, atol=1e-10)


# --- bad input ------------------------------------------------------------------------------

BAD_CALLS = [
    ("float32", lambda: impulse_response(torch.ones(3), ones(3), ones(3), 4)),
    ("shape mismatch", lambda: impulse_response(ones(3), ones(2), ones(3), 4)),
    ("nan", lambda: impulse_response(torch.tensor([float("nan")], dtype=DT), ones(1), ones(1), 4)),
    (
        "inf input",
        lambda: ssm_output(ones(2), ones(2), ones(2), torch.full((1, 3), float("inf"), dtype=DT)),
    ),
    ("length 0", lambda: impulse_response(ones(2), ones(2), ones(2), 0)),
    ("length float", lambda: impulse_response(ones(2), ones(2), ones(2), 3.0)),
    ("empty state", lambda: impulse_response(ones(0), ones(0), ones(0), 3)),
    (
        "scalar a",
        lambda: impulse_response(
            torch.tensor(1.0, dtype=DT), torch.tensor(1.0, dtype=DT), torch.tensor(1.0, dtype=DT), 3
        ),
    ),
    ("x 1-D", lambda: ssm_output(ones(2), ones(2), ones(2), ones(3))),
    ("x float32", lambda: ssm_recurrence(ones(2), ones(2), ones(2), torch.ones(1, 3))),
    (
        "kappa < 2",
        lambda: characterization_coefficients(ones(2), ones(2), ones(2), ones(3, 1), ones(3)),
    ),
    (
        "labels count",
        lambda: characterization_coefficients(ones(2), ones(2), ones(2), ones(3, 4), ones(2)),
    ),
    (
        "head not callable",
        lambda: characterization_coefficients(
            ones(2), ones(2), ones(2), ones(3, 4), ones(3), head=3
        ),
    ),
    (
        "head wrong shape",
        lambda: characterization_coefficients(
            ones(2), ones(2), ones(2), ones(3, 4), ones(3), head=lambda z: z.sum()
        ),
    ),
    ("student not ssm", lambda: generalization_error("abc", ones_teacher(), 4)),
    ("student missing key", lambda: generalization_error({"a": ones(1)}, ones_teacher(), 4)),
    ("teacher batched", lambda: generalization_error(ones_teacher(), SSM(*(ones(2, 1),) * 3), 4)),
    ("teacher dimension", lambda: theorem1_teacher(1)),
    ("position 0", lambda: unit_impulse(5, 0)),
    ("position > kappa", lambda: unit_impulse(5, 6)),
    (
        "repeated positions",
        lambda: baseline_and_special(
            6, 2, 2, baseline_positions=[1, 1], special_positions=[5], seed=0
        ),
    ),
    (
        "negative seed",
        lambda: baseline_and_special(
            6, 2, 2, baseline_positions=[1], special_positions=[5], seed=-1
        ),
    ),
    ("bad generator", lambda: random_sequences(2, 4, [1], generator=0)),
    (
        "poles not distinct",
        lambda: fit_impulse_response(torch.tensor([0.5, 0.5], dtype=DT), ones(2)),
    ),
    ("too many targets", lambda: fit_impulse_response(torch.tensor([0.5, 0.2], dtype=DT), ones(3))),
    ("negative epsilon", lambda: proposition3_student(ones_teacher(), 4, -1.0)),
    ("zero a erank", lambda: effective_rank(torch.zeros(3, dtype=DT))),
    ("numpy float32", lambda: effective_rank(np.ones(3, dtype=np.float32))),
    ("string", lambda: effective_rank("abc")),
    (
        "velocity gammas 2-D",
        lambda: characterization_velocity(ones(2), ones(2), ones(2), ones(2, 2)),
    ),
]


@pytest.mark.parametrize("name,call", BAD_CALLS, ids=[name for name, _ in BAD_CALLS])
def test_bad_input_raises_value_error(name, call):
    with pytest.raises(ValueError):
        call()


def test_error_messages_say_what_was_expected():
    with pytest.raises(ValueError, match="float64"):
        impulse_response(torch.ones(3), torch.ones(3), torch.ones(3), 2)
    with pytest.raises(ValueError, match=r"a \(3,\), b \(2,\)"):
        ssm_output(ones(3), ones(2), ones(3), ones(1, 2))
    with pytest.raises(ValueError, match="kappa >= 2"):
        characterization_coefficients(*(ones(2),) * 3, ones(1, 1), ones(1))


def test_public_names_are_exported():
    import lib

    for name in (
        "impulse_response",
        "ssm_output",
        "generalization_error",
        "characterization_coefficients",
        "gradient_flow",
        "gradient_descent",
    ):
        assert hasattr(lib, name)
    assert ssm.SSM is lib.SSM


# --- closed-form gradient of eq. (3) -----------------------------------------------------------


def _autograd_loss_and_grads(a, b, c, x, y):
    """square_loss summed over the batch, and its autograd gradients."""
    leaves = [t.clone().requires_grad_(True) for t in (a, b, c)]
    losses = square_loss(tuple(leaves), x, y)
    grads = torch.autograd.grad(losses.sum(), leaves, allow_unused=True)  # κ = 1: a unused
    grads = [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, grads, strict=True)]
    return losses.detach(), dict(zip("abc", grads, strict=True))


def _assert_gradient_matches(got, expected):
    loss, grads = got
    expected_loss, expected_grads = expected
    torch.testing.assert_close(loss, expected_loss, rtol=1e-12, atol=1e-14)
    assert set(grads) == {"a", "b", "c"}
    for name in "abc":
        assert grads[name].shape == expected_grads[name].shape
        torch.testing.assert_close(grads[name], expected_grads[name], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("d,kappa,n", [(1, 1, 3), (3, 2, 4), (10, 6, 18), (7, 11, 9)])
def test_square_loss_gradient_matches_autograd(gen, d, kappa, n):
    x = torch.randn(n, kappa, generator=gen, dtype=DT)
    y = torch.randn(n, generator=gen, dtype=DT)
    gradient = square_loss_gradient(x, y)
    a, b, c = random_ssm(gen, d)
    _assert_gradient_matches(
        gradient({"a": a, "b": b, "c": c}), _autograd_loss_and_grads(a, b, c, x, y)
    )
    # batched parameters (3, d), shared data
    a, b, c = random_ssm(gen, d, batch=(3,))
    loss, grads = gradient({"a": a, "b": b, "c": c})
    assert loss.shape == (3,)
    _assert_gradient_matches((loss, grads), _autograd_loss_and_grads(a, b, c, x, y))


def test_square_loss_gradient_at_zero_poles(gen):
    x = torch.randn(5, 4, generator=gen, dtype=DT)
    y = torch.randn(5, generator=gen, dtype=DT)
    a = torch.zeros(3, dtype=DT)
    b, c = torch.randn(2, 3, generator=gen, dtype=DT)
    got = square_loss_gradient(x, y)({"a": a, "b": b, "c": c})
    _assert_gradient_matches(got, _autograd_loss_and_grads(a, b, c, x, y))
    assert bool((got[1]["a"] != 0).all())  # ∂/∂a_j picks up x_{κ-1} through the a^1 term


def test_square_loss_gradient_per_run_data(gen):
    runs, d, kappa, n = 3, 4, 5, 6
    x = torch.randn(runs, n, kappa, generator=gen, dtype=DT)
    y = torch.randn(runs, n, generator=gen, dtype=DT)
    a, b, c = random_ssm(gen, d, batch=(runs,))
    loss, grads = square_loss_gradient(x, y)({"a": a, "b": b, "c": c})
    assert loss.shape == (runs,)
    for r in range(runs):
        expected = _autograd_loss_and_grads(a[r], b[r], c[r], x[r], y[r])
        _assert_gradient_matches((loss[r], {k: g[r] for k, g in grads.items()}), expected)


def test_square_loss_gradient_weights(gen):
    runs, d, kappa, n = 2, 4, 5, 6
    x = torch.randn(runs, n, kappa, generator=gen, dtype=DT)
    y = torch.randn(runs, n, generator=gen, dtype=DT)
    params = dict(zip("abc", random_ssm(gen, d, batch=(runs,)), strict=True))
    # uniform weights 1/n reproduce the default factor 1/n
    default = square_loss_gradient(x, y)(params)
    uniform = square_loss_gradient(x, y, weights=torch.full((runs, n), 1.0 / n, dtype=DT))(params)
    _assert_gradient_matches(uniform, default)
    # padding run 0 with random rows of weight 0 changes nothing; run 1 keeps its n rows
    extra = 3
    padded_x = torch.cat([x, torch.randn(runs, extra, kappa, generator=gen, dtype=DT)], dim=1)
    padded_y = torch.cat([y, torch.randn(runs, extra, generator=gen, dtype=DT)], dim=1)
    weights = torch.zeros(runs, n + extra, dtype=DT)
    weights[0, :n] = 1.0 / n
    weights[1, :] = 1.0 / (n + extra)
    padded = square_loss_gradient(padded_x, padded_y, weights=weights)(params)
    _assert_gradient_matches(
        (padded[0][0], {k: g[0] for k, g in padded[1].items()}),
        (default[0][0], {k: g[0] for k, g in default[1].items()}),
    )
    expected = _autograd_loss_and_grads(
        params["a"][1], params["b"][1], params["c"][1], padded_x[1], padded_y[1]
    )
    _assert_gradient_matches((padded[0][1], {k: g[1] for k, g in padded[1].items()}), expected)
    # general weights: ℓ = Σ w_i r_i², checked against autograd of the weighted loss
    w = torch.rand(n, generator=gen, dtype=DT)
    a, b, c = (t.clone().requires_grad_(True) for t in random_ssm(gen, d))
    weighted = (w * (ssm_output(a, b, c, x[0]) - y[0]) ** 2).sum()
    auto = torch.autograd.grad(weighted, [a, b, c])
    got = square_loss_gradient(x[0], y[0], weights=w)(
        {"a": a.detach(), "b": b.detach(), "c": c.detach()}
    )
    _assert_gradient_matches(got, (weighted.detach(), dict(zip("abc", auto, strict=True))))


BAD_GRADIENT_DATA = [
    ("x 1-D", lambda: square_loss_gradient(ones(3), ones(3))),
    ("x 4-D", lambda: square_loss_gradient(ones(1, 2, 3, 4), ones(1, 2, 3))),
    ("y too short", lambda: square_loss_gradient(ones(3, 4), ones(2))),
    ("y 2-D for 2-D x", lambda: square_loss_gradient(ones(3, 4), ones(3, 1))),
    ("y wrong runs", lambda: square_loss_gradient(ones(2, 3, 4), ones(3, 3))),
    ("kappa 0", lambda: square_loss_gradient(ones(3, 0), ones(3))),
    ("no rows", lambda: square_loss_gradient(ones(0, 4), ones(0))),
    ("x float32", lambda: square_loss_gradient(torch.ones(3, 4), ones(3))),
    ("y nan", lambda: square_loss_gradient(ones(3, 4), torch.full((3,), math.nan, dtype=DT))),
    ("weights wrong shape", lambda: square_loss_gradient(ones(3, 4), ones(3), weights=ones(4))),
    (
        "weights negative",
        lambda: square_loss_gradient(ones(3, 4), ones(3), weights=-ones(3)),
    ),
    (
        "params of different shapes",
        lambda: square_loss_gradient(ones(3, 4), ones(3))(
            {"a": ones(2), "b": ones(3), "c": ones(2)}
        ),
    ),
    (
        "params scalar",
        lambda: square_loss_gradient(ones(3, 4), ones(3))(
            {k: torch.tensor(0.5, dtype=DT) for k in "abc"}
        ),
    ),
    (
        "per-run data, params 1-D",
        lambda: square_loss_gradient(ones(2, 3, 4), ones(2, 3))({k: ones(5) for k in "abc"}),
    ),
    (
        "per-run data, wrong run count",
        lambda: square_loss_gradient(ones(2, 3, 4), ones(2, 3))({k: ones(3, 5) for k in "abc"}),
    ),
]


@pytest.mark.parametrize("name,call", BAD_GRADIENT_DATA, ids=[n for n, _ in BAD_GRADIENT_DATA])
def test_square_loss_gradient_bad_input(name, call):
    with pytest.raises(ValueError):
        call()


def test_characterization_coefficients_batched_over_times(gen):
    d, kappa, n = 5, 6, 7
    a, b, c = random_ssm(gen, d, batch=(4,))
    x = torch.randn(n, kappa, generator=gen, dtype=DT)
    y = torch.randn(n, generator=gen, dtype=DT)
    batched = characterization_coefficients(a, b, c, x, y)
    assert batched.shape == (4, kappa - 1)
    stacked = torch.stack([characterization_coefficients(a[t], b[t], c[t], x, y) for t in range(4)])
    torch.testing.assert_close(batched, stacked, rtol=1e-13, atol=1e-15)
    # two leading dimensions
    a2, b2, c2 = (t.reshape(2, 2, d) for t in (a, b, c))
    torch.testing.assert_close(
        characterization_coefficients(a2, b2, c2, x, y), stacked.reshape(2, 2, kappa - 1)
    )
    with pytest.raises(ValueError):
        characterization_coefficients(a, b, c, x, y, head=lambda z: z)
