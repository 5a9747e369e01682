"""Cases of :mod:`lib.book.ledger` for the bad-input fuzz (``cases()``, see ``tests/api_cases.py``).

Every case writes into its own temporary ledger folder (``BOOK_LEDGER_DIR``), never into the
book's ``_build/ledger``. The oracles recompute a status from the rule of the module's docstring
by their own means (every subset by ``itertools``, percentiles by numpy), so an accepted bad input
that yields a wrong status is a wrong answer.
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch
from api_cases import Arg, Case

from lib.book import ledger

P = Arg  # short
PAPER = "slutzky2025implicit"
_DIR = Path(tempfile.mkdtemp(prefix="ledger-cases-"))  # the chapters' files, as they execute
_SAVED = Path(tempfile.mkdtemp(prefix="ledger-saved-")) / "book.ledger.json"  # a committed ledger


def _in_temp(function):
    """Run ``function`` with the ledger folder pointed at a private temporary folder."""

    def call(*args, **kwargs):
        old = os.environ.get("BOOK_LEDGER_DIR")
        os.environ["BOOK_LEDGER_DIR"] = str(_DIR)
        try:
            return function(*args, **kwargs)
        finally:
            if old is None:
                del os.environ["BOOK_LEDGER_DIR"]
            else:
                os.environ["BOOK_LEDGER_DIR"] = old

    return call


@_in_temp
def _record(key, paper, item, paper_value, ours, section, paper_stat="single", paper_n=None,
            in_hypotheses=True, tol=None):
    ledger.start("fuzz-chapter")
    return ledger.record(key, paper=paper, item=item, paper_value=paper_value, ours=ours,
                         section=section, paper_stat=paper_stat, paper_n=paper_n,
                         in_hypotheses=in_hypotheses, tol=tol)


def _seeds(ours) -> np.ndarray:
    return np.asarray(ours.tolist() if isinstance(ours, torch.Tensor) else ours, dtype=float)


def _oracle_record(result, key, paper, item, paper_value, ours, section, paper_stat="single",
                   paper_n=None, in_hypotheses=True, tol=None):
    """The rule, recomputed: brute-force subsets for a statistic of paper_n runs."""
    if not in_hypotheses:
        return result == "illustration"
    values = _seeds(ours)
    if paper_stat == "exact":
        expected = "reproduced" if abs(float(values) - paper_value) <= tol else "not reproduced"
        # rule 8 for an exact value: a tolerance of at least half the (non-zero) value, or wider
        # than EXACT_TOL_SHARE of it (up to rounding of the product)
        if expected == "reproduced" and paper_value != 0 and (
                tol >= abs(paper_value) / 2
                or tol > ledger.EXACT_TOL_SHARE * abs(paper_value) * (1 + 1e-9)):
            expected = "weak evidence"
    elif values.ndim == 0:  # one value of ours against a random number of the paper
        expected = "weak evidence" if abs(float(values) - paper_value) <= tol else "inconclusive"
    else:
        if paper_stat == "single":
            samples = values
        else:
            f = {"mean": statistics.fmean, "median": statistics.median, "max": max,
                 "min": min}[paper_stat]
            samples = np.array([f(c) for c in itertools.combinations(values.tolist(), paper_n)])
        low, high = np.percentile(samples, [5, 95])
        expected = "reproduced" if low <= paper_value <= high else "not reproduced"
        # rule 8: a band that also holds half or double the paper's (non-zero) value is too wide
        if expected == "reproduced" and paper_value != 0 and any(
                low <= x <= high for x in (paper_value / 2, 2 * paper_value)):
            expected = "weak evidence"
        # rule 8: fewer than MIN_RUNS runs of ours give weak evidence at best
        if expected == "reproduced" and values.size < ledger.MIN_RUNS:
            expected = "weak evidence"
        # rule 3: one run of the paper's placed in our band is weak evidence at best, and one
        # outside it inconclusive
        if paper_stat == "single":
            expected = "weak evidence" if low <= paper_value <= high else "inconclusive"
    return result == expected


@_in_temp
def _check(key, paper, statement, predicted, ours, tol, section, in_hypotheses=True):
    ledger.start("fuzz-chapter")
    return ledger.check(key, paper=paper, statement=statement, predicted=predicted, ours=ours,
                        tol=tol, section=section, in_hypotheses=in_hypotheses)


def _oracle_check(result, key, paper, statement, predicted, ours, tol, section,
                  in_hypotheses=True):
    if not in_hypotheses:
        return result == "illustration"
    worst = np.max(np.abs(_seeds(ours) - predicted))
    return result == ("holds" if worst <= tol else "fails")


@_in_temp
def _verdict(key):
    ledger.start("fuzz-chapter")
    ledger.record("row", paper=PAPER, item="x", paper_value=0.3, ours=0.31, tol=0.02,
                  section="s", paper_stat="single")
    return ledger.verdict(key)


@_in_temp
def _recorded(keys):
    ledger.start("fuzz-chapter")
    ledger.record("row", paper=PAPER, item="x", paper_value=0.3, ours=0.31, tol=0.02,
                  section="s", paper_stat="single")
    ledger.record("exact", paper=PAPER, item="x", paper_value=1.0, ours=1.0, tol=0.01,
                  section="s", paper_stat="exact")
    return ledger.recorded(*keys) if isinstance(keys, (list, tuple)) else ledger.recorded(keys)


def _oracle_recorded(result, keys):
    return [entry["status"] for entry in result] == [
        {"row": "weak evidence", "exact": "reproduced"}[key] for key in keys]


def _oracle_tally(result, entries):
    return result.startswith(f"{len(entries)} entr") or (not entries and result == "no entry")


def _oracle_subsets(result, values, k, stat, max_subsets=ledger.MAX_SUBSETS,
                    seed=ledger.SUBSET_SEED):
    samples, enumerated = result
    f = {"mean": statistics.fmean, "median": statistics.median, "max": max, "min": min}[stat]
    brute = sorted(f(c) for c in itertools.combinations(_seeds(values).tolist(), k))
    return enumerated and np.allclose(np.sort(samples), brute, rtol=1e-12, atol=0)


def _oracle_plot_reading(result, low, high, blind):
    """The pair as given (as numbers), its middle, and the flag."""
    low, high = float(low), float(high)
    return (isinstance(result, tuple) and [float(x) for x in result] == [low, high]
            and result.value == (low + high) / 2 and result.blind is bool(blind))


def _oracle_band_miss(result, n):
    """The share a further uniform run falls outside the interpolated band, in exact fractions:
    the band's ends sit at (1 + h)/(n + 1) from either side, h = (n - 1)(1 - LEVEL)/2."""
    h = Fraction(int(n) - 1) * (1 - Fraction(ledger.LEVEL).limit_denominator(1000)) / 2
    return math.isclose(result, float(2 * (1 + h) / (int(n) + 1)), rel_tol=1e-12)


