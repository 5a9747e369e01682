"""Numbers as the book prints them: one formatter for glued numbers, tables and slider labels.

A number is formatted with a Python format spec, and any exponent is then written as a power of
ten: ``2.1e+10`` becomes ``2.1 × 10¹⁰`` and ``4.8e-04`` becomes ``4.8 × 10⁻⁴`` (U+00D7, superscript
digits, U+2212 for the minus, no-break spaces so that a number never wraps across lines); a zero
exponent is dropped (``1.0e+00`` becomes ``1.0``), and so is a mantissa of exactly ``1`` written
without decimals (``1e-06`` becomes ``10⁻⁶``; ``1.0e-06`` keeps its precision, ``1.0 × 10⁻⁶``).
The same rewriting is applied to glued text on the built pages and in the downloadable notebooks
(:func:`scientific`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from lib._checks import _describe

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


def scientific(text: str) -> str:
    """``text`` with every e-notation number written as a power of ten (see the module's doc).

    ``scientific("4.8e-04 and 2.1e+10") == "4.8 × 10⁻⁴ and 2.1 × 10¹⁰"`` (with no-break spaces);
    a bare mantissa 1 is dropped: ``"1e-06"`` becomes ``"10⁻⁶"``; signs are kept (``+``, and
    ``−`` for a minus).
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {_describe(text)}")
    return _E_TOKEN.sub(lambda m: _power(m.group(1), m.group(2)), text)


def _as_real(value, name: str) -> float | int:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()  # numpy or torch scalar
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a real number, got {_describe(value)}")
    return value


def number(value, spec: str = "") -> str:
    """``format(value, spec)`` with any exponent written as a power of ten.

    Raises a ``ValueError`` for nan or inf: a page never prints them (a missing value is a bug to
    fix where it is computed, not a number to show).
    """
    value = _as_real(value, "value")
    if not isinstance(spec, str):
        raise ValueError(f"spec must be a format spec string such as '.2f', got {_describe(spec)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"value must be finite to be printed, got {value}")
    try:
        text = format(value, spec)
    except ValueError as error:
        raise ValueError(f"spec {spec!r} cannot format {value!r}: {error}") from None
    text = scientific(text)
    return text.replace("-", MINUS) if text.startswith("-") else text


def column(values: Sequence, digits: int = 3) -> list[str]:
    """One column of a table, every number at the same precision.

    If the column's non-zero magnitudes span [10⁻², 10⁴), every entry is written with the same
    number of decimals, enough to show ``digits`` significant digits of the smallest non-zero one
    (at most 6; none when every one is a whole number); otherwise every entry is written as
    m × 10ⁿ with ``digits`` significant digits.
    Integers stay integers; strings and ``None`` (shown as an em dash) pass through.
    """
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ValueError(f"values must be a list of cells, got {_describe(values)}")
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 17:
        raise ValueError(f"digits must be an integer in [1, 17], got {_describe(digits)}")
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
    if nonzero and not sci and all(v.is_integer() for v in floats):
        decimals = 0  # 1.0, 10.0, 100.0: whole numbers, written as such
    elif nonzero and not sci:
        smallest = min(nonzero)
        decimals = min(6, max(0, digits - 1 - math.floor(math.log10(smallest))))
    else:
        decimals = digits - 1
    cells = []
    for v in values:
        if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
            v = v.item()
        if v is None:
            cells.append("—")
        elif isinstance(v, str):
            cells.append(v)
        elif isinstance(v, (bool, np.bool_)):
            cells.append(str(bool(v)))
        elif isinstance(v, int):
            cells.append(number(v))
        elif isinstance(v, float):
            cells.append(number(v, f".{digits - 1}e" if sci else f".{decimals}f"))
        else:
            raise ValueError(f"a table cell must be a number or a string, got {_describe(v)}")
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
        raise ValueError(f"text must be a string, got {_describe(text)}")
    return _DEGENERATE.sub(r"\1", text)


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
        raise ValueError(f"separator must be a string such as ' to ', got {_describe(separator)}")
    first, last = number(low, spec), number(high, spec)
    if low > high:
        raise ValueError(f"low must not exceed high, got low={low!r} > high={high!r}")
    return first if first == last else f"{first}{separator}{last}"
