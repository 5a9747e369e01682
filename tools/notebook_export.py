"""Chapters as plain Jupyter notebooks: the downloadable ``.ipynb`` of every page.

A chapter is a MyST notebook. Its markdown carries syntax that only Sphinx understands
(``{prf:theorem}`` and ``{exercise}`` directives, ``{cite}``, ``{ref}``, ``{eq}`` and
``{glue:text}`` roles, ``(label)=`` targets, ``$$ ... $$ (label)`` equation labels, colon fences,
``[x]{.param}`` spans); Jupyter and Colab would show it literally. This module rewrites every
markdown cell into plain Jupyter markdown and keeps the code cells, with their outputs, as
myst-nb executed them during the build:

* statements (theorem, lemma, ..., assumption) and admonitions become a ``<blockquote>`` that
  starts with a bold title ("**Theorem 7.1 (title).**", the book's numbering where Sphinx gave
  one); exercises likewise; solutions and dropdowns fold into ``<details>``. HTML blocks with
  blank lines around the markdown are used rather than ``>`` prefixes, because Jupyter extracts
  the math of a cell before it reads the markdown, and a ``>`` inside a multi-line formula would
  end up in the formula;
* citations become author-year text from ``book/references.bib`` ("Slutzky et al. (2025)" for
  ``{cite:t}``, "(Slutzky et al., 2025)" for ``{cite}``/``{cite:p}``) and ``{bibliography}``
  becomes the list of the works the notebook cites;
* cross-references become their text (a section's title, "Fig. 7.1", "(7.2)") linked to the page
  of the online book where its address is known;
* glued numbers become the value the build glued, formatted with the role's format spec and
  written by :func:`lib.book.typeset.scientific` as on the site;
* equation labels become ``\\tag{7.2}`` (or are dropped where no number is known).

Code cells are not touched, so a notebook runs top to bottom after its install cell exactly as
the chapter does. Run as a script it converts the executed notebooks of the last build:
``python tools/notebook_export.py --out DIR [NAME ...]``.
"""

from __future__ import annotations

import ast
import codecs
import json
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# --------------------------------------------------------------------------------------------
# The book's targets: what a label names, where it is online, and its number.


@dataclass(frozen=True)
class Target:
    """A labelled thing of the book: a section, figure, equation, statement or exercise."""

    docname: str  # "book/poisoning-theorem"
    anchor: str  # the HTML id on that page ("" for the page itself)
    kind: str  # "section", "figure", "displaymath", "theorem", "exercise", ...
    title: str = ""  # a section's title, a figure's caption, a statement's or exercise's title
    number: str = ""  # "7.1" where Sphinx numbered it, else ""


# Sphinx's defaults, overridden by the build's numfig_format.
_NUMFIG_FORMAT = {"figure": "Fig. %s", "table": "Table %s", "code-block": "Listing %s",
                  "section": "Section %s", "exercise": "Exercise %s"}


@dataclass
class BookIndex:
    """Every target of the book, the titles of its pages and the address of the online book."""

    targets: dict[str, Target] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)  # docname -> page title
    site_url: str = ""  # "https://owner.github.io/name/" or "" (then no links)
    numfig_format: dict[str, str] = field(default_factory=lambda: dict(_NUMFIG_FORMAT))

    def url(self, docname: str, anchor: str = "") -> str:
        """The online address of ``docname`` (and of ``anchor`` on it), or "" if unknown."""
        if not self.site_url:
            return ""
        return f"{self.site_url}{docname}.html" + (f"#{anchor}" if anchor else "")

    def find(self, label: str) -> Target | None:
        """The target called ``label``; Sphinx lowercases ``ref`` labels, so try that too."""
        return self.targets.get(label) or self.targets.get(label.lower())


_OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*?)[ \t]*$")
_SOURCE_TARGET = re.compile(r"^\((?P<label>[^()\s]+)\)=[ \t]*\n(?:[ \t]*\n)*#+[ \t]+(?P<title>.+)$",
                            re.MULTILINE)
_SOURCE_DIRECTIVE = re.compile(
    r"^(?:`{3,}|:{3,})\{(?P<name>[^{}\s]+)\}[ \t]*(?P<argument>.*)\n(?P<options>(?::[\w-]+:.*\n)*)",
    re.MULTILINE,
)
_SOURCE_EQUATION = re.compile(r"\$\$[ \t]*\((?P<label>[^()\s]+)\)[ \t]*$", re.MULTILINE)


