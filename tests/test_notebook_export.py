"""Tests of tools/notebook_export.py: the chapters' MyST markdown as plain Jupyter markdown.

Each conversion is checked on a small snippet; the last test reads the notebooks of a built site
(``make book``), when there is one, and checks that none still shows MyST syntax.
"""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import notebook_export as nx  # noqa: E402

pytestmark = pytest.mark.not_numerics

SITE = "https://owner.github.io/name/"
NBSP = "\u00a0"
BIB = r"""
@inproceedings{slutzky2025implicit,
  author = {Slutzky, Yonatan and Alexander, Yotam and Razin, Noam and Cohen, Nadav},
  title = {The Implicit Bias of Structured State Space Models Can Be Poisoned With Clean Labels},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2025},
  url = {https://arxiv.org/abs/2410.10473}
}
@inproceedings{elkabetz2021continuous,
  author = {Elkabetz, Omer and Cohen, Nadav},
  title = {Continuous vs. Discrete Optimization of Deep Neural Networks},
  booktitle = {Advances in Neural Information Processing Systems},
  year = {2021}
}
@article{gu2022s4,
  author = {Gu, Albert and R{\'e}, Christopher},
  title = {{S4}},
  journal = {ICLR},
  year = {2022}
}
@misc{code2025,
  author = {Slutzky, Yonatan},
  title = {code},
  howpublished = {\url{https://github.com/o/n}},
  year = {2025}
}
"""


def book_index() -> nx.BookIndex:
    """Targets as a Sphinx build would number them (chapter 7)."""
    doc = "book/ch"
    targets = {
        "sec-setting": nx.Target(doc, "sec-setting", "section", "The setting"),
        "fig-flows": nx.Target(doc, "fig-flows", "figure", "The two flows", "7.1"),
        "eq-flows": nx.Target(doc, "equation-eq-flows", "displaymath", "", "7.2"),
        "thm-main": nx.Target(doc, "thm-main", "theorem", "Main result", "7.1"),
        "ass-teacher": nx.Target(doc, "ass-teacher", "assumption", "Paper, Assumption 1"),
        "ex-derive": nx.Target(doc, "ex-derive", "exercise", "Derive the flow", "7.1"),
    }
    fmt = dict(nx._NUMFIG_FORMAT, theorem="theorem %s")
    return nx.BookIndex(targets, {"book/other": "Another chapter", doc: "Ch"}, SITE, fmt)


@pytest.fixture
def ctx(tmp_path):
    bib = tmp_path / "references.bib"
    bib.write_text(BIB, encoding="utf-8")
    glue = {"rate": {"text/plain": "0.000123456"}, "seeds": {"text/plain": "32"},
            "name": {"text/plain": "'clean'"}}
    return nx.page_context("book/ch", book_index(), bib, glue)


def convert(text: str, ctx) -> str:
    result = nx.convert_markdown(text, ctx)
    assert nx.leftovers(result) == [], result
    return result


# --- citations ---------------------------------------------------------------------------------


def test_cite_with_two_keys(ctx):
    both = "slutzky2025implicit,elkabetz2021continuous"
    assert convert(f"see {{cite}}`{both}`.", ctx) == (
        "see (Slutzky et al., 2025; Elkabetz and Cohen, 2021).")
    assert convert(f"{{cite:p}}`{both}`", ctx) == "(Slutzky et al., 2025; Elkabetz and Cohen, 2021)"
    assert convert(f"{{cite:t}}`{both}`", ctx) == "Slutzky et al. (2025), Elkabetz and Cohen (2021)"
    assert convert("{cite:t}`slutzky2025implicit` shows", ctx) == "Slutzky et al. (2025) shows"


def test_bibliography_lists_what_the_page_cites(ctx):
    convert("{cite}`gu2022s4` and {cite:t}`slutzky2025implicit`", ctx)
    listing = convert("```{bibliography}\n:filter: docname in docnames\n```", ctx)
    lines = listing.splitlines()
    assert len(lines) == 2 and lines[0].startswith("- Albert Gu and Christopher Ré. S4.")
    assert lines[1].endswith("<https://arxiv.org/abs/2410.10473>")
    assert "elkabetz" not in listing.lower()  # not cited on this page


def test_bibliography_entries(tmp_path):
    bib = tmp_path / "r.bib"
    bib.write_text(BIB, encoding="utf-8")
    entries = nx.read_bibliography(bib)
    assert entries["gu2022s4"].authors == "Gu and Ré"  # accent decoded, braces dropped
    assert entries["code2025"].url == "https://github.com/o/n" and entries["code2025"].venue == ""
    assert nx.cite(["unknown"], "p", entries) == "(unknown)"


# --- glued numbers -----------------------------------------------------------------------------


