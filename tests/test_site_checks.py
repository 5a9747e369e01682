"""The site test's checks (tools/site_test.py): the pure logic, and one run in Chromium over a
two-page site made here, with one fault of each kind the checks look for; and the parts of
tools/pdf.py that need no book (reading a PDF, the singlehtml builder's node visitors).

The browser test is marked ``not_numerics`` (no arithmetic of lib) and is skipped where Debian's
Chromium or the vendored MathJax (``make vendor``) is missing; the pure tests always run.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import sys
from pathlib import Path

import pytest
from PIL import Image, PngImagePlugin

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import pdf  # noqa: E402
import site_test  # noqa: E402


def png(width: int = 40, height: int = 20, **texts: str) -> bytes:
    """A small PNG with the given tEXt chunks (keywords may not be Python names: pass a dict)."""
    info = PngImagePlugin.PngInfo()
    for key, value in texts.items():
        info.add_text(key, value)
    out = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(out, "PNG", pnginfo=info)
    return out.getvalue()


def lib_viz_png(font_pt: str = "8", dpi: str = "200", width: int = 40) -> bytes:
    """A PNG with lib.book.viz's two chunks."""
    return png(width, 20, **{"book:min-font-pt": font_pt, "book:dpi": dpi})


# ---- prose ----


@pytest.mark.parametrize(
    "text, what",
    [
        ("the loss is nan after 10 steps", "nan"),
        ("the loss is NaN after 10 steps", "nan"),
        ("the best step is None here", "None"),
        ("a step of 4.8e-04 is enough", "raw e-notation"),
        ("a step of 1e5 is enough", "raw e-notation"),
        ("a step of 2.0E+10 is enough", "raw e-notation"),
        ("a step of 12e-3 is enough", "raw e-notation"),
        ("the clean error is 10.0000 to 10.0000 times", "degenerate range"),
        ("the runs took 400 to 400 steps", "degenerate range"),
        ("quartiles 0.12–0.12 of the runs", "degenerate range"),
        ("a median of 19.9 (19.9 – 19.9) here", "degenerate range"),
        ("the limits [0.32001 0.34 ] and", "numpy/torch repr"),
        ("the value np.float64(0.5) is", "numpy/torch repr"),
        ("the weights tensor([1., 2.]) are", "numpy/torch repr"),
    ],
)
def test_prose_problems_find_each_kind(text, what):
    found = site_test.prose_problems(text)
    assert len(found) == 1 and found[0].startswith(what)


@pytest.mark.parametrize(
    "text",
    [
        "none of the seeds diverged",  # English, lowercase
        "None of the seeds diverged.",  # English, at the start of a sentence
        "Nonetheless the nanoscale banana",  # words that contain the letters
        "a step of 4.8 × 10⁻⁴ is enough",  # typeset by lib/book/typeset.py
        "see e.g. section 3e, and 1 e 5",  # no digit-e-digit token
        "the model x1e5 and 0xe5",  # not a number on its own
        "steps from 1 to 10, from 0.5 to 0.55 and 1 to 1.5",  # ranges that are ranges
        "in 2025–2026 and the interval [0.1, 0.2]",  # years, an interval
        "a 1-1 map",  # a hyphen without spaces is not a range
        "a 64–32–32–10 network",  # layer sizes
        "matches Theorem 5 to 5 × 10⁻⁶",  # a number, then a mantissa
    ],
)
def test_prose_problems_leave_good_text_alone(text):
    assert site_test.prose_problems(text) == []


def test_prose_problems_context_and_order():
    text = "a" * 50 + " nan " + "b" * 50 + " 3e-5 " + "c" * 50
    found = site_test.prose_problems(text, context=30)
    assert [f.split(" in the text")[0] for f in found] == ["nan", "raw e-notation"]
    assert found[0] == f"nan in the text: ...{'a' * 29} nan {'b' * 29}..."


# ---- numbers: one convention ----


@pytest.mark.parametrize(
    "text, what",
    [
        ("then 20,000 more steps", "thousands written with commas"),
        ("after 200000 steps", "five or more digits not grouped"),
        ("the gain is -0.43 here", "a hyphen-minus as a minus sign"),
        ("quartiles (19.8 – 20.1)", "a spaced dash between a range's ends"),
    ],
)
def test_number_style_problems_find_each_kind(text, what):
    found = site_test.number_style_problems(text)
    assert len(found) == 1 and found[0].startswith(what)


