"""Unit tests of lib.ssm.extrapolation: the moment view against direct sums and quadrature theory,
the closed-form fields against autograd, the balanced flow against the three-tensor flow (Lemma 6),
and the Adam driver against chained calls of the engine."""

import math

import numpy as np
import pytest
import torch
from conftest import DT, ones

from lib.engine.flow import gradient_descent, gradient_flow
from lib.ssm.diagonal import impulse_response
from lib.ssm.extrapolation import (
    balanced_descent_field,
    balanced_field,
    balanced_flow,
    balanced_init,
    delay_teacher,
    extrapolation_sweep,
    general_descent_field,
    general_init,
    hankel,
    hankel_rank,
    lemma_a1_pair,
    linear_rnn_response,
    moment_sequence,
    moment_teacher,
    population_loss,
    tail_error,
    train_adam,
)

# --- helpers: independent references ----------------------------------------------------------


def _moments_numpy(atoms, masses, length):
    atoms, masses = np.asarray(atoms, dtype=float), np.asarray(masses, dtype=float)
    return np.array(
        [sum(p * lam**j for lam, p in zip(atoms, masses, strict=True)) for j in range(length)]
    )


def _three_tensor_loss(a, big_b, big_c, w, k):
    """L(a, B, C) = Σ_{j<k} (Σ_i C_i B_i a_i^j − w_j)², written out term by term."""
    total = torch.zeros((), dtype=DT)
    for j in range(k):
        total = total + ((big_c * big_b * a**j).sum() - w[j]) ** 2
    return total


def _autograd_field(w, k):
    """(a, b) -> (∂L/∂a, ∂L/∂B) at B = C = b, by torch.func (differentiable again)."""
    partials = torch.func.grad(lambda a, bb, cc: _three_tensor_loss(a, bb, cc, w, k), (0, 1))

    def field(a, b):
        return partials(a, b, b)

    return field


# --- teachers and the moment view --------------------------------------------------------------


def test_moment_teacher_and_sequence_against_numpy():
    atoms, masses = [0.9, -0.4, 0.1, -1.0], [0.3, 0.2, 0.45, 0.05]
    teacher = moment_teacher(atoms, masses)
    np.testing.assert_allclose(teacher.a.numpy(), atoms, rtol=0, atol=0)
    np.testing.assert_allclose(teacher.b.numpy(), np.sqrt(masses), rtol=1e-15)
    np.testing.assert_allclose(teacher.c.numpy(), np.sqrt(masses), rtol=1e-15)
    w = moment_sequence(atoms, masses, 12)
    assert w.dtype == DT and w.shape == (12,)
    np.testing.assert_allclose(w.numpy(), _moments_numpy(atoms, masses, 12), rtol=1e-13, atol=1e-15)
    # the teacher's impulse response is the same sequence
    torch.testing.assert_close(impulse_response(*teacher, 12), w, rtol=1e-14, atol=1e-15)
    # zero masses are allowed (an atom with no weight)
    np.testing.assert_allclose(
        moment_sequence([0.5, 0.7], [1.0, 0.0], 5).numpy(), 0.5 ** np.arange(5), rtol=1e-15
    )


def test_hankel_entries():
    m = torch.arange(1.0, 10.0, dtype=DT) ** 2  # 9 entries -> up to a 5×5 Hankel matrix
    for size in (1, 3, 5):
        h = hankel(m, size)
        assert h.shape == (size, size) and h.dtype == DT
        for i in range(size):
            for j in range(size):
                assert h[i, j].item() == m[i + j].item()
    torch.testing.assert_close(hankel(m, 4), hankel(m, 4).T, rtol=0, atol=0)


@pytest.mark.parametrize(
    "atoms,masses",
    [([0.5], [1.0]), ([0.9, -0.6], [0.3, 0.7]), ([0.8, -0.5, 0.1], [0.2, 0.5, 0.3])],
)
def test_hankel_rank_is_number_of_atoms(atoms, masses):
    n = len(atoms)
    for size in (n + 1, n + 2, n + 3):
        w = moment_sequence(atoms, masses, 2 * size - 1)
        assert hankel_rank(w, size) == n
    # below the number of atoms the Hankel matrix has full rank
    for size in range(1, n + 1):
        assert hankel_rank(moment_sequence(atoms, masses, 2 * size - 1), size) == size
    assert hankel_rank(torch.zeros(7, dtype=DT), 4) == 0


def _uniform_moment(j):
    """E[U^j] for U uniform on [−1, 1]."""
    return 1.0 / (j + 1) if j % 2 == 0 else 0.0


