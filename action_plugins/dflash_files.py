"""Action plugin of dflash_files: each file's content read on the controller (``src``: a role's ``files/`` or an
absolute path; or ``content``), sent base64-encoded to the module in one call (library/dflash_files.py).

A file is ``{dest, src | content, mode, owner, group}``; directories and ``absent`` go to the module as given.
Everything is checked here before the host is reached: an entry with both or neither of src and content, a source
that is not found, more than MAX_BYTES in all (the set is meant for small files: launchers, units, scripts)."""

from __future__ import annotations

import base64

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

MAX_BYTES = 4 * 1024 * 1024


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        a = dict(self._task.args)
        errors, files, total = [], [], 0
        for i, f in enumerate(a.get("files") or []):
            f = dict(f or {})
            where = f"files[{i}] ({f.get('dest') or 'no dest'})"
            has_src, has_content = f.get("src") is not None, f.get("content") is not None
            if has_src == has_content:
                errors.append(f"{where}: give exactly one of src and content")
                continue
            if has_src:
                try:
                    path = self._find_needle("files", str(f.pop("src")))
                    with open(path, "rb") as fh:
                        data = fh.read()
                except (AnsibleError, OSError) as exc:
                    errors.append(f"{where}: {exc}")
                    continue
            else:
                data = str(f.pop("content")).encode("utf-8")
            total += len(data)
            f["content_b64"] = base64.b64encode(data).decode("ascii")
            files.append(f)
        if total > MAX_BYTES:
            errors.append(f"{total} bytes in all: dflash_files is for small files (at most {MAX_BYTES})")
        if errors:
            return dict(result, failed=True, msg="; ".join(errors))
        args = {"files": files, "directories": a.get("directories") or [], "absent": a.get("absent") or []}
        try:
            out = self._execute_module(module_name="dflash_files", module_args=args, task_vars=task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        out.pop("invocation", None)  # every content again, base64: not for the play's output
        return dict(result, **out)
