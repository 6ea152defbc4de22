"""Small SVG charts as strings, for a report that must open offline (no scripts, no CDN).

    line_chart(["base", "0", "1"], {"overall": [0.1, 0.4, 0.5]}, title="held-out accuracy",
               intervals={"overall": [(0.05, 0.2), None, (0.4, 0.6)]})
    bar_chart(["0", "1"], {"kept": [108, 40]}, title="funnel", stacked=False)

Every mark carries a <title>, so hovering it in a browser shows its exact value. Missing values
(None) are left out, never drawn as 0. An interval is an error bar (a vertical line with caps)
through its point, so the noise of a figure is seen where the figure is. Tick labels are exact
(`_tick`): a 2.5 % tick reads 2.5%, not a rounded 2%.
"""

from __future__ import annotations

from html import escape

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac"]
WIDTH, HEIGHT = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 34, 58


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
    if value <= 0:
        return 1.0
    magnitude = 10 ** (len(str(int(value))) - 1) if value >= 1 else 0.1
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return 10 * magnitude


def _frame(title: str, y_max: float, y_label: str, *, percent: bool,
           y_min: float = 0.0) -> list[str]:
    plot_h = HEIGHT - TOP - BOTTOM
    parts = [
        (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}"'
         f' height="{HEIGHT}" role="img" aria-label="{escape(title)}" font-family="sans-serif"'
         ' font-size="11">'),
        (f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="13" font-weight="bold">'
         f"{escape(title)}</text>"),
        (f'<text transform="translate(14 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">'
         f"{escape(y_label)}</text>"),
    ]
    for i in range(5):
        value = y_min + (y_max - y_min) * i / 4
        y = TOP + plot_h - plot_h * i / 4
        label = _tick(value, percent=percent)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"'
                     ' stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#555"/>')
    return parts


def _legend(names: list[str]) -> list[str]:
    parts, x = [], LEFT
    y = HEIGHT - 14
    for index, name in enumerate(names):
        color = PALETTE[index % len(PALETTE)]
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + 14}" y="{y}">{escape(name)}</text>')
        x += 22 + 7 * len(name)
    return parts


def _x_labels(labels: list[str], centers: list[float], x_title: str) -> list[str]:
    base = HEIGHT - BOTTOM
    parts = [f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{base}" y2="{base}" stroke="#555"/>']
    for label, x in zip(labels, centers, strict=True):
        parts.append(f'<text x="{x:.1f}" y="{base + 14}" text-anchor="middle">'
                     f"{escape(label)}</text>")
    parts.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{base + 30}" text-anchor="middle">'
                 f"{escape(x_title)}</text>")
    return parts


