"""Assignments for a course: make the student notebooks (otter-grader), grade a folder (sandboxed).

Usage::

    python tools/assignments.py student [--out _build/student] [--students ROSTER] [NAME ...]
    python tools/assignments.py grade FOLDER [--assignment NAME] [--timeout 300]
                                      [--cell-timeout 60] [--jobs 2] [--memory 4G] [--unsandboxed]

The course secret is read from the environment variable ``COURSE_SECRET`` (``make student
COURSE_SECRET=...``), never from the command line.

Each chapter has a short companion assignment, ``book/assignments/<name>.md``: a jupytext MyST
notebook in otter-grader's assignment format (``# BEGIN QUESTION`` raw cells with a name and
points, ``# BEGIN SOLUTION`` / ``# END SOLUTION`` around the answers, ``# BEGIN TESTS`` cells with
the public tests students run), plus ``# GRADING`` code cells with the tests the grader runs
(tools/grading.py), which never reach the student notebook.

``student``
    converts each assignment to ``.ipynb`` with jupytext, drops its ``# GRADING`` cells and runs
    ``otter assign`` on the rest, then writes ``<out>/<name>.ipynb`` (the student notebook, to
    hand out), ``<out>/autograder/<name>.zip`` (otter's bundle for Gradescope: public tests only)
    and ``<out>/autograder/<name>.ipynb`` (the solution notebook). With ``--students ROSTER`` (one
    student id a line) it also writes ``<out>/<name>/<id>.ipynb``: the notebook with the id in its
    metadata and that student's ``# PARAMETERS`` values, drawn from the id and the course secret.
    An assignment whose source and secret have not changed since the last run is skipped.

``grade``
    grades every ``.ipynb`` in FOLDER (tools/grading.py): each submission runs in a sandbox of its
    own (tools/sandbox.py), the verdicts are computed in the grader's process, and
    ``FOLDER/grades.csv``, ``FOLDER/feedback/`` (for students), ``FOLDER/grading-logs/`` (for the
    instructor) and ``FOLDER/written/`` (answers to the questions graded by hand) are written once
    every sandbox is gone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grading  # noqa: E402  (tools/ is not a package)

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "book" / "assignments"
BUNDLE = ROOT / "_build" / "student"
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


def course_secret() -> str:
    """``COURSE_SECRET`` from the environment, or the public default."""
    return os.environ.get("COURSE_SECRET") or grading.DEFAULT_SECRET


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


def stamp(source: Path, secret: str) -> str:
    """What a bundle was made from: the source's hash, this file's, and the secret's fingerprint."""
    digest = hashlib.sha256(source.read_bytes() + Path(__file__).read_bytes()).hexdigest()
    return json.dumps({"source": digest, "secret": grading.fingerprint(secret)})


def read_roster(path: Path) -> list[str]:
    """Student ids, one a line (blank lines and ``#`` comments skipped); ValueError if malformed."""
    ids = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        if not STUDENT_ID.match(line):
            raise ValueError(
                f"{path}:{number}: a student id is letters, digits and ._@-, got {line!r}"
            )
        ids.append(line)
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: a student id appears twice")
    return ids


def make_student(
    out: Path = BUNDLE,
    names: list[str] | None = None,
    *,
    students: list[str] | None = None,
    secret: str | None = None,
    force: bool = False,
) -> list[Path]:
    """Run ``otter assign`` on every assignment; return the student notebooks written."""
    secret = course_secret() if secret is None else secret
    (out / "autograder").mkdir(parents=True, exist_ok=True)
    written = []
    for source in sources(names):
        name = source.stem
        marker = out / "autograder" / f"{name}.stamp"
        current = stamp(source, secret)
        fresh = marker.is_file() and marker.read_text(encoding="utf-8") == current
        if force or not fresh or not (out / f"{name}.ipynb").is_file():
            _assign(source, out)
            marker.write_text(current, encoding="utf-8")
        written.append(out / f"{name}.ipynb")
        if students:
            written += _personal_notebooks(source, out, students, secret)
    return written


def _assign(source: Path, out: Path) -> None:
    """``otter assign`` on one source, without its # GRADING cells."""
    import jupytext
    import nbformat
    from otter.assign import main as otter_assign

    name = source.stem
    with tempfile.TemporaryDirectory(prefix=f"assign-{name}-") as scratch:
        master = Path(scratch) / f"{name}.ipynb"
        notebook = jupytext.read(source, fmt="md:myst")
        notebook.cells = [
            c for c in notebook.cells if not c.source.lstrip().startswith(grading.GRADING_MARK)
        ]
        _add_grading_environment(notebook, source)
        jupytext.write(notebook, master, fmt="ipynb")
        result = Path(scratch) / "dist"
        otter_assign(str(master), str(result), no_pdfs=True, no_run_tests=True)
        (bundle,) = (result / "autograder").glob("*.zip")
        _check_name(bundle, name)
        shutil.copy(bundle, out / "autograder" / f"{name}.zip")
        shutil.copy(result / "autograder" / f"{name}.ipynb", out / "autograder" / f"{name}.ipynb")
        student = nbformat.read(result / "student" / f"{name}.ipynb", as_version=4)
        student.metadata["course"] = {"assignment": name}
        nbformat.write(student, out / f"{name}.ipynb")


