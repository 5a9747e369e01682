"""Grade a folder of notebooks: sandboxed runs, verdicts computed here, grades written last.

How one folder is graded (``grade_folder``):

1. The assignment's source, ``book/assignments/<name>.md``, is read here. Each question's
   ``# GRADING`` cells (never given to students) define its tests: a *public* test has the inputs
   of the student notebook's own check; a *hidden* test draws its inputs from a random generator
   seeded by the course secret (:func:`seed`), so the inputs change with ``COURSE_SECRET``.
2. Each submission's code cells run in a sandbox of their own (tools/sandbox.py), in a process
   that runs tools/grading_harness.py: the notebook's functions are called on the tests' inputs
   and its variables read, and the results come back as plain numbers (JSON). The reference
   solution (the source's own code) runs the same way, in a sandbox too.
3. Here, in the grader's process, each number is compared with the reference's
   (:func:`compare`): floats parsed from JSON, not objects of the notebook, so nothing the notebook
   did (a patched test helper, a float that equals everything) takes part in the verdict.
4. When every sandbox is gone, this process writes ``grades.csv``, a feedback file per submission
   (public tests' results, hidden tests' names and pass/fail, the cells that failed) and an
   instructor's log per submission; the notebook's own output appears only in that log, with
   control characters removed.

The test language of a ``# GRADING`` cell (executed here, with NumPy as ``np``)::

    @public
    def diagonal():
        return [call("flow_point", np.diag([1.0, 4.0]), np.ones(2), 0.5)]

    @hidden(forbid=["lib.gradient_flow"])
    def full_matrices(rng):
        H = rng.normal(size=(4, 4))
        return [call("flow_point", H + H.T, rng.normal(size=4), 1.7, rtol=1e-9)]

``call(name, *args, **kwargs)`` calls the notebook's function ``name``; ``value(name)`` reads its
variable; ``tensor(x)`` hands an array to the notebook as a float64 (or int64) torch tensor;
``rtol``/``atol`` (defaults: :data:`RTOL`, :data:`ATOL`) or ``exact=True`` say how close to the
reference's result the answer must be. ``forbid`` names what the test's answer must be computed
without: a test that forbids anything runs in a sandbox of its own in which the book's ``lib`` is
absent (every name of it raises when called, tools/absent_package.py), and with
``"torch.autograd"`` also ``torch`` and the packages that differentiate (:data:`AUTODIFF`). The
shortcut is not blocked in the notebook's process, which could undo any block: the package is
not there. (Differentiation the notebook writes itself, a complex step or dual numbers in NumPy,
cannot be made absent: the instructor reads the code.) A sandbox runs only beside sandboxes
that lack the same packages (:class:`_Turns`), so that no colluding submission graded at the
same time can compute for it what it lacks.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import csv
import hashlib
import hmac
import io
import json
import math
import os
import re
import reprlib
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sandbox  # noqa: E402  (tools/ is not a package)

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "book" / "assignments"
HARNESS = Path(__file__).resolve().parent / "grading_harness.py"
ABSENT_PACKAGE = Path(__file__).resolve().parent / "absent_package.py"
# What a test that forbids automatic differentiation runs without: torch (and functorch), sympy
# (symbolic derivatives), mpmath, scipy.differentiate and scipy.optimize._numdiff (numerical
# derivatives: to any precision, or to rounding by the complex step of approx_derivative, which
# scipy.optimize.approx_fprime, check_grad and minimize's numerical gradients call); the book's
# lib goes too (it is built on torch). Other differentiation packages (jax, autograd,
# numdifftools) are not installed in the book's environment; a stand-in for one that is not
# installed is mounted nowhere.
AUTODIFF = (
    "torch",
    "functorch",
    "sympy",
    "mpmath",
    "scipy.differentiate",
    "scipy.optimize._numdiff",
)
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")  # as in a roster
# Bytes of one sandbox's result stream that are read (the largest record of any assignment,
# saddle-to-saddle's, is 75 kB of JSON): a record cut at the cap is dropped as malformed.
RESULT_CAP = 2**20
DONE = b'{"done": true}\n'  # the harness's last record: the grader stops reading there

# Default closeness of an answer to the reference: both compute the same closed form or run the
# same recipe in float64, so they differ by rounding, a few ulps per operation: 1e-9 relative
# leaves room for a different but equivalent order of operations (sums, solves) over thousands
# of operations, and 1e-12 absolute for results that are zero up to rounding.
RTOL = 1e-9
ATOL = 1e-12
MAX_NOTEBOOK_BYTES = 20 * 2**20
DEFAULT_SECRET = "public-default"  # used when no COURSE_SECRET is given (anyone can recompute it)
GRADING_MARK = "# GRADING"
ASSIGNMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a file name in SOURCES, no path
PARAMETERS_MARK = "# PARAMETERS"


# ----------------------------------------------------------------------------------------------
# The secret


def derive(secret: str, *parts: str) -> bytes:
    """HMAC-SHA256 of ``parts`` under the course secret: what a student cannot compute."""
    return hmac.new(secret.encode(), "\x1f".join(parts).encode(), hashlib.sha256).digest()


def seed(secret: str, assignment: str, question: str, test: str) -> int:
    """The seed of one hidden test's inputs, from the course secret."""
    return int.from_bytes(derive(secret, assignment, question, test)[:8], "big")


def fingerprint(secret: str) -> str:
    """A short public digest of the secret: tells whether two runs used the same one."""
    return derive(secret, "fingerprint").hex()[:16]


# ----------------------------------------------------------------------------------------------
# Tests, as the # GRADING cells define them


@dataclass
class Probe:
    """One number (array) the notebook must produce: a call of its function, or a variable."""

    spec: dict
    rtol: float = RTOL
    atol: float = ATOL
    exact: bool = False
    shown: str = ""  # how the public feedback names it


