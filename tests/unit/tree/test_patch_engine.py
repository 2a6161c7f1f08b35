"""The unified-diff engine of dflash_tree (module_utils/dflash_tree/diff.py) on small synthetic inputs (exact context, offsets, no fuzz)."""

from __future__ import annotations

import pytest
from ansible.module_utils.dflash_tree import common, diff, series

BASE = b"".join(b"line %d\n" % i for i in range(1, 31))


def patch_text(body: str, path: str = "sglang/m.py") -> bytes:
    return (f"some description\n\n--- a/{path}\n+++ b/{path}\n" + body).encode()


def apply(data: bytes | None, text: bytes, name: str = "t.patch") -> bytes | None:
    (fp,) = diff.parse_patch(text, name)
    return diff.apply_file_patch(data, fp, name)


def test_exact_hunk_applies():
    text = patch_text("@@ -4,3 +4,4 @@\n line 4\n-line 5\n+LINE 5\n+extra\n line 6\n")
    out = apply(BASE, text).splitlines()
    assert out[3:7] == [b"line 4", b"LINE 5", b"extra", b"line 6"]
    assert len(out) == 31


def test_offset_search_finds_moved_context_like_patch_does():
    # the header says line 10, the text is really at line 16: found by the nearest-first search
    text = patch_text("@@ -10,3 +10,3 @@\n line 15\n-line 16\n+sixteen\n line 17\n")
    out = apply(BASE, text).splitlines()
    assert out[15] == b"sixteen"
    assert out.count(b"sixteen") == 1


def test_offset_of_earlier_hunk_carries_to_later_hunks():
    base = b"x\n" * 5 + BASE
    text = patch_text(
        "@@ -2,2 +2,2 @@\n line 2\n-line 3\n+three\n@@ -20,2 +20,2 @@\n line 20\n-line 21\n+twenty-one\n"
    )
    out = apply(base, text).splitlines()
    assert out[7] == b"three" and out[25] == b"twenty-one"


def test_no_fuzz_a_single_changed_context_line_fails_naming_the_hunk():
    text = patch_text(
        "@@ -2,2 +2,2 @@\n line 2\n-line 3\n+three\n@@ -20,3 +20,3 @@\n line 20\n-line 21\n+x\n line 99\n"
    )
    with pytest.raises(common.PatchError) as err:
        apply(BASE, text, "0007-broken.patch")
    e = err.value
    assert (e.patch, e.file, e.hunk, e.header) == ("0007-broken.patch", "sglang/m.py", 2, "@@ -20,3 +20,3 @@")
    msg = str(e)
    assert "patch 0007-broken.patch, file sglang/m.py, hunk #2 (@@ -20,3 +20,3 @@)" in msg
    assert "at line 22 the patch expects 'line 99', the file has 'line 22'" in msg


def test_hunks_never_apply_before_the_previous_hunk():
    text = patch_text("@@ -20,1 +20,1 @@\n-line 20\n+twenty\n@@ -3,1 +3,1 @@\n-line 3\n+three\n")
    with pytest.raises(common.PatchError) as err:
        apply(BASE, text)
    assert err.value.hunk == 2


def test_applying_twice_is_reported_as_such():
    text = patch_text("@@ -4,3 +4,3 @@\n line 4\n-line 5\n+LINE 5\n line 6\n")
    once = apply(BASE, text)
    with pytest.raises(common.PatchError, match=r"already in the file \(applied twice\?\)"):
        apply(once, text)


def test_new_file_and_missing_file_and_existing_file():
    create = b"--- /dev/null\n+++ b/sglang/new.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n"
    assert apply(None, create) == b"a = 1\nb = 2\n"
    with pytest.raises(common.PatchError, match="already exists"):
        apply(b"x\n", create)
    with pytest.raises(common.PatchError, match="does not exist in the tree"):
        apply(None, patch_text("@@ -1,1 +1,1 @@\n-line 1\n+one\n"))


def test_delete_file():
    delete = b"--- a/sglang/old.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n"
    assert apply(b"a\nb\n", delete) is None
    with pytest.raises(common.PatchError, match="lines would remain"):
        apply(b"a\nb\nc\n", delete)


