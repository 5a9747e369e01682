"""The parallel book build: tools/book_parallel.py declares only the audited extensions safe for
parallel reading, and tools/build_book.py hands jupyter-book's build the number of processes;
tools/book_reads.py marks a build that read every page."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import book_parallel  # noqa: E402
import book_reads  # noqa: E402
import build_book  # noqa: E402


def _app(**declared):
    extensions = {name: SimpleNamespace(name=name, parallel_read_safe=value)
                  for name, value in declared.items()}
    return SimpleNamespace(extensions=extensions)


def test_only_the_audited_silent_extensions_are_declared_safe():
    app = _app(sphinx_multitoc_numbering=None, sphinx_jupyterbook_latex=None,
               some_other_extension=None, unsafe_audited=False)
    book_parallel.declare_audited(app)
    assert app.extensions["sphinx_multitoc_numbering"].parallel_read_safe is True
    assert app.extensions["sphinx_jupyterbook_latex"].parallel_read_safe is True
    # an extension nobody audited stays silent, so Sphinx still warns (and -W fails the build)
    assert app.extensions["some_other_extension"].parallel_read_safe is None


def test_an_audited_extension_that_declares_itself_is_left_alone():
    app = _app(sphinx_jupyterbook_latex=False)  # a future release that says "not safe" wins
    book_parallel.declare_audited(app)
    assert app.extensions["sphinx_jupyterbook_latex"].parallel_read_safe is False


def test_the_build_passes_its_jobs_to_jupyter_books_sphinx_build(monkeypatch):
    import jupyter_book.cli.main
    import jupyter_book.sphinx

    seen = {}

    def fake_build_sphinx(*args, **kwargs):
        seen["jobs"] = kwargs.get("jobs")
        return 0

    def fake_command_line(arguments):
        seen["arguments"] = arguments
        from jupyter_book.sphinx import build_sphinx  # as the real command imports it

        build_sphinx("source", "output", jobs=1)

    monkeypatch.setattr(jupyter_book.sphinx, "build_sphinx", fake_build_sphinx)
    monkeypatch.setattr(jupyter_book.cli.main, "main", fake_command_line)
    build_book.main(["--jobs", "3", ".", "-W"])
    assert seen == {"arguments": ["build", ".", "-W"], "jobs": 3}


def test_a_number_of_jobs_below_one_is_refused():
    with pytest.raises(SystemExit, match="at least 1"):
        build_book.main(["--jobs", "0", "."])


def test_the_proof_domain_merges_nothing_without_raising():
    """sphinx_proof's domain keeps no domain data, but lacks the merge a parallel build calls."""
    from sphinx_proof.domain import ProofDomain

    book_parallel.give_proof_domain_a_merge()
    assert "merge_domaindata" in vars(ProofDomain)
    domain = ProofDomain.__new__(ProofDomain)  # the merge reads no state of the instance
    assert domain.merge_domaindata({"book/intro"}, {"version": 0}) is None


def test_notebooks_wait_for_every_output_and_fail_loudly(monkeypatch):
    """jupyter-cache's call of nbclient gets a long IOPub wait that raises on timeout."""
    import jupyter_cache.executors.utils as executors

    seen = {}

    def fake_execute(nb, *args, **kwargs):
        seen.update(kwargs)
        return nb

    monkeypatch.setattr(executors, "executenb", fake_execute)
    book_parallel.wait_for_every_output()
    book_parallel.wait_for_every_output()  # a second setup wraps nothing twice
    assert executors.executenb("nb", cwd=".", timeout=300) == "nb"
    assert seen == {"cwd": ".", "timeout": 300, "iopub_timeout": book_parallel.IOPUB_TIMEOUT,
                    "raise_on_iopub_timeout": True}
    assert executors.executenb.waits_for_every_output


def test_each_document_is_a_task_of_its_own_largest_first(tmp_path):
    """One document per reading task, in decreasing source size, whatever the process count."""
    (tmp_path / "book").mkdir()
    for name, size in (("a", 10), ("b", 300), ("c", 20)):
        (tmp_path / "book" / f"{name}.md").write_text("x" * size)
    (tmp_path / "book" / "api.rst").write_text("y" * 50)
    chunks = book_parallel.one_document_each(tmp_path)(
        ["book/a", "book/api", "book/b", "book/c", "book/missing"], 2)
    assert chunks == [["book/b"], ["book/api"], ["book/c"], ["book/a"], ["book/missing"]]


def _sphinx_build(src: Path, out: Path) -> None:
    from sphinx.application import Sphinx

    app = Sphinx(str(src), str(src), str(out / "html"), str(out / "doctrees"), "html",
                 status=None, warning=None, freshenv=False)
    app.build()


def test_the_mark_of_a_full_read_is_left_only_by_a_build_that_read_every_page(tmp_path):
    """A real Sphinx build of a two-page project: the first build reads both pages and leaves the
    mark beside its output; a second build after one page changed reads that page only (Sphinx's
    incremental build) and removes the mark, so `make book` records no hash after it."""
    src, out = tmp_path / "src", tmp_path / "_build"
    src.mkdir()
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tools')!r})\nextensions = ['book_reads']\n")
    (src / "index.rst").write_text("Index\n=====\n\n.. toctree::\n\n   other\n")
    (src / "other.rst").write_text("Other\n=====\n\nfirst\n")
    mark = out / book_reads.MARK
    _sphinx_build(src, out)
    assert mark.is_file()
    (src / "other.rst").write_text("Other\n=====\n\nsecond\n")
    _sphinx_build(src, out)
    assert not mark.exists()


def test_a_page_is_read_again_when_a_committed_file_its_code_reads_changes(tmp_path):
    """A two-page Sphinx project with committed results: the page whose source names
    load_results("run") is read again after results/run.json changes, the other page is not."""
    src, out = tmp_path / "src", tmp_path / "_build"
    (src / "results").mkdir(parents=True)
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tools')!r})\nextensions = ['book_reads']\n")
    (src / "index.rst").write_text("Index\n=====\n\n.. toctree::\n\n   other\n")
    (src / "other.rst").write_text('Other\n=====\n\n``x = load_results("run")``\n')
    data = src / "results" / "run.json"
    data.write_text("{}\n")
    _sphinx_build(src, out)
    os.utime(data, (data.stat().st_atime + 10, data.stat().st_mtime + 10))
    from sphinx.application import Sphinx

    app = Sphinx(str(src), str(src), str(out / "html"), str(out / "doctrees"), "html",
                 status=None, warning=None, freshenv=False)
    read = []
    app.connect("env-before-read-docs", lambda _app, _env, names: read.extend(names))
    app.build()
    assert read == ["other"]
    env = pickle.loads((out / "doctrees" / "environment.pickle").read_bytes())
    assert str(data) in {str(p) for p in env.dependencies["other"]}


def test_the_files_a_page_reads_are_found_in_its_source(tmp_path):
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "b.json").write_text("{}")
    found = book_reads.results_read('r = load_results("a")\nledger.load()\n', tmp_path)
    assert found == [tmp_path / "a.json", tmp_path / "ledger.json"]
    assert book_reads.results_read("for p in RESULTS_DIR.glob('*.json'):", tmp_path) == [
        tmp_path / "a.json", tmp_path / "b.json"]
    assert book_reads.results_read("no code here", tmp_path) == []
