"""Per-instance checks the placement validation (dflash_instances.validate_instances) runs besides its
own: server flags against the pinned sglang's parser, environment names and values, secrets, the bind
address, model paths once resolved (``..``, symlinks on the host) and what the host already serves.

Each check gets ``add(field, message)`` (the validation's reporter: host, instance and field are added
there) and never puts a secret value into a message. Pure functions, no Ansible import.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re

from ansible.module_utils.dflash_common.secrets import SECRET_FIELDS, is_secret_env
from ansible.module_utils.dflash_instances.server_flags import check_args, check_pins

# environment the toolkit sets itself (the unit, the flags stage): the inventory may not override it
RESERVED_ENV = {
    "CUDA_VISIBLE_DEVICES": "derived from the field 'gpus'",
    "CUDA_DEVICE_ORDER": "derived from the field 'gpus' (PCI bus order = nvidia-smi order)",
    "DFLASH_ARGS": "the server flags the toolkit renders",
    "DFLASH_API_KEY": "set from the field 'api_key'",
    "DFLASH_ADMIN_API_KEY": "set from the field 'admin_api_key'",
    "PYTHONPATH": "the patched sglang tree of the release (the tree stage)",
    "DFLASH_PYTHON": "the venv of the instance's sglang version (the release stage; dflash-launch runs it)",
    "HOME": "the instance's cache directory (the unit)",
    "XDG_CACHE_HOME": "the instance's cache directory (the unit)",
    "PYTHONUNBUFFERED": "set by the unit",
}
# server flags that belong to fields of the instance (besides dflash_instances.MANAGED_FLAGS)
FIELD_FLAGS = {"--host": "host", "--api-key": "api_key", "--admin-api-key": "admin_api_key"}
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
# directories a model path may not resolve into: system directories and what the toolkit itself owns
SYSTEM_DIRS = ("/proc", "/sys", "/dev", "/run", "/boot", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
               "/libx32", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/libexec", "/var/log", "/var/cache/dflash")
SYSTEM_EXCEPTIONS = ("/dev/shm", "/run/shm")
# directories many things share: a model may live below them, never be one of them
SHARED_DIRS = ("/usr", "/usr/local", "/usr/share", "/usr/src", "/var", "/var/lib", "/var/tmp", "/var/cache", "/var/opt",
               "/opt", "/srv", "/mnt", "/media", "/tmp", "/home", "/root", "/run/user", "/dev/shm", "/run/shm")


def control_char(text) -> str | None:
    """'U+000A at position 4' for the first control character of ``text``, else None."""
    m = CONTROL_RE.search(str(text))
    return f"U+{ord(m.group()):04X} at position {m.start()}" if m else None


def under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/") or root == "/"


# ----------------------------------------------------------------------------- env


def check_env(env: dict, add, managed_env=()) -> None:
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            add("env", f"{key!r} is not a valid environment variable name (letters, digits and '_', not starting "
                       "with a digit)")
            continue
        if key in RESERVED_ENV or key in managed_env:
            add(f"env.{key}", f"is {RESERVED_ENV.get(key) or 'set by the toolkit'}; the inventory may not set it")
            continue
        if isinstance(value, (dict, list)):
            add(f"env.{key}", f"must be a single string, got a {type(value).__name__}")
            continue
        bad = control_char(value) if value is not None else None
        if bad:
            shown = "" if is_secret_env(key) else f" {str(value)!r}"
            add(f"env.{key}", f"value{shown} contains a control character ({bad}); systemd's environment file "
                              "cannot carry it")


# ----------------------------------------------------------------------------- secrets and bind address


def check_secrets(raw: dict, add) -> None:
    for field in SECRET_FIELDS:
        if field not in raw or raw[field] is None:
            continue
        value = raw[field]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            add(field, f"must be a string (from ansible-vault or a lookup), got a {type(value).__name__}")
            continue
        value = str(value)
        if not value:
            add(field, "is empty (leave the field out for no key)")
        elif control_char(value) or any(c.isspace() for c in value):
            add(field, "contains whitespace or a control character (the key is not shown here)")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_error(host) -> str | None:
    if not isinstance(host, str) or not host:
        return f"must be an IP address or a host name, got {host!r}"
    h = host.strip("[]")
    try:
        ipaddress.ip_address(h)
        return None
    except ValueError:
        pass
    if not HOSTNAME_RE.match(h) or all(label.isdigit() for label in h.split(".")):
        return f"{host!r} is neither an IP address nor a host name"
    return None


def bind_warning(name, host, port, has_key) -> str | None:
    if has_key or is_loopback(str(host)):
        return None
    return (f"instance '{name}' listens on {host}:{port} without an api_key: whoever reaches port {port} of this "
            "host can use the model; set api_key (ansible-vault), or host: 127.0.0.1")


# ----------------------------------------------------------------------------- flags


def check_flags(raw: dict, add, known, version, managed_flags) -> None:
    """extra_args and pin_flags against the parser (when ``known`` is not None) and against the flags the
    toolkit sets from fields (abbreviations resolved the way argparse does)."""
    fields = dict(managed_flags, **FIELD_FLAGS)
    extra = raw.get("extra_args") if isinstance(raw.get("extra_args"), list) else []
    pins = raw.get("pin_flags") if isinstance(raw.get("pin_flags"), dict) else {}
    for i, arg in enumerate(extra):
        bad = control_char(arg)
        if bad:
            add(f"extra_args[{i}]", f"contains a control character ({bad})")
    for flag, value in pins.items():
        bad = control_char(value) if value is not None and not isinstance(value, bool) else None
        if bad:
            add(f"pin_flags.{flag}", f"value contains a control character ({bad})")
    if known is None:
        parsed = [(i, str(a).split("=", 1)[0], None) for i, a in enumerate(extra) if str(a).startswith("--")]
        pin_parsed = [(f, str(f)) for f in pins]
    else:
        errors, parsed = check_args([str(a) for a in extra], known, version)
        for i, msg in errors:
            add(f"extra_args[{i}]", msg)
        perrs, pin_parsed = check_pins(pins, known, version)
        for flag, msg in perrs:
            add(f"pin_flags.{flag}", msg)
    for i, full, _v in parsed:
        if full in fields:
            secret = full in ("--api-key", "--admin-api-key")
            add(f"extra_args[{i}]", f"{full} is set from the field '{fields[full]}'; set that field instead"
                + (" (a key there stays out of the command line, the manifest and the play output)" if secret else ""))
    for flag, full in pin_parsed:
        if full in fields:
            add(f"pin_flags.{flag}", f"{full} is set from the field '{fields[full]}'; set that field instead")


# ----------------------------------------------------------------------------- paths


def tilde_problem(path) -> str | None:
    """A path spelt with ``~`` (a home directory): neither systemd nor sglang expands it."""
    if not isinstance(path, str) or not path.startswith("~"):
        return None
    user, _, rest = path[1:].partition("/")
    home = "/root" if user in ("", "root") else f"the home directory of {user}"
    return (f"{path!r} starts with '~' ({home}{', ' + '/' + rest if rest and user in ('', 'root') else ''}): "
            "nothing expands it in the unit's $DFLASH_ARGS, and a home directory is no place for a model the "
            "hardened unit reads (ProtectHome=yes): give the absolute path of a directory of its own outside "
            "/home, /root and /run/user")


def resolved_path_problem(field, path, real, protect_home, home_prefixes, prefix, staged=False,
                          tmpfs_prefixes=("/dev/shm/", "/run/shm/"), homes=()) -> str | None:
    """Why a model path (or where it resolves to: ``..`` removed, symlinks followed on the host) may not
    be used, else None. ``staged``: model_path of a staged model (root copies into it); that problem is
    the field model_source's and its message starts with 'model_source: '. ``homes``: [{user, home}] of the
    host's root and login users (host facts), wherever their homes are."""
    norm = posixpath.normpath(path)
    seen = [norm] + ([real] if real and real != norm else [])
    via = "" if norm == path else f" (it resolves to {norm})"
    home_roots = tuple(h.rstrip("/") for h in home_prefixes)
    for p in seen:
        via_p = via if p == norm else f" (it resolves to {p} through a symlink on the host)"
        if p == "/":
            return f"{path}{via_p} is the root directory"
        owner = next((h for h in homes or () if p == h.get("home")), None)
        if owner or p in home_roots:
            who = (f"the home directory of {owner['user']}" if owner else "the home directory of root" if p == "/root"
                   else f"{p}, where the users' directories live")
            return f"{path}{via_p} is {who}: a model needs a directory of its own, outside home directories"
        if p in SHARED_DIRS:
            return f"{path}{via_p} is {p} itself, a directory many things share: a model needs a directory of its own"
        if protect_home and any(under(p, h) for h in home_roots):
            return (f"{path}{via_p} is under /home, /root or /run/user, which the hardened unit cannot see "
                    "(ProtectHome=yes); move it or set dflash_instances_protect_home: false")
        owner = next((h for h in homes or () if h.get("home") and h["home"] != "/" and under(p, h["home"])), None)
        if protect_home and owner:
            return (f"{path}{via_p} is in the home directory of {owner['user']} ({owner['home']}): a model needs a "
                    "directory of its own outside users' homes; move it or set dflash_instances_protect_home: false")
        for d in SYSTEM_DIRS + ((prefix.rstrip("/"),) if prefix else ()):
            if prefix and d == prefix.rstrip("/") and p.startswith(d + "/models/") and len(p) > len(d) + 8:
                continue  # the models stage's store (roles/dflash_models): a directory per stored model
            if under(p, d) and not any(under(p, e) and p != e for e in SYSTEM_EXCEPTIONS):
                owner = "the toolkit's own directory" if prefix and d == prefix.rstrip("/") else "a system directory"
                return f"{path}{via_p} is in {d}, {owner}: a model needs a directory of its own"
        if staged and not any(p.startswith(t) and len(p) > len(t) for t in tmpfs_prefixes):
            return (f"model_source: is only used to stage a model onto tmpfs; model_path {path}{via_p} is not "
                    f"under {' or '.join(tmpfs_prefixes)} (the staging unit copies into it as root)")
    return None


# ----------------------------------------------------------------------------- what the host serves now


def current_conflicts(name, port, gpus, allow_busy, current, inventory_names, removed, add) -> None:
    """Instances of the current release that leave the inventory without removal keep running: a new
    instance cannot take their port or GPUs."""
    for other, info in sorted(((current or {}).get("instances") or {}).items()):
        if other in inventory_names or other in removed or other == name:
            continue
        hint = (f"it keeps serving because it is not asked to go: add '{other}' to dflash_remove_instances "
                "(or set dflash_remove_absent: true) to hand it over")
        if port is not None and info.get("port") == port:
            add("port", f"port {port} is served by instance '{other}' (installed, no longer in dflash_instances); "
                        + hint)
        shared = sorted(set(gpus or []) & set(info.get("gpus") or []))
        if shared and not allow_busy:
            add("gpus", f"GPU(s) {shared} are used by instance '{other}' (installed, no longer in "
                        f"dflash_instances); " + hint)
