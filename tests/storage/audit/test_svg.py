"""The SVG chart helpers: one mark per value, missing values left out, valid XML."""

import xml.etree.ElementTree as ET

import pytest

from storage.audit.svg import bar_chart, line_chart

NS = "{http://www.w3.org/2000/svg}"


def _marks(svg: str, tag: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [e for e in root.iter(f"{NS}{tag}") if e.find(f"{NS}title") is not None]


def test_line_chart_draws_one_point_per_value_and_skips_missing_ones():
    svg = line_chart(["base", "0", "1"], {"overall": [0.1, None, 0.5], "level_1": [0.2, 0.3, 0.4]},
                     title="accuracy", y_max=1.0, percent=True)
    points = _marks(svg, "circle")
    assert len(points) == 5
    assert [p.find(f"{NS}title").text for p in points][:2] == ["overall, base: 10.0%",
                                                               "overall, 1: 50.0%"]


def test_bar_heights_are_proportional_and_stacks_add_up():
    svg = bar_chart(["0", "1"], {"a": [10, 30], "b": [None, 10]}, title="t", stacked=True)
    bars = _marks(svg, "rect")
    assert len(bars) == 3
    heights = [float(b.get("height")) for b in bars]
    assert heights[1] == pytest.approx(3 * heights[0], abs=0.2)
    tops = [float(b.get("y")) for b in bars]
    # b sits on top of a in group "1"
    assert tops[2] + heights[2] == pytest.approx(tops[1], abs=0.2)


def test_titles_are_escaped():
    svg = bar_chart(["<r>"], {"a & b": [1]}, title="x < y")
    assert ET.fromstring(svg) is not None and "a &amp; b, &lt;r&gt;: 1" in svg


def _ticks(svg: str) -> list[str]:
    """The y-axis tick labels (right-aligned texts left of the plot)."""
    root = ET.fromstring(svg)
    return [t.text for t in root.iter(f"{NS}text") if t.get("text-anchor") == "end"]


def test_percent_ticks_are_exact_not_rounded_to_whole_percents():
    # the pass-rate histogram's shares peak below 10%: ticks every 2.5%
    svg = bar_chart(["0.0", "0.1"], {"round 1": [0.04, 0.09]}, title="t", percent=True)
    assert _ticks(svg) == ["0%", "2.5%", "5%", "7.5%", "10%"]
    svg = line_chart(["0"], {"a": [0.2]}, title="t", percent=True, y_max=0.25)
    assert _ticks(svg) == ["0%", "6.25%", "12.5%", "18.75%", "25%"]
    assert _ticks(bar_chart(["0"], {"a": [2300]}, title="t")) == [
        "0", "625", "1,250", "1,875", "2,500"]


def test_an_interval_is_an_error_bar_through_its_point_with_its_values():
    svg = line_chart(["base", "1"], {"overall": [0.2, 0.5], "level_1": [0.1, None]}, title="t",
                     y_max=1.0, percent=True,
                     intervals={"overall": [(0.1, 0.3), None], "level_1": [None, (0.0, 1.0)]})
    bars = _marks(svg, "line")
    # level_1 has no point in round 1, so no bar there either
    assert [b.find(f"{NS}title").text for b in bars] == [
        "overall, base: 95% interval 10.0% to 30.0%"]
    point = _marks(svg, "circle")[0]
    bar = bars[0]
    assert float(bar.get("x1")) == float(point.get("cx"))  # through the point
    assert float(bar.get("y2")) > float(point.get("cy")) > float(bar.get("y1"))


def test_a_chart_below_zero_has_negative_ticks_and_a_zero_line_and_unconnected_points():
    svg = line_chart(["0", "1"], {"a": [-0.05, 0.1]}, title="t", y_min=-0.1, y_max=0.1,
                     percent=True, connect=False)
    assert _ticks(svg) == ["-10%", "-5%", "0%", "5%", "10%"]
    root = ET.fromstring(svg)
    assert not list(root.iter(f"{NS}polyline"))
    y0 = [float(e.get("y1")) for e in root.iter(f"{NS}line") if e.get("stroke") == "#555"
          and e.get("y1") == e.get("y2")]
    low, high = (float(c.get("cy")) for c in _marks(svg, "circle"))
    assert any(high < y < low for y in y0)  # the zero line between -5% and +10%
