"""Every chapter's sizes at BOOK_SCALE=full parse and are in range, checked cheaply.

Executing the whole book at full scale takes many minutes (``make full``), so CI does not. What CI
can afford is each chapter's setup cell (the first code cell, where every size lives, see the
chapter anatomy in the README) at both scales: it must run at ``BOOK_SCALE=full`` (a chapter that
validates a size there, e.g. against the number of digits images, fails here), and every setting
that differs between the scales must be a usable size at full scale: positive integers, finite
positive floats, non-empty sequences of such, and lists (of seeds, of settings) that do not shrink
(the full scale is the papers' own, never fewer runs than the fast default).
"""

from __future__ import annotations

import math
import os
import sys
from numbers import Integral, Real
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.chapters import pages  # noqa: E402

CHAPTERS = list(pages(notebooks_only=True))


def _setup_namespace(path: Path, scale: str, monkeypatch, ledger_dir: Path) -> dict:
    notebook = jupytext.read(path)
    setup = next(cell for cell in notebook.cells if cell.cell_type == "code")
    monkeypatch.setenv("BOOK_SCALE", scale)
    monkeypatch.setenv("BOOK_MODE", "test")
    # a setup cell starts the chapter's ledger record: into a folder of the test's own, never the
    # build's (_build/ledger), which `make test` then checks against the committed ledger
    monkeypatch.setenv("BOOK_LEDGER_DIR", str(ledger_dir))
    monkeypatch.chdir(path.parent)  # chapters run with book/ as their working directory
    namespace: dict = {"__name__": f"setup_{path.stem}"}
    exec(compile(setup.source, f"{path.name}: setup cell", "exec"), namespace)  # noqa: S102
    return namespace


def _problems(name, value, fast, *, item=False) -> list[str]:
    """What is wrong with a setting's full-scale value (empty if nothing).

    A size on its own must be positive; an entry of a list may be 0 (a seed, an index).
    """
    if isinstance(value, bool):
        return []
    if isinstance(value, Integral):
        ok = value >= 0 if item else value > 0
        return [] if ok else [f"{name} = {value} is not {'>= 0' if item else 'positive'}"]
    if isinstance(value, Real):
        ok = math.isfinite(value) and (value >= 0 if item else value > 0)
        return [] if ok else [f"{name} = {value} is not a finite positive number"]
    if isinstance(value, (list, tuple, range)):
        if len(value) == 0:
            return [f"{name} is empty"]
        out = []
        for i, entry in enumerate(value):
            if entry is None or isinstance(entry, (str, bool)):
                continue
            if isinstance(entry, (Real, list, tuple, range)):
                out += _problems(f"{name}[{i}]", entry, None, item=True)
        if isinstance(fast, (list, tuple, range)) and len(value) < len(fast):
            out.append(f"{name} shrinks from {len(fast)} entries (fast) to {len(value)} (full)")
        return out
    return []


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_full_scale_settings(path, monkeypatch, tmp_path):
    fast = _setup_namespace(path, "fast", monkeypatch, tmp_path)
    full = _setup_namespace(path, "full", monkeypatch, tmp_path)
    assert os.environ["BOOK_SCALE"] == "full"
    changed = [
        name
        for name, value in full.items()
        if not name.startswith("_") and name in fast and _differs(value, fast[name])
    ]
    problems = [p for name in changed for p in _problems(name, full[name], fast[name])]
    assert not problems, problems


def _differs(a, b) -> bool:
    try:
        return bool(a != b)
    except Exception:  # arrays, tensors, modules: not a size setting
        return False


def test_some_chapter_has_a_full_scale():
    """The check above is not vacuous: the chapters do size experiments by BOOK_SCALE."""
    text = "".join(path.read_text() for path in CHAPTERS)
    assert text.count("scaled(") >= len(CHAPTERS) // 2
