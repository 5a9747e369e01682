"""A Sphinx extension that records whether a build read (hence executed) every page of the book,
and makes a page that reads a committed results file depend on that file.

Loaded by ``_config.yml`` (``sphinx: local_extensions: {book_reads: tools/}``). A ``make book``
after an earlier one is incremental: Sphinx reads again only the pages whose own source changed,
and it tracks no dependency on ``lib``. Before reading, this writes ``_build/.read-every-page``
when the build is about to read every page it found, and removes it otherwise; ``make book``
records the hash of its sources (which lets ``make test`` execute no chapter again) only when the
file is there. A build that reads a page and then fails never reaches that step.

A page's code may read committed files: ``load_results("<name>")`` reads
``book/results/<name>.json``, ``ledger.load()`` the committed ledger, and a page that globs
``RESULTS_DIR`` all of them. Sphinx does not know this, so after ``make reproduce`` or ``make
ledger`` an incremental build would keep such a page as the earlier files made it. When a page is
read, this notes each file its source names as one of its dependencies (``env.note_dependency``),
so that Sphinx reads it again, and executes it, whenever one of those files changes.
"""

from __future__ import annotations

import re
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


def results_read(source: str, results_dir: Path) -> list[Path]:
    """The committed files that code in ``source`` reads: ``load_results("<name>")``,
    ``ledger.load()`` (the ledger), or every ``*.json`` when it globs ``RESULTS_DIR``."""
    if re.search(r"RESULTS_DIR\.glob\(", source):
        return sorted(results_dir.glob("*.json"))
    names = re.findall(r"load_results\(\s*[\"']([\w.-]+)[\"']\s*\)", source)
    if re.search(r"\bledger\.load\(\s*\)", source):
        names.append("ledger")
    return [results_dir / f"{name}.json" for name in sorted(set(names))]


def depend_on_results(app: Sphinx, docname: str, source: list[str]) -> None:
    """Note the committed files a page's code reads as dependencies of that page."""
    results_dir = Path(app.srcdir) / "book" / "results"
    if not results_dir.is_dir():  # a project without committed results (the tests' small ones)
        results_dir = Path(app.srcdir) / "results"
    for path in results_read(source[0], results_dir):
        if path.is_file():
            app.env.note_dependency(str(path))


def setup(app: Sphinx) -> dict:
    app.connect("env-before-read-docs", mark_a_full_read)
    app.connect("source-read", depend_on_results)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
