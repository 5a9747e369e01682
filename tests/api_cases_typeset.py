"""Cases of :mod:`lib.book.typeset` and :func:`lib.book.viz.figure_png` for the bad-input fuzz
(``cases()``, see ``tests/api_cases.py``).

The oracle of ``typeset.number`` reads the typeset text back into a float (undoing the power of
ten) and compares it with ``float(format(value, spec))``: an accepted bad input that prints
another number is a wrong answer.
"""

from __future__ import annotations

import math

from api_cases import Arg, Case

from lib.book import typeset, viz

P = Arg  # short
_FROM_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")


def read_back(text: str) -> float:
    """The float that a typeset number shows ("2.1 × 10¹⁰" -> 2.1e10, "10⁻⁶" -> 1e-06)."""
    text = text.replace("\u2212", "-").replace("\u00a0", " ")
    if "10" in text and text.rstrip()[-1] in "⁰¹²³⁴⁵⁶⁷⁸⁹":
        head, _, power = text.rpartition("10")
        mantissa = head.replace("×", "").strip() or "1"
        if mantissa in ("-", "+"):
            mantissa += "1"
        return float(mantissa) * 10 ** int(power.translate(_FROM_SUPERSCRIPT))
    return float(text.replace(",", "").replace(" ", ""))


def _oracle_number(result, value, spec=""):
    expected = float(format(value, spec).replace(",", ""))
    return math.isclose(read_back(result), expected, rel_tol=1e-12, abs_tol=0.0)


def _oracle_column(result, values, digits=3):
    return len(result) == len(values) and all(isinstance(cell, str) for cell in result)


def _oracle_range(result, low, high, spec="", separator=" to "):
    ends = result.split(separator) if separator and separator in result else [result]
    values = [read_back(end) for end in ends]
    expected = [float(format(v, spec).replace(",", "")) for v in (low, high)]
    return len(values) in (1, 2) and math.isclose(values[0], expected[0], rel_tol=1e-12) and \
        math.isclose(values[-1], expected[1], rel_tol=1e-12)


def _oracle_round_up(result, value, digits=2):
    """At least the value, by less than one unit of its last kept figure."""
    unit = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return value * (1 - 1e-12) <= result < value + unit * (1 + 1e-9)


def _oracle_round_down(result, value, digits=2):
    """At most the value, by less than one unit of its last kept figure."""
    unit = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return value - unit * (1 + 1e-9) < result <= value * (1 + 1e-12)


def _figure() -> object:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2.0, 1.0))
    fig.add_subplot().set_title("t")
    return fig


def _figure_png(fig):
    return viz.figure_png(fig)[1]["width"]


def cases() -> list[Case]:
    return [
        Case("book.typeset.number", typeset.number,
             [P("value", 2.1e10, "float"), P("spec", ".1e", "text")], oracle=_oracle_number),
        Case("book.typeset.number_range", typeset.number_range,
             [P("low", 0.12, "float"), P("high", 0.47, "float"), P("spec", ".2f", "text"),
              P("separator", " to ", "text")], oracle=_oracle_range),
        Case("book.typeset.scientific", typeset.scientific, [P("text", "4.8e-04 and 3", "text")]),
        Case("book.typeset.group_digits", typeset.group_digits, [P("digits", "200000", "text")],
             oracle=lambda result, digits: result.replace("\u00a0", "") == digits),
        Case("book.typeset.collapse_ranges", typeset.collapse_ranges,
             [P("text", "the reading 400–400, sizes 64–32–32–10", "text")]),
        Case("book.typeset.column", typeset.column,
             [P("values", [0.00127, 12.5, None, "x"], "object"), P("digits", 3, "int")],
             oracle=_oracle_column),
        Case("book.typeset.round_up", typeset.round_up,
             [P("value", 0.0123, "float"), P("digits", 2, "int")], oracle=_oracle_round_up),
        Case("book.typeset.round_down", typeset.round_down,
             [P("value", 0.0187, "float"), P("digits", 2, "int")], oracle=_oracle_round_down),
        Case("book.typeset.number_up", typeset.number_up,
             [P("value", 0.123, "float"), P("spec", ".2f", "text")],
             oracle=lambda result, value, spec=".2f": read_back(result) >= value),
        Case("book.typeset.number_down", typeset.number_down,
             [P("value", 0.128, "float"), P("spec", ".2f", "text")],
             oracle=lambda result, value, spec=".2f": read_back(result) <= value),
        Case("book.viz.figure_png", _figure_png, [P("fig", _figure(), "object")], examples=4),
    ]
