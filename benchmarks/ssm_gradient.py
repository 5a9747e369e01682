"""Time the SSM loss-and-gradient: closed form (lib.ssm_output) vs the step-by-step recurrence.

Both compute ℓ = (1/n) Σ_i (y_i − φ(x^{(i)}))² and its gradient with respect to (a, b, c) by
autograd; they differ only in how φ is evaluated: through the impulse response (eq. 2 of Slutzky et
al. 2025) or by running the recurrence (eq. 1) for κ steps. Measured side by side in one run.
"""

from __future__ import annotations

import time

import torch

import lib

DT = torch.float64

# (label, d, kappa, n): the settings of the book's experiments, and a long-sequence one
CASES = [
    ("Fig. 2 standalone (d=10, κ=6, n=18)", 10, 6, 18),
    ("Table 3 (d=20, κ=10, n=18)", 20, 10, 18),
    ("test set (d=10, κ=40, n=2000)", 10, 40, 2000),
    ("long sequences (d=64, κ=256, n=256)", 64, 256, 256),
]


def _loss_and_grad(forward, a, b, c, x, y):
    leaves = [t.clone().requires_grad_(True) for t in (a, b, c)]
    loss = ((y - forward(*leaves, x)) ** 2).mean()
    return torch.autograd.grad(loss, leaves)


def _seconds_per_call(fn, *, min_time: float = 0.2, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean time of enough calls to fill ``min_time`` seconds."""
    fn()  # warm up
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_time:
        fn()
        calls += 1
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        timings.append((time.perf_counter() - start) / calls)
    return sorted(timings)[len(timings) // 2]


def run() -> list[dict]:
    """Return one row per case: seconds per call for both implementations and their ratio."""
    rows = []
    gen = torch.Generator().manual_seed(0)
    for label, d, kappa, n in CASES:
        a = (torch.rand(d, generator=gen, dtype=DT) * 2 - 1) * 0.95
        b, c = torch.randn(d, generator=gen, dtype=DT), torch.randn(d, generator=gen, dtype=DT)
        x = torch.randn(n, kappa, generator=gen, dtype=DT)
        y = torch.randn(n, generator=gen, dtype=DT)
        closed = _loss_and_grad(lib.ssm_output, a, b, c, x, y)
        recurrent = _loss_and_grad(lib.ssm_recurrence, a, b, c, x, y)
        gap = max((g1 - g2).abs().max().item() for g1, g2 in zip(closed, recurrent, strict=True))
        args = (a, b, c, x, y)
        t_closed = _seconds_per_call(lambda args=args: _loss_and_grad(lib.ssm_output, *args))
        t_rec = _seconds_per_call(lambda args=args: _loss_and_grad(lib.ssm_recurrence, *args))
        rows.append({"case": label, "closed_s": t_closed, "recurrence_s": t_rec,
                     "speedup": t_rec / t_closed, "max_grad_gap": gap})
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| SSM loss + gradient | closed form | recurrence | recurrence / closed "
        "| max gradient gap |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['closed_s'] * 1e6:.0f} µs | {r['recurrence_s'] * 1e6:.0f} µs "
            f"| {r['speedup']:.1f}× | {r['max_grad_gap']:.1e} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
