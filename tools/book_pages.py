"""A Sphinx extension for what every page of the book shows a reader.

Loaded by ``_config.yml`` next to ``book_site`` (``sphinx: local_extensions``). Its jobs:

1. **Glued numbers.** Every glued inline text (MyST-NB's ``{glue:text}``, rendered as an inline
   node of class ``pasted-text``) is rewritten with :func:`lib.book.typeset.scientific`, so that
   ``4.8e-04`` reads ``4.8 × 10⁻⁴``; ``book/_static/book.css`` shows it in the weight of the text
   around it (MyST-NB makes it bold). A glued ``nan``, ``inf`` or ``None`` is a Sphinx warning
   that names the glue key and the page, so the build (``-W``) fails.
2. **Alt text from captions.** An image inside a figure with a caption (a code cell with
   ``mystnb: figure: caption:``, or a ``{figure}`` directive) whose alt text is missing, or only
   a file name or a hash, gets the caption's plain text as its alt text (cut to its first
   sentences, or to about 250 characters, when longer). A formula of the caption is written as
   readable text (:func:`tex_to_text`: ``h_k = \\sum_j c_j b_j a_j^k`` reads ``hₖ = Σⱼ cⱼ bⱼ aⱼᵏ``),
   never as TeX, which a screen reader would spell out backslash by backslash.
3. **Author-year citation labels.** The text cites ``[Slutzky et al., 2025b]``: the pybtex
   label style ``book_author_year`` gives the bibliography lists the same labels (the authors as
   the in-text citation writes them, a comma, the year, and a letter where two entries of
   ``references.bib`` share authors and year), and the referencing style of the same name puts
   that letter into the in-text citation too, so that every citation matches its list entry.
4. **The footer** of every page: the build date (UTC) and the git commit it was built from
   (marked when the work tree had uncommitted changes), links to the whole book as one PDF
   (``book.pdf`` at the site's root, written by ``make pdf``) and to the intro's "Cite this
   book" section, and the licences: MIT for the code, CC BY 4.0 for the text and figures.
   Every page also loads ``book/_static/book.js`` (the sidebar toggles' fix for
   pydata-sphinx-theme#2451, and the scroll cues of formulas wider than their column).
5. **The execution table** (MyST-NB's ``{nb-exec-table}``, on the appendix page
   ``book/execution.md``): the pages by title, and words instead of emoji marks.
"""

from __future__ import annotations

import datetime as dt
import html
import os
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

from docutils import nodes
from pybtex.plugin import register_plugin as register_pybtex_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.alpha import Style as AlphaStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)

STYLE = "book_author_year"  # the name of the pybtex styles and of the referencing style
LABEL_SEP = ", "  # between the authors and the year, in a label as in the in-text citation
ALT_LIMIT = 250  # characters: a longer caption gives only its first sentences as alt text
ALT_MIN_WORDS = 8  # ... as many as it takes to say this much
CODE_LICENCE = "MIT"
CONTENT_LICENCE = ("CC BY 4.0", "https://creativecommons.org/licenses/by/4.0/")
CITE_ANCHOR = "cite-this-book"  # the id of the intro's "Cite this book" section


# --- 1. Glued numbers -----------------------------------------------------------------------------

# What a failed computation prints: Python's repr of a missing value, and non-finite floats.
_BAD_GLUE = re.compile(r"(?<![\w.])(?:[+-]?(?:nan|inf)|None)(?![\w.])", re.IGNORECASE)


def bad_glued_text(text: str) -> str | None:
    """The token of ``text`` that shows a missing or non-finite value (nan, inf, None), if any.

    Only the capitalized ``None`` counts: "none" is an English word a chapter may glue.
    """
    for match in _BAD_GLUE.finditer(text):
        token = match.group(0)
        if token.lstrip("+-").lower() in ("nan", "inf") or token == "None":
            return token
    return None


def glue_key(role_text: str) -> str:
    """The key of a ``{glue:text}`` role's content ``[doc::]key[:format]`` (as MyST-NB reads it)."""
    key = role_text.rsplit(":", 1)[0] if ":" in role_text.replace("::", "") else role_text
    return key.split("::", 1)[-1]


