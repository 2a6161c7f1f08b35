#!/usr/bin/env bash
# Install the Ansible collections the toolkit needs, offline from Galaxy: take them out of the
# `ansible` community package's wheel on PyPI (pinned version + sha256) and unzip only the
# collections listed below into .ansible/collections/ (ansible.cfg: collections_path).
#
# Needed: containers.podman (the lab inventory's connection plugin and the Molecule podman
# driver). Everything else uses ansible.builtin.
# Idempotent: nothing is downloaded or written when the installed versions match.
# The wheel is cached in .cache/wheels/ (gitignored).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# ansible 12.x pairs with ansible-core 2.19 (what uv.lock pins).
ANSIBLE_VERSION=12.3.0
ANSIBLE_WHEEL=ansible-${ANSIBLE_VERSION}-py3-none-any.whl
ANSIBLE_SHA256=cd156f82fa87f7a899212b0efa9f7ca3a24d609212de9f78428a572eb01e5414
ANSIBLE_URL=https://files.pythonhosted.org/packages/dc/91/ed9ff629465050d4bdbc9da33d348156736b8778733f97a3627daae4f9ce/${ANSIBLE_WHEEL}
COLLECTIONS=(containers/podman)

dest="$repo/.ansible/collections"
cache="$repo/.cache/wheels"
stamp="$dest/.installed-from"
want="ansible==${ANSIBLE_VERSION} sha256=${ANSIBLE_SHA256} ${COLLECTIONS[*]}"

installed_ok() {
  [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] || return 1
  local c
  for c in "${COLLECTIONS[@]}"; do
    [[ -f "$dest/ansible_collections/$c/MANIFEST.json" ]] || return 1
  done
}

if installed_ok; then
  echo "collections present (${COLLECTIONS[*]} from ansible ${ANSIBLE_VERSION})"
  exit 0
fi

mkdir -p "$cache" "$dest"
wheel="$cache/$ANSIBLE_WHEEL"
sha_ok() { echo "$ANSIBLE_SHA256  $wheel" | sha256sum --check --status; }
if [[ ! -f "$wheel" ]] || ! sha_ok; then
  echo "downloading $ANSIBLE_WHEEL (PyPI)"
  curl -fsSL --retry 3 -o "$wheel.part" "$ANSIBLE_URL"
  mv "$wheel.part" "$wheel"
fi
if ! sha_ok; then
  echo "install-collections.sh: sha256 mismatch for $wheel (want $ANSIBLE_SHA256)" >&2
  rm -f "$wheel"
  exit 1
fi

python3 - "$wheel" "$dest" "${COLLECTIONS[@]}" <<'PY'
import shutil, sys, zipfile
from pathlib import Path

wheel, dest, *collections = sys.argv[1:]
dest = Path(dest)
with zipfile.ZipFile(wheel) as zf:
    for coll in collections:
        prefix = f"ansible_collections/{coll}/"
        target = dest / prefix
        tmp = dest / (prefix.rstrip("/") + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        members = [m for m in zf.infolist() if m.filename.startswith(prefix) and not m.is_dir()]
        if not members:
            sys.exit(f"{coll} not found in {wheel}")
        for m in members:
            rel = m.filename[len(prefix):]
            out = tmp / rel
            if ".." in Path(rel).parts:
                sys.exit(f"refusing path {m.filename}")
            out.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(m) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        print(f"installed {coll} ({len(members)} files) into {dest}")
PY
echo "$want" >"$stamp"
