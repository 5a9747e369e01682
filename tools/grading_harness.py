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
                   "tests": [{"key": ..., "forbid": [...], "probes": [probe, ...]}]}]}

A probe is ``{"call": name, "args": [...], "kwargs": {...}}`` or ``{"value": name}``. Inputs are
JSON, with arrays as ``{"$array": nested lists, "dtype": "float64", "kind": "numpy" | "torch"}``
and tuples as ``{"$tuple": [...]}``.

Result lines: ``{"running": index}`` as each cell starts, ``{"cell": index, "status": "error" |
"timeout", "error": text}`` for each cell that failed, then per test ``{"variant": k, "key": ...,
"values": [...], "errors": [...]}``, and ``{"done": true}`` at the end.

A *forbidden* name (``"lib.ssm.impulse_response"``, or ``"torch.autograd"`` for automatic
differentiation in all its public forms) raises while that test's probes run, under whatever name
the notebook imported it (the function's code is swapped).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import signal
import sys
import types

PARAMETERS_MARK = "# PARAMETERS"
FORBIDDEN_MESSAGE = "not allowed in this question: {name} (the grader disabled it)"
AUTOGRAD_FUNCTIONS = (
    "torch.autograd.grad",
    "torch.autograd.backward",
    "torch.autograd.forward_ad.make_dual",
    "torch.autograd.functional.jacobian",
    "torch.autograd.functional.hessian",
    "torch.autograd.functional.vjp",
    "torch.autograd.functional.jvp",
    "torch.autograd.functional.hvp",
    "torch.autograd.functional.vhp",
    "torch.func.grad",
    "torch.func.grad_and_value",
    "torch.func.vjp",
    "torch.func.jvp",
    "torch.func.jacrev",
    "torch.func.jacfwd",
    "torch.func.hessian",
    "torch.func.linearize",
    "torch.Tensor.backward",
)


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


def _resolve(dotted: str):
    """(owner, attribute name, object) for ``module.attr`` or ``module.Class.attr``."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name)
        return owner, parts[-1], getattr(owner, parts[-1])
    raise ImportError(dotted)


def _raiser_code(function: types.FunctionType, name: str) -> types.CodeType:
    """A code object that raises, with the same free variables as ``function`` (so it can be
    swapped in): every name the function goes by then raises."""
    message = FORBIDDEN_MESSAGE.format(name=name)
    free = function.__code__.co_freevars
    lines = ["def _outer():"]
    lines += [f"    {v} = None" for v in free]
    lines += ["    def _forbidden(*args, **kwargs):"]
    lines += [f"        {v}" for v in free]
    lines += [f"        raise RuntimeError({message!r})", "    return _forbidden"]
    namespace: dict = {}
    exec("\n".join(lines), namespace)
    return namespace["_outer"]().__code__


class _Engine:
    """Replaces torch's autograd engine while automatic differentiation is forbidden."""

    def __getattr__(self, name):
        raise RuntimeError(FORBIDDEN_MESSAGE.format(name="torch.autograd"))


class Forbidden:
    """While active, each named function raises, under any name it was imported as."""

    def __init__(self, names: list[str]):
        self.names = []
        for name in names:
            self.names += list(AUTOGRAD_FUNCTIONS) if name == "torch.autograd" else [name]
        self.engine = "torch.autograd" in names
        self.undo: list = []

    def __enter__(self):
        for name in self.names:
            try:
                owner, attr, target = _resolve(name)
            except (ImportError, AttributeError):
                continue
            function = getattr(target, "__func__", target)
            if isinstance(function, types.FunctionType):
                original = function.__code__
                function.__code__ = _raiser_code(function, name)
                self.undo.append(lambda f=function, c=original: setattr(f, "__code__", c))
            else:  # a builtin: replace it in every module that holds it
                self._replace_everywhere(target, name)
        if self.engine:
            from torch.autograd.variable import Variable

            engine = Variable._execution_engine
            Variable._execution_engine = _Engine()
            self.undo.append(lambda: setattr(Variable, "_execution_engine", engine))
        return self

    def _replace_everywhere(self, target, name: str) -> None:
        def refuse(*args, **kwargs):
            raise RuntimeError(FORBIDDEN_MESSAGE.format(name=name))

        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for key, value in list(namespace.items()):
                if value is target:
                    namespace[key] = refuse
                    self.undo.append(lambda n=namespace, k=key, v=value: n.__setitem__(k, v))

    def __exit__(self, *exc):
        for step in reversed(self.undo):
            step()
        self.undo.clear()


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
        with Forbidden(test.get("forbid", [])):
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

    shell = InteractiveShell.instance(colors="nocolor")
    timeout = float(job["cell_timeout"])
    for number, variant in enumerate(job["variants"]):
        if number:
            shell.reset(new_session=False)
        run_cells(shell, job["cells"], timeout, variant.get("parameters"), emit)
        emit({"variant": number, "cells_done": True})
        run_tests(shell, number, variant["tests"], timeout, emit)
    emit({"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
