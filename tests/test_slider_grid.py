"""Tests of lib.viz's multi-slider figure (explore(grid=True) in build mode)."""

import json
import re

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from lib import viz  # noqa: E402


def _draw(fig, *, amplitude, shape="sine"):
    fig.add_subplot().set_title(f"{amplitude:.3g} {shape}")


def _frames(html):
    return json.loads(re.search(r"var frames = (\[.*?\]), labels", html).group(1))


def test_slider_grid_draws_every_combination_once():
    drawn = []

    def draw(fig, **values):
        drawn.append(values)
        _draw(fig, **values)

    specs = {"amplitude": viz.Slider(1.0, 3.0, 2.0), "shape": viz.Choice(("sine", "line"))}
    html = viz.slider_grid_html(draw, specs, frames=3)
    assert drawn == [
        {"amplitude": a, "shape": s} for a in (1.0, 2.0, 3.0) for s in ("sine", "line")
    ]
    frames = _frames(html)
    assert len(frames) == 6 and all(f.startswith("data:image/png;base64,") for f in frames)
    assert len(set(frames)) == 6  # the titles differ, so every frame differs
    # one range input per parameter, starting at the default (amplitude 2.0 is index 1)
    sliders = re.findall(
        r'<input type="range" name="(\w+)" min="0" max="(\d+)" step="1" '
        r'value="(\d+)">',
        html,
    )
    assert sliders == [("amplitude", "2", "1"), ("shape", "1", "0")]


def test_explore_grid_in_build_mode_displays_the_slider_grid(monkeypatch):
    monkeypatch.setenv("BOOK_MODE", "build")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    viz.explore(_draw, grid=True, amplitude=[1.0, 2.0], shape=["sine", "line"])
    (out,) = shown
    assert 'class="slider-grid"' in out.data and len(_frames(out.data)) == 4


def test_explore_grid_must_be_a_bool():
    with pytest.raises(ValueError, match="grid must be True or False"):
        viz.explore(_draw, grid=1, amplitude=[1.0, 2.0])


def test_slider_grid_needs_a_parameter():
    with pytest.raises(ValueError, match="at least one parameter"):
        viz.slider_grid_html(_draw, {})


def test_slider_grid_refuses_too_many_frames():
    specs = {"a": viz.Choice(tuple(range(10))), "b": viz.Choice(tuple(range(7)))}
    with pytest.raises(ValueError, match="70 frames, more than 64"):
        viz.slider_grid_html(_draw, specs)


def test_explore_animation_requests_nothing_from_another_host(monkeypatch):
    # The book serves Font Awesome itself; matplotlib's CDN stylesheet link is taken out.
    monkeypatch.setenv("BOOK_MODE", "build")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    viz.explore(_draw, frames=2, amplitude=(1.0, 2.0, 1.0))
    (out,) = shown
    assert "anim-slider" in out.data and "https://" not in out.data and "http://" not in out.data
