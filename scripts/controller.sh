#!/usr/bin/env bash
# Controller environment from committed files, in one of two profiles:
#   scripts/controller.sh           development (`make controller`): .venv from uv.lock with the dependency
#                                   groups (lint, tests, Molecule, triton), CPU torch, the collections
#   scripts/controller.sh deploy    deploy only: .venv from uv.lock without the groups (ansible-core and what
#                                   the toolkit's plugins and controller-side modules import), nothing else
# Installs uv with pip (pinned) when missing.
# CPU torch (the DDTree unit tests) is not in the lock: it is installed into .venv with pip from
# whatever index or find-links pip is configured with (`pip config list`, PIP_INDEX_URL,
# PIP_FIND_LINKS); DFLASH_TORCH changes the requirement, DFLASH_TORCH=none skips it. Where no
# source has it, the tests that need torch skip and say why.
# Idempotent and quick when everything is present.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
UV_VERSION=0.13.9

# A python3 with pip that is not the project's own venv: `make` puts .venv/bin first on PATH, and the
# uv-made venv has no pip, so a plain `python3 -m pip` fails there ("No module named pip").
host_python() {
  local p
  for p in $(type -ap python3) /usr/bin/python3; do
    # by path, not by file: the venv's python3 is a link to the very interpreter wanted here
    [ -x "$p" ] || continue
    case "$p" in "$repo/.venv/"*) continue ;; esac
    "$p" -m pip --version >/dev/null 2>&1 && { echo "$p"; return 0; }
  done
  echo "no python3 with pip outside $repo/.venv on PATH" >&2
  return 1
}

if ! command -v uv >/dev/null 2>&1; then
  echo "uv missing: installing uv==$UV_VERSION with pip"
  pip_py="$(host_python)"
  "$pip_py" -m pip install --quiet "uv==$UV_VERSION" \
    || "$pip_py" -m pip install --quiet --break-system-packages "uv==$UV_VERSION"
  export PATH="$HOME/.local/bin:$PATH"
fi

# Bytecode for the venv and the toolkit's controller-side code, written once here. Where PYTHONDONTWRITEBYTECODE is
# set (CI images often set it) Python would otherwise compile every module it imports, each time: ansible-playbook
# forks a worker for each task and host, and each worker imports the filter plugins (and what they import) afresh.
# Measured on the lab deploy of one host with nothing to change: 35 s of controller CPU without, 15 s with
# (py-spy: half the time was compiling). An edited file is recompiled in memory until this runs again, never stale.
compile_bytecode() {
  local site
  site="$("$repo/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # rc 1 when a file does not compile (a few packages ship Python 2 examples): nothing to do about those
  "$repo/.venv/bin/python" -m compileall -q -j 0 "$site" "$repo/module_utils" "$repo/filter_plugins" \
    "$repo/action_plugins" "$repo/callback_plugins" "$repo/lab/plugins" "$repo/.ansible/collections" >/dev/null 2>&1 || true
}

profile="${1:-dev}"
case "$profile" in
  deploy)
    # the project's dependencies only: no test tooling, no torch, no triton, no collections (the production
    # roles use ansible.builtin only; containers.podman is the lab's)
    uv sync --frozen --no-dev --quiet
    compile_bytecode
    echo "controller (deploy only): $repo/.venv; run: source .venv/bin/activate; ansible-playbook ..."
    exit 0 ;;
  dev) ;;
  *) echo "usage: scripts/controller.sh [dev|deploy]" >&2; exit 2 ;;
esac

# --inexact: keep the torch installed below, which the lock does not list
uv sync --frozen --inexact --quiet

torch_req="${DFLASH_TORCH:-torch==2.13.0+cpu}"
if [ "$torch_req" != none ] && ! "$repo/.venv/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "CPU torch for the DDTree tests: pip install '$torch_req' into .venv (pip's configured sources)"
  # tried twice: a source can fail once (timeouts); one that truly lacks it fails both
  pip_py="$(host_python)" || pip_py=python3
  if ! "$pip_py" -m pip --python "$repo/.venv/bin/python" install --quiet "$torch_req" \
     && ! { echo "  retrying once"; "$pip_py" -m pip --python "$repo/.venv/bin/python" install --quiet "$torch_req"; }; then
    echo "  not installed (no configured index or find-links has '$torch_req'): the DDTree tests will skip" >&2
  fi
fi
"$repo/scripts/install-collections.sh"
compile_bytecode
