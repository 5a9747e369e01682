"""Print the book's benchmark tables: each chapter's execution time, and the hot paths.

Chapters are converted with jupytext and executed with nbclient one after the other, as under
``make test`` (``BOOK_MODE=test``), at the default scale and at ``BOOK_SCALE=full`` side by side
(``--fast-only`` skips the full scale, which takes many minutes). Then the training step of the
poisoning experiments (torch engine, compiled loop, arithmetic floor; see ``train_step.py``) and
the SSM loss-and-gradient through the closed form and the recurrence (see ``ssm_gradient.py``),
and the S4D victim's training step with the Toeplitz and the FFT convolution by sequence length
(see ``s4d_conv.py``; it measures the crossover ``lib.ssm.s4d.FFT_MIN_LENGTH``).

The book's budget is a minute per chapter at the default scale on a 2-core CPU: the exit status is
1, after every table, when a chapter's default-scale time exceeds ``BUDGET_S`` (60 s) on the
machine it runs on (whose core count the first line prints).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jupytext
import nbclient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from s4d_conv import run as run_s4d_conv  # noqa: E402
from s4d_conv import table as s4d_conv_table  # noqa: E402
from ssm_gradient import run as run_ssm_gradient  # noqa: E402
from ssm_gradient import table as ssm_table  # noqa: E402
from train_step import run as run_train_step  # noqa: E402
from train_step import table as train_step_table  # noqa: E402

from tools.chapters import pages  # noqa: E402

BUDGET_S = 60.0


def time_chapter(path: Path, scale: str = "fast") -> float:
    """Seconds to execute one chapter from a fresh kernel (kernel start-up included)."""
    notebook = jupytext.read(path)
    os.environ["BOOK_MODE"] = "test"
    os.environ["BOOK_SCALE"] = scale  # the kernel inherits the environment
    start = time.perf_counter()
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def main() -> int:
    scales = ["fast"] if "--fast-only" in sys.argv[1:] else ["fast", "full"]
    print(f"{os.cpu_count()} CPU cores; chapters at BOOK_SCALE = {', '.join(scales)}\n")
    print("| chapter | " + " | ".join(scales) + " | default within 60 s |")
    print("|---|" + "---:|" * len(scales) + ":---:|")
    totals = dict.fromkeys(scales, 0.0)
    over = []  # the chapters whose default scale took longer than the budget
    for path in pages(notebooks_only=True):
        seconds = {scale: time_chapter(path, scale) for scale in scales}
        for scale in scales:
            totals[scale] += seconds[scale]
        cells = " | ".join(f"{seconds[scale]:.1f} s" for scale in scales)
        print(f"| {path.stem} | {cells} | {'yes' if seconds['fast'] <= BUDGET_S else 'NO'} |")
        if seconds["fast"] > BUDGET_S:
            over.append(f"{path.stem} ({seconds['fast']:.0f} s)")
    print("| **whole book** | " + " | ".join(f"{totals[s]:.0f} s" for s in scales) + " | |")
    print()
    print(train_step_table(run_train_step()))
    print()
    print(ssm_table(run_ssm_gradient()))
    print()
    print(s4d_conv_table(run_s4d_conv()))
    if over:  # the book's budget: each chapter within a minute at the default scale
        print(f"\nover the {BUDGET_S:.0f} s budget at the default scale on this machine "
              f"({os.cpu_count()} CPU cores): " + ", ".join(over))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
