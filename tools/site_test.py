"""Test the built book in a real browser (headless Chromium driven by Playwright), offline.

Usage::

    python tools/site_test.py [SITE]     # SITE: the built HTML book, default _build/html
    python tools/site_test.py --report findings.txt     # also every failure, by page, to a file
    python tools/site_test.py --only gradient-flow      # only the pages whose path contains it
    python tools/site_test.py --make-pdf    # make book.pdf (tools/pdf.py) beside the pages' tests

``make site-test`` builds the book and runs this with ``--make-pdf``: the PDF (a single-page
build, then Chromium printing it) is made in a child process while the pages are tested, the two
taking about as long, and is tested once both have ended; a link to ``book.pdf`` is then left to
that test (the file is not there while the pages are tested).

The site is served on 127.0.0.1; every request for another host is blocked (the test passes with
the network off), and is listed, but counts as a failure only through its consequences (math not
typeset, an image missing). For every page:

- no failed request and no HTTP error for a file of the site itself (scripts that MathJax loads
  late and its fonts included: every request of the page is seen), no console error, no uncaught
  JavaScript exception;
- math: every formula is typeset by MathJax (an ``mjx-container`` per formula) and no raw TeX
  (``\\(``, ``\\[``, ``$$``, ``\\begin{``) is left in the text outside code;
- every figure has a loaded image and a non-empty caption; every image on the page loaded;
- every animation (matplotlib ``to_jshtml``) has frames and a slider that changes the frame when
  scrubbed; every multi-slider figure (``lib.book.viz.slider_grid``) changes its image when each of
  its sliders moves;
- every solution starts collapsed;
- on chapter pages: the ``.ipynb`` download link and the Colab and Binder launch links point at
  an ``.ipynb`` file that exists in the site (Colab and Binder open it from the branch the site is
  published from, whose files are the site's files).

- every page's footer links to the whole book as one PDF, and ``book.pdf`` is in the site and is
  a PDF (``tools/pdf.py`` makes it; see book.pdf below);
- display equations: none is wider than its column, at 1280 px and at 390 px (a phone), except
  those that ``tools/site_allow.json`` names with a reason (an entry there that names no
  overflowing equation is stale, and fails);
- alt text: every image of the article and every animation has alt text that describes it (at
  least four words; not a file name, a hash or a placeholder);
- prose: no "nan", "None" or raw e-notation (``4.8e-04``) in the text outside code, math,
  API signatures and cell outputs (``lib/book/typeset.py`` writes numbers as "4.8 × 10⁻⁴");
- explorations: each multi-slider figure has one slider per entry of its ``data-parameters``,
  and the parameters that the text marks as ``span.param`` between the previous heading and the
  figure are exactly its sliders;
- MathJax: no error in any formula (an merror node: an unknown environment, an extension that
  did not load; or noundefined's red \\name for an undefined macro), read from MathJax's own tree;
- inline formulas: none is cut off, at 1280 px and at 390 px (wider than the box that holds it,
  and that box does not scroll); the widest one that scrolls at 390 px is kept as
  ``inline-formula-390.png`` and ``inline-formula-390-end.png`` (scrolled to its end);
- at 390 px the page is no wider than the window (it would scroll sideways as a whole), and each
  sidebar toggle a reader sees opens its panel with its links in the window (the table of
  contents must have one on every page); the first open table of contents is kept as
  ``toc-open-390.png``;
- prose also: no degenerate range ("10.0000 to 10.0000", "400 to 400") and no numpy/torch repr
  ("[0.32001 0.34 ]", "np.float64(...)"); alt text holds no TeX;
- links into the site: the page exists and has the element the fragment names;
- book.pdf: it has an outline, and every link stays in the PDF or goes to the web, never to the
  local machine (the print server) nor to a file the published site lacks;
- numbers: one convention on every page (``lib/book/typeset.py``): no thousands written with commas
  or five digits ungrouped ("200 000"), no hyphen-minus as a minus sign, no spaced dash between
  a range's ends, in prose and tables (not code, printouts, formulas or the references);
- at 390 px, a figure's or exploration's picture wider than the column scrolls in its own box,
  with a shadow on the edge that has more and a line under it that says so;
- explorations, for a reader who does not see them: each slider's ``aria-valuetext`` is the value
  it shows, the alt text changes with the frame, and an ``aria-live`` region announces it;
- search: the snippet text of every page (Sphinx's ``Search.htmlToText``, as ``book.js`` wraps
  it) starts with the page's title, not the download menu, and holds no TeX source;
- the console: no message at all (the theme's "invalid theme mode" included), no favicon 404;
- figure legibility: every PNG of the article carries ``lib.book.viz``'s text chunks
  ``book:min-font-pt`` and ``book:dpi``, and its smallest text is displayed at >= 10 CSS px at
  1280 px (at 390 px, sizes under 7 px are listed for information).

Every page is checked at 1280 px; then the window is narrowed to 390 px (the layout follows by
CSS media queries, as when a phone loads it) for the equations, the figure sizes and a second set
of screenshots. The solutions are expanded for those measurements (a collapsed one has no width).

A screenshot of every page goes to ``_build/site-test/``: ``<page>.png`` (the top of the page, as
a reader first sees it) and ``<page>-full.jpg`` (the whole page), and ``<page>-390.png`` (the top
at 390 px; a whole page at 390 px is three times as tall, and its capture took about half of the
browser's time, so it is left to a reader's own look). The last line is ``N passed, N failed``
(pages).

The browser is Debian's Chromium (``/usr/bin/chromium``, or ``$CHROMIUM``); Playwright's own
browser download is never used. Where Chromium is missing and we run as root, it is installed
with apt-get; otherwise the test stops with the command to run.
"""

