"""The pieces of benchmarks/reproduce_poisoning_real_data.py on a tiny setting (seconds)."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import reproduce_poisoning_real_data as rp  # noqa: E402

from lib.book import data  # noqa: E402
from lib.book.results import _plain  # noqa: E402
from lib.ssm import s4d  # noqa: E402


def test_draw_targets_follow_the_chapter_rule():
    x, y, xt, yt, _ = data.digits_split()
    predicted = yt.clone()
    predicted[::2] = (yt[::2] + 1) % 10  # the surrogate gets every even index wrong
    targets, adversarial = rp.draw_targets(predicted, yt, 6, seed=0)
    assert len(set(targets)) == 6 and all(t % 2 == 1 for t in targets)
    assert all(a != int(yt[t]) for t, a in zip(targets, adversarial, strict=True))
    assert rp.draw_targets(predicted, yt, 6, seed=0) == (targets, adversarial)  # seeded
    assert rp.whole_class(y) == int(torch.bincount(y).min())


def test_settings_are_the_ones_the_chapter_states():
    # C: the paper's attack (250 steps, best of 8 starts), 40 epochs, 16 targets × 2 seeds
    assert (rp.PART_C.steps, rp.PART_C.restarts, rp.PART_C.epochs) == (250, 8, 40)
    assert rp.PART_C.cells == ((40, 2.0, 16),) and len(rp.VICTIM_SEEDS) == 2
    # B: the largest cell has at least 32 pairs
    assert max(n for _, _, n in rp.PART_B.cells) * len(rp.VICTIM_SEEDS) >= 32


def test_run_all_on_a_tiny_setting():
    tiny = {
        "C": rp.Part(steps=2, restarts=2, epochs=1, cells=((5, 2.0, 2),)),
        "B": rp.Part(steps=2, restarts=1, epochs=1, cells=((5, 1.0, 1), (None, 4.0, 2))),
    }
    record = rp.run_all(tiny, seeds=[0, 3], surrogate_epochs=1, workers=0)
    assert set(record) == {"results", "settings", "seeds"}
    _plain(record)  # JSON-ready
    results, settings = record["results"], record["settings"]
    assert settings["parts"]["C"]["restarts"] == 2 and record["seeds"]["victims"] == [0, 3]
    c_cell = results["C"]["cells"][0]
    assert c_cell["n_pairs"] == 4 and c_cell["budget"] == 5 and not c_cell["whole_class"]
    assert results["C"]["seconds"] > 0 and results["B"]["cpu_seconds"] > 0
    for arm in rp.ARMS:
        outcome = c_cell["arms"][arm]
        assert len(outcome["success"]) == 4 and len(outcome["p_adv"]) == 4
        assert set(np.unique(outcome["success"])) <= {0, 1}
        assert np.all((outcome["p_adv"] >= 0) & (outcome["p_adv"] <= 1))
    assert len(c_cell["arms"]["regularized"]["restart_losses"][0]) == 2
    assert len(c_cell["clean"]["success"]) == 4
    whole = results["B"]["cells"][1]
    assert whole["whole_class"] and whole["budget"] == settings["whole_class"]
    # the cells share the target pool: a smaller cell takes its first targets
    assert results["B"]["cells"][0]["targets"] == c_cell["targets"][:1]


def test_the_mlp_line_uses_its_own_surrogate_and_targets():
    tiny = {"MLP": rp.Part(steps=2, restarts=1, epochs=1, cells=((5, 4.0, 2),), victim="MLP")}
    record = rp.run_all(tiny, seeds=[0], surrogate_epochs=1, workers=0)
    mlp = record["results"]["MLP"]
    assert mlp["cells"][0]["n_pairs"] == 2 and len(mlp["clean_held_out_accuracy"]) == 1
    assert record["settings"]["parts"]["MLP"]["victim"] == "MLP"
    with pytest.raises(ValueError, match="victim"):
        rp.family(rp.Part(steps=1, restarts=1, epochs=1, cells=(), victim="CNN"))


def test_run_cell_rejects_a_budget_larger_than_the_class():
    x, y, xt, yt, rng = data.digits_split()
    surrogate = s4d.init_params(rp.MODEL, [0])
    part = rp.Part(steps=1, restarts=1, epochs=1, cells=())
    with pytest.raises(ValueError, match="budget"):
        rp.run_cell(
            surrogate, x, y, xt, yt, [0], [(int(yt[0]) + 1) % 10], 10_000, 0.1, rng, part, [0]
        )


def test_the_tasks_carry_their_seeds_and_declare_their_paths():
    tasks = rp.tasks()
    keys = [t.key for t in tasks]
    assert len(set(keys)) == len(keys)
    control = [t for t in tasks if t.key.startswith("control ")]
    assert {t.kwargs["name"] for t in control} == set(rp.CONTROL_SETTINGS)
    for t in control:
        assert {"surrogate_seed", "extractor_seed", "target_seed", "attack_seed",
                "victim_seeds"} <= set(t.kwargs)
        assert t.writes == (("control", t.kwargs["name"]),)
    # the control is sized as the chapter states: 32 targets, the chapter's 40 poisons and eps
    assert rp.CONTROL_TARGETS >= 32 and rp.CONTROL_BUDGET == 40 and rp.CONTROL_EPS_GRAY == 2.0
    assert 1 in rp.CONTROL_DOSES


def test_split_for_transfer_is_disjoint():
    x, y, *_ = data.digits_split()
    (xa, ya), (xb, yb) = rp.split_for_transfer(x, y)
    assert len(xa) + len(xb) == len(x) and len(xa) == (len(x) + 2) // 3
    assert torch.equal(xa, x[::3]) and torch.equal(ya, y[::3])


def tiny_control(monkeypatch, targets: int) -> None:
    """The control cut to seconds: ``targets`` targets, 2 attack steps, 1-epoch trainings."""
    monkeypatch.setattr(rp, "CONTROL_TARGETS", targets)
    monkeypatch.setattr(rp, "CONTROL_STEPS", 2)
    monkeypatch.setattr(rp, "HEAD_TRAIN", rp.tv.HeadTrainConfig(epochs=1))
    monkeypatch.setattr(rp, "MLP_EXTRACTOR_TRAIN", rp.mlp_victim.TrainConfig(epochs=1))


def test_a_control_setting_on_a_tiny_size(monkeypatch):
    tiny_control(monkeypatch, 2)
    out = rp.control_setting("MLP transfer", surrogate_seed=100, extractor_seed=200,
                             target_seed=0, attack_seed=1, victim_seeds=[0, 3])
    record = out[("control", "MLP transfer")]
    _plain(record)  # JSON-ready
    assert record["setting"] == "transfer" and len(record["targets"]) == 2
    assert [c["dose"] for c in record["cells"]] == list(rp.CONTROL_DOSES)
    for cell in record["cells"]:
        assert set(cell["arms"]) == {"attack", "random", "authors", "random_authors"}
        for arm in ("random", "random_authors"):  # each control has its own arm's size
            ratio = cell["arms"][arm]["size_ratio"]
            assert ratio["l2"] == pytest.approx(1.0, abs=0.05) and ratio["linf"] <= 1 + 1e-9
        for arm in cell["arms"].values():
            assert len(arm["success"]) == 4 and set(np.unique(arm["success"])) <= {0, 1}
    with pytest.raises(ValueError, match="family"):
        rp.control_victim("CNN", "transfer", None, 0)


def test_the_reachable_control_draws_only_targets_the_direct_attack_moves(monkeypatch):
    tiny_control(monkeypatch, 3)
    out = rp.control_setting("MLP transfer", surrogate_seed=100, extractor_seed=200,
                             target_seed=0, attack_seed=1, victim_seeds=[0], reachable=True)
    record = out[("reachable", "MLP transfer")]
    assert [c["dose"] for c in record["cells"]] == [1]  # the chapter's eps only
    assert 3 <= record["pool"]["reachable"] <= record["pool"]["right"]
    # every drawn target is moved into its adversarial class by the direct attack on the
    # surrogate (recomputed here from the same seeds)
    x_all, y_all, xt, yt, data_range = data.digits_split()
    pretrain, (x, y) = rp.split_for_transfer(x_all, y_all)
    victim, _ = rp.control_victim("MLP", "transfer", pretrain, 200)
    surrogate = victim.train(x[None], y[None], [100])
    idx = torch.as_tensor(record["targets"])
    gray = (data_range[1] - data_range[0]) / 16
    reached = rp.evasion.targeted_evasion(victim, surrogate, xt[idx], yt[idx],
                                          torch.as_tensor(record["adversarial"]),
                                          rp.CONTROL_EPS_GRAY * gray, data_range)
    assert reached["success"].all() and reached["clean_correct"].all()


def test_the_oracle_task_on_a_tiny_size(monkeypatch):
    """The white-box task: its arms, each random control of its arm's size, one outcome per
    (target, seed) pair; and the S4D fit task's layout."""
    monkeypatch.setattr(rp, "CONTROL_TARGETS", 2)
    monkeypatch.setattr(rp, "CONTROL_STEPS", 2)
    monkeypatch.setattr(rp, "ORACLE_STEPS", 2)
    monkeypatch.setattr(rp, "HEAD_TRAIN", rp.tv.HeadTrainConfig(epochs=1))
    monkeypatch.setattr(rp, "MLP_EXTRACTOR_TRAIN", rp.mlp_victim.TrainConfig(epochs=1))
    out = rp.oracle_task(surrogate_seed=100, extractor_seed=200, target_seed=0, attack_seed=1,
                         oracle_seed=0, victim_seeds=[0, 2])
    record = out[("oracle", "MLP transfer 2 gray")]
    _plain(record)
    arms = ("unrolled, random images", "unrolled, nearest images", "matching, nearest images")
    assert set(record["arms"]) == set(arms) | {f"random, size of {a}" for a in arms}
    for arm in arms:
        ratio = record["arms"][f"random, size of {arm}"]["size_ratio"]
        assert ratio["l2"] == pytest.approx(1.0, abs=0.05) and ratio["linf"] <= 1 + 1e-9
    for arm in record["arms"].values():
        assert len(arm["success"]) == 4 and arm["linf_over_eps_median"] <= 1 + 1e-9
    keys = {t.key for t in rp.tasks()}
    assert {"oracle MLP transfer 2 gray", "oracle MLP transfer 4 gray", "S4D fit"} <= keys