def test_no_newline_at_end_of_file_markers():
    text = patch_text(
        "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    )
    assert apply(b"a\nb", text) == b"a\nc"
    with pytest.raises(common.PatchError):
        apply(b"a\nb\n", text)  # the file has a newline the patch says is absent: exact, no fuzz


def test_crlf_and_form_feed_are_plain_bytes():
    data = b"a\r\nb\x0cc\r\nd\r\n"
    text = patch_text("@@ -1,2 +1,2 @@\n a\r\n-b\x0cc\r\n+B\r\n")
    assert apply(data, text) == b"a\r\nB\r\nd\r\n"


def test_blank_context_line_without_its_space():
    data = b"a\n\nb\n"
    text = patch_text("@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n")
    assert apply(data, text) == b"a\n\nB\n"


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        ("a/sglang/srt/x.py", "b/sglang/srt/x.py", "sglang/srt/x.py"),
        ("a/python/sglang/srt/x.py\t2026-01-01", "b/python/sglang/srt/x.py", "sglang/srt/x.py"),
        ("pristine/sglang/x.py", "patched/sglang/x.py", "sglang/x.py"),
    ],
)
def test_paths_are_p1_under_sglang(old, new, path):
    (fp,) = diff.parse_patch(f"--- {old}\n+++ {new}\n@@ -1 +1 @@\n-a\n+b\n".encode(), "p")
    assert fp.path == path


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "must name a file under sglang/"),
        ("--- a/other/x.py\n+++ b/other/x.py\n@@ -1 +1 @@\n-a\n+b\n", "must name a file under sglang/"),
        ("--- a/sglang/x.py\n+++ b/sglang/y.py\n@@ -1 +1 @@\n-a\n+b\n", "renames are not supported"),
        ("just words\n", "no file diffs found"),
        ("--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -1,2 +1,2 @@\n-a\n+b\n", "ends inside the hunk"),
        ("--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -1,1 +1,1 @@\n-a\n-b\n+c\n", "hunk #1"),
        ("--- a/sglang/x.py\n+++ b/sglang/x.py\nGIT binary patch\n", "binary"),
        ("--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ bogus @@\n", "malformed hunk header"),
    ],
)
def test_malformed_patches_are_refused_with_the_patch_name(text, match):
    with pytest.raises(common.PatchError, match=match) as err:
        for fp in diff.parse_patch(text.encode(), "0009-bad.patch"):
            diff.apply_file_patch(b"a\nb\n", fp, "0009-bad.patch")
    assert str(err.value).startswith("patch 0009-bad.patch")


def test_series_parsing(tmp_path):
    assert series.parse_series("# c\n\n0001-a.patch\n0002-b.patch  # why\n") == ["0001-a.patch", "0002-b.patch"]
    for bad, match in [
        ("0001-a.patch -p0\n", "no options"),
        ("0001-a.patch\n0001-a.patch\n", "listed twice"),
        ("../x.patch\n", "plain file name"),
    ]:
        with pytest.raises(common.TreeError, match=match):
            series.parse_series(bad)
    (tmp_path / "series").write_text("0001-a.patch\n")
    with pytest.raises(common.TreeError, match="0001-a.patch does not exist"):
        series.read_series_dir(str(tmp_path))
    (tmp_path / "0001-a.patch").write_bytes(b"p")
    (p,) = series.read_series_dir(str(tmp_path))
    assert p["name"] == "0001-a.patch" and p["sha256"] == common.sha256_bytes(b"p")


def test_series_applies_in_order_and_tracks_pristine():
    files = {"sglang/m.py": BASE}
    p1 = {"name": "1.patch", "content": patch_text("@@ -1,1 +1,1 @@\n-line 1\n+one\n")}
    p2 = {"name": "2.patch", "content": patch_text("@@ -1,2 +1,2 @@\n one\n-line 2\n+two\n")}
    contents, pristine, touched = diff.apply_series(files.get, [p1, p2])
    assert contents["sglang/m.py"].startswith(b"one\ntwo\nline 3\n")
    assert pristine == {"sglang/m.py": common.sha256_bytes(BASE)}
    assert touched == {"sglang/m.py": ["1.patch", "2.patch"]}
    with pytest.raises(common.PatchError, match="patch 2.patch"):
        diff.apply_series(files.get, [p2, p1])  # 2 needs 1's result