def test_number_style_problems_leave_the_books_convention_alone():
    text = ("after 200\u00a0000 steps and 5000 clean ones, in 2025–2026, gain \u22120.43, "
            "quartiles 19.8–20.1, a 64-32-32-10 net, x-1, arXiv:2302.12345, seed 4603, "
            "10⁻⁴, the list 1,2,3, 0.123456 and 12 750 steps")
    assert site_test.number_style_problems(text) == []


def test_wide_picture_problems():
    ok = {"name": "#fig-a", "width": 600, "column": 358, "scrolls": True, "shadow": True,
          "hint": True}
    assert site_test.wide_picture_problems([ok]) == []
    (cut,) = site_test.wide_picture_problems([{**ok, "scrolls": False}])
    assert "nothing scrolls it" in cut
    (silent,) = site_test.wide_picture_problems([{**ok, "shadow": False}])
    assert "the edge shadow" in silent and "line under it" not in silent


# ---- alt text ----


@pytest.mark.parametrize(
    "alt, why",
    [
        (None, "no alt text"),
        ("   ", "no alt text"),
        ("../_images/9cbf2f82b535989bf8cbe799cf84bcde.png", "file name"),
        ("9cbf2f82b535989bf8cbe799cf84bcde", "file name"),
        ("figure.svg", "file name"),
        ("_images/plot", "file name"),
        ("Image", "placeholder"),
        ("figure for the chosen parameter values", "placeholder"),
        ("loss against time", "fewer than 4 words"),
        ("Impulse responses h_k = \\sum_j c_j b_j a_j^k of three SSMs", "holds TeX"),
        ("The student with C = \\mathbf{1}^\\top and more", "holds TeX"),
        ("The gap below 10^{-3} in every run", "holds TeX"),
        ("The gap below $10^{-3}$ in every run", "holds TeX"),
    ],
)
def test_alt_problem_rejects(alt, why):
    assert why in site_test.alt_problem(alt)


def test_alt_problem_accepts_a_caption():
    assert site_test.alt_problem("The loss falls in plateaus separated by sharp drops.") is None
    assert site_test.alt_problem("Impulse responses hₖ = Σⱼ cⱼ bⱼ aⱼᵏ of three SSMs") is None


# ---- MathJax errors, clipped inline formulas, the page's width, sidebars, anchors ----


def test_mathjax_problems_name_the_error_and_formula():
    found = site_test.mathjax_problems([
        {"message": "Unknown environment 'psmallmatrix'", "tex": "A = \\begin{psmallmatrix}"},
        {"message": "2 error boxes drawn", "tex": ""},
    ])
    assert found == ["MathJax error: Unknown environment 'psmallmatrix' in "
                     "'A = \\\\begin{psmallmatrix}'", "MathJax error: 2 error boxes drawn"]
    assert site_test.mathjax_problems([]) == []


def test_inline_math_problems_only_for_a_box_that_does_not_scroll():
    cut = {"tex": "x + y", "width": 500.4, "box": 358.0, "hidden": 142.4, "scrolls": False}
    scrolls = {**cut, "scrolls": True}
    assert site_test.inline_math_problems([cut, scrolls], 390) == [
        "inline formula cut off at 390 px: 500 px wide in a 358 px box that does not scroll, "
        "142 px hidden: x + y"
    ]
    assert site_test.inline_math_problems([{**cut, "hidden": 0.5}], 1280) == []


def test_page_width_problems():
    assert site_test.page_width_problems({"width": 390, "scroll": 391, "culprits": []}) == []
    found = site_test.page_width_problems(
        {"width": 390, "scroll": 414, "culprits": ['code.literal to 414 px ("x")']})
    assert found == ['the page is 414 px wide in a 390 px window (it scrolls sideways as a '
                     'whole): code.literal to 414 px ("x")']


def test_sidebar_problem():
    opened = {"toggle": True, "before": 0, "after": 17, "inWindow": True, "dialog": True}
    assert site_test.sidebar_problem("table of contents", opened) is None
    dead = {**opened, "after": 0}
    assert "toggle does nothing" in site_test.sidebar_problem("table of contents", dead)
    outside = {**opened, "inWindow": False}
    assert "outside the window" in site_test.sidebar_problem("page contents", outside)