def test_the_implicit_task_on_a_tiny_size(monkeypatch):
    """The seed-free task: the lambda rule holds (the clean optimum has the surrogate head's norm),
    the random control has the attack's size, the perturbation stays in the eps-box, one outcome
    per target at the optimum and per (target, seed) pair for each AdamW length."""
    monkeypatch.setattr(rp, "CONTROL_TARGETS", 2)
    monkeypatch.setattr(rp, "HEAD_TRAIN", rp.tv.HeadTrainConfig(epochs=2))
    monkeypatch.setattr(rp, "MLP_EXTRACTOR_TRAIN", rp.mlp_victim.TrainConfig(epochs=2))
    out = rp.implicit_task(family="MLP", surrogate_seed=100, extractor_seed=200, target_seed=0,
                           attack_seed=1, victim_seeds=[0, 2], steps=2, epochs=(1, 2))
    record = out[("implicit", "MLP transfer 2 gray")]
    _plain(record)
    assert record["clean_optimum_norm"] == pytest.approx(record["surrogate_norm"], rel=1e-4)
    assert record["lambda"] > 0 and len(record["targets"]) == 2
    ratio = record["arms"]["random, size of implicit"]["size_ratio"]
    assert ratio["l2"] == pytest.approx(1.0, abs=0.05) and ratio["linf"] <= 1 + 1e-9
    for arm in record["arms"].values():
        assert arm["linf_over_eps_median"] <= 1 + 1e-9
        assert len(arm["optimum"]["success"]) == 2 and len(arm["optimum"]["margin"]) == 2
        # a target is flipped at the optimum exactly when its adversarial margin is positive
        assert np.array_equal(arm["optimum"]["success"], arm["optimum"]["margin"] > 0)
        for e in (1, 2):
            assert len(arm[f"adamw {e}"]["success"]) == 4
    keys = {t.key for t in rp.tasks()}
    assert {"implicit MLP transfer", "implicit S4D transfer"} <= keys


