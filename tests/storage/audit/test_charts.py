"""The matplotlib charts (storage/audit/charts.py) as SVG: one mark per value with its exact value
as a tooltip, missing values left out, an error bar through its point, exact tick labels, valid
XML, the same bytes for the same data, and matplotlib loaded only when a chart is drawn."""

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from storage.audit.charts import bar_chart, curve_chart, line_chart

NS = "{http://www.w3.org/2000/svg}"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def marks(svg: str, prefix: str) -> dict[str, ET.Element]:
    """The chart's marks whose gid starts with `prefix` (point-, interval-, bar-, curve-)."""
    return {g.get("id"): g for g in ET.fromstring(svg).iter(f"{NS}g")
            if (g.get("id") or "").startswith(prefix)}


def tooltip(mark: ET.Element) -> str:
    return mark.find(f"{NS}title").text


def ticks(svg: str, axis: str = "y") -> list[str]:
    return [t.text for g in ET.fromstring(svg).iter(f"{NS}g")
            if (g.get("id") or "").startswith(f"{axis}tick_") for t in g.iter(f"{NS}text")]


def path_points(mark: ET.Element) -> list[tuple[float, float]]:
    """The (x, y) vertices of a mark's first <path> (its d attribute)."""
    numbers = [float(n) for n in NUMBER.findall(mark.find(f"{NS}path").get("d"))]
    return list(zip(numbers[::2], numbers[1::2], strict=True))


def dot(mark: ET.Element) -> tuple[float, float]:
    use = next(mark.iter(f"{NS}use"))
    return float(use.get("x")), float(use.get("y"))


def test_line_chart_draws_one_point_per_value_and_skips_missing_ones():
    svg = line_chart(["base", "0", "1"], {"overall": [0.1, None, 0.5], "level_1": [0.2, 0.3, 0.4]},
                     title="accuracy", y_max=1.0, percent=True)
    points = marks(svg, "point-")
    assert list(points) == ["point-0-0", "point-0-2", "point-1-0", "point-1-1", "point-1-2"]
    assert [tooltip(p) for p in points.values()][:2] == ["overall, base: 10.0%",
                                                         "overall, 1: 50.0%"]
    assert 'aria-label="accuracy"' in svg and svg.startswith("<svg")


def test_an_interval_is_an_error_bar_through_its_point_with_its_values():
    svg = line_chart(["base", "1"], {"overall": [0.2, 0.5], "level_1": [0.1, None]}, title="t",
                     y_max=1.0, percent=True,
                     intervals={"overall": [(0.1, 0.3), None], "level_1": [None, (0.0, 1.0)]})
    bars = marks(svg, "interval-")
    # level_1 has no point in round 1, so no bar there either
    assert {gid: tooltip(b) for gid, b in bars.items()} == {
        "interval-0-0": "overall, base: 95% interval 10.0% to 30.0%"}
    (x_top, y_top), (x_bottom, y_bottom) = sorted(path_points(bars["interval-0-0"]),
                                                  key=lambda p: p[1])
    x, y = dot(marks(svg, "point-0-0")["point-0-0"])
    assert x_top == pytest.approx(x) == pytest.approx(x_bottom)  # through the point
    assert y_top < y < y_bottom
    # 20% sits halfway between 10% and 30% on a linear axis
    assert y - y_top == pytest.approx(y_bottom - y, rel=1e-3)


def test_bar_heights_are_proportional_and_stacks_add_up():
    svg = bar_chart(["0", "1"], {"a": [10, 30], "b": [None, 10]}, title="t", stacked=True)
    bars = {gid: path_points(b) for gid, b in marks(svg, "bar-").items()}
    assert list(bars) == ["bar-0-0", "bar-0-1", "bar-1-1"]

    def top_bottom(points):
        ys = [y for _, y in points]
        return min(ys), max(ys)

    (top0, base0), (top1, base1), (top_b, base_b) = (top_bottom(bars[k]) for k in bars)
    assert base1 - top1 == pytest.approx(3 * (base0 - top0), rel=1e-3)
    assert base_b == pytest.approx(top1)  # b sits on top of a in group "1"
    assert tooltip(marks(svg, "bar-1-1")["bar-1-1"]) == "b, 1: 10"