def _keyed_text_role():
    """MyST-NB's ``{glue:text}`` role, which also records its glue key on the node it makes."""
    from myst_nb.ext.glue.roles import PasteTextRole

    class KeyedPasteTextRole(PasteTextRole):
        def run(self):
            result, messages = super().run()
            for node in result:
                if isinstance(node, nodes.inline) and "pasted-text" in node["classes"]:
                    node["glue_key"] = glue_key(self.text)
            return result, messages

    return KeyedPasteTextRole()


def typeset_glued_text(document: nodes.Node) -> list[tuple[nodes.inline, str]]:
    """Rewrite every glued text of ``document`` with :func:`lib.book.typeset.scientific`; return the
    glued nodes that show nan, inf or None, each with the offending token."""
    from lib.book.typeset import scientific

    bad = []
    for node in list(document.findall(nodes.inline)):
        if "pasted-text" not in node["classes"]:
            continue
        token = bad_glued_text(node.astext())
        if token is not None:
            bad.append((node, token))
        for leaf in list(node.findall(nodes.Text)):
            leaf.parent.replace(leaf, nodes.Text(scientific(str(leaf))))
    return bad


class TypesetGluedText(SphinxPostTransform):
    """Glued text with powers of ten instead of e-notation; a glued nan/inf/None is a warning.

    Runs after MyST-NB resolves glue from other pages (its post-transform has priority 5).
    """

    default_priority = 7

    def run(self, **kwargs) -> None:
        for node, token in typeset_glued_text(self.document):
            text = node.astext()
            key = node.get("glue_key", "(glued from another page)")
            shown = repr(token) if text.strip() == token else f"{token!r} in {text!r}"
            LOGGER.warning(
                "glued text %r on page %r shows %s: a page never prints a missing or "
                "non-finite value; fix it where the chapter computes it",
                key, self.env.docname, shown,
                location=node, type="book_pages", subtype="glue",
            )


# --- The execution table ---------------------------------------------------------------------

# MyST-NB's {nb-exec-table} headers and marks, as the book's execution page words them: the
# "Modified" column holds the time each execution ended; the marks are words, which every font
# (and the PDF) shows.
EXEC_HEADERS = {"Document": "Page", "Modified": "Executed at", "Run Time (s)": "Run time (s)"}
EXEC_MARKS = {"✅": "ok", "❌": "failed"}


def polish_exec_table(
    table: nodes.table, titles: dict[str, str], order: list[str] | None = None
) -> None:
    """Reword MyST-NB's execution table in place: headers and marks as above, each page's link
    text its title (``titles``: docname to title) instead of its docname; with ``order`` (the
    book's pages in reading order), the rows in that order instead of by file name (pages not in
    it last, by name)."""
    if order is not None:
        rank = {name: i for i, name in enumerate(order)}
        for body in table.findall(nodes.tbody):
            def key(row: nodes.row) -> tuple[int, str]:
                refs = list(row.findall(addnodes.pending_xref))
                name = refs[0].astext() if refs else ""
                return (rank.get(name, len(rank)), name)

            rows = sorted(body.children, key=key)
            body.children = []
            for row in rows:
                body += row
    for entry in table.findall(nodes.entry):
        for leaf in list(entry.findall(nodes.Text)):
            text = str(leaf)
            new = EXEC_HEADERS.get(text) or EXEC_MARKS.get(text)
            if new is not None:
                leaf.parent.replace(leaf, nodes.Text(new))
    for ref in table.findall(addnodes.pending_xref):
        docname = ref.astext()
        if docname in titles:
            ref.children = []
            ref += nodes.inline(text=titles[docname])


