"""Series styles for the reports' charts: a colour AND a marker per series, no pair twice in a chart.

Up to 10 series: matplotlib's "tab10" colours (its default cycle), each series its own. Up to 20: "tab20"
(ten hues, a dark and a light shade each), still one colour per series. Beyond: tab10 again, with series i
getting colour i mod C and marker (i + i div C) mod M: the colour changes from one series to the next, the
marker too, and two series with the same colour are C apart, where their markers differ by C + 1 (mod M);
with C = 10 and M = 9 (coprime to 11) the first 90 series are distinct pairs, and past that the line style
changes as well (4 styles: 360). The markers are filled shapes that stay readable at 5-6 pt; every series
gets one whatever the count. No Ansible import.
"""

from __future__ import annotations

TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
         "#17becf")
TAB20 = ("#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd",
         "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d",
         "#17becf", "#9edae5")
COLOURS = TAB10
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", "*")
LINESTYLES = ("-", "--", "-.", ":")


def style(i: int, n: int = 0) -> dict:
    """{color, marker, linestyle} of series ``i`` (0-based) of a chart with ``n`` series."""
    m = len(MARKERS)
    if 10 < n <= len(TAB20):
        # the dark and the light shade of a hue are neighbours: their markers differ as well
        return {"color": TAB20[i], "marker": MARKERS[i % m], "linestyle": "-"}
    c = len(TAB10)
    return {"color": TAB10[i % c], "marker": MARKERS[(i + i // c) % m],
            "linestyle": LINESTYLES[(i // (c * m)) % len(LINESTYLES)]}


def styles(names) -> dict:
    """{name: style} for the series of one chart, in the order given (a name keeps its style across the panels
    of that chart)."""
    order = list(dict.fromkeys(names))
    return {name: style(k, len(order)) for k, name in enumerate(order)}
