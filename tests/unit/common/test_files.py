"""dflash_files (module_utils/dflash_common/files.py, library/ and action_plugins/dflash_files.py): a set of small
files and directories put in place in one call; what is right already is not touched."""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat

import pytest
from ansible.module_utils.dflash_common.files import FilesError, install
from ansible_play import run_play

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


def spec(tmp_path):
    return {
        "directories": [{"path": str(tmp_path / "a" / "b"), "mode": "0750", "owner": ME, "group": MY_GROUP}],
        "files": [{"dest": str(tmp_path / "a" / "b" / "run"), "content": b"#!/bin/sh\n", "mode": "0755", "owner": ME,
                "group": MY_GROUP},
               {"dest": str(tmp_path / "a" / "unit.service"), "content": "[Unit]\n", "mode": 0o644, "owner": ME,
                "group": MY_GROUP}],
        "absent": [str(tmp_path / "old.py")]}


def mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_first_run_creates_everything_then_nothing_changes(tmp_path):
    (tmp_path / "old.py").write_text("x")
    res = install(**spec(tmp_path))
    assert res["changed"] and set(res["changed_paths"]) == {
        str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(tmp_path / "a" / "b" / "run"),
        str(tmp_path / "a" / "unit.service"), str(tmp_path / "old.py")}
    assert (tmp_path / "a" / "b" / "run").read_bytes() == b"#!/bin/sh\n" and mode(tmp_path / "a" / "b" / "run") == 0o755
    assert mode(tmp_path / "a" / "b") == 0o750 and mode(tmp_path / "a") == 0o755  # a parent: 0755
    assert (tmp_path / "a" / "unit.service").read_text() == "[Unit]\n" and not (tmp_path / "old.py").exists()
    before = {p: os.stat(p).st_mtime_ns for p in (tmp_path / "a" / "b" / "run", tmp_path / "a" / "unit.service")}
    again = install(**spec(tmp_path))
    assert again["changed"] is False and again["changed_paths"] == [] and again["diff"] == []
    assert {p: os.stat(p).st_mtime_ns for p in before} == before  # not rewritten
    assert not list(tmp_path.glob("a/**/.*dflash-*"))  # no temporary file left


def test_content_and_mode_changes_are_said_and_made(tmp_path):
    install(**spec(tmp_path))
    (tmp_path / "a" / "unit.service").write_text("[Unit]\nedited\n")
    os.chmod(tmp_path / "a" / "b" / "run", 0o700)
    res = install(**spec(tmp_path))
    why = {i["path"]: i["why"] for i in res["items"] if i["changed"]}
    assert why == {str(tmp_path / "a" / "unit.service"): "content",
                   str(tmp_path / "a" / "b" / "run"): "mode 0700 -> 0755"}
    assert res["diff"] == [{"before_header": str(tmp_path / "a" / "unit.service"),
                            "after_header": str(tmp_path / "a" / "unit.service"),
                            "before": "[Unit]\nedited\n", "after": "[Unit]\n"}]
    assert (tmp_path / "a" / "unit.service").read_text() == "[Unit]\n" and mode(tmp_path / "a" / "b" / "run") == 0o755


def test_check_mode_says_what_would_change_and_writes_nothing(tmp_path):
    (tmp_path / "old.py").write_text("x")
    res = install(**spec(tmp_path), check=True)
    assert res["changed"] and str(tmp_path / "a" / "b" / "run") in res["changed_paths"]
    assert [i["path"] for i in res["items"]].count(str(tmp_path / "a")) == 1  # a missing parent said once
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.py"]
    res = install(**dict(spec(tmp_path), files=[dict(spec(tmp_path)["files"][0], owner="no-such-user-x")]),
                  check=True)  # a user a task before would create: said, not refused, in check mode
    assert res["changed"]
    with pytest.raises(FilesError, match="user 'no-such-user-x' does not exist on the host"):
        install(files=[dict(spec(tmp_path)["files"][0], owner="no-such-user-x")])


def test_wrong_kinds_and_bad_input_are_refused_in_words(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(FilesError, match="wanted a regular file"):
        install(files=[{"dest": str(tmp_path / "d"), "content": "x"}])
    with pytest.raises(FilesError, match="only files and links are removed"):
        install(absent=[str(tmp_path / "d")])
    with pytest.raises(FilesError, match="mode '0x9' is not an octal number"):
        install(files=[{"dest": str(tmp_path / "f"), "content": "x", "mode": "0x9"}])
    with pytest.raises(FilesError, match="an absolute file path is needed"):
        install(files=[{"dest": "rel/f", "content": "x"}])


def test_the_action_reads_sources_on_the_controller_and_one_call_installs_them(tmp_path):
    src = tmp_path / "src.sh"
    src.write_text("echo hi\n")
    out = tmp_path / "out"
    task_files = [{"dest": str(out / "bin" / "hi"), "src": str(src), "mode": "0755", "owner": ME, "group": MY_GROUP},
                  {"dest": str(out / "x.conf"), "content": "k=v\n", "owner": ME, "group": MY_GROUP}]
    task = {"dflash_files": {"directories": [{"path": str(out), "owner": ME, "group": MY_GROUP}],
                             "files": task_files}, "register": "r"}
    dump = {"ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(tmp_path / "r{{ n }}.json")}}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        dict(task), dict(dump, vars={"n": 1}), dict(task), dict(dump, vars={"n": 2}),
        {"dflash_files": {"files": [{"dest": str(out / "y"), "src": "missing.sh"}, {"dest": str(out / "z")}]},
         "register": "bad", "ignore_errors": True},
        dict(dump, vars={"n": 3}, **{"ansible.builtin.copy": {"content": "{{ bad | to_json }}",
                                                               "dest": str(tmp_path / "r3.json")}})]}]
    res = run_play(play, tmp_path)
    assert res.returncode == 0, res.stdout[-3000:]
    r1, r2, r3 = (json.loads((tmp_path / f"r{n}.json").read_text()) for n in (1, 2, 3))
    assert r1["changed"] and (out / "bin" / "hi").read_text() == "echo hi\n" and mode(out / "bin" / "hi") == 0o755
    assert (out / "x.conf").read_text() == "k=v\n" and "invocation" not in r1
    assert r2["changed"] is False
    assert r3["failed"] and "files[0] (" + str(out / "y") + "): Could not find or access 'missing.sh'" in r3["msg"]
    assert "files[1] (" + str(out / "z") + "): give exactly one of src and content" in r3["msg"]
    assert not (out / "y").exists()
