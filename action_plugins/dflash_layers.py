"""Action plugin of dflash_layers: a layer build (GBs of wheels, up to an hour) says how it goes.

``action: ensure`` runs the module asynchronously (Ansible's own async wrapper) and, every
``progress_interval`` seconds until it ends, reads the progress record the module keeps on the host
(module_utils/dflash_common/progress.py: the layer, the uv step, distributions installed so far of the planned
ones, bytes written) and prints one line for the host: what, how far, how long so far. Every other action, check
mode, an async task of the user's and ``progress_interval: 0`` run the module once, as the generic action does.
"""

from __future__ import annotations

import json
import os
import secrets

import ansible.module_utils
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

# the repository's module_utils/ under the name the modules import it by (docs/design.md, "Import path")
_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

from ansible.module_utils.dflash_common import progress

display = Display()


def run_with_host_progress(action, module_name, args, task_vars, progress_file, interval, limit, what):
    """Run ``module_name`` async on the host, printing its progress record every ``interval`` seconds; -> its
    result. ``action``: the ActionBase running the task (connection, become, tmp handling)."""
    host = (task_vars or {}).get("inventory_hostname", "")
    task = action._task
    saved = task.async_val
    task.async_val = int(limit)
    try:
        started = action._execute_module(module_name=module_name, module_args=dict(args, progress_file=progress_file),
                                         task_vars=task_vars, wrap_async=True)
    finally:
        task.async_val = saved
    if started.get("failed") or "ansible_job_id" not in started:
        return started
    jid = started["ansible_job_id"]
    async_dir = action._remote_expand_user(action.get_shell_option("async_dir", default="~/.ansible_async"))

    def status(_handle):
        res = action._execute_module(module_name="ansible.legacy.async_status",
                                     module_args={"jid": jid, "_async_dir": async_dir}, task_vars=task_vars)
        return bool(res.get("finished")) or bool(res.get("failed") and not res.get("started")), res

    def read(_handle):
        out = action._low_level_execute_command(f"cat {progress_file} 2>/dev/null", sudoable=True)
        try:
            return json.loads(out.get("stdout") or "")
        except ValueError:
            return None  # not written yet, or between two layers: no line this time

    try:
        res = progress.poll(lambda: jid, status, read, lambda text: display.display(f"{host}: {text}"), interval,
                            limit=limit + 60)
    except TimeoutError as exc:
        return {"failed": True, "msg": f"{host}: {what}: {exc}"}
    action._execute_module(module_name="ansible.legacy.async_status",
                           module_args={"jid": jid, "mode": "cleanup", "_async_dir": async_dir}, task_vars=task_vars)
    for key in ("ansible_job_id", "results_file", "started", "finished", "stdout", "stderr", "stdout_lines",
                "stderr_lines", "erased"):
        res.pop(key, None)
    return res


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        try:
            interval = float(args.pop("progress_interval", 30) or 0)
        except (TypeError, ValueError):
            interval = 30.0
        wrap_async = self._task.async_val and not self._connection.has_native_async
        if args.get("action", "ensure") != "ensure" or self._task.check_mode or wrap_async or interval <= 0:
            out = self._execute_module(module_name="dflash_layers", module_args=args, task_vars=task_vars,
                                       wrap_async=wrap_async)
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return merge_hash(result, out)
        layers = args.get("layers") or []
        limit = int(args.get("build_timeout") or 3600) * max(1, len(layers)) * 2 + 300
        progress_file = os.path.join(str(args["prefix"]), "layers", f".progress-{secrets.token_hex(6)}.json")
        out = run_with_host_progress(self, "dflash_layers", args, task_vars, progress_file, interval, limit,
                                     "venv layers")
        return merge_hash(result, out)
