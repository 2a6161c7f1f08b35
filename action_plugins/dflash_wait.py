"""Action plugin of dflash_wait: the wait in chunks of ``progress_interval`` seconds, and after each
chunk a progress line per instance still starting (elapsed time and the server's latest start-up
stage: loading weights N%, KV pool, CUDA graph capture N%, warm-up), printed at once.

A 27B model takes minutes to load; one module call would leave the play silent all that time. The
module does the work (library/dflash_wait.py, logic in module_utils/); this plugin only calls it
again with the ``resume`` state it returned and prints its ``progress``. Async tasks, check mode and
``progress_interval: 0`` run the module once, as the generic action does.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

display = Display()


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        wrap_async = self._task.async_val and not self._connection.has_native_async
        try:
            interval = float(args.get("progress_interval", 20) or 0)
        except (TypeError, ValueError):
            interval = 0.0  # the module reports the bad value
        if wrap_async or self._task.check_mode or interval <= 0 or args.get("chunk_seconds"):
            out = self._execute_module(module_name="dflash_wait", module_args=args, task_vars=task_vars,
                                       wrap_async=wrap_async)
        else:
            host = (task_vars or {}).get("inventory_hostname", "")
            args["chunk_seconds"] = interval
            while True:
                out = self._execute_module(module_name="dflash_wait", module_args=args, task_vars=task_vars)
                if out.get("verdict") != "starting" or not out.get("resume") or out.get("failed"):
                    break
                for line in (out.get("progress") or {}).values():
                    display.display(f"{host}: {line}")
                args = dict(args, restart=False, resume=out["resume"])
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return merge_hash(result, out)
