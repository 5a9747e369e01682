"""Unit tests of lib.networks.linear_nets: deep linear networks of Elkabetz & Cohen 2021 against
explicit formulas, numpy and autograd (Procedure 13, Lemmas 7 and 35, Prop. 6, Theorem 15,
balancedness)."""

import itertools
import math

import numpy as np
import pytest
import torch
from conftest import DT, flat_hessian, ones

from lib.book.data import digits
from lib.engine.flow import gradient_descent, gradient_flow
from lib.networks.linear_nets import (
    as_params,
    balance_matrices,
    balanced_init,
    cross_entropy,
    cross_entropy_gradient,
    end_to_end,
    end_to_end_velocity,
    layers,
    lemma7_bound,
    network_output,
    rescale,
    scalar_regression_loss,
    theorem15_step_size,
    unbalancedness,
    xavier_init,
)
from lib.networks.relu_nets import relu_network


def _random_weights(gen, widths, scale=1.0):
    return [
        scale * torch.randn(out, inp, generator=gen, dtype=DT)
        for inp, out in zip(widths[:-1], widths[1:], strict=True)
    ]


def _numpy_product(weights):
    """W_n ⋯ W_1 with numpy."""
    out = weights[0].detach().numpy()
    for w in weights[1:]:
        out = w.detach().numpy() @ out
    return out


def _unit(gen, d):
    v = torch.randn(d, generator=gen, dtype=DT)
    return v / v.norm()


def _lambda_min(loss, params):
    """Smallest eigenvalue of the autograd Hessian of loss over the flattened W1, …, Wn."""
    ordered = {f"W{j}": params[f"W{j}"] for j in range(1, len(params) + 1)}
    return float(np.linalg.eigvalsh(flat_hessian(loss, ordered).numpy())[0])


# --- parameter dicts ------------------------------------------------------------------------------


def test_layers_and_as_params_round_trip(gen):
    weights = _random_weights(gen, (4, 3, 5, 2))
    params = as_params(weights)
    assert list(params) == ["W1", "W2", "W3"]
    for w, p in zip(weights, params.values(), strict=True):
        assert p is w
    back = layers(params)
    assert len(back) == 3 and all(b is w for b, w in zip(back, weights, strict=True))
    # the order comes from the key names, not from the dict's order
    shuffled = {"W3": weights[2], "W1": weights[0], "W2": weights[1]}
    assert all(b is w for b, w in zip(layers(shuffled), weights, strict=True))
    # lists and numpy arrays become float64 tensors
    converted = as_params([[[1.0, 2.0]], np.ones((3, 1))])
    assert all(v.dtype == DT for v in converted.values())
    assert [tuple(v.shape) for v in converted.values()] == [(1, 2), (3, 1)]


BAD_LAYERS = [
    ("empty", lambda: layers({})),
    ("not a dict", lambda: layers([ones(2, 2), ones(2, 2)])),
    ("missing W2", lambda: layers({"W1": ones(2, 2), "W3": ones(2, 2)})),
    ("starts at W0", lambda: layers({"W0": ones(2, 2), "W1": ones(2, 2)})),
    ("lower-case key", lambda: layers({"w1": ones(2, 2)})),
    ("extra key", lambda: layers({"W1": ones(2, 2), "W2": ones(2, 2), "b": ones(2)})),
    ("shape mismatch", lambda: layers({"W1": ones(3, 4), "W2": ones(2, 2)})),
    ("shape mismatch deep", lambda: layers({"W1": ones(3, 4), "W2": ones(2, 3), "W3": ones(1, 3)})),
    ("as_params 1-D", lambda: as_params([ones(3, 2), ones(3)])),
    ("as_params 3-D", lambda: as_params([ones(1, 3, 2)])),
    ("as_params float32", lambda: as_params([torch.ones(2, 2)])),
    ("as_params nan", lambda: as_params([ones(2, 2) * math.nan])),
]


@pytest.mark.parametrize("name,call", BAD_LAYERS, ids=[n for n, _ in BAD_LAYERS])
def test_layers_and_as_params_reject_bad_input(name, call):
    with pytest.raises(ValueError):
        call()


