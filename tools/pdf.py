"""The whole book as one PDF, offline: ``_build/html/book.pdf`` (``make pdf``, after ``make book``).

Usage::

    python tools/pdf.py              # build the single-page book, print it to _build/html/book.pdf
    python tools/pdf.py --no-build   # print the single-page book already in _build/singlehtml

1. **One page.** ``jupyter-book build . --builder singlehtml`` writes the whole book as one HTML
   page into ``_build/singlehtml``. It shares ``_build/.doctrees`` with the HTML build and the
   same configuration, so Sphinx reuses the environment that ``make book`` left: no chapter is
   read again, hence none is executed again (the log says "0 added, 0 changed, 0 removed"; a
   chapter edited since ``make book`` is read, and executed, again). The build runs in a child
   process, with one correction to Sphinx (see ``html_handlers_for_singlehtml``).
2. **Print.** The page is served on 127.0.0.1 and opened in Debian's Chromium (as
   ``tools/site_test.py`` does, every request for another host blocked), MathJax typesets every
   formula (its startup promise, then the web fonts), a title page is put in front (the book's
   title and authors, the build date, the commit), and Chromium prints it to A4 with page numbers.
   For paper: the solutions and the hidden code cells are expanded (a reader cannot click them
   open), the site's navigation is hidden, an animation shows its first frame without its
   buttons, a multi-slider figure its current frame and values, long code lines wrap, and a
   display equation or a table wider than the text is zoomed out to the text's width.
3. **Links and outline** (:func:`finish_pdf`, with pypdf). Chromium writes every link of the
   page as it resolved it: a cross-reference to another chapter that the page still writes as a
   URL (``http://127.0.0.1:PORT/book/intro.html#...``, the temporary print server) would be dead in
   the file. Each such link becomes a jump inside the PDF where its target is in the PDF (the
   element of that id, or the chapter's start), and otherwise a link to the same file on the
   published site (``book.pdf``, the notebooks). Chromium writes bookmarks only for a tagged PDF
   (24 MiB more of structure for MathJax's glyphs), so the outline is added here: the
   introduction and every chapter, each with its sections, at the positions where Chromium put
   their headings (a hidden link to each heading makes Chromium write its destination).
4. **Check.** Before printing: every formula typeset, no raw TeX left, every image loaded. After:
   the PDF's page count, images and fonts (MathJax's own fonts, when there is math), its outline
   and its links (none to the print server or to a relative path) are read from the file and
   printed; the run fails when any of this is wrong (``tools/site_test.py`` checks them again).
"""

from __future__ import annotations

import argparse
import datetime
import html
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from site_test import (  # noqa: E402
    CHROMIUM_ARGS,
    RAW_TEX,
    REFRESH,
    TIMEOUT_MS,
    chromium,
    pdf_links_problems,
    serve,
)

ROOT = Path(__file__).resolve().parent.parent
SINGLE = ROOT / "_build" / "singlehtml"
OUT = ROOT / "_build" / "html" / "book.pdf"
PAPER, PAPER_WIDTH_MM, SIDE_MM = "A4", 210, 16
MARGIN = {"top": "16mm", "bottom": "18mm", "left": f"{SIDE_MM}mm", "right": f"{SIDE_MM}mm"}
# The window is as wide as the printed text (a CSS px is 1/96 inch), so that the page is laid out
# and measured (the equations scaled to fit) as it will be printed.
TEXT_WIDTH_PX = round((PAPER_WIDTH_MM - 2 * SIDE_MM) / 25.4 * 96)

