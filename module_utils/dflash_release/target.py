"""What the smoke test and the wait take (library/dflash_smoke.py, library/dflash_wait.py): which instances a call
is about (a list, or a release's manifest narrowed to names, with the API key and secrets of each instance's env
file), the smoke requests' options, the gates' options. Their argument specs are defined once here (the modules'
DOCUMENTATION stays per module). No Ansible import.
"""

from __future__ import annotations

import json
import os

from ansible.module_utils.dflash_common.argv import has_flag
from ansible.module_utils.dflash_common.net import instance_address
from ansible.module_utils.dflash_common.secrets import env_file_secrets
from ansible.module_utils.dflash_release.gates import release_context
from ansible.module_utils.dflash_release.gates_config import gate_errors, resolve
from ansible.module_utils.dflash_release.smoke import API_KEY_VAR, FIBONACCI_PROMPT, SmokeError, base_url
from ansible.module_utils.dflash_service.runner import parse_env_file


def unit_name(instance: str) -> str:
    return f"dflash-{instance}.service"


def instances_from_manifest(manifest: dict, names=None) -> list:
    """[{name, unit, args, port, base_url, sglang_version}] of a release manifest, for ``names`` (default: all of
    them); ``sglang_version`` is the instance's (absent from a manifest written before versions were recorded)."""
    have = manifest.get("instances") or {}
    names = sorted(have) if names is None else list(names)
    unknown = [n for n in names if n not in have]
    if unknown:
        raise SmokeError(f"release {manifest.get('id')}: no instance {', '.join(unknown)} "
                         f"(it has: {', '.join(sorted(have)) or 'none'})")
    out = []
    for n in names:
        port, url = instance_address(have[n])
        item = {"name": n, "unit": have[n].get("unit") or unit_name(n), "args": list(have[n].get("args") or []),
                "port": port, "base_url": url}
        if have[n].get("sglang_version"):
            item["sglang_version"] = have[n]["sglang_version"]
        out.append(item)
    return out



def load_manifest_instances(release_dir: str, names=None) -> list:
    """The instances of a release; each with its API key (``api_key``, sent as Authorization: Bearer) and
    every secret of its env file (``secrets``, masked in what the smoke test returns and records)."""
    try:
        with open(os.path.join(release_dir, "manifest.json"), encoding="utf-8") as fh:
            manifest = json.load(fh)
    except (OSError, ValueError) as exc:
        raise SmokeError(f"{release_dir}/manifest.json: {exc}") from None
    out = instances_from_manifest(manifest, names)
    for item in out:
        try:
            with open(os.path.join(release_dir, "instances", item["name"] + ".env"), encoding="utf-8") as fh:
                secrets = env_file_secrets(parse_env_file(fh.read()))
        except OSError:
            secrets = {}
        if secrets.get(API_KEY_VAR):
            item["api_key"] = secrets[API_KEY_VAR]
        if secrets:
            item["secrets"] = sorted(set(secrets.values()))
    return out


# ----------------------------------------------------------------------------- module arguments
# What library/dflash_smoke.py and library/dflash_wait.py both take, defined once (their DOCUMENTATION
# stays per module). Functions, so that each AnsibleModule gets dicts of its own.


def target_argument_spec() -> dict:
    """Which instances a call is about (the list, or a release's manifest narrowed to names), where the
    records go, the host name for messages."""
    return {
        "instances": {"type": "list", "elements": "dict"},
        "release_dir": {"type": "path"},
        "names": {"type": "list", "elements": "str"},
        "record_dir": {"type": "path"},
        "host": {"type": "str", "default": ""},
    }


def target_constraints() -> dict:
    """AnsibleModule keyword arguments: exactly one of instances / release_dir."""
    return {"required_one_of": [("instances", "release_dir")], "mutually_exclusive": [("instances", "release_dir")]}


def smoke_argument_spec(timeout_key: str = "timeout") -> dict:
    """The smoke requests' options; dflash_wait calls the per-request timeout smoke_timeout (its own
    timeout is the wait's)."""
    return {
        "prompt": {"type": "str", "default": FIBONACCI_PROMPT},
        "max_tokens": {"type": "int", "default": 128},
        "temperature": {"type": "float", "default": 0.0},
        timeout_key: {"type": "float", "default": 120.0},
        "spec_max_new_tokens": {"type": "int", "default": 64},
    }


def gate_argument_spec() -> dict:
    """The gates' options (both modules): per-instance settings, the host's, the previous release."""
    return {
        "gates": {"type": "dict", "default": {}},
        "gate_defaults": {"type": "dict", "default": {}},
        "use_gates": {"type": "bool", "default": True},
        "baseline_release": {"type": "str"},
    }


def gate_options(params: dict, instances) -> tuple:
    """(gates by instance name or None, context) of a module call. Raises SmokeError naming the
    instance and field of a bad setting."""
    if not params.get("use_gates", True):
        return None, {}
    host_gates = params.get("gate_defaults") or {}
    per = params.get("gates") or {}
    problems = [f"dflash_smoke_gates: {f}: {m}" for f, m in gate_errors(host_gates, "dflash_smoke_gates")]
    out = {}
    for item in instances:
        name = item["name"]
        mine = per.get(name) or {}
        problems += [f"instance {name}: {f}: {m}" for f, m in gate_errors(mine)]
        out[name] = resolve(mine, host_gates, params.get("prompt") or FIBONACCI_PROMPT,
                            has_flag(item.get("args"), "--reasoning-parser"), params.get("max_tokens") or 128)
    if problems:
        raise SmokeError("; ".join(problems))
    return out, release_context(params.get("release_dir"), params.get("baseline_release"))


def smoke_options(params: dict, timeout_key: str = "timeout") -> dict:
    """The smoke_instance keyword arguments out of the module parameters."""
    return {"prompt": params["prompt"], "max_tokens": params["max_tokens"], "temperature": params["temperature"],
            "timeout": params[timeout_key], "spec_max_new_tokens": params["spec_max_new_tokens"]}


def target_instances(params: dict) -> list:
    """The instances of a call: the release manifest's (release_dir, names) or the given list.
    Raises SmokeError when the manifest cannot be read or lacks a name."""
    if params.get("release_dir"):
        return load_manifest_instances(params["release_dir"], params.get("names"))
    return params.get("instances") or []


def check_named(instances) -> None:
    """Raises SmokeError naming the first instance without a name, or with a port that is not a number."""
    for i, item in enumerate(instances):
        if not item.get("name"):
            raise SmokeError(f"instances[{i}]: name is required")
        base_url(item, i)
