#!/usr/bin/env python3
"""The lab's local package indexes (PEP 503, static), served from the controller.

CI cannot reach the PyTorch index, so the production default's index path (``extra_index_urls`` with
``+cu128`` builds, uv's index strategy, local version labels) is resolved against these instead:
three static ``simple/`` trees of small wheels this script writes itself, each one a loud stand-in
(its module says so), named like the real projects so that the production spec resolves unchanged
but for its URLs:

  <dir>/pypi/simple/     PyPI-like: torch 2.11.0 (the cu130 build, no label), sglang 0.5.11 and its
                         stack, filelock 3.20.0 / 3.13.1, ...
  <dir>/whl/cu128/       PyTorch-like: torch 2.11.0+cu128 and 2.10.0+cu128, nvidia-cuda-runtime-cu12,
                         and old mirrored filelock 3.13.1 / typing-extensions 4.12.2 / numpy 2.1.2
                         (as the PyTorch index mirrors them: first-index takes those)
  <dir>/whl/cu130/       torch 2.11.0+cu130

torch's wheels carry an incompressible payload (TORCH_PAYLOAD bytes) so that bytes saved by a
computed overlay show. Served by a small HTTP server that lab containers reach over the podman
network (``http://host.containers.internal:<port>/...``).

usage: lab/pyindex.py build DIR
       lab/pyindex.py serve DIR --state STATEDIR [--bind 0.0.0.0] [--port 0]   (detaches; prints the port)
       lab/pyindex.py stop --state STATEDIR
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import html
import http.server
import os
import random
import signal
import subprocess
import sys
import time

import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils"))

from ansible.module_utils.dflash_layers.pep508 import canonical_name
from ansible.module_utils.dflash_layers.wheels import write_wheel

TORCH_PAYLOAD = 2 * 1024 * 1024
BANNER = "dflash-deploy lab index: a STAND-IN wheel, not the real {name} (lab/pyindex.py)"

# (index, name, version, requires, payload bytes)
PROJECTS = [
    ("pypi", "torch", "2.11.0", ["nvidia-cuda-runtime==13.0.96", "filelock", "typing-extensions>=4.10"],
     TORCH_PAYLOAD),
    ("pypi", "torch", "2.10.0", ["nvidia-cuda-runtime-cu12==12.8.90", "filelock", "typing-extensions>=4.10"],
     TORCH_PAYLOAD),
    ("pypi", "nvidia-cuda-runtime", "13.0.96", [], 256 * 1024),
    ("pypi", "nvidia-cuda-runtime-cu12", "12.8.90", [], 256 * 1024),
    ("pypi", "filelock", "3.20.0", [], 0),
    ("pypi", "filelock", "3.13.1", [], 0),
    ("pypi", "typing-extensions", "4.15.0", [], 0),
    ("pypi", "numpy", "2.3.5", [], 64 * 1024),
    ("pypi", "numpy", "2.1.2", [], 64 * 1024),
    ("pypi", "torchaudio", "2.11.0", ["torch==2.11.0"], 0),
    ("pypi", "torchao", "0.17.0", [], 0),
    ("pypi", "sglang-kernel", "0.4.2", ["torch"], 128 * 1024),
    ("pypi", "flashinfer-python", "0.6.8.post1", ["torch", "numpy"], 0),
    ("pypi", "flashinfer-cubin", "0.6.8.post1", [], 128 * 1024),
    ("pypi", "xgrammar", "0.1.32", ["torch>=1.10", "numpy"], 0),
    ("pypi", "xgrammar", "0.1.10", ["torch>=1.10", "numpy"], 0),
    ("pypi", "pycparser", "3.12", [], 0),
    ("pypi", "cffi", "2.1.1", ["pycparser"], 0),
    ("pypi", "soundfile", "0.13.1", ["cffi>=1.0", "numpy"], 0),
    ("pypi", "tokenizers", "0.22.2", [], 0),
    ("pypi", "transformers", "5.6.0", ["numpy>=1.17", "filelock", "tokenizers<=0.23.0,>=0.22.0"], 0),
    ("pypi", "sglang", "0.5.11", ["torch==2.11.0", "torchaudio==2.11.0", "torchao==0.17.0", "sglang-kernel==0.4.2",
                                  "flashinfer-python==0.6.8.post1", "flashinfer-cubin==0.6.8.post1",
                                  "xgrammar==0.1.32", "soundfile==0.13.1", "transformers==5.6.0", "numpy",
                                  "filelock>=3.16"], 0),
    ("cu128", "torch", "2.11.0+cu128", ["nvidia-cuda-runtime-cu12==12.8.90", "filelock", "typing-extensions>=4.10"],
     TORCH_PAYLOAD),
    ("cu128", "torch", "2.10.0+cu128", ["nvidia-cuda-runtime-cu12==12.8.90", "filelock", "typing-extensions>=4.10"],
     TORCH_PAYLOAD),
    ("cu128", "nvidia-cuda-runtime-cu12", "12.8.90", [], 256 * 1024),
    ("cu128", "filelock", "3.13.1", [], 0),
    ("cu128", "typing-extensions", "4.12.2", [], 0),
    ("cu128", "numpy", "2.1.2", [], 64 * 1024),
    ("cu130", "torch", "2.11.0+cu130", ["nvidia-cuda-runtime==13.0.96", "filelock", "typing-extensions>=4.10"],
     TORCH_PAYLOAD),
]
INDEXES = {"pypi": "pypi/simple", "cu128": "whl/cu128", "cu130": "whl/cu130"}


def _payload(name, version, size):
    """Incompressible, reproducible bytes (the same for the same project and version)."""
    seed = int.from_bytes(hashlib.sha256(f"{name}=={version}".encode()).digest()[:8], "big")
    return random.Random(seed).randbytes(size)


def build(directory):
    """Write every wheel and the three simple/ trees under ``directory``. Returns {index: [files]}."""
    made = {}
    for index, name, version, requires, payload in PROJECTS:
        mod = name.replace("-", "_")
        files = {f"{mod}/__init__.py": f"__version__ = {version!r}\nLAB_STANDIN = {BANNER.format(name=name)!r}\n"}
        if payload:
            files[f"{mod}/_payload.bin"] = _payload(name, version, payload)
        files_dir = os.path.join(directory, INDEXES[index], "files")
        os.makedirs(files_dir, exist_ok=True)
        filename = write_wheel(files_dir, name, version, files, requires, generator="dflash-deploy lab/pyindex.py")
        made.setdefault(index, {}).setdefault(canonical_name(name), []).append(filename)
    for index, projects in made.items():
        root = os.path.join(directory, INDEXES[index])
        links = []
        for project, filenames in sorted(projects.items()):
            os.makedirs(os.path.join(root, project), exist_ok=True)
            anchors = []
            for fn in sorted(filenames):
                with open(os.path.join(root, "files", fn), "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
                href = html.escape(f"../files/{fn}#sha256={digest}")
                anchors.append(f'<a href="{href}">{html.escape(fn)}</a><br/>')
            _write(os.path.join(root, project, "index.html"), project, anchors)
            links.append(f'<a href="{project}/">{project}</a><br/>')
        _write(os.path.join(root, "index.html"), "simple", links)
    return {index: sorted(f for fs in projects.values() for f in fs) for index, projects in made.items()}


def _write(path, title, lines):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\">"
                 f"<title>{title}</title></head><body>\n" + "\n".join(lines) + "\n</body></html>\n")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _serve_foreground(directory, bind, port, portfile):
    handler = functools.partial(_Quiet, directory=directory)
    with http.server.ThreadingHTTPServer((bind, port), handler) as server:
        with open(portfile + ".part", "w", encoding="utf-8") as fh:
            fh.write(str(server.server_address[1]))
        os.rename(portfile + ".part", portfile)
        server.serve_forever()


def serve(directory, state, bind="0.0.0.0", port=0, timeout=20):
    """Start the server detached (its own session); returns the port. Writes STATE/pid, STATE/port."""
    os.makedirs(state, exist_ok=True)
    stop(state)
    portfile = os.path.join(state, "port")
    with open(os.path.join(state, "server.log"), "ab") as log:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_serve", directory, "--bind", bind,
                                 "--port", str(port), "--portfile", portfile],
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(os.path.join(state, "pid"), "w", encoding="utf-8") as fh:
        fh.write(str(proc.pid))
    deadline = time.monotonic() + timeout
    while not os.path.exists(portfile):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"pyindex: the server did not start (see {state}/server.log)")
        time.sleep(0.05)
    with open(portfile, encoding="utf-8") as fh:
        return int(fh.read())


def stop(state):
    """Stop the server this state dir names (its pid), if it runs. Returns True when one was stopped."""
    pidfile = os.path.join(state, "pid")
    try:
        with open(pidfile, encoding="utf-8") as fh:
            pid = int(fh.read())
    except (OSError, ValueError):
        return False
    for path in (pidfile, os.path.join(state, "port")):
        if os.path.exists(path):
            os.unlink(path)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir")
    s = sub.add_parser("serve")
    s.add_argument("dir")
    s.add_argument("--state", required=True)
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=int, default=0)
    t = sub.add_parser("stop")
    t.add_argument("--state", required=True)
    f = sub.add_parser("_serve")
    f.add_argument("dir")
    f.add_argument("--bind", default="0.0.0.0")
    f.add_argument("--port", type=int, default=0)
    f.add_argument("--portfile", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "build":
        made = build(a.dir)
        print(" ".join(f"{k}: {len(v)} wheels" for k, v in sorted(made.items())))
    elif a.cmd == "serve":
        print(serve(os.path.abspath(a.dir), a.state, a.bind, a.port))
    elif a.cmd == "stop":
        print("stopped" if stop(a.state) else "not running")
    else:
        _serve_foreground(a.dir, a.bind, a.port, a.portfile)


if __name__ == "__main__":
    main()
