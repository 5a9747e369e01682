"""Assignments for a course, on otter-grader: make the student notebooks, grade a folder.

Usage::

    python tools/assignments.py student [--out _build/student] [NAME ...]
    python tools/assignments.py grade FOLDER [--bundle _build/student] [--assignment NAME]
                                      [--timeout 300] [--cell-timeout 60] [--jobs 2]

Each chapter has a short companion assignment, ``book/assignments/<name>.md``: a jupytext MyST
notebook in otter-grader's assignment format (``# BEGIN QUESTION`` raw cells with a name and
points, ``# BEGIN SOLUTION`` / ``# END SOLUTION`` around the answers, ``# BEGIN TESTS`` cells with
public tests and ``hidden: true`` ones). otter-grader does the real work; this file is the glue it
lacks:

``student``
    converts each assignment to ``.ipynb`` with jupytext and runs ``otter assign`` on it, then
    writes ``<out>/<name>.ipynb`` (the student notebook, public tests only, to hand out),
    ``<out>/autograder/<name>.zip`` (otter's autograder bundle, hidden tests included, also what
    Gradescope takes) and ``<out>/autograder/<name>.ipynb`` (the solution notebook).

``grade``
    grades every ``.ipynb`` in FOLDER with ``otter run`` (otter's grading without Docker), each in
    its own child process (which starts its own Jupyter kernel): never in this process. A cell that
    runs longer than ``--cell-timeout`` seconds is interrupted (its question fails, the others are
    still graded); a submission that outlives ``--timeout`` is killed with its kernel and scores 0.
    A notebook that is not valid JSON scores 0. Progress goes to stdout; the scores go to
    ``FOLDER/grades.csv`` (columns ``submission``, one per question, ``score``, ``possible``) and
    otter's output for each submission to ``FOLDER/grading-logs/<submission>.txt``.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "book" / "assignments"
BUNDLE = ROOT / "_build" / "student"

# Prepended to a copy of each submission before grading: IPython hooks arm an interval timer
# before every cell and disarm it after, so a cell that never ends raises TimeoutError (which
# the grading run records like any other error, and goes on). The names are deleted again.
CELL_TIMER = """\
import signal as _otter_signal


def _otter_ring(signum, frame):
    raise TimeoutError("this cell ran longer than {seconds} s and was stopped by the grader")


