"""Unit tests of the GRU teacher/student helpers of lib.ssm.extrapolation (the paper's §5.3)."""

import numpy as np
import pytest
import torch

from lib.ssm.extrapolation import GRUNet, gru_tail_error, gru_teacher, train_gru_student

DT = torch.float64


def test_grunet_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(7)
    before = torch.rand(3)
    torch.manual_seed(7)
    first = GRUNet(4, seed=3)
    after = torch.rand(3)
    torch.testing.assert_close(before, after)  # the global stream was not consumed
    second = GRUNet(4, seed=3)
    for p, q in zip(first.parameters(), second.parameters(), strict=True):
        assert p.dtype == DT
        torch.testing.assert_close(p, q)
    x = torch.randn(5, 7, dtype=DT)
    assert first(x).shape == (5, 7)


def test_gru_output_matches_a_hand_written_cell():
    net = GRUNet(3, seed=0)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1), dtype=DT)
    w_ih, w_hh = net.gru.weight_ih_l0, net.gru.weight_hh_l0
    b_ih, b_hh = net.gru.bias_ih_l0, net.gru.bias_hh_l0
    h = torch.zeros(2, 3, dtype=DT)
    outputs = []
    for t in range(4):
        gi = x[:, t : t + 1] @ w_ih.T + b_ih
        gh = h @ w_hh.T + b_hh
        r = torch.sigmoid(gi[:, :3] + gh[:, :3])
        z = torch.sigmoid(gi[:, 3:6] + gh[:, 3:6])
        n = torch.tanh(gi[:, 6:] + r * gh[:, 6:])
        h = (1 - z) * n + z * h
        outputs.append(h @ net.readout.weight.T)
    torch.testing.assert_close(net(x), torch.cat(outputs, dim=1), rtol=1e-12, atol=1e-12)


def test_teacher_fits_its_target_and_is_frozen():
    target = torch.tensor([0.8**j for j in range(12)], dtype=DT)
    impulse = torch.zeros(1, 12, dtype=DT)
    impulse[0, 0] = 1.0
    untrained = GRUNet(3, seed=0)
    teacher = gru_teacher(3, target, steps=200, seed=0)
    with torch.no_grad():
        before = ((untrained(impulse)[0] - target) ** 2).sum().item()
        after = ((teacher(impulse)[0] - target) ** 2).sum().item()
    assert after < 0.1 * before
    assert not any(p.requires_grad for p in teacher.parameters())


def test_student_training_reduces_the_tail_error_and_metric_definition():
    target = torch.tensor([0.8**j for j in range(12)], dtype=DT)
    teacher = gru_teacher(2, target, steps=100, seed=0)
    untrained = GRUNet(8, seed=1)  # the student's initialization for seed 0
    trained = train_gru_student(teacher, 6, hidden=8, steps=150, seed=0)
    assert gru_tail_error(trained, teacher, 6, length=24) < gru_tail_error(
        untrained, teacher, 6, length=24
    )
    # the metric: max over t >= k of the mean absolute output gap on fixed random sequences
    x = torch.randn(256, 24, generator=torch.Generator().manual_seed(12345), dtype=DT)
    with torch.no_grad():
        gap = (trained(x) - teacher(x)).abs().mean(0)
    assert gru_tail_error(trained, teacher, 6, length=24) == pytest.approx(
        float(gap[6:].max()), rel=1e-12
    )
    assert np.isfinite(gru_tail_error(trained, teacher, 0, length=24))


@pytest.mark.parametrize(
    "call",
    [
        lambda: GRUNet(0, seed=0),
        lambda: GRUNet(3, seed=-1),
        lambda: gru_teacher(3, [[1.0]]),
        lambda: gru_teacher(3, [1.0], steps=0),
        lambda: train_gru_student(GRUNet(2, 0), 0),
        lambda: gru_tail_error(GRUNet(2, 0), GRUNet(2, 1), 5, length=5),
    ],
)
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()