def _radau_error(n):
    """∫_{−1}^{1} x^{2n−1} dx minus the n-point Gauss–Radau rule (node at −1) applied to x^{2n−1}.

    The classical remainder 2^{2n−1} n ((n−1)!)⁴ / ((2n−1)!)³ · f^{(2n−1)}, with f^{(2n−1)} =
    (2n−1)! (Abramowitz & Stegun 25.4.31).
    """
    return 2 ** (2 * n - 1) * n * math.factorial(n - 1) ** 4 / math.factorial(2 * n - 1) ** 2


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_lemma_a1_pair(n):
    pair = lemma_a1_pair(n)
    assert len(pair) == 2
    sequences = []
    for atoms, masses in pair:
        assert atoms.dtype == DT and masses.dtype == DT
        assert atoms.shape == (n,) and masses.shape == (n,)
        assert bool((masses > 0).all())
        assert masses.sum().item() == pytest.approx(1.0, abs=1e-14)
        assert bool((atoms >= -1).all()) and bool((atoms <= 1).all())
        assert len(set(atoms.tolist())) == n  # n distinct atoms: a genuine n-atom teacher
        m = _moments_numpy(atoms.numpy(), masses.numpy(), 2 * n + 2)
        torch.testing.assert_close(
            moment_sequence(atoms, masses, 2 * n + 2), torch.from_numpy(m), rtol=1e-13, atol=1e-15
        )
        # Gauss–Radau exactness: the uniform distribution's moments up to order 2n − 2
        expected = [_uniform_moment(j) for j in range(2 * n - 1)]
        np.testing.assert_allclose(m[: 2 * n - 1], expected, rtol=0, atol=1e-13)
        sequences.append(m)
        assert hankel_rank(torch.from_numpy(m[: 2 * n + 1]), n + 1) == n
    first, second = sequences
    assert np.abs(first[: 2 * n - 1] - second[: 2 * n - 1]).max() <= 1e-12
    gap = first[2 * n - 1] - second[2 * n - 1]
    assert abs(gap) > 1e-3
    # the first rule (node at −1) undershoots ∫x^{2n−1} = 0 by the Radau remainder, the mirror
    # rule overshoots by as much (moments of a probability: the remainder over the length 2)
    assert first[2 * n - 1] == pytest.approx(-_radau_error(n) / 2, rel=1e-10)
    assert gap == pytest.approx(-_radau_error(n), rel=1e-10)


def test_tail_error_and_population_loss_direct(gen):
    runs, length = 3, 12
    h = torch.randn(runs, length, generator=gen, dtype=DT)
    w = torch.randn(length, generator=gen, dtype=DT)
    hn, wn = h.numpy(), w.numpy()
    for k, horizon in [(0, None), (3, None), (3, 7), (11, 12), (5, 6)]:
        stop = length if horizon is None else horizon
        expected = [max(abs(hn[r, j] - wn[j]) for j in range(k, stop)) for r in range(runs)]
        got = tail_error(h, w, k, horizon)
        assert got.shape == (runs,)
        np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=0)
        # differences, |·| and max are exactly rounded elementwise: exact on any path
        assert tail_error(h[1], w, k, horizon).item() == expected[1]
    for k in (1, 4, 12):
        expected = [sum((hn[r, j] - wn[j]) ** 2 for j in range(k)) for r in range(runs)]
        got = population_loss(h, w, k)
        assert got.shape == (runs,)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-14)
        assert population_loss(h[2], w, k).item() == pytest.approx(expected[2], rel=1e-14)


# --- the balanced field ------------------------------------------------------------------------


def _balanced_problem(gen, d=4, horizon=10):
    w = moment_sequence([0.7, -0.4], [0.6, 0.4], horizon)
    a = (torch.rand(d, generator=gen, dtype=DT) * 2 - 1) * 0.9
    b = torch.randn(d, generator=gen, dtype=DT) * 0.6
    return w, a, b


