"""lib.typeset.collapse_ranges: a range whose two ends print the same is written once."""

import pytest

from lib import typeset


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