@pytest.mark.parametrize("which", ["first", "last"])
def test_layers_rejects_a_vector_entry(which):
    params = (
        {"W1": ones(3), "W2": ones(2, 3)} if which == "first" else {"W1": ones(2, 3), "W2": ones(2)}
    )
    with pytest.raises(ValueError):
        layers(params)


# --- initialization -------------------------------------------------------------------------------


def test_xavier_init_shapes_bounds_and_reproducibility():
    widths = (5, 4, 3, 2)
    params = xavier_init(widths, seed=7)
    assert list(params) == ["W1", "W2", "W3"]
    rng = np.random.RandomState(7)
    for (fan_in, fan_out), w in zip(itertools.pairwise(widths), params.values(), strict=True):
        assert w.shape == (fan_out, fan_in) and w.dtype == DT
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        assert float(w.abs().max()) <= bound
        # the documented draws: numpy RandomState(seed).uniform, layer after layer
        # the same numpy draws, copied: one computation path, exact
        np.testing.assert_array_equal(w.numpy(), rng.uniform(-bound, bound, size=(fan_out, fan_in)))
    again = xavier_init(widths, seed=7)
    other = xavier_init(widths, seed=8)
    for k in params:
        torch.testing.assert_close(again[k], params[k], rtol=0, atol=0)
        assert not torch.equal(other[k], params[k])


def test_xavier_init_fills_its_interval():
    w = xavier_init((300, 200, 1), seed=0)["W1"]
    bound = math.sqrt(6.0 / 500)
    assert w.abs().max() <= bound
    assert w.abs().max() > 0.999 * bound
    assert float(w.var()) == pytest.approx(
        bound**2 / 3, rel=0.02, abs=0
    )  # U[−a, a] has variance a²/3
    assert abs(float(w.mean())) < 0.01 * bound


@pytest.mark.parametrize(
    "widths,seed",
    [((3, 2), 0), ((3,), 0), ((3, 0, 2), 0), ((3, 2.5, 2), 0), ((3, 2, 2), -1), ((3, 2, 2), 1.5)],
)
def test_xavier_init_rejects_bad_input(widths, seed):
    with pytest.raises(ValueError):
        xavier_init(widths, seed)


def _svals_root(matrix, depth):
    return np.linalg.svd(matrix.numpy(), compute_uv=False) ** (1.0 / depth)


@pytest.mark.parametrize(
    "widths,rank",
    [
        ((5, 4, 3, 1), 1),
        ((6, 2, 1), 1),
        ((5, 3, 3, 3, 1), 1),
        ((5, 3, 4, 2), 2),
        ((4, 2, 2), 2),
        ((6, 2, 5, 3, 2), 2),
    ],
)
def test_balanced_init_procedure_13(gen, widths, rank):
    d_out, d_in = widths[-1], widths[0]
    depth = len(widths) - 1
    a = torch.randn(d_out, d_in, generator=gen, dtype=DT)
    assert np.linalg.matrix_rank(a.numpy()) == rank
    params = balanced_init(widths, a)
    weights = layers(params)
    assert [tuple(w.shape) for w in weights] == [(widths[j + 1], widths[j]) for j in range(depth)]
    torch.testing.assert_close(torch.from_numpy(_numpy_product(weights)), a, rtol=1e-12, atol=1e-12)
    for j in range(depth - 1):
        balance = weights[j + 1].T @ weights[j + 1] - weights[j] @ weights[j].T
        assert float(balance.abs().max()) < 1e-12
    assert unbalancedness(params) < 1e-12
    # every layer has the singular values of A to the power 1/n (padded with zeros)
    root = _svals_root(a, depth)
    for w in weights:
        s = np.linalg.svd(w.numpy(), compute_uv=False)
        np.testing.assert_allclose(s[:rank], root, rtol=1e-12)
        assert np.all(s[rank:] < 1e-12)


def test_balanced_init_low_rank_target_fits_narrow_width(gen):
    """A rank-1 2×5 matrix fits through a hidden width of 1."""
    a = torch.outer(
        torch.randn(2, generator=gen, dtype=DT), torch.randn(5, generator=gen, dtype=DT)
    )
    params = balanced_init((5, 1, 3, 2), a)
    torch.testing.assert_close(end_to_end(params), a, rtol=1e-12, atol=1e-12)
    assert unbalancedness(params) < 1e-12


