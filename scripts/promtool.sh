#!/usr/bin/env bash
# Print the path of a promtool (Prometheus's rule checker and rule unit-test runner), fetching it only
# when there is none: one on PATH, else .cache/prometheus/usr/bin/promtool, else Debian's `prometheus`
# package is downloaded with apt (`apt-get download`: nothing is installed or started on this machine)
# and unpacked into .cache/prometheus/. The same Prometheus (Debian 12's 2.42) runs in the lab image.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if command -v promtool >/dev/null 2>&1; then
  command -v promtool
  exit 0
fi
dest=$PWD/.cache/prometheus
if [[ -x $dest/usr/bin/promtool ]]; then
  echo "$dest/usr/bin/promtool"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "promtool: none found; fetching Debian's prometheus package into .cache/prometheus" >&2
if ! (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root prometheus >&2); then
  apt-get update -qq >&2
  (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root prometheus >&2)
fi
mkdir -p "$dest.tmp"
dpkg-deb -x "$tmp"/prometheus_*.deb "$dest.tmp"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
"$dest/usr/bin/promtool" --version >&2
echo "$dest/usr/bin/promtool"
