"""A Sphinx extension that lets the book's chapters be read, hence executed, two at a time.

Loaded by ``_config.yml`` (``sphinx: local_extensions: {book_parallel: tools/}``); used by
``tools/build_book.py`` (``make book``), which asks Sphinx for more than one reading process.

Sphinx reads documents in parallel only when every loaded extension declares that it is safe to
(``parallel_read_safe``); one that declares nothing makes it warn ("does not declare if it is safe
for parallel reading") and read serially, and the book builds with warnings as errors. Two
extensions that jupyter-book 1.x always loads declare nothing:

* ``sphinx_multitoc_numbering`` replaces ``TocTreeCollector.assign_section_numbers`` and sets a
  counter at ``builder-inited``. Sphinx calls that method in the main process, on the environment
  after the reading processes' environments are merged into it, so parallel reading never sees it.
* ``sphinx_jupyterbook_latex`` adds configuration values, node classes, transforms that change
  one doctree at a time (and, for the LaTeX builder only, the root document), and handlers of
  ``config-inited`` and ``builder-inited``. It stores nothing in the environment, so there is
  nothing for the main process to merge.

Neither keeps per-document state that a reading process would have to hand back, so this module
declares them safe for parallel reading. It declares nothing else: any other extension that does
not declare still makes the build warn, and fail. Writing is untouched (Sphinx's default for an
undeclared extension is that writing in parallel is safe).

One extension declares itself safe but is not quite: ``sphinx_proof`` (the book's theorem and
proof boxes) keeps its statements in ``env.proof_list``, which its own ``env-merge-info`` handler
merges, and registers a domain, ``prf``, whose domain data holds nothing; but that domain does not
implement ``merge_domaindata``, and Sphinx's default raises ``NotImplementedError`` when the main
process merges a reading process's environment. With nothing in the domain data to merge, the
right merge does nothing, and this module gives the domain that method where it lacks one. (A
label used twice in two chapters read by different processes is then not reported by
sphinx_proof's directive, which looks only at the statements its own process has read; the book's
labels are unique, and Sphinx's own duplicate-label check still runs on the merged environment.)

Sphinx hands each reading process a fixed chunk of documents in name order (half of them each, at
two processes); the chapters' costs are uneven, so one half ran about 100 s longer than the other
(fresh CI: 376 s against 482 s of execution). Here every document is its own task, the largest
source first (a cost estimate made before anything runs), and a process takes the next task when it
is free: the longest-first rule that keeps two processes busy until the end.

Two chapters executing at once on two cores (with CI's other tests beside them) load the machine
more than one did. nbclient, which runs each notebook, waits only 4 s after a cell's reply for the
rest of its output and then drops it silently (``iopub_timeout``, ``raise_on_iopub_timeout=False``
by default): on a loaded machine the last ``glue`` outputs of a cell were lost that way, and the
page then failed with "No key ... found in glue data". The executions here wait up to
:data:`IOPUB_TIMEOUT` seconds and fail loudly, naming the cell, if output is still missing.
"""

from __future__ import annotations

from pathlib import Path

from sphinx.application import Sphinx

# the extensions audited above, and only those
AUDITED = ("sphinx_multitoc_numbering", "sphinx_jupyterbook_latex")
# seconds a cell's output may trail its reply (nbclient's default: 4, then dropped silently)
IOPUB_TIMEOUT = 120


def declare_audited(app: Sphinx) -> None:
    """Mark the audited extensions, where loaded and silent, as safe for parallel reading."""
    for name in AUDITED:
        extension = app.extensions.get(name)
        if extension is not None and getattr(extension, "parallel_read_safe", None) is None:
            extension.parallel_read_safe = True


def merge_nothing(self, docnames: set[str], otherdata: dict) -> None:
    """Domain.merge_domaindata for a domain whose data holds nothing to merge."""


def give_proof_domain_a_merge() -> None:
    """sphinx_proof's domain, where it does not merge (see the module docstring), merges nothing."""
    try:
        from sphinx_proof.domain import ProofDomain
    except ImportError:  # not installed: nothing to mend
        return
    if "merge_domaindata" not in vars(ProofDomain):
        ProofDomain.merge_domaindata = merge_nothing


def wait_for_every_output() -> None:
    """The notebooks that MyST-NB executes (through jupyter-cache's call of nbclient) wait up to
    :data:`IOPUB_TIMEOUT` s for a cell's output, and raise rather than drop it."""
    import jupyter_cache.executors.utils as executors

    execute = executors.executenb
    if getattr(execute, "waits_for_every_output", False):
        return

    def executenb(nb, *args, **kwargs):
        kwargs.setdefault("iopub_timeout", IOPUB_TIMEOUT)
        kwargs.setdefault("raise_on_iopub_timeout", True)
        return execute(nb, *args, **kwargs)

    executenb.waits_for_every_output = True
    executors.executenb = executenb


def one_document_each(srcdir: Path):
    """A replacement for Sphinx's ``make_chunks``: one document per task, largest source first."""

    def size(docname: str) -> int:
        paths = [srcdir / f"{docname}{suffix}" for suffix in (".md", ".rst", ".ipynb")]
        return max((path.stat().st_size for path in paths if path.is_file()), default=0)

    def make_chunks(arguments, nproc: int, maxbatch: int = 10) -> list[list[str]]:
        return [[docname] for docname in sorted(arguments, key=size, reverse=True)]

    return make_chunks


def balance_the_reading(app: Sphinx) -> None:
    """Sphinx's builders take their chunks from :func:`one_document_each`."""
    import sphinx.builders

    sphinx.builders.make_chunks = one_document_each(Path(app.srcdir))


def setup(app: Sphinx) -> dict:
    give_proof_domain_a_merge()
    balance_the_reading(app)
    wait_for_every_output()
    # at builder-inited every extension of the configuration is loaded, and reading has not begun
    app.connect("builder-inited", declare_audited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
