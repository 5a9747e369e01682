"""benchmarks/reproduce.py and benchmarks/tasks.py: one executor for every long run (local
processes or a Dask cluster), resumable runs, and committed results that cannot rot."""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import reproduce  # noqa: E402
import tasks as taskrun  # noqa: E402

from lib.book import results as lib_results  # noqa: E402
from lib.book.results import _plain  # noqa: E402


def _text(outputs: dict) -> str:
    """Task outputs as the results file would hold them."""
    return json.dumps(_plain(taskrun.assemble(outputs)), sort_keys=False)


def _small_set() -> list[taskrun.Task]:
    """Four cheap real tasks: greedy-learning's runs with special sequences (about a second each
    on one core: they fit quickly, then take the authors' 5000 extra steps)."""
    mod = reproduce.module("greedy-learning")
    chosen = [t for t in mod.tasks() if t.key.startswith("ours special")]
    return chosen[:4]


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A local executor that counts the tasks submitted to it."""

    def __init__(self):
        super().__init__(max_workers=2)
        self.submitted = []

    def submit(self, fn, /, *args, **kwargs):
        self.submitted.append(args[0].key)
        return super().submit(fn, *args, **kwargs)


def test_a_dask_cluster_of_two_workers_writes_the_json_of_a_local_run(monkeypatch):
    pytest.importorskip("distributed")
    chosen = _small_set()
    monkeypatch.delenv("BOOK_DASK_SCHEDULER", raising=False)
    with taskrun.executor(workers=1) as pool:
        local = taskrun.run_tasks(chosen, pool, progress=False)
    monkeypatch.setenv("BOOK_DASK_SCHEDULER", "local:2")
    with taskrun.executor() as pool:
        assert type(pool).__module__.startswith("distributed")
        clustered = taskrun.run_tasks(list(reversed(chosen)), pool, progress=False)
    assert list(clustered) == [t.key for t in reversed(chosen)]
    assert _text({k: local[k] for k in local}) == _text({k: clustered[k] for k in local})


def _fails_once(marker: str, value: int) -> dict:
    """A task that crashes while ``marker`` exists (a run stopped half way)."""
    if value == 2 and os.path.exists(marker):
        time.sleep(1.0)  # the other tasks finish first
        raise KeyboardInterrupt("stopped")
    return {("values", value): value * value}


def test_a_stopped_run_resumes_without_redoing_finished_tasks(tmp_path):
    marker = tmp_path / "stop"
    marker.touch()
    chosen = [taskrun.Task(f"v={v}", _fails_once, {"marker": str(marker), "value": v},
                           cost=4 - v, writes=(("values", v),)) for v in range(4)]
    cache = tmp_path / "cache"
    with CountingExecutor() as pool, pytest.raises(KeyboardInterrupt):
        taskrun.run_tasks(chosen, pool, cache=cache, source="s", progress=False)
    finished = {p.name for p in cache.glob("*.pkl")}
    assert 1 <= len(finished) <= 3  # the tasks done before the stop are kept
    marker.unlink()
    with CountingExecutor() as pool:
        outputs = taskrun.run_tasks(chosen, pool, cache=cache, source="s", progress=False)
    assert len(pool.submitted) == 4 - len(finished)  # only the unfinished ones ran again
    assert "v=2" in pool.submitted
    assert taskrun.assemble(outputs) == {"values": [0, 1, 4, 9]}
    # an edited module (other source) does not reuse the cached outputs
    with CountingExecutor() as pool:
        taskrun.run_tasks(chosen, pool, cache=cache, source="edited", progress=False)
    assert len(pool.submitted) == 4


def test_the_real_small_set_resumes_with_the_same_json(tmp_path):
    chosen = _small_set()
    cache = tmp_path / "cache"
    with CountingExecutor() as pool:
        first_half = taskrun.run_tasks(chosen[:2], pool, cache=cache, source="x", progress=False)
    with CountingExecutor() as pool:
        resumed = taskrun.run_tasks(chosen, pool, cache=cache, source="x", progress=False)
    assert sorted(pool.submitted) == sorted(t.key for t in chosen[2:])
    with CountingExecutor() as pool:
        whole = taskrun.run_tasks(chosen, pool, progress=False)
    assert _text(resumed) == _text(whole)
    assert all(json.dumps(_plain(list(first_half[k].values())))
               == json.dumps(_plain(list(whole[k].values()))) for k in first_half)


def test_place_and_assemble_reject_overlaps_and_gaps():
    results: dict = {}
    taskrun.place(results, ("a", 1), 5)
    with pytest.raises(ValueError, match="two tasks"):
        taskrun.place(results, ("a", 1), 6)
    with pytest.raises(ValueError, match="no task wrote the results at \\('a', 0\\)"):
        taskrun._no_gaps(results, ())
    with pytest.raises(ValueError, match="does not fit"):
        taskrun.place(results, ("a", "b"), 1)
    built = taskrun.assemble({"t": {("a", 0): None, ("a", 1): [1, None]}})
    assert built == {"a": [None, [1, None]]}  # a None a task wrote is a value, not a gap


@pytest.mark.parametrize("kwargs, match", [
    ({"key": "", "writes": (("a",),)}, "key"),
    ({"key": "k\nforged", "writes": (("a",),)}, "key"),
    ({"key": "k", "writes": ()}, "writes"),
    ({"key": "k", "writes": (("a",),), "cost": -1.0}, "cost"),
    ({"key": "k", "writes": (("a",),), "cost": float("nan")}, "cost"),
])
def test_bad_tasks_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        taskrun.Task(fn=_fails_once, **kwargs)


def test_a_task_must_return_the_paths_it_declares():
    task = taskrun.Task("k", _fails_once, {"marker": "/nonexistent", "value": 1}, 0.0,
                        (("values", 2),))
    with pytest.raises(ValueError, match="must return the paths it declares"):
        taskrun.call(task)


@pytest.mark.parametrize("value", ["local:0", "local:x", "local:"])
def test_bad_cluster_addresses_are_refused(monkeypatch, value):
    monkeypatch.setenv("BOOK_DASK_SCHEDULER", value)
    with pytest.raises(ValueError, match="local:N"), taskrun.executor():
        pass


def test_bad_worker_counts_are_refused(monkeypatch):
    monkeypatch.delenv("BOOK_DASK_SCHEDULER", raising=False)
    monkeypatch.setenv("BOOK_WORKERS", "0")
    with pytest.raises(ValueError, match="BOOK_WORKERS"), taskrun.executor():
        pass


@pytest.fixture
def results_copy(tmp_path, monkeypatch):
    """The committed results files, copied where a test may edit them."""
    folder = tmp_path / "results"
    shutil.copytree(lib_results.RESULTS_DIR, folder)
    monkeypatch.setattr(lib_results, "RESULTS_DIR", folder)
    return folder


def test_on_another_machine_a_moved_task_is_reported_not_failed(results_copy, monkeypatch,
                                                                capsys):
    """Recomputed elsewhere, a run sensitive to rounding need not agree: reported, not failed."""
    mod = reproduce.module("greedy-learning")
    path = results_copy / "greedy-learning.json"
    record = json.loads(path.read_text())
    record["environment"] = {**lib_results.environment(), "cpu": "another CPU"}
    path.write_text(json.dumps(record, indent=1))
    monkeypatch.setattr(mod, "EXTRA", {None: 20_000, 1.0: 4_000})
    assert reproduce.check_file("greedy-learning", sample=1, budget=2.0,
                                rng=_Choose("ours special seed=3")) == []
    assert "another machine: reported, not failed" in capsys.readouterr().out


def test_every_committed_file_follows_from_its_tasks(results_copy):
    """Digests and derived numbers of every committed file (no recomputation here)."""
    rng = random.Random(0)
    for name in reproduce.files():
        if name == "poisoning-real-data" and reproduce.files()[name][0] is None:
            continue
        assert reproduce.check_file(name, sample=0, budget=0.0, rng=rng) == [], name


def test_a_number_edited_by_hand_names_its_file_and_task(results_copy):
    path = results_copy / "greedy-learning.json"
    record = json.loads(path.read_text())
    record["results"]["ours"]["clean"][5]["final_loss"] *= 1.001
    path.write_text(json.dumps(record, indent=1))
    problems = reproduce.check_file("greedy-learning", sample=0, budget=0.0,
                                    rng=random.Random(0))
    assert len(problems) == 1
    assert "greedy-learning.json" in problems[0] and "task ours clean seed=5" in problems[0]


def test_the_check_of_a_chapter_covers_every_file_its_module_writes(results_copy, capsys):
    """A chapter's extra file (recurrent-students' probe) is checked with the chapter: a number
    edited by hand in it fails `--check recurrent-students`."""
    assert set(reproduce.files()) == {n for c in reproduce.chapters()
                                      for n in reproduce.files_of(c)}
    assert "recurrent-students-probe" in reproduce.files_of("recurrent-students")
    path = results_copy / "recurrent-students-probe.json"
    record = json.loads(path.read_text())
    digests = {json.dumps(t) for t in record.get("tasks", {}).values()}
    assert digests, "the probe file records its tasks' digests"

    def scale(node):  # every float of the results, times 1.001
        if isinstance(node, dict):
            return {k: scale(v) for k, v in node.items()}
        if isinstance(node, list):
            return [scale(v) for v in node]
        return node * 1.001 if isinstance(node, float) and node != 0 else node

    record["results"] = scale(record["results"])
    path.write_text(json.dumps(record, indent=1))
    assert reproduce.check(["recurrent-students"], sample=0, budget=0.0, seed=0) == 1
    assert "recurrent-students-probe.json" in capsys.readouterr().out


def test_a_recomputed_task_that_moved_names_its_file_and_task(results_copy, monkeypatch):
    """A cheap task is recomputed; the code now computes something else (a changed constant)."""
    mod = reproduce.module("greedy-learning")
    chosen = "ours special seed=3"
    path = results_copy / "greedy-learning.json"  # as if written on this machine: held to 1e-4
    record = json.loads(path.read_text())
    record["environment"] = lib_results.environment()
    path.write_text(json.dumps(record, indent=1))
    assert reproduce.check_file("greedy-learning", sample=1, budget=2.0,
                                rng=_Choose(chosen)) == []
    monkeypatch.setattr(mod, "EXTRA", {None: 20_000, 1.0: 4_000})  # code edited after the run
    problems = reproduce.check_file("greedy-learning", sample=1, budget=2.0, rng=_Choose(chosen))
    assert len(problems) == 1 and f"task {chosen}: recomputed" in problems[0]
    assert "no longer follows from the code" in problems[0]


class _Choose(random.Random):
    """A random stream whose sample is the task the test names."""

    def __init__(self, key: str):
        super().__init__(0)
        self.key = key

    def sample(self, population, k):
        assert self.key in population
        return [self.key]


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device here: the S4D victim's BOOK_DEVICE=cuda path is "
                           "checked only on a machine with a GPU")
def test_the_s4d_victim_trains_on_the_gpu_as_on_the_cpu(monkeypatch):
    """BOOK_DEVICE=cuda: the victim trains on the GPU and returns CPU tensors close to the CPU
    run's (float32 on both; cuDNN/cuBLAS sum in another order, so 1e-3 relative after a few
    steps, far below the O(1) logit gaps that decisions rest on)."""
    from lib.book import data
    from lib.ssm import s4d

    x, y = data.digits(64)
    config = s4d.S4DConfig(channels=4, state=4, layers=1)
    train = s4d.TrainConfig(epochs=2, batch=32)
    monkeypatch.setenv("BOOK_DEVICE", "cpu")
    cpu = s4d.train(config, x, y, [0, 1], train)
    monkeypatch.setenv("BOOK_DEVICE", "cuda")
    assert s4d.compute_device().type == "cuda"
    gpu = s4d.train(config, x, y, [0, 1], train)
    for name in cpu:
        assert gpu[name].device.type == "cpu"
        torch.testing.assert_close(gpu[name], cpu[name], rtol=1e-3, atol=1e-4)
    assert torch.equal(s4d.predict(gpu, x), s4d.predict(cpu, x))
