"""The validation classes of #18, each against inventories a user could write: server flags against the
pinned sglang's parser (the real server-flags.txt), environment names and values, secrets, the bind
address, model paths once resolved, what the host already serves, the inventory as a whole and disk.

Every error must name host, instance and field in the inventory's words, and never show a secret."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from ansible.module_utils.dflash_common import disk as dsk
from ansible.module_utils.dflash_instances import checks as ck
from ansible.module_utils.dflash_instances import inventory as inv
from ansible.module_utils.dflash_instances import server_flags as sf
from test_instances import CT200_FACTS, good, validate

ROOT = Path(__file__).resolve().parents[3]
FLAGS, _HEAD = sf.load_flags(str(ROOT / "files/patches/sglang/0.5.11/server-flags.txt"))
KEY = "sk-test-0f1e2d3c4b5a69788796a5b4"


def v(*instances, **kw):
    return validate(list(instances), server_flags=FLAGS, **kw)


def one(errors, field):
    hits = [e for e in errors if f"field '{field}'" in e]
    assert len(hits) == 1, errors
    assert hits[0].startswith("ct200: instance 'dflash-gpu1': "), hits[0]
    return hits[0]


# --------------------------------------------------------------------------- server flags


def test_flag_list_is_the_pinned_parsers():
    assert _HEAD.startswith("launch_server flags of sglang 0.5.11")
    assert FLAGS["--api-key"] == ("api_key", "value")
    assert FLAGS["--disable-cuda-graph"][1] == "switch"
    assert "--speculative-ddtree-budget" in FLAGS  # the patch series' flags are in it


@pytest.mark.parametrize(("args", "field", "words"), [
    (["--attention-backed", "triton"], "extra_args[0]",
     ("'--attention-backed' is not a flag of sglang 0.5.11 (with the toolkit's patch series) (did you mean "
     "--attention-backend or")),
    (["--reasoning_parser", "qwen3"], "extra_args[0]", "did you mean --reasoning-parser?"),
    (["--enable-reasoning"], "extra_args[0]", "is not a flag of sglang 0.5.11"),
    (["--disable-cuda-graph", "yes"], "extra_args[1]",
     "'--disable-cuda-graph' takes no value, but 'yes' follows it"),
    (["--disable-cuda-graph=true"], "extra_args[0]", "takes no value"),
    # argparse takes a unique prefix: these are the flags of fields
    (["--context", "8192"], "extra_args[0]", "--context-length is set from the field 'context_length'"),
    (["--po", "30009"], "extra_args[0]", "--port is set from the field 'port'"),
    (["--speculative-draft", "x"], "extra_args[0]", "'--speculative-draft' is an ambiguous abbreviation"),
    (["--cuda-graph-max-bs"], "extra_args[0]", "'--cuda-graph-max-bs' needs a value"),
    (["--cuda-graph-max-bs", "--disable-radix-cache"], "extra_args[0]", "needs a value"),
    (["triton"], "extra_args[0]", "'triton' is not a flag and follows no flag that takes a value"),
    (["-h"], "extra_args[0]", "is not a flag of sglang"),
    (["--model-pa", "/other"], "extra_args[0]", "--model-path is set from the field 'model_path'"),
    (["--host", "0.0.0.0"], "extra_args[0]", "--host is set from the field 'host'"),
])
def test_extra_args_against_the_parser(args, field, words):
    assert words in one(v(good(extra_args=args)), field)


def test_good_extra_args_pass_including_abbreviations_argparse_takes():
    assert v(good(extra_args=["--cuda-graph-max-bs", "8", "--disable-radix-cache", "--grammar-backend=none",
                              "--chunked-prefill", "4096", "--random-seed", "-1"])) == []


def test_api_key_in_extra_args_points_to_the_field_and_never_shows_the_key():
    errs = v(good(extra_args=["--api-key", KEY]))
    msg = one(errs, "extra_args[0]")
    assert "set from the field 'api_key'" in msg and "out of the command line" in msg
    assert not any(KEY in e for e in errs)


@pytest.mark.parametrize(("pins", "field", "words"), [
    ({"--enable-metrics": "yes"}, "pin_flags.--enable-metrics", "takes no value: pin it as true"),
    ({"--attention-backend": True}, "pin_flags.--attention-backend", "needs a value"),
    ({"--atention-backend": "triton"}, "pin_flags.--atention-backend", "did you mean --attention-backend or"),
    ({"--tp-size": 2}, "pin_flags.--tp-size", "--tp-size is set from the field 'tp'"),
    ({"--admin-api-key": "x"}, "pin_flags.--admin-api-key", "set from the field 'admin_api_key'"),
])
def test_pin_flags_against_the_parser(pins, field, words):
    assert words in one(v(good(pin_flags=pins)), field)


def test_without_a_flag_list_only_the_toolkit_flags_are_refused():
    assert validate([good(extra_args=["--anything", "x"])]) == []
    assert "set from the field 'port'" in one(validate([good(extra_args=["--port", "1"])]), "extra_args[0]")


def test_control_characters_in_args_and_pins():
    errs = v(good(extra_args=["--served-model-name", "a\x1bb"], pin_flags={"--chat-template": "x\x07"}))
    assert "U+001B at position 1" in one(errs, "extra_args[1]")
    assert "U+0007" in one(errs, "pin_flags.--chat-template")


# --------------------------------------------------------------------------- environment


@pytest.mark.parametrize(("name", "words"), [
    ("CUDA_VISIBLE_DEVICES", "derived from the field 'gpus'"),
    ("DFLASH_ARGS", "the server flags the toolkit renders"),
    ("DFLASH_API_KEY", "set from the field 'api_key'"),
    ("PYTHONPATH", "the patched sglang tree"),
    ("HOME", "the instance's cache directory"),
])
def test_env_names_the_toolkit_sets(name, words):
    assert words in one(v(good(env={name: "x"})), f"env.{name}")


@pytest.mark.parametrize(("value", "shown"), [("a\nb", "U+000A at position 1"), ("tab\there", "U+0009"),
                                              ("\x00", "U+0000"), ("esc\x1b[31m", "U+001B")])
def test_env_values_with_control_characters(value, shown):
    assert shown in one(v(good(env={"NCCL_DEBUG": value})), "env.NCCL_DEBUG")


def test_env_value_of_a_credential_is_never_shown():
    errs = v(good(env={"HF_TOKEN": "hf_abc\ndef"}))
    assert "control character" in one(errs, "env.HF_TOKEN") and not any("hf_abc" in e for e in errs)


def test_env_names_and_shapes():
    errs = v(good(env={"9BAD": "1", "OK_NAME": ["a"], "FINE": "value with spaces", "DFLASH_STANDIN_FAULT": "slow"}))
    assert "'9BAD' is not a valid environment variable name" in one(errs, "env")
    assert "must be a single string, got a list" in one(errs, "env.OK_NAME")
    assert len(errs) == 2


# --------------------------------------------------------------------------- secrets and bind address


@pytest.mark.parametrize(("value", "words"), [
    (True, "must be a string (from ansible-vault or a lookup), got a bool"),
    ("", "is empty"),
    (f"{KEY} ", "contains whitespace or a control character (the key is not shown here)"),
    ({"k": 1}, "got a dict"),
])
def test_api_key_shapes(value, words):
    errs = v(good(api_key=value))
    assert words in one(errs, "api_key")
    assert not any(KEY in e for e in errs)


def test_api_key_and_admin_key_are_fields():
    assert v(good(api_key=KEY, admin_api_key="admin-" + KEY)) == []


@pytest.mark.parametrize(("host", "ok"), [("127.0.0.1", True), ("0.0.0.0", True), ("::1", True), ("[::]", True),
                                          ("gpu-node-01.example.invalid", True), ("10.1.2.200", True),
                                          ("10.1.2", False), ("host name", False), ("", False), (8080, False),
                                          ("-bad-", False)])
def test_bind_address(host, ok):
    errs = v(good(host=host))
    assert (errs == []) == ok, errs
    if not ok:
        one(errs, "host")


def test_wide_bind_without_a_key_is_a_warning_not_an_error():
    assert ck.bind_warning("a", "0.0.0.0", 30001, False).startswith(
        "instance 'a' listens on 0.0.0.0:30001 without an api_key")
    assert ck.bind_warning("a", "0.0.0.0", 30001, True) is None
    assert ck.bind_warning("a", "127.0.0.1", 30001, False) is None
    assert ck.bind_warning("a", "localhost", 30001, False) is None
    assert ck.bind_warning("a", "10.1.2.200", 30001, False)


# --------------------------------------------------------------------------- model paths, resolved


@pytest.mark.parametrize(("path", "real", "words"), [
    ("/dev/shm/../../root/models/q", None, "(it resolves to /root/models/q) is under /home, /root or /run/user"),
    ("/data/../etc/ssl", None, "(it resolves to /etc/ssl) is in /etc, a system directory"),
    ("/dev/shm/link", "/home/me/models/q", "resolves to /home/me/models/q through a symlink on the host"),
    ("/srv/m", "/proc/1", "is in /proc, a system directory"),
    ("/dev/sda", None, "is in /dev, a system directory"),
    ("/dev/shm", None, "/dev/shm is /dev/shm itself, a directory many things share: a model needs a directory of"),
    # the home directories themselves, however spelt (the issue's /dev/shm/../../root), and shared roots
    ("/dev/shm/../../root", None, ("(it resolves to /root) is the home directory of root: a model needs a directory "
                                  "of its own, outside home directories")),
    ("/dev/shm/../../home/", None, "(it resolves to /home) is /home, where the users' directories live"),
    ("/data/models", "/root", "(it resolves to /root through a symlink on the host) is the home directory of root"),
    ("/run/user", None, "is /run/user, where the users' directories live"),
    ("/srv/./", None, "(it resolves to /srv) is /srv itself, a directory many things share"),
    ("/usr/local", None, "is /usr/local itself, a directory many things share"),
    ("/opt/dflash/current", None, "is in /opt/dflash, the toolkit's own directory"),
    ("/srv/../", None, "is the root directory"),
])
def test_model_paths_resolved(path, real, words):
    facts = {**CT200_FACTS, "paths": {**CT200_FACTS["paths"],
                                      path: {"exists": True, "isdir": True, "tmpfs": False, "realpath": real}}}
    errs = validate([good(model_path=path)], facts=facts, prefix="/opt/dflash")
    assert words in one(errs, "model_path")


def test_home_directories_refused_even_where_homes_may_be_read():
    # dflash_instances_protect_home: false lets models live under a home, never be one
    homes = [{"user": "root", "uid": 0, "home": "/root"}, {"user": "alice", "uid": 1001, "home": "/srv/alice"}]
    for path, real, words, protect in [
        ("/root", None, "is the home directory of root", False),
        ("/srv/alice/../alice", None, "(it resolves to /srv/alice) is the home directory of alice", False),
        ("/srv/alice/models/q", None, ("is in the home directory of alice (/srv/alice): a model needs a directory of "
                                      "its own outside users' homes"), True),
    ]:
        facts = {**CT200_FACTS, "homes": homes,
                 "paths": {**CT200_FACTS["paths"], path: {"exists": True, "isdir": True, "tmpfs": False, "realpath": real}}}
        errs = validate([good(model_path=path)], facts=facts, prefix="/opt/dflash", protect_home=protect)
        assert words in one(errs, "model_path"), (path, errs)
    facts = {**CT200_FACTS, "homes": homes, "paths": {**CT200_FACTS["paths"], "/srv/alice/models/q": {
        "exists": True, "isdir": True, "tmpfs": False, "realpath": "/srv/alice/models/q"}}}
    assert validate([good(model_path="/srv/alice/models/q")], facts=facts, prefix="/opt/dflash",
                    protect_home=False) == []


@pytest.mark.parametrize(("path", "words"), [
    ("~/models/q", "'~/models/q' starts with '~' (/root, /models/q): nothing expands it in the unit's $DFLASH_ARGS"),
    ("~alice/q", "'~alice/q' starts with '~' (the home directory of alice): nothing expands it"),
])
def test_paths_spelt_with_a_tilde(path, words):
    errs = validate([good(model_path=path)], prefix="/opt/dflash")
    assert words in one(errs, "model_path")
    assert "give the absolute path of a directory of its own outside /home, /root and /run/user" in one(errs, "model_path")


def test_staged_model_must_resolve_into_tmpfs():
    errs = validate([good(model_path="/dev/shm/../../var/tmp/m", model_source="/data/Qwen3.6-27B")])
    msg = one(errs, "model_source")
    assert "is only used to stage a model onto tmpfs; model_path /dev/shm/../../var/tmp/m (it resolves to " \
           "/var/tmp/m) is not under /dev/shm/ or /run/shm/" in msg


def test_good_paths_stay_good():
    assert validate([good()], prefix="/opt/dflash") == []


# --------------------------------------------------------------------------- what the host serves


CURRENT = {"id": "r1", "instances": {"old": {"port": 30001, "gpus": [1], "unit": "dflash-old.service"}}}


def test_a_kept_instance_keeps_its_port_and_gpus():
    errs = v(good(), facts={**CT200_FACTS, "current": CURRENT})
    assert "port 30001 is served by instance 'old' (installed, no longer in dflash_instances)" in one(errs, "port")
    assert "add 'old' to dflash_remove_instances" in one(errs, "gpus")


def test_removal_hands_port_and_gpus_over():
    assert v(good(), facts={**CT200_FACTS, "current": CURRENT}, removed={"old"}) == []
    # the instance itself (an update) is no conflict
    assert validate([good(name="old")], facts={**CT200_FACTS, "current": CURRENT}) == []
    # allow_busy_gpus lifts only the GPU part
    errs = v(good(allow_busy_gpus=True), facts={**CT200_FACTS, "current": CURRENT})
    assert [e for e in errs if "'gpus'" in e] == [] and len(errs) == 1


def test_reserved_name():
    errs = v(good(name="guard"))
    assert errs == [("ct200: instance 'guard': field 'name': 'guard' is taken: dflash-guard.service is the "
                    "toolkit's boot guard")]


# --------------------------------------------------------------------------- the inventory as a whole


def ie(instances, names=(), **settings):
    return inv.inventory_errors("ct200", instances, settings, list(names) + list(settings))


def test_empty_or_undefined_list_names_the_variable():
    for instances in ([], None):
        errs = ie(instances)
        assert len(errs) == 1 and errs[0].startswith("ct200: dflash_instances is empty or not set: set dflash_instances")
        assert "host_vars/ct200.yml" in errs[0] and "dflash_remove_instances" in errs[0]


def test_typo_hint_for_the_list_and_the_removal_settings():
    errs = ie(None, ["dflash_instnaces", "dflash_prefix", "dflash_instances_user"])
    assert "(the inventory sets 'dflash_instnaces': a typo for dflash_instances?)" in errs[0]
    assert ie([good()], ["dflash_remove_absnet"]) == [
        "ct200: variable 'dflash_remove_absnet' is not one the toolkit knows: did you mean dflash_remove_absent?"]
    # known names are never hints
    assert ie([good()], ["dflash_instances", "dflash_instances_bind_host", "dflash_release_keep"]) == []


def test_removal_settings():
    assert ie([], dflash_remove_instances=["old"]) == []
    assert "an instance is either deployed or removed" in ie([good()], dflash_remove_instances=["dflash-gpu1"])[0]
    assert "must be a list of instance names" in ie([good()], dflash_remove_instances="old")[0]
    assert "must be true or false" in ie([good()], dflash_remove_absent="maybe")[0]
    # -e key=value gives strings: the words Ansible reads as booleans / numbers are fine
    assert ie([good()], dflash_remove_absent="true", dflash_min_free_mib="2048") == []
    errs = ie([], dflash_remove_absent=True)
    assert any("name the instances to remove in dflash_remove_instances" in e for e in errs)
    assert "'dflash_instances_remove_stale' is no longer used" in ie([good()], ["dflash_instances_remove_stale"])[0]


def test_null_lists_are_refused_naming_the_field():
    # what the filter hands over for `dflash_instances:` and `dflash_remove_instances:` with nothing after them
    from test_filters import load_plugin
    f = load_plugin("dflash_instances").FilterModule().filters()["dflash_inventory_errors"]
    errs = f(None, "ct200", {"dflash_instances": None, "dflash_remove_instances": None, "inventory_hostname": "ct200"})
    assert errs == [
        ("ct200: field 'dflash_instances': is null (the line 'dflash_instances:' has nothing after it): give the list "
        "of instances this host serves, or leave the line out; nothing is changed on the host while it is empty. "
        "To take every instance off the host, list them in dflash_remove_instances"),
        ("ct200: field 'dflash_remove_instances': is null (the line 'dflash_remove_instances:' has nothing after it): "
        "give a list of instance names to remove, or leave the line out")]
    # not set at all: the older message, with its typo hint
    assert f(None, "ct200", {"dflash_instnaces": []})[0].startswith(
        "ct200: dflash_instances is empty or not set (the inventory sets 'dflash_instnaces'")


HOST = {"units": ["dflash-guard.service", "dflash-keep.service", "dflash-new.service", "dflash-stage-new.service"],
        "current": {"id": "r2", "instances": {"keep": {}, "new": {}}}, "released": ["keep", "new", "old"]}


def test_unknown_names_to_remove_are_refused_naming_them_and_the_known_ones():
    assert inv.known_instances(HOST) == ["keep", "new", "old"]
    errs = inv.remove_errors("ct200", ["a-misspelt-name", "old", "nwe"], [good()], HOST)
    assert errs == [("ct200: field 'dflash_remove_instances': 'a-misspelt-name', 'nwe' are not instances this host has "
                    "or had (its instances: keep, new; in earlier releases: old): a misspelt name removes nothing; "
                    "correct it or take it out of the list")]
    # a name already removed, one another host of the run has (a group's list), one in dflash_instances (refused
    # elsewhere) are no typos
    assert inv.remove_errors("ct200", ["old", "w9", "dflash-gpu1"], [good()], HOST, known_elsewhere=["w9"]) == []
    assert "'x' is not an instance this host has or had (its instances: none)" in inv.remove_errors(
        "ct200", ["x"], [], {})[0]


def test_the_host_facts_know_every_release_and_the_login_homes(tmp_path):
    import json
    import pwd

    from ansible.module_utils.dflash_instances import host as hh
    for rid, names in (("r1", ["old", "keep"]), ("r2", ["new", "keep"])):
        (tmp_path / "releases" / rid).mkdir(parents=True)
        (tmp_path / "releases" / rid / "manifest.json").write_text(json.dumps({"id": rid, "instances": {n: {} for n in names}}))
    (tmp_path / "releases" / "r3").mkdir()
    (tmp_path / "releases" / "r3" / "manifest.json").write_text('{"id": "r3", "inst')  # cut short: skipped
    assert hh.released_instances(str(tmp_path)) == ["keep", "new", "old"]
    (tmp_path / "removed-instances.json").write_text('["gone"]')  # removed, its releases pruned since
    assert hh.released_instances(str(tmp_path)) == ["gone", "keep", "new", "old"]
    pw = [pwd.struct_passwd(x) for x in (("root", "x", 0, 0, "", "/root", "/bin/bash"),
                                         ("daemon", "x", 1, 1, "", "/usr/sbin", "/usr/sbin/nologin"),
                                         ("alice", "x", 1001, 1001, "", "/srv/alice/", "/bin/bash"),
                                         ("nobody", "x", 65534, 65534, "", "/nonexistent", "/usr/sbin/nologin"))]
    assert hh.login_homes(pw) == [{"user": "root", "uid": 0, "home": "/root"},
                                  {"user": "alice", "uid": 1001, "home": "/srv/alice"}]


@pytest.mark.parametrize(("settings", "words"), [
    ({"dflash_prefix": "opt/dflash"}, "field 'dflash_prefix': must be an absolute path"),
    ({"dflash_prefix": "/opt/../etc/dflash"}, "resolves to /etc/dflash, a system directory"),
    ({"dflash_prefix": "/"}, "a system directory"),
    ({"dflash_service_manager": "upstart"}, "field 'dflash_service_manager': must be systemd or runner"),
    ({"dflash_instances_bind_host": "0.0.0.0 "}, "field 'dflash_instances_bind_host'"),
    ({"dflash_min_free_mib": "1G"}, "field 'dflash_min_free_mib': must be a whole number"),
])
def test_shared_settings(settings, words):
    errs = ie([good()], **settings)
    assert len(errs) == 1 and words in errs[0], errs


# --------------------------------------------------------------------------- disk


def test_full_disk_before_any_change():
    facts = [{"path": "/opt/dflash", "mount": "/", "free_mib": 12, "total_mib": 20000, "free_inodes": 100,
              "what": "releases and the toolkit's files"},
             {"path": "/var/cache/dflash", "mount": "/", "free_mib": 12, "total_mib": 20000, "free_inodes": 100,
              "what": "the instances' caches"},
             {"path": "/root/.ansible/tmp", "mount": "/root", "free_mib": 9000, "total_mib": 9000, "free_inodes": 0},
             {"path": "/data/uv", "mount": "/data", "free_mib": 300, "total_mib": 9000, "free_inodes": 10,
              "what": "uv's cache (the layer builds)"}]
    errs = dsk.space_errors(facts, "ct200", 1024)
    # the cause first, every directory of that filesystem and what the deploy writes there
    assert errs[0] == ("ct200: no space left on /opt/dflash, /var/cache/dflash: need 1024 MiB, have 12 MiB free on / "
                       "(of 20000 MiB) (written there: /opt/dflash: releases and the toolkit's files; /var/cache/dflash: "
                       "the instances' caches): free space on / and re-run (the limit is dflash_min_free_mib)")
    assert errs[1].startswith("ct200: no inode left on /root/.ansible/tmp: /root has no free inode")
    assert errs[2].startswith("ct200: no space left on /data/uv: need 1024 MiB, have 300 MiB free on /data (of 9000 "
                              "MiB) (written there: /data/uv: uv's cache (the layer builds))")
    assert len(errs) == 3


def test_uv_cache_found_as_uv_finds_it():
    assert dsk.uv_cache_dir("/opt/dflash/cache/uv", {"UV_CACHE_DIR": "/x"}) == "/opt/dflash/cache/uv"
    assert dsk.uv_cache_dir("", {"UV_CACHE_DIR": "/x", "XDG_CACHE_HOME": "/y"}) == "/x"
    assert dsk.uv_cache_dir(None, {"XDG_CACHE_HOME": "/y"}) == "/y/uv"
    assert dsk.uv_cache_dir(None, {}, home="/root") == "/root/.cache/uv"


def test_a_full_disk_under_a_tool_is_said_first(tmp_path):
    out = "error: Failed to install: torch-2.9.1.whl\n  Caused by: No space left on device (os error 28) at path \"/x\""
    head = dsk.no_space_headline(out, [(str(tmp_path / "cache"), "uv's cache"), (str(tmp_path), "the layer")])
    assert head.startswith(f"no space left on {tmp_path / 'cache'} (uv's cache): have ")
    assert " MiB free of " in head
    assert dsk.no_space_headline("error: no matching distribution", [(str(tmp_path), "x")]) is None


def test_enospc_in_words(tmp_path):
    exc = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x"))
    msg = dsk.os_error_message(exc)
    assert msg.startswith(f"no space left on the device writing {tmp_path / 'x'} (") and "MiB free of" in msg
    assert "read-only file system" in dsk.os_error_message(OSError(errno.EROFS, "Read-only file system", "/opt"))
    f = dsk.free_space(str(tmp_path / "not" / "yet"))
    assert f["free_mib"] > 0 and f["mount"]


# --------------------------------------------------------------------------- ours come first


HOSTILE = [
    {"port": "30001"}, {"port": 30001.0}, {"gpus": ["1"]}, {"gpus": 1}, {"tp": "1"}, {"algorithm": "eagle"},
    {"algorithm": "dflash"}, {"mem_fraction_static": "0.8"}, {"mem_fraction_static": 0.8},
    {"context_length": "8k"}, {"ddtree": {"budget": "7"}}, {"ddtree": {"mode": "fast"}}, {"ddtree": []},
    {"allow_busy_gpus": "yes"}, {"extra_args": "--disable-radix-cache"}, {"extra_args": [8]},
    {"env": ["A=1"]}, {"env": {"A": 1}}, {"pin_flags": ["--x"]}, {"disabled_rules": "x"},
    {"disabled_rules": ["sm90-without-fa3", 3]}, {"model_source": 5}, {"host": 5}, {"api_key": 12345}, {"api_key": ["k"]}, {"name": 7}, {"unknown": 1},
    {"draft_model_path": None}, {"model_path": None},
]


@pytest.mark.parametrize("change", HOSTILE, ids=[str(h) for h in HOSTILE])
def test_whatever_the_role_spec_refuses_the_validation_refused_first(change):
    """tasks_from: validate runs before any argument_specs of the instances role: an inventory it lets
    through must pass the spec too (else the user would meet the spec's internal wording)."""
    import yaml
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    spec = yaml.safe_load((ROOT / "roles/dflash_instances/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    inst = dict(good(), **change)
    if change.get("draft_model_path", 1) is None:
        inst["algorithm"] = "NONE"
    ours = v(inst)
    theirs = ArgumentSpecValidator({"dflash_instances": options["dflash_instances"]}).validate(
        {"dflash_instances": [inst]}).errors.errors
    assert ours or not theirs, theirs


def test_wrong_shapes_are_reported_not_crashed_on():
    errs = v(good(env=["A=1"], pin_flags=["--x"], extra_args="--a", disabled_rules="sm90-without-fa3"))
    assert "must be a mapping of variable names to strings, got a list" in one(errs, "env")
    assert "must be a mapping {flag: value}" in one(errs, "pin_flags")
    assert "must be a list of strings" in one(errs, "extra_args")
    assert "must be a list of rule names" in one(errs, "disabled_rules")


def test_unresolved_fields_are_named_before_anything_reads_the_instances():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dflash_instances_filters", ROOT / "filter_plugins/dflash_instances.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    class Lazy(dict):  # what Ansible 2.19 hands a filter: values resolved (and failing) when read
        def __getitem__(self, key):
            if key == "api_key":
                raise RuntimeError("'vault_gpu1_key' is undefined")
            return super().__getitem__(key)

    errs = mod.dflash_instances_unresolved([Lazy(good(api_key="{{ vault_gpu1_key }}"))], "ct200")
    assert errs == [("ct200: instance 'dflash-gpu1': field 'api_key': cannot be resolved ('vault_gpu1_key' is "
                    "undefined): define it, or give ansible-playbook the vault password when it comes from a vault "
                    "(--ask-vault-pass, vault_password_file)")]
    assert mod.dflash_instances_unresolved([good()], "ct200") == []
    assert mod.dflash_instances_unresolved({"not": "a list"}, "ct200") == []
