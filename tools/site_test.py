"""Test the built book in a real browser (headless Chromium driven by Playwright), offline.

Usage::

    python tools/site_test.py [SITE]     # SITE: the built HTML book, default _build/html
    python tools/site_test.py --report findings.txt     # also every failure, by page, to a file
    python tools/site_test.py --only gradient-flow      # only the pages whose path contains it

``make site-test`` builds the book and runs this. The site is served on 127.0.0.1; every request
for another host is blocked (the test passes with the network off), and is listed, but counts as a
failure only through its consequences (math not typeset, an image missing). For every page:

- no failed request and no HTTP error for a file of the site itself (scripts that MathJax loads
  late and its fonts included: every request of the page is seen), no console error, no uncaught
  JavaScript exception;
- math: every formula is typeset by MathJax (an ``mjx-container`` per formula) and no raw TeX
  (``\\(``, ``\\[``, ``$$``, ``\\begin{``) is left in the text outside code;
- every figure has a loaded image and a non-empty caption; every image on the page loaded;
- every animation (matplotlib ``to_jshtml``) has frames and a slider that changes the frame when
  scrubbed; every multi-slider figure (``lib.viz.slider_grid``) changes its image when each of
  its sliders moves;
- every solution starts collapsed;
- on chapter pages: the ``.ipynb`` download link and the Colab and Binder launch links point at
  an ``.ipynb`` file that exists in the site (Colab and Binder open it from the branch the site is
  published from, whose files are the site's files).

- every page's footer links to the whole book as one PDF, and ``book.pdf`` is in the site and is
  a PDF (``tools/pdf.py`` makes it);
- display equations: none is wider than its column, at 1280 px and at 390 px (a phone), except
  those that ``tools/site_allow.json`` names with a reason (an entry there that names no
  overflowing equation is stale, and fails);
- alt text: every image of the article and every animation has alt text that describes it (at
  least four words; not a file name, a hash or a placeholder);
- prose: no "nan", "None" or raw e-notation (``4.8e-04``) in the text outside code, math,
  API signatures and cell outputs (``lib/typeset.py`` writes numbers as "4.8 × 10⁻⁴");
- explorations: each multi-slider figure has one slider per entry of its ``data-parameters``,
  and the parameters that the text marks as ``span.param`` between the previous heading and the
  figure are exactly its sliders;
- figure legibility: every PNG of the article carries ``lib.viz``'s text chunks
  ``book:min-font-pt`` and ``book:dpi``, and its smallest text is displayed at >= 10 CSS px at
  1280 px (at 390 px, sizes under 7 px are listed for information).

Every page is checked at 1280 px; then the window is narrowed to 390 px (the layout follows by
CSS media queries, as when a phone loads it) for the equations, the figure sizes and a second set
of screenshots. The solutions are expanded for those measurements (a collapsed one has no width).

A screenshot of every page goes to ``_build/site-test/``: ``<page>.png`` (the top of the page, as
a reader first sees it) and ``<page>-full.jpg`` (the whole page), and ``<page>-390.png`` and
``<page>-390-full.jpg`` at 390 px. The last line is ``N passed, N failed`` (pages).

The browser is Debian's Chromium (``/usr/bin/chromium``, or ``$CHROMIUM``); Playwright's own
browser download is never used. Where Chromium is missing and we run as root, it is installed
with apt-get; otherwise the test stops with the command to run.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "_build" / "site-test"
ALLOWLIST = Path(__file__).resolve().parent / "site_allow.json"
VIEWPORT = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}  # a phone held upright (CSS px)
TIMEOUT_MS = 60_000  # a loaded 2-core machine can take many seconds to typeset a long chapter

# The smallest text of a figure, in CSS px at a 1280 px window (the book's convention for lib.viz
# figures); at 390 px no figure can keep it, and sizes under 7 px are only listed.
MIN_FONT_PX = 10.0
PHONE_NOTE_PX = 7.0
# Layout widths are fractional and scrollWidth is rounded to a whole pixel: an equation counts as
# wider than its column only beyond one CSS pixel.
WIDTH_SLACK_PX = 1.0
MIN_ALT_WORDS = 4
JPEG_MAX_PX = 65_000  # a JPEG image is at most 65535 pixels tall

# Chromium's own background traffic is switched off: the machine has no network, and these
# connections would only be refused (or appear as blocked requests).
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

# Raw TeX that MathJax would have consumed; searched in the page text outside code and formulas.
RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\begin\{|\$\\[a-zA-Z]")

# Prose that shows a value the reader should never see: a missing number ("nan", any case), a
# Python None (case-sensitive, and not "None of ...": "none" is an English word), a number in raw
# e-notation ("4.8e-04", "1e5"; lib/typeset.py writes "4.8 × 10⁻⁴").
PROSE_PATTERNS = {
    "nan": re.compile(r"\bnan\b", re.IGNORECASE),
    "None": re.compile(r"\bNone\b(?! of\b)"),
    "raw e-notation": re.compile(r"\b\d+(?:\.\d+)?[eE][+-]?\d+\b"),
}

# Alt text that names no content: file names, hashes (Sphinx writes the image's path as its alt
# when there is none), and generic words.
FILE_NAME = re.compile(r"\.(png|jpe?g|svg|gif|webp)$", re.IGNORECASE)
HASH = re.compile(r"^[0-9a-f]{16,}", re.IGNORECASE)
PLACEHOLDER_ALTS = {
    "image",
    "figure",
    "plot",
    "animation",
    "figure for the chosen parameter values",
}

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FONT_CHUNK, DPI_CHUNK = "book:min-font-pt", "book:dpi"

# What the page's text is read without: code, formulas, API signatures, cell outputs.
NOT_PROSE = (
    "pre, code, script, style, textarea, mjx-container, mjx-assistive-mml, .highlight, .output"
)

PAGE_STATE_JS = """
() => {
  // shown to the reader: takes up height and is not hidden by style (a collapsed dropdown's body
  // is kept in the page with height 0)
  const visible = (el) => el.getBoundingClientRect().height > 1
                          && getComputedStyle(el).visibility !== 'hidden';
  const root = document.querySelector('main, .bd-main, body');
  const clone = root.cloneNode(true);
  clone.querySelectorAll('NOT_PROSE').forEach((el) => el.remove());
  const text = clone.innerText;
  clone.querySelectorAll('.sig, .math').forEach((el) => el.remove());
  const prose = clone.innerText;
  const figures = [...document.querySelectorAll('figure')].map((fig) => {
    const img = fig.querySelector('img');
    const cap = fig.querySelector('figcaption');
    return {
      id: fig.id || (cap ? cap.innerText.slice(0, 40) : '?'),
      image: !!img && img.complete && img.naturalWidth > 0,
      caption: cap ? cap.innerText.trim().length : 0,
    };
  });
  const brokenImages = [...document.querySelectorAll('img')]
    .filter((img) => !(img.complete && img.naturalWidth > 0))
    .map((img) => (img.getAttribute('src') || '').slice(0, 80));
  const solutions = [...document.querySelectorAll('.solution')].map((sol) => {
    if (sol.tagName === 'DETAILS') return {id: sol.id, open: sol.open};
    const body = [...sol.children].filter((c) => !c.classList.contains('admonition-title')
                                               && !c.classList.contains('toggle-button'));
    return {id: sol.id, open: body.some(visible)};
  });
  const links = [...document.querySelectorAll('a[href]')].map((a) => a.href);
  const pdfLinks = [...document.querySelectorAll('footer a[href]')].map((a) => a.href)
    .filter((href) => /book\\.pdf$/.test(href.split(/[?#]/)[0]));
  return {
    text, prose,
    mathSource: document.querySelectorAll('span.math, div.math').length,
    mathTypeset: document.querySelectorAll('mjx-container').length,
    mathjax: typeof window.MathJax === 'object' && !!window.MathJax.startup,
    figures, brokenImages, solutions, links, pdfLinks,
  };
}
""".replace("NOT_PROSE", NOT_PROSE)

# Scrub every matplotlib animation: the slider's last, middle and first positions, each must show
# a frame (a data URI or a file), and the last frame must differ from the first.
SCRUB_ANIMATIONS_JS = """
async () => {
  const out = [];
  for (const anim of document.querySelectorAll('div.animation')) {
    const img = anim.querySelector('img');
    const slider = anim.querySelector('input.anim-slider');
    if (!img || !slider) { out.push({ok: false, why: 'no image or no slider'}); continue; }
    const max = parseInt(slider.max);
    const seen = [];
    for (const v of [max, Math.floor(max / 2), 0]) {
      slider.value = String(v);
      slider.dispatchEvent(new Event('input', {bubbles: true}));
      await new Promise((r) => setTimeout(r, 50));
      seen.push(img.getAttribute('src') || '');
    }
    const frames = seen.every((s) => s.length > 100 || /\\.(png|jpe?g|svg)$/.test(s));
    out.push({ok: max >= 1 && frames && seen[0] !== seen[2], frames: max + 1,
              why: max < 1 ? 'fewer than two frames' : !frames ? 'a frame is empty'
                   : seen[0] === seen[2] ? 'scrubbing does not change the image' : ''});
  }
  return out;
}
"""

# Move each slider of every multi-slider figure (lib.viz.slider_grid) to its last value: the image
# must change each time.
SCRUB_GRIDS_JS = """
async () => {
  const out = [];
  for (const grid of document.querySelectorAll('div.slider-grid')) {
    const img = grid.querySelector('img');
    const sliders = [...grid.querySelectorAll('input[type=range]')];
    if (!img || sliders.length === 0) {
      out.push({ok: false, why: 'no image or no slider'});
      continue;
    }
    let ok = img.naturalWidth > 0, why = ok ? '' : 'first image missing';
    for (const s of sliders) {
      const before = img.getAttribute('src');
      s.value = s.max;
      s.dispatchEvent(new Event('input', {bubbles: true}));
      await new Promise((r) => setTimeout(r, 50));
      if (img.getAttribute('src') === before || !img.getAttribute('src')) {
        ok = false; why = `slider ${s.name || '?'} does not change the image`;
      }
    }
    out.push({ok, sliders: sliders.length, why});
  }
  return out;
}
"""

# Each multi-slider figure: its data-parameters, its sliders' names, and the texts of the
# span.param marks between the previous h1/h2/h3 of the article and the figure.
EXPLORATIONS_JS = """
() => {
  const article = document.querySelector('main .bd-article') || document.querySelector('main')
                  || document.body;
  const heads = [...article.querySelectorAll('h1, h2, h3')];
  const marks = [...article.querySelectorAll('span.param')];
  const before = (a, b) => !!(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING);
  return [...document.querySelectorAll('div.slider-grid')].map((grid) => {
    const head = heads.filter((h) => before(h, grid)).pop() || null;
    return {
      heading: head ? head.textContent.replace(/#$/, '').trim() : '(top of the page)',
      dataParameters: grid.getAttribute('data-parameters'),
      sliders: [...grid.querySelectorAll('input[type=range]')].map((s) => s.name || ''),
      params: marks.filter((p) => (!head || before(head, p)) && before(p, grid))
                   .map((p) => p.textContent),
    };
  });
}
"""

# Open every collapsed block (solutions, dropdowns, toggles), so that what they hold has a size.
EXPAND_JS = """
() => {
  document.querySelectorAll('details').forEach((d) => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach((el) => el.classList.remove('toggle-hidden'));
  document.querySelectorAll('.toggle-details__container').forEach((el) => {
    el.classList.remove('toggle-hidden');
  });
}
"""

# Every display equation: its label, TeX source (MathJax's own record of what it typeset), the
# width it is drawn at and the width of its column (the div.math that holds it, and never more
# than the article's content width).
EQUATIONS_JS = """
() => {
  const content = (el) => {
    const s = getComputedStyle(el);
    return el.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
  };
  const doc = window.MathJax && MathJax.startup && MathJax.startup.document;
  const tex = new Map(doc ? [...doc.math].map((item) => [item.typesetRoot, item.math]) : []);
  const article = document.querySelector('main .bd-article') || document.querySelector('main')
                  || document.body;
  return [...document.querySelectorAll('mjx-container[display="true"]')].map((box, i) => {
    const holder = box.closest('div.math') || box.parentElement;
    const inner = box.querySelector('mjx-math');
    const eqno = holder.querySelector('.eqno');
    const label = [holder.id, eqno ? eqno.textContent.replace('#', '').trim() : '']
      .filter(Boolean).join(' ');
    return {
      label: label || `display equation ${i + 1}`,
      tex: tex.get(box) || holder.textContent,
      rendered: Math.max(inner ? inner.getBoundingClientRect().width : 0, box.scrollWidth),
      column: Math.min(content(holder), content(article)),
    };
  });
}
"""

# Every image of the article (figures, cell outputs, animations, multi-slider figures).
IMAGES_JS = """
(withSources) => {
  const article = document.querySelector('main .bd-article') || document.querySelector('main')
                  || document.body;
  return [...article.querySelectorAll('img')].map((img, i) => {
    const kind = img.closest('div.animation') ? 'animation'
      : img.closest('div.slider-grid') ? 'multi-slider figure'
      : img.closest('figure') ? 'figure' : 'image';
    const holder = img.closest('figure[id], div.cell[id], [id]');
    return {
      name: `${kind} ${i + 1}` + (holder && holder.id ? ` (#${holder.id})` : ''),
      src: withSources ? (img.currentSrc || img.src) : '',
      asset: (img.currentSrc || img.src).includes('/_static/'),
      alt: img.getAttribute('alt'),
      width: img.getBoundingClientRect().width,
      natural: img.naturalWidth,
    };
  });
}
"""


def chromium() -> str:
    """The path of Debian's Chromium, installed with apt-get when missing and we are root."""
    found = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if found:
        return found
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        print("site-test: no Chromium; installing Debian's chromium with apt-get", flush=True)
        quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}  # no prompt in CI
        subprocess.run(["apt-get", "update", "-q"], check=True, env=quiet)
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=True, env=quiet)
        found = shutil.which("chromium")
        if found:
            return found
    sys.exit(
        "site-test needs Debian's Chromium: run `sudo apt-get update && sudo apt-get install -y "
        "chromium` (or set CHROMIUM=/path/to/chromium) and try again"
    )


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve ``site`` on 127.0.0.1 (a free port) in a thread; return the server and its URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


REFRESH = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)

# Known messages that are no fault of the book: pydata-sphinx-theme logs this at a reader's first
# visit (no theme mode stored yet) and then uses its default; nothing is broken.
HARMLESS_CONSOLE = ("Got invalid theme mode: . Resetting to auto.",)


def pages(site: Path) -> tuple[list[Path], dict[str, str]]:
    """Every HTML page of the site (not the theme's or Sphinx's support files), and the redirect
    pages (the root ``index.html``) with their targets."""
    skip = {"_static", "_sources", "_images", "_downloads", "_panels_static"}
    found, redirects = [], {}
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site)
        if skip & set(rel.parts[:-1]):
            continue
        head = path.read_text(encoding="utf-8", errors="replace")[:2000]
        target = REFRESH.search(head)
        if target:
            redirects[rel.as_posix()] = (rel.parent / target.group(1)).as_posix()
        else:
            found.append(path)
    return found, redirects


def notebook_target(url: str, base: str) -> str | None:
    """The site path that a download, Colab or Binder link opens, or None for other links."""
    parsed = urlparse(url)
    if url.startswith(base) and parsed.path.endswith(".ipynb"):
        return unquote(parsed.path).lstrip("/")
    if parsed.netloc == "colab.research.google.com":
        # /github/OWNER/NAME/blob/BRANCH/PATH
        parts = parsed.path.split("/")
        return "/".join(parts[6:]) if len(parts) > 6 and parts[1] == "github" else ""
    if parsed.netloc == "mybinder.org":
        urlpath = parse_qs(parsed.query).get("urlpath", [""])[0]
        return urlpath.split("/", 1)[1] if "/" in urlpath else ""
    return None


def check_notebook(site: Path, rel: str) -> str | None:
    """Why the notebook ``rel`` of the site is not a chapter notebook (None when it is)."""
    path = site / rel
    if not rel.endswith(".ipynb") or not path.is_file():
        return f"{rel or '(no path)'} is not an .ipynb file of the site"
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        first = "".join(notebook["cells"][0]["source"])
    except (ValueError, KeyError, IndexError) as error:
        return f"{rel} is not a notebook ({error})"
    if "pip" not in first or "find_spec" not in first:
        return f"{rel} does not start with the cell that installs lib"
    return None


# ---- the checks' logic, free of the browser (tests/test_site_checks.py) ----


def collapse(text: str) -> str:
    """``text`` with every run of whitespace made one space, stripped."""
    return " ".join(text.split())


def prose_problems(text: str, context: int = 30) -> list[str]:
    """Each "nan", "None" or raw e-notation number in ``text`` (see PROSE_PATTERNS), in order of
    appearance, with ``context`` characters on either side."""
    found = []
    for what, pattern in PROSE_PATTERNS.items():
        for match in pattern.finditer(text):
            around = collapse(text[max(0, match.start() - context) : match.end() + context])
            found.append((match.start(), f"{what} in the text: ...{around}..."))
    return [message for _, message in sorted(found)]


def alt_problem(alt: str | None) -> str | None:
    """Why ``alt`` does not describe an image (None when it may): missing or empty, a file name,
    path or hash, a placeholder, or fewer than MIN_ALT_WORDS words."""
    text = collapse(alt or "")
    if not text:
        return "no alt text"
    last = text.rstrip("/").rsplit("/", 1)[-1]
    if FILE_NAME.search(text) or HASH.match(last) or ("/" in text and " " not in text):
        return f"alt text is a file name: {text[:60]!r}"
    if text.lower().rstrip(".") in PLACEHOLDER_ALTS:
        return f"alt text is a placeholder: {text!r}"
    if len(text.split()) < MIN_ALT_WORDS:
        return f"alt text of fewer than {MIN_ALT_WORDS} words: {text!r}"
    return None


def png_text_chunks(data: bytes) -> dict[str, str]:
    """The text chunks (tEXt, zTXt, iTXt; PNG specification, section 11.3.4) of a PNG file, as
    {keyword: text}. Each chunk is length (4 bytes, big-endian), type (4), data, CRC (4)."""
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG file (no PNG signature)")
    texts: dict[str, str] = {}
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IEND" or len(body) < length:
            break
        keyword, _, rest = body.partition(b"\0")
        key = keyword.decode("latin-1")
        if kind == b"tEXt":
            texts[key] = rest.decode("latin-1")
        elif kind == b"zTXt":  # compression method (1 byte, 0 = zlib), compressed text
            texts[key] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == b"iTXt":  # flag, method, language\0, translated keyword\0, text (UTF-8)
            compressed, rest = rest[0], rest[2:]
            text = rest.split(b"\0", 2)[-1]
            texts[key] = (zlib.decompress(text) if compressed else text).decode("utf-8")
    return texts


def png_bytes(src: str, base: str, site: Path) -> bytes | None:
    """The bytes of the PNG that an image's ``src`` (as the browser resolved it) shows: a
    ``data:image/png`` URI or a ``.png`` file of the site; None for anything else."""
    if src.startswith("data:"):
        header, _, payload = src.partition(",")
        if not header.lower().startswith("data:image/png"):
            return None
        if header.endswith(";base64"):
            return base64.b64decode(payload)
        return unquote(payload).encode("latin-1")
    parsed = urlparse(src)
    if not src.startswith(base) or not parsed.path.lower().endswith(".png"):
        return None
    path = site / unquote(parsed.path).lstrip("/")
    return path.read_bytes() if path.is_file() else None


def displayed_font_px(
    min_font_pt: float, dpi: float, css_width: float, natural_width: int
) -> float:
    """The height in CSS px at which a figure's smallest text is shown:
    ``min_font_pt / 72 * dpi`` image pixels (a point is 1/72 inch), each drawn
    ``css_width / natural_width`` CSS px wide."""
    if natural_width <= 0:
        raise ValueError(f"natural_width must be positive, got {natural_width!r}")
    return min_font_pt / 72 * dpi * css_width / natural_width


def figure_font_px(chunks: dict[str, str], css_width: float, natural_width: int) -> float:
    """displayed_font_px from a PNG's ``book:min-font-pt`` and ``book:dpi`` chunks; ValueError
    naming what is missing or unreadable."""
    missing = [key for key in (FONT_CHUNK, DPI_CHUNK) if key not in chunks]
    if missing:
        raise ValueError(f"no {' and no '.join(missing)} text chunk (not made by lib.viz)")
    try:
        font, dpi = float(chunks[FONT_CHUNK]), float(chunks[DPI_CHUNK])
    except ValueError:
        raise ValueError(
            f"unreadable chunks {FONT_CHUNK}={chunks[FONT_CHUNK]!r}, "
            f"{DPI_CHUNK}={chunks[DPI_CHUNK]!r}"
        ) from None
    return displayed_font_px(font, dpi, css_width, natural_width)


def exploration_problems(
    data_parameters: str | None, sliders: list[str], params: list[str]
) -> list[str]:
    """What is wrong with one multi-slider figure: its sliders against its ``data-parameters``
    ("label1|label2"), and the parameters the text marks (``span.param``) against its sliders
    (names compared lowercased, whitespace collapsed)."""
    problems = []
    names = [collapse(s).lower() for s in sliders]
    if data_parameters is None:
        problems.append("no data-parameters attribute")
    else:
        entries = [collapse(e).lower() for e in data_parameters.split("|") if e.strip()]
        if sorted(entries) != sorted(names):
            problems.append(
                f"sliders {names} do not match its data-parameters {entries} (one slider each)"
            )
    marked = {collapse(p).lower() for p in params}
    missing, extra = sorted(set(names) - marked), sorted(marked - set(names))
    if missing:
        problems.append(f"sliders not marked {{.param}} in the text before it: {missing}")
    if extra:
        problems.append(f"marked {{.param}} in the text before it but no slider: {extra}")
    return problems


@dataclass(frozen=True)
class Allowed:
    """One display equation allowed to be wider than its column (tools/site_allow.json)."""

    page: str  # e.g. book/linear-networks.html
    viewport: int  # 1280 or 390
    tex_prefix: str  # the start of its TeX source (compared with whitespace collapsed)
    reason: str

    def allows(self, page: str, viewport: int, tex: str) -> bool:
        """Whether this entry names the equation ``tex`` on ``page`` at ``viewport``."""
        return (self.page, self.viewport) == (page, viewport) and collapse(tex).startswith(
            collapse(self.tex_prefix)
        )


def load_allowlist(path: Path) -> list[Allowed]:
    """The entries of the allowlist file (a JSON list of {page, viewport, tex_prefix, reason}),
    or [] when it does not exist. ValueError for a malformed entry."""
    if not path.is_file():
        return []
    entries = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of entries, got {type(entries).__name__}")
    keys = {"page", "viewport", "tex_prefix", "reason"}
    allowed = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != keys:
            raise ValueError(
                f"{path} entry {i}: expected exactly the keys {sorted(keys)}, got {entry!r}"
            )
        if entry["viewport"] not in (VIEWPORT["width"], PHONE["width"]):
            raise ValueError(
                f"{path} entry {i}: viewport must be 1280 or 390, got {entry['viewport']!r}"
            )
        texts = ("page", "tex_prefix", "reason")
        if not all(isinstance(entry[k], str) and entry[k].strip() for k in texts):
            raise ValueError(
                f"{path} entry {i}: page, tex_prefix and reason must be non-empty text"
            )
        allowed.append(
            Allowed(entry["page"], entry["viewport"], entry["tex_prefix"], entry["reason"])
        )
    return allowed


@dataclass(frozen=True)
class Overflow:
    """A display equation drawn wider than its column."""

    page: str
    viewport: int
    label: str
    tex: str
    rendered: float
    column: float

    def message(self) -> str:
        return (
            f"equation {self.label} at {self.viewport} px is {self.rendered:.0f} px wide, its "
            f"column {self.column:.0f} px: {collapse(self.tex)[:80]}"
        )


def split_overflows(
    overflows: list[Overflow], allowed: list[Allowed]
) -> tuple[list[Overflow], list[Allowed]]:
    """(the overflows that no entry allows, the entries that allow no overflow: stale)."""
    used: set[Allowed] = set()
    bad = []
    for over in overflows:
        hits = [a for a in allowed if a.allows(over.page, over.viewport, over.tex)]
        used.update(hits)
        if not hits:
            bad.append(over)
    return bad, [a for a in allowed if a not in used]


def overflows_of(equations: list[dict], page: str, viewport: int) -> list[Overflow]:
    """The equations (as EQUATIONS_JS measures them) wider than their column by more than
    WIDTH_SLACK_PX."""
    return [
        Overflow(page, viewport, eq["label"], eq["tex"], eq["rendered"], eq["column"])
        for eq in equations
        if eq["rendered"] > eq["column"] + WIDTH_SLACK_PX
    ]


# ---- the browser ----


@dataclass
class PageResult:
    """What one page gave: failures, notes (information only), overflowing equations (judged
    against the allowlist once every page is seen)."""

    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    overflows: list[Overflow] = field(default_factory=list)


class Pngs:
    """The text chunks of the PNGs that the pages show, read once per source."""

    def __init__(self, site: Path, base: str) -> None:
        self.site, self.base, self.cache = site, base, {}

    def chunks(self, src: str) -> dict[str, str] | None:
        """The PNG's text chunks, or None when ``src`` is not a PNG of the site or a data URI."""
        if src not in self.cache:
            data = png_bytes(src, self.base, self.site)
            try:
                self.cache[src] = None if data is None else png_text_chunks(data)
            except ValueError:
                self.cache[src] = None
        return self.cache[src]


def check_text(state: dict) -> list[str]:
    """Raw TeX and the forbidden values in the page's prose."""
    failures = []
    raw = RAW_TEX.search(state["text"])
    if raw:
        around = state["text"][max(0, raw.start() - 40) : raw.end() + 40].replace("\n", " ")
        failures.append(f"raw TeX left on the page: ...{around}...")
    return failures + prose_problems(state["prose"])


def check_state(state: dict) -> list[str]:
    """Math typeset, figures with images and captions, images loaded, solutions collapsed."""
    failures = []
    if state["mathSource"]:
        if not state["mathjax"]:
            failures.append(f"{state['mathSource']} formulas, but MathJax did not load")
        elif state["mathTypeset"] < state["mathSource"]:
            failures.append(
                f"{state['mathSource']} formulas, only {state['mathTypeset']} typeset by MathJax"
            )
    for fig in state["figures"]:
        if not fig["image"]:
            failures.append(f"figure {fig['id']!r} has no loaded image")
        if not fig["caption"]:
            failures.append(f"figure {fig['id']!r} has no caption")
    for src in state["brokenImages"]:
        failures.append(f"image not loaded: {src}")
    for sol in state["solutions"]:
        if sol["open"]:
            failures.append(f"solution {sol['id']!r} is not collapsed")
    if not state["pdfLinks"]:
        failures.append("no link to book.pdf in the footer")
    return failures


def check_links(state: dict, site: Path, base: str) -> tuple[list[str], dict[str, list[str]]]:
    """The notebook download, Colab and Binder links: failures, and the targets by kind."""
    failures, targets = [], {}
    for link in state["links"]:
        target = notebook_target(link, base)
        if target is not None:
            kind = urlparse(link).netloc.split(".")[-2] if not link.startswith(base) else "download"
            targets.setdefault(kind, set()).add(target)
    for kind, rels in sorted(targets.items()):
        for rel in sorted(rels):
            why = check_notebook(site, rel)
            if why:
                failures.append(f"{kind} link: {why}")
    for link in state["pdfLinks"]:
        if link.split("#")[0] != base + "book.pdf":
            failures.append(f"the footer's PDF link points at {link}, not the site's book.pdf")
    return failures, {kind: sorted(rels) for kind, rels in targets.items()}


def check_images(images: list[dict], pngs: Pngs, chapter: bool, viewport: int) -> PageResult:
    """Alt text (at 1280 px only: it does not change) and the figures' smallest text size. The
    theme's and Sphinx's icons (files of ``_static/``, e.g. the index's toggles) are left out."""
    out = PageResult()
    wide = viewport == VIEWPORT["width"]
    for img in images:
        if img.get("asset"):
            continue
        why = alt_problem(img["alt"])
        if wide and why:
            out.failures.append(f"{img['name']}: {why}")
        chunks = pngs.chunks(img["src"]) if img["src"] else None
        if chunks is None:
            continue  # not a PNG
        if img["width"] <= 0 or img["natural"] <= 0:
            out.notes.append(f"{img['name']} at {viewport} px: not displayed, size not measured")
            continue
        try:
            px = figure_font_px(chunks, img["width"], img["natural"])
        except ValueError as error:
            if wide and chapter:
                out.failures.append(f"{img['name']}: {error}")
            continue
        size = f"{img['name']}: smallest text {px:.1f} px at {viewport} px"
        if wide and px < MIN_FONT_PX:
            out.failures.append(f"{size} (< {MIN_FONT_PX:.0f})")
        elif not wide and px < PHONE_NOTE_PX:
            out.notes.append(f"{size} (< {PHONE_NOTE_PX:.0f}; information only)")
    return out


def measure(page, name: str, viewport: dict, pngs: Pngs, chapter: bool) -> PageResult:
    """Equation widths and figure sizes at ``viewport`` (the page's collapsed blocks expanded)."""
    page.set_viewport_size(viewport)
    page.evaluate(EXPAND_JS)
    page.wait_for_timeout(100)  # let the layout settle
    result = check_images(page.evaluate(IMAGES_JS, True), pngs, chapter, viewport["width"])
    result.overflows = overflows_of(page.evaluate(EQUATIONS_JS), name, viewport["width"])
    return result


def screenshots(page, path: Path) -> None:
    """The top of the page (``path.png``) and the whole page (JPEG: a long chapter is tens of
    thousands of pixels tall), in pieces ``path-full-1.jpg``, ... where it is taller than a JPEG
    can be."""
    page.screenshot(path=f"{path}.png")
    height = page.evaluate("() => document.documentElement.scrollHeight")
    if height <= JPEG_MAX_PX:
        page.screenshot(path=f"{path}-full.jpg", full_page=True, type="jpeg", quality=70)
        return
    width = page.viewport_size["width"]
    for k, top in enumerate(range(0, height, JPEG_MAX_PX), start=1):
        clip = {"x": 0, "y": top, "width": width, "height": min(JPEG_MAX_PX, height - top)}
        page.screenshot(
            path=f"{path}-full-{k}.jpg", full_page=True, clip=clip, type="jpeg", quality=70
        )


def test_page(
    page, url: str, name: str, site: Path, base: str, log: dict, pngs: Pngs, shots: Path
) -> PageResult:
    """Load one page at 1280 px, run every check, then at 390 px; return what was found."""
    result = PageResult()
    log["console"].clear()
    page.set_viewport_size(VIEWPORT)
    page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
    if page.evaluate("() => typeof window.MathJax === 'object' && !!window.MathJax.startup"):
        page.evaluate("() => window.MathJax.startup.promise.then(() => true)")
    page.wait_for_timeout(200)  # let late scripts (togglebutton, copybutton) finish
    state = page.evaluate(PAGE_STATE_JS)

    result.failures += check_state(state) + check_text(state)
    for i, anim in enumerate(page.evaluate(SCRUB_ANIMATIONS_JS)):
        if not anim["ok"]:
            result.failures.append(f"animation {i + 1}: {anim['why']}")
    for i, grid in enumerate(page.evaluate(SCRUB_GRIDS_JS)):
        if not grid["ok"]:
            result.failures.append(f"multi-slider figure {i + 1}: {grid['why']}")
    for i, grid in enumerate(page.evaluate(EXPLORATIONS_JS)):
        for why in exploration_problems(grid["dataParameters"], grid["sliders"], grid["params"]):
            result.failures.append(
                f"multi-slider figure {i + 1} (under {grid['heading']!r}): {why}"
            )
    failures, targets = check_links(state, site, base)
    result.failures += failures
    log["notebooks"][name] = targets
    chapter = "download" in targets  # a page made from a notebook

    stem = name.removesuffix(".html").replace("/", "__")
    screenshots(page, shots / stem)
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(100)
    screenshots(page, shots / f"{stem}-390")
    for viewport in (PHONE, VIEWPORT):
        found = measure(page, name, viewport, pngs, chapter)
        result.failures += found.failures
        result.notes += found.notes
        result.overflows += found.overflows

    result.failures += [f"console error: {text}" for text in log["console"]]
    log["console"].clear()
    return result


def check_pdf(site: Path) -> list[str]:
    """The whole book as one PDF (tools/pdf.py) is in the site."""
    path = site / "book.pdf"
    if not path.is_file():
        return ["book.pdf is not in the site (tools/pdf.py makes it after the HTML build)"]
    with path.open("rb") as handle:
        if handle.read(5) != b"%PDF-":
            return ["book.pdf does not start with %PDF-: not a PDF"]
    return []


def report(results: dict[str, PageResult], path: Path) -> None:
    """Write every failure and note, grouped by page, to ``path``."""
    lines = []
    for name, result in results.items():
        if result.failures or result.notes:
            lines.append(f"== {name} ({len(result.failures)} failures)")
            lines += [f"  FAIL {f}" for f in result.failures]
            lines += [f"  note {n}" for n in result.notes]
            lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def run(
    site: Path, allowlist: Path = ALLOWLIST, only: list[str] | None = None, shots: Path = SHOTS
) -> dict[str, PageResult]:
    """Test every page of the built site ``site`` in Chromium (those whose path contains one of
    ``only``, when given); the results by page."""
    executable = chromium()
    from playwright.sync_api import sync_playwright

    allowed = load_allowlist(allowlist)
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    server, base = serve(site)
    log: dict = {"console": [], "blocked": [], "notebooks": {}}
    pngs = Pngs(site, base)

    def route(route) -> None:
        if route.request.url.startswith(base) or route.request.url.startswith("data:"):
            route.continue_()
        else:
            log["blocked"].append(route.request.url)
            route.abort("blockedbyclient")

    def on_failed(request) -> None:
        if request.url.startswith(base):
            log["console"].append(f"request failed: {request.url} ({request.failure})")

    def on_response(response) -> None:
        if response.url.startswith(base) and response.status >= 400:
            log["console"].append(f"HTTP {response.status} for {response.url}")

    def on_console(message) -> None:
        if message.type != "error":
            return
        where = (message.location or {}).get("url", "")
        if where and not where.startswith(base) and "Failed to load resource" in message.text:
            return  # a blocked request for another host: listed below, judged by its effects
        if message.text not in HARMLESS_CONSOLE:
            log["console"].append(message.text)

    results: dict[str, PageResult] = {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=executable, headless=True, args=CHROMIUM_ARGS
            )
            context = browser.new_context(viewport=VIEWPORT, service_workers="block")
            context.route("**/*", route)
            page = context.new_page()
            page.on("requestfailed", on_failed)
            page.on("response", on_response)
            page.on("console", on_console)
            page.on("pageerror", lambda error: log["console"].append(f"uncaught: {error}"))
            found, redirects = pages(site)
            if only:
                found = [p for p in found if any(part in p.as_posix() for part in only)]
                allowed = [a for a in allowed if any(part in a.page for part in only)]
            for name, target in redirects.items():
                ok = (site / target).is_file()
                results[name] = PageResult(
                    [] if ok else [f"redirects to {target}, which does not exist"]
                )
                print(f"{'ok' if ok else 'FAILED':6} {name} (redirect to {target})", flush=True)
            for path in found:
                name = path.relative_to(site).as_posix()
                try:
                    results[name] = test_page(page, base + name, name, site, base, log, pngs, shots)
                except Exception as error:  # a timeout or a crash fails this page, not the run
                    results[name] = PageResult(
                        [f"{type(error).__name__}: {str(error).splitlines()[0]}"]
                    )
                print(f"{'ok' if not results[name].failures else '...':6} {name}", flush=True)
            browser.close()
    finally:
        server.shutdown()

    # The equations wider than their column, against the allowlist (needs every page first).
    overflows = [over for result in results.values() for over in result.overflows]
    bad, stale = split_overflows(overflows, allowed)
    for over in bad:
        results[over.page].failures.append(over.message())
    for entry in stale:
        results.setdefault(entry.page, PageResult()).failures.append(
            f"{allowlist.name}: stale entry (no equation at {entry.viewport} px starting "
            f"{entry.tex_prefix[:60]!r} is wider than its column)"
        )
    results["book.pdf"] = PageResult(check_pdf(site))
    notebooks = {k: v for k, v in log["notebooks"].items() if v}
    (shots / "notebook-links.json").write_text(json.dumps(notebooks, indent=1), encoding="utf-8")
    blocked = sorted(set(log["blocked"]))
    print(f"\n{len(blocked)} requests for other hosts were blocked (the network is off):")
    for url in blocked[:20]:
        print(f"  {url}")
    print(f"notebook links checked on {len(notebooks)} pages; screenshots in {shots}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("site", nargs="?", default=str(ROOT / "_build" / "html"))
    parser.add_argument("--allow", default=str(ALLOWLIST), help="the equation allowlist (JSON)")
    parser.add_argument("--report", help="also write every failure and note, by page, to this file")
    parser.add_argument("--only", nargs="+", help="test only the pages whose path contains one")
    args = parser.parse_args(argv)
    site = Path(args.site).resolve()
    if not (site / "index.html").is_file():
        sys.exit(f"no built book in {site}: run `make book` first")
    start = time.perf_counter()
    results = run(site, Path(args.allow), args.only)
    print(f"{time.perf_counter() - start:.0f} s in the browser\n")
    for name, result in results.items():
        if result.failures or result.notes:
            print(f"{'FAILED' if result.failures else 'notes':6} {name}")
            for failure in result.failures:
                print(f"         {failure}")
            for note in result.notes:
                print(f"         (note) {note}")
    if args.report:
        report(results, Path(args.report))
    failed = sum(1 for result in results.values() if result.failures)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