def test_anchor_problems(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.html").write_text('<section id="cite-this-book"></section>')
    base = "http://127.0.0.1:9/"
    links = [base + "book/intro.html#cite-this-book", base + "book/intro.html##cite-this-book",
             base + "book/gone.html", "https://example.org/x#y", base + "book/intro.html"]
    assert site_test.anchor_problems(links, tmp_path, base, "book/intro.html") == [
        "a link to book/gone.html, which the site does not have",
        "a link to book/intro.html##cite-this-book: no element of that id there",
    ]
    # book.pdf, made beside the pages' tests (--make-pdf), is left to the PDF's own test then
    pdf = [base + "book.pdf"]
    assert site_test.anchor_problems(pdf, tmp_path, base, "book/intro.html") == [
        "a link to book.pdf, which the site does not have"]
    assert site_test.anchor_problems(pdf, tmp_path, base, "book/intro.html",
                                     frozenset({"book.pdf"})) == []


def test_the_pdf_made_beside_the_pages_is_the_build_s_own(tmp_path):
    """--make-pdf writes _build/html/book.pdf, so it refuses to test another site with it."""
    with pytest.raises(SystemExit, match="--make-pdf writes"):
        site_test.PdfChild(tmp_path)


# ---- the PDF's links and outline ----


def made_pdf(path: Path, *, outline: bool = True, links: tuple[str, ...] = (),
             dests: tuple[str, ...] = ()) -> Path:
    """A two-page PDF (pypdf) with the given URI links on page 1, named destinations on page 2,
    and an outline entry when ``outline``."""
    from pypdf import PdfWriter
    from pypdf.annotations import Link

    writer = PdfWriter()
    writer.add_blank_page(200, 200)
    writer.add_blank_page(200, 200)
    for i, url in enumerate(links):
        writer.add_annotation(0, Link(rect=(10, 10 + 20 * i, 50, 25 + 20 * i), url=url))
    for name in dests:
        writer.add_named_destination(name, 1)
    if outline:
        writer.add_outline_item(title="Chapter", page_number=1)
    with path.open("wb") as handle:
        writer.write(handle)
    return path


SITE_URL = "https://owner.github.io/book/"


@pytest.mark.parametrize("uri, why", [
    ("http://127.0.0.1:33619/book/intro.html#x", "the local machine"),
    ("http://localhost:8000/book.pdf", "the local machine"),
    ("file:///tmp/_build/html/book.pdf", "not an address on the web"),
    ("book/intro.html", "not an address on the web"),
    (SITE_URL + "book/gone.html", "the site has no book/gone.html"),
])
def test_link_problem_rejects(tmp_path, uri, why):
    assert why in site_test.link_problem(uri, tmp_path, SITE_URL)


def test_link_problem_accepts_the_site_and_other_hosts(tmp_path):
    (tmp_path / "book.pdf").write_bytes(b"%PDF-")
    for uri in (SITE_URL + "book.pdf", "https://doi.org/10.1/x", "mailto:a@b.c",
                SITE_URL, "https://github.com/owner/book"):
        (tmp_path / "index.html").write_text("")
        assert site_test.link_problem(uri, tmp_path, SITE_URL) is None, uri


def test_pdf_links_problems(tmp_path):
    pytest.importorskip("pypdf")
    good = made_pdf(tmp_path / "good.pdf", links=("https://doi.org/10.1/x",))
    assert site_test.pdf_links_problems(good, tmp_path, SITE_URL) == []
    bad = made_pdf(tmp_path / "bad.pdf", outline=False,
                   links=("http://127.0.0.1:5/a.html#x", "http://127.0.0.1:5/b.html"))
    found = site_test.pdf_links_problems(bad, tmp_path, SITE_URL)
    assert found[0].startswith("book.pdf has no outline")
    assert len(found) == 3 and all("(page 1)" in f for f in found[1:])


# ---- PNG text chunks and the displayed size of a figure's text ----


def test_png_text_chunks_reads_text_ztxt_and_itxt():
    info = PngImagePlugin.PngInfo()
    info.add_text("book:min-font-pt", "7.5")
    info.add_text("book:dpi", "200", zip=True)  # zTXt
    info.add_itxt("note", "µ and ×", lang="en", tkey="Note")  # iTXt, UTF-8
    info.add_itxt("packed", "x" * 100, zip=True)
    out = io.BytesIO()
    Image.new("L", (4, 4)).save(out, "PNG", pnginfo=info)
    chunks = site_test.png_text_chunks(out.getvalue())
    assert chunks["book:min-font-pt"] == "7.5"
    assert chunks["book:dpi"] == "200"
    assert chunks["note"] == "µ and ×"
    assert chunks["packed"] == "x" * 100


def test_png_text_chunks_without_chunks_and_not_png():
    assert "book:dpi" not in site_test.png_text_chunks(png())
    with pytest.raises(ValueError, match="not a PNG"):
        site_test.png_text_chunks(b"GIF89a....")


def test_png_text_chunks_stops_at_a_truncated_file():
    data = lib_viz_png()
    assert site_test.png_text_chunks(data[:40]) == {}  # cut inside the IHDR's successor


def test_png_bytes_from_data_uri_file_and_other(tmp_path):
    data = lib_viz_png()
    base = "http://127.0.0.1:8000/"
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    assert site_test.png_bytes(uri, base, tmp_path) == data
    assert site_test.png_bytes("data:image/jpeg;base64,AAAA", base, tmp_path) is None
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "a b.png").write_bytes(data)
    assert site_test.png_bytes(base + "_images/a%20b.png", base, tmp_path) == data
    assert site_test.png_bytes(base + "_images/missing.png", base, tmp_path) is None
    assert site_test.png_bytes(base + "_images/logo.svg", base, tmp_path) is None
    assert site_test.png_bytes("https://example.org/x.png", base, tmp_path) is None


