"""Running the tools on a host (nvidia-smi, nvcc, the torch probe) and capture folders (write, replay)."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import time

from ansible.module_utils.dflash_fingerprint.parse import parse_apps_csv, parse_nvcc, parse_smi_table
from ansible.module_utils.dflash_fingerprint.smi_errors import smi_error
from ansible.module_utils.dflash_fingerprint.tables import (
    APPS_FIELDS,
    FILES,
    QUERY_FIELDS,
    QUERY_FIELDS_OLD,
    SMI_FALLBACKS,
)
from ansible.module_utils.dflash_fingerprint.topo import collect_topology
from ansible.module_utils.dflash_fingerprint.values import vtuple
from ansible.module_utils.dflash_service.process import process_unit

TORCH_PROBE = (
    "import json\n"
    "try:\n"
    "    import torch\n"
    "    d = {'version': torch.__version__, 'cuda': torch.version.cuda,\n"
    "         'hip': getattr(torch.version, 'hip', None)}\n"
    "    try:\n"
    "        import warnings\n"
    "        with warnings.catch_warnings(record=True) as w:\n"
    "            warnings.simplefilter('always')\n"
    "            d['available'] = bool(torch.cuda.is_available())\n"
    "        if w and not d['available']:\n"
    "            d['error'] = str(w[-1].message)[-300:]\n"
    "        d['device_count'] = torch.cuda.device_count() if d['available'] else 0\n"
    "        d['arch_list'] = torch.cuda.get_arch_list() if d['available'] else []\n"
    "    except Exception as e:\n"
    "        d['available'] = False\n"
    "        d['error'] = repr(e)[-300:]\n"
    "except Exception as e:\n"
    "    d = {'version': None, 'cuda': None, 'available': False, 'error': repr(e)[-300:]}\n"
    "print(json.dumps(d))\n"
)


def _run(argv, timeout=60, env=None):
    """-> (rc, combined output) ; rc None when the program does not exist."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                           env=env, check=False)
    except FileNotFoundError:
        return None, f"{argv[0]}: command not found"
    except PermissionError as exc:
        return None, f"{argv[0]}: {exc}"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: timed out after {timeout}s"
    return p.returncode, p.stdout.decode("utf-8", "replace")


def find_toolkits(roots=("/usr/local",), nvcc_path=None) -> list[dict]:
    """Every CUDA toolkit under /usr/local/cuda* plus the one of nvcc on PATH."""
    seen, out = set(), []
    candidates = []
    for root in roots:
        candidates += sorted(glob.glob(os.path.join(root, "cuda*")))
    if nvcc_path:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc_path))))
    for c in candidates:
        real = os.path.realpath(c)
        if real in seen or not os.path.isdir(real):
            continue
        version = None
        vj = os.path.join(real, "version.json")
        vt = os.path.join(real, "version.txt")
        try:
            if os.path.isfile(vj):
                with open(vj, encoding="utf-8") as fh:
                    version = json.load(fh).get("cuda", {}).get("version")
            elif os.path.isfile(vt):
                with open(vt, encoding="utf-8") as fh:
                    version = (re.findall(r"(\d+\.\d+(?:\.\d+)?)", fh.read()) or [None])[0]
        except (OSError, ValueError, AttributeError):
            version = None
        nvcc = os.path.join(real, "bin", "nvcc")
        if version is None and os.access(nvcc, os.X_OK):
            rc, text = _run([nvcc, "--version"], timeout=30)
            version = parse_nvcc(text) if rc == 0 else None
        if version is None and not os.path.exists(nvcc):
            continue
        seen.add(real)
        short = ".".join(str(x) for x in vtuple(version)[:2]) if version else None
        out.append({"path": c if os.path.islink(c) is False else real, "version": short,
                    "full_version": version, "nvcc": nvcc if os.path.exists(nvcc) else None})
    return out


