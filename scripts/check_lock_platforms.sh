#!/usr/bin/env bash
# Is uv.lock installable on the controllers users have? For each platform (Linux and macOS, x86_64 and
# arm64), each Python ansible-core supports on a controller and each install profile (deploy: the
# project's dependencies only; dev: with the dependency groups), export the lock's pins and let uv
# resolve them for that target from wheels only (`uv pip compile --python-platform --python-version
# --only-binary :all:`): a pin without a wheel for the target, or a marker that leaves a needed
# package out, fails here. Needs PyPI (metadata only, nothing is installed). Prints one line a target.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
platforms=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin)
pythons=(3.11 3.12 3.13)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
uv export --frozen --no-hashes --no-dev --no-emit-project -q -o "$tmp/deploy.txt"
uv export --frozen --no-hashes --no-emit-project -q -o "$tmp/dev.txt"
failed=0
for profile in deploy dev; do
  for plat in "${platforms[@]}"; do
    for py in "${pythons[@]}"; do
      if out="$(uv pip compile "$tmp/$profile.txt" --python-platform "$plat" --python-version "$py" \
                --only-binary :all: --no-header --no-annotate -q 2>&1)"; then
        echo "ok    $profile $plat python$py: $(grep -c '==' <<<"$out") packages"
      else
        failed=1
        echo "FAIL  $profile $plat python$py: $(tail -3 <<<"$out" | tr '\n' ' ')"
      fi
    done
  done
done
exit "$failed"