PRINT_CSS = """
@media print {
  .bd-header, .bd-header-article, .header-article-items, .bd-sidebar-primary,
  .bd-sidebar-secondary, .bd-footer, .bd-footer-content, .bd-footer-article, .prev-next-footer,
  #pst-back-to-top, .skip-link, .headerlink, .toggle-button, .anim-buttons, .anim-state,
  .anim-controls input, .copybtn, .search-button, .theme-switch-button { display: none !important; }
  .bd-container, .bd-container__inner, .bd-page-width, .bd-main, .bd-content,
  .bd-article-container, .bd-article { max-width: 100% !important; width: 100% !important;
    padding-left: 0 !important; padding-right: 0 !important; margin: 0 !important; }
  /* the theme sizes everything in rem: 10 pt text, code and headings in proportion */
  html { font-size: 10pt !important; }
  /* a table as wide as the text: its cells may break long words (numbers, identifiers) */
  main table td, main table th { overflow-wrap: anywhere; }
  /* a shadow is printed as a page-wide soft-mask image: megabytes for nothing on paper (the
     :not(#_) outweighs the theme's own !important shadows on admonitions) */
  body *:not(#_) { box-shadow: none !important; text-shadow: none !important; }
  /* the theme's print header (the first page's title and an empty contents list): the title
     page stands in for it; the hidden code cells' "show/hide" labels mean nothing on paper */
  #jb-print-docs-body, details.hide > summary { display: none !important; }
  pre, pre code { white-space: pre-wrap !important; overflow-wrap: anywhere;
    overflow: visible !important; }
  .highlight, .cell_output, .output, .pst-scrollable-table-container {
    overflow: visible !important; }
  mjx-container[display="true"] { overflow: visible !important; }
  /* an inline formula never scrolls on paper: one wider than the line is zoomed out (below);
     the rest clip the pixel or two an accent overhangs, as the theme does */
  span.math, span.math.book-wide { overflow: hidden !important; }
  img { max-width: 100% !important; height: auto !important; }
  figure, .cell_output img, .slider-grid, .animation, table, mjx-container[display="true"] {
    break-inside: avoid; }
  h1, h2, h3, h4, .admonition-title { break-after: avoid; }
  .book-chapter-start { break-before: page; }
  .book-title-page { break-after: page; display: flex; flex-direction: column;
    justify-content: center; min-height: 240mm; text-align: center; }
  .book-title-page .book-title { font-size: 26pt; font-weight: bold; line-height: 1.25;
    margin-bottom: 12mm; }
  .book-title-page p { font-size: 12pt; margin: 2mm 0; }
}
"""

# For paper: open what is collapsed, mark where each chapter starts, scale down the display
# equations wider than the text, put the title page in front. Returns what it changed.
PREPARE_JS = """
([titleHtml, css]) => {
  const style = document.createElement('style');
  style.textContent = css;
  document.head.appendChild(style);
  document.querySelectorAll('details').forEach((d) => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach((el) => el.classList.remove('toggle-hidden'));
  document.querySelectorAll('img[loading="lazy"]').forEach((img) => { img.loading = 'eager'; });
  const article = document.querySelector('main .bd-article') || document.querySelector('main')
                  || document.body;
  // each page of the book follows the marker <span id="document-book/NAME"> on the single page
  const chapters = [...article.querySelectorAll('[id^="document-"] + section')];
  chapters.forEach((s) => s.classList.add('book-chapter-start'));
  const page = document.createElement('section');
  page.className = 'book-title-page';
  page.innerHTML = titleHtml;
  article.prepend(page);
  return {chapters: chapters.length};
}
"""

# On paper nothing scrolls: a display equation or a table wider than the text is zoomed out to
# the text's width. Returns how many of each.
SCALE_TO_FIT_JS = """
() => {
  const fit = (el, width, column) => {
    if (width > column + 1 && column > 0) {
      el.style.zoom = String(Math.floor(1000 * column / width) / 1000);
      return 1;
    }
    return 0;
  };
  let equations = 0, tables = 0, inline = 0;
  for (const box of document.querySelectorAll('mjx-container[display="true"]')) {
    const inner = box.querySelector('mjx-math');
    const width = inner ? inner.getBoundingClientRect().width : 0;
    equations += fit(box, width, box.parentElement.clientWidth);
  }
  for (const span of document.querySelectorAll('span.math')) {
    const inner = span.querySelector('mjx-container');
    const block = span.closest('p, li, td, th, dd, div, figcaption') || span.parentElement;
    inline += inner ? fit(span, inner.getBoundingClientRect().width, block.clientWidth) : 0;
  }
  for (const table of document.querySelectorAll('main table')) {
    tables += fit(table, table.scrollWidth, table.parentElement.clientWidth);
  }
  return {equations, tables, inline};
}
"""

