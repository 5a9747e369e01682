"""Acceptance tests of the course assignments: tools/assignments.py on otter-grader.

For every assignment in book/assignments/: the solution notebook scores full marks, the untouched
student notebook scores 0 on every question without crashing the grader, and a notebook with one
wrong answer loses exactly that question's points. On one assignment, a folder of misbehaving
submissions (one raises, one loops in a cell, one never ends at all, one deletes variables and
prints junk, one kills its kernel, one is not a notebook, one names a kernel this machine lacks)
is graded, and the others in the folder still are. Grading three submissions takes at most two
minutes.

Each folder is graded by one call of the grader (each submission in its own process and kernel,
two at a time): about 2 minutes of CPU time in all, several minutes of wall time on a loaded
2-core machine.
"""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.not_numerics

_spec = importlib.util.spec_from_file_location("assignments", ROOT / "tools" / "assignments.py")
assignments = importlib.util.module_from_spec(_spec)
sys.modules["assignments"] = assignments
_spec.loader.exec_module(assignments)

NAMES = [p.stem for p in assignments.sources()]

# One wrong answer per assignment: (question, code appended to that question's answer cell).
# Several pass the public test and fail only the hidden ones, as a plausible mistake would.
# An assignment missing here gets its first answer replaced by the student's blank stub instead.
WRONG = {
    "gradient-flow": (  # right for diagonal H only
        "q1",
        "def flow_point(H, theta0, t):\n    return np.exp(-t * np.diag(H)) * theta0\n",
    ),
    "ssm-basics": ("q3", "gen_next = 4.0\n"),
    "extrapolation": ("q3", "def predicted_first_difference(d_hat):\n    return 5\n"),
    "dynamical-characterization": (  # the factor (l + 1) forgotten: right for kappa = 2 only
        "q1",
        "def gammas(a, b, c, x, y):\n"
        "    n, kappa = x.shape\n"
        "    residual = y - lib.ssm_output(a, b, c, x)\n"
        "    return 2 / n * (residual @ x[:, : kappa - 1].flip(-1))\n",
    ),
    "poisoning-theorem": (
        "q2",
        "def escape_time(a1, kappa):\n    return a1 ** (-(kappa - 3)) / (2 * (kappa - 1))\n",
    ),
    "poisoning-in-practice": (  # 1/L instead of 1/(L - 1): passes the public test
        "q1",
        "def pole_budget(e, L):\n    return float((1 + e) ** (1 / L) - 1)\n",
    ),
    "linear-networks": ("q2", "def h3(t):\n    return np.tan(t)\n"),  # odd, 0 at 0: public passes
    "saddle-to-saddle": (  # the Frobenius norm: right for one output, as in the public test
        "q2",
        "def linear_speed(X, G):\n"
        "    return float(torch.linalg.matrix_norm(G.reshape(len(G), -1).T @ X))\n",
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
    out = tmp_path_factory.mktemp("student")
    assignments.make_student(out)
    return out


def answer_cell(nb, question: str) -> int:
    """Index of the cell that holds the answer to ``question`` (just before its check cell)."""
    check = f'grader.check("{question}")'
    (index,) = [i for i, c in enumerate(nb.cells) if c.source.strip() == check]
    return index - 1


def read_grades(folder: Path) -> dict[str, dict[str, float]]:
    with open(folder / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {row.pop("submission"): {k: float(v) for k, v in row.items()} for row in rows}


def solution(bundle: Path, name: str):
    return nbformat.read(bundle / "autograder" / f"{name}.ipynb", as_version=4)


def insert_code(nb, index: int, source: str):
    nb.cells.insert(index, nbformat.v4.new_code_cell(source))
    return nb


def test_every_assignment_has_three_questions_with_points(bundle):
    assert set(NAMES) >= set(WRONG), "each WRONG entry must name an existing assignment"
    for name in NAMES:
        points = assignments.questions(bundle / "autograder" / f"{name}.zip")
        assert len(points) >= 3 and all(p > 0 for p in points.values()), (name, points)
        student = (bundle / f"{name}.ipynb").read_text(encoding="utf-8")
        assert "hidden=True" not in student  # hidden tests stay in the autograder bundle
        with __import__("zipfile").ZipFile(bundle / "autograder" / f"{name}.zip") as zf:
            tests = "".join(zf.read(f).decode() for f in zf.namelist() if f.startswith("tests/"))
        assert "hidden=True" in tests and "hidden=False" in tests, name


@pytest.mark.parametrize("name", NAMES)
def test_solution_full_blank_zero_one_wrong_loses_its_points(bundle, name, tmp_path):
    points = assignments.questions(bundle / "autograder" / f"{name}.zip")
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

    start = time.monotonic()
    assignments.grade_folder(tmp_path, bundle_dir=bundle, jobs=2, echo=lambda *_: None)
    seconds = time.monotonic() - start
    grades = read_grades(tmp_path)

    possible = sum(points.values())
    assert list(grades["solution.ipynb"]) == [*points, "score", "possible"]
    assert grades["solution.ipynb"] == {**points, "score": possible, "possible": possible}
    assert grades["student.ipynb"] == {
        **dict.fromkeys(points, 0.0),
        "score": 0.0,
        "possible": possible,
    }
    expected = {**points, question: 0.0, "score": possible - points[question], "possible": possible}
    assert grades["wrong.ipynb"] == expected
    assert seconds <= 120, f"grading three submissions took {seconds:.0f} s"


def test_misbehaving_submissions_are_contained(bundle, tmp_path):
    name = "gradient-flow" if "gradient-flow" in NAMES else NAMES[0]
    points = assignments.questions(bundle / "autograder" / f"{name}.zip")
    first, second = list(points)[:2]
    nb = solution(bundle, name)
    nbformat.write(nb, tmp_path / "solution.ipynb")
    nbformat.write(
        insert_code(solution(bundle, name), 2, 'raise RuntimeError("boom")'),
        tmp_path / "raises.ipynb",
    )
    loops = solution(bundle, name)
    loops.cells[answer_cell(loops, second)].source = "while True:\n    pass\n"
    nbformat.write(loops, tmp_path / "loops.ipynb")
    stubborn = (  # catches the grader's TimeoutError too: only killing it ends it
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
            f"del {junk.cells[answer_cell(junk, first)].source.split('def ')[1].split('(')[0]}\n"
            "del lib\n"
        )
    )
    nbformat.write(junk, tmp_path / "junk.ipynb")
    nbformat.write(
        insert_code(solution(bundle, name), 2, "import os\nos._exit(3)"),
        tmp_path / "kills-kernel.ipynb",
    )
    (tmp_path / "not-a-notebook.ipynb").write_text("{ this is not json", encoding="utf-8")
    other_kernel = solution(bundle, name)  # saved from an editor with its own kernel name
    other_kernel.metadata["kernelspec"] = {"name": "my-env", "display_name": "My env"}
    nbformat.write(other_kernel, tmp_path / "other-kernel.ipynb")

    messages = []
    assignments.grade_folder(
        tmp_path,
        bundle_dir=bundle,
        assignment=name,
        timeout=90,
        cell_timeout=20,
        jobs=2,
        echo=messages.append,
    )
    grades = read_grades(tmp_path)
    possible = sum(points.values())
    zero = {**dict.fromkeys(points, 0.0), "score": 0.0, "possible": possible}

    assert grades["solution.ipynb"]["score"] == possible
    assert grades["raises.ipynb"]["score"] == possible  # a cell that raises costs nothing else
    assert grades["other-kernel.ipynb"]["score"] == possible
    assert grades["loops.ipynb"] == {
        **points,
        second: 0.0,
        "score": possible - points[second],
        "possible": possible,
    }
    assert grades["never-ends.ipynb"] == zero
    assert grades["junk.ipynb"] == {
        **points,
        first: 0.0,
        "score": possible - points[first],
        "possible": possible,
    }
    assert grades["kills-kernel.ipynb"] == zero
    assert grades["not-a-notebook.ipynb"] == zero
    progress = "\n".join(messages)
    assert "never-ends.ipynb: 0 / " in progress and "timeout after 90 s" in progress
    assert "not-a-notebook.ipynb: 0 / " in progress and "not a notebook" in progress
    assert (tmp_path / "grading-logs" / "junk.txt").is_file()


def test_grader_refuses_a_folder_of_mixed_assignments(bundle, tmp_path):
    if len(NAMES) < 2:
        pytest.skip("needs two assignments")
    for name in NAMES[:2]:
        (tmp_path / f"{name}.ipynb").write_bytes((bundle / f"{name}.ipynb").read_bytes())
    with pytest.raises(ValueError, match="one assignment per folder"):
        assignments.grade_folder(tmp_path, bundle_dir=bundle, echo=lambda *_: None)


def test_make_grade_runs_the_grader():
    dry = subprocess.run(
        ["make", "-n", "grade", "SUBMISSIONS=some/folder"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "tools/assignments.py grade" in dry.stdout and "some/folder" in dry.stdout
    dry = subprocess.run(["make", "-n", "student"], cwd=ROOT, capture_output=True, text=True)
    assert "tools/assignments.py student" in dry.stdout
