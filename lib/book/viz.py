"""One plotting style for the book, a few shared plots, and :func:`explore`.

:func:`explore` turns a drawing function ``fn(fig, **params)`` into an interactive exploration:

* in a live kernel: ipywidgets sliders (``continuous_update=False``), redrawing on release;
* while the book is built (``BOOK_MODE=build``): one slider per parameter over precomputed frames
  of every combination of a few values of each (:func:`slider_grid_html`), so the static page
  offers every parameter the text names;
* under the test runner (``BOOK_MODE=test``): one frame at the default values.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

from lib.engine.validation import describe, as_bool, as_int, as_positive_float
from lib.engine.config import book_mode

COLORS = {
    "teacher": "#222222",
    "clean": "#1f77b4",
    "poisoned": "#d62728",
    "student": "#2ca02c",
    "flow": "#1f77b4",
    "descent": "#ff7f0e",
    "window": "#dddddd",
}


# The page's text column is 676 CSS px wide at a 1280 px window. A figure FIGURE_WIDTH inches wide
# is shown at most 100 px per inch (its PNG has FIGURE_DPI pixels per inch, twice that, so it is
# sharp on high-resolution screens), and its smallest text (MIN_FONT_PT) comes out at
# MIN_FONT_PT / 72 * 676 / FIGURE_WIDTH ~ 11.6 px >= 10 px; wider figures shrink their text.
COLUMN_PX = 676
FIGURE_WIDTH = 7.0
FIGURE_DPI = 200
MIN_FONT_PT = 8.5
MAX_FIGURE_WIDTH = MIN_FONT_PT / 72 * COLUMN_PX / 10  # 7.98 in: text at 10 px when fitted


def use_style() -> None:
    """Apply the book's matplotlib style (called on import)."""
    mpl.rcParams.update(
        {
            "figure.figsize": (FIGURE_WIDTH, 3.4),
            "figure.dpi": 100,
            "savefig.dpi": FIGURE_DPI,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titlesize": 10,
            "axes.labelsize": 9.5,
            "xtick.labelsize": 9,
            "ytick.labelsize": 9,
            "legend.fontsize": MIN_FONT_PT,
            "legend.title_fontsize": 9,
            "legend.frameon": False,
            "lines.linewidth": 1.6,
            "font.size": 9.5,
                    }
    )


use_style()

MAX_FRAMES = 100  # values of one slider: a page carries every frame


def _png_text_chunks(png: bytes, items: Mapping[str, str]) -> bytes:
    """``png`` with one ``tEXt`` chunk per item inserted after its header chunk (PNG spec 11.3.4:
    length, type, keyword, a zero byte, latin-1 text, CRC-32 of type and data)."""
    import struct
    import zlib

    header_end = 8 + 8 + 13 + 4  # signature, then IHDR: length + type, 13 bytes of data, CRC
    chunks = b""
    for key, value in items.items():
        data = key.encode("latin-1") + b"\0" + value.encode("latin-1")
        body = b"tEXt" + data
        chunks += struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    return png[:header_end] + chunks + png[header_end:]


def _render_png(fig, dpi: int, **savefig) -> tuple[bytes, float]:
    """The figure as PNG bytes and the size in points of the smallest text it draws.

    The size is read while the figure is drawn (``Text.draw`` is wrapped for the duration), so
    tick labels of hidden axes or ticks outside the view, which are never drawn, do not count.
    """
    import io

    sizes: list[float] = []
    original = mpl.text.Text.draw

    def draw(text, renderer):
        if text.get_visible() and text.get_text().strip():
            sizes.append(float(text.get_fontsize()))
        return original(text, renderer)

    buffer = io.BytesIO()
    mpl.text.Text.draw = draw
    try:
        fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None}, **savefig)
    finally:
        mpl.text.Text.draw = original
    return buffer.getvalue(), (min(sizes) if sizes else float("inf"))


def _legibility(png: bytes, min_pt: float, dpi: int) -> bytes:
    """Mark a figure's PNG with what a page needs to tell its displayed text size:
    ``book:min-font-pt`` (``inf`` when it has no text) and ``book:dpi``."""
    return _png_text_chunks(png, {"book:min-font-pt": f"{min_pt:g}", "book:dpi": str(dpi)})