@pytest.mark.parametrize("k", [1, 2, 5, 8])
def test_balanced_field_gradient_is_partial_derivative_at_b_equal_c(gen, k):
    w, a, b = _balanced_problem(gen)
    gradient, _ = balanced_field(w, k)
    loss, grads = gradient({"a": a, "b": b})
    assert set(grads) == {"a", "b"}
    a_, big_b, big_c = (t.clone().requires_grad_(True) for t in (a, b, b))
    reference = _three_tensor_loss(a_, big_b, big_c, w, k)
    d_a, d_b, d_c = torch.autograd.grad(reference, (a_, big_b, big_c))
    assert loss.item() == pytest.approx(reference.item(), rel=1e-13)
    torch.testing.assert_close(grads["a"], d_a, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grads["b"], d_b, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(d_b, d_c, rtol=1e-13, atol=1e-15)  # balanced: ∂L/∂B = ∂L/∂C
    # NOT the derivative through one shared b, which is twice as large
    shared = b.clone().requires_grad_(True)
    (d_shared,) = torch.autograd.grad(_three_tensor_loss(a, shared, shared, w, k), shared)
    torch.testing.assert_close(d_shared, 2 * d_b, rtol=1e-12, atol=1e-14)
    assert (grads["b"] - d_shared).abs().max() > 1e-3


@pytest.mark.parametrize("k", [1, 2, 5, 8])
def test_balanced_field_jacobian_against_autograd(gen, k):
    d = 4
    w, a, b = _balanced_problem(gen, d=d)
    _, jacobian = balanced_field(w, k)
    matrix = jacobian({"a": a, "b": b})
    assert matrix.shape == (2 * d, 2 * d) and matrix.dtype == DT
    blocks = torch.func.jacrev(_autograd_field(w, k), argnums=(0, 1))(a, b)
    reference = torch.cat([torch.cat(blocks[0], 1), torch.cat(blocks[1], 1)], 0)
    torch.testing.assert_close(matrix, reference, rtol=1e-11, atol=1e-13)
    # and a central finite difference of the closed-form gradient map itself
    gradient, _ = balanced_field(w, k)

    def field(vector):
        grads = gradient({"a": vector[:d], "b": vector[d:]})[1]
        return torch.cat([grads["a"], grads["b"]])

    x0, eps = torch.cat([a, b]), 1e-6
    columns = []
    for i in range(2 * d):
        e = torch.zeros(2 * d, dtype=DT)
        e[i] = eps
        columns.append((field(x0 + e) - field(x0 - e)) / (2 * eps))
    torch.testing.assert_close(matrix, torch.stack(columns, 1), rtol=1e-6, atol=1e-8)


# --- gradient_flow with a hessian ---------------------------------------------------------------


@pytest.mark.parametrize("method", ["Radau", "BDF"])
def test_gradient_flow_hessian_does_not_change_the_flow(gen, method):
    w, a, b = _balanced_problem(gen, d=3)
    gradient, jacobian = balanced_field(w, 5)
    params = {"a": a, "b": b}
    times = [0.0, 1.0, 10.0]
    calls = []

    def hessian(p):
        calls.append(1)
        return jacobian(p)

    plain = gradient_flow(None, params, times, method=method, gradient=gradient)
    with_h = gradient_flow(None, params, times, method=method, gradient=gradient, hessian=hessian)
    assert calls  # the Jacobian was used
    for name in params:
        np.testing.assert_allclose(with_h[name], plain[name], rtol=1e-8, atol=1e-10)
    assert np.abs(plain["a"][-1] - plain["a"][0]).max() > 1e-2  # it did move


def test_gradient_flow_hessian_in_log_time_lsoda(gen):
    """The stiff LSODA regime (log time, long horizon): the Jacobian is used and changes nothing."""
    w = moment_sequence([0.5], [1.0], 10)
    gradient, jacobian = balanced_field(w, 3)
    params = balanced_init(4, 0, init_scale=1e-2)
    times = [0.0, 1e2, 1e4]
    with_h = gradient_flow(None, params, times, log_time=True, gradient=gradient, hessian=jacobian)
    plain = gradient_flow(None, params, times, log_time=True, gradient=gradient)
    assert with_h.info["njev"] > 0
    for name in params:
        np.testing.assert_allclose(with_h[name], plain[name], rtol=1e-6, atol=1e-8)
    assert with_h.losses[-1] < 1e-3 * with_h.losses[0]


@pytest.mark.parametrize("log_time", [False, True])
def test_gradient_flow_hands_solver_the_jacobian_of_its_rhs(gen, monkeypatch, log_time):
    """The ``jac`` given to solve_ivp is the Jacobian of the ``fun`` given with it (in log time
    −e^τ H, not −H): checked by central differences of that very ``fun``."""
    import lib.engine.flow

    w, a, b = _balanced_problem(gen, d=3)
    gradient, jacobian = balanced_field(w, 5)
    captured = {}
    real = lib.engine.flow.solve_ivp

    def spy(fun, span, y0, **options):
        captured.update(fun=fun, jac=options["jac"], y0=y0)
        return real(fun, span, y0, **options)

    monkeypatch.setattr(lib.engine.flow, "solve_ivp", spy)
    gradient_flow(
        None,
        {"a": a, "b": b},
        [0.0, 2.0],
        log_time=log_time,
        method="Radau",
        gradient=gradient,
        hessian=jacobian,
    )
    fun, jac, theta = captured["fun"], captured["jac"], captured["y0"]
    tau, eps = 0.7, 1e-6
    columns = []
    for i in range(theta.size):
        e = np.zeros(theta.size)
        e[i] = eps
        columns.append((fun(tau, theta + e) - fun(tau, theta - e)) / (2 * eps))
    np.testing.assert_allclose(jac(tau, theta), np.stack(columns, 1), rtol=1e-6, atol=1e-7)


def _wrong_shape(p):
    return torch.zeros(5, 5, dtype=DT)


HESSIAN_BAD = [
    ("wrong shape, Radau", dict(method="Radau", hessian=_wrong_shape)),
    ("wrong shape, BDF", dict(method="BDF", hessian=_wrong_shape)),
    ("numpy array", dict(method="Radau", hessian=lambda p: np.zeros((6, 6)))),
    ("not callable", dict(method="Radau", hessian=3)),
    ("explicit method RK45", dict(method="RK45", hessian=lambda p: torch.zeros(6, 6, dtype=DT))),
    (
        "explicit method DOP853",
        dict(method="DOP853", hessian=lambda p: torch.zeros(6, 6, dtype=DT)),
    ),
]


@pytest.mark.parametrize("name,options", HESSIAN_BAD, ids=[n for n, _ in HESSIAN_BAD])
def test_gradient_flow_bad_hessian_raises_value_error(gen, name, options):
    w, a, b = _balanced_problem(gen, d=3)
    gradient, _ = balanced_field(w, 4)
    with pytest.raises(ValueError):
        gradient_flow(None, {"a": a, "b": b}, [0.0, 1.0], gradient=gradient, **options)


def test_gradient_flow_wrong_shape_hessian_rejected_with_default_method(gen):
    w, a, b = _balanced_problem(gen, d=3)
    gradient, _ = balanced_field(w, 4)
    with pytest.raises(ValueError):
        gradient_flow(None, {"a": a, "b": b}, [0.0, 1.0], gradient=gradient, hessian=_wrong_shape)


# --- the balanced flow is the three-tensor flow on its invariant manifold (Lemma 6) ---------------


def test_balanced_flow_is_three_tensor_flow_from_b_equal_c(gen):
    d, k, time, points = 4, 5, 5.0, 6
    w, a, b = _balanced_problem(gen, d=d)
    balanced = balanced_flow(w, k, {"a": a, "b": b}, time=time, points=points)
    times = balanced.times
    assert len(times) == points and times[0] == 0.0 and times[-1] == pytest.approx(time)
    ratios = times[2:] / times[1:-1]
    np.testing.assert_allclose(ratios, ratios[0], rtol=1e-12)  # log-spaced after 0

    def loss(p):  # a general (B, C) flow; diagonal a
        return _three_tensor_loss(p["a"], p["B"], p["C"], w, k)

    general = gradient_flow(loss, {"a": a, "B": b, "C": b.clone()}, times, log_time=True)
    assert np.abs(general["B"] - general["C"]).max() <= 1e-10
    np.testing.assert_allclose(balanced["a"], general["a"], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(balanced["b"], general["B"], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(balanced.losses, general.losses, rtol=1e-7, atol=1e-12)
    assert np.abs(general["a"][-1] - general["a"][0]).max() > 1e-2  # it did move
    assert balanced.losses[-1] < balanced.losses[0]


def test_lemma6_dense_flow_stays_balanced_and_symmetric():
    """Lemma 6 with nothing built in: a dense A started symmetric (free to leave), B and C
    separate tensors started equal, h_j = C (A^j B) computed asymmetrically, the gradient by
    autograd. B - C^T and A - A^T stay at round-off while the loss falls; the control started with
    C != B^T leaves both sets, so the test can see a drift."""
    gen = torch.Generator().manual_seed(5)
    d, k = 5, 5
    w = moment_sequence([0.8, -0.4], [0.6, 0.4], k)
    m = torch.randn(d, d, generator=gen, dtype=DT)
    a0 = 0.2 * (m + m.T)
    b0 = 0.5 * torch.randn(d, generator=gen, dtype=DT)

    def loss(p):
        return ((linear_rnn_response(p["A"], p["B"], p["C"], k) - w) ** 2).sum()

    times = np.concatenate([[0.0], np.logspace(-1, 2, 7)])
    drift = {}
    other_c = b0 + 0.3 * torch.randn(d, generator=gen, dtype=DT)
    for name, c0 in (("balanced", b0.clone()), ("control", other_c)):
        flow = gradient_flow(loss, {"A": a0.clone(), "B": b0.clone(), "C": c0}, times,
                             log_time=True)
        imbalance = np.abs(flow["B"] - flow["C"]).max(axis=1)
        asymmetry = np.abs(flow["A"] - flow["A"].transpose(0, 2, 1)).max(axis=(1, 2))
        drift[name] = (imbalance, asymmetry, flow.losses)
    imbalance, asymmetry, losses = drift["balanced"]
    assert imbalance.max() < 1e-12 and asymmetry.max() < 1e-12
    assert losses[-1] < 1e-2 * losses[0]
    imbalance, asymmetry, _ = drift["control"]
    assert asymmetry.max() > 1e-6
    assert np.abs(imbalance - imbalance[0]).max() > 1e-6


def test_balanced_flow_two_points():
    w = moment_sequence([0.5], [1.0], 6)
    flow = balanced_flow(w, 3, balanced_init(3, 1, init_scale=0.3), time=7.0)
    assert flow.times.tolist() == [0.0, 7.0]


# --- the extrapolation sweep --------------------------------------------------------------------


def test_extrapolation_sweep_one_atom_teacher():
    ks, seeds = (1, 3, 4), (0, 1)
    errors = extrapolation_sweep([0.5], [1.0], ks, d=6, seeds=seeds, horizon=30, time=1e6)
    assert isinstance(errors, np.ndarray) and errors.shape == (len(ks), len(seeds))
    # k > 2·1: a zero-loss balanced student is the teacher (Lemma 7)
    assert errors[1:].max() < 1e-4
    # k = 1 fixes only the mass; the atoms do not move (ȧ = 0) and stay near 0, so h_1 ≈ 0
    # while w_1 = 0.5
    assert errors[0].min() > 0.4
    # one cell (k = 3, seed 1) recomputed: flow from the documented init, then max_{3≤j<30} |h − w|
    final = balanced_flow(
        moment_sequence([0.5], [1.0], 30), 3, balanced_init(6, 1, init_scale=1e-3), time=1e6
    ).final
    a, mass = final["a"].numpy(), final["b"].numpy() ** 2
    tail = max(abs((mass * a**j).sum() - 0.5**j) for j in range(3, 30))
    assert errors[1, 1] == pytest.approx(tail, rel=1e-9, abs=1e-15)


def test_extrapolation_sweep_full_output_matches_the_flows():
    ks, seeds = (1, 3), (0, 1)
    kwargs = dict(d=6, seeds=seeds, horizon=30, time=1e6)
    out = extrapolation_sweep([0.5], [1.0], ks, full_output=True, **kwargs)
    assert set(out) == {"errors", "losses", "max_abs_atom"}
    assert all(v.shape == (len(ks), len(seeds)) for v in out.values())
    # the same tail errors as the plain call: one computation path (the same flows, same process,
    # full_output only adds outputs), so exact equality is the right test
    np.testing.assert_array_equal(out["errors"], extrapolation_sweep([0.5], [1.0], ks, **kwargs))
    # one cell recomputed: the final loss Σ_{j<k}(h_j − w_j)² (Lemma E.1) and max_i |a_i|
    w = moment_sequence([0.5], [1.0], 30)
    final = balanced_flow(w, 3, balanced_init(6, 1, init_scale=1e-3), time=1e6).final
    a, mass = final["a"].numpy(), final["b"].numpy() ** 2
    loss = sum(((mass * a**j).sum() - 0.5**j) ** 2 for j in range(3))
    assert out["losses"][1, 1] == pytest.approx(loss, rel=1e-9, abs=1e-30)
    assert out["max_abs_atom"][1, 1] == np.abs(a).max()
    # k = 3 > 2·1: near zero loss and the teacher's atom 0.5 (Lemma 7)
    assert out["losses"][1].max() < 1e-10
    assert out["max_abs_atom"][1] == pytest.approx(0.5, abs=1e-4)


# --- many runs at once ------------------------------------------------------------------------


def test_balanced_descent_field_per_run_masks(gen):
    ks, d = (1, 3, 6), 5
    w = moment_sequence([0.8, -0.3], [0.5, 0.5], 8)
    a = (torch.rand(len(ks), d, generator=gen, dtype=DT) * 2 - 1) * 0.9
    b = torch.randn(len(ks), d, generator=gen, dtype=DT)
    losses, grads = balanced_descent_field(w, ks)({"a": a, "b": b})
    assert losses.shape == (len(ks),) and grads["a"].shape == a.shape
    for r, k in enumerate(ks):
        loss, single = balanced_field(w, k)[0]({"a": a[r], "b": b[r]})
        assert losses[r].item() == pytest.approx(loss.item(), rel=1e-13)
        torch.testing.assert_close(grads["a"][r], single["a"], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(grads["b"][r], single["b"], rtol=1e-12, atol=1e-14)


def _dense_students(gen, runs, d, radius=0.9):
    m = torch.randn(runs, d, d, generator=gen, dtype=DT)
    m = radius * m / torch.linalg.eigvals(m).abs().amax(-1)[:, None, None]
    b = torch.randn(runs, d, generator=gen, dtype=DT)
    c = torch.randn(runs, d, generator=gen, dtype=DT)
    return m, b, c


def test_linear_rnn_response_against_matrix_powers(gen):
    runs, d, length = 3, 4, 9
    a, b, c = _dense_students(gen, runs, d)
    h = linear_rnn_response(a, b, c, length)
    assert h.shape == (runs, length)
    expected = torch.stack(
        [
            torch.stack([c[r] @ torch.linalg.matrix_power(a[r], j) @ b[r] for j in range(length)])
            for r in range(runs)
        ]
    )
    torch.testing.assert_close(h, expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(linear_rnn_response(a[0], b[0], c[0], length), expected[0])
    # a diagonal A gives the diagonal SSM's impulse response
    diag = torch.tensor([0.5, -0.2, 0.9, 0.1], dtype=DT)
    torch.testing.assert_close(
        linear_rnn_response(torch.diag(diag), b[0], c[0], length),
        impulse_response(diag, b[0], c[0], length),
        rtol=1e-13,
        atol=1e-15,
    )


def test_general_descent_field_against_autograd(gen):
    ks, d = (2, 5, 7), 4
    w = moment_sequence([0.8, -0.3], [0.5, 0.5], 7)
    a, b, c = _dense_students(gen, len(ks), d)
    assert torch.linalg.eigvals(a).abs().max() < 1
    losses, grads = general_descent_field(w, ks)({"A": a, "B": b, "C": c})
    assert losses.shape == (len(ks),)
    for r, k in enumerate(ks):
        leaves = [t[r].clone().requires_grad_(True) for t in (a, b, c)]
        big_a, big_b, big_c = leaves
        loss = sum(
            (big_c @ torch.linalg.matrix_power(big_a, j) @ big_b - w[j]) ** 2 for j in range(k)
        )
        assert losses[r].item() == pytest.approx(loss.item(), rel=1e-12)
        for name, g in zip("ABC", torch.autograd.grad(loss, leaves), strict=True):
            assert grads[name].shape == {"A": a, "B": b, "C": c}[name].shape
            torch.testing.assert_close(grads[name][r], g, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("d_hat", [1, 2, 5])
def test_delay_teacher_impulse_response(d_hat):
    a, b, c = delay_teacher(d_hat)
    assert a.shape == (d_hat, d_hat) and b.shape == (d_hat,) and c.shape == (d_hat,)
    length = d_hat + 4
    h = torch.stack([c @ torch.linalg.matrix_power(a, j) @ b for j in range(length)])
    expected = torch.zeros(length, dtype=DT)
    expected[d_hat - 1] = 1.0
    torch.testing.assert_close(h, expected, rtol=0, atol=0)
    torch.testing.assert_close(linear_rnn_response(a, b, c, length), expected, rtol=0, atol=0)


def test_general_init_shapes_and_reproducibility():
    d, seeds, scale = 5, [3, 0, 7], 0.1
    params = general_init(d, seeds, init_scale=scale)
    assert set(params) == {"A", "B", "C"}
    assert params["A"].shape == (3, d, d) and params["B"].shape == (3, d)
    assert params["C"].shape == (3, d)
    assert all(v.dtype == DT for v in params.values())
    again = general_init(d, seeds, init_scale=scale)
    for name in params:
        torch.testing.assert_close(params[name], again[name], rtol=0, atol=0)
        # each run depends on its own seed only
        alone = general_init(d, [seeds[1]], init_scale=scale)
        torch.testing.assert_close(params[name][1], alone[name][0], rtol=0, atol=0)
        assert not torch.equal(params[name][0], params[name][2])
    # the scale multiplies a fixed draw
    doubled = general_init(d, seeds, init_scale=2 * scale)
    for name in params:
        torch.testing.assert_close(doubled[name], 2 * params[name], rtol=1e-15, atol=0)
    big = general_init(60, [1], init_scale=scale)["A"]
    assert big.std().item() == pytest.approx(scale, rel=0.05)
    assert abs(big.mean().item()) < 0.05 * scale


def test_balanced_init_reproducible_numpy_random_state():
    d, seed, scale = 6, 11, 0.05
    params = balanced_init(d, seed, init_scale=scale)
    rng = np.random.RandomState(seed)
    # one computation path (the same numpy draws, copied into a tensor): exact
    np.testing.assert_array_equal(params["a"].numpy(), rng.normal(0.0, scale, d))
    np.testing.assert_array_equal(params["b"].numpy(), rng.normal(0.0, scale, d))
    assert params["a"].dtype == DT and params["b"].dtype == DT
    again = balanced_init(d, seed, init_scale=scale)
    torch.testing.assert_close(again["a"], params["a"], rtol=0, atol=0)
    assert not torch.equal(balanced_init(d, seed + 1, init_scale=scale)["a"], params["a"])


# --- Adam with a step schedule ------------------------------------------------------------------


def _adam_problem(runs=2, d=3):
    w = moment_sequence([0.6], [1.0], 6)
    field = balanced_descent_field(w, [4] * runs)
    draws = [balanced_init(d, s, init_scale=0.5) for s in range(runs)]
    params = {k: torch.stack([p[k] for p in draws]) for k in ("a", "b")}
    return field, params


def test_train_adam_without_milestones_is_one_engine_call():
    field, params = _adam_problem()
    traj = train_adam(field, params, 2, lr=1e-2, steps=37, record_every=5, engine="torch")
    ref = gradient_descent(
        None, params, 1e-2, 37, optimizer="adam", runs=2, gradient=field, record_every=5
    )
    assert traj.times.tolist() == ref.times.tolist()
    for name in params:  # train_adam without milestones *is* this engine call: one path, exact
        np.testing.assert_array_equal(traj[name], ref[name])
    np.testing.assert_array_equal(traj.losses, ref.losses)
    assert traj.losses[-1].max() < traj.losses[0].min()


def test_train_adam_milestones_divide_the_learning_rate():
    field, params = _adam_problem()
    lr, steps, milestones = 1e-2, 30, (10, 22)
    traj = train_adam(
        field, params, 2, lr=lr, steps=steps, milestones=milestones, record_every=1, engine="torch"
    )
    assert np.all(np.diff(traj.times) > 0) and traj.times[-1] == steps and traj.times[0] == 0
    assert traj.times.tolist() == list(range(steps + 1))
    # chained engine calls, phase p at lr·0.1^p, each restarting Adam
    current, states = params, [{k: v.numpy() for k, v in params.items()}]
    for p, (start, stop) in enumerate([(0, 10), (10, 22), (22, 30)]):
        piece = gradient_descent(
            None, current, lr * 0.1**p, stop - start, optimizer="adam", runs=2, gradient=field
        )
        states += [{k: piece[k][i] for k in params} for i in range(1, len(piece))]
        current = piece.final
    for name in params:  # the same chained engine calls, one computation path: exact
        np.testing.assert_array_equal(traj[name], np.stack([s[name] for s in states]))
    # independently: Adam's first step after a restart moves each coordinate by lr_p·g/(|g| + eps),
    # i.e. by lr_p whenever |g| ≫ eps
    for p, start in enumerate((0, *milestones)):
        step = np.abs(traj["a"][start + 1] - traj["a"][start])
        np.testing.assert_allclose(step, lr * 0.1**p, rtol=1e-5)
    for engine in ("torch", "compiled"):  # a milestone at or beyond `steps` is ignored
        kwargs = dict(lr=lr, steps=10, record_every=1, engine=engine)
        beyond = train_adam(field, params, 2, milestones=(10, 50), **kwargs)
        plain = train_adam(field, params, 2, **kwargs)
        np.testing.assert_array_equal(beyond["b"], plain["b"])  # same engine call: exact


# --- bad input ----------------------------------------------------------------------------------

_W = torch.linspace(1.0, 0.1, 8, dtype=DT)
_FIELD = balanced_descent_field(_W, [3, 3])
_PARAMS = {"a": ones(2, 3) * 0.5, "b": ones(2, 3) * 0.5}

BAD = [
    ("teacher negative weight", lambda: moment_teacher([0.5, 0.2], [1.0, -0.1])),
    ("teacher length mismatch", lambda: moment_teacher([0.5, 0.2], [1.0])),
    ("teacher empty", lambda: moment_teacher([], [])),
    ("teacher 2-D", lambda: moment_teacher([[0.5]], [[1.0]])),
    ("teacher nan", lambda: moment_teacher([math.nan], [1.0])),
    ("teacher float32", lambda: moment_teacher(torch.ones(1), torch.ones(1))),
    ("sequence length 0", lambda: moment_sequence([0.5], [1.0], 0)),
    ("sequence negative weight", lambda: moment_sequence([0.5], [-1.0], 3)),
    ("hankel too short", lambda: hankel(ones(4), 3)),
    ("hankel size 0", lambda: hankel(ones(4), 0)),
    ("hankel 2-D", lambda: hankel(ones(3, 3), 2)),
    ("hankel_rank too short", lambda: hankel_rank(ones(4), 3)),
    ("hankel_rank rtol 0", lambda: hankel_rank(ones(5), 3, rtol=0)),
    ("lemma_a1 n 0", lambda: lemma_a1_pair(0)),
    ("lemma_a1 n float", lambda: lemma_a1_pair(2.0)),
    ("tail k = horizon", lambda: tail_error(ones(2, 5), ones(5), 5)),
    ("tail k > horizon", lambda: tail_error(ones(5), ones(5), 3, 2)),
    ("tail horizon > L", lambda: tail_error(ones(5), ones(5), 1, 6)),
    ("tail horizon 0", lambda: tail_error(ones(5), ones(5), 0, 0)),
    ("tail k negative", lambda: tail_error(ones(5), ones(5), -1)),
    ("tail length mismatch", lambda: tail_error(ones(2, 4), ones(5), 1)),
    ("tail h scalar", lambda: tail_error(torch.tensor(1.0, dtype=DT), ones(1), 0)),
    ("loss k 0", lambda: population_loss(ones(5), ones(5), 0)),
    ("loss k > L", lambda: population_loss(ones(5), ones(5), 6)),
    ("loss w short", lambda: population_loss(ones(6), ones(3), 4)),
    ("loss w 2-D", lambda: population_loss(ones(5), ones(1, 5), 2)),
    ("field k 0", lambda: balanced_field(_W, 0)),
    ("field w short", lambda: balanced_field(_W, 9)),
    ("field w 2-D", lambda: balanced_field(ones(2, 8), 3)),
    ("init d 0", lambda: balanced_init(0, 0, init_scale=0.1)),
    ("init seed negative", lambda: balanced_init(3, -1, init_scale=0.1)),
    ("init scale 0", lambda: balanced_init(3, 0, init_scale=0.0)),
    ("flow time 0", lambda: balanced_flow(_W, 3, {"a": ones(2), "b": ones(2)}, time=0.0)),
    ("flow points 1", lambda: balanced_flow(_W, 3, {"a": ones(2), "b": ones(2)}, points=1)),
    ("flow k too big", lambda: balanced_flow(_W, 9, {"a": ones(2), "b": ones(2)}, time=1.0)),
    ("sweep empty ks", lambda: extrapolation_sweep([0.5], [1.0], [], d=2)),
    ("sweep empty seeds", lambda: extrapolation_sweep([0.5], [1.0], [2], d=2, seeds=[])),
    ("sweep k >= horizon", lambda: extrapolation_sweep([0.5], [1.0], [5], d=2, horizon=5)),
    ("sweep k 0", lambda: extrapolation_sweep([0.5], [1.0], [0], d=2)),
    ("sweep horizon 1", lambda: extrapolation_sweep([0.5], [1.0], [1], d=2, horizon=1)),
    ("sweep negative weight", lambda: extrapolation_sweep([0.5], [-1.0], [2], d=2)),
    ("sweep d 0", lambda: extrapolation_sweep([0.5], [1.0], [2], d=0)),
    ("sweep seed negative", lambda: extrapolation_sweep([0.5], [1.0], [2], d=2, seeds=[-1])),
    ("sweep full_output 1", lambda: extrapolation_sweep([0.5], [1.0], [2], d=2, full_output=1)),
    ("descent field k 0", lambda: balanced_descent_field(_W, [2, 0])),
    ("descent field w short", lambda: balanced_descent_field(_W, [2, 9])),
    ("descent field w 2-D", lambda: balanced_descent_field(ones(1, 8), [2])),
    ("response A not square", lambda: linear_rnn_response(ones(3, 2), ones(3), ones(3), 4)),
    ("response B mismatch", lambda: linear_rnn_response(ones(3, 3), ones(2), ones(3), 4)),
    ("response C mismatch", lambda: linear_rnn_response(ones(3, 3), ones(3), ones(2), 4)),
    ("response batch mismatch", lambda: linear_rnn_response(ones(2, 3, 3), ones(3), ones(3), 4)),
    ("response length 0", lambda: linear_rnn_response(ones(3, 3), ones(3), ones(3), 0)),
    ("response A 1-D", lambda: linear_rnn_response(ones(3), ones(3), ones(3), 2)),
    ("response float32", lambda: linear_rnn_response(torch.ones(2, 2), ones(2), ones(2), 2)),
    ("general field k 0", lambda: general_descent_field(_W, [0])),
    ("general field w short", lambda: general_descent_field(_W, [3, 9])),
    ("general field w 2-D", lambda: general_descent_field(ones(2, 8), [3])),
    ("general init d 0", lambda: general_init(0, [0], init_scale=0.1)),
    ("general init scale negative", lambda: general_init(3, [0], init_scale=-0.1)),
    ("general init seed negative", lambda: general_init(3, [0, -2], init_scale=0.1)),
    ("general init seed float", lambda: general_init(3, [0.5], init_scale=0.1)),
    ("delay d_hat 0", lambda: delay_teacher(0)),
    ("delay d_hat float", lambda: delay_teacher(2.5)),
    ("adam steps 0", lambda: train_adam(_FIELD, _PARAMS, 2, lr=0.1, steps=0)),
    ("adam milestone 0", lambda: train_adam(_FIELD, _PARAMS, 2, lr=0.1, steps=5, milestones=[0])),
    (
        "adam milestone float",
        lambda: train_adam(_FIELD, _PARAMS, 2, lr=0.1, steps=5, milestones=[1.5]),
    ),
    ("adam lr negative", lambda: train_adam(_FIELD, _PARAMS, 2, lr=-0.1, steps=5)),
    ("adam runs mismatch", lambda: train_adam(_FIELD, _PARAMS, 3, lr=0.1, steps=5)),
    (
        "adam record_every 0",
        lambda: train_adam(_FIELD, _PARAMS, 2, lr=0.1, steps=5, record_every=0),
    ),
]


@pytest.mark.parametrize("name,call", BAD, ids=[n for n, _ in BAD])
def test_bad_input_raises_value_error(name, call):
    with pytest.raises(ValueError):
        call()


def test_train_adam_non_numeric_milestone_is_value_error():
    with pytest.raises(ValueError):
        train_adam(_FIELD, _PARAMS, 2, lr=0.1, steps=5, milestones=["x"])


_THREE_RUNS = {
    "balanced": lambda: balanced_descent_field(_W, [3, 4])({"a": ones(3, 2), "b": ones(3, 2)}),
    "general": lambda: general_descent_field(_W, [3, 4])(
        {"A": ones(3, 2, 2) * 0.1, "B": ones(3, 2), "C": ones(3, 2)}
    ),
}


@pytest.mark.parametrize("name", sorted(_THREE_RUNS))
def test_descent_fields_reject_run_count_other_than_len_ks(name):
    with pytest.raises(ValueError):
        _THREE_RUNS[name]()
