"""Committed results of the long runs: ``book/results/<chapter>.json``.

Some numbers a chapter quotes need ``BOOK_SCALE=full`` or minutes of computation, more than a
chapter's one-minute budget. ``benchmarks/reproduce.py`` (``make reproduce``) computes them and
writes one JSON file per chapter with :func:`save_results`: the numbers, the settings and seeds
that produced them, the library versions, the date and the command. The chapter reads the file
with :func:`load_results`, glues the numbers into its text and says where they came from, so no
number is typed by hand and a re-run updates the text.
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import re
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from lib.book.machine import SAME_MACHINE, cpu_model, environment, same_machine  # noqa: F401
from lib.engine.validation import describe, as_positive_float

RESULTS_DIR = Path(__file__).resolve().parents[2] / "book" / "results"
_CHAPTER = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def _check_chapter(chapter) -> str:
    if not isinstance(chapter, str) or not _CHAPTER.match(chapter):
        raise ValueError(
            f"chapter must be a chapter file name such as 'poisoning-in-practice' (lower case, "
            f"digits and hyphens), got {chapter!r}"
        )
    return chapter


def results_path(chapter: str) -> Path:
    """The file that holds a chapter's committed results."""
    return RESULTS_DIR / f"{_check_chapter(chapter)}.json"


def _plain(value):
    """JSON-ready copy: numpy / torch numbers and arrays become Python numbers and lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        return _plain(value.detach().cpu().numpy())
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"results must be finite numbers, got {value}")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(
        f"results must be numbers, strings, lists or dicts, got {type(value).__name__}"
    )


def save_results(
    chapter: str, *, results: dict, settings: dict, seeds, command: str, seconds: float,
    tasks: dict | None = None,
) -> Path:
    """Write ``book/results/<chapter>.json`` and return its path.

    ``results`` holds the numbers the chapter quotes, ``settings`` and ``seeds`` what produced
    them, ``command`` how to produce them again, ``seconds`` how long it took; ``tasks``
    (benchmarks/reproduce.py) what each task of the run wrote: its result paths, cost and a digest
    of its values, by which ``reproduce.py --check`` names the task behind a number that no longer
    follows from the code. The library versions and the date (UTC) are added.
    """
    for name, value in (("results", results), ("settings", settings)):
        if not isinstance(value, dict):
            raise ValueError(f"{name} must be a dict, got {describe(value)}")
    if not isinstance(seeds, (list, tuple, range, dict)):
        raise ValueError(f"seeds must be a list or a dict of lists, got {describe(seeds)}")
    if not isinstance(command, str) or not command:
        raise ValueError(f"command must be a non-empty string, got {command!r}")
    seconds = as_positive_float(seconds, "seconds", allow_zero=True)
    record = {
        "chapter": _check_chapter(chapter),
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(seconds, 1),
        "environment": environment(),
        "settings": _plain(settings),
        "seeds": _plain(seeds),
        "results": _plain(results),
    }
    if tasks is not None:
        if not isinstance(tasks, dict):
            raise ValueError(f"tasks must be a dict {{key: record}}, got {describe(tasks)}")
        record["tasks"] = _plain(tasks)
    path = results_path(chapter)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    return path


def glue(name: str, value) -> None:
    """Glue a number or a string into the chapter's text (myst-nb), not displayed here.

    numpy and torch scalars become plain Python numbers first: myst-nb formats ``{glue:text}``
    from the value's text form, which it can read back only for plain numbers, not for
    ``np.float64(...)``.
    """
    from myst_nb import glue as myst_glue  # a book dependency; imported only in chapters

    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        plain = float(value)  # shown as nan / inf: a missing value stays visible
    else:
        plain = _plain(value)
    if not isinstance(plain, (bool, int, float, str)):
        raise ValueError(f"glue takes one number or string, got {type(value).__name__}")
    myst_glue(name, plain, display=False)


def load_results(chapter: str) -> dict:
    """The record written by :func:`save_results` for ``chapter``.

    Raises a ``ValueError`` that names the command to run when the file does not exist.
    """
    path = results_path(chapter)
    if not path.exists():
        raise ValueError(
            f"no committed results for chapter {chapter!r} at {path}; "
            f"run `make reproduce CHAPTERS={chapter}` to compute them"
        )
    try:
        return json.loads(path.read_text())
    except ValueError as err:  # a JSONDecodeError, or text that is not UTF-8
        raise ValueError(f"{path} is not a results file (invalid JSON: {err})") from None
