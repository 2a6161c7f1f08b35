"""tune.yml's configurations as instances of the inventory, checked with the instances stage's rules.

A configuration (algorithm, DDTree budget/top-k/mode, attention backend) applied to the base instance of
the inventory is the instance tune would propose. Before anything starts, each one goes through the same
target rules deploy.yml's validation applies (dflash_instances/model.py: hybrid linear-attention targets,
attention backends the pinned sglang refuses on an architecture): what they refuse is left out of the sweep, with
their message, instead of failing at start-up. The same function makes the proposal: the winner as the
inventory's instance. Pure functions; no Ansible import.
"""

from __future__ import annotations

from ansible.module_utils.dflash_common import sglang
from ansible.module_utils.dflash_common.argv import arg_value
from ansible.module_utils.dflash_instances.model import attention_backend_errors, hybrid_instance_errors


def as_instance(inst, cfg) -> dict:
    """The inventory instance ``inst`` running configuration ``cfg`` (algorithm, ddtree, the attention backend
    pinned when the configuration names one); every other field as the user wrote it."""
    out = {k: v for k, v in (inst or {}).items()}
    algo = cfg["algorithm"]
    out["algorithm"] = algo
    if algo == "DDTREE":
        dd = dict(out.get("ddtree") or {}) if isinstance(out.get("ddtree"), dict) else {}
        dd.update(budget=int(cfg["budget"]), topk=int(cfg["topk"]), mode=cfg.get("mode") or "tree")
        out["ddtree"] = dd
    else:
        out.pop("ddtree", None)
    if cfg.get("draft_model_path"):
        out["draft_model_path"] = cfg["draft_model_path"]
    if cfg.get("attention_backend"):
        pins = dict(out.get("pin_flags") or {}) if isinstance(out.get("pin_flags"), dict) else {}
        pins["--attention-backend"] = cfg["attention_backend"]
        out["pin_flags"] = pins
    return out


def rule_errors(inst, facts, version=None) -> list:
    """The rules' messages for ``inst`` with the sglang it runs (its sglang_version, else ``version``, else the
    supported default)."""
    sg = sglang.facts((inst or {}).get("sglang_version") or version)
    return [f"field '{field}': {msg}" for field, msg in hybrid_instance_errors(inst, facts, sg)
            + attention_backend_errors(inst, facts, sg)]


def check_configurations(configs, inst, facts, host="host", version=None) -> tuple:
    """(configurations the rules allow, {name: message} of those they refuse). Without the inventory's
    instance (a base the inventory no longer has) nothing can be checked: all pass."""
    allowed, refused = [], {}
    for cfg in configs:
        if cfg.get("running") or inst is None:
            allowed.append(cfg)
            continue
        errs = rule_errors(as_instance(inst, cfg), facts, version)
        if errs:
            refused[cfg["name"]] = f"{host}: configuration {cfg['name']}: " + "; ".join(errs)
        else:
            allowed.append(cfg)
    return allowed, refused


def load_format(args, inst=None):
    """The --load-format of the release's flags (or the inventory instance's extra_args), None when unset."""
    for source in (args, (inst or {}).get("extra_args")):
        value = arg_value(source, "--load-format")
        if value is not None:
            return value
    return None