def test_glue_with_a_format_spec(ctx):
    # 0.000123456 with .2e is "1.23e-04", written as a power of ten by lib.book.typeset.scientific
    assert convert("rate {glue:text}`rate:.2e` here", ctx) == f"rate 1.23{NBSP}×{NBSP}10⁻⁴ here"
    assert convert("{glue:text}`rate:.3f`", ctx) == "0.000"
    assert convert("{glue:text}`seeds` seeds, {glue:text}`seeds:d`", ctx) == "32 seeds, 32"
    assert convert("{glue:text}`name`", ctx) == "clean"  # a string loses its quotes
    assert convert("{glue}`seeds`", ctx) == "32"


def test_glue_without_a_value_shows_its_name(ctx):
    assert convert("{glue:text}`missing:.2f`", ctx) == "`missing`"


def test_format_glued_matches_format():
    assert nx.format_glued("2.5", ".1f") == "2.5"
    assert nx.format_glued("3", "03d") == "003"
    assert nx.format_glued("0.25", ".0%") == "25%"


def test_glue_data_from_glue_json_and_outputs(tmp_path):
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("glue('a', 1)")
    cell.outputs = [nbformat.v4.new_output(
        "display_data", data={"application/papermill.record/text/plain": "1"},
        metadata={"scrapbook": {"name": "a", "mime_prefix": "application/papermill.record/"}})]
    notebook.cells.append(cell)
    stored = tmp_path / "ch.glue.json"
    stored.write_text(json.dumps({"b": {"output_type": "display_data",
                                        "data": {"text/plain": "2.0"}, "metadata": {}}}))
    assert nx.glue_data(notebook, stored) == {"a": {"text/plain": "1"},
                                              "b": {"text/plain": "2.0"}}


# --- cross-references --------------------------------------------------------------------------


def test_cross_references_become_linked_text(ctx):
    page = f"{SITE}book/ch.html"
    assert convert("{ref}`sec-setting`", ctx) == f"[The setting]({page}#sec-setting)"
    assert convert("{ref}`this part <sec-setting>`", ctx) == f"[this part]({page}#sec-setting)"
    assert convert("{numref}`fig-flows`", ctx) == f"[Fig. 7.1]({page}#fig-flows)"
    assert convert("{numref}`Figure %s <fig-flows>`", ctx) == f"[Figure 7.1]({page}#fig-flows)"
    assert convert("eq. {eq}`eq-flows`", ctx) == f"eq. [(7.2)]({page}#equation-eq-flows)"
    assert convert("{prf:ref}`thm-main`", ctx) == f"[Theorem 7.1]({page}#thm-main)"
    assert convert("{prf:ref}`ass-teacher`", ctx) == (
        f"[Assumption (Paper, Assumption 1)]({page}#ass-teacher)")
    assert convert("{doc}`other`", ctx) == f"[Another chapter]({SITE}book/other.html)"
    assert convert("{ref}`nowhere`", ctx) == "nowhere"  # unknown: the label, plain


def test_without_a_site_the_references_are_plain_text(ctx):
    ctx.index.site_url = ""
    assert convert("{ref}`sec-setting` and {eq}`eq-flows`", ctx) == "The setting and (7.2)"


def test_other_inline_syntax(ctx):
    text = "(sec-x)=\n## Title\n\nMove the [relative gap]{.param} and {math}`x^2`."
    assert convert(text, ctx) == "## Title\n\nMove the relative gap and $x^2$."
    # a code span keeps what looks like a role; a plain code block keeps everything
    assert convert("`f'{x}'` stays", ctx) == "`f'{x}'` stays"
    block = "```python\nglue('a', 1)  # {glue:text}`a`\n```"
    assert nx.convert_markdown(block, ctx) == block


# --- equations ---------------------------------------------------------------------------------


def test_equation_labels_become_tags(ctx):
    assert convert("$$\na = b\n$$ (eq-flows)", ctx) == "$$\na = b \\tag{7.2}\n$$"
    assert convert("$$ a = b $$ (eq-flows)", ctx) == "$$\na = b \\tag{7.2}\n$$"
    assert convert("$$\na = b\n$$ (eq-unknown)", ctx) == "$$\na = b\n$$"  # no number: dropped
    assert convert("$$\nx\n$$", ctx) == "$$\nx\n$$"
    # a numbered amsmath environment numbers itself: no second tag
    align = "$$\n\\begin{align}a &= b\\end{align}\n$$ (eq-flows)"
    assert "\\tag" not in convert(align, ctx)


def test_math_is_not_rewritten(ctx):
    text = "$$\n\\{x : [a]{.b}\\}\n$$"  # math is LaTeX, even where it looks like a span
    assert convert(text, ctx) == text


# --- directives --------------------------------------------------------------------------------


