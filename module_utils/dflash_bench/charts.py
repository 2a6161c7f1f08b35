"""PNG charts of a benchmark run (matplotlib, Agg): what people read before the tables.

* throughput.png   per workload: output tok/s per configuration, one bar per concurrency level,
                   the accept length (server meta_info) written on each bar and drawn on a 2nd axis
* heatmap.png      DDTree budget x top-k: tok/s with the accept length in each square, one panel per
                   workload and concurrency level
* concurrency.png  per workload: tok/s against concurrency, one line per configuration

Each PNG carries its series in a tEXt chunk ("Description": JSON {title, series, standin}) so that a
test can check what was drawn without looking at pixels (``png_text``). The figures of a server that says
it is a stand-in (not sglang) are stamped on every chart. No Ansible import; matplotlib is imported only when drawing.
"""

from __future__ import annotations

import json
import math
import struct
import zlib

from ansible.module_utils.dflash_bench.palette import styles


def label_grid(ax, topks, budgets, title):
    """A DDTREE budget x top-k heat map's axes: top-k across, budget down, one tick per value."""
    ax.set_xticks(range(len(topks)))
    ax.set_xticklabels([str(k) for k in topks])
    ax.set_yticks(range(len(budgets)))
    ax.set_yticklabels([str(b) for b in budgets])
    ax.set_xlabel("top-k")
    ax.set_ylabel("budget")
    ax.set_title(title, fontsize=9)

STANDIN_STAMP = "STAND-IN FIGURES - the server says it is not SGLang: they test the plumbing, not a model"
DUMMY_STAMP = "DUMMY WEIGHTS (--load-format dummy): acceptance and speed of random weights, not of the model"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _order(values):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def _finish(fig, path, title, series, standin, dummy=False, extra=None):
    stamps = [s for s, on in ((STANDIN_STAMP, standin), (DUMMY_STAMP, dummy)) if on]
    for k, text in enumerate(stamps):
        fig.text(0.5, 0.995 - 0.03 * k, text, ha="center", va="top", color="#b00000", fontsize=10, fontweight="bold")
    fig.savefig(path, dpi=110, metadata={"Title": title, "Description": json.dumps(
        {"title": title, "series": series, "standin": bool(standin), "dummy": bool(dummy), **(extra or {})},
        sort_keys=True)})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return {"path": path, "title": title, "series": series}


