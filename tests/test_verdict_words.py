"""A verdict is computed, never typed: no page of the book types a verdict word in its prose.

Whether a paper's number is reproduced is decided by the ledger's rule (``lib/book/ledger.py``)
from the numbers, and a chapter shows the verdict by gluing ``ledger.verdict(key)``. This test
reads the MARKDOWN text of every ``book/*.md``, that is everything except

* code cells and other code blocks (fences ```` ```{code-cell} ````, ```` ```{code-block} ````,
  ```` ```{code} ````, ```` ```python ````, a bare ```` ``` ```` that opens a block, ...), whose
  text is code, and the jupytext header;
* the contents of glue roles (``{glue}`key` ``, ``{glue:text}`key:.2f` ``, ...): glued text is
  computed;
* comments (``% ...`` lines and ``<!-- ... -->``), which no reader sees,

and fails on any of these phrases, case-insensitive, even when a line break splits them:
``reproduced``, ``not reproduced``, ``differs``, ``as in the paper``, ``match(es|ed) the paper``,
``agree(s) with the paper``, ``weak evidence``, ``inconclusive``. Directives' bodies
(admonitions, theorems, figure captions) and the titles of directives are prose and are read. The
Reproductions page states the rule with those words, but it renders the statement from
``lib.book.ledger.rule_markdown()`` in a code cell, so its markdown text is held to the same test
and needs no exemption.

Each offence is reported as ``book/<page>.md:<line>: <the words>``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parent.parent / "book"
PAGES = sorted(BOOK.glob("*.md"))

#: The forbidden phrases (ledger-api.md), a space matching any run of white space.
PHRASES = [
    r"\b(not )?reproduced\b",
    r"\bdiffers\b",
    r"\bas in the paper\b",
    r"\bmatch(es|ed)? the paper\b",
    r"\bagrees? with the paper\b",
    r"\bweak evidence\b",
    r"\binconclusive\b",
]
VERDICT = re.compile("|".join(p.replace(" ", r"\s+") for p in PHRASES), re.IGNORECASE)

_FENCE = re.compile(r"^\s*(?P<marks>`{3,}|:{3,})\s*(?P<info>.*?)\s*$")
_CODE_DIRECTIVES = ("code-cell", "code-block", "code", "sourcecode", "literalinclude", "raw",
                    "eval-rst", "math", "glue", "glue:any", "glue:figure", "glue:math",
                    "glue:md", "glue:text")
_GLUE_ROLE = re.compile(r"\{glue(?::[\w-]+)?\}`[^`]*`")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)


def _is_code(info: str, marks: str) -> bool:
    """Whether a fence that opens with ``info`` holds code (or glued output), not prose."""
    if not info:
        return marks[0] == "`"  # a bare ``` opens a code block; a bare ::: closes a directive
    directive = re.match(r"\{([\w:.-]+)\}", info)
    if directive:
        return directive[1] in _CODE_DIRECTIVES
    return marks[0] == "`"  # ```python, ```bibtex, ```text: a code block with a language


def prose_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, text)`` of every line of prose: the markdown outside code, with glue roles
    and comments blanked and the titles of prose directives kept."""
    lines = text.split("\n")
    start = 0
    if lines and lines[0].strip() == "---":  # the jupytext header
        for i in range(1, len(lines)):
            if lines[i].strip() == "---":
                start = i + 1
                break
    out: list[tuple[int, str]] = []
    stack: list[tuple[str, int, bool]] = []  # open fences: (mark, length, holds code)
    for number, line in enumerate(lines[start:], start=start + 1):
        fence = _FENCE.match(line)
        in_code = bool(stack) and stack[-1][2]
        if in_code:
            mark, length, _ = stack[-1]
            if fence and fence["marks"][0] == mark and len(fence["marks"]) >= length \
                    and not fence["info"]:
                stack.pop()
            continue
        if fence:
            marks, info = fence["marks"], fence["info"]
            top = stack[-1] if stack else None
            if not info and top and marks[0] == top[0] and len(marks) >= top[1]:
                stack.pop()  # closes the directive it belongs to
                continue
            code = _is_code(info, marks)
            stack.append((marks[0], len(marks), code))
            if not code:  # a prose directive's title: "{prf:theorem} A title"
                out.append((number, re.sub(r"^\{[^}]*\}", "", info)))
            continue
        if line.lstrip().startswith("%"):  # a MyST comment
            continue
        out.append((number, line))
    return out


def offences(path: Path) -> list[str]:
    """``book/<page>.md:<line>: <words>`` for every verdict word typed in the page's prose."""
    numbered = prose_lines(path.read_text())
    text = "\n".join(line for _, line in numbered)
    text = _GLUE_ROLE.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)
    text = _HTML_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)
    found = []
    for match in VERDICT.finditer(text):
        line = numbered[text.count("\n", 0, match.start())][0]
        words = " ".join(match[0].split())
        found.append(f"book/{path.name}:{line}: {words!r}")
    return found


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.stem)
def test_no_page_types_a_verdict_word(path):
    found = offences(path)
    for line in found:
        print(line)
    assert not found, (
        f"{len(found)} verdict words typed in {path.name} (glue ledger.verdict(key) instead, or "
        "rephrase an ordinary use):\n" + "\n".join(found)
    )


# ---------------------------------------------------------------------------------------------
# The reader of prose itself


SAMPLE = """---
kernelspec:
  name: python3
---
Our value differs from
the paper's.

```{code-cell} ipython3
status = "reproduced"  # code: not read
```

The verdict is {glue:text}`fig5-verdict`; glued, not typed, like {glue}`reproduced-count`.
% a comment saying reproduced is not read

:::{admonition} Reproduced here
The figure's caption, as in
the paper, is prose.
```python
x = "weak evidence"
```
:::

````{prf:theorem} A title
```{code-cell}
y = "matches the paper"
```
It agrees with the paper.
````
"""


def test_the_reader_finds_typed_words_and_skips_code_glue_and_comments(tmp_path):
    page = tmp_path / "sample.md"
    page.write_text(SAMPLE)
    assert offences(page) == [
        "book/sample.md:5: 'differs'",
        "book/sample.md:15: 'Reproduced'",
        "book/sample.md:16: 'as in the paper'",
        "book/sample.md:27: 'agrees with the paper'",
    ]