def test_displayed_font_px_formula():
    # 9 pt = 1/8 inch = 25 image pixels at 200 dpi; the image shown at 0.4 of its natural width
    assert site_test.displayed_font_px(9, 200, 400, 1000) == pytest.approx(10.0, rel=1e-12)
    # shown at natural size: points to pixels at the image's dpi
    assert site_test.displayed_font_px(7.2, 100, 640, 640) == pytest.approx(10.0, rel=1e-12)
    with pytest.raises(ValueError, match="natural_width"):
        site_test.displayed_font_px(9, 200, 400, 0)


def test_figure_font_px_needs_both_chunks():
    with pytest.raises(ValueError, match="book:min-font-pt and no book:dpi"):
        site_test.figure_font_px({}, 100, 100)
    with pytest.raises(ValueError, match="book:dpi"):
        site_test.figure_font_px({"book:min-font-pt": "8"}, 100, 100)
    with pytest.raises(ValueError, match="unreadable"):
        site_test.figure_font_px({"book:min-font-pt": "eight", "book:dpi": "200"}, 100, 100)
    chunks = {"book:min-font-pt": "9", "book:dpi": "200"}
    assert site_test.figure_font_px(chunks, 400, 1000) == pytest.approx(10.0, rel=1e-12)


def test_check_images_thresholds(tmp_path):
    base = "http://127.0.0.1:8000/"
    pngs = site_test.Pngs(tmp_path, base)
    uri = "data:image/png;base64," + base64.b64encode(lib_viz_png("9", "200")).decode()
    bare = "data:image/png;base64," + base64.b64encode(png()).decode()

    def image(src, width, natural=1000, alt="a plot of the loss against time"):
        return {"name": "figure 1", "src": src, "alt": alt, "width": width, "natural": natural}

    # 9 pt at 200 dpi, 1000 px natural: 10 px at 400 CSS px, 9 px at 360
    assert site_test.check_images([image(uri, 400)], pngs, True, 1280).failures == []
    small = site_test.check_images([image(uri, 360)], pngs, True, 1280)
    assert len(small.failures) == 1 and "9.0 px" in small.failures[0]
    # at 390 px: information only, below 7 px
    phone = site_test.check_images([image(uri, 250)], pngs, True, 390)
    assert phone.failures == [] and len(phone.notes) == 1
    assert site_test.check_images([image(uri, 360)], pngs, True, 390).notes == []
    # no chunks: a failure on a chapter page only; alt text judged at 1280 only
    assert (
        "not made by lib.book.viz"
        in site_test.check_images([image(bare, 400)], pngs, True, 1280).failures[0]
    )
    assert site_test.check_images([image(bare, 400)], pngs, False, 1280).failures == []
    assert len(site_test.check_images([image(uri, 400, alt="")], pngs, True, 1280).failures) == 1
    assert site_test.check_images([image(uri, 400, alt="")], pngs, True, 390).failures == []


# ---- explorations ----