def index_sources(sources: Mapping[str, str]) -> BookIndex:
    """The targets that the MyST sources themselves name ({docname: text}), without numbers.

    Used where no Sphinx environment is at hand, and for what the environment does not keep
    (the titles of statements and exercises).
    """
    from docutils.nodes import make_id

    index = BookIndex()
    for docname, text in sources.items():
        heading = re.search(r"^#[ \t]+(.+)$", text, re.MULTILINE)
        if heading:
            index.titles[docname] = heading.group(1).strip()
        for match in _SOURCE_TARGET.finditer(text):
            title = match.group("title").strip()
            index.targets[match.group("label")] = Target(docname, match.group("label"),
                                                         "section", title)
        for match in _SOURCE_DIRECTIVE.finditer(text):
            options = dict(_OPTION.match(line).group("key", "value")  # type: ignore[union-attr]
                           for line in match.group("options").splitlines())
            label = options.get("label") or options.get("name")
            if label:
                kind = match.group("name").removeprefix("prf:")
                index.targets[label] = Target(docname, label, kind, match.group("argument"))
        for match in _SOURCE_EQUATION.finditer(text):
            label = match.group("label")
            index.targets[label] = Target(docname, make_id(f"equation-{label}"), "displaymath")
    return index


def _number(env, docname: str, figtype: str, anchor: str) -> str:
    numbers = env.toc_fignumbers.get(docname, {}).get(figtype, {}).get(anchor)
    return ".".join(str(n) for n in numbers) if numbers else ""


def _figtype_of(env, docname: str, anchor: str) -> tuple[str, str]:
    for figtype, numbers in env.toc_fignumbers.get(docname, {}).items():
        if anchor in numbers:
            return figtype, ".".join(str(n) for n in numbers[anchor])
    return "", ""


def index_sphinx(env, sources: Mapping[str, str], site_url: str) -> BookIndex:
    """The targets of a Sphinx build environment, numbered as on the site.

    Sections, figures and exercises come from the ``std`` domain's labels (numbers from
    ``env.toc_fignumbers``), equations from the ``math`` domain, statements from sphinx-proof's
    ``env.proof_list``; titles that Sphinx does not keep come from ``sources``.
    """
    from docutils.nodes import make_id

    index = index_sources(sources)
    index.site_url = site_url
    index.numfig_format.update(getattr(env.config, "numfig_format", None) or {})
    index.titles.update({doc: title.astext() for doc, title in env.titles.items()})
    from_source = dict(index.targets)
    for label, (docname, anchor, title) in env.domaindata["std"]["labels"].items():
        if not docname:
            continue
        figtype, number = _figtype_of(env, docname, anchor)
        known = from_source.get(label)
        kind = figtype or (known.kind if known else "section")
        if kind == "exercise" and known:
            title = known.title  # the std label's text is only "Exercise"
        index.targets[label] = Target(docname, anchor, kind, " ".join(title.split()), number)
    for label, (docname, _) in env.domaindata["math"]["objects"].items():
        anchor = make_id(f"equation-{label}")  # the id Sphinx gives the equation (lowercase)
        index.targets[label] = Target(docname, anchor, "displaymath", "",
                                      _number(env, docname, "displaymath", anchor))
    for label, info in getattr(env, "proof_list", {}).items():
        known = from_source.get(label)
        number = "" if info.get("nonumber") else _number(env, info["docname"],
                                                          info["countertype"], label)
        index.targets[label] = Target(info["docname"], label, info["realtype"],
                                      known.title if known else "", number)
    return index


def site_url_of(repository_url: str, html_baseurl: str = "") -> str:
    """Where the online book lives: ``html_baseurl`` if set, else the GitHub Pages address of
    ``https://github.com/OWNER/NAME`` (``https://OWNER.github.io/NAME/``), else ""."""
    if html_baseurl:
        return html_baseurl.rstrip("/") + "/"
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)/?", repository_url or "")
    return f"https://{match.group(1)}.github.io/{match.group(2)}/" if match else ""


# --------------------------------------------------------------------------------------------
# Citations.


def _latex_text(text: str) -> str:
    """BibTeX field text as plain Unicode: accents decoded, braces and \\url dropped."""
    import latexcodec  # noqa: F401  (registers the "ulatex" codec; a pybtex dependency)

    text = re.sub(r"\\url\s*\{([^}]*)\}", r"\1", text)
    text = codecs.decode(text, "ulatex")
    return " ".join(text.replace("{", "").replace("}", "").split())


@dataclass(frozen=True)
class Reference:
    """One entry of the bibliography, as the notebooks print it."""

    surnames: tuple[str, ...]
    names: tuple[str, ...]  # "Yonatan Slutzky", ...
    year: str
    title: str
    venue: str
    url: str

    @property
    def authors(self) -> str:
        """"Slutzky", "Elkabetz and Cohen" or "Slutzky et al." (the author-year style)."""
        if len(self.surnames) > 2:
            return f"{self.surnames[0]} et al."
        return " and ".join(self.surnames) or "Anonymous"

    def full(self) -> str:
        """The entry in a reference list: names, title, venue, year, address."""
        names = list(self.names)
        who = ", ".join(names[:-1]) + (", and " if len(names) > 2 else " and ") + names[-1] \
            if len(names) > 1 else "".join(names)
        parts = [f"{who}." if who else "", f"{self.title}."]
        parts.append(f"*{self.venue}*, {self.year}." if self.venue else f"{self.year}.")
        if self.url:
            parts.append(f"<{self.url}>")
        return " ".join(p for p in parts if p)


