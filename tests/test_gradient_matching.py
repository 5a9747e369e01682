"""Unit tests of lib.poisoning.gradient_matching: constraints of the poisons, the per-row
regularizer, the metrics, and the rejection of bad input."""

import math

import pytest
import torch

from lib.book.data import digits_split
from lib.poisoning import gradient_matching as gm
from lib.ssm import s4d

DT = torch.float64


@pytest.fixture(scope="module")
def setting():
    x, y, xt, yt, rng = digits_split()
    cfg = s4d.S4DConfig(channels=4, state=4, layers=1)
    surrogate = s4d.train(cfg, x[:200], y[:200], [0], s4d.TrainConfig(epochs=1, batch=50))
    return surrogate, x[:200], y[:200], xt[:20], yt[:20], rng


def target_and_class(yt):
    return 0, (int(yt[0]) + 1) % 10


def test_poisons_respect_the_clean_label_constraints(setting):
    surrogate, x, y, xt, yt, (lo, hi) = setting
    t, c = target_and_class(yt)
    eps = 0.3
    brew = gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, eps, (lo, hi), gm.AttackConfig(steps=5))
    assert brew.delta.shape == (1, 5, 64) and brew.delta.dtype == DT
    assert bool((y[brew.poison_index] == c).all())  # poisons come from the adversarial class
    assert float(brew.delta.abs().max()) <= eps + 1e-6  # float32 attack arithmetic
    poisoned = x[brew.poison_index] + brew.delta
    assert float(poisoned.min()) >= lo - 1e-6 and float(poisoned.max()) <= hi + 1e-6
    xs, ys = gm.poisoned_sets(x, y, brew.poison_index, brew.delta)
    assert xs.shape == (1, 205, 64) and torch.equal(ys[0, 200:], y[brew.poison_index[0]])
    assert torch.equal(xs[0, :200], x)  # appended, never substituted


