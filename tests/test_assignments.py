"""Acceptance tests of the course assignments: tools/assignments.py and tools/grading.py.

For every assignment in book/assignments/: its questions have points shown to students, hidden
tests that never reach the student notebook, and a question graded by hand; the solution notebook
scores full marks, the untouched student notebook 0 on every question, a notebook with one wrong
answer loses exactly that question's points, and a correct notebook that lost its metadata is
graded all the same (four submissions, in under 90 s per sandbox a submission needs). On one
assignment, a folder of misbehaving submissions (one raises, one loops in a cell, one never ends
at all, one deletes variables and prints junk, one kills its own process, one is not a notebook,
one names a kernel this machine lacks, one belongs to another assignment) is graded, each file
its own row. The hostile submissions are in tests/test_grading_hostile.py and
tests/test_grading_attacks.py.

Each folder is graded by one call of the grader (each submission in its own sandbox, two at a
time): several minutes of wall time in all on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import zipfile

import nbformat
import pytest
from grading_support import ROOT, assignments, grading, read_grades, solution, student_bundle

pytestmark = pytest.mark.not_numerics


NAMES = [p.stem for p in assignments.sources()]
SECRET = "acceptance-test-secret"

# One wrong answer per assignment: (question, code appended to that question's answer cell).
# Several pass the public check of the student notebook and fail only the hidden tests, as a
# plausible mistake would. An assignment missing here gets its first answer blanked instead.
WRONG = {
    "greedy-learning": (  # a plausible wrong invariant: passes the public check, fails hidden ones
        "q3",
        "def second_when_first_reaches(a1, a2, level, gammas):\n"
        "    return (a2**-2 - a1**-2 + level**-2) ** -0.5\n",
    ),
    "gradient-flow": (  # right for diagonal H only
        "q1",
        "def descent_iterate(H, b, theta0, eta, k):\n"
        "    centre = b / np.diag(H)\n"
        "    return centre + (1 - eta * np.diag(H)) ** k * (theta0 - centre)\n",
    ),
    "ssm-basics": (  # the geometric sum without the case of a pole at 1
        "q1",
        "def step_response(a, b, c, length):\n"
        "    steps = torch.arange(1, length + 1, dtype=DT)[:, None]\n"
        "    return ((1 - a[None, :] ** steps) / (1 - a[None, :])) @ (b * c)\n",
    ),
    "extrapolation": (  # the diagonal of the covariance only: right for the public example
        "q1",
        "def expected_loss(h, w, cov):\n"
        "    k = cov.shape[0]\n"
        "    return float(((h[:k] - w[:k]).flip(0) ** 2 * torch.diagonal(cov)).sum())\n",
    ),
    "dynamical-characterization": (  # the factor (l + 1) forgotten: right for kappa = 2 only
        "q1",
        "def gammas(a, b, c, x, y, weights):\n"
        "    kappa = x.shape[1]\n"
        "    h = (c * b) @ (a[:, None] ** np.arange(kappa))\n"
        "    residual = weights * (y - x @ h[::-1])\n"
        "    return 2 * (residual @ x[:, : kappa - 1][:, ::-1])\n",
    ),
    "poisoning-theorem": (  # the start s0 forgotten: right from zero only
        "q2",
        "def time_to_half(s0, d):\n    return math.log(2) / d\n",
    ),
    "poisoning-in-practice": (  # 1/L instead of 1/(L - 1): passes the public check
        "q1",
        "def pole_budget(e, L):\n    return float((1 + e) ** (1 / L) - 1)\n",
    ),
    "linear-networks": (  # the Euclidean norm whatever M: right for M = I only
        "q1",
        "def min_norm_interpolant(X, y, M):\n"
        "    return np.linalg.pinv(np.asarray(X)) @ np.asarray(y)\n",
    ),
    "saddle-to-saddle": (  # the best head instead of the given one: right for one output
        "q2",
        "def fixed_head_speed(X, G, v):\n"
        "    return float(torch.linalg.matrix_norm(G.T @ X, ord=2))\n",
    ),
    "poisoning-real-data": (  # the average of the cosines, not the cosine of the average
        "q1",
        "def matching_objective(target_grad, poison_grads):\n"
        "    cosines = [target_grad @ g / (target_grad.norm() * g.norm()) for g in poison_grads]\n"
        "    return float(1 - sum(cosines) / len(cosines))\n",
    ),
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return student_bundle(tmp_path_factory)


def settings(**changes) -> grading.Settings:
    return grading.Settings(**{"jobs": 2, "secret": SECRET, **changes})


def answer_cell(nb, question: str) -> int:
    """Index of the cell that holds the answer to ``question`` (just before its check cell)."""
    check = f'grader.check("{question}")'
    (index,) = [i for i, c in enumerate(nb.cells) if c.source.strip() == check]
    return index - 1


def scores(row: dict[str, str], points: dict[str, float]) -> dict[str, float]:
    return {**{q: float(row[q]) for q in points}, "score": float(row["score"])}


def insert_code(nb, index: int, source: str):
    nb.cells.insert(index, nbformat.v4.new_code_cell(source))
    return nb


def test_every_assignment_has_points_hidden_tests_and_a_written_question(bundle):
    assert set(NAMES) >= set(WRONG), "each WRONG entry must name an existing assignment"
    for name in NAMES:
        spec = grading.load(name)
        assert len(spec.auto) >= 3 and all(p > 0 for p in spec.auto.values()), name
        assert spec.manual, f"{name}: no question graded by hand"
        hidden = [t for q in spec.questions.values() for t in q.tests if t.hidden]
        for question in spec.auto:
            assert any(t.question == question for t in hidden), (name, question)
        student = (bundle / f"{name}.ipynb").read_text(encoding="utf-8")
        with zipfile.ZipFile(bundle / "autograder" / f"{name}.zip") as zf:
            shipped = student + "".join(zf.read(f).decode(errors="replace") for f in zf.namelist())
        assert grading.GRADING_MARK not in shipped and "hidden=True" not in shipped, name
        for test in hidden:  # not even the names of the hidden tests reach students
            assert f"def {test.name}" not in shipped, (name, test.name)
        nb = nbformat.read(bundle / f"{name}.ipynb", as_version=4)
        prompts = [c.source for c in nb.cells if c.cell_type == "markdown"]
        for question, points in {**spec.auto, **spec.manual}.items():  # points shown to students
            number = question.lstrip("q")
            (prompt,) = [p for p in prompts if f"**Question {number} " in p]
            assert f"_Points:_ {points:g}" in prompt, (name, question)
        assert nb.metadata["course"] == {"assignment": name}


@pytest.mark.parametrize("name", NAMES)
def test_solution_full_blank_zero_one_wrong_loses_its_points(bundle, name, tmp_path):
    points = grading.load(name).auto
    nbformat.write(solution(bundle, name), tmp_path / "solution.ipynb")
    (tmp_path / "student.ipynb").write_bytes((bundle / f"{name}.ipynb").read_bytes())
    wrong = solution(bundle, name)
    if name in WRONG:
        question, code = WRONG[name]
        wrong.cells[answer_cell(wrong, question)].source += "\n\n" + code
    else:
        question = next(iter(points))
        blank = nbformat.read(bundle / f"{name}.ipynb", as_version=4)
        wrong.cells[answer_cell(wrong, question)] = blank.cells[answer_cell(blank, question)]
    nbformat.write(wrong, tmp_path / "wrong.ipynb")
    lost = solution(bundle, name)  # a correct notebook whose metadata an editor dropped
    lost.metadata = {}
    nbformat.write(lost, tmp_path / "no-metadata.ipynb")

    start = time.monotonic()
    grading.grade_folder(tmp_path, settings=settings(), echo=lambda *_: None)
    seconds = time.monotonic() - start
    grades = read_grades(tmp_path)

    possible = sum(points.values())
    full = {**points, "score": possible}
    assert list(grades["solution.ipynb"])[2 : 2 + len(points)] == list(points)
    assert scores(grades["solution.ipynb"], points) == full
    assert scores(grades["no-metadata.ipynb"], points) == full
    assert scores(grades["student.ipynb"], points) == {**dict.fromkeys(points, 0.0), "score": 0.0}
    expected = {**points, question: 0.0, "score": possible - points[question]}
    assert scores(grades["wrong.ipynb"], points) == expected
    assert all(row["possible"] == f"{possible:g}" for row in grades.values())
    # Four submissions and the reference, each in one sandbox per level of absent packages (two,
    # three for saddle-to-saddle), two at a time: 5-15 s a sandbox on a 2-core machine loaded
    # five times over (measured: 29-70 s per folder), so 90 s per level bounds a slowdown only.
    levels = len(grading.levels(grading._tests_for(grading.load(name), SECRET)))
    assert seconds <= 90 * levels, f"grading four submissions took {seconds:.0f} s"


def test_misbehaving_submissions_are_contained(bundle, tmp_path):
    name = "gradient-flow"
    spec = grading.load(name)
    points = spec.auto
    first, second = list(points)[:2]
    nbformat.write(solution(bundle, name), tmp_path / "solution.ipynb")
    nbformat.write(
        insert_code(solution(bundle, name), 2, 'raise RuntimeError("boom")'),
        tmp_path / "raises.ipynb",
    )
    loops = solution(bundle, name)
    loops.cells[answer_cell(loops, second)].source = "while True:\n    pass\n"
    nbformat.write(loops, tmp_path / "loops.ipynb")
    stubborn = (  # catches the grader's timeout too: only killing it ends it
        "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n"
        "    except BaseException:\n        pass\n"
    )
    nbformat.write(insert_code(solution(bundle, name), 2, stubborn), tmp_path / "never-ends.ipynb")
    junk = solution(bundle, name)
    junk.cells.append(
        nbformat.v4.new_code_cell(
            "import sys\n"
            "for i in range(20_000):\n"
            "    print('\\x1b[31m\\u2603' * 20, i, file=sys.stderr if i % 2 else sys.stdout)\n"
            "del descent_iterate\n"
            "del lib\n"
        )
    )
    nbformat.write(junk, tmp_path / "junk.ipynb")
    nbformat.write(
        insert_code(solution(bundle, name), 2, "import os\nos._exit(3)"),
        tmp_path / "kills-itself.ipynb",
    )
    (tmp_path / "not-a-notebook.ipynb").write_text("{ this is not json", encoding="utf-8")
    other_kernel = solution(bundle, name)  # saved from an editor with its own kernel name
    other_kernel.metadata["kernelspec"] = {"name": "my-env", "display_name": "My env"}
    nbformat.write(other_kernel, tmp_path / "other-kernel.ipynb")
    (tmp_path / "wrong-chapter.ipynb").write_bytes((bundle / "ssm-basics.ipynb").read_bytes())
    written = solution(bundle, name)
    (answer,) = [i for i, c in enumerate(written.cells) if "**Question 4" in c.source]
    written.cells[answer + 1].source = "The second-order term makes the prediction too large."
    nbformat.write(written, tmp_path / "written.ipynb")

    messages = []
    grading.grade_folder(
        tmp_path,
        assignment=name,
        settings=settings(timeout=45, cell_timeout=10),
        echo=messages.append,
    )
    grades = read_grades(tmp_path)
    possible = sum(points.values())
    full = {**points, "score": possible}
    zero = {**dict.fromkeys(points, 0.0), "score": 0.0}

    assert scores(grades["solution.ipynb"], points) == full
    assert scores(grades["raises.ipynb"], points) == full  # a cell that raises costs nothing else
    assert scores(grades["other-kernel.ipynb"], points) == full
    assert scores(grades["written.ipynb"], points) == full
    assert scores(grades["loops.ipynb"], points) == {
        **points,
        second: 0.0,
        "score": possible - points[second],
    }
    assert scores(grades["never-ends.ipynb"], points) == zero
    assert grades["never-ends.ipynb"]["status"] == "timeout after 45 s"
    assert scores(grades["junk.ipynb"], points) == {
        **points,
        first: 0.0,
        "score": possible - points[first],
    }
    assert scores(grades["kills-itself.ipynb"], points) == zero
    assert scores(grades["not-a-notebook.ipynb"], points) == zero
    assert grades["not-a-notebook.ipynb"]["status"].startswith("not a notebook")
    assert scores(grades["wrong-chapter.ipynb"], points) == zero
    assert "another assignment (ssm-basics)" in grades["wrong-chapter.ipynb"]["status"]
    progress = "\n".join(messages)
    assert re.search(r"\] 0 / \S+ \(timeout after 45 s, \d+ s\): 'never-ends\.ipynb'", progress)
    assert re.search(r"\] 0 / \S+ \(not a notebook.*\): 'not-a-notebook\.ipynb'", progress)
    assert "\x1b" not in progress

    feedback = tmp_path / "feedback"
    raises = (feedback / "raises.txt").read_text(encoding="utf-8")
    assert "cell 3" in raises and "RuntimeError: boom" in raises  # names the cell that raised
    looping = (feedback / "loops.txt").read_text(encoding="utf-8")
    assert "Question 2: ran too long and was stopped" in looping
    never = (feedback / "never-ends.txt").read_text(encoding="utf-8")
    assert "stopped while running cell 3" in never
    answers = (tmp_path / "written" / "q4.md").read_text(encoding="utf-8")
    assert "## written.ipynb" in answers
    assert "The second-order term makes the prediction too large." in answers
    assert grades["written.ipynb"]["q4"] == ""  # for the instructor to fill in


def test_grader_refuses_a_folder_of_mixed_assignments(bundle, tmp_path):
    for name in NAMES[:2]:
        (tmp_path / f"{name}.ipynb").write_bytes((bundle / f"{name}.ipynb").read_bytes())
    with pytest.raises(ValueError, match="one assignment per folder"):
        grading.grade_folder(tmp_path, settings=settings(), echo=lambda *_: None)


def test_personal_notebooks_and_stale_bundles(tmp_path):
    name = "gradient-flow"
    roster = tmp_path / "roster.txt"
    roster.write_text("alice\nbob  # a comment\n\n", encoding="utf-8")
    out = tmp_path / "student"
    made = assignments.make_student(
        out, [name], students=assignments.read_roster(roster), secret=SECRET
    )
    assert [p.name for p in made] == [f"{name}.ipynb", "alice.ipynb", "bob.ipynb"]
    alice = nbformat.read(out / name / "alice.ipynb", as_version=4)
    assert alice.metadata["course"] == {"assignment": name, "student": "alice"}
    cells = [c.source for c in alice.cells if c.source.startswith(grading.PARAMETERS_MARK)]
    drawn = grading.draw(grading.load(name).parameters, SECRET, name, "alice")
    for parameter, value in drawn.items():
        assert any(f"{parameter} = {value!r}  # for alice" in c for c in cells), parameter
    # Unchanged source and secret: nothing is rebuilt; a changed stamp: rebuilt.
    stamp = out / "autograder" / f"{name}.stamp"
    before = (out / f"{name}.ipynb").stat().st_mtime_ns
    assignments.make_student(out, [name], secret=SECRET)
    assert (out / f"{name}.ipynb").stat().st_mtime_ns == before
    stamp.write_text(json.dumps({"source": "old", "secret": "old"}), encoding="utf-8")
    messages = []
    with pytest.raises(ValueError, match="COURSE_SECRET differs"):
        assignments.check_bundle(name, out, SECRET, echo=messages.append)
    assignments.make_student(out, [name], secret=SECRET)
    assert (out / f"{name}.ipynb").stat().st_mtime_ns != before
    assignments.check_bundle(name, out, SECRET, echo=messages.append)
    assert messages == []
    with pytest.raises(ValueError, match="student id"):
        roster.write_text("../etc/passwd\n", encoding="utf-8")
        assignments.read_roster(roster)


def test_make_grade_runs_the_grader():
    dry = subprocess.run(
        ["make", "-n", "grade", "SUBMISSIONS=some/folder", "MEMORY=2G"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "tools/assignments.py grade" in dry.stdout and "some/folder" in dry.stdout
    assert "--memory 2G" in dry.stdout
    secret = subprocess.run(
        ["make", "-n", "grade", "SUBMISSIONS=x", "COURSE_SECRET=do-not-print"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "do-not-print" not in secret.stdout  # read from the environment, never echoed
    dry = subprocess.run(["make", "-n", "student"], cwd=ROOT, capture_output=True, text=True)
    assert "tools/assignments.py student" in dry.stdout
