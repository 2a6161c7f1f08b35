"""Fetch a model source into the controller's cache and describe what it holds (controller side).

- hub: ``huggingface_hub.snapshot_download`` at the pinned commit (its own cache layout under
  ``<cache>/hub``: a second host, instance or run finds the files there and downloads nothing); every file
  is then checked against the hub's own listing at that commit: its size, and its sha256 (files in LFS)
  or its git blob id (files in git).
- url: one archive, downloaded once to ``<cache>/url/<sha256>``, checked against the inventory's sha256,
  unpacked beside it.
- controller: the directory as it is.

The hub client runs here, on the controller, not on the hosts: the hosts need no route to the hub and no
token (a gated model's token stays on the controller, like every other secret of the toolkit), one download
serves every host, and the client and its dependencies stay out of the hosts' venv layers. The price: the
bytes go controller -> host once per host; a host that already holds the model takes ``model_path``.

No Ansible import; huggingface_hub is imported only when a hub source is fetched.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import urllib.request
import zipfile

from ansible.module_utils.dflash_models import sources
from ansible.module_utils.dflash_models import store as model_store

DEFAULT_ENDPOINT = "https://huggingface.co"


class FetchError(Exception):
    pass


def dir_bytes(path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


# ----------------------------------------------------------------------------- hub


def hub_listing(spec, endpoint, token):
    """[{path, size, lfs_sha256, blob_id}] of the repository at the pinned commit (the hub's tree API)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    api = HfApi(endpoint=endpoint, token=token or None)
    try:
        entries = api.list_repo_tree(spec["hub"], revision=spec["revision"], recursive=True)
        out = [{"path": e.path, "size": int(e.size), "blob_id": e.blob_id,
                "lfs_sha256": (e.lfs.sha256 if e.lfs is not None else None)}
               for e in entries if type(e).__name__ == "RepoFile"]
    except RevisionNotFoundError as exc:
        raise FetchError(f"revision {spec['revision']} is not in {spec['hub']} on {endpoint}: {_first(exc)}") from exc
    except RepositoryNotFoundError as exc:
        raise FetchError(f"{spec['hub']} is not on {endpoint}, or it is private/gated and the token "
                         f"(HF_TOKEN or token_env) does not open it: {_first(exc)}") from exc
    except HfHubHTTPError as exc:
        raise FetchError(f"{spec['hub']}@{spec['revision']} on {endpoint}: {_first(exc)}") from exc
    except OSError as exc:
        raise FetchError(f"{endpoint} does not answer ({exc}): check HF_ENDPOINT / the controller's network") from exc
    return [e for e in out if os.path.basename(e["path"]) not in model_store.SKIP_NAMES]


def _first(exc) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def hub_repo_dir(cache_dir, repo) -> str:
    return os.path.join(cache_dir, "hub", "models--" + repo.replace("/", "--"))


def fetch_hub(spec, cache_dir, endpoint, token, listing):
    """Download (or find in the cache) the snapshot; -> its folder. Checked against ``listing``."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # the action plugin prints its own progress lines; tqdm bars would garble the play
    try:
        folder = snapshot_download(spec["hub"], revision=spec["revision"], cache_dir=os.path.join(cache_dir, "hub"),
                                   endpoint=endpoint, token=token or None)
    except HfHubHTTPError as exc:
        raise FetchError(f"downloading {spec['hub']}@{spec['revision']} from {endpoint}: {_first(exc)}") from exc
    except OSError as exc:
        raise FetchError(f"downloading {spec['hub']}@{spec['revision']} from {endpoint}: {exc}") from exc
    return folder


def check_hub_files(folder, listing, sha256s) -> list[str]:
    """Each file against the hub's listing: size, then sha256 (LFS) or git blob id."""
    problems = []
    for e in listing:
        full = os.path.join(folder, e["path"])
        if not os.path.exists(full):
            problems.append(f"{e['path']}: not downloaded")
            continue
        size = os.path.getsize(full)
        if size != e["size"]:
            problems.append(f"{e['path']}: {size} bytes, the hub lists {e['size']}")
        elif e["lfs_sha256"] and sha256s.get(e["path"]) != e["lfs_sha256"]:
            problems.append(f"{e['path']}: sha256 {str(sha256s.get(e['path']))[:16]}..., the hub lists "
                            f"{e['lfs_sha256'][:16]}...")
        elif not e["lfs_sha256"] and e["blob_id"] and model_store.git_blob_sha1(full) != e["blob_id"]:
            problems.append(f"{e['path']}: git blob id differs from the hub's {e['blob_id'][:12]}")
    return problems


# ----------------------------------------------------------------------------- url


def url_size(url, timeout=30) -> int | None:
    req = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            n = resp.headers.get("Content-Length")
            return int(n) if n and n.isdigit() else None
    except (OSError, ValueError):
        return None


def url_paths(cache_dir, spec):
    digest = str(spec["sha256"]).lower()
    base = os.path.join(cache_dir, "url", digest)
    return base, base + ".d"


def fetch_url(spec, cache_dir, timeout=60):
    """-> the unpacked folder (the archive's one top directory when it has exactly one)."""
    archive, unpacked = url_paths(cache_dir, spec)
    want = str(spec["sha256"]).lower()
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    if not (os.path.exists(archive) and _sha256(archive) == want):
        part = f"{archive}.part-{os.getpid()}"
        try:
            with urllib.request.urlopen(spec["url"], timeout=timeout) as resp, open(part, "wb") as out:
                shutil.copyfileobj(resp, out, model_store.CHUNK)
        except OSError as exc:
            _unlink(part)
            raise FetchError(f"downloading {spec['url']}: {exc}") from exc
        got = _sha256(part)
        if got != want:
            _unlink(part)
            raise FetchError(f"{spec['url']}: sha256 {got} is not the inventory's {want}: the file changed or the "
                             "sha256 is wrong; nothing was kept")
        os.replace(part, archive)
    if not os.path.isdir(unpacked):
        tmp = f"{unpacked}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        name = spec["url"].split("?", 1)[0].lower()
        try:
            if name.endswith(".zip"):
                with zipfile.ZipFile(archive) as z:
                    for member in z.namelist():
                        if member.startswith("/") or ".." in member.split("/"):
                            raise FetchError(f"{spec['url']}: the archive holds an unsafe path {member!r}")
                    z.extractall(tmp)
            else:
                with tarfile.open(archive) as t:
                    t.extractall(tmp, filter="data")
        except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise FetchError(f"{spec['url']}: cannot unpack the archive: {exc}") from exc
        os.replace(tmp, unpacked)
    top = [e for e in os.listdir(unpacked) if not e.startswith(".")]
    if len(top) == 1 and os.path.isdir(os.path.join(unpacked, top[0])):
        return os.path.join(unpacked, top[0])
    return unpacked


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(model_store.CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


# ----------------------------------------------------------------------------- any source


def expected_size(spec, endpoint, token, timeout=30):
    """Bytes the source holds, without fetching it (hub listing, HTTP HEAD, the controller folder); None when
    it cannot be known before the download (an archive's server without Content-Length)."""
    k = sources.kind(spec)
    if k == "hub":
        return sum(e["size"] for e in hub_listing(spec, endpoint, token))
    if k == "url":
        return url_size(spec["url"], timeout)
    path = spec["controller"]
    if not os.path.isdir(path):
        raise FetchError(f"controller: {path} is not a directory on the controller")
    return dir_bytes(path)


def token_for(spec, environ=None) -> str | None:
    environ = os.environ if environ is None else environ
    name = spec.get("token_env") or "HF_TOKEN"
    return environ.get(name) or None