Interval = tuple[float, float]


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
    The chart as one `<svg>` element, with a legend of the series.
    """
    intervals = intervals or {}
    values = [v for vs in series.values() for v in vs if v is not None]
    values += [end for bars in intervals.values() for bar in bars if bar for end in bar]
    top = y_max if y_max is not None else nice_max(max(values, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(labels), 1)
    centers = [LEFT + step * (i + 0.5) for i in range(len(labels))]

    def y_of(value: float) -> float:
        return TOP + plot_h - plot_h * (value - y_min) / (top - y_min)

    parts = (_frame(title, top, y_label, percent=percent, y_min=y_min)
             + _x_labels(labels, centers, x_title))
    if y_min < 0 < top:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y_of(0):.1f}"'
                     f' y2="{y_of(0):.1f}" stroke="#555"/>')
    for index, (name, points) in enumerate(series.items()):
        color = PALETTE[index % len(PALETTE)]
        width = 3 if index == 0 else 1.5
        for i, bar in enumerate(intervals.get(name, [])):
            if bar is not None and points[i] is not None:  # no bar without its point
                parts += _error_bar(centers[i], y_of(bar[0]), y_of(bar[1]), color,
                                    f"{name}, {labels[i]}: 95% interval "
                                    f"{_shown(bar[0], percent=percent)} to "
                                    f"{_shown(bar[1], percent=percent)}")
        shown_points = [(i, v) for i, v in enumerate(points) if v is not None]
        xy = [(centers[i], y_of(v)) for i, v in shown_points]
        if connect and len(xy) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}"'
                         f' stroke-width="{width}"/>')
        for (x, y), (i, v) in zip(xy, shown_points, strict=True):
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{width + 1}" fill="{color}">'
                         f"<title>{escape(name)}, {escape(labels[i])}: "
                         f"{_shown(v, percent=percent)}</title></circle>")
    parts += _legend(list(series)) + ["</svg>"]
    return "\n".join(parts)


def _error_bar(x: float, y_low: float, y_high: float, color: str, title: str) -> list[str]:
    """A vertical line from `y_low` to `y_high` at `x` with caps, its <title> on the line."""
    caps = [f'<line x1="{x - 4:.1f}" x2="{x + 4:.1f}" y1="{y:.1f}" y2="{y:.1f}"'
            f' stroke="{color}" stroke-width="1.5"/>' for y in (y_low, y_high)]
    return [f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y_high:.1f}" y2="{y_low:.1f}"'
            f' stroke="{color}" stroke-width="1.5"><title>{escape(title)}</title></line>',
            *caps]


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
    The chart as one `<svg>` element, with a legend of the series.
    """
    if stacked:
        totals = [sum(v or 0 for v in column)
                  for column in zip(*series.values(), strict=True)] or [0]
        top = y_max if y_max is not None else nice_max(max(totals))
    else:
        values = [v for vs in series.values() for v in vs if v is not None]
        top = y_max if y_max is not None else nice_max(max(values, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    group = plot_w / max(len(labels), 1)
    centers = [LEFT + group * (i + 0.5) for i in range(len(labels))]
    parts = _frame(title, top, y_label, percent=percent) + _x_labels(labels, centers, x_title)
    inner = group * 0.8
    bar = inner if stacked else inner / max(len(series), 1)
    for i, label in enumerate(labels):
        stack = 0.0
        for index, (name, values) in enumerate(series.items()):
            value = values[i]
            if value is None:
                continue
            color = PALETTE[index % len(PALETTE)]
            h = plot_h * value / top
            x = centers[i] - inner / 2 + (0 if stacked else index * bar)
            y = TOP + plot_h - h - (plot_h * stack / top if stacked else 0)
            shown = _shown(value, percent=percent)
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar - 1, 1):.1f}"'
                         f' height="{h:.1f}" fill="{color}"><title>{escape(name)},'
                         f" {escape(label)}: {shown}</title></rect>")
            stack += value if stacked else 0
    parts += _legend(list(series)) + ["</svg>"]
    return "\n".join(parts)


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
    The chart as one `<svg>` element, with a legend of the series; every point has a
    <title> with its exact value.
    """
    points = [p for ps in series.values() for p in ps]
    x_max = nice_max(max((x for x, _ in points), default=0))
    top = nice_max(max((y for _, y in points), default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ticks = [x_max * i / 4 for i in range(5)]
    parts = _frame(title, top, y_label, percent=False) + _x_labels(
        [_number(t) for t in ticks], [LEFT + plot_w * t / x_max for t in ticks], x_title)
    for index, (name, curve) in enumerate(series.items()):
        color = PALETTE[index % len(PALETTE)]
        xy = [(LEFT + plot_w * x / x_max, TOP + plot_h - plot_h * y / top) for x, y in curve]
        if len(xy) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}"'
                         ' stroke-width="2"/>')
        for (x, y), (step, value) in zip(xy, curve, strict=True):
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{color}"><title>'
                         f"{escape(name)}, {x_title} {_number(step)}: {_number(value)}"
                         "</title></circle>")
    parts += _legend(list(series)) + ["</svg>"]
    return "\n".join(parts)