def test_placed_sets_append_or_replace():
    x = torch.arange(12, dtype=torch.float64).reshape(6, 2)
    y = torch.tensor([0, 1, 0, 1, 0, 1])
    index = torch.tensor([[0, 2], [1, 3]])
    delta = torch.full((2, 2, 2), 0.5, dtype=torch.float64)
    xa, ya, wa = rp.placed_sets(x, y, index, delta, "append")
    assert xa.shape == (2, 8, 2) and torch.equal(xa[:, :6], x.expand(2, -1, -1))
    assert torch.equal(xa[1, wa[1]], x[index[1]] + 0.5) and torch.equal(ya[0, 6:], y[index[0]])
    xr, yr, wr = rp.placed_sets(x, y, index, delta, "replace")
    assert xr.shape == (2, 6, 2) and torch.equal(wr, index) and torch.equal(yr[0], y)
    assert torch.equal(xr[0, [0, 2]], x[[0, 2]] + 0.5) and torch.equal(xr[0, [1, 3, 4, 5]],
                                                                       x[[1, 3, 4, 5]])
    with pytest.raises(ValueError, match="placement"):
        rp.placed_sets(x, y, index, delta, "insert")


def test_the_wide_scratch_task_on_a_tiny_size():
    """The from-scratch task: the random control has the attack's size, the perturbation stays in
    the eps-box, one outcome per (target, seed) pair for every placement and arm, a flip exactly
    when the adversarial margin is positive."""
    out = rp.wide_scratch_task(surrogate_seed=100, target_seed=0, attack_seed=1,
                               victim_seeds=[0, 2], hidden=8,
                               train=rp.mlp_victim.TrainConfig(epochs=1), members=2,
                               placements=("append", "replace"), budget=3, targets_n=2,
                               steps=2, restarts=1)
    record = out[("wide_scratch", "MLP 8 scratch 2 gray")]
    _plain(record)
    assert len(record["surrogate_train_accuracy"]) == 2 and len(record["targets"]) == 2
    ratio = record["arms"]["random"]["size_ratio"]
    assert ratio["l2"] == pytest.approx(1.0, abs=0.05) and ratio["linf"] <= 1 + 1e-9
    for arm in record["arms"].values():
        assert arm["linf_over_eps_median"] <= 1 + 1e-9 and len(arm["matching_loss"]) == 2
        for placement in ("append", "replace"):
            got = arm[placement]
            assert len(got["success"]) == 4 and len(got["poison_accuracy"]) == 4
            assert np.array_equal(got["success"], got["margin"] > 0)
    keys = {t.key for t in rp.tasks()}
    assert "wide MLP scratch 2 gray" in keys


