"""``jupyter-book build`` with more than one reading process (``make book``).

Usage::

    python tools/build_book.py [--jobs N] <jupyter-book build arguments>

jupyter-book 1.x's command line has no option for Sphinx's parallel build, though its
``build_sphinx`` takes ``jobs`` (and passes it to ``Sphinx(parallel=...)``). This runs its command
line with that argument set. With N reading processes Sphinx splits the documents, in name order,
into chunks and reads (hence executes) up to N chunks at once; a chapter runs with one torch
thread, so on two cores two processes keep both busy. ``tools/book_parallel.py`` is the extension
that lets Sphinx read in parallel at all. The default, ``BOOK_JOBS`` or 2, is the number of cores
the book is sized for; ``--jobs 1`` is jupyter-book's own serial build.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("BOOK_JOBS", "2")))
    options, rest = parser.parse_known_args(argv)
    if options.jobs < 1:
        raise SystemExit(f"--jobs must be at least 1, not {options.jobs}")

    import jupyter_book.sphinx
    from jupyter_book.cli.main import main as command_line

    build_sphinx = jupyter_book.sphinx.build_sphinx

    def build_with_jobs(*args, **kwargs):
        kwargs["jobs"] = options.jobs
        return build_sphinx(*args, **kwargs)

    # the command imports build_sphinx from this module when it runs, so it finds this one
    jupyter_book.sphinx.build_sphinx = build_with_jobs
    command_line(["build", *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
