"""Read-only host facts gathered on the host: listening ports and their owners, model/draft paths, the draft's
block size, the final layer's CUDA libraries and nvcc, installed dflash-*.service units.

Pure functions, no Ansible import."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess

from ansible.module_utils.dflash_common import disk as dflash_diskspace
from ansible.module_utils.dflash_common.net import instance_address
from ansible.module_utils.dflash_instances import fields as _fields
from ansible.module_utils.dflash_instances import tp as _tp
from ansible.module_utils.dflash_instances.model import target_facts
from ansible.module_utils.dflash_service.process import process_unit

# --------------------------------------------------------------------------- host facts (read-only)

def parse_proc_net_tcp(text, ipv6=False):
    """Listening sockets of /proc/net/tcp{,6} -> [(port, addr, inode, uid)]."""
    out = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != "0A":  # 0A = TCP_LISTEN
            continue
        addr_hex, port_hex = parts[1].rsplit(":", 1)
        out.append((int(port_hex, 16), _hex_addr(addr_hex, ipv6), parts[9], int(parts[7])))
    return out


def _hex_addr(h, ipv6):
    if not ipv6:
        b = bytes.fromhex(h)[::-1]
        return ".".join(str(x) for x in b)
    raw = bytes.fromhex(h)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    if words == b"\x00" * 16:
        return "::"
    if words[:12] == b"\x00" * 10 + b"\xff\xff":
        return ".".join(str(x) for x in words[12:])
    return ":".join(words[i:i + 2].hex() for i in range(0, 16, 2))


def _read(path, default=None):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return default


def read_listeners(proc="/proc", run_dir="/run/dflash"):
    inodes = {}
    for fname, v6 in (("tcp", False), ("tcp6", True)):
        text = _read(os.path.join(proc, "net", fname))
        if text:
            for port, addr, inode, uid in parse_proc_net_tcp(text, v6):
                inodes.setdefault(inode, []).append((port, addr, uid))
    owners = {}
    if inodes:
        for pid in os.listdir(proc):
            if not pid.isdigit():
                continue
            fd_dir = os.path.join(proc, pid, "fd")
            try:
                fds = os.listdir(fd_dir)
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(os.path.join(fd_dir, fd))
                except OSError:
                    continue
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    owners.setdefault(target[8:-1], int(pid))
    out, seen = [], set()
    for inode, socks in inodes.items():
        pid = owners.get(inode)
        comm = (_read(os.path.join(proc, str(pid), "comm"), "") or "").strip() if pid else None
        unit = process_unit(pid, proc=proc, run_dir=run_dir) if pid else None
        for port, addr, uid in socks:
            key = (port, addr)
            if key in seen:
                continue
            seen.add(key)
            out.append({"port": port, "addr": addr, "pid": pid, "comm": comm or None, "unit": unit,
                        "uid": uid, "user": _user_name(uid)})
    return sorted(out, key=lambda x: (x["port"], x["addr"]))


def _user_name(uid):
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return None


def tmpfs_mounts(mounts_text):
    out = []
    for line in (mounts_text or "").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "tmpfs":
            out.append(parts[1])
    return out


def path_facts(path, tmpfs=()):
    p = os.path.realpath(path)
    on_tmpfs = any(p == m or p.startswith(m.rstrip("/") + "/") for m in tmpfs if m not in ("/",))
    return {"exists": os.path.exists(path), "isdir": os.path.isdir(path), "tmpfs": on_tmpfs,
            "realpath": p}


def draft_block_size(config_text):
    """block_size of a DFlash draft's config.json text -> (size|None, source, error|None)."""
    try:
        cfg = json.loads(config_text)
    except ValueError as exc:
        return None, None, f"config.json is not JSON: {exc}"
    if not isinstance(cfg, dict):
        return None, None, "config.json is not a JSON object"
    dc = cfg.get("dflash_config")
    for value, source in (((dc or {}).get("block_size") if isinstance(dc, dict) else None,
                           "config.json dflash_config.block_size"),
                          (cfg.get("block_size"), "config.json block_size")):
        if value is not None:
            if _fields._is_int(value) and value > 0:
                return value, source, None
            return None, source, f"{source} is {value!r}, not a positive integer"
    return None, None, None


def draft_head(config_text):
    """The draft's head as its config.json names it (for the drafts DDTREE refuses, dflash_instances/model.py):
    {architecture, projector_type, selector_rank, lilicorr}; {} when the text is not a JSON object."""
    try:
        cfg = json.loads(config_text)
    except ValueError:
        return {}
    if not isinstance(cfg, dict):
        return {}
    dc = cfg.get("dflash_config") if isinstance(cfg.get("dflash_config"), dict) else {}
    archs = cfg.get("architectures")
    lilicorr = any(str(k).startswith("lilicorr_") for k in dc) and dc.get("lilicorr_enabled") is not False
    return {"architecture": archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None,
            "projector_type": dc.get("projector_type", cfg.get("projector_type")),
            "selector_rank": dc.get("selector_rank") or None, "lilicorr": lilicorr}