def _personal_notebooks(source: Path, out: Path, students: list[str], secret: str) -> list[Path]:
    """``out/<name>/<id>.ipynb`` for each student: their id and ``# PARAMETERS`` values."""
    import nbformat

    name = source.stem
    spec = grading.load(name, source.parent)
    folder = out / name
    folder.mkdir(exist_ok=True)
    written = []
    for student in students:
        notebook = nbformat.read(out / f"{name}.ipynb", as_version=4)
        notebook.metadata["course"] = {"assignment": name, "student": student}
        values = grading.draw(spec.parameters, secret, name, student)
        for cell in notebook.cells:
            if cell.cell_type == "code" and cell.source.lstrip().startswith(
                grading.PARAMETERS_MARK
            ):
                cell.source = _fill_parameters(cell.source, values, student)
        path = folder / f"{student}.ipynb"
        nbformat.write(notebook, path)
        written.append(path)
    return written


def _fill_parameters(source: str, values: dict, student: str) -> str:
    lines = []
    for line in source.splitlines():
        match = re.match(r"^(\w+)\s*=", line.strip())
        if match and match.group(1) in values and not line.lstrip().startswith("#"):
            line = f"{match.group(1)} = {values[match.group(1)]!r}  # for {student}"
        lines.append(line)
    return "\n".join(lines)


def grading_requirements() -> list[str]:
    """What an autograder outside this repository (Gradescope) installs to ``import lib``.

    The exact pins of ``requirements-lock.txt`` for lib's own dependencies (``pyproject.toml``),
    and the package itself from the repository named in ``pyproject.toml``, at this checkout's
    commit (so that the bundle grades with the ``lib`` the assignment was written against).
    """
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = {re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    pins = [
        line.strip()
        for line in (ROOT / "requirements-lock.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line and line.split("==")[0].strip().lower() in wanted
    ]
    url = f"git+{project['urls']['Repository']}"
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    if re.fullmatch(r"[0-9a-f]{40}", commit):
        url += f"@{commit}"
    return [*pins, f"{project['name']} @ {url}"]


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


def check_bundle(name: str, bundle_dir: Path, secret: str, echo=print) -> None:
    """Refuse a secret other than the one ``make student`` drew the students' parameters from;
    warn when the source changed since the student notebooks were made."""
    marker = bundle_dir / "autograder" / f"{name}.stamp"
    if not marker.is_file():
        return
    made = json.loads(marker.read_text(encoding="utf-8"))
    personal = any((bundle_dir / name).glob("*.ipynb"))
    if personal and made["secret"] != grading.fingerprint(secret):
        raise ValueError(
            f"COURSE_SECRET differs from the one `make student` used for {name} (its notebooks "
            "carry parameters drawn from that one): grade with the same COURSE_SECRET"
        )
    if made["source"] != json.loads(stamp(SOURCES / f"{name}.md", secret))["source"]:
        echo(
            f"note: book/assignments/{name}.md changed since `make student`: students may have "
            "answered an older version (run make student to rebuild the notebooks)"
        )


def parse_bytes(text: str) -> int:
    """``4G``, ``512M``, ``2000000`` -> bytes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", text.strip(), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"a size such as 4G or 512M, not {text!r}")
    number, unit = match.groups()
    return int(float(number) * 1024 ** " KMGT".index(unit.upper() or " "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    student = commands.add_parser("student", help="student notebooks and autograder bundles")
    student.add_argument("names", nargs="*", help="assignments to make (default: all)")
    student.add_argument("--out", type=Path, default=BUNDLE)
    student.add_argument("--students", type=Path, help="a roster: one student id a line")
    student.add_argument("--force", action="store_true", help="rebuild even if unchanged")
    grade = commands.add_parser("grade", help="grade every .ipynb in a folder")
    grade.add_argument("folder", type=Path)
    grade.add_argument("--bundle", type=Path, default=BUNDLE, help="what `student` wrote")
    grade.add_argument("--assignment", help="default: from the notebooks' metadata")
    grade.add_argument("--timeout", type=float, default=300.0, help="seconds per submission")
    grade.add_argument("--cell-timeout", type=float, default=60.0, help="seconds per cell")
    grade.add_argument("--jobs", type=int, default=2, help="submissions graded at once")
    grade.add_argument("--memory", type=parse_bytes, default="4G", help="per submission")
    grade.add_argument(
        "--unsandboxed",
        action="store_true",
        help="run submissions without a sandbox (only where bubblewrap cannot run; unsafe)",
    )
    args = parser.parse_args(argv)
    if args.command == "student":
        roster = read_roster(args.students) if args.students else None
        for path in make_student(args.out, args.names, students=roster, force=args.force):
            print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
        return 0
    secret = course_secret()
    settings = grading.Settings(
        timeout=args.timeout,
        cell_timeout=args.cell_timeout,
        memory=args.memory,
        jobs=args.jobs,
        secret=secret,
        unsandboxed=args.unsandboxed,
    )
    if args.unsandboxed:
        print("WARNING: grading without a sandbox: the submissions' code runs with your rights")
    try:
        grading.grade_folder(
            args.folder,
            assignment=args.assignment,
            settings=settings,
            before=lambda name: check_bundle(name, args.bundle, secret),
        )
    except (ValueError, grading.sandbox.SandboxUnavailable) as error:
        print(f"grade: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
