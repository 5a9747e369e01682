"""tools/make_student.py: solutions are stripped, stubs inserted, everything else kept."""

import importlib.util
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


make_student = _load("make_student")

CHAPTER = '''\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter

```{code-cell} ipython3
import math
```

:::{exercise} Square
:label: ex-square

Write `square(x)`.
:::

```{code-cell} ipython3
def square(x):
    """Return x squared."""
    # BEGIN SOLUTION
    y = x * x
    return y
    # END SOLUTION


def cube(x):
    return x**3
```

```{code-cell} ipython3
# Check your answer.
assert square(3) == 9
```

:::{solution} ex-square
:class: dropdown

Multiply `x` by itself: SECRET-COLON.
:::

````{solution} ex-square
:class: dropdown

Nested content stays hidden: SECRET-BACKTICK.

```python
print("SECRET-NESTED")
```
````

::::{note}
A note that stays.

:::{solution} ex-square
SECRET-INSIDE-NOTE
:::
::::

```{solution-start} ex-square
:class: dropdown
```

Gated text: SECRET-GATED.

```{code-cell} ipython3
print("SECRET-GATED-CODE")
```

```{solution-end}
```

```{code-cell} ipython3
:tags: [hide-output, solution]

print("SECRET-TAGGED")
```

```text
# BEGIN SOLUTION
literal text is never changed
# END SOLUTION
```

## Summary
'''


@pytest.fixture
def student():
    return make_student.strip_solutions(CHAPTER)


def test_solution_code_is_replaced_by_a_stub_at_the_same_indentation(student):
    assert "y = x * x" not in student
    assert (
        '    """Return x squared."""\n'
        "    # YOUR CODE HERE\n"
        "    raise NotImplementedError\n"
        "\n\ndef cube(x):\n    return x**3\n"
    ) in student


def test_every_solution_block_is_removed(student):
    assert "SECRET" not in student
    assert "{solution" not in student


def test_exercises_checks_and_the_rest_are_kept(student):
    for kept in (
        "kernelspec:",
        "# A chapter",
        "import math",
        ":::{exercise} Square",
        "Write `square(x)`.",
        "assert square(3) == 9",
        "A note that stays.",
        "::::{note}",
        "literal text is never changed",
        "## Summary",
    ):
        assert kept in student
    assert student.count("# BEGIN SOLUTION") == 1  # only the literal block keeps its marker


def test_no_solutions_means_no_change():
    text = "# Title\n\n```{code-cell} ipython3\nprint(1)\n```\n"
    assert make_student.strip_solutions(text) == text


@pytest.mark.parametrize(
    "bad",
    [
        "```{code-cell} ipython3\n# BEGIN SOLUTION\nx = 1\n```\n",
        "```{code-cell} ipython3\nx = 1\n# END SOLUTION\n```\n",
        ":::{solution} ex\nnever closed\n",
    ],
)
def test_malformed_markers_are_rejected(bad):
    with pytest.raises(ValueError):
        make_student.strip_solutions(bad)


def test_student_notebook_is_written(tmp_path, student):
    jupytext = pytest.importorskip("jupytext")
    source = tmp_path / "chapter.md"
    source.write_text(CHAPTER, encoding="utf-8")
    (notebook,) = make_student.make_student(tmp_path / "student", [source])
    assert (tmp_path / "student" / "chapter.md").read_text(encoding="utf-8") == student
    cells = jupytext.read(notebook)["cells"]
    code = [c["source"] for c in cells if c["cell_type"] == "code"]
    assert code[0] == "import math"
    assert "raise NotImplementedError" in code[1]
    assert code[2].endswith("assert square(3) == 9")
    assert len(code) == 3
