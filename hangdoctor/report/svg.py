"""Small inline SVG charts for the HTML report, drawn server-side.

Only numbers that this module formats itself reach the SVG markup: values are coerced to finite
floats and anything else is dropped, so a hostile series cannot inject markup or attributes.

Layer: report; may import: the standard library, jinja2, hangdoctor.report and the foundation
(it reads the analysis model only).
"""

from __future__ import annotations

from typing import Any, Sequence

from markupsafe import Markup

from hangdoctor.report.analysis_view import nums

UTIL_COLOR = "#0969da"
POWER_COLOR = "#bf3989"


def _points(values: list[float], width: float, height: float, max_value: float, pad: float) -> str:
    """Polyline points for ``values`` scaled into the box, 0 at the bottom."""
    inner_w = width - 2 * pad
    inner_h = height - 2 * pad
    step = inner_w / (len(values) - 1) if len(values) > 1 else 0.0
    coords = []
    for i, value in enumerate(values):
        ratio = min(max(value / max_value, 0.0), 1.0) if max_value > 0 else 0.0
        x = pad + (i * step if len(values) > 1 else inner_w / 2)
        y = pad + inner_h * (1.0 - ratio)
        coords.append(f"{x:.1f},{y:.1f}")
    if len(coords) == 1:
        # One sample still deserves a visible mark: draw it as a short flat line.
        x, y = coords[0].split(",")
        coords = [f"{pad:.1f},{y}", f"{width - pad:.1f},{y}"]
    return " ".join(coords)


def sparkline_svg(
    values: Sequence[Any],
    width: int = 80,
    height: int = 18,
    max_value: float | None = None,
    color: str = UTIL_COLOR,
) -> Markup:
    """Return an inline SVG sparkline of ``values`` (0 at the bottom, ``max_value`` at the top).

    ``max_value`` defaults to the largest value. Non-numbers in ``values`` are dropped; an empty
    series gives an empty, labelled box. ``color`` must be one of this module's constants.
    """
    series = nums(values)
    w = max(int(width), 8)
    h = max(int(height), 6)
    top = float(max_value) if max_value else (max(series) if series else 1.0)
    if color not in (UTIL_COLOR, POWER_COLOR):
        color = UTIL_COLOR
    head = (
        f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" aria-label="{len(series)} samples">'
        f'<rect x="0.5" y="0.5" width="{w - 1}" height="{h - 1}" rx="2" class="spark-bg"/>'
    )
    if not series:
        return Markup(head + "</svg>")
    points = _points(series, w, h, top, 2.0)
    body = (
        f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
        f'stroke-linejoin="round" points="{points}"/>'
    )
    return Markup(head + body + "</svg>")


def gpu_chart_svg(
    util_pct: Sequence[Any],
    power_w: Sequence[Any],
    power_limit_w: float | None,
    width: int = 300,
    height: int = 90,
) -> Markup:
    """Return an inline SVG chart of GPU utilisation (0-100 %) and power (0 to its limit).

    Both lines share one vertical scale: utilisation in percent, power in percent of the power
    limit (or of the highest sample when the limit is unknown), so "100 % busy at idle power"
    shows as two lines far apart.
    """
    util = nums(util_pct)
    power = nums(power_w)
    w = max(int(width), 40)
    h = max(int(height), 30)
    pad = 4.0
    limit = float(power_limit_w) if power_limit_w else (max(power) if power else 1.0)
    grid = []
    for frac in (0.0, 0.5, 1.0):
        y = pad + (h - 2 * pad) * (1.0 - frac)
        grid.append(
            f'<line x1="{pad:.1f}" y1="{y:.1f}" x2="{w - pad:.1f}" y2="{y:.1f}" class="grid"/>'
        )
    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" aria-label="utilisation and power">',
        f'<rect x="0.5" y="0.5" width="{w - 1}" height="{h - 1}" rx="3" class="spark-bg"/>',
        *grid,
    ]
    if util:
        parts.append(
            f'<polyline fill="none" stroke="{UTIL_COLOR}" stroke-width="2" '
            f'points="{_points(util, w, h, 100.0, pad)}"/>'
        )
    if power:
        parts.append(
            f'<polyline fill="none" stroke="{POWER_COLOR}" stroke-width="2" '
            f'stroke-dasharray="5 3" points="{_points(power, w, h, limit, pad)}"/>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
