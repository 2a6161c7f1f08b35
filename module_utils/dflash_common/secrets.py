"""Secrets of an instance: the API keys and the environment variables that hold credentials.

They live in one place on the host, the instance's env file (0600, root, read by systemd before it
drops privileges); never in the release manifest, the flags fact, the play output or argv. The
unit's launcher (roles/dflash_instances/files/dflash-launch.py) turns ``DFLASH_API_KEY`` into
sglang's ``--api-key`` inside the server process (sglang 0.5.11 reads the key from its argument
parser only: ServerArgs.api_key, ``--api-key``; no environment variable), so it never shows in
``ps``.

Pure functions, no Ansible import.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets as _secrets

# instance field -> (env file variable, the sglang flag the launcher gives it to)
SECRET_FIELDS = {
    "api_key": ("DFLASH_API_KEY", "--api-key"),
    "admin_api_key": ("DFLASH_ADMIN_API_KEY", "--admin-api-key"),
}
SECRET_ENV_NAMES = {var for var, _ in SECRET_FIELDS.values()}
# name parts that make an environment variable a credential (HF_TOKEN, OPENAI_API_KEY,
# AWS_SECRET_ACCESS_KEY, WANDB_API_KEY, ...); TOKENIZERS_PARALLELISM is not one
_SECRET_PARTS = {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "CREDENTIALS", "APIKEY", "AUTH"}
_KEY_QUALIFIERS = {"API", "ACCESS", "PRIVATE", "SECRET", "SIGNING", "ENCRYPTION"}
MASK = "********"
SALT_FILE = ".dflash-secret-salt"


def is_secret_env(name) -> bool:
    parts = str(name).upper().split("_")
    if any(p in _SECRET_PARTS for p in parts):
        return True
    return any(p == "KEY" and i > 0 and parts[i - 1] in _KEY_QUALIFIERS for i, p in enumerate(parts))


def instance_secrets(inst) -> dict:
    """{ENV_NAME: value} of one inventory instance: its API keys and its credential env variables."""
    if not isinstance(inst, dict):
        return {}
    out = {}
    for field, (var, _flag) in SECRET_FIELDS.items():
        value = inst.get(field)
        if value not in (None, ""):
            out[var] = str(value)
    env = inst.get("env") if isinstance(inst.get("env"), dict) else {}
    for key, value in env.items():
        if is_secret_env(key) and value is not None:
            out[str(key)] = str(value)
    return out


def all_secrets(instances) -> dict:
    """{instance name: {ENV_NAME: value}} for the instances that have any."""
    out = {}
    for inst in instances or []:
        if isinstance(inst, dict) and isinstance(inst.get("name"), str):
            sec = instance_secrets(inst)
            if sec:
                out[inst["name"]] = sec
    return out


def public_instance(inst):
    """The instance as it may be shown or passed around: API keys dropped (``api_key: true`` says one is
    set), credential env values masked."""
    if not isinstance(inst, dict):
        return inst
    out = {k: v for k, v in inst.items() if k not in SECRET_FIELDS}
    for field in SECRET_FIELDS:
        if inst.get(field) not in (None, ""):
            out[field + "_set"] = True
    if isinstance(inst.get("env"), dict):
        out["env"] = {k: (MASK if is_secret_env(k) and v is not None else v) for k, v in inst["env"].items()}
    return out


def public_instances(instances):
    return [public_instance(i) for i in instances] if isinstance(instances, list) else instances


def secret_values(obj) -> set:
    """Every secret string of an instances list / {name: {ENV: value}} map (for redaction)."""
    vals = set()
    if isinstance(obj, list):
        for inst in obj:
            vals |= set(instance_secrets(inst).values())
    elif isinstance(obj, dict):
        for sec in obj.values():
            if isinstance(sec, dict):
                vals |= {str(v) for v in sec.values() if v not in (None, "")}
    return {v for v in vals if v}


def redact(obj, values):
    """A copy of ``obj`` (str / list / dict, nested) with every secret value replaced by ********."""
    values = sorted((v for v in values or () if v), key=len, reverse=True)
    if not values:
        return obj

    def walk(o):
        if isinstance(o, str):
            for v in values:
                if v in o:
                    o = o.replace(v, MASK)
            return o
        if isinstance(o, list):
            return [walk(x) for x in o]
        if isinstance(o, tuple):
            return tuple(walk(x) for x in o)
        if isinstance(o, dict):
            return {walk(k) if isinstance(k, str) else k: walk(v) for k, v in o.items()}
        return o

    return walk(obj)


def env_file_secrets(env: dict) -> dict:
    """The secret variables of a parsed env file."""
    return {k: v for k, v in (env or {}).items() if (k in SECRET_ENV_NAMES or is_secret_env(k)) and v}


def load_salt(prefix: str, create: bool = True) -> bytes:
    """The host's salt for secret digests (``<prefix>/.dflash-secret-salt``, 0600): release digests
    change when a key changes without letting anyone who reads a manifest test guesses offline."""
    path = os.path.join(prefix, SALT_FILE)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if len(data) >= 16:
            return data
    except FileNotFoundError:
        pass
    salt = _secrets.token_bytes(32)
    if create:
        os.makedirs(prefix, mode=0o755, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(salt)
    return salt


def salted(value: str, salt: bytes) -> str:
    return "hmac-sha256:" + hmac.new(salt, str(value).encode(), hashlib.sha256).hexdigest()[:24]
