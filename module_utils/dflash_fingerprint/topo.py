"""GPU topology: `nvidia-smi topo -m` and `nvidia-smi topo -p2p r` parsed, and what a GPU set gets.

Pure functions, no Ansible import. The fingerprint stage captures both outputs
(`nvidia-smi-topo.txt`, `nvidia-smi-topo-p2p.txt` in the capture folder) and stores
`parse_topology(...)` as `dflash_fingerprint.topology`; `gpu_set_facts` says for the GPUs of one
instance how they are linked (NVLink, PCIe switch, host bridge, across NUMA nodes) and whether
peer-to-peer works between every pair, which the tensor-parallel rules read.

The matrix is read by position, as nvidia-smi prints it: the header names the devices (GPU<n>,
NIC<n> or mlx5_<n>, ...) and then `CPU Affinity`, `NUMA Affinity`, `GPU NUMA ID` (newer drivers);
each GPU row has one cell per device and then those trailing cells. Copies found in the wild add
ANSI underline codes, markdown indentation, spaces instead of tabs and wrapped legend lines, or glue
two NIC cells together; only the GPU cells (always first) and the trailing cells (read from the end)
matter here, so those do not hurt.
"""

from __future__ import annotations

import re

ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
GPU_RE = re.compile(r"GPU(\d+)")
LINK_RE = re.compile(r"^(X|SYS|SOC|NODE|PHB|PXB|PIX|NV\d+)$")
CPU_LIST_RE = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")
P2P_STATUSES = {
    "X": "self",
    "OK": "status ok",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DR": "disabled by regkey",
    "U": "unknown",
}
# link kinds from closest to farthest (nvidia-smi's legend); SOC is the pre-2017 name of SYS
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")
LINK_MEANING = {
    "NV": "a bonded set of NVLinks",
    "PIX": "at most one PCIe bridge",
    "PXB": "several PCIe bridges, not the host bridge",
    "PHB": "a PCIe host bridge (the CPU)",
    "NODE": "the interconnect between PCIe host bridges within a NUMA node",
    "SYS": "PCIe and the SMP interconnect between NUMA nodes (QPI/UPI/Infinity Fabric)",
}


def _kind(cell: str) -> str:
    """'NV18' -> 'NV', 'SOC' -> 'SYS', others unchanged."""
    if cell.startswith("NV"):
        return "NV"
    return "SYS" if cell == "SOC" else cell


def _lines(text) -> list[str]:
    return [ANSI_RE.sub("", ln).rstrip() for ln in str(text or "").splitlines()]


def _header(lines):
    """(index, GPU ids, line) of the header: the first line naming GPU0 that is not a GPU row."""
    for i, ln in enumerate(lines):
        toks = ln.split()
        if "GPU0" not in toks:
            continue
        if toks[0].startswith("GPU") and len(toks) > 1 and LINK_RE.match(toks[1]):
            continue  # a data row
        return i, GPU_RE.findall(ln.split("CPU Affinity")[0]), ln
    return None, [], ""