def test_exploration_problems():
    check = site_test.exploration_problems
    assert check("relative gap|depth", ["relative gap", "depth"], ["Relative  gap", "depth"]) == []
    assert check("relative gap|depth", ["relative gap", "depth"], ["depth", "depth"]) == [
        "sliders not marked {.param} in the text before it: ['relative gap']"
    ]
    extra = check("depth", ["depth"], ["depth", "width"])
    assert extra == ["marked {.param} in the text before it but no slider: ['width']"]
    assert "do not match its data-parameters" in check("a|b", ["a"], ["a"])[0]
    assert check(None, ["a"], ["a"]) == ["no data-parameters attribute"]


# ---- equations and the allowlist ----


def overflow(page="book/a.html", viewport=390, tex=r"\begin{split} x = y \end{split}"):
    return site_test.Overflow(page, viewport, "(1.1)", tex, 500.0, 300.0)


def test_overflows_of_uses_one_pixel_of_slack():
    eqs = [
        {"label": "a", "tex": "a", "rendered": 301.0, "column": 300.0},  # rounding
        {"label": "b", "tex": "b", "rendered": 301.5, "column": 300.0},
        {"label": "c", "tex": "c", "rendered": 200.0, "column": 300.0},
    ]
    assert [o.label for o in site_test.overflows_of(eqs, "p.html", 1280)] == ["b"]


def test_split_overflows_allowed_unallowed_and_stale():
    entry = site_test.Allowed("book/a.html", 390, r"\begin{split}  x =", "a cases block")
    other_page = site_test.Allowed("book/b.html", 390, r"\begin{split}", "gone")
    other_width = site_test.Allowed("book/a.html", 1280, r"\begin{split}", "only at 390")
    over = overflow()
    unallowed = overflow(tex=r"\sum_i x_i")
    bad, stale = site_test.split_overflows([over, unallowed], [entry, other_page, other_width])
    assert bad == [unallowed]
    assert stale == [other_page, other_width]
    assert "column 300 px" in over.message() and "(1.1) at 390 px is 500 px wide" in over.message()


def test_load_allowlist(tmp_path):
    path = tmp_path / "allow.json"
    assert site_test.load_allowlist(path) == []  # no file: nothing allowed
    good = {"page": "book/a.html", "viewport": 390, "tex_prefix": r"\sum", "reason": "a sum"}
    path.write_text(json.dumps([good]))
    assert site_test.load_allowlist(path) == [
        site_test.Allowed("book/a.html", 390, r"\sum", "a sum")
    ]
    for bad, match in [
        ({**good, "viewport": 800}, "viewport must be 1280 or 390"),
        ({**good, "reason": " "}, "non-empty"),
        ({k: v for k, v in good.items() if k != "reason"}, "exactly the keys"),
    ]:
        path.write_text(json.dumps([bad]))
        with pytest.raises(ValueError, match=match):
            site_test.load_allowlist(path)
    path.write_text(json.dumps(good))
    with pytest.raises(ValueError, match="JSON list"):
        site_test.load_allowlist(path)


def test_the_book_allowlist_is_well_formed():
    for entry in site_test.load_allowlist(site_test.ALLOWLIST):
        assert entry.page.endswith(".html") and len(entry.reason.split()) >= 3


# ---- one run in Chromium over a small site with one fault of each kind ----

MATHJAX = ROOT / ".vendor" / "static" / "mathjax"
WIDE_TEX = " + ".join(f"a_{{{i}}} b_{{{i}}}" for i in range(40))

PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>t</title>
<style>
@font-face {{ font-family: Gone; src: url(../_static/gone.woff2) format("woff2"); }}
.bd-article {{ max-width: 700px; }}
.odd {{ font-family: Gone; }}
span.math {{ display: inline-flex; max-width: 100%; overflow: hidden; }}
nav.bd-links {{ display: none; }}
nav.bd-links.open {{ display: block; }}
</style>
<script defer src="../_static/mathjax/tex-chtml.js"></script>
</head><body>
<button class="primary-toggle">Contents</button>
<nav class="bd-links"><a href="chapter.html">The chapter</a> <a href="other.html">Other</a></nav>
{toggle}
<main><article class="bd-article">
<h2>Section</h2>
<p>A long one: <span class="math notranslate nohighlight">\\({wide}\\)</span>, and
<span class="math notranslate nohighlight">\\(\\begin{{psmallmatrix}} 1
\\end{{psmallmatrix}}\\)</span>.</p>
<p>The error is 10.0000 to 10.0000 times; the limits [0.32001 0.34 ]; <a href="#nowhere">a
link</a> and <a href="#good">another</a>.</p>
<p class="odd">The loss is nan and the step 4.8e-04, the code <code>1e-5</code> is fine.</p>
<p>With <span class="param">depth</span> and <span class="param">width</span>:</p>
<div class="math notranslate nohighlight">\\[{wide}\\]</div>
<div class="math notranslate nohighlight">\\[x = 1\\]</div>
<figure id="good"><img alt="a flat white test image of the page" src="{good}">
<figcaption>A caption.</figcaption></figure>
<figure id="bare"><img alt="../_images/0123456789abcdef0123.png" src="{bare}">
<figcaption>Another caption.</figcaption></figure>
<div class="slider-grid" data-parameters="depth"><img alt="the grid image for depth"
 src="{good}"><input type="range" name="depth" min="0" max="1" value="0"></div>
