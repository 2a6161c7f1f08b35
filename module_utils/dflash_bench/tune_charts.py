"""PNG charts of a tune run (matplotlib, Agg). Every figure with its confidence interval (error bars, the
interval of the table beside it) and n; every series its own colour and marker (module palette), the
same configuration with the same style in every panel of a chart; one colour scale for a metric across
all panels of a heatmap.

* deciding.png  the deciding figure (best goodput under the objective) per configuration, with its interval
* curves.png    over the open-loop request rates: goodput; output tok/s; TTFT p50 and p95 ITL against the
                output tok/s reached (throughput-latency), the objective's limits drawn
* closed.png    closed loop: output tok/s and goodput against the concurrency level
* accept.png    accepted tokens per verify step (the server's per-step histogram, else tokens per
                streamed chunk) and each request's accept length
* heatmap.png   DDTREE budget x top-k: the deciding goodput, one colour scale for all panels

Each PNG carries {title, series, styles, standin, dummy} in a tEXt chunk (charts.png_text reads it).
No Ansible import; matplotlib is imported when drawing.
"""

from __future__ import annotations

import json
import os

from ansible.module_utils.dflash_bench.charts import DUMMY_STAMP, STANDIN_STAMP, label_grid
from ansible.module_utils.dflash_bench.palette import styles


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(fig, path, title, series, sty, standin, dummy, extra=None):
    stamps = [s for s, on in ((STANDIN_STAMP, standin), (DUMMY_STAMP, dummy)) if on]
    for k, text in enumerate(stamps):
        fig.text(0.5, 0.995 - 0.03 * k, text, ha="center", va="top", color="#b00000", fontsize=9, fontweight="bold")
    meta = {"title": title, "series": series, "styles": {k: sty[k] for k in series if k in sty},
            "standin": bool(standin), "dummy": bool(dummy), **(extra or {})}
    fig.savefig(path, dpi=110, metadata={"Title": title, "Description": json.dumps(meta, sort_keys=True)})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return {"path": path, "title": title, "series": series}


def _top(standin, dummy):
    return 1.0 - 0.035 * (int(bool(standin)) + int(bool(dummy))) - 0.01


def _err(ci):
    """(value, [[below], [above]]) of an interval for errorbar; zero-length bars without one."""
    m = ci.get("mean") if "mean" in ci else ci.get("value")
    lo, hi = ci.get("low"), ci.get("high")
    if m is None:
        return None, None
    return m, ([max(0.0, m - lo)] if lo is not None else [0.0], [max(0.0, hi - m)] if hi is not None else [0.0])


def deciding_chart(entries, path, standin=False, dummy=False, winner=None, sty=None):
    """Horizontal bars, best first, each with its t interval; the winner's bar outlined."""
    entries = [e for e in entries if e["ci"].get("mean") is not None]
    if not entries:
        return None
    plt = _plt()
    entries = sorted(entries, key=lambda e: e["ci"]["mean"])
    sty = sty or styles([e["name"] for e in reversed(entries)])
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(entries) + 1.8))
    for y, e in enumerate(entries):
        m, err = _err(e["ci"])
        s = sty[e["name"]]
        ax.barh(y, m, color=s["color"], edgecolor="black" if e["name"] == winner else s["color"],
                linewidth=2 if e["name"] == winner else 0.5, alpha=0.85)
        ax.errorbar([m], [y], xerr=err, fmt=s["marker"], color="black", capsize=4, ms=6)
        ax.text(m, y + 0.32, f" {m:.3g} [{_num(e['ci'].get('low'))}, {_num(e['ci'].get('high'))}] n={e['ci']['n']}",
                va="center", fontsize=7)
    ax.set_yticks(range(len(entries)))
    ax.set_yticklabels([f"{e['name']} ({_load(e['load'])})" for e in entries], fontsize=8)
    ax.set_xlabel("goodput (requests/s meeting the objective), 95% t interval over rounds")
    ax.set_title("Deciding figure per configuration: the goodput it sustains under the objective (the rate "
                 "whose interval's lower bound is highest)", fontsize=9)
    ax.set_xlim(0, max(e["ci"].get("high") or e["ci"]["mean"] for e in entries) * 1.35 or 1)
    fig.tight_layout(rect=(0, 0, 1, _top(standin, dummy)))
    return _finish(fig, path, "deciding figure per configuration", [e["name"] for e in reversed(entries)], sty,
                   standin, dummy)