def parse_topo_matrix(text) -> dict:
    """`nvidia-smi topo -m` -> {gpus: [index], links: {"i-j": cell}, cpu_affinity: {i: str|None},
    numa_affinity: {i: int|None}, nics: int, error: str|None}.  Keys of links are "low-high"."""
    out = {"gpus": [], "links": {}, "cpu_affinity": {}, "numa_affinity": {}, "nics": 0, "error": None}
    lines = _lines(text)
    hi, gpu_ids, head_line = _header(lines)
    if hi is None or not gpu_ids:
        out["error"] = "no topology matrix (no header naming GPU0)"
        return out
    n = len(gpu_ids)
    gpus = [int(g) for g in gpu_ids]
    out["gpus"] = gpus
    devices_part = head_line.split("CPU Affinity")[0]
    out["nics"] = len(re.findall(r"NIC\d+|mlx\d+_\w+", devices_part))
    trailing = [name for name in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID") if name in head_line]
    seen = set()
    for ln in lines[hi + 1:]:
        toks = ln.split()
        if not toks:
            if len(seen) == n:
                break
            continue
        m = re.fullmatch(r"GPU(\d+)", toks[0])
        if not m:
            if seen and not toks[0].startswith(("NIC", "mlx")) and len(seen) < n:
                out["error"] = f"row {toks[0]!r} inside the GPU rows"
            continue
        gi = int(m.group(1))
        cells = toks[1:1 + n]
        if len(cells) < n or not all(LINK_RE.match(c) for c in cells):
            out["error"] = f"GPU{gi}: cannot read the {n} GPU cells from {ln.strip()!r}"
            continue
        seen.add(gi)
        for gj, cell in zip(gpus, cells):
            if gj == gi:
                continue
            key = f"{min(gi, gj)}-{max(gi, gj)}"
            out["links"].setdefault(key, cell)
        rest = toks[1 + n:]
        cpu = numa = None
        if trailing:
            # from the end: GPU NUMA ID, NUMA Affinity, CPU Affinity (NIC cells before them)
            tail = list(rest)
            if "GPU NUMA ID" in trailing and tail:
                tail.pop()
            if "NUMA Affinity" in trailing and tail:
                v = tail.pop()
                numa = int(v) if v.isdigit() else None
            if "CPU Affinity" in trailing and tail and (CPU_LIST_RE.match(tail[-1]) or tail[-1] == "N/A"):
                cpu = tail[-1] if tail[-1] != "N/A" else None
        out["cpu_affinity"][gi] = cpu
        out["numa_affinity"][gi] = numa
    missing = [g for g in gpus if g not in seen]
    if missing and not out["error"]:
        out["error"] = f"no row for GPU {', '.join(str(g) for g in missing)}"
    return out


def parse_p2p_matrix(text) -> dict:
    """`nvidia-smi topo -p2p r` (or rw, w, n, a) -> {gpus, status: {"i-j": code}, error}.

    A pair takes the worse of its two directions (anything but OK wins)."""
    out = {"gpus": [], "status": {}, "error": None}
    lines = _lines(text)
    hi = None
    for i, ln in enumerate(lines):
        toks = ln.split()
        if toks and all(re.fullmatch(r"GPU\d+", t) for t in toks) and "GPU0" in toks:
            hi, header = i, [int(t[3:]) for t in toks]
            break
    if hi is None:
        out["error"] = "no peer-to-peer matrix (no header of GPU columns)"
        return out
    out["gpus"] = header
    rows = 0
    for ln in lines[hi + 1:]:
        toks = ln.split()
        if not toks:
            if rows:
                break
            continue
        m = re.fullmatch(r"GPU(\d+)", toks[0])
        if not m:
            break
        gi = int(m.group(1))
        cells = toks[1:1 + len(header)]
        if len(cells) < len(header) or not all(c in P2P_STATUSES for c in cells):
            out["error"] = f"GPU{gi}: cannot read the peer-to-peer cells from {ln.strip()!r}"
            continue
        rows += 1
        for gj, cell in zip(header, cells):
            if gj == gi:
                continue
            key = f"{min(gi, gj)}-{max(gi, gj)}"
            prev = out["status"].get(key)
            if prev is None or prev == "OK":
                out["status"][key] = cell
    if rows < len(header) and not out["error"]:
        out["error"] = f"only {rows} of {len(header)} rows"
    return out


def parse_topology(topo_text, p2p_text=None) -> dict | None:
    """The fingerprint's `topology`: {gpus, links, cpu_affinity, numa_affinity, nics, p2p, p2p_mode,
    errors}; None when neither output was captured."""
    if topo_text is None and p2p_text is None:
        return None
    m = parse_topo_matrix(topo_text) if topo_text is not None else {"gpus": [], "links": {}, "cpu_affinity": {},
                                                                    "numa_affinity": {}, "nics": 0, "error": None}
    p = parse_p2p_matrix(p2p_text) if p2p_text is not None else None
    errors = []
    if topo_text is not None and m["error"]:
        errors.append(f"nvidia-smi topo -m: {m['error']}")
    if p is not None and p["error"]:
        errors.append(f"nvidia-smi topo -p2p r: {p['error']}")
    return {
        "gpus": m["gpus"] or (p or {}).get("gpus") or [],
        "links": m["links"],
        # JSON object keys are strings: keep them so a fact survives Ansible unchanged
        "cpu_affinity": {str(k): v for k, v in m["cpu_affinity"].items()},
        "numa_affinity": {str(k): v for k, v in m["numa_affinity"].items()},
        "nics": m["nics"],
        "p2p": (p or {}).get("status") if p is not None and not p["error"] else ((p or {}).get("status") or None),
        "errors": errors,
    }


def _pairs(gpus):
    g = sorted(set(gpus))
    return [(a, b) for i, a in enumerate(g) for b in g[i + 1:]]


def gpu_set_facts(topology, gpus) -> dict:
    """How the GPUs of one instance are connected.

    -> {known: bool, pairs: n, links: {"i-j": cell}, worst: kind|None, all_nvlink: bool|None,
        numa_nodes: [int], cross_numa: bool|None, p2p_ok: bool|None, p2p_bad: ["i-j CODE (meaning)"],
        numa_groups: {node: [gpu]}}.  Unknown pieces are None (the rules then say so)."""
    gpus = sorted({int(g) for g in gpus or []})
    out = {"known": False, "pairs": len(_pairs(gpus)), "links": {}, "worst": None, "all_nvlink": None,
           "numa_nodes": [], "cross_numa": None, "p2p_ok": None, "p2p_bad": [], "numa_groups": {}}
    if not topology or len(gpus) < 2:
        return out
    links = topology.get("links") or {}
    have = {}
    for a, b in _pairs(gpus):
        cell = links.get(f"{a}-{b}")
        if cell is None:
            have = None
            break
        have[f"{a}-{b}"] = cell
    if have is not None:
        out["known"] = True
        out["links"] = have
        kinds = [_kind(c) for c in have.values()]
        out["worst"] = max(kinds, key=LINK_ORDER.index)
        out["all_nvlink"] = all(k == "NV" for k in kinds)
    numa = topology.get("numa_affinity") or {}
    nodes = [numa.get(str(g)) for g in gpus]
    if nodes and all(isinstance(x, int) for x in nodes):
        out["numa_nodes"] = sorted(set(nodes))
        out["cross_numa"] = len(set(nodes)) > 1
    elif out["known"]:
        out["cross_numa"] = out["worst"] == "SYS"
    groups = {}
    for g, node in sorted(((int(k), v) for k, v in numa.items()), key=lambda kv: kv[0]):
        if isinstance(node, int):
            groups.setdefault(str(node), []).append(g)
    out["numa_groups"] = groups
    p2p = topology.get("p2p")
    if isinstance(p2p, dict) and p2p:
        bad, missing = [], False
        for a, b in _pairs(gpus):
            st = p2p.get(f"{a}-{b}")
            if st is None:
                missing = True
            elif st != "OK":
                bad.append(f"{a}-{b} {st} ({P2P_STATUSES.get(st, st)})")
        out["p2p_bad"] = bad
        out["p2p_ok"] = None if (missing and not bad) else not bad
    return out


def describe_links(facts) -> str:
    """'0-1 PHB, 0-2 SYS' for messages."""
    return ", ".join(f"{k} {v}" for k, v in sorted((facts or {}).get("links", {}).items())) or "unknown"


TOPO_FILES = {"nvidia-smi-topo.txt": ["topo", "-m"], "nvidia-smi-topo-p2p.txt": ["topo", "-p2p", "r"]}


def collect_topology(smi, run) -> dict:
    """Run `nvidia-smi topo -m` and `topo -p2p r` with run(argv) -> (rc, text); the outputs that
    succeeded, in the capture-folder format. Best effort: a driver or container that cannot say
    leaves the topology unknown (the rules then say so), it never fails the fingerprint."""
    out = {}
    for fname, args in TOPO_FILES.items():
        rc, text = run([smi] + args)
        if rc == 0 and text:
            out[fname] = text
    return out