def throughput_chart(rows, path, standin=False, dummy=False):
    plt = _plt()
    workloads = _order(r["workload"] for r in rows)
    configs = _order(r["config"] for r in rows)
    levels = sorted({r["concurrency"] for r in rows})
    fig, axes = plt.subplots(len(workloads), 1, figsize=(max(7, 1.1 * len(configs) * len(levels) + 2),
                                                         3.6 * len(workloads) + 0.6), squeeze=False)
    series = []
    width = 0.8 / max(1, len(levels))
    top_acc = max([r["accept_length"] for r in rows if r.get("accept_length")] or [1.0])
    for ax, wl in zip(axes[:, 0], workloads, strict=True):
        ax2 = ax.twinx()
        ax2.set_ylim(0, top_acc * 1.35)
        for j, level in enumerate(levels):
            xs, ys, acc, lo, hi = [], [], [], [], []
            for i, cfg in enumerate(configs):
                r = next((r for r in rows if (r["config"], r["workload"], r["concurrency"]) == (cfg, wl, level)), None)
                x = i + (j - (len(levels) - 1) / 2) * width
                if r is None:
                    continue
                if r.get("status") == "failed" or r.get("output_tok_s") is None:
                    ax.text(x, 0, "failed", rotation=90, ha="center", va="bottom", color="#b00000", fontsize=8)
                    continue
                xs.append(x)
                ys.append(r["output_tok_s"])
                acc.append(r.get("accept_length"))
                lo.append(r.get("output_tok_s_min"))
                hi.append(r.get("output_tok_s_max"))
            bars = ax.bar(xs, ys, width * 0.95, label=f"tok/s c{level}")
            # repeats: the bar is the median, the whisker the range of the cell's repeats
            rng = [(x, y, a, b) for x, y, a, b in zip(xs, ys, lo, hi, strict=True) if a is not None and b is not None]
            if rng:
                ax.errorbar([p[0] for p in rng], [p[1] for p in rng], fmt="none", ecolor="#333333", capsize=3, lw=1,
                            yerr=[[p[1] - p[2] for p in rng], [p[3] - p[1] for p in rng]])
                series.append(f"{wl}: tok/s c{level} min-max over repeats")
            for b, a in zip(bars, acc, strict=True):
                if a is not None:
                    ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"acc {a:.2f}", ha="center",
                            va="bottom", fontsize=7)
            pts = [(x, a) for x, a in zip(xs, acc, strict=True) if a is not None]
            if pts:
                # one marker per concurrency level, each in the legend (the dots sit over their own bars)
                ax2.plot([p[0] for p in pts], [p[1] for p in pts], "osD^v<>"[j % 7], color="black", ms=4,
                         label=f"accept length c{level}")
            series += [f"{wl}: tok/s c{level}"] + ([f"{wl}: accept length c{level}"] if pts else [])
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels(configs, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("output tok/s")
        ax2.set_ylabel("accept length (tokens / verify step)")
        ax.set_ylim(0, (ax.get_ylim()[1] or 1) * 1.15)
        ax.set_title(f"{wl}: throughput and acceptance per configuration")
        handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
        ax.legend(handles=handles, loc="upper left", fontsize=7)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return _finish(fig, path, "tok/s and accept length per configuration", series, standin, dummy)


def heatmap_chart(rows, path, standin=False, dummy=False):
    """None when the run has no DDTree configuration with a budget and a top-k."""
    tree = [r for r in rows if r.get("algorithm") == "DDTREE" and r.get("budget") is not None
            and r.get("topk") is not None]
    if not tree:
        return None
    plt = _plt()
    panels = _order((r["workload"], r["concurrency"]) for r in tree)
    budgets = sorted({int(r["budget"]) for r in tree})
    topks = sorted({int(r["topk"]) for r in tree})
    cols = min(3, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols + 1.0, 3.4 * nrows + 0.6), squeeze=False)
    series = []
    # one colour scale for every panel (the same vmin/vmax, one colour bar): a colour is the same tok/s
    # everywhere, so a panel's own spread of noise is not painted as its winners
    measured = [r["output_tok_s"] for r in tree if r.get("output_tok_s") is not None and r.get("status") != "failed"]
    vmin, vmax = (min(measured), max(measured)) if measured else (0.0, 1.0)
    if vmax <= vmin:
        vmax = vmin + 1e-9
    im = None
    for idx, (wl, level) in enumerate(panels):
        ax = axes[idx // cols][idx % cols]
        grid = [[None] * len(topks) for _ in budgets]
        for r in tree:
            if (r["workload"], r["concurrency"]) == (wl, level):
                grid[budgets.index(int(r["budget"]))][topks.index(int(r["topk"]))] = r
        vals = [[(c or {}).get("output_tok_s") if (c or {}).get("output_tok_s") is not None else float("nan")
                 for c in line] for line in grid]
        im = ax.imshow(vals, cmap="viridis", aspect="auto", origin="lower", vmin=vmin, vmax=vmax)
        lo, hi = vmin, vmax
        for bi, line in enumerate(grid):
            for ki, c in enumerate(line):
                if c is None:
                    text = "-"
                elif c.get("status") == "failed" or c.get("output_tok_s") is None:
                    text = "failed"
                else:
                    acc = c.get("accept_length")
                    text = f"{c['output_tok_s']:.0f}\nacc {acc:.2f}" if acc is not None else f"{c['output_tok_s']:.0f}"
                v = vals[bi][ki]
                light = not math.isnan(v) and hi > lo and (v - lo) / (hi - lo) > 0.6  # viridis: yellow at the top
                ax.text(ki, bi, text, ha="center", va="center", color="black" if light else "white", fontsize=8)
        label_grid(ax, topks, budgets, f"DDTREE tok/s: {wl}, c{level}")
        series.append(f"{wl} c{level}")
    for idx in range(len(panels), nrows * cols):
        axes[idx // cols][idx % cols].axis("off")
    fig.tight_layout(rect=(0, 0, 0.9, 0.95))
    fig.colorbar(im, ax=list(axes.flat), fraction=0.03, label="output tok/s, one scale for every panel")
    return _finish(fig, path, "DDTREE budget x top-k: tok/s (accept length)", series, standin, dummy,
                   extra={"scale": [vmin, vmax], "colorbars": 1})


def concurrency_chart(rows, path, standin=False, dummy=False):
    """None when the run has a single concurrency level."""
    levels = sorted({r["concurrency"] for r in rows})
    if len(levels) < 2:
        return None
    plt = _plt()
    workloads = _order(r["workload"] for r in rows)
    configs = _order(r["config"] for r in rows)
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 4.2 + 0.25 * len(configs)),
                             squeeze=False)
    series = []
    # a colour AND a marker per configuration, the same in every panel, no pair twice (palette.py): 12
    # configurations on matplotlib's 10 default colours gave two of them one colour
    sty = styles(configs)
    for ax, wl in zip(axes[0], workloads, strict=True):
        for cfg in configs:
            pts = [(r["concurrency"], r["output_tok_s"]) for r in rows
                   if r["config"] == cfg and r["workload"] == wl and r.get("output_tok_s") is not None]
            if pts:
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=cfg, ms=5, **sty[cfg])
                series.append(f"{wl}: {cfg}")
        ax.set_xticks(levels)
        ax.set_xlabel("concurrency (closed-loop clients)")
        ax.set_ylabel("output tok/s")
        ax.set_title(f"{wl}: tok/s against concurrency", fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, max(1, len(labels))), fontsize=7)
    rows_of_legend = (len(labels) + 5) // 6
    fig.tight_layout(rect=(0, 0.03 + 0.05 * rows_of_legend, 1, 0.93))
    return _finish(fig, path, "tok/s against concurrency", series, standin, dummy,
                   extra={"styles": {c: sty[c] for c in configs}})