# A link from the single page to another page of the site whose target is on the single page (an
# element of the fragment's id, or the chapter's start, <span id="document-book/NAME">) becomes a
# link within the page, which Chromium prints as a jump inside the PDF. Returns how many.
LINKS_JS = """
() => {
  let internal = 0;
  for (const a of document.querySelectorAll('a[href]')) {
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || url.pathname === location.pathname) continue;
    const fragment = decodeURIComponent(url.hash.slice(1));
    const path = decodeURIComponent(url.pathname).replace(/^\\//, '');
    let id = fragment && document.getElementById(fragment) ? fragment : '';
    if (!id && !fragment && path.endsWith('.html')
        && document.getElementById('document-' + path.slice(0, -5))) {
      id = 'document-' + path.slice(0, -5);
    }
    if (id) {
      a.setAttribute('href', '#' + id);
      internal += 1;
    }
  }
  return internal;
}
"""

# The outline: the introduction (the first section of the page) and every chapter (the section
# after each <span id="document-book/NAME">), each with its own sections, by id and title. A hidden
# link to each of them makes Chromium write a named destination for it (it writes one for every
# element that a link of the page points at).
OUTLINE_JS = """
() => {
  const article = document.querySelector('main .bd-article') || document.querySelector('main')
                  || document.body;
  const chapters = [...article.querySelectorAll('[id^="document-"] + section')];
  const intro = article.querySelector('section:not(.book-title-page)');
  const tops = intro && !chapters.includes(intro) ? [intro, ...chapters] : chapters;
  const title = (section) => {
    const heading = section.querySelector(':scope > h1, :scope > h2, :scope > h3, :scope > h4');
    if (!heading) return '';
    const copy = heading.cloneNode(true);
    copy.querySelectorAll('.headerlink').forEach((el) => el.remove());
    return copy.textContent.replace(/\\s+/g, ' ').trim();
  };
  const entry = (section, depth) => ({
    id: section.id,
    title: title(section),
    children: depth <= 1 ? [] : [...section.querySelectorAll(':scope > section')]
      .filter((s) => s.id && !chapters.includes(s) && title(s)).map((s) => entry(s, depth - 1)),
  });
  const outline = tops.filter((s) => s.id && title(s)).map((s) => entry(s, 2));
  const holder = document.createElement('div');
  holder.style.display = 'none';
  const link = (item) => {
    const a = document.createElement('a');
    a.href = '#' + item.id;
    holder.appendChild(a);
    item.children.forEach(link);
  };
  outline.forEach(link);
  article.appendChild(holder);
  return outline;
}
"""

STATE_JS = """
() => {
  const clone = (document.querySelector('main') || document.body).cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, textarea, mjx-container, .highlight, .output')
    .forEach((el) => el.remove());
  const images = [...document.querySelectorAll('main img')];
  return {
    mathSource: document.querySelectorAll('span.math, div.math').length,
    mathTypeset: document.querySelectorAll('mjx-container').length,
    images: images.length,
    broken: images.filter((img) => !(img.complete && img.naturalWidth > 0))
                  .map((img) => (img.getAttribute('src') || '').slice(0, 80)),
    text: clone.innerText,
  };
}
"""

FOOTER = (
    '<div style="font-size:8px; width:100%; text-align:center; color:#555;">'
    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
)