def figure_png(fig) -> tuple[bytes, dict]:
    """How a notebook shows a figure: PNG at ``FIGURE_DPI`` (2x) with its legibility chunks, and
    display metadata ``width`` = its width at 100 px per inch, so that it is shown at half its
    pixel size (sharp on high-resolution screens) and at most the column's width."""
    if not isinstance(fig, mpl.figure.Figure):
        raise ValueError(f"fig must be a matplotlib Figure, got {describe(fig)}")
    png, min_pt = _render_png(fig, FIGURE_DPI, bbox_inches="tight")
    width_px = int.from_bytes(png[16:20], "big")  # IHDR's width field
    return _legibility(png, min_pt, FIGURE_DPI), {"width": round(width_px * 100 / FIGURE_DPI)}


def _install_figure_formatter() -> None:
    """Inside IPython, show every matplotlib figure with :func:`figure_png`.

    matplotlib-inline registers its own PNG formatter when the backend is first loaded, so the
    backend is loaded here first and then overridden.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the book's dependencies
        return
    shell = get_ipython()
    if shell is None:
        return
    plt.get_backend()
    try:
        plt.switch_backend(mpl.get_backend())  # loads (and so configures) the inline backend
    except Exception:  # pragma: no cover - a headless shell without the inline backend
        return
    formatter = shell.display_formatter.formatters["image/png"]
    formatter.for_type(mpl.figure.Figure, figure_png)


_install_figure_formatter()


def _check_axes(ax) -> None:
    if not isinstance(ax, mpl.axes.Axes):
        raise ValueError(f"ax must be a matplotlib Axes, got {describe(ax)}")


def _finite_curve(values, name: str) -> np.ndarray:
    """``values`` as a non-empty 1-D array of finite floats (nan would be drawn as a gap)."""
    if hasattr(values, "detach"):  # a torch tensor, perhaps one that requires grad
        values = values.detach().cpu().numpy()
    try:
        array = np.asarray(values)
        if array.dtype.kind not in "iuf":  # no bools, complex numbers, strings or objects
            raise TypeError
        array = array.astype(float)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a 1-D sequence of real numbers, got {describe(values)}"
        ) from None
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite, got nan or inf entries (drawn as gaps)")
    return array


def _style_map(value, name: str) -> dict[str, str]:
    """None or a mapping of labels to strings (matplotlib colours or line styles)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{name} must map labels to strings, got {describe(value)}")
    return dict(value)


def _optional_text(value, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name} must be a string or None, got {describe(value)}")
    return value


def _check_figsize(figsize) -> tuple[float, float]:
    """A pair (width, height) of positive inches."""
    if not isinstance(figsize, (tuple, list)) or len(figsize) != 2:
        raise ValueError(
            f"figsize must be a pair (width, height) in inches, got {describe(figsize)}"
        )
    return tuple(as_positive_float(v, f"figsize[{i}]") for i, v in enumerate(figsize))


def _check_frames(count, name: str) -> int:
    return as_int(count, name, minimum=2, maximum=MAX_FRAMES)


def plot_impulse_responses(
    ax,
    responses: Mapping[str, Sequence[float]],
    *,
    kappa: int | None = None,
    colors: Mapping[str, str] | None = None,
    styles: Mapping[str, str] | None = None,
    start: int = 0,
) -> None:
    """Plot impulse responses h_start, h_start+1, … against k, shading the training window k < κ.

    ``responses`` maps a legend label to the entries (beginning at k = ``start``); ``colors`` and
    ``styles`` optionally map labels to matplotlib colours and line styles.
    """
    _check_axes(ax)
    if not isinstance(responses, Mapping) or not responses:
        raise ValueError(
            f"responses must map at least one label to an impulse response, got {responses!r:.60}"
        )
    if kappa is not None:
        kappa = as_int(kappa, "kappa", minimum=1)
    colors = _style_map(colors, "colors")
    for label, color in colors.items():
        if not mpl.colors.is_color_like(color):
            raise ValueError(f"colors[{label!r}] must be a matplotlib colour, got {color!r:.40}")
    styles = _style_map(styles, "styles")
    for label, style in styles.items():
        try:  # matplotlib's own parser of "o-", "--", "s:" ...
            mpl.axes._base._process_plot_format(style)
        except ValueError:
            raise ValueError(
                f"styles[{label!r}] must be a matplotlib format string such as 'o-' or '--', "
                f"got {style!r:.40}"
            ) from None
    start = as_int(start, "start", minimum=0)
    curves = {}
    for label, h in responses.items():
        if not isinstance(label, str):
            raise ValueError(f"responses' labels must be strings, got {label!r:.40}")
        curves[label] = _finite_curve(h, f"impulse response {label!r}")
    for label, h in curves.items():
        ax.plot(
            np.arange(start, start + len(h)),
            h,
            styles.get(label, "o-"),
            ms=3.5,
            label=label,
            color=colors.get(label),
        )
    if kappa is not None:
        ax.axvspan(
            -0.5,
            kappa - 0.5,
            color=COLORS["window"],
            alpha=0.6,
            lw=0,
            label=f"seen in training (k < κ = {kappa})",
        )
    ax.set_xlabel("k")
    ax.set_ylabel("impulse response $h_k$")
    ax.legend()


