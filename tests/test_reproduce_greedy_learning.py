"""The paper's draw of C in benchmarks/reproduce_greedy_learning.py (App. H.1.1: sorted |N|)."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import reproduce_greedy_learning as rg  # noqa: E402

from lib.poisoning import greedy_learning as gl  # noqa: E402


def test_paper_init_sorts_c_and_keeps_a_and_b():
    book = gl.greedy_init(gl.FIGURE3, 3)
    paper = rg.paper_init(gl.FIGURE3, 3)
    assert torch.equal(paper["a"], book["a"]) and torch.equal(paper["b"], book["b"])
    assert torch.equal(paper["c"], torch.sort(book["c"], descending=True).values)
    assert not torch.equal(paper["c"], book["c"])  # the book's c is unsorted for this seed
    fixed = rg.paper_init(gl.FIGURE4_SHORT, 3)  # B = C = 1 fixed: nothing to sort
    assert torch.equal(fixed["c"], torch.ones(gl.FIGURE4_SHORT.d, dtype=torch.float64))


def test_paper_draw_context_restores_the_book_draw():
    with rg._paper_draw():
        assert gl.greedy_init is rg.paper_init
    assert gl.greedy_init is rg._BOOK_INIT
    try:
        with rg._paper_draw():
            raise RuntimeError
    except RuntimeError:
        pass
    assert gl.greedy_init is rg._BOOK_INIT


def test_paper_draw_task_writes_its_declared_path():
    task = next(t for t in rg.tasks() if t.key == "paper draw special seed=0")
    out = task.fn(**task.kwargs)
    assert set(out) == set(task.writes)
    row = out[task.writes[0]]
    assert row["fit_step"] is not None and row["escape"] is not None and row["erank"] > 1


def test_authors_streams_special_task_writes_its_declared_path():
    task = next(t for t in rg.tasks() if t.key == "authors streams special seed=5000")
    out = task.fn(**task.kwargs)
    assert set(out) == set(task.writes) == {("authors_streams", "special", 0)}
    row = out[task.writes[0]]
    assert row["seed"] == 5000 and row["fit_step"] is not None and row["erank"] > 1


def test_authors_streams_rejects_an_unknown_arm():
    import pytest

    with pytest.raises(ValueError, match="clean"):
        rg.authors_streams(5000, key="poisoned")


def test_authors_streams_rejects_an_unknown_budget():
    import pytest

    with pytest.raises(ValueError, match="budget"):
        rg.authors_streams(5000, budget="forever")


def test_authors_budget_task_matches_the_cut_off_run_where_it_fits():
    """Seed 5000's clean run fits within the cut-off: taken on to the authors' budget it stops at
    the same step with the same final state (the same arithmetic up to the stop)."""
    import reproduce_greedy_learning_budget as rb

    task = next(t for t in rb.tasks() if t.key == "authors streams clean to their budget seed=5000")
    out = task.fn(**task.kwargs)
    assert set(out) == set(task.writes) == {("authors_streams_full", "clean", 0)}
    full = out[task.writes[0]]
    cut = rg.authors_streams(5000)[("authors_streams", "clean", 0)]
    assert full["fit_step"] == cut["fit_step"] is not None
    assert full["erank"] == cut["erank"] and full["steps_run"] < rb.AUTHORS_EPOCHS


def test_rate_matched_task_runs_the_clean_arm_at_the_special_rate():
    import pytest
    import reproduce_greedy_learning_rate as rr

    task = next(t for t in rr.tasks() if t.key == "rate matched Figure 4, κ = 6 seed=0")
    out = task.fn(**task.kwargs)
    assert set(out) == set(task.writes)
    row = out[task.writes[0]]
    assert row["seed"] == 0 and row["erank"] >= 1
    # the special arm's base rate is a tenth of the clean one's, so the clean run takes more steps
    # than at its own rate
    own = gl.train_greedy(gl.FIGURE4_SHORT, [0], special_scales=(None,), max_steps=100_000)
    assert row["steps_run"] > own.trajectory.info["steps_run"][0]
    with pytest.raises(ValueError, match="name"):
        rr.rate_matched("Figure 7, κ = 6", 0)