def _num(v):
    return "-" if v is None else f"{v:.3g}"


def _load(load):
    return f"c{int(load['value'])}" if load["kind"] == "concurrency" else f"{float(load['value']):g} req/s"


def _series(cells, kind):
    """{config: its cells of this load kind (rate: open loop, concurrency: closed), in load order}; none empty."""
    out = {c: sorted((x for x in v if x["load"]["kind"] == kind), key=lambda x: x["load"]["value"])
           for c, v in cells.items()}
    return {c: v for c, v in out.items() if v}


def curves_chart(cells, path, objective, standin=False, dummy=False, sty=None):
    """``cells``: {config: [{load, stats}]} (open-loop cells drawn). None without any open-loop cell."""
    series = _series(cells, "rate")
    if not series:
        return None
    plt = _plt()
    sty = sty or styles(list(series))
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    panels = (
        (axes[0][0], "rate", "goodput_rps", "offered request rate (req/s)", "goodput (req/s within the objective)",
         "goodput against the offered rate"),
        (axes[0][1], "rate", "output_tok_s", "offered request rate (req/s)", "output tok/s",
         "output tok/s against the offered rate"),
        (axes[1][0], "output_tok_s", "ttft_p50_ms", "output tok/s reached", "TTFT p50 (ms)",
         "throughput-latency: TTFT p50"),
        (axes[1][1], "output_tok_s", "itl_p95_ms", "output tok/s reached", "ITL p95 (ms)",
         "throughput-latency: p95 inter-token latency"),
    )
    for ax, xk, yk, xl, yl, title in panels:
        for name, pts in series.items():
            s = sty[name]
            xs, ys, xe, ye = [], [], [[], []], [[], []]
            for p in pts:
                if xk == "rate":
                    x, xerr = float(p["load"]["value"]), ([0.0], [0.0])
                else:
                    x, xerr = _err(p["stats"][xk])
                y, yerr = _err(p["stats"][yk])
                if x is None or y is None:
                    continue
                xs.append(x)
                ys.append(y)
                xe[0] += xerr[0]
                xe[1] += xerr[1]
                ye[0] += yerr[0]
                ye[1] += yerr[1]
            if xs:
                n = min(p["stats"]["n_rounds"] for p in pts)
                ax.errorbar(xs, ys, xerr=xe if xk != "rate" else None, yerr=ye, color=s["color"], marker=s["marker"],
                            linestyle=s["linestyle"], ms=5, capsize=3, lw=1.2, label=f"{name} (n>={n})")
        if xk == "rate":
            rates = sorted({float(p["load"]["value"]) for v in series.values() for p in v})
            if yk == "goodput_rps":
                ax.plot(rates, rates, color="#999999", lw=0.8, ls=":", label="offered rate")
        if yk == "ttft_p50_ms" and objective.get("ttft_ms"):
            ax.axhline(objective["ttft_ms"], color="#b00000", lw=0.8, ls="--", label="objective: TTFT limit")
        if yk == "itl_p95_ms" and objective.get("itl_ms"):
            ax.axhline(objective["itl_ms"], color="#b00000", lw=0.8, ls="--", label="objective: ITL limit")
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.set_title(title + " (95% intervals)", fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    extra = [(h, lab) for ax in axes.flat for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)
             if lab.startswith("objective") and lab not in labels]
    seen = set()
    for h, lab in extra:
        if lab not in seen:
            handles.append(h)
            labels.append(lab)
            seen.add(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    rows = (len(labels) + 3) // 4
    fig.tight_layout(rect=(0, 0.03 + 0.03 * rows, 1, _top(standin, dummy)))
    return _finish(fig, path, "throughput and latency over the request rates", list(series), sty, standin, dummy)


def closed_chart(cells, path, standin=False, dummy=False, sty=None):
    series = _series(cells, "concurrency")
    if not series:
        return None
    plt = _plt()
    sty = sty or styles(list(series))
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    levels = sorted({int(p["load"]["value"]) for v in series.values() for p in v})
    # the levels as categories, each configuration a little to the side of the next: its interval stays visible
    dodge = {name: (k - (len(series) - 1) / 2) * (0.6 / max(1, len(series))) for k, name in enumerate(series)}
    for ax, yk, yl in ((axes[0], "output_tok_s", "output tok/s"),
                       (axes[1], "goodput_rps", "goodput (req/s within the objective)")):
        for name, pts in series.items():
            s = sty[name]
            xs, ys, ye = [], [], [[], []]
            for p in pts:
                y, err = _err(p["stats"][yk])
                if y is None:
                    continue
                xs.append(levels.index(int(p["load"]["value"])) + dodge[name])
                ys.append(y)
                ye[0] += err[0]
                ye[1] += err[1]
            if xs:
                n = min(p["stats"]["n_rounds"] for p in pts)
                ax.errorbar(xs, ys, yerr=ye, color=s["color"], marker=s["marker"], linestyle=s["linestyle"], ms=5,
                            capsize=3, lw=1.2, label=f"{name} (n>={n})")
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels([str(c) for c in levels])
        ax.set_xlim(-0.5, len(levels) - 0.5)
        ax.set_xlabel("concurrency (closed-loop clients)")
        ax.set_ylabel(yl)
        ax.set_title(f"{yl} against concurrency (95% intervals)", fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    rows = (len(labels) + 3) // 4
    fig.tight_layout(rect=(0, 0.04 + 0.045 * rows, 1, _top(standin, dummy)))
    return _finish(fig, path, "closed loop: tok/s and goodput against concurrency", list(series), sty, standin, dummy)


def accept_chart(accept, path, standin=False, dummy=False, sty=None):
    """``accept``: {config: {histogram (steps that accepted k drafts), chunks (chunks that brought k tokens),
    lengths (per-request accept lengths)}} of the speculative configurations. None without any."""
    accept = {k: v for k, v in accept.items() if v.get("lengths")}
    if not accept:
        return None
    plt = _plt()
    sty = sty or styles(list(accept))
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    ax = axes[0]
    kinds = set()
    for name, a in accept.items():
        s = sty[name]
        if a.get("histogram"):  # steps that accepted k drafts -> k + 1 tokens
            counts, offset, kind = a["histogram"], 1, "per step (server histogram)"
        else:
            counts, offset, kind = a.get("chunks") or [], 0, "per streamed chunk"
        total = sum(counts)
        if not total:
            continue
        kinds.add(kind)
        xs = [k + offset for k, c in enumerate(counts) if c]
        ys = [c / total for c in counts if c]
        ax.plot(xs, ys, color=s["color"], marker=s["marker"], linestyle=s["linestyle"], ms=5, lw=1.2,
                label=f"{name}: {kind}, {total} steps")
    ax.set_xlabel("tokens accepted in one verify step (drafts accepted + the bonus token)")
    ax.set_ylabel("share of steps")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("accepted tokens per step" + ("" if kinds != {"per streamed chunk"} else
                                                " (streamed chunks: sglang may merge steps)"), fontsize=10)
    ax.grid(alpha=0.3)
    # below the panel, in columns: over the lines it would hide the distribution of a dozen series
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax = axes[1]
    names = list(accept)
    import matplotlib

    # horizontal boxes: orientation= since matplotlib 3.10 (vert= is deprecated there), vert= before it
    horizontal = ({"orientation": "horizontal"} if tuple(int(x) for x in matplotlib.__version__.split(".")[:2])
                  >= (3, 10) else {"vert": False})
    bp = ax.boxplot([accept[n]["lengths"] for n in names], patch_artist=True, widths=0.6, **horizontal)
    for patch, n in zip(bp["boxes"], names, strict=True):
        patch.set_facecolor(sty[n]["color"])
        patch.set_alpha(0.6)
    for y, n in enumerate(names, 1):
        ax.plot([sum(accept[n]["lengths"]) / len(accept[n]["lengths"])], [y], marker=sty[n]["marker"], color="black",
                ms=6)
    ax.set_yticks(range(1, len(names) + 1))
    ax.set_yticklabels([f"{n} (n={len(accept[n]['lengths'])})" for n in names], fontsize=8)
    every = [x for n in names for x in accept[n]["lengths"]]
    if max(every) - min(every) < 0.1:  # all alike (acceptance pinned, e.g. 1.0): a readable axis around them
        ax.set_xlim(min(every) - 0.5, max(every) + 0.5)
    ax.ticklabel_format(axis="x", useOffset=False, style="plain")
    ax.set_xlabel("accept length of a request (completion tokens / verify steps)")
    ax.set_title("per-request accept length (box: quartiles; marker: mean)", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0, 1, _top(standin, dummy)))
    return _finish(fig, path, "accepted tokens per verify step", names, sty, standin, dummy)


def heatmap_chart(entries, path, standin=False, dummy=False):
    """DDTREE budget x top-k of the deciding goodput, one panel per (mode, attention backend), one colour
    scale (the same vmin/vmax and one colour bar) for all panels. None without two DDTREE configurations."""
    tree = [e for e in entries if e.get("algorithm") == "DDTREE" and e.get("budget") is not None
            and e["ci"].get("mean") is not None]
    if len(tree) < 2:
        return None
    plt = _plt()
    panels = sorted({(e.get("mode") or "tree", e.get("attention_backend") or "release's") for e in tree})
    budgets = sorted({int(e["budget"]) for e in tree})
    topks = sorted({int(e["topk"]) for e in tree})
    vmin = min(e["ci"]["mean"] for e in tree)
    vmax = max(e["ci"]["mean"] for e in tree)
    if vmax <= vmin:
        vmax = vmin + 1e-9
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 1.2, 0.9 * len(budgets) + 2.6),
                             squeeze=False)
    im = None
    for ax, (mode, backend) in zip(axes[0], panels, strict=True):
        grid = [[None] * len(topks) for _ in budgets]
        for e in tree:
            if (e.get("mode") or "tree", e.get("attention_backend") or "release's") == (mode, backend):
                grid[budgets.index(int(e["budget"]))][topks.index(int(e["topk"]))] = e
        vals = [[(c["ci"]["mean"] if c else float("nan")) for c in line] for line in grid]
        im = ax.imshow(vals, cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto", origin="lower")
        for bi, line in enumerate(grid):
            for ki, c in enumerate(line):
                if c is None:
                    ax.text(ki, bi, "-", ha="center", va="center", fontsize=8)
                    continue
                m = c["ci"]["mean"]
                light = (m - vmin) / (vmax - vmin) > 0.6
                ax.text(ki, bi, f"{m:.3g}\n[{_num(c['ci'].get('low'))}, {_num(c['ci'].get('high'))}]\n"
                                f"n={c['ci']['n']}", ha="center", va="center", fontsize=7,
                        color="black" if light else "white")
        label_grid(ax, topks, budgets, f"DDTREE {mode}, attention: {backend}")
    fig.colorbar(im, ax=list(axes[0]), fraction=0.046, label="goodput (req/s), one scale for every panel")
    fig.suptitle("DDTREE budget x top-k: the deciding goodput, mean [95% interval], n rounds", fontsize=10,
                 y=_top(standin, dummy) - 0.01)
    return _finish(fig, path, "DDTREE budget x top-k: deciding goodput", [f"{m} / {b}" for m, b in panels], {},
                   standin, dummy, extra={"scale": [vmin, vmax], "colorbars": 1})


def draw_all(model, chart_dir) -> dict:
    """{name: {path, title, series}} of the charts the run has data for. ``model``: tune_report's analysis."""
    os.makedirs(chart_dir, exist_ok=True)
    st, dm = model["standin"], model["dummy"]
    # one style per configuration for the whole run: a configuration looks the same in every chart
    sty = styles(list(model["configs"]) + list(model["cells"]))
    out = {}
    winner = (model["choice"].get("best") or {}).get("name") if model["choice"]["verdict"] in (
        "winner", "speculation_does_not_pay") else None
    for name, fn, args in (
        ("deciding", deciding_chart, (model["entries"],)),
        ("curves", curves_chart, (model["cells"],)),
        ("closed", closed_chart, (model["cells"],)),
        ("accept", accept_chart, (model["accept"],)),
        ("heatmap", heatmap_chart, (model["entries"],)),
    ):
        path = os.path.join(chart_dir, f"{name}.png")
        if name == "deciding":
            res = fn(*args, path, st, dm, winner=winner, sty=sty)
        elif name == "curves":
            res = fn(*args, path, model["objective"], st, dm, sty=sty)
        elif name == "heatmap":
            res = fn(*args, path, st, dm)
        else:
            res = fn(*args, path, st, dm, sty=sty)
        if res:
            out[name] = res
    return out
