"""Print the book's benchmark table: each chapter's execution time, and the SSM hot path.

Chapters are converted with jupytext and executed with nbclient one after the other, as under
``make test`` (``BOOK_MODE=test``, the default ``BOOK_SCALE``); the SSM loss-and-gradient is timed
through the closed form and through the recurrence side by side (see ``ssm_gradient.py``).
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

from ssm_gradient import run as run_ssm_gradient  # noqa: E402
from ssm_gradient import table as ssm_table  # noqa: E402

from tools.chapters import pages  # noqa: E402

BUDGET_S = 60.0


def time_chapter(path: Path) -> float:
    """Seconds to execute one chapter from a fresh kernel (kernel start-up included)."""
    notebook = jupytext.read(path)
    os.environ["BOOK_MODE"] = "test"
    start = time.perf_counter()
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def main() -> int:
    print(f"BOOK_SCALE={os.environ.get('BOOK_SCALE', 'fast')}, {os.cpu_count()} CPU cores\n")
    print("| chapter | execution time | within 60 s |")
    print("|---|---:|:---:|")
    for path in pages(notebooks_only=True):
        seconds = time_chapter(path)
        print(f"| {path.stem} | {seconds:.1f} s | {'yes' if seconds <= BUDGET_S else 'NO'} |")
    print()
    print(ssm_table(run_ssm_gradient()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