@_in_temp
def _read_entry() -> dict:
    """An entry under two readings: 22 seeds evenly spaced from 11 to 18 (their means of 4 have
    the band 12.92..16.08) against a paper's mean of 4 read as 15.5 (the row's reading) and 16.5
    (the other)."""
    ledger.start("fuzz-chapter")
    ledger.record("read", paper=PAPER, item="Figure 2", paper_value=15.5,
                  ours=np.linspace(11, 18, 22).tolist(), section="s", paper_stat="mean",
                  paper_n=4, note="the paper leaves it open; " + ledger.READING_DECIDES,
                  readings=[{"reading": "16.5", "paper_value": 16.5}])
    return ledger.recorded("read")[0]


def _oracle_reading_statuses(result, entry):
    """Each reading's status by its own band: 15.5 inside 12.92..16.08, 16.5 outside."""
    return result == [("the row's reading", "reproduced"), ("16.5", "not reproduced")]


def _sample_run() -> dict:
    _record("row", PAPER, "Table 1, row 2, clean", 0.2, [0.1, 0.2, 0.3], "sec-x")
    return _in_temp(ledger.collect)()


def cases() -> list[Case]:
    run = _sample_run()
    committed = {chapter: data["entries"] for chapter, data in run.items()}
    ledger.save(run, _SAVED)
    seeds = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.25, 0.35], dtype=torch.float64)
    return [
        Case(
            "book.ledger.record",
            _record,
            [P("key", "row", "text"), P("paper", PAPER, "choice"), P("item", "Table 1", "text"),
             P("paper_value", 0.2, "float"), P("ours", seeds, "tensor"),
             P("section", "sec-x", "text"), P("paper_stat", "single", "choice", True),
             P("in_hypotheses", True, "bool", True)],
            oracle=_oracle_record,
        ),
        Case(
            "book.ledger.record.mean",
            _record,
            [P("key", "row", "text"), P("paper", PAPER, "choice"), P("item", "Table 1", "text"),
             P("paper_value", 0.2, "float"), P("ours", seeds, "tensor"),
             P("section", "sec-x", "text"), P("paper_stat", "mean", "choice", True),
             P("paper_n", 4, "int", True)],
            oracle=_oracle_record,
        ),
        Case(
            "book.ledger.record.exact",
            _record,
            [P("key", "row", "text"), P("paper", PAPER, "choice"), P("item", "Table 1", "text"),
             P("paper_value", 1.27e-3, "float"), P("ours", 1.2712e-3, "float"),
             P("section", "sec-x", "text"), P("paper_stat", "exact", "choice", True),
             P("tol", 5e-6, "float", True)],
            oracle=_oracle_record,
        ),
        Case(
            "book.ledger.record.weak",
            _record,
            [P("key", "row", "text"), P("paper", PAPER, "choice"), P("item", "Figure 3", "text"),
             P("paper_value", 0.3, "float"), P("ours", 0.31, "float"),
             P("section", "sec-x", "text"), P("paper_stat", "single", "choice", True),
             P("tol", 0.02, "float", True)],
            oracle=_oracle_record,
        ),
        Case(
            "book.ledger.check",
            _check,
            [P("key", "thm", "text"), P("paper", PAPER, "choice"),
             P("statement", "Theorem 2, limit as t -> inf", "text"), P("predicted", 0.0, "float"),
             P("ours", 3e-4, "float"), P("tol", 1e-3, "float"), P("section", "sec-x", "text"),
             P("in_hypotheses", True, "bool", True)],
            oracle=_oracle_check,
        ),
        Case("book.ledger.verdict", _verdict, [P("key", "row", "text")]),
        Case("book.ledger.recorded", _recorded, [P("keys", ["row", "exact"], "object")],
             oracle=_oracle_recorded),
        Case("book.ledger.band_miss_share", ledger.band_miss_share, [P("n", 19, "int")],
             oracle=_oracle_band_miss),
        Case("book.ledger.PlotReading", ledger.PlotReading,
             [P("low", 2_800.0, "float"), P("high", 2_900.0, "float"),
              P("blind", False, "bool", True)],
             oracle=_oracle_plot_reading),
        Case("book.ledger.reading_statuses", ledger.reading_statuses,
             [P("entry", _read_entry(), "object")], oracle=_oracle_reading_statuses),
        Case("book.ledger.tally", ledger.tally,
             [P("entries", list(next(iter(committed.values())).values()), "object")],
             oracle=_oracle_tally),
        Case(
            "book.ledger.subset_statistics",
            ledger.subset_statistics,
            [P("values", seeds, "tensor"), P("k", 3, "int"), P("stat", "median", "choice"),
             P("max_subsets", 1000, "int", True), P("seed", 1, "int", True)],
            oracle=_oracle_subsets,
        ),
        Case("book.ledger.rule_problems", ledger.rule_problems, [P("ledger", committed, "object")]),
        Case("book.ledger.start", _in_temp(ledger.start), [P("chapter", "fuzz-chapter", "text")]),
        Case("book.ledger.collect", _in_temp(ledger.collect), [P("directory", str(_DIR), "text")]),
        Case("book.ledger.compare", ledger.compare,
             [P("fresh", run, "object"), P("committed", committed, "object"),
              P("same_machine", True, "bool", True)]),
        Case("book.ledger.page_markdown", ledger.page_markdown, [P("ledger", committed, "object")]),
        Case("book.ledger.load", ledger.load, [P("path", str(_SAVED), "text")]),
        Case("book.ledger.written_here", ledger.written_here, [P("path", str(_SAVED), "text")]),
        Case("book.ledger.save", ledger.save,
             [P("chapters", run, "object"), P("path", str(_SAVED), "text")]),
        # malformed files: the error names the file (added by the bad-input fuzz)
        Case("book.ledger.load (malformed files)", ledger.load, [P("path", str(_SAVED), "file")]),
        Case("book.ledger.written_here (malformed files)", ledger.written_here,
             [P("path", str(_SAVED), "file")]),
        Case("book.ledger.collect (malformed files)", _in_temp(ledger.collect),
             [P("directory", str(_DIR), "folder")]),
    ]