def read_bibliography(path: Path) -> dict[str, Reference]:
    """The entries of a BibTeX file, by key (pybtex reads it, as sphinxcontrib-bibtex does)."""
    from pybtex.database import parse_file

    try:  # the site's labels: authors and year, with a/b where two entries share them
        from book_pages import LABEL_SEP, author_year_labels
    except ImportError:  # tools/ not on the path: plain years
        LABEL_SEP, author_year_labels = ", ", None
    parsed = parse_file(str(path)).entries
    labels = author_year_labels(parsed.values()) if author_year_labels else {}
    entries = {}
    for key, entry in parsed.items():
        persons = entry.persons.get("author") or entry.persons.get("editor") or []
        surnames = tuple(_latex_text(" ".join(p.prelast_names + p.last_names)) for p in persons)
        names = tuple(_latex_text(" ".join(p.first_names + p.middle_names + p.prelast_names
                                           + p.last_names)) for p in persons)
        fields = entry.fields
        venue = next((fields[f] for f in ("journal", "booktitle", "howpublished", "institution",
                                          "publisher") if f in fields), "")
        venue, url = _latex_text(venue), fields.get("url", "")
        if re.fullmatch(r"https?://\S+", venue):  # howpublished = {\url{...}}: an address
            venue, url = "", url or venue
        year = labels[key].rsplit(LABEL_SEP, 1)[1] if key in labels else fields.get("year", "n.d.")
        entries[key] = Reference(surnames, names, year,
                                 _latex_text(fields.get("title", key)), venue, url)
    return entries


_CITE_STYLES: dict[str, tuple[Callable[[Reference], str], str, str]] = {
    # style: (one entry's text, separator, brackets)
    "t": (lambda r: f"{r.authors} ({r.year})", ", ", ""),
    "p": (lambda r: f"{r.authors}, {r.year}", "; ", "()"),
    "author": (lambda r: r.authors, ", ", ""),
    "year": (lambda r: r.year, ", ", ""),
}


def cite(keys: Iterable[str], style: str, bibliography: Mapping[str, Reference]) -> str:
    """Author-year citation text: "Slutzky et al. (2025)" (``t``), "(Slutzky et al., 2025)"
    (``p``); several keys are joined with "; " (``p``) or ", " (``t``). An unknown key is
    shown as it is."""
    one, separator, brackets = _CITE_STYLES[style]
    text = separator.join(one(bibliography[k]) if k in bibliography else k for k in keys)
    return f"{brackets[0]}{text}{brackets[1]}" if brackets else text


def bibliography_list(keys: Iterable[str], bibliography: Mapping[str, Reference]) -> str:
    """A markdown list of the entries ``keys``, sorted by authors and year."""
    known = sorted({k for k in keys if k in bibliography},
                   key=lambda k: (bibliography[k].surnames, bibliography[k].year, k))
    return "\n".join(f"- {bibliography[k].full()}" for k in known)


# --------------------------------------------------------------------------------------------
# Glued values.


def _scientific() -> Callable[[str], str]:
    """``lib.book.typeset.scientific``, or the identity where lib is not importable."""
    try:
        from lib.book.typeset import scientific
    except ImportError:
        return lambda text: text
    return scientific


def format_glued(text: str, spec: str) -> str:
    """A glued ``text/plain`` value as ``{glue:text}`key:spec``` shows it.

    The text is read back as a Python literal where it is one (so "'abc'" loses its quotes),
    converted to the type the spec's last character asks for, formatted, and any e-notation
    rewritten as a power of ten (``lib.book.typeset.scientific``).
    """
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if not spec:
        return _scientific()(str(value))
    kind = spec[-1]
    if kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    elif kind == "s":
        value = str(value)
    return _scientific()(format(value, spec))


def glue_data(notebook, glue_file: Path | None = None) -> dict[str, dict]:
    """The glued values of an executed notebook: ``{name: mime bundle}``.

    myst-nb moves each glued output out of the notebook into ``<name>.glue.json`` beside it;
    values still in the notebook (an output whose metadata has ``scrapbook``) are read too.
    """
    data: dict[str, dict] = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            scrap = output.get("metadata", {}).get("scrapbook")
            if scrap:
                prefix = scrap.get("mime_prefix", "")
                data[scrap["name"]] = {k.removeprefix(prefix): v
                                       for k, v in output.get("data", {}).items()}
    if glue_file is not None and glue_file.is_file():
        stored = json.loads(glue_file.read_text(encoding="utf-8"))
        data.update({name: output.get("data", {}) for name, output in stored.items()})
    return data


# --------------------------------------------------------------------------------------------
# The conversion of one markdown cell.


@dataclass
class Context:
    """What the conversion of one page needs."""

    docname: str = ""
    index: BookIndex = field(default_factory=BookIndex)
    bibliography: Mapping[str, Reference] = field(default_factory=dict)
    glue: Mapping[str, Mapping] = field(default_factory=dict)
    cited: list[str] = field(default_factory=list)  # every key the page cites, in order
    attachments: dict[str, dict] = field(default_factory=dict)  # images of the current cell


