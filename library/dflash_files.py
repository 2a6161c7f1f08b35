#!/usr/bin/python
"""Ansible module: a set of small files and directories put in place in one call (logic:
module_utils/dflash_common/files.py). Run through the action plugin of the same name, which reads O(files)' sources
on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_files
short_description: Put a set of small files and directories in place in one call
description:
  - Creates O(directories) (missing parents 0755 root), writes each of O(files) whose content, mode or owners
    differ (a temporary sibling renamed over it) and removes O(absent) files or links; what is already right is
    not touched. One module run a host for the whole set (a loop of copy would be two or three round trips a file).
  - Run through the action plugin of the same name: it reads each file's C(src) on the controller (a role's
    C(files/) or an absolute path) or takes its C(content), and sends them base64-encoded.
  - Check mode writes nothing and says what would change; with C(--diff) the text files' changes are shown.
  - Logic lives in C(module_utils/dflash_common/files.py).
options:
  directories:
    description: Directories, in order (parents before children).
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: Absolute path., type: path, required: true}
      mode: {description: Octal mode., type: raw, default: '0755'}
      owner: {description: User name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
  files:
    description: Files (the action plugin fills in C(content_b64) from C(src) or C(content)).
    type: list
    elements: dict
    default: []
    suboptions:
      dest: {description: Absolute path., type: path, required: true}
      content_b64: {description: The content, base64., type: str, required: true}
      mode: {description: Octal mode., type: raw, default: '0644'}
      owner: {description: User name., type: str, default: root}
      group: {description: Group name., type: str, default: root}
  absent:
    description: Files or links to remove (a directory there is refused).
    type: list
    elements: path
    default: []
author: dflash-deploy
"""

EXAMPLES = r"""
- name: Install the launcher and a unit
  dflash_files:
    directories: [{path: /opt/dflash/libexec}]
    files:
      - {dest: /opt/dflash/libexec/dflash-launch, src: dflash-launch.py, mode: '0755'}
      - {dest: /etc/systemd/system/x.service, content: "[Unit]\n"}
"""

RETURN = r"""
changed_paths: {description: The paths created, written, changed in mode or owners, or removed., type: list,
                returned: always}
items: {description: "Each path: {path, kind (directory, file, absent), changed, why}.", type: list,
        returned: always}
"""

import base64
import binascii

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_common.files import FilesError, install


def main():
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True}, "mode": {"type": "raw", "default": "0755"},
                "owner": {"type": "str", "default": "root"}, "group": {"type": "str", "default": "root"}}},
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "dest": {"type": "path", "required": True}, "content_b64": {"type": "str", "required": True},
                "mode": {"type": "raw", "default": "0644"}, "owner": {"type": "str", "default": "root"},
                "group": {"type": "str", "default": "root"}}},
            "absent": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    files = []
    for f in p["files"]:
        try:
            content = base64.b64decode(f["content_b64"], validate=True)
        except (binascii.Error, ValueError):
            module.fail_json(msg=f"{f['dest']}: content_b64 is not base64")
        files.append(dict(f, content=content))
    try:
        res = install(p["directories"], files, p["absent"], check=module.check_mode)
    except (FilesError, OSError) as exc:
        module.fail_json(msg=str(exc))
    diff = res.pop("diff")
    if module._diff and diff:
        res["diff"] = diff
    module.exit_json(**res)


if __name__ == "__main__":
    main()
