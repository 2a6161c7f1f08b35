"""report.md of a benchmark run: what ran, the figures with acceptance beside every throughput,
the failed cells with their diagnosis, the charts, the full flags, the comparison. No Ansible import."""

from __future__ import annotations

from ansible.module_utils.dflash_bench.charts import DUMMY_STAMP, STANDIN_STAMP
from ansible.module_utils.dflash_bench.layout import wrap_command

MD_WIDTH = 100  # command lines in report.md


def _v(value, fmt="{:.1f}"):
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return fmt.format(value)
    return str(value)


def _table(header, lines) -> list:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in line) + " |" for line in lines]
    return out


def cells_columns(repeats=False) -> list:
    """The results table's columns: report.md and report.tex print every one of them."""
    return ["configuration", "workload", "conc.", *(["rep."] if repeats else []), "status", "tok/s", "accept len.",
            "verify steps", "/metrics accept", "TTFT p50 / p99 ms", "ITL p50 / p99 ms", "prefix reuse"]


def cells_rows(rows, repeats=False) -> list:
    lines = []
    for r in rows:
        lines.append([r["config"], r["workload"], r["concurrency"], *([r.get("repeat")] if repeats else []),
                      r["status"], _v(r["output_tok_s"]),
                      _v(r["accept_length"], "{:.2f}"), _v(r["spec_verify_ct"]),
                      _v(r["accept_length_metrics"], "{:.2f}"),
                      f"{_v(r['ttft_p50_ms'])} / {_v(r['ttft_p99_ms'])}", (f"{_v(r['itl_p50_ms'], '{:.2f}')} / "
                      f"{_v(r['itl_p99_ms'], '{:.2f}')}"), _v(r["cached_ratio"], "{:.0%}")])
    return lines


def cells_table(rows, repeats=False) -> list:
    return _table(cells_columns(repeats), cells_rows(rows, repeats))


def dummy_weights(configs) -> bool:
    """A configuration of the run loads random weights (--load-format dummy in its flags)."""
    for c in configs or []:
        args = [str(a) for a in c.get("args") or []]
        if any(a == "--load-format=dummy" for a in args) or any(
                a == "--load-format" and i + 1 < len(args) and args[i + 1] == "dummy" for i, a in enumerate(args)):
            return True
    return False


SPREAD_COLUMNS = ["configuration", "workload", "conc.", "measured", "median tok/s", "min - max tok/s", "max / min",
                  "median accept len."]
COMPARE_COLUMNS = ["configuration", "workload", "conc.", "tok/s", "other tok/s", "ratio", "accept", "other accept",
                   "accept ratio"]


def spread_rows(spread) -> list:
    return [[s["config"], s["workload"], s["concurrency"], f"{s['measured']} of {s['repeats']}",
             _v(s["tok_s_median"]), f"{_v(s['tok_s_min'])} - {_v(s['tok_s_max'])}",
             _v(s["spread"], "{:.3f}"), _v(s["accept_median"], "{:.2f}")] for s in spread]


def compare_rows(compare) -> list:
    return [[c["config"], c["workload"], c["concurrency"], _v(c["tok_s"]), _v(c["tok_s_other"]),
             _v(c["tok_s_ratio"], "{:.3f}"), _v(c["accept"], "{:.2f}"), _v(c["accept_other"], "{:.2f}"),
             _v(c["accept_ratio"], "{:.3f}")] for c in compare]


def spread_table(spread) -> list:
    return _table(SPREAD_COLUMNS, spread_rows(spread))


