"""The linear students of the recurrent-students benchmark's control: impulse response and
outputs against the recurrence s_t = A s_{t-1} + B x_t, y_t = C . s_t stepped directly."""

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import reproduce_recurrent_students as rs  # noqa: E402


def test_linear_impulse_and_outputs_follow_the_recurrence():
    gen = torch.Generator().manual_seed(0)
    runs, width, steps = 3, 4, 7
    a = 0.5 * torch.randn(runs, width, width, generator=gen, dtype=torch.float64)
    b = torch.randn(runs, width, generator=gen, dtype=torch.float64)
    c = torch.randn(runs, width, generator=gen, dtype=torch.float64)
    x = torch.randn(runs, 5, steps, generator=gen, dtype=torch.float64)
    state = torch.zeros(runs, 5, width, dtype=torch.float64)
    direct = []
    for t in range(steps):
        state = state @ a.transpose(1, 2) + x[:, :, t, None] * b[:, None, :]
        direct.append((state * c[:, None, :]).sum(-1))
    direct = torch.stack(direct, -1)
    h = rs.linear_impulse(a, b, c, steps)
    assert torch.allclose(rs.linear_outputs(h, x), direct, atol=1e-10)
    # the impulse (1, 0, 0, ...) gives h itself
    impulse = torch.zeros(runs, 1, steps, dtype=torch.float64)
    impulse[:, 0, 0] = 1.0
    assert torch.allclose(rs.linear_outputs(h, impulse)[:, 0], h, atol=1e-12)


def test_threshold_width_target_has_linear_order_two():
    """THRESHOLD_WIDTH's target (the damped cosine alone) has Hankel order 2, THRESHOLD's 3."""
    length = rs.THRESHOLD["length"]
    order = {a: int((rs.hankel_values(rs.threshold_target(length, 3, a).numpy()) > 1e-8).sum())
             for a in (rs.THRESHOLD_WIDTH["exponential"], 0.5)}
    assert order == {0.0: 2, 0.5: 3}


def test_threshold_width_run_at_tiny_size(monkeypatch):
    """One seed group of THRESHOLD_WIDTH at a tiny budget: one row per grid width, one column per
    seed, teachers of width 2 learning the order-2 target, students at 2, 3, 4, 5 and 6 teacher
    widths (4 to 12 steps), finite errors; its task writes the path it declares."""
    seen = {}
    teachers, students = rs.gs.train_gru_teachers, rs.gs.train_gru_students

    def spy_teachers(width, target, seeds, **kw):
        seen["teacher"] = (width, target.clone(), kw["fit"])
        return teachers(width, target, seeds, **kw)

    def spy_students(matched, ks, **kw):
        seen["students"] = (list(ks), kw["width"])
        return students(matched, ks, **kw)

    monkeypatch.setattr(rs.gs, "train_gru_teachers", spy_teachers)
    monkeypatch.setattr(rs.gs, "train_gru_students", spy_students)
    monkeypatch.setitem(rs.COMMON, "teacher_steps", 3)
    monkeypatch.setitem(rs.COMMON, "n_train", 200)
    monkeypatch.setitem(rs.COMMON, "n_val", 50)
    monkeypatch.setitem(rs.COMMON, "n_eval", 20)
    monkeypatch.setitem(rs.THRESHOLD, "max_steps", 4)
    monkeypatch.setitem(rs.THRESHOLD, "check_every", 2)
    monkeypatch.setitem(rs.THRESHOLD, "patience", 2)
    monkeypatch.setitem(rs.THRESHOLD, "teacher_fit_sequences", 4)
    monkeypatch.setitem(rs.THRESHOLD, "seed_groups", [[0, 1]])
    out = rs.threshold_width_task(0)
    (task,) = rs.threshold_width_tasks()
    assert set(out) == set(task.writes) == {("threshold_width", "group0")}
    run = out[("threshold_width", "group0")]
    assert run["errors"].shape == run["window_only"].shape == (len(rs.THRESHOLD["widths"]), 2)
    assert run["teacher_impulse"].shape == (2, rs.THRESHOLD["length"])
    assert np.isfinite(run["errors"]).all() and (run["window_only"] > 0).all()
    assert np.isfinite(run["teacher_filter_fit"]).all()
    width, target, fit = seen["teacher"]
    assert (width, fit) == (2, "filter")
    assert torch.allclose(target, rs.threshold_target(rs.THRESHOLD["length"], 3, 0.0))
    assert seen["students"] == ([k for k in (4, 6, 8, 10, 12) for _ in range(2)], 30)


def test_calibration_teacher_is_balanced_symmetric_and_inside_the_linear_theory():
    # h_j = C A^j B with A = diag(poles), B = C^T = sqrt(weights): the recurrence gives the closed
    # form, the poles are distinct, real and stable, the weights positive (a balanced teacher)
    poles = torch.tensor(rs.CALIBRATION["poles"], dtype=torch.float64)
    weights = torch.tensor(rs.CALIBRATION["weights"], dtype=torch.float64)
    assert len(set(rs.CALIBRATION["poles"])) == len(poles) and (poles.abs() < 1).all()
    assert (weights > 0).all()
    b = weights.sqrt()
    h = rs.linear_impulse(torch.diag(poles)[None], b[None], b[None], 12)[0]
    assert torch.allclose(h, rs.calibration_response(12), atol=1e-14)
    # its dimension is the GRU teachers' width, so the theory's length 2d* + 1 is 7 steps
    assert len(poles) == rs.THRESHOLD["teacher_width"]


def test_linear_refuses_two_runs_at_once(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="two different runs"):
        rs.linear(tmp_path, second_period=True, calibration=True)
