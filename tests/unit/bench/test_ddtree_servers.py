"""bench/gpu/ddtree_servers.py: a port that answers something other than HTTP while a server starts
is "not healthy yet", not a crash of the whole GPU call (an H200 run of 2026-12-03 lost a call so:
a starting server's port gave our own request line back, http.client.BadStatusLine)."""

import os
import socket
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
import ddtree_servers as S


def echo_port():
    """A listener that sends each connection's first bytes back (not HTTP), as that port did."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def serve():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(conn.recv(1024))

    threading.Thread(target=serve, daemon=True).start()
    return sock


def test_a_non_http_answer_is_not_healthy_and_does_not_raise(tmp_path):
    sock = echo_port()
    port = sock.getsockname()[1]
    srv = S.Server("echo", port, [], str(tmp_path), str(tmp_path))
    srv.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    srv.t0 = 0.0
    try:
        assert srv.check_health() is False and srv.healthy_after is None
        assert srv.flush_cache() is False
        try:
            srv.generate([1, 2], 4, timeout=5)
        except S.HTTP_ERRORS:
            pass  # the harnesses catch exactly these around each request
        else:
            raise AssertionError("a non-HTTP answer to /generate must raise one of HTTP_ERRORS")
    finally:
        srv.proc.kill()
        srv.proc.wait()
        sock.close()
