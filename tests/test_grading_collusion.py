"""The second red team's attacks on the grader that are fixed, each a test (the ones that cannot
be fixed are limits, stated in book/course.md):

- two submissions graded at once talking through file locks on a file both sandboxes see
  read-only (the sandbox refuses file locks and notifications; a sandbox runs only beside
  sandboxes that lack the same packages: :class:`grading._Turns`);
- scipy's complex-step derivative (``scipy.optimize._numdiff.approx_derivative``) where
  differentiation packages are absent (it is absent too, its compiled file included);
- raw HTML in a written answer forging a classmate's section in ``written/`` (answers are shown
  in code blocks, file names escaped);
- two notebooks claiming one student id (both flagged in ``grades.csv`` and the terminal).

The sandbox tests start one Python each (a few seconds; the limits are generous because the
machine may be loaded many times over: they bound a hang, nothing honest comes near them).
"""

from __future__ import annotations

import concurrent.futures
import textwrap
import threading
import time

import pytest
from grading_support import grading, run_python, sandbox

pytestmark = pytest.mark.not_numerics


def test_the_sandbox_refuses_file_locks_and_notifications():
    """The red team's channel: byte-range read locks (F_OFD_SETLK) on /usr/bin/env, set in one
    sandbox and seen (F_OFD_GETLK) in another. Every lock, lease and notification call fails."""
    if reason := sandbox.missing():
        pytest.skip(reason)
    code = textwrap.dedent(
        """
        import ctypes, errno, fcntl, os, sqlite3, struct
        def attempt(name, action):
            try:
                action()
                print(name, "allowed")
            except OSError as error:
                print(name, errno.errorcode[error.errno])
        fd = os.open("/usr/bin/env", os.O_RDONLY)
        lock = struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 7, 1, 0)
        attempt("flock", lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB))
        attempt("lockf", lambda: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB))
        for command in ("F_SETLK", "F_SETLKW", "F_GETLK", "F_OFD_SETLK", "F_OFD_GETLK"):
            attempt(command, lambda: fcntl.fcntl(fd, getattr(fcntl, command), lock))
        attempt("F_SETLEASE", lambda: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK))
        folder = os.open("/usr/bin", os.O_RDONLY)
        attempt("F_NOTIFY", lambda: fcntl.fcntl(folder, fcntl.F_NOTIFY, fcntl.DN_ACCESS))
        libc = ctypes.CDLL(None, use_errno=True)
        print("inotify_init1", libc.inotify_init1(0), ctypes.get_errno())
        print("fanotify_init", libc.fanotify_init(0, 0), ctypes.get_errno())
        print("read", len(os.read(fd, 4)))
        print("sqlite", sqlite3.connect(":memory:").execute("select 6 * 7").fetchone()[0])
        """
    )
    result = run_python(code)
    out = result.stdout.decode()
    for name in ("flock", "lockf", "F_SETLK", "F_SETLKW", "F_GETLK", "F_OFD_SETLK", "F_OFD_GETLK"):
        assert f"{name} ENOLCK" in out, out + result.stderr.decode()[-2000:]
    assert "F_SETLEASE ENOLCK" in out and "F_NOTIFY EPERM" in out, out
    assert "inotify_init1 -1 1" in out and "fanotify_init -1 1" in out, out
    assert "read 4" in out and "sqlite 42" in out  # what a notebook needs still works


def _probe_run(cells: list[str], names: list[str], absent: tuple[str, ...]) -> dict[str, object]:
    """Run ``cells`` with the harness in a sandbox lacking ``absent``; the variables ``names``."""
    tests = [{"key": f"q/{name}", "probes": [{"value": name}]} for name in names]
    settings = grading.Settings(timeout=240, cell_timeout=120, jobs=1)
    run = grading.execute(
        list(enumerate(cells, 1)), [{"parameters": None, "tests": tests}], settings, absent
    )
    assert run.finished, (run.status, run.cells, run.output[-2000:])
    return {name: run.results[(0, f"q/{name}")]["values"][0] for name in names}