@dataclass
class Test:
    question: str
    name: str
    hidden: bool
    make: object  # () -> probes (public) or (rng) -> probes (hidden)
    forbid: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.question}/{self.name}"

    @property
    def absent(self) -> tuple[str, ...]:
        """The packages absent from the sandbox in which this test runs (see the module doc)."""
        if not self.forbid:
            return ()
        autodiff = any(name.split(".")[0] in AUTODIFF for name in self.forbid)
        return ("lib", *AUTODIFF) if autodiff else ("lib",)


@dataclass
class Question:
    name: str
    points: float
    manual: bool = False
    all_or_nothing: bool = True
    tests: list[Test] = field(default_factory=list)


@dataclass
class Parameter:
    """A per-student parameter, ``NAME = default  # rule(arguments)``.

    Rules: ``uniform(low, high[, digits])``, ``integers(low, high)``, ``choice(value, ...)``.
    """

    name: str
    default: object
    rule: str
    arguments: list


@dataclass
class Assignment:
    name: str
    source: Path
    questions: dict[str, Question]
    solution_cells: list[tuple[int, str]]
    parameters: list[Parameter]

    @property
    def auto(self) -> dict[str, float]:
        return {q.name: q.points for q in self.questions.values() if not q.manual}

    @property
    def manual(self) -> dict[str, float]:
        return {q.name: q.points for q in self.questions.values() if q.manual}


def _array_spec(x, kind: str) -> dict:
    array = np.asarray(x)
    dtype = "int64" if np.issubdtype(array.dtype, np.integer) else "float64"
    return {"$array": array.astype(dtype).tolist(), "dtype": dtype, "kind": kind}


class _Tensor:
    def __init__(self, array):
        self.array = np.asarray(array)


def encode(value):
    """A test's input as JSON for the harness (see tools/grading_harness.py)."""
    if isinstance(value, _Tensor):
        return _array_spec(value.array, "torch")
    if isinstance(value, np.ndarray):
        return _array_spec(value, "numpy")
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"a test input must be numbers, arrays or tensor(...), not {type(value)}")


_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = 8
_SHORT.maxlevel = 4
_SHORT.maxstring = _SHORT.maxother = 40


def _short(value) -> str:
    """At most 80 characters of ``value`` (a list of millions of floats is not written out)."""
    if isinstance(value, _Tensor | np.ndarray):
        value = np.asarray(getattr(value, "array", value)).tolist()
    try:
        text = _SHORT.repr(value)
    except RecursionError:  # a forged answer nested ~1000 deep
        text = "(nested too deep to show)"
    text = re.sub(r"\s+", " ", text)
    return text if len(text) < 80 else text[:77] + "..."


def _language(registry: list[Test], current: dict) -> dict:
    """The names a # GRADING cell sees."""

    def call(name, *args, rtol=RTOL, atol=ATOL, exact=False, **kwargs):
        shown = ", ".join([*map(_short, args), *(f"{k}={_short(v)}" for k, v in kwargs.items())])
        shown = f"{name}({shown})"
        spec = {"call": name, "args": encode(list(args)), "kwargs": encode(kwargs)}
        return Probe(spec, rtol, atol, exact, shown)

    def value(name, rtol=RTOL, atol=ATOL, exact=False):
        return Probe({"value": name}, rtol, atol, exact, name)

    def register(function, hidden: bool, forbid) -> object:
        registry.append(
            Test(current["question"], function.__name__, hidden, function, list(forbid))
        )
        return function

    def public(function=None, *, forbid=()):
        if function is None:
            return lambda f: register(f, False, forbid)
        return register(function, False, forbid)

    def hidden(function=None, *, forbid=()):
        if function is None:
            return lambda f: register(f, True, forbid)
        return register(function, True, forbid)

    return {
        "np": np,
        "math": math,
        "call": call,
        "value": value,
        "tensor": _Tensor,
        "public": public,
        "hidden": hidden,
    }


_RULE = re.compile(r"^(\w+)\s*=\s*(.+?)\s*#\s*(uniform|integers|choice)\((.*)\)\s*$")


def parse_parameters(source: str) -> list[Parameter]:
    """The per-student parameters of a ``# PARAMETERS`` cell, one ``NAME = default  # rule``."""
    import ast

    found = []
    for line in source.splitlines()[1:]:
        match = _RULE.match(line.strip())
        if match:
            name, default, rule, arguments = match.groups()
            found.append(
                Parameter(
                    name, ast.literal_eval(default), rule, list(ast.literal_eval(f"[{arguments}]"))
                )
            )
    return found


def draw(parameters: list[Parameter], secret: str, assignment: str, student: str | None) -> dict:
    """A student's parameter values from the secret and their id (the defaults without an id)."""
    values = {}
    for p in parameters:
        if student is None:
            values[p.name] = p.default
            continue
        rng = np.random.default_rng(
            int.from_bytes(derive(secret, assignment, student, p.name)[:8], "big")
        )
        if p.rule == "uniform":
            low, high, *digits = p.arguments
            values[p.name] = round(float(rng.uniform(low, high)), digits[0] if digits else 3)
        elif p.rule == "integers":
            values[p.name] = int(rng.integers(p.arguments[0], p.arguments[1] + 1))
        else:
            values[p.name] = p.arguments[int(rng.integers(len(p.arguments)))]
    return values


def _config(text: str) -> dict:
    import yaml

    body = text.split("\n", 1)[1] if "\n" in text else ""
    return yaml.safe_load(body) or {}


