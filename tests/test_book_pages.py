"""Tests of tools/book_pages.py (citation labels, alt text, glued text, footer) and of the
book's citation metadata (CITATION.cff, the intro's BibTeX block)."""

import datetime as dt
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import book_pages  # noqa: E402

pybtex_database = pytest.importorskip("pybtex.database")
pybtex_plugin = pytest.importorskip("pybtex.plugin")
bibtex_plugin = pytest.importorskip("sphinxcontrib.bibtex.plugin")
from sphinxcontrib.bibtex.style.referencing import format_references  # noqa: E402
from sphinxcontrib.bibtex.style.template import SphinxReferenceInfo  # noqa: E402

BIB = ROOT / "book" / "references.bib"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def entries():
    return pybtex_database.parse_file(BIB).entries


@pytest.fixture
def styles(entries, monkeypatch):
    """The registered styles, with the book's .bib file as the label style's universe."""
    book_pages.register_citation_styles()
    monkeypatch.setattr(book_pages.AuthorYearLabelStyle, "universe", dict(entries))
    formatting = pybtex_plugin.find_plugin("pybtex.style.formatting", book_pages.STYLE)()
    referencing = bibtex_plugin.find_plugin(
        "sphinxcontrib.bibtex.style.referencing", book_pages.STYLE
    )()
    return formatting, referencing


# --- citation labels ------------------------------------------------------------------------------


def test_labels_of_the_books_bibliography(entries):
    labels = book_pages.author_year_labels(entries.values())
    assert labels["elkabetz2021continuous"] == "Elkabetz and Cohen, 2021"
    assert labels["krizhevsky2009learning"] == "Krizhevsky, 2009"
    assert labels["cohenkarlik2023learning"] == "Cohen-Karlik et al., 2023"
    # two entries with the same authors and year: letters in the .bib file's order
    assert labels["slutzky2025implicit"] == "Slutzky et al., 2025a"
    assert labels["slutzky2025code"] == "Slutzky et al., 2025b"
    assert labels["gu2022efficiently"] == "Gu et al., 2022a"
    assert labels["gu2022parameterization"] == "Gu et al., 2022b"
    # every entry has one label, no two entries share one, each ends with its year (+ letter)
    assert set(labels) == set(entries)
    assert len(set(labels.values())) == len(labels)
    for key, label in labels.items():
        year = label.rsplit(", ", 1)[-1]
        assert re.fullmatch(re.escape(entries[key].fields["year"]) + "[a-z]?", year), label


def test_a_letter_means_the_same_entry_in_every_list(styles, entries):
    """A chapter's list holds only its citations; the letters still come from the whole file."""
    formatting, _ = styles
    one = list(formatting.sort([entries["slutzky2025code"], entries["elkabetz2021continuous"]]))
    labels = dict(zip([e.key for e in one], formatting.format_labels(one), strict=True))
    assert labels == {
        "slutzky2025code": "Slutzky et al., 2025b",
        "elkabetz2021continuous": "Elkabetz and Cohen, 2021",
    }


def test_without_a_universe_the_list_alone_decides(entries, monkeypatch):
    monkeypatch.setattr(book_pages.AuthorYearLabelStyle, "universe", {})
    labels = list(book_pages.AuthorYearLabelStyle().format_labels([entries["slutzky2025code"]]))
    assert labels == ["Slutzky et al., 2025"]


def _plain(text) -> str:
    """Rich text (with sphinxcontrib-bibtex's reference parts) as plain text."""
    return "".join(_plain(p) for p in text.parts) if hasattr(text, "parts") else str(text)


@pytest.mark.parametrize("key", ["slutzky2025implicit", "gu2022parameterization",
                                 "elkabetz2021continuous", "bach2017breaking"])
def test_in_text_citations_carry_the_list_label(styles, entries, key):
    formatting, referencing = styles
    (entry,) = formatting.sort([entries[key]])
    (formatted,) = formatting.format_entries([entry])
    info = SphinxReferenceInfo(builder=None, fromdocname="p", todocname="p", citation_id="c",
                               title=None, pre_text="", post_text="")
    parenthetical = _plain(format_references(referencing, "p", [(entry, formatted, info)]))
    textual = _plain(format_references(referencing, "t", [(entry, formatted, info)]))
    assert parenthetical == f"[{formatted.label}]"
    authors, year = formatted.label.rsplit(", ", 1)
    assert textual == f"{authors} [{year}]"


