"""Input validation and numerical-failure reporting: the shared checks, and the six groups of
defects found by trying lib as a careless user would (each group has its tests below)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from conftest import ones

from lib.book import viz
from lib.engine import config, curvature, flow
from lib.engine.validation import (
    NumericalFailure,
    as_bool,
    as_callable,
    as_float,
    as_int,
    as_seeds,
    as_tensor,
)
from lib.networks import linear_nets
from lib.poisoning import dynamics as dyn
from lib.poisoning import theorem1 as poison
from lib.ssm import diagonal as ssm
from lib.ssm import extrapolation

DT = torch.float64

# --------------------------------------------------------------------------------------------
# The shared checks and the one policy on numeric types
# --------------------------------------------------------------------------------------------


def test_as_tensor_policy_converts_exact_types_and_rejects_lossy_ones():
    x = torch.tensor([1.0, 2.0], dtype=DT)
    assert as_tensor(x, "x") is x  # float64 passes through: autograd still reaches it
    for exact in ([1, 2], (1, 2), np.array([1, 2]), torch.tensor([1, 2]), np.array([1.0, 2.0])):
        got = as_tensor(exact, "x")
        assert got.dtype == DT and got.tolist() == [1.0, 2.0]
    for lossy, words in [
        (torch.tensor([1.0], dtype=torch.float32), "torch.float64"),
        (np.array([1.0], dtype=np.float32), "float64"),
        (torch.tensor([1.0], dtype=torch.complex128), "torch.float64"),
        (np.array([1 + 1j]), "real numbers"),
        (torch.tensor([True]), "torch.float64"),
        ([True, False], "real numbers"),
        (["1"], "real numbers"),
        ([[1.0], [1.0, 2.0]], "equal lengths"),
        (None, "float64 torch tensor"),
        ("1.0", "float64 torch tensor"),
    ]:
        with pytest.raises(ValueError, match=words):
            as_tensor(lossy, "x")
    with pytest.raises(ValueError, match=r"x must have shape \(\*, 3\), got \(2, 2\)"):
        as_tensor(torch.ones(2, 2, dtype=DT), "x", shape=(None, 3))
    with pytest.raises(ValueError, match="must not be empty"):
        as_tensor(torch.ones(0, dtype=DT), "x", nonempty=True)


def test_scalar_checks_name_the_argument_and_what_came():
    assert as_bool(np.bool_(True), "flag") is True
    for value in ("False", "no", 0, 1, None):
        with pytest.raises(ValueError, match=f"flag must be True or False, got {value!r}"):
            as_bool(value, "flag")
    assert as_int(np.int64(3), "n", minimum=0, maximum=3) == 3
    with pytest.raises(ValueError, match="seed must be an integer, got 2.5"):
        as_int(2.5, "seed")
    with pytest.raises(ValueError, match="n must be at most 3, got 4"):
        as_int(4, "n", maximum=3)
    assert as_float(2, "x") == 2.0
    with pytest.raises(ValueError, match=r"beta must lie in \[0.0, 1.0\), got 1.0"):
        as_float(1.0, "beta", minimum=0.0, maximum=1.0, open_maximum=True)
    for bad in (math.nan, math.inf, np.float32(1.0), True, "1", None, 1j):
        with pytest.raises(ValueError, match="x must be a"):
            as_float(bad, "x")
    with pytest.raises(ValueError, match="loss must be a callable"):
        as_callable(3, "loss")
    with pytest.raises(ValueError, match=r"seeds\[1\] must be at most 4294967295"):
        as_seeds([0, 2**32], "seeds")


def test_numerical_failure_is_a_value_error_and_a_runtime_error():
    assert issubclass(NumericalFailure, ValueError) and issubclass(NumericalFailure, RuntimeError)


# --------------------------------------------------------------------------------------------
# Group 1: the flows never return nan silently
# --------------------------------------------------------------------------------------------


def _sqrt_loss(p):
    return torch.sqrt(p["w"]).sum() + 2.0 * p["w"].sum()  # gradient flow drives w through 0


def test_gradient_flow_raises_when_the_loss_turns_nan_partway():
    with pytest.raises(NumericalFailure, match="nan/inf"):
        flow.gradient_flow(_sqrt_loss, {"w": ones(1)}, [0.0, 1.0, 2.0, 3.0])


def test_gradient_flow_raises_when_the_flow_blows_up():
    start = time.perf_counter()
    with pytest.raises(NumericalFailure, match="blows up"):  # w' = 2w: e^2000 overflows
        flow.gradient_flow(lambda p: -(p["w"] ** 2).sum(), {"w": ones(1)}, [0.0, 1e3])
    assert time.perf_counter() - start < 20  # caught on the way, not after a hopeless solve


def test_gradient_flow_rejects_horizons_it_cannot_integrate():
    loss = lambda p: (p["w"] ** 2).sum()  # noqa: E731
    with pytest.raises(ValueError, match="too short"):
        flow.gradient_flow(loss, {"w": ones(1)}, [0.0, 1e-200])
    with pytest.raises(ValueError, match="log time"):
        flow.gradient_flow(loss, {"w": ones(1)}, [0.0, 1e250], log_time=True)
    # a long horizon that float64 handles still works, and its answer is the true limit 0
    final = flow.gradient_flow(loss, {"w": ones(1)}, [0.0, 1e100], log_time=True).losses[-1]
    assert final == 0.0 or final < 1e-30


def test_theorem1_and_balanced_flows_inherit_the_checks():
    with pytest.raises(ValueError, match="too short"):
        poison.theorem1_flow(ones(3) * 0.01, 5, poisoned=False, horizon=1e-200)
    with pytest.raises(ValueError, match="time must be at most"):
        extrapolation.balanced_flow(ones(8), 3, {"a": ones(2) * 0.1, "b": ones(2) * 0.1}, time=1e50)


# --------------------------------------------------------------------------------------------
# Group 2: extreme_eigenvalues' Lanczos path is right, robust at zero weights, tol validated
# --------------------------------------------------------------------------------------------


def test_lanczos_on_a_loss_that_uses_half_of_401_parameters():
    params = {"w": ones(401)}
    lanczos = curvature.extreme_eigenvalues(lambda p: (p["w"][:200] ** 2).sum(), params)
    dense = curvature.extreme_eigenvalues(
        lambda p: (p["w"][:200] ** 2).sum(), params, dense_limit=1000
    )
    assert lanczos == pytest.approx((0.0, 2.0), abs=1e-10)  # exact spectrum {0, 2}
    assert lanczos == pytest.approx(dense, abs=1e-10)


def test_lanczos_at_the_zero_weights_of_a_deep_linear_network():
    params = {
        k: torch.zeros_like(v) for k, v in linear_nets.xavier_init([20, 20, 20, 1], 0).items()
    }
    x = torch.linspace(-1, 1, 60, dtype=DT).reshape(3, 20)
    loss = lambda p: ((linear_nets.network_output(p, x) - 1.0) ** 2).mean()  # noqa: E731
    assert curvature.parameter_count(params) == 820
    # depth 3 at zero: every second derivative vanishes, the Hessian is 0
    assert curvature.extreme_eigenvalues(loss, params) == (0.0, 0.0)


@pytest.mark.parametrize("tol", [None, "1e-10", math.nan, 0.0, -1.0, True])
def test_extreme_eigenvalues_validates_tol(tol):
    with pytest.raises(ValueError, match="tol"):
        curvature.extreme_eigenvalues(lambda p: (p["w"] ** 2).sum(), {"w": ones(3)}, tol=tol)


# --------------------------------------------------------------------------------------------
# Group 3: proposition3_student keeps its promise or says it cannot
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kappa", [36, 40, 80])
def test_proposition3_student_raises_where_float64_breaks_the_construction(kappa):
    with pytest.raises(ValueError, match="cannot keep its promise"):
        ssm.proposition3_student(ssm.theorem1_teacher(10), kappa, 1.0)


@pytest.mark.parametrize("kappa", [2, 7, 12, 20, 25])
@pytest.mark.parametrize("epsilon", [0.0, 5.0])
def test_proposition3_student_keeps_its_promise_where_it_returns(kappa, epsilon):
    teacher = ssm.theorem1_teacher(10)
    student = ssm.proposition3_student(teacher, kappa, epsilon)
    target = ssm.impulse_response(*teacher, kappa + 1).clone()
    target[kappa] += epsilon
    gap = (ssm.impulse_response(*student, kappa + 1) - target).abs().max().item()
    assert gap <= ssm.PROPOSITION3_TOLERANCE * max(1.0, target.abs().max().item())


# --------------------------------------------------------------------------------------------
# Group 4: booleans are real booleans
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["False", "no", 0, 1, None])
def test_flags_reject_everything_but_booleans(flag):
    a = ones(3) * 0.1
    calls = [
        lambda: poison.theorem1_loss(a, 5, poisoned=flag),
        lambda: poison.theorem1_velocity(a, 5, poisoned=flag),
        lambda: poison.theorem1_training_set(4, 5, poisoned=flag),
        lambda: poison.theorem1_flow(a, 5, poisoned=flag, horizon=10.0, points=2),
        lambda: flow.gradient_flow(
            lambda p: (p["w"] ** 2).sum(), {"w": ones(1)}, [0, 1], log_time=flag
        ),  # fmt: skip
        lambda: ssm.generalization_error(
            ssm.ones_teacher(), ssm.ones_teacher(), 3, normalize=flag
        ),  # fmt: skip
        lambda: viz.plot_loss(None, [1.0, 2.0], [1.0, 0.5], logx=flag),
        lambda: viz.Slider(0.1, 1.0, 0.5, log=flag),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="must be True or False"):
            call()


def test_numpy_booleans_are_booleans():
    a = ones(3) * 0.1
    torch.testing.assert_close(
        poison.theorem1_loss(a, 5, poisoned=np.bool_(True)),
        poison.theorem1_loss(a, 5, poisoned=True),
        rtol=0,
        atol=0,  # the same computation path
    )


# --------------------------------------------------------------------------------------------
# Group 5: the functions that checked nothing
# --------------------------------------------------------------------------------------------


def _mlp(runs=2, d=3, hidden=2):
    g = torch.Generator().manual_seed(0)
    shapes = {"a": (runs, d), "b": (runs, d), "c": (runs, d), "d_in": (runs, hidden, 1),
              "d_hidden": (runs, hidden, hidden), "d_out": (runs, 1, hidden)}  # fmt: skip
    return {k: torch.rand(*s, generator=g, dtype=DT) for k, s in shapes.items()}


def test_ssm_mlp_output_checks_its_inputs():
    params, x = _mlp(), torch.rand(2, 4, 5, dtype=DT)
    assert dyn.ssm_mlp_output(params, x).shape == (2, 4)
    bad = [
        (None, x, "params must be a dict"),
        ({**params, "a": params["a"].float()}, x, "float64"),
        ({**params, "b": params["b"].clone().fill_(math.nan)}, x, "finite"),
        (params, x.float(), "torch.float64"),
        (params, x.unsqueeze(0), "shape"),  # an extra run axis
        (params, x[:1], "shape"),  # fewer runs than the parameters
        (params, x[:, :, :0], "kappa >= 1"),
        ({**params, "d_out": params["d_out"][:1]}, x, "d_out"),
    ]
    for p, data, words in bad:
        with pytest.raises(ValueError, match=words):
            dyn.ssm_mlp_output(p, data)


def test_ssm_mlp_loss_gradient_checks_data_and_parameters():
    x, y = torch.rand(2, 4, 5, dtype=DT), torch.rand(2, 4, dtype=DT)
    w = torch.full((2, 4), 0.25, dtype=DT)
    loss, grads = dyn.ssm_mlp_loss_gradient(x, y, w)(_mlp())
    assert loss.shape == (2,) and bool((loss >= 0).all()) and set(grads) == set(_mlp())
    with pytest.raises(ValueError, match="non-negative"):
        dyn.ssm_mlp_loss_gradient(x, y, -w)
    with pytest.raises(ValueError, match="finite"):
        dyn.ssm_mlp_loss_gradient(x, y.clone().fill_(math.nan), w)
    with pytest.raises(ValueError, match=r"y must have shape \(2, 4\)"):
        dyn.ssm_mlp_loss_gradient(x, y[:1], w)
    with pytest.raises(ValueError, match="3 runs but the data have R = 2"):
        dyn.ssm_mlp_loss_gradient(x, y, w)(_mlp(runs=3))
    with pytest.raises(ValueError, match="params must be a dict"):
        dyn.ssm_mlp_loss_gradient(x, y, w)(None)


def test_network_output_and_cross_entropy_check_their_inputs():
    net = linear_nets.xavier_init((3, 4, 2), 0)
    x = torch.rand(5, 3, dtype=DT)
    labels = torch.tensor([0, 1, 1, 0, 1])
    assert linear_nets.cross_entropy(net, x, labels).item() > 0
    assert linear_nets.cross_entropy(net, x, [0, 1, 1, 0, 1]).item() > 0  # a list converts
    for bad_x, words in [(x.float(), "torch.float64"), (x[:, :2], "shape"), (None, "x must be")]:
        with pytest.raises(ValueError, match=words):
            linear_nets.network_output(net, bad_x)
    with pytest.raises(ValueError, match="finite"):
        linear_nets.network_output(net, x.clone().fill_(math.nan))
    with pytest.raises(ValueError, match=r"labels must lie in 0..1 \(the network has 2 outputs\)"):
        linear_nets.cross_entropy(net, x, torch.tensor([0, 1, 7, 0, 1]))
    for bad_labels in (labels[:3], labels.double(), None):
        with pytest.raises(ValueError, match="labels"):
            linear_nets.cross_entropy(net, x, bad_labels)
    with pytest.raises(ValueError, match="W1"):
        linear_nets.network_output({**net, "W1": net["W1"].float()}, x)


def test_gru_tail_error_checks_its_inputs():
    student, teacher = extrapolation.GRUNet(2, 0), extrapolation.GRUNet(2, 1)
    assert extrapolation.gru_tail_error(student, teacher, 2, length=5, n=8) >= 0
    with pytest.raises(ValueError, match="student must be a GRUNet"):
        extrapolation.gru_tail_error(None, teacher, 2)
    with pytest.raises(ValueError, match="n must be at least 1"):
        extrapolation.gru_tail_error(student, teacher, 2, n=0)


# --------------------------------------------------------------------------------------------
# Group 6: the remaining items
# --------------------------------------------------------------------------------------------


def test_poisoning_window_rejects_plateaus_it_cannot_integrate():
    start = time.perf_counter()
    for kappa in (20, 40, 60):
        with pytest.raises(ValueError, match="escape time"):
            poison.poisoning_window(10, kappa, [0], init_scales=[1e-3], relative_gaps=[None])
    assert time.perf_counter() - start < 10  # rejected before any flow runs


def test_square_loss_of_an_empty_training_set_is_rejected():
    with pytest.raises(ValueError, match="empty"):
        ssm.square_loss(ssm.ones_teacher(), torch.zeros(0, 3, dtype=DT), torch.zeros(0, dtype=DT))


def test_effective_rank_of_huge_entries():
    assert ssm.effective_rank(torch.full((4,), 1e308, dtype=DT)).item() == pytest.approx(4.0)
    # the rescaling only applies where the sum overflows: ordinary inputs are computed as before
    torch.testing.assert_close(ssm.effective_rank(ones(4) * 1e300), ssm.effective_rank(ones(4)))


def test_trajectory_at_takes_integers_only():
    traj = flow.gradient_descent(lambda p: (p["w"] ** 2).sum(), {"w": ones(2)}, 0.1, 3)
    assert traj.at(np.int64(1))["w"].shape == (2,)
    for index in (True, 1.0, "1", None, 4, -5):
        with pytest.raises(ValueError, match="index"):
            traj.at(index)


def test_lemma7_bound_rejects_a_negative_gradient_norm():
    net = linear_nets.xavier_init((3, 2, 2, 1), 0)
    assert linear_nets.lemma7_bound(net, 0.5) <= 0
    with pytest.raises(ValueError, match="gradient_norm"):
        linear_nets.lemma7_bound(net, -0.5)


@pytest.mark.parametrize("value", ["²", "0", "-1", "1.5", "two", "99999"])
def test_book_torch_threads_accepts_plain_positive_integers_only(monkeypatch, value):
    monkeypatch.setenv("BOOK_TORCH_THREADS", value)
    with pytest.raises(ValueError, match="BOOK_TORCH_THREADS"):
        config.torch_threads()
    monkeypatch.setenv("BOOK_TORCH_THREADS", "3")
    assert config.torch_threads() == 3


def test_seeds_beyond_numpy_are_rejected_by_lib():
    for call in (
        lambda: poison.theorem1_init(4, 2**32, init_scale=1e-2),
        lambda: extrapolation.balanced_init(3, 2**32, init_scale=0.1),
        lambda: linear_nets.xavier_init([2, 2, 1], 2**32),
        lambda: dyn.dynamics_init(dyn.FIGURE2_SSM, 2**32),
        lambda: extrapolation.general_init(2, [0, 2**32], init_scale=0.1),
    ):
        with pytest.raises(ValueError, match="at most 4294967295"):
            call()


def test_messages_name_the_value_that_came():
    teacher = extrapolation.GRUNet(2, 0)
    with pytest.raises(ValueError, match="seed must be an integer, got 2.5"):
        extrapolation.train_gru_student(teacher, 3, hidden=2, steps=1, seed=2.5)
    field = extrapolation.balanced_descent_field(ones(8), [3])
    params = {"a": ones(1, 2) * 0.1, "b": ones(1, 2) * 0.1}
    with pytest.raises(ValueError, match=r"milestones must be strictly increasing, got \[15, 5\]"):
        extrapolation.train_adam(field, params, 1, lr=0.01, steps=20, milestones=[15, 5])


# --------------------------------------------------------------------------------------------
# Sizes, overflowing results, and the contract of the loss closures
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [10**12, 2**64])
def test_absurd_sizes_get_a_value_error_before_any_allocation(size):
    """A length of 10¹² (or one beyond a C integer) is refused by lib, not by the allocator."""
    a = torch.tensor([0.5, -0.3], dtype=DT)
    calls = [
        lambda: ssm.impulse_response(a, ones(2), ones(2), size),
        lambda: ssm.unit_impulse(size, 1),
        lambda: ssm.random_sequences(size, 3, [1], torch.Generator()),
        lambda: extrapolation.delay_teacher(size),
        lambda: extrapolation.lemma_a1_pair(size),
        lambda: poison.theorem1_training_set(4, size, poisoned=True),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="at most"):
            call()


def test_training_records_that_cannot_fit_are_refused():
    def loss(p):
        return (p["w"] ** 2).sum()

    with pytest.raises(ValueError, match="raise record_every"):
        flow.gradient_descent(loss, {"w": ones(3)}, 0.1, 10**12)
    with pytest.raises(ValueError, match="steps must be at most"):
        flow.gradient_descent(loss, {"w": ones(3)}, 0.1, 2**64, record_every=2**60)


def test_evaluations_that_overflow_raise_numerical_failure():
    huge = torch.full((3,), 1e300, dtype=DT)
    x = torch.ones(2, 4, dtype=DT)
    for call in (
        lambda: ssm.impulse_response(huge, ones(3), ones(3), 4),
        lambda: ssm.ssm_output(huge, ones(3), ones(3), x),
        lambda: ssm.ssm_recurrence(huge, ones(3), ones(3), x),
        lambda: extrapolation.moment_sequence(huge, ones(3), 4),
        lambda: poison.theorem1_velocity(huge, 5, poisoned=True),
        lambda: linear_nets.end_to_end_velocity(huge, ones(3), 3),
    ):
        with pytest.raises(NumericalFailure, match="not finite"):
            call()


def test_loss_data_beyond_1e100_are_rejected_with_their_size():
    x = torch.full((2, 3), 1e300, dtype=DT)
    with pytest.raises(ValueError, match=r"max \|x\| = 1e\+300"):
        ssm.square_loss_gradient(x, ones(2))
    with pytest.raises(ValueError, match="target must have entries of magnitude"):
        linear_nets.scalar_regression_loss(linear_nets.xavier_init([2, 2, 1], 0), [1e300, 0.0])


def test_a_loss_closure_passes_an_overflow_on_for_the_engine_to_flag():
    """At parameters that overflow, a loss closure returns the overflow (inf, or nan from inf − inf)
    rather than raising: the engines stop the run there and report it in info["diverged"]."""
    net = linear_nets.xavier_init([2, 2, 1], 0)
    huge = {k: v * 1e200 for k, v in net.items()}
    assert not math.isfinite(float(linear_nets.scalar_regression_loss(huge, [1.0, 0.0])))
    run = flow.gradient_descent(
        lambda p: linear_nets.scalar_regression_loss(p, [1.0, 0.0]), huge, 0.1, 5
    )
    assert run.info["diverged"] is True


def test_theorem15_step_size_below_float64_is_reported_with_its_size():
    assert linear_nets.theorem15_step_size(3, 0.1, 0.5, 0.1) > 0
    with pytest.raises(NumericalFailure, match=r"10\^-331"):
        linear_nets.theorem15_step_size(100, 0.1, 0.5, 0.1)


def test_a_descent_field_is_checked_where_it_is_built():
    field = extrapolation.balanced_descent_field(torch.tensor([1.0, 0.5, 0.25], dtype=DT), [3])
    target = np.array([1.0, 0.5, 0.25])
    with pytest.raises(ValueError, match="target needs at least max"):
        extrapolation.DescentField("balanced", target[:2], (3,), field.gradient)
    with pytest.raises(ValueError, match="kind must be one of"):
        extrapolation.DescentField("dense", target, (3,), field.gradient)
    with pytest.raises(ValueError, match="ks must be a tuple"):
        extrapolation.DescentField("balanced", target, [3], field.gradient)