def test_signed_adam_lowers_the_matching_loss(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    short = gm.brew(surrogate, x, y, xt, yt, [t], [c], 8, 0.5, rng, gm.AttackConfig(steps=1))
    longer = gm.brew(surrogate, x, y, xt, yt, [t], [c], 8, 0.5, rng, gm.AttackConfig(steps=30))
    assert float(longer.matching_loss[0]) < float(short.matching_loss[0])
    # the kept start is the best of the starts (same numbers, one path)
    assert longer.restart_losses.shape == (1, 2)
    assert float(longer.matching_loss[0]) == float(longer.restart_losses[0].min())


def test_attacks_brewed_together_are_the_attacks_brewed_alone(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    configs = [gm.AttackConfig(steps=4, restarts=2, reg_factor=r) for r in (1.0, 0.0)]
    together = gm.brew(surrogate, x, y, xt, yt, [t, t + 1], [c, c], 6, 0.5, rng, configs, seed=3)
    for cfg, joint in zip(configs, together, strict=True):
        alone = gm.brew(surrogate, x, y, xt, yt, [t, t + 1], [c, c], 6, 0.5, rng, cfg, seed=3)
        assert torch.equal(joint.poison_index, alone.poison_index)  # integer draws, one path
        # float32 runs inside a larger batch: the same arithmetic up to rounding, which a signed
        # step can turn into a flipped step where a gradient entry is ~0, so compare what the
        # attack optimizes, to 1e-3 relative, and the perturbations up to a few such entries
        torch.testing.assert_close(joint.matching_loss, alone.matching_loss, rtol=1e-3, atol=0)
        far = (joint.delta - alone.delta).abs() > 1e-5
        assert float(far.double().mean()) < 0.01


def test_configs_brewed_together_must_share_the_loop(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    mixed = [gm.AttackConfig(steps=2), gm.AttackConfig(steps=3)]
    with pytest.raises(ValueError, match="share steps"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.5, rng, mixed)
    with pytest.raises(ValueError, match="AttackConfig"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.5, rng, [gm.AttackConfig(), "x"])


def test_regularizer_moves_the_perturbation_to_the_last_row(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    cfg = gm.AttackConfig(steps=30)
    free = gm.brew(surrogate, x, y, xt, yt, [t], [c], 8, 0.5, rng, cfg)
    reg = gm.brew(
        surrogate, x, y, xt, yt, [t], [c], 8, 0.5, rng, gm.AttackConfig(steps=30, reg_factor=1.0)
    )
    assert gm.last_elements_rel_size(reg.delta, 8) > gm.last_elements_rel_size(free.delta, 8)


def test_row_weights_free_the_last_row():
    w = gm.row_weights(64, 8)
    assert w[:8].tolist() == [7.0] * 8 and w[-8:].tolist() == [0.0] * 8
    with pytest.raises(ValueError, match="rows"):
        gm.row_weights(10, 8)


def test_row_weights_repeat_rows_channel_after_channel():
    """A (3, 32, 32) image read in memory order as 1024 steps of 3 values (the authors' S4 victim):
    with rows=32 the flat weight of every entry is that of its image row, 31 - i (footnote 14 with
    rows counted from 0), whatever its channel; the last image row of all three channels is free."""
    w = gm.row_weights(3 * 32 * 32, 32, rows=32)
    image_rows = torch.arange(32)[None, :, None].expand(3, 32, 32).reshape(-1)
    assert torch.equal(w, (31 - image_rows).to(w.dtype))
    assert torch.equal(gm.row_weights(64, 8, rows=8), gm.row_weights(64, 8))
    first = gm.row_weights(3 * 32 * 32, 32, "first", rows=32)
    assert torch.equal(first, image_rows.to(w.dtype))
    for bad in (0, -1, 5, 2.5, "32"):
        with pytest.raises(ValueError, match="rows"):
            gm.row_weights(3 * 32 * 32, 32, rows=bad)
    with pytest.raises(ValueError, match="rows"):
        gm.AttackConfig(rows=0)


def test_row_weights_reversed_free_the_first_row():
    last, first = gm.row_weights(64, 8), gm.row_weights(64, 8, "first")
    assert first[:8].tolist() == [0.0] * 8 and first[-8:].tolist() == [7.0] * 8
    assert first.tolist() == [7.0 - v for v in last.tolist()]  # w_p / lambda = r(p)
    assert torch.equal(first.reshape(8, 8), last.reshape(8, 8).flip(0))  # rows reversed
    assert torch.equal(gm.row_weights(64, 8, "last"), last)
    # the default is the paper's weights as before, bit for bit: w_p / lambda = R - 1 - p // 8
    assert torch.equal(last, (7 - torch.arange(64) // 8).to(torch.float64))
    for bad in ("middle", "Last", None, 1):
        with pytest.raises(ValueError, match="free_row"):
            gm.row_weights(64, 8, bad)
        with pytest.raises(ValueError, match="free_row"):
            gm.AttackConfig(free_row=bad)
    assert gm.AttackConfig().free_row == "last"


def test_default_free_row_is_the_paper_bit_for_bit(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    implicit = gm.brew(surrogate, x, y, xt, yt, [t], [c], 6, 0.5, rng,
                       gm.AttackConfig(steps=6, reg_factor=1.0), seed=2)
    explicit = gm.brew(surrogate, x, y, xt, yt, [t], [c], 6, 0.5, rng,
                       gm.AttackConfig(steps=6, reg_factor=1.0, free_row="last"), seed=2)
    assert torch.equal(implicit.delta, explicit.delta)
    assert torch.equal(implicit.matching_loss, explicit.matching_loss)


def test_reversed_penalty_moves_the_perturbation_to_the_first_row(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    configs = [gm.AttackConfig(steps=30, reg_factor=1.0, free_row=f) for f in ("last", "first")]
    last, first = gm.brew(surrogate, x, y, xt, yt, [t], [c], 8, 0.5, rng, configs)
    def share(delta, rows):  # the share of the squared norm on the given positions
        return float((delta[..., rows] ** 2).sum() / (delta**2).sum())

    assert share(first.delta, slice(0, 8)) > share(last.delta, slice(0, 8))
    assert share(last.delta, slice(-8, None)) > share(first.delta, slice(-8, None))


def test_last_elements_rel_size():
    delta = torch.zeros(3, 64, dtype=DT)
    delta[:, -2:] = 1.0
    assert gm.last_elements_rel_size(delta, 2) == pytest.approx(1.0)
    flat = torch.ones(2, 64, dtype=DT)
    assert gm.last_elements_rel_size(flat, 8) == pytest.approx(math.sqrt(8 / 64))
    assert gm.last_elements_rel_size(torch.zeros(2, 64, dtype=DT), 8) == 0.0


def test_random_control_has_the_attack_norm_at_most(gen):
    base = torch.zeros(2, 4, 64, dtype=DT)
    like = torch.randn(2, 4, 64, generator=gen, dtype=DT) * 0.01
    rnd = gm.random_perturbations(base, like, 1.0, (-1.0, 1.0), seed=1)
    torch.testing.assert_close(  # no clipping is active at this size: the norms agree
        torch.linalg.vector_norm(rnd, dim=-1), torch.linalg.vector_norm(like, dim=-1)
    )
    big = (torch.randn(2, 4, 64, generator=gen, dtype=DT) * 0.1).clamp(-0.05, 0.05)
    old = gm.random_perturbations(base, big, 0.05, (-1.0, 1.0), seed=1,
                                  match="l2-before-projection")
    assert float(old.abs().max()) <= 0.05  # projected after scaling: it ends smaller in l2
    assert gm.size_ratio(old, big)["l2"] < 0.95


def test_random_control_matches_each_arms_size(gen):
    # two arms of different sizes (a saturated one, like an unregularized attack, and a small
    # one), over images near the edge of the data range: each control takes its own arm's size
    base = (torch.rand(3, 5, 64, generator=gen, dtype=DT) * 2 - 1)
    base[..., :16] = -1.0  # background pixels at the bottom of the range: they can only go up
    eps = 0.2
    arms = {
        "saturated": gm._project(torch.sign(torch.randn(3, 5, 64, generator=gen, dtype=DT)) * eps,
                                 base, eps, -1.0, 1.0),
        "small": gm._project(torch.randn(3, 5, 64, generator=gen, dtype=DT) * 0.02, base, eps,
                             -1.0, 1.0),
    }
    for name, like in arms.items():
        rnd = gm.random_perturbations(base, like, eps, (-1.0, 1.0), seed=4)
        l2, l2_like = (torch.linalg.vector_norm(d, dim=-1) for d in (rnd, like))
        assert (l2 <= l2_like * (1 + 1e-9)).all()
        if name == "small":  # no bound is active: the norms agree exactly
            torch.testing.assert_close(l2, l2_like, rtol=1e-9, atol=0)
        else:  # pixels near the range's ends cap the random sign pattern: a small shortfall
            assert float((l2 / l2_like).min()) > 0.9
        assert (rnd.abs().amax(-1) <= like.abs().amax(-1) + 1e-15).all()
        assert ((base + rnd >= -1.0) & (base + rnd <= 1.0)).all()
        ratio = gm.size_ratio(rnd, like)
        assert ratio["l2"] == pytest.approx(1.0, abs=0.1) and ratio["linf"] <= 1.0
        # a random direction, not the arm's: nearly orthogonal to it
        cos = (rnd * like).sum(-1) / (l2 * l2_like)
        assert float(cos.abs().median()) < 0.9
    with pytest.raises(ValueError, match="eps-box"):
        gm.random_perturbations(base, arms["saturated"] * 2, eps, (-1.0, 1.0))
    with pytest.raises(ValueError, match="match must be"):
        gm.random_perturbations(base, arms["small"], eps, (-1.0, 1.0), match="l1")
    with pytest.raises(ValueError, match="same shape"):
        gm.size_ratio(arms["small"][0], arms["small"])
    with pytest.raises(ValueError, match="no size to match"):
        gm.size_ratio(arms["small"], torch.zeros_like(arms["small"]))


def test_the_authors_step_schedule():
    # their MultiStepLR: x0.1 after steps 250 // 2.667 = 93, 250 // 1.6 = 156, 250 // 1.142 = 218
    sizes = gm.AttackConfig(steps=250, step_rule="authors").step_sizes(0.3)
    assert sizes[0] == 0.1 and sizes[92] == 0.1  # tau = 0.1 in data units, whatever eps
    assert sizes[93] == pytest.approx(0.01) and sizes[155] == pytest.approx(0.01)
    assert sizes[156] == pytest.approx(1e-3) and sizes[217] == pytest.approx(1e-3)
    assert sizes[218] == pytest.approx(1e-4) and sizes[249] == pytest.approx(1e-4)
    assert len(sizes) == 250
    constant = gm.AttackConfig(steps=10, lr=0.1).step_sizes(0.3)
    assert constant == pytest.approx([0.03] * 10)  # this book's: 0.1 eps throughout
    with pytest.raises(ValueError, match="step_rule"):
        gm.AttackConfig(step_rule="geiping")
    with pytest.raises(ValueError, match="eps"):
        gm.AttackConfig().step_sizes(-1.0)


def test_the_authors_rule_brews_inside_the_box(setting):
    surrogate, x, y, xt, yt, (lo, hi) = setting
    t, c = target_and_class(yt)
    start = gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.3, (lo, hi),
                    gm.AttackConfig(steps=1, restarts=1, step_rule="authors", lr=1e-9))
    later = gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.3, (lo, hi),
                    gm.AttackConfig(steps=8, restarts=1, step_rule="authors"))
    for b in (start, later):
        assert float(b.delta.abs().max()) <= 0.3 + 1e-6
        assert (x[b.poison_index] + b.delta >= lo - 1e-6).all()
    # the Gaussian start: |δ| below eps for most entries (not the uniform start's spread)
    assert float((start.delta.abs() < 0.3 * 0.99).double().mean()) > 0.5
    assert float(later.matching_loss[0]) < float(start.matching_loss[0])
    with pytest.raises(ValueError, match="step_rule"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.3, (lo, hi),
                [gm.AttackConfig(steps=2), gm.AttackConfig(steps=2, step_rule="authors")])


def test_a_joint_brew_matches_the_targets_mean_gradient(setting):
    surrogate, x, y, xt, yt, (lo, hi) = setting
    cls = int(yt[0])
    targets = [i for i in range(len(yt)) if int(yt[i]) == cls][:2]
    intended = (cls + 1) % 10
    index = torch.arange(0, 40, 4)  # poisons from several classes, keeping their own labels
    assert len(set(y[index].tolist())) > 1
    weak = gm.brew_joint(surrogate, x, y, xt, targets, intended, index, 0.3, (lo, hi),
                         gm.AttackConfig(steps=1, restarts=1, lr=1e-9), batch=5)
    strong = gm.brew_joint(surrogate, x, y, xt, targets, intended, index, 0.3, (lo, hi),
                           gm.AttackConfig(steps=10, restarts=2), batch=5)
    assert strong["delta"].shape == (10, 64) and len(strong["restart_losses"]) == 2
    assert float(strong["delta"].abs().max()) <= 0.3 + 1e-6
    assert strong["matching_loss"] < weak["matching_loss"]
    assert strong["matching_loss"] == pytest.approx(float(strong["restart_losses"].min()))
    with pytest.raises(ValueError, match="must divide"):
        gm.brew_joint(surrogate, x, y, xt, targets, intended, index, 0.3, (lo, hi), batch=3)
    with pytest.raises(ValueError, match="distinct"):
        gm.brew_joint(surrogate, x, y, xt, [0, 0], intended, index, 0.3, (lo, hi))
    with pytest.raises(ValueError, match=r"lie in 0\.\.9"):
        gm.brew_joint(surrogate, x, y, xt, targets, 10, index, 0.3, (lo, hi))


def test_wilson_interval():
    lo, hi = gm.wilson_interval(0, 8)
    assert lo == 0.0 and 0.3 < hi < 0.35  # the familiar 0/8 upper bound, about 0.32
    lo, hi = gm.wilson_interval(4, 8)
    assert lo == pytest.approx(1 - hi)  # symmetric around one half
    with pytest.raises(ValueError, match="successes"):
        gm.wilson_interval(9, 8)


def test_wilson_by_target_is_wider_than_counting_pairs():
    # 3 targets × 2 seeds: target 0 flipped by both seeds, target 1 by one, target 2 by none
    success = [1, 1, 1, 0, 0, 0]
    lo, hi = gm.wilson_by_target(success, 2)
    assert lo == pytest.approx(gm.wilson_interval(1, 3)[0])  # flipped by every seed: 1 of 3
    assert hi == pytest.approx(gm.wilson_interval(2, 3)[1])  # flipped by any seed: 2 of 3
    pair_lo, pair_hi = gm.wilson_interval(3, 6)
    assert lo <= pair_lo and hi >= pair_hi  # wider than counting the pairs as independent
    assert gm.wilson_by_target([0] * 4, 1) == gm.wilson_interval(0, 4)  # one seed: the same
    with pytest.raises(ValueError, match="whole number"):
        gm.wilson_by_target([1, 0, 1], 2)
    with pytest.raises(ValueError, match="0/1"):
        gm.wilson_by_target([2, 0], 1)


def test_paired_sign_test():
    from scipy import stats

    # 4 targets × 3 seeds: the arm flips 5 pairs on 2 targets, the control 1 pair on a third
    arm = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    ctl = [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    out = gm.paired_sign_test(arm, ctl, 3)
    assert out["discordant_pairs"] == (5, 1) and out["discordant_targets"] == (2, 1)
    # (S.1) against scipy's exact binomial test
    assert out["pairs"] == pytest.approx(stats.binomtest(5, 6, 0.5, alternative="greater").pvalue)
    assert out["targets"] == pytest.approx(0.5)  # P(Bin(3, 1/2) >= 2)
    # no flip in the control: p = 2^-b exactly; nothing discordant: p = 1
    assert gm.paired_sign_test([1] * 10, [0] * 10, 1)["pairs"] == 2.0**-10
    assert gm.paired_sign_test([1, 0], [1, 0], 1) == {
        "pairs": 1.0, "targets": 1.0, "discordant_pairs": (0, 0), "discordant_targets": (0, 0)}
    # a pair the control flips and the arm does not counts against the arm
    assert gm.paired_sign_test([0, 0], [1, 1], 1)["pairs"] == 1.0
    with pytest.raises(ValueError, match="same length"):
        gm.paired_sign_test([1, 0], [1, 0, 0, 0], 1)
    with pytest.raises(ValueError, match="control"):
        gm.paired_sign_test([1, 0], [2, 0], 1)


def test_bad_input(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    with pytest.raises(ValueError, match="eps"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.0, rng)
    with pytest.raises(ValueError, match="eps"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, -0.1, rng)
    members = int((y == c).sum())
    with pytest.raises(ValueError, match="budget"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], members + 1, 0.1, rng)
    with pytest.raises(ValueError, match="target index"):
        gm.brew(surrogate, x, y, xt, yt, [len(xt)], [c], 5, 0.1, rng)
    with pytest.raises(ValueError, match="y_train"):
        gm.brew(surrogate, x, y[:-1], xt, yt, [t], [c], 5, 0.1, rng)
    with pytest.raises(ValueError, match="y_test"):
        gm.brew(surrogate, x, y, xt, yt[:-1], [t], [c], 5, 0.1, rng)
    with pytest.raises(ValueError, match="true class"):
        gm.brew(surrogate, x, y, xt, yt, [t], [int(yt[t])], 5, 0.1, rng)
    with pytest.raises(ValueError, match="budget"):
        gm.choose_poisons(y, c, members + 1, 0)


def test_matching_loss_of_the_brew_is_its_reported_loss_and_beats_random(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    brew = gm.brew(surrogate, x, y, xt, yt, [t], [c], 8, 0.5, rng, gm.AttackConfig(steps=30))
    again = gm.matching_loss(surrogate, xt, brew, x, brew.delta)
    # the same float32 computation path on the returned (float64-cast) perturbation
    torch.testing.assert_close(again, brew.matching_loss, rtol=1e-4, atol=1e-5)
    rnd = gm.random_perturbations(x[brew.poison_index], brew.delta, 0.5, rng, seed=0)
    assert float(gm.matching_loss(surrogate, xt, brew, x, rnd)[0]) > float(again[0])
    with pytest.raises(ValueError, match="delta"):
        gm.matching_loss(surrogate, xt, brew, x, brew.delta[:, :3])


# --- one victim interface, two families ---------------------------------------------------------


def _families():
    from lib.poisoning import mlp_victim as mv

    s4d_cfg = s4d.S4DConfig(channels=4, state=4, layers=1)
    return {
        "S4D": gm.s4d_victim(s4d_cfg, s4d.TrainConfig(epochs=1, batch=50)),
        "MLP": mv.victim(mv.MLPConfig(hidden=8), mv.TrainConfig(epochs=2, batch=50)),
    }


@pytest.mark.parametrize("family", ["S4D", "MLP"])
def test_both_families_brew_retrain_and_evaluate(setting, family):
    _, x, y, xt, yt, rng = setting
    victim = _families()[family]
    t, c = target_and_class(yt)
    surrogate = victim.train(x, y, [7])
    assert gm.runs_of(surrogate) == 1
    cfg = gm.AttackConfig(steps=10)
    brew = gm.brew(surrogate, x, y, xt, yt, [t, t + 1], [c, c], 6, 0.5, rng, cfg, victim=victim)
    assert brew.delta.shape == (2, 6, 64) and float(brew.delta.abs().max()) <= 0.5 + 1e-6
    # on its own surrogate the attack aligns the gradients better than random perturbations
    rnd = gm.random_perturbations(x[brew.poison_index], brew.delta, 0.5, rng, seed=0)
    random_loss = gm.matching_loss(surrogate, xt, brew, x, rnd, victim=victim)
    assert bool((brew.matching_loss < random_loss).all())
    victims = gm.retrain(victim, x, y, brew.poison_index, brew.delta, [0, 1])
    assert gm.runs_of(victims) == 4  # (attack, seed) pairs
    out = gm.target_outcome(victim, victims, xt, yt, [t, t, t + 1, t + 1], [c] * 4)
    assert out["success"].shape == (4,) and ((out["p_adv"] >= 0) & (out["p_adv"] <= 1)).all()
    # success means the adversarial class wins, so never together with a correct prediction
    assert not (out["success"] & out["correct"]).any()


def test_retrain_trains_on_the_poisoned_sets(setting):
    _, x, y, _, _, _ = setting
    seen = {}

    def train(xs, ys, seeds):
        seen.update(x=xs, y=ys, seeds=seeds)
        return {"w": torch.zeros(len(seeds), 1, dtype=DT)}

    victim = gm.Victim("probe", init=lambda s: {}, logits=lambda p, v: v, train=train)
    index = torch.tensor([[0, 1], [2, 3]])
    delta = torch.full((2, 2, 64), 0.1, dtype=DT)
    gm.retrain(victim, x, y, index, delta, [5, 6])
    assert seen["seeds"] == [5, 6, 5, 6] and seen["x"].shape == (4, 202, 64)
    torch.testing.assert_close(seen["x"][2, 200:], x[index[1]] + 0.1)  # attack 1, first seed


def test_an_ensemble_of_one_is_the_single_surrogate(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    cfg = gm.AttackConfig(steps=3)
    one = gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.5, rng, cfg)
    pair = {k: torch.cat([v, v]) for k, v in surrogate.items()}  # two identical members
    two = gm.brew(pair, x, y, xt, yt, [t], [c], 5, 0.5, rng, cfg)
    torch.testing.assert_close(two.matching_loss, one.matching_loss, rtol=1e-4, atol=1e-6)


def test_victim_interface_rejects_bad_input(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    with pytest.raises(ValueError, match="logits must be a callable"):
        gm.Victim("v", init=lambda s: {}, logits="not a function", train=lambda *a: {})
    with pytest.raises(ValueError, match="name"):
        gm.Victim("", init=lambda s: {}, logits=lambda p, v: v, train=lambda *a: {})
    with pytest.raises(ValueError, match="dtype"):
        gm.Victim("v", lambda s: {}, lambda p, v: v, lambda *a: {}, dtype=torch.int64)
    with pytest.raises(ValueError, match="victim must be a Victim"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.1, rng, victim="mlp")
    with pytest.raises(ValueError, match="config must be an S4DConfig"):
        gm.s4d_victim("small")
    with pytest.raises(ValueError, match="number of runs"):
        gm.runs_of({"a": torch.zeros(1, 3), "b": torch.zeros(2, 3)})
    with pytest.raises(ValueError, match="params"):
        gm.runs_of({})
    with pytest.raises(ValueError, match="one entry per run"):
        gm.target_outcome(gm.s4d_victim(), surrogate, xt, yt, [t, t], [c, c])
    with pytest.raises(ValueError, match="victim must be a Victim"):
        gm.retrain(None, x, y, torch.tensor([[0]]), torch.zeros(1, 1, 64, dtype=DT), [0])
    with pytest.raises(ValueError, match="adversarial classes"):
        gm.target_outcome(gm.s4d_victim(), surrogate, xt, yt, [t], [10])


def test_sequences_of_another_length_are_refused(setting):
    # targets of 63 steps were matched against training sequences of 64
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    with pytest.raises(ValueError, match="x_test must hold sequences of x_train's length 64"):
        gm.brew(surrogate, x, y, xt[:, :63], yt, [t], [c], 5, 0.1, rng)
    brew = gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.1, rng, gm.AttackConfig(steps=1))
    with pytest.raises(ValueError, match="x_test must hold sequences of x_train's length 64"):
        gm.matching_loss(surrogate, xt[:, :63], brew, x, brew.delta)


def test_poison_indices_must_index_the_training_set(setting):
    _, x, y, _, _, _ = setting
    delta = torch.zeros(1, 2, 64, dtype=DT)
    # -1 wrapped to the last training image
    with pytest.raises(ValueError, match=r"poison_index \(training indices\) must lie in 0..199"):
        gm.poisoned_sets(x, y, torch.tensor([[0, -1]]), delta)
    with pytest.raises(ValueError, match="poison_index must have shape"):
        gm.poisoned_sets(x, y, torch.tensor([0, 1]), delta)


def test_the_box_must_make_sense(setting):
    surrogate, x, y, xt, yt, (lo, hi) = setting
    t, c = target_and_class(yt)
    with pytest.raises(ValueError, match="eps must be at most the data range's width"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 2 * (hi - lo), (lo, hi))
    with pytest.raises(ValueError, match="x_train must lie inside data_range"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.1, (lo, hi - 1.0))
    with pytest.raises(ValueError, match="base must lie inside data_range"):
        gm.random_perturbations(x[:2] + 10.0, x[:2], 0.1, (lo, hi))
    with pytest.raises(ValueError, match=r"data_range\[1\] must be a real number"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 5, 0.1, (lo, "1.0"))


def test_surrogates_and_brews_are_checked(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    broken = {**surrogate, "d0": torch.full_like(surrogate["d0"], float("nan"))}
    with pytest.raises(ValueError, match="surrogate"):
        gm.brew(broken, x, y, xt, yt, [t], [c], 5, 0.1, rng)
    with pytest.raises(ValueError, match="brew_result must be a Brew"):
        gm.matching_loss(surrogate, xt, None, x, torch.zeros(1, 5, 64, dtype=DT))
    with pytest.raises(ValueError, match="poison_index must have shape"):
        gm.Brew(torch.tensor([0, 1]), torch.zeros(1, 2, 64, dtype=DT), torch.zeros(1, dtype=DT),
                torch.tensor([0]), torch.tensor([1]))  # fmt: skip
    with pytest.raises(ValueError, match="y_test must lie in 0..9"):
        gm.target_outcome(gm.s4d_victim(), surrogate, xt, yt + 10, [t], [c])


def test_a_victim_whose_logits_have_the_wrong_shape_is_named():
    flat = lambda p, v: v.sum(-1)  # noqa: E731 - (R, B) scores, not (R, B, K)
    victim = gm.Victim("flat", init=lambda s: {}, logits=flat, train=lambda *a: {})
    params = {"w": torch.zeros(1, 3, dtype=DT)}
    with pytest.raises(ValueError, match="the flat victim's logits must have shape"):
        victim.per_run_loss(params, torch.zeros(1, 2, 4, dtype=DT), torch.zeros(1, 2).long())


def test_choose_nearest_takes_the_closest_images_of_the_class(setting):
    """The budget images of the adversarial class nearest the target in feature space, sorted:
    with the identity as features, the smallest Euclidean distances in pixel space."""
    _, x, y, xt, yt, _ = setting
    t, c = target_and_class(yt)
    chosen = gm.choose_nearest(lambda v: v, x, y, xt[t], c, 5)
    members = torch.nonzero(y == c).flatten()
    dist = torch.linalg.vector_norm(x[members] - xt[t], dim=-1)
    expected = members[dist.argsort()[:5]].sort().values
    assert torch.equal(chosen, expected)
    assert bool((y[chosen] == c).all())
    # a feature map that sees only the last pixel ranks by that pixel alone
    last = gm.choose_nearest(lambda v: v[:, -1:], x, y, xt[t], c, 3)
    gap = (x[members, -1] - xt[t, -1]).abs()
    assert float(gap[torch.isin(members, last)].max()) <= float(
        gap[~torch.isin(members, last)].min())


def test_brew_uses_the_poisons_it_is_given(setting):
    surrogate, x, y, xt, yt, rng = setting
    t, c = target_and_class(yt)
    index = gm.choose_nearest(lambda v: v, x, y, xt[t], c, 4)[None]
    config = gm.AttackConfig(steps=2, restarts=1)
    b = gm.brew(surrogate, x, y, xt, yt, [t], [c], 4, 0.1, rng, config, poison_index=index)
    assert torch.equal(b.poison_index, index)
    other = torch.nonzero(y != c).flatten()[:4][None]
    with pytest.raises(ValueError, match="adversarial class"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 4, 0.1, rng, config, poison_index=other)
    with pytest.raises(ValueError, match="poison_index"):
        gm.brew(surrogate, x, y, xt, yt, [t], [c], 4, 0.1, rng, config, poison_index=index[:, :3])
    with pytest.raises(ValueError, match="budget"):
        gm.choose_nearest(lambda v: v, x, y, xt[t], c, int((y == c).sum()) + 1)
    with pytest.raises(ValueError, match="features must map"):
        gm.choose_nearest(lambda v: v[0], x, y, xt[t], c, 2)
    with pytest.raises(ValueError, match="x_target"):
        gm.choose_nearest(lambda v: v, x, y, xt[t, :5], c, 2)