def test_grouped_bars_sit_side_by_side_one_per_series():
    svg = bar_chart(["0"], {"a": [1], "b": [2], "c": [3]}, title="t")
    lefts = [min(x for x, _ in path_points(b)) for b in marks(svg, "bar-").values()]
    assert len(lefts) == 3 and lefts == sorted(lefts) and len(set(lefts)) == 3


def test_user_text_is_escaped_and_the_svg_is_valid_xml():
    svg = bar_chart(["<r>"], {"a & b": [1]}, title="x < y")
    assert tooltip(marks(svg, "bar-0-0")["bar-0-0"]) == "a & b, <r>: 1"
    assert "<r>" not in svg and 'aria-label="x &lt; y"' in svg


def test_percent_ticks_are_exact_not_rounded_to_whole_percents():
    # the pass-rate histogram's shares peak below 10%: ticks every 2.5%
    svg = bar_chart(["0.0", "0.1"], {"round 1": [0.04, 0.09]}, title="t", percent=True)
    assert ticks(svg) == ["0%", "2.5%", "5%", "7.5%", "10%"]
    svg = line_chart(["0"], {"a": [0.2]}, title="t", percent=True, y_max=0.25)
    assert ticks(svg) == ["0%", "6.25%", "12.5%", "18.75%", "25%"]
    assert ticks(bar_chart(["0"], {"a": [2300]}, title="t")) == [
        "0", "625", "1,250", "1,875", "2,500"]


def test_a_chart_below_zero_has_negative_ticks_and_unconnected_points():
    svg = line_chart(["0", "1"], {"a": [-0.05, 0.1]}, title="t", y_min=-0.1, y_max=0.1,
                     percent=True, connect=False)
    assert ticks(svg) == ["-10%", "-5%", "0%", "5%", "10%"]
    assert ticks(svg, "x") == ["0", "1"]
    series_lines = [p for p in ET.fromstring(svg).iter(f"{NS}path")
                    if "stroke: #4e79a7" in (p.get("style") or "") and " L " in p.get("d")]
    assert series_lines == []  # points, no line between them
    connected = line_chart(["0", "1"], {"a": [-0.05, 0.1]}, title="t", y_min=-0.1, y_max=0.1)
    assert any("stroke: #4e79a7" in (p.get("style") or "") and " L " in p.get("d")
               for p in ET.fromstring(connected).iter(f"{NS}path"))


def test_curve_chart_places_points_on_a_numeric_step_axis():
    svg = curve_chart({"round 0": [(10, 2.0), (20, 1.0), (40, 0.5)], "round 1": [(10, 0.8)]},
                      title="training loss per round", y_label="loss")
    curves = marks(svg, "curve-")
    assert [tooltip(c) for c in curves.values()] == [
        "round 0: step 10: 2; step 20: 1; step 40: 0.5", "round 1: step 10: 0.8"]
    xs = [x for x, _ in path_points(curves["curve-0"])]
    assert xs[2] - xs[1] == pytest.approx(2 * (xs[1] - xs[0]), rel=1e-4)  # steps, not categories
    assert ticks(svg, "x") == ["0", "12.5", "25", "37.5", "50"]


def test_the_same_data_gives_the_same_bytes_and_no_date():
    def draw():
        return line_chart(["base", "0"], {"overall": [0.1, 0.4]}, title="t", y_max=1.0,
                          percent=True, intervals={"overall": [(0.0, 0.3), (0.2, 0.6)]})

    first = draw()
    assert first == draw()
    assert "<dc:date>" not in first and "<?xml" not in first


def test_importing_the_report_does_not_load_matplotlib_or_jinja2():
    probe = ("import sys, storage.audit.report, storage.audit.charts; "
             "print(sorted(m for m in ('matplotlib', 'jinja2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    assert out.strip() == "[]"