def load(name: str, folder: Path = SOURCES) -> Assignment:
    """Parse ``folder/<name>.md``: questions, points, tests, the solution's code cells."""
    import jupytext

    source = folder / f"{name}.md"
    if not ASSIGNMENT_NAME.match(name) or not source.is_file():
        raise ValueError(f"no assignment {name!r} in {folder}")
    notebook = jupytext.read(source, fmt="md:myst")
    questions: dict[str, Question] = {}
    registry: list[Test] = []
    current: dict = {"question": None}
    namespace = _language(registry, current)
    solution, parameters, in_tests = [], [], False
    for index, cell in enumerate(notebook.cells):
        text = cell.source.strip()
        if cell.cell_type == "raw":
            if text.startswith("# BEGIN QUESTION"):
                config = _config(text)
                question = Question(
                    str(config["name"]),
                    float(config.get("points", 0)),
                    bool(config.get("manual", False)),
                    bool(config.get("all_or_nothing", True)),
                )
                questions[question.name] = question
                current["question"] = question.name
            elif text.startswith("# END QUESTION"):
                current["question"] = None
            elif text.startswith("# BEGIN TESTS"):
                in_tests = True
            elif text.startswith("# END TESTS"):
                in_tests = False
            continue
        if cell.cell_type != "code" or in_tests:
            continue
        if text.startswith(GRADING_MARK):
            exec(compile(cell.source, f"{source}:grading", "exec"), namespace)
            continue
        if text.startswith(PARAMETERS_MARK):
            parameters += parse_parameters(text)
        solution.append((index, cell.source))
    for test in registry:
        if test.question is None or test.question not in questions:
            raise ValueError(f"{source}: test {test.name} is outside a question")
        questions[test.question].tests.append(test)
    for question in questions.values():
        if not question.manual and not question.tests:
            raise ValueError(f"{source}: question {question.name} has no # GRADING tests")
    return Assignment(name, source, questions, solution, parameters)


def probes(assignment: Assignment, test: Test, secret: str) -> list[Probe]:
    """The probes of one test, its inputs drawn from the secret when it is hidden."""
    if test.hidden:
        rng = np.random.default_rng(seed(secret, assignment.name, test.question, test.name))
        made = test.make(rng)
    else:
        made = test.make()
    return list(made) if isinstance(made, list | tuple) else [made]


# ----------------------------------------------------------------------------------------------
# Running notebooks in sandboxes


@dataclass
class Run:
    """What came back from one sandbox: results per variant and test, failed cells, output."""

    results: dict[tuple[int, str], dict] = field(default_factory=dict)
    cells: list[dict] = field(default_factory=list)
    running: int | None = None  # the cell that started last
    finished: bool = False
    output: str = ""
    status: str = "graded"
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class Settings:
    timeout: float = 300.0
    cell_timeout: float = 60.0
    memory: int = 4 * 2**30
    jobs: int = 2
    secret: str = DEFAULT_SECRET
    unsandboxed: bool = False


def readable(text: str, limit: int = 100_000) -> str:
    """Text safe to show in a terminal or a file: no control characters, at most ``limit``."""
    text = "".join(c if c in "\n\t" or c.isprintable() else "?" for c in text[:limit])
    return text + ("\n[... cut]" if len(text) >= limit else "")


def one_line(text: str, limit: int) -> str:
    """``readable`` on one line: a notebook's error text cannot start lines of its own (a fake
    score, a fake section) in the feedback and logs."""
    return re.sub(r"\s+", " ", readable(str(text), limit)).strip()


MAX_CELL_RECORDS = 1000  # failed cells kept from one run (the feedback shows 20)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _test_record(record: dict) -> bool:
    """Whether a test's result record has the harness's shape (the notebook's process writes
    the stream, so any line can be forged: a malformed one is dropped, never trusted)."""
    values, errors = record.get("values"), record.get("errors")
    return (
        _integer(record.get("variant", 0))
        and isinstance(record.get("key"), str)
        and isinstance(values, list)
        and isinstance(errors, list)
        and len(values) == len(errors)
        and all(e is None or isinstance(e, str) for e in errors)
    )


