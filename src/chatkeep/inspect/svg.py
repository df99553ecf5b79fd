"""Charts as inline SVG, rendered on the server: no JavaScript, no chart library.

Each function takes plain numbers and returns the ``<svg>`` markup as a string (labels
escaped), sized by its ``viewBox`` so it scales with the page. Colours come from CSS
classes (``s0`` .. ``s7``) in ``static/inspector.css``.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

SERIES_CLASSES = 8


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _number(value: int) -> str:
    return f"{value:,}"


def stacked_bar(parts: Sequence[tuple[str, int]], budget: int, *, width: int = 640,
                height: int = 28) -> str:
    """One horizontal bar of ``parts`` (label, tokens) side by side, scaled so the larger
    of their sum and ``budget`` fills the width, with the budget drawn as a line."""
    total = sum(max(0, v) for _, v in parts)
    scale_to = max(total, budget, 1)
    top = 14
    out = [f'<svg class="chart stacked" viewBox="0 0 {width} {height + top + 4}" '
           f'role="img" aria-label="budget: {_number(total)} of {_number(budget)} tokens">']
    x = 0.0
    for index, (label, value) in enumerate(parts):
        if value <= 0:
            continue
        w = width * value / scale_to
        out.append(f'<rect class="s{index % SERIES_CLASSES}" x="{_fmt(x)}" y="{top}" '
                   f'width="{_fmt(max(w, 0.5))}" height="{height}"><title>'
                   f'{escape(label)}: {_number(value)} tokens</title></rect>')
        x += w
    bx = width * budget / scale_to
    out.append(f'<line class="budget" x1="{_fmt(bx)}" y1="2" x2="{_fmt(bx)}" '
               f'y2="{height + top + 2}"/>')
    anchor = "end" if bx > width / 2 else "start"
    out.append(f'<text class="budget-label" x="{_fmt(bx + (-4 if anchor == "end" else 4))}" '
               f'y="11" text-anchor="{anchor}">budget {_number(budget)}</text>')
    out.append("</svg>")
    return "".join(out)


def stacked_columns(buckets: Sequence[str], series: Sequence[tuple[str, Sequence[int]]], *,
                    width: int = 760, height: int = 220) -> str:
    """Vertical bars, one per bucket (time), each stacked from ``series`` (label and one
    value per bucket), with a value axis and the first, middle and last bucket labelled."""
    left, bottom, top = 56, 28, 10
    plot_w, plot_h = width - left - 8, height - bottom - top
    totals = [sum(values[i] for _, values in series) for i in range(len(buckets))]
    peak = max(totals, default=0) or 1
    out = [f'<svg class="chart columns" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="tokens over time, {len(buckets)} periods">']
    for fraction in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - fraction)
        out.append(f'<line class="grid" x1="{left}" y1="{_fmt(y)}" x2="{width - 8}" '
                   f'y2="{_fmt(y)}"/><text class="axis" x="{left - 6}" y="{_fmt(y + 4)}" '
                   f'text-anchor="end">{_number(round(peak * fraction))}</text>')
    slot = plot_w / max(len(buckets), 1)
    bar = max(min(slot * 0.8, 48), 1)
    for i, bucket in enumerate(buckets):
        x = left + slot * i + (slot - bar) / 2
        y = top + plot_h
        for index, (label, values) in enumerate(series):
            value = values[i]
            if value <= 0:
                continue
            h = plot_h * value / peak
            y -= h
            out.append(f'<rect class="s{index % SERIES_CLASSES}" x="{_fmt(x)}" y="{_fmt(y)}" '
                       f'width="{_fmt(bar)}" height="{_fmt(max(h, 0.5))}"><title>'
                       f'{escape(bucket)} {escape(label)}: {_number(value)} tokens'
                       f'</title></rect>')
    shown = sorted({0, len(buckets) // 2, len(buckets) - 1}) if buckets else []
    for i in shown:
        x = left + slot * i + slot / 2
        out.append(f'<text class="axis" x="{_fmt(x)}" y="{height - 8}" '
                   f'text-anchor="middle">{escape(buckets[i])}</text>')
    out.append("</svg>")
    return "".join(out)


def bars(rows: Sequence[tuple[str, int]], *, width: int = 520, row_height: int = 18) -> str:
    """Horizontal bars, one per row (label, value), longest first as given."""
    label_w = 170
    peak = max((v for _, v in rows), default=0) or 1
    height = row_height * len(rows) + 4
    out = [f'<svg class="chart bars" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{len(rows)} groups">']
    for i, (label, value) in enumerate(rows):
        y = 2 + i * row_height
        w = (width - label_w - 70) * value / peak
        short = label if len(label) <= 26 else label[:25] + "…"
        out.append(f'<text class="axis" x="{label_w - 6}" y="{y + row_height - 5}" '
                   f'text-anchor="end">{escape(short)}</text>'
                   f'<rect class="s{i % SERIES_CLASSES}" x="{label_w}" y="{y + 2}" '
                   f'width="{_fmt(max(w, 0.5))}" height="{row_height - 4}"><title>'
                   f'{escape(label)}: {_number(value)} tokens</title></rect>'
                   f'<text class="axis" x="{_fmt(label_w + w + 4)}" y="{y + row_height - 5}">'
                   f'{_number(value)}</text>')
    out.append("</svg>")
    return "".join(out)
