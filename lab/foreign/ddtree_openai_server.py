#!/usr/bin/env python3
"""Lab copy of the seeds' FOREIGN service on ct200: the temporary standalone DDTree wrapper
(/root/ddtree_openai_server.py) that held GPU0 and port 30000 before any native SGLang.
dflash-deploy does not manage it and must not touch it; it is here so that port and GPU
conflict checks meet a real listener. Answers /health and /v1/models, 404 otherwise.
"""

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    server_version = "ddtree-wrapper/0.1"

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"status": "ok", "service": "ddtree-wrapper"})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": "ddtree-wrapper", "object": "model", "owned_by": "foreign"}]})
        else:
            self._send(404, {"error": "not found"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=30000)
    args = ap.parse_args()
    print(f"temporary DDTree wrapper (foreign to dflash-deploy) on {args.host}:{args.port}", flush=True)
    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
