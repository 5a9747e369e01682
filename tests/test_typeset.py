"""Tests of lib.typeset, the book's one number formatter (values worked out by hand)."""

import math

import numpy as np
import pytest

from lib import typeset

NB = "\u00a0"


@pytest.mark.parametrize(
    ("value", "spec", "expected"),
    [
        (2.1e10, ".1e", f"2.1{NB}×{NB}10¹⁰"),
        (4.8e-4, ".1e", f"4.8{NB}×{NB}10⁻⁴"),
        (1e-6, ".0e", "10⁻⁶"),  # a bare 1 is dropped ...
        (-1e-6, ".1e", f"−1.0{NB}×{NB}10⁻⁶"),  # ... but 1.0 keeps the column's precision
        (3e-4, "+.1e", f"+3.0{NB}×{NB}10⁻⁴"),
        (1.0, ".1e", "1.0"),  # a zero exponent is dropped
        (-2.5, ".2f", "−2.50"),
        (12345, ",", "12,345"),
        (np.float64(0.25), ".0%", "25%"),
    ],
)
def test_number(value, spec, expected):
    assert typeset.number(value, spec) == expected


def test_scientific_rewrites_tokens_and_leaves_words():
    text = "lr 1e-3, gap 5.0e-12 at step 2e+04; v2e-1 and 1e3x stay"
    assert typeset.scientific(text) == (
        f"lr 10⁻³, gap 5.0{NB}×{NB}10⁻¹² at step 2{NB}×{NB}10⁴; v2e-1 and 1e3x stay"
    )


def test_column_has_one_precision():
    # in [1e-2, 1e4): decimals enough for 3 significant digits of the smallest (0.0123: 4)
    assert typeset.column([1.5, 0.0123, 100.0]) == ["1.5000", "0.0123", "100.0000"]
    # a magnitude outside it: every float as m × 10ⁿ, integers and strings as they are
    assert typeset.column([4.79e-4, 0.5, 12, "n/a", None]) == [
        f"4.79{NB}×{NB}10⁻⁴", f"5.00{NB}×{NB}10⁻¹", "12", "n/a", "—"
    ]


@pytest.mark.parametrize(
    "call",
    [
        lambda: typeset.number(math.nan),
        lambda: typeset.number(math.inf, ".2f"),
        lambda: typeset.number(True),
        lambda: typeset.number("3"),
        lambda: typeset.number(3.0, 2),
        lambda: typeset.number(3.0, ".2q"),
        lambda: typeset.scientific(3.0),
        lambda: typeset.column([1.0, math.nan]),
        lambda: typeset.column("abc"),
        lambda: typeset.column([1.0], digits=0),
        lambda: typeset.column([[1.0]]),
    ],
)
def test_bad_input(call):
    with pytest.raises(ValueError):
        call()


def test_scientific_at_the_end_of_a_sentence():
    assert typeset.scientific("gives ≈ 1.53e-8. Next") == f"gives ≈ 1.53{NB}×{NB}10⁻⁸. Next"
    assert typeset.scientific("1e-3.5") == "1e-3.5"  # not a number we write


def test_column_of_whole_numbers_has_no_decimals():
    assert typeset.column([1.0, 10.0, 1000.0], digits=6) == ["1", "10", "1000"]
    assert typeset.column([1.0, 2.5]) == ["1.00", "2.50"]


def test_number_range_collapses_a_range_whose_ends_print_the_same():
    assert typeset.number_range(0.12, 0.47, ".2f") == "0.12 to 0.47"
    assert typeset.number_range(10, 10, ".4f") == "10.0000"
    assert typeset.number_range(400, 400) == "400"
    # different values that print the same are one number too; the separator is the caller's
    assert typeset.number_range(0.1199, 0.1201, ".2f") == "0.12"
    assert typeset.number_range(1, 2, separator="–") == "1–2"
    assert typeset.number_range(1e-5, 2e-4, ".1e") == "1.0\u00a0×\u00a010⁻⁵ to 2.0\u00a0×\u00a010⁻⁴"


@pytest.mark.parametrize("args", [(2, 1), (float("nan"), 1), (0, float("inf")), ("1", 2)])
def test_number_range_rejects_bad_ends(args):
    with pytest.raises(ValueError):
        typeset.number_range(*args)
