"""The verdict of a host and the fleet report (markdown, text)."""

from __future__ import annotations

import json

from ansible.module_utils.dflash_fingerprint.gate import gpu_busy_reason


def host_verdict(fp, refusals=None) -> str:
    """'ok', 'REFUSED: ...', the host's problems, or why there is no fingerprint."""
    if fp is None:
        return "no fingerprint (host unreachable or the module failed)"
    if refusals:
        return "REFUSED: " + " | ".join(refusals)
    if not fp.get("gpu_count"):
        return "no GPUs: " + ("; ".join(fp.get("problems") or []) or "none found")
    if fp.get("problems"):
        return "warning: " + "; ".join(fp["problems"])
    return "ok"


def fleet_rows(fleet: dict, refusals: dict | None = None) -> list[dict]:
    """{host: fingerprint or None} (+ {host: [refusal]}) -> one summary row per host."""
    rows = []
    for host in sorted(fleet):
        fp = fleet[host]
        verdict = host_verdict(fp, (refusals or {}).get(host))
        fp = fp or {}
        models = {}
        for g in fp.get("gpus", []):
            key = (g.get("name") or "unknown", g.get("sm"))
            models.setdefault(key, []).append(g)
        gpus_txt = "; ".join(f"{len(v)}x {n}" + (f" (SM {sm}, {v[0].get('arch')})" if sm else " (SM ?)")
                             for (n, sm), v in models.items()) or "none"
        mem_txt = "; ".join(f"{v[0].get('memory_total_mib')} MiB" if v[0].get("memory_total_mib") is not None
                            else "unified/unknown" for v in models.values()) or "-"
        busy = [g for g in fp.get("gpus", []) if g.get("index") is not None and gpu_busy_reason(g)]
        busy_txt = "; ".join(f"GPU {g['index']}: {g.get('memory_used_mib')} MiB"
                             + "".join(f", pid {p.get('pid')} {p.get('name')}" for p in g.get("processes") or [])
                             for g in busy) or "none"
        torch = fp.get("torch")
        torch_txt = (f"{torch.get('version')} (cuda {torch.get('cuda')}, "
                     f"{'sees GPUs' if torch.get('available') else 'no GPU'})") if torch else "-"
        tk = ", ".join(f"{t.get('version')} {t.get('path')}" for t in fp.get("cuda_toolkits") or [])
        if fp.get("nvcc_version") and not tk:
            tk = f"nvcc {fp['nvcc_version']}"
        rows.append({"host": host, "gpus": gpus_txt, "memory": mem_txt,
                     "driver": f"{fp.get('driver_version') or '-'} / CUDA {fp.get('driver_cuda_version') or '-'}",
                     "toolkits": tk or "-", "torch": torch_txt, "busy": busy_txt, "verdict": verdict})
    return rows


COLUMNS = [("host", "host"), ("gpus", "GPUs (model, SM)"), ("memory", "memory"), ("driver", "driver / CUDA"),
           ("toolkits", "toolkits"), ("torch", "torch"), ("busy", "busy GPUs"), ("verdict", "verdict")]


def fleet_markdown(fleet: dict, refusals: dict | None = None) -> str:
    """The fleet table, then one section per host (GPUs, versions, problems, refusals)."""
    def cell(value):
        return str(value).replace("|", "\\|")

    rows = fleet_rows(fleet, refusals)
    out = ["# GPU fleet fingerprint", "",
           "| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(cell(r[k]) for k, _ in COLUMNS) + " |" for r in rows]
    for host in sorted(fleet):
        fp = fleet[host]
        out += ["", f"## {host}", ""]
        if fp is None:
            out.append("No fingerprint: host unreachable or the module failed.")
            continue
        out += ["| GPU | model | SM | arch | MiB used / total | processes | healthy |", "|---|---|---|---|---|---|---|"]
        for g in fp.get("gpus", []):
            procs = ", ".join(f"{p.get('pid')} {p.get('name')} ({p.get('used_mib')} MiB)"
                              for p in g.get("processes") or []) or "-"
            health = "yes" if g.get("healthy") else f"no: {g.get('problem')}"
            out.append("| " + " | ".join(cell(x) for x in (
                g.get("index"), g.get("name"), g.get("sm"), g.get("arch"),
                f"{g.get('memory_used_mib')} / {g.get('memory_total_mib')}", procs, health)) + " |")
        torch = fp.get("torch")
        out += ["", f"driver {fp.get('driver_version')} (CUDA {fp.get('driver_cuda_version')}), "
                    f"nvcc {fp.get('nvcc_version')}, toolkits: "
                    + (", ".join(f"{t.get('version')} {t.get('path')}" for t in fp.get("cuda_toolkits") or []) or "none")
                    + f", torch: {json.dumps(torch) if torch else 'not probed'}, {fp.get('os')}, glibc {fp.get('glibc')}",
                "", "sources: " + ", ".join(fp.get("sources") or [])]
        out += [f"- problem: {x}" for x in fp.get("problems") or []]
        out += [f"- refusal: {x}" for x in (refusals or {}).get(host) or []]
    return "\n".join(out) + "\n"


def fleet_text(fleet: dict, refusals: dict | None = None, width: int = 48) -> str:
    """Fixed-width fleet table (cells cut at `width`), then every verdict in full."""
    rows = fleet_rows(fleet, refusals)

    def cut(value):
        value = str(value)
        return value if len(value) <= width else value[:width - 3] + "..."

    widths = {k: max([len(h)] + [len(cut(r[k])) for r in rows]) for k, h in COLUMNS}
    out = ["  ".join(h.ljust(widths[k]) for k, h in COLUMNS), "  ".join("-" * widths[k] for k, _ in COLUMNS)]
    out += ["  ".join(cut(r[k]).ljust(widths[k]) for k, _ in COLUMNS) for r in rows]
    out.append("")
    for r in rows:
        out.append(f"{r['host']}: {r['verdict']}")
    return "\n".join(x.rstrip() for x in out) + "\n"