def test_statement_with_number_title_and_body(ctx):
    text = ("```{prf:theorem} Main result\n:label: thm-main\n\n"
            "For all $t$, {glue:text}`seeds` holds.\n```")
    assert convert(text, ctx) == (
        "<blockquote>\n\n**Theorem 7.1 (Main result).**\n\nFor all $t$, 32 holds.\n\n</blockquote>")


def test_unnumbered_statement(ctx):
    text = "```{prf:assumption} Paper, Assumption 1\n:label: ass-teacher\n:nonumber:\n\nBody.\n```"
    assert convert(text, ctx).splitlines()[2] == "**Assumption (Paper, Assumption 1).**"


def test_nested_directives(ctx):
    text = (
        "::::{prf:definition} Outer\n:label: def-x\n:nonumber:\n\nBefore.\n\n"
        ":::{dropdown} Proof\nInside, see {cite}`elkabetz2021continuous`.\n\n"
        "```{note}\nDeepest {eq}`eq-flows`.\n```\n:::\n\nAfter.\n::::\n\nOutside."
    )
    result = convert(text, ctx)
    assert result.startswith("<blockquote>\n\n**Definition (Outer).**\n\nBefore.")
    assert "<details>\n<summary><b>Proof</b></summary>\n\nInside, see (Elkabetz and Cohen" in result
    assert "<blockquote>\n\n**Note**\n\nDeepest [(7.2)]" in result
    # the blocks close in order: note, dropdown, definition, then the text after them
    tail = result[result.index("Deepest"):]
    assert tail.index("</blockquote>") < tail.index("</details>") < tail.index("After.")
    assert result.endswith("After.\n\n</blockquote>\n\nOutside.")


def test_exercise_and_its_folded_solution(ctx):
    text = ("```{exercise} Derive the flow\n:label: ex-derive\n\nDerive it.\n```\n\n"
            "```{solution} ex-derive\n:class: dropdown\n\nDifferentiate.\n```")
    result = convert(text, ctx)
    assert result.startswith("<blockquote>\n\n**Exercise 7.1 (Derive the flow).**\n\nDerive it.")
    assert ("<details>\n<summary><b>Solution to Exercise 7.1 (Derive the flow)</b></summary>\n\n"
            "Differentiate.\n\n</details>") in result


def test_admonitions(ctx):
    text = ":::{admonition} In this chapter\n:class: tip\n\n**You will learn**\n:::"
    assert convert(text, ctx) == (
        "<blockquote>\n\n**In this chapter**\n\n**You will learn**\n\n</blockquote>")
    assert convert("```{warning}\nCareful.\n```", ctx).startswith("<blockquote>\n\n**Warning**")
    folded = convert(":::{note}\n:class: dropdown\nHidden.\n:::", ctx)
    assert folded.startswith("<details>\n<summary><b>Note</b></summary>")


def test_figures(ctx):
    text = "```{figure} images/flow.png\n:name: fig-flows\n:alt: two curves\n\nThe two flows.\n```"
    assert convert(text, ctx) == "![two curves](images/flow.png)\n\n*Fig. 7.1: The two flows.*"
    ctx.glue = {"plot": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}}
    ctx.attachments = {}
    glued = convert("```{glue:figure} plot\n:name: fig-flows\n\nCaption.\n```", ctx)
    assert glued.startswith("![Caption.](attachment:plot.png)")
    assert ctx.attachments == {"plot.png": {"image/png": "iVBORw0KGgo="}}


def test_unknown_directive_keeps_its_text(ctx):
    assert convert("```{margin} Aside\nShort.\n```", ctx) == (
        "<blockquote>\n\n**Aside**\n\nShort.\n\n</blockquote>")
    assert convert("```{card} Title\nBody {ref}`sec-setting`.\n```", ctx).startswith(
        "**Title**\n\nBody [The setting]")


# --- the source index and the Sphinx index -----------------------------------------------------


def test_index_of_sources():
    source = ("(sec-a)=\n## Section A\n\n```{prf:lemma} Lemma title\n:label: lem-a\n:nonumber:\n"
              "\nx\n```\n\n$$\nx\n$$ (eq-A)\n")
    index = nx.index_sources({"book/ch": "# Chapter\n\n" + source})
    assert index.titles == {"book/ch": "Chapter"}
    assert index.targets["sec-a"] == nx.Target("book/ch", "sec-a", "section", "Section A")
    assert index.targets["lem-a"].title == "Lemma title"
    assert index.targets["eq-A"].anchor == "equation-eq-a"  # Sphinx's ids are lowercase