def _link(text: str, url: str) -> str:
    text = " ".join(text.split())
    if not url:
        return text
    return "[" + text.replace("[", "\\[").replace("]", "\\]") + f"]({url})"


def _explicit(content: str) -> tuple[str, str]:
    """``"text <target>"`` -> ``("text", "target")``; ``"target"`` -> ``("", "target")``."""
    match = re.fullmatch(r"(?s)(.*?)\s*<([^<>]+)>\s*", content)
    if match and match.group(1):
        return match.group(1), match.group(2).strip()
    return "", content.strip()


def _numbered(target: Target, index: BookIndex) -> str:
    """"Fig. 7.1", "Exercise 7.1", "Theorem 7.1" or, unnumbered, "Theorem"."""
    fmt = index.numfig_format.get(target.kind, target.kind.capitalize() + " %s")
    text = fmt % target.number if target.number else fmt.replace("%s", "").strip()
    return text[:1].upper() + text[1:]


def role_ref(content: str, ctx: Context) -> str:
    """``{ref}``: the explicit text or the target's title, linked online."""
    text, label = _explicit(content)
    target = ctx.index.find(label)
    if target is None:
        return text or label
    return _link(text or target.title or label, ctx.index.url(target.docname, target.anchor))


def role_numref(content: str, ctx: Context) -> str:
    """``{numref}``: "Fig. 7.1" (the numfig format), or the explicit text with its ``%s`` or
    ``{number}`` filled in."""
    text, label = _explicit(content)
    target = ctx.index.find(label)
    if target is None:
        return text.replace("%s", "").replace("{number}", "").strip() or label
    number = target.number
    if target.kind == "section" and not number:
        return role_ref(content, ctx)
    shown = (text.replace("%s", number).replace("{number}", number)
             .replace("{name}", target.title) if text else _numbered(target, ctx.index))
    return _link(shown, ctx.index.url(target.docname, target.anchor))


def role_eq(content: str, ctx: Context) -> str:
    """``{eq}``: "(7.2)" linked to the equation online; the label if it has no number."""
    text, label = _explicit(content)
    target = ctx.index.find(label)
    if target is None:
        return text or f"({label})"
    shown = text or f"({target.number or label})"
    return _link(shown, ctx.index.url(target.docname, target.anchor))


def role_doc(content: str, ctx: Context) -> str:
    """``{doc}``: the page's title (or the explicit text), linked online."""
    text, path = _explicit(content)
    path = path.removesuffix(".md").removesuffix(".ipynb")
    docname = path.lstrip("/") if path.startswith("/") else posixpath.normpath(
        posixpath.join(posixpath.dirname(ctx.docname), path))
    return _link(text or ctx.index.titles.get(docname, docname), ctx.index.url(docname))


def role_prf_ref(content: str, ctx: Context) -> str:
    """``{prf:ref}``: "Theorem 7.1", or "Proposition (its title)" for an unnumbered one."""
    text, label = _explicit(content)
    target = ctx.index.find(label)
    if target is None:
        return text or label
    shown = text or _numbered(target, ctx.index)
    if not text and not target.number and target.title:
        shown += f" ({convert_inline(target.title, ctx)})"
    return _link(shown, ctx.index.url(target.docname, target.anchor))


def role_cite(style: str) -> Callable[[str, Context], str]:
    def render(content: str, ctx: Context) -> str:
        keys = [k.strip() for k in content.split(",") if k.strip()]
        ctx.cited.extend(keys)
        return cite(keys, style, ctx.bibliography)

    return render


def role_glue(content: str, ctx: Context) -> str:
    """``{glue:text}`name:spec``` (and ``{glue}``): the glued value; a missing one (a notebook
    converted without its build) becomes the name, as code."""
    key, _, spec = content.rpartition(":") if ":" in content.split("::")[-1] else (content, "", "")
    key = key.split("::")[-1]
    bundle = ctx.glue.get(key)
    if bundle is None or "text/plain" not in bundle:
        return f"`{key}`"
    return format_glued(bundle["text/plain"], spec)


def role_glue_md(content: str, ctx: Context) -> str:
    key = content.split(":")[0].split("::")[-1]
    bundle = ctx.glue.get(key, {})
    return bundle.get("text/markdown") or role_glue(key, ctx)


def _plain_role(content: str, ctx: Context) -> str:
    text, target = _explicit(content)
    return convert_inline(text or target, ctx)


def _code_role(content: str, ctx: Context) -> str:
    text, target = _explicit(content)
    return f"`{text or target.lstrip('~')}`"


