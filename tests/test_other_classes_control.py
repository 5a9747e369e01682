"""benchmarks/other_classes_control.py on a tiny setting (seconds), and its verdict."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import other_classes_control as oc  # noqa: E402
import reproduce_poisoning_real_data as rp  # noqa: E402

from lib.book.results import _plain  # noqa: E402


def test_the_task_on_a_tiny_size(monkeypatch):
    """Targets and adversarial classes lie among the classes the extractor never saw, both arms and
    the clean heads have one outcome per (target, seed) pair, the random arm has the attack's size,
    and the task is registered."""
    monkeypatch.setattr(rp, "CONTROL_STEPS", 2)
    monkeypatch.setattr(rp, "HEAD_TRAIN", rp.tv.HeadTrainConfig(epochs=2))
    monkeypatch.setattr(rp, "MLP_EXTRACTOR_TRAIN", rp.mlp_victim.TrainConfig(epochs=2))
    out = oc.other_classes_task(family="MLP", surrogate_seed=100, extractor_seed=200,
                                target_seed=0, attack_seed=1, victim_seeds=[0, 1], targets_n=2)
    record = out[oc.key("MLP")]
    _plain(record)
    assert all(t in oc.TARGET_CLASSES for t in record["adversarial"])
    _, _, _, yt, _ = rp.data.digits_split()
    for t, a in zip(record["targets"], record["adversarial"], strict=True):
        assert int(yt[t]) in oc.TARGET_CLASSES and a != int(yt[t])
    assert record["n_extractor_train"] < 300  # only the pretraining images of 0-4
    for name in (*oc.ARMS, "clean"):
        assert len(record["arms"][name]["success"] if name != "clean"
                   else record["clean"]["success"]) == 4
    assert record["arms"]["attack"]["linf_over_eps_median"] <= 1 + 1e-9
    ratio = record["arms"]["random"]["size_ratio"]
    assert 0.95 <= ratio["l2"] <= 1 + 1e-6 and ratio["linf"] <= 1 + 1e-9
    assert record["verdict"]["outcome"] in ("success", "failure")
    assert "other classes MLP transfer 2 gray" in {t.key for t in rp.tasks()}


def test_the_second_run_draws_only_targets_the_first_did_not(monkeypatch):
    """The remaining-targets run: its targets are eligible (true class among 5-9), none is among
    the first run's, and the first run's draw is the registered one."""
    monkeypatch.setattr(rp, "CONTROL_STEPS", 2)
    monkeypatch.setattr(rp, "HEAD_TRAIN", rp.tv.HeadTrainConfig(epochs=2))
    monkeypatch.setattr(rp, "MLP_EXTRACTOR_TRAIN", rp.mlp_victim.TrainConfig(epochs=2))
    out = oc.other_classes_task(family="MLP", surrogate_seed=100, extractor_seed=200,
                                target_seed=0, attack_seed=1, victim_seeds=[0], targets_n=3,
                                remaining=True)
    record = out[oc.key("MLP", remaining=True)]
    assert record["remaining"] and len(record["excluded"]) == rp.CONTROL_TARGETS
    assert len(record["targets"]) == 3 and not set(record["targets"]) & set(record["excluded"])
    _, _, _, yt, _ = rp.data.digits_split()
    assert all(int(yt[t]) in oc.TARGET_CLASSES for t in record["targets"])
    assert "other classes MLP transfer 2 gray, remaining targets" in {t.key for t in rp.tasks()}


def test_the_verdict_can_fail():
    """7 of 32 targets on every seed against none of a random control passes (0.110 > 0.107);
    6 does not, nor does any count when the control flips as many."""
    def outcomes(every, any_only, n=32):
        per = np.zeros((n, 2), int)
        per[:every] = 1
        per[every:every + any_only, 0] = 1
        return per.reshape(-1)

    none = outcomes(0, 0)
    assert oc.verdict(outcomes(7, 0), none, 2)["outcome"] == "success"
    assert oc.verdict(outcomes(6, 5), none, 2)["outcome"] == "failure"
    assert oc.verdict(outcomes(12, 0), outcomes(12, 0), 2)["outcome"] == "failure"
    assert oc.verdict(outcomes(7, 0), none, 2)["targets_every_seed"] == {"attack": 7, "random": 0}


def test_targets_are_drawn_among_the_given_classes():
    y = torch.arange(10).repeat(5)
    targets, adv = oc.draw_targets_among(y.clone(), y, (5, 6, 7), 6, seed=0)
    assert all(int(y[t]) in (5, 6, 7) for t in targets)
    assert all(a in (5, 6, 7) and a != int(y[t]) for t, a in zip(targets, adv, strict=True))
    with pytest.raises(ValueError, match="classified correctly"):
        oc.draw_targets_among(y.clone(), y, (5, 6), 11, seed=0)
    with pytest.raises(ValueError, match="two distinct"):
        oc.draw_targets_among(y.clone(), y, (5, 5), 1, seed=0)
    rest, _ = oc.draw_targets_among(y.clone(), y, (5, 6, 7), None, seed=1, exclude=targets)
    assert sorted(rest + targets) == sorted(t for t in range(50) if int(y[t]) in (5, 6, 7))
