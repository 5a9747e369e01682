"""The paper's threat model in benchmarks/cifar10_table2.py ("random-subset": targets of one
class, one intended class, poisons from all classes, one joint brew), on a tiny CIFAR-10 folder."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lib.ssm import s4d

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import cifar10_table2  # noqa: E402
from test_cifar10 import folder  # noqa: E402, F401  (the tiny folder fixture)


def test_random_subset_end_to_end_on_the_cpu(folder):  # noqa: F811
    settings = replace(
        cifar10_table2.Settings(), targets=2, poisons=6, steps=2, restarts=1, poison_batch=3,
        threat_model="random-subset",
        victim=s4d.S4DConfig(channels=4, state=4, layers=1, inputs=3),
        train=s4d.TrainConfig(epochs=1, batch=10), victim_seeds=(1,),
    )
    result = cifar10_table2.run(settings, folder, log=lambda *_: None)
    classes = [0, 0, 3, 3, 7, 7]  # the tiny test set's labels
    assert len({classes[t] for t in result["targets"]}) == 1  # one target class
    assert result["intended"] != classes[result["targets"][0]]
    assert len(result["poison_index"]) == 6 == len(set(result["poison_index"]))
    for key in ("acc_without_poison", "acc_with_poison", "intended_with_poison"):
        assert all(0 <= v <= 1 for v in result[key])
    assert 0 <= result["matching_loss"] <= 2 * 2  # two batches of 1 − cosine
    assert result["settings"]["step_rule"] == "authors"


def test_bad_threat_model():
    with pytest.raises(ValueError, match="threat_model"):
        replace(cifar10_table2.Settings(), threat_model="jointly")