def test_balanced_init_of_zero_is_zero():
    params = balanced_init((3, 2, 1), torch.zeros(1, 3, dtype=DT))
    assert all(float(w.abs().max()) == 0.0 for w in params.values())


BAD_BALANCED = [
    ("rank 2 through width 1", (5, 1, 3, 2), (2, 5)),
    ("rank 2 through width 1 later", (5, 3, 1, 2), (2, 5)),
    ("rank 3 through width 2", (4, 3, 2, 3), (3, 4)),
    ("A wrong shape", (5, 3, 1), (1, 4)),
    ("A transposed", (5, 3, 2), (5, 2)),
    ("depth 1", (5, 1), (1, 5)),
    ("width 0", (5, 0, 1), (1, 5)),
]


@pytest.mark.parametrize("name,widths,shape", BAD_BALANCED, ids=[b[0] for b in BAD_BALANCED])
def test_balanced_init_rejects_bad_input(gen, name, widths, shape):
    with pytest.raises(ValueError):
        balanced_init(widths, torch.randn(*shape, generator=gen, dtype=DT))


def test_balanced_init_rejects_a_vector(gen):
    with pytest.raises(ValueError):
        balanced_init((3, 2, 1), torch.randn(3, generator=gen, dtype=DT))


# --- forward maps and losses ----------------------------------------------------------------------


def test_end_to_end_and_linear_network_output(gen):
    weights = _random_weights(gen, (4, 5, 3, 2))
    params = as_params(weights)
    x = torch.randn(7, 4, generator=gen, dtype=DT)
    product = _numpy_product(weights)
    np.testing.assert_allclose(end_to_end(params).numpy(), product, rtol=1e-13, atol=1e-13)
    out = network_output(params, x)
    assert out.shape == (7, 2)
    np.testing.assert_allclose(out.numpy(), x.numpy() @ product.T, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, network_output(params, x, activation="linear"))