def _parse_results(stdout: bytes, run: Run, keys: set[tuple[int, str]] | None = None) -> None:
    """Read the result stream (see tools/grading_harness.py) into ``run``.

    The stream comes from the notebook's own process, so every line is checked: a line that is
    not JSON, nests too deep, or has the wrong shape is skipped, and a forged record can at
    most claim answers, which are then compared with the reference's like any other. One record
    per test is taken, the first of the right shape, and only for the tests of this run's job
    (``keys``): a record of a test that runs in another sandbox (one where the book's library is
    absent) counts for nothing here. Nothing after ``done`` is read (the sandbox is ended there).
    """
    for raw in stdout.split(b"\n"):
        try:
            record = json.loads(raw.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        if record.get("done") is True:
            run.finished = True
            return
        if "cell" in record and "status" in record:
            if _integer(record["cell"]) and len(run.cells) < MAX_CELL_RECORDS:
                status = "timeout" if record["status"] == "timeout" else "error"
                error = one_line(record.get("error"), 500)
                run.cells.append({"cell": record["cell"], "status": status, "error": error})
        elif _integer(record.get("running")) and not run.results:
            run.running = record["running"]
        elif "key" in record and "values" in record and _test_record(record):
            key = (record.get("variant", 0), record["key"])
            if (keys is None or key in keys) and key not in run.results:
                run.results[key] = record


_STUBS: dict[str, Path] = {}
_STUBS_LOCK = threading.Lock()


def _stub(name: str) -> Path:
    """A folder holding the package ``name`` as absent (tools/absent_package.py), to mount over
    the real one; made once per grader process, readable by the sandboxes' uids."""
    with _STUBS_LOCK:  # the sandboxes of a folder start from several threads
        if "folder" not in _STUBS:
            import atexit

            folder = Path(tempfile.mkdtemp(prefix="absent-packages-"))
            folder.chmod(0o755)
            atexit.register(shutil.rmtree, folder, True)
            _STUBS["folder"] = folder
        target = _STUBS["folder"] / name
        if not target.is_dir():
            target.mkdir(mode=0o755)
            (target / "__init__.py").write_text(ABSENT_PACKAGE.read_text(encoding="utf-8"))
            (target / "__init__.py").chmod(0o644)
        return target


def _package_folders(name: str) -> list[Path]:
    """Every copy of the package ``name`` a sandbox can see (the venv's, the base Python's, the
    system's): where one is absent, all of them are covered. A module that is a file (such as
    ``scipy.optimize._numdiff``) is found as its ``.py`` file and its compiled ``.pyc`` files,
    which would otherwise still hold its code."""
    bases = [*sandbox.python_mounts(), Path("/usr/lib"), Path("/usr/local/lib")]
    found = set()
    relative = name.replace(".", "/")
    parent, _, stem = relative.rpartition("/")
    for base in bases:
        for top in ("lib/python3*/*-packages", "python3*/*-packages"):
            found.update(p for p in base.glob(f"{top}/{relative}") if p.is_dir())
            found.update(p for p in base.glob(f"{top}/{relative}.py") if p.is_file())
            if parent:
                compiled = f"{top}/{parent}/__pycache__/{stem}.*.pyc"
                found.update(p for p in base.glob(compiled) if p.is_file())
    return sorted(found)


def _mounts(absent: tuple[str, ...] = ()) -> list[tuple[Path, str]]:
    """Read-only folders of a sandbox: Python, the venv, the book's ``lib``, the harness; each
    package of ``absent`` covered by a stand-in that holds none of its code (a folder by a
    folder, a module's file and its compiled files by the stand-in's file)."""
    import importlib.util

    spec = importlib.util.find_spec("lib")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the book's lib package is not installed in this environment")
    lib_dir = Path(list(spec.submodule_search_locations)[0])
    mounts = [(p, str(p)) for p in sandbox.python_mounts()]
    mounts.append((_stub("lib") if "lib" in absent else lib_dir, str(lib_dir)))
    for name in absent:
        if name != "lib":
            stub = _stub(name)
            for where in _package_folders(name):
                mounts.append((stub if where.is_dir() else stub / "__init__.py", str(where)))
    mounts.append((HARNESS, "/grader/grading_harness.py"))
    return mounts


def levels(tests: list[tuple[Test, list[Probe]]]) -> list[tuple[str, ...]]:
    """The distinct sets of absent packages of ``tests``: one sandbox each per notebook."""
    return sorted({test.absent for test, _ in tests}, key=lambda a: (len(a), a))


class _Turns:
    """Which sandboxes of submissions run at the same time: only those that lack the same
    packages (a question's shortcut), any number of them.

    Two sandboxes running at once can always talk (through the machine's load, its memory, its
    file cache, whatever the kernel shares), and a notebook whose shortcut is absent could ask a
    colluding submission that has it. Sandboxes that lack the same packages can compute nothing
    for each other that each could not compute itself, so they may run together; a sandbox never
    runs beside one that has something it lacks (or lacks something it has). The reference
    solution's sandboxes take no turns: they are not the students' code. Turns are taken in the
    order asked for, so that no level waits forever."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._running = 0
        self._level: tuple[str, ...] | None = None
        self._waiting: dict[int, tuple[str, ...]] = {}
        self._tickets = 0

    @contextlib.contextmanager
    def turn(self, level: tuple[str, ...]):
        with self._condition:
            ticket = self._tickets
            self._tickets += 1
            self._waiting[ticket] = level

            def may_run() -> bool:
                earlier = (lvl for t, lvl in self._waiting.items() if t < ticket)
                same = self._running == 0 or self._level == level
                return same and all(lvl == level for lvl in earlier)

            self._condition.wait_for(may_run)
            del self._waiting[ticket]
            self._level = level
            self._running += 1
        try:
            yield
        finally:
            with self._condition:
                self._running -= 1
                self._condition.notify_all()


def execute_all(cells, variants_by_level: dict, settings: Settings, turns=None) -> Run:
    """Run ``cells`` once per level (set of absent packages) and merge what came back: each
    test's record comes from the run of its own level only. The notebook's failed cells and
    output are those of its first run (the others fail where they use what is absent).
    ``turns`` (a submission's runs; not the reference's): a run never runs beside another
    submission's run that lacks other packages (:class:`_Turns`)."""
    merged = Run()
    for number, (absent, variants) in enumerate(variants_by_level.items()):
        with turns.turn(absent) if turns is not None else contextlib.nullcontext():
            run = execute(cells, variants, settings, absent)
        merged.results.update(run.results)
        merged.seconds += run.seconds
        merged.notes += run.notes
        if number == 0:
            merged.cells, merged.running, merged.output = run.cells, run.running, run.output
            merged.finished, merged.status = run.finished, run.status
        elif run.status != "graded" and merged.status == "graded":
            merged.status = f"{run.status} (the run without {', '.join(absent)})"
        merged.finished = merged.finished and run.finished
    return merged


def execute(cells, variants, settings: Settings, absent: tuple[str, ...] = ()) -> Run:
    """Run code ``cells`` with the harness in a sandbox; ``variants`` as in the harness's job;
    ``absent``: packages the sandbox holds only as stand-ins (:func:`_mounts`)."""
    keys = {(k, t["key"]) for k, variant in enumerate(variants) for t in variant["tests"]}
    job = json.dumps({"cells": cells, "cell_timeout": settings.cell_timeout, "variants": variants})
    # The notebook runs once per variant: the reference's one per student with parameters of
    # their own, in one sandbox, so its time grows with the class; a submission has one.
    seconds = settings.timeout * max(1, len(variants))
    limits = sandbox.Limits(
        wall_seconds=seconds, cpu_seconds=int(math.ceil(seconds)), memory_bytes=settings.memory
    )
    argv = [str(Path(sys.executable).absolute()), "-I", "-B", "/grader/grading_harness.py"]
    stream = {"stop_on": DONE, "stdout_cap": RESULT_CAP}
    if settings.unsandboxed:  # no sandbox, so nothing can be made absent: see book/course.md
        argv[-1] = str(HARNESS)
        result = sandbox.run_unsandboxed(argv, stdin=job.encode(), limits=limits, **stream)
    else:
        mounts = _mounts(absent)
        result = sandbox.run(argv, stdin=job.encode(), mounts=mounts, limits=limits, **stream)
    run = Run(seconds=result.seconds, notes=result.notes)
    _parse_results(result.stdout, run, keys)
    run.output = readable(result.stderr.decode("utf-8", "replace"))
    if run.finished:  # it answered every test: what it does after that costs nothing
        pass
    elif result.timed_out:
        run.status = f"timeout after {seconds:g} s"
    else:
        run.status = f"stopped early (exit code {result.returncode})"
    return run


_REFERENCES: dict[str, Run] = {}


def reference_run(cells, variants_by_level: dict, settings: Settings) -> Run:
    """The reference solution's run: sandboxed like a submission, remembered for this process
    (the same source, inputs and parameters give the same numbers)."""
    key = json.dumps(
        [cells, list(variants_by_level.items()), settings.cell_timeout, HARNESS.read_text("utf-8")]
    )
    key = hashlib.sha256(key.encode()).hexdigest()
    if key not in _REFERENCES:
        run = execute_all(cells, variants_by_level, settings)
        if not run.finished:
            return run
        _REFERENCES[key] = run
    return _REFERENCES[key]


def _variant(assignment: Assignment, tests: list[tuple[Test, list[Probe]]], parameters) -> dict:
    return {
        "parameters": encode(parameters) if parameters is not None else None,
        "tests": [{"key": t.key, "probes": [p.spec for p in ps]} for t, ps in tests],
    }


def _by_level(assignment: Assignment, tests, parameter_sets: list) -> dict:
    """``{absent packages: [variant, ...]}``: each level's job holds only its own tests."""
    return {
        absent: [
            _variant(assignment, [(t, ps) for t, ps in tests if t.absent == absent], p)
            for p in parameter_sets
        ]
        for absent in levels(tests)
    }


# ----------------------------------------------------------------------------------------------
# Verdicts, computed here


def _numbers(value):
    """A JSON result as a float64 array (None stays None); ValueError if it is not numbers."""
    if value is None:
        return None
    array = np.array(value, dtype=np.float64)  # ragged or non-numeric input raises
    return array


def compare(got, expected, probe: Probe) -> str | None:
    """Why ``got`` is not ``expected`` (both plain JSON values), or None when it matches."""
    try:
        answer, reference = _numbers(got), _numbers(expected)
    except (TypeError, ValueError, OverflowError, RecursionError):  # e.g. an int of 400 digits
        return "the answer is not numbers"
    if reference is None or answer is None:
        return None if answer is None and reference is None else "returned None"
    if answer.size == reference.size == 1:
        answer, reference = answer.reshape(()), reference.reshape(())
    if answer.shape != reference.shape:
        return f"shape {answer.shape}, expected {reference.shape}"
    if probe.exact:  # integers and booleans: an exact comparison is right
        same = np.array_equal(answer, reference, equal_nan=True)
    else:
        same = np.allclose(answer, reference, rtol=probe.rtol, atol=probe.atol, equal_nan=True)
    if same:
        return None
    with np.errstate(invalid="ignore"):
        gaps = np.abs(answer - reference)
    gaps = gaps[np.isfinite(gaps)]
    worst = f"largest difference {gaps.max():.3g}" if gaps.size else "not finite"
    return f"differs from the expected value ({worst})"


@dataclass
class Verdict:
    test: Test
    passed: bool
    reason: str = ""
    shown: list[str] = field(default_factory=list)


@dataclass
class Grade:
    submission: str
    student: str = ""
    scores: dict[str, float] = field(default_factory=dict)
    status: str = "graded"
    seconds: float = 0.0
    verdicts: list[Verdict] = field(default_factory=list)
    run: Run | None = None
    written: dict[str, str] = field(default_factory=dict)
    flags: str = ""  # what the instructor should check (a student id claimed twice)


def _expected(assignment: Assignment, reference: Run, variant: int, test: Test, test_probes):
    """The reference's result record of ``test``; RuntimeError if it has none for every probe."""
    expected = reference.results.get((variant, test.key))
    if expected is None or any(expected["errors"]) or len(expected["values"]) != len(test_probes):
        raise RuntimeError(
            f"the reference solution of {assignment.name} fails its own test {test.key}: "
            f"{expected and expected['errors']}\n{reference.output[-3000:]}"
        )
    return expected


def check_reference(assignment: Assignment, tests, reference: Run, variants: int) -> None:
    """Raise RuntimeError unless the reference ran to its end and passes all its tests."""
    if not reference.finished:
        raise RuntimeError(
            f"the reference solution of {assignment.name} did not run to its end "
            f"({reference.status}):\n" + reference.output[-3000:]
        )
    for variant in range(variants):
        for test, test_probes in tests:
            _expected(assignment, reference, variant, test, test_probes)


def judge(
    assignment: Assignment,
    tests: list[tuple[Test, list[Probe]]],
    answer: Run,
    reference: Run,
    variant: int,
) -> list[Verdict]:
    """Compare every probe of every test with the reference's run (``variant`` of it)."""
    verdicts = []
    for test, test_probes in tests:
        expected = _expected(assignment, reference, variant, test, test_probes)
        got = answer.results.get((0, test.key))
        verdict = Verdict(test, True)
        for index, probe in enumerate(test_probes):
            if got is None:
                why = "not run (the notebook stopped before it)"
            elif got["errors"][index] if index < len(got["errors"]) else True:
                why = "raised " + str(got["errors"][index] if index < len(got["errors"]) else "")
            else:
                why = compare(got["values"][index], expected["values"][index], probe)
            if why is not None:
                verdict.passed = False
                verdict.reason = verdict.reason or why
                if not test.hidden:
                    shown = got["values"][index] if got and index < len(got["values"]) else None
                    verdict.shown.append(
                        f"{probe.shown}: {why}; expected {_short(expected['values'][index])}"
                        + ("" if shown is None else f", got {_short(shown)}")
                    )
        verdicts.append(verdict)
    return verdicts


def score(assignment: Assignment, verdicts: list[Verdict]) -> dict[str, float]:
    scores = {}
    for question in assignment.questions.values():
        if question.manual:
            continue
        mine = [v for v in verdicts if v.test.question == question.name]
        passed = sum(v.passed for v in mine)
        if question.all_or_nothing:
            scores[question.name] = question.points if mine and passed == len(mine) else 0.0
        else:
            scores[question.name] = question.points * passed / len(mine) if mine else 0.0
    return scores


# ----------------------------------------------------------------------------------------------
# Submissions


@dataclass
class Submission:
    path: Path
    notebook: dict | None = None
    problem: str = ""

    @property
    def meta(self) -> dict:
        meta = (self.notebook or {}).get("metadata") or {}
        return meta if isinstance(meta, dict) else {}

    @property
    def assignment(self) -> str | None:
        for key, field_name in (("course", "assignment"), ("otter", "assignment_name")):
            value = self.meta.get(key)
            if isinstance(value, dict) and isinstance(value.get(field_name), str):
                return value[field_name]
        return None

    @property
    def student(self) -> str | None:
        course = self.meta.get("course")
        if isinstance(course, dict) and isinstance(course.get("student"), str):
            return course["student"]
        return None

    def _sources(self, kind: str) -> list[tuple[int, str]]:
        """(cell number, source) of the cells of ``kind``; a source that is neither text nor a
        list of lines of text (the file is JSON from anyone) counts as empty."""
        found = []
        for index, cell in enumerate(self.notebook.get("cells") or []):
            if isinstance(cell, dict) and cell.get("cell_type") == kind:
                source = cell.get("source", "")
                if isinstance(source, list) and all(isinstance(s, str) for s in source):
                    source = "".join(source)
                found.append((index + 1, source if isinstance(source, str) else ""))
        return found

    def cells(self) -> list[tuple[int, str]]:
        return self._sources("code")

    def markdown(self) -> list[tuple[int, str]]:
        return self._sources("markdown")


def read_submission(path: Path) -> Submission:
    """A submitted file, parsed as plain JSON (never executed); ``problem`` says what is wrong."""
    submission = Submission(path)
    try:
        if path.is_symlink() or not path.is_file():
            submission.problem = "not a regular file"
            return submission
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            submission.problem = f"larger than {MAX_NOTEBOOK_BYTES // 2**20} MB"
            return submission
        notebook = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
            raise ValueError("no cells")
        submission.notebook = notebook
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):  # nested 100 000 deep...
        submission.problem = "not a notebook (the file is not Jupyter notebook JSON)"
    return submission


