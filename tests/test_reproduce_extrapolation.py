"""The larger-student task of benchmarks/reproduce_extrapolation.py (``sizes``), at a tiny size."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import reproduce_extrapolation as rx  # noqa: E402

from lib.ssm import extrapolation as ex  # noqa: E402


@pytest.fixture
def tiny(monkeypatch):
    """SIZES shrunk to two lengths, two seeds and a short flow (the protocol unchanged)."""
    small = {**rx.SIZES, "ds": [6], "ks": [3, 7], "seeds": [0, 1], "time": 1e4, "horizon": 20}
    monkeypatch.setattr(rx, "SIZES", small)
    return small


def test_sizes_task_writes_its_declared_paths_and_the_sweeps_values(tiny):
    out = rx.sizes(seed=1, d=6)
    assert set(out) == set(rx._paths(rx.sizes, 1, d=6))
    direct = ex.extrapolation_sweep(tiny["teacher"]["eigenvalues"], tiny["teacher"]["weights"],
                                    tiny["ks"], d=6, seeds=[1], init_scale=tiny["init_scale"],
                                    horizon=tiny["horizon"], time=tiny["time"], full_output=True)
    for name in ("errors", "losses", "max_abs_atom"):
        got = [out[("sizes", "6", name, k, 1)] for k in range(len(tiny["ks"]))]
        # the same computation by two calls; a tolerance all the same, for a platform whose ODE
        # solver rounds a separate call differently (far below any difference the text reads)
        np.testing.assert_allclose(got, direct[name][:, 0], rtol=1e-12, atol=1e-15)
    # the student's size reaches the sweep: another d gives other errors
    other = rx.sizes(seed=1, d=8)
    assert out[("sizes", "6", "errors", 0, 1)] != other[("sizes", "8", "errors", 0, 1)]


def test_sizes_tasks_cover_every_size_and_seed_once():
    keys = [t.key for t in rx.tasks() if t.key.startswith("sizes")]
    assert sorted(keys) == sorted(f"sizes d={d} seed={s}" for d in rx.SIZES["ds"]
                                  for s in rx.SIZES["seeds"])
    assert rx.SIZES["ds"] == [100, 200] and len(rx.SIZES["seeds"]) == 8
