#!/usr/bin/env bash
# Controller environment from committed files: .venv from uv.lock (uv sync --frozen) and the
# collections (scripts/install-collections.sh). Installs uv with pip (pinned) when missing.
# Idempotent and quick when everything is present.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
UV_VERSION=0.13.9

if ! command -v uv >/dev/null 2>&1; then
  echo "uv missing: installing uv==$UV_VERSION with pip"
  python3 -m pip install --quiet "uv==$UV_VERSION" \
    || python3 -m pip install --quiet --break-system-packages "uv==$UV_VERSION"
  export PATH="$HOME/.local/bin:$PATH"
fi

uv sync --frozen --quiet
"$repo/scripts/install-collections.sh"
