#!/usr/bin/env python3
"""Score the toolkit's log diagnosis and reply judge on the held-out half of issue 33's corpus.

    .venv/bin/python benchmarks/heldout-33/score.py                 # round 4's set, from the repository root
    .venv/bin/python benchmarks/heldout-33/score.py round5          # round 5's (a folder beside this file)

In a later round's set, an item whose source thread is also a development fixture's (tests/fixtures/: the same issue
collected twice, once for development) is left out of the score and named: it is not unseen. (Round 4's set has since
become development fixtures itself; its run scores every item, as it was scored.)

The toolkit's code is imported by its one name (ansible.module_utils.<package>) from REPO's module_utils,
as its tests do. Hang logs get the silence the wait would hand over (the process is alive and has written
nothing for 600 s): that is what the wait knows and a log file alone does not say.
"""
import json
import re
import sys
from collections import Counter
from pathlib import Path

import yaml

sys.dont_write_bytecode = True
repo = Path(__file__).resolve().parents[2]
import ansible.module_utils

ansible.module_utils.__path__.append(str(repo / "module_utils"))
from ansible.module_utils.dflash_diagnose.engine import diagnose_file
from ansible.module_utils.dflash_release.gates_judge import judge_reply

ROOT = Path(__file__).resolve().parent / (sys.argv[1] if len(sys.argv) > 1 else "")


def thread(url):
    m = re.search(r"github\.com/([^/]+)/([^/]+)/(?:issues|pull|discussions)/(\d+)", str(url or ""))
    return (m.group(1).lower(), m.group(2).lower(), m.group(3)) if m else None


# the set's own items, moved into the fixtures after it was scored, say so in their note ("round 5 held-out"): they
# are this set, not a second collection of its threads
OWN = f"round {sys.argv[1].removeprefix('round')} held-out" if len(sys.argv) > 1 else None
URL = r"https?://github\.com/[^\s'\")\]]+"


def dev_threads(data, text):
    """The threads a fixture file names, less the entries that are this set's own items."""
    if isinstance(data, dict) and OWN and OWN in str(data.get("note", "")):
        return set()
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if lists and all(isinstance(e, dict) for v in lists for e in v):
            return {thread(u) for v in lists for e in v if not (OWN and OWN in str(e.get("note", "")))
                    for u in re.findall(URL, json.dumps(e))}
    return {thread(u) for u in re.findall(URL, text)}


DEV = set()
for f in (repo / "tests" / "fixtures").rglob("*"):
    if f.is_file() and f.suffix in (".yml", ".yaml", ".json", ".md"):
        text = f.read_text(errors="ignore")
        try:
            data = json.loads(text) if f.suffix == ".json" else yaml.safe_load(text) if f.suffix != ".md" else None
        except (ValueError, yaml.YAMLError):
            data = None
        DEV |= dev_threads(data, text)
DEV.discard(None)


def seen(e):
    if len(sys.argv) > 1 and thread(e.get("source")) in DEV:
        print(f"-- left out (its thread is a development fixture's too): {e['file']} {e['source']}")
        return True
    return False


idx = yaml.safe_load((ROOT / "logs" / "index.yml").read_text())["logs"]
conf, n = Counter(), 0
print("# logs")
for e in idx:
    if seen(e):
        continue
    n += 1
    silent = 600.0 if e["kind"] == "hang" else None
    r = diagnose_file(str(ROOT / "logs" / e["file"]), silent_seconds=silent)
    got = r.get("cause")
    text = " ".join(str(r.get(k, "")) for k in ("summary", "remedy")).lower()
    hit = [w for w in (e.get("expect") or []) if str(w).lower() in text]
    ok = got == e["cause"]
    conf[(e["kind"], ok)] += 1
    print(f"{'ok' if ok else 'XX'} {e['kind']:11s} label={e['cause']:22s} got={got!s:22s} "
          f"expect {len(hit)}/{len(e.get('expect') or [])}  {e['file']}")
    if not ok:
        print(f"     summary: {str(r.get('summary'))[:200]}")
right = sum(v for (k, ok), v in conf.items() if ok)
for kind in sorted({k for k, _ in conf}):
    print(f"  {kind:11s} right {conf[(kind, True)]:2d}  wrong {conf[(kind, False)]:2d}")
print(f"logs: right cause {right}/{n}")

ridx = yaml.safe_load((ROOT / "replies" / "index.yml").read_text())["replies"]
rc = Counter()
print("\n# replies")
for e in ridx:
    if seen(e):
        continue
    d = json.loads((ROOT / "replies" / e["file"]).read_text())
    # what the request said (thinking off) and how the reply ended, where the set records them
    v = judge_reply(d.get("content"), d.get("reasoning_content"), prompt=d.get("prompt"), context=d.get("context"),
                    finish_reason=d.get("finish_reason"), thinking=d.get("thinking"))
    flagged = bool(v.get("broken")) if isinstance(v, dict) else bool(v)
    rc[(e["label"], flagged)] += 1
    right_v = flagged == (e["label"] == "broken")
    print(f"{'ok' if right_v else 'XX'} {e['label']:6s} {e['kind']:22s} flagged={flagged!s:5s} {e['file']}"
          + ("" if right_v else f"\n     verdict: {str(v)[:200]}"))
print(f"replies: broken flagged {rc[('broken', True)]}/{rc[('broken', True)] + rc[('broken', False)]}, "
      f"good flagged {rc[('good', True)]}/{rc[('good', True)] + rc[('good', False)]}")
