"""A Sphinx extension that records whether a build read (hence executed) every page of the book.

Loaded by ``_config.yml`` (``sphinx: local_extensions: {book_reads: tools/}``). A ``make book``
after an earlier one is incremental: Sphinx reads again only the pages whose own source changed,
and it tracks no dependency on ``lib``. Before reading, this writes ``_build/.read-every-page``
when the build is about to read every page it found, and removes it otherwise; ``make book``
records the hash of its sources (which lets ``make test`` execute no chapter again) only when the
file is there. A build that reads a page and then fails never reaches that step.
"""

from __future__ import annotations

from pathlib import Path

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

#: the mark, beside the HTML output (``_build/html``) in ``_build``
MARK = ".read-every-page"


def mark_a_full_read(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    """Write the mark when ``docnames`` (the pages this build reads) is every page found."""
    mark = Path(app.outdir).parent / MARK
    unread = sorted(set(env.found_docs) - set(docnames))
    if unread:
        mark.unlink(missing_ok=True)
    else:
        mark.write_text(f"{len(docnames)} pages read\n")


def setup(app: Sphinx) -> dict:
    app.connect("env-before-read-docs", mark_a_full_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
