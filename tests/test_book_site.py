"""Tests of tools/book_site.py: repository URLs and the downloadable notebooks."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import book_site  # noqa: E402
import notebook_export  # noqa: E402

URL = "https://github.com/owner/name"


def test_repository_parts():
    assert book_site.repository_parts(URL) == ("owner", "name")
    assert book_site.repository_parts(URL + "/") == ("owner", "name")
    for bad in ("https://gitlab.com/o/n", "https://github.com/only", "github.com/o/n"):
        with pytest.raises(ValueError, match="repository.url"):
            book_site.repository_parts(bad)


def test_notebook_starts_with_the_install_cell(tmp_path):
    chapter = tmp_path / "ch.md"
    chapter.write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n"
        "# Title\n\n```{code-cell} ipython3\nx = 1\n```\n",
        encoding="utf-8",
    )
    notebook = json.loads(book_site.notebook_with_install_cell(chapter, URL))
    first, *rest = notebook["cells"]
    source = "".join(first["source"])
    assert first["cell_type"] == "code" and f'REPOSITORY = "{URL}"' in source
    assert 'find_spec("lib.engine.flow")' in source
    assert [c["cell_type"] for c in rest] == ["markdown", "code"]
    assert "".join(rest[1]["source"]) == "x = 1"
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    # the same chapter gives the same file (stable cell ids)
    assert book_site.notebook_with_install_cell(
        chapter, URL
    ) == book_site.notebook_with_install_cell(chapter, URL)


def test_install_cell_does_nothing_where_lib_is_installed():
    # This test runs with lib installed (as in a clone after `make`): the cell must not clone.
    namespace: dict = {}
    code = notebook_export.INSTALL_CELL.format(url="https://github.com/not/used")
    exec(compile(code.replace("subprocess.run", "raise SystemExit  #"), "cell", "exec"), namespace)
    assert "target" not in namespace


def test_docstring_prose_sets_numbers_and_constants_like_the_book():
    line = "rtol 1e-10 and |x| (``1e-3``, :math:`|a|`) is None for a run, NaN or inf; Nonesuch"
    out = book_site.docstring_prose(line)
    assert "rtol 10⁻¹⁰" in out and r"\|x\|" in out  # prose: a power of ten, bars escaped
    assert "``1e-3``" in out and ":math:`|a|`" in out  # literals and math untouched
    assert "is ``None`` for a run" in out and "``NaN`` or ``inf``;" in out and "Nonesuch" in out


def test_docstring_prose_reads_a_literal_broken_across_lines():
    lines = ["diff = ``tie_gap(sd_a,", "tie_exponent)`` (no tie if None); B ``fixed_bc``"]
    out = book_site.docstring_prose("\n".join(lines)).split("\n")
    assert out == ["diff = ``tie_gap(sd_a,", "tie_exponent)`` (no tie if ``None``); B ``fixed_bc``"]
