"""A DFlash draft and its target, checked as a pair from their config.json before any server starts.

The draft predicts tokens of the target's vocabulary from the target's hidden states at some of its
layers (sglang's speculative/dflash_utils.py: ``parse_dflash_draft_config`` reads ``dflash_config``
``target_layer_ids``, ``mask_token_id``, ``num_target_layers``, each also accepted at the top level of the
config; a layer id must be in ``[0, target layers)``). A draft trained for another target loads and then
fails, or worse drafts garbage that is all rejected. What is checked:

- vocabulary: the draft's ``vocab_size`` equals the target's (a smaller ``draft_vocab_size`` is a subset
  the draft maps back, allowed);
- hidden size: the target hidden size the draft reads (``target_hidden_size``, else its ``hidden_size``)
  equals the target's ``hidden_size``;
- the target layers the draft reads: every ``target_layer_ids`` entry below the target's
  ``num_hidden_layers``; ``num_target_layers``, when given, equal to it;
- the mask token: ``mask_token_id`` below the target's vocabulary.

A multimodal target (Qwen3.5/3.6: ``Qwen3_5ForConditionalGeneration``) keeps these in ``text_config``.
Pure functions, no Ansible import.
"""

from __future__ import annotations

import json


def _text(cfg: dict) -> dict:
    for key in ("text_config", "llm_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict) and sub:
            return sub
    return cfg


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dflash(cfg: dict) -> dict:
    d = cfg.get("dflash_config")
    return d if isinstance(d, dict) else {}


def _get(cfg: dict, key: str):
    """A DFlash field: dflash_config first, then the top level (as sglang reads it)."""
    d = _dflash(cfg)
    return d[key] if key in d else cfg.get(key)


def load(text_or_dict):
    """config.json text (or an already parsed dict) -> (dict, error)."""
    if isinstance(text_or_dict, dict):
        return text_or_dict, None
    try:
        cfg = json.loads(text_or_dict)
    except (TypeError, ValueError) as exc:
        return None, f"config.json is not JSON ({exc})"
    if not isinstance(cfg, dict):
        return None, "config.json is not a JSON object"
    return cfg, None


def pair_errors(target, draft, target_name="the target", draft_name="the draft") -> list[str]:
    """Why this draft does not belong to this target, in words ([] = they fit)."""
    tcfg, terr = load(target)
    dcfg, derr = load(draft)
    if terr or derr:
        return [f"{name}: {err}" for name, err in ((target_name, terr), (draft_name, derr)) if err]
    t, d = _text(tcfg), _text(dcfg)
    errors = []
    t_vocab, d_vocab = _int(t.get("vocab_size")), _int(d.get("vocab_size"))
    t_hidden = _int(t.get("hidden_size"))
    d_hidden = _int(dcfg.get("target_hidden_size")) or _int(d.get("hidden_size"))
    hidden_key = "target_hidden_size" if _int(dcfg.get("target_hidden_size")) else "hidden_size"
    t_layers = _int(t.get("num_hidden_layers"))

    if t_vocab is None:
        errors.append(f"{target_name} has no vocab_size in its config.json: the pair cannot be checked")
    if t_hidden is None or t_layers is None:
        errors.append(f"{target_name} has no hidden_size / num_hidden_layers in its config.json: the pair "
                      "cannot be checked")
    if t_vocab is not None and d_vocab is not None and d_vocab != t_vocab:
        errors.append(f"vocabulary: {draft_name} has vocab_size {d_vocab}, {target_name} {t_vocab}: the draft "
                      "was made for another tokenizer (another target model)")
    if t_hidden is not None and d_hidden is not None and d_hidden != t_hidden:
        errors.append(f"hidden size: {draft_name} reads hidden states of size {d_hidden} ({hidden_key}), "
                      f"{target_name} has hidden_size {t_hidden}: the draft was trained on another target")
    layer_ids = _get(dcfg, "target_layer_ids")
    if layer_ids is None:
        layer_ids = dcfg.get("eagle_aux_hidden_state_layer_ids")
    if layer_ids is not None:
        if not isinstance(layer_ids, list) or not layer_ids or any(_int(x) is None for x in layer_ids):
            errors.append(f"target layers: {draft_name}'s dflash_config.target_layer_ids must be a non-empty list "
                          f"of integers, got {layer_ids!r}")
        elif t_layers is not None:
            bad = [x for x in layer_ids if not 0 <= x < t_layers]
            if bad:
                errors.append(f"target layers: {draft_name} reads layers {layer_ids} of the target, but "
                              f"{target_name} has {t_layers} layers (0..{t_layers - 1}): {bad} do not exist")
    n_target = _int(_get(dcfg, "num_target_layers"))
    if n_target is not None and t_layers is not None and n_target != t_layers:
        errors.append(f"target layers: {draft_name} was trained on a target of {n_target} layers "
                      f"(num_target_layers), {target_name} has {t_layers}")
    mask = _get(dcfg, "mask_token_id")
    if mask is not None:
        if _int(mask) is None or mask < 0:
            errors.append(f"mask token: {draft_name}'s mask_token_id must be a non-negative integer, got {mask!r}")
        elif t_vocab is not None and mask >= t_vocab:
            errors.append(f"mask token: {draft_name}'s mask_token_id {mask} is outside {target_name}'s "
                          f"vocabulary of {t_vocab} tokens")
    return errors