def draw_all(rows, chart_dir, standin=False, dummy=False) -> dict:
    """{name: {path, title, series}} of the charts this run has data for."""
    import os

    os.makedirs(chart_dir, exist_ok=True)
    out = {}
    for name, fn in (("throughput", throughput_chart), ("heatmap", heatmap_chart),
                     ("concurrency", concurrency_chart)):
        res = fn(rows, os.path.join(chart_dir, f"{name}.png"), standin, dummy)
        if res:
            out[name] = res
    return out


def png_text(path) -> dict:
    """The tEXt/iTXt/zTXt chunks of a PNG file; raises ValueError when it is not a valid PNG (bad
    signature, a chunk's CRC wrong, no IHDR first or no IEND)."""
    with open(path, "rb") as fh:
        data = fh.read()
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError(f"{path}: not a PNG (signature)")
    pos, out, first, ended = len(PNG_SIGNATURE), {}, None, False
    while pos + 8 <= len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        if pos + 12 + length > len(data):
            raise ValueError(f"{path}: truncated PNG (chunk {ctype!r})")
        body = data[pos + 8:pos + 8 + length]
        crc = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]
        if zlib.crc32(ctype + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"{path}: bad CRC in chunk {ctype!r}")
        first = first or ctype
        if ctype == b"tEXt":
            key, _, val = body.partition(b"\0")
            out[key.decode("latin-1")] = val.decode("latin-1")
        elif ctype == b"zTXt":
            key, _, val = body.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(val[1:]).decode("latin-1")
        elif ctype == b"iTXt":
            key, _, rest = body.partition(b"\0")
            flag, rest = rest[0], rest[2:]
            _lang, _, rest = rest.partition(b"\0")
            _tkey, _, val = rest.partition(b"\0")
            out[key.decode("latin-1")] = (zlib.decompress(val) if flag else val).decode("utf-8")
        elif ctype == b"IEND":
            ended = True
            break
        pos += 12 + length
    if first != b"IHDR" or not ended:
        raise ValueError(f"{path}: not a complete PNG (IHDR first, IEND last)")
    return out
