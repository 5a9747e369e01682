"""Tests of lib.book.viz and lib.engine.config: the three modes of explore, plots, settings."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lib.book import viz  # noqa: E402
from lib.engine.config import book_mode, book_scale, scaled  # noqa: E402

ALT = "a curve whose amplitude and shape follow the sliders"


def _draw(fig, *, amplitude, shape="sine", n=3):
    ax = fig.add_subplot()
    x = np.linspace(0, 1, 50)
    ax.plot(x, amplitude * (np.sin(n * x) if shape == "sine" else x))
    ax.set_title(f"{amplitude:.3g} {shape} {n}")


def test_explore_test_mode_draws_one_frame_at_defaults(monkeypatch):
    monkeypatch.setenv("BOOK_MODE", "test")
    plt.close("all")
    viz.explore(
        _draw,
        alt=ALT,
        amplitude=viz.Slider(0.1, 10.0, 2.0, log=True),
        shape=["sine", "line"],
        n=(1, 5, 3),
    )
    (number,) = plt.get_fignums()
    assert plt.figure(number).axes[0].get_title() == "2 sine 3"
    plt.close("all")


def test_explore_build_mode_shows_one_slider_per_parameter(monkeypatch):
    monkeypatch.setenv("BOOK_MODE", "build")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    titles = []

    def draw(fig, **kw):
        _draw(fig, **kw)
        titles.append(fig.axes[0].get_title())

    viz.explore(draw, alt=ALT, frames=3, amplitude=(0.0, 1.0, 0.5), n=(1, 5, 3))
    (out,) = shown
    assert 'data-parameters="amplitude|n"' in out.data and out.data.count('type="range"') == 2
    assert f'alt="{ALT}"' in out.data
    assert len(titles) == 9 and {"0.5 sine 1", "0 sine 5", "1 sine 3"} <= set(titles)


def test_explore_live_mode_builds_widgets(monkeypatch):
    monkeypatch.delenv("BOOK_MODE", raising=False)
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    viz.explore(
        _draw,
        alt=ALT,
        amplitude=viz.Slider(0.1, 10.0, 2.0, log=True),
        shape=["sine", "line"],
        n=(1, 5, 3),
    )
    import ipywidgets

    box = shown[0]
    assert isinstance(box, ipywidgets.VBox)
    sliders = box.children[0].children
    assert [type(w).__name__ for w in sliders] == ["FloatLogSlider", "Dropdown", "IntSlider"]
    assert all(
        getattr(w, "continuous_update", False) is False
        for w in sliders
        if hasattr(w, "continuous_update")
    )
    plt.close("all")


def test_slider_frames():
    assert viz.Slider(1, 5, 3).frames(5) == [1, 2, 3, 4, 5]
    np.testing.assert_allclose(viz.Slider(1e-3, 1e-1, 1e-2, log=True).frames(3), [1e-3, 1e-2, 1e-1])


@pytest.mark.parametrize(
    "call",
    [
        lambda: viz.explore(3, alt=ALT, a=(0, 1, 0.5)),
        lambda: viz.explore(_draw, alt=ALT),
        lambda: viz.explore(_draw, alt=ALT, amplitude="big"),
        lambda: viz.explore(_draw, alt="", amplitude=(0, 1, 0.5)),
        lambda: viz.explore(_draw, alt=ALT, frames=1, amplitude=(0, 1, 0.5)),
        lambda: viz.Slider(1, 0, 0.5),
        lambda: viz.Slider(0, 1, 2),
        lambda: viz.Slider(0, 1, 0.5, log=True),
        lambda: viz.Choice(()),
        lambda: viz.plot_impulse_responses(plt.figure().add_subplot(), {}),
        lambda: viz.plot_loss(plt.figure().add_subplot(), [1, 2], [1]),
        # nan times were drawn as gaps, a string header split into one header per character,
        # a zero or nan step stored
        lambda: viz.plot_loss(plt.figure().add_subplot(), [1, np.nan], [1.0, 0.5]),
        lambda: viz.plot_loss(plt.figure().add_subplot(), [1, 2], [1 + 1j, 0.5]),
        lambda: viz.plot_loss(plt.figure().add_subplot(), [1, 2], [1.0, 0.5], color="no colour"),
        lambda: viz.plot_loss("axes", [1, 2], [1.0, 0.5]),
        lambda: viz.plot_impulse_responses(plt.figure().add_subplot(), {"h": [1.0, np.inf]}),
        lambda: viz.plot_impulse_responses(plt.figure().add_subplot(), {"h": [1.0]}, styles=3),
        lambda: viz.Table("ab", [["1", "2"]]),
        lambda: viz.Table(["a", "b"], [[1.0, 2.0]]),
        lambda: viz.Slider(0.0, 1.0, 0.5, step=0.0),
        lambda: viz.Slider(0.0, 1.0, 0.5, step=np.nan),
        lambda: viz.Slider(0.0, 1.0, 0.5).frames(1.5),
        lambda: viz.explore(_draw, alt=ALT, figsize=(0, 3), amplitude=(0, 1, 0.5)),
        lambda: viz.explore(_draw, alt=ALT, frames=10**6, amplitude=(0, 1, 0.5)),
        lambda: viz.slider_grid_html(None, {"a": viz.Choice((1, 2))}, alt=ALT),
        lambda: viz.slider_grid_html(_draw, "abc", alt=ALT),
        lambda: viz.slider_grid_html(_draw, {"a": viz.Choice((1, 2))}, alt=ALT, dpi=0),
        lambda: viz.slider_grid_html(_draw, {"a": viz.Choice((1, 2))}, alt="figure"),
    ],
)
def test_bad_input(call):
    with pytest.raises(ValueError):
        call()
    plt.close("all")


def test_plots_draw():
    fig, (ax1, ax2) = plt.subplots(1, 2)
    viz.plot_impulse_responses(ax1, {"teacher": [1, 1, 1], "student": [1, 0.9, 0.5]}, kappa=2)
    viz.plot_loss(ax2, [0, 1, 2], [1.0, 0.1, 0.01], logx=True)
    assert len(ax1.lines) == 2 and ax2.get_yscale() == "log"
    plt.close(fig)


def test_config(monkeypatch):
    monkeypatch.delenv("BOOK_SCALE", raising=False)
    assert book_scale() == "fast" and scaled(1, 2) == 1
    monkeypatch.setenv("BOOK_SCALE", "full")
    assert scaled(1, 2) == 2
    monkeypatch.setenv("BOOK_SCALE", "huge")
    with pytest.raises(ValueError, match="BOOK_SCALE"):
        book_scale()
    monkeypatch.setenv("BOOK_MODE", "nonsense")
    with pytest.raises(ValueError, match="BOOK_MODE"):
        book_mode()


def test_table_formats_numbers_and_escapes_html(monkeypatch):
    from lib.book.viz import Table, table

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    table(["small", "plain", "text"], [[0.00127, 12.5, None], [0.5, 1.25, "x"]])
    (out,) = shown
    # significant digits by each number (not the column's smallest); e-notation as a power of ten
    # for a column that spans beyond [10⁻², 10⁴); None as a dash
    assert [row[0] for row in out.rows] == ["1.27\u00a0×\u00a010⁻³", "5.00\u00a0×\u00a010⁻¹"]
    assert [row[1] for row in out.rows] == ["12.5", "1.25"]
    assert [row[2] for row in out.rows] == ["—", "x"]
    with pytest.raises(ValueError, match="finite"):
        table(["a"], [[float("nan")]])
    shown.clear()
    table(["ν = -0.8: steps", "count"], [["a", 200000]])
    assert shown[0].headers[0] == "ν = \u22120.8: steps"  # headers follow the number convention
    assert shown[0].rows[0][1] == "200\u00a0000"
    rendered = Table(["|a_j|", "n"], [["x<y", "3"]])._repr_html_()
    assert "<th>|a_j|</th>" in rendered and "x&lt;y" in rendered
    assert repr(Table(["h"], [["value"]])).splitlines()[-1].strip() == "value"


def test_figure_png_marks_its_smallest_text_and_half_size_width():
    import struct

    fig, ax = plt.subplots(figsize=(5.0, 2.0))
    ax.plot([0, 1], [0, 1], label="line")
    ax.legend(fontsize=7.5)
    ax.set_xlabel("x", fontsize=12)
    png, metadata = viz.figure_png(fig)
    plt.close(fig)
    chunks = {}
    at = 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        if kind == b"tEXt":
            key, value = data.split(b"\0", 1)
            chunks[key.decode()] = value.decode()
        at += 12 + length
    assert chunks == {"book:min-font-pt": "7.5", "book:dpi": str(viz.FIGURE_DPI)}
    width = struct.unpack(">I", png[16:20])[0]
    # shown at 100 px per inch: half the pixels of a 200-dpi image (tight bbox: about 5 inches)
    assert metadata["width"] == round(width * 100 / viz.FIGURE_DPI)
    assert 400 < metadata["width"] < 560


def test_table_rejects_ragged_rows():
    from lib.book.viz import table

    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        table(["a", "b"], [[1.0]])
    with pytest.raises(ValueError, match="at least one header"):
        table([], [])


def test_a_glued_table_is_not_displayed_but_glued_under_its_key(monkeypatch):
    """table(glue=key) hands myst-nb the same Table, not displayed, for another page to paste."""
    import myst_nb

    from lib.book.viz import Table, table

    shown, glued = [], []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    monkeypatch.setattr(myst_nb, "glue", lambda key, obj, display=True: glued.append(
        (key, obj, display)))
    table(["a", "b"], [[0.5, "x"]], glue="prd-table_1")
    assert shown == [] and len(glued) == 1
    key, obj, display = glued[0]
    assert key == "prd-table_1" and display is False and isinstance(obj, Table)
    assert obj.rows == [["0.500", "x"]]
    for bad in ("", "1st", "a b", "a:b", 3, ["a"]):
        with pytest.raises(ValueError, match="glue must be a key"):
            table(["a"], [[1.0]], glue=bad)
    assert glued == [(key, obj, display)]  # a bad key glues nothing
