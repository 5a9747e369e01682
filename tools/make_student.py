"""Make the student version of every chapter: solutions out, stubs in, check cells kept.

Usage::

    python tools/make_student.py [--out _build/student]

For every executable chapter listed in ``_toc.yml`` (see ``tools/chapters.py``) it writes
``<out>/<name>.md`` and ``<out>/<name>.ipynb`` (the same, converted with jupytext), where

- in every ``{code-cell}``, the lines from ``# BEGIN SOLUTION`` to ``# END SOLUTION`` are replaced
  by ``# YOUR CODE HERE`` and ``raise NotImplementedError`` at the indentation of the first marker;
- a code cell tagged ``solution`` is removed whole (for worked answers that are not stubs);
- every ``{solution}`` block is removed, written either as a colon fence (``:::{solution}``) or as a
  backtick fence, and so is every gated ``{solution-start}`` ... ``{solution-end}`` span of
  sphinx-exercise, with the cells in between.

Everything else (text, exercises, experiments, the check cells that assert results) is kept.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chapters  # noqa: E402  (tools/chapters.py, beside this file)

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
STUB = ("# YOUR CODE HERE", "raise NotImplementedError")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})(?P<info>.*?)\s*$")
_DIRECTIVE = re.compile(r"^\{(?P<name>[^}\s]+)\}")
_TAGS = re.compile(r"^\s*:?tags:\s*\[(?P<tags>[^\]]*)\]")
# Directives whose body is literal text: never look inside them for solutions.
_LITERAL = {"code-block", "code", "sourcecode", "literalinclude", "math", "raw"}


def _open_fence(line: str) -> tuple[str, str | None] | None:
    """``(fence, directive name or None)`` if ``line`` opens a fenced block, else ``None``."""
    m = _FENCE.match(line)
    if m is None:
        return None
    fence, info = m["fence"], m["info"].strip()
    if fence[0] == "`" and "`" in info:
        return None  # inline code, not a fence
    if not info:
        return None  # a bare fence closes a block; it opens one only after a literal block
    d = _DIRECTIVE.match(info)
    return fence, (d["name"] if d else None)


def _close_index(lines: list[str], start: int, fence: str) -> int:
    """Index of the line that closes the fence opened at ``lines[start]``."""
    char, length = fence[0], len(fence)
    for j in range(start + 1, len(lines)):
        s = lines[j].strip()
        if s and set(s) == {char} and len(s) >= length:
            return j
    raise ValueError(f"line {start + 1}: fence {fence!r} is never closed")


def _stub_solutions(body: list[str], where: int) -> list[str]:
    """Replace every BEGIN/END SOLUTION region of a code cell's lines by the stub."""
    out: list[str] = []
    i = 0
    while i < len(body):
        line = body[i]
        if line.strip().startswith(BEGIN):
            indent = line[: len(line) - len(line.lstrip())]
            ends = (j for j in range(i + 1, len(body)) if body[j].strip().startswith(END))
            end = next(ends, None)
            if end is None:
                raise ValueError(f"line {where + i + 1}: {BEGIN!r} without {END!r}")
            out.extend(f"{indent}{s}\n" for s in STUB)
            i = end + 1
        else:
            if line.strip().startswith(END):
                raise ValueError(f"line {where + i + 1}: {END!r} without {BEGIN!r}")
            out.append(line)
            i += 1
    return out


def _cell_tags(body: list[str]) -> set[str]:
    """Tags from a code cell's options (``:tags: [a, b]`` or a ``---`` YAML header)."""
    tags: set[str] = set()
    in_yaml = bool(body) and body[0].strip() == "---"
    for k, line in enumerate(body):
        if in_yaml and k > 0 and line.strip() == "---":
            break
        if not in_yaml and not line.lstrip().startswith(":"):
            break
        m = _TAGS.match(line)
        if m:
            tags |= {t.strip().strip("'\"") for t in m["tags"].split(",") if t.strip()}
    return tags


def strip_solutions(text: str) -> str:
    """The student version of a MyST notebook's text (see the module docstring)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    out: list[str] = []
    i = 0

    def drop_until(j: int) -> int:
        """Drop lines up to and including ``j``, and one blank line after if one precedes."""
        j += 1
        if out and not out[-1].strip() and j < len(lines) and not lines[j].strip():
            j += 1
        return j

    while i < len(lines):
        opened = _open_fence(lines[i])
        if opened is None:
            out.append(lines[i])
            i += 1
            continue
        fence, name = opened
        close = _close_index(lines, i, fence)
        if name == "solution":
            i = drop_until(close)
        elif name == "solution-start":
            end = next(
                (
                    j
                    for j in range(close + 1, len(lines))
                    if (o := _open_fence(lines[j])) is not None and o[1] == "solution-end"
                ),
                None,
            )
            if end is None:
                raise ValueError(f"line {i + 1}: {{solution-start}} without {{solution-end}}")
            i = drop_until(_close_index(lines, end, _open_fence(lines[end])[0]))
        elif name == "code-cell":
            body = lines[i + 1 : close]
            if "solution" in _cell_tags(body):
                i = drop_until(close)
            else:
                out.append(lines[i])
                out.extend(_stub_solutions(body, i + 1))
                out.append(lines[close])
                i = close + 1
        elif name is None or name in _LITERAL:
            out.extend(lines[i : close + 1])  # literal text: copied as is
            i = close + 1
        else:
            out.append(lines[i])  # another directive: keep it, and look inside it
            i += 1
    return "".join(out)


def make_student(out_dir: Path, sources: list[Path] | None = None) -> list[Path]:
    """Write the student ``.md`` and ``.ipynb`` of every chapter; return the notebook paths."""
    import jupytext

    sources = chapters.pages(notebooks_only=True) if sources is None else sources
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sources:
        if source.suffix != ".md":
            raise ValueError(f"{source}: only MyST markdown chapters are supported")
        student_md = out_dir / source.name
        student_md.write_text(strip_solutions(source.read_text(encoding="utf-8")), encoding="utf-8")
        notebook = jupytext.read(student_md, fmt="md:myst")
        student_nb = student_md.with_suffix(".ipynb")
        jupytext.write(notebook, student_nb, fmt="ipynb")
        written.append(student_nb)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=chapters.ROOT / "_build" / "student")
    args = parser.parse_args(argv)
    for path in make_student(args.out):
        print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