def html_handlers_for_singlehtml() -> None:
    """Give the singlehtml builder the HTML handlers of every node, as Sphinx means to.

    Sphinx (``SphinxComponentRegistry.create_translator``) gives a builder the visitors that
    extensions registered under its name, and falls back to those of its format ("html") only
    when there are none at all. sphinx-exercise registers visitors for "singlehtml", so the
    html-only ones (myst-nb's hidden code cells, HideCodeCellNode) are lost and the build stops
    with "unknown node type". Here the format's visitors fill in what the name lacks.
    """
    from sphinx.registry import SphinxComponentRegistry

    create = SphinxComponentRegistry.create_translator

    def create_translator(self, builder, *args):
        translator = create(self, builder, *args)
        own = self.translation_handlers.get(builder.name, {})
        for name, (visit, depart) in self.translation_handlers.get(builder.format, {}).items():
            if name not in own:
                setattr(translator, "visit_" + name, visit.__get__(translator))
                if depart:
                    setattr(translator, "depart_" + name, depart.__get__(translator))
        return translator

    SphinxComponentRegistry.create_translator = create_translator


def build_here() -> int:
    """The single-page build in this process (the child of ``build_singlehtml``)."""
    html_handlers_for_singlehtml()
    from jupyter_book.cli.main import main as jupyter_book

    args = ["build", str(ROOT), "--builder", "singlehtml", "-W", "--keep-going"]
    try:
        jupyter_book(args, standalone_mode=False)
    except (RuntimeError, SystemExit) as error:  # jupyter-book raises on a failed build
        code = getattr(error, "code", 1)
        return code if isinstance(code, int) and code else 1
    return 0


