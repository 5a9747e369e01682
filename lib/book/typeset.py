"""Numbers as the book prints them: one formatter for glued numbers, tables and slider labels.

A number is formatted with a Python format spec, and any exponent is then written as a power of
ten: ``2.1e+10`` becomes ``2.1 × 10¹⁰`` and ``4.8e-04`` becomes ``4.8 × 10⁻⁴`` (U+00D7, superscript
digits, U+2212 for the minus, no-break spaces so that a number never wraps across lines); a zero
exponent is dropped (``1.0e+00`` becomes ``1.0``), and so is a mantissa of exactly ``1`` written
without decimals (``1e-06`` becomes ``10⁻⁶``; ``1.0e-06`` keeps its precision, ``1.0 × 10⁻⁶``).
The same rewriting is applied to glued text on the built pages and in the downloadable notebooks
(:func:`scientific`).

One convention for the digits around a number, everywhere the book prints one (:func:`scientific`
applies it, so glued text, tables, slider labels and the Reproductions page all follow it):

- thousands: a whole part of five or more digits is grouped in threes with a no-break space
  (``200000`` and ``200,000`` become ``200 000``); four digits stay together (``5000``, and
  ``4,500`` becomes ``4500``), as the SI brochure and most style guides write them;
- a minus sign is U+2212 (``-0.43`` becomes ``−0.43``), never a hyphen;
- a range between two numbers is an unspaced en dash (``19.9 – 20.1`` becomes ``19.9–20.1``), or
  written with "to".
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from lib.engine.validation import as_int, describe

_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
NBSP = "\u00a0"
TIMES = f"{NBSP}×{NBSP}"
MINUS = "\u2212"

# An e-notation token: a mantissa (digits, optional decimals) then e/E and a signed exponent.
# Not preceded by a letter, digit or dot, nor followed by a letter, digit or decimal part, so
# identifiers such as "1e3x" or "v2e-1" are left alone (a full stop after a number is fine).
_E_TOKEN = re.compile(r"(?<![\w.])([+-]?\d+(?:\.\d*)?)[eE]([+-]?\d+)(?!\w|\.\d)")


def _power(mantissa: str, exponent: str) -> str:
    power = int(exponent)
    sign = ""
    if mantissa[0] in "+-":
        sign, mantissa = (MINUS if mantissa[0] == "-" else "+"), mantissa[1:]
    if power == 0:
        return sign + mantissa
    if mantissa in ("1", "1."):  # "1e-06": a bare power; "1.0e-06" keeps its precision
        body = f"10{str(power).translate(_SUPERSCRIPT)}"
    else:
        body = f"{mantissa}{TIMES}10{str(power).translate(_SUPERSCRIPT)}"
    return sign + body


# Thousands written with commas ("20,000", "1,234.5"); not a list of numbers written without
# spaces after its commas when a part is not three digits ("64,128" is taken as 64128, "1,2" not).
_COMMA_GROUPED = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+)(?![\w]|,\d)")
# A whole part of five or more digits written as one run ("200000"); not a decimal part, nor a
# number inside an identifier, a path, a version or a reference ("v12345", "a/12345", "#12345").
_LONG_RUN = re.compile(r"(?<![\w.,#/\\:@-])(\d{5,})(?![\w]|,\d)")
# A hyphen-minus used as a minus sign: before a digit, at the start of a token ("-0.43", "(-1,");
# not a hyphen inside a word, a date or a chain ("x-1", "2026-11-29", "64-32").
_HYPHEN_MINUS = re.compile(r"(?<![\w.,)\]}−-])-(?=\.?\d)")
# A spaced en dash between two numbers ("19.9 – 20.1").
_SPACED_RANGE = re.compile(r"(?<=\d)[ \u00a0\u202f\u2009]+–[ \u00a0\u202f\u2009]+(?=[−\d])")


def group_digits(digits: str) -> str:
    """A whole part ``digits`` as the book writes it: five or more digits grouped in threes with
    no-break spaces (``"200000"`` -> ``"200 000"``), four or fewer as they are (``"5000"``)."""
    if not isinstance(digits, str) or not digits.isdigit():
        raise ValueError(f"digits must be a string of decimal digits, got {describe(digits)}")
    if len(digits) < 5:
        return digits
    head = len(digits) % 3 or 3
    return NBSP.join([digits[:head]] + [digits[i:i + 3] for i in range(head, len(digits), 3)])


def scientific(text: str) -> str:
    """``text`` with every number written as the book writes it (see the module's doc): e-notation
    as a power of ten, thousands grouped by no-break spaces from five digits on, a minus sign for a
    hyphen-minus before a number, an unspaced en dash between the ends of a range.

    ``scientific("4.8e-04 and 2.1e+10") == "4.8 × 10⁻⁴ and 2.1 × 10¹⁰"`` (with no-break spaces);
    a bare mantissa 1 is dropped: ``"1e-06"`` becomes ``"10⁻⁶"``; signs are kept (``+``, and
    ``−`` for a minus). ``scientific("-0.43 after 200,000 steps (19.9 – 20.1)")`` is
    ``"−0.43 after 200 000 steps (19.9–20.1)"``; ``"4,500"`` becomes ``"4500"``.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {describe(text)}")
    text = _E_TOKEN.sub(lambda m: _power(m.group(1), m.group(2)), text)
    text = _HYPHEN_MINUS.sub(MINUS, text)
    text = _COMMA_GROUPED.sub(lambda m: group_digits(m.group(1).replace(",", "")), text)
    text = _LONG_RUN.sub(lambda m: group_digits(m.group(1)), text)
    return _SPACED_RANGE.sub("–", text)


def _as_real(value, name: str) -> float | int:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()  # numpy or torch scalar
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a real number, got {describe(value)}")
    return value


def number(value, spec: str = "") -> str:
    """``format(value, spec)`` with any exponent written as a power of ten.

    Raises a ``ValueError`` for nan or inf: a page never prints them (a missing value is a bug to
    fix where it is computed, not a number to show).
    """
    value = _as_real(value, "value")
    if not isinstance(spec, str):
        raise ValueError(f"spec must be a format spec string such as '.2f', got {describe(spec)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"value must be finite to be printed, got {value}")
    try:
        text = format(value, spec)
    except ValueError as error:
        raise ValueError(f"spec {spec!r} cannot format {value!r}: {error}") from None
    text = scientific(text)
    return text.replace("-", MINUS) if text.startswith("-") else text


def column(values: Sequence, digits: int = 3) -> list[str]:
    """One column of a table, each number with ``digits`` significant digits.

    The digits are chosen by what each number carries, not by its neighbours: 19.999999 and 0.0123
    in one column are ``20.0`` and ``0.0123`` with ``digits=3`` (a column set at the smallest
    one's precision printed ``19.99999``); an exact zero is ``0`` (not a column of ``0.00000``).
    If the column's non-zero magnitudes span [10⁻², 10⁴), a number is written with decimals (at
    most 6); otherwise every entry is written as m × 10ⁿ with ``digits`` significant digits. A
    column of whole numbers is written without decimals. Integers stay integers; ``None`` is an
    em dash; strings pass through :func:`scientific` (the book's one convention for the numbers
    they hold: "23,500" is written "23 500").
    """
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ValueError(f"values must be a list of cells, got {describe(values)}")
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 17:
        raise ValueError(f"digits must be an integer in [1, 17], got {describe(digits)}")
    floats = []
    for v in values:
        if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
            v = v.item()
        if isinstance(v, float):
            if not math.isfinite(v):
                raise ValueError(f"a table cell must be finite, got {v}")
            floats.append(abs(v))
    nonzero = [v for v in floats if v != 0]
    sci = bool(nonzero) and (min(nonzero) < 1e-2 or max(nonzero) >= 1e4)
    whole = bool(nonzero) and not sci and all(v.is_integer() for v in floats)

    def decimals(v: float) -> int:
        if whole or v == 0:
            return 0  # 1.0, 10.0, 100.0: whole numbers, written as such; a zero is 0
        return min(6, max(0, digits - 1 - math.floor(math.log10(abs(v)))))

    cells = []
    for v in values:
        if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
            v = v.item()
        if v is None:
            cells.append("—")
        elif isinstance(v, str):
            cells.append(scientific(v))
        elif isinstance(v, (bool, np.bool_)):
            cells.append(str(bool(v)))
        elif isinstance(v, int):
            cells.append(number(v))
        elif isinstance(v, float) and sci and v != 0:
            cells.append(number(v, f".{digits - 1}e"))
        elif isinstance(v, float):
            cells.append(number(v, f".{decimals(v)}f"))
        else:
            raise ValueError(f"a table cell must be a number or a string, got {describe(v)}")
    return cells


#: A number as prose writes it (a sign, digits grouped by commas or spaces, a decimal part).
_NUMBER = r"[−-]?\d+(?:[.,\u00a0\u202f ]\d+)*"
#: A range whose two ends are the same number ("400–400", "7 to 7"); not a chain of sizes
#: ("64–32–32–10") nor a number before a mantissa ("5 to 5 × 10⁻⁶").
_DEGENERATE = re.compile(
    rf"(?<![\w.,−–—-])({_NUMBER})(?:\s*[–—]\s*|\s+to\s+|\s+-\s+)\1(?![\w]|[.,]\d|\s*[–—×])"
)


def collapse_ranges(text: str) -> str:
    """``text`` with every range whose two ends print the same written as that one number.

    For prose assembled from recorded strings (the ledger's notes), where :func:`number_range`
    was not the writer: a reading whose two ends are both 400 is written "the reading 400".
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {describe(text)}")
    return _DEGENERATE.sub(r"\1", text)


def _round_figures(value, digits, up: bool) -> float:
    """value rounded to ``digits`` significant figures towards +inf (``up``) or 0 (not ``up``)."""
    value = _as_real(value, "value")
    digits = as_int(digits, "digits", minimum=1, maximum=15)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"value must be positive and finite to be rounded to a bound, got {value!r}")
    exponent = math.floor(math.log10(value)) - digits + 1
    quotient = value / 10.0**exponent
    whole = round(quotient)
    if abs(quotient - whole) <= 1e-9 * quotient:
        count = whole
    else:
        count = math.ceil(quotient) if up else math.floor(quotient)
    return float(f"{count}e{exponent}")


def round_up(value, digits: int = 2) -> float:
    """The smallest number of ``digits`` significant figures that is at least ``value`` > 0:
    ``⌈value / 10^e⌉ · 10^e`` with ``e = ⌊log10 value⌋ − digits + 1``, so that a printed "at most"
    stays true (``0.0123`` becomes ``0.013`` at two digits, ``0.02`` at one).

    A quotient within 10⁻⁹ of a whole number is taken as that number, so that a value that is
    already of ``digits`` figures (``1.1``, stored as 1.1000000000000000888) is not pushed up a
    unit by the rounding of its binary form. Only positive finite values: the bounds it serves are
    of positive quantities (a loss, an error, a distance).
    """
    return _round_figures(value, digits, up=True)


def round_down(value, digits: int = 2) -> float:
    """The largest number of ``digits`` significant figures that is at most ``value`` > 0:
    ``⌊value / 10^e⌋ · 10^e`` with ``e`` as in :func:`round_up`, so that a printed "at least"
    stays true (``0.0187`` becomes ``0.018`` at two digits, ``0.01`` at one). The same handling
    of values already of ``digits`` figures, and the same domain, as :func:`round_up`.
    """
    return _round_figures(value, digits, up=False)


_BOUND_SPEC = re.compile(r"\.(\d{1,2})([efg])")


def _number_bound(value, spec, up: bool) -> str:
    value = _as_real(value, "value")
    if not math.isfinite(value):
        raise ValueError(f"value must be finite to be printed as a bound, got {value!r}")
    match = _BOUND_SPEC.fullmatch(spec) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(f"spec must be a fixed, exponent or general format such as '.2f', '.0e' "
                         f"or '.2g', "
                         f"got {describe(spec)}")
    digits = int(match.group(1))
    text = format(value, spec)
    if (float(text) < value) if up else (float(text) > value):
        if spec.endswith("e"):
            exponent = int(text.split("e")[1]) - digits
        elif spec.endswith("g"):  # digits significant figures: the last one's place
            exponent = math.floor(math.log10(abs(float(text)))) - max(digits, 1) + 1
        else:
            exponent = -digits
        text = format(float(text) + (1 if up else -1) * 10.0**exponent, spec)
    return number(float(text), spec)


def number_up(value, spec: str) -> str:
    """``value`` printed with ``spec`` (``".2f"``, ``".0e"`` or ``".2g"`` style) as an upper bound: where the
    format rounded it down, it is moved up one unit of its last printed digit, so that "at most"
    and the top of a range are never printed below the value (``number_up(0.123, ".2f")`` is
    ``"0.13"``, ``number_up(7.2e-13, ".0e")`` is ``"8 × 10⁻¹³"``). Raises ``ValueError`` for a
    value that is not a finite real number and for another kind of spec."""
    return _number_bound(value, spec, up=True)


def number_down(value, spec: str) -> str:
    """``value`` printed with ``spec`` as a lower bound ("at least", the bottom of a range): where
    the format rounded it up, it is moved down one unit of its last printed digit
    (``number_down(0.128, ".2f")`` is ``"0.12"``). The same errors as :func:`number_up`."""
    return _number_bound(value, spec, up=False)


def number_range(low, high, spec: str = "", separator: str = " to ") -> str:
    """The range from ``low`` to ``high``, each written by :func:`number` with ``spec``:
    ``number_range(0.12, 0.47, ".2f") == "0.12 to 0.47"``.

    A range whose two ends print the same (``10.0000 to 10.0000``, ``400 to 400``) is written as
    that one number, ``"10.0000"``: a reader sees one value, not an interval that says nothing.
    A chapter whose sentence must read differently then ("all equal to ...") compares
    ``number(low, spec) == number(high, spec)`` itself. ``separator`` goes between the ends
    (``" to "``, or ``"–"`` in a table). Raises ``ValueError`` for nan or inf (as :func:`number`),
    for ``low > high``, and for a ``separator`` that is not a string.
    """
    low, high = _as_real(low, "low"), _as_real(high, "high")
    if not isinstance(separator, str):
        raise ValueError(f"separator must be a string such as ' to ', got {describe(separator)}")
    first, last = number(low, spec), number(high, spec)
    if low > high:
        raise ValueError(f"low must not exceed high, got low={low!r} > high={high!r}")
    return first if first == last else f"{first}{separator}{last}"