from __future__ import annotations

import argparse
import base64
import functools
import html
import http.server
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

import system_packages  # tools/ is the script's folder, first on its path

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "_build" / "site-test"
ALLOWLIST = Path(__file__).resolve().parent / "site_allow.json"
VIEWPORT = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}  # a phone held upright (CSS px)
TIMEOUT_MS = 60_000  # a loaded 2-core machine can take many seconds to typeset a long chapter

# The smallest text of a figure, in CSS px at a 1280 px window (the book's convention for
# lib.book.viz figures); at 390 px no figure can keep it, and sizes under 7 px are only listed.
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
# e-notation ("4.8e-04", "1e5"; lib/book/typeset.py writes "4.8 × 10⁻⁴").
# A degenerate range: the same number at both ends ("10.0000 to 10.0000", "400 to 400",
# "0.12–0.12"; lib.book.typeset.number_range writes such a range as one number); not a chain of
# sizes ("64–32–32–10") nor a number before a mantissa ("Theorem 5 to 5 × 10⁻⁶").
# A numpy or torch repr ("[0.32001 0.34 ]", "array([...])", "np.float64(0.5)", "tensor(...)"):
# code's output, not prose.
_NUMBER = r"[−-]?\d+(?:[.,\u00a0\u202f ]\d+)*"
PROSE_PATTERNS = {
    "nan": re.compile(r"\bnan\b", re.IGNORECASE),
    "None": re.compile(r"\bNone\b(?! of\b)"),
    "raw e-notation": re.compile(r"\b\d+(?:\.\d+)?[eE][+-]?\d+\b"),
    "degenerate range": re.compile(
        rf"(?<![\w.,−–—-])({_NUMBER})(?:\s*[–—]\s*|\s+to\s+|\s+-\s+)\1(?![\w]|[.,]\d|\s*[–—×])"
    ),
    "numpy/torch repr": re.compile(
        r"\[\s*[−-]?\d+\.\d*(?:[eE][+-]?\d+)?(?:\s+[−-]?\d+\.?\d*(?:[eE][+-]?\d+)?)+\s*\]"
        r"|\b(?:array|tensor|np\.\w+|torch\.\w+)\(|\bdtype="
    ),
}

# Alt text that names no content: file names, hashes (Sphinx writes the image's path as its alt
# when there is none), and generic words.
FILE_NAME = re.compile(r"\.(png|jpe?g|svg|gif|webp)$", re.IGNORECASE)
HASH = re.compile(r"^[0-9a-f]{16,}", re.IGNORECASE)
# TeX in alt text: a command, a braced sub- or superscript, a dollar sign.
ALT_TEX = re.compile(r"\\[A-Za-z]+|[_^]\{|\$")
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

# What the numbers' convention is read without: code, printouts, formulas, signatures, the
# references, and the exploration's controls' script.
NUMBERS_SKIP = (
    "pre, code, script, style, textarea, mjx-container, mjx-assistive-mml, .highlight, .sig, "
    ".math, .citation, .bibliography, div.citation, dl.citation"
)

