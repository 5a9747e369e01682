"""The reproductions ledger: every paper number a chapter compares with its runs, recorded where it
is computed, with a verdict that one stated rule earns from the numbers.

A chapter that compares one of its numbers with a paper's calls :func:`record` beside the ``glue``
that puts the number into its text, and glues the verdict with :func:`verdict` (a page never types
one). Each call writes one **entry**: the paper and the item ("Table 1, row 2, clean"), the paper's
value and **what that value is** (``paper_stat``), ours (one value, or one value per seed), the
settings when they differ, the section of the chapter that computes it, and a **status computed
from the numbers** by the rule below.

What the paper's number is (``paper_stat``)
-------------------------------------------

``"exact"``
    a deterministic quantity (a closed form, a deterministic flow, a formula's table), or one seeded
    run of the authors' rebuilt seed by seed (the same seed and data on both sides). Ours is one
    number, ``tol`` the tolerance of agreement the chapter states: half a unit of the paper's last
    printed digit, a pixel of the plot the value is read from (or, for a value the paper shows only
    as a curve, of the figure that shows it), or half a printout's bracket. A rebuild in double
    precision of a run the authors made in single precision needs a tolerance that also covers the
    difference of precision (the chapter states it): the last digit of a single-precision printout
    alone tests the rebuild's arithmetic, not the paper's number, so such a rebuild is compared at
    the resolution at which the paper shows the value (a pixel of its figure, or the bracket of
    the printouts that enclose it: such a tolerance covers the difference of precision only by
    being coarse, no bound on the drift between the two precisions being derived). Where the
    chapter has derived no such
    tolerance before measuring, the rebuild is recorded as an illustration
    (``in_hypotheses=False``): at the precision the printout resolves, it is not the paper's run.
    This holds for a miss as for an agreement: with no bound on the drift between the precisions,
    neither can be put down to the rebuild rather than to the difference of precision.
    A rebuild is exact only while it is shown to be the authors' run: where another value of the
    same rebuild (the same seed and arm) lies farther from theirs than that resolution, for a
    cause the chapter has not found, record its values as ``"single"`` (one run of ours against
    one of theirs: weak evidence at best).
``"single"``
    one random run of the paper (one seed, one figure).
``"mean"``, ``"median"``, ``"max"``, ``"min"``
    that statistic over ``paper_n`` runs of the paper.
``"statistic"``
    one value of another statistic of ``paper_n`` runs of the paper, one that is not a function of
    the runs' single values (the threshold of the mean error of 3 runs, which is not the mean of
    their 3 thresholds): the chapter computes the same statistic on ``paper_n``-subsets of its own
    runs and records those values as ``ours``.
``"interval"``
    the paper states a range or a one-sided bound: ``paper_value = (low, high)``, ``None`` for an
    open side.

The rule
--------

The level is :data:`LEVEL`, the central 90 % of **our distribution of the same statistic**
(its 5th to 95th percentile, numpy's linear interpolation; for a statistic that can take only
the values of a grid, such as a threshold among the lengths tried, the order statistics of those
values, numpy's ``inverted_cdf``, so that the band holds only values a run can give:
``record(..., grid=True)``):

1. ``in_hypotheses=False`` (our run lies outside the hypotheses of the statement the paper's number
   illustrates, or is not the paper's setting: an analogue on other data or another model, which
   the ``setting`` names): **illustration**, whatever the numbers; this rule comes first. For a run
   in the paper's setting, a threshold or a horizon of our own choosing is not a hypothesis: a
   number that misses for such a reason is a miss (rule 9: *differs* with that reason given).
2. ``"exact"``: **reproduced** when ``|ours − paper| ≤ tol`` (and ``tol`` is at most
   :data:`EXACT_TOL_SHARE` of ``|paper|``, rule 8).
3. ``"single"`` against a spread of our seeds: **weak evidence** at best, when the paper's run
   lies in the central 90 % of our single runs; never reproduced. One draw placed in a band has
   little power to tell two distributions apart: one draw of a normal distribution shifted by one
   standard deviation from ours still lands in our central 90 % with probability
   ``Φ(z − 1) − Φ(−z − 1) = 0.74`` (``z = 1.645``; :func:`_shifted_draw_inside`). Outside the
   band it is **inconclusive**, not a miss, for the same reason seen from the other side: a run of
   our own distribution lands outside our band with probability :func:`band_miss_share` ``(n)``,
   more than 10 % at every ``n``, and outside the whole range of our ``n`` runs with probability
   ``2/(n + 1)``, more than 5 % for every ``n < 39``; one run of the paper's can neither reproduce
   our runs nor, alone, refute them: rule 5's two outcomes, where a spread of ours is there but
   the paper's side is still one draw.
4. ``"mean"``/``"median"``/``"max"``/``"min"`` of ``paper_n`` runs against ``n > paper_n`` seeds
   of ours: the statistic is computed on every ``paper_n``-subset of our seeds (every one of them
   when there are at most :data:`MAX_SUBSETS` = 200 000, eq. ``C(n, paper_n) ≤ 200 000``; else
   200 000 subsets drawn uniformly with the fixed generator ``numpy.random.default_rng(``
   :data:`SUBSET_SEED` ``)``); **reproduced** when the paper's value lies in the central 90 % of
   those statistics (from at least :data:`MIN_RUNS` seeds of ours, rule 8). A mean of 4 seeds is
   compared with our means of 4 seeds, never with the spread of our single seeds, whose quartiles
   are wider. ``"statistic"``: the same, the chapter's own values of the statistic on
   ``paper_n``-subsets taking the place of the computed ones; rule 8 counts the runs behind them
   as the fewest ``m`` with ``C(m, paper_n)`` at least the number of values (all the subsets of
   ``m`` runs), a lower bound where the subsets were drawn. Like rule 4's statistics, and unlike
   rule 3's single run, its value outside our band is a miss: it is one draw of the statistic,
   but so is a mean of 4.
5. One value of ours against a random number of the paper (``ours`` one number for ``"single"``,
   ``"mean"``, ...; or exactly ``paper_n`` seeds of ours, one value of the statistic): there is no
   spread of ours to place the paper's number in, so agreement within ``tol`` earns only **weak
   evidence**, and a disagreement is **inconclusive**: one run on each side carries little
   information either way.
6. ``"interval"``: a spread of ours is **reproduced** when at least :data:`LEVEL` (nine in ten)
   of our runs lie in ``[low, high]`` (a one-sided bound: on its side); one value of ours inside the
   range earns only **weak evidence**, and one value outside it is **inconclusive**, since one run
   of ours has no spread (a deterministic quantity of ours is an ``"exact"`` value or a
   :func:`check`). A range the paper gives for the mean of ``paper_n ≥ 2`` of its runs (a threshold
   read off a curve averaged over 3 seeds) is compared with the means of the ``paper_n``-subsets of
   our seeds (as in rule 4), not with our single seeds, whose spread is wider; exactly ``paper_n``
   seeds of ours give one mean, one value.
7. A value the paper's number must be told apart from (``against``: the null of a contrast, 0; the
   other arm's value, when the paper's number is one arm of a clean/poisoned pair): when rule 3 or 4
   places the paper's value inside our central 90 % but ``against`` lies inside it too, our runs
   cannot tell the paper's number from the one it is contrasted with: **inconclusive**, never
   reproduced. ``against`` may also be **our other arm's runs** (one value per seed): then the
   paper's value is inconclusive when it lies in the central 90 % of the same statistic of that
   arm too (our clean runs would reproduce the paper's poisoned number as well as our poisoned
   runs do).
8. A band too wide to decide: when rule 3 or 4 places the paper's value ``p ≠ 0`` inside our
   central 90 % but that band also holds ``p/2`` or ``2p`` (eq. ``low ≤ p/2 ≤ high`` or
   ``low ≤ 2p ≤ high``), our runs cannot tell the paper's number from half or double of it: the
   agreement is **weak evidence**, not a reproduction (a band of escape times from 12 000 to
   52 000 holds the paper's 13 450 and its double alike). The same holds for an ``"exact"``
   value whose tolerance window ``[p − tol, p + tol]`` holds ``p/2`` or ``2p`` (``tol ≥ |p|/2``: a
   reading bracketed between 0 and 10 000 printouts, ``p = 5 000 ± 5 000``): an agreement within
   it is weak evidence. So is an agreement within a tolerance wider than :data:`EXACT_TOL_SHARE`
   = 10 % of ``|p|`` (``15 000 ± 5 000``, a bracket of printouts; ``0.2 ± 0.05``, half a unit of a
   one-digit print). The boundary is a share of the value, not a count of digits: half a unit
   of the last digit is at most 5 % of the value for a print with two significant digits, and
   from 5.6 % to 10 % for a one-digit print whose digit is 5 to 9 (``0.5 ± 0.05`` is exactly
   10 %, accepted), but 12.5 % to 50 % for a one-digit print 1 to 4 (refused). A paper's value of 0
   has no half or double apart from itself, so rule 8 does not apply to it (an exact 0 is
   judged by its tolerance alone); a band around 0 is judged by rules 3, 4 and 7 alone. Rule 7
   comes first: a band that holds both the value to tell apart and half or double the paper's
   value is inconclusive.
   Too few runs: when rule 3, 4 or 6 would reproduce the paper's value from fewer than
   :data:`MIN_RUNS` = 19 runs (seeds) of ours, the agreement is **weak evidence**. The floor is
   a minimum sample size: from ``n = 19`` on, the whole range of ``n`` runs would be at least a
   90 % prediction interval (a further run of the same distribution falls outside it with
   probability ``2/(n + 1)``, at most ``1 − LEVEL = 0.1`` only from ``n = 19`` on); with fewer
   runs even their whole range is not a central 90 % of the distribution they stand for. The
   band the rule uses,
   the interpolated 5th to 95th percentiles, is narrower than the range: a further run falls
   outside it with probability :func:`band_miss_share` ``(n)`` ``= 2(1 + 0.05(n − 1))/(n + 1)``
   for runs of a uniform distribution (0.19 at ``n = 19``, 0.16 at 30, 0.13 at 63, tending to
   0.1; a little less for normal runs), so it is a central 90 % of our runs, not a 90 %
   prediction interval. Rule 7 comes first here too.
9. Otherwise **differs** when the chapter gives a one-line ``reason`` and the label of the
   paragraph that shows it (``explain``), else **not reproduced**. Both are misses: the rule
   records that a reason is given and does not weigh it, so the page's count lines give the
   misses in all beside the differences.
10. Readings the paper does not fix: where the chapter finds that the comparison rests on a reading
    of the paper's words that the paper leaves open ("near perfect" read as a tail error below 0.01
    or below 0.02; the rule cannot find a reading that no chapter names),
    :func:`record` takes the same comparison under each other reading (``readings``) and the
    entry's status is the status all readings share when they agree, and **inconclusive** when
    they disagree (unless rule 11 keeps a miss): one reading alone earns no verdict the other
    would deny. The mark and the
    readings come together: a note that says :data:`READING_DECIDES` without ``readings`` is
    refused by :func:`record` and by :func:`rule_problems` (ValueError), and the page names an
    entry as split by its readings only when their statuses, computed from the stored readings,
    differ (:func:`reading_statuses`; an illustration is one under every reading).
11. Not blind: where the reading of the authors' plot, the bracket or the tolerance that decides a
    comparison was fixed after our runs were seen (the entry's item, setting or note says
    :data:`SEEN_MARK`), an agreement that rules 2, 3, 4 or 6 would call reproduced is only **weak
    evidence**: a reading chosen with our runs in view could have been steered towards them,
    whatever kind the paper's value is and however plain the reading. A miss stays a miss (rule 9),
    and a blind reading keeps the status the numbers give. Nor can such a reading soften a miss:
    where readings of a row that says :data:`SEEN_MARK` disagree (rule 10) and one of them misses,
    the status is that miss, not inconclusive. A reading chosen with our runs in view is suspect
    where it agrees, not where it misses, so the miss stands whether or not its own reading was
    fixed blind; the mark is the row's and covers all its readings. Whether a row carries the mark
    is the chapter's statement, like ``in_hypotheses``; the rule and :func:`rule_problems` act on
    it. A reading used by several rows (the rebuild of the authors' seed, the row asking whether
    that run is typical of ours) is one :class:`PlotReading`, passed to each as ``plot_reading``:
    the mark follows the reading into every row that compares it.

Worked cases (each pinned by ``tests/test_ledger.py``):

* our 22 seeds evenly spaced from 11 to 18 and a paper's single run 17.5: our 5th to 95th
  percentiles are 11.35 and 17.65, so it is weak evidence (rule 3: one run is never reproduced);
  17.8 is inconclusive (rule 3: one run is never a miss either). Eight seeds 11, 12, ..., 18
  have the same band, but are fewer than 19: 17.5 is only weak evidence (rule 8). Our 22 seeds
  from 1 to 8 (1.35 to 7.65) hold a paper's 7.5 too, but also its half, 3.75: weak evidence
  (rule 8).
* a paper's mean of 4 seeds that lies inside the quartiles of our single seeds can still fall
  outside the central 90 % of our 4-seed means. Twelve skewed seeds 0.1, 0.12, 0.15, 0.2, 0.25,
  0.3, 0.4, 0.6, 1, 2, 5, 15 have quartiles 0.1875 and 1.25; a paper's mean of 4 equal to 0.2 lies
  between them, but only 11 of the 495 means of 4 of those seeds (2.2 %) are below it and one
  equals it: not reproduced. A paper's mean of 0.3 (47 of our means, 9.5 %, below it) lies inside
  the central 90 %, but so does 0.6, its double: weak evidence (rule 8; with twelve seeds, fewer
  than 19, it would be weak evidence anyway).
  Where the paper's value sits among our statistics is stored as ``rank``: the share of them below
  it, those equal to it counted half (2.3 % for 0.2). The page gives the shares below and equal
  apart where some are equal.
* those twelve seeds and a paper's mean, median, largest or smallest of 3 runs: the
  ``C(12, 3) = 220`` subsets are enumerated (the tests compare every status with a brute-force
  computation, for 2, 3 and 5 runs). With 128 seeds
  and a mean of 4 (``C(128, 4) = 10 668 000``), 200 000 subsets are drawn; for 128 lognormal
  values (``default_rng(0)``) their 5th and 95th percentiles differed from those of all the
  subsets by 0.01 % and 0.25 % of the 5th-to-95th range (measured once, enumerating all of them;
  the tests pin the agreement on 30 seeds).
* one run of ours, 0.31, against one run of the paper, 0.30, with ``tol = 0.02``: weak evidence.
* a paper's contrast (poisoned minus clean) of −0.04 from one run, against our 32 contrasts whose
  central 90 % runs from −0.05 to 0.44 and ``against=0``: both −0.04 and "no effect" lie in that
  band, so the entry is inconclusive (our 22 seeds from 11 to 18 with a paper's 17.5 and
  ``against=12``: inconclusive; with ``against=10.5``: weak evidence, rule 3). Against our
  other arm's 22 seeds from 15 to 22 (central 90 % 15.35 to 21.65) the same 17.5 is
  inconclusive; against 22 seeds from 18.5 to 25.5 (18.85 to 25.15) it is weak evidence (rule 3).
* a paper's range [4, 6] for a mean of 3 runs, our seeds 1, 3, 5, 7, 9 (one of five inside):
  of the ten means of 3 of our seeds, 3.0 to 7.0, six lie in [4, 6], 60 %: not reproduced; with
  our seeds 3, 4, 5, 6, 7 every mean of 3 (4.0 to 6.0) lies inside, but five seeds are fewer than
  19: weak evidence. With 20 seeds evenly spaced from 3.5 to 6.5, 96 % of the 1 140 means of 3
  lie inside: reproduced, though only 60 % of the single seeds do.
* a number the paper prints for a convex model, recomputed on a network outside that theorem's
  hypotheses: illustration.
* an escape iteration the authors' plot shows between 1 500 and 1 800, read as ``1 650`` with
  ``tol = 150`` (half the bracket, 9 % of the value), and our rebuild's 1 800, on the bracket's
  edge: reproduced when the bracket was fixed before our runs were seen; weak evidence when the
  row says :data:`SEEN_MARK` (rule 11); our 1 900 misses either way (not reproduced). The same
  reading of a plot showing 500 to 800 as ``650 ± 150`` (23 %) is weak evidence at best (rule 8).
* an exact ``0.2 ± 0.05`` (25 % of the value) and ours 0.2: weak evidence (rule 8); ``0.2 ±
  0.01`` and ours 0.21: reproduced.
* our 22 seeds evenly spaced from 11 to 18 and a paper's single run 17.5 under one reading
  and 12.0 under another, both weak evidence (rule 3): weak evidence. Against the central 90 %
  of the means of 4 of those seeds, 12.92 to 16.08, a paper's mean of 4 read as 15.5
  (reproduced) and as 16.5 (not reproduced): inconclusive; the same two readings fixed after
  our runs were seen (the row says :data:`SEEN_MARK`): not reproduced (rule 11), since the
  reading 15.5 (weak evidence by rule 11) cannot soften the miss of 16.5; with a ``reason``:
  differs. A paper's "at most 10⁻⁵" against our runs from 1.5 × 10⁻⁵ to 3.1 × 10⁻⁵,
  read also as "below 10⁻⁴", both readings fixed after our runs were seen: not reproduced.

Checks of a statement
---------------------

A theorem's prediction that our own computation tests is not a paper number. :func:`check` records
it with the statement, the predicted value (or a ``(low, high)`` bound), ours, a tolerance and how
ours converges: **holds** when ``|ours − predicted| ≤ tol`` (every seed, for a spread; for a bound,
ours within ``tol`` of ``[low, high]``), **fails** otherwise, **illustration** when our run lies
outside the statement's hypotheses. Checks are listed apart on the Reproductions page and never
counted as reproductions.

Where the entries go
--------------------

The entries of a chapter go to ``_build/ledger/<chapter>.json`` as the chapter executes.
``make ledger`` collects them into the committed ``book/results/ledger.json``, which holds the
default scale only (:func:`save` refuses another); ``make test`` and ``make book`` compare the
entries of their own run with the committed file (:func:`compare`), so a code change that moves a
number, changes a status or drops an entry fails the build with the entry's name. A chapter
executed at ``BOOK_SCALE=full`` is compared with nothing (two chapters print other numbers at that
scale, and the page still shows the default scale's). :func:`rule_problems` recomputes every
committed status from its stored numbers; the clauses of precision and tracking above act only
through what a chapter records (``paper_stat``, ``in_hypotheses``), like the kind of the paper's
value, and no check here can verify them. The appendix page *Reproductions* is rendered from the
committed file (:func:`page_markdown`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from lib.book import machine as _machine
from lib.engine.config import book_scale

ROOT = Path(__file__).resolve().parents[2]
LEDGER_PATH = ROOT / "book" / "results" / "ledger.json"
_KEY = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")

#: The five papers the book treats (some may have no number recorded, only checks of their
#: statements): bibliography key -> how the page names it.
PAPERS = {
    "elkabetz2021continuous": "Elkabetz & Cohen (2021): continuous vs. discrete optimization",
    "cohenkarlik2023learning": "Cohen-Karlik et al. (2023): learning low dimensional state spaces",
    "slutzky2025implicit": "Slutzky et al. (2025): clean-label poisoning of SSMs' implicit bias",
    "yun2021unifying": "Yun, Krishnan & Mobahi (2021): a unifying view of linear networks",
    "bantzis2025saddle": "Bantzis, Simon & Jacot (2025): saddle-to-saddle dynamics",
}
#: The statuses of a paper's number, strongest first.
STATUSES = ("reproduced", "weak evidence", "inconclusive", "illustration", "differs",
            "not reproduced")
#: The statuses that are misses (rule 9).
_MISSES = ("differs", "not reproduced")
#: The statuses of a check of a statement.
CHECK_STATUSES = ("holds", "fails", "illustration")
#: What a paper's printed number is (module docstring).
PAPER_STATS = ("exact", "single", "mean", "median", "max", "min", "statistic", "interval")
_SUBSET_STATS = ("mean", "median", "max", "min")
#: The level of the rule: the central 90 % of our distribution of the same statistic.
LEVEL = 0.90
#: The fewest runs (seeds) of ours from which rules 3, 4 and 6 reproduce a paper's value (rule 8),
#: a minimum sample size: a further run of the same distribution falls outside the whole range of
#: n runs with probability 2/(n + 1), at most 1 - LEVEL only from n = 19 on. The rule's band (the
#: interpolated percentiles, :func:`_band`) is narrower: see :func:`band_miss_share`.
MIN_RUNS = 19
#: Rule 8 for an exact value: an agreement within a tolerance wider than this share of the
#: paper's value (non-zero) is weak evidence at most. A share, not a count of digits: half a unit
#: of the last digit of a print with two significant digits is at most 5 % of the value (0.5/10),
#: of a one-digit print 5 to 9 from 5.6 % to 10 % (accepted), of one 1 to 4 from 12.5 % to 50 %.
EXACT_TOL_SHARE = 0.10
#: The words a record's ``note`` ends with when its status rests on a reading of the paper's words
#: that the row states (e.g. "≲" read as "≤"): the Reproductions page names such rows beside its
#: counts (:func:`page_markdown`), so a count is not read as resting on the numbers alone.
READING_DECIDES = ("the paper leaves the reading open: every reading is compared, and the verdict is "
                   "the one they share (inconclusive where they differ)")
#: The fields a reading of :func:`record`'s ``readings`` may replace: what the paper's value is
#: taken to be, and what of ours it is compared with (rule 10).
READING_FIELDS = ("paper_value", "ours", "paper_stat", "paper_n", "tol", "grid", "against")
# The stored fields of one comparison: what a reading holds of its own (rule 10).
_COMPARISON = {"paper_stat", "paper_n", "paper_value", "ours", "tol", "band", "rank", "subsets",
               "enumerated", "grid", "against", "against_runs", "against_band", "status"}
#: At most this many subsets are enumerated; above it, this many are drawn at random.
MAX_SUBSETS = 200_000
#: The seed of the generator that draws the subsets when there are too many to enumerate.
SUBSET_SEED = 0

#: Relative tolerance of :func:`compare` between a run's entries and the committed ones. The same
#: code on another machine (other BLAS kernels, thread counts) reorders floating-point sums, which
#: moves a float64 number by ~1e-12 relatively; the chapters' long trainings could amplify that.
#: Measured: under ATEN_CPU_CAPABILITY=default with two threads, every entry of the
#: dynamical-characterization and poisoning-in-practice chapters came out bit-identical (their
#: loops are compiled float64). Replacing one seed of 128 (seed 0 by seed 1000) in
#: poisoning-theorem's Table 1 row 1 moved the clean mean by 1.8e-4 and the poisoned median by
#: 2.7e-3 relatively: above this tolerance, so `make test` names the entry.
COMPARE_RTOL = 1e-4
COMPARE_ATOL = 1e-12
#: Where :data:`COMPARE_RTOL` holds: a run on the machine that wrote the committed ledger (the same
#: CPU model, numba compiling for it, and the same numerical libraries; recorded under
#: :data:`MACHINE_KEY` by :func:`save`). On another machine the chapters' long trainings amplify
#: the last digits in which two CPUs' arithmetic differs. Measured once, on 2026-11-29: run on
#: an AMD EPYC against the ledger an Intel Xeon had written (the committed ledger, rewritten
#: since, names its own machine under :data:`MACHINE_KEY`), 98 numbers of 5 chapters moved
#: (poisoning-in-practice's Table 1 row 2 bands by up to 4 %, greedy-learning's effective ranks
#: by 1e-3), no status and no entry. There :func:`compare` with ``same_machine=False`` holds the
#: statuses, the entries and the words exactly and reports the numbers without failing, as the
#: results check of benchmarks/reproduce.py does; `make ledger` on the machine makes it strict
#: again.
#: Measured again on 2026-12-01: an "AMD EPYC" host with AVX2 and no AVX-512 against the ledger an
#: "AMD EPYC" had written moved 66 numbers of 6 chapters (no status), though the model names
#: agree; the machine is therefore also told by its features (lib.book.machine.cpu_features).
#: Measured again the same day on an "AMD EPYC" with AVX-512 (znver5) against that AVX2 ledger: 79
#: numbers moved, and three notes of poisoning-theorem whose measured gap is typeset as a power of
#: ten ("9 × 10⁻¹⁴" there, "10⁻¹²" here) changed shape; _NUMBER masks such a power as one number.
#: Measured on 2026-12-02: a host that agreed with the ledger's on model, features and libraries
#: moved poisoning-in-practice's authors'-initialization errors of Table 1, row 3 (13 of 32 seeds,
#: so two notes' quoted bands), a check's rounding-level residual (linear-networks) and a digit of
#: another's note (saddle-to-saddle); the machine is therefore the host itself
#: (lib.book.machine.host), and a ledger written on another host is compared as above.
SAME_MACHINE = _machine.SAME_MACHINE
#: The key of the committed ledger file that records the machine it was written on.
MACHINE_KEY = "_machine"
_PLAIN = r"[-+\u2212]?(?:\d[\d\u00a0\u202f ]*)?\.?\d+(?:[eE][-+]?\d+)?"
#: A number as a string may print it: plain (1 287, 0.21, 1.49e-8) or typeset as a power of ten
#: ("9 × 10⁻¹⁴", "10⁻¹²"), which counts as one number whether or not its mantissa is printed.
_NUMBER = re.compile(rf"(?:{_PLAIN}\s*[×·]\s*)?10[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+|{_PLAIN}")

_chapter: str | None = None
_entries: dict = {}  # this kernel's entries of _chapter (a second run elsewhere cannot interfere)


def ledger_dir() -> Path:
    """Where executing chapters write their entries: ``$BOOK_LEDGER_DIR`` or ``_build/ledger``."""
    return Path(os.environ.get("BOOK_LEDGER_DIR", ROOT / "_build" / "ledger"))


def start(chapter: str) -> None:
    """Begin the entries of ``chapter`` (its file name, e.g. ``"poisoning-in-practice"``).

    Called once at the top of a chapter; it forgets the chapter's entries of an earlier run, so a
    re-executed chapter never keeps an entry it no longer records.
    """
    global _chapter, _entries
    if not isinstance(chapter, str) or not _KEY.match(chapter):
        raise ValueError(
            f"chapter must be a chapter file name such as 'poisoning-in-practice', got {chapter!r}"
        )
    _chapter, _entries = chapter, {}
    _write(chapter, _entries)


def _path(chapter: str) -> Path:
    return ledger_dir() / f"{chapter}.json"


def _write(chapter: str, entries: dict) -> None:
    path = _path(chapter)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"chapter": chapter, "scale": book_scale(), "entries": entries}
    path.write_text(json.dumps(record, indent=1) + "\n")


def _real(value, name: str) -> float:
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value[()]  # a 0-d array: its one number
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex \
                and value.dtype != torch.bool:
            value = value.item()
        else:
            raise ValueError(f"{name} must be a real number, got {value!r:.60}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def _text(value, name: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r:.60}")
    return value.strip()


def _flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r:.60}")
    return bool(value)


def _values(ours) -> np.ndarray | float:
    """``ours`` as one float, or as a float64 array of ``n >= 2`` finite values (one per seed)."""
    if isinstance(ours, torch.Tensor) and ours.ndim > 0:
        ours = ours.detach().cpu().numpy()
    if isinstance(ours, (np.ndarray, Sequence)) and not isinstance(ours, str) and (
        not isinstance(ours, np.ndarray) or ours.ndim > 0
    ):
        values = np.asarray(ours)
        if values.dtype == object or values.dtype.kind not in "iuf" or values.ndim != 1:
            raise ValueError(
                f"ours must be one real number or a 1-D sequence of real numbers (one per seed), "
                f"got an array of dtype {values.dtype} and shape {values.shape}"
            )
        values = values.astype(np.float64)
        if values.size < 2:
            raise ValueError(f"a spread needs at least 2 values, got {values.size}")
        if not np.all(np.isfinite(values)):
            raise ValueError("ours must be finite; got nan or inf among the values")
        return values
    return _real(ours, "ours")


def _summarize(values: np.ndarray | float) -> dict:
    """Our side of an entry: ``{"value": x}`` for one number, else the spread over seeds.

    The spread of ``n >= 2`` values: median, first and third quartiles (numpy's linear
    interpolation), mean, minimum, maximum, ``n`` and the values themselves (so that the rule can
    be applied again to the committed ledger).
    """
    if not isinstance(values, np.ndarray):
        return {"value": float(values)}
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return {
        "median": float(median), "q1": float(q1), "q3": float(q3), "mean": float(values.mean()),
        "min": float(values.min()), "max": float(values.max()), "n": int(values.size),
        "values": [float(v) for v in values],
    }


def _statistic(samples: np.ndarray, stat: str) -> np.ndarray:
    """``stat`` of each row of ``samples`` (one row per subset)."""
    return {"mean": np.mean, "median": np.median, "max": np.max, "min": np.min}[stat](
        samples, axis=1
    )


def _draw_subsets(n: int, k: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` subsets of ``k`` of ``range(n)`` drawn uniformly, as rows of indices.

    Small ``k``: Floyd's algorithm on every row at once (each step draws ``t`` in ``[0, j]`` and
    takes ``j`` instead when ``t`` is already in the row), exact and ``O(count k²)``. Large ``k``:
    the ``k`` smallest of ``n`` uniform keys per row, ``O(count n)``.
    """
    if k * k <= 2 * n:
        rows = np.empty((count, k), dtype=np.intp)
        for i, j in enumerate(range(n - k, n)):
            t = rng.integers(0, j + 1, size=count)
            taken = (rows[:, :i] == t[:, None]).any(axis=1)
            rows[:, i] = np.where(taken, j, t)
        return rows
    chunks = []
    per_chunk = max(1, 4_000_000 // n)
    for start_row in range(0, count, per_chunk):
        keys = rng.random((min(per_chunk, count - start_row), n))
        chunks.append(np.argpartition(keys, k - 1, axis=1)[:, :k])
    return np.concatenate(chunks)


def subset_statistics(values, k: int, stat: str, *, max_subsets: int = MAX_SUBSETS,
                      seed: int = SUBSET_SEED) -> tuple[np.ndarray, bool]:
    """``stat`` (mean, median, max or min) of every ``k``-subset of ``values``, or of random ones.

    Every subset when ``C(n, k) <= max_subsets`` (the second value returned is then True); else
    ``max_subsets`` subsets drawn uniformly (without replacement inside a subset) by
    ``numpy.random.default_rng(seed)``, so the answer is the same on every run.
    """
    values = _values(values)
    if not isinstance(values, np.ndarray):
        raise ValueError("values must hold at least 2 numbers, one per seed")
    if stat not in _SUBSET_STATS:
        raise ValueError(f"stat must be one of {_SUBSET_STATS}, got {stat!r:.60}")
    for name, number, low in (("k", k, 1), ("max_subsets", max_subsets, 1), ("seed", seed, 0)):
        if isinstance(number, bool) or not isinstance(number, (int, np.integer)) or number < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {number!r:.60}")
    if max_subsets > 10 * MAX_SUBSETS:
        raise ValueError(f"max_subsets must be at most {10 * MAX_SUBSETS} (their statistics are "
                         f"held in memory), got {max_subsets}")
    n = values.size
    if k > n:
        raise ValueError(f"k = {k} is more than the {n} values")
    total = math.comb(n, k)
    if total <= max_subsets:
        flat = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), k)),
                           dtype=np.intp, count=total * k)
        return _statistic(values[flat.reshape(total, k)], stat), True
    rows = _draw_subsets(n, int(k), int(max_subsets), np.random.default_rng(int(seed)))
    return _statistic(values[rows], stat), False


