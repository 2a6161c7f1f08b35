#!/usr/bin/python
"""Ansible module: the host side of the models stage (logic: module_utils/dflash_models).

The controller side (action_plugins/dflash_models.py) fetches the sources and pushes the files; this module
says what the host's store holds, makes the incoming directory, checks and commits a pushed copy, and reads
the configs of every instance's target and draft to check them as a pair."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dflash_models
short_description: The content-addressed model store on a host, and the draft/target pair check
description:
  - C(action=status) says which of the given digests the store at C(<store>/<name>-<digest12>/) holds,
    complete (marker with that digest, file sizes as in its manifest), and the free space of the store.
  - C(action=prepare) makes C(<store>/.incoming-<digest>/) with the manifest's directories, owned by the
    user the connection logs in as (SUDO_USER under sudo), so the files are put there without a copy
    through a temporary directory; files already there with the right size are listed (an interrupted
    push resumes).
  - C(action=commit) checks every pushed file against the manifest (size, sha256), writes the marker and
    renames the directory into place; nothing is renamed when a file differs.
  - C(action=pairs) reads the config.json of each instance's target and draft and returns what makes them
    not a pair (vocabulary, hidden size, target layers, mask token), in words.
options:
  action: {description: What to do., type: str, required: true, choices: [status, prepare, commit, pairs]}
  store: {description: "The store directory (<prefix>/models).", type: path}
  entries: {description: "status: [{digest, name}].", type: list, elements: dict, default: []}
  digest: {description: prepare/commit the copy of this digest., type: str}
  name: {description: commit - the readable part of the directory name., type: str}
  manifest: {description: "prepare/commit: [{path, size, sha256}].", type: list, elements: dict, default: []}
  source: {description: commit - what the copy came from (recorded in the marker)., type: dict, default: {}}
  pairs: {description: "pairs: [{instance, target, draft}] (host paths).", type: list, elements: dict, default: []}
author: dflash-deploy
"""

RETURN = r"""
present: {description: "status: {digest: path} of the complete copies.", returned: status, type: dict}
free_bytes: {description: "status: free bytes where the store is (or would be).", returned: status, type: int}
incoming: {description: prepare - the incoming directory., returned: prepare, type: str}
have: {description: "prepare: relative paths already there with the manifest's size.", returned: prepare, type: list}
path: {description: commit - the stored copy., returned: commit, type: str}
errors: {description: "pairs: one message per problem, naming instance, target and draft.", returned: pairs, type: list}
"""

import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_common.disk import existing_ancestor
from ansible.module_utils.dflash_models import store as model_store
from ansible.module_utils.dflash_models.pair import pair_errors


def _config(path):
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            return fh.read(), None
    except OSError as exc:
        return None, f"cannot read {path}/config.json ({exc.strerror or exc})"


def pairs_errors(pairs):
    errors = []
    for p in pairs:
        who = f"instance {p.get('instance')}"
        target, draft = p.get("target"), p.get("draft")
        ttext, terr = _config(target)
        dtext, derr = _config(draft)
        if terr or derr:
            errors += [f"{who}: {e}" for e in (terr, derr) if e]
            continue
        errors += [f"{who}: draft {draft} does not fit target {target}: {e}"
                   for e in pair_errors(ttext, dtext, "the target", "the draft")]
    return errors


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": ["status", "prepare", "commit", "pairs"]},
            "store": {"type": "path"},
            "entries": {"type": "list", "elements": "dict", "default": []},
            "digest": {"type": "str"},
            "name": {"type": "str"},
            "manifest": {"type": "list", "elements": "dict", "default": []},
            "source": {"type": "dict", "default": {}},
            "pairs": {"type": "list", "elements": "dict", "default": []},
        },
        required_if=[("action", "status", ["store"]), ("action", "prepare", ["store", "digest"]),
                     ("action", "commit", ["store", "digest", "name"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["action"] == "pairs":
        module.exit_json(changed=False, errors=pairs_errors(p["pairs"]))
    store = p["store"]
    if p["action"] == "status":
        present = {}
        for e in p["entries"]:
            path = os.path.join(store, model_store.store_dirname(e["name"], e["digest"]))
            if model_store.stored(path, e["digest"]):
                present[e["digest"]] = path
        st = os.statvfs(existing_ancestor(store))
        module.exit_json(changed=False, present=present, free_bytes=st.f_bavail * st.f_frsize)
    if module.check_mode:
        module.exit_json(changed=True, msg="check mode: nothing written")
    incoming = os.path.join(store, model_store.INCOMING + p["digest"])
    if p["action"] == "prepare":
        os.makedirs(store, mode=0o755, exist_ok=True)
        dirs = {incoming} | {os.path.dirname(os.path.join(incoming, f["path"])) for f in p["manifest"]}
        for d in sorted(dirs):
            os.makedirs(d, mode=0o755, exist_ok=True)
        user = os.environ.get("SUDO_USER")
        if user and os.geteuid() == 0:
            try:
                pw = pwd.getpwnam(user)
            except KeyError:
                pw = None
            if pw:
                for d in sorted(dirs):
                    os.chown(d, pw.pw_uid, pw.pw_gid)
        have = []
        for f in p["manifest"]:
            try:
                if os.path.getsize(os.path.join(incoming, f["path"])) == int(f["size"]):
                    have.append(f["path"])
            except OSError:
                pass
        module.exit_json(changed=True, incoming=incoming, have=have)
    res = model_store.commit(store, p["name"], p["digest"], p["manifest"], p["source"])
    if res["problems"]:
        module.fail_json(msg=f"the pushed copy of {p['name']} does not match its manifest, nothing was stored: "
                             + "; ".join(res["problems"][:10]), problems=res["problems"], incoming=incoming)
    module.exit_json(changed=True, path=res["path"])


if __name__ == "__main__":
    main()
