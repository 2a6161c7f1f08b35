"""Import/ABI probe of a layer's interpreter: torch, sgl_kernel, flashinfer, xgrammar, soundfile,
sglang. Pure logic with no Ansible import (library/dflash_probe.py wraps it).

Each component runs in its own subprocess of the probed python with a timeout, so a segfault or a
hang in one import (an sgl_kernel ABI mismatch, a CUDA init stall) is reported as that component's
error while the others still report. A component reports either its facts (``ok: true``) or the
exception text (``ok: false, error: "ImportError: ..."``). The probe writes nothing: bytecode
writing is off (``PYTHONDONTWRITEBYTECODE=1``) so the layers stay byte-identical.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import time

from ansible.module_utils.dflash_layers.consistency import check, installed_distributions, shadowed
from ansible.module_utils.dflash_layers.pep508 import MARKER_ENV_FUNC, canonical_name

RESULT_TAG = "DFLASH_PROBE_RESULT "

# Each snippet sets ``r`` (a dict of facts). The wrapper prints it after RESULT_TAG, or the exception.
COMPONENTS = {
    "python": (
        "import sys, platform\n"
        "r = {'version': platform.python_version(), 'executable': sys.executable, 'prefix': sys.prefix,"
        " 'path': [p for p in sys.path if p]}\n"
    ),
    "torch": (
        "import torch\n"
        "r = {'version': torch.__version__, 'cuda': torch.version.cuda, 'file': torch.__file__}\n"
        "r['cuda_available'] = bool(torch.cuda.is_available())\n"
        "r['device_count'] = torch.cuda.device_count() if r['cuda_available'] else 0\n"
        "r['devices'] = []\n"
        "for i in range(r['device_count']):\n"
        "    p = torch.cuda.get_device_properties(i)\n"
        "    r['devices'].append({'index': i, 'name': p.name, 'capability': f'{p.major}.{p.minor}',"
        " 'memory_total_mib': int(p.total_memory // (1024 * 1024))})\n"
        "r['arch_list'] = list(torch.cuda.get_arch_list()) if r['cuda_available'] else []\n"
    ),
    "sgl_kernel": (
        "import importlib.metadata as md\n"
        "import sgl_kernel\n"
        "ops = getattr(sgl_kernel, 'common_ops', None)\n"
        "r = {'file': sgl_kernel.__file__, 'common_ops': bool(ops),"
        " 'common_ops_file': getattr(ops, '__file__', None) or (str(ops) if ops else None)}\n"
        "try:\n"
        "    r['version'] = md.version('sglang-kernel')\n"
        "except md.PackageNotFoundError:\n"
        "    r['version'] = getattr(sgl_kernel, '__version__', None)\n"
        "if not ops:\n"
        "    raise ImportError('sgl_kernel imported but common_ops did not load')\n"
    ),
    "flashinfer": (
        "import flashinfer\n"
        "r = {'version': getattr(flashinfer, '__version__', None), 'file': flashinfer.__file__}\n"
    ),
    "xgrammar": (
        "import xgrammar\n"
        "r = {'version': getattr(xgrammar, '__version__', None), 'file': xgrammar.__file__,"
        " 'structural_tag': hasattr(xgrammar, 'StructuralTag')}\n"
        "if r['version'] is None:\n"
        "    import importlib.metadata as md\n"
        "    r['version'] = md.version('xgrammar')\n"
    ),
    "soundfile": (
        "import soundfile\n"
        "r = {'version': soundfile.__version__, 'libsndfile': soundfile.__libsndfile_version__,"
        " 'file': soundfile.__file__}\n"
    ),
    # the algorithms: the enum's members (0.5.11: DDTREE is one, by the patch series) and, from 0.5.12, those the
    # speculative-algorithm registry holds (0.5.17/0.5.23: DDTREE registers itself when spec_info is imported)
    "sglang": (
        "import sglang\n"
        "r = {'version': getattr(sglang, '__version__', None), 'file': sglang.__file__}\n"
        "from sglang.srt.speculative.spec_info import SpeculativeAlgorithm\n"
        "names = [m.name for m in SpeculativeAlgorithm]\n"
        "import importlib, importlib.util\n"
        "registered = []\n"
        "if importlib.util.find_spec('sglang.srt.speculative.spec_registry'):\n"
        "    reg = importlib.import_module('sglang.srt.speculative.spec_registry')\n"
        "    registered = sorted(getattr(reg, '_REGISTRY', {}))\n"
        "r['registered_algorithms'] = registered\n"
        "r['speculative_algorithms'] = names + [n for n in registered if n not in names]\n"
    ),
}
DEFAULT_COMPONENTS = tuple(COMPONENTS)

_WRAPPER = (
    "import json, sys, traceback\n"
    "try:\n"
    "{body}"
    "    print({tag!r} + json.dumps({{'ok': True, **r}}, default=str), flush=True)\n"
    "except BaseException as exc:\n"
    "    tb = traceback.format_exc().strip().splitlines()\n"
    "    print({tag!r} + json.dumps({{'ok': False, 'error': f'{{type(exc).__name__}}: {{exc}}',"
    " 'traceback': tb[-12:]}}), flush=True)\n"
)


def component_code(name):
    body = "".join(f"    {line}\n" for line in COMPONENTS[name].splitlines())
    return _WRAPPER.format(body=body, tag=RESULT_TAG)


def probe_env(pythonpath=None, extra_env=None, base_env=None):
    env = dict(os.environ if base_env is None else base_env)
    env.update({str(k): str(v) for k, v in (extra_env or {}).items()})
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    env.pop("PYTHONHOME", None)
    if pythonpath:
        parts = [pythonpath] if isinstance(pythonpath, str) else list(pythonpath)
        env["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        env.pop("PYTHONPATH", None)
    return env


def parse_component_output(rc, stdout, stderr, timed_out=False, timeout=None):
    """One component's result from its subprocess' exit status and output."""
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(RESULT_TAG):
            try:
                return json.loads(line[len(RESULT_TAG):])
            except ValueError:
                break
    tail = (stderr or stdout or "").strip().splitlines()[-12:]
    if timed_out:
        return {"ok": False, "error": f"Timeout: no result within {timeout}s", "traceback": tail}
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        return {"ok": False, "error": f"Crash: killed by {sig}", "returncode": rc, "traceback": tail}
    return {"ok": False, "error": f"Crash: exited {rc} without a result", "returncode": rc,
            "traceback": tail}


def run_component(python, name, env, timeout):
    return run_snippet(python, component_code(name), env, timeout)


def run_snippet(python, code, env, timeout):
    """Run one wrapped snippet in its own process of ``python``: its result, or what went wrong."""
    started = time.monotonic()
    try:
        proc = subprocess.run([python, "-c", code], env=env, capture_output=True,
                              text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL)
        out = parse_component_output(proc.returncode, proc.stdout, proc.stderr)
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        out = parse_component_output(None, stdout, stderr, timed_out=True, timeout=timeout)
    except OSError as exc:
        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    out["seconds"] = round(time.monotonic() - started, 2)
    return out


def run_probe(python, pythonpath=None, components=DEFAULT_COMPONENTS, timeout=180, extra_env=None,
              workers=3, runner=run_component):
    """Probe every component with ``python``; returns {component: result} plus ``_meta``."""
    env = probe_env(pythonpath, extra_env)
    unknown = [c for c in components if c not in COMPONENTS]
    if unknown:
        raise ValueError(f"unknown probe components: {', '.join(unknown)} (known: {', '.join(COMPONENTS)})")
    started = time.monotonic()
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, int(workers))) as pool:
        futures = {pool.submit(runner, python, c, env, timeout): c for c in components}
        for fut in concurrent.futures.as_completed(futures):
            results[futures[fut]] = fut.result()
    out = {c: results[c] for c in components}
    out["_meta"] = {"python": python, "pythonpath": env.get("PYTHONPATH"), "timeout": timeout,
                    "seconds": round(time.monotonic() - started, 2)}
    return out


_ENV_AND_PATH_CODE = ("import json, os, platform, sys\n" + MARKER_ENV_FUNC
                      + "print(json.dumps({'env': _marker_env(), 'sys_path': [p for p in sys.path if p]}))\n")


def probe_consistency(python, pythonpath=None, extra_env=None, closure=None, excluded=(), timeout=120):
    """The combined environment's consistency (every layer at once, the probed python's whole
    sys.path): every requirement of every winning distribution must hold (dflash_consistency).
    Each unmet one is classified: ``excluded`` (a project a layer leaves out on purpose),
    ``problems`` (its owner is in the final layer's closure: what sglang runs on; every owner when
    no closure is given) or ``outside`` (an owner the closure does not use). Reads only."""
    env = probe_env(pythonpath, extra_env)
    try:
        proc = subprocess.run([python, "-c", _ENV_AND_PATH_CODE], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL)
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: cannot read the environment of {python}: {exc}"}
    dists = installed_distributions(facts["sys_path"])
    keep = {canonical_name(c.split("==", 1)[0]) for c in closure} if closure else None
    skip = {canonical_name(n) for n in excluded}
    out = {"ok": True, "distributions": len([d for d in dists if not d["shadowed_by"]]), "problems": [],
           "excluded": [], "outside": [], "shadowed": shadowed(dists)}
    for item in check(dists, facts["env"]):
        if item["key"] in skip:
            out["excluded"].append(item)
        elif keep is None or canonical_name(item["owner"]) in keep:
            out["problems"].append(item)
        else:
            out["outside"].append(item)
    out["ok"] = not out["problems"]
    return out


def _version_tuple(text):
    parts = []
    for piece in str(text).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def gate(probe, driver_cuda_version=None, required=(), algorithms=(), host=None):
    """Problems that must fail the host (list of strings; empty = pass).

    - torch built for a CUDA newer than the driver supports (names both);
    - a required component that did not import (its exception text);
    - xgrammar without StructuralTag when xgrammar is required (sglang imports it);
    - a speculative algorithm an instance runs (``algorithms``) that the imported sglang does not resolve.
    """
    who = f"{host}: " if host else ""
    problems = []
    torch = probe.get("torch") or {}
    if (torch.get("ok") and torch.get("cuda") and driver_cuda_version
            and _version_tuple(torch["cuda"]) > _version_tuple(driver_cuda_version)):
        problems.append(
            f"{who}torch {torch.get('version')} is built for CUDA {torch['cuda']} but the driver "
            f"supports CUDA {driver_cuda_version} at most: use a layer whose wheels match the driver "
            f"(cuda <= {driver_cuda_version}) or upgrade the driver")
    for name in required:
        res = probe.get(name)
        if res is None:
            problems.append(f"{who}{name}: required but not probed")
        elif not res.get("ok"):
            problems.append(f"{who}{name}: {res.get('error')}")
    cons = probe.get("consistency")
    if cons is not None and not cons.get("ok"):
        if cons.get("error"):
            problems.append(f"{who}consistency: {cons['error']}")
        problems += [f"{who}consistency: {p['message']}" for p in cons.get("problems", [])]
    sg = probe.get("sglang") or {}
    if sg.get("ok") and sg.get("speculative_algorithms") is not None:
        for algo in algorithms or ():
            if str(algo).upper() not in sg["speculative_algorithms"]:
                problems.append(f"{who}sglang {sg.get('version')} does not resolve the speculative algorithm {algo} "
                                f"(its algorithms: {', '.join(sg['speculative_algorithms'])}): the patch series "
                                "was not applied to the tree on PYTHONPATH")
    xgr = probe.get("xgrammar") or {}
    if "xgrammar" in required and xgr.get("ok") and not xgr.get("structural_tag"):
        problems.append(f"{who}xgrammar {xgr.get('version')} has no StructuralTag (sglang needs it; "
                        "pin xgrammar>=0.1.32 in the overlay)")
    return problems


def summary(probe):
    """One line per component, for the play's output."""
    lines = []
    for name, res in probe.items():
        if name.startswith("_"):
            continue
        if name == "consistency":
            if res.get("error"):
                lines.append(f"consistency: FAILED {res['error']}")
                continue
            lines.append(f"consistency: {'ok' if res['ok'] else 'FAILED'} ({res['distributions']} distributions; "
                         f"{len(res['problems'])} unmet, {len(res['excluded'])} excluded on purpose, "
                         f"{len(res['outside'])} outside the closure)")
            lines += [f"  unmet: {p['message']}" for p in res["problems"]]
            lines += [f"  excluded: {p['message']}" for p in res["excluded"]]
            continue
        if res.get("ok"):
            facts = {k: v for k, v in res.items()
                     if k in ("version", "cuda", "device_count", "common_ops", "structural_tag",
                              "libsndfile", "speculative_algorithms")}
            lines.append(f"{name}: ok {json.dumps(facts, sort_keys=True)}")
        else:
            lines.append(f"{name}: FAILED {res.get('error')}")
    return lines