def test_relu_network_output(gen):
    weights = _random_weights(gen, (4, 6, 5, 3))
    params = as_params(weights)
    x = torch.randn(8, 4, generator=gen, dtype=DT)
    out = network_output(params, x, activation="relu")
    torch.testing.assert_close(out, relu_network(weights, x), rtol=0, atol=0)
    h = np.maximum(x.numpy() @ weights[0].numpy().T, 0)
    h = np.maximum(h @ weights[1].numpy().T, 0)
    np.testing.assert_allclose(out.numpy(), h @ weights[2].numpy().T, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(out, network_output(params, x))  # the ReLU acted


@pytest.mark.parametrize("activation", ["linear", "relu"])
def test_cross_entropy(gen, activation):
    weights = _random_weights(gen, (4, 6, 3))
    params = as_params(weights)
    x = torch.randn(9, 4, generator=gen, dtype=DT)
    labels = torch.randint(0, 3, (9,), generator=gen)
    got = cross_entropy(params, x, labels, activation=activation)
    logits = network_output(params, x, activation=activation)
    torch.testing.assert_close(got, torch.nn.functional.cross_entropy(logits, labels))
    # by hand: mean over samples of logsumexp(z) − z_label
    z = logits.numpy()
    m = z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
    expected = np.mean(lse - z[np.arange(9), labels.numpy()])
    assert float(got) == pytest.approx(expected, rel=1e-13, abs=0)


def _autograd_cross_entropy(params, x, labels, activation):
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    value = cross_entropy(leaves, x, labels, activation=activation)
    grads = torch.autograd.grad(value, list(leaves.values()))
    return value.detach(), dict(zip(leaves, grads, strict=True))


@pytest.mark.parametrize("activation", ["linear", "relu"])
@pytest.mark.parametrize("widths", [(4, 6, 3), (5, 7, 6, 3), (3, 4, 4, 4, 2)])
def test_cross_entropy_gradient_matches_autograd(gen, activation, widths):
    params = as_params(_random_weights(gen, widths))
    x = torch.randn(40, widths[0], generator=gen, dtype=DT)
    labels = torch.randint(0, widths[-1], (40,), generator=gen)
    value, grads = cross_entropy_gradient(params, x, labels, activation=activation)
    expected_value, expected = _autograd_cross_entropy(params, x, labels, activation)
    assert value.shape == () and list(grads) == list(params)
    # the same sums in another order (end-to-end product, transposed layout): rounding only,
    # a few ulps of the largest term per entry; 1e-12 relative leaves room for 40-term sums
    torch.testing.assert_close(value, expected_value, rtol=1e-12, atol=0)
    for k in params:
        scale = float(expected[k].abs().max())
        torch.testing.assert_close(grads[k], expected[k], rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("activation", ["linear", "relu"])
def test_cross_entropy_gradient_with_a_run_axis(gen, activation):
    widths, runs = (5, 6, 4, 3), 4
    draws = [_random_weights(gen, widths) for _ in range(runs)]
    stacks = [torch.stack([d[j] for d in draws]) for j in range(len(widths) - 1)]
    params = {f"W{j}": w for j, w in enumerate(stacks, start=1)}
    x = torch.randn(30, widths[0], generator=gen, dtype=DT)
    labels = torch.randint(0, widths[-1], (30,), generator=gen)
    values, grads = cross_entropy_gradient(params, x, labels, activation=activation)
    assert values.shape == (runs,)
    for r in range(runs):
        alone = {k: v[r] for k, v in params.items()}
        value, expected = _autograd_cross_entropy(alone, x, labels, activation)
        # a run inside a batch against the run alone: rounding only (batched kernels)
        torch.testing.assert_close(values[r], value, rtol=1e-12, atol=0)
        for k in params:
            scale = float(expected[k].abs().max())
            torch.testing.assert_close(grads[k][r], expected[k], rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("activation", ["linear", "relu"])
def test_cross_entropy_gradient_descent_follows_the_autograd_trajectory(activation):
    """The closed-form training step reproduces the autograd one: 300 steps of full-batch gradient
    descent on digits, fixed seeds, agree to 1e-10 relative (each step differs by rounding, ~1e-16,
    and these short runs at a stable step do not amplify it beyond a few orders of magnitude)."""
    x, labels = digits(200, every=5)
    for seed in (0, 1):
        start = xavier_init([64, 16, 16, 10], seed=seed)

        def loss(p):
            return cross_entropy(p, x, labels, activation=activation)

        def gradient(p):
            return cross_entropy_gradient(p, x, labels, activation=activation)

        reference = gradient_descent(loss, start, 0.05, 300, record_every=30)
        fast = gradient_descent(None, start, 0.05, 300, record_every=30, gradient=gradient)
        assert reference.losses[-1] < 0.7 * reference.losses[0]  # it trained
        for k in start:
            scale = np.abs(reference[k]).max()
            np.testing.assert_allclose(fast[k], reference[k], rtol=0, atol=1e-10 * scale)
        np.testing.assert_allclose(fast.losses, reference.losses, rtol=1e-10, atol=0)


def test_cross_entropy_gradient_linear_is_the_end_to_end_chain_rule(gen):
    """∇_{W_j} f = W_{n:j+1}ᵀ ∇φ(W_{n:1}) W_{j−1:1}ᵀ with ∇φ(P) = (softmax(XPᵀ) − Y)ᵀ X / N, by
    numpy."""
    weights = _random_weights(gen, (4, 5, 3, 2))
    x = torch.randn(11, 4, generator=gen, dtype=DT)
    labels = torch.randint(0, 2, (11,), generator=gen)
    _, grads = cross_entropy_gradient(as_params(weights), x, labels)
    w = [v.numpy() for v in weights]
    z = x.numpy() @ _numpy_product(weights).T
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(11), labels.numpy()] -= 1
    outer = p.T @ x.numpy() / 11
    expected = [(w[2] @ w[1]).T @ outer, w[2].T @ outer @ w[0].T, outer @ (w[1] @ w[0]).T]
    for j, e in enumerate(expected, start=1):
        np.testing.assert_allclose(grads[f"W{j}"].numpy(), e, rtol=1e-12, atol=1e-14)


def _gradient_call(**changes):
    args = {
        "params": as_params([ones(3, 2), ones(2, 3)]),
        "x": ones(4, 2),
        "labels": torch.tensor([0, 1, 1, 0]),
        "activation": "linear",
    }
    args.update(changes)
    return lambda: cross_entropy_gradient(
        args["params"], args["x"], args["labels"], activation=args["activation"]
    )


BAD_GRADIENT_CALLS = [
    ("activation", _gradient_call(activation="tanh")),
    ("x width", _gradient_call(x=ones(4, 3))),
    ("x float32", _gradient_call(x=torch.ones(4, 2))),
    ("x nan", _gradient_call(x=torch.full((4, 2), float("nan"), dtype=DT))),
    ("labels count", _gradient_call(labels=torch.tensor([0, 1]))),
    ("labels range", _gradient_call(labels=torch.tensor([0, 1, 2, 0]))),
    ("labels float", _gradient_call(labels=ones(4))),
    ("no inputs", _gradient_call(x=ones(0, 2), labels=torch.tensor([], dtype=torch.int64))),
    ("missing key", _gradient_call(params={"W1": ones(3, 2), "W3": ones(2, 3)})),
    ("run axes differ", _gradient_call(params={"W1": ones(2, 3, 2), "W2": ones(3, 2, 3)})),
    ("run axis on one", _gradient_call(params={"W1": ones(2, 3, 2), "W2": ones(2, 3)})),
    ("4-D weight", _gradient_call(params={"W1": ones(1, 2, 3, 2), "W2": ones(1, 2, 2, 3)})),
    ("inner widths", _gradient_call(params={"W1": ones(3, 2), "W2": ones(2, 4)})),
    ("weights float32", _gradient_call(params={"W1": torch.ones(3, 2), "W2": ones(2, 3)})),
]


@pytest.mark.parametrize("name,call", BAD_GRADIENT_CALLS, ids=[n for n, _ in BAD_GRADIENT_CALLS])
def test_cross_entropy_gradient_rejects_bad_input(name, call):
    with pytest.raises(ValueError):
        call()


def test_layers_rejects_a_run_axis():
    """The run axis is for the closed-form gradient only; layers() keeps asking for matrices."""
    with pytest.raises(ValueError):
        layers({"W1": ones(2, 3, 2), "W2": ones(2, 2, 3)})


def test_network_output_rejects_unknown_activation(gen):
    params = as_params(_random_weights(gen, (2, 2, 1)))
    with pytest.raises(ValueError):
        network_output(params, ones(3, 2), activation="tanh")
    with pytest.raises(ValueError):
        cross_entropy(params, ones(3, 2), torch.zeros(3, dtype=torch.long), activation="sigmoid")


@pytest.mark.parametrize("widths", [(5, 3, 1), (5, 4, 3, 1), (3, 2, 2, 2, 1)])
def test_scalar_regression_loss_formula(gen, widths):
    weights = _random_weights(gen, widths)
    target = torch.randn(widths[0], generator=gen, dtype=DT)
    got = scalar_regression_loss(as_params(weights), target)
    residual = _numpy_product(weights)[0] - target.numpy()
    assert float(got) == pytest.approx(0.5 * residual @ residual, rel=1e-13, abs=0)
    # also accepts a list target
    assert float(scalar_regression_loss(as_params(weights), target.tolist())) == float(got)


@pytest.mark.parametrize(
    "widths,target",
    [
        ((5, 3, 1), ones(4)),
        ((5, 3, 1), ones(1, 5)),
        ((5, 3, 2), ones(5)),
        ((5, 3, 1), ones(5).float()),
    ],
)
def test_scalar_regression_loss_rejects_bad_input(gen, widths, target):
    with pytest.raises(ValueError):
        scalar_regression_loss(as_params(_random_weights(gen, widths)), target)


# --- balancedness and rescaling -------------------------------------------------------------------


@pytest.mark.parametrize("widths", [(4, 3, 1), (5, 4, 3, 2), (3, 6, 2, 4, 1)])
def test_balance_matrices_and_unbalancedness(gen, widths):
    weights = _random_weights(gen, widths)
    params = as_params(weights)
    ws = [w.numpy() for w in weights]
    expected = [ws[j + 1].T @ ws[j + 1] - ws[j] @ ws[j].T for j in range(len(ws) - 1)]
    got = balance_matrices(params)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-13, atol=1e-13)
    nuclear = max(np.linalg.norm(e, "nuc") for e in expected)
    assert unbalancedness(params) == pytest.approx(nuclear, rel=1e-12, abs=0)
    assert isinstance(unbalancedness(params), float)


@pytest.mark.parametrize("j", [1, 2, 3])
def test_rescale(gen, j):
    weights = _random_weights(gen, (4, 3, 5, 2, 1))
    params = as_params(weights)
    before = {k: v.clone() for k, v in params.items()}
    c = 2.5
    out = rescale(params, j, c)
    for index, (name, w) in enumerate(out.items(), start=1):
        factor = c if index == j else 1 / c if index == j + 1 else 1.0
        torch.testing.assert_close(w, factor * before[name], rtol=1e-15, atol=0)
    torch.testing.assert_close(end_to_end(out), end_to_end(params), rtol=1e-13, atol=1e-13)
    for k in params:  # the input is not modified
        torch.testing.assert_close(params[k], before[k], rtol=0, atol=0)


@pytest.mark.parametrize(
    "j,c",
    [(0, 2.0), (4, 2.0), (5, 2.0), (1.5, 2.0), (1, 0.0), (1, -2.0), (1, math.nan), (1, math.inf)],
)
def test_rescale_rejects_bad_input(gen, j, c):
    params = as_params(_random_weights(gen, (4, 3, 5, 2, 1)))
    with pytest.raises(ValueError):
        rescale(params, j, c)


# --- Lemma 35: end-to-end dynamics ----------------------------------------------------------------


def _flow_velocity(weights, target):
    """d W_{n:1}/dt under gradient flow: −Σ_j W_{n:j+1} (∇_{W_j} f) W_{j−1:1}, ∇f by autograd."""
    leaves = [w.detach().clone().requires_grad_(True) for w in weights]

    def product(ws):
        out = ws[0]
        for w in ws[1:]:
            out = w @ out
        return out

    loss = 0.5 * ((product(leaves)[0] - target) ** 2).sum()
    grads = torch.autograd.grad(loss, leaves)
    ws = [w.detach() for w in weights]
    velocity = torch.zeros_like(product(ws))
    for j, g in enumerate(grads):
        left = product(ws[j + 1 :]) if j + 1 < len(ws) else torch.eye(g.shape[0], dtype=DT)
        right = product(ws[:j]) if j > 0 else torch.eye(g.shape[1], dtype=DT)
        velocity = velocity - left @ g @ right
    return velocity[0]


def _random_orthogonal(gen, d):
    q, r = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=DT))
    return q * torch.sign(torch.diagonal(r))