def _band(samples: np.ndarray, grid: bool = False) -> list[float]:
    """The central :data:`LEVEL` of ``samples``: its 5th and 95th percentiles.

    Interpolated between our values (numpy's linear rule), except for a statistic on a grid
    (``grid``: a threshold among the lengths tried), whose band is of values it can take: the
    order statistics of the inverted empirical distribution function (numpy's ``inverted_cdf``).
    """
    tail = 100 * (1 - LEVEL) / 2
    method = "inverted_cdf" if grid else "linear"
    low, high = np.percentile(samples, [tail, 100 - tail], method=method)
    return [float(low), float(high)]


def _rank(samples: np.ndarray, x: float) -> float:
    """The share of ``samples`` below ``x``, ties counted half: where ``x`` sits among them."""
    return float((np.sum(samples < x) + 0.5 * np.sum(samples == x)) / samples.size)


def _compared(paper_stat: str, paper_n: int | None, paper_value, values,
              grid: bool = False) -> dict:
    """The distribution of ours that the paper's value is placed in (rule 3, 4 or 6)."""
    if not isinstance(values, np.ndarray):
        return {}
    if paper_stat == "single":
        samples, subsets, enumerated = values, None, None
    elif paper_stat == "statistic":  # the chapter's own values on paper_n-subsets of its runs
        samples, subsets, enumerated = values, int(values.size), None
    elif paper_stat in _SUBSET_STATS:
        samples, enumerated = subset_statistics(values, paper_n, paper_stat)
        subsets = int(samples.size)
    else:  # interval
        if paper_n is not None and 2 <= paper_n < values.size:
            samples, enumerated = subset_statistics(values, paper_n, "mean")
            return {"band": _band(samples, grid), "subsets": int(samples.size),
                    "enumerated": enumerated}
        return {"band": _band(values, grid)}
    return {"band": _band(samples, grid), "rank": _rank(samples, paper_value), "subsets": subsets,
            "enumerated": enumerated}


