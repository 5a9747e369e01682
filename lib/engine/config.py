"""Run-time settings read from the environment, in one place.

``BOOK_SCALE``
    ``fast`` (default): every chapter executes within a minute on a 2-core CPU.
    ``full``: the larger settings of the two chapters that have them (extrapolation's longer runs,
    poisoning-real-data's larger attack); every other chapter runs the same sizes at both scales.
``BOOK_MODE``
    How :func:`lib.book.viz.explore` shows an exploration: unset in a live kernel (sliders),
    ``build`` while the book is built (an animation that moves without a kernel), ``test`` under
    the test runner (one frame at the default values). The Makefile sets it.
``BOOK_TORCH_THREADS``
    Threads torch may use (default 1, applied when :mod:`lib` is imported). The book's models are
    tiny: a second thread buys nothing, and when other processes share the 2 cores, torch's
    spinning worker threads made a 10⁴-step training run 30–100 times slower in our measurements.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")

SCALES = ("fast", "full")
MODES = ("live", "build", "test")


def book_scale() -> str:
    """The experiment scale: ``"fast"`` unless ``BOOK_SCALE=full``."""
    scale = os.environ.get("BOOK_SCALE", "fast").strip().lower() or "fast"
    if scale not in SCALES:
        raise ValueError(f"BOOK_SCALE must be one of {SCALES}, got {scale!r}")
    return scale


def scaled(fast: T, full: T) -> T:
    """Pick the ``fast`` or ``full`` value of a setting according to ``BOOK_SCALE``."""
    return full if book_scale() == "full" else fast


def book_mode() -> str:
    """``"live"``, ``"build"`` or ``"test"`` according to ``BOOK_MODE`` (unset means live)."""
    mode = os.environ.get("BOOK_MODE", "live").strip().lower() or "live"
    if mode not in MODES:
        raise ValueError(f"BOOK_MODE must be one of {MODES}, got {mode!r}")
    return mode


def torch_threads() -> int:
    """The number of torch threads: ``BOOK_TORCH_THREADS`` (a positive integer), default 1."""
    value = os.environ.get("BOOK_TORCH_THREADS", "1").strip() or "1"
    # isdigit() alone accepts "²" and other Unicode digits that int() rejects
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= 1024:
        raise ValueError(f"BOOK_TORCH_THREADS must be an integer in 1..1024, got {value!r}")
    return int(value)
