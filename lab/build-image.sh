#!/usr/bin/env bash
# Build the dflash lab image (Debian bookworm, systemd as PID 1) from Debian packages and
# import it into podman as dflash-lab:<recipe-hash> + dflash-lab:latest.
# Skips the build when an image with the same recipe hash exists (the recipe is this file).
#
# Env: LAB_MIRROR (default http://deb.debian.org/debian), LAB_IMAGE (default dflash-lab),
#      LAB_FORCE=1 to rebuild anyway.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
image="${LAB_IMAGE:-dflash-lab}"
mirror="${LAB_MIRROR:-http://deb.debian.org/debian}"

# Packages on top of debootstrap's minbase, and why each one is there:
packages=(
  python3            # Ansible's remote interpreter; the lab stand-ins are python scripts
  python3-venv       # dflash_layers builds venvs with `python3 -m venv` (ensurepip)
  systemd systemd-sysv dbus  # PID 1, systemctl/journalctl, units dflash-<instance>.service
  sudo               # `become: true` in deploy.yml, as on a real host
  acl                # setfacl: Ansible's become_user to the unprivileged `sglang` user
  iproute2           # ss: which process listens on a port (port-conflict checks)
  procps             # ps/pgrep/kill: process checks, like on a real host
  ca-certificates    # https to package registries from the host (wheel downloads)
  curl               # smoke checks by hand, like the seeds' curl against /v1/chat/completions
  patch              # the patched-tree stage applies files/patches/sglang/<version>/series
  unzip xz-utils     # unarchive of wheels (.whl = zip) and .tar.xz bundles
  prometheus         # molecule/fleet: a real Prometheus scrapes the stand-ins and the router (off by default)
)

recipe_hash="$(sha256sum "$here/build-image.sh" | cut -c1-12)"
tag="$image:$recipe_hash"

if [[ "${LAB_FORCE:-0}" != 1 ]] && podman image exists "$tag"; then
  podman tag "$tag" "$image:latest"
  echo "lab image $tag exists (recipe unchanged); tagged $image:latest"
  exit 0
fi

if [[ $EUID -ne 0 ]]; then
  echo "build-image.sh: debootstrap needs root" >&2
  exit 1
fi
command -v debootstrap >/dev/null || { echo "build-image.sh: debootstrap missing (apt-get install debootstrap)" >&2; exit 1; }

root="$(mktemp -d /var/tmp/dflash-lab-root.XXXXXX)"
cleanup() { rm -rf --one-file-system "$root"; }
trap cleanup EXIT

include="$(IFS=,; echo "${packages[*]}")"
echo "debootstrap bookworm ($mirror) with: $include"
debootstrap --variant=minbase --include="$include" bookworm "$root" "$mirror"

# --- tidy ---------------------------------------------------------------------------------
# Empty machine-id: systemd makes a fresh one per container at boot.
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
# No consoles or getty in a container; nothing to wait for at boot.
for unit in getty@tty1.service console-getty.service getty.target \
            systemd-remount-fs.service dev-hugepages.mount sys-fs-fuse-connections.mount \
            systemd-logind.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
ln -sf /lib/systemd/system/multi-user.target "$root/etc/systemd/system/default.target"
# Prometheus is installed for molecule/fleet, not started: only the host that gets a scrape config runs it.
# Its legacy graph page's time-zone tables (libjs-moment-timezone/data, 210 MB) go: the API and the
# built-in UI do not use them.
rm -f "$root/etc/systemd/system/multi-user.target.wants/prometheus.service"
rm -rf "$root/usr/share/javascript/moment-timezone/data"
# apt sources for the lab host (same suite as the build).
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
SOURCES
# Smaller image: no package cache, lists, docs or man pages.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
echo "dflash-lab $recipe_hash" >"$root/etc/dflash-lab-image"

# --- import -------------------------------------------------------------------------------
tar --numeric-owner -C "$root" -c . | podman import \
  --change 'CMD ["/sbin/init"]' \
  --change 'STOPSIGNAL SIGRTMIN+3' \
  --change 'ENV container=podman' \
  --message "dflash lab image, recipe $recipe_hash" \
  - "$tag"
podman tag "$tag" "$image:latest"
echo "built $tag (also $image:latest)"
