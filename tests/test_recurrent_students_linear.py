"""The linear students of the recurrent-students benchmark's control: impulse response and
outputs against the recurrence s_t = A s_{t-1} + B x_t, y_t = C . s_t stepped directly."""

import sys
from pathlib import Path

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