<script>
const grid = document.querySelector('.slider-grid');
grid.querySelector('input').addEventListener('input', (e) => {{
  grid.querySelector('img').src = e.target.value === '1' ? '{bare}' : '{good}';
}});
</script>
</article></main>
<footer>{footer}</footer>
</body></html>
"""


def small_site(root: Path, *, pdf: bool = True) -> Path:
    """A site of one redirect and two pages (book/chapter.html, book/other.html)."""
    site = root / "html"
    (site / "book").mkdir(parents=True)
    (site / "_static").mkdir()
    (site / "_static" / "mathjax").symlink_to(MATHJAX)
    (site / "index.html").write_text(
        '<meta http-equiv="Refresh" content="0; url=book/chapter.html" />'
    )
    good = "data:image/png;base64," + base64.b64encode(lib_viz_png("9", "200", 300)).decode()
    bare = "data:image/png;base64," + base64.b64encode(png(300, 20)).decode()
    link = '<a href="../book.pdf">The whole book as one PDF</a>'
    # the other page's table-of-contents toggle works, the chapter's does nothing
    toggle = ("<script>document.querySelector('.primary-toggle').addEventListener('click', "
              "() => document.querySelector('nav.bd-links').classList.toggle('open'));</script>")
    for name, footer, script in (("chapter", link, ""), ("other", "", toggle)):
        html = PAGE.format(wide=WIDE_TEX, good=good, bare=bare, footer=footer, toggle=script)
        (site / "book" / f"{name}.html").write_text(html)
    if pdf:
        made_pdf(site / "book.pdf")
    return site


@pytest.mark.not_numerics
def test_run_in_chromium_finds_each_fault(tmp_path):
    if not (shutil.which("chromium") and (MATHJAX / "tex-chtml.js").is_file()):
        pytest.skip("needs Debian's Chromium and the vendored MathJax (make vendor)")
    pytest.importorskip("playwright")
    site = small_site(tmp_path)
    allow = tmp_path / "allow.json"
    allow.write_text(
        json.dumps(
            [
                {
                    "page": "book/other.html",
                    "viewport": 390,
                    "tex_prefix": "a_{0} b_{0}",
                    "reason": "a test of an allowed overflow",
                },
                {
                    "page": "book/other.html",
                    "viewport": 390,
                    "tex_prefix": "x = 2",
                    "reason": "a test of a stale entry",
                },
            ]
        )
    )
    results = site_test.run(site, allow, shots=tmp_path / "shots")
    chapter = "\n".join(results["book/chapter.html"].failures)
    other = "\n".join(results["book/other.html"].failures)
    assert results["index.html"].failures == []
    assert results["book.pdf"].failures == []
    # prose, outside code
    assert "nan in the text" in chapter and "the step 4.8e-04, the code is" in chapter
    assert "1e-5" not in chapter
    # a file of the site that the page asked for and that is missing (a font, loaded late)
    assert "HTTP 404 for " in chapter and "gone.woff2" in chapter
    # the wide equation overflows at both widths; on the other page the allowlist admits it at
    # 390 px only, and its second entry names nothing
    assert chapter.count("px wide, its column") == 2
    assert other.count("px wide, its column") == 1 and "at 1280 px" in other
    assert "stale entry" in other and "x = 2" in other
    # alt text, lib.book.viz's chunks, the explorations' marks, the footer's link
    assert "alt text is a file name" in chapter
    assert "(#good)" not in chapter  # the good figure: 9 pt * 200/72 * 300 px/300 px = 25 px
    assert "no book:min-font-pt" not in chapter  # not a chapter page: no notebook link
    assert "marked {.param} in the text before it but no slider: ['width']" in chapter
    assert "no link to book.pdf in the footer" in other
    assert "no link to book.pdf" not in chapter
    assert (tmp_path / "shots" / "book__chapter-390.png").is_file()
    # MathJax errors, a clipped inline formula at both widths, degenerate ranges and reprs, a page
    # wider than a phone, a dead sidebar toggle (the other page's works), a link to no anchor
    assert "MathJax error: " in chapter and "psmallmatrix" in chapter
    assert "inline formula cut off at 1280 px" in chapter
    assert "inline formula cut off at 390 px" in chapter
    assert "degenerate range in the text" in chapter and "numpy/torch repr in the text" in chapter
    assert "px wide in a 390 px window" in chapter
    assert "the table of contents toggle does nothing" in chapter
    assert "toggle does nothing" not in other
    assert (tmp_path / "shots" / "toc-open-390.png").is_file()
    assert "book/chapter.html#nowhere: no element of that id there" in chapter
    assert "#good" not in chapter.split("figure")[0]


def test_check_pdf(tmp_path):
    site = small_site(tmp_path, pdf=False)
    assert site_test.check_pdf(site) == [
        "book.pdf is not in the site (tools/pdf.py makes it after the HTML build)"
    ]
    (site / "book.pdf").write_text("<html>not found</html>")
    assert "not a PDF" in site_test.check_pdf(site)[0]


# ---- tools/pdf.py: reading the printed PDF, the singlehtml builder's node visitors ----


def test_pdf_summary_counts_pages_images_and_fonts(tmp_path):
    pages = [Image.new("RGB", (60, 40), color) for color in ("white", "red", "blue")]
    path = tmp_path / "three.pdf"
    pages[0].save(path, save_all=True, append_images=pages[1:])  # Pillow: one image per page
    summary = pdf.pdf_summary(path.read_bytes())
    assert summary["pages"] == 3 and summary["images"] == 3
    fake = (
        b"%PDF-1.4\n1 0 obj\n<</Type /Pages /Count 2 /Kids [2 0 R 3 0 R]>>\nendobj\n"
        b"4 0 obj\n<</Type /XObject /Subtype /Image /SMask 5 0 R>>\nstream\nxx\nendstream\n"
        b"5 0 obj\n<</Type /XObject /Subtype /Image /Width 9>>\nstream\nxx\nendstream\n"
        b"6 0 obj\n<</Type /FontDescriptor /FontName /GAAAAA+MathJax_Main-Regular>>\nendobj\n"
        b"7 0 obj\n<</Type /Font /BaseFont /AAAAAA+DejaVuSans>>\nendobj\n"
    )
    summary = pdf.pdf_summary(fake)
    assert summary == {"pages": 2, "images": 1, "fonts": ["DejaVuSans", "MathJax_Main-Regular"]}
    assert pdf.check_pdf(summary, formulas=10) == []
    assert "no MathJax font" in pdf.check_pdf({**summary, "fonts": ["DejaVuSans"]}, 10)[0]
    assert pdf.check_pdf({**summary, "fonts": ["DejaVuSans"]}, 0) == []
    assert pdf.check_pdf({"pages": 1, "images": 0, "fonts": []}, 0) == ["1 pages", "no images"]


def test_link_target():
    base, dests = "http://127.0.0.1:9/", {"sec-a", "document-book/ch"}
    assert pdf.link_target(base + "book/other.html#sec-a", base, dests) == ("dest", "sec-a")
    assert pdf.link_target(base + "book/ch.html", base, dests) == ("dest", "document-book/ch")
    assert pdf.link_target(base + "book.pdf", base, dests) == ("site", "book.pdf")
    assert pdf.link_target(base + "book/x.ipynb", base, dests) == ("site", "book/x.ipynb")
    assert pdf.link_target(base + "book/ch.html#gone", base, dests) == ("site", "book/ch.html#gone")
    assert pdf.link_target("https://doi.org/1", base, dests) == ("keep", "https://doi.org/1")


def test_finish_pdf_makes_links_internal_and_adds_an_outline(tmp_path):
    pytest.importorskip("pypdf")
    from pypdf import PdfReader

    base = "http://127.0.0.1:9/"
    path = made_pdf(tmp_path / "book.pdf", outline=False, dests=("sec-a", "document-book/ch"),
                    links=(base + "book/ch.html#sec-a", base + "book.pdf", "https://doi.org/1"))
    outline = [{"id": "document-book/ch", "title": "1. A chapter",
                "children": [{"id": "sec-a", "title": "1.1 A section", "children": []},
                             {"id": "gone", "title": "1.2 Gone", "children": []}]}]
    done = pdf.finish_pdf(path, outline, base, SITE_URL)
    assert done == {"internal": 1, "site": 1, "other": 1, "outline": 2, "missing": ["1.2 Gone"]}
    reader = PdfReader(path)
    assert [item.title for item in reader.outline[:1]] == ["1. A chapter"]
    annots = [a.get_object() for a in reader.pages[0]["/Annots"]]
    uris = sorted(str(a["/A"]["/URI"]) for a in annots if "/A" in a)
    assert uris == ["https://doi.org/1", SITE_URL + "book.pdf"]
    (internal,) = [a for a in annots if "/Dest" in a]
    assert reader.get_page_number(internal["/Dest"][0].get_object()) == 1
    (tmp_path / "book.pdf").rename(tmp_path / "html.pdf")
    site = tmp_path / "site"
    site.mkdir()
    (site / "book.pdf").write_bytes((tmp_path / "html.pdf").read_bytes())
    assert site_test.pdf_links_problems(site / "book.pdf", site, SITE_URL) == []


def test_site_build_reads_the_footer(tmp_path):
    (tmp_path / "book").mkdir()
    redirect = '<meta http-equiv="Refresh" content="0; url=book/a.html" />'
    (tmp_path / "index.html").write_text(redirect)
    (tmp_path / "book" / "a.html").write_text(
        '<p class="book-footer">Built <time datetime="2026-11-29T03:30Z">2026-11-29 03:30 UTC'
        '</time> from commit <a href="https://x/commit/abc"><code>ca8941f</code></a> · PDF</p>')
    assert pdf.site_build(tmp_path) == {"date": "2026-11-29 03:30 UTC", "commit": "ca8941f"}
    assert pdf.site_build(tmp_path / "nowhere") is None


def test_problems_before_printing():
    ready = {"mathSource": 3, "mathTypeset": 3, "broken": [], "text": "all typeset"}
    assert pdf.problems_before_printing(ready) == []
    bad = {"mathSource": 3, "mathTypeset": 2, "broken": ["_images/a.png"], "text": r"x \(a\) y"}
    assert pdf.problems_before_printing(bad) == [
        "3 formulas, 2 typeset",
        r"raw TeX: ...x \(a\) y...",
        "image not loaded: _images/a.png",
    ]


def test_singlehtml_gets_the_html_visitors_it_lacks(monkeypatch):
    from sphinx.registry import SphinxComponentRegistry

    monkeypatch.setattr(SphinxComponentRegistry, "create_translator", _plain_create)
    pdf.html_handlers_for_singlehtml()
    registry = SphinxComponentRegistry()

    def visit(self, node):
        return ("html", node)

    def own(self, node):
        return ("singlehtml", node)

    registry.translation_handlers = {
        "html": {"hidden": (visit, None), "both": (visit, None)},
        "singlehtml": {"both": (own, None)},
    }
    builder = type("Builder", (), {"name": "singlehtml", "format": "html"})()
    translator = registry.create_translator(builder)
    assert translator.visit_hidden(1) == ("html", 1)  # filled in from the format
    assert translator.visit_both(2) == ("singlehtml", 2)  # the builder's own wins


def _plain_create(self, builder, *args):
    """Sphinx's create_translator in brief: the builder's own handlers, else the format's."""
    translator = type("Translator", (), {})()
    handlers = self.translation_handlers.get(builder.name)
    if handlers is None:
        handlers = self.translation_handlers.get(builder.format, {})
    for name, (visit, _depart) in handlers.items():
        setattr(translator, "visit_" + name, visit.__get__(translator))
    return translator


def test_start_page_follows_the_redirect_and_copies_the_page_to_the_top(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.html").write_text("<p>the book</p>")
    (tmp_path / "index.html").write_text(
        '<meta http-equiv="Refresh" content="0; url=book/intro.html" />'
    )
    assert pdf.start_page(tmp_path) == "book.html"
    assert (tmp_path / "book.html").read_text() == "<p>the book</p>"