def collect_raw(venv_python=None, proc_version_path="/proc/driver/nvidia/version",
                nvidia_smi="nvidia-smi", toolkit_roots=("/usr/local",), timeout=60) -> dict:
    """Run the tools on this host and return its raw outputs in the capture-folder format."""
    raw: dict = {}
    meta = {"commands": {}, "exit_codes": {}, "errors": {}, "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                          time.gmtime())}

    def record(fname, argv):
        rc, text = _run(argv, timeout=timeout)
        meta["commands"][fname] = " ".join(argv)
        meta["exit_codes"][fname] = rc
        if rc is None:
            meta["errors"][fname] = text
            return None, text
        if rc != 0:
            meta["errors"][fname] = smi_error(text) or (
                f"exit code {rc}" if re.search(r"NVIDIA-SMI \d|<nvidia_smi_log|^\s*\d+\s*,", text, re.MULTILINE)
                else text.strip()[-300:])
        raw[fname] = text
        return rc, text

    smi = shutil.which(nvidia_smi) or (nvidia_smi if os.path.isabs(nvidia_smi) else None)
    if smi is None and nvidia_smi == "nvidia-smi":  # become/sudo's secure_path may miss these
        smi = next((c for c in SMI_FALLBACKS if os.access(c, os.X_OK)), None)
    if smi:
        rc, _ = record("nvidia-smi.txt", [smi])
    if smi and rc == 124:  # a hung driver (GSP timeouts, Xid 119/79): do not wait 4 times
        meta["errors"]["nvidia-smi.txt"] = (f"nvidia-smi timed out after {timeout}s (driver or GPU hung? "
                                            "look for NVRM Xid lines in dmesg)")
    elif smi:
        rc, text = record("nvidia-smi-query.csv", [smi, f"--query-gpu={QUERY_FIELDS}",
                                                   "--format=csv,noheader,nounits"])
        if rc not in (0, None) and "compute_cap" in (text or "") and "not a valid field" in (text or ""):
            record("nvidia-smi-query.csv", [smi, f"--query-gpu={QUERY_FIELDS_OLD}",
                                            "--format=csv,noheader,nounits"])
            if meta["exit_codes"]["nvidia-smi-query.csv"] == 0:
                meta["errors"].pop("nvidia-smi-query.csv", None)
        record("nvidia-smi-apps.csv", [smi, f"--query-compute-apps={APPS_FIELDS}", "--format=csv,noheader,nounits"])
        record("nvidia-smi-q.xml", [smi, "-q", "-x"])
        raw.update(collect_topology(smi, lambda argv: _run(argv, timeout=timeout)))
        pids = {p["pid"] for p in parse_apps_csv(raw.get("nvidia-smi-apps.csv"))}
        pids |= {p["pid"] for p in parse_smi_table(raw.get("nvidia-smi.txt"))["processes"]}
        units = {str(pid): process_unit(pid) for pid in sorted(p for p in pids if p)}
        meta["process_units"] = {pid: unit for pid, unit in units.items() if unit}
    else:
        meta["errors"]["nvidia-smi.txt"] = "nvidia-smi not found"
    try:
        with open(proc_version_path, encoding="utf-8", errors="replace") as fh:
            raw["proc-driver-nvidia-version.txt"] = fh.read()
    except OSError as exc:
        meta["errors"]["proc-driver-nvidia-version.txt"] = f"{proc_version_path}: {exc.strerror}"
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        nvcc = next((c for c in ["/usr/local/cuda/bin/nvcc"] + sorted(glob.glob("/usr/local/cuda-*/bin/nvcc"),
                                                                     key=vtuple, reverse=True) if os.access(c, os.X_OK)), None)
    if nvcc:
        record("nvcc-version.txt", [nvcc, "--version"])
    toolkits = find_toolkits(toolkit_roots, nvcc)
    raw["cuda-toolkits.json"] = json.dumps(toolkits, indent=2) + "\n"
    if venv_python:
        rc, text = _run([venv_python, "-c", TORCH_PROBE], timeout=max(timeout, 120))
        meta["commands"]["torch.json"] = f"{venv_python} -c <torch probe>"
        meta["exit_codes"]["torch.json"] = rc
        line = next((ln for ln in reversed((text or "").splitlines()) if ln.startswith("{")), None)
        raw["torch.json"] = (line + "\n") if (rc == 0 and line) else json.dumps(
            {"version": None, "cuda": None, "available": False,
             "error": f"{venv_python}: " + (text or "").strip()[-300:]}) + "\n"
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                raw["os-release"] = fh.read()
            break
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError, AttributeError):
        glibc = None
    if glibc:
        raw["glibc-version.txt"] = glibc + "\n"
    raw["capture-meta.json"] = json.dumps(meta, indent=2, sort_keys=True) + "\n"
    return raw


def write_capture(raw: dict, directory) -> list[str]:
    """Write raw outputs into a capture folder; returns the file names written."""
    os.makedirs(directory, exist_ok=True)
    written = []
    for name in FILES:
        if name in raw and raw[name] is not None:
            with open(os.path.join(directory, name), "w", encoding="utf-8") as fh:
                fh.write(raw[name])
            written.append(name)
    return written


def read_capture(directory) -> dict:
    """Read a capture folder (any subset of FILES)."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"replay_dir {directory} is not a directory")
    raw = {}
    for name in FILES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                raw[name] = fh.read()
    if not raw:
        raise FileNotFoundError(f"replay_dir {directory} holds none of the capture files ({', '.join(FILES[:8])})")
    return raw