def plot_loss(
    ax, times, losses, *, label: str | None = None, color: str | None = None, logx: bool = False
) -> None:
    """Loss curve on a log scale (log–log with ``logx``, dropping times <= 0).

    ``times`` and ``losses`` finite, non-empty, of one length (losses <= 0 have no place on the
    log axis and are not drawn); ``label`` and ``color`` strings or None.
    """
    logx = as_bool(logx, "logx")
    _check_axes(ax)
    times = _finite_curve(times, "times")
    losses = _finite_curve(losses, "losses")
    if times.shape != losses.shape:
        raise ValueError(f"times and losses must have one length, got {times.size}, {losses.size}")
    label = _optional_text(label, "label")
    if _optional_text(color, "color") is not None and not mpl.colors.is_color_like(color):
        raise ValueError(f"color must be a matplotlib colour, got {color!r:.40}")
    if logx and not np.any(times > 0):
        raise ValueError("with logx, times must hold a time > 0 (times <= 0 are dropped)")
    keep = times > 0 if logx else np.ones_like(times, dtype=bool)
    ax.plot(times[keep], losses[keep], label=label, color=color)
    ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    ax.set_ylabel("training loss")


# --------------------------------------------------------------------------------------------
# Interactive exploration
# --------------------------------------------------------------------------------------------