def _one_sided(paper_stat: str, paper_n: int | None, ours: dict) -> bool:
    """Rule 5: one value of ours (or of our statistic) against a random number of the paper."""
    if paper_stat in ("exact", "interval"):
        return False
    return "value" in ours or (paper_stat in _SUBSET_STATS and ours["n"] == paper_n)


def _ours_statistic(paper_stat: str, ours: dict) -> float:
    """Our one value of the statistic when rule 5 applies."""
    if "value" in ours:
        return ours["value"]
    values = np.asarray(ours["values"])
    return float(_statistic(values[None, :], paper_stat)[0])


def _status(entry: dict) -> str:
    """The status of a paper number from its stored fields, by the rule of the module docstring:
    with other readings (rule 10), their common status when all agree, else inconclusive; but
    where the row says :data:`SEEN_MARK`, a miss under one reading stands against the others
    (rule 11)."""
    statuses = _reading_statuses(entry)
    if len(set(statuses)) == 1:
        return statuses[0]
    misses = [status for status in statuses if status in _MISSES]
    if misses and _not_blind(entry):
        return misses[0]  # rule 11: readings fixed after our runs were seen soften no miss
    return "inconclusive"


def _reading_statuses(entry: dict) -> list[str]:
    """The status of the row's own reading, then of each of its other readings (rule 10)."""
    return [_one_status(entry)] + [_one_status(_as_entry(entry, reading))
                                   for reading in entry.get("readings", ())]


def _as_entry(entry: dict, reading: dict) -> dict:
    """The entry under another reading: its comparison fields replaced by the reading's."""
    merged = {k: v for k, v in entry.items() if k not in _COMPARISON and k != "readings"}
    merged.update({k: v for k, v in reading.items() if k != "reading"})
    return merged


def _other_readings(readings, fields: dict, entry: dict) -> list[dict]:
    """The stored comparisons of ``readings`` (rule 10), each computed as :func:`record` would."""
    if isinstance(readings, (str, bytes, dict)) or not isinstance(readings, Sequence) \
            or not readings:
        raise ValueError(
            f"readings must be a non-empty list of dicts, one per other reading, got "
            f"{readings!r:.60}"
        )
    if READING_DECIDES not in (entry["note"] or ""):
        raise ValueError(
            "an entry with other readings says so in its note: the note must contain "
            "ledger.READING_DECIDES"
        )
    stored = []
    for reading in readings:
        if not isinstance(reading, dict) or "reading" not in reading:
            raise ValueError(
                f"each reading is a dict with 'reading' (what it reads the paper's words as) and "
                f"the fields it replaces, got {reading!r:.60}"
            )
        label = _text(reading["reading"], "reading")
        unknown = sorted(set(reading) - set(READING_FIELDS) - {"reading"})
        if unknown or len(reading) == 1:
            raise ValueError(
                f"a reading replaces one or more of {READING_FIELDS}; got {sorted(reading)}"
            )
        other = _entry(**{**fields, **{k: v for k, v in reading.items() if k != "reading"}})
        stored.append({"reading": label,
                       **{k: v for k, v in other.items() if k in _COMPARISON}})
    return stored


def _one_status(entry: dict) -> str:
    """The status of one reading of a paper number (rules 1 to 9 and 11)."""
    if not entry["in_hypotheses"]:
        return "illustration"
    stat, paper, ours, tol = entry["paper_stat"], entry["paper_value"], entry["ours"], entry["tol"]
    if stat == "interval":
        low = -math.inf if paper[0] is None else paper[0]
        high = math.inf if paper[1] is None else paper[1]
        inside = _interval_values(entry["paper_n"], ours)
        if inside.size == 1:  # one run of ours (or one mean of paper_n): rule 5's two outcomes
            return "weak evidence" if low <= inside[0] <= high else "inconclusive"
        agrees = _share_inside(inside, low, high) >= LEVEL
        if agrees and ours["n"] < MIN_RUNS:
            return "weak evidence"  # rule 8: too few runs of ours
    elif stat == "exact":
        agrees = abs(ours["value"] - paper) <= tol
        if agrees and (_too_wide([paper - tol, paper + tol], paper) or _loose(tol, paper)):
            return "weak evidence"  # rule 8: a tolerance that spans half or double the value,
            # or wider than EXACT_TOL_SHARE of it
    elif _one_sided(stat, entry["paper_n"], ours):
        agrees = abs(_ours_statistic(stat, ours) - paper) <= tol
        return "weak evidence" if agrees else "inconclusive"
    else:
        band = entry["band"]
        agrees = band[0] <= paper <= band[1]
        against = entry.get("against")
        if agrees and against is not None and band[0] <= against <= band[1]:
            return "inconclusive"
        other = entry.get("against_band")
        if agrees and other is not None and other[0] <= paper <= other[1]:
            return "inconclusive"
        if agrees and (_too_wide(band, paper) or _runs_behind(entry) < MIN_RUNS):
            return "weak evidence"  # rule 8: a band too wide, or too few runs of ours
        if stat == "single":
            # rule 3: one run of the paper's placed in our band is weak evidence at most, and one
            # outside it is inconclusive, not a miss
            return "weak evidence" if agrees else "inconclusive"
    if agrees:
        # rule 11: an agreement whose reading, bracket or tolerance was fixed after our runs were
        # seen is weak evidence at most
        return "weak evidence" if _not_blind(entry) else "reproduced"
    return "differs" if entry["reason"] is not None else "not reproduced"


def _runs_behind(entry: dict) -> int:
    """The runs of ours behind a spread (rule 8): its values, or for a ``"statistic"`` on
    ``paper_n``-subsets the fewest ``m`` with ``C(m, paper_n)`` at least the number of values."""
    n = entry["ours"]["n"]
    if entry["paper_stat"] != "statistic":
        return n
    m = entry["paper_n"]
    while math.comb(m, entry["paper_n"]) < n:
        m += 1
    return m


def _loose(tol: float, paper: float) -> bool:
    """Rule 8 for an exact value: a tolerance wider than :data:`EXACT_TOL_SHARE` of ``|paper|``
    (a paper's value of 0 has no scale, and is judged by its tolerance alone)."""
    return paper != 0 and tol > EXACT_TOL_SHARE * abs(paper) * (1 + 1e-9)


def _too_wide(band: list[float], paper: float) -> bool:
    """Rule 8: the band holds half or double the paper's value, so it cannot tell them apart."""
    if paper == 0:
        return False
    return any(band[0] <= x <= band[1] for x in (paper / 2, 2 * paper))


def _interval_values(paper_n: int | None, ours: dict) -> np.ndarray:
    """What rule 6 places in the paper's range: our runs, or the means of their ``paper_n``-subsets
    when the range is for a mean of ``paper_n >= 2`` runs of the paper (one mean when we have
    exactly ``paper_n``)."""
    if "value" in ours:
        return np.array([ours["value"]])
    values = np.asarray(ours["values"], dtype=float)
    if paper_n is None or paper_n < 2:
        return values
    if values.size == paper_n:
        return np.array([values.mean()])
    return subset_statistics(values, paper_n, "mean")[0]


def _share_inside(values, low: float, high: float) -> float:
    """The share of ``values`` inside ``[low, high]`` (rule 6)."""
    values = np.asarray(values, dtype=float)
    return float(np.mean((low <= values) & (values <= high)))


def _check_status(entry: dict) -> str:
    """The status of a check from its stored fields (module docstring)."""
    if not entry["in_hypotheses"]:
        return "illustration"
    predicted, ours, tol = entry["predicted"], entry["ours"], entry["tol"]
    if isinstance(predicted, list):
        low = -math.inf if predicted[0] is None else predicted[0]
        high = math.inf if predicted[1] is None else predicted[1]
    else:
        low = high = predicted
    lowest, highest = (ours["value"], ours["value"]) if "value" in ours else (ours["min"],
                                                                               ours["max"])
    return "holds" if low - tol <= lowest and highest <= high + tol else "fails"


def _interval(value, name: str) -> list:
    if len(value) != 2 or value[0] is None is value[1]:
        raise ValueError(
            f"an interval {name} is (low, high), one of them None when only one side is bounded, "
            f"got {value!r:.60}"
        )
    value = [None if v is None else _real(v, name) for v in value]
    if None not in value and value[0] > value[1]:
        raise ValueError(f"{name} interval must have low <= high, got {value}")
    return value


def _label(label, name: str) -> str | None:
    if label is not None and (not isinstance(label, str) or not _LABEL.match(label)):
        raise ValueError(f"{name} must be a MyST label such as 'sec-table1', got {label!r:.60}")
    return label


def _started(key) -> None:
    if _chapter is None:
        raise ValueError("call ledger.start(<chapter>) once before ledger.record or ledger.check")
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(f"key must be lower-case words joined by hyphens, got {key!r:.60}")
    if key in _entries:
        raise ValueError(f"entry {key!r} is recorded twice in chapter {_chapter!r}")


def _tolerance(tol, why: str) -> float:
    if tol is None:
        raise ValueError(f"{why} needs tol, the absolute tolerance of agreement")
    tol = _real(tol, "tol")
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    return tol


def _entry(
    *,
    paper: str,
    item: str,
    paper_value,
    ours,
    section: str,
    paper_stat: str,
    paper_n: int | None = None,
    in_hypotheses: bool = True,
    tol: float | None = None,
    setting: str | None = None,
    reason: str | None = None,
    explain: str | None = None,
    note: str | None = None,
    against=None,
    closed_form: bool = False,
    grid: bool = False,
) -> dict:
    """The entry :func:`record` stores for one reading (its status from :func:`_status`)."""
    if paper not in PAPERS:
        raise ValueError(f"paper must be one of {sorted(PAPERS)}, got {paper!r:.60}")
    item = _text(item, "item")
    if not isinstance(paper_stat, str) or paper_stat not in PAPER_STATS:
        raise ValueError(f"paper_stat must be one of {PAPER_STATS}, got {paper_stat!r:.60}")
    in_hypotheses = _flag(in_hypotheses, "in_hypotheses")
    closed_form = _flag(closed_form, "closed_form")
    grid = _flag(grid, "grid")
    if closed_form and paper_stat != "exact":
        raise ValueError(
            f"closed_form marks arithmetic of the paper's setting, a deterministic value: it needs "
            f"paper_stat='exact', not {paper_stat!r:.60}"
        )
    if paper_stat == "interval":
        if not isinstance(paper_value, (tuple, list)):
            raise ValueError(
                f"paper_stat='interval' needs paper_value = (low, high), got {paper_value!r:.60}"
            )
        paper_value = _interval(paper_value, "paper_value")
    elif isinstance(paper_value, (tuple, list)):
        raise ValueError(
            f"a (low, high) paper_value is an interval: give paper_stat='interval', "
            f"not {paper_stat!r}"
        )
    else:
        paper_value = _real(paper_value, "paper_value")
    values = _values(ours)
    n = values.size if isinstance(values, np.ndarray) else 1
    if paper_stat in (*_SUBSET_STATS, "statistic"):
        if paper_n is None:
            raise ValueError(f"paper_stat={paper_stat!r} needs paper_n, the runs behind the "
                             f"paper's {paper_stat}")
        if isinstance(paper_n, (bool, np.bool_)) or not isinstance(paper_n, (int, np.integer)) \
                or paper_n < 2:
            raise ValueError(
                f"paper_n must be an integer >= 2 (one run is paper_stat='single'), got "
                f"{paper_n!r:.60}"
            )
        paper_n = int(paper_n)
        if n > 1 and paper_n > n and paper_stat != "statistic":
            raise ValueError(
                f"the paper's {paper_stat} of {paper_n} runs is compared with our {paper_stat}s of "
                f"{paper_n} of our seeds, but ours has only {n}; run at least {paper_n} seeds"
            )
    elif paper_stat == "interval" and paper_n is not None:
        if isinstance(paper_n, (bool, np.bool_)) or not isinstance(paper_n, (int, np.integer)) \
                or paper_n < 1:
            raise ValueError(f"paper_n must be an integer >= 1, got {paper_n!r:.60}")
        paper_n = int(paper_n)
        if n > 1 and paper_n > n:
            raise ValueError(
                f"the paper's range is for a mean of {paper_n} runs, compared with means of "
                f"{paper_n} of our seeds, but ours has only {n}; run at least {paper_n} seeds"
            )
    elif paper_n is not None:
        raise ValueError(
            f"paper_n applies to a mean, median, max, min or interval of the paper's runs; "
            f"paper_stat={paper_stat!r} takes none"
        )
    if paper_stat == "exact" and n > 1:
        raise ValueError(
            "paper_stat='exact' is a deterministic quantity with no seed on either side: ours must "
            "be one number (a spread of seeds means the paper's number is 'single' or a statistic)"
        )
    summary = _summarize(values)
    one_to_one = paper_stat == "exact" or _one_sided(paper_stat, paper_n, summary)
    if one_to_one:
        what = ("an exact value" if paper_stat == "exact"
                else "one value of ours against one random value of the paper")
        tol = _tolerance(tol, what)
    elif tol is not None:
        raise ValueError(
            "tol applies only where one value is compared with one value (paper_stat='exact', or "
            "one value of ours against a random value of the paper); a spread of ours is compared "
            "by its central 90 %, an interval by containment"
        )
    section = _label(section, "section")
    if section is None:
        raise ValueError("section (the label of the section that computes the number) is required")
    explain = _label(explain, "explain")
    if (reason is None) != (explain is None):
        raise ValueError(
            "reason and explain go together: a one-line reason and the label that shows it"
        )
    against_runs = None
    if against is not None:
        if isinstance(against, (list, tuple, np.ndarray, torch.Tensor)):
            against_runs = _values(against)
            if not isinstance(against_runs, np.ndarray) or (
                    paper_stat in _SUBSET_STATS and against_runs.size < paper_n):
                raise ValueError(
                    "against as our other arm's runs needs one value per seed, at least 2 and at "
                    f"least paper_n; got {np.size(against_runs)}"
                )
            against = None
        else:
            against = _real(against, "against")
        if paper_stat in ("exact", "interval") or one_to_one:
            raise ValueError(
                "against applies where a spread of ours is compared with a single run or a "
                "statistic of the paper's runs (rules 3 and 4), not to an exact value, an interval "
                "or one value of ours"
            )
    entry = {
        "kind": "paper", "paper": paper, "item": item, "paper_stat": paper_stat,
        "paper_n": paper_n, "paper_value": paper_value, "in_hypotheses": in_hypotheses,
        "ours": summary, "tol": tol, "section": section,
        "setting": _text(setting, "setting", optional=True),
        "reason": _text(reason, "reason", optional=True), "explain": explain,
        "note": _text(note, "note", optional=True),
    }
    if closed_form:
        entry["closed_form"] = True
    if grid:
        if paper_stat == "exact" or one_to_one:
            raise ValueError("grid applies to a spread of ours placed in a band, not to one value")
        entry["grid"] = True
    if against is not None:
        entry["against"] = against
    if against_runs is not None:
        entry["against_runs"] = _summarize(against_runs)
        entry["against_band"] = _compared(paper_stat, paper_n, paper_value, against_runs,
                                          grid)["band"]
    if paper_stat != "exact" and not one_to_one:
        entry.update(_compared(paper_stat, paper_n, paper_value, values, grid))
    entry["status"] = _status(entry)
    return entry


