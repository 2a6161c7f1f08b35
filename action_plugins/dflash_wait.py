"""Action plugin of dflash_wait: the wait in chunks of ``progress_interval`` seconds, and after each
chunk a progress line per instance still starting (elapsed time and the server's latest start-up
stage: loading weights N%, KV pool, CUDA graph capture N%, warm-up), printed at once. Then, with
``smoke``, the reply judge on the controller.

A 27B model takes minutes to load; one module call would leave the play silent all that time. The
module does the work (library/dflash_wait.py, logic in module_utils/); this plugin only calls it
again with the ``resume`` state it returned and prints its ``progress``. Async tasks, check mode and
``progress_interval: 0`` run the module once, as the generic action does.

The judge (gate ``output.judge``, module_utils/dflash_release/gates_judge.py) reads the smoke test's
reply the way a person would (mojibake, token soup, loops, regurgitation) with libraries the hosts do
not need (ftfy, wordfreq): it runs here, on the reply the module returned. The module is called with
``mark: false``; a second, short call (``judged``) writes the gate into the smoke records and marks
the release healthy, or fails naming the gate, as the host's gates do.
"""

from __future__ import annotations

import os

import ansible.module_utils
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

# the repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

from ansible.module_utils.dflash_common import progress
from ansible.module_utils.dflash_release.gates_judge import judge_gate
from ansible.module_utils.dflash_release.smoke import FIBONACCI_PROMPT

display = Display()


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        wrap_async = self._task.async_val and not self._connection.has_native_async
        interval = progress.interval_arg(args, 20, bad=0.0)  # a bad value: the module reports it
        judging = (_truthy(args.get("smoke")) and not wrap_async and not self._task.check_mode
                   and args.get("judged") is None and not args.get("chunk_seconds"))
        mark = args.get("mark", False)
        if judging:
            args["mark"] = False  # marked healthy by the judged call, once the judge passed too
        if wrap_async or self._task.check_mode or interval <= 0 or args.get("chunk_seconds"):
            out = progress.run_module_once(self, "dflash_wait", args, task_vars, wrap_async)
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
        if judging and isinstance(out.get("smoke"), dict) and out["smoke"]:
            out = self._judge(out, mark, task_vars)
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return merge_hash(result, out)

    def _judge(self, out, mark, task_vars):
        """Judge each instance's reply here, then record it (and mark) on the host."""
        prompt = self._task.args.get("prompt") or FIBONACCI_PROMPT
        judged = {}
        for name, rec in out["smoke"].items():
            gate = judge_gate(rec or {}, prompt)  # ran: false with the reason where ftfy/wordfreq are missing
            judged[name] = dict(rec or {}, gates=[*((rec or {}).get("gates") or []), gate])
        call = {k: v for k, v in self._task.args.items() if k not in ("chunk_seconds", "resume")}
        call.update(judged=judged, mark=mark, restart=False)
        res = self._execute_module(module_name="dflash_wait", module_args=call, task_vars=task_vars)
        out = dict(out, smoke=res.get("smoke") or judged)
        if res.get("failed"):
            out["failed"] = True
            out["msg"] = res.get("msg") or out.get("msg")
            out["failed_instances"] = sorted(set(out.get("failed_instances") or [])
                                             | set(res.get("failed_instances") or []))
        elif "status" in res:
            out["status"] = res["status"]
        return out


def _truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y")
    return bool(value)