def reading_order(includes: dict[str, list[str]], root: str) -> list[str]:
    """The pages in the order a reader meets them: ``root``, then depth first through the
    toctrees (``includes``: docname to the docnames its toctrees list, as Sphinx records them)."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        order.append(name)
        for child in includes.get(name, []):
            visit(child)

    visit(root)
    return order


class ExecutionTable(SphinxPostTransform):
    """Build MyST-NB's execution table (its post-transform, priority 8, then finds nothing left
    to do) and reword it (:func:`polish_exec_table`)."""

    default_priority = 7

    def run(self, **kwargs) -> None:
        from myst_nb.ext.execution_tables import ExecutionStatsNode, make_stat_table
        from myst_nb.sphinx_ import NbMetadataCollector

        titles = {name: title.astext() for name, title in self.env.titles.items()}
        order = reading_order(self.env.toctree_includes, self.config.root_doc)
        for node in list(self.document.findall(ExecutionStatsNode)):
            table = make_stat_table(self.env.docname, NbMetadataCollector.get_doc_data(self.env))
            polish_exec_table(table, titles, order)
            node.replace_self(table)


# --- 2. Alt text from captions --------------------------------------------------------------------

_IMAGE_FILE = re.compile(r"[\w./\\:~-]+\.(png|jpe?g|gif|svg|webp|pdf)", re.IGNORECASE)
_HASH = re.compile(r"[0-9a-fA-F]{16,}")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


def alt_is_placeholder(alt: str | None, uri: str = "") -> bool:
    """True when ``alt`` says nothing to a reader: empty, the image's URI, a file path, a hash."""
    alt = (alt or "").strip()
    if not alt or alt == uri or (uri and Path(alt).name == Path(uri).name):
        return True
    return bool(_IMAGE_FILE.fullmatch(alt) or _HASH.fullmatch(alt))


def alt_from_caption(caption: str, limit: int = ALT_LIMIT) -> str:
    """A caption's text as alt text: whitespace collapsed; a caption longer than ``limit``
    characters gives its first sentences, as many as it takes to reach ``ALT_MIN_WORDS`` words
    within ``limit`` characters (a title such as "The poisoning window." alone says too little),
    and otherwise the text is cut at a word boundary before ``limit`` with an ellipsis."""
    text = " ".join(caption.split())
    if len(text) <= limit:
        return text
    alt = ""
    for sentence in _SENTENCE_END.split(text):
        longer = f"{alt} {sentence}".strip()
        if len(longer) > limit:
            break
        alt = longer
        if len(alt.split()) >= ALT_MIN_WORDS:
            return alt
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "…"


# A formula in alt text: TeX made readable (Unicode symbols, sub- and superscripts, fractions
# with a slash). Only what a caption's formula plausibly holds; any other command loses its
# backslash, and braces go.
_TEX_SYMBOLS = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε",
    "zeta": "ζ", "eta": "η", "theta": "θ", "vartheta": "ϑ", "iota": "ι", "kappa": "κ",
    "lambda": "λ", "mu": "μ", "nu": "ν", "xi": "ξ", "pi": "π", "rho": "ρ", "sigma": "σ",
    "varsigma": "ς", "tau": "τ", "upsilon": "υ", "phi": "ϕ", "varphi": "φ", "chi": "χ",
    "psi": "ψ", "omega": "ω", "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ",
    "Xi": "Ξ", "Pi": "Π", "Sigma": "Σ", "Upsilon": "Υ", "Phi": "Φ", "Psi": "Ψ", "Omega": "Ω",
    "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "approx": "≈",
    "sim": "∼", "simeq": "≃", "equiv": "≡", "propto": "∝", "ll": "≪", "gg": "≫",
    "lesssim": "≲", "gtrsim": "≳", "succeq": "⪰", "preceq": "⪯", "to": "→", "mapsto": "↦",
    "rightarrow": "→", "leftarrow": "←", "Rightarrow": "⇒", "iff": "⇔", "infty": "∞",
    "sum": "Σ", "prod": "∏", "int": "∫", "partial": "∂", "nabla": "∇", "cdot": "·",
    "times": "×", "odot": "⊙", "otimes": "⊗", "circ": "∘", "star": "⋆", "dagger": "†",
    "in": "∈", "ni": "∋", "notin": "∉", "subset": "⊂", "subseteq": "⊆", "cup": "∪",
    "cap": "∩", "bigcup": "⋃", "bigcap": "⋂", "perp": "⊥", "top": "⊤", "ell": "ℓ",
    "dots": "…", "ldots": "…", "cdots": "⋯", "pm": "±", "mp": "∓", "|": "‖", "Vert": "‖",
    "lVert": "‖", "rVert": "‖", "vert": "|", "lvert": "|", "rvert": "|", "mid": "|",
    "langle": "⟨", "rangle": "⟩", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉",
    "{": "{", "}": "}", "%": "%", "&": "&", "#": "#", "_": "_", "square": "□", "angle": "∠",
    "forall": "∀", "exists": "∃", "neg": "¬", "emptyset": "∅", "setminus": "∖",
    ",": " ", ";": " ", ":": " ", "!": "", " ": " ", "quad": " ", "qquad": " ",
}
_TEX_DROP = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr",
             "biggl", "biggr", "displaystyle", "textstyle", "scriptstyle", "limits", "nolimits",
             "rm", "bf", "it", "nonumber", "notag"}
