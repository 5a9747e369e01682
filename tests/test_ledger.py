"""The reproductions ledger (lib/ledger.py): statuses from numbers, the check that catches a
moved number, the committed ledger's coverage, and the links from statements to their checks."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lib import ledger

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
REPO_URL = "https://github.com/implicit-bias-book/implicit-bias-book/blob/main/"
PAPER = "slutzky2025implicit"


@pytest.fixture
def chapter(tmp_path, monkeypatch):
    """A fresh ledger folder and a started chapter."""
    monkeypatch.setenv("BOOK_LEDGER_DIR", str(tmp_path))
    ledger.start("some-chapter")
    return tmp_path


def _entries(directory: Path) -> dict:
    return json.loads((directory / "some-chapter.json").read_text())["entries"]


# ---------------------------------------------------------------------------------------------
# Statuses are computed from the numbers


def test_a_spread_reproduces_when_the_paper_lies_within_its_quartiles(chapter):
    seeds = np.arange(1.0, 9.0)  # quartiles 2.75 and 6.25
    assert ledger.record("inside", paper=PAPER, item="x", paper_value=3.0, ours=seeds,
                         section="s") == "reproduced"
    assert ledger.record("outside", paper=PAPER, item="x", paper_value=7.0, ours=seeds,
                         section="s") == "not reproduced"
    assert ledger.record("explained", paper=PAPER, item="x", paper_value=7.0, ours=seeds,
                         section="s", reason="our seeds", explain="why") == "differs"
    ours = _entries(chapter)["inside"]["ours"]
    # exact: the mean of the integers 1..8 is 4.5 in float64 on every machine (exact sums)
    assert ours["n"] == 8 and ours["median"] == pytest.approx(4.5) and ours["mean"] == 4.5


def test_an_exact_value_reproduces_within_its_tolerance(chapter):
    assert ledger.record("a", paper=PAPER, item="x", paper_value=1.27e-3, ours=1.2712e-3,
                         tol=5e-6, section="s") == "reproduced"
    assert ledger.record("b", paper=PAPER, item="x", paper_value=1.27e-3, ours=1.29e-3,
                         tol=5e-6, section="s") == "not reproduced"


def test_an_interval_of_the_paper_holds_our_value(chapter):
    assert ledger.record("a", paper=PAPER, item="x", paper_value=(18, 20), ours=19,
                         section="s") == "reproduced"
    assert ledger.record("b", paper=PAPER, item="x", paper_value=(18, 20), ours=[21, 22, 23],
                         section="s") == "not reproduced"
    # a spread meets an interval when its interquartile range [19.5, 21.5] overlaps it
    assert ledger.record("c", paper=PAPER, item="x", paper_value=(18, 20), ours=[19, 20, 21, 22],
                         section="s") == "reproduced"
    assert ledger.record("bound", paper=PAPER, item="x", paper_value=(None, 0.5), ours=0.7,
                         section="s") == "not reproduced"
    assert ledger.record("lower", paper=PAPER, item="x", paper_value=(0.5, None), ours=0.7,
                         section="s") == "reproduced"


@pytest.mark.parametrize(
    "change",
    [
        {"key": "Not A Key"},
        {"paper": "someone2020"},
        {"item": ""},
        {"paper_value": float("nan")},
        {"paper_value": (3.0, 1.0)},
        {"paper_value": (None, None)},
        {"ours": [1.0]},
        {"ours": [1.0, float("inf")]},
        {"ours": "3"},
        {"ours": np.ones((2, 2))},
        {"tol": None},
        {"tol": -1.0},
        {"section": "has space"},
        {"reason": "a reason without its link"},
    ],
)
def test_bad_records_get_a_value_error(chapter, change):
    arguments = dict(key="k", paper=PAPER, item="x", paper_value=1.0, ours=1.0, tol=0.1,
                     section="s")
    arguments.update(change)
    key = arguments.pop("key")
    with pytest.raises(ValueError):
        ledger.record(key, **arguments)


def test_an_entry_recorded_twice_is_an_error(chapter):
    ledger.record("k", paper=PAPER, item="x", paper_value=1.0, ours=1.0, tol=0.1, section="s")
    with pytest.raises(ValueError, match="twice"):
        ledger.record("k", paper=PAPER, item="x", paper_value=1.0, ours=1.0, tol=0.1, section="s")


def test_restarting_a_chapter_forgets_its_old_entries(chapter):
    ledger.record("k", paper=PAPER, item="x", paper_value=1.0, ours=1.0, tol=0.1, section="s")
    ledger.start("some-chapter")
    assert _entries(chapter) == {}


# ---------------------------------------------------------------------------------------------
# The check of a run against the committed ledger


def _run(directory: Path, seeds) -> dict:
    ledger.start("some-chapter")
    ledger.record("table-row", paper=PAPER, item="x", paper_value=0.2, ours=seeds, section="s")
    return ledger.collect(directory)


def test_perturbing_one_seed_fails_the_check_and_names_the_entry(chapter):
    seeds = np.random.default_rng(0).lognormal(size=32)
    committed = {c: d["entries"] for c, d in _run(chapter, seeds).items()}
    assert ledger.compare(_run(chapter, seeds), committed) == []
    perturbed = seeds.copy()
    perturbed[5] = np.random.default_rng(1).lognormal()  # another seed's value in one place
    problems = ledger.compare(_run(chapter, perturbed), committed)
    assert problems and all("'table-row'" in line for line in problems)


def test_a_changed_status_and_a_missing_entry_are_named(chapter):
    committed = {c: d["entries"] for c, d in _run(chapter, [0.1, 0.2, 0.3]).items()}
    problems = ledger.compare(_run(chapter, [0.5, 0.6, 0.7]), committed)
    assert any("changed status: reproduced -> not reproduced" in line for line in problems)
    ledger.start("some-chapter")
    problems = ledger.compare(ledger.collect(chapter), committed)
    assert problems == ["some-chapter: entry 'table-row' is committed but was not recorded"]


def test_the_command_line_check_fails_on_a_moved_number(chapter, tmp_path_factory):
    """tools/ledger.py check against a committed file whose number differs: exit status 1."""
    _run(chapter, [0.1, 0.2, 0.3])
    committed = tmp_path_factory.mktemp("committed") / "ledger.json"
    data = {c: d["entries"] for c, d in ledger.collect(chapter).items()}
    data["some-chapter"]["table-row"]["ours"]["mean"] *= 1.01
    committed.write_text(json.dumps(data))
    done = subprocess.run(
        [sys.executable, "tools/ledger.py", "check", "--committed", str(committed)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "'table-row': ours.mean moved" in done.stdout


# ---------------------------------------------------------------------------------------------
# The committed ledger


COMMITTED = ledger.load() if ledger.LEDGER_PATH.exists() else {}
ENTRIES = [(c, k, e) for c, entries in COMMITTED.items() for k, e in entries.items()]


def _labels(chapter: str) -> set[str]:
    return set(re.findall(r"^\((\S+)\)=\s*$", (BOOK / f"{chapter}.md").read_text(), re.M))


def test_the_committed_ledger_covers_the_five_papers():
    assert len(ENTRIES) >= 60
    assert {e["paper"] for _, _, e in ENTRIES} == set(ledger.PAPERS)


def test_every_row_of_tables_1_to_3_of_slutzky_et_al_is_an_entry():
    items = " | ".join(e["item"] for _, _, e in ENTRIES if e["paper"] == PAPER)
    for table, rows in (("Table 1", (1, 2, 3)), ("Table 3", (1, 2, 3))):
        for row in rows:
            for side in ("clean", "poisoned"):
                pattern = rf"{table}, row {row}\b[^|]*\b{side}"
                assert re.search(pattern, items), f"no entry for {table}, row {row}, {side}"
    assert "Table 2" in items


@pytest.mark.parametrize("chapter,key,entry", ENTRIES, ids=[f"{c}:{k}" for c, k, _ in ENTRIES])
def test_each_entry_links_to_labels_that_exist(chapter, key, entry):
    labels = _labels(chapter)
    assert entry["section"] in labels, f"{key}: no label ({entry['section']})= in {chapter}.md"
    if entry["status"] == "differs":
        assert entry["explain"] in labels, f"{key}: explanation label missing in {chapter}.md"


def test_the_page_renders_every_entry():
    text = ledger.page_markdown(COMMITTED)
    assert text.count("{doc}`") == len(ENTRIES)
    assert f"**{len(ENTRIES)} entries**" in text


# ---------------------------------------------------------------------------------------------
# Statements linked to the checks that verify them

CHAPTERS = sorted(p for p in BOOK.glob("*.md") if "kernelspec" in p.read_text()[:400])
_STATEMENT = re.compile(
    r"^(?P<fence>:{3,}|`{3,})\{prf:(?P<kind>\w+)\}[^\n]*\n(?P<body>.*?)^(?P=fence)\s*$", re.M | re.S
)


def _statements(text: str) -> dict[str, str]:
    """label -> body of every prf directive of a chapter."""
    found = {}
    for match in _STATEMENT.finditer(text):
        label = re.search(r"^:label:\s*(\S+)", match["body"], re.M)
        if label:
            found[label[1]] = match["body"]
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_check_target_precedes_a_check_cell_and_is_linked_from_its_statement(path):
    text = path.read_text()
    statements = _statements(text)
    for match in re.finditer(r"^\((check-(\S+))\)=\s*\n\s*```\{code-cell\}[^\n]*\n(.*?)```", text,
                             re.M | re.S):
        target, label, cell = match[1], match[2], match[3]
        body = re.sub(r"^---\n.*?\n---\n", "", cell, flags=re.S).lstrip()
        assert body.startswith("# Check"), f"{path.stem}: ({target})= is not before a check cell"
        assert label in statements, f"{path.stem}: ({target})= names no statement labelled {label}"
        assert f"<{target}>" in statements[label], f"{path.stem}: {label} does not link {target}"
    targets = re.findall(r"^\((check-\S+)\)=", text, re.M)
    linked = re.findall(r"<(check-[^>]+)>", text)
    assert set(linked) <= set(targets), f"{path.stem}: links to missing targets"


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_linked_unit_tests_exist(path):
    for name, file in re.findall(r"\[`(\w+)`\]\(" + re.escape(REPO_URL) + r"(tests/\w+\.py)\)",
                                 path.read_text()):
        assert name in _test_functions(ROOT / file), f"{path.stem}: {file} has no {name}"


def test_statements_verified_by_checks_are_linked_somewhere():
    """The book links at least one statement per Part II/III chapter with theorems to a check."""
    linked = sum(len(re.findall(r"^\(check-\S+\)=", p.read_text(), re.M)) for p in CHAPTERS)
    assert linked >= 10
