#!/usr/bin/env bash
# Runs inside a lab container (as root) after lab/provision.sh unpacked /etc/dflash-lab/.
# provision-host.sh HOST. Idempotent.
set -euo pipefail
host="$1"
lab=/etc/dflash-lab

install -m 0755 "$lab/standin-tools/nvidia-smi" /usr/local/bin/nvidia-smi

# Stand-in nvcc in each toolkit of the capture; the first one is /usr/local/cuda and on PATH.
python3 - "$lab/capture/cuda-toolkits.json" "$lab/standin-tools/nvcc" <<'PY'
import json, os, shutil, sys
path, nvcc = sys.argv[1], sys.argv[2]
toolkits = json.load(open(path)) if os.path.exists(path) else []
for i, t in enumerate(toolkits):
    dest = t.get("nvcc") or os.path.join(t["path"], "bin", "nvcc")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copyfile(nvcc, dest)
    os.chmod(dest, 0o755)
    if i == 0:
        for link, target in (("/usr/local/cuda", t["path"]), ("/usr/local/bin/nvcc", dest)):
            if os.path.islink(link) or os.path.exists(link):
                os.remove(link)
            os.symlink(target, link)
PY

# Config-only models under /dev/shm, as on the seed machines; tmpfs, so refilled at boot.
{
  echo "# dflash lab: models under /dev/shm as on the seed machines (written by provision-host.sh)"
  for m in Qwen3.6-27B Qwen3.6-27B-DFlash Qwen3-32B; do
    echo "C /dev/shm/$m - - - - $lab/models/$m"
  done
} >/etc/tmpfiles.d/dflash-lab-models.conf
systemd-tmpfiles --create /etc/tmpfiles.d/dflash-lab-models.conf

# Services that run on the seed machine but are not dflash-deploy's.
case "$host" in
  ct200)
    install -m 0755 "$lab/foreign/ddtree_openai_server.py" /root/ddtree_openai_server.py
    install -m 0644 "$lab/foreign/ddtree-wrapper.service" /etc/systemd/system/ddtree-wrapper.service
    systemctl daemon-reload
    systemctl enable --now --quiet ddtree-wrapper.service
    ;;
esac
echo "provisioned $host ($(hostname))"