def test_the_penalized_task_on_a_tiny_size():
    """The footnote's lambda retrained: every arm from one brew (same poisons), each random control
    of its arm's size, the penalty pushing the perturbation into the last row, one outcome per
    (target, seed) pair, a flip exactly when the adversarial margin is positive."""
    out = rp.penalized_task(kind="MLP", targets_n=2, seeds=[0, 2], steps=3, epochs=2)
    record = out[("penalized", "MLP 2 targets")]
    _plain(record)
    assert set(record["arms"]) == set(rp.PENALIZED_ARMS) and len(record["targets"]) == 2
    assert record["budget"] == rp.whole_class(data.digits_split()[1])
    for arm in ("lambda 1", "unregularized"):
        ratio = record["arms"][f"random {arm}"]["size_ratio"]
        assert ratio["l2"] == pytest.approx(1.0, abs=0.05) and ratio["linf"] <= 1 + 1e-9
    arms = record["arms"]
    assert arms["lambda 1"]["rel_row"] > arms["unregularized"]["rel_row"]
    for arm in arms.values():
        assert len(arm["success"]) == 4 and len(arm["poison_accuracy"]) == 4
        assert np.array_equal(arm["success"], arm["margin"] > 0)
    with pytest.raises(ValueError, match="kind"):
        rp.penalized_task(kind="CNN", targets_n=2, seeds=[0])
    tasks = {t.key: t for t in rp.tasks()}
    for kind, n in rp.PENALIZED_RUNS:
        key = f"{kind} {n} targets"
        assert tasks[f"penalized {key}"].writes == (("penalized", key),)