# The book writes every number one way (lib/book/typeset.py, whose scientific() applies it to glued
# text, tables and slider labels): thousands grouped by a space from five digits on ("200 000"),
# four digits together ("5000"), a minus sign (U+2212) not a hyphen, an unspaced en dash between
# the ends of a range. Any other style on a page is a second convention beside the book's.
NUMBER_STYLES = {
    "thousands written with commas (the book writes 200 000)": re.compile(
        r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\w]|,\d)"
    ),
    "five or more digits not grouped (the book writes 200 000)": re.compile(
        r"(?<![\w.,#/\\:@-])\d{5,}(?![\w]|,\d)"
    ),
    "a hyphen-minus as a minus sign (the book writes −0.43)": re.compile(
        r"(?<![\w.,)\]}−-])-(?=\.?\d)"
    ),
    "a spaced dash between a range's ends (the book writes 0.12–0.47)": re.compile(
        r"\d[ \u00a0\u202f\u2009]+–[ \u00a0\u202f\u2009]+[−\d]"
    ),
}

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
  // the article's numbers as a reader sees them: prose and tables (cell outputs' tables too:
  // lib.book.viz tables, the Reproductions page), not code, printouts, formulas, signatures,
  // nor the references (a journal's page numbers are the journal's)
  const article = document.querySelector('main .bd-article') || root;
  const prints = article.cloneNode(true);
  prints.querySelectorAll('NUMBERS_SKIP').forEach((el) => el.remove());
  // a detached copy has no layout, so its innerText runs table cells and paragraphs together
  // ("13 500" then "12 800" would read "13 50012 800"): each block and cell ends with a newline
  prints.querySelectorAll('td, th, tr, p, li, dt, dd, div, figcaption, caption, h1, h2, h3, h4, '
                          + 'h5, h6, br, output, label').forEach((el) => el.append('\\n'));
  const numbers = prints.textContent;
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
    text, prose, numbers,
    mathSource: document.querySelectorAll('span.math, div.math').length,
    mathTypeset: document.querySelectorAll('mjx-container').length,
    mathjax: typeof window.MathJax === 'object' && !!window.MathJax.startup,
    figures, brokenImages, solutions, links, pdfLinks,
  };
}
""".replace("NOT_PROSE", NOT_PROSE).replace("NUMBERS_SKIP", NUMBERS_SKIP)

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

# Move each slider of every multi-slider figure (lib.book.viz.slider_grid) to its last value: the
# image must change each time.
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
    if (!grid.querySelector('[aria-live]')) {
      ok = false; why = 'no aria-live region: a screen reader hears nothing when a slider moves';
    }
    for (const s of sliders) {
      const before = img.getAttribute('src'), alt = img.getAttribute('alt');
      s.value = s.value === s.max ? s.min : s.max;  // a slider may start at its last value
      s.dispatchEvent(new Event('input', {bubbles: true}));
      await new Promise((r) => setTimeout(r, 50));
      const shown = s.nextElementSibling ? s.nextElementSibling.textContent : '';
      if (img.getAttribute('src') === before || !img.getAttribute('src')) {
        ok = false; why = `slider ${s.name || '?'} does not change the image`;
      } else if (!shown || s.getAttribute('aria-valuetext') !== shown) {
        ok = false;
        const said = JSON.stringify(s.getAttribute('aria-valuetext'));
        why = `slider ${s.name || '?'}: aria-valuetext ${said} is not the value it shows`
              + ` (${JSON.stringify(shown)})`;
      } else if (img.getAttribute('alt') === alt && s.min !== s.max) {
        ok = false; why = `slider ${s.name || '?'}: the alt text does not follow the frame`;
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

# MathJax's own record of what it could not typeset: an merror node (an unknown environment, a
# missing brace, an extension that did not load) and noundefined's red \name for an undefined
# macro; each with its message and the formula's TeX. Read from MathJax's internal tree, so that
# an error is found whatever the output (CHTML, assistive MathML) shows of it.
MATHJAX_ERRORS_JS = """
() => {
  const doc = window.MathJax && MathJax.startup && MathJax.startup.document;
  const out = [];
  if (doc) {
    for (const item of doc.math) {
      if (!item.root || !item.root.walkTree) continue;
      item.root.walkTree((node) => {
        if (node.isKind('merror')) {
          const message = node.attributes.get('data-mjx-error');
          out.push({message: String(message || 'MathJax error'), tex: String(item.math)});
        } else if (node.isKind('mtext') && node.attributes.get('mathcolor') === 'red') {
          const text = node.childNodes.map((c) => (c.getText ? c.getText() : '')).join('');
          if (text.startsWith('\\\\')) {
            out.push({message: `undefined control sequence ${text}`, tex: String(item.math)});
          }
        }
      });
    }
  }
  const drawn = document.querySelectorAll('mjx-merror').length;
  if (drawn > out.length) out.push({message: `${drawn} error boxes drawn`, tex: ''});
  return out;
}
"""

# Every inline formula wider than the box that holds it: clipped when that box (the nearest
# ancestor that does not let content overflow) hides the rest (overflow hidden or clip), fine when
# it scrolls (the reader can reach the rest). With its TeX, widths, and how far it sticks out.
INLINE_MATH_JS = """
() => {
  const doc = window.MathJax && MathJax.startup && MathJax.startup.document;
  const tex = new Map(doc ? [...doc.math].map((item) => [item.typesetRoot, item.math]) : []);
  const out = [];
  const boxes = document.querySelectorAll('mjx-container:not([display="true"])');
  for (const [index, box] of boxes.entries()) {
    const rect = box.getBoundingClientRect();
    if (rect.width < 1) continue;  // in a collapsed block, or not shown
    let holder = box.parentElement;
    while (holder && holder !== document.body) {
      const style = getComputedStyle(holder);
      if (style.overflowX !== 'visible') break;
      holder = holder.parentElement;
    }
    if (!holder || holder === document.body) continue;
    const outer = holder.getBoundingClientRect();
    const hidden = Math.max(0, rect.right - outer.right, outer.left - rect.left);
    if (hidden <= 1) continue;
    const overflow = getComputedStyle(holder).overflowX;
    out.push({
      tex: String(tex.get(box) || ''),
      width: rect.width,
      box: outer.width,
      hidden,
      scrolls: overflow === 'auto' || overflow === 'scroll',
      index,
    });
  }
  return out;
}
"""

# At 390 px: every figure's or exploration's picture wider than the article's column, and how
# a reader learns that the rest is there: the box that scrolls it (the nearest ancestor inside the
# figure whose overflow-x is auto or scroll), the shadow on its right edge (book.js's
# book-more-right at the start of the scroll) and the line under it (book.css's book-scrolls hint,
# a pseudo-element whose content is not "none").
WIDE_PICTURES_JS = """
() => {
  const article = document.querySelector('main .bd-article') || document.querySelector('main')
                  || document.body;
  const column = article.getBoundingClientRect().width;
  const out = [];
  const pictures = [...article.querySelectorAll('figure img, div.slider-grid img')];
  for (const [i, img] of pictures.entries()) {
    const width = img.getBoundingClientRect().width;
    if (width <= column + 1) continue;
    const holder = img.closest('figure, div.slider-grid');
    let box = img.parentElement;
    while (box && box !== holder.parentElement) {
      const o = getComputedStyle(box).overflowX;
      if (o === 'auto' || o === 'scroll' || o === 'hidden' || o === 'clip') break;
      box = box.parentElement;
    }
    const scrolls = !!box && box !== holder.parentElement
                    && ['auto', 'scroll'].includes(getComputedStyle(box).overflowX);
    if (scrolls) box.scrollLeft = 0;
    const hint = holder.matches('figure') ? holder.querySelector('figcaption') : holder;
    const where = holder.matches('figure') ? '::before' : '::after';
    const hintText = hint ? getComputedStyle(hint, where).content : 'none';
    out.push({
      name: holder.id ? `#${holder.id}`
        : `${holder.matches('figure') ? 'figure' : 'exploration'} ${i + 1}`,
      width, column, scrolls,
      shadow: scrolls && box.classList.contains('book-more-right'),
      hint: !!hintText && hintText !== 'none' && hintText !== 'normal',
    });
  }
  return out;
}
"""


# On search.html: the text that Sphinx's search shows a result's snippet from
# (Search.htmlToText, as book.js wraps it), for every page the table of contents links to. It
# must start with the page's title (not the download menu's ".ipynb .md .pdf" or "Contents") and
# hold no TeX source (formulas are typeset only in the browser; the snippet is plain text).
SEARCH_SNIPPETS_JS = """
async () => {
  if (typeof Search === 'undefined' || typeof Search.htmlToText !== 'function') {
    return [{page: 'search.html', problem: "no Search.htmlToText: Sphinx's search did not load"}];
  }
  const links = [...document.querySelectorAll('.bd-sidebar-primary a.reference.internal')]
    .map((a) => a.href.split('#')[0]);
  const out = [];
  for (const url of [...new Set(links)]) {
    const html = await (await fetch(url)).text();
    const parsed = new DOMParser().parseFromString(html, 'text/html');
    const h1 = parsed.querySelector('h1');
    const title = h1 ? h1.textContent.replace(/#$/, '').trim() : '';
    const text = Search.htmlToText(html).replace(/\\s+/g, ' ').trim();
    const page = url.split('/').pop();
    if (title && !text.startsWith(title)) {
      out.push({page, problem: `the snippet text starts ${JSON.stringify(text.slice(0, 50))}, `
                               + `not with the title ${JSON.stringify(title)}`});
    }
    const tex = text.match(/\\\\[A-Za-z]+|\\\\[()[\\]]/);
    if (tex) {
      const at = text.indexOf(tex[0]);
      out.push({page, problem: `TeX source in the snippet text: ...${text.slice(
        Math.max(0, at - 30), at + 40)}...`});
    }
  }
  return out;
}
"""


def wide_picture_problems(found: list[dict]) -> list[str]:
    """Pictures wider than the column at 390 px (WIDE_PICTURES_JS) that a reader cannot scroll,
    or that scroll with no sign that more is off-screen."""
    failures = []
    for pic in found:
        size = f"{pic['name']}: {pic['width']:.0f} px wide in a {pic['column']:.0f} px column"
        if not pic["scrolls"]:
            failures.append(f"{size}, and nothing scrolls it (cut off or pushing the page wide)")
        elif not pic["shadow"] or not pic["hint"]:
            missing = " and ".join(
                what for what, ok in (("the edge shadow", pic["shadow"]), ("the line under it",
                                      pic["hint"])) if not ok)
            failures.append(f"{size}: it scrolls, but {missing} that say so are missing")
    return failures


# The page's width against the window's, and the elements that stick out on the right (not
# counting what sits inside a box that scrolls or clips): what makes a phone's page scroll
# sideways as a whole.
PAGE_WIDTH_JS = """
() => {
  const width = document.documentElement.clientWidth;
  const scroll = document.documentElement.scrollWidth;
  const culprits = [];
  if (scroll > width + 1) {
    const inBox = (el) => {
      for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        if (getComputedStyle(p).overflowX !== 'visible') return true;
      }
      return false;
    };
    for (const el of document.querySelectorAll('body *')) {
      const rect = el.getBoundingClientRect();
      if (rect.right > width + 1 && rect.width > 0 && !inBox(el)
          && getComputedStyle(el).visibility !== 'hidden') {
        culprits.push({el, right: rect.right});
      }
    }
  }
  const describe = ({el, right}) => {
    const name = el.tagName.toLowerCase() + (el.className && typeof el.className === 'string'
      ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
    const text = (el.textContent || '').replace(/\\s+/g, ' ').trim().slice(0, 60);
    return `${name} to ${Math.round(right)} px ("${text}")`;
  };
  // the outermost element that sticks out (its parent fits): what to fix
  const outer = culprits.filter((c) => !culprits.some((d) => d !== c && d.el.contains(c.el)));
  return {width, scroll, culprits: outer.slice(0, 3).map(describe)};
}
"""

# The sidebars on a phone: click each toggle a reader sees (the table of contents, the page's
# contents) and say whether its panel then shows links inside the window; then close it again.
SIDEBAR_JS = """
async (which) => {
  const shown = (el) => {
    const r = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && style.visibility !== 'hidden' && r.right > 0
      && r.left < window.innerWidth && r.top < window.innerHeight && r.bottom > 0;
  };
  // the sidebars slide: wait for the theme's transitions (from the 1280 px layout) to end
  const settled = async () => {
    await new Promise((r) => setTimeout(r, 50));
    await Promise.all(document.getAnimations().map((a) => a.finished.catch(() => null)));
  };
  await settled();
  const button = [...document.querySelectorAll(which.toggle)].find(shown);
  if (!button) return {toggle: false};
  const before = [...document.querySelectorAll(which.links)].filter(shown).length;
  button.click();
  await settled();
  const links = [...document.querySelectorAll(which.links)].filter(shown);
  const dialog = document.querySelector('dialog[open]');
  return {toggle: true, before, after: links.length,
          inWindow: links.every((a) => a.getBoundingClientRect().right <= window.innerWidth + 1),
          dialog: !!dialog};
}
"""
SIDEBARS = {
    "table of contents": {"toggle": ".primary-toggle", "links": ".bd-links a, .bd-toc-item a"},
    "page contents": {"toggle": ".secondary-toggle", "links": ".bd-toc-nav a, .page-toc a"},
}
CLOSE_SIDEBAR_JS = """
async () => {
  document.querySelectorAll('dialog[open]').forEach((d) => d.close());
  await new Promise((r) => setTimeout(r, 200));
}
"""



def chromium() -> str:
    """The path of Debian's Chromium, installed with apt-get when missing and we are root."""
    found = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if found:
        return found
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        print("site-test: no Chromium; installing Debian's chromium with apt-get", flush=True)
        system_packages.apt_install(["chromium"], check=True)
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

# Known console messages that are no fault of the book: none now. (pydata-sphinx-theme's "Got
# invalid theme mode: . Resetting to auto." on every page came from its default_mode left unset;
# _config.yml sets it in html_context.)
HARMLESS_CONSOLE: tuple[str, ...] = ()


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


def number_style_problems(text: str, context: int = 30) -> list[str]:
    """Each number in ``text`` written in another style than the book's one convention
    (NUMBER_STYLES: "200,000", "200000", "-0.43", "0.12 – 0.47"), with ``context`` characters on
    either side: beside the book's own numbers it is a second convention on the page."""
    found = []
    for what, pattern in NUMBER_STYLES.items():
        for match in pattern.finditer(text):
            around = collapse(text[max(0, match.start() - context) : match.end() + context])
            found.append((match.start(), f"{what}: ...{around}..."))
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
    tex = ALT_TEX.search(text)
    if tex:
        return f"alt text holds TeX (read aloud as such): {tex.group(0)!r} in {text[:80]!r}"
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
        raise ValueError(f"no {' and no '.join(missing)} text chunk (not made by lib.book.viz)")
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


def mathjax_problems(errors: list[dict]) -> list[str]:
    """MathJax's errors on a page (MATHJAX_ERRORS_JS), each with the start of its formula."""
    return [
        f"MathJax error: {e['message']}" + (f" in {collapse(e['tex'])[:80]!r}" if e["tex"] else "")
        for e in errors
    ]


def inline_math_problems(found: list[dict], viewport: int) -> list[str]:
    """The inline formulas (INLINE_MATH_JS) cut off by a box that does not scroll."""
    return [
        f"inline formula cut off at {viewport} px: {f['width']:.0f} px wide in a "
        f"{f['box']:.0f} px box that does not scroll, {f['hidden']:.0f} px hidden: "
        f"{collapse(f['tex'])[:80]}"
        for f in found
        if not f["scrolls"] and f["hidden"] > WIDTH_SLACK_PX
    ]


def page_width_problems(found: dict) -> list[str]:
    """The page wider than the window (PAGE_WIDTH_JS): it scrolls sideways as a whole."""
    if found["scroll"] <= found["width"] + WIDTH_SLACK_PX:
        return []
    return [
        f"the page is {found['scroll']} px wide in a {found['width']} px window (it scrolls "
        f"sideways as a whole): {'; '.join(found['culprits']) or 'no single element found'}"
    ]


def sidebar_problem(what: str, found: dict) -> str | None:
    """Why a sidebar toggle (SIDEBAR_JS) did not open its panel at 390 px, or None."""
    if found["after"] <= found["before"] or found["after"] == 0:
        return (f"the {what} toggle does nothing at {PHONE['width']} px: no more of its links "
                f"are shown after the click ({found['before']} before, {found['after']} after)")
    if not found["inWindow"]:
        return f"the {what} opens at {PHONE['width']} px, but its links lie outside the window"
    return None


_ANCHOR_CACHE: dict[Path, str] = {}


def anchor_problems(
    links: list[str], site: Path, base: str, page: str, later: frozenset[str] = frozenset()
) -> list[str]:
    """Links of a page into the site (``base``) whose page is missing or lacks the element
    their fragment names (a "Cite" link to ``##cite-this-book`` goes nowhere). ``later``: files
    of the site still being made, tested once made (``book.pdf`` under ``--make-pdf``)."""
    problems = []
    for link in sorted(set(links)):
        if not link.startswith(base):
            continue
        parsed = urlparse(link)
        rel = unquote(parsed.path).lstrip("/") or "index.html"
        if rel in later:
            continue
        target = site / rel
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            problems.append(f"a link to {rel}, which the site does not have")
            continue
        fragment = unquote(parsed.fragment)
        if not fragment or target.suffix != ".html":
            continue
        if target not in _ANCHOR_CACHE:
            _ANCHOR_CACHE[target] = target.read_text(encoding="utf-8", errors="replace")
        text = _ANCHOR_CACHE[target]
        if f'id="{html.escape(fragment)}"' not in text and f"id='{fragment}'" not in text:
            problems.append(f"a link to {rel}#{fragment}: no element of that id there")
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
    return failures + prose_problems(state["prose"]) + number_style_problems(state["numbers"])


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
    """Equation widths, inline formulas, figure sizes and (at 390 px) the page's own width at
    ``viewport`` (the page's collapsed blocks expanded)."""
    page.set_viewport_size(viewport)
    page.evaluate(EXPAND_JS)
    page.wait_for_timeout(100)  # let the layout settle
    result = check_images(page.evaluate(IMAGES_JS, True), pngs, chapter, viewport["width"])
    result.overflows = overflows_of(page.evaluate(EQUATIONS_JS), name, viewport["width"])
    result.failures += inline_math_problems(page.evaluate(INLINE_MATH_JS), viewport["width"])
    if viewport["width"] == PHONE["width"]:
        result.failures += page_width_problems(page.evaluate(PAGE_WIDTH_JS))
        result.failures += wide_picture_problems(page.evaluate(WIDE_PICTURES_JS))
    return result


def check_sidebars(page, shots: Path, log: dict) -> list[str]:
    """At 390 px: each sidebar toggle a reader sees opens its panel, with its links in the
    window (the table of contents must have a toggle on every page). A screenshot of the first
    open table of contents goes to ``shots/toc-open-390.png``."""
    failures = []
    for what, which in SIDEBARS.items():
        found = page.evaluate(SIDEBAR_JS, which)
        if not found["toggle"]:
            if what == "table of contents":
                failures.append(f"no {what} toggle that a reader sees at {PHONE['width']} px")
            continue
        problem = sidebar_problem(what, found)
        if problem:
            failures.append(problem)
        elif what == "table of contents" and not log.get("toc shot"):
            page.screenshot(path=str(shots / "toc-open-390.png"))
            log["toc shot"] = True
        page.evaluate(CLOSE_SIDEBAR_JS)
    return failures


# Where the site test keeps a picture of the widest inline formula at 390 px, at the start and
# scrolled to its end: the kind of formula the theme used to cut off.
WIDEST_INLINE_JS = """
(index) => {
  const box = document.querySelectorAll('mjx-container:not([display="true"])')[index];
  const holder = box && box.closest('span.math');
  if (!holder) return false;
  const context = holder.closest('p, li, dd, td, figcaption') || holder;
  context.setAttribute('data-book-widest', '');
  holder.setAttribute('data-book-widest-math', '');
  return true;
}
"""


def shoot_widest_inline(page, found: list[dict], shots: Path, log: dict) -> None:
    """Screenshots of the widest scrolling inline formula seen so far (at 390 px), where this
    page has a wider one: ``inline-formula-390.png`` and ``inline-formula-390-end.png``."""
    scrolling = [f for f in found if f["scrolls"]]
    if not scrolling:
        return
    widest = max(scrolling, key=lambda f: f["hidden"])
    if widest["hidden"] <= log.get("widest inline", 0):
        return
    if not page.evaluate(WIDEST_INLINE_JS, widest["index"]):
        return
    try:
        context = page.locator("[data-book-widest]").first
        context.scroll_into_view_if_needed()
        context.screenshot(path=str(shots / "inline-formula-390.png"))
        page.evaluate("() => { const m = document.querySelector('[data-book-widest-math]');"
                      " m.scrollLeft = m.scrollWidth; }")
        page.wait_for_timeout(100)
        context.screenshot(path=str(shots / "inline-formula-390-end.png"))
        log["widest inline"] = widest["hidden"]
        log["widest inline tex"] = widest["tex"]
    finally:
        page.evaluate("() => document.querySelectorAll('[data-book-widest], "
                      "[data-book-widest-math]').forEach((el) => { el.removeAttribute("
                      "'data-book-widest'); el.removeAttribute('data-book-widest-math'); "
                      "el.scrollLeft = 0; })")


def screenshots(page, path: Path, full: bool) -> None:
    """The top of the page (``path.png``) and, with ``full``, the whole page (JPEG: a long chapter
    is tens of thousands of pixels tall), in pieces ``path-full-1.jpg``, ... where it is taller
    than a JPEG can be. The whole-page captures take about a third of the browser's time, and no
    check reads them, so they are taken only on request (``--full-pages``)."""
    page.screenshot(path=f"{path}.png")
    if not full:
        return
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
    page, url: str, name: str, site: Path, base: str, log: dict, pngs: Pngs, shots: Path,
    full: bool = False,
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
    result.failures += mathjax_problems(page.evaluate(MATHJAX_ERRORS_JS))
    result.failures += anchor_problems(state["links"], site, base, name, log["later"])
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

    if name == "search.html":
        result.failures += [
            f"search snippets of {f['page']}: {f['problem']}"
            for f in page.evaluate(SEARCH_SNIPPETS_JS)
        ]

    stem = name.removesuffix(".html").replace("/", "__")
    screenshots(page, shots / stem, full)
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(100)
    page.screenshot(path=str(shots / f"{stem}-390.png"))
    result.failures += check_sidebars(page, shots, log)
    for viewport in (PHONE, VIEWPORT):
        found = measure(page, name, viewport, pngs, chapter)
        if viewport is PHONE:
            shoot_widest_inline(page, page.evaluate(INLINE_MATH_JS), shots, log)
        result.failures += found.failures
        result.notes += found.notes
        result.overflows += found.overflows

    result.failures += [f"console error: {text}" for text in log["console"]]
    log["console"].clear()
    return result


def check_pdf(site: Path, site_url: str | None = None) -> list[str]:
    """The whole book as one PDF (tools/pdf.py) is in the site, with an outline, and its links
    stay in the PDF or go to the published site or another host (:func:`pdf_links_problems`)."""
    path = site / "book.pdf"
    if not path.is_file():
        return ["book.pdf is not in the site (tools/pdf.py makes it after the HTML build)"]
    with path.open("rb") as handle:
        if handle.read(5) != b"%PDF-":
            return ["book.pdf does not start with %PDF-: not a PDF"]
    return pdf_links_problems(path, site, published_site() if site_url is None else site_url)


def published_site() -> str:
    """The published site's address from ``_config.yml`` (as tools/pdf.py writes its links)."""
    import yaml
    from notebook_export import site_url_of

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repository = (config.get("repository") or {}).get("url", "")
    baseurl = ((config.get("sphinx") or {}).get("config") or {}).get("html_baseurl", "")
    return site_url_of(repository, baseurl)


def link_problem(uri: str, site: Path, site_url: str) -> str | None:
    """Why a PDF link to ``uri`` goes nowhere a reader can follow (None when it can): a local
    address (127.0.0.1, localhost, a file, a relative path: the print server or the machine that
    printed it), or a file of the published site ``site_url`` that the built ``site`` lacks."""
    parsed = urlparse(uri)
    if parsed.scheme in ("mailto", "doi"):
        return None
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return f"a link to {uri[:100]!r}: not an address on the web"
    host = (parsed.hostname or "").lower()
    if host in ("localhost", "0.0.0.0", "::1") or host.startswith("127."):
        return f"a link to {uri[:100]!r}: the local machine, not the PDF or the published site"
    if site_url and uri.startswith(site_url):
        rel = unquote(urlparse(uri[len(site_url):]).path)
        target = site / rel if rel else site / "index.html"
        if not (target.is_file() or (target / "index.html").is_file()):
            return f"a link to {uri[:100]!r}: the site has no {rel or 'index.html'}"
    return None


def pdf_links_problems(path: Path, site: Path, site_url: str) -> list[str]:
    """What is wrong with the PDF's outline and links (read with pypdf): no outline; a link to a
    named destination the PDF lacks; a link that :func:`link_problem` rejects. Identical problems
    are counted, not repeated."""
    from pypdf import PdfReader

    reader = PdfReader(path)
    problems = []
    if not reader.outline:
        problems.append("book.pdf has no outline (bookmarks): a reader of 600 pages cannot "
                        "jump to a chapter")
    names = {str(name).lstrip("/") for name in reader.named_destinations}
    found: dict[str, list[int]] = {}
    for number, page in enumerate(reader.pages, start=1):
        for ref in page.get("/Annots") or []:
            annot = ref.get_object()
            if annot.get("/Subtype") != "/Link":
                continue
            action = annot.get("/A")
            action = action.get_object() if action is not None else {}
            dest = annot.get("/Dest", action.get("/D") if action.get("/S") == "/GoTo" else None)
            why = None
            if action.get("/S") == "/URI":
                why = link_problem(str(action["/URI"]), site, site_url)
            elif isinstance(dest, str) and dest.lstrip("/") not in names:
                why = f"a link to the destination {dest!r}, which the PDF does not have"
            elif action and action.get("/S") not in ("/URI", "/GoTo"):
                why = f"a link of kind {action.get('/S')} (neither inside the PDF nor a URL)"
            if why:
                found.setdefault(why, []).append(number)
    for why, pages in found.items():
        more = f" and {len(pages) - 1} more" if len(pages) > 1 else ""
        problems.append(f"book.pdf: {why} (page {pages[0]}{more})")
    return problems


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
    site: Path, allowlist: Path = ALLOWLIST, only: list[str] | None = None, shots: Path = SHOTS,
    full: bool = False, pdf: PdfChild | None = None,
) -> dict[str, PageResult]:
    """Test every page of the built site ``site`` in Chromium (those whose path contains one of
    ``only``, when given); the results by page. ``full``: also capture every page whole at
    1280 px. ``pdf``: the PDF being made beside the pages, waited for before it is tested."""
    executable = chromium()
    from playwright.sync_api import sync_playwright

    allowed = load_allowlist(allowlist)
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    server, base = serve(site)
    later = frozenset({PDF_NAME} if pdf is not None else ())
    log: dict = {"console": [], "blocked": [], "notebooks": {}, "later": later}
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
                    results[name] = test_page(page, base + name, name, site, base, log, pngs, shots,
                                              full)
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
    made = pdf.wait() if pdf is not None else []
    results[PDF_NAME] = PageResult(made or check_pdf(site))
    notebooks = {k: v for k, v in log["notebooks"].items() if v}
    (shots / "notebook-links.json").write_text(json.dumps(notebooks, indent=1), encoding="utf-8")
    blocked = sorted(set(log["blocked"]))
    print(f"\n{len(blocked)} requests for other hosts were blocked (the network is off):")
    for url in blocked[:20]:
        print(f"  {url}")
    print(f"notebook links checked on {len(notebooks)} pages; screenshots in {shots}")
    return results