ROLES: dict[str, Callable[[str, Context], str]] = {
    "ref": role_ref,
    "numref": role_numref,
    "eq": role_eq,
    "doc": role_doc,
    "prf:ref": role_prf_ref,
    "cite": role_cite("p"),
    "cite:p": role_cite("p"),
    "cite:ps": role_cite("p"),
    "cite:t": role_cite("t"),
    "cite:ts": role_cite("t"),
    "cite:author": role_cite("author"),
    "cite:year": role_cite("year"),
    "glue": role_glue,
    "glue:": role_glue,
    "glue:any": role_glue,
    "glue:text": role_glue,
    "glue:md": role_glue_md,
    "math": lambda content, ctx: f"${content}$",
    "sub": lambda content, ctx: f"<sub>{content}</sub>",
    "sup": lambda content, ctx: f"<sup>{content}</sup>",
    "kbd": lambda content, ctx: f"<kbd>{content}</kbd>",
    "code": lambda content, ctx: f"`{content}`",
}
_CODE_ROLE_NAMES = {"func", "class", "meth", "mod", "attr", "obj", "data", "exc", "any",
                    "command", "file", "envvar"}

# One pass over the text: a role, a `code span` (kept as it is), or a [span]{attributes}.
_INLINE = re.compile(
    r"\{(?P<role>[A-Za-z][\w:+.-]*)\}`(?P<content>[^`]*)`"
    r"|(?P<ticks>`+)(?P<code>.+?)(?<!`)(?P=ticks)(?!`)"
    r"|\[(?P<span>[^\[\]]*)\]\{(?P<attrs>[.#][^{}]*|[\w-]+=[^{}]*)\}",
    re.DOTALL,
)


def convert_inline(text: str, ctx: Context) -> str:
    """``text`` with every MyST role and ``[span]{.attrs}`` written as plain markdown."""

    def replace(match: re.Match) -> str:
        if match.group("role"):
            name, content = match.group("role"), match.group("content")
            if name in ROLES:
                return ROLES[name](content, ctx)
            if name.startswith("py:") or name in _CODE_ROLE_NAMES:
                return _code_role(content, ctx)
            return _plain_role(content, ctx)
        if match.group("ticks"):
            return match.group(0)
        return convert_inline(match.group("span"), ctx)

    return _INLINE.sub(replace, text)


@dataclass
class Directive:
    """A parsed ```` ```{name} argument ```` block: its options and its (raw MyST) body."""

    name: str
    argument: str
    options: dict[str, str]
    body: str


def _parse_directive(name: str, argument: str, lines: list[str]) -> Directive:
    options: dict[str, str] = {}
    i = 0
    if lines and lines[0].strip() == "---":  # options as a YAML block
        import yaml

        end = next((j for j in range(1, len(lines)) if lines[j].strip() == "---"), len(lines))
        loaded = yaml.safe_load("\n".join(lines[1:end])) or {}
        options = {str(k): str(v) for k, v in loaded.items()}
        i = end + 1
    while i < len(lines) and (match := _OPTION.match(lines[i])):
        options[match.group("key")] = match.group("value")
        i += 1
    return Directive(name, argument, options, "\n".join(lines[i:]).strip("\n"))


def _html_block(tag: str, head: str, body: str) -> str:
    """``<tag>`` around markdown: blank lines around the body, so Jupyter reads it as markdown."""
    parts = [f"<{tag}>"] + ([head] if head else [])
    if tag == "details":
        return "\n".join(parts) + f"\n\n{body}\n\n</{tag}>"
    return f"<{tag}>\n\n" + "\n\n".join(p for p in (head, body) if p) + f"\n\n</{tag}>"


def _title_with(label: str, title: str) -> str:
    return f"{label} ({title})" if title else label


def _target(directive: Directive, ctx: Context, kind: str) -> Target:
    label = directive.options.get("label") or directive.options.get("name") or ""
    known = ctx.index.find(label) if label else None
    return known or Target(ctx.docname, label, kind, directive.argument)


def directive_statement(directive: Directive, ctx: Context) -> str:
    """A prf: statement: **Theorem 7.1 (title).** then its body, in a blockquote."""
    kind = directive.name.removeprefix("prf:")
    body = convert_markdown(directive.body, ctx)
    if kind == "proof":
        head = _title_with("*Proof.*", convert_inline(directive.argument, ctx))
        return _html_block("blockquote", head, body + " $\\blacksquare$")
    target = _target(directive, ctx, kind)
    name = kind.capitalize() if "nonumber" in directive.options else _numbered(target, ctx.index)
    title = convert_inline(directive.argument, ctx)
    return _html_block("blockquote", f"**{_title_with(name, title)}.**", body)


def directive_exercise(directive: Directive, ctx: Context) -> str:
    target = _target(directive, ctx, "exercise")
    name = "Exercise" if "nonumber" in directive.options else _numbered(target, ctx.index)
    head = f"**{_title_with(name, convert_inline(directive.argument, ctx))}.**"
    return _html_block("blockquote", head, convert_markdown(directive.body, ctx))


def directive_solution(directive: Directive, ctx: Context) -> str:
    """A solution folds away under "Solution to Exercise 7.1 (title)"."""
    exercise = ctx.index.find(directive.argument.strip())
    if exercise is None:
        heading = "Solution"
    else:
        heading = "Solution to " + _title_with(_numbered(exercise, ctx.index),
                                               convert_inline(exercise.title, ctx))
    return _html_block("details", f"<summary><b>{heading}</b></summary>",
                       convert_markdown(directive.body, ctx))