@pytest.mark.parametrize("widths", [(5, 4, 1), (5, 4, 3, 1)])
def test_end_to_end_velocity_lemma_35(gen, widths):
    depth = len(widths) - 1
    target = _unit(gen, widths[0])
    a = 0.3 * torch.randn(1, widths[0], generator=gen, dtype=DT)
    weights = layers(balanced_init(widths, a))
    # rotate the hidden spaces: still balanced, with the same product, but no zero pattern
    rotations = [_random_orthogonal(gen, d) for d in widths[1:-1]]
    rotated = [rotations[0] @ weights[0]]
    for j in range(1, depth - 1):
        rotated.append(rotations[j] @ weights[j] @ rotations[j - 1].T)
    rotated.append(weights[-1] @ rotations[-1].T)
    assert unbalancedness(as_params(rotated)) < 1e-12
    assert float((rotated[0] == 0).sum()) == 0
    for point in (weights, rotated):
        w = end_to_end(as_params(point))[0]
        got = end_to_end_velocity(w, target, depth)
        torch.testing.assert_close(got, _flow_velocity(point, target), rtol=1e-11, atol=1e-13)
    # later on the gradient flow, where the velocity is still given by the same formula
    traj = gradient_flow(
        lambda p: scalar_regression_loss(p, target), as_params(rotated), [0.0, 1.5], method="DOP853"
    )
    later = layers(traj.final)
    w = end_to_end(traj.final)[0]
    assert float((w - a[0]).norm()) > 1e-2  # it moved
    torch.testing.assert_close(
        end_to_end_velocity(w, target, depth), _flow_velocity(later, target), rtol=1e-9, atol=1e-11
    )
    # the formula needs balancedness: at an unbalanced point it is wrong
    unbalanced = layers(rescale(as_params(rotated), 1, 2.0))
    w = end_to_end(as_params(unbalanced))[0]
    mismatch = end_to_end_velocity(w, target, depth) - _flow_velocity(unbalanced, target)
    assert float(mismatch.abs().max()) > 1e-3


