"""The transfer head's λ-regularized optimum (T.4) and the implicit attack through it (T.6, T.7)
of lib.poisoning.transfer_victim, on a tiny synthetic problem with a smooth (tanh) feature map."""

import pytest
import torch

from lib.poisoning import transfer_victim as tv

DT = torch.float64
LENGTH, WIDTH, CLASSES = 6, 5, 3
LO, HI = -1.0, 1.0


def _feature_map():
    """φ(x) = tanh(A x + c): smooth, so finite differences see no kink (a ReLU map has them)."""
    g = torch.Generator().manual_seed(1)
    a = torch.randn(WIDTH, LENGTH, generator=g, dtype=DT)
    c = torch.randn(WIDTH, generator=g, dtype=DT) * 0.3

    def phi(x):
        return torch.tanh(x @ a.T + c)

    return phi


@pytest.fixture(scope="module")
def problem():
    """60 training and 10 test sequences in [−1, 1], labels from a fixed linear rule on φ with
    flips (so the data are not separable in φ), some entries sitting on the range's edges."""
    g = torch.Generator().manual_seed(0)
    phi = _feature_map()
    x = (torch.rand(70, LENGTH, generator=g, dtype=DT) * 2.4 - 1.2).clamp(LO, HI)
    rule = torch.randn(CLASSES, WIDTH, generator=g, dtype=DT)
    y = (phi(x) @ rule.T).argmax(-1)
    flip = torch.rand(70, generator=g) < 0.15
    y[flip] = (y[flip] + 1) % CLASSES
    return phi, x[:60], y[:60], x[60:], y[60:]


def _theta(head):
    return torch.cat([head["w"], head["b"][:, :, None]], -1)


def _loss(theta, features, labels, lam):
    """(T.4) written out independently of the library (autograd, no cached softmax)."""
    z = features @ theta[:, :-1].T + theta[:, -1]
    return torch.nn.functional.cross_entropy(z, labels) + 0.5 * lam * (theta * theta).sum()


def _margin(theta, phi_t, adversarial):
    z = theta[:, :-1] @ phi_t + theta[:, -1]
    others = torch.cat([z[:adversarial], z[adversarial + 1 :]])
    return float(z[adversarial] - others.max())


def test_the_newton_optimum_is_stationary_and_agrees_with_long_gradient_descent(problem):
    phi, x, y, _, _ = problem
    features, lam, tol = phi(x), 1e-2, 1e-10
    head = tv.optimal_head(features, y, CLASSES, lam, tol=tol)
    theta = _theta(head)[0].clone().requires_grad_()
    (grad,) = torch.autograd.grad(_loss(theta, features, y, lam), [theta])
    # the library stops at its own ‖∇L‖ < tol; recomputed another way it differs by rounding only
    assert float(grad.norm()) < tol + 1e-14
    # full-batch gradient descent at step 1/L_smooth, L_smooth ≤ ½ max‖φ̃‖² + λ (softmax CE)
    step = 1 / (0.5 * float((features**2).sum(1).max() + 1) + lam)
    gd = torch.zeros_like(theta, requires_grad=True)
    for _ in range(6000):
        (g,) = torch.autograd.grad(_loss(gd, features, y, lam), [gd])
        with torch.no_grad():
            gd -= step * g
    (g,) = torch.autograd.grad(_loss(gd, features, y, lam), [gd])
    # λ-strong convexity: ‖θ − θ*‖ ≤ ‖∇L(θ)‖ / λ for any θ, so both points lie within their
    # gradient norms / λ of the unique optimum
    bound = (float(g.norm()) + float(grad.norm())) / lam
    assert bound < 1e-6  # gradient descent did converge: the comparison is a sharp one
    assert float((gd.detach() - theta.detach()).norm()) <= bound


def test_the_optimum_does_not_depend_on_the_start_and_runs_are_independent(problem):
    phi, x, y, _, _ = problem
    features = phi(x)
    stacked = torch.stack([features, features.flip(0)])
    labels = torch.stack([y, y.flip(0)])
    starts = tv.init_head(WIDTH, CLASSES, [0, 1])
    a = tv.optimal_head(stacked, labels, CLASSES, 1e-3, init=starts, tol=1e-11)
    b = tv.optimal_head(features, y, CLASSES, 1e-3, tol=1e-11)
    # same data (reordered), different starts: within 2 tol / λ = 2e-8 of each other
    assert float((_theta(a)[0] - _theta(a)[1]).norm()) < 2e-8
    assert float((_theta(a)[0] - _theta(b)[0]).norm()) < 2e-8


