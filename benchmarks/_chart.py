"""The results as a picture: one horizontal bar per row, its ratio to the same-run baseline.

Plain SVG written by hand (no plotting library): a log scale from 1/8 to 64 times, a line at 1
(parity with the baseline), bars green where the row met its target, red where it did not,
grey where it has none. Rows without a baseline (absolute figures) are left out.
"""

from __future__ import annotations

import html
import math

from _common import Row

WIDTH, LABEL, BAR, GAP, TOP = 1100, 560, 16, 6, 48
LOW, HIGH = 1 / 8, 64.0
COLOURS = {True: "#2e7d32", False: "#c62828", None: "#78909c"}


def _x(ratio: float) -> float:
    span = WIDTH - LABEL - 70
    clamped = min(max(ratio, LOW), HIGH)
    return LABEL + span * (math.log2(clamped) - math.log2(LOW)) / (math.log2(HIGH) - math.log2(LOW))


def chart(rows: list[Row], title: str) -> str:
    """An SVG bar chart of the rows' ratios."""
    shown = [r for r in rows if r.ratio is not None]
    height = TOP + len(shown) * (BAR + GAP) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{html.escape(title)}</text>',
        '<text x="10" y="36" fill="#555">fanloop / baseline, same run, log scale. Left of the '
        "1× line: fanloop is below the baseline (faster for times; fewer for runs/s and "
        "events/s). Green: target met; red: missed.</text>",
    ]
    for tick in (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64):
        x = _x(tick)
        stroke = "#000" if tick == 1 else "#ddd"
        out.append(
            f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{height - 30}" stroke="{stroke}"/>'
        )
        out.append(f'<text x="{x:.1f}" y="{height - 16}" text-anchor="middle">{tick:g}×</text>')
    for i, row in enumerate(shown):
        y = TOP + i * (BAR + GAP)
        ratio = row.ratio or 0.0
        label = f"{row.workload} — {row.metric}"
        if len(label) > 95:
            label = label[:94] + "…"
        start, end = _x(1.0), _x(ratio)
        left, width = min(start, end), max(abs(end - start), 1.5)
        out.append(
            f'<text x="{LABEL - 8}" y="{y + BAR - 4}" text-anchor="end">{html.escape(label)}</text>'
        )
        out.append(
            f'<rect x="{left:.1f}" y="{y}" width="{width:.1f}" height="{BAR}" '
            f'fill="{COLOURS[row.met]}"/>'
        )
        out.append(f'<text x="{max(start, end) + 4:.1f}" y="{y + BAR - 4}">{ratio:.2f}×</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