def test_end_to_end_velocity_at_zero_and_formula(gen):
    target = _unit(gen, 4)
    torch.testing.assert_close(
        end_to_end_velocity(torch.zeros(4, dtype=DT), target, 3), torch.zeros(4, dtype=DT)
    )
    # the explicit rank-one formula of the note, with numpy, depth 4
    w = torch.randn(4, generator=gen, dtype=DT)
    wn, tn, n = w.numpy(), target.numpy(), 4
    norm = np.linalg.norm(wn)
    expected = -(
        norm ** (2 - 2 / n) * (wn - tn) + (n - 1) * norm ** (-2 / n) * wn * (wn @ (wn - tn))
    )
    np.testing.assert_allclose(end_to_end_velocity(w, target, n).numpy(), expected, rtol=1e-13)


@pytest.mark.parametrize(
    "w,target,depth",
    [
        (ones(3), ones(3), 1),
        (ones(1, 3), ones(3), 2),
        (ones(3), ones(1, 3), 2),
        (ones(3), ones(3), 2.0),
    ],
)
def test_end_to_end_velocity_rejects_bad_input(w, target, depth):
    with pytest.raises(ValueError):
        end_to_end_velocity(w, target, depth)


@pytest.mark.parametrize("length", [4, 1])
def test_end_to_end_velocity_rejects_mismatched_lengths(length):
    with pytest.raises(ValueError):
        end_to_end_velocity(ones(3), torch.zeros(length, dtype=DT), 3)


