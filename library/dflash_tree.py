#!/usr/bin/python
"""Ansible module: the patched sglang tree (thin wrapper over module_utils/dflash_tree/)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_tree
short_description: Build, check or describe a content-addressed patched sglang tree
description:
  - C(plan) (run on the controller) checks the pinned wheel's sha256, reads the patch series and
    applies every patch in memory against the wheel. Nothing is written; a patch that does not
    apply fails here, naming the patch, the file and the hunk, before any host is touched.
    Returns the tree name and hash, the manifest facts and the patches' text for C(build).
  - C(pack) (run on the controller) packs a user's own checkout (O(src)) into a deterministic
    tarball named by its content, without C(__pycache__) or bytecode.
  - C(status) (run on the host) says whether C(<trees_dir>/<name>) matches its manifest. Read-only.
  - C(build) (run on the host) makes C(<trees_dir>/<name>) hold exactly the plan, building it in a
    temporary sibling and renaming it into place; a tree that already matches is left alone.
  - C(prune) (run on the host) removes the trees under O(trees_dir) that none of O(manifests) (the kept
    releases', given by the release stage) nor O(protect) uses; builds in progress are never touched.
options:
  action: {type: str, required: true, choices: [plan, pack, status, build, prune]}
  wheel: {type: path, description: The sglang wheel (plan, build).}
  wheel_sha256: {type: str, description: Its pinned sha256 (plan, build).}
  patches_dir: {type: path, description: Directory with C(series) and the patches (plan).}
  apply_series: {type: bool, default: true, description: False builds the pristine wheel (plan).}
  patches:
    type: list
    elements: dict
    description: "[{name, sha256, content}] as returned by plan (build)."
  src: {type: path, description: The user's checkout on the controller (pack).}
  out_dir: {type: path, description: Where pack writes its tarball (pack).}
  src_archive: {type: path, description: The packed checkout on the host (build).}
  content_sha256: {type: str, description: Content hash returned by pack (build).}
  src_label: {type: str, description: Where the checkout came from, recorded in the manifest (build).}
  trees_dir: {type: path, description: "Parent of the trees on the host (status, build; plan and pack: for the predicted fact)."}
  name: {type: str, description: Tree directory name from plan/pack (status, build).}
  hash: {type: str, description: Tree hash from plan/pack (status, build).}
  manifests: {type: list, elements: dict, default: [], description: "prune: the kept releases' manifests (tree_path)."}
  protect: {type: list, elements: str, default: [], description: "prune: tree paths always kept (this run's tree)."}
  progress_file: {type: path, description: "build: a file on the host kept current with the step and the bytes
                  written (action_plugins/dflash_tree.py prints it); removed at the end."}
"""