def test_the_weight_decay_task_trains_victim_and_surrogate_with_it():
    out = rp.wide_weight_decay_task(weight_decay=0.5, surrogate_seed=100, target_seed=0,
                                    attack_seed=1, victim_seeds=[0], targets_n=2, hidden=8,
                                    train=rp.mlp_victim.TrainConfig(epochs=1), budget=3, steps=2,
                                    restarts=1)
    record = out[("weight_decay", "MLP 8 scratch 2 gray, decay 0.5")]
    _plain(record)
    assert record["train"]["weight_decay"] == 0.5 and record["target_seed"] == 0
    assert len(record["arms"]["attack"]["replace"]["success"]) == 2
    # the decay acts: the same run without it ends elsewhere
    plain = rp.wide_scratch_task(surrogate_seed=100, target_seed=0, attack_seed=1,
                                 victim_seeds=[0], targets_n=2, hidden=8,
                                 train=rp.mlp_victim.TrainConfig(epochs=1), budget=3, steps=2,
                                 restarts=1)
    other = plain[("wide_scratch", "MLP 8 scratch 2 gray")]
    assert not np.allclose(other["arms"]["attack"]["replace"]["p_adv"],
                           record["arms"]["attack"]["replace"]["p_adv"])
    with pytest.raises(ValueError, match="weight_decay"):
        rp.wide_weight_decay_task(weight_decay=-1.0, surrogate_seed=100, target_seed=0,
                                  attack_seed=1, victim_seeds=[0], targets_n=2)
    keys = {t.key for t in rp.tasks()}
    assert {f"wide MLP scratch 2 gray, decay {w:g}" for w in rp.WIDE_WD} <= keys


def test_the_position_task_on_a_tiny_size():
    """The free row's position at lambda = 1: both arms from one brew, each random control of its
    arm's size, the penalty sparing the row it names, the sizes of every arm recorded, one outcome
    per (target, seed) pair, a flip exactly when the adversarial margin is positive."""
    out = rp.position_task(targets_n=2, seeds=[0, 2], steps=3, epochs=2)
    record = out[("position", "MLP 2 targets")]
    _plain(record)
    arms = record["arms"]
    assert tuple(arms) == rp.POSITION_ARMS and len(record["targets"]) == 2
    assert record["budget"] == rp.whole_class(data.digits_split()[1])
    assert record["free_rows"] == ["last", "first"] and record["reg_factor"] == 1.0
    for arm in ("last row", "first row"):
        ratio = arms[f"random {arm}"]["size_ratio"]
        assert ratio["l2"] == pytest.approx(1.0, abs=0.05) and ratio["linf"] <= 1 + 1e-9
        sizes, rand = arms[arm]["sizes"], arms[f"random {arm}"]["sizes"]
        assert 0 < sizes["l2_median"] and 0 < sizes["linf_median"] <= sizes["l2_median"]
        assert rand["linf_mean"] <= sizes["linf_mean"] * (1 + 1e-9)
        # matched poison by poison in l2, so the control's median l2 is its arm's
        assert rand["l2_median"] == pytest.approx(sizes["l2_median"], rel=0.05)
        for share in ("last_row_share", "first_row_share"):
            assert 0 <= sizes[share] <= 1
    # each penalized arm keeps more of its perturbation in the row it spares than the other arm
    last, first = arms["last row"]["sizes"], arms["first row"]["sizes"]
    assert last["last_row_share"] > first["last_row_share"]
    assert first["first_row_share"] > last["first_row_share"]
    ratio = record["first_to_last_size_ratio"]
    assert set(ratio) == {"l2", "linf"} and ratio["l2"] > 0
    for arm in arms.values():
        assert len(arm["success"]) == 4 and len(arm["margin"]) == 4
        assert np.array_equal(arm["success"], arm["margin"] > 0)
    tasks = {t.key: t for t in rp.tasks()}
    key = f"MLP {rp.POSITION_TARGETS} targets"
    assert tasks[f"position {key}"].writes == (("position", key),)
    assert tasks[f"position {key}"].kwargs["targets_n"] == 64