def directive_dropdown(directive: Directive, ctx: Context) -> str:
    title = convert_inline(directive.argument, ctx) or "Details"
    return _html_block("details", f"<summary><b>{title}</b></summary>",
                       convert_markdown(directive.body, ctx))


def directive_admonition(directive: Directive, ctx: Context) -> str:
    """``{note}``, ``{tip}``, ..., ``{admonition} title``: a bold title and the body, quoted;
    with ``:class: dropdown``, folded."""
    body = directive.body
    if directive.name in _TITLED:
        title = convert_inline(directive.argument, ctx)
    else:  # {note} Text: the text on the first line is the start of the body
        title, body = "", "\n".join(p for p in (directive.argument, body) if p)
    title = title or directive.name.replace("seealso", "see also").capitalize()
    if "dropdown" in directive.options.get("class", "").split():
        return directive_dropdown(Directive("dropdown", title, {}, body), ctx)
    return _html_block("blockquote", f"**{title}**", convert_markdown(body, ctx))


def _attach(ctx: Context, name: str, bundle: Mapping) -> str:
    """Store an image as an attachment of the cell; the markdown names it ``attachment:``."""
    for mime, ext in (("image/png", "png"), ("image/jpeg", "jpg"), ("image/svg+xml", "svg")):
        if mime in bundle:
            filename = re.sub(r"[^\w.-]", "-", name) + f".{ext}"
            ctx.attachments[filename] = {mime: bundle[mime]}
            return f"attachment:{filename}"
    return ""


def _caption(directive: Directive, ctx: Context, kind: str) -> str:
    caption = convert_markdown(directive.body, ctx)
    label = directive.options.get("name") or directive.options.get("label") or ""
    target = ctx.index.find(label) if label else None
    if target and target.number:
        return f"*{_numbered(target, ctx.index)}: {caption}*" if caption else ""
    return f"*{caption}*" if caption else ""


def directive_figure(directive: Directive, ctx: Context) -> str:
    alt = directive.options.get("alt") or " ".join(directive.body.split()) or "figure"
    image = f"![{alt}]({directive.argument})"
    return "\n\n".join(p for p in (image, _caption(directive, ctx, "figure")) if p)


def directive_glue(directive: Directive, ctx: Context) -> str:
    """``{glue}``, ``{glue:figure}``, ``{glue:md}``, ``{glue:math}``: the glued output."""
    key = directive.argument.split("::")[-1].strip()
    bundle = ctx.glue.get(key)
    if bundle is None:
        return f"`{key}`"
    if directive.name == "glue:math" and "text/latex" in bundle:
        return _display_math(bundle["text/latex"].strip().strip("$"),
                             directive.options.get("label", ""), ctx)
    if "text/markdown" in bundle and directive.name != "glue:figure":
        return bundle["text/markdown"]
    source = _attach(ctx, key, bundle)
    if source:
        alt = directive.options.get("alt") or " ".join(directive.body.split()) or key
        image = f"![{alt}]({source})"
        return "\n\n".join(p for p in (image, _caption(directive, ctx, "figure")) if p)
    return format_glued(bundle.get("text/plain", ""), "")


def directive_math(directive: Directive, ctx: Context) -> str:
    return _display_math(directive.body, directive.options.get("label", ""), ctx)


def directive_code(directive: Directive, ctx: Context) -> str:
    return f"```{directive.argument}\n{directive.body}\n```"


def directive_bibliography(directive: Directive, ctx: Context) -> str:
    keys = ctx.bibliography.keys() if "all" in directive.options else ctx.cited
    return bibliography_list(keys, ctx.bibliography)


def directive_other(directive: Directive, ctx: Context) -> str:
    """Any other directive: its argument in bold, then its body."""
    head = f"**{convert_inline(directive.argument, ctx)}**" if directive.argument else ""
    return "\n\n".join(p for p in (head, convert_markdown(directive.body, ctx)) if p)


_STATEMENTS = ("theorem", "lemma", "proposition", "corollary", "definition", "assumption",
               "remark", "algorithm", "axiom", "conjecture", "criterion", "example", "property",
               "observation", "notation", "proof")
_ADMONITIONS = ("admonition", "note", "tip", "hint", "important", "warning", "caution",
                "attention", "danger", "error", "seealso", "margin", "sidebar", "epigraph",
                "pull-quote", "topic")