def test_norm_matched_lambda_gives_an_optimum_of_the_heads_norm(problem):
    phi, x, y, _, _ = problem
    features = phi(x)
    reference = tv.optimal_head(features, y, CLASSES, 3e-3)
    lam = tv.norm_matched_lambda(features, y, CLASSES, reference, bracket=(1e-5, 1.0))
    # the bisection stops with λ_hi/λ_lo < 1 + 1e-6; the optimum's norm is smooth in log λ
    assert lam == pytest.approx(3e-3, rel=1e-5)
    with pytest.raises(ValueError, match="outside the optimum's norms"):
        tv.norm_matched_lambda(features, y, CLASSES, reference, bracket=(1e-2, 1.0))


def test_the_implicit_gradient_agrees_with_central_finite_differences(problem):
    phi, x, y, xt, _ = problem
    lam, index, adversarial = 1e-2, torch.tensor([[3, 7, 11], [5, 8, 20]]), torch.tensor([1, 2])
    base = x[index]
    attack = tv._Implicit(phi, WIDTH, x, y, base, y[index], xt[:2], adversarial, CLASSES, lam,
                          1e-13, 50)
    g = torch.Generator().manual_seed(3)
    delta = torch.randn(base.shape, generator=g, dtype=DT) * 0.1
    direction = torch.randn(base.shape, generator=g, dtype=DT)
    _, grad, _ = attack.gradient(delta, attack.th0.expand(2, -1, -1).clone(), rtol=1e-12)

    def target_loss(d):  # 𝒜(δ) of (T.6) from the public optimum, one attack at a time
        out = []
        for a in range(2):
            feats = phi(torch.cat([x, base[a] + d[a]]))
            head = tv.optimal_head(feats, torch.cat([y, y[index[a]]]), CLASSES, lam, tol=1e-13)
            z = _theta(head)[0][:, :-1] @ phi(xt[a : a + 1])[0] + head["b"][0]
            out.append(-torch.log_softmax(z, -1)[adversarial[a]])
        return torch.stack(out)

    h = 1e-4
    fd = (target_loss(delta + h * direction) - target_loss(delta - h * direction)) / (2 * h)
    implicit = (grad * direction).sum((1, 2))
    assert float(implicit.abs().min()) > 1e-3  # a derivative worth comparing
    # central differences err by c·h² (smooth φ; measured here: 3e-7 relative at h = 1e-4 and
    # 3e-9 at h = 1e-5, the h² law) plus rounding ~1e-16/h; each optimum is within
    # ‖∇L‖/λ ≤ 1e-11 of θ*, moving 𝒜 by ≲1e-11, ≲1e-7 after dividing by h: hence 1e-5 relative
    torch.testing.assert_close(implicit, fd, rtol=1e-5, atol=1e-7)


def _attack_setting(problem):
    phi, x, y, xt, yt = problem
    features, test_features = phi(x), phi(xt)
    adversarial = [(int(yt[t]) + 1) % CLASSES for t in range(2)]
    # poisons: the 4 training images of the adversarial class nearest the target in φ
    index = []
    for t, c in enumerate(adversarial):
        members = torch.nonzero(y == c).flatten()
        distance = (features[members] - test_features[t]).norm(dim=1)
        index.append(members[distance.argsort()[:4]].tolist())
    return phi, x, y, xt[:2], adversarial, index


