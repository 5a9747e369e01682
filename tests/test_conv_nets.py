"""Unit tests of lib.networks.conv_nets: the adapted CNN of Elkabetz & Cohen 2021's Figure 3 as a
weight-sharing network (eq. (28)) against PyTorch's convolutions, footnote 27's operator norms,
Lemma 23's bound and the norm differences conserved by gradient flow (Proposition 24)."""

import numpy as np
import pytest
import torch

from lib.engine import curvature
from lib.engine.flow import gradient_descent
from lib.networks import conv_nets

DT = torch.float64


def _data(count=20, side=6, seed=0):
    gen = np.random.RandomState(seed)
    return (torch.from_numpy(gen.normal(size=(count, side * side))),
            torch.from_numpy(gen.randint(0, 3, size=count)))


def _torch_network(params, x, side):
    hidden = x.reshape(-1, 1, side, side)
    weights = [params[f"w{j}"] for j in range(1, len(params) + 1)]
    for j, w in enumerate(weights):
        if w.ndim == 4:
            hidden = torch.nn.functional.conv2d(hidden, w, stride=2, padding=w.shape[-1] // 2)
        else:
            hidden = hidden.flatten(1) @ w.T
        if j < len(weights) - 1:
            hidden = torch.relu(hidden)
    return hidden


@pytest.mark.parametrize("kernel", [3, 2])
def test_cnn_output_matches_torch_conv(kernel):
    x, _ = _data()
    params = conv_nets.cnn_init(1, side=6, channels=(3, 4), hidden=(5,), classes=3, kernel=kernel)
    # the same sums in another order: agreement up to rounding
    torch.testing.assert_close(conv_nets.cnn_output(params, x), _torch_network(params, x, 6),
                               rtol=1e-12, atol=1e-13)


def test_runs_axis_is_independent_runs():
    x, y = _data()
    nets = [conv_nets.cnn_init(s, side=6, channels=(2,), hidden=(3,), classes=3) for s in (0, 1)]
    stack = {k: torch.stack([n[k] for n in nets]) for k in nets[0]}
    losses = conv_nets.cnn_cross_entropy(stack, x, y)
    for r, net in enumerate(nets):  # batched against alone: rounding only
        torch.testing.assert_close(losses[r], conv_nets.cnn_cross_entropy(net, x, y),
                                   rtol=1e-12, atol=1e-14)


def test_layer_matrices_reproduce_the_network():
    """Eq. (28): x ↦ W_n σ(⋯ σ(W_1(w_1) x)) with the explicit matrices is the CNN; every row of a
    convolution's matrix holds each kernel entry at most once."""
    x, _ = _data()
    params = conv_nets.cnn_init(2, side=6, channels=(2, 3), hidden=(4,), classes=3)
    matrices = conv_nets.layer_matrices(params, side=6)
    hidden = x
    for j, matrix in enumerate(matrices):
        hidden = hidden @ matrix.T
        hidden = torch.relu(hidden) if j < len(matrices) - 1 else hidden
    torch.testing.assert_close(hidden, conv_nets.cnn_output(params, x), rtol=1e-12, atol=1e-13)
    first = matrices[0]
    for row in first:
        values = row[row != 0]
        assert len(set(values.tolist())) == len(values)  # distinct random entries: no repetition


def test_sharing_norms_count_tied_entries():
    """Footnote 27: ‖W_j(·)‖_op² is the largest number of entries tied to one weight; it is also
    the largest eigenvalue of the Gram matrix of the linear map w_j ↦ vec W_j(w_j)."""
    params = conv_nets.cnn_init(0, side=8, channels=(2, 3), hidden=(4,), classes=3)
    norms = conv_nets.sharing_norms(params, side=8)
    assert norms[:2] == [4.0, 2.0] and norms[2:] == [1.0, 1.0]  # 16 and 4 output positions
    for j in range(2):
        w = params[f"w{j + 1}"]
        columns = []
        for i in range(w.numel()):
            unit = torch.zeros(w.numel(), dtype=DT)
            unit[i] = 1.0
            single = {**params, f"w{j + 1}": unit.reshape(w.shape)}
            columns.append(conv_nets.layer_matrices(single, side=8)[j].reshape(-1))
        jacobian = torch.stack(columns, 1)
        top = torch.linalg.matrix_norm(jacobian, ord=2).item()
        assert top == pytest.approx(norms[j], rel=1e-12)  # an exact count, up to rounding


def test_lemma23_bound_below_lambda_min():
    """Eq. (31) at random points and after rescaling w_1 → ρ w_1, w_2 → w_2 / ρ (Proposition 22:
    the loss stays, λ_min falls)."""
    x, y = _data()
    params = conv_nets.cnn_init(3, side=6, channels=(2, 3), hidden=(4,), classes=3)

    def loss(p):
        return conv_nets.cnn_cross_entropy(p, x, y)

    lows = []
    for rho in (1.0, 10.0, 100.0):
        moved = {**params, "w1": rho * params["w1"], "w2": params["w2"] / rho}
        low, _ = curvature.extreme_eigenvalues(loss, moved)
        assert low >= conv_nets.lemma23_bound(moved, x, y) - 1e-9  # the eigen-solver's accuracy
        assert loss(moved).item() == pytest.approx(loss(params).item(), rel=1e-12)
        lows.append(low)
    assert lows[0] > lows[1] > lows[2]


def test_norm_differences_conserved_by_the_flow():
    """Du et al. 2018, Theorem 2.3: ‖w_{j+1}‖² − ‖w_j‖² is constant along gradient flow. Gradient
    descent moves it by O(η), so the Richardson combination 2 D(η/2) − D(η) of the drifts, the
    flow's drift up to O(η²), is a small fraction of D(η). (An adaptive ODE solver crawls across
    the ReLU kinks, so the flow is reached through descent, as the chapter's ReLU runs do.)"""
    x, y = _data(count=15)
    params = conv_nets.cnn_init(4, side=6, channels=(2,), hidden=(4,), classes=3)

    def loss(p):
        return conv_nets.cnn_cross_entropy(p, x, y)

    start = conv_nets.norm_differences(params)
    drifts = []
    for eta in (0.02, 0.01):
        run = gradient_descent(loss, params, eta, int(round(2 / eta)))
        drifts.append(conv_nets.norm_differences(run.final) - start)
    assert drifts[0].abs().max() > 0
    # first order: the O(η) drift halves; its remainder is O(η²), a tenth at most at η = 0.02
    assert (2 * drifts[1] - drifts[0]).norm() < 0.1 * drifts[0].norm()


def test_bad_shapes_are_rejected():
    x, y = _data()
    params = conv_nets.cnn_init(0, side=6, channels=(2,), hidden=(4,), classes=3)
    with pytest.raises(ValueError, match="columns"):
        conv_nets.cnn_output({**params, "w2": params["w2"][:, :-1]}, x)
    with pytest.raises(ValueError, match="square images"):
        conv_nets.cnn_output(params, x[:, :-1])
    with pytest.raises(ValueError, match="matrix"):
        conv_nets.cnn_output({"w1": params["w2"], "w2": params["w1"]}, x)
