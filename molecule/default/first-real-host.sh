#!/usr/bin/env bash
# README.md's "Your first real host", step by step, against a lab container treated as a real host:
#   molecule/default/first-real-host.sh CONTAINER      (molecule/default/verify.d/zz-first-real-host.yml runs it
#                                                       on ct129's container after the scenario's converge)
# 1. inventory: a copy of inventory/production; as shipped, preflight refuses every placeholder in words;
#    then filled in for the container: the host, the login user, the instance (GPU 1, port 30001: GPU 0 and
#    port 30000 serve the scenario's own instance), the model and draft commits of the hub (the lab's stand-in
#    hub, lab/hub_standin.py, at HF_ENDPOINT: never the real hub), no router or Prometheus host.
#    What makes the copy a lab one, and only that: the podman connection instead of ssh, and the lab overlay
#    (inventory/lab/group_vars: small layers, the stand-in server, the capture's driver file).
# 2. vault: the key in group_vars/all/vault.yml, encrypted with ansible-vault (the test's password file).
# 3. preflight (--tags preflight), 4. deploy, 5. check (--tags smoke, curl with the key), 6. roll back.
# Prints each step's time; exits non-zero at the first step that does not do what the README says.
set -euo pipefail

container="${1:?usage: first-real-host.sh CONTAINER}"
# the instance's GPU and port (free on ct129 beside the scenario's own instance)
gpu="${FIRST_HOST_GPU:-1}"
port="${FIRST_HOST_PORT:-30001}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
export ANSIBLE_CONFIG="$repo/ansible.cfg" CONTAINERS_CONF="$repo/lab/containers.conf" ANSIBLE_NOCOLOR=1
py="$repo/.venv/bin/python"
play() { "$repo/.venv/bin/ansible-playbook" "$@"; }
work="$(mktemp -d)"
hub_pid=""
cleanup() { [[ -n "$hub_pid" ]] && kill "$hub_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
step_start=$SECONDS
step() { echo "== first real host: $* ($((SECONDS - step_start))s so far)"; }
fail() { echo "FAILED: $*" >&2; exit 1; }
pw="$repo/tests/fixtures/inventory/vault-password.txt"

# the hub: the lab's Qwen3.6-27B and its DFlash draft (configs from lab/models), a small weights file each
for repo_id in Qwen/Qwen3.6-27B z-lab/Qwen3.6-27B-DFlash; do
  mkdir -p "$work/hub/$repo_id"
  cp "lab/models/${repo_id#*/}/config.json" "$work/hub/$repo_id/"
  head -c 1048576 /dev/urandom >"$work/hub/$repo_id/model.safetensors"
done
"$py" lab/hub_standin.py --root "$work/hub" --port-file "$work/endpoint" >"$work/hub.log" 2>&1 &
hub_pid=$!
for _ in $(seq 50); do [[ -s "$work/endpoint" ]] && break; sleep 0.2; done
[[ -s "$work/endpoint" ]] || fail "the hub stand-in did not start: $(cat "$work/hub.log")"
export HF_ENDPOINT="$(cat "$work/endpoint")"
commit() { awk -v r="$1" '$1 == r {print $2}' "$work/hub.log"; }

step "1. inventory: cp -r inventory/production inventory/mine"
mine="$work/mine"
cp -r inventory/production "$mine"
if play -i "$mine" deploy.yml -l gpu-node-01.example.invalid --tags preflight >"$work/shipped.log" 2>&1; then
  fail "preflight accepted the inventory as shipped"
fi
flat="$(tr -s ' \n' ' ' <"$work/shipped.log")"
for words in "fill in the host: gpu-node-01.example.invalid" "fill in dflash_routers: router-01.example.invalid" \
             "fill in dflash_monitoring: prometheus-01.example.invalid" "fill in ansible_user:" \
             "fill in dflash_instances[dflash-gpu0].model_source.revision:" \
             "fill in dflash_instances[dflash-gpu0].draft_source.revision:" \
             "fill in dflash_instances[dflash-gpu0].api_key: vault_dflash_api_key"; do
  grep -qF "$words" <<<"$flat" || fail "as shipped, preflight does not say: $words"
done
echo "as shipped: every placeholder refused in words, nothing reached"

# filled in as README.md says (a real host: its name and user; here the container, over podman)
"$py" - "$mine" "$container" "$(commit Qwen/Qwen3.6-27B)" "$(commit z-lab/Qwen3.6-27B-DFlash)" "$gpu" "$port" <<'EOF'
import os, sys, yaml
mine, container, target_commit, draft_commit, gpu, port = sys.argv[1:]
hosts = yaml.safe_load(open(f"{mine}/hosts.yml"))
children = hosts["all"]["children"]
children["dflash_hosts"]["hosts"] = {"ct129": {"ansible_host": container}}
children["dflash_routers"]["hosts"] = {}
children["dflash_monitoring"]["hosts"] = {}
yaml.safe_dump(hosts, open(f"{mine}/hosts.yml", "w"), sort_keys=False)
os.remove(f"{mine}/host_vars/gpu-node-02.example.invalid.yml")
hv = yaml.safe_load(open(f"{mine}/host_vars/gpu-node-01.example.invalid.yml"))
os.remove(f"{mine}/host_vars/gpu-node-01.example.invalid.yml")
inst = hv["dflash_instances"][0]
inst.update(name="first-host", gpus=[int(gpu)], port=int(port))
inst["model_source"]["revision"] = target_commit
inst["draft_source"]["revision"] = draft_commit
inst.pop("reasoning_parser")  # the lab's stand-in server does not think first
hv["dflash_instances"] = [inst]
yaml.safe_dump(hv, open(f"{mine}/host_vars/ct129.yml", "w"), sort_keys=False)
main = open(f"{mine}/group_vars/all/main.yml").read()
main = main.replace("ansible_connection: ssh", "ansible_connection: dflash_podman  # the lab container")
main = "\n".join("ansible_user: root" if line.startswith("ansible_user:") else line for line in main.splitlines())
open(f"{mine}/group_vars/all/main.yml", "w").write(main + "\n")
lab = yaml.safe_load(open("inventory/lab/group_vars/all/main.yml"))
lab = {k: v for k, v in lab.items() if k not in ("ansible_connection", "ansible_python_interpreter")}
yaml.safe_dump(lab, open(f"{mine}/group_vars/all/lab.yml", "w"))
EOF
cp inventory/lab/group_vars/all/layers.yml "$mine/group_vars/all/lab-layers.yml"
cp inventory/lab/group_vars/all/standin.yml "$mine/group_vars/all/lab-standin.yml"

step "2. vault: the key in group_vars/all/vault.yml, encrypted"
printf -- '---\nvault_dflash_api_key: sk-dflash-first-host-%s\n' "$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" \
  >"$mine/group_vars/all/vault.yml"
"$repo/.venv/bin/ansible-vault" encrypt --vault-password-file "$pw" "$mine/group_vars/all/vault.yml"
head -1 "$mine/group_vars/all/vault.yml" | grep -q '^\$ANSIBLE_VAULT' || fail "vault.yml is not encrypted"
key="$("$repo/.venv/bin/ansible-vault" view --vault-password-file "$pw" "$mine/group_vars/all/vault.yml" \
       | awk '/vault_dflash_api_key/ {print $2}')"

step "3. preflight: deploy.yml -l ct129 --tags preflight"
play -i "$mine" deploy.yml -l ct129 --tags preflight --vault-password-file "$pw" >"$work/preflight.log" 2>&1 \
  || { tail -40 "$work/preflight.log"; fail "preflight"; }
grep -q "prerequisites met" "$work/preflight.log" || fail "preflight did not check the prerequisites"
before="$(podman exec "$container" readlink /opt/dflash/current)"

step "4. deploy: deploy.yml -l ct129"
play -i "$mine" deploy.yml -l ct129 --vault-password-file "$pw" -e dflash_models_progress_interval=5 \
  >"$work/deploy.log" 2>&1 || { tail -60 "$work/deploy.log"; fail "deploy"; }
grep -q "model hub Qwen/Qwen3.6-27B@" "$work/deploy.log" || fail "the model was not fetched from the hub"
podman exec "$container" sh -c 'ls -d /opt/dflash/models/Qwen3.6-27B-*/ /opt/dflash/models/Qwen3.6-27B-DFlash-*/' \
  || fail "the model and draft are not in the host's store"
after="$(podman exec "$container" readlink /opt/dflash/current)"
[[ "$after" != "$before" ]] || fail "deploy made no new release"
if grep -qF "$key" "$work/deploy.log"; then fail "the API key appears in the play output"; fi

step "5. check: deploy.yml --tags smoke, and a request with the key"
play -i "$mine" deploy.yml -l ct129 --tags smoke --vault-password-file "$pw" >"$work/smoke.log" 2>&1 \
  || { tail -40 "$work/smoke.log"; fail "smoke"; }
podman exec "$container" curl -sf "http://127.0.0.1:$port/v1/models" -H "Authorization: Bearer $key" \
  | grep -q '/opt/dflash/models/Qwen3.6-27B-' || fail "the instance does not serve the stored model with the key"
if podman exec "$container" curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null; then
  fail "the instance answers without the key"
fi

step "6. roll back: rollback.yml -l ct129"
play -i "$mine" rollback.yml -l ct129 --vault-password-file "$pw" >"$work/rollback.log" 2>&1 \
  || { tail -40 "$work/rollback.log"; fail "rollback"; }
[[ "$(podman exec "$container" readlink /opt/dflash/current)" == "$before" ]] || fail "rollback did not put $before back"
step "done: preflight, deploy, check and roll back as README.md says"
