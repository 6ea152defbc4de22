"""The report's charts, drawn by matplotlib as inline SVG strings (no scripts, nothing fetched).

    line_chart(["base", "0", "1"], {"overall": [0.1, 0.4, 0.5]}, title="held-out accuracy",
               intervals={"overall": [(0.05, 0.2), None, (0.4, 0.6)]})
    bar_chart(["0", "1"], {"kept": [108, 40]}, title="funnel", stacked=False)
    curve_chart({"round 0": [(10, 2.0), (20, 1.0)]}, title="training loss per round")

Why these settings: text stays text (`svg.fonttype = "none"`, so a chart is a few KB and its
labels are searchable), ids come from a fixed salt and the SVG carries no date, so the same
run gives the same report byte for byte. Every mark (point, error bar, bar) is a group with a
`gid` and a `<title>` holding its exact value, so hovering it in a browser shows the number and a
test can count marks. Missing values (None) are left out, never drawn as 0. An interval is an
error bar through its point. Tick labels are exact (`_tick`): a 2.5 % tick reads 2.5%, not 2%.

matplotlib is imported inside the functions: `flywheel status` and the other commands that
import storage.audit never load it.
"""

from __future__ import annotations

import io
from html import escape
from typing import Any

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac"]
FIGSIZE = (5.6, 3.0)  # inches; the SVG is 403 x 216 pt plus the legend on the right
HASH_SALT = "flywheel-report"  # fixed: clip-path and marker ids are the same on every run
RC = {"svg.fonttype": "none", "svg.hashsalt": HASH_SALT, "font.size": 8,
      "font.family": "sans-serif", "axes.unicode_minus": False}

Interval = tuple[float, float]


def _number(value: float) -> str:
    if float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.3g}"


def _tick(value: float, *, percent: bool) -> str:
    """An axis tick's label, exact to the digits the tick has (0.025 -> "2.5%", 0.0625 ->
    "6.25%", 1250 -> "1,250", 0.125 -> "0.125"), rounded off only below a millionth so float
    noise (0.075 * 100 = 7.499999...) does not show."""
    if percent:
        return f"{round(value * 100, 6):g}%"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{round(value, 6):g}"


def _shown(value: float, *, percent: bool) -> str:
    return f"{value:.1%}" if percent else _number(value)


def nice_max(value: float) -> float:
    """A round number (1, 2, 2.5 or 5 times a power of ten) at or above `value`: the top of a
    y axis whose five ticks then read exactly."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** (len(str(int(value))) - 1) if value >= 1 else 0.1
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return 10 * magnitude


class _Chart:
    """One figure being drawn: its axes, the marks' tooltips (gid -> text) and the legend."""

    def __init__(self, title: str, *, y_label: str, x_title: str, y_min: float, y_max: float,
                 percent: bool) -> None:
        from matplotlib.figure import Figure
        from matplotlib.ticker import FixedLocator, FuncFormatter

        self.title, self.tooltips, self.handles = title, {}, []
        self.figure = Figure(figsize=FIGSIZE)
        self.axes = self.figure.add_subplot()
        self.axes.set_title(title, fontsize=10, fontweight="bold")
        self.axes.set_ylabel(y_label)
        self.axes.set_xlabel(x_title)
        self.axes.set_ylim(y_min, y_max)
        self.axes.yaxis.set_major_locator(FixedLocator(
            [y_min + (y_max - y_min) * i / 4 for i in range(5)]))
        self.axes.yaxis.set_major_formatter(FuncFormatter(
            lambda value, _: _tick(value, percent=percent)))
        self.axes.grid(axis="y", color="#ddd", linewidth=0.8)
        self.axes.set_axisbelow(True)
        for side in ("top", "right"):
            self.axes.spines[side].set_visible(False)
        if y_min < 0 < y_max:
            self.axes.axhline(0, color="#555", linewidth=1)

    def mark(self, artist: Any, gid: str, tooltip: str) -> None:
        artist.set_gid(gid)
        self.tooltips[gid] = tooltip

    def legend(self, name: str, color: str, *, marker: str | None, width: float = 1.5) -> None:
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        self.handles.append(Patch(color=color, label=name) if marker is None else
                            Line2D([], [], color=color, marker=marker, linewidth=width,
                                   label=name))

    def svg(self) -> str:
        """The figure as one `<svg>` element: no XML prolog, no date, a `<title>` in each
        mark's group and the chart's title as its aria-label."""
        import matplotlib

        if self.handles:
            self.axes.legend(handles=self.handles, loc="upper left", bbox_to_anchor=(1.01, 1),
                             frameon=False)
        buffer = io.StringIO()
        with matplotlib.rc_context(RC):
            self.figure.savefig(buffer, format="svg", bbox_inches="tight",
                                metadata={"Date": None})
        text = buffer.getvalue()
        text = text[text.index("<svg"):]
        text = text.replace("<svg ", f'<svg role="img" aria-label="{escape(self.title)}" ', 1)
        for gid, tooltip in self.tooltips.items():
            text = text.replace(f'<g id="{gid}">',
                                f'<g id="{gid}"><title>{escape(tooltip)}</title>', 1)
        return text


