"""Unit tests of lib.networks._linear_kernels: the compiled descent against the torch engine
(lib.engine.flow with autograd on lib.networks.linear_nets.cross_entropy, or with its closed-form
gradient)."""

import numpy as np
import pytest
import torch
from conftest import DT, ones

from lib.book.data import digits
from lib.engine.flow import gradient_descent
from lib.networks.linear_nets import (
    cross_entropy,
    cross_entropy_descent,
    cross_entropy_gradient,
    xavier_init,
)


def _assert_same_run(fast, reference, *, rtol=1e-10):
    """Equal record times, info and step sizes; iterates and losses equal up to rounding.

    The two paths take the same sums in other orders (BLAS kernels, transposed layouts): each step
    differs by ~1e-16 relative, and these short, stable runs keep that far below ``rtol``.
    """
    np.testing.assert_array_equal(fast.times, reference.times)
    assert fast.info == reference.info
    np.testing.assert_array_equal(fast.step_sizes, reference.step_sizes)  # lr or NaN, exactly
    assert set(fast.params) == set(reference.params)
    for k in reference.params:
        assert fast[k].shape == reference[k].shape
        scale = np.nanmax(np.abs(reference[k]))
        np.testing.assert_allclose(fast[k], reference[k], rtol=0, atol=rtol * scale)
    np.testing.assert_allclose(fast.losses, reference.losses, rtol=rtol, atol=0, equal_nan=True)


@pytest.mark.parametrize("activation", ["linear", "relu"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_autograd_descent_for_300_steps(activation, seed):
    x, labels = digits(200, every=5)
    start = xavier_init([64, 16, 16, 10], seed=seed)

    def loss(params):
        return cross_entropy(params, x, labels, activation=activation)

    reference = gradient_descent(loss, start, 0.05, 300, record_every=7)
    fast = cross_entropy_descent(start, x, labels, 0.05, 300, activation=activation,
                                 record_every=7)  # fmt: skip
    assert reference.losses[-1] < 0.7 * reference.losses[0]  # it trained
    _assert_same_run(fast, reference)


@pytest.mark.parametrize("activation", ["linear", "relu"])
@pytest.mark.parametrize("widths", [(6, 5, 3), (6, 7, 5, 4, 3)])
def test_other_depths(gen, activation, widths):
    x = torch.randn(30, widths[0], generator=gen, dtype=DT)
    labels = torch.randint(0, widths[-1], (30,), generator=gen)
    start = xavier_init(list(widths), seed=4)

    def loss(params):
        return cross_entropy(params, x, labels, activation=activation)

    reference = gradient_descent(loss, start, 0.1, 60, record_every=10)
    fast = cross_entropy_descent(start, x, labels, 0.1, 60, activation=activation,
                                 record_every=10)  # fmt: skip
    _assert_same_run(fast, reference)


@pytest.mark.parametrize("activation", ["linear", "relu"])
def test_run_axis_matches_the_engine_with_a_frozen_diverged_run(gen, activation):
    """Three runs, one of which overflows at once (weights of size 1e160: logits inf − inf): it is
    recorded frozen, with step NaN, as gradient_descent(runs=3) records it."""
    x = torch.randn(25, 5, generator=gen, dtype=DT)
    labels = torch.randint(0, 3, (25,), generator=gen)
    starts = [xavier_init([5, 6, 4, 3], seed=s) for s in range(3)]
    stacked = {k: torch.stack([s[k] for s in starts]) for k in starts[0]}
    stacked = {k: v.clone() for k, v in stacked.items()}
    for v in stacked.values():
        v[1] *= 1e160

    def gradient(params):
        return cross_entropy_gradient(params, x, labels, activation=activation)

    reference = gradient_descent(None, stacked, 0.1, 50, record_every=8, runs=3, gradient=gradient)
    fast = cross_entropy_descent(stacked, x, labels, 0.1, 50, activation=activation,
                                 record_every=8)  # fmt: skip
    assert fast.info["diverged"] == [False, True, False]
    assert fast.info["steps_run"] == [50, 0, 50]
    _assert_same_run(fast, reference)
    # run 0 of the stack is run 0 alone
    alone = cross_entropy_descent(starts[0], x, labels, 0.1, 50, activation=activation,
                                  record_every=8)  # fmt: skip
    for k in starts[0]:
        np.testing.assert_allclose(fast[k][:, 0], alone[k], rtol=0, atol=1e-12)


def test_zero_steps_records_the_start():
    x, labels = ones(3, 2), torch.tensor([0, 1, 0])
    start = xavier_init([2, 3, 2], seed=0)
    fast = cross_entropy_descent(start, x, labels, 0.1, 0)
    reference = gradient_descent(lambda p: cross_entropy(p, x, labels), start, 0.1, 0)
    _assert_same_run(fast, reference)


def _call(**changes):
    args = {
        "params": xavier_init([2, 3, 2], seed=0),
        "x": ones(4, 2),
        "labels": torch.tensor([0, 1, 1, 0]),
        "lr": 0.1,
        "steps": 5,
        "activation": "linear",
        "record_every": 1,
    }
    args.update(changes)
    return lambda: cross_entropy_descent(
        args["params"], args["x"], args["labels"], args["lr"], args["steps"],
        activation=args["activation"], record_every=args["record_every"],
    )  # fmt: skip


BAD_CALLS = [
    ("activation", _call(activation="tanh")),
    ("lr zero", _call(lr=0.0)),
    ("lr nan", _call(lr=float("nan"))),
    ("steps negative", _call(steps=-1)),
    ("steps float", _call(steps=2.5)),
    ("record_every zero", _call(record_every=0)),
    ("x width", _call(x=ones(4, 3))),
    ("x float32", _call(x=torch.ones(4, 2))),
    ("x inf", _call(x=torch.full((4, 2), float("inf"), dtype=DT))),
    ("labels range", _call(labels=torch.tensor([0, 1, 2, 0]))),
    ("labels count", _call(labels=torch.tensor([0, 1]))),
    ("params not a dict", _call(params=[ones(3, 2), ones(2, 3)])),
    ("params keys", _call(params={"W1": ones(3, 2), "W3": ones(2, 3)})),
    ("run axes differ", _call(params={"W1": ones(2, 3, 2), "W2": ones(3, 2, 3)})),
    ("4-D weights", _call(params={"W1": ones(1, 1, 3, 2), "W2": ones(1, 1, 2, 3)})),
    ("inner widths", _call(params={"W1": ones(3, 2), "W2": ones(2, 4)})),
]


@pytest.mark.parametrize("name,call", BAD_CALLS, ids=[n for n, _ in BAD_CALLS])
def test_bad_input_raises_value_error(name, call):
    with pytest.raises(ValueError):
        call()
