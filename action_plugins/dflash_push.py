"""Action dflash_push: one controller file to the host, with a progress line every ``progress_interval`` seconds
(how many bytes of it are on the host so far, how long so far). The wheelhouse push (GBs of wheels in one
bundle) uses it; a plain ``copy``/``unarchive`` of the bundle says nothing until it ends.

    - dflash_push: {src: <controller file>, what: "wheelhouse bundle", progress_interval: 30}
      register: pushed        # pushed.path: the file on the host (in the login user's temporary directory),
                              # pushed.tmpdir: that directory, for the task that removes it

The file goes where Ansible's own copy puts a file first (the connection user's remote temporary directory); the
transfer runs in a worker thread while this thread reads the remote file's size (``stat``) at each interval.
Check mode transfers nothing. No module runs on the host.
"""

from __future__ import annotations

import os
import shlex

import ansible.module_utils
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

# the repository's module_utils/ under the name the modules import it by (docs/design.md, "Import path")
_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

from ansible.module_utils.dflash_common import progress

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        host = (task_vars or {}).get("inventory_hostname", "")
        src = str(args.get("src") or "")
        if not os.path.isfile(src):
            return dict(result, failed=True, msg=f"{host}: dflash_push: {src!r} is not a file on the controller")
        what = str(args.get("what") or os.path.basename(src))
        size = os.path.getsize(src)
        interval = progress.interval_arg(args)
        if self._task.check_mode:
            return dict(result, changed=True, bytes=size, msg=f"would push {progress.human_bytes(size)}")
        tmpdir = self._make_tmp_path()
        remote = self._connection._shell.join_path(tmpdir, os.path.basename(src))

        def measure():
            out = self._low_level_execute_command(f"stat -c %s {shlex.quote(remote)} 2>/dev/null || echo 0",
                                                  sudoable=False)
            text = (out.get("stdout") or "0").strip().splitlines() or ["0"]
            return {"done": int(text[-1]) if text[-1].isdigit() else 0, "total": size, "unit": "bytes"}

        progress.run_with_progress(lambda: self._transfer_file(src, remote), measure,
                                   f"pushing {what} ({progress.human_bytes(size)})",
                                   lambda text: display.display(f"{host}: {text}"), interval)
        self._fixup_perms2([tmpdir, remote])
        # kept for the next task (unarchive): the action's own cleanup would remove its temporary directory
        self._connection._shell.tmpdir = None
        return dict(result, changed=True, path=remote, tmpdir=tmpdir, bytes=size)