def cell_labels(submission: Submission) -> dict[int, str]:
    """``{cell number: "Question 2"}``: the question whose prompt precedes each cell."""
    labels, current = {}, ""
    markdown = dict(submission.markdown())
    for number in range(1, len(submission.notebook.get("cells") or []) + 1):
        match = re.search(r"\*\*Question (\d+)", markdown.get(number, ""))
        if match:
            current = f"Question {match.group(1)}"
        labels[number] = current
    return labels


def written_answers(submission: Submission, assignment: Assignment) -> dict[str, str]:
    """The Markdown answer to each manually graded question (the cell after its prompt)."""
    answers = {}
    markdown = submission.markdown()
    for name in assignment.manual:
        number = name.lstrip("q")
        for position, (_, text) in enumerate(markdown):
            if re.search(rf"\*\*Question {number}\b", text) and position + 1 < len(markdown):
                answers[name] = markdown[position + 1][1]
    return answers


# ----------------------------------------------------------------------------------------------
# A folder


def _which_assignment(
    submissions: list[Submission], assignment: str | None, sources: Path = SOURCES
) -> str:
    """The assignment named (``assignment``) or the one most notebooks' metadata names.

    Only names of sources in ``sources`` count: the metadata is the student's, and a name such
    as ``../../somewhere/file`` would otherwise make the grader execute that file's # GRADING
    cells in its own process.
    """
    if assignment is not None:
        return assignment
    known = {p.stem for p in Path(sources).glob("*.md")}
    counts: dict[str, int] = {}
    for s in submissions:
        if s.assignment in known:
            counts[s.assignment] = counts.get(s.assignment, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        raise ValueError(
            "cannot tell which assignment these notebooks are for (found "
            f"{sorted(counts) or 'none'}); grade one assignment per folder, or name it with "
            "--assignment (make grade ... ASSIGNMENT=name)"
        )
    return ranked[0][0]


def _tests_for(assignment: Assignment, secret: str) -> list[tuple[Test, list[Probe]]]:
    return [
        (test, probes(assignment, test, secret))
        for question in assignment.questions.values()
        for test in question.tests
    ]


FORMULA_STARTS = "=+-@\uff1d\uff0b\uff0d\uff20"  # and their full-width forms


def _safe_name(name: str) -> str:
    """A name (file, student id) for a CSV cell or a terminal line: one line, printable, and never
    a spreadsheet formula (one that starts with = + - @, after spaces too, gets a quote)."""
    name = readable(name, 200).replace("\n", " ").replace("\t", " ")
    return "'" + name if name.lstrip()[:1] in tuple(FORMULA_STARTS) else name


def _terminal_name(name: str) -> str:
    """A file name as the instructor's terminal shows it: ASCII only (any other character, a
    look-alike of "/" or ":" included, is escaped), one line, at most 60 characters, quoted."""
    text = re.sub(r"\s+", " ", name).strip()
    text = text if len(text) <= 60 else text[:57] + "..."
    return ascii(text)


def _terminal_text(text: str, limit: int = 100) -> str:
    """A status for the terminal: one line, ASCII (other characters escaped), at most ``limit``."""
    return one_line(text, limit).encode("ascii", "backslashreplace").decode("ascii")


def _prepare(s: Submission, name: str, spec: Assignment, secret: str) -> dict | None:
    """The submission's parameters, or None with ``s.problem`` set: whatever its metadata holds
    (it is the student's text), the answer concerns this submission only."""
    try:
        if s.assignment is not None and s.assignment != name:
            s.problem = f"a notebook of another assignment ({one_line(s.assignment, 60)})"
            return None
        if s.student is not None and not STUDENT_ID.match(s.student):
            s.problem = "its metadata's student id is not an id (letters, digits and ._@- only)"
            return None
        return draw(spec.parameters, secret, name, s.student)
    except Exception as error:  # a bug of ours met by a strange notebook: this row only
        s.problem = f"could not be read ({one_line(f'{type(error).__name__}: {error}', 200)})"
        return None


def _run_safely(cells, variants_by_level, settings: Settings, turns=None) -> Run:
    try:
        return execute_all(cells, variants_by_level, settings, turns)
    except Exception as error:  # the sandbox failed for this notebook only
        return Run(status=f"could not be run ({one_line(f'{type(error).__name__}: {error}', 200)})")


def grade_folder(
    folder: Path,
    *,
    assignment: str | None = None,
    settings: Settings | None = None,
    sources: Path = SOURCES,
    echo=print,
    before=None,
) -> Path:
    """Grade every ``*.ipynb`` in ``folder``; write ``folder/grades.csv`` and return its path.

    Everything a submission holds (names, metadata, cells, what its sandbox writes) is hostile
    text: a submission that cannot be read, run or judged gets a row of 0 with the reason, and
    every other submission of the folder is graded; the terminal shows sanitized text only.
    """
    settings = settings or Settings()
    folder = Path(folder)
    paths = sorted(p for p in folder.glob("*.ipynb"))
    if not paths:
        raise ValueError(f"{folder}: no .ipynb submissions to grade")
    _check_outputs(folder)
    if not settings.unsandboxed:
        sandbox.check()
    submissions = [read_submission(p) for p in paths]
    name = _which_assignment(submissions, assignment, sources)
    if before is not None:
        before(name)
    spec = load(name, sources)
    tests = _tests_for(spec, settings.secret)
    if settings.secret == DEFAULT_SECRET:
        echo("note: no COURSE_SECRET given: the hidden tests' inputs are the public default ones")
    # Parameters: one reference variant per distinct set (a student's, or the defaults).
    parameter_sets: list[dict] = []
    student_variant: dict[str, int] = {}
    for s in submissions:
        if s.problem:
            continue
        values = _prepare(s, name, spec, settings.secret)
        if s.problem:
            continue
        if values not in parameter_sets:
            parameter_sets.append(values)
        student_variant[s.path.name] = parameter_sets.index(values)
    if not parameter_sets:
        parameter_sets.append(draw(spec.parameters, settings.secret, name, None))
    total = sum(spec.auto.values())
    echo(
        f"grading {len(paths)} submissions of {name!r} ({total:g} points), {settings.jobs} at once"
    )
    grades: dict[str, Grade] = {}
    turns = _Turns()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, settings.jobs)) as pool:
        reference_job = pool.submit(
            reference_run, spec.solution_cells, _by_level(spec, tests, parameter_sets), settings
        )
        jobs = {}
        for s in submissions:
            if s.problem:
                continue
            parameters = parameter_sets[student_variant[s.path.name]]
            job = _by_level(spec, tests, [parameters])
            jobs[pool.submit(_run_safely, s.cells(), job, settings, turns)] = s
        reference = reference_job.result()
        check_reference(spec, tests, reference, len(parameter_sets))
        done = 0
        for s in submissions:  # files that could not be graded: a row each, with the reason
            if s.problem:
                done += 1
                grades[s.path.name] = Grade(
                    s.path.name, student=_student_shown(s), status=one_line(s.problem, 200)
                )
                echo(
                    f"[{done}/{len(paths)}] 0 / {total:g} ({_terminal_text(s.problem)}): "
                    f"{_terminal_name(s.path.name)}"
                )
        for future in concurrent.futures.as_completed(jobs):
            s = jobs[future]
            grade = _grade(spec, tests, s, future.result(), reference, student_variant)
            grades[s.path.name] = grade
            done += 1
            got = sum(grade.scores.values())
            echo(
                f"[{done}/{len(paths)}] {got:g} / {total:g} ({_terminal_text(grade.status)}, "
                f"{grade.seconds:.0f} s): {_terminal_name(s.path.name)}"
            )
    for file_name, flag in _shared_ids(submissions).items():
        grades[file_name].flags = flag
        echo(f"check: {_terminal_name(file_name)} {_terminal_text(flag, 160)}")
    # Every sandbox is gone: now, and only now, the grades are written.
    labels = {}
    for s in submissions:
        if not s.problem:
            try:
                labels[s.path.name] = cell_labels(s)
            except Exception:  # a strange notebook: its feedback goes without question names
                labels[s.path.name] = {}
    _write_feedback(folder, spec, submissions, grades, labels)
    table = _write_grades(folder, spec, submissions, grades)
    _write_written(folder, spec, submissions, grades)
    echo(f"wrote {table}")
    return table