_TITLED = ("admonition", "margin", "sidebar", "topic")  # their argument is a title
DIRECTIVES: dict[str, Callable[[Directive, Context], str]] = {
    **{f"prf:{kind}": directive_statement for kind in _STATEMENTS},
    **{name: directive_admonition for name in _ADMONITIONS},
    "exercise": directive_exercise,
    "solution": directive_solution,
    "dropdown": directive_dropdown,
    "figure": directive_figure,
    "image": directive_figure,
    "glue": directive_glue,
    "glue:": directive_glue,
    "glue:any": directive_glue,
    "glue:figure": directive_glue,
    "glue:md": directive_glue,
    "glue:math": directive_glue,
    "math": directive_math,
    "code": directive_code,
    "code-block": directive_code,
    "sourcecode": directive_code,
    "bibliography": directive_bibliography,
    "toctree": lambda directive, ctx: "",
    "tableofcontents": lambda directive, ctx: "",
}


def render_directive(directive: Directive, ctx: Context) -> str:
    return DIRECTIVES.get(directive.name, directive_other)(directive, ctx)


# A numbered amsmath environment carries its own numbers; a \tag outside it would be a second one.
_NUMBERED_ENV = re.compile(r"\\begin\{(equation|align|gather|multline|flalign|alignat)\}")


def _display_math(body: str, label: str, ctx: Context) -> str:
    """``$$ body $$`` with ``\\tag{7.2}`` where the label has a number, else without it."""
    target = ctx.index.find(label) if label else None
    tag = ""
    if target and target.number and not _NUMBERED_ENV.search(body):
        tag = f" \\tag{{{target.number}}}"
    return f"$$\n{body.strip()}{tag}\n$$"


_DIRECTIVE_OPEN = re.compile(
    r"^ {0,3}(?P<fence>`{3,}|~{3,}|:{3,})\{(?P<name>[^{}\s]+)\}[ \t]*(?P<argument>.*?)[ \t]*$")