def build_singlehtml() -> dict:
    """Run ``jupyter-book build --builder singlehtml`` in a child process, its output passed
    through; return its time, whether the environment was reused and how many chapters ran."""
    start = time.perf_counter()
    env = {**os.environ, "BOOK_MODE": "build"}  # as `make book`, should a chapter run again
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    child = subprocess.Popen(
        [sys.executable, __file__, "--build-only"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    updated, executed = "", 0
    for line in child.stdout:
        sys.stdout.write(line)
        found = re.search(r"updating environment: .*?(\d+ added, \d+ changed, \d+ removed)", line)
        updated = found.group(1) if found else updated
        executed += "Executing notebook" in line
    if child.wait():
        sys.exit(f"pdf: the single-page build failed (exit {child.returncode}); see above")
    return {"seconds": time.perf_counter() - start, "updated": updated, "executed": executed}


def git(*args: str) -> str:
    """The output of a git command in the repository, stripped ("" when git fails)."""
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return done.stdout.strip()


FOOTER_BUILD = re.compile(
    r'Built <time datetime="[^"]*">(?P<date>[^<]+)</time> from (?:commit <a [^>]*><code>'
    r"(?P<commit>[^<]+)</code></a>(?P<dirty> <span[^>]*>\(with uncommitted changes\))?)?"
)


def site_build(site: Path) -> dict | None:
    """The build date and commit that the site's pages say in their footer (tools/book_pages.py),
    read from the root document's page, or None when it has none."""
    index = site / "index.html"
    if not index.is_file():
        return None
    target = REFRESH.search(index.read_text(encoding="utf-8", errors="replace")[:2000])
    page = site / (target.group(1) if target else "index.html")
    found = FOOTER_BUILD.search(page.read_text(encoding="utf-8", errors="replace"))
    if not found:
        return None
    commit = found.group("commit") or "unknown"
    if found.group("dirty"):
        commit += " with uncommitted changes"
    return {"date": found.group("date"), "commit": commit}


def title_page(site: Path = OUT.parent) -> str:
    """The title page's HTML: the book's title and authors (``_config.yml``), and the build date
    and commit of the site it goes with, as every page's footer gives them (so the PDF and the
    site say the same); from git and the clock when the site has no footer."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    build = site_build(site)
    if build is None:
        commit = git("rev-parse", "--short=7", "HEAD") or "unknown"
        if git("status", "--porcelain", "--untracked-files=no"):
            commit += " with uncommitted changes"
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        build = {"date": date, "commit": commit}
    return (
        f'<p class="book-title">{html.escape(str(config.get("title", "The book")))}</p>'
        f"<p>{html.escape(str(config.get('author', '')))}</p>"
        f"<p>Built {html.escape(build['date'])} from commit {html.escape(build['commit'])}</p>"
    )


def problems_before_printing(state: dict) -> list[str]:
    """Math not typeset, raw TeX, images not loaded (as the site test judges them)."""
    problems = []
    if state["mathTypeset"] < state["mathSource"]:
        problems.append(f"{state['mathSource']} formulas, {state['mathTypeset']} typeset")
    raw = RAW_TEX.search(state["text"])
    if raw:
        around = state["text"][max(0, raw.start() - 40) : raw.end() + 40].replace("\n", " ")
        problems.append(f"raw TeX: ...{around}...")
    problems += [f"image not loaded: {src}" for src in state["broken"]]
    return problems


def start_page(single: Path) -> str:
    """The single page, copied to the top of ``single`` as ``book.html``; its path there.

    jupyter-book's ``index.html`` redirects to the page, ``book/intro.html``; but Sphinx writes
    the page's links to ``_static/`` and ``_images/`` as if it were at the top (the singlehtml
    builder's page is its root document), so in ``book/`` its styles, scripts and images would
    all be missing."""
    index = (single / "index.html").read_text(encoding="utf-8", errors="replace")
    target = REFRESH.search(index)
    source = single / (target.group(1) if target else "index.html")
    (single / "book.html").write_bytes(source.read_bytes())
    return "book.html"


def print_pdf(single: Path, out: Path) -> dict:
    """Open the single page in Chromium, prepare it for paper and print it to ``out``."""
    from playwright.sync_api import sync_playwright

    server, base = serve(single)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium(), headless=True, args=CHROMIUM_ARGS
            )
            page = browser.new_page(viewport={"width": TEXT_WIDTH_PX, "height": 900})
            page.route(
                "**/*",
                lambda r: r.continue_()
                if r.request.url.startswith((base, "data:"))
                else r.abort("blockedbyclient"),
            )
            page.goto(base + start_page(single), wait_until="load", timeout=10 * TIMEOUT_MS)
            page.evaluate("() => window.MathJax.startup.promise.then(() => true)")
            prepared = page.evaluate(PREPARE_JS, [title_page(), PRINT_CSS])
            outline = page.evaluate(OUTLINE_JS)
            prepared["internal links"] = page.evaluate(LINKS_JS)
            page.emulate_media(media="print")
            page.evaluate("() => document.fonts.ready.then(() => true)")
            page.wait_for_function(
                "() => [...document.images].every((img) => img.complete)", timeout=TIMEOUT_MS
            )
            prepared["scaled"] = page.evaluate(SCALE_TO_FIT_JS)
            # Anything still wider than the text makes Chromium shrink every page to fit it.
            prepared["width"] = page.evaluate("() => document.documentElement.scrollWidth")
            state = page.evaluate(STATE_JS)
            problems = problems_before_printing(state)
            if problems:
                sys.exit("pdf: the page is not ready to print:\n  " + "\n  ".join(problems))
            out.parent.mkdir(parents=True, exist_ok=True)
            page.pdf(
                path=str(out),
                format=PAPER,
                margin=MARGIN,
                print_background=True,
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=FOOTER,
                # No bookmarks: Chromium makes them (outline) only in a tagged PDF, whose
                # structure (one element per glyph of MathJax's output) is 24 MiB more.
            )
            browser.close()
    finally:
        server.shutdown()
    return {
        **prepared,
        "formulas": state["mathTypeset"],
        "images": state["images"],
        "outline": outline,
        "base": base,
    }


def published_site() -> str:
    """The published site's address (``https://OWNER.github.io/NAME/`` from the repository URL
    of ``_config.yml``, as the notebooks' links use it), or "" when there is none."""
    from notebook_export import site_url_of

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repository = (config.get("repository") or {}).get("url", "")
    baseurl = ((config.get("sphinx") or {}).get("config") or {}).get("html_baseurl", "")
    return site_url_of(repository, baseurl)


def link_target(uri: str, base: str, dests: set[str]) -> tuple[str, str]:
    """Where a link that Chromium wrote as ``uri`` should go: ``("dest", NAME)`` for a named
    destination of the PDF, ``("site", PATH#FRAGMENT)`` for a file of the published site,
    ``("keep", uri)`` for anything else (another host). ``base`` is the print server's address.

    A link to the print server is a link into the book: to the element of its fragment when the
    PDF has it, else to the start of the chapter (``document-book/NAME``), else to the file on the
    site. On the single page every page of the book is a ``document-...`` destination."""
    if not uri.startswith(base):
        return ("keep", uri)
    parsed = urlparse(uri)
    path, fragment = unquote(parsed.path).lstrip("/"), unquote(parsed.fragment)
    if fragment and fragment in dests:
        return ("dest", fragment)
    if path.endswith(".html"):
        document = "document-" + path.removesuffix(".html")
        if document in dests and (not fragment or fragment == document):
            return ("dest", document)
    return ("site", path + (f"#{parsed.fragment}" if parsed.fragment else ""))


def finish_pdf(path: Path, outline: list[dict], base: str, site_url: str) -> dict:
    """Rewrite the PDF at ``path`` in place (pypdf): every link to the print server ``base`` made a
    jump inside the PDF or a link to the published site ``site_url`` (:func:`link_target`), and an
    outline from ``outline`` (OUTLINE_JS: id, title, children) at the named destinations Chromium
    wrote for those ids. Returns the counts, and the outline entries without a destination."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import (
        ArrayObject,
        Fit,
        NameObject,
        NullObject,
        NumberObject,
        TextStringObject,
    )

    reader = PdfReader(path)
    writer = PdfWriter(clone_from=reader)
    places = {}
    for name, dest in reader.named_destinations.items():
        try:
            number = reader.get_destination_page_number(dest)
        except Exception:  # a destination on no page: left out
            continue
        if number is not None and number >= 0:
            top = dest.top if dest.top is not None else writer.pages[number].mediabox.top
            places[str(name).lstrip("/")] = (number, float(dest.left or 0), float(top))

    def explicit(name: str) -> ArrayObject:
        number, left, top = places[name]
        return ArrayObject([writer.pages[number].indirect_reference, NameObject("/XYZ"),
                            NumberObject(round(left)), NumberObject(round(top)), NullObject()])

    counts = {"internal": 0, "site": 0, "other": 0, "outline": 0}
    for page in writer.pages:
        for ref in page.get("/Annots") or []:
            annot = ref.get_object()
            action = annot.get("/A")
            action = action.get_object() if action is not None else None
            if action is None or action.get("/S") != "/URI":
                continue
            kind, target = link_target(str(action["/URI"]), base, set(places))
            if kind == "dest" and target in places:
                del annot["/A"]
                annot[NameObject("/Dest")] = explicit(target)
                counts["internal"] += 1
            elif kind == "site" or kind == "dest":
                action[NameObject("/URI")] = TextStringObject(site_url + target)
                counts["site"] += 1
            else:
                counts["other"] += 1

    missing = []

    def add(items: list[dict], parent=None) -> None:
        for item in items:
            if item["id"] not in places:
                missing.append(item["title"])
                continue
            number, left, top = places[item["id"]]
            node = writer.add_outline_item(title=item["title"], page_number=number,
                                           parent=parent, fit=Fit.xyz(left=left, top=top))
            counts["outline"] += 1
            add(item.get("children", []), node)

    add(outline)
    writer.page_mode = "/UseOutlines"  # a reader opens the PDF with its bookmarks shown
    with path.open("wb") as handle:
        writer.write(handle)
    return {**counts, "missing": missing}


OBJECT = re.compile(rb"(\d+)\s+0\s+obj\b(.*?)(?:\bstream\b|\bendobj\b)", re.DOTALL)


def pdf_summary(data: bytes) -> dict:
    """Pages, images and font names of a PDF written by Chromium (Skia writes the objects'
    dictionaries uncompressed; only the streams are compressed). An image that is another's
    soft mask (its transparency, ``/SMask N 0 R``) is not counted."""
    counts = [int(n) for n in re.findall(rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)", data)]
    counts += [int(n) for n in re.findall(rb"/Count\s+(\d+)[^>]*?/Type\s*/Pages\b", data)]
    masks = set(re.findall(rb"/SMask\s+(\d+)\s+0\s+R", data))
    images = [
        number
        for number, head in OBJECT.findall(data)
        if re.search(rb"/Subtype\s*/Image\b", head) and number not in masks
    ]
    fonts = {
        name.decode("latin-1").split("+")[-1]
        for name in re.findall(rb"/(?:BaseFont|FontName)\s*/([A-Za-z0-9+_\-]+)", data)
    }
    return {"pages": max(counts, default=0), "images": len(images), "fonts": sorted(fonts)}


def check_pdf(summary: dict, formulas: int) -> list[str]:
    """Why the printed PDF is not the book (empty list when it is)."""
    problems = []
    if summary["pages"] < 2:
        problems.append(f"{summary['pages']} pages")
    if summary["images"] == 0:
        problems.append("no images")
    if formulas and not any(font.startswith("MathJax_") for font in summary["fonts"]):
        problems.append(f"no MathJax font among {summary['fonts']}: math not typeset")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-build", action="store_true", help="print _build/singlehtml as is")
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(OUT), help="the PDF to write")
    args = parser.parse_args(argv)
    if args.build_only:
        return build_here()
    if not args.no_build:
        built = build_singlehtml()
        print(
            f"pdf: single-page build {built['seconds']:.0f} s (environment: {built['updated']}; "
            f"{built['executed']} chapters executed)",
            flush=True,
        )
    if not (SINGLE / "index.html").is_file():
        sys.exit(f"pdf: no single-page book in {SINGLE}")
    start = time.perf_counter()
    out = Path(args.out)
    printed = print_pdf(SINGLE, out)
    summary = pdf_summary(out.read_bytes())
    finished = finish_pdf(out, printed["outline"], printed["base"], published_site())
    print(
        f"pdf: {out} printed in {time.perf_counter() - start:.0f} s: {summary['pages']} pages "
        f"({PAPER}), {out.stat().st_size / 2**20:.1f} MiB, {summary['images']} images "
        f"({printed['images']} on the page), {printed['formulas']} formulas "
        f"(zoomed out to the text width: {printed['scaled']['equations']} display equations, "
        f"{printed['scaled']['inline']} inline formulas, {printed['scaled']['tables']} tables), "
        f"{printed['chapters']} chapters, fonts: {', '.join(summary['fonts'])}; links to other "
        f"pages made internal: {printed['internal links']} on the page and {finished['internal']} "
        f"in the file, to the published site: {finished['site']}; outline: "
        f"{finished['outline']} entries"
    )
    problems = check_pdf(summary, printed["formulas"])
    problems += [f"no destination for the outline entry {title!r}" for title in finished["missing"]]
    problems += pdf_links_problems(out, OUT.parent, published_site())
    if printed["width"] > TEXT_WIDTH_PX + 1:
        problems.append(
            f"the page is {printed['width']} px wide, the text {TEXT_WIDTH_PX} px: Chromium "
            "shrank every page to fit it (a wide element that nothing zooms out)"
        )
    if problems:
        print("pdf: FAILED: " + "; ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
