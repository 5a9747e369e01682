"""lib.book.typeset.collapse_ranges: a range whose two ends print the same is written once."""

import pytest

from lib.book import typeset


@pytest.mark.parametrize("text, expected", [
    ("the reading 400–400 of the plot", "the reading 400 of the plot"),
    ("middle 90 % of our seeds: 4 to 4 differs", "middle 90 % of our seeds: 4 differs"),
    ("the reading 2,200–2,200", "the reading 2,200"),
    ("0.12–0.12 and 6 to 7", "0.12 and 6 to 7"),
    ("sizes 64–32–32–10", "sizes 64–32–32–10"),  # a chain of sizes is not a range
    ("Theorem 5 to 5 × 10⁻⁶", "Theorem 5 to 5 × 10⁻⁶"),  # a number before a mantissa
    ("400–4000", "400–4000"),
])
def test_collapse_ranges(text, expected):
    assert typeset.collapse_ranges(text) == expected


def test_collapse_ranges_rejects_a_non_string():
    with pytest.raises(ValueError, match="text must be a string"):
        typeset.collapse_ranges(400)


@pytest.mark.parametrize("text, expected", [
    ("after 200000 steps", "after 200\u00a0000 steps"),
    ("then 20,000 more and 4,500 clean", "then 20\u00a0000 more and 4500 clean"),
    ("seed 4603 at 34851", "seed 4603 at 34\u00a0851"),
    ("1234567.25", "1\u00a0234\u00a0567.25"),
    ("-0.43, against (-1, 1)", "\u22120.43, against (\u22121, 1)"),
    ("-23654", "\u221223\u00a0654"),
    ("19.9 (19.8 – 20.1)", "19.9 (19.8–20.1)"),
    # left alone: dates, chains of sizes, identifiers, decimals, references, lists
    ("2026-11-29, 64-32-32-10, x-1, v12345, #12345, arXiv:2302.12345, 0.123456, 1,2",
     "2026-11-29, 64-32-32-10, x-1, v12345, #12345, arXiv:2302.12345, 0.123456, 1,2"),
])
def test_scientific_writes_one_convention_for_digits(text, expected):
    assert typeset.scientific(text) == expected


def test_number_groups_thousands_whatever_the_spec():
    assert typeset.number(200000) == typeset.number(200000, ",d") == "200\u00a0000"
    assert typeset.number(4500, ",.0f") == "4500"
    assert typeset.number(-1234567.5, ".1f") == "\u22121\u00a0234\u00a0567.5"


def test_group_digits_rejects_what_is_not_digits():
    assert typeset.group_digits("1000000") == "1\u00a0000\u00a0000"
    with pytest.raises(ValueError, match="digits"):
        typeset.group_digits("12a45")


def test_column_digits_follow_each_number():
    # a column with 19.999999 and 0.0123 was set at the smallest one's precision: 19.99999
    assert typeset.column([19.999999, 0.0123, 0.0, 7.992671], 4) == [
        "20.00", "0.01230", "0", "7.993"]
    assert typeset.column([1.0, 10.0, 0.0]) == ["1", "10", "0"]
    # strings follow the same convention as glued text
    assert typeset.column(["23,500 at -0.4"]) == ["23\u00a0500 at \u22120.4"]


@pytest.mark.parametrize(("value", "digits", "expected"), [
    (0.0123, 2, 0.013), (0.0123, 1, 0.02), (1.1, 2, 1.1), (0.3, 1, 0.3), (9.99, 1, 10.0),
    (1234.0, 2, 1300.0), (7.2e-13, 1, 8e-13), (5.0, 1, 5.0),
])
def test_round_up_keeps_an_at_most_true(value, digits, expected):
    result = typeset.round_up(value, digits)
    # the written form is exact: compare the decimal text, not binary arithmetic on it
    assert repr(result) == repr(expected)
    assert result >= value * (1 - 1e-12)


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf"), "1", True])
def test_round_up_rejects_what_is_not_a_positive_number(value):
    with pytest.raises(ValueError, match="value"):
        typeset.round_up(value)


@pytest.mark.parametrize(("value", "digits", "expected"), [
    (0.0187, 2, 0.018), (0.0187, 1, 0.01), (1.1, 2, 1.1), (9.99, 1, 9.0), (1234.0, 2, 1200.0),
    (7.2e-13, 1, 7e-13),
])
def test_round_down_keeps_an_at_least_true(value, digits, expected):
    result = typeset.round_down(value, digits)
    assert repr(result) == repr(expected)
    assert result <= value * (1 + 1e-12)


@pytest.mark.parametrize(("value", "spec", "up", "down"), [
    (0.123, ".2f", "0.13", "0.12"), (0.128, ".2f", "0.13", "0.12"), (0.12, ".2f", "0.12", "0.12"),
    (7.2e-13, ".0e", "8 × 10⁻¹³", "7 × 10⁻¹³"), (-0.128, ".2f", "−0.12", "−0.13"),
    (0.01234, ".2g", "0.013", "0.012"), (987.0, ".2g", "9.9 × 10²", "9.8 × 10²"),
])
def test_printed_bounds_never_cross_the_value(value, spec, up, down):
    assert typeset.number_up(value, spec).replace("\u00a0", " ") == up
    assert typeset.number_down(value, spec).replace("\u00a0", " ") == down


@pytest.mark.parametrize("spec", ["", "d", ".2%", ",.0f", 2])
def test_printed_bounds_reject_a_spec_they_cannot_round(spec):
    with pytest.raises(ValueError, match="spec"):
        typeset.number_up(0.5, spec)