_CODE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[^`]*$")
_LABEL_LINE = re.compile(r"^ {0,3}\([^()\s]+\)=[ \t]*$")
_ENV_OPEN = re.compile(r"^ {0,3}\\begin\{(?P<env>[^{}]+)\}")


def _closing(lines: list[str], start: int, fence: str) -> int:
    """The index of the line that closes ``fence`` (the same character, at least as many),
    or ``len(lines)``."""
    pattern = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
    return next((i for i in range(start, len(lines)) if pattern.match(lines[i])), len(lines))


def _math_close(line: str) -> tuple[str, str, str]:
    """A line that closes display math: (formula before the $$, label, text after it)."""
    body, _, rest = line.partition("$$")
    match = re.fullmatch(r"\s*\((?P<label>[^()\s]+)\)\s*", rest)
    return (body, match.group("label"), "") if match else (body, "", rest.strip())


def _math_block(lines: list[str], start: int, ctx: Context) -> tuple[str, int]:
    """The display math that starts at ``lines[start]``; the index of the line after it."""
    first = lines[start].strip()[2:]
    if "$$" in first:  # $$ x $$ (label) on one line
        body, label, rest = _math_close(first)
        end, inner = start, [body]
    else:
        end = next((i for i in range(start + 1, len(lines)) if "$$" in lines[i]), len(lines))
        body, label, rest = _math_close(lines[end]) if end < len(lines) else ("", "", "")
        inner = [first, *lines[start + 1:end], body]
    block = _display_math("\n".join(inner), label, ctx)
    return block + (f"\n{convert_inline(rest, ctx)}" if rest else ""), end + 1


def convert_markdown(text: str, ctx: Context) -> str:
    """One MyST markdown text as plain Jupyter markdown (see the module's doc)."""
    lines = text.split("\n")
    out: list[str] = []
    prose: list[str] = []

    def flush() -> None:
        if prose:
            out.append(convert_inline("\n".join(prose), ctx))
            prose.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if _LABEL_LINE.match(line):
            i += 1
            continue
        if match := _DIRECTIVE_OPEN.match(line):
            flush()
            end = _closing(lines, i + 1, match.group("fence"))
            directive = _parse_directive(match.group("name"), match.group("argument"),
                                         lines[i + 1:end])
            out.append(render_directive(directive, ctx))
            i = end + 1
            continue
        if match := _CODE_OPEN.match(line):  # a plain code block: kept as it is
            flush()
            end = _closing(lines, i + 1, match.group("fence"))
            out.append("\n".join(lines[i:end + 1]))
            i = end + 1
            continue
        if line.strip().startswith("$$"):
            flush()
            block, i = _math_block(lines, i, ctx)
            out.append(block)
            continue
        if match := _ENV_OPEN.match(line):  # amsmath environment outside $$: kept as it is
            flush()
            closing = f"\\end{{{match.group('env')}}}"
            end = next((j for j in range(i, len(lines)) if closing in lines[j]), len(lines) - 1)
            out.append("\n".join(lines[i:end + 1]))
            i = end + 1
            continue
        prose.append(line)
        i += 1
    flush()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n")


# --------------------------------------------------------------------------------------------
# Whole notebooks.

_LEFTOVERS = ("{prf:", "{cite", "{glue", "{ref", "{numref", "{eq}", "{doc}", "```{", ":::{")


def leftovers(markdown: str) -> list[str]:
    """The MyST constructs still in ``markdown`` (none, after :func:`convert_markdown`)."""
    return [token for token in _LEFTOVERS if token in markdown]


def _code_sources(notebook) -> list[str]:
    return [cell.source.strip() for cell in notebook.cells if cell.cell_type == "code"]


def choose_notebook(source: Path, executed: Path | None, warn: Callable[[str], None]):
    """``(notebook, True)``: the executed notebook (with its outputs) if it is the chapter as it
    is now; else ``(chapter, False)``, the chapter read from its source, without outputs."""
    import jupytext
    import nbformat

    chapter = jupytext.read(source)
    if executed is None or not executed.is_file():
        return chapter, False
    run = nbformat.read(executed, as_version=4)
    if _code_sources(run) != _code_sources(chapter):
        warn(f"{executed} is not the chapter {source} as it is now: its notebook has no outputs")
        return chapter, False
    return run, True


def export_notebook(notebook, ctx: Context, install_cell: str):
    """``notebook`` as a plain Jupyter notebook: markdown converted, code cells (with outputs
    and metadata) unchanged, ``install_cell`` first, cell ids ``cell-0``, ``cell-1``, ..."""
    import nbformat

    notebook = nbformat.from_dict(json.loads(json.dumps(notebook)))  # a copy
    for key in ("jupytext", "source_map"):
        notebook.metadata.pop(key, None)
    for cell in notebook.cells:  # the bibliography lists what the whole page cites
        if cell.cell_type == "markdown":
            convert_markdown(cell.source, ctx)
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        ctx.attachments = {}
        cell.source = convert_markdown(cell.source, ctx)
        if ctx.attachments:
            cell["attachments"] = ctx.attachments
    notebook.cells.insert(0, nbformat.v4.new_code_cell(install_cell))
    for i, cell in enumerate(notebook.cells):  # stable ids: the same chapter gives the same file
        cell["id"] = f"cell-{i}"
    notebook.nbformat, notebook.nbformat_minor = 4, max(notebook.get("nbformat_minor", 5), 5)
    return notebook


def book_sources(folder: Path, root: Path) -> dict[str, str]:
    """``{docname: text}`` of the MyST pages under ``folder`` (docnames relative to ``root``)."""
    return {path.relative_to(root).with_suffix("").as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(folder.glob("*.md"))}


def page_context(docname: str, index: BookIndex, bib_file: Path | None,
                 glue: Mapping[str, Mapping]) -> Context:
    bibliography = read_bibliography(bib_file) if bib_file and bib_file.is_file() else {}
    return Context(docname=docname, index=index, bibliography=bibliography, glue=glue)


# --------------------------------------------------------------------------------------------
# Command line: convert the executed notebooks of the last build.


def _load_environment(build: Path):
    import pickle

    path = build / ".doctrees" / "environment.pickle"
    if not path.is_file():
        return None
    with path.open("rb") as handle:
        return pickle.load(handle)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    import nbformat
    import yaml

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "tools"))
    sys.path.insert(0, str(root))

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="chapter names (default: every executed one)")
    parser.add_argument("--build", type=Path, default=root / "_build")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    repository_url = config["repository"]["url"]
    executed_dir = args.build / "jupyter_execute" / "book"
    names = args.names or sorted(p.stem for p in executed_dir.glob("*.ipynb"))
    sources = book_sources(root / "book", root)
    env = _load_environment(args.build)
    site = site_url_of(repository_url)
    index = index_sphinx(env, sources, site) if env else index_sources(sources)
    index.site_url = site
    args.out.mkdir(parents=True, exist_ok=True)
    bad = 0
    for name in names:
        executed = executed_dir / f"{name}.ipynb"
        notebook, ran = choose_notebook(root / "book" / f"{name}.md", executed,
                                        lambda message: print("warning:", message))
        glue = glue_data(notebook, executed.with_suffix(".glue.json") if ran else None)
        ctx = page_context(f"book/{name}", index, root / "book" / "references.bib", glue)
        result = export_notebook(notebook, ctx, INSTALL_CELL.format(url=repository_url))
        nbformat.write(result, args.out / f"{name}.ipynb")
        left = sorted({t for c in result.cells if c.cell_type == "markdown"
                       for t in leftovers(c.source)})
        bad += bool(left)
        print(f"{name}: {len(result.cells)} cells, MyST left: {left or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())


# The first cell of every downloadable notebook. `lib.engine.flow` (not just `lib`) is looked up,
# so that an unrelated package called `lib` does not count as the book's library.
INSTALL_CELL = """\
# Outside a clone of the book's repository (Colab, Binder), fetch the repository, install its
# library `lib` and work in its book/ folder; in a clone (lib installed by `make`) do nothing.
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("lib") is None or importlib.util.find_spec("lib.engine.flow") is None:
    REPOSITORY = "{url}"
    target = os.path.abspath("implicit-bias-book")
    if not os.path.isdir(target):
        subprocess.run(["git", "clone", "--depth", "1", REPOSITORY, target], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", target], check=True)
    importlib.invalidate_caches()
    os.chdir(os.path.join(target, "book"))"""