def test_the_config_uses_the_registered_styles():
    config = CONFIG["sphinx"]["config"]
    assert config["bibtex_default_style"] == book_pages.STYLE
    assert config["bibtex_reference_style"] == book_pages.STYLE
    assert CONFIG["sphinx"]["local_extensions"]["book_pages"] == "tools/"


# --- alt text -------------------------------------------------------------------------------------


def test_alt_from_a_short_caption_is_the_caption():
    caption = "Impulse responses h_k = \\sum_j c_j b_j a_j^k\n  of three   diagonal SSMs."
    assert book_pages.alt_from_caption(caption) == (
        "Impulse responses h_k = \\sum_j c_j b_j a_j^k of three diagonal SSMs."
    )


def test_alt_from_a_long_caption_is_its_first_sentence():
    first = "Loss against time for " + "the four initializations of the flow, " * 3 + "end."
    caption = first + " Slowly decaying poles give long memory. " + "More words here. " * 20
    assert len(caption) > book_pages.ALT_LIMIT >= len(first)
    assert book_pages.alt_from_caption(caption) == first


def test_alt_from_one_long_sentence_is_cut_at_a_word():
    caption = "word " * 200
    alt = book_pages.alt_from_caption(caption)
    assert len(alt) <= book_pages.ALT_LIMIT and alt.endswith("word…")


@pytest.mark.parametrize("alt, uri, placeholder", [
    (None, "a.png", True),
    ("", "a.png", True),
    ("   ", "a.png", True),
    ("../_images/7a53506311c5.png", "../_images/7a53506311c5.png", True),
    ("_build/jupyter_execute/abc.png", "x/abc.png", True),
    ("figures/loss.svg", "", True),
    ("7a53506311c514296aab1ace80ecf9b2", "", True),
    ("Loss of the flow against time", "a.png", False),
    ("Figure 2 of the paper, redrawn", "fig2.png", False),
])
def test_alt_is_placeholder(alt, uri, placeholder):
    assert book_pages.alt_is_placeholder(alt, uri) is placeholder


# --- glued text -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, token", [
    ("nan", "nan"), ("NaN", "NaN"), ("-inf", "-inf"), ("None", "None"), ("0.5 ± nan", "nan"),
    ("none", None), ("inside", None), ("infinite", None), ("4.8e-04", None), ("banana", None),
    ("Nonetheless", None),
])
def test_bad_glued_text(text, token):
    assert book_pages.bad_glued_text(text) == token


@pytest.mark.parametrize("role, key", [
    ("small:.1e", "small"), ("small", "small"), ("other::small:.2f", "small"),
    ("other::small", "small"),
])
def test_glue_key(role, key):
    assert book_pages.glue_key(role) == key


def _document_with_glue(*texts: str) -> nodes.document:
    document = new_document("test", get_default_settings(Parser))
    paragraph = nodes.paragraph()
    for text in texts:
        paragraph += nodes.inline(text, text, classes=["pasted-text"], glue_key=f"k{len(text)}")
        paragraph += nodes.Text(" and 1e-3 outside glue ")
    document += paragraph
    return document


def test_glued_numbers_are_typeset_and_nan_reported():
    pytest.importorskip("lib.book.typeset")
    document = _document_with_glue("4.8e-04", "nan", "2.1e+10")
    bad = book_pages.typeset_glued_text(document)
    glued = [n.astext() for n in document.findall(nodes.inline)]
    assert glued == ["4.8\u00a0×\u00a010⁻⁴", "nan", "2.1\u00a0×\u00a010¹⁰"]
    assert [(node["glue_key"], token) for node, token in bad] == [("k3", "nan")]
    assert "1e-3 outside glue" in document.astext()  # only glued text is rewritten


# --- footer ---------------------------------------------------------------------------------------