_otter_signal.signal(_otter_signal.SIGALRM, _otter_ring)
get_ipython().events.register(
    "pre_run_cell", lambda *_: _otter_signal.setitimer(_otter_signal.ITIMER_REAL, {seconds})
)
get_ipython().events.register(
    "post_run_cell", lambda *_: _otter_signal.setitimer(_otter_signal.ITIMER_REAL, 0)
)
del _otter_ring
"""


def sources(names: list[str] | None = None, folder: Path | None = None) -> list[Path]:
    """The assignment sources ``folder/<name>.md``, sorted (all of them if ``names`` is empty)."""
    found = sorted((SOURCES if folder is None else folder).glob("*.md"))
    if not names:
        return found
    by_name = {p.stem: p for p in found}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"no assignment named {missing}; there are {sorted(by_name)}")
    return [by_name[n] for n in names]


def make_student(out: Path = BUNDLE, names: list[str] | None = None) -> list[Path]:
    """Run ``otter assign`` on every assignment; return the student notebooks written."""
    import jupytext
    from otter.assign import main as otter_assign

    (out / "autograder").mkdir(parents=True, exist_ok=True)
    written = []
    for source in sources(names):
        name = source.stem
        with tempfile.TemporaryDirectory(prefix=f"assign-{name}-") as scratch:
            master = Path(scratch) / f"{name}.ipynb"
            notebook = jupytext.read(source, fmt="md:myst")
            _add_grading_environment(notebook, source)
            jupytext.write(notebook, master, fmt="ipynb")
            result = Path(scratch) / "dist"
            otter_assign(str(master), str(result), no_pdfs=True, no_run_tests=True)
            (bundle,) = (result / "autograder").glob("*.zip")
            _check_name(bundle, name)
            shutil.copy(bundle, out / "autograder" / f"{name}.zip")
            shutil.copy(
                result / "autograder" / f"{name}.ipynb", out / "autograder" / f"{name}.ipynb"
            )
            shutil.copy(result / "student" / f"{name}.ipynb", out / f"{name}.ipynb")
        written.append(out / f"{name}.ipynb")
    return written


def grading_requirements() -> list[str]:
    """What an autograder outside this repository (Gradescope) installs to ``import lib``.

    The exact pins of ``requirements-lock.txt`` for lib's own dependencies (``pyproject.toml``),
    and the package itself from the repository named in ``pyproject.toml``.
    """
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = {re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    pins = [
        line.strip()
        for line in (ROOT / "requirements-lock.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line and line.split("==")[0].strip().lower() in wanted
    ]
    return [*pins, f"{project['name']} @ git+{project['urls']['Repository']}"]


def _add_grading_environment(notebook, source: Path) -> None:
    """Append the Gradescope environment (Python version, requirements) to the config cell."""
    cells = [c for c in notebook.cells if c.source.lstrip().startswith("# ASSIGNMENT CONFIG")]
    if len(cells) != 1:
        raise ValueError(f"{source}: needs exactly one '# ASSIGNMENT CONFIG' raw cell")
    version = ".".join(map(str, sys.version_info[:2]))
    lines = [f'python_version: "{version}"', "requirements:"]
    lines += [f"  - {json.dumps(r)}" for r in grading_requirements()]
    cells[0].source = cells[0].source.rstrip() + "\n" + "\n".join(lines) + "\n"


def _check_name(bundle: Path, name: str) -> None:
    with zipfile.ZipFile(bundle) as zf:
        config = json.loads(zf.read("otter_config.json"))
    if config.get("assignment_name") != name:
        raise ValueError(
            f"book/assignments/{name}.md: its ASSIGNMENT CONFIG must say `name: {name}` "
            f"(the file's name), not {config.get('assignment_name')!r}"
        )


def _natural(text: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def questions(bundle: Path) -> dict[str, float]:
    """``{question: points}`` from the test files of an otter autograder zip, in natural order.

    Read with ``ast`` (never executed): each ``tests/<q>.py`` has ``points = <number>`` (every
    question of the book's assignments states its points).
    """
    found = {}
    with zipfile.ZipFile(bundle) as zf:
        for item in zf.namelist():
            if not (item.startswith("tests/") and item.endswith(".py")):
                continue
            tree = ast.parse(zf.read(item).decode("utf-8"))
            values = {
                node.targets[0].id: node.value
                for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            }
            name, points = ast.literal_eval(values["name"]), ast.literal_eval(values["points"])
            if not isinstance(points, int | float):
                raise ValueError(f"{bundle}: question {name} must state its total points")
            found[name] = float(points)
    return dict(sorted(found.items(), key=lambda kv: _natural(kv[0])))


def assignment_of(notebook: Path) -> str | None:
    """The otter assignment name in a notebook's metadata (``None`` if unreadable or absent)."""
    try:
        meta = json.loads(notebook.read_text(encoding="utf-8"))["metadata"]
        return meta["otter"]["assignment_name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass
class Grade:
    submission: str
    scores: dict[str, float] = field(default_factory=dict)
    status: str = "graded"
    seconds: float = 0.0


def _prepare(submission: Path, scratch: Path, cell_timeout: float) -> Path | None:
    """A copy of the submission to grade: the cell timer in front, this environment's kernel.

    ``None`` if the file is not a notebook.
    """
    import nbformat

    try:
        nb = nbformat.read(submission, as_version=4)
    except Exception:  # any unreadable file: graded as zero
        return None
    timer = nbformat.v4.new_code_cell(CELL_TIMER.format(seconds=cell_timeout))
    nb.cells.insert(0, timer)
    # Whatever kernel the student's editor recorded, grade in this environment's Python kernel.
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    copy = scratch / "submission.ipynb"
    nbformat.write(nb, copy)
    return copy


def _kill_tree(process: subprocess.Popen) -> None:
    """Kill a child process and all its descendants (the kernel runs in a session of its own)."""
    import psutil

    try:
        family = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for member in [*family]:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    process.kill()
    process.wait()


def grade_one(
    submission: Path, bundle: Path, *, timeout: float, cell_timeout: float, log: Path
) -> Grade:
    """Grade one notebook with ``otter run`` in a child process; zeros if it fails or times out."""
    grade = Grade(submission.name)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch_dir:
        scratch = Path(scratch_dir)
        copy = _prepare(submission, scratch, cell_timeout)
        if copy is None:
            grade.status = "not a notebook"
            log.write_text("the file could not be read as a Jupyter notebook\n", encoding="utf-8")
            return grade
        results = scratch / "results"
        results.mkdir()
        command = [sys.executable, "-m", "otter", "run", "--no-logo"]
        command += ["-a", str(bundle), "-o", str(results), str(copy)]
        env = dict(os.environ)
        # The kernelspec runs "python": the one beside this interpreter (the venv's).
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        with open(log, "w", encoding="utf-8") as out:
            process = subprocess.Popen(
                command,
                cwd=scratch,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_tree(process)
                grade.status = f"timeout after {timeout:g} s"
        try:
            tests = json.loads((results / "results.json").read_text(encoding="utf-8"))["tests"]
            grade.scores = {t["name"]: float(t["score"]) for t in tests if "max_score" in t}
            with open(log, "a", encoding="utf-8") as out:  # what each test said, for the teacher
                out.writelines(f"\n{t['name']}:\n{t.get('output', '')}\n" for t in tests)
        except (OSError, ValueError, KeyError, TypeError):
            if grade.status == "graded":
                grade.status = f"grader error (exit code {process.returncode}), see the log"
    grade.seconds = time.monotonic() - start
    return grade


def grade_folder(
    folder: Path,
    *,
    bundle_dir: Path = BUNDLE,
    assignment: str | None = None,
    timeout: float = 300.0,
    cell_timeout: float = 60.0,
    jobs: int = 2,
    echo=print,
) -> Path:
    """Grade every ``.ipynb`` in ``folder``; write ``folder/grades.csv`` and return its path."""
    folder = Path(folder)
    submissions = sorted(p for p in folder.glob("*.ipynb") if p.is_file())
    if not submissions:
        raise ValueError(f"{folder}: no .ipynb submissions to grade")
    if assignment is None:
        names = {n for n in map(assignment_of, submissions) if n is not None}
        if len(names) != 1:
            raise ValueError(
                f"{folder}: cannot tell which assignment these notebooks are for (found "
                f"{sorted(names) or 'none'}); grade one assignment per folder, or name it "
                "with --assignment (make grade ... ASSIGNMENT=name)"
            )
        (assignment,) = names
    bundle = Path(bundle_dir) / "autograder" / f"{assignment}.zip"
    if not bundle.is_file():
        echo(f"no autograder bundle {bundle}: making it first")
        make_student(Path(bundle_dir), [assignment])
    points = questions(bundle)
    logs = folder / "grading-logs"
    logs.mkdir(exist_ok=True)
    total = sum(points.values())
    echo(f"grading {len(submissions)} submissions of {assignment!r} ({total:g} points)")
    grades: dict[str, Grade] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            pool.submit(
                grade_one,
                sub,
                bundle,
                timeout=timeout,
                cell_timeout=cell_timeout,
                log=logs / f"{sub.stem}.txt",
            ): sub
            for sub in submissions
        }
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            grade = future.result()
            grades[grade.submission] = grade
            score = sum(grade.scores.get(q, 0.0) for q in points)
            echo(
                f"[{done}/{len(submissions)}] {grade.submission}: {score:g} / "
                f"{sum(points.values()):g} ({grade.status}, {grade.seconds:.0f} s)"
            )
    table = folder / "grades.csv"
    with open(table, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", *points, "score", "possible"])
        for sub in submissions:
            scores = [grades[sub.name].scores.get(q, 0.0) for q in points]
            writer.writerow(
                [sub.name, *map(_num, scores), _num(sum(scores)), _num(sum(points.values()))]
            )
    echo(f"wrote {table}")
    return table


def _num(x: float) -> str:
    return f"{x:g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    student = commands.add_parser("student", help="student notebooks and autograder bundles")
    student.add_argument("names", nargs="*", help="assignments to make (default: all)")
    student.add_argument("--out", type=Path, default=BUNDLE)
    grade = commands.add_parser("grade", help="grade every .ipynb in a folder")
    grade.add_argument("folder", type=Path)
    grade.add_argument("--bundle", type=Path, default=BUNDLE, help="what `student` wrote")
    grade.add_argument("--assignment", help="default: from the notebooks' metadata")
    grade.add_argument("--timeout", type=float, default=300.0, help="seconds per submission")
    grade.add_argument("--cell-timeout", type=float, default=60.0, help="seconds per cell")
    grade.add_argument("--jobs", type=int, default=2, help="submissions graded at once")
    args = parser.parse_args(argv)
    if args.command == "student":
        for path in make_student(args.out, args.names):
            print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
    else:
        grade_folder(
            args.folder,
            bundle_dir=args.bundle,
            assignment=args.assignment,
            timeout=args.timeout,
            cell_timeout=args.cell_timeout,
            jobs=args.jobs,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
