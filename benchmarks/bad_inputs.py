"""Measure how lib's public functions treat bad input: every function x every bad-input class.

Each public callable of ``lib`` (the cases of ``tests/api_cases.py``: one small valid call per
function) is called once per argument and bad input of that argument's kind — a wrong shape, an
empty tensor, nan, inf, a negative or zero value, 1e300, float32/int/complex/bool, a list, None,
a string, mismatched lengths, out-of-range integers (10¹², 2⁶⁴) — and the outcome is classified:

    clear ValueError from lib | accepted, answer correct | accepted (a legitimate value, finite) |
    another exception | a ValueError from numpy/torch | silent nan/inf (ordinary / 1e300-sized) |
    silent wrong answer | hang (> 20 s) | MemoryError/OverflowError on absurd sizes

The rule: a ValueError from lib, or a correct answer. The acceptance bar: fewer than 2 % of cases
outside the rule, no silent wrong answer, no silent nan from ordinary inputs, no hang.

    .venv/bin/python benchmarks/bad_inputs.py   # the table, then every case outside the rule
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("MPLBACKEND", "Agg")

import api_cases  # noqa: E402  (tests/api_cases.py, after the path is set)

ROWS = [
    ("lib-error", "clear ValueError from lib"),
    ("correct", "accepted, answer correct (a conversion, or an oracle agrees)"),
    ("accepted", "accepted, a legitimate value, finite answer (no oracle)"),
    ("other-error", "another exception from deep inside"),
    ("foreign-error", "a ValueError from numpy/torch"),
    ("nan", "silent nan/inf from ordinary inputs"),
    ("nan-big", "silent nan/inf from 1e300-sized inputs"),
    ("wrong", "silent wrong answer"),
    ("hang", "hang (> 20 s)"),
    ("absurd", "absurd sizes (10¹², 2⁶⁴): MemoryError/OverflowError, or a run as long as asked"),
]
OUTSIDE = {"other-error", "foreign-error", "nan", "wrong", "hang"}


def main() -> int:
    start = time.perf_counter()
    cases = api_cases.build_cases()
    counts: Counter = Counter()
    outside = []
    for case in cases:
        base = case.call()  # the valid call itself must work
        if not api_cases.finite(base):
            outside.append((case.name, "(valid call)", "-", "nan", "non-finite valid answer"))
        for arg in case.args:
            for label, value, cls in api_cases.mutations(arg):
                outcome, detail = api_cases.classify(case, arg.name, value, cls)
                counts[outcome] += 1
                if outcome in OUTSIDE:
                    outside.append((case.name, arg.name, label, outcome, detail))
    total = sum(counts.values())
    print(f"{len(cases)} public callables, {total} bad inputs, {time.perf_counter() - start:.0f} s")
    print()
    print("| outcome | cases |")
    print("|---|---|")
    for key, text in ROWS:
        print(f"| {text} | {counts.get(key, 0)} |")
    n_out = sum(counts.get(k, 0) for k in OUTSIDE)
    print()
    print(f"outside the rule: {n_out} of {total} = {100 * n_out / max(total, 1):.2f} %")
    if outside:
        print()
        for row in outside:
            print("  " + " | ".join(str(v) for v in row))
    ok = (
        n_out < 0.02 * total
        and counts.get("wrong", 0) == 0
        and counts.get("nan", 0) == 0
        and counts.get("hang", 0) == 0
    )
    print()
    print("acceptance:", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