def test_footer_links_and_marks():
    info = {"date": "2026-01-02 03:04 UTC", "iso": "2026-01-02T03:04Z", "commit": "a" * 40,
            "short": "aaaaaaa", "dirty": True}
    footer = book_pages.footer_html(info, pdf_url="../book.pdf", cite_url="intro.html#cite",
                                    repository_url="https://github.com/o/n")
    for part in ('href="../book.pdf">PDF</a>', 'href="intro.html#cite">Cite</a>',
                 "2026-01-02 03:04 UTC", "<code>aaaaaaa</code>", "uncommitted changes",
                 "CC BY 4.0", 'href="https://github.com/o/n/blob/main/LICENSE"', ">MIT<"):
        assert part in footer
    clean = book_pages.footer_html({**info, "dirty": False}, pdf_url="p", cite_url="c",
                                   repository_url="r")
    assert "uncommitted" not in clean
    unknown = book_pages.footer_html({**info, "commit": None, "short": None}, pdf_url="p",
                                     cite_url="c", repository_url="r")
    assert "commit unknown" in unknown


def test_build_info_of_this_repository(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767323040")  # 2026-01-02 03:04 UTC
    info = book_pages.build_info(ROOT)
    assert info["date"] == "2026-01-02 03:04 UTC"
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    head = subprocess.run([git, "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert info["commit"] == head and info["short"] == head[:7]
    assert isinstance(info["dirty"], bool)


# --- CITATION.cff and the intro's BibTeX block ----------------------------------------------------

CFF_KEYS = ("cff-version", "message", "title", "authors", "version", "date-released", "license",
            "repository-code")


@pytest.fixture(scope="module")
def cff():
    return yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))


def test_citation_cff_has_the_required_keys(cff):
    for key in CFF_KEYS:
        assert cff.get(key), key
    assert cff["cff-version"] == "1.2.0"
    assert cff["authors"] == [{"name": "The Implicit Bias Book team"}]  # an entity
    dt.date.fromisoformat(cff["date-released"])  # a quoted ISO date, as CFF wants
    assert {"MIT", "CC-BY-4.0"} <= set(cff["license"])
    assert cff["repository-code"] == CONFIG["repository"]["url"]
    assert cff["title"] == CONFIG["title"]
    assert cff["preferred-citation"]["type"] == "book"
    assert cff["preferred-citation"]["year"] == dt.date.fromisoformat(cff["date-released"]).year


def test_the_intro_cites_the_book_as_citation_cff_does(cff):
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert "## Cite this book" in intro  # the footer's Cite link: #cite-this-book
    block = re.search(r"```bibtex\n(@(book|misc)\{.*?\n\})\n```", intro, re.S)
    assert block, "the intro has a BibTeX block with a @book or @misc entry"
    bibtex = block.group(1)
    year = re.search(r"year\s*=\s*\{(\d{4})\}", bibtex).group(1)
    assert int(year) == cff["preferred-citation"]["year"]
    assert re.search(r"url\s*=\s*\{" + re.escape(cff["url"]) + r"\}", bibtex)
    assert " ".join(cff["title"].split()) in " ".join(bibtex.split())
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


# --- the execution table --------------------------------------------------------------------------


def test_the_execution_table_names_pages_and_marks_in_words():
    execution_tables = pytest.importorskip("myst_nb.ext.execution_tables")
    run = {"mtime": 1767323040.0, "method": "force", "runtime": 1.5, "error": None}
    metadata = {
        "book/ch": {"exec_data": {**run, "succeeded": True}},
        "book/broken": {"exec_data": {**run, "succeeded": False, "error": "ValueError"}},
        "book/intro": {},  # a page without code: no row
    }
    table = execution_tables.make_stat_table("book/execution", metadata)
    book_pages.polish_exec_table(table, {"book/ch": "A chapter"})
    rows = [[entry.astext() for entry in row.findall(nodes.entry)]
            for row in table.findall(nodes.row)]
    assert rows[0] == ["Page", "Executed at", "Method", "Run time (s)", "Status"]
    assert [row[0] for row in rows[1:]] == ["book/broken", "A chapter"]  # no title: the docname
    assert [row[-1] for row in rows[1:]] == ["failed", "ok"]


def test_alt_from_a_caption_with_a_title_sentence_says_more_than_the_title():
    caption = "The poisoning window. Left: the clean and poisoned losses over time. " + "X. " * 90
    assert book_pages.alt_from_caption(caption) == (
        "The poisoning window. Left: the clean and poisoned losses over time."
    )


# --- formulas in alt text, the Cite link ---------------------------------------------------------


@pytest.mark.parametrize("tex, text", [
    (r"h_k = \sum_j c_j b_j a_j^k", "hₖ = Σⱼ cⱼ bⱼ aⱼᵏ"),
    (r"C = \mathbf{1}^\top", "C = 1ᵀ"),
    (r"10^{-3}", "10⁻³"),
    (r"\|W_{n:1}\|", "‖W_(n:1)‖"),
    (r"\frac{1}{2}\eta \le \kappa", "1/2 η ≤ κ"),
    (r"\tfrac{a+b}{2}", "(a+b)/2"),
    (r"\sqrt{\min\{d, n\}}", "√(min{d, n})"),
    (r"\mathbb{R}^{d}", "ℝᵈ"),
    (r"\tilde{t}", "t̃"),
    (r"\begin{psmallmatrix} 1 & 0 \\ 0 & 1 \end{psmallmatrix}", "(1, 0; 0, 1)"),
    (r"\left( x \right)", "(x)"),
    (r"\log \lVert w \rVert", "log ‖ w ‖"),
])
def test_tex_to_text_reads_without_tex(tex, text):
    out = book_pages.tex_to_text(tex)
    assert out == text and "\\" not in out


def test_tex_to_text_rejects_a_non_string():
    with pytest.raises(ValueError):
        book_pages.tex_to_text(None)


def test_caption_text_writes_formulas_as_text():
    caption = nodes.caption()
    caption += nodes.Text("Impulse responses ")
    caption += nodes.math(text=r"h_k = \sum_j c_j b_j a_j^k")
    caption += nodes.Text(" of three SSMs with ")
    caption += nodes.math(text=r"C = \mathbf{1}^\top")
    caption += nodes.Text(".")
    assert book_pages.caption_text(caption) == (
        "Impulse responses hₖ = Σⱼ cⱼ bⱼ aⱼᵏ of three SSMs with C = 1ᵀ."
    )


def test_cite_url_on_the_intro_and_elsewhere():
    assert book_pages.cite_url("#") == "#cite-this-book"  # the intro itself: not ##cite-this-book
    assert book_pages.cite_url("intro.html") == "intro.html#cite-this-book"
    assert book_pages.cite_url("../book/intro.html") == "../book/intro.html#cite-this-book"


def test_the_execution_table_in_reading_order():
    from myst_nb.ext import execution_tables

    run = {"mtime": 1.7e9, "runtime": 2.0, "method": "cache", "succeeded": True}
    metadata = {name: {"exec_data": run} for name in ("book/a", "book/b", "book/z", "book/x")}
    table = execution_tables.make_stat_table("book/execution", metadata)
    includes = {"book/intro": ["book/z", "book/a"], "book/z": ["book/b"]}
    order = book_pages.reading_order(includes, "book/intro")
    assert order == ["book/intro", "book/z", "book/b", "book/a"]
    book_pages.polish_exec_table(table, {}, order)
    rows = [[entry.astext() for entry in row.findall(nodes.entry)]
            for row in table.findall(nodes.row)]
    assert [row[0] for row in rows[1:]] == ["book/z", "book/b", "book/a", "book/x"]


@pytest.mark.parametrize("page", sorted((ROOT / "book").glob("*.md")), ids=lambda p: p.stem)
def test_no_page_source_holds_a_control_character(page):
    """A tab or other control character in a page is almost always a TeX command whose backslash
    a Python string ate (``"\\tfrac"`` is a tab and ``frac``); MathJax then prints garbage."""
    bad = [(number, repr(line)) for number, line in enumerate(page.read_text().splitlines(), 1)
           if re.search(r"[\x00-\x09\x0b-\x1f\x7f]", line)]
    assert not bad, f"{page.name}: control characters at {bad[:5]}"