def test_the_attack_raises_the_targets_adversarial_margin_at_the_optimum(problem):
    phi, x, y, targets, adversarial, index = _attack_setting(problem)
    lam, eps = 1e-2, 0.4
    delta = tv.implicit_attack(phi, x, y, index, targets, adversarial, eps, lam, steps=30,
                               data_range=(LO, HI), classes=CLASSES)
    g = torch.Generator().manual_seed(5)
    random = (torch.randint(0, 2, delta.shape, generator=g).to(DT) * 2 - 1) * eps
    for a, c in enumerate(adversarial):
        rows = torch.tensor(index[a])
        labels = torch.cat([y, y[rows]])
        margins = {}
        for name, d in (("clean", torch.zeros_like(delta[a])), ("attack", delta[a]),
                        ("random", (x[rows] + random[a]).clamp(LO, HI) - x[rows])):
            head = tv.optimal_head(phi(torch.cat([x, x[rows] + d])), labels, CLASSES, lam)
            margins[name] = _margin(_theta(head)[0], phi(targets[a : a + 1])[0], c)
        # the attack moves the optimum toward c (measured: +0.60 and +0.37); a random ±ε sign
        # perturbation of the same poisons moves it far less (+0.006 and +0.07)
        gain, noise = margins["attack"] - margins["clean"], margins["random"] - margins["clean"]
        assert gain > 0.05, margins
        assert gain > 3 * abs(noise), margins


def test_the_perturbation_stays_in_the_eps_ball_and_the_data_range(problem):
    phi, x, y, targets, adversarial, index = _attack_setting(problem)
    x = x.clone()
    x[index[0][0], :3] = HI  # poisons on the range's edge: the range, not ε, binds there
    x[index[1][0], :3] = LO
    eps = 0.3
    delta = tv.implicit_attack(phi, x, y, index, targets, adversarial, eps, 1e-2, steps=8,
                               data_range=(LO, HI), classes=CLASSES)
    assert delta.shape == (2, 4, LENGTH) and delta.dtype == DT
    assert float(delta.abs().max()) <= eps + 1e-12
    poisoned = x[torch.tensor(index)] + delta
    assert float(poisoned.min()) >= LO - 1e-12 and float(poisoned.max()) <= HI + 1e-12
    assert float(delta.abs().max()) > 0.5 * eps  # the attack moved
    zero = tv.implicit_attack(phi, x, y, index, targets, adversarial, eps, 1e-2, steps=0,
                              data_range=(LO, HI), classes=CLASSES)
    assert torch.equal(zero, torch.zeros_like(delta))


def test_bad_input_raises_a_clear_value_error(problem):
    phi, x, y, targets, adversarial, index = _attack_setting(problem)
    features = phi(x)
    for lam in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lam"):
            tv.optimal_head(features, y, CLASSES, lam)
    with pytest.raises(ValueError, match="phi_train"):
        tv.optimal_head(features[0], y, CLASSES, 1e-2)
    with pytest.raises(ValueError, match="y_train"):
        tv.optimal_head(features, y[:-1], CLASSES, 1e-2)
    with pytest.raises(ValueError, match="y_train"):
        tv.optimal_head(features, y + CLASSES, CLASSES, 1e-2)
    with pytest.raises(ValueError, match="phi_train"):
        tv.optimal_head(torch.full_like(features, float("nan")), y, CLASSES, 1e-2)
    with pytest.raises(ValueError, match="float64"):
        tv.optimal_head(features.float(), y, CLASSES, 1e-2)
    with pytest.raises(ValueError, match="init"):
        tv.optimal_head(features, y, CLASSES, 1e-2, init=tv.init_head(WIDTH + 1, CLASSES, [0]))
    with pytest.raises(ValueError, match="Newton"):
        tv.optimal_head(features, y, CLASSES, 1e-2, tol=1e-30, max_iter=3)

    def call(**change):
        args = dict(features=phi, x_train=x, y_train=y, poison_index=index, x_target=targets,
                    adversarial=adversarial, eps=0.3, lam=1e-2, steps=1, data_range=(LO, HI),
                    classes=CLASSES) | change
        return tv.implicit_attack(**args)

    for change, words in [
        ({"eps": 5.0}, "eps"), ({"lam": 0.0}, "lam"), ({"poison_index": [[0, 100]] * 2}, "poison"),
        ({"adversarial": [0, CLASSES]}, "adversarial"), ({"x_target": targets[:, :3]}, "x_target"),
        ({"y_train": y[:-1]}, "y_train"), ({"steps": -1}, "steps"),
        ({"features": lambda v: phi(v).detach()}, "differentiable"),
        ({"features": lambda v: phi(v)[:, None]}, "features"),
        ({"x_train": x * 3}, "data_range"),
    ]:
        with pytest.raises(ValueError, match=words):
            call(**change)
