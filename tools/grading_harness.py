"""Inside the sandbox: run a notebook's code cells, call its functions, report plain numbers.

This file is what the grader (tools/grading.py) starts in each submission's sandbox. It reads one
JSON job from stdin, runs the notebook's code cells in an IPython shell (no Jupyter kernel: the
cells run in this process), then evaluates the job's *probes*: a call of one of the notebook's
functions on given inputs, or the value of one of its variables. Every result is turned into plain
numbers (nested lists of floats) and written as a JSON line to the result stream (this process's
original stdout); what the notebook itself prints goes to stderr.

Nothing here decides a grade: the grader compares these numbers with the reference solution's in
its own process, which no code of the notebook can reach. A notebook can make this file report
anything it likes (it runs in the same process); what it reports is its answer, and the answer is
right only if it is the reference's value on inputs drawn from the course secret.

Job (stdin)::

    {"cells": [[index, source], ...], "cell_timeout": 60,
     "variants": [{"parameters": {...} | null,
                   "tests": [{"key": ..., "probes": [probe, ...]}]}]}

A probe is ``{"call": name, "args": [...], "kwargs": {...}}`` or ``{"value": name}``. Inputs are
JSON, with arrays as ``{"$array": nested lists, "dtype": "float64", "kind": "numpy" | "torch"}``
and tuples as ``{"$tuple": [...]}``.

Result lines: ``{"running": index}`` as each cell starts, ``{"cell": index, "status": "error" |
"timeout", "error": text}`` for each cell that failed, then per test ``{"variant": k, "key": ...,
"values": [...], "errors": [...]}``, and ``{"done": true}`` at the end.

Nothing here forbids anything: a notebook's process can undo whatever this process does. A
question whose hidden tests must be answered without the book's library (or without automatic
differentiation) has those tests run in a sandbox of their own in which ``lib`` (or ``torch``
and the other differentiation packages) is absent (tools/absent_package.py stands in for it), so
the library's shortcut is not there to take. Code the notebook brings along is: a derivative
written in NumPy (complex step, dual numbers), or a library's source pasted in. No sandbox can
remove that; it is in the notebook, for the instructor to read (book/course.md).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import types

PARAMETERS_MARK = "# PARAMETERS"


class CellTimeout(Exception):
    """Raised in a cell that runs longer than the job's cell_timeout."""


def _ring(signum, frame):
    raise CellTimeout("this cell ran too long and was stopped by the grader")


def _otter_stub() -> types.ModuleType:
    """A stand-in for ``otter``: the student notebook's ``grader.check`` cells do nothing here."""
    stub = types.ModuleType("otter")

    class Notebook:
        def __init__(self, *args, **kwargs):
            pass

        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    stub.Notebook = Notebook
    return stub


def decode(value):
    """A job's JSON input as the Python object the notebook's function receives."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "$tuple" in value:
            return tuple(decode(v) for v in value["$tuple"])
        if "$array" in value:
            import numpy as np

            array = np.array(value["$array"], dtype=value["dtype"])
            if value["kind"] == "torch":
                import torch

                return torch.from_numpy(array)
            return array
        return {k: decode(v) for k, v in value.items()}
    return value


def plain(value):
    """Nested lists of floats (or None), whatever the notebook returned; ValueError otherwise."""
    if value is None:
        return None
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu()
    import numpy as np

    array = np.asarray(value, dtype=np.float64)
    if array.dtype != np.float64 or array.size > 10**7:
        raise ValueError("not an array of numbers of reasonable size")
    return array.tolist()


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def run_cells(shell, cells, timeout: float, parameters, emit) -> None:
    """Run the code cells; report each that raised or timed out; set the parameters."""
    signal.signal(signal.SIGALRM, _ring)
    for index, source in cells:
        emit({"running": index})
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            outcome = shell.run_cell(source, store_history=False, silent=False)
        except BaseException as error:  # the timer can ring outside the cell's own code
            outcome = None
            failure = error
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if outcome is not None:
            failure = outcome.error_before_exec or outcome.error_in_exec
        if failure is not None:
            status = "timeout" if isinstance(failure, CellTimeout) else "error"
            emit({"cell": index, "status": status, "error": _error_text(failure)})
        if parameters and source.lstrip().startswith(PARAMETERS_MARK):
            shell.user_ns.update(decode(parameters))


def probe(shell, spec: dict, timeout: float):
    """One probe's plain value; raises whatever the notebook's function raised."""
    namespace = shell.user_ns
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        if "value" in spec:
            if spec["value"] not in namespace:
                raise NameError(f"the notebook defines no {spec['value']!r}")
            return plain(namespace[spec["value"]])
        function = namespace.get(spec["call"])
        if not callable(function):
            raise NameError(f"the notebook defines no function {spec['call']!r}")
        return plain(function(*decode(spec["args"]), **decode(spec["kwargs"])))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def run_tests(shell, variant: int, tests: list[dict], timeout: float, emit) -> None:
    for test in tests:
        values, errors = [], []
        for spec in test["probes"]:
            try:
                values.append(probe(shell, spec, timeout))
                errors.append(None)
            except BaseException as error:  # the student's function: anything may come
                values.append(None)
                errors.append(_error_text(error))
        emit({"variant": variant, "key": test["key"], "values": values, "errors": errors})


def _safe_float(text: str) -> float:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[text]


def main() -> int:
    job = json.loads(sys.stdin.read(), parse_constant=_safe_float)
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the notebook's own output goes to stderr, never into the results

    def emit(record: dict) -> None:
        results.write(json.dumps(record) + "\n")
        results.flush()

    sys.modules["otter"] = _otter_stub()
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    # No history database: sqlite locks its file, and the sandbox refuses file locks.
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(colors="nocolor", config=config)
    timeout = float(job["cell_timeout"])
    for number, variant in enumerate(job["variants"]):
        if number:
            shell.reset(new_session=False)
        run_cells(shell, job["cells"], timeout, variant.get("parameters"), emit)
        emit({"variant": number, "cells_done": True})
        run_tests(shell, number, variant["tests"], timeout, emit)
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:  # the notebook's own output, for the instructor's log (os._exit flushes nothing)
            stream.flush()
        except BaseException:  # a stream the notebook replaced or closed
            pass
    emit({"done": True})
    # Nothing after "done": the grader stops reading there and ends the sandbox; leave now, so
    # that no thread or exit handler of the notebook runs on (os._exit skips them).
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
