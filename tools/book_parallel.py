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
"""

from __future__ import annotations

from sphinx.application import Sphinx

# the extensions audited above, and only those
AUDITED = ("sphinx_multitoc_numbering", "sphinx_jupyterbook_latex")


def declare_audited(app: Sphinx) -> None:
    """Mark the audited extensions, where loaded and silent, as safe for parallel reading."""
    for name in AUDITED:
        extension = app.extensions.get(name)
        if extension is not None and getattr(extension, "parallel_read_safe", None) is None:
            extension.parallel_read_safe = True


def setup(app: Sphinx) -> dict:
    # at builder-inited every extension of the configuration is loaded, and reading has not begun
    app.connect("builder-inited", declare_audited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