_TEX_FONTS = {"mathbf", "mathrm", "mathit", "mathsf", "mathtt", "mathcal", "mathscr", "boldsymbol",
              "bm", "text", "textrm", "textbf", "textit", "mbox", "operatorname", "mathbb"}
_BLACKBOARD = {"R": "ℝ", "N": "ℕ", "Z": "ℤ", "Q": "ℚ", "C": "ℂ", "E": "𝔼", "P": "ℙ"}
_ACCENTS = {"bar": "\u0304", "overline": "\u0305", "hat": "\u0302", "widehat": "\u0302",
            "tilde": "\u0303", "widetilde": "\u0303", "dot": "\u0307", "ddot": "\u0308",
            "vec": "\u20d7", "overrightarrow": "\u20d7", "overleftarrow": "\u20d6"}
_FRACTIONS = {"frac", "tfrac", "dfrac", "cfrac"}
_SUB = dict(zip("0123456789+-−=()aehijklmnoprstuvx",
                "₀₁₂₃₄₅₆₇₈₉₊₋₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ", strict=True))
_SUP = dict(zip("0123456789+-−=()abcdefghijklmnoprstuvwxyzABDEGHIJKLMNOPRTUVW⊤",
                "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁻⁼⁽⁾ᵃᵇᶜᵈᵉᶠᵍʰⁱʲᵏˡᵐⁿᵒᵖʳˢᵗᵘᵛʷˣʸᶻᴬᴮᴰᴱᴳᴴᴵᴶᴷᴸᴹᴺᴼᴾᴿᵀᵁⱽᵂᵀ", strict=True))
_TEX_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|[{}_^&]|\\\\|[^\\{}_^&]")


class _TexReader:
    """A one-pass reader of a formula's tokens (see :func:`tex_to_text`)."""

    def __init__(self, tex: str) -> None:
        self.tokens = _TEX_TOKEN.findall(tex)
        self.pos = 0

    def _next(self) -> str | None:
        if self.pos >= len(self.tokens):
            return None
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _skip_spaces(self) -> None:
        while self.pos < len(self.tokens) and self.tokens[self.pos].isspace():
            self.pos += 1

    def argument(self) -> str:
        """The next group ``{...}`` or single token, as text."""
        self._skip_spaces()
        token = self._next()
        if token is None or token == "}":
            return ""
        if token == "{":
            return self.until("}")
        return self.atom(token)

    def until(self, end: str | None) -> str:
        """Text up to the closing ``end`` token (``None``: the end of the formula)."""
        out = []
        while True:
            token = self._next()
            if token is None or token == end:
                return "".join(out)
            if token in ("_", "^"):
                out.append(_script(self.argument(), _SUB if token == "_" else _SUP,
                                   token, previous="".join(out)))
            elif token == "{":
                out.append(self.until("}"))
            else:
                out.append(self.atom(token))

    def atom(self, token: str) -> str:
        """One token (a command with its arguments, or a character) as text."""
        if token == "&":
            return ", "
        if token == "\\\\":
            return "; "
        if not token.startswith("\\"):
            return token
        name = token[1:]
        if name in _TEX_SYMBOLS:
            return _TEX_SYMBOLS[name]
        if name in _TEX_DROP:
            return ""
        if name in _TEX_FONTS:
            body = self.argument()
            return "".join(_BLACKBOARD.get(c, c) for c in body) if name == "mathbb" else body
        if name in _ACCENTS:
            body = self.argument()
            return body + _ACCENTS[name] if len(body) == 1 else f"{body}{_ACCENTS[name]}"
        if name in _FRACTIONS:
            top, bottom = self.argument(), self.argument()
            return f"{_grouped(top)}/{_grouped(bottom)} "
        if name == "sqrt":
            return "√" + _grouped(self.argument())
        if name in ("begin", "end"):
            environment = self.argument()
            if "matrix" in environment:
                return "(" if name == "begin" else ")"
            return ""
        return name  # \log, \max, \exp, \sin, ... and anything unknown: the word


