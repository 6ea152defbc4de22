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
