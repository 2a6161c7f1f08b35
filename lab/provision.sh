#!/usr/bin/env bash
# provision.sh CONTAINER HOST: make a started lab container look like seed machine HOST
# (docs/design.md, "Lab contract"). Used by lab/labctl up and molecule/*/prepare.yml.
# One tar stream and two podman exec calls (fast even on a loaded 2-core machine); idempotent.
#   /etc/dflash-lab/capture/      <- lab/captures/HOST/ (replaced as a whole)
#   /usr/local/bin/nvidia-smi     stand-in (lab/standin-tools/)
#   <toolkit>/bin/nvcc            stand-in, for each toolkit in the capture's cuda-toolkits.json;
#                                 /usr/local/cuda and /usr/local/bin/nvcc -> the first one
#   /dev/shm/Qwen3.6-27B{,-DFlash}/config.json   (tmpfiles.d: refilled at every boot)
#   ct200: ddtree-wrapper.service, the seeds' foreign server on 0.0.0.0:30000
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
(($# == 2)) || { echo "usage: provision.sh CONTAINER HOST" >&2; exit 2; }
container="$1" host="$2"
capture="$here/captures/$host"
[[ -f "$capture/nvidia-smi-query.csv" || -f "$capture/nvidia-smi.txt" ]] \
  || { echo "provision.sh: $host: no capture folder at $capture" >&2; exit 1; }

stage="$(mktemp -d)"
chmod 0755 "$stage"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/etc/dflash-lab"
cp -r "$capture" "$stage/etc/dflash-lab/capture"
cp -r "$here/models" "$here/foreign" "$here/standin-tools" "$stage/etc/dflash-lab/"
cp "$here/provision-host.sh" "$stage/etc/dflash-lab/"

podman exec "$container" systemctl is-system-running --wait >/dev/null || {
  state="$(podman exec "$container" systemctl is-system-running || true)"
  [[ "$state" == degraded ]] || { echo "provision.sh: $container: systemd $state" >&2; exit 1; }
}
tar -C "$stage" --owner=0 --group=0 -c etc | podman exec -i "$container" \
  sh -c 'rm -rf /etc/dflash-lab/capture && tar -x --no-same-owner -C /'
podman exec "$container" bash /etc/dflash-lab/provision-host.sh "$host"