def record(
    key: str,
    *,
    paper: str,
    item: str,
    paper_value,
    ours,
    section: str,
    paper_stat: str,
    paper_n: int | None = None,
    in_hypotheses: bool = True,
    tol: float | None = None,
    setting: str | None = None,
    reason: str | None = None,
    explain: str | None = None,
    note: str | None = None,
    against=None,
    closed_form: bool = False,
    grid: bool = False,
    readings: Sequence[dict] | None = None,
    plot_reading: PlotReading | None = None,
) -> str:
    """Record one number of a paper that the chapter compares with its runs; return its status.

    ``key``: a unique lower-case name ("table1-row2-clean"); ``paper``: the bibliography key (one of
    :data:`PAPERS`); ``item``: where the number is in the paper; ``paper_value``: the paper's
    number, or ``(low, high)`` for ``paper_stat="interval"``; ``paper_stat``: what the paper's
    number is (one of :data:`PAPER_STATS`, module docstring), with ``paper_n`` the runs behind a
    mean, median, max or min (required there; for an interval, the runs whose mean the range is
    for: rule 6 then compares means of ``paper_n`` of our seeds); ``ours``: one
    number, or one number per seed; ``in_hypotheses``: False when our run lies outside the
    hypotheses of the statement the paper's number illustrates; ``tol``: the absolute tolerance of
    agreement (e.g. half a unit of the paper's last printed digit), required exactly where the rule
    compares one value with one value (``"exact"``, and one value of ours against a random number of
    the paper); ``section``: the label of the chapter's section that computes it; ``setting``: how
    our setting differs from the paper's, if it does; ``reason`` and ``explain`` (a label): why the
    numbers differ and where the chapter shows it, given together; ``note``: any other remark for
    the table; ``against``: a value the paper's number must be told apart from (the null 0 of a
    contrast, or the other arm's paper value), or our other arm's runs (one value per seed, at
    least as many as ``paper_n``), for a spread of ours placed against a single run or a statistic
    of the paper's runs (rule 7); ``closed_form``: True when the paper's value (an ``"exact"`` one)
    is arithmetic or a closed form of the paper's setting (a minimum-norm solution, the speed of a
    given direction) rather than the outcome of a run: it changes no status, but is stored and
    counted apart from reproduced outcomes of runs (:func:`tally`, the *Reproductions* page);
    ``grid``: True when our statistic can take only the values of a grid (a threshold among the
    lengths tried, a count): its band is then of values it can take, the order statistics at the
    5th and 95th percentiles (numpy's ``inverted_cdf``), not interpolations between grid points
    that no run can give; ``readings``: the same comparison under the other reading(s) of the
    paper's words where the paper does not fix one (a "near perfect" read as a tail error below
    0.01 or below 0.02), each a dict naming the ``reading`` (a line of text) and the fields it
    replaces among :data:`READING_FIELDS` (e.g. ``{"reading": "a cut of 0.02", "ours": ...}``);
    the status is then the common status of every reading when they all agree, and
    ``"inconclusive"`` when they disagree (rule 10), unless the row says :data:`SEEN_MARK` and a
    reading misses: then that miss (rule 11); and ``note`` must contain
    :data:`READING_DECIDES`; ``plot_reading``: the :class:`PlotReading` of the authors' plot
    that ``paper_value`` is (its middle, or the pair for an interval): a reading not fixed blind
    puts :data:`SEEN_MARK` in the note (rule 11), so every row that uses the reading carries it.

    The status follows the rule of the module docstring: ``"reproduced"``, ``"weak evidence"``,
    ``"inconclusive"``, ``"illustration"``, ``"differs"`` or ``"not reproduced"``.
    """
    _started(key)
    fields = {"paper": paper, "item": item, "paper_value": paper_value, "ours": ours,
              "section": section, "paper_stat": paper_stat, "paper_n": paper_n,
              "in_hypotheses": in_hypotheses, "tol": tol, "setting": setting, "reason": reason,
              "explain": explain, "note": note, "against": against, "closed_form": closed_form,
              "grid": grid}
    if plot_reading is not None:
        _with_reading(plot_reading, fields)
    if readings is None and READING_DECIDES in (fields["note"] or ""):
        raise ValueError(
            "a note that says ledger.READING_DECIDES needs the other reading(s) as readings=, so "
            "that the status is computed under each (rule 10)"
        )
    entry = _entry(**fields)
    if readings is not None:
        entry["readings"] = _other_readings(readings, fields, entry)
        entry["status"] = _status(entry)
    _entries[key] = entry
    _write(_chapter, _entries)
    return entry["status"]


def check(
    key: str,
    *,
    paper: str,
    statement: str,
    predicted,
    ours,
    tol: float,
    section: str,
    in_hypotheses: bool = True,
    convergence: str | None = None,
    note: str | None = None,
    of_paper: bool = True,
) -> str:
    """Record a check of a paper's statement by our own computation; return its status.

    ``statement``: the statement in the paper's numbering and what it predicts ("Theorem 2, limit
    of the loss as t -> inf"); ``predicted``: the value it predicts, or ``(low, high)`` for a bound
    (``None`` for an open side); ``ours``: our computed value, or one value per seed (each must
    agree); ``tol``: the tolerance (its reason is in the chapter); ``convergence``: one line on how
    ours approaches the prediction ("gap 3e-2, 3e-3, 3e-4 at alpha = 1e-1, 1e-2, 1e-3").

    Status: ``"holds"`` when ``|ours − predicted| <= tol`` (for a bound: ours within ``tol`` of
    ``[low, high]``; for a spread: every value), ``"fails"`` otherwise, ``"illustration"`` when
    ``in_hypotheses`` is False. A check is not a reproduction of a paper's number.

    ``of_paper=False`` marks a check that a chapter records beside the paper's statements but that
    is not one of them: a prediction of our own derivation from the paper's lemmas, or of numerical
    analysis (Euler's method is first order). The entry then stores ``"of_paper": False``, and the
    *Reproductions* page counts and lists it apart from the checks of the papers' statements. An
    entry without the field (every check of the paper, and ledgers written before it existed) is a
    check of the paper's statement. The status is computed the same way either way.
    """
    _started(key)
    if paper not in PAPERS:
        raise ValueError(f"paper must be one of {sorted(PAPERS)}, got {paper!r:.60}")
    statement = _text(statement, "statement")
    if isinstance(predicted, (tuple, list)):
        predicted = _interval(predicted, "predicted")
    else:
        predicted = _real(predicted, "predicted")
    summary = _summarize(_values(ours))
    tol = _tolerance(tol, "a check")
    section = _label(section, "section")
    if section is None:
        raise ValueError("section (the label of the section that computes the check) is required")
    entry = {
        "kind": "check", "paper": paper, "statement": statement, "predicted": predicted,
        "ours": summary, "tol": tol, "section": section,
        "in_hypotheses": _flag(in_hypotheses, "in_hypotheses"),
        "convergence": _text(convergence, "convergence", optional=True),
        "note": _text(note, "note", optional=True),
    }
    if not _flag(of_paper, "of_paper"):
        entry["of_paper"] = False
    entry["status"] = _check_status(entry)
    _entries[key] = entry
    _write(_chapter, _entries)
    return entry["status"]


def verdict(key: str) -> str:
    """The status of the entry or check ``key`` recorded earlier in this kernel ("reproduced",
    "weak evidence", "holds", ...): the words a chapter glues wherever it gives a verdict."""
    if not isinstance(key, str) or key not in _entries:
        known = ", ".join(sorted(_entries)) or "none"
        raise ValueError(
            f"no entry {key!r:.60} recorded in chapter {_chapter!r} in this kernel (known: {known})"
        )
    return _entries[key]["status"]


def recorded(*keys: str) -> list[dict]:
    """Copies of the entries ``keys`` recorded earlier in this kernel (for :func:`tally`)."""
    for key in keys:
        verdict(key)  # the same ValueError for an unknown key
    return [json.loads(json.dumps(_entries[key])) for key in keys]


#: How :func:`tally` names what a reproduced paper number was compared with.
_HOW_REPRODUCED = {"closed_form": "arithmetic of the paper's setting without a run",
                   "exact": "exact", "single": "one run of the paper's among ours",
                   "statistic": "a statistic of the paper's runs among ours",
                   "interval": "a range of the paper's holding ours"}


#: The words by which a row's item, setting or note says that the reading of the authors' plot,
#: the bracket or the tolerance that decides its comparison was fixed after our runs were seen:
#: such an agreement is weak evidence at most (rule 11 of the module docstring), and the counts of
#: weak evidence say how many are so (:func:`_how_weak`).
SEEN_MARK = "after our runs were seen (not blind)"


class PlotReading(tuple):
    """A value read off the authors' plot (or bracketed by their printout): the pair ``(low, high)``
    with whether the bracket was fixed ``blind`` (before our runs were seen).

    It is the pair itself (``low, high = reading`` and ``sum(reading) / 2`` work as for a tuple), so
    one object carries the reading to every row that uses it: :func:`record` with
    ``plot_reading=`` checks that the row's ``paper_value`` is this reading (its middle
    ``(low + high) / 2``, or the pair for an interval) and, for a reading not fixed blind, adds
    :data:`SEEN_MARK` to the row's note when its item, setting and note lack it (rule 11), so the
    mark follows the reading into every row, the rebuild of the authors' seed and the row that
    asks whether that run is typical alike.
    """

    blind: bool

    def __new__(cls, low: float, high: float, *, blind: bool) -> PlotReading:
        # an int stays an int (so a row's text prints it as before), anything else a float
        low, high = (_reading_end(low, "low"), _reading_end(high, "high"))
        if low > high:
            raise ValueError(f"a reading needs low <= high, got {low!r} > {high!r}")
        reading = super().__new__(cls, (low, high))
        reading.blind = _flag(blind, "blind")
        return reading

    @property
    def value(self) -> float:
        """The middle of the bracket, (low + high) / 2: the paper's value a row compares."""
        return (self[0] + self[1]) / 2

    def made(self) -> str:
        """'made after our runs were seen (not blind)' or 'made before our runs were seen'."""
        return "made " + (SEEN_MARK if not self.blind else "before our runs were seen")

    def __reduce__(self):
        return (_plot_reading, (self[0], self[1], self.blind))


def _reading_end(value, name: str) -> float | int:
    """One end of a reading: checked as a real number; an int stays an int, the rest a float."""
    number = _real(value, name)
    return int(value) if isinstance(value, (int, np.integer)) else number


def _plot_reading(low: float, high: float, blind: bool) -> PlotReading:
    return PlotReading(low, high, blind=blind)


def _with_reading(reading, fields: dict) -> None:
    """Check that ``fields`` (the arguments of :func:`record`) compare the reading ``reading`` and
    put :data:`SEEN_MARK` in their note when the reading was not fixed blind (rule 11)."""
    if not isinstance(reading, PlotReading):
        raise ValueError(f"plot_reading must be a ledger.PlotReading, got {reading!r:.60}")
    value = fields["paper_value"]
    if fields["paper_stat"] == "interval":
        same = isinstance(value, (tuple, list)) and len(value) == 2 and all(
            isinstance(v, (int, float)) and float(v) == r
            for v, r in zip(value, reading, strict=True))
    else:
        same = isinstance(value, (int, float, np.floating, np.integer)) and float(
            value) == reading.value
    if not same:
        raise ValueError(f"paper_value {value!r:.60} is not the reading {tuple(reading)!r} "
                         "(its middle, or the pair for an interval)")
    if reading.blind or _not_blind(fields):
        return
    ends = (f"{reading[0]:,g}" if reading[0] == reading[1]
            else f"{reading[0]:,g}–{reading[1]:,g}")
    mark = f"the reading {ends} was {reading.made()}"
    fields["note"] = f"{fields['note']}; {mark}" if fields["note"] else mark


def _not_blind(entry: dict) -> bool:
    """Whether an entry's item, setting or note says :data:`SEEN_MARK` (line breaks and runs of
    spaces read as one space)."""
    words = " ".join(str(entry.get(field) or "") for field in ("item", "setting", "note"))
    return SEEN_MARK in " ".join(words.split())