PDF_NAME = "book.pdf"


class PdfChild:
    """``tools/pdf.py`` (the single-page build, then Chromium printing it to ``book.pdf``) in a
    child process, started with any old ``book.pdf`` removed, so that only the new one is tested;
    its output is kept and printed when it is waited for, not interleaved with the pages'."""

    def __init__(self, site: Path):
        made = ROOT / "_build" / "html"
        if site != made.resolve():
            raise SystemExit(f"--make-pdf writes {made / PDF_NAME}: test {made}, not {site}")
        (site / PDF_NAME).unlink(missing_ok=True)
        self.output = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tools" / "pdf.py")],
            stdout=self.output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def wait(self) -> list[str]:
        """Wait for the PDF; print its output; why it failed, if it did."""
        code = self.process.wait()
        self.output.seek(0)
        print(self.output.read().decode("utf-8", "replace"), end="", flush=True)
        self.output.close()
        return [] if code == 0 else [f"tools/pdf.py failed (exit status {code}): its output above"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("site", nargs="?", default=str(ROOT / "_build" / "html"))
    parser.add_argument("--allow", default=str(ALLOWLIST), help="the equation allowlist (JSON)")
    parser.add_argument("--report", help="also write every failure and note, by page, to this file")
    parser.add_argument("--only", nargs="+", help="test only the pages whose path contains one")
    parser.add_argument("--shots", default=str(SHOTS),
                        help=f"the folder for the screenshots (emptied first), default {SHOTS}")
    parser.add_argument("--full-pages", action="store_true",
                        help="also capture every page whole at 1280 px (JPEG), for a reader")
    parser.add_argument("--make-pdf", action="store_true",
                        help="make book.pdf (tools/pdf.py) beside the pages' tests, then test it")
    args = parser.parse_args(argv)
    site = Path(args.site).resolve()
    if not (site / "index.html").is_file():
        sys.exit(f"no built book in {site}: run `make book` first")
    start = time.perf_counter()
    pdf = PdfChild(site) if args.make_pdf else None
    try:
        results = run(site, Path(args.allow), args.only, Path(args.shots), args.full_pages, pdf)
    finally:
        if pdf is not None:
            pdf.stop()
    what = "in the browser, the PDF made beside it" if pdf is not None else "in the browser"
    print(f"{time.perf_counter() - start:.0f} s {what}\n")
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