def _shared_ids(submissions: list[Submission]) -> dict[str, str]:
    """``{file name: flag}`` for every submission whose student id another file of the folder
    claims too: the id is the notebook's metadata, which anyone can write, so two claims of one
    id mean that at most one of them is its owner's (the instructor decides which row counts)."""
    claims: dict[str, list[str]] = {}
    for s in submissions:
        student = _student_shown(s)
        if student and not s.problem:
            claims.setdefault(student, []).append(s.path.name)
    flags = {}
    for student, names in claims.items():
        if len(names) > 1:
            for name in names:
                others = ", ".join(_safe_name(n) for n in names if n != name)
                flags[name] = f"student id {_safe_name(student)} also claimed by {others}"
    return flags


def _student_shown(s: Submission) -> str:
    try:
        return s.student or ""
    except Exception:
        return ""


def _grade(spec: Assignment, tests, s: Submission, run: Run, reference: Run, variants) -> Grade:
    """One submission's grade from its run. Whatever the run holds, this returns: an error here
    is a row with its reason (0 points), never a folder left without grades."""
    grade = Grade(s.path.name, student=_student_shown(s), run=run, status=one_line(run.status, 200))
    grade.seconds = run.seconds
    try:
        grade.verdicts = judge(spec, tests, run, reference, variants[s.path.name])
        grade.scores = score(spec, grade.verdicts)
        grade.written = written_answers(s, spec)
    except Exception as error:  # a bug of ours met by a strange notebook: this row only
        grade.verdicts, grade.scores = [], dict.fromkeys(spec.auto, 0.0)
        grade.status = f"could not be graded ({one_line(f'{type(error).__name__}: {error}', 200)})"
    run.results = {}  # the answers are judged: keep no more of them than the verdicts
    return grade


