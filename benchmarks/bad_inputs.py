"""Measure how lib's public functions treat bad input: every function x every bad-input class.

Each public callable of ``lib`` (the cases of ``tests/api_cases.py`` and ``tests/api_cases_*.py``:
one small valid call per function) is called once per argument and bad input of that argument's
kind — a wrong shape, an empty tensor, nan, inf, a negative or zero value, 1e300,
float32/int/complex/bool, a list, None, a string, mismatched lengths, out-of-range integers (10¹²,
2⁶⁴), a tensor that requires grad, an int64 tensor (its float64 equal's answer expected), constant
data, one 1e300 entry, an unknown device, a malformed file (its error must name it), a closure whose
answer is spoiled (float32, complex, a string, None, nan, 1e300, detached, int64, a 2-D view, a
missing key, one value for a pair) — and the outcome is classified (``api_cases.classify``):

    clear ValueError from lib | accepted, answer correct | accepted (a legitimate value, finite) |
    a run as long as asked (10¹² steps) | another exception | a ValueError from numpy/torch |
    MemoryError/OverflowError | silent nan/inf (ordinary / 1e300-sized inputs) |
    silent wrong answer | hang (> 20 s) | a malformed file's error that does not name the file

The rule: a ValueError from lib, or a correct answer. The acceptance bar: no case outside the
rule (no silent wrong answer or nan, no crash from deep inside, no hang; measured 2026-11-29: 0 of
15 243 with the fixes of the bad-input review applied).

    .venv/bin/python benchmarks/bad_inputs.py            # every module
    .venv/bin/python benchmarks/bad_inputs.py ssm flow   # the cases of these modules only

prints the outcomes by module, the cases outside the rule by outcome and by argument kind, then
every case outside the rule.
"""

from __future__ import annotations

import contextlib
import io
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
    ("long-run", "absurd size (10¹² steps): still running at the limit, as asked"),
    ("diverged", "a training run that overflowed, flagged info['diverged']"),
    ("overflow-passed", "a loss/gradient closure's overflow (1e300 parameters, a nan/1e300 "
     "answer of a closure it calls), passed on for the engines to flag"),
    ("other-error", "another exception from deep inside"),
    ("foreign-error", "a ValueError from numpy/torch"),
    ("overflow", "MemoryError/OverflowError on an absurd size"),
    ("nan", "silent nan/inf from ordinary inputs"),
    ("nan-big", "silent nan/inf from 1e300-sized inputs"),
    ("wrong", "silent wrong answer"),
    ("hang", "hang (> 20 s)"),
    ("unnamed-file", "a malformed file's ValueError that does not name the file"),
]
OUTSIDE = set(api_cases.OUTSIDE_RULE)
SHORT = {
    "lib-error": "lib",
    "correct": "ok",
    "accepted": "acc",
    "long-run": "long",
    "diverged": "div",
    "overflow-passed": "passed",
}


def module_of(case_name: str) -> str:
    return case_name.split(".")[0]


def valid_call_problem(case) -> tuple[str, str] | None:
    """None if the case's own valid call gives a finite answer, else (outcome, detail)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            answer = case.call()
    except Exception as error:  # noqa: BLE001 - a broken case is reported, not fatal
        return "other-error", f"the valid call raised {type(error).__name__}: {str(error)[:80]}"
    return None if api_cases.finite(answer) else ("nan", "non-finite valid answer")


CLASS_CASES: dict[str, set] = {}
CLASS_COUNTS: dict[str, Counter] = {}


def run(cases) -> tuple[dict, list, Counter]:
    """Every bad input of every case: counts per module, the rows outside the rule, by kind."""
    counts: dict[str, Counter] = {}
    outside: list[tuple] = []
    by_kind: Counter = Counter()
    for case in cases:
        mine = counts.setdefault(module_of(case.name), Counter())
        problem = valid_call_problem(case)  # the valid call itself must work
        if problem:
            outside.append((case.name, "(valid call)", "-", *problem))
            mine[problem[0]] += 1
            continue
        for arg in case.args:
            for label, value, cls in api_cases.mutations(arg):
                outcome, detail = api_cases.classify(case, arg.name, value, cls)
                mine[outcome] += 1
                name = api_cases.input_class(label, arg.kind)
                if name is not None:
                    CLASS_CASES.setdefault(name, set()).add(case.name)
                    CLASS_COUNTS.setdefault(name, Counter())[outcome] += 1
                if outcome in OUTSIDE:
                    by_kind[arg.kind] += 1
                    outside.append((case.name, arg.name, label, outcome, detail))
    return counts, outside, by_kind


def print_tables(counts: dict, by_kind: Counter) -> tuple[Counter, int]:
    total: Counter = sum(counts.values(), Counter())
    keys = [key for key, _ in ROWS]
    print("| outcome | cases |")
    print("|---|---|")
    for key, text in ROWS:
        print(f"| {text} | {total.get(key, 0)} |")
    print()
    print("By module (outside the rule: the columns after 'passed'):")
    print("| module | cases | outside | " + " | ".join(SHORT.get(k, k) for k in keys) + " |")
    print("|---|---|---|" + "---|" * len(keys))
    for module in sorted(counts):
        row = counts[module]
        out = sum(row.get(k, 0) for k in OUTSIDE)
        cells = " | ".join(str(row.get(k, 0)) for k in keys)
        print(f"| {module} | {sum(row.values())} | {out} | {cells} |")
    print()
    print("Outside the rule, by argument kind:", dict(by_kind.most_common()) or "none")
    print()
    print("The input classes of the issue (api_cases.INPUT_CLASSES):")
    print("| class | cases reached | bad inputs | outside the rule |")
    print("|---|---|---|---|")
    for name in api_cases.INPUT_CLASSES:
        row = CLASS_COUNTS.get(name, Counter())
        out = sum(row.get(k, 0) for k in OUTSIDE)
        print(f"| {name} | {len(CLASS_CASES.get(name, ()))} | {sum(row.values())} | {out} |")
    return total, sum(total.get(k, 0) for k in OUTSIDE)


def main(modules: list[str]) -> int:
    start = time.perf_counter()
    cases = api_cases.build_cases()
    if modules:
        cases = [case for case in cases if module_of(case.name) in modules]
    counts, outside, by_kind = run(cases)
    n_cases = sum(sum(c.values()) for c in counts.values())
    print(f"{len(cases)} cases, {n_cases} bad inputs, {time.perf_counter() - start:.0f} s")
    print()
    total, n_out = print_tables(counts, by_kind)
    print(f"outside the rule: {n_out} of {n_cases} = {100 * n_out / max(n_cases, 1):.2f} %")
    if outside:
        print()
        for row in outside:
            print("  " + " | ".join(str(v) for v in row))
    ok = n_out == 0
    print()
    print("acceptance:", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