def nvcc_version_of(nvcc, runner=None):
    runner = runner or (
        lambda argv: subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout)
    try:
        out = runner([nvcc, "--version"])
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", out or "")
    return m.group(1) if m else None


def overlay_cuda(layer_path, runner=None):
    """CUDA pieces shipped as pip packages in a layer venv: nvidia/*/lib dirs and an nvcc."""
    if not layer_path:
        return {}
    sps = sorted(glob.glob(os.path.join(layer_path, "lib", "python3*", "site-packages")))
    libs, nvccs = [], []
    for sp in sps:
        libs += sorted(d for d in glob.glob(os.path.join(sp, "nvidia", "*", "lib")) if os.path.isdir(d))
        nvccs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "bin", "nvcc")))
    best = {}
    for nvcc in nvccs:
        v = nvcc_version_of(nvcc, runner)
        if v and (not best or _fields.version_tuple(v) > _fields.version_tuple(best["version"])):
            best = {"path": nvcc, "home": os.path.dirname(os.path.dirname(nvcc)), "version": v}
    return {"site_packages": sps, "nvidia_lib_dirs": libs, "nvcc": best or None}


def sgl_kernel_facts(sgl_kernel_file):
    """Whether the sgl_kernel the probe imported ships FA3 (flash_ops*.so): sglang's Hopper default."""
    if not sgl_kernel_file:
        return {}
    pkg = os.path.dirname(sgl_kernel_file)
    if not os.path.isdir(pkg):
        return {}
    found = sorted(glob.glob(os.path.join(pkg, "flash_ops*.so")) + glob.glob(os.path.join(pkg, "*", "flash_ops*.so")))
    return {"dir": pkg, "fa3": bool(found), "fa3_files": found}


def current_instances(prefix):
    """{id, instances: {name: {port, gpus, unit}}} of the release <prefix>/current points at ({} if none)."""
    if not prefix:
        return {}
    text = _read(os.path.join(prefix, "current", "manifest.json"))
    try:
        m = json.loads(text) if text else {}
    except ValueError:
        return {"error": f"{prefix}/current/manifest.json is not JSON"}
    out = {}
    for name, entry in (m.get("instances") or {}).items():
        gpus = str((entry.get("env") or {}).get("CUDA_VISIBLE_DEVICES") or "")
        out[name] = {"port": instance_address(entry)[0], "unit": entry.get("unit"),
                     "gpus": [int(g) for g in gpus.split(",") if g.strip().isdigit()]}
    return {"id": m.get("id"), "instances": out}


def released_instances(prefix):
    """Every instance name a release on the host has (any readable releases/*/manifest.json) or had (removed ones):
    the names ``dflash_remove_instances`` may give without being a typo."""
    names = set()
    for path in glob.glob(os.path.join(prefix, "releases", "*", "manifest.json")) if prefix else []:
        try:
            names |= set(json.loads(_read(path) or "{}").get("instances") or {})
        except (ValueError, AttributeError):
            continue
    try:  # removed ones, whose releases may be pruned by now (dflash_release/activation.py remember_removed)
        names |= {str(n) for n in json.loads(_read(os.path.join(prefix, "removed-instances.json")) or "[]")}
    except (ValueError, TypeError):
        pass
    return sorted(names)


def login_homes(passwd=None):
    """[{user, uid, home}] of root and the login users (uid >= 1000): their home directories, wherever they are
    (/home/<user>, /srv/<user>, ...), are no place for a model the hardened unit must read."""
    import pwd

    out = []
    for pw in passwd if passwd is not None else pwd.getpwall():
        home = os.path.normpath(pw.pw_dir or "/")
        if (pw.pw_uid == 0 or 1000 <= pw.pw_uid < 65534) and home not in ("/", "/nonexistent", "/dev/null"):
            out.append({"user": pw.pw_name, "uid": pw.pw_uid, "home": home})
    return out