# ----------------------------------------------------------------------------- per-GPU CUDA probe
# nvidia-smi can list a GPU that CUDA cannot use (the seeds' CT129 GPU1 after a Triton crash:
# cudaErrorDevicesUnavailable). Before any service starts, the final layer's torch opens every
# requested GPU, each in its own process that sees only that GPU, and runs a small kernel.

GPU_SNIPPET = (
    "import os, torch\n"
    "r = {'visible': os.environ.get('CUDA_VISIBLE_DEVICES'), 'torch': torch.__version__, 'cuda': torch.version.cuda}\n"
    "torch.cuda.init()\n"
    "p = torch.cuda.get_device_properties(0)\n"
    "x = torch.arange(1024, device='cuda', dtype=torch.float32)\n"
    "r['checksum'] = float((x * 2).sum().item())\n"
    "torch.cuda.synchronize()\n"
    "free, total = torch.cuda.mem_get_info(0)\n"
    "r.update(name=p.name, capability=f'{p.major}.{p.minor}', memory_free_mib=int(free // 2**20),"
    " memory_total_mib=int(total // 2**20))\n"
)
# CUDA runtime messages -> error names (what an operator searches for)
CUDA_ERRORS = (
    ("busy or unavailable", "cudaErrorDevicesUnavailable"),
    ("out of memory", "cudaErrorMemoryAllocation"),
    ("no CUDA-capable device", "cudaErrorNoDevice"),
    ("No CUDA GPUs are available", "cudaErrorNoDevice"),
    ("uncorrectable ECC", "cudaErrorECCUncorrectable"),
    ("invalid device ordinal", "cudaErrorInvalidDevice"),
    ("initialization error", "cudaErrorInitializationError"),
    ("driver version is insufficient", "cudaErrorInsufficientDriver"),
    ("unknown error", "cudaErrorUnknown"),
    ("launch failure", "cudaErrorLaunchFailure"),
    ("GPU has fallen off the bus", "cudaErrorDevicesUnavailable"),
)


