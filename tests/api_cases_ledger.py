"""Cases of :mod:`lib.ledger` for the bad-input fuzz (``cases()``, see ``tests/api_cases.py``).

Every case writes into its own temporary ledger folder (``BOOK_LEDGER_DIR``), never into the
book's ``_build/ledger``. The oracle of ``ledger.record`` recomputes the status from the rule of
the module's docstring, so an accepted bad input that yields a wrong status is a wrong answer.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from api_cases import Arg, Case

from lib import ledger

P = Arg  # short
PAPER = "slutzky2025implicit"
_DIR = Path(tempfile.mkdtemp(prefix="ledger-cases-"))


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
def _record(key, paper, item, paper_value, ours, section, tol=None):
    ledger.start("fuzz-chapter")
    return ledger.record(key, paper=paper, item=item, paper_value=paper_value, ours=ours,
                         section=section, tol=tol)


def _oracle_record(result, key, paper, item, paper_value, ours, section, tol=None):
    values = np.asarray(ours.tolist() if isinstance(ours, torch.Tensor) else ours, dtype=float)
    if values.ndim == 0:
        agrees = abs(float(values) - paper_value) <= tol
    else:
        q1, q3 = np.percentile(values, [25, 75])
        agrees = q1 <= paper_value <= q3
    return result == ("reproduced" if agrees else "not reproduced")


def _sample_run() -> dict:
    _record("row", PAPER, "Table 1, row 2, clean", 0.2, [0.1, 0.2, 0.3], "sec-x")
    return _in_temp(ledger.collect)()


def cases() -> list[Case]:
    run = _sample_run()
    committed = {chapter: data["entries"] for chapter, data in run.items()}
    seeds = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    return [
        Case(
            "ledger.record",
            _record,
            [P("key", "row", "text"), P("paper", PAPER, "choice"), P("item", "Table 1", "text"),
             P("paper_value", 0.2, "float"), P("ours", seeds, "tensor"),
             P("section", "sec-x", "text")],
            oracle=_oracle_record,
        ),
        Case(
            "ledger.record.exact",
            _record,
            [P("key", "row", "text"), P("paper", PAPER, "choice"), P("item", "Table 1", "text"),
             P("paper_value", 1.27e-3, "float"), P("ours", 1.2712e-3, "float"),
             P("section", "sec-x", "text"), P("tol", 5e-6, "float", True)],
            oracle=_oracle_record,
        ),
        Case("ledger.start", _in_temp(ledger.start), [P("chapter", "fuzz-chapter", "text")]),
        Case("ledger.collect", _in_temp(ledger.collect), [P("directory", str(_DIR), "text")]),
        Case("ledger.compare", ledger.compare,
             [P("fresh", run, "object"), P("committed", committed, "object")]),
        Case("ledger.page_markdown", ledger.page_markdown, [P("ledger", committed, "object")]),
        Case("ledger.load", ledger.load, [P("path", str(ledger.LEDGER_PATH), "text")]),
        Case("ledger.save", ledger.save,
             [P("chapters", run, "object"), P("path", str(_DIR / "saved.json"), "text")]),
    ]
