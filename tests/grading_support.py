"""What the grading tests share (tests/test_assignments.py, tests/test_grading_*.py): the course
tools loaded once as modules, the student bundles made once per test session, a sandboxed Python
probe, and a folder graded and its grades.csv read back.

tools/ is not a package: tools/assignments.py is loaded from its file, and it imports
tools/grading.py and tools/sandbox.py by name. Loading them once keeps one ``grading`` module for
every test file, so the reference solution's runs it remembers (``grading.reference_run``) are
shared between them.
"""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_assignments():
    if "assignments" not in sys.modules:
        path = ROOT / "tools" / "assignments.py"
        spec = importlib.util.spec_from_file_location("assignments", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["assignments"] = module
        spec.loader.exec_module(module)
    return sys.modules["assignments"]


assignments = _load_assignments()
grading = assignments.grading
sandbox = grading.sandbox


def skip_without_sandbox() -> None:
    """Skip the calling test where no sandbox can run (no bubblewrap, and not root to install)."""
    if reason := sandbox.missing():
        pytest.skip(reason)


_BUNDLE: list[Path] = []


def student_bundle(tmp_path_factory) -> Path:
    """Every assignment's student notebook and solution notebook, made by ``otter assign`` once
    per test session (a test that changes a notebook writes its copy elsewhere). What ``otter
    assign`` writes does not depend on the course secret: only a roster's personal notebooks do,
    and none is made here."""
    skip_without_sandbox()
    if not _BUNDLE:
        out = tmp_path_factory.mktemp("student")
        assignments.make_student(out, secret="bundle-secret")
        _BUNDLE.append(out)
    return _BUNDLE[0]


def solution(bundle: Path, name: str):
    """The solution notebook of assignment ``name`` in ``bundle``."""
    return nbformat.read(bundle / "autograder" / f"{name}.ipynb", as_version=4)


def read_grades(folder: Path) -> dict[str, dict[str, str]]:
    """``folder/grades.csv`` as ``{submission file name: row}``."""
    with open(folder / "grades.csv", newline="", encoding="utf-8") as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


def grade(folder: Path, settings, *, assignment: str | None = None, echo=None):
    """Grade ``folder`` as ``make grade COURSE_SECRET=...`` does (the secret in the environment
    too); return its rows and the terminal's lines."""
    messages: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COURSE_SECRET", settings.secret)
        grading.grade_folder(
            folder, assignment=assignment, settings=settings, echo=echo or messages.append
        )
    return read_grades(folder), messages


def run_python(code: str, limits=None):
    """Run ``python -I -c code`` in a sandbox that sees the Python installation only."""
    return sandbox.run(
        [sys.executable, "-I", "-c", code],
        stdin=b"",
        mounts=[(p, str(p)) for p in sandbox.python_mounts()],
        limits=limits or sandbox.Limits(wall_seconds=120),
    )