class Table:
    """A small results table that renders as HTML in notebooks and the book, as text elsewhere."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[str]]):
        """``headers`` a non-empty list of strings; ``rows`` lists of one string per header (as
        :func:`table` formats them)."""
        if isinstance(headers, str) or not isinstance(headers, Sequence) or not headers:
            raise ValueError(
                f"headers must be a non-empty list of strings, got {describe(headers)}"
            )
        if not all(isinstance(h, str) for h in headers):
            raise ValueError(f"headers must be strings, got {describe(headers)}")
        if isinstance(rows, str) or not isinstance(rows, Sequence):
            raise ValueError(f"rows must be a list of rows, got {describe(rows)}")
        for index, row in enumerate(rows):
            if isinstance(row, str) or not isinstance(row, Sequence) or len(row) != len(headers):
                raise ValueError(
                    f"row {index} must be a list of {len(headers)} cells (one per header), "
                    f"got {describe(row)}"
                )
            if not all(isinstance(c, str) for c in row):
                raise ValueError(f"row {index} must hold strings (use table() for numbers)")
        self.headers = list(headers)
        self.rows = [list(row) for row in rows]

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        return f'<table class="table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

    def __repr__(self) -> str:
        columns = zip(self.headers, *self.rows, strict=True)
        widths = [max(len(str(c)) for c in column) for column in columns]
        lines = [self.headers, ["-" * w for w in widths], *self.rows]
        return "\n".join(
            "  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines
        )


_GLUE_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def table(
    headers: Sequence[str], rows: Sequence[Sequence], *, digits: int = 3, glue: str | None = None
) -> None:
    """Display a table, numbers to ``digits`` significant digits, a column at one precision.

    Chapters use it to set reproduced numbers beside the paper's; numbers are written by
    :func:`lib.book.typeset.column` (no e-notation, no nan: a missing value is ``None``, shown as a
    dash). With ``glue`` = a key the table is not displayed but glued (myst-nb) under that key, so
    that another page (a chapter's audit appendix) pastes it with the ``{glue}`` directive and its
    ``:doc:`` option, while the cell that computes it stays where the chapter needs it.
    """
    digits = as_int(digits, "digits", minimum=1, maximum=17)
    if glue is not None and (not isinstance(glue, str) or not _GLUE_KEY.fullmatch(glue)):
        raise ValueError(
            f"glue must be a key of letters, digits, '-' and '_' that starts with a letter, "
            f"got {describe(glue)}"
        )
    if isinstance(headers, str) or not isinstance(headers, Sequence):
        raise ValueError(f"headers must be a list of strings, got {headers!r:.60}")
    headers = [str(h) for h in headers]
    if not headers:
        raise ValueError("table needs at least one header")
    if isinstance(rows, str) or not isinstance(rows, Sequence):
        raise ValueError(f"rows must be a list of rows, got {rows!r:.60}")
    cells = []
    for index, row in enumerate(rows):
        if isinstance(row, str) or not isinstance(row, Sequence):
            raise ValueError(f"row {index} must be a list of cells, got {row!r:.60}")
        if len(row) != len(headers):
            raise ValueError(
                f"row {index} has {len(row)} cells, expected {len(headers)} (one per header)"
            )
        cells.append(list(row))
    from lib.book import typeset

    headers = [typeset.scientific(h) for h in headers]  # "ν = -0.8" -> "ν = −0.8", as the cells
    columns = [typeset.column([row[k] for row in cells], digits) for k in range(len(headers))]
    cells = [[column[i] for column in columns] for i in range(len(cells))]
    if glue is not None:
        from myst_nb import glue as myst_glue  # a book dependency; imported only in chapters

        myst_glue(glue, Table(headers, cells), display=False)
        return
    from IPython.display import display

    display(Table(headers, cells))


@dataclass(frozen=True)
class Slider:
    """A numeric parameter for :func:`explore`: range [lo, hi], a default, optional log scale."""

    lo: float
    hi: float
    default: float
    log: bool = False
    step: float | None = None

    def __post_init__(self):
        for name in ("lo", "hi", "default"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not np.isfinite(value)
            ):
                raise ValueError(f"Slider.{name} must be a finite number, got {value!r}")
        if not self.lo < self.hi:
            raise ValueError(f"Slider needs lo < hi, got lo={self.lo}, hi={self.hi}")
        if not self.lo <= self.default <= self.hi:
            raise ValueError(f"Slider default {self.default} is outside [{self.lo}, {self.hi}]")
        if not isinstance(self.log, bool):
            raise ValueError(f"Slider.log must be True or False, got {self.log!r:.60}")
        if self.log and self.lo <= 0:
            raise ValueError(f"a log-scale Slider needs lo > 0, got lo={self.lo}")
        if self.step is not None:
            step = as_positive_float(self.step, "Slider.step")
            if step > self.hi - self.lo:
                raise ValueError(f"Slider.step must be at most hi - lo, got {step}")

    @property
    def integer(self) -> bool:
        return (
            not self.log
            and all(isinstance(v, int) for v in (self.lo, self.hi, self.default))
            and (self.step is None or float(self.step).is_integer())
        )

    def frames(self, count: int) -> list:
        """``count`` values spread over the range (geometrically for log sliders)."""
        count = _check_frames(count, "count")
        if self.log:
            values = np.geomspace(self.lo, self.hi, count)
        else:
            values = np.linspace(self.lo, self.hi, count)
        if self.integer:
            return sorted({int(round(v)) for v in values})
        return [float(v) for v in values]


@dataclass(frozen=True)
class Choice:
    """A parameter for :func:`explore` taking one of a few values; the first is the default."""

    options: tuple

    def __post_init__(self):
        if not isinstance(self.options, (tuple, list)) or len(self.options) == 0:
            raise ValueError(f"Choice needs a non-empty tuple of options, got {self.options!r:.60}")

    @property
    def default(self):
        return self.options[0]

    def frames(self, count: int) -> list:
        """The options (``count``, checked like a :class:`Slider`'s, is not needed); numbers in
        increasing order whatever order they are given in, so that a slider runs from its
        smallest value to its largest (a teacher dimension 4, 3, 2 ran backwards); the default
        stays the first option given."""
        _check_frames(count, "count")
        options = list(self.options)
        numeric = all(
            isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            for v in options
        )
        return sorted(options) if numeric else options


def _as_spec(name: str, spec) -> Slider | Choice:
    if isinstance(spec, (Slider, Choice)):
        return spec
    if isinstance(spec, list):
        return Choice(tuple(spec))
    if isinstance(spec, tuple) and len(spec) == 3:
        return Slider(*spec)
    raise ValueError(
        f"parameter {name!r}: expected a Slider, a Choice, a list of options or a tuple "
        f"(lo, hi, default), got {spec!r}"
    )


def _widget(name: str, spec: Slider | Choice):
    import ipywidgets as widgets

    common = {
        "description": name,
        "continuous_update": False,
        "style": {"description_width": "initial"},
    }
    if isinstance(spec, Choice):
        return widgets.Dropdown(
            options=spec.frames(2), value=spec.default, description=name, style=common["style"]
        )
    if spec.log:
        return widgets.FloatLogSlider(
            value=spec.default,
            base=10,
            min=np.log10(spec.lo),
            max=np.log10(spec.hi),
            step=spec.step or 0.05,
            readout_format=".2e",
            **common,
        )
    if spec.integer:
        return widgets.IntSlider(
            value=spec.default, min=spec.lo, max=spec.hi, step=int(spec.step or 1), **common
        )
    step = spec.step or (spec.hi - spec.lo) / 100
    return widgets.FloatSlider(
        value=spec.default, min=spec.lo, max=spec.hi, step=step, readout_format=".3g", **common
    )


def _parameter_label(name: str) -> str:
    """The name a slider carries on the page (and that the text marks with ``{.param}``)."""
    return name.replace("_", " ")


def explore(
    fn: Callable,
    *,
    alt: str,
    frames: int = 6,
    figsize: tuple[float, float] = (FIGURE_WIDTH, 3.4),
    **params,
):
    """Explore ``fn(fig, **params)``, a function that draws into a matplotlib figure.

    Each keyword in ``params`` describes one parameter: a :class:`Slider`, a tuple
    ``(lo, hi, default)`` (integer slider if all three are ints), a :class:`Choice` or a list of
    options (first = default). ``alt`` describes the figure for readers who cannot see it (the
    image's alt text). What is shown depends on :func:`lib.engine.config.book_mode`:

    * ``live``: sliders; the figure is redrawn when a slider is released.
    * ``build``: one slider per parameter over precomputed frames of every combination (each
      :class:`Choice`'s options, ``frames`` values of each :class:`Slider`), see
      :func:`slider_grid_html`; the page carries every frame, within ``GRID_BUDGET_BYTES``.
    * ``test``: a single frame at the defaults.

    On the page a parameter ``relative_gap`` is the slider "relative gap".

    Returns ``None`` (so that a notebook does not display the figure twice).
    """
    if not callable(fn):
        raise ValueError(f"fn must be a callable fn(fig, **params), got {type(fn).__name__}")
    if not isinstance(alt, str) or len(alt.split()) < 4:
        raise ValueError(f"alt must describe the figure in a few words, got {describe(alt)}")
    if not params:
        raise ValueError("explore needs at least one parameter to vary")
    specs = {name: _as_spec(name, spec) for name, spec in params.items()}
    frames = _check_frames(frames, "frames")
    figsize = _check_figsize(figsize)
    defaults = {name: spec.default for name, spec in specs.items()}
    mode = book_mode()

    if mode == "test":
        fig = plt.figure(figsize=figsize)
        fn(fig, **defaults)
        plt.show()
        return None

    if mode == "build":
        from IPython.display import HTML, display

        display(HTML(slider_grid_html(fn, specs, frames=frames, figsize=figsize, alt=alt)))
        return None

    import ipywidgets as widgets
    from IPython.display import display

    controls = {name: _widget(name, spec) for name, spec in specs.items()}

    def update(**values):
        fig = plt.figure(figsize=figsize)
        fn(fig, **values)
        plt.show()

    output = widgets.interactive_output(update, controls)
    display(widgets.VBox([widgets.HBox(list(controls.values())), output]))
    return None


# The multi-slider figure: every frame as a PNG data URI in one JavaScript array (row-major over
# the sliders, the first slider slowest); moving a slider shows the frame of the current indices.
_GRID_SCRIPT = """<script>
(function () {
  var root = document.getElementById("%(uid)s");
  var frames = %(frames)s, labels = %(labels)s;
  var image = root.querySelector("img"), sliders = root.querySelectorAll("input[type=range]");
  var alt = image.getAttribute("alt"), status = root.querySelector(".slider-grid-status");
  function show() {
    var index = 0, chosen = [];
    sliders.forEach(function (slider, k) {
      var i = parseInt(slider.value, 10);
      index = index * labels[k].length + i;
      slider.nextElementSibling.textContent = labels[k][i];
      slider.setAttribute("aria-valuetext", labels[k][i]);
      chosen.push(slider.name + " " + labels[k][i]);
    });
    image.src = frames[index];
    image.alt = alt + " Shown: " + chosen.join(", ") + ".";
    if (status) status.textContent = "Showing " + chosen.join(", ") + ".";
  }
  sliders.forEach(function (slider) { slider.addEventListener("input", show); });
  show();
})();
</script>"""


MAX_GRID_FRAMES = 64  # frames of one multi-slider figure
GRID_DPI = 120  # a frame is shown at the column's width; 1.2x keeps a page light
# An exploration's frames together: at most this many bytes of PNG on the page (about 40 kB a
# frame at GRID_DPI, so a full grid of MAX_GRID_FRAMES frames fits).
GRID_BUDGET_BYTES = 3_000_000


def _small_png(fig, dpi: int) -> bytes:
    """The figure as a PNG with a 128-colour palette, marked like :func:`figure_png`'s: a line
    plot looks the same, and the file is about a quarter of the full-colour one (the page
    carries every frame of a slider grid)."""
    import io

    from PIL import Image

    png, min_pt = _render_png(fig, dpi)
    image = Image.open(io.BytesIO(png)).convert("RGB")
    out = io.BytesIO()
    image.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(
        out, format="PNG", optimize=True
    )
    return _legibility(out.getvalue(), min_pt, dpi)


def _grid_labels(options: Sequence) -> list[str]:
    """A slider's values as the page shows them, all in one style (numbers through
    :mod:`lib.book.typeset`): ``.3g`` when that needs no exponent for any of them, otherwise every
    one as a power of ten with trailing zeros dropped (10⁻⁵, 10⁻³, 3.16 × 10⁻¹)."""
    import re as regex

    from lib.book import typeset

    if any(value is None for value in options):
        raise ValueError("a slider option shown on the page must not be None: give it a name")
    floats = [isinstance(v, (float, np.floating)) for v in options]
    if not any(floats):
        return [typeset.scientific(str(v)) for v in options]  # 20000 -> 20 000, -1 -> −1
    plain = [format(float(v), ".3g") if f else str(v) for v, f in zip(options, floats, strict=True)]
    if not any("e" in text for text, f in zip(plain, floats, strict=True) if f):
        return [typeset.scientific(text) for text in plain]
    return [
        typeset.scientific(regex.sub(r"\.?0+e", "e", format(float(v), ".2e"))) if f else str(v)
        for v, f in zip(options, floats, strict=True)
    ]


def slider_grid_html(
    fn: Callable,
    specs: Mapping[str, Slider | Choice],
    *,
    alt: str,
    frames: int = 6,
    figsize: tuple[float, float] = (FIGURE_WIDTH, 3.4),
    dpi: int = GRID_DPI,
) -> str:
    """A static figure with one slider per parameter, from precomputed frames (plain JavaScript).

    ``fn(fig, **values)`` is drawn once for every combination of the parameters' values (each
    :class:`Choice`'s options, ``frames`` values of each :class:`Slider`) and saved as a PNG at
    ``dpi``; the HTML holds all of them, so its size grows with the product of the counts (at
    most ``MAX_GRID_FRAMES`` frames and ``GRID_BUDGET_BYTES`` bytes). Each slider starts at its
    parameter's default (the nearest grid value for a :class:`Slider`). The ``div`` carries
    ``data-parameters`` (the sliders' names, ``|``-separated) and the image's alt text ``alt``.

    For a reader who does not see the picture: each slider's ``aria-valuetext`` is the value its
    label shows (an architecture's name, not its index), the image's alt text ends with the
    values of the frame shown ("... Shown: attack gradient matching, seed 2."), and a visually
    hidden ``aria-live`` region announces them when a slider moves. The image sits in its own
    ``div.slider-grid-frame``, which scrolls sideways on a phone while the sliders stay in view
    (``book/_static/book.css``).
    """
    import base64
    import itertools
    import json
    import uuid

    if not callable(fn):
        raise ValueError(f"fn must be a callable fn(fig, **values), got {describe(fn)}")
    if not isinstance(alt, str) or len(alt.split()) < 4:
        raise ValueError(f"alt must describe the figure in a few words, got {describe(alt)}")
    if not isinstance(specs, Mapping):
        raise ValueError(
            f"specs must map parameter names to Sliders or Choices, got {describe(specs)}"
        )
    if not specs:
        raise ValueError("slider_grid_html needs at least one parameter")
    if not all(isinstance(name, str) for name in specs):
        raise ValueError(f"specs' parameter names must be strings, got {list(specs)!r:.60}")
    specs = {name: _as_spec(name, spec) for name, spec in specs.items()}
    frames = _check_frames(frames, "frames")
    figsize = _check_figsize(figsize)
    dpi = as_int(dpi, "dpi", minimum=10, maximum=600)
    values = {name: spec.frames(frames) for name, spec in specs.items()}
    labels = [_grid_labels(options) for options in values.values()]
    count = int(np.prod([len(v) for v in values.values()]))
    if count > MAX_GRID_FRAMES:
        sizes = " x ".join(f"{len(v)} {name}" for name, v in values.items())
        raise ValueError(
            f"a slider grid of {sizes} is {count} frames, more than {MAX_GRID_FRAMES}: the page "
            "would carry them all; use fewer values"
        )
    starts = {}
    for name, spec in specs.items():
        options = values[name]
        if spec.default in options:
            starts[name] = options.index(spec.default)
        else:  # a Slider's default between grid values: the nearest one
            starts[name] = int(np.argmin([abs(v - spec.default) for v in options]))
    images = []
    fig = plt.figure(figsize=figsize)
    for combination in itertools.product(*values.values()):
        fig.clear()
        fn(fig, **dict(zip(values, combination, strict=True)))
        images.append("data:image/png;base64," + base64.b64encode(_small_png(fig, dpi)).decode())
    plt.close(fig)
    weight = sum(len(image) for image in images)
    if weight > GRID_BUDGET_BYTES:
        raise ValueError(
            f"the slider grid's {count} frames weigh {weight / 1e6:.1f} MB, more than the "
            f"{GRID_BUDGET_BYTES / 1e6:.1f} MB budget of one exploration: use fewer values"
        )
    uid = f"slider-grid-{uuid.uuid4().hex[:12]}"
    names = [_parameter_label(name) for name in values]
    controls = "".join(
        f'<label style="white-space:nowrap">{html.escape(label)} '
        f'<input type="range" name="{html.escape(label)}" min="0" max="{len(options) - 1}" '
        f'step="1" value="{starts[name]}" style="vertical-align:middle;max-width:9em"> '
        f"<output></output></label>"
        for label, (name, options) in zip(names, values.items(), strict=True)
    )
    script = _GRID_SCRIPT % {
        "uid": uid,
        "frames": json.dumps(images),
        "labels": json.dumps(labels),
    }
    return (
        f'<div class="slider-grid" id="{uid}" '
        f'data-parameters="{html.escape("|".join(names))}">'
        f'<div class="slider-grid-frame"><img alt="{html.escape(alt)}" '
        f'style="max-width:100%;width:{round(figsize[0] * 100)}px"></div>'
        f'<div style="display:flex;flex-wrap:wrap;gap:0.3em 1.5em">{controls}</div>'
        f'<span class="slider-grid-status" aria-live="polite" style="position:absolute;'
        f'width:1px;height:1px;overflow:hidden;clip-path:inset(50%);white-space:nowrap"></span>'
        f"</div>\n{script}"
    )