# --- Lemma 7, Proposition 6 -----------------------------------------------------------------------


def _lemma7_formula(weights, gradient_norm):
    n = len(weights)
    norms = [np.linalg.norm(w.numpy(), 2) for w in weights]
    best = max(math.prod(subset) for subset in itertools.combinations(norms, n - 2))
    rank = min(weights[0].shape[1], weights[-1].shape[0])
    return -(n - 1) * math.sqrt(rank) * gradient_norm * best


@pytest.mark.parametrize("widths", [(4, 3, 2), (3, 4, 5, 2), (3, 4, 5, 2, 1), (2, 3, 3, 3, 3, 4)])
def test_lemma7_bound_formula(gen, widths):
    weights = _random_weights(gen, widths)
    got = lemma7_bound(as_params(weights), 0.7)
    assert got == pytest.approx(_lemma7_formula(weights, 0.7), rel=1e-12, abs=0)
    assert got < 0


@pytest.mark.parametrize("widths", [(4, 3, 1), (4, 3, 3, 1), (3, 2, 4, 2, 1)])
def test_lemma7_bound_below_lambda_min(gen, widths):
    target = _unit(gen, widths[0])

    def loss(p):
        return scalar_regression_loss(p, target)

    for scale in (0.3, 1.0, 2.0):
        for _ in range(3):
            params = as_params(_random_weights(gen, widths, scale))
            gradient_norm = float((end_to_end(params)[0] - target).norm())
            bound = lemma7_bound(params, gradient_norm)
            assert bound <= _lambda_min(loss, params) + 1e-12


def test_proposition_6_rescaling_drives_lambda_min_down(gen):
    """Depth 3: W1 → cW1, W2 → W2/c keeps the function and, on this network, drives λ_min(∇²f)
    far down (below −10 at c = 1000). Not a theorem: Proposition 6 says only that λ_min is
    unbounded below, and with every width 1 the same rescaling levels off."""
    target = _unit(gen, 4)

    def loss(p):
        return scalar_regression_loss(p, target)

    params = xavier_init((4, 3, 3, 1), seed=0)
    assert float((end_to_end(params)[0] - target).norm()) > 0.1  # ∇φ(W_{3:1}) ≠ 0
    base = float(loss(params))
    values = []
    for c in (1.0, 10.0, 100.0, 1000.0):
        scaled = rescale(params, 1, c)
        assert float(loss(scaled)) == pytest.approx(base, abs=1e-12)
        values.append(_lambda_min(loss, scaled))
        gradient_norm = float((end_to_end(scaled)[0] - target).norm())
        assert lemma7_bound(scaled, gradient_norm) <= values[-1] + 1e-9
    assert values[0] > values[1] > values[2] > values[3]
    assert values[3] < -10