OUTPUT_FOLDERS = ("feedback", "grading-logs", "written")


def _check_outputs(folder: Path) -> None:
    """Refuse output folders that are symbolic links (a folder of submissions unpacked from an
    archive can hold them): the feedback files would be written wherever they point."""
    for name in OUTPUT_FOLDERS:
        if (folder / name).is_symlink():
            raise ValueError(
                f"{folder / name} is a symbolic link: the grader writes there; remove it first"
            )


def _atomic_write(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, delete=False, encoding="utf-8", errors="replace", newline=""
    ) as f:
        f.write(text)
        temporary = Path(f.name)
    os.replace(temporary, path)


def _num(x: float) -> str:
    return f"{x:g}"


def _write_grades(folder: Path, spec: Assignment, submissions, grades) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    auto, manual = list(spec.auto), list(spec.manual)
    header = ["submission", "student", *auto, *manual, "score", "possible", "status", "check"]
    writer.writerow(header)
    for s in submissions:
        grade = grades[s.path.name]
        scores = [grade.scores.get(q, 0.0) for q in auto]
        writer.writerow(
            [
                _safe_name(s.path.name),
                _safe_name(grade.student),
                *map(_num, scores),
                *["" for _ in manual],  # graded by hand: see written/
                _num(sum(scores)),
                _num(sum(spec.auto.values())),
                grade.status,
                grade.flags,
            ]
        )
    table = folder / "grades.csv"
    _atomic_write(table, buffer.getvalue())
    return table


