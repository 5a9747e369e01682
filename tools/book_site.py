"""A Sphinx extension for the online book: downloadable notebooks, launch links, the API page.

Loaded by ``_config.yml`` (``sphinx: local_extensions: {book_site: tools/}``). It does three jobs:

1. **Downloadable notebooks.** For every chapter written as a jupytext MyST notebook it writes
   ``_sources/<page>.ipynb`` into the built site (where the theme's download button points): the
   notebook that myst-nb executed while reading the page (so it carries the outputs), its
   markdown rewritten as plain Jupyter markdown by ``tools/notebook_export.py`` (statements,
   citations, cross-references and glued numbers as readers see them online), with one cell
   prepended that, outside a clone of the repository (Colab, Binder), clones the repository,
   installs ``lib`` from it and moves to its ``book/`` folder; inside a clone it does nothing.
2. **Launch links to those notebooks.** Colab and Binder cannot open a ``.md`` chapter, so their
   buttons are pointed at the ``.ipynb`` above, on the branch that the site is published from
   (``book_site_pages_branch``, the ``gh-pages`` branch written by
   ``.github/workflows/pages.yml``).
3. **The API reference.** The directive ``lib-modules`` documents every module of ``lib``
   (``pkgutil`` lists them, so a new module appears without editing the page) with autodoc. The
   docstrings write formulas in plain text, where ``|x|`` is an absolute value; the bars are
   escaped before rST reads them, so they are shown as written.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/, for notebook_export
import notebook_export  # noqa: E402

LOGGER = logging.getLogger(__name__)

COLAB = "https://colab.research.google.com"
BINDER = "https://mybinder.org"

def repository_parts(url: str) -> tuple[str, str]:
    """``(owner, name)`` of a GitHub repository URL such as ``https://github.com/o/n``."""
    prefix = "https://github.com/"
    parts = url.removeprefix(prefix).strip("/").split("/")
    if not url.startswith(prefix) or len(parts) != 2 or not all(parts):
        raise ValueError(f"repository.url must look like {prefix}OWNER/NAME, got {url!r}")
    return parts[0], parts[1]


def notebook_with_install_cell(
    source: Path,
    repository_url: str,
    executed: Path | None = None,
    index: notebook_export.BookIndex | None = None,
    docname: str | None = None,
    bib_file: Path | None = None,
    warn=LOGGER.warning,
) -> str:
    """The chapter ``source`` (jupytext MyST) as ``.ipynb`` text, the install cell first.

    The cells are those of ``executed`` (the notebook myst-nb ran, with its outputs and beside
    it its ``.glue.json``) when it is the chapter as it is now, else the chapter's own. Markdown
    is converted by ``notebook_export`` with ``index`` (the book's targets; by default those of
    the pages beside ``source``, unnumbered) and the bibliography ``bib_file`` (by default
    ``references.bib`` beside ``source``).
    """
    import jupytext

    root = source.parent.parent
    docname = docname or source.with_suffix("").relative_to(root).as_posix()
    if index is None:
        index = notebook_export.index_sources(notebook_export.book_sources(source.parent, root))
        index.site_url = notebook_export.site_url_of(repository_url)
    notebook, ran = notebook_export.choose_notebook(source, executed, warn)
    # the glued values belong to the run: a chapter read from its source has none
    glue = notebook_export.glue_data(notebook, executed.with_suffix(".glue.json")
                                     if executed and ran else None)
    ctx = notebook_export.page_context(docname, index, bib_file or source.parent / "references.bib",
                                       glue)
    result = notebook_export.export_notebook(notebook, ctx,
        notebook_export.INSTALL_CELL.format(url=repository_url))
    left = sorted({token for cell in result.cells if cell.cell_type == "markdown"
                   for token in notebook_export.leftovers(cell.source)})
    if left:
        warn(f"the notebook of {docname} still shows MyST syntax {left}")
    return jupytext.writes(result, fmt="ipynb")


def _book_index(app: Sphinx) -> notebook_export.BookIndex:
    """The book's targets, numbered as on the site; built once per build (and process)."""
    if getattr(app, "_book_site_index", None) is None:
        root = Path(app.srcdir)
        sources = {doc: Path(app.env.doc2path(doc)).read_text(encoding="utf-8")
                   for doc in sorted(app.env.found_docs)
                   if str(app.env.doc2path(doc)).endswith(".md")}
        repository_url = app.config.html_theme_options.get("repository_url", "")
        site = notebook_export.site_url_of(repository_url, app.config.html_baseurl or "")
        app._book_site_index = notebook_export.index_sphinx(app.env, sources, site)
        bibfiles = getattr(app.config, "bibtex_bibfiles", None) or []
        app._book_site_bib = next((root / f for f in bibfiles), None)
    return app._book_site_index


def _launch_urls(owner: str, name: str, branch: str, path: str) -> dict[str, str]:
    return {
        "Colab": f"{COLAB}/github/{owner}/{name}/blob/{branch}/{path}",
        "Binder": f"{BINDER}/v2/gh/{owner}/{name}/{branch}?urlpath=tree/{path}",
    }


