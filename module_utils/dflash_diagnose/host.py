"""The host's fingerprint handed to the diagnosis: the real GPU, SM, driver, CUDA and toolkits.

A log names the GPU only by accident (a warning, an arch list, a requirement it quotes), and reads wrong
as often as right: an RTX 5090's log was read as "SM 7.5" from the arch list of the torch it warned
about. The fingerprint (fact ``dflash_fingerprint`` of the fingerprint stage, handed to the module as
``fingerprint``) knows the GPU; ``merge`` puts its values over the ones read from the log and notes
where the log disagreed. Pure functions, no Ansible import.
"""

from __future__ import annotations

from collections import Counter

from ansible.module_utils.dflash_diagnose.arch import parse_sm, sm_text


def summary(fingerprint: dict | None) -> dict:
    """{gpu, sm, gpus, driver_version, driver_cuda, nvcc_version, toolkits, torch} of a fingerprint; {}
    without one. ``gpu``/``sm`` only when every GPU of the host is the same model."""
    fp = fingerprint or {}
    if not isinstance(fp, dict) or not fp:
        return {}
    out: dict = {}
    models = Counter()
    for g in fp.get("gpus") or []:
        if not isinstance(g, dict):
            continue
        sm = parse_sm(g.get("sm"))
        models[(str(g.get("name") or "GPU"), sm_text(sm) if sm else None)] += 1
    if models:
        out["gpus"] = ", ".join(f"{n} x {name}" + (f" (SM {sm})" if sm else "") for (name, sm), n in models.items())
        if len(models) == 1:
            (name, sm), = models
            out["gpu"] = name
            if sm:
                out["sm"] = sm
    for key, src in (("driver_version", "driver_version"), ("driver_cuda", "driver_cuda_version"),
                     ("nvcc_version", "nvcc_version")):
        if fp.get(src):
            out[key] = str(fp[src])
    toolkits = [str(t.get("version")) for t in fp.get("cuda_toolkits") or [] if isinstance(t, dict) and t.get("version")]
    if toolkits:
        out["toolkits"] = ", ".join(sorted(set(toolkits)))
    torch = fp.get("torch") or {}
    if isinstance(torch, dict) and torch.get("version"):
        out["torch"] = str(torch["version"])
    if isinstance(fp.get("topology"), dict):
        out["topology"] = fp["topology"]
    return out


def merge(facts: dict, host: dict) -> tuple[dict, list[str]]:
    """The log's facts with the host's over them; notes where the log said something else."""
    if not host:
        return facts, []
    out = dict(facts)
    notes = []
    if host.get("sm"):
        log_sm = facts.get("sm")
        if log_sm and log_sm != host["sm"] and not (log_sm.endswith(".x") and host["sm"].split(".")[0] == log_sm[:-2]):
            notes.append(f"the log reads SM {log_sm}; the host's fingerprint says SM {host['sm']} ({host.get('gpu')}), "
                         "which is used")
            out["log_sm"] = log_sm
        out["sm"] = host["sm"]
    if host.get("gpu"):
        if facts.get("gpu_name") and facts["gpu_name"].strip() != host["gpu"]:
            out["log_gpu_name"] = facts["gpu_name"]
        out["gpu_name"] = host["gpu"]
    for key in ("driver_version", "driver_cuda", "nvcc_version"):
        if host.get(key):
            out[key] = host[key]
    if host.get("torch") and not facts.get("torch_version"):
        out["torch_version"] = host["torch"]
    return out, notes
