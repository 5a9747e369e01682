"""lib.book.results: committed result files of the long runs (written by
benchmarks/reproduce.py)."""

import json

import numpy as np
import pytest
import torch

from lib.book import results


@pytest.fixture
def tmp_results(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    return tmp_path


def test_round_trip_records_settings_versions_and_plain_numbers(tmp_results):
    path = results.save_results(
        "some-chapter",
        results={"median": np.float64(0.5), "errors": np.array([1.0, 2.0]), "t": torch.ones(2)},
        settings={"d": 10},
        seeds=[0, 1, 2],
        command="python benchmarks/reproduce.py some-chapter",
        seconds=1.25,
    )
    assert path == tmp_results / "some-chapter.json"
    record = results.load_results("some-chapter")
    assert record == json.loads(path.read_text())
    assert record["results"] == {"median": 0.5, "errors": [1.0, 2.0], "t": [1.0, 1.0]}
    assert record["seeds"] == [0, 1, 2] and record["settings"] == {"d": 10}
    assert {"python", "numpy", "scipy", "torch"} <= set(record["environment"])
    assert record["date"].endswith("UTC") and record["seconds"] == 1.2


@pytest.mark.parametrize("chapter", ["", "Bad Name", "../x", 3, "a_b"])
def test_bad_chapter_names_are_rejected(chapter, tmp_results):
    with pytest.raises(ValueError, match="chapter"):
        results.results_path(chapter)


def test_missing_file_names_the_command(tmp_results):
    with pytest.raises(ValueError, match="make reproduce"):
        results.load_results("nothing-here")


@pytest.mark.parametrize("bad", [float("nan"), object(), {"x": float("inf")}])
def test_non_numbers_and_non_finite_values_are_rejected(bad, tmp_results):
    with pytest.raises(ValueError):
        results.save_results("c", results={"x": bad}, settings={}, seeds=[], command="x", seconds=0)


def test_glue_passes_plain_python_values(monkeypatch):
    import myst_nb

    glued = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display: glued.update({name: value}))
    results.glue("x", np.float64(0.25))
    results.glue("n", np.int64(3))
    results.glue("t", torch.tensor(2.0, dtype=torch.float64))
    results.glue("s", "inside")
    results.glue("missing", np.nan)
    assert glued["x"] == 0.25 and type(glued["x"]) is float
    assert glued["n"] == 3 and type(glued["n"]) is int
    assert glued["t"] == 2.0 and type(glued["t"]) is float
    assert glued["s"] == "inside" and np.isnan(glued["missing"])
    with pytest.raises(ValueError):
        results.glue("v", np.array([1.0, 2.0]))
    with pytest.raises(ValueError):
        results.glue("", 1.0)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("seconds", -1.0, "seconds must be a finite number >= 0"),  # a negative duration
        ("seconds", float("nan"), "seconds must be a finite number"),
        ("seconds", None, "seconds must be a real number"),
        ("seeds", None, "seeds must be a list"),
        ("settings", [1], "settings must be a dict"),
    ],
)
def test_save_results_checks_what_it_records(field, value, match, tmp_results):
    record = {"results": {}, "settings": {}, "seeds": [0], "command": "make", "seconds": 1.0}
    with pytest.raises(ValueError, match=match):
        results.save_results("c", **{**record, field: value})
    assert not (tmp_results / "c.json").exists()


def test_a_corrupt_results_file_is_named(tmp_results):
    (tmp_results / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.json is not a results file"):
        results.load_results("broken")


def test_the_machine_is_told_by_its_features_as_well_as_its_model():
    from lib.book import machine

    here = machine.environment()
    assert set(machine.SAME_MACHINE) <= set(here)
    target, widest = here["cpu_features"].rsplit(", ", 1)
    assert target and widest in {"avx512", "avx2", "avx", "sse2", "unknown vector set"}
    assert machine.same_machine(here)
    # the same model name with other features, or a record from before features were recorded
    assert not machine.same_machine({**here, "cpu_features": "another target, avx512"})
    assert not machine.same_machine({k: v for k, v in here.items() if k != "cpu_features"})
    # the same model, features and libraries on another host (or before the host was recorded)
    assert not machine.same_machine({**here, "host": "another host"})
    assert not machine.same_machine({k: v for k, v in here.items() if k != "host"})
    assert machine.host() == machine.host() != ""  # stable within a boot


@pytest.mark.parametrize("recorded", [None, "AMD EPYC", ["cpu"]])
def test_same_machine_rejects_what_is_not_an_environment(recorded):
    from lib.book import machine

    with pytest.raises(ValueError, match="environment"):
        machine.same_machine(recorded)
