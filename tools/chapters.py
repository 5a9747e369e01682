"""List the pages of the book, in table-of-contents order, from ``_toc.yml``.

Usage::

    python tools/chapters.py              # every page: book/intro.md, book/ssm-basics.md, ...
    python tools/chapters.py --notebooks  # only the executable chapters (jupytext notebooks)

Paths are printed one per line, relative to the repository root. A page counts as a notebook when
it is an ``.ipynb`` file or a ``.md`` file whose front matter has a ``jupytext`` or ``kernelspec``
entry; plain MyST pages (the notation, the bibliography) have no code to execute. The Makefile
(``make test``, ``make student``) and the benchmarks use this, so the list of chapters lives in one
place.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TOC = ROOT / "_toc.yml"
SUFFIXES = (".md", ".ipynb", ".rst")  # .rst: plain Sphinx pages (the API reference)


def _files(entry: object) -> Iterator[str]:
    """Every ``file:`` (and ``root:``) value below ``entry``, depth first, in order."""
    if isinstance(entry, dict):
        for key in ("root", "file"):
            if isinstance(entry.get(key), str):
                yield entry[key]
        for key in ("parts", "chapters", "sections"):
            for child in entry.get(key) or []:
                yield from _files(child)
    elif isinstance(entry, list):
        for child in entry:
            yield from _files(child)


def _resolve(name: str, root: Path) -> Path:
    """The source file of a toc entry (the toc leaves the suffix out)."""
    path = root / name
    if path.suffix in SUFFIXES and path.is_file():
        return path
    for suffix in SUFFIXES:
        candidate = path.with_name(path.name + suffix)
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"_toc.yml lists {name!r}, but no {name}.md, {name}.ipynb or {name}.rst exists"
    )


def is_notebook(path: Path) -> bool:
    """True for an ``.ipynb`` file or a jupytext MyST notebook (front matter with a kernel)."""
    if path.suffix == ".ipynb":
        return True
    if path.suffix != ".md":
        return False
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return False
    end = text.find("\n---", 3)
    if end < 0:
        return False
    front = yaml.safe_load(text[3:end]) or {}
    return isinstance(front, dict) and ("jupytext" in front or "kernelspec" in front)


def pages(toc: Path = TOC, *, notebooks_only: bool = False) -> list[Path]:
    """The pages listed in ``toc``, in order, as absolute paths."""
    with open(toc, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    root = toc.parent
    found: list[Path] = []
    for name in _files(data):
        path = _resolve(name, root)
        if path not in found and (not notebooks_only or is_notebook(path)):
            found.append(path)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--notebooks", action="store_true", help="only the executable chapters (jupytext notebooks)"
    )
    args = parser.parse_args(argv)
    for path in pages(notebooks_only=args.notebooks):
        print(path.relative_to(ROOT).as_posix())
    return 0


if __name__ == "__main__":
    sys.exit(main())