def test_the_position_task_on_the_s4d_head_on_a_tiny_size(monkeypatch):
    """The same arms on the control's S4D-transfer victim: one outcome and margin per pair, each
    random control of its arm's size, the task declared at the control's dose."""
    monkeypatch.setattr(rp, "CONTROL_TARGETS", 2)
    monkeypatch.setattr(rp, "CONTROL_STEPS", 2)
    monkeypatch.setattr(rp, "HEAD_TRAIN", rp.tv.HeadTrainConfig(epochs=1))
    monkeypatch.setattr(rp, "S4D_CONTROL_EPOCHS", 1)
    out = rp.position_transfer_task(surrogate_seed=100, extractor_seed=200, target_seed=0,
                                    attack_seed=1, victim_seeds=[0, 3])
    record = out[("position", "S4D transfer 6 gray")]
    _plain(record)
    arms = record["arms"]
    assert tuple(arms) == rp.POSITION_ARMS and record["budget"] == rp.CONTROL_BUDGET
    assert record["eps_gray"] == 6.0 and record["reg_factor"] == 1.0
    for arm in ("last row", "first row"):
        ratio = arms[f"random {arm}"]["size_ratio"]
        assert ratio["l2"] == pytest.approx(1.0, abs=0.05) and ratio["linf"] <= 1 + 1e-9
    for arm in arms.values():
        assert len(arm["success"]) == 4 and np.array_equal(arm["success"], arm["margin"] > 0)
    tasks = {t.key: t for t in rp.tasks()}
    assert tasks["position S4D transfer"].writes == (("position", "S4D transfer 6 gray"),)


def test_the_pilot_task_applies_its_levers_and_its_criterion():
    """A pre-registered pilot trains victims and surrogates with its epochs and weight decay, and
    its criterion counts targets flipped on every seed, random flips on any seed, and the fit of
    the poisons."""
    name = "ensemble, decay 1e-2, 20 epochs"
    out = rp.wide_pilot_task(pilot=name, surrogate_seed=100, target_seed=0, attack_seed=1,
                             victim_seeds=[0, 2], targets_n=2, hidden=8, members=2, budget=3,
                             steps=2, restarts=1)
    record = out[("wide_pilot", name)]
    _plain(record)
    assert record["train"]["epochs"] == 20 and record["train"]["weight_decay"] == 1e-2
    assert record["members"] == 2 and len(record["surrogate_train_accuracy"]) == 2
    assert record["pilot"] == name and record["criterion"] == rp.pilot_verdict(record)
    with pytest.raises(ValueError, match="pilot"):
        rp.wide_pilot_task(pilot="ensemble of 9", surrogate_seed=100, target_seed=0,
                           attack_seed=1, victim_seeds=[0], targets_n=2)
    # the criterion on hand-made outcomes: 3 targets x 2 seeds, target-major
    def rec(attack, random, fit=1.0):
        arm = lambda s: {"replace": {"success": s, "margin": [1.0] * 6,  # noqa: E731
                                     "poison_accuracy": [fit] * 6}}
        return {"victim_seeds": [0, 1], "arms": {"attack": arm(attack), "random": arm(random)}}
    hit = [1, 1, 1, 1, 1, 0]  # targets 0 and 1 on both seeds, target 2 on one
    got = rp.pilot_verdict(rec(hit, [0] * 6), min_flips=2)
    assert got["attack"]["every_seed"] == 2 and got["attack"]["any_seed"] == 3 and got["met"]
    assert not rp.pilot_verdict(rec(hit, [0] * 6), min_flips=3)["met"]
    assert not rp.pilot_verdict(rec(hit, [0, 0, 0, 0, 0, 1]), min_flips=2)["met"]
    assert not rp.pilot_verdict(rec(hit, [0] * 6, fit=0.98), min_flips=2)["met"]
    keys = {t.key for t in rp.tasks()}
    assert {f"wide MLP scratch 2 gray, pilot {p}" for p in rp.WIDE_PILOTS} <= keys


