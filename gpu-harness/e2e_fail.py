#!/usr/bin/env python3
"""Deliberate failure on the GPU machine: the deployed instance's command, but with
`--attention-backend fa3`, whose kernels the carried sglang-kernel wheel does not ship
(gpu-harness/make_wheelhouse.py drops flash_ops). The server must die; `dflash_diagnose` reads the
real log, as a user would run it: `ansible localhost -m dflash_diagnose -a log_file=FILE`."""
import argparse
import json
import os
import subprocess
import sys
import time

from e2e_common import Server, deployed_instance, set_flag

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--timeout", type=float, default=300)
a = ap.parse_args()
name, env, args = deployed_instance()
args = set_flag(set_flag(set_flag(args, "--attention-backend", "fa3"), "--port", 30011), "--mem-fraction-static", 0.85)
s = Server("fail-fa3", args, env, a.out).start()
ok = s.wait_healthy(a.timeout)
rc = s.proc.poll()
s.stop()
print(f"fa3 server: healthy={ok} rc={rc} after {round(time.time() - s.t0, 1)} s")
cmd = [sys.executable, "-m", "ansible.cli.adhoc", "localhost", "-m", "dflash_diagnose", "-a", f"log_file={s.log}",
       "-o"]
r = subprocess.run(cmd, capture_output=True, text=True, check=False, env=dict(os.environ))
print(" ".join(cmd[1:]))
print(r.stdout[-3000:], r.stderr[-2000:])
with open(os.path.join(a.out, "fail-fa3.diagnosis.txt"), "w") as fh:
    fh.write(f"$ ansible localhost -m dflash_diagnose -a log_file={s.log.name} -o\n{r.stdout}\n")
with open(os.path.join(a.out, "fail-fa3.json"), "w") as fh:
    json.dump({"healthy": ok, "rc": rc, "args": args}, fh, indent=1)