def _grouped(text: str) -> str:
    """``text`` in parentheses when it is more than one symbol (for a/b, √x)."""
    text = text.strip()
    return text if len(text) <= 1 or text.isalnum() else f"({text})"


def _script(text: str, table: dict[str, str], mark: str, previous: str = "") -> str:
    """A sub- or superscript: in Unicode sub/superscript characters when each has one, else
    ``_(text)`` / ``^(text)``. A superscript ⊤ is the transpose sign ᵀ."""
    text = text.strip()
    if mark == "^" and text in ("⊤", "T"):
        return "ᵀ"
    if text and all(c in table for c in text):
        return "".join(table[c] for c in text)
    return f"{mark}{_grouped(text)}"


def tex_to_text(tex: str) -> str:
    """A formula's TeX as readable plain text, for alt text (a screen reader reads the TeX itself
    aloud, backslashes and braces included): symbols and Greek letters in Unicode, sub- and
    superscripts in Unicode sub/superscript characters where they exist (``a_j^k`` → ``aⱼᵏ``),
    ``\\frac{a}{b}`` → ``a/b``, font commands dropped (``\\mathbf{1}`` → ``1``), a matrix as
    ``(a, b; c, d)``, and any other command as its name (``\\log`` → ``log``)."""
    if not isinstance(tex, str):
        raise ValueError(f"tex must be a string, got {type(tex).__name__}")
    text = " ".join(_TexReader(tex).until(None).split())
    return re.sub(r"\s+(?=[,;)])|(?<=\()\s+", "", text)


def caption_text(caption: nodes.Node) -> str:
    """A caption's plain text, each formula in it written by :func:`tex_to_text`."""
    parts = []
    for node in caption.findall(lambda n: isinstance(n, (nodes.Text, nodes.math))):
        if isinstance(node, nodes.math):
            parts.append(tex_to_text(node.astext()))
        elif not any(isinstance(a, nodes.math) for a in _ancestors(node)):
            parts.append(str(node))
    return "".join(parts)


def _ancestors(node: nodes.Node):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


class AltFromCaption(SphinxTransform):
    """Alt text for the images of captioned figures (see :func:`alt_from_caption`), formulas
    written as text (:func:`caption_text`)."""

    default_priority = 900

    def apply(self, **kwargs) -> None:
        for figure in self.document.findall(nodes.figure):
            captions = [c for c in figure.children if isinstance(c, nodes.caption)]
            if not captions or not captions[0].astext().strip():
                continue
            alt = alt_from_caption(caption_text(captions[0]))
            for image in figure.findall(nodes.image):
                if alt_is_placeholder(image.get("alt"), image.get("uri", "")):
                    image["alt"] = alt


# --- 3. Author-year citation labels ---------------------------------------------------------------


def _person_style():
    from sphinxcontrib.bibtex.style.referencing import PersonStyle

    return PersonStyle()


def cited_authors(entry) -> str:
    """The authors of ``entry`` as the author-year in-text citation writes them, as plain text
    ("Slutzky et al.", "Elkabetz and Cohen"): sphinxcontrib-bibtex's own template renders them,
    so a label and a citation cannot drift apart."""
    person = _person_style()
    template = person.author_or_editor_or_title(full=False)
    data = {"entry": entry, "style": SimpleNamespace(person=person)}
    return template.format_data(data).render_as("text")


def cited_year(entry) -> str:
    """The entry's year, or "n.d." as sphinxcontrib-bibtex writes a missing one."""
    return entry.fields.get("year", "n.d.")


