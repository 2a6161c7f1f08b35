"""Series styles for the tune report's charts: a colour AND a marker per series, no pair twice in a chart.

Series i gets colour i mod C and marker (i + i div C) mod M: the colour changes from one series to the
next, the marker too, and two series with the same colour are C apart, where their markers differ by
C + 1 (mod M). With C = 10 and M = 9 (coprime to C + 1 = 11) the first C x M = 90 series are all
distinct pairs; past that the line style changes as well (4 styles: 360 distinct). The colours are
matplotlib's "tab10" (the qualitative palette its default cycle uses), the markers filled shapes that
stay readable at 5-6 pt. No Ansible import.
"""

from __future__ import annotations

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", "*")
LINESTYLES = ("-", "--", "-.", ":")


def style(i: int) -> dict:
    """{color, marker, linestyle} of series ``i`` (0-based)."""
    c, m = len(COLOURS), len(MARKERS)
    return {"color": COLOURS[i % c], "marker": MARKERS[(i + i // c) % m],
            "linestyle": LINESTYLES[(i // (c * m)) % len(LINESTYLES)]}


def styles(names) -> dict:
    """{name: style} for the series of one chart, in the order given (the same name keeps its style across
    the panels of that chart)."""
    out = {}
    for name in names:
        if name not in out:
            out[name] = style(len(out))
    return out