def gpu_code():
    body = "".join(f"    {line}\n" for line in GPU_SNIPPET.splitlines())
    return _WRAPPER.format(body=body, tag=RESULT_TAG)


def run_gpu(python, index, env, timeout):
    """Open GPU ``index`` (nvidia-smi order) in a process that sees only it."""
    genv = dict(env, CUDA_VISIBLE_DEVICES=str(index), CUDA_DEVICE_ORDER="PCI_BUS_ID")
    out = run_snippet(python, gpu_code(), genv, timeout)
    out["index"] = int(index)
    if not out.get("ok"):
        text = " ".join([str(out.get("error") or "")] + [str(t) for t in out.get("traceback") or []])
        out["cuda_error"] = next((name for needle, name in CUDA_ERRORS if needle.lower() in text.lower()), None)
    return out


def run_gpu_probe(python, gpus, pythonpath=None, timeout=120, extra_env=None, workers=4, runner=run_gpu):
    """{index: result} for every requested GPU."""
    env = probe_env(pythonpath, extra_env)
    idx = sorted({int(g) for g in gpus or []})
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(int(workers), len(idx) or 1))) as pool:
        futures = {pool.submit(runner, python, i, env, timeout): i for i in idx}
        for fut in concurrent.futures.as_completed(futures):
            results[futures[fut]] = fut.result()
    return {str(i): results[i] for i in idx}


