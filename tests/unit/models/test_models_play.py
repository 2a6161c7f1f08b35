"""roles/dflash_models through ansible-playbook on two local "hosts" (each its own prefix), against the lab's
hub stand-in with the real huggingface_hub client: a model and its draft are fetched at a pinned commit,
checked, stored content-addressed and read by the instances; the second host reuses the controller's copy
(no second download) and a second instance on a host reuses the stored copy; a draft of another model is
refused before anything is pushed; the download prints progress lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def run(tmp_path, endpoint, hosts, extra_vars=None, interval=30):
    inv = {"all": {"hosts": {h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                 "dflash_prefix": str(tmp_path / h / "opt"), "dflash_instances": insts}
                             for h, insts in hosts.items()}}}
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inv))
    play = [{"hosts": "all", "gather_facts": False, "serial": 1,
             "vars": dict({"dflash_models_cache_dir": str(tmp_path / "cache"),
                           "dflash_models_progress_interval": interval}, **(extra_vars or {})),
             "tasks": [{"name": "models", "ansible.builtin.include_role": {"name": "dflash_models"}},
                       {"name": "keep", "ansible.builtin.copy": {
                           "content": "{{ dflash_instances | to_json }}", "mode": "0644",
                           "dest": str(tmp_path / "{{ inventory_hostname }}.instances.json")}}]}]
    (tmp_path / "pb.yml").write_text(json.dumps(play))
    env = dict(os.environ, HF_ENDPOINT=endpoint, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default")
    proc = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(tmp_path / "inv.yml"),
                           str(tmp_path / "pb.yml")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    return proc, proc.stdout + proc.stderr


def instances_kept(tmp_path, host):
    return json.loads((tmp_path / f"{host}.instances.json").read_text())


def inst(name, hub_state, draft_repo="z-lab/Qwen3.6-27B-DFlash", **kw):
    return dict({"name": name, "gpus": [0], "port": 30000, "algorithm": "DFLASH",
                 "model_source": {"hub": "Qwen/Qwen3.6-27B", "revision": hub_state.repos["Qwen/Qwen3.6-27B"].commit},
                 "draft_source": {"hub": draft_repo, "revision": hub_state.repos[draft_repo].commit}}, **kw)


def test_hub_model_and_draft_stored_and_reused_by_a_second_host_and_instance(tmp_path, hub):
    endpoint, state = hub
    hosts = {"gpu-a": [inst("a0", state), inst("a1", state, port=30001)], "gpu-b": [inst("b0", state)]}
    proc, out = run(tmp_path, endpoint, hosts)
    assert proc.returncode == 0, out[-4000:]
    # each file downloaded once, by the first host; the second host and the second instance used the copies
    assert sorted(state.served) == sorted(f"{r}/{f}" for r in ("Qwen/Qwen3.6-27B", "z-lab/Qwen3.6-27B-DFlash")
                                          for f in ("config.json", "tokenizer_config.json", "model.safetensors"))
    assert "(from the controller's cache)" in out
    for host in ("gpu-a", "gpu-b"):
        models = sorted((tmp_path / host / "opt/models").iterdir())
        assert sorted(p.name.rsplit("-", 1)[0] for p in models) == ["Qwen3.6-27B", "Qwen3.6-27B-DFlash"]
        for p in models:
            marker = json.loads((p / ".dflash-model.json").read_text())
            assert p.name.endswith(marker["digest"][:12]) and marker["source"]["kind"] == "hub"
            assert {f["path"] for f in marker["files"]} == {"config.json", "tokenizer_config.json", "model.safetensors"}
    a0, a1 = instances_kept(tmp_path, "gpu-a")
    assert a0["model_path"] == a1["model_path"] and a0["model_path"].startswith(str(tmp_path / "gpu-a/opt/models/"))
    assert "model_source" not in a0 and "draft_source" not in a0
    assert a0["draft_model_path"].rsplit("/", 1)[1].startswith("Qwen3.6-27B-DFlash-")
    # the same content on both hosts: the same directory name
    assert Path(instances_kept(tmp_path, "gpu-b")[0]["model_path"]).name == Path(a0["model_path"]).name

    # a second run: nothing downloaded, nothing pushed
    before = len(state.served)
    proc, out = run(tmp_path, endpoint, hosts)
    assert proc.returncode == 0, out[-4000:]
    assert len(state.served) == before
    assert out.count("already stored in") == 4


def test_a_draft_of_another_model_is_refused_before_anything_is_pushed(tmp_path, hub):
    endpoint, state = hub
    hosts = {"gpu-a": [inst("a0", state, draft_repo="other-lab/Llama-3.1-8B-DFlash")]}
    proc, out = run(tmp_path, endpoint, hosts)
    assert proc.returncode == 2, out[-3000:]
    assert "instance a0: draft hub other-lab/Llama-3.1-8B-DFlash@" in out
    assert "vocabulary: the draft has vocab_size 128256, the target 248320" in out
    assert "hidden size: the draft reads hidden states of size 4096 (hidden_size), the target has hidden_size 5120" in out
    assert "trained on a target of 32 layers (num_target_layers), the target has 64" in out
    assert not (tmp_path / "gpu-a/opt/models").exists()


def test_download_prints_progress_lines(tmp_path, hub):
    endpoint, state = hub
    state.rate = 1024 * 1024  # 1 MiB/s: the 3 MiB weights take about 3 s
    proc, out = run(tmp_path, endpoint, {"gpu-a": [inst("a0", state)]}, interval=1)
    assert proc.returncode == 0, out[-3000:]
    lines = [ln for ln in out.splitlines() if f"downloading from {endpoint}:" in ln
             and ln.startswith("gpu-a: model hub Qwen/Qwen3.6-27B@")]
    assert len(lines) >= 2, out[-3000:]
    # what, how far, how long so far; the amount grows from line to line
    assert all(" of 3.0 MiB (" in ln and "s so far" in ln for ln in lines), lines
    assert lines[0] != lines[-1]