RETURN = r"""
tree: {description: "The dflash_tree fact (docs/design.md); plan/pack: as it will be", returned: always but status of an invalid tree, type: dict}
manifest: {description: The tree's manifest.json, returned: build and valid status, type: dict}
valid: {description: Tree present and matching its manifest, returned: status, type: bool}
reason: {description: Why the tree was (re)built or left alone, returned: status/build, type: str}
plan: {description: Tree name, hash, wheel, patches and per-file sha256, returned: plan, type: dict}
patches: {description: "[{name, sha256, content}] for build", returned: plan, type: list}
removed: {description: Tree directories removed, returned: prune, type: list}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_common import progress
from ansible.module_utils.dflash_common.hostlock import Heartbeat, LockError, fence
from ansible.module_utils.dflash_tree.common import TreeError
from ansible.module_utils.dflash_tree.disk import (
    close_plan,
    ensure_tree,
    fact_from_manifest,
    plan_summary,
    read_manifest,
    verify_tree,
)
from ansible.module_utils.dflash_tree.prune import prune_trees
from ansible.module_utils.dflash_tree.series import read_series_dir
from ansible.module_utils.dflash_tree.source import pack_src, plan_src_archive
from ansible.module_utils.dflash_tree.wheel import plan_wheel


def _patches_from_args(items):
    out = []
    for p in items:
        content = p["content"].encode("utf-8", "surrogateescape")
        out.append({"name": p["name"], "sha256": p["sha256"], "content": content})
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": ["plan", "pack", "status", "build", "prune"]},
            "wheel": {"type": "path"},
            "wheel_sha256": {"type": "str"},
            "patches_dir": {"type": "path"},
            "apply_series": {"type": "bool", "default": True},
            "patches": {"type": "list", "elements": "dict"},
            "src": {"type": "path"},
            "out_dir": {"type": "path"},
            "src_archive": {"type": "path"},
            "content_sha256": {"type": "str"},
            "src_label": {"type": "str"},
            "progress_file": {"type": "path"},
            "trees_dir": {"type": "path"},
            "name": {"type": "str"},
            "hash": {"type": "str"},
            "manifests": {"type": "list", "elements": "dict", "default": []},
            "protect": {"type": "list", "elements": "str", "default": []},
        },
        required_if=[
            ("action", "plan", ("wheel", "wheel_sha256", "patches_dir")),
            ("action", "pack", ("src", "out_dir")),
            ("action", "status", ("trees_dir", "name", "hash")),
            ("action", "build", ("trees_dir", "name", "hash")),
            ("action", "prune", ("trees_dir",)),
        ],
        supports_check_mode=True,
    )
    p = module.params
    action = p["action"]
    try:
        if action == "plan":
            patches = read_series_dir(p["patches_dir"]) if p["apply_series"] else []
            plan = plan_wheel(p["wheel"], p["wheel_sha256"], patches)
            close_plan(plan)
            m = plan["manifest"]
            tree = fact_from_manifest(m, os.path.join(p["trees_dir"], m["name"])) if p["trees_dir"] else None
            for item in patches:
                try:
                    item["content"] = item["content"].decode("utf-8")
                except UnicodeDecodeError:
                    module.fail_json(msg=f"patch {item['name']} is not UTF-8 text")
            module.exit_json(changed=False, plan=plan_summary(plan), patches=patches, tree=tree)

        if action == "pack":
            if not os.path.isdir(p["src"]):
                module.fail_json(msg=f"dflash_tree_src: {p['src']} is not a directory on the controller")
            packed = pack_src(p["src"], p["out_dir"])
            m = packed["manifest"]
            tree = fact_from_manifest(m, os.path.join(p["trees_dir"], m["name"])) if p["trees_dir"] else None
            module.exit_json(
                changed=False,  # a cache file on the controller, nothing on any host
                archive=packed["archive"],
                content_sha256=packed["content_sha256"],
                sglang_version=m["sglang_version"],
                file_count=packed["file_count"],
                src=packed["src"],
                plan={"name": m["name"], "hash": m["hash"], "sglang_version": m["sglang_version"]},
                tree=tree,
            )

        if action == "prune":
            removed = prune_trees(p["trees_dir"], p["manifests"], p["protect"], check_mode=module.check_mode)
            module.exit_json(changed=bool(removed), removed=removed)

        tree_dir = os.path.join(p["trees_dir"], p["name"])
        if action == "status":
            valid, reason = verify_tree(tree_dir, p["hash"])
            result = {"changed": False, "valid": valid, "reason": reason, "path": tree_dir}
            if valid:
                manifest = read_manifest(tree_dir)
                result.update(manifest=manifest, tree=fact_from_manifest(manifest, tree_dir))
            module.exit_json(**result)

        # build
        valid, reason = verify_tree(tree_dir, p["hash"])
        if module.check_mode and not valid:
            module.exit_json(changed=True, reason=f"would build: {reason}", path=tree_dir)
        if not p["src_archive"] and (not p["wheel"] or not p["wheel_sha256"] or p["patches"] is None):
            module.fail_json(msg="build needs wheel, wheel_sha256 and patches (or src_archive)")

        def measure():  # the tree's temporary sibling as it is written (action_plugins/dflash_tree.py reads it)
            written = sum(progress.tree_usage(os.path.join(p["trees_dir"], d))[0]
                          for d in (os.listdir(p["trees_dir"]) if os.path.isdir(p["trees_dir"]) else [])
                          if d.startswith("."))
            return {"done": written, "unit": "bytes", "note": "written in a temporary sibling"}

        sink = progress.file_sink(None if module.check_mode else p["progress_file"])
        with progress.Ticker(f"sglang tree {p['name']}: reading the wheel, applying the patch series", sink,
                             measure) as ticker:
            if p["src_archive"]:
                plan = plan_src_archive(p["src_archive"], p["content_sha256"], p["src_label"])
            else:
                plan = plan_wheel(p["wheel"], p["wheel_sha256"], _patches_from_args(p["patches"]))
            try:
                m = plan["manifest"]
                if m["name"] != p["name"] or m["hash"] != p["hash"]:
                    module.fail_json(
                        msg=f"the host computes tree {m['name']} ({m['hash']}) but the controller planned "
                        f"{p['name']} ({p['hash']}): the wheel or the patches differ between them"
                    )
                ticker.set(what=f"sglang tree {p['name']}: writing and checking the files")
                if not module.check_mode:
                    fence()  # this run's host lock: refreshed, or the build refused when another run holds the host
                with Heartbeat():
                    result = ensure_tree(plan, p["trees_dir"], check_mode=module.check_mode)
            finally:
                close_plan(plan)
        if p["progress_file"] and os.path.exists(p["progress_file"]):
            os.unlink(p["progress_file"])
        module.exit_json(
            changed=result["changed"],
            reason=result["reason"],
            tree=result["tree"],
            manifest=result["manifest"],
            leftovers_removed=result["leftovers_removed"],
        )
    except LockError as e:
        module.fail_json(msg=str(e))
    except TreeError as e:
        module.fail_json(
            msg=str(e),
            patch=getattr(e, "patch", None),
            file=getattr(e, "file", None),
            hunk=getattr(e, "hunk", None),
            header=getattr(e, "header", None),
        )


if __name__ == "__main__":
    main()
