"""Tasks of the reproduce runs, and where they run: local processes or a Dask cluster.

A chapter's long run (``benchmarks/reproduce_<chapter>.py``) is a list of :class:`Task`: a
module-level function, its keyword arguments (the seed among them: a task never draws from a
stream another task touched) and a rough cost. A task returns its share of the chapter's results
as ``{path: value}``, where a path is where the value goes in the results dict (``("pair",
"drift_end", 3)``: key ``"pair"``, key ``"drift_end"``, list index 3). The results therefore
depend only on what each task computes, not on how many workers ran them or in which order: the
same command writes the same JSON on one core, on sixteen, or on a cluster.

Where tasks run (:func:`executor`) is chosen by the environment, through the standard
``concurrent.futures.Executor`` interface:

* ``BOOK_DASK_SCHEDULER=tcp://host:8786``: a running Dask ``distributed`` scheduler (started by
  hand with ``dask scheduler`` / ``dask worker``, or by ``dask-jobqueue`` on SLURM or PBS), through
  ``distributed.Client.get_executor()``; its dashboard shows the progress on the cluster;
* ``BOOK_DASK_SCHEDULER=local:N``: a local Dask cluster of N single-threaded worker processes;
* otherwise a ``ProcessPoolExecutor`` with ``BOOK_WORKERS`` processes (default: one per core).

:func:`run_tasks` shows tasks done, rate and time left (tqdm), and keeps every finished task's
output in a cache folder, so that a run that is stopped resumes without redoing finished tasks.
A cached output is keyed by the task's key, its arguments and the source of the chapter's
reproduce module, so that editing the module invalidates it (edits to ``lib`` do not: remove the
folder, or pass ``--fresh`` to ``benchmarks/reproduce.py``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import pickle
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Path_ = tuple  # a path into the results: str keys of dicts and int indices of lists


@dataclass(frozen=True)
class Task:
    """One independent unit of a reproduce run.

    ``key``: unique within the chapter, e.g. ``"seed=3"``; ``fn``: a module-level function (so that
    it pickles to another process or machine); ``kwargs``: its arguments, seed included; ``cost``:
    rough seconds on one core, used to start the longest tasks first and by the committed-results
    check to choose tasks it can afford to recompute; ``writes``: the paths of the results it
    returns (declared, so that a committed file can be checked task by task without running it).
    """

    key: str
    fn: Callable[..., dict]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    cost: float = 1.0
    writes: tuple = ()

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key or "\n" in self.key:
            raise ValueError(f"a task key is a non-empty one-line string, got {self.key!r}")
        if not callable(self.fn):
            raise ValueError(f"task {self.key!r}: fn must be callable, got {self.fn!r}")
        if not isinstance(self.cost, (int, float)) or not self.cost >= 0:
            raise ValueError(f"task {self.key!r}: cost must be >= 0 seconds, got {self.cost!r}")
        if not self.writes or not all(isinstance(p, tuple) and p for p in self.writes):
            raise ValueError(f"task {self.key!r}: writes must list the result paths it returns")

    def __call__(self) -> dict:
        return call(self)


def call(task: Task) -> dict:
    """Run one task in this process (one torch thread: workers share the machine's cores)."""
    import torch

    torch.set_num_threads(1)
    out = task.fn(**task.kwargs)
    if not isinstance(out, dict) or set(out) != set(task.writes):
        got = sorted(map(str, out)) if isinstance(out, dict) else type(out).__name__
        raise ValueError(f"task {task.key!r} must return the paths it declares "
                         f"{sorted(map(str, task.writes))}, got {got}")
    return {path: out[path] for path in task.writes}


def fingerprint(task: Task, source: str) -> str:
    """What a cached output is valid for: the task, its arguments and the module's source."""
    text = json.dumps([task.key, repr(sorted(task.kwargs.items())), source])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@contextlib.contextmanager
def executor(workers: int | None = None) -> Iterator[concurrent.futures.Executor]:
    """The executor chosen by the environment (module docstring); closed on exit."""
    address = os.environ.get("BOOK_DASK_SCHEDULER", "").strip()
    if address:
        from distributed import Client, LocalCluster

        if address.startswith("local:"):
            count = address.split(":", 1)[1]
            if not count.isdigit() or int(count) < 1:
                raise ValueError(f"BOOK_DASK_SCHEDULER=local:N needs N >= 1, got {address!r}")
            with LocalCluster(n_workers=int(count), threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                yield client.get_executor()
        else:
            with Client(address) as client:
                print(f"Dask cluster at {address}; dashboard: {client.dashboard_link}",
                      file=sys.stderr)
                yield client.get_executor()
        return
    if workers is None:
        text = os.environ.get("BOOK_WORKERS", "").strip()
        if text and (not text.isdigit() or int(text) < 1):
            raise ValueError(f"BOOK_WORKERS must be a whole number >= 1, got {text!r}")
        workers = int(text) if text else (os.cpu_count() or 1)
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        yield pool


def _load(path: Path):
    try:
        with path.open("rb") as handle:
            return pickle.load(handle)
    except (OSError, EOFError, pickle.UnpicklingError):
        return None  # a file cut short by a stop mid-write: recompute the task


def _store(path: Path, value) -> None:
    partial = path.with_suffix(".partial")
    with partial.open("wb") as handle:
        pickle.dump(value, handle)
    partial.replace(path)  # atomic: a stop never leaves half a file under the final name


def run_tasks(
    tasks: list[Task],
    pool: concurrent.futures.Executor,
    *,
    cache: Path | None = None,
    source: str = "",
    progress: bool = True,
    label: str = "tasks",
) -> dict[str, dict]:
    """Every task's output, ``{key: {path: value}}``, the longest tasks submitted first.

    ``cache``: a folder where each finished output is kept (and from which a resumed run takes
    the outputs of tasks already done); ``source``: the reproduce module's source, part of the
    cache key. ``progress``: a tqdm bar on stderr (tasks done, rate, time left).
    """
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise ValueError(f"task keys must be unique, got duplicates in {keys}")
    outputs: dict[str, dict] = {}
    files: dict[str, Path] = {}
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        for task in tasks:
            files[task.key] = cache / f"{fingerprint(task, source)}.pkl"
            if files[task.key].exists() and (value := _load(files[task.key])) is not None:
                outputs[task.key] = value
    todo = sorted((t for t in tasks if t.key not in outputs), key=lambda t: -t.cost)
    from tqdm import tqdm

    with tqdm(total=len(tasks), initial=len(outputs), desc=label, unit="task",
              disable=not progress, file=sys.stderr, smoothing=0.1) as bar:
        futures = {pool.submit(call, task): task for task in todo}
        for future in concurrent.futures.as_completed(futures):
            task = futures[future]
            value = future.result()
            outputs[task.key] = value
            if cache is not None:
                _store(files[task.key], value)
            bar.update(1)
    return {key: outputs[key] for key in keys}


_EMPTY = object()  # a list slot that no task has written yet


def place(results: dict, path: Path_, value) -> None:
    """Put ``value`` at ``path`` in ``results``, creating dicts and lists on the way."""
    node: Any = results
    for depth, step in enumerate(path):
        last = depth == len(path) - 1
        container = None if last else ([] if isinstance(path[depth + 1], int) else {})
        if isinstance(step, int) and isinstance(node, list):
            while len(node) <= step:
                node.append(_EMPTY)
            if last:
                if node[step] is not _EMPTY:
                    raise ValueError(f"two tasks write the results at {path}")
                node[step] = value
                return
            if node[step] is _EMPTY:
                node[step] = container
            node = node[step]
        elif isinstance(step, str) and isinstance(node, dict):
            if last:
                if step in node:
                    raise ValueError(f"two tasks write the results at {path}")
                node[step] = value
                return
            node = node.setdefault(step, container)
        else:
            raise ValueError(f"path {path} does not fit the results built so far at {step!r}")


def lookup(results, path: Path_):
    """The value at ``path`` in ``results``; a KeyError/IndexError names the path."""
    node = results
    for step in path:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            raise KeyError(f"the results have nothing at {path}") from None
    return node


def assemble(outputs: Mapping[str, dict]) -> dict:
    """The results dict that every task's ``{path: value}`` builds together (in task order)."""
    results: dict = {}
    for key in outputs:
        for path, value in outputs[key].items():
            place(results, path, value)
    _no_gaps(results, ())
    return results


def _no_gaps(node, path: tuple) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _no_gaps(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if v is _EMPTY:
                raise ValueError(f"no task wrote the results at {(*path, i)}")
            _no_gaps(v, (*path, i))
