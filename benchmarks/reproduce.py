"""Compute the numbers that chapters quote from runs longer than their one-minute budget.

One script for every chapter. Each chapter that needs such numbers has a module
``benchmarks/reproduce_<chapter, hyphens as underscores>.py`` with a function

    run() -> dict(results=..., settings=..., seeds=...)

and this script calls it and writes ``book/results/<chapter>.json`` through
:func:`lib.results.save_results` (adding the date, the library versions, the run time and the
command). The chapter loads the file with :func:`lib.results.load_results` and glues the numbers.

Usage: ``make reproduce`` (every chapter) or ``make reproduce CHAPTERS="poisoning-in-practice"``,
i.e. ``.venv/bin/python benchmarks/reproduce.py [chapter ...]``. ``BOOK_SCALE`` is set to
``full`` unless it is set already.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("BOOK_SCALE", "full")

from lib.results import save_results  # noqa: E402

PREFIX = "reproduce_"


def chapters() -> list[str]:
    """Chapters with a reproduce module, in file-name order."""
    here = Path(__file__).resolve().parent
    return sorted(p.stem[len(PREFIX) :].replace("_", "-") for p in here.glob(f"{PREFIX}*.py"))


def reproduce(chapter: str) -> Path:
    """Run one chapter's module and write its results file."""
    module = importlib.import_module(PREFIX + chapter.replace("-", "_"))
    start = time.perf_counter()
    record = module.run()
    seconds = time.perf_counter() - start
    missing = {"results", "settings", "seeds"} - set(record)
    if missing:
        raise ValueError(f"{module.__name__}.run() must return {sorted(missing)} as well")
    command = f"BOOK_SCALE={os.environ['BOOK_SCALE']} python benchmarks/reproduce.py {chapter}"
    return save_results(chapter, command=command, seconds=seconds, **record)


def main(argv: list[str]) -> int:
    known = chapters()
    wanted = argv or known
    unknown = [c for c in wanted if c not in known]
    if unknown:
        print(f"no reproduce module for {unknown}; known chapters: {known}", file=sys.stderr)
        return 2
    for chapter in wanted:
        start = time.perf_counter()
        path = reproduce(chapter)
        print(f"{chapter}: wrote {path.relative_to(ROOT)} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