def _with_rc(draw):
    """Run `draw` under the report's rc settings (fonts are looked up while drawing)."""
    import matplotlib

    with matplotlib.rc_context(RC):
        return draw()


def line_chart(labels: list[str], series: dict[str, list[float | None]], *, title: str,
               y_label: str = "", x_title: str = "round", y_max: float | None = None,
               percent: bool = False, y_min: float = 0.0,
               intervals: dict[str, list[Interval | None]] | None = None,
               connect: bool = True) -> str:
    """One line per series through its points (the first series thicker), each point a dot,
    with an error bar where the series has an interval.

    Parameters
    ----------
    labels
        The x-axis labels, one per x position.
    series
        Series name -> one value per label; None leaves the point out.
    title
        Drawn above the chart, and the SVG's aria-label.
    y_label
        The y-axis title.
    x_title
        The x-axis title.
    y_max
        The top of the y axis; None: a round number at or above the largest value (and
        interval end).
    percent
        Show y ticks and values as percentages.
    y_min
        The bottom of the y axis (below 0 for differences: the 0 line is then drawn darker).
    intervals
        Series name -> one (low, high) per label, or None: no bar there (e.g. a 95 % interval).
    connect
        Join a series' points with a line; False for points that are not a trend (a category
        per series).

    Returns
    -------
    The chart as one `<svg>` element, with a legend of the series. Marks' gids:
    `point-S-I` and `interval-S-I` (series S, label I).
    """
    intervals = intervals or {}
    values = [v for vs in series.values() for v in vs if v is not None]
    values += [end for bars in intervals.values() for bar in bars if bar for end in bar]
    top = y_max if y_max is not None else nice_max(max(values, default=0))

    def draw() -> str:
        chart = _Chart(title, y_label=y_label, x_title=x_title, y_min=y_min, y_max=top,
                       percent=percent)
        axes = chart.axes
        axes.set_xticks(range(len(labels)), labels)
        axes.set_xlim(-0.5, len(labels) - 0.5)
        for s, (name, points) in enumerate(series.items()):
            color = PALETTE[s % len(PALETTE)]
            width = 3 if s == 0 else 1.5
            shown = [(i, v) for i, v in enumerate(points) if v is not None]
            if connect and len(shown) > 1:
                axes.plot([i for i, _ in shown], [v for _, v in shown], color=color,
                          linewidth=width)
            for i, (low, high) in ((i, bar) for i, bar in enumerate(intervals.get(name, []))
                                   if bar is not None and points[i] is not None):
                value = points[i]
                bars = axes.errorbar([i], [value], yerr=[[max(value - low, 0)],
                                                         [max(high - value, 0)]],
                                     fmt="none", ecolor=color, elinewidth=1.5, capsize=4)
                chart.mark(bars.lines[2][0], f"interval-{s}-{i}",
                           f"{name}, {labels[i]}: 95% interval {_shown(low, percent=percent)}"
                           f" to {_shown(high, percent=percent)}")
            for i, value in shown:
                (dot,) = axes.plot([i], [value], marker="o", markersize=width + 3,
                                   linestyle="none", color=color)
                chart.mark(dot, f"point-{s}-{i}",
                           f"{name}, {labels[i]}: {_shown(value, percent=percent)}")
            chart.legend(name, color, marker="o", width=width if connect else 0)
        return chart.svg()

    return _with_rc(draw)


