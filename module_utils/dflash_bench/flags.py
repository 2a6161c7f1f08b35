"""The command line of a temporary benchmark instance, derived from the deployed release.

The base is one instance of the current release (its manifest entry: the args and env the
instances stage derived, fallback rules included). A configuration rewrites only what it names:
port and bind address (loopback: a bench server is never exposed), GPUs (CUDA_VISIBLE_DEVICES) and
TP width, the speculative algorithm and its DDTree budget/top-k/mode, the draft, the attention
backend, the static memory fraction, extra arguments. Everything else (model path, context
length, grammar/sampling backends a rule chose, CUDA_HOME, PYTHONPATH = the patched tree, the
overlay's LD_LIBRARY_PATH) is the release's own. Each change that replaces a flag a fallback rule
set is reported with the rule's name. Pure functions; no Ansible import.
"""

from __future__ import annotations

from ansible.module_utils.dflash_common.argv import get_flag, pairs, takes_value

SPEC_PREFIX = "--speculative-"
DDTREE_FLAGS = ("--speculative-ddtree-budget", "--speculative-ddtree-topk", "--speculative-ddtree-mode")


class FlagsError(Exception):
    pass


def drop_flags(args, match) -> list:
    """args without every flag for which ``match(flag)`` is true (with its value)."""
    out, i = [], 0
    args = [str(a) for a in args]
    while i < len(args):
        a = args[i]
        if a.startswith("--") and match(a.split("=", 1)[0]):
            i += 1 if "=" in a or not takes_value(args, i) else 2
            continue
        out.append(a)
        i += 1
    return out


def set_flag(args, flag, value=None) -> list:
    """args with ``flag`` set once (replacing any occurrence, in place of the first); value None: a switch."""
    args = [str(a) for a in args]
    new = [flag] if value is None else [flag, str(value)]
    for i, a in enumerate(args):
        if a == flag or a.startswith(flag + "="):
            rest = drop_flags(args[i:], lambda f: f == flag)
            return args[:i] + new + rest
    return args + new


def rule_of_flag(applied, flag):
    """The fallback rule (name) of the release that set ``flag``, or None."""
    for rule in applied or []:
        if flag in [str(f) for f in rule.get("flags") or []]:
            return rule.get("rule") or rule.get("name")
    return None


def config_command(base: dict, cfg: dict, port: int, gpus: list, common_args=(), metrics=True) -> dict:
    """{args, env, changes, overrides} of one temporary instance.

    ``base``: {name, args, env, applied} of the release's instance; ``cfg``: a normalized
    configuration (dflash_bench_matrix.normalize); ``common_args``: dflash_bench_extra_args (for
    every configuration, before the configuration's own extra_args)."""
    args = [str(a) for a in base.get("args") or []]
    applied = base.get("applied") or []
    changes, overrides = [], []

    def put(flag, value=None, why=""):
        nonlocal args
        before = get_flag(args, flag)
        args = set_flag(args, flag, value)
        after = True if value is None else str(value)
        if before != after:
            changes.append(f"{flag} {before if before is not None else '(unset)'} -> {after}"
                           + (f" ({why})" if why else ""))
            rule = rule_of_flag(applied, flag)
            if rule and before is not None:
                overrides.append({"flag": flag, "rule": rule, "release": before, "bench": after})

    put("--host", "127.0.0.1", "bench servers listen on loopback only")
    put("--port", port)
    put("--tp-size", len(gpus))
    algo = cfg["algorithm"]
    if algo == "NONE":
        dropped = [a for a in args if a.startswith(SPEC_PREFIX)]
        args = drop_flags(args, lambda f: f.startswith(SPEC_PREFIX))
        if dropped:
            changes.append("removed " + " ".join(sorted({a.split('=')[0] for a in dropped})) + " (no speculation)")
    else:
        draft = cfg.get("draft_model_path") or get_flag(args, "--speculative-draft-model-path")
        if not draft or draft is True:
            raise FlagsError(f"configuration {cfg['name']}: {algo} needs a draft model, and the release's instance "
                             f"{base.get('name')} has none: set draft_model_path in the configuration")
        put("--speculative-algorithm", algo)
        put("--speculative-draft-model-path", draft)
        if algo == "DDTREE":
            put("--speculative-ddtree-budget", cfg["budget"])
            put("--speculative-ddtree-topk", cfg["topk"])
            put("--speculative-ddtree-mode", cfg.get("mode") or "tree")
        else:
            args = drop_flags(args, lambda f: f in DDTREE_FLAGS)
    if cfg.get("attention_backend"):
        put("--attention-backend", cfg["attention_backend"])
    if cfg.get("mem_fraction_static") is not None:
        put("--mem-fraction-static", cfg["mem_fraction_static"])
    if metrics:
        put("--enable-metrics", None, "acceptance from /metrics")
    for flag, value in pairs(list(common_args) + list(cfg.get("extra_args") or [])):
        put(flag, value)
    env = {str(k): str(v) for k, v in (base.get("env") or {}).items()}
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env.update(cfg.get("env") or {})
    return {"args": args, "env": env, "changes": changes, "overrides": overrides}
