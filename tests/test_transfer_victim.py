"""Unit tests of lib.poisoning.transfer_victim: a frozen extractor with a head retrained from
scratch."""

import pytest
import torch

from lib.book.data import digits_split
from lib.poisoning import gradient_matching as gm
from lib.poisoning import mlp_victim
from lib.poisoning import transfer_victim as tv
from lib.ssm import s4d


@pytest.fixture(scope="module")
def setting():
    x, y, xt, yt, rng = digits_split()
    config = mlp_victim.MLPConfig(hidden=16)
    extractor = mlp_victim.train(config, x[:300], y[:300], [5],
                                 mlp_victim.TrainConfig(epochs=10, batch=32))
    victim = tv.victim(tv.mlp_features(extractor), 16, 10, tv.HeadTrainConfig(epochs=5))
    return extractor, victim, x[300:600], y[300:600], xt[:40], yt[:40], rng


def test_the_head_is_linear_in_the_frozen_features(setting):
    extractor, victim, x, y, xt, yt, _ = setting
    head = victim.init([0, 1])
    assert set(head) == {"w", "b"} and head["w"].shape == (2, 10, 16)
    phi = torch.relu(xt @ extractor["w1"][0].T + extractor["b1"][0])  # the hidden layer
    out = victim.logits(head, xt[None].expand(2, -1, -1))
    torch.testing.assert_close(out, phi @ head["w"].transpose(1, 2) + head["b"][:, None, :])


def test_training_moves_only_the_head_and_learns(setting):
    extractor, victim, x, y, xt, yt, _ = setting
    before = {k: v.clone() for k, v in extractor.items()}
    trained = victim.train(x[None].expand(2, -1, -1), y[None].expand(2, -1), [0, 1])
    for k, v in extractor.items():
        assert torch.equal(v, before[k])  # the extractor stays frozen
    assert not torch.equal(trained["w"], victim.init([0, 1])["w"])
    assert (tv.accuracy(victim, trained, xt, yt) > 0.5).all()  # chance is 0.1
    again = victim.train(x[None].expand(2, -1, -1), y[None].expand(2, -1), [0, 1])
    torch.testing.assert_close(again["w"], trained["w"])  # seeded


def test_the_attack_differentiates_through_the_extractor(setting):
    extractor, victim, x, y, xt, yt, (lo, hi) = setting
    surrogate = victim.train(x[None], y[None], [9])
    t, c = 0, (int(yt[0]) + 1) % 10
    weak = gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.3, (lo, hi),
                   gm.AttackConfig(steps=1, restarts=1, lr=1e-9), victim=victim)
    strong = gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.3, (lo, hi),
                     gm.AttackConfig(steps=15, restarts=1), victim=victim)
    assert float(strong.matching_loss[0]) < float(weak.matching_loss[0])
    params = gm.retrain(victim, x, y, strong.poison_index, strong.delta, [0])
    assert set(params) == {"w", "b"} and params["w"].shape == (1, 10, 16)


def test_s4d_features_are_the_decoders_input():
    x, y, xt, yt, _ = digits_split()
    config = s4d.S4DConfig(channels=4, state=4, layers=1)
    net = s4d.init_params(config, [3])
    phi = s4d.features(net, xt[:5])
    assert phi.shape == (1, 5, 4)
    logits = s4d.logits(net, xt[:5])
    torch.testing.assert_close(logits, phi @ net["dec_w"].transpose(1, 2) + net["dec_b"][:, None])
    torch.testing.assert_close(tv.s4d_features(net)(xt[:5].float()), phi[0])


def test_bad_input(setting):
    extractor, victim, x, y, *_ = setting
    phi = tv.mlp_features(extractor)
    with pytest.raises(ValueError, match="features must be a callable"):
        tv.victim("relu", 16)
    with pytest.raises(ValueError, match="feature_dim"):
        tv.victim(phi, 0)
    with pytest.raises(ValueError, match="classes"):
        tv.victim(phi, 16, classes=1)
    with pytest.raises(ValueError, match="HeadTrainConfig"):
        tv.victim(phi, 16, train_config=mlp_victim.TrainConfig())
    with pytest.raises(ValueError, match="epochs"):
        tv.HeadTrainConfig(epochs=0)
    with pytest.raises(ValueError, match="exactly one run"):
        tv.mlp_features(mlp_victim.init_params(mlp_victim.MLPConfig(hidden=4), [0, 1]))
    with pytest.raises(ValueError, match="parameter dict"):
        tv.s4d_features(None)
    with pytest.raises(ValueError, match="seeds"):
        victim.train(x[None], y[None], [0, 1])
    with pytest.raises(ValueError, match="must return 8 values, got 16"):
        tv.victim(phi, 8).logits(tv.victim(phi, 8).init([0]), x[None, :3])
    with pytest.raises(ValueError, match="shape"):
        tv.accuracy(victim, victim.init([0]), x[0], y)


