"""Time one training step of :mod:`lib.ssm.s4d` with the Toeplitz and the FFT convolution, by
length.

The S4D victim convolves each channel's input with its kernel. The Toeplitz product costs O(L²)
per channel and sequence, the FFT product O(L log L) with a larger constant; this table measures
where one overtakes the other, which sets :data:`lib.ssm.s4d.FFT_MIN_LENGTH`.

One training step = the loss of a minibatch, its backward pass and an AdamW step, for one network
of the chapter's size (16 channels, state 8, 2 layers) on a minibatch of 32 sequences, both
convolutions in the same process on ONE thread (``torch.set_num_threads(1)``), interleaved, the
median over repeats of this process's CPU time (``time.process_time``): on a shared machine that
is still the cost of the step itself. Run: ``python benchmarks/s4d_conv.py``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.ssm import s4d  # noqa: E402

LENGTHS = (64, 128, 192, 256, 384, 512, 1024)
CONFIG = s4d.S4DConfig(channels=16, state=8, layers=2)
BATCH = 32


def _step_seconds(method: str, length: int, repeats: int) -> float:
    gen = torch.Generator().manual_seed(length)
    x = torch.randn(1, BATCH, length, generator=gen)
    labels = torch.randint(0, 10, (1, BATCH), generator=gen)
    params = {k: v.clone().requires_grad_() for k, v in s4d.init_params(CONFIG, [0]).items()}
    opt = torch.optim.AdamW(list(params.values()), lr=1e-3)
    times = []
    for _ in range(repeats + 1):  # the first step warms up (numba, allocator)
        start = time.process_time()
        out = s4d.logits(params, x, method=method)
        loss = torch.nn.functional.cross_entropy(out[0], labels[0])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.process_time() - start)
    return statistics.median(times[1:])


def run(lengths=LENGTHS) -> list[tuple[int, float, float]]:
    """(L, Toeplitz step ms, FFT step ms) per length, on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = []
        for length in lengths:
            repeats = max(3, int(2e5 / length**2) + 3)
            toe, fft = [], []
            for _ in range(3):  # interleave the two paths against drifts of the machine's load
                toe.append(_step_seconds("toeplitz", length, repeats))
                fft.append(_step_seconds("fft", length, repeats))
            rows.append((length, 1e3 * min(toe), 1e3 * min(fft)))
        return rows
    finally:
        torch.set_num_threads(threads)


def crossover(rows) -> int | None:
    """The shortest measured L from which on the FFT step is the faster one at every longer L."""
    best = None
    for length, toe, fft in reversed(rows):
        if fft < toe:
            best = length
        else:
            break
    return best


def table(rows) -> str:
    lines = [
        "| S4D training step, 1 thread (16 ch., state 8, 2 layers, batch 32) | Toeplitz | FFT "
        "| Toeplitz / FFT |",
        "|---|---:|---:|---:|",
    ]
    for length, toe, fft in rows:
        lines.append(f"| L = {length} | {toe:.2f} ms | {fft:.2f} ms | {toe / fft:.2f} |")
    lines.append(
        f"\nmeasured crossover: FFT faster from L = {crossover(rows)} on; "
        f"lib.ssm.s4d.FFT_MIN_LENGTH = {s4d.FFT_MIN_LENGTH}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run()))