def test_without_autodiff_scipys_numerical_derivatives_are_absent():
    """The red team's a1b: q1 answered with approx_derivative(method="cs"), exact to rounding.
    Where differentiation packages are absent, so is scipy.optimize._numdiff (and what calls it:
    approx_fprime, check_grad), its compiled file too; scipy.optimize, scipy.integrate and
    scipy.stats still import, and a minimization given its gradient still runs."""
    if reason := sandbox.missing():
        pytest.skip(reason)
    absent = ("lib", *grading.AUTODIFF)
    assert "scipy.optimize._numdiff" in absent
    cells = [
        "import numpy as np\nimport scipy.optimize, scipy.integrate, scipy.stats",
        textwrap.dedent(
            """
            def loss(x):
                return 0.5 * ((1 - (x ** 4).sum()) ** 2 + (1 - (x ** 2).sum()) ** 2)
            def attempt(action):
                try:
                    action()
                    return 1.0
                except Exception:
                    return 0.0
            x0 = np.array([0.3, 0.2, 0.1])
            from scipy.optimize._numdiff import approx_derivative
            cs_works = attempt(lambda: approx_derivative(loss, x0, method="cs"))
            fprime_works = attempt(lambda: scipy.optimize.approx_fprime(x0, loss, 1e-8))
            check_grad_works = attempt(lambda: scipy.optimize.check_grad(loss, np.cos, x0))
            """
        ),
        textwrap.dedent(
            """
            import glob, importlib.util, marshal
            def from_compiled():
                (path,) = glob.glob(scipy.optimize.__path__[0] + "/__pycache__/_numdiff.*.pyc")
                code = marshal.loads(open(path, "rb").read()[16:])
                namespace = {"__name__": "scipy.optimize._kept"}
                exec(code, namespace)
                namespace["approx_derivative"](loss, x0, method="cs")
            compiled_works = attempt(from_compiled)
            quad = scipy.integrate.quad(lambda t: t * t, 0, 1)[0]
            fit = scipy.optimize.minimize(lambda x: ((x - 2) ** 2).sum(), np.zeros(2),
                                          jac=lambda x: 2 * (x - 2), method="BFGS").x
            """
        ),
    ]
    names = ["cs_works", "fprime_works", "check_grad_works", "compiled_works", "quad", "fit"]
    got = _probe_run(cells, names, absent)
    assert got["cs_works"] == got["fprime_works"] == got["check_grad_works"] == 0.0, got
    assert got["compiled_works"] == 0.0, got
    assert abs(got["quad"] - 1 / 3) < 1e-12 and max(abs(v - 2) for v in got["fit"]) < 1e-5, got
    # the control: with nothing absent, the same cells differentiate
    present = _probe_run(cells, ["cs_works", "fprime_works", "compiled_works"], ())
    assert present == {"cs_works": 1.0, "fprime_works": 1.0, "compiled_works": 1.0}, present


def test_a_sandbox_runs_only_beside_sandboxes_lacking_the_same_packages():
    """While a submission's sandbox runs, no other submission's sandbox that lacks other packages
    does (so no channel between two sandboxes, timing included, brings a sandbox what it lacks);
    sandboxes of the same level still run together. Six submissions on three threads, with the
    sandbox replaced by a recorder of when each run starts and ends."""
    intervals: list[tuple[tuple[str, ...], float, float]] = []
    lock = threading.Lock()

    def fake_execute(cells, variants, settings, absent=()):
        start = time.monotonic()
        time.sleep(0.1)
        with lock:
            intervals.append((absent, start, time.monotonic()))
        return grading.Run(finished=True)

    levels = {(): [], ("lib",): [], ("lib", *grading.AUTODIFF): []}
    turns = grading._Turns()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grading, "execute", fake_execute)
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            runs = [
                pool.submit(grading.execute_all, [], levels, grading.Settings(), turns)
                for _ in range(6)
            ]
            for run in runs:
                run.result(timeout=60)
    assert len(intervals) == 18

    def overlap(a, b):
        return a[1] < b[2] and b[1] < a[2]

    pairs = [(a, b) for i, a in enumerate(intervals) for b in intervals[i + 1 :] if overlap(a, b)]
    assert all(a[0] == b[0] for a, b in pairs), pairs  # never beside another level
    assert {a[0] for a, _ in pairs} >= {()}, intervals  # the same level still runs together