def unique_scripts(context: dict) -> None:
    """Drop repeated inline scripts from the page (sphinx-thebe adds its settings twice in a
    Jupyter Book build, and the second ``const THEBE_JS_URL`` is a JavaScript error)."""
    seen = set()
    kept = []
    for script in context.get("script_files", []):
        body = getattr(script, "attributes", {}).get("body")
        if body and not getattr(script, "filename", None):
            if body in seen:
                continue
            seen.add(body)
        kept.append(script)
    context["script_files"] = kept


def on_page_context(app: Sphinx, pagename: str, templatename, context: dict, doctree) -> None:
    """Write the page's downloadable notebook and point the launch buttons at it."""
    unique_scripts(context)
    if not context.get("ipynb_source"):  # set by the theme for notebook pages only
        return
    source = Path(app.env.doc2path(pagename))
    repository_url = app.config.html_theme_options.get("repository_url", "")
    owner, name = repository_parts(repository_url)
    site_path = f"_sources/{pagename}.ipynb"
    target = Path(app.outdir) / site_path
    target.parent.mkdir(parents=True, exist_ok=True)
    # myst-nb writes the executed notebook while it reads the page, before any page is written.
    executed = Path(app.env.mystnb_config.output_folder) / f"{pagename}.ipynb"
    index = _book_index(app)
    text = notebook_with_install_cell(source, repository_url, executed, index, pagename,
                                      app._book_site_bib)
    target.write_text(text, encoding="utf-8")
    urls = _launch_urls(owner, name, app.config.book_site_pages_branch, site_path)
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            if button.get("text") in urls:
                button["url"] = urls[button["text"]]


# In the plain-text formulas of lib's docstrings, |x| is an absolute value, not an rST
# substitution reference: escape a bar outside ``literals`` and :math:`roles`.
_LITERAL = re.compile(r"(``.*?``|:math:`[^`]*`)", re.DOTALL)  # a literal may span lines


# Python's constants, written bare in a docstring's prose, are set as code on the page.
_CONSTANT = re.compile(r"(?<![\w`.])(None|NaN|nan|inf)(?![\w`])")


def escape_bars(line: str) -> str:
    """``line`` with every ``|`` outside inline literals and math roles escaped for rST."""
    parts = _LITERAL.split(line)
    return "".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def docstring_prose(line: str) -> str:
    """A docstring (or a line of one) as the API page shows it: outside inline literals and
    math roles, bars escaped (:func:`escape_bars`), numbers in e-notation written as powers of
    ten like the rest of the book (``rtol 1e-10`` -> ``rtol 10⁻¹⁰``,
    :func:`lib.book.typeset.scientific`), and Python's ``None``/``nan``/``inf`` set as code, not as
    words of the text."""
    from lib.book import typeset

    parts = _LITERAL.split(line)
    return "".join(
        p
        if i % 2
        else _CONSTANT.sub(r"``\1``", typeset.scientific(p.replace("|", "\\|")))
        for i, p in enumerate(parts)
    )


def on_docstring(app: Sphinx, what: str, name: str, obj, options, lines: list[str]) -> None:
    """Read lib's docstrings as written (see :func:`docstring_prose`)."""
    if name == "lib" or name.startswith("lib."):
        # the whole docstring at once: an inline literal may be broken across two lines
        lines[:] = docstring_prose("\n".join(lines)).split("\n")


class LibModules(SphinxDirective):
    """``.. lib-modules::`` — one section per folder of ``lib`` and in it one per public module,
    documented with automodule."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        lines: list[str] = []
        for folder, modules in lib_folders():
            package = importlib.import_module(f"lib.{folder}")
            title = f"``lib.{folder}``"
            lines += [title, "=" * len(title), "", *(package.__doc__ or "").strip().split("\n"),
                      ""]
            for name in modules:
                title = f"``lib.{folder}.{name}``"
                lines += [title, "-" * len(title), "", f".. automodule:: lib.{folder}.{name}"]
                lines += ["   :members:", ""]
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source="lib-modules"), container)
        return container.children


def lib_folders() -> list[tuple[str, list[str]]]:
    """The folders of ``lib`` and their public modules (no leading underscore), sorted: what the
    API page documents, and what ``tests/api_cases.public_modules`` fuzzes."""
    package = importlib.import_module("lib")
    out = []
    for folder in sorted(i.name for i in pkgutil.iter_modules(package.__path__) if i.ispkg):
        sub = importlib.import_module(f"lib.{folder}")
        names = sorted(
            info.name
            for info in pkgutil.iter_modules(sub.__path__)
            if not info.name.startswith("_")
        )
        out.append((folder, names))
    return out


def setup(app: Sphinx) -> dict:
    app.add_config_value("book_site_pages_branch", "gh-pages", "html")
    app.add_directive("lib-modules", LibModules)
    app.connect("html-page-context", on_page_context, priority=600)
    app.connect("autodoc-process-docstring", on_docstring)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