def render(run, rows, configs, charts, compare=None, compare_name=None, workloads_text=None, spread=None) -> str:
    """The whole Markdown report."""
    standin = next((r["stand_in"] for r in rows if r.get("stand_in")), None) or run.get("stand_in")
    rel = run.get("release") or {}
    out = [f"# Benchmark {run.get('run')}: {run.get('host')}", ""]
    if standin:
        out += [(f"> **{STANDIN_STAMP}.** A stand-in server answered these requests (it says: {standin}): no "
                "figure below comes from a model on a GPU."), ""]
    if dummy_weights(configs):
        out += [(f"> **{DUMMY_STAMP}.** The servers load random weights: their drafts are almost never right, so these "
                 "figures say what the machinery costs, not which configuration the real model wants."), ""]
    ok = sum(1 for r in rows if r["status"] == "ok")
    failed = [r for r in rows if r["status"] == "failed"]
    out += [
        (f"- host: `{run.get('host')}`, release `{rel.get('id')}` (sglang {rel.get('sglang') or '?'}, "
        f"patches: {', '.join(rel.get('patches') or []) or 'none'})"),
        f"- fingerprint digest: `{rel.get('fingerprint_digest')}`"
        + ("" if None in (rel.get("fingerprint_digest_now"), rel.get("fingerprint_digest"))
           or rel.get("fingerprint_digest_now") == rel.get("fingerprint_digest")
           else f" (the host's now: `{rel.get('fingerprint_digest_now')}`: it changed since the deploy)"),
        f"- base instance: `{run.get('base_instance')}`; toolkit {(rel.get('toolkit') or {}).get('revision', '?')}",
        f"- started {run.get('started')}, finished {run.get('finished') or '(not finished)'}",
        f"- {len(rows)} cells: {ok} ok, {len(failed)} failed, {len(rows) - ok - len(failed)} partial/skipped",
        f"- command: `{run.get('command') or 'ansible-playbook playbooks/bench.yml'}`",
        "",
        ("Acceptance is beside every throughput figure: **accept len.** = completion tokens / verify steps of the "
        "cell's requests (the server's meta_info `spec_verify_ct`), **/metrics accept** = the server's "
        "`sglang:spec_accept_length` gauge after the cell. An accept length near 1 means the draft is almost "
        "never right: speculative decoding then costs time instead of saving it; confirm acceptance before "
        "trusting throughput."), ""]
    if workloads_text:
        out += ["## Workloads", ""] + [f"- **{k}**: {v}" for k, v in workloads_text.items()] + [""]
    if spread:
        out += ["## Repeats: median and spread per cell", "",
                (f"Every cell was measured {max(s['repeats'] for s in spread)} times on the same server, one pass over "
                 "its workloads after the other. max / min is the run-to-run spread of that cell's tok/s: a "
                 "difference between configurations smaller than it is not a result. Charts and the comparison use "
                 "the medians."), ""] + spread_table(spread) + [""]
    out += ["## Results" + (" (every repeat)" if spread else ""), ""] + cells_table(rows, bool(spread)) + [""]
    if failed:
        out += ["## Failed cells", ""]
        for r in failed:
            out.append(f"- `{r['cell']}`: {r.get('cause') or 'unknown cause'}"
                       + (f" -- remedy: {r['remedy']}" if r.get("remedy") else ""))
        out.append("")
    if charts:
        out += ["## Charts", ""]
        for name, ch in charts.items():
            out += [f"### {ch['title']}", "", f"![{name}](charts/{name}.png)", ""]
    if compare:
        out += [f"## Compared with {compare_name}", "",
                "ratio = this run / the other run, per cell (matched by configuration, workload, concurrency).", ""]
        out += _table(COMPARE_COLUMNS, compare_rows(compare)) + [""]
    out += ["## Configurations (full flags)", ""]
    for c in configs:
        where = (f"running instance `{c.get('running')}`" if c.get("running")
                 else f"GPU {','.join(str(g) for g in c.get('gpus') or [])}, port {c.get('port')}")
        out += [f"### {c['name']}", "", f"{c.get('algorithm')}; {where}", "",
                "```", *wrap_command(["python", "-m", "sglang.launch_server", *(c.get("args") or [])], MD_WIDTH), "```"]
        if c.get("changes"):
            out += ["", "Changed from the release's instance: " + "; ".join(c["changes"]) + "."]
        for o in c.get("overrides") or []:
            out.append(f"- replaces `{o['flag']} {o['release']}` that the release's fallback rule `{o['rule']}` set")
        out.append("")
    return "\n".join(out) + "\n"
