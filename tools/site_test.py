"""Test the built book in a real browser (headless Chromium driven by Playwright), offline.

Usage::

    python tools/site_test.py [SITE]     # SITE: the built HTML book, default _build/html

``make site-test`` builds the book and runs this. The site is served on 127.0.0.1; every request
for another host is blocked (the test passes with the network off), and is listed, but counts as a
failure only through its consequences (math not typeset, an image missing). For every page:

- no failed request and no HTTP error for a file of the site itself, no console error, no uncaught
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

A screenshot of every page goes to ``_build/site-test/``: ``<page>.png`` (the top of the page, as
a reader first sees it) and ``<page>-full.jpg`` (the whole page). The last line is
``N passed, N failed`` (pages).

The browser is Debian's Chromium (``/usr/bin/chromium``, or ``$CHROMIUM``); Playwright's own
browser download is never used. Where Chromium is missing and we run as root, it is installed
with apt-get; otherwise the test stops with the command to run.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "_build" / "site-test"
VIEWPORT = {"width": 1280, "height": 900}
TIMEOUT_MS = 60_000  # a loaded 2-core machine can take many seconds to typeset a long chapter

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

PAGE_STATE_JS = """
() => {
  // shown to the reader: takes up height and is not hidden by style (a collapsed dropdown's body
  // is kept in the page with height 0)
  const visible = (el) => el.getBoundingClientRect().height > 1
                          && getComputedStyle(el).visibility !== 'hidden';
  const clone = document.querySelector('main, .bd-main, body').cloneNode(true);
  const code = 'pre, code, script, style, textarea, mjx-container, mjx-assistive-mml, .highlight';
  clone.querySelectorAll(code + ', .output').forEach((el) => el.remove());
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
  return {
    text: clone.innerText,
    mathSource: document.querySelectorAll('span.math, div.math').length,
    mathTypeset: document.querySelectorAll('mjx-container').length,
    mathjax: typeof window.MathJax === 'object' && !!window.MathJax.startup,
    figures, brokenImages, solutions, links,
  };
}
"""

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


def test_page(page, url: str, name: str, site: Path, base: str, log: dict) -> list[str]:
    """Load one page, run every check; return the failures."""
    failures: list[str] = []
    log["console"].clear()
    page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
    if page.evaluate("() => typeof window.MathJax === 'object' && !!window.MathJax.startup"):
        page.evaluate("() => window.MathJax.startup.promise.then(() => true)")
    page.wait_for_timeout(200)  # let late scripts (togglebutton, copybutton) finish
    state = page.evaluate(PAGE_STATE_JS)

    if state["mathSource"]:
        if not state["mathjax"]:
            failures.append(f"{state['mathSource']} formulas, but MathJax did not load")
        elif state["mathTypeset"] < state["mathSource"]:
            failures.append(
                f"{state['mathSource']} formulas, only {state['mathTypeset']} typeset by MathJax"
            )
    raw = RAW_TEX.search(state["text"])
    if raw:
        around = state["text"][max(0, raw.start() - 40) : raw.end() + 40].replace("\n", " ")
        failures.append(f"raw TeX left on the page: ...{around}...")
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
    for i, anim in enumerate(page.evaluate(SCRUB_ANIMATIONS_JS)):
        if not anim["ok"]:
            failures.append(f"animation {i + 1}: {anim['why']}")
    for i, grid in enumerate(page.evaluate(SCRUB_GRIDS_JS)):
        if not grid["ok"]:
            failures.append(f"multi-slider figure {i + 1}: {grid['why']}")

    targets = {}
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
    log["notebooks"][name] = {kind: sorted(rels) for kind, rels in targets.items()}

    failures += [f"console error: {text}" for text in log["console"]]
    log["console"].clear()

    stem = name.removesuffix(".html").replace("/", "__")
    page.screenshot(path=str(SHOTS / f"{stem}.png"))
    # the whole page as JPEG: a long chapter is tens of thousands of pixels tall
    page.screenshot(path=str(SHOTS / f"{stem}-full.jpg"), full_page=True, type="jpeg", quality=70)
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("site", nargs="?", default=str(ROOT / "_build" / "html"))
    args = parser.parse_args(argv)
    site = Path(args.site).resolve()
    if not (site / "index.html").is_file():
        sys.exit(f"no built book in {site}: run `make book` first")
    executable = chromium()
    from playwright.sync_api import sync_playwright

    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    server, base = serve(site)
    log: dict = {"console": [], "local_failed": [], "blocked": [], "notebooks": {}}

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

    results: dict[str, list[str]] = {}
    start = time.perf_counter()
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
            for name, target in redirects.items():
                ok = (site / target).is_file()
                results[name] = [] if ok else [f"redirects to {target}, which does not exist"]
                print(f"{'ok' if ok else 'FAILED':6} {name} (redirect to {target})", flush=True)
            for path in found:
                name = path.relative_to(site).as_posix()
                try:
                    results[name] = test_page(page, base + name, name, site, base, log)
                except Exception as error:  # a timeout or a crash fails this page, not the run
                    results[name] = [f"{type(error).__name__}: {str(error).splitlines()[0]}"]
                status = "ok" if not results[name] else "FAILED"
                print(f"{status:6} {name}", flush=True)
                for failure in results[name]:
                    print(f"         {failure}", flush=True)
            browser.close()
    finally:
        server.shutdown()

    notebooks = {k: v for k, v in log["notebooks"].items() if v}
    (SHOTS / "notebook-links.json").write_text(json.dumps(notebooks, indent=1), encoding="utf-8")
    blocked = sorted(set(log["blocked"]))
    print(f"\n{len(blocked)} requests for other hosts were blocked (the network is off):")
    for url in blocked[:20]:
        print(f"  {url}")
    print(f"notebook links checked on {len(notebooks)} pages; screenshots in {SHOTS}")
    print(f"{time.perf_counter() - start:.0f} s in the browser")
    failed = sum(1 for f in results.values() if f)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
