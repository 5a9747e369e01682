"""No graded answer's code appears in the chapters.

Every solution block of book/assignments/*.md (the code between ``# BEGIN SOLUTION`` and
``# END SOLUTION``) is searched for in the code of the chapters: the code cells of book/*.md and,
where the book has been built, the code blocks of its pages in _build/html (which include the
folded solutions of the chapters' exercises). A statement of a solution counts as printed in a
chapter when

- the same line, spaces and comments aside, appears in a chapter (lines of 30 characters or more:
  shorter ones such as ``import numpy as np`` say nothing), or
- the same statement with its variables renamed appears in a chapter (statements of 12 tokens or
  more, names other than modules' and attributes' replaced by a placeholder), so that
  ``t = (np.pi / 2 - np.arctan(a / r)) / r`` in a chapter gives away
  ``return (np.pi / 2 - np.arctan(alpha / root)) / root``.

This catches copied code, not the same formula written another way: the questions themselves ask
for another case, a generalization or a prediction than what the chapters show.
"""

from __future__ import annotations

import builtins
import html
import io
import keyword
import re
import textwrap
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.not_numerics

MODULES = {"np", "torch", "math", "scipy", "lib", "saddles", "poison", "tensor_nets", "ex"}
MODULES |= {"gradient_matching", "solve_ivp", "F"}
KEEP = MODULES | set(dir(builtins))
MIN_LINE = 30
MIN_TOKENS = 12


def code_cells(markdown: str) -> list[str]:
    cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", markdown, re.S)
    # a cell's options (":tags: [...]") are not code
    return ["\n".join(x for x in c.splitlines() if not x.startswith(":")) for c in cells]


def page_code(page: str) -> list[str]:
    blocks = re.findall(r'<div class="highlight[^"]*"><pre>(.*?)</pre>', page, re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", b)) for b in blocks]


def normal_lines(code: str) -> set[str]:
    lines = {re.sub(r"\s+", "", line.split("#")[0]) for line in code.splitlines()}
    return {line for line in lines if len(line) >= MIN_LINE}


def statements(code: str) -> list[str]:
    """Each logical line of ``code`` as a string of tokens, local names replaced by ``N``."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(textwrap.dedent(code)).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    found, current, previous = [], [], None
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    for token in tokens:
        if token.type in skip or token.type == tokenize.ENCODING:
            continue
        if token.type == tokenize.NEWLINE:
            found.append(" ".join(current))
            current, previous = [], None
            continue
        text = token.string
        if token.type == tokenize.NAME and not keyword.iskeyword(text) and text not in KEEP:
            text = "N" if previous != "." else text
        elif token.type == tokenize.STRING:
            text = "S"
        current.append(text)
        previous = token.string
    if current:
        found.append(" ".join(current))
    return found


def core(statement: str) -> str:
    """A solution statement without ``return`` or its assignment target."""
    return re.sub(r"^(return |(N( , N)* = ))", "", statement)


def solution_blocks(source: str) -> list[str]:
    blocks = re.findall(r"# BEGIN SOLUTION\n(.*?)# END SOLUTION", source, re.S)
    cleaned = []
    for block in blocks:
        lines = [x for x in block.splitlines() if not x.startswith(("```", ":"))]
        cleaned.append(textwrap.dedent("\n".join(lines)))
    return cleaned


def chapter_code() -> dict[str, list[str]]:
    code = {p.name: code_cells(p.read_text(encoding="utf-8")) for p in (ROOT / "book").glob("*.md")}
    for page in (ROOT / "_build" / "html" / "book").glob("*.html"):
        code[f"_build/html/book/{page.name}"] = page_code(page.read_text(encoding="utf-8"))
    return code


def statements_of_cells(cells: list[str]) -> list[str]:
    return [s for cell in cells for s in statements(cell)]


def index(chapters: dict[str, list[str]]) -> dict[str, tuple[set[str], str]]:
    """Each chapter's long lines and its statements, joined, for the searches of ``printed``."""
    return {
        name: (normal_lines("\n".join(cells)), f" {' ; '.join(statements_of_cells(cells))} ")
        for name, cells in chapters.items()
    }


def printed(block: str, indexed: dict[str, tuple[set[str], str]]) -> list[str]:
    """Where the statements of a solution block appear in the chapters."""
    lines = normal_lines(block)
    cores = [core(s) for s in statements(block) if not s.startswith("def ")]
    cores = [c for c in cores if len(c.split()) >= MIN_TOKENS]
    hits = []
    for name, (chapter_lines, chapter_statements) in indexed.items():
        hits += [f"{name}: {line}" for line in sorted(lines & chapter_lines)]
        hits += [f"{name}: {c}" for c in cores if f" {c} " in chapter_statements]
    return hits


def test_no_graded_answer_is_printed_in_a_chapter():
    chapters = chapter_code()
    assert len(chapters) >= 9
    indexed = index(chapters)
    found = {}
    for source in sorted((ROOT / "book" / "assignments").glob("*.md")):
        for number, block in enumerate(solution_blocks(source.read_text(encoding="utf-8"))):
            hits = printed(block, indexed)
            if hits:
                found[f"{source.name}, solution {number + 1}"] = hits[:3]
    assert not found, "\n".join(f"{k}: {v}" for k, v in found.items())


def test_the_search_finds_a_chapters_code_even_renamed():
    chapters = chapter_code()
    name, cells = next((n, c) for n, c in sorted(chapters.items()) if n.endswith(".md") and c)
    candidates = [
        s
        for s in statements_of_cells(cells)
        if len(core(s).split()) >= MIN_TOKENS + 4 and " S " not in f" {s} "  # no strings
    ]
    statement = max(candidates, key=len)  # a long statement of the chapter, rebuilt as code
    names = iter(f"renamed_{i}" for i in range(1000))
    code = " ".join(next(names) if token == "N" else token for token in statement.split())
    assert printed(code, index({name: cells})), (name, code)
