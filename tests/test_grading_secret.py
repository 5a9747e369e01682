"""The course secret: hidden inputs change with COURSE_SECRET, so answers hard-coded for one
secret fail under another; per-student parameters differ between students, so numbers copied from
a classmate fail. Graded on the gradient-flow assignment: two folders of two submissions each.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import nbformat
import numpy as np
import pytest
from grading_support import ROOT, grading, read_grades, solution, student_bundle

pytestmark = pytest.mark.not_numerics

harness_spec = importlib.util.spec_from_file_location(
    "grading_harness", ROOT / "tools" / "grading_harness.py"
)
harness = importlib.util.module_from_spec(harness_spec)
harness_spec.loader.exec_module(harness)

NAME = "gradient-flow"


def run_solution(spec, parameters: dict) -> dict:
    """The solution's namespace, computed here (trusted code) with the given parameters."""
    namespace: dict = {}
    for _, source in spec.solution_cells:
        exec(source, namespace)
        if source.lstrip().startswith(grading.PARAMETERS_MARK):
            namespace.update(parameters)
    return namespace


def answers_for(spec, secret: str, namespace: dict) -> dict[str, list]:
    """``{function: [(inputs as JSON, answer as a list)]}`` for every call the tests make."""
    table: dict[str, list] = {}
    for question in spec.questions.values():
        for test in question.tests:
            for probe in grading.probes(spec, test, secret):
                if "call" not in probe.spec:
                    continue
                args = harness.decode(probe.spec["args"])
                answer = np.asarray(namespace[probe.spec["call"]](*args), dtype=float)
                table.setdefault(probe.spec["call"], []).append(
                    (json.dumps(probe.spec["args"]), answer.tolist())
                )
    return table


def hard_coded(table: dict[str, list]) -> str:
    """Code that answers from a lookup table of inputs, and with zeros otherwise."""
    lines = ["import json", "import numpy as np", f"TABLE = {json.dumps(table)!r}"]
    lines.append("TABLE = {k: dict(v) for k, v in json.loads(TABLE).items()}")
    lines.append("def _encode(x):")
    lines.append("    if isinstance(x, np.ndarray):")
    lines.append("        return {'$array': x.tolist(), 'dtype': str(x.dtype), 'kind': 'numpy'}")
    lines.append("    return x")
    for function in table:
        lines.append(f"def {function}(*args):")
        lines.append("    key = json.dumps([_encode(a) for a in args])")
        lines.append(f"    return np.asarray(TABLE[{function!r}].get(key, 0.0))")
    return "\n".join(lines) + "\n"


def grade(folder: Path, secret: str) -> dict[str, dict[str, str]]:
    grading.grade_folder(
        folder, settings=grading.Settings(jobs=2, secret=secret), echo=lambda *_: None
    )
    return read_grades(folder)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return student_bundle(tmp_path_factory)


def test_hidden_inputs_follow_the_secret():
    spec = grading.load(NAME)
    for question in spec.questions.values():
        for test in question.tests:
            first = [p.spec for p in grading.probes(spec, test, "first secret")]
            again = [p.spec for p in grading.probes(spec, test, "first secret")]
            other = [p.spec for p in grading.probes(spec, test, "second secret")]
            assert first == again, test.key  # an exact comparison: the same draws, replayed
            uses_inputs = test.hidden and any("call" in p for p in first)
            assert (first != other) == uses_inputs, test.key


def test_answers_hard_coded_for_one_secret_fail_under_another(bundle, tmp_path):
    spec = grading.load(NAME)
    namespace = run_solution(spec, grading.draw(spec.parameters, "first secret", NAME, None))
    table = answers_for(spec, "first secret", namespace)
    assert {"descent_iterate", "flow_point", "predicted_gap"} <= set(table)
    cheat = solution(bundle, NAME)
    cheat.cells.append(nbformat.v4.new_code_cell(hard_coded(table)))
    nbformat.write(cheat, tmp_path / "hard-coded.ipynb")
    nbformat.write(
        solution(bundle, NAME),
        tmp_path / "honest.ipynb",
    )
    first = grade(tmp_path, "first secret")
    full = first["honest.ipynb"]["possible"]  # every code question's points
    assert first["hard-coded.ipynb"]["score"] == first["honest.ipynb"]["score"] == full
    second = grade(tmp_path, "second secret")
    assert second["honest.ipynb"]["score"] == full
    row = second["hard-coded.ipynb"]
    assert (row["q1"], row["q2"], row["q3"]) == ("0", "3", "0")  # only q2 was honest work


def test_numbers_copied_from_a_classmate_fail(bundle, tmp_path):
    spec = grading.load(NAME)
    secret = "first secret"
    alice = grading.draw(spec.parameters, secret, NAME, "alice")
    bob = grading.draw(spec.parameters, secret, NAME, "bob")
    assert alice != bob and alice == grading.draw(spec.parameters, secret, NAME, "alice")
    assert alice != grading.draw(spec.parameters, "second secret", NAME, "alice")
    for student in ("alice", "bob"):  # honest work with each student's own parameters
        nb = solution(bundle, NAME)
        nb.metadata["course"] = {"assignment": NAME, "student": student}
        nbformat.write(nb, tmp_path / f"{student}.ipynb")
    theirs = run_solution(spec, alice)
    copied = nbformat.read(tmp_path / "bob.ipynb", as_version=4)
    copied.cells.append(
        nbformat.v4.new_code_cell(
            f"errors = np.array({theirs['errors'].tolist()!r})\nslope = {theirs['slope']!r}\n"
            f"measured_gap = {theirs['measured_gap']!r}\nratio = {theirs['ratio']!r}\n"
        )
    )
    copied.metadata["course"]["student"] = "bob"
    nbformat.write(copied, tmp_path / "bob-copied-from-alice.ipynb")
    grades = grade(tmp_path, secret)
    full = grades["alice.ipynb"]["possible"]
    assert grades["alice.ipynb"]["score"] == grades["bob.ipynb"]["score"] == full
    row = grades["bob-copied-from-alice.ipynb"]
    assert (row["student"], row["q1"], row["q2"], row["q3"]) == ("bob", "3", "0", "0")