def test_the_joint_task_on_a_tiny_size():
    """The paper's threat model: targets of one source class, poisons from several classes keeping
    their labels and replacing their images, one brew per (pair, dose), a random control of the
    attack's size, one outcome per (seed, target), 'intended' exactly when the margin is > 0."""
    pairs = rp.joint_pairs(4, 0)
    assert len({c for c, _ in pairs}) == 4 and all(c != a for c, a in pairs)
    assert rp.joint_pairs(4, 0) == pairs  # seeded
    out = rp.joint_task(family="MLP", surrogate_seed=100, pair_seed=0, attack_seed=1,
                        victim_seeds=[0, 2], pairs_n=2, targets_n=2, poisons=12, steps=2,
                        restarts=1, epochs=2)
    record = out[("joint", "MLP, 2 epochs")]
    assert record["epochs"] == 2
    _plain(record)
    _, y_all, _, yt, _ = data.digits_split()
    _, (_, y) = rp.split_for_transfer(data.digits_split()[0], y_all)
    assert len(record["pairs"]) == 2
    for pair in record["pairs"]:
        assert all(int(yt[t]) == pair["source"] for t in pair["targets"])
        assert (pair["poison_classes"] > 0).sum() > 1  # drawn from several classes
        assert np.array_equal(pair["poison_classes"],
                              np.bincount(y[pair["poison_index"]].numpy(), minlength=10))
        assert [c["dose"] for c in pair["doses"]] == list(rp.JOINT_DOSES)
        for cell in pair["doses"]:
            ratio = cell["arms"]["random"]["size_ratio"]
            assert ratio["l2"] == pytest.approx(1.0, abs=0.05) and ratio["linf"] <= 1 + 1e-9
            for arm in cell["arms"].values():
                assert arm["linf_over_eps_median"] <= 1 + 1e-9
                assert np.asarray(arm["intended"]).shape == (2, 2)
                assert np.array_equal(arm["intended"], np.asarray(arm["margin"]) > 0)
                assert not np.any(np.asarray(arm["intended"]) & np.asarray(arm["correct"]))
    with pytest.raises(ValueError, match="family"):
        rp.joint_task(family="CNN", surrogate_seed=100, pair_seed=0, attack_seed=1,
                      victim_seeds=[0])
    tasks = {t.key: t for t in rp.tasks()}
    assert all(tasks[f"joint {f}"].writes == (("joint", f),) for f in rp.JOINT_FAMILIES)
    long = f"{rp.JOINT_LONG[0]}, {rp.JOINT_LONG[1]} epochs"
    assert tasks[f"joint {long}"].writes == (("joint", long),)
    assert tasks[f"joint {long}"].kwargs["epochs"] == rp.JOINT_LONG[1]