def _suffix(index: int) -> str:
    """a, b, ..., z, aa, ab, ...: the letter that tells apart entries of one author-year."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("a") + rest) + letters
    return letters


def author_year_labels(entries: Iterable) -> dict[str, str]:
    """``{key: "Authors, Year"}`` for every entry; entries that share authors and year get the
    letters a, b, ... after the year, in the order given (the order of the .bib file, where the
    book's main sources come first)."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for entry in entries:
        groups[(cited_authors(entry), cited_year(entry))].append(entry)
    labels = {}
    for (authors, year), group in groups.items():
        for i, entry in enumerate(group):
            suffix = _suffix(i) if len(group) > 1 else ""
            labels[entry.key] = f"{authors}{LABEL_SEP}{year}{suffix}"
    return labels


class AuthorYearLabelStyle(BaseLabelStyle):
    """pybtex label style: author-year labels (:func:`author_year_labels`).

    A chapter's bibliography lists only the entries the chapter cites, but a letter must mean
    the same entry on every page, so the letters are decided over every entry of the book's
    ``.bib`` files (``universe``, filled when the builder starts), not over one list.
    """

    universe: ClassVar[dict] = {}

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = author_year_labels({**self.universe, **{e.key: e for e in entries}}.values())
        return [labels[e.key] for e in entries]


class AuthorYearStyle(AlphaStyle):
    """pybtex formatting style: alpha's entries and order (author, year, title), and
    author-year labels."""

    default_label_style = STYLE


def _label_year_node():
    from sphinxcontrib.bibtex.style.template import node

    @node
    def label_year(children, data):
        """The year of the entry's label with its letter ("2025b" of "Slutzky et al., 2025b")."""
        assert not children
        return Text(data["formatted_entry"].label.rsplit(LABEL_SEP, 1)[-1])

    return label_year


def _reference_style():
    """sphinxcontrib-bibtex's author-year referencing style, with the label's year (letter
    included) in parenthetical ({cite}, {cite:p}) and textual ({cite:t}) citations."""
    from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle
    from sphinxcontrib.bibtex.style.referencing.basic_author_year import (
        BasicAuthorYearParentheticalReferenceStyle as Parenthetical,
    )
    from sphinxcontrib.bibtex.style.referencing.basic_author_year import (
        BasicAuthorYearTextualReferenceStyle as Textual,
    )
    from sphinxcontrib.bibtex.style.template import join, join2, post_text, pre_text, reference

    label_year = _label_year_node()

    @dataclass
    class LabelParenthetical(Parenthetical):
        def inner(self, role_name):  # the parent's template, with label_year for year
            authors = self.person.author_or_editor_or_title(full="s" in role_name)
            cited = reference[join(sep=self.author_year_sep)[authors, label_year]]
            return join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
                pre_text, cited, post_text
            ]

    @dataclass
    class LabelTextual(Textual):
        def inner(self, role_name):  # the parent's template, with label_year for year
            cited = join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
                pre_text, reference[label_year], post_text
            ]
            return join(sep=self.text_reference_sep)[
                self.person.author_or_editor_or_title(full="s" in role_name),
                join[self.bracket.left, cited, self.bracket.right],
            ]

    @dataclass
    class BookAuthorYearReferenceStyle(AuthorYearReferenceStyle):
        def __post_init__(self):
            super().__post_init__()
            replaced = [
                LabelParenthetical(
                    bracket=self.bracket_parenthetical, person=self.person,
                    author_year_sep=self.author_year_sep, pre_text_sep=self.pre_text_sep,
                    post_text_sep=self.post_text_sep,
                ),
                LabelTextual(
                    bracket=self.bracket_textual, person=self.person,
                    text_reference_sep=self.text_reference_sep, pre_text_sep=self.pre_text_sep,
                    post_text_sep=self.post_text_sep,
                ),
            ]
            self.styles[:2] = replaced
            self.role_style.update(
                (name, style) for style in replaced for name in style.role_names()
            )

    return BookAuthorYearReferenceStyle


