"""benchmarks/reproduce_dynamical_characterization.py: Figure 2 (left) continued past the stop."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import reproduce_dynamical_characterization as rd  # noqa: E402

from lib.poisoning import greedy_learning as gl  # noqa: E402


def test_continued_task_writes_its_declared_paths_and_runs_past_the_authors_stop():
    task = rd.tasks()[0]
    out = task.fn(**task.kwargs)
    assert set(out) == set(task.writes)
    for path in task.writes:
        row = out[path]
        # both arms reach the stopping loss, then run EXTRA_STEPS more (not the authors' 5 000)
        assert row["fit_step"] is not None
        assert row["steps_run"] == row["fit_step"] + rd.EXTRA_STEPS > gl.FIGURE2.extra_steps
        assert row["final_loss"] <= gl.FIGURE2.stop_loss and row["gen40"] >= 0


def test_continued_reaches_the_stop_where_the_authors_protocol_does():
    # up to the stopping loss the run is the chapter's (the same compiled arithmetic)
    out = rd.continued(0)
    here = gl.train_greedy(gl.FIGURE2, [0], streams="authors")
    for (_, arm, _), row in out.items():
        r = here.index(0, None if arm == "clean" else 1.0)
        assert row["fit_step"] == here.trajectory.info["converged_step"][r]


def test_continued_rejects_a_seed_outside_the_chapters():
    with pytest.raises(ValueError, match="seed"):
        rd.continued(64)