def tally(entries: Sequence[dict]) -> str:
    """'5 entries: 4 reproduced (2 exact, 2 one run of the paper's among ours), 1 inconclusive'.

    ``entries``: entries as :func:`recorded` returns them or as the committed ledger holds them.
    The count of reproduced paper numbers is split by what was compared (rules 2, 3, 4 and 6 of the
    module docstring), since an exact match and one run of the paper's placed inside the central
    90 % of ours are not the same evidence; the other statuses are counted as they are.
    """
    if not isinstance(entries, (list, tuple)) or not all(
            isinstance(e, dict) and "status" in e and "kind" in e for e in entries):
        raise ValueError("tally takes a list of ledger entries (ledger.recorded(*keys), or "
                         "entries of the committed ledger)")
    if not entries:
        return "no entry"
    order = list(dict.fromkeys([*STATUSES, *CHECK_STATUSES]))
    statuses = [e["status"] for e in entries]
    parts = []
    for word in order:
        count = statuses.count(word)
        if not count:
            continue
        text = f"{count} {word}"
        if word == "reproduced":
            text += _how_reproduced(entries)
        elif word == "weak evidence":
            text += _how_weak(entries)
        parts.append(text)
    n = len(entries)
    return f"{n} entr{'y' if n == 1 else 'ies'}: " + ", ".join(parts)


def _how_reproduced(entries: Sequence[dict]) -> str:
    """" (12 exact, 6 one run of the paper's among ours)": the reproduced paper entries split by
    what was compared, with the values recorded as ``closed_form`` (arithmetic of the paper's
    setting) counted apart from the exact outcomes of runs; empty when there are none, or when all
    are exact outcomes of runs. (No reproduced entry rests on a reading made after our runs were
    seen: rule 11 makes such an agreement weak evidence, counted by :func:`_how_weak`.)"""
    reproduced = [e for e in entries if e["status"] == "reproduced" and e["kind"] == "paper"]
    kinds = ["closed_form" if e.get("closed_form") is True
             else e.get("paper_stat") if e.get("paper_stat") in ("exact", "single", "interval")
             else "statistic" for e in reproduced]
    split = [f"{kinds.count(kind)} {how}" for kind, how in _HOW_REPRODUCED.items()
             if kinds.count(kind)]
    if len(split) > 1 or (split and kinds[0] != "exact"):
        return " (" + ", ".join(split) + ")"
    return ""


def _how_weak(entries: Sequence[dict]) -> str:
    """" (23 of them agreements on a reading or tolerance fixed after our runs were seen)": how
    many of the weak-evidence paper entries are so by rule 11 (their rows say :data:`SEEN_MARK`);
    empty when none is."""
    seen = sum(e["status"] == "weak evidence" and e["kind"] == "paper" and _not_blind(e)
               for e in entries)
    if not seen:
        return ""
    return (f" ({seen} of them {'an agreement' if seen == 1 else 'agreements'} on a reading or "
            "tolerance fixed after our runs were seen)")


_PAPER_FIELDS = {"kind", "paper", "item", "paper_stat", "paper_n", "paper_value", "in_hypotheses",
                 "ours", "tol", "section", "setting", "reason", "explain", "note", "status"}
_CHECK_FIELDS = {"kind", "paper", "statement", "predicted", "ours", "tol", "section",
                 "in_hypotheses", "convergence", "note", "status"}