def register_citation_styles() -> None:
    """Register the pybtex label and formatting styles and the referencing style, all ``STYLE``."""
    from sphinxcontrib.bibtex.plugin import register_plugin

    register_pybtex_plugin("pybtex.style.labels", STYLE, AuthorYearLabelStyle, force=True)
    register_pybtex_plugin("pybtex.style.formatting", STYLE, AuthorYearStyle, force=True)
    register_plugin(
        "sphinxcontrib.bibtex.style.referencing", STYLE, _reference_style(), force=True
    )


def on_builder_inited(app: Sphinx) -> None:
    """Give the label style every entry of the book's .bib files; note the build's date, commit."""
    from pybtex.database import parse_file

    universe = {}
    for name in app.config.bibtex_bibfiles:
        universe.update(parse_file(Path(app.confdir) / name).entries)
    AuthorYearLabelStyle.universe = universe
    app.env.book_pages_build = build_info(Path(app.confdir))


# --- 4. The footer --------------------------------------------------------------------------------


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def build_info(root: Path) -> dict:
    """The build's date (UTC; ``SOURCE_DATE_EPOCH`` when set, for reproducible builds) and the git
    commit of ``root`` (full and short hash, and whether the work tree has uncommitted changes)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc) if epoch
            else dt.datetime.now(dt.timezone.utc))
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain") if commit else None
    return {
        "date": when.strftime("%Y-%m-%d %H:%M UTC"),
        "iso": when.strftime("%Y-%m-%dT%H:%MZ"),
        "commit": commit,
        "short": commit[:7] if commit else None,
        "dirty": bool(status),
    }


def footer_html(info: dict, *, pdf_url: str, cite_url: str, repository_url: str) -> str:
    """The footer line: build date, commit, PDF and Cite links, the licences."""
    esc = html.escape
    if info["commit"]:
        commit = (f'commit <a href="{esc(repository_url)}/commit/{esc(info["commit"])}">'
                  f'<code>{esc(info["short"])}</code></a>')
        if info["dirty"]:
            commit += ' <span class="book-dirty">(with uncommitted changes)</span>'
    else:
        commit = "a copy outside git (commit unknown)"
    licence_name, licence_url = CONTENT_LICENCE
    parts = [
        f'Built <time datetime="{info["iso"]}">{info["date"]}</time> from {commit}',
        f'<a href="{esc(pdf_url)}">PDF</a>',
        f'<a href="{esc(cite_url)}">Cite</a>',
        f'Text and figures: <a href="{licence_url}" rel="license">{licence_name}</a>',
        f'Code: <a href="{esc(repository_url)}/blob/main/LICENSE" rel="license">'
        f"{CODE_LICENCE}</a>",
    ]
    return '<p class="book-footer">' + " · ".join(parts) + "</p>"


def cite_url(root_url: str) -> str:
    """The link to the intro's "Cite this book" section, from Sphinx's ``pathto(root_doc)``: on
    the intro itself that is "#" (the page itself), whose fragment the anchor replaces (appended,
    it gave "##cite-this-book", which goes nowhere)."""
    return f"{root_url.split('#', 1)[0]}#{CITE_ANCHOR}"


def on_page_context(app: Sphinx, pagename: str, templatename, context: dict, doctree) -> None:
    """Put the footer line, with links relative to this page, into the theme's extra footer."""
    pathto = context["pathto"]
    context["theme_extra_footer"] = footer_html(
        app.env.book_pages_build,
        pdf_url=pathto("book.pdf", 1),
        cite_url=cite_url(pathto(app.config.root_doc)),
        repository_url=app.config.html_theme_options.get("repository_url", "").rstrip("/"),
    )


def setup(app: Sphinx) -> dict:
    app.setup_extension("myst_nb")
    app.setup_extension("sphinxcontrib.bibtex")
    register_citation_styles()
    app.add_role_to_domain("glue", "text", _keyed_text_role(), override=True)
    app.add_post_transform(TypesetGluedText)
    app.add_post_transform(ExecutionTable)
    app.add_transform(AltFromCaption)
    app.add_css_file("book.css", priority=900)
    app.add_js_file("book.js", priority=900, defer="defer")
    app.connect("builder-inited", on_builder_inited)
    app.connect("html-page-context", on_page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