# --- conservation of balance under gradient flow, O(η) drift under gradient descent ---------------


def test_balance_conserved_by_gradient_flow_not_by_descent(gen):
    target = _unit(gen, 4)

    def loss(p):
        return scalar_regression_loss(p, target)

    params = xavier_init((4, 3, 3, 1), seed=3)
    start = balance_matrices(params)
    assert unbalancedness(params) > 0.1  # an unbalanced start
    traj = gradient_flow(loss, params, [0.0, 0.5, 1.0, 2.0], method="DOP853")
    assert traj.losses[-1] < 0.9 * traj.losses[0]  # it trained
    for index in range(len(traj)):
        for b, b0 in zip(balance_matrices(traj.at(index)), start, strict=True):
            assert float((b - b0).abs().max()) <= 1e-8

    horizon, changes = 2.0, []
    for eta in (0.02, 0.01):
        final = gradient_descent(loss, params, eta, round(horizon / eta)).final
        changes.append(
            max(
                float((b - b0).abs().max())
                for b, b0 in zip(balance_matrices(final), start, strict=True)
            )
        )
    assert changes[1] > 1e-6  # descent does move them
    assert 1.6 <= changes[0] / changes[1] <= 2.4


# --- Theorem 15 -----------------------------------------------------------------------------------


def _eq23(n, norm, nu, eps):
    kappa = (1 - nu) / (1 + nu)
    big = max(1.0, kappa)
    small = min(1.0, eps)
    log = math.log(15 * n * big / (norm * small))
    return (
        norm**5 * small / (n ** (17 / 2) * math.exp(7 * n + 6) * big ** ((11 * n - 5) / 2)) / log**2
    )


@pytest.mark.parametrize(
    "n,norm,nu,eps",
    [
        (2, 0.1, 0.5, 0.01),
        (3, 0.2, -0.5, 0.1),
        (4, 0.05, 1.0, 2.0),
        (3, 0.15, -0.9, 1e-4),
        (5, 0.01, 0.0, 1.0),
    ],
)
def test_theorem15_step_size_eq_23(n, norm, nu, eps):
    got = theorem15_step_size(n, norm, nu, eps)
    assert got > 0
    assert got == pytest.approx(_eq23(n, norm, nu, eps), rel=1e-12, abs=0)


def test_theorem15_step_size_monotone():
    base = theorem15_step_size(3, 0.1, 0.0, 0.1)
    assert theorem15_step_size(3, 0.1, -0.5, 0.1) < base  # worse alignment, smaller step
    assert theorem15_step_size(4, 0.1, 0.0, 0.1) < base  # deeper, smaller step
    assert theorem15_step_size(3, 0.1, 0.0, 0.01) < base  # more accuracy, smaller step


@pytest.mark.parametrize(
    "n,norm,nu,eps",
    [
        (3, 0.1, -1.0, 0.1),
        (3, 0.1, -1.5, 0.1),
        (3, 0.1, 1.5, 0.1),
        (3, 0.1, math.nan, 0.1),
        (1, 0.1, 0.0, 0.1),
        (2.5, 0.1, 0.0, 0.1),
        (3, 0.0, 0.0, 0.1),
        (3, -0.1, 0.0, 0.1),
        (3, 0.1, 0.0, 0.0),
        (3, 0.1, 0.0, math.inf),
    ],
)
def test_theorem15_step_size_rejects_bad_input(n, norm, nu, eps):
    with pytest.raises(ValueError):
        theorem15_step_size(n, norm, nu, eps)


def test_theorem15_step_size_outside_its_assumptions():
    with pytest.raises(ValueError):
        theorem15_step_size(2, 30.0, 1.0, 1.0)