def test_the_unrolled_head_is_the_victims_training(setting):
    """unrolled_head (T.2) replays victim.train step for step: the same head, to rounding."""
    extractor, victim, x, y, *_ = setting
    phi = tv.mlp_features(extractor)
    poisons = torch.arange(7)
    trained = victim.train(torch.cat([x, x[poisons] + 0.01])[None],
                           torch.cat([y, y[poisons]])[None], [3])
    head = tv.unrolled_head(phi(x), y, phi(x[poisons] + 0.01)[None], y[poisons][None], 3, 10,
                            tv.HeadTrainConfig(epochs=5))
    torch.testing.assert_close(head["w"], trained["w"], rtol=0, atol=1e-12)
    torch.testing.assert_close(head["b"], trained["b"], rtol=0, atol=1e-12)


def test_the_unrolled_attack_lowers_the_targets_loss_inside_the_box(setting):
    """(T.3): the white-box poisons lower the target's loss under the retrained head, stay in the
    eps-box and the data range, and that head is the one victim.train returns on them."""
    extractor, victim, x, y, xt, yt, rng = setting
    phi = tv.mlp_features(extractor)
    config = tv.HeadTrainConfig(epochs=2)
    targets = [0, 1]
    adversarial = [(int(yt[t]) + 1) % 10 for t in targets]
    index = torch.stack([torch.nonzero(y == c).flatten()[:6] for c in adversarial])
    eps = 0.5
    kwargs = dict(classes=10, train_config=config, seed=4, chunk=1)
    start = tv.unrolled_attack(phi, 16, x, y, xt, targets, adversarial, index, eps, rng, steps=0,
                               **kwargs)
    assert float(start["delta"].abs().max()) == 0.0
    out = tv.unrolled_attack(phi, 16, x, y, xt, targets, adversarial, index, eps, rng, steps=15,
                             **kwargs)
    delta = out["delta"]
    assert delta.shape == (2, 6, 64) and float(delta.abs().max()) <= eps + 1e-12
    perturbed = x[index] + delta
    assert float(perturbed.min()) >= rng[0] - 1e-12 and float(perturbed.max()) <= rng[1] + 1e-12
    assert bool((out["loss"] < start["loss"]).all()), (out["loss"], start["loss"])
    head_victim = tv.victim(phi, 16, 10, config)
    trained = gm.retrain(head_victim, x, y, index, delta, [4])
    logits = head_victim.logits(trained, xt[targets][:, None, :])[:, 0]
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(adversarial), reduction="none")
    torch.testing.assert_close(loss, out["loss"], rtol=1e-9, atol=1e-9)


def test_the_unrolled_attack_rejects_bad_input(setting):
    extractor, victim, x, y, xt, yt, rng = setting
    phi = tv.mlp_features(extractor)
    index = torch.nonzero(y == 1).flatten()[:4][None]
    args = (phi, 16, x, y, xt, [0], [1], index, 0.5, rng)
    with pytest.raises(ValueError, match="steps"):
        tv.unrolled_attack(*args, steps=-1)
    with pytest.raises(ValueError, match="chunk"):
        tv.unrolled_attack(*args, chunk=0)
    with pytest.raises(ValueError, match="eps"):
        tv.unrolled_attack(*args[:8], 100.0, rng)
    with pytest.raises(ValueError, match="poison_index"):
        tv.unrolled_attack(*args[:7], index[0], 0.5, rng)
    with pytest.raises(ValueError, match="HeadTrainConfig"):
        tv.unrolled_attack(*args, train_config=mlp_victim.TrainConfig())
    with pytest.raises(ValueError, match="phi_poison"):
        tv.unrolled_head(phi(x), y, phi(x[:3]), y[:3][None], 0, 10)