def test_the_published_brew_task_on_a_tiny_size():
    """The published brew on wide_scratch's setting: its poisons are the images gm.brew draws, its
    perturbations stay in the eps-box, the random control has their size, and one outcome per
    (target, seed) pair and arm, a flip exactly when the adversarial margin is positive."""
    out = rp.published_brew_task(surrogate_seed=100, target_seed=0, attack_seed=1,
                                 victim_seeds=[0, 2], hidden=8,
                                 train=rp.mlp_victim.TrainConfig(epochs=1), budget=3, targets_n=2,
                                 steps=3, restarts=2)
    record = out[("published_brew", "MLP 8 scratch 2 gray")]
    _plain(record)
    assert record["published"]["paugment"] and record["published"]["select"] == "last_step"
    assert len(record["arms"]["attack"]["restart_losses"]) == 2
    ratio = record["arms"]["random"]["size_ratio"]
    assert ratio["l2"] == pytest.approx(1.0, abs=0.05) and ratio["linf"] <= 1 + 1e-9
    for arm in record["arms"].values():
        assert arm["linf_over_eps_median"] <= 1 + 1e-9
        got = arm["replace"]
        assert len(got["success"]) == 4
        assert np.array_equal(got["success"], got["margin"] > 0)
    assert "published brew, wide MLP scratch 2 gray" in {t.key for t in rp.tasks()}


def test_the_published_brew_on_the_transfer_head_on_a_tiny_size(monkeypatch):
    """The published brew against the control's MLP head: eps-box, a random control of its size,
    one outcome per (target, seed) pair and arm."""
    monkeypatch.setattr(rp, "MLP_EXTRACTOR_TRAIN", rp.mlp_victim.TrainConfig(epochs=1))
    monkeypatch.setattr(rp, "HEAD_TRAIN", rp.tv.HeadTrainConfig(epochs=1, batch=64, lr=1e-2))
    out = rp.published_transfer_task(surrogate_seed=100, extractor_seed=3, target_seed=0,
                                     attack_seed=1, victim_seeds=[0, 2], budget=3, targets_n=2,
                                     steps=3, restarts=2)
    record = out[("published_brew", "MLP transfer 2 gray")]
    _plain(record)
    ratio = record["arms"]["random"]["size_ratio"]
    assert ratio["l2"] == pytest.approx(1.0, abs=0.05) and ratio["linf"] <= 1 + 1e-9
    for arm in record["arms"].values():
        assert arm["linf_over_eps_median"] <= 1 + 1e-9 and len(arm["success"]) == 4
    assert "published brew, MLP transfer 2 gray" in {t.key for t in rp.tasks()}


def test_the_evasion_task_attacks_the_control_targets(monkeypatch):
    import evasion_scale

    monkeypatch.setattr(rp, "CONTROL_TARGETS", 3)
    monkeypatch.setattr(rp, "MLP_CONTROL_TRAIN", rp.mlp_victim.TrainConfig(epochs=2))
    out = evasion_scale.evasion_task(name="MLP scratch", surrogate_seed=100, extractor_seed=200,
                                     target_seed=0, gray_levels=(1.0, 6.0), steps=20)
    record = out[evasion_scale.key("MLP scratch")]
    _plain(record)  # JSON-ready
    assert len(record["targets"]) == 3 and [c["eps_gray"] for c in record["cells"]] == [1.0, 6.0]
    assert all(len(c["success"]) == 3 for c in record["cells"])
    # the targets are the control's: drawn by its rule from the same surrogate's predictions
    x_all, y_all, xt, yt, _ = data.digits_split()
    _, (x, y) = rp.split_for_transfer(x_all, y_all)
    victim, _ = rp.control_victim("MLP", "scratch", None, 200)
    surrogate = victim.train(x[None], y[None], [100])
    predicted = victim.logits(surrogate, xt[None])[0].argmax(-1)
    assert (record["targets"], record["adversarial"]) == rp.draw_targets(predicted, yt, 3, 0)
