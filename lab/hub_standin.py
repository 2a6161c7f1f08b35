#!/usr/bin/env python3
"""A local stand-in of the Hugging Face hub: the few routes huggingface_hub's snapshot_download uses.

    python3 lab/hub_standin.py --root DIR [--port 0] [--rate BYTES_PER_S] [--port-file FILE]

Lab only (tests and Molecule point HF_ENDPOINT at it; nothing of the toolkit talks to the real hub in a
test). ``DIR/<org>/<name>/`` is a repository; its one commit id is the sha1 of its files' ids (stable for
the same files), and ``main`` resolves to it. Files whose name ends in .safetensors, .bin or .pt, or
that are over 1 MiB, are "in LFS" as on the hub. The routes, as huggingface_hub 2.x calls them:

- ``GET /api/models/<org>/<name>/revision/<rev>``: ``{id, sha, siblings}`` (``repo_info`` for a branch);
- ``GET /api/models/<org>/<name>/tree/<rev>[/<path>]?recursive=true``: ``[{type, oid, size, path, lfs}]``,
  ``lfs: {oid: <sha256>, size, pointerSize}`` for LFS files (``list_repo_tree``, one page);
- ``HEAD|GET /<org>/<name>/resolve/<rev>/<path>``: a file in git: 200 with ``ETag`` (its git blob id),
  ``X-Repo-Commit``, ``Content-Length``; a file in LFS: 302 to the CDN with ``X-Linked-Etag`` (its sha256),
  ``X-Linked-Size``, ``X-Repo-Commit`` (the client reads the metadata from the redirect and downloads from
  the CDN, whose origin is another address: 127.0.0.2, as the real CDN is another host);
- ``GET /cdn/<sha256>`` (on 127.0.0.2): the bytes, with ``Range`` for a resumed download.
Errors carry ``X-Error-Code`` (RepoNotFound, RevisionNotFound, EntryNotFound) as the hub's do.
``GET /_standin/requests`` lists the file downloads served (tests count them). ``--rate`` slows the
bytes down (progress lines in tests). stdlib only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".safetensors", ".bin", ".pt")
LFS_MIN = 1024 * 1024


def blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


class Repo:
    def __init__(self, repo_id, path):
        self.id, self.path = repo_id, path
        self.files = {}
        for dirpath, dirs, files in os.walk(path):
            dirs.sort()
            for f in sorted(files):
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, path)
                with open(full, "rb") as fh:
                    data = fh.read()
                lfs = rel.endswith(LFS_SUFFIXES) or len(data) > LFS_MIN
                sha256 = hashlib.sha256(data).hexdigest()
                pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\n"
                           f"size {len(data)}\n").encode()
                self.files[rel] = {"full": full, "size": len(data), "sha256": sha256, "lfs": lfs,
                                   "oid": blob_sha1(pointer) if lfs else blob_sha1(data),
                                   "pointer_size": len(pointer)}
        ids = "".join(f"{k}:{v['oid']}\n" for k, v in sorted(self.files.items()))
        self.commit = hashlib.sha1(ids.encode(), usedforsecurity=False).hexdigest()

    def resolve(self, rev):
        return self.commit if rev in (self.commit, "main") else None


class Hub:
    def __init__(self, root, rate=None):
        self.root, self.rate = root, rate
        self.repos = {}
        for org in sorted(os.listdir(root)):
            if not os.path.isdir(os.path.join(root, org)):
                continue
            for name in sorted(os.listdir(os.path.join(root, org))):
                if os.path.isdir(os.path.join(root, org, name)):
                    self.repos[f"{org}/{name}"] = Repo(f"{org}/{name}", os.path.join(root, org, name))
        self.by_sha256 = {f["sha256"]: f for r in self.repos.values() for f in r.files.values()}
        self.served = []
        self.lock = threading.Lock()
        self.cdn = None  # "http://127.0.0.2:PORT"


def make_handler(hub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: tests read /_standin/requests instead
            pass

        def _send(self, code, body=b"", headers=None, head=False):
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, str(v))
            if "Content-Length" not in (headers or {}):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head and body:
                self.wfile.write(body)

        def _json(self, obj, code=200):
            self._send(code, json.dumps(obj).encode(), {"Content-Type": "application/json"})

        def _error(self, code, error_code, message, head=False):
            self._send(code, json.dumps({"error": message}).encode(),
                       {"Content-Type": "application/json", "X-Error-Code": error_code,
                        "X-Error-Message": message}, head=head)

        def do_HEAD(self):
            self._route(head=True)

        def do_GET(self):
            self._route(head=False)

        def _route(self, head):
            url = urllib.parse.urlsplit(self.path)
            parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
            query = urllib.parse.parse_qs(url.query)
            if parts[:2] == ["_standin", "requests"]:
                with hub.lock:
                    return self._json(list(hub.served))
            if parts[:1] == ["cdn"] and len(parts) == 2:
                return self._cdn(parts[1], head)
            if parts[:2] == ["api", "models"] and len(parts) >= 6:
                repo = hub.repos.get(f"{parts[2]}/{parts[3]}")
                if repo is None:
                    return self._error(404, "RepoNotFound", "Repository not found", head)
                commit = repo.resolve(parts[5])
                if commit is None:
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {parts[5]}", head)
                if parts[4] == "revision":
                    return self._json({"id": repo.id, "modelId": repo.id, "sha": commit, "private": False,
                                       "siblings": [{"rfilename": k} for k in sorted(repo.files)]})
                if parts[4] == "tree":
                    prefix = "/".join(parts[6:])
                    recursive = (query.get("recursive") or ["false"])[0].lower() == "true"
                    return self._json(self._tree(repo, prefix, recursive))
            if len(parts) >= 5 and parts[2] == "resolve":
                repo = hub.repos.get(f"{parts[0]}/{parts[1]}")
                if repo is None:
                    return self._error(404, "RepoNotFound", "Repository not found", head)
                commit = repo.resolve(parts[3])
                if commit is None:
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {parts[3]}", head)
                f = repo.files.get("/".join(parts[4:]))
                if f is None:
                    return self._error(404, "EntryNotFound", "Entry not found", head)
                if f["lfs"]:
                    return self._send(302, b"", {"Location": f"{hub.cdn}/cdn/{f['sha256']}",
                                                 "X-Linked-Etag": f'"{f["sha256"]}"', "X-Linked-Size": f["size"],
                                                 "X-Repo-Commit": commit, "ETag": f'"{f["oid"]}"'}, head=True)
                return self._file(f, head, {"ETag": f'"{f["oid"]}"', "X-Repo-Commit": commit})
            return self._error(404, "EntryNotFound", f"no route {url.path}", head)

        def _tree(self, repo, prefix, recursive):
            out, dirs = [], set()
            for rel, f in sorted(repo.files.items()):
                if prefix and not rel.startswith(prefix.rstrip("/") + "/"):
                    continue
                rest = rel[len(prefix.rstrip("/")) + 1:] if prefix else rel
                if not recursive and "/" in rest:
                    dirs.add(rel[: len(rel) - len(rest)] + rest.split("/", 1)[0])
                    continue
                if recursive:
                    p = rel
                    while "/" in p:
                        p = p.rsplit("/", 1)[0]
                        if not prefix or p.startswith(prefix.rstrip("/") + "/"):
                            dirs.add(p)
                entry = {"type": "file", "oid": f["oid"], "size": f["size"], "path": rel}
                if f["lfs"]:
                    entry["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": f["pointer_size"]}
                out.append(entry)
            return [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(dirs)] + out

        def _cdn(self, sha256, head):
            f = hub.by_sha256.get(sha256)
            if f is None:
                return self._send(404, b"not found")
            return self._file(f, head, {"ETag": f'"{sha256}"'})

        def _file(self, f, head, headers):
            start = 0
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes=") and rng[6:].split("-")[0].isdigit():
                start = min(int(rng[6:].split("-")[0]), f["size"])
            length = f["size"] - start
            code = 206 if start else 200
            hdrs = dict(headers, **{"Content-Length": length, "Accept-Ranges": "bytes",
                                    "Content-Type": "application/octet-stream"})
            if start:
                hdrs["Content-Range"] = f"bytes {start}-{f['size'] - 1}/{f['size']}"
            self.send_response(code)
            for k, v in hdrs.items():
                self.send_header(k, str(v))
            self.end_headers()
            if head:
                return
            with hub.lock:
                hub.served.append(os.path.relpath(f["full"], hub.root))
            with open(f["full"], "rb") as fh:
                fh.seek(start)
                while True:
                    block = fh.read(64 * 1024)
                    if not block:
                        break
                    self.wfile.write(block)
                    if hub.rate:
                        time.sleep(len(block) / hub.rate)

    return Handler


def serve(root, port=0, rate=None):
    """Start the hub (127.0.0.1) and its CDN (127.0.0.2) in threads -> (endpoint, hub, [servers])."""
    hub = Hub(root, rate)
    handler = make_handler(hub)
    api = ThreadingHTTPServer(("127.0.0.1", port), handler)
    cdn = ThreadingHTTPServer(("127.0.0.2", 0), handler)
    hub.cdn = f"http://127.0.0.2:{cdn.server_address[1]}"
    for srv in (api, cdn):
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{api.server_address[1]}", hub, [api, cdn]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rate", type=float, default=None, help="bytes per second per download")
    ap.add_argument("--port-file", help="write the endpoint URL here once listening")
    args = ap.parse_args()
    endpoint, hub, _servers = serve(args.root, args.port, args.rate)
    for repo in hub.repos.values():
        print(f"{repo.id} {repo.commit} ({len(repo.files)} files)", flush=True)
    print(f"listening: {endpoint} (HF_ENDPOINT={endpoint})", flush=True)
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as fh:
            fh.write(endpoint)
        os.replace(args.port_file + ".tmp", args.port_file)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
