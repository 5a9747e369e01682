"""Tests of lib.book.viz's multi-slider figure (what explore shows in the built book)."""

import base64
import json
import re

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from lib.book import viz  # noqa: E402

ALT = "a titled empty plot for the chosen amplitude and shape"


def _draw(fig, *, amplitude, shape="sine"):
    fig.add_subplot().set_title(f"{amplitude:.3g} {shape}")


def _draw_init(fig, *, init_scale, shape):
    _draw(fig, amplitude=init_scale, shape=shape)


def _frames(html):
    return json.loads(re.search(r"var frames = (\[.*?\]), labels", html).group(1))


def test_slider_grid_draws_every_combination_once():
    drawn = []

    def draw(fig, **values):
        drawn.append(values)
        _draw(fig, **values)

    specs = {"amplitude": viz.Slider(1.0, 3.0, 2.0), "shape": viz.Choice(("sine", "line"))}
    html = viz.slider_grid_html(draw, specs, frames=3, alt=ALT)
    assert drawn == [
        {"amplitude": a, "shape": s} for a in (1.0, 2.0, 3.0) for s in ("sine", "line")
    ]
    frames = _frames(html)
    assert len(frames) == 6 and all(f.startswith("data:image/png;base64,") for f in frames)
    assert len(set(frames)) == 6  # the titles differ, so every frame differs
    # one range input per parameter, starting at the default (amplitude 2.0 is index 1)
    sliders = re.findall(
        r'<input type="range" name="(\w+)" min="0" max="(\d+)" step="1" value="(\d+)"', html
    )
    assert sliders == [("amplitude", "2", "1"), ("shape", "1", "0")]
    # every frame says how small its text is (the site test checks the displayed size)
    png = base64.b64decode(frames[0].split(",", 1)[1])
    assert b"tEXtbook:min-font-pt\x00" in png and b"tEXtbook:dpi\x00" in png


def test_explore_in_build_mode_displays_the_slider_grid(monkeypatch):
    monkeypatch.setenv("BOOK_MODE", "build")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    viz.explore(_draw_init, alt=ALT, init_scale=[1.0, 2.0], shape=["sine", "line"])
    (out,) = shown
    assert 'class="slider-grid"' in out.data and len(_frames(out.data)) == 4
    # a parameter's underscores are spaces on the page, where the text names it so
    assert 'data-parameters="init scale|shape"' in out.data
    assert 'name="init scale"' in out.data
    assert "https://" not in out.data and "http://" not in out.data


def test_slider_grid_needs_a_parameter():
    with pytest.raises(ValueError, match="at least one parameter"):
        viz.slider_grid_html(_draw, {}, alt=ALT)


def test_slider_grid_refuses_too_many_frames():
    specs = {"a": viz.Choice(tuple(range(10))), "b": viz.Choice(tuple(range(7)))}
    with pytest.raises(ValueError, match="70 frames, more than 64"):
        viz.slider_grid_html(_draw, specs, alt=ALT)


def test_slider_grid_refuses_an_unnamed_option():
    with pytest.raises(ValueError, match="must not be None"):
        viz.slider_grid_html(_draw, {"amplitude": viz.Choice((1.0, None))}, alt=ALT)


def test_slider_grid_keeps_to_its_page_budget(monkeypatch):
    monkeypatch.setattr(viz, "GRID_BUDGET_BYTES", 1000)
    with pytest.raises(ValueError, match="budget"):
        viz.slider_grid_html(_draw, {"amplitude": viz.Choice((1.0, 2.0))}, alt=ALT)