def _feedback_text(spec: Assignment, grade: Grade, labels: dict[int, str]) -> str:
    lines = [f"Feedback on {_safe_name(grade.submission)} ({spec.name})", ""]
    if grade.status != "graded":
        lines.append(f"Grading: {grade.status}.")
        run = grade.run
        if run is not None and not run.finished and run.running is not None:
            where = labels.get(run.running, "")
            where = f", {where}" if where else ""
            lines.append(f"It was stopped while running cell {run.running}{where}.")
        lines.append("")
    if grade.run is not None and grade.run.cells:
        lines.append("Cells of your notebook that failed while it was graded:")
        for cell in grade.run.cells[:20]:
            where = labels.get(cell.get("cell"), "")
            where = f", {where}" if where else ""
            what = "ran too long and was stopped" if cell.get("status") == "timeout" else "raised"
            lines.append(
                f"  cell {cell.get('cell')}{where}: {what}: {one_line(cell.get('error'), 300)}"
            )
        lines.append("")
    for question in spec.questions.values():
        if question.manual:
            lines += [f"{question.name}: graded by hand ({question.points:g} points)", ""]
            continue
        got = grade.scores.get(question.name, 0.0)
        lines.append(f"{question.name}: {got:g} / {question.points:g}")
        for verdict in grade.verdicts:
            if verdict.test.question != question.name:
                continue
            kind = "hidden" if verdict.test.hidden else "public"
            lines.append(
                f"  {kind} test {verdict.test.name}: {'passed' if verdict.passed else 'failed'}"
            )
            lines += [f"    {one_line(text, 400)}" for text in verdict.shown[:3]]
        lines.append("")
    lines.append(
        "Hidden tests ask each question again on inputs you have not seen; only their names and "
        "results are shown."
    )
    return "\n".join(lines) + "\n"


def _log_text(spec: Assignment, grade: Grade, labels: dict[int, str]) -> str:
    lines = [_feedback_text(spec, grade, labels), "--- for the instructor ---"]
    for verdict in grade.verdicts:
        if not verdict.passed:
            lines.append(f"{verdict.test.key}: {one_line(verdict.reason, 400)}")
    if grade.run is not None:
        lines += [f"sandbox: {grade.run.seconds:.1f} s; {'; '.join(grade.run.notes)}"]
        output = "\n".join(f"| {line}" for line in grade.run.output.splitlines())
        lines += ["--- the notebook's own output (control characters removed) ---", output]
    return "\n".join(lines) + "\n"


def _write_feedback(folder: Path, spec: Assignment, submissions, grades, labels) -> None:
    feedback, logs = folder / "feedback", folder / "grading-logs"
    feedback.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)
    for s in submissions:
        grade = grades[s.path.name]
        stem = s.path.stem
        _atomic_write(
            feedback / f"{stem}.txt", _feedback_text(spec, grade, labels.get(s.path.name, {}))
        )
        _atomic_write(logs / f"{stem}.txt", _log_text(spec, grade, labels.get(s.path.name, {})))


def _markdown_text(text: str) -> str:
    """Text shown literally in Markdown: each character that can start markup (HTML, emphasis,
    code, links, math, a heading's closing ``#``) backslash-escaped, so that a file name such as
    ``<!--x.ipynb`` or ``<h2>bob</h2>.ipynb`` is a heading's text, not HTML."""
    return re.sub(r"([\\`*_\[\]<>&!~$|{}#])", r"\\\1", text)


def _fenced(answer: str) -> str:
    """A student's Markdown answer as a fenced code block, shown as its text and never rendered:
    no markup passes through (raw HTML that closes a quote early and forges a classmate's
    section, an unclosed comment hiding what follows). The fence is longer than any run of
    backticks in the answer, so nothing in it can close the block."""
    text = readable(answer, 20_000)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def _write_written(folder: Path, spec: Assignment, submissions, grades) -> None:
    if not spec.manual:
        return
    written = folder / "written"
    written.mkdir(exist_ok=True)
    for name, points in spec.manual.items():
        parts = [
            f"# {spec.name}, {name} ({points:g} points, graded by hand)",
            "",
            "Each answer is shown as the student wrote it (its Markdown source, in a code block).",
            "",
        ]
        for s in submissions:
            answer = grades[s.path.name].written.get(name, "*(no answer found)*")
            parts += [f"## {_markdown_text(_safe_name(s.path.name))}", "", _fenced(answer), ""]
        _atomic_write(written / f"{name}.md", "\n".join(parts))