def _check_entry(entry: object, where: str) -> None:
    """A ValueError naming ``where`` unless ``entry`` has the fields record/check write."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an entry (a dict), got {entry!r:.80}")
    kind = entry.get("kind")
    if kind not in ("paper", "check"):
        raise ValueError(
            f"{where} has kind {kind!r:.40}, not 'paper' or 'check' (a ledger written before "
            f"paper_stat existed? execute the chapter again)"
        )
    fields, statuses = ((_PAPER_FIELDS, STATUSES) if kind == "paper"
                        else (_CHECK_FIELDS, CHECK_STATUSES))
    missing = sorted(fields - set(entry))
    if missing:
        raise ValueError(f"{where} lacks the fields {missing}")
    if entry["status"] not in statuses:
        raise ValueError(f"{where} has the unknown status {entry['status']!r:.40}")
    if kind == "check" and entry.get("of_paper", True) is not True and \
            entry["of_paper"] is not False:
        raise ValueError(f"{where}: of_paper must be true or false, got "
                         f"{entry['of_paper']!r:.40}")
    if entry["paper"] not in PAPERS:
        raise ValueError(f"{where} has the unknown paper {entry['paper']!r:.40}")
    if kind == "paper" and "closed_form" in entry and (
            entry["closed_form"] is not True or entry["paper_stat"] != "exact"):
        raise ValueError(f"{where}: closed_form is stored only as true, on an exact entry")
    if kind == "paper" and "grid" in entry and (entry["grid"] is not True or "band" not in entry):
        raise ValueError(f"{where}: grid is stored only as true, on an entry with a band")
    if kind == "paper" and entry["paper_stat"] not in PAPER_STATS:
        raise ValueError(f"{where} has the unknown paper_stat {entry['paper_stat']!r:.40}")
    if kind == "paper" and "readings" in entry:
        readings = entry["readings"]
        if not isinstance(readings, list) or not readings or not all(
                isinstance(r, dict) and isinstance(r.get("reading"), str)
                and r.get("status") in STATUSES and {"paper_stat", "paper_value", "ours"} <= set(r)
                for r in readings):
            raise ValueError(f"{where}: readings must be a list of readings, each with its "
                             "reading, paper_stat, paper_value, ours and status")
        if READING_DECIDES not in (entry["note"] or ""):
            raise ValueError(f"{where}: an entry with readings has READING_DECIDES in its note")
    ours = entry["ours"]
    if not isinstance(ours, dict) or not ("value" in ours or {"values", "n", "min", "max"} <= set(
            ours)):
        raise ValueError(f"{where}: ours must be {{'value'}} or a spread with its values")
    if kind == "paper" and "value" not in ours and entry["paper_stat"] != "exact" and \
            not _one_sided(entry["paper_stat"], entry["paper_n"], ours) and "band" not in entry:
        raise ValueError(f"{where}: a spread compared by the rule needs its band")


def _check_entries(ledger: object, name: str) -> dict:
    """``{chapter: {key: entry}}`` with the fields :func:`record` and :func:`check` write, else a
    ValueError naming ``name`` (a file, or the argument) and the entry."""
    if not isinstance(ledger, dict):
        raise ValueError(f"{name} must be a dict {{chapter: {{key: entry}}}}, got {ledger!r:.60}")
    for chapter, entries in ledger.items():
        if not isinstance(entries, dict):
            raise ValueError(f"{name}[{chapter!r}] must be a dict of entries, got {entries!r:.60}")
        for key, entry in entries.items():
            _check_entry(entry, f"{name}[{chapter!r}][{key!r}]")
    return ledger


def _check_run(fresh: object, name: str = "fresh") -> dict:
    """``{chapter: {"chapter", "scale", "entries"}}`` as :func:`collect` returns it."""
    if not isinstance(fresh, dict) or not all(
        isinstance(d, dict) and {"scale", "entries"} <= set(d) for d in fresh.values()
    ):
        raise ValueError(
            f"{name} must be what collect() returns, {{chapter: {{'scale', 'entries'}}}}, "
            f"got {fresh!r:.80}"
        )
    _check_entries({c: d["entries"] for c, d in fresh.items()}, name)
    return fresh


def _check_path(path: object, name: str) -> Path:
    if not isinstance(path, (str, Path)) or not str(path):
        raise ValueError(f"{name} must be a path, got {path!r:.60}")
    return Path(path)


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable JSON ledger file ({error})") from None


def collect(directory: Path | None = None) -> dict:
    """Every chapter's entries written in ``directory`` (default :func:`ledger_dir`), by chapter.

    A malformed file raises a ValueError that names it."""
    directory = _check_path(directory, "directory") if directory is not None else ledger_dir()
    chapters = {}
    for path in sorted(directory.glob("*.json")):
        data = _read_json(path)
        if not isinstance(data, dict) or not {"chapter", "scale", "entries"} <= set(data):
            raise ValueError(f"{path}: a chapter's ledger file holds 'chapter', 'scale' and "
                             f"'entries'")
        _check_entries({data["chapter"]: data["entries"]}, str(path))
        chapters[data["chapter"]] = data
    return chapters


def save(chapters: dict, path: Path = LEDGER_PATH) -> Path:
    """Write the committed ledger (``make ledger``): entries by chapter, default scale only."""
    _check_run(chapters, "chapters")
    path = _check_path(path, "path")
    wrong = sorted(c for c, d in chapters.items() if d["scale"] != "fast")
    if wrong:
        raise ValueError(f"the committed ledger holds the default scale; {wrong} ran at another")
    data = {chapter: chapters[chapter]["entries"] for chapter in sorted(chapters)}
    data[MACHINE_KEY] = {key: _machine.environment()[key] for key in SAME_MACHINE}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def load(path: Path = LEDGER_PATH) -> dict:
    """The committed ledger: ``{chapter: {key: entry}}``; a malformed file raises a ValueError
    that names it."""
    path = _check_path(path, "path")
    if not path.is_file():
        raise ValueError(f"no committed ledger at {path}; run `make ledger`")
    data = _read_json(path)
    if isinstance(data, dict):
        data.pop(MACHINE_KEY, None)
    return _check_entries(data, str(path))


def written_here(path: Path = LEDGER_PATH) -> bool:
    """Whether this machine is the one that wrote the committed ledger at ``path``: the same
    :data:`SAME_MACHINE` fields (a ledger that records none was written elsewhere)."""
    load(path)  # a malformed file raises, naming it
    machine = _read_json(Path(path)).get(MACHINE_KEY)
    if not isinstance(machine, dict):
        return False
    return _machine.same_machine(machine)


def rule_problems(ledger: dict) -> list[str]:
    """Every entry whose stored status is not the one the rule gives from its stored numbers.

    The band of a spread is recomputed from the stored values too (subsets enumerated or drawn
    as :func:`record` does). One line per problem, naming the chapter and the entry.
    """
    _check_entries(ledger, "ledger")
    unread = [f"{chapter}: {key!r}" for chapter, entries in sorted(ledger.items())
              for key, entry in sorted(entries.items())
              if entry["kind"] == "paper" and "readings" not in entry
              and READING_DECIDES in (entry["note"] or "")]
    if unread:
        raise ValueError(
            f"entries whose note says READING_DECIDES carry no other reading (rule 10 computes "
            f"the status under each): {', '.join(unread)}"
        )
    problems = []
    for chapter, entries in sorted(ledger.items()):
        for key, entry in sorted(entries.items()):
            if entry["kind"] == "check":
                status = _check_status(entry)
            else:
                recomputed = dict(entry)
                if "band" in entry:
                    values = np.asarray(entry["ours"]["values"], dtype=np.float64)
                    again = _compared(entry["paper_stat"], entry["paper_n"],
                                      entry["paper_value"], values, entry.get("grid", False))
                    if _numbers_differ(again["band"], entry["band"]):
                        problems.append(
                            f"{chapter}: entry {key!r}: its band {entry['band']} is not the "
                            f"central 90 % of its values ({again['band']})"
                        )
                    recomputed.update(again)
                if "against_runs" in entry:
                    other = np.asarray(entry["against_runs"]["values"], dtype=np.float64)
                    band = _compared(entry["paper_stat"], entry["paper_n"],
                                     entry["paper_value"], other, entry.get("grid", False))["band"]
                    if _numbers_differ(band, entry["against_band"]):
                        problems.append(
                            f"{chapter}: entry {key!r}: its other arm's band "
                            f"{entry['against_band']} is not the central 90 % of that arm's "
                            f"statistic ({band})"
                        )
                    recomputed["against_band"] = band
                if "readings" in entry:
                    recomputed["readings"] = [_recomputed_band(r, problems, chapter, key)
                                              for r in entry["readings"]]
                status = _status(recomputed)
                if ("readings" in entry and entry["status"] not in _MISSES
                        and _not_blind(entry)
                        and any(s in _MISSES for s in _reading_statuses(recomputed))):
                    problems.append(
                        f"{chapter}: entry {key!r} is marked {entry['status']!r} but one of its "
                        f"readings misses and its row says {SEEN_MARK!r}: a reading fixed after "
                        "our runs were seen softens no miss (rule 11)"
                    )
                if entry["status"] == "reproduced" and _not_blind(entry):
                    problems.append(
                        f"{chapter}: entry {key!r} is marked 'reproduced' but its row says "
                        f"{SEEN_MARK!r}: an agreement on a reading or tolerance fixed after our "
                        "runs were seen is weak evidence at most (rule 11)"
                    )
            if status != entry["status"]:
                problems.append(
                    f"{chapter}: entry {key!r} is marked {entry['status']!r} but the rule gives "
                    f"{status!r} from its numbers"
                )
    return problems


def _recomputed_band(reading: dict, problems: list, chapter: str, key: str) -> dict:
    """A reading (rule 10) with its band recomputed from its stored values; a mismatch noted."""
    if "band" not in reading:
        return reading
    values = np.asarray(reading["ours"]["values"], dtype=np.float64)
    again = _compared(reading["paper_stat"], reading["paper_n"], reading["paper_value"], values,
                      reading.get("grid", False))
    if _numbers_differ(again["band"], reading["band"]):
        problems.append(
            f"{chapter}: entry {key!r}: the band {reading['band']} of its reading "
            f"{reading['reading']!r:.60} is not the central 90 % of its values ({again['band']})"
        )
    return {**reading, **again}


def _numbers_differ(fresh, committed, exact: bool = True) -> bool:
    """Whether two JSON values differ beyond :data:`COMPARE_RTOL`; with ``exact=False`` (another
    machine) floats are not compared and strings are compared with their numbers masked."""
    if isinstance(committed, dict):
        return not isinstance(fresh, dict) or set(fresh) != set(committed) or any(
            _numbers_differ(fresh[k], committed[k], exact) for k in committed)
    if isinstance(committed, list):
        return not isinstance(fresh, list) or len(fresh) != len(committed) or any(
            _numbers_differ(f, c, exact) for f, c in zip(fresh, committed, strict=True))
    if isinstance(committed, float) and isinstance(fresh, (int, float)) \
            and not isinstance(fresh, bool):
        return exact and not math.isclose(fresh, committed, rel_tol=COMPARE_RTOL,
                                          abs_tol=COMPARE_ATOL)
    if not exact and isinstance(committed, str) and isinstance(fresh, str):
        return _NUMBER.sub("#", fresh) != _NUMBER.sub("#", committed)
    return fresh != committed


def compare(fresh: dict, committed: dict, same_machine: bool = True) -> list[str]:
    """What differs between a run's entries (``collect()``) and the committed ledger (``load()``).

    Only chapters that the run executed (at the default scale) are compared. Returns one line per
    problem, naming the chapter and the entry: a committed entry missing, a new entry not committed,
    a status changed, a number moved by more than :data:`COMPARE_RTOL` (ours, the paper's value,
    the band of ours the paper's value is placed in, the share of ours below it), a field changed
    (the paper's statistic and its runs, in or out of hypotheses, the words of an entry).
    ``same_machine=False`` (a run on another machine than the ledger's, :func:`written_here`)
    leaves out the moved numbers, in the fields and inside the words: see :data:`SAME_MACHINE`.
    """
    _check_run(fresh)
    _check_entries(committed, "committed")
    if not isinstance(same_machine, bool):
        raise ValueError(f"same_machine must be True or False, got {same_machine!r:.60}")
    problems = []
    for chapter, data in sorted(fresh.items()):
        if data["scale"] != "fast":
            continue
        entries, old = data["entries"], committed.get(chapter, {})
        for key in sorted(set(old) - set(entries)):
            problems.append(f"{chapter}: entry {key!r} is committed but was not recorded")
        for key in sorted(set(entries) - set(old)):
            problems.append(f"{chapter}: entry {key!r} was recorded but is not committed")
        for key in sorted(set(entries) & set(old)):
            new, was = entries[key], old[key]
            if new["status"] != was["status"]:
                problems.append(
                    f"{chapter}: entry {key!r} changed status: {was['status']} -> {new['status']}"
                )
            for field in sorted(set(new) | set(was)):
                if field == "ours" and set(new["ours"]) == set(was["ours"]):
                    for stat in sorted(was["ours"]):
                        if _numbers_differ(new["ours"][stat], was["ours"][stat], same_machine):
                            shown = "the seeds' values" if stat == "values" else None
                            problems.append(
                                f"{chapter}: entry {key!r}: ours.{stat} moved"
                                + (f" ({shown})" if shown else
                                   f" from {was['ours'][stat]!r} to {new['ours'][stat]!r}")
                            )
                elif field != "status" and _numbers_differ(new.get(field), was.get(field),
                                                           same_machine):
                    problems.append(
                        f"{chapter}: entry {key!r}: {field} changed from {was.get(field)!r:.80} "
                        f"to {new.get(field)!r:.80}"
                    )
    return problems


# ---------------------------------------------------------------------------------------------
# The appendix page


def _number(x: float, digits: int = 3) -> str:
    """A number for a table: ``digits`` significant digits, written by :mod:`lib.book.typeset`
    (powers of ten as 1.27 × 10⁻³, never 1.27e-03), integers as integers.

    One notation per magnitude, so that the two ends of a band read alike: from 10⁻² up to 10⁶
    every number is written plainly (a non-integer of ``10**digits`` or more rounded to ``digits``
    significant digits, 52 468.3 as 52 500, like the integers beside it); outside that span, as a
    power of ten.
    """
    from lib.book import typeset

    if x == int(x) and abs(x) < 1e6:
        return typeset.number(int(x))
    rounded = float(f"{x:.{digits}g}")
    if 1e-2 <= abs(rounded) < 1e6:
        if abs(rounded) >= 10 ** (digits - 1) and rounded == int(rounded):
            return typeset.number(int(rounded))
        return typeset.number(x, f".{digits}g")
    return typeset.number(x, f".{digits - 1}e")


def _shifted_draw_inside(shift: float = 1.0) -> float:
    """The probability that one draw of a normal distribution shifted by ``shift`` standard
    deviations from ours lands in our central :data:`LEVEL` (rule 3's reason: one run placed in
    our band has little power): ``Φ(z − shift) − Φ(−z − shift)``, ``z`` the upper (1 − LEVEL)/2
    point."""
    shift = _real(shift, "shift")
    normal = statistics.NormalDist()
    z = normal.inv_cdf(1 - (1 - LEVEL) / 2)
    return normal.cdf(z - shift) - normal.cdf(-z - shift)


def _share() -> str:
    """:data:`LEVEL` as the page writes it ("90 %")."""
    return f"{round(100 * LEVEL)}\u00a0%"


def _percent(share: float) -> str:
    """A share as a percentage: whole percents, one decimal within 10 % of either end (so that
    4.6 % below the 5th percentile never reads "5 %"), two within 0.1 % of either end (so that 1
    of 4 960 never reads "0.0 %")."""
    from lib.book import typeset

    spec = (".2f" if 0 < share < 0.001 or 0.999 < share < 1
            else ".1f" if 0 < share < 0.1 or 0.9 < share < 1 else ".0f")
    return typeset.number(100 * share, spec) + "\u00a0%"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _ours_text(ours: dict) -> str:
    """Our value as the page shows it: the one value (one digit more than the paper's usual
    three), or median [q1, q3] (n values: seeds, or whatever the chapter's values are), with every
    value listed when there are at most 12."""
    if "value" in ours:
        return _number(ours["value"], digits=4)
    spread = f"{_number(ours['median'])} [{_number(ours['q1'])}, {_number(ours['q3'])}]"
    if ours["n"] <= 12:  # few values: all of them, so that a band between them is read as such
        listed = ", ".join(_number(v) for v in sorted(ours["values"]))
        return f"{spread} ({ours['n']} values: {listed})"
    return f"{spread} ({ours['n']} values)"


def _check_ours_text(ours: dict) -> str:
    """Our side of a check: its one value, or, since a check must hold for every value (every
    seed, step size or width), the smallest and largest with their count (every value listed
    when there are at most 12), not a median."""
    if "value" in ours:
        return _number(ours["value"], digits=4)
    spread = f"{_number(ours['min'])} to {_number(ours['max'])}"
    if ours["n"] <= 12:
        listed = ", ".join(_number(v) for v in sorted(ours["values"]))
        return f"{spread} ({ours['n']} values: {listed})"
    return f"{spread} ({ours['n']} values)"


def _range_text(value: list) -> str:
    if value[0] is None:
        return f"≤ {_number(value[1])}"
    if value[1] is None:
        return f"≥ {_number(value[0])}"
    return f"{_number(value[0])} to {_number(value[1])}"


_STAT_WORDS = {"mean": "mean", "median": "median", "max": "largest", "min": "smallest"}


def _paper_text(entry: dict) -> str:
    """The paper's value and what it is: one run, a statistic of n runs, a range, exact."""
    stat, value, n = entry["paper_stat"], entry["paper_value"], entry["paper_n"]
    if stat == "interval":
        runs = f", {n} runs" if n else ""
        return f"{_range_text(value)} (a range{runs})"
    if stat == "exact":
        return f"{_number(value)} (exact)"
    if stat == "single":
        return f"{_number(value)} (one run)"
    if stat == "statistic":
        return f"{_number(value)} (a statistic of {n} runs)"
    return f"{_number(value)} ({_STAT_WORDS[stat]} of {n} runs)"


def _compared_text(entry: dict) -> str:
    """What the rule placed the paper's value in, in words."""
    stat, ours, tol = entry["paper_stat"], entry["ours"], entry["tol"]
    if stat == "exact":
        words = " ".join(entry["item"].split())
        kind = next((why for mark, why in _READINGS if mark in words), None)
        text = f"ours within ± {_number(tol)}" + (f" ({kind})" if kind else "")
        paper = entry["paper_value"]
        if _too_wide([paper - tol, paper + tol], paper):
            text += "; that window also holds half or double the paper's value"
        return text
    if stat == "interval":
        if "value" in ours:
            return "our one run against the range; no spread of ours"
        low = -math.inf if entry["paper_value"][0] is None else entry["paper_value"][0]
        high = math.inf if entry["paper_value"][1] is None else entry["paper_value"][1]
        inside = _share_inside(_interval_values(entry["paper_n"], ours), low, high)
        n = entry["paper_n"]
        if n is not None and n >= 2:
            if ours["n"] == n:
                return f"the mean of our {n} runs against the range; no spread of ours"
            means = _interval_values(n, ours)
            how = (f"all {means.size:,}" if means.size == math.comb(ours["n"], n)
                   else f"{means.size:,} random")
            what = f"the means of {how} {n}-subsets of our {ours['n']} seeds"
        else:
            what = f"our {ours['n']} runs"
        return (f"{_percent(inside)} of {what} inside the range (the rule asks "
                f"{_share()}); middle {_share()} of them: {_range_text(entry['band'])}")
    if _one_sided(stat, entry["paper_n"], ours):
        ours_is = ("our one run" if "value" in ours
                   else f"the {_STAT_WORDS[stat]} of our {ours['n']}")
        return f"{ours_is} within ± {_number(tol)}; no spread of ours"
    low, high = entry["band"]
    if stat == "single":
        # One value per run, per teacher or per set of seeds, as the row's item says.
        what = f"our {ours['n']:,} values of the same statistic"
    elif stat == "statistic":
        what = (f"our {ours['n']:,} values of the same statistic on {entry['paper_n']}-subsets "
                f"of our runs")
    else:
        how = (f"all {entry['subsets']:,}" if entry["enumerated"]
               else f"{entry['subsets']:,} random")
        what = f"the {_STAT_WORDS[stat]}s of {how} {entry['paper_n']}-subsets of our seeds"
    text = f"middle {_share()} of {what}: {_number(low)} to {_number(high)}; " + _rank_text(entry)
    against = entry.get("against")
    if against is not None:
        inside = "inside" if low <= against <= high else "outside"
        text += f"; the value it is told apart from, {_number(against)}, lies {inside} it"
    other = entry.get("against_band")
    if other is not None:
        inside = "inside" if other[0] <= entry["paper_value"] <= other[1] else "outside"
        text += (f"; the same statistic of our other arm runs from {_number(other[0])} to "
                 f"{_number(other[1])}, and the paper's value lies {inside} it")
    paper = entry["paper_value"]
    if low <= paper <= high and _too_wide(entry["band"], paper):
        text += "; that band also holds half or double the paper's value"
    return text


def _below_equal(entry: dict) -> tuple[float, float] | None:
    """The shares of our statistics (of :func:`_compared`) below the paper's value and equal to
    it, recomputed from the stored values; None when they do not give the stored ``rank``
    (= below + equal / 2) back."""
    values = np.asarray(entry["ours"]["values"], dtype=np.float64)
    stat, paper = entry["paper_stat"], entry["paper_value"]
    samples = (values if stat in ("single", "statistic")
               else subset_statistics(values, entry["paper_n"], stat)[0])
    below, equal = float(np.mean(samples < paper)), float(np.mean(samples == paper))
    if not math.isclose(below + equal / 2, entry["rank"], rel_tol=1e-9, abs_tol=1e-12):
        return None
    return below, equal


def _rank_text(entry: dict) -> str:
    """Where the paper's value sits among our statistics: "the paper's value is above 7.2 % of
    them", or, where some equal it, "0 % of them lie below the paper's value and 14 % equal it"
    (the stored ``rank`` counts those equal half, so "above" it would overstate)."""
    shares = _below_equal(entry)
    if shares is None:
        return (f"the share of them below the paper's value, those equal to it counted half: "
                f"{_percent(entry['rank'])}")
    below, equal = shares
    if equal == 0:
        return f"the paper's value is above {_percent(below)} of them"
    return (f"{_percent(below)} of them lie below the paper's value and {_percent(equal)} "
            f"equal it")


def _literal(text: str | None) -> str:
    """A chapter's words with Markdown's emphasis mark escaped, so that ``d* = 5`` and ``2d*``
    print their asterisks instead of opening an italic run that eats them."""
    return (text or "").replace("*", r"\*")


def _cell(text: str | None) -> str:
    """A chapter's words (item, setting, reason) for a table cell: bars escaped, and numbers
    written as the rest of the book writes them (``lr 1e-3`` -> ``lr 10⁻³``; a range whose ends
    print the same, ``400–400``, as one number)."""
    from lib.book import typeset

    return typeset.collapse_ranges(
        typeset.scientific((text or "").replace("|", r"\|").replace("\n", " ")))


def band_miss_share(n: int) -> float:
    """The probability that a further run falls outside the band of ``n`` runs (:func:`_band`,
    numpy's linear interpolation) when the runs are independent and uniformly distributed.

    The band's lower end sits at the 0-based position ``h = (n − 1)·t`` of the sorted runs,
    ``t = (1 − LEVEL)/2``, between order statistics whose expected shares below are ``j/(n + 1)``;
    the interpolation is linear in the values, so for uniform runs the expected share below it is
    ``(1 + h)/(n + 1)``, and by symmetry the miss probability is ``2(1 + (n − 1)t)/(n + 1)``. It
    exceeds ``1 − LEVEL`` for every ``n`` and tends to it as ``n`` grows. For other continuous
    distributions it is approximate (a Monte Carlo in ``tests/test_ledger.py`` gives a little
    less for normal runs).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"band_miss_share needs an integer number of runs n >= 2, got {n!r}")
    tail = (1 - LEVEL) / 2
    return 2 * (1 + (n - 1) * tail) / (n + 1)


def rule_markdown() -> str:
    """The rule in plain words, as the *Reproductions* page states it before its tables."""
    share, tail = _share(), round(100 * (1 - LEVEL) / 2)
    return "\n".join([
        "Each comparison of a paper's value with a chapter's runs (one row of the tables below)"
        " gets one of six statuses, computed from the numbers by one rule. The values are of two "
        "sources, counted apart "
        "below: numbers the papers themselves give (printed in their text and tables, or read off"
        " their figures), and values read off the authors' published notebooks (a plot, a "
        "printout), whose rows say \"not a number printed in the paper\". First, what the paper's "
        "value is: an **exact** value (a deterministic quantity such as a formula or a "
        "deterministic flow, or one seeded run of the authors' that our code rebuilds seed by "
        "seed, with the same seed and data), **one run** of a random experiment, a **statistic** "
        "(mean, median, largest or smallest) of a stated number of runs, or a **range** the paper"
        " states. Then:",
        "",
        "- **reproduced**, by what the paper's value is:",
        "  - an **exact** value agrees with ours within the tolerance shown. The chapter states "
        "the tolerance, and the row names it where it comes from a reading: half a unit of the "
        "last digit the paper prints, one pixel of the plot the value is read from (of the figure "
        "that shows it, for a value the paper shows only as a curve), or half the bracket that a "
        "printout gives; a tolerance wider than "
        f"{round(100 * EXACT_TOL_SHARE)}\u00a0% of the paper's value earns weak evidence at most "
        "(below);",
        "  - a **rebuilt run** of the authors' is exact only as far as it is their run. First, "
        "precision: we rebuild in double precision runs that the authors made in single, so the "
        "tolerance must also cover the difference of precision. The last digit of a "
        "single-precision printout does not: it would test the rebuild's arithmetic, not the "
        "paper's number. Such a row is compared at the resolution at which the paper shows the "
        "value, a pixel of its figure, or the bracket of the printouts that enclose it. Such a "
        "tolerance covers the difference of precision only by being coarse: no bound on how far "
        "a double-precision rebuild drifts from a single-precision run over the steps between "
        "two printouts is derived, so an agreement within a bracket says that the rebuild lands "
        "in the bracket, no more. "
        "Where no tolerance for the difference of precision was fixed before our runs were "
        "seen, the row is an illustration, however close or far the numbers: the final effective "
        "ranks of the rebuilt seeds of {doc}`dynamical-characterization` and of "
        "{doc}`greedy-learning` (the pixel in their notes was chosen after the runs were seen, "
        "and is not the verdict's tolerance). Such a row is not called \"not reproduced\" when "
        "it misses, for the reason it is not called \"reproduced\" when it agrees: with no "
        "bound on how "
        "far a double-precision rebuild may drift from a single-precision run, neither an "
        "agreement nor a miss can be put down to the rebuild rather than to the difference of "
        "precision. Where a reading of the authors' plot, or a "
        "bracket or tolerance, that "
        "decides a row was fixed after our runs were seen, however plain the reading (the "
        "iteration at which a curve passes a level), the row says \"" + SEEN_MARK + "\", and "
        "an agreement is at most weak evidence (below), never reproduced: a reading made with "
        "our runs in view could have been steered towards them. This holds for "
        "{doc}`greedy-learning`'s escape iterations and those of the rebuilt seeds of "
        "{doc}`dynamical-characterization`, whose readings were fixed after our runs were seen, "
        "and for every row that uses such a reading: the rebuild of the authors' seed and the "
        "row that asks whether that run is typical of ours alike. A chapter holds each reading "
        "as one object, its bracket with whether it was fixed blind, and each row that compares "
        "it takes the mark from that object, so the two rows cannot disagree. "
        "Neither these rows nor the effective ranks above count as reproductions; they differ "
        "in what the chapter records: the effective ranks have no tolerance of the verdict at "
        "all, so they are illustrations, while the escape iterations have one, fixed after our "
        "runs were seen, so an agreement is weak evidence. "
        "Second, tracking: where "
        "another value of the same rebuild (the same seed and arm) lies farther from the "
        "authors' than that resolution, for a cause the chapter has not found, the rebuild is "
        "not shown to be their run. Its rows then set one run of ours against one run of theirs, "
        "which is at best weak evidence (below). Both clauses act through what a chapter records "
        "(the kind of the paper's value, and whether the run is in the paper's setting): like "
        "the kind of the paper's value, they are the chapter's choices, stated in its rows; the "
        "build, which recomputes each status from what the chapter recorded, cannot verify them;",
        "  - a paper's **statistic** of *k* runs lies in the middle "
        f"{share} of the same statistic computed on every *k* of our seeds (all such subsets of "
        f"our seeds when there are at most {_number(MAX_SUBSETS)}, else {_number(MAX_SUBSETS)} of "
        "them drawn at "
        "random by a fixed generator), so that a mean of four runs is compared with our means of "
        "four runs; a statistic that is not a function of the runs' single values (the threshold "
        "of the mean error of three runs) is computed by the chapter itself on subsets of *k* of "
        "our runs, and placed among those values alike. Outside that middle, a statistic "
        "misses, though it is one draw like a single run: a mean of four is a draw too, and the "
        "rule reads it as the paper's result;",
        "  - for a **range** the paper states, at least nine in ten of our runs lie inside it "
        "(for a range the paper gives for the mean of *k* of its runs, nine in ten of our means "
        "of *k* seeds); a range is not tested for whether it is informative (a one-sided bound "
        "is met by any runs on its side), so its row shows the range beside our values;",
        "  - **the band and the floor**: the percentiles interpolate between our values (for a "
        "statistic that can take only "
        "the values of a grid, a threshold among the lengths tried, they are instead the values "
        "of ours at those ranks, so that the band holds only values a run can give); "
        "with few seeds the middle "
        f"{share} reaches nearly from our smallest to our largest value, and a paper's value "
        "can lie inside it without any run of ours taking it (a count of 2 among counts of 1 and "
        "4): the row shows our values beside the band. For that reason a paper's value is "
        f"reproduced this way (a statistic or a range) only from at least {MIN_RUNS} runs "
        "of ours; with fewer, an agreement is weak evidence (the floor guards agreements only: "
        "a miss from fewer runs still counts as a miss, which the row's run count shows). The "
        "floor counts the runs as the chapter records them: the rule cannot tell independent "
        "runs from overlapping subsets of fewer seeds, so a row whose runs overlap says so in its "
        "italics, and its band is then narrower than that of as many independent runs. This "
        "floor is a minimum sample "
        f"size: from *n* = {MIN_RUNS} on, the whole range of our *n* runs, smallest to largest, "
        f"would be at least a {round(100 * LEVEL)}\u00a0% prediction interval (a further run "
        "falls "
        "outside it with probability 2/(*n* + 1)). The band the rule uses, between the "
        "interpolated percentiles, is narrower: a further run falls outside it with probability "
        f"2(1 + {tail / 100:g}(*n* − 1))/(*n* + 1) for runs of a uniform distribution (a little "
        "less for normal runs), "
        + ", ".join(f"{_percent(band_miss_share(n))} at *n* = {n}" for n in (MIN_RUNS, 30, 63))
        + f", tending to {round(100 * (1 - LEVEL))}\u00a0% as *n* grows: the band is the middle "
        f"{share} of our runs, not a {round(100 * LEVEL)}\u00a0% prediction interval for a "
        "further run. Where the paper's value sits among ours, the "
        "row gives the share of ours below it, and the share equal to it where there is one.",
        "- **weak evidence**: only one value of ours stands against a random number of the paper "
        "(one run on each side, or as many seeds of ours as the paper's statistic used), and the "
        "two agree within the tolerance shown, or our one run lies in the paper's range; one run "
        "on each side says little (if they disagree, or our one run lies outside the range, the "
        "entry is inconclusive). Also weak evidence at most: a paper's **one run** that lies in "
        f"the middle {share} of our single runs (between their {tail}th and {100 - tail}th "
        "percentiles), since one draw placed in a band has little power "
        "to tell two distributions apart: one draw of a normal distribution shifted by a whole "
        f"standard deviation from ours still lands in our middle {share} with probability "
        f"{_shifted_draw_inside(1.0):.2f}. Also weak evidence: the paper's number lies in the "
        "middle "
        f"{share} of ours, but that band is so wide that it also holds half or double the "
        "paper's number, so our runs cannot tell the paper's value from one twice as small or "
        f"twice as large, or the band comes from fewer than {MIN_RUNS} runs of ours (the range "
        "the paper states holds nine in ten of fewer than "
        f"{MIN_RUNS} runs); likewise an exact value whose tolerance is wider than "
        f"{round(100 * EXACT_TOL_SHARE)}\u00a0% of the paper's value (a reading bracketed by "
        "printouts 10 000 and 20 000 as 15 000 ± 5 000, or half a unit of a one-digit print, "
        "0.2 ± 0.05). The boundary is a share of the value, not a count of digits: half a unit "
        "of the last digit of a print with two significant digits is at most 5\u00a0% of the "
        "value, of a one-digit print 5 to 9 from 5.6 to 10\u00a0% (0.5 ± 0.05 is accepted), of "
        "a one-digit print 1 to 4 from 12.5 to 50\u00a0% (refused). A paper's "
        "value of 0 has no such scale, so these tests do not apply to it. "
        "Weak evidence at most, too: any agreement (of an exact value, a run, a statistic or a "
        "range) whose reading of the authors' plot, bracket or tolerance was fixed after our runs"
        " were seen, which its row says (a blind reading keeps the status its numbers give; an "
        "exact value read as 1 650 ± 150 from a plot that shows 1 500 to 1 800 and our 1 800, "
        "on the bracket's edge, is reproduced when the bracket was fixed before our runs were "
        "seen and weak evidence when it was fixed after); the counts below say how many "
        "weak-evidence rows are so;",
        "- **inconclusive**: the paper's number lies in the middle "
        f"{share} of ours, but so does the value it has to be told apart from (no effect, for a "
        "contrast; the other arm's number, for one arm of a clean/poisoned pair), or the paper's "
        f"number lies just as well in the middle {share} of our other arm (our clean runs would "
        "reproduce the paper's poisoned number too), or one run of "
        "ours misses a random number of the paper, or a paper's **one run** lies outside the "
        f"middle {share} of our single runs (a run of our own distribution lands there with "
        f"probability {_percent(band_miss_share(30))} at *n* = 30 runs of ours, and outside the "
        "whole range of *n* runs with probability 2/(*n* + 1), more than 5 % below *n* = "
        "39: one draw can no more refute our runs than reproduce them): "
        "our runs cannot decide, so this is neither a "
        "reproduction nor a difference (where a band both holds the value to tell apart and is "
        "too wide, inconclusive takes precedence over weak evidence);",
        "- **illustration**: our run lies outside the hypotheses of the statement the paper's "
        "number illustrates, or is not the paper's setting (an analogue, named in the row), so "
        "whatever the numbers, it is neither a reproduction nor a difference; this comes before "
        "every other status. Which of the two applies depends on the number: a number the paper "
        "computes from an experiment (a table's error, a figure's curve) is judged against that "
        "experiment's setting, even where the paper offers the experiment as illustrating a "
        "theorem whose hypotheses the runs do not meet; a number a statement predicts (a bound, "
        "a limit, a rate) is judged against the statement's hypotheses.",
        "  - The paper's setting is its data, model and sizes, its optimizer and "
        "step rule, its loss (empirical or population) and the distribution of its "
        "initialization, as its text states them, or as the authors' published code implements "
        "them where the row says that it follows the code (we take the code to have produced the "
        "paper's numbers; an agreement then confirms the protocol of the code, and where the "
        "paper's text describes another, the row names the departure).",
        "  - A run stays in the setting with other random draws from the same "
        "distributions (our seeds and random streams, more seeds than the paper's), double "
        "precision where the authors used single, provided the comparison allows for it (a "
        "**rebuilt run**, above), gradient flow where the "
        "statement is about gradient flow and the paper's figure approximates it by descent "
        "with small steps, and a "
        "threshold, horizon, stopping rule, step budget or detector of our own choosing; a row "
        "that keeps only the seeds whose runs fitted within our step budget also stays in the "
        "setting, but it compares the paper's number with runs conditioned on fitting, and it "
        "says how many of our seeds it keeps.",
        "  - Any other departure "
        "(other data, model or size, another optimizer or step rule, another loss, another "
        "distribution of the initialization) makes the entry an illustration. A threshold or a "
        "horizon of our own choosing is not a hypothesis either: a number that misses for such "
        "a reason is a miss, which differs when the chapter gives that reason;",
        "- **differs**: none of the above: our runs miss the paper's value, and the chapter "
        "gives a reason and shows it (follow the link). A difference is a miss with an "
        "explanation, not a lesser miss: the rule records that the chapter gives a reason, and "
        "does not weigh it, so where entries differ, the counts below also give the misses in "
        "all (differs and not reproduced);",
        "- **not reproduced**: none of the above: our runs miss the paper's value, and the book "
        "has no explanation.",
        "",
        "Where the chapter finds that a comparison rests on a reading of the paper's words that "
        "the paper does not fix (\"near perfect\" read as an error below 0.01 or below 0.02), the "
        "row is computed under each reading it names, and its status is the one they share when "
        "they agree and **inconclusive** when they disagree, with one exception: where the row's "
        "readings were fixed after our runs were seen (the row says \"" + SEEN_MARK + "\") and "
        "one of them misses, the status "
        "is that miss. A reading chosen with our runs in view can earn no reproduction (above), "
        "and it can soften no miss either; a miss stands whatever reading gives it, since such a "
        "reading is suspect where it agrees with our runs, not where it misses them. The "
        "statuses of the readings are computed and compared; an illustration is one under every "
        "reading. The rule cannot find an open reading that a chapter does not name: a row "
        "computed under one reading is a reproduction under that reading only.",
        "",
        "A theorem's prediction that our own computation tests is not a paper's number, nor is "
        "its prediction for a setting of our choosing (a teacher of ours): such "
        "**checks** are listed in their own tables, with the tolerance and how our value "
        "approaches the prediction, as **holds** (within the tolerance), **fails**, or "
        "**illustration** (outside the statement's hypotheses), and they are not counted above. "
        "A check's tolerance is the chapter's choice, with its reason beside it; unlike the "
        "paper's rows, a check records nothing on whether its tolerance was fixed before our "
        "value was seen, so **holds** says only that our value lies within that tolerance, and "
        "carries no guarantee that the tolerance was fixed blind; nor does it weigh the margin, "
        "so a check of a loose bound holds while barely testing it, and the counts of **holds** "
        "below include such checks (one is named below the tables). "
        "A chapter also checks, by the same rule, some predictions that are not statements of "
        "the papers: those of our own derivations from a paper's lemmas, and those of numerical "
        "analysis (Euler's method is first order). They are counted and listed apart from the "
        "checks of the papers' statements, in tables of their own.",
    ])


def _count_line(rows: list, statuses: tuple[str, ...]) -> str:
    """"10 reproduced (6 exact, 4 one run of the paper's among ours), 2 differs, 1 not reproduced
    (3 misses, 2 of them explained)": the count of each status, the reproduced paper entries split
    by what was compared (as :func:`tally`), and where some entries differ, the misses in all
    (differs and not reproduced: a difference is a miss whose reason the chapter gives)."""
    counts = [(s, sum(e["status"] == s for e in rows)) for s in statuses]
    how = {"reproduced": _how_reproduced, "weak evidence": _how_weak}
    line = ", ".join(f"{n} {s}" + (how[s](rows) if s in how else "")
                     for s, n in counts if n) or "none"
    explained = dict(counts).get("differs", 0)
    misses = explained + dict(counts).get("not reproduced", 0)
    if explained:
        line += (f" ({misses} miss{'es' if misses > 1 else ''}, "
                 + ("explained)" if misses == 1 else
                    "all explained)" if explained == misses else
                    f"{explained} of them explained)"))
    return line


def _of_paper(entry: dict) -> bool:
    """Whether a check tests a statement of the paper (:func:`check`'s ``of_paper``; an entry
    without the field does)."""
    return entry.get("of_paper", True) is not False


#: How the page names the checks that :func:`check` records with ``of_paper=False``.
OWN_CHECKS = ("of our own derivations, numerical analysis or controls of our implementation, "
              "not statements of the paper{s}")


def _check_counts(checks: Sequence[dict], papers: str = "s") -> str:
    """The checks split into those of the papers' statements and the others, with the statuses of
    each: "16 of its statements: 14 holds, 2 illustration; 8 of our own derivations, numerical
    analysis or controls of our implementation, not statements of the paper: 7 holds, 1 fails"."""
    theirs = [e for e in checks if _of_paper(e)]
    ours = [e for e in checks if not _of_paper(e)]
    whose = "the papers'" if papers == "s" else "its"
    parts = _group_counts([(f"of {whose} statements", theirs),
                           (OWN_CHECKS.format(s=papers), ours)], CHECK_STATUSES)
    return "; ".join(parts) or "none"


#: The words by which a chapter's item marks a value read off the authors' published notebooks
#: (a plot, a printout) rather than printed in the paper.
NOTEBOOK_MARK = "not a number printed in the paper"
#: How the item says the value was read, and the tolerance that reading gives an exact entry.
_READINGS = (
    ("read off the authors' notebook plot", "half the interval read off the authors' plot"),
    ("bracketed by the authors' notebook's printout", "half the bracket of the authors' printout"),
)


def _from_notebook(entry: dict) -> bool:
    """Whether a paper entry's value was read off the authors' published notebooks (its item,
    setting or note says :data:`NOTEBOOK_MARK`) rather than printed in the paper (or read off the
    paper's own figures)."""
    words = " ".join(str(entry.get(field) or "") for field in ("item", "setting", "note"))
    return NOTEBOOK_MARK in " ".join(words.split())


def _source_counts(entries: Sequence[dict], papers: str = "s") -> str:
    """The paper entries split by where the paper's value comes from, with the statuses of each:
    "12 from the papers themselves (printed, or read off their figures): 10 reproduced, 2 differs;
    3 read off the authors' published notebooks (their plots and printouts), not printed in the
    papers: 3 reproduced". ``papers=""`` words it for the entries of one paper ("from the paper
    itself", "not printed in the paper")."""
    return "; ".join(_source_parts(entries, papers)) or "none"


def _source_parts(entries: Sequence[dict], papers: str = "s") -> list[str]:
    """:func:`_source_counts`'s parts, one per source that has entries."""
    if papers not in ("s", ""):
        raise ValueError(f"papers must be 's' (all papers) or '' (one), got {papers!r:.20}")
    numbers = [e for e in entries if e["kind"] == "paper"]
    notebook = [e for e in numbers if _from_notebook(e)]
    printed = [e for e in numbers if not _from_notebook(e)]
    own = ("from the papers themselves (printed, or read off their figures)" if papers
           else "from the paper itself (printed, or read off its figures)")
    return _group_counts([
        (own, printed),
        ("read off the authors' published notebooks (their plots and printouts), not printed "
         f"in the paper{papers}", notebook)], STATUSES)


#: Where in its paper an entry's number stands: the first figure, table, section or example that
#: the item names ("Figure 4", "Table 1", "§6", "Figure 1(a)")...
_PLACE = re.compile(r"(?:Figure|Table|Example)\s*\d+(?:\s*\([a-z]\)|[a-z]\b)?|§\s*\d+(?:\.\d+)*")
#: ... and the details that tell two numbers of one place apart: a row, a κ (or κ_g), a β.
_PLACE_DETAIL = re.compile(r"\brow \d+|κ(?:_g)? = \d+|β\d+")


def _paper_number(chapter: str, entry: dict) -> tuple:
    """The paper number that a paper entry compares, as a key: entries with equal keys compare
    one number of a paper several ways (the authors' rebuilt seed as an exact value and the same
    run among our seeds; the same number under several protocols).

    Two entries compare the same number when they come from the same chapter and paper, give the
    same paper's value, and name the same place of the paper: the first figure, table, section or
    example of their item, with the row, κ (or κ_g) and β the item gives outside an aside in
    parentheses about another place. A grouping of the
    chapters' own words, so its count is approximate: two claims of one place with equal values
    count once.
    """
    if not isinstance(entry, dict) or entry.get("kind") != "paper":
        raise ValueError("_paper_number takes a paper entry (kind 'paper')")
    words = " ".join(str(entry["item"]).split())
    first = _PLACE.search(words)
    place = re.sub(r"\s+", "", first.group(0)) if first else words
    # not the details of an aside about another place ("Figure 1(b) (d* = 10): ... (Figure 6:
    # κ = 20 near perfect)" has no κ of its own)
    own = re.sub(r"\((?:Figure|Table|Example|§)[^()]*\)", "", words)
    details = tuple(sorted({re.sub(r"\s+", "", d) for d in _PLACE_DETAIL.findall(own)}))
    value = entry["paper_value"]
    value = tuple(value) if isinstance(value, list) else value
    return (chapter, entry["paper"], place, details, value)


def _paper_numbers(rows: Sequence[tuple[str, dict]]) -> dict[tuple, list[dict]]:
    """The paper entries of ``rows`` (pairs of chapter and entry) grouped by :func:`_paper_number`:
    one list of entries (comparisons) per number of a paper, in the order of ``rows``."""
    groups: dict[tuple, list[dict]] = {}
    for chapter, entry in rows:
        if isinstance(entry, dict) and entry.get("kind") == "paper":
            groups.setdefault(_paper_number(chapter, entry), []).append(entry)
    return groups


def _place_name(number: tuple) -> str:
    """The place of a number of :func:`_paper_number` in words: "Figure 4 (κ = 6)", "§6 (β1)"."""
    _, _, place, details, _ = number
    place = re.sub(r"(Figure|Table|Example)(\d)", r"\1 \2", place)
    detail = ", ".join(re.sub(r"(row)(\d)", r"\1 \2", d).replace("=", " = ") for d in details)
    return place + (f" ({detail})" if detail else "")


def _value_name(number: tuple) -> str:
    value = number[-1]
    return _range_text(list(value)) if isinstance(value, tuple) else _number(value)


def _numbers_named(numbers: Sequence[tuple]) -> str:
    """Numbers of :func:`_paper_number` named by chapter and place: "{doc}`greedy-learning`,
    Figure 4 (κ = 6): 2.33 and 3.29; Figure 5 (κ = 6): 3.24; in {doc}`other`, Table 1 (row 2):
    0.194"."""
    chapters: dict[str, dict[str, list[str]]] = {}
    for number in numbers:
        places = chapters.setdefault(number[0], {})
        places.setdefault(_place_name(number), []).append(_value_name(number))
    return "; in ".join(
        f"{{doc}}`{chapter}`, " + "; ".join(
            f"{place}: " + (" and ".join(values) if len(values) <= 2
                            else ", ".join(values[:-1]) + " and " + values[-1])
            for place, values in places.items())
        for chapter, places in chapters.items())


def _split_numbers(rows: Sequence[tuple[str, dict]]) -> list[tuple[tuple, list[dict]]]:
    """The numbers of :func:`_paper_numbers` that one comparison reproduces and another misses
    (differs or not reproduced)."""
    return [(number, group) for number, group in _paper_numbers(rows).items()
            if any(e["status"] == "reproduced" for e in group)
            and any(e["status"] in _MISSES for e in group)]


def _group_counts(groups: Sequence[tuple[str, list]], statuses: tuple[str, ...]) -> list[str]:
    """"<n> <label>: <counts by status>" for each non-empty group of entries."""
    return [f"{len(group)} {label}: {_count_line(group, statuses)}" for label, group in groups
            if group]


def _heading_labels() -> set[str]:
    """The MyST labels of the book's pages that stand before a heading (a ``{ref}`` to them can
    show the heading's title; a label before a paragraph has no title to show)."""
    labels = set()
    for page in (ROOT / "book").glob("*.md"):
        lines = [line for line in page.read_text(encoding="utf-8").splitlines() if line.strip()]
        for line, following in zip(lines, lines[1:], strict=False):
            match = re.fullmatch(r"\((?P<label>[^()\s]+)\)=", line.strip())
            if match and following.lstrip().startswith("#"):
                labels.add(match["label"])
    return labels


def _numbers_paragraph(rows: Sequence[tuple[str, dict]]) -> str:
    """What the page's counts count: comparisons (rows), grouped into numbers of the papers by
    :func:`_paper_number`, and the numbers that one comparison reproduces and another misses."""
    paper = [(c, e) for c, e in rows if e["kind"] == "paper"]
    printed = [(c, e) for c, e in paper if not _from_notebook(e)]
    notebook = [(c, e) for c, e in paper if _from_notebook(e)]
    split = _split_numbers(paper)
    total = len(_paper_numbers(paper))
    text = (
        "The counts are of comparisons, one row of the tables below each, not of the papers' "
        "numbers. The comparisons of one chapter that give the same value at the same place of "
        "a paper (the first figure, table, section or example their item names, with its row, κ"
        f" and β) compare one number: {_plural(total, 'number')} in all by this grouping, "
        f"{len(_paper_numbers(printed))} from the papers themselves and "
        f"{len(_paper_numbers(notebook))} read off the notebooks. One number can be compared "
        "several ways: a run of the authors that our code rebuilds seed by seed, as an exact "
        "value and again as one run among our seeds; a table's mean under a second protocol. So "
        "one comparison can reproduce a number that another misses (differs or not "
        "reproduced); its rows show which comparison reproduces it and which misses it. ")
    if not split:
        return text + "No number is so split."
    verb = "is" if len(split) == 1 else "are"
    return (text + f"{_plural(len(split), 'number')} {verb} so split. In "
            + _numbers_named([number for number, _ in split]) + ".")


def reading_statuses(entry: dict) -> list[tuple[str, str]]:
    """``(reading, status)`` for each reading of a paper entry (rule 10): the row's own reading
    first (named "the row's reading"), then each of ``readings``, each status computed by rules 1
    to 9 and 11 from the stored comparison of that reading (the entry's status is their common
    one, or inconclusive, or a reading's miss where the row says :data:`SEEN_MARK`: rule 11);
    ``[]`` for an entry without other readings. ``entry``: a stored entry
    (:func:`recorded`, :func:`load`); anything else raises a ValueError."""
    _check_entry(entry, "entry")
    if entry["kind"] != "paper":
        raise ValueError("entry must be a paper number's entry (ledger.record), not a check")
    if not entry.get("readings"):
        return []
    first = {k: v for k, v in entry.items() if k != "readings"}
    return [("the row's reading", _one_status(first))] + [
        (r["reading"], _one_status(_as_entry(entry, r))) for r in entry["readings"]]


def _reading_sentence(entries: Sequence[dict]) -> str:
    """The comparisons among ``entries`` whose readings of the paper's words (rule 10) give
    different statuses, each named with the status of every reading, computed from the entry's
    stored readings (an illustration is one under every reading, so it is never named); "" when
    there are none."""
    split = [(e, reading_statuses(e)) for e in entries]
    split = [(e, r) for e, r in split if len({status for _, status in r}) > 1]

    def named(rows: list) -> str:
        return "; ".join(
            f"{{cite:t}}`{e['paper']}`, {e['item'].split(':')[0]} ("
            + ", ".join(f"{status} under " + (reading if i == 0 else f"the reading \"{reading}\"")
                        for i, (reading, status) in enumerate(r)) + ")"
            for e, r in rows)

    def own(e, r) -> bool:  # the row's first reading gives its status already
        return r[0][1] == e["status"]

    sentences = []
    groups = (("miss", [(e, r) for e, r in split if e["status"] in _MISSES]),
              ("own", [(e, r) for e, r in split if e["status"] not in _MISSES and own(e, r)]),
              ("split", [(e, r) for e, r in split if e["status"] not in _MISSES
                         and not own(e, r)]))
    texts = {
        "miss": "a miss under one reading of the paper's words and not under another, and counted "
                "as the miss: the readings were fixed after our runs were seen, and such a reading "
                "softens no miss",
        "own": "inconclusive under the row's own reading already; another reading of the paper's "
               "words would give another status",
        "split": "inconclusive only because the readings of the paper's words that the paper "
                 "leaves open give different statuses (the row states the readings)",
    }
    for kind, rows in groups:
        if rows:
            count = f"{len(rows)} status" + ("" if len(rows) == 1 else "es")
            verb = "is" if len(rows) == 1 else "are"
            sentences.append(f"Of these counts, {count} {verb} {texts[kind]}: {named(rows)}.")
    return " ".join(sentences)


def page_markdown(ledger: dict) -> str:
    """The *Reproductions* page's body (MyST markdown): the rule, the counts by status, then per
    paper one table of its values, one of the checks of its statements, and one of the checks
    recorded with ``of_paper=False`` (our derivations, numerical analysis).

    Each row links to its chapter (``{doc}``, the chapter's title) and to the section that
    computes it (``{ref}``, the section's title); a page in ``book/`` renders it.
    """
    _check_entries(ledger, "ledger")
    headings = _heading_labels()
    rows = [(chapter, key, entry) for chapter, entries in ledger.items()
            for key, entry in entries.items()]
    numbers = [e for _, _, e in rows if e["kind"] == "paper"]
    checks = [e for _, _, e in rows if e["kind"] == "check"]
    parts = _source_parts(numbers)
    lines = [
        rule_markdown(), "",
        f"**{_plural(len(numbers), 'comparison')}** with numbers of "
        f"{_plural(len({e['paper'] for e in numbers}), 'paper')}:", "",
        *(f"- {part}" + (";" if i + 1 < len(parts) else ".") for i, part in enumerate(parts)),
        *([] if parts else ["none."]), "",
        *([_reading_sentence(numbers), ""] if _reading_sentence(numbers) else []),
        *([_numbers_paragraph([(c, e) for c, _, e in rows]), ""] if numbers else []),
        "The inconclusive counts above include every case where one value of ours (one run, or "
        "as many seeds as the paper's statistic used) misses a random number of the paper or "
        "lies outside its range: such a miss is never counted as differs or not reproduced, so a"
        " small count of those two statuses does not show that every such comparison agreed.",
        "",
        f"**{_plural(len(checks), 'check')}**: {_check_counts(checks)}.",
        "",
    ]
    for paper, title in PAPERS.items():
        mine = [(c, k, e) for c, k, e in rows if e["paper"] == paper]
        if not mine:
            continue
        printed = [(c, e) for c, _, e in mine if e["kind"] == "paper"]
        tested = [(c, e) for c, _, e in mine if e["kind"] == "check"]
        lines += [
            f"## {title}", "",
            f"Cited as {{cite:t}}`{paper}`. "
            + (f"{_plural(len(printed), 'comparison')} with about "
               f"{_plural(len(_paper_numbers(printed)), 'number')} of it: "
               f"{_source_counts([e for _, e in printed], papers='')}. "
               if printed else "No value of this paper is recorded (a chapter may set its runs "
               "beside the paper's figures without recording a value: see the chapters of the "
               "checks below). ")
            + (f"{_plural(len(tested), 'check')}: "
               f"{_check_counts([e for _, e in tested], papers='')}." if tested
               else "No check of its statements is recorded."), "",
        ]
        if printed:
            lines += [
                "| item | paper | ours | compared with | status | where |",
                "|---|---|---|---|---|---|",
            ]
            for chapter, entry in printed:
                status = entry["status"]
                if status == "differs":
                    # the link names the section that explains it ("why: 5.3 The seed"), not
                    # only "why" (one of 79 such links, on a page read by its links); a label
                    # set before a paragraph has no title to show, so its link reads "why"
                    label = entry["explain"]
                    link = (f"why: {{ref}}`{label}`" if label in headings
                            else f"{{ref}}`why <{label}>`")
                    status += f": {_literal(entry['reason'])} ({link})"
                extras = [s for s in (entry["setting"], entry["note"]) if s]
                if entry.get("closed_form") is True:
                    extras.append(_HOW_REPRODUCED["closed_form"])
                for reading in entry.get("readings", ()):
                    band = (f", our central 90 % {_range_text(reading['band'])}"
                            if "band" in reading else "")
                    extras.append(f"other reading, {reading['reading']}: paper "
                                  f"{_paper_text(reading)}{band}, {reading['status']}")
                item = _literal(entry["item"]) + "".join(f"<br>*{_literal(s)}*" for s in extras)
                where = _where(chapter, entry["section"], headings)
                cells = (item, _paper_text(entry), _ours_text(entry["ours"]),
                         _compared_text(entry), status)
                lines.append("| " + " | ".join(map(_cell, cells)) + f" | {where} |")
            lines.append("")
        for own in (False, True):
            group = [(c, e) for c, e in tested if _of_paper(e) != own]
            if not group:
                continue
            if own:
                lines += [f"Checks {OWN_CHECKS.format(s='')}:", ""]
            lines += [
                "| statement checked | predicted | ours | tolerance | how ours approaches it "
                "| status | where |",
                "|---|---|---|---|---|---|---|",
            ]
            for chapter, entry in group:
                predicted = entry["predicted"]
                predicted = (_range_text(predicted) if isinstance(predicted, list)
                             else _number(predicted))
                item = _literal(entry["statement"]) + (f"<br>*{_literal(entry['note'])}*"
                                                       if entry["note"] else "")
                lines.append("| " + " | ".join(map(_cell, (
                    item, predicted, _check_ours_text(entry["ours"]), f"± {_number(entry['tol'])}",
                    _literal(entry["convergence"]) or "—", entry["status"])))
                    + f" | {_where(chapter, entry['section'], headings)} |")
            lines.append("")
    return "\n".join(lines)


def _where(chapter: str, section: str, headings: set[str]) -> str:
    """A row's links: its chapter (``{doc}``) and the section that computes it (``{ref}``, which
    shows the heading's title when the label stands before a heading; a label before a paragraph
    has no title to show, so its link reads "the section")."""
    return f"{{doc}}`{chapter}`, " + (f"{{ref}}`{section}`" if section in headings
                                      else f"{{ref}}`the section <{section}>`")