def bar_chart(labels: list[str], series: dict[str, list[float | None]], *, title: str,
              y_label: str = "", x_title: str = "round", stacked: bool = False,
              y_max: float | None = None, percent: bool = False) -> str:
    """Grouped (or stacked) bars: one group per label, one bar (or segment) per series.

    Parameters
    ----------
    labels
        The x-axis labels, one per group.
    series
        Series name -> one value per label; None leaves the bar out.
    title
        Drawn above the chart, and the SVG's aria-label.
    y_label
        The y-axis title.
    x_title
        The x-axis title.
    stacked
        Stack the series' segments in one bar per label instead of side by side.
    y_max
        The top of the y axis; None: a round number at or above the largest value (or
        stack).
    percent
        Show y ticks and values as percentages.

    Returns
    -------
    The chart as one `<svg>` element, with a legend of the series. Marks' gids: `bar-S-I`
    (series S, label I).
    """
    if stacked:
        heights = [sum(v or 0 for v in column)
                   for column in zip(*series.values(), strict=True)] or [0]
    else:
        heights = [v for vs in series.values() for v in vs if v is not None]
    top = y_max if y_max is not None else nice_max(max(heights, default=0))

    def draw() -> str:
        chart = _Chart(title, y_label=y_label, x_title=x_title, y_min=0.0, y_max=top,
                       percent=percent)
        axes = chart.axes
        axes.set_xticks(range(len(labels)), labels)
        axes.set_xlim(-0.5, len(labels) - 0.5)
        inner = 0.8
        width = inner if stacked else inner / max(len(series), 1)
        bottoms = [0.0] * len(labels)
        for s, (name, values) in enumerate(series.items()):
            color = PALETTE[s % len(PALETTE)]
            for i, value in enumerate(values):
                if value is None:
                    continue
                x = i if stacked else i - inner / 2 + width * (s + 0.5)
                (bar,) = axes.bar([x], [value], width=width * 0.95, bottom=bottoms[i],
                                  color=color)
                chart.mark(bar, f"bar-{s}-{i}",
                           f"{name}, {labels[i]}: {_shown(value, percent=percent)}")
                if stacked:
                    bottoms[i] += value
            chart.legend(name, color, marker=None)
        return chart.svg()

    return _with_rc(draw)


def curve_chart(series: dict[str, list[tuple[float, float]]], *, title: str,
                y_label: str = "", x_title: str = "step") -> str:
    """One line per series over a numeric x axis (say loss per training step), five x ticks.

    Parameters
    ----------
    series
        Series name -> (x, y) points in x order.
    title
        Drawn above the chart, and the SVG's aria-label.
    y_label
        The y-axis title.
    x_title
        The x-axis title.

    Returns
    -------
    The chart as one `<svg>` element, with a legend of the series. Each series is one mark,
    gid `curve-S`, its tooltip the series' points (a curve can have thousands).
    """
    points = [p for ps in series.values() for p in ps]
    x_max = nice_max(max((x for x, _ in points), default=0))
    top = nice_max(max((y for _, y in points), default=0))

    def draw() -> str:
        from matplotlib.ticker import FuncFormatter

        chart = _Chart(title, y_label=y_label, x_title=x_title, y_min=0.0, y_max=top,
                       percent=False)
        axes = chart.axes
        axes.set_xlim(0, x_max)
        axes.set_xticks([x_max * i / 4 for i in range(5)])
        axes.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _tick(v, percent=False)))
        for s, (name, curve) in enumerate(series.items()):
            color = PALETTE[s % len(PALETTE)]
            (line,) = axes.plot([x for x, _ in curve], [y for _, y in curve], color=color,
                                linewidth=2, marker="o", markersize=2)
            chart.mark(line, f"curve-{s}", f"{name}: " + "; ".join(
                f"{x_title} {_number(x)}: {_number(y)}" for x, y in curve))
            chart.legend(name, color, marker="o", width=2)
        return chart.svg()

    return _with_rc(draw)
