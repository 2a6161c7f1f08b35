"""scripts/unit_runner.py: runs a rendered unit's command the way systemd would (hosts without systemd)."""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("unit_runner", ROOT / "scripts" / "unit_runner.py")
ur = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ur)

UNIT = """[Unit]
Description=x
[Service]
Environment="A=one" B=two
EnvironmentFile={envfile}
EnvironmentFile=-/nonexistent/optional.env
ExecStart={py} -c "import os,sys; print(sys.argv[1:]); print(os.environ['CUDA_VISIBLE_DEVICES'])" \\
  $DFLASH_ARGS ${{A}} --x=%%
"""


def test_env_file_syntax():
    env = ur.R.parse_env_file('# c\nA=1\nB="two words"\nC=\'s q\'\n; x\nD="q\\"x"\n')
    assert env == {"A": "1", "B": "two words", "C": "s q", "D": 'q"x'}


def test_expand_exec_split_and_braced():
    env = {"ARGS": "--port 30001  --tp-size 1", "P": "a b"}
    assert ur.R.expand_exec("-/bin/py -m x $ARGS ${P}", env) == [
        "/bin/py", "-m", "x", "--port", "30001", "--tp-size", "1", "a b"]


def test_start_status_stop(tmp_path):
    envfile = tmp_path / "i.env"
    envfile.write_text('CUDA_VISIBLE_DEVICES=1\nDFLASH_ARGS="--port 30001 --model-path /m"\n')
    unit = tmp_path / "dflash-x.service"
    unit.write_text(UNIT.format(envfile=envfile, py=sys.executable))
    r = ur.R.resolve(unit.read_text())
    assert r["argv"][-6:] == ["--port", "30001", "--model-path", "/m", "one", "--x=%"]
    assert r["env"]["B"] == "two" and r["env"]["A"] == "one"
    log, pid = tmp_path / "log", tmp_path / "pid"
    script = str(ROOT / "scripts" / "unit_runner.py")
    subprocess.run([sys.executable, script, "start", str(unit), "--log", str(log), "--pidfile", str(pid)],
                   check=True, capture_output=True)
    for _ in range(50):
        if "1\n" in log.read_text():
            break
        time.sleep(0.1)
    text = log.read_text()
    assert "['--port', '30001', '--model-path', '/m', 'one', '--x=%']" in text
    st = subprocess.run([sys.executable, script, "status", "--pidfile", str(pid)], check=False, capture_output=True,
                        text=True)
    assert st.returncode == 3 and json.loads(st.stdout)["ActiveState"] == "failed"  # it printed and exited
    subprocess.run([sys.executable, script, "stop", "--pidfile", str(pid)], check=True, capture_output=True)
    assert not os.path.exists(pid)
    assert ur.R.show(str(pid))["ActiveState"] == "inactive"


def test_long_running_unit_stops_and_log_since_start(tmp_path):
    unit = tmp_path / "dflash-y.service"
    unit.write_text(f"[Service]\nExecStart={sys.executable} -c \"import time; print('up', flush=True); time.sleep(60)\"\n")
    log, pid = tmp_path / "y.log", tmp_path / "run" / "y.pid"
    log.write_text("old crash from an earlier start\n")
    ur.R.start(str(unit), str(log), str(pid))
    for _ in range(50):
        if "up" in log.read_text():
            break
        time.sleep(0.1)
    assert ur.R.show(str(pid))["ActiveState"] == "active"
    since = ur.R.log_since_last_start(log.read_text())
    assert "old crash" not in since and "up" in since
    assert ur.R.stop(str(pid), timeout=5) is True
    assert ur.R.show(str(pid))["ActiveState"] == "inactive"


def test_specifiers_and_directories(tmp_path):
    text = ("[Service]\nEnvironment=HOME=%C/dflash/x\nWorkingDirectory=%C/dflash/x\nCacheDirectory=dflash/x\n"
            "ExecStart=/bin/echo %n %N %%\n")
    r = ur.R.resolve(text, {}, "dflash-x.service")
    assert r["env"]["HOME"] == "/var/cache/dflash/x" and r["workdir"] == "/var/cache/dflash/x"
    assert r["directories"] == ["/var/cache/dflash/x"]
    assert r["argv"] == ["/bin/echo", "dflash-x.service", "dflash-x", "%"]


def test_start_failure_is_written_to_the_log(tmp_path):
    unit = tmp_path / "dflash-z.service"
    unit.write_text("[Service]\nWorkingDirectory=%Q\nExecStart=/bin/true\n")
    log = tmp_path / "z.log"
    try:
        ur.R.start(str(unit), str(log), str(tmp_path / "z.pid"))
    except ValueError:
        pass
    assert "cannot start dflash-z.service: unsupported specifier %Q" in log.read_text()


def test_unit_of_pid_tells_our_runner_units_from_foreign_processes(tmp_path):
    from ansible.module_utils.dflash_fingerprint import collect
    from ansible.module_utils.dflash_instances import host
    from ansible.module_utils.dflash_service.process import unit_of_pid
    unit = tmp_path / "dflash-w.service"
    unit.write_text(f"[Service]\nExecStart={sys.executable} -c \"import time; time.sleep(30)\"\n")
    run = tmp_path / "run"
    pid = ur.R.start(str(unit), str(tmp_path / "w.log"), str(run / "dflash-w.service.pid"))
    try:
        assert unit_of_pid(pid, run_dir=str(run)) == "dflash-w.service"
        assert unit_of_pid(os.getpid(), run_dir=str(run)) is None
        # both stages name the runner-started process by its unit
        assert collect.process_unit(pid, run_dir=str(run)) == "dflash-w.service"
        assert host.process_unit(pid, run_dir=str(run)) == "dflash-w.service"
    finally:
        ur.R.stop(str(run / "dflash-w.service.pid"), timeout=5)