def gpu_gate(results, host=None):
    """(problems, warnings) of the per-GPU probe: a GPU CUDA cannot use is refused with its index and
    the CUDA error; a GPU whose memory is full (an instance of ours may hold it) is only a warning."""
    who = f"{host}: " if host else ""
    problems, warnings = [], []
    for key in sorted(results or {}, key=int):
        res = results[key]
        if res.get("ok"):
            continue
        name = res.get("cuda_error")
        first = (str(res.get("error") or "").splitlines() or [""])[0]
        err = first + (f" ({name})" if name and name not in first else "")
        if name == "cudaErrorMemoryAllocation":
            warnings.append(f"{who}GPU {key}: CUDA opened it but could not allocate ({err}): its memory is in use")
            continue
        problems.append(
            f"{who}GPU {key}: nvidia-smi lists it but CUDA cannot use it: {err}; check `nvidia-smi -q -i {key}` "
            f"(compute mode, retired pages) and `dmesg | grep -i xid`, reset it (`nvidia-smi -r -i {key}`) or "
            "reboot the host, or take it out of the instance's gpus")
    return problems, warnings


def gpu_summary(results):
    lines = []
    for key in sorted(results or {}, key=int):
        res = results[key]
        if res.get("ok"):
            lines.append(f"GPU {key}: ok ({res.get('name')}, SM {res.get('capability')}, "
                         f"{res.get('memory_free_mib')} of {res.get('memory_total_mib')} MiB free, {res.get('seconds')} s)")
        else:
            lines.append(f"GPU {key}: FAILED {(str(res.get('error') or '').splitlines() or [''])[0]}")
    return lines
