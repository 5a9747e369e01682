"""benchmarks/diagnose_matching.py on a tiny setting (seconds), and its pre-registered verdict."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import diagnose_matching as dm  # noqa: E402
import reproduce_poisoning_real_data as rp  # noqa: E402

from lib.book.results import _plain  # noqa: E402


def test_the_diagnosis_on_a_tiny_size(monkeypatch):
    """Every arm has one value per target of each measurement, the prediction factors into
    kappa * size * align, the random arms have their arm's size, and the victims one outcome per
    (target, seed) pair."""
    monkeypatch.setattr(rp, "CONTROL_TARGETS", 2)
    monkeypatch.setattr(rp, "CONTROL_STEPS", 2)
    monkeypatch.setattr(rp, "HEAD_TRAIN", rp.tv.HeadTrainConfig(epochs=2))
    monkeypatch.setattr(rp, "MLP_EXTRACTOR_TRAIN", rp.mlp_victim.TrainConfig(epochs=2))
    out = dm.diagnose_task(surrogate_seed=100, extractor_seed=200, target_seed=0, attack_seed=1,
                           victim_seeds=[0, 2], implicit_steps=2)
    record = out[("diagnose", "MLP transfer 2 gray")]
    _plain(record)
    assert set(record["arms"]) == set(dm.ARMS)
    kappa = np.asarray(record["kappa"])
    for name, arm in record["arms"].items():
        for key in ("matching_loss", "matching_loss_theta0", "dm_pred", "size", "align", "dm"):
            assert len(arm[key]) == 2 and np.isfinite(arm[key]).all(), (name, key)
        assert np.allclose(arm["dm_pred"], kappa * arm["size"] * arm["align"], rtol=1e-9)
        assert np.all(np.abs(arm["align"]) <= 1 + 1e-12)
        assert np.all((arm["matching_loss"] >= 0) & (arm["matching_loss"] <= 2))
        assert arm["linf_over_eps_median"] <= 1 + 1e-9
        assert len(arm["adamw"]["success"]) == 4
    assert record["verdict"]["outcome"] in ("supported", "mixed", "refuted")
    keys = {t.key for t in rp.tasks()}
    assert "diagnose MLP transfer 2 gray" in keys


def _arms(matching_loss, dm_pred, dm):
    return {name: {"matching_loss": np.array(loss), "dm_pred": np.array(p), "dm": np.array(d),
                   "size": np.array([1.0, 1.0]), "align": np.array([0.5, 0.5])}
            for name, loss, p, d in zip(("matching", "implicit", "random"), matching_loss, dm_pred,
                                     dm, strict=True)}


def test_the_verdict_follows_the_registered_thresholds():
    flips = {"matching": 1, "implicit": 6, "random": 0}
    ok = _arms([[0.1, 0.1], [0.5, 0.5], [0.9, 0.9]], [[0.2, 0.3], [1.0, 2.0], [0.0, 0.01]],
               [[0.2, 0.3], [1.0, 2.0], [0.0, 0.01]])
    assert dm.verdict(ok, flips)["outcome"] == "supported"
    # matching predicts half the implicit attack's change: neither below 1/3 nor above 2/3
    half = _arms([[0.1, 0.1], [0.5, 0.5], [0.9, 0.9]], [[0.7, 0.8], [1.5, 1.5], [0.0, 0.01]],
                 [[0.7, 0.8], [1.5, 1.5], [0.0, 0.01]])
    assert dm.verdict(half, flips)["outcome"] == "mixed"
    # matching not better on its own objective: refuted
    worse = _arms([[0.6, 0.6], [0.5, 0.5], [0.9, 0.9]], [[0.2, 0.3], [1.0, 2.0], [0.0, 0.01]],
                  [[0.2, 0.3], [1.0, 2.0], [0.0, 0.01]])
    assert dm.verdict(worse, flips)["outcome"] == "refuted"
    assert dm.verdict(ok, flips)["spearman"] == pytest.approx(1.0)