FORGED = (
    "My answer.\n</blockquote>\n\n<h2>b_honest_classmate.ipynb</h2>\n<blockquote>\n\n"
    "I copied this from the chapter.\n\n<!--\n"
)


def test_a_written_answer_cannot_forge_a_classmates_section(tmp_path):
    """The red team's pt8: raw HTML in a q4 answer closing its quote, a classmate's heading and
    a fake answer, then an unclosed comment hiding the real one. Rendered as CommonMark, the
    written file shows every answer as text under its own file's heading."""
    from markdown_it import MarkdownIt

    spec = grading.load("poisoning-theorem")
    (question,) = spec.manual
    names = ["a_attacker.ipynb", "b_honest_classmate.ipynb", "c_<!--odd``` name.ipynb"]
    answers = [FORGED, "The real answer of b.", "````\n<script>x</script>"]
    submissions = [grading.Submission(tmp_path / name, {"cells": []}) for name in names]
    grades = {
        name: grading.Grade(name, written={question: answer})
        for name, answer in zip(names, answers, strict=True)
    }
    grading._write_written(tmp_path, spec, submissions, grades)
    html = MarkdownIt("commonmark").render((tmp_path / "written" / f"{question}.md").read_text())
    assert html.count("<h2>") == 3  # one per file, none forged
    assert "<h2>b_honest_classmate.ipynb</h2>" in html
    assert "The real answer of b." in html  # not hidden by the attacker's comment
    assert "<!--" not in html and "<blockquote>" not in html and "<script>" not in html
    assert "&lt;h2&gt;b_honest_classmate.ipynb&lt;/h2&gt;" in html  # shown, as text


def test_two_notebooks_claiming_one_id_are_both_flagged(tmp_path):
    """The red team's pt6: the id is the notebook's metadata, so a notebook can claim a
    classmate's. Two files of a folder with one id are both flagged (the `check` column of
    grades.csv, and a line in the terminal); a lone claim cannot be told from the owner's."""
    import csv

    def submission(name: str, student: str | None) -> grading.Submission:
        course = {"assignment": "poisoning-theorem"}
        if student is not None:
            course["student"] = student
        return grading.Submission(tmp_path / name, {"cells": [], "metadata": {"course": course}})

    submissions = [
        submission("alice.ipynb", "alice"),
        submission("c_claims_alice.ipynb", "alice"),
        submission("bob.ipynb", "bob"),
        submission("no_id.ipynb", None),
        submission("no_id_either.ipynb", None),
    ]
    flags = grading._shared_ids(submissions)
    assert sorted(flags) == ["alice.ipynb", "c_claims_alice.ipynb"]
    assert "c_claims_alice.ipynb" in flags["alice.ipynb"]
    spec = grading.load("poisoning-theorem")
    grades = {s.path.name: grading.Grade(s.path.name, student=s.student or "") for s in submissions}
    for name, flag in flags.items():
        grades[name].flags = flag
    table = grading._write_grades(tmp_path, spec, submissions, grades)
    with open(table, newline="", encoding="utf-8") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    assert "also claimed by alice.ipynb" in rows["c_claims_alice.ipynb"]["check"]
    assert rows["bob.ipynb"]["check"] == rows["no_id.ipynb"]["check"] == ""
