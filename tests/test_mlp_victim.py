"""Unit tests of lib.poisoning.mlp_victim: shapes, independent runs, fitting the digits, bad
input."""

import pytest
import torch

from lib.book.data import digits_split
from lib.poisoning import mlp_victim as mv


@pytest.fixture(scope="module")
def digits():
    x, y, xt, yt, _ = digits_split()
    return x, y, xt, yt


def test_init_and_logits_shapes():
    cfg = mv.MLPConfig(hidden=8)
    params = mv.init_params(cfg, [0, 1, 2])
    assert params["w1"].shape == (3, 8, 64) and params["w1"].dtype == torch.float64
    x = torch.zeros(3, 5, 64, dtype=torch.float64)
    assert mv.logits(params, x).shape == (3, 5, 10)
    assert mv.logits(params, x[0]).shape == (3, 5, 10)  # one batch shared by all runs
    # a seed fixes its run, whatever the other runs are
    torch.testing.assert_close(mv.init_params(cfg, [2])["w2"][0], params["w2"][2])


def test_runs_train_as_if_alone(digits):
    x, y, _, _ = digits
    cfg, tc = mv.MLPConfig(hidden=8), mv.TrainConfig(epochs=1, batch=64)
    together = mv.train(cfg, x[:300], y[:300], [3, 4], tc)
    alone = mv.train(cfg, x[:300], y[:300], [4], tc)
    torch.testing.assert_close(together["w1"][1], alone["w1"][0], rtol=1e-10, atol=1e-12)


def test_fits_the_digits(digits):
    x, y, xt, yt = digits
    params = mv.train(mv.MLPConfig(), x, y, [0], mv.TrainConfig(epochs=30, batch=64))
    assert float(mv.accuracy(params, x, y)[0]) == 1.0  # the positive control's premise
    assert float(mv.accuracy(params, xt, yt)[0]) > 0.9


def test_bad_input(digits):
    x, y, _, _ = digits
    with pytest.raises(ValueError, match="hidden"):
        mv.MLPConfig(hidden=0)
    with pytest.raises(ValueError, match="lr"):
        mv.TrainConfig(lr=-1.0)
    with pytest.raises(ValueError, match="config"):
        mv.init_params("mlp", [0])
    with pytest.raises(ValueError, match="labels"):
        mv.train(mv.MLPConfig(hidden=4), x[:10], y[:9], [0])
    with pytest.raises(ValueError, match="x must have shape"):
        mv.train(mv.MLPConfig(hidden=4), x[:10, :32], y[:10], [0])
    with pytest.raises(ValueError, match="seeds"):
        mv.train(mv.MLPConfig(hidden=4), x[:10].expand(2, 10, 64), y[:10].expand(2, 10), [0])
    with pytest.raises(ValueError, match="train_config"):
        mv.victim(mv.MLPConfig(), "fast")


def test_parameters_are_checked(digits):
    x, y, _, _ = digits
    params = mv.init_params(mv.MLPConfig(hidden=4), [0, 1])
    nan = {**params, "b2": torch.full_like(params["b2"], float("nan"))}
    with pytest.raises(ValueError, match=r"params\['b2'\] must be finite"):
        mv.predict(nan, x[:5])  # argmax of nan logits would be class 0
    with pytest.raises(ValueError, match="disagrees .* on the number of hidden"):
        mv.logits({**params, "b1": params["b1"][:, :3]}, x[:5])
    with pytest.raises(ValueError, match="MLP parameter dict"):
        mv.accuracy({k: v for k, v in params.items() if k != "w2"}, x[:5], y[:5])
    with pytest.raises(ValueError, match="float64"):
        mv.logits({**params, "w1": params["w1"].float()}, x[:5])
    with pytest.raises(ValueError, match="x holds 3 batches"):
        mv.logits(params, x[:15].reshape(3, 5, 64))