def test_index_of_a_sphinx_environment():
    env = SimpleNamespace(
        config=SimpleNamespace(numfig_format={"figure": "Figure %s"}),
        titles={"book/ch": SimpleNamespace(astext=lambda: "Chapter")},
        domaindata={
            "std": {"labels": {"sec-a": ("book/ch", "sec-a", "Section A"),
                               "fig-a": ("book/ch", "fig-a", "A\ncaption"),
                               "ex-a": ("book/ch", "ex-a", "Exercise"),
                               "genindex": ("", "", "Index")}},
            "math": {"objects": {"eq-A": ("book/ch", 1)}},
        },
        toc_fignumbers={"book/ch": {"figure": {"fig-a": (3, 1)},
                                    "displaymath": {"equation-eq-a": (3, 4)},
                                    "exercise": {"ex-a": (3, 2)}, "theorem": {"thm-a": (3, 1)}}},
        proof_list={"thm-a": {"docname": "book/ch", "countertype": "theorem",
                              "realtype": "theorem", "nonumber": False}},
    )
    source = "```{exercise} Try it\n:label: ex-a\n```\n```{prf:theorem} Big\n:label: thm-a\n```\n"
    index = nx.index_sphinx(env, {"book/ch": source}, SITE)
    assert index.targets["fig-a"] == nx.Target("book/ch", "fig-a", "figure", "A caption", "3.1")
    assert index.targets["eq-A"] == nx.Target("book/ch", "equation-eq-a", "displaymath", "",
                                              "3.4")
    assert index.targets["ex-a"].title == "Try it" and index.targets["ex-a"].number == "3.2"
    assert index.targets["thm-a"] == nx.Target("book/ch", "thm-a", "theorem", "Big", "3.1")
    assert index.numfig_format["figure"] == "Figure %s" and index.titles["book/ch"] == "Chapter"


def test_site_url():
    assert nx.site_url_of("https://github.com/owner/name") == SITE
    assert nx.site_url_of("https://github.com/owner/name", "https://b.org/x") == "https://b.org/x/"
    assert nx.site_url_of("https://gitlab.com/o/n") == ""


# --- whole notebooks ---------------------------------------------------------------------------


def executed_notebook():
    notebook = nbformat.v4.new_notebook(metadata={
        "jupytext": {"x": 1}, "source_map": [1],
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    code = nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["hide-input"]})
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    notebook.cells = [nbformat.v4.new_markdown_cell("(top)=\n# Title\n\n{cite}`gu2022s4`"), code,
                      nbformat.v4.new_markdown_cell("{glue:text}`seeds` seeds")]
    return notebook


def test_export_notebook(ctx):
    result = nx.export_notebook(executed_notebook(), ctx, "print('install')")
    assert [c.cell_type for c in result.cells] == ["code", "markdown", "code", "markdown"]
    assert result.cells[0].source == "print('install')"
    assert [c.id for c in result.cells] == ["cell-0", "cell-1", "cell-2", "cell-3"]
    assert result.cells[1].source == "# Title\n\n(Gu and Ré, 2022)"
    assert result.cells[2].metadata["tags"] == ["hide-input"]
    assert result.cells[2].outputs[0]["text"] == "1\n"  # outputs kept
    assert result.cells[3].source == "32 seeds"
    assert "jupytext" not in result.metadata and "source_map" not in result.metadata
    nbformat.validate(result)


def test_a_stale_executed_notebook_is_not_used(tmp_path):
    source = tmp_path / "ch.md"
    source.write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n"
        "# T\n\n```{code-cell} ipython3\nx = 2\n```\n", encoding="utf-8")
    executed = tmp_path / "ch.ipynb"
    nbformat.write(executed_notebook(), executed)  # its code is "x = 1"
    warnings: list[str] = []
    chosen, ran = nx.choose_notebook(source, executed, warnings.append)
    assert not ran and [c.source for c in chosen.cells if c.cell_type == "code"] == ["x = 2"]
    assert len(warnings) == 1 and "no outputs" in warnings[0]
    fresh = executed_notebook()
    fresh.cells[1].source = "x = 2"
    nbformat.write(fresh, executed)
    chosen, ran = nx.choose_notebook(source, executed, warnings.append)
    assert ran and chosen.cells[1].outputs and len(warnings) == 1  # the run, with its outputs


# --- the built site ----------------------------------------------------------------------------

SITE_NOTEBOOKS = sorted((ROOT / "_build" / "html" / "_sources").rglob("*.ipynb"))


@pytest.mark.skipif(not SITE_NOTEBOOKS, reason="no built site (make book)")
@pytest.mark.parametrize("path", SITE_NOTEBOOKS, ids=lambda p: p.stem)
def test_downloaded_notebooks_show_no_myst_syntax(path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            found = [t for t in ("{prf:", "{cite", "{glue:") if t in cell.source]
            assert not found, f"{path.name}, cell {cell.get('id')}: {found}"