def gather_host_facts(instances, layer_path=None, unit_dir="/etc/systemd/system", proc="/proc", runner=None,
                      sgl_kernel_file=None, prefix=None, space_paths=(), runtimes=None):
    """``runtimes``: {sglang version: {layer_path, sgl_kernel_file}} of every version the host's instances run
    (its final layer and probe); their CUDA pieces and FA3 go to ``runtimes`` of the result, per version."""
    paths, drafts, targets = {}, {}, {}
    tmpfs = tmpfs_mounts(_read(os.path.join(proc, "mounts"), ""))
    for inst in instances or []:
        if not isinstance(inst, dict):
            continue
        for key in ("model_path", "draft_model_path", "model_source"):
            p = inst.get(key)
            if isinstance(p, str) and p.startswith("/") and p not in paths:
                paths[p] = path_facts(p, tmpfs)
        d = inst.get("draft_model_path")
        if isinstance(d, str) and d.startswith("/") and d not in drafts:
            text = _read(os.path.join(d, "config.json"))
            if text is None:
                drafts[d] = {"block_size": None, "block_size_source": None,
                             "error": None if not os.path.isdir(d) else "no config.json in the draft directory"}
            else:
                size, source, error = draft_block_size(text)
                drafts[d] = dict(draft_head(text), block_size=size, block_size_source=source, error=error)
        for key in ("model_path", "model_source"):  # a staged model may not be in place yet
            t = inst.get(key)
            if isinstance(t, str) and t.startswith("/") and t not in targets:
                text = _read(os.path.join(t, "config.json"))
                if text is not None:
                    targets[t] = target_facts(text)
    units = sorted(os.path.basename(p) for p in glob.glob(os.path.join(unit_dir, "dflash-*.service")))
    return {
        "listeners": read_listeners(proc),
        "paths": paths,
        "drafts": drafts,
        "targets": targets,
        "units": units,
        "overlay": overlay_cuda(layer_path, runner) if layer_path else {},
        "sgl_kernel": sgl_kernel_facts(sgl_kernel_file),
        "models": _tp.model_facts(instances),  # attention heads for the tp checks (dflash_instances/tp.py)
        "current": current_instances(prefix),
        "released": released_instances(prefix),
        "homes": login_homes(),
        # each directory a deploy writes ((path, what) or a path) and its filesystem's free space
        "disk": [dict(dflash_diskspace.free_space(p[0] if isinstance(p, (tuple, list)) else p),
                      what=p[1] if isinstance(p, (tuple, list)) else "") for p in space_paths or ()],
        "runtimes": {str(v): {"overlay": overlay_cuda(r.get("layer_path"), runner) if r.get("layer_path") else {},
                              "sgl_kernel": sgl_kernel_facts(r.get("sgl_kernel_file"))}
                     for v, r in (runtimes or {}).items() if isinstance(r, dict)},
    }


def unit_files(instances, staged_dir, unit_dir):
    """[{instance, src, dest}]: the rendered unit files (in ``staged_dir``) the release stage's activation
    puts live in ``unit_dir``; the staging unit first."""
    out = []
    for inst in instances or []:
        name = str(inst["name"])
        units = ([f"dflash-stage-{name}.service"] if inst.get("model_source") else []) + [f"dflash-{name}.service"]
        out += [{"instance": name, "src": os.path.join(staged_dir, u), "dest": os.path.join(unit_dir, u)}
                for u in units]
    return out


# The boot guard (roles/dflash_instances): journal.py and the systemd backend, stdlib only, under
# <prefix>/libexec/guard/ansible/module_utils/ (the name they import each other by) with empty package files, and
# its entry point; run by the host's python3 without Ansible.
GUARD_PACKAGES = ("ansible", "ansible/module_utils", "ansible/module_utils/dflash_release",
                  "ansible/module_utils/dflash_service")
GUARD_CODE = ("dflash_release/journal.py", "dflash_service/systemd.py")


def toolkit_files(prefix, unit_dir, systemd, instances, units, module_utils_dir, guard_unit=""):
    """{directories, files, absent} of dflash_files: the toolkit's libexec (dflash-launch; dflash-stage-model when
    an instance stages its model), the boot guard and its unit (``systemd`` hosts), the rendered ``units``
    ([{src, content}]: written to src, put live by the release stage) and the single-file guard of earlier
    versions, removed. File sources are the role's files/ (relative) or ``module_utils_dir``'s."""
    prefix = os.path.normpath(str(prefix))
    unit_dir = os.path.normpath(str(unit_dir))
    libexec = f"{prefix}/libexec"
    dirs = [libexec, unit_dir]
    files = [{"dest": f"{libexec}/dflash-launch", "src": "dflash-launch.py", "mode": "0755"}]
    if any(i.get("model_source") for i in instances or []):
        files.append({"dest": f"{libexec}/dflash-stage-model", "src": "dflash-stage-model.py", "mode": "0755"})
    if systemd:
        guard = f"{libexec}/guard"
        dirs += [f"{guard}/{p}" for p in GUARD_PACKAGES]
        files += [{"dest": f"{guard}/{p}/__init__.py", "content": ""} for p in GUARD_PACKAGES]
        files += [{"dest": f"{guard}/ansible/module_utils/{c}", "src": os.path.join(str(module_utils_dir), c)}
                  for c in GUARD_CODE]
        files += [{"dest": f"{guard}/dflash-guard", "src": "dflash-guard.py", "mode": "0755"},
                  {"dest": f"{unit_dir}/dflash-guard.service", "content": str(guard_unit)}]
    dirs.append(f"{prefix}/units")
    files += [{"dest": os.path.normpath(str(u["src"])), "content": str(u["content"])} for u in units or []]
    return {"directories": [{"path": d} for d in dirs], "files": files,
            "absent": [f"{libexec}/dflash_activation.py"]}
