"""Tests for sweworld.tasks.patches, checked against the real ``git apply``."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from sweworld.tasks.patch_paths import split_lines
from sweworld.tasks.patches import (
    FilePatch,
    Hunk,
    PatchError,
    apply_hunks,
    files_in_patch,
    is_test_path,
    make_unified_diff,
    parse_hunks,
    patch_hunks,
    reverse_patch,
    split_patch,
)

MIXED_PATCH = """\
diff --git a/pkg/mod.py b/pkg/mod.py
index 3b18e51..a042389 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,4 +1,4 @@
 def f():
-    return 1
+    return 2
 # mid
 x = 1
diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1,2 @@
+a = 1
+b = 2
diff --git a/pkg/gone.py b/pkg/gone.py
deleted file mode 100644
index e69de29..0000000
--- a/pkg/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-print('bye')
\\ No newline at end of file
diff --git a/old_name.py b/new_name.py
similarity index 80%
rename from old_name.py
rename to new_name.py
index 1111111..2222222 100644
--- a/old_name.py
+++ b/new_name.py
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
"""


# ------------------------------------------------------------------------------------------
# split_patch / files_in_patch
# ------------------------------------------------------------------------------------------


def test_split_patch_statuses_and_paths() -> None:
    parts = split_patch(MIXED_PATCH)
    assert [(p.path, p.old_path, p.status) for p in parts] == [
        ("pkg/mod.py", "pkg/mod.py", "modified"),
        ("pkg/new.py", "pkg/new.py", "added"),
        ("pkg/gone.py", "pkg/gone.py", "deleted"),
        ("new_name.py", "old_name.py", "renamed"),
        ("run.sh", "run.sh", "modified"),
    ]
    assert all(isinstance(p, FilePatch) for p in parts)
    assert parts[1].new_mode == "100644"
    assert parts[2].old_mode == "100644"
    assert (parts[4].old_mode, parts[4].new_mode) == ("100644", "100755")
    assert [p.hunk_count for p in parts] == [1, 1, 1, 1, 0]
    assert "".join(p.text for p in parts) == MIXED_PATCH


def test_files_in_patch() -> None:
    assert files_in_patch(MIXED_PATCH) == [
        "pkg/mod.py",
        "pkg/new.py",
        "pkg/gone.py",
        "new_name.py",
        "run.sh",
    ]
    assert "old_name.py" in files_in_patch(MIXED_PATCH, include_old_paths=True)
    assert files_in_patch("") == []


def test_removed_lines_that_look_like_headers_are_not_headers() -> None:
    patch = (
        "diff --git a/notes.md b/notes.md\n"
        "--- a/notes.md\n"
        "+++ b/notes.md\n"
        "@@ -1,2 +1,2 @@\n"
        "--- a/fake.txt\n"
        "+++ b/fake.txt\n"
        " context\n"
    )
    assert files_in_patch(patch) == ["notes.md"]
    assert reverse_patch(reverse_patch(patch)) == patch


def test_plain_unified_diff_without_git_header() -> None:
    patch = (
        "\n--- a/src/x.py\n+++ b/src/x.py\n@@ -1,2 +1,2 @@\n-a\n+b\n c\n"
        "--- a/src/y.py\t2024-01-01 00:00:00\n+++ b/src/y.py\t2024-01-02 00:00:00\n"
        "@@ -1 +1 @@\n-1\n+2\n"
    )
    assert files_in_patch(patch) == ["src/x.py", "src/y.py"]
    reversed_ = reverse_patch(patch)
    assert reversed_.startswith("\n--- a/src/x.py\n+++ b/src/x.py\n@@ -1,2 +1,2 @@\n-b\n+a\n c\n")
    assert "--- a/src/y.py\t2024-01-02 00:00:00\n+++ b/src/y.py\t2024-01-01 00:00:00\n" in reversed_


def test_quoted_paths() -> None:
    patch = make_unified_diff("docs/caf\u00e9 menu.txt", "a\n", "b\n")
    assert patch.startswith('diff --git "a/docs/caf\\303\\251 menu.txt" "b/docs/caf\\303\\251')
    assert files_in_patch(patch) == ["docs/caf\u00e9 menu.txt"]
    assert files_in_patch(reverse_patch(patch)) == ["docs/caf\u00e9 menu.txt"]


def test_malformed_patches_raise() -> None:
    with pytest.raises(PatchError, match="truncated hunk"):
        split_patch("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n")
    with pytest.raises(PatchError, match="without a file header"):
        split_patch("@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(PatchError, match="line counts"):
        split_patch("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n*b\n")


def test_files_in_patch_matches_swebench_headers(lite_rows: list[dict[str, Any]]) -> None:
    """SWE-bench finds test files with ``diff --git a/.* b/(.*)``; we must agree."""
    for row in lite_rows:
        for key in ("patch", "test_patch"):
            expected = list(dict.fromkeys(re.findall(r"^diff --git a/.* b/(.*)$", row[key], re.M)))
            assert files_in_patch(row[key]) == expected, (row["instance_id"], key)


# ------------------------------------------------------------------------------------------
# reverse_patch
# ------------------------------------------------------------------------------------------


def test_reverse_patch_headers() -> None:
    reversed_ = reverse_patch(MIXED_PATCH)
    assert "diff --git a/new_name.py b/old_name.py\n" in reversed_
    assert "rename from new_name.py\nrename to old_name.py\n" in reversed_
    assert (
        "deleted file mode 100644\nindex e69de29..0000000\n--- a/pkg/new.py\n+++ /dev/null\n"
    ) in reversed_
    assert "@@ -1,2 +0,0 @@\n-a = 1\n-b = 2\n" in reversed_
    assert (
        "new file mode 100644\nindex 0000000..e69de29\n--- /dev/null\n+++ b/pkg/gone.py\n"
        "@@ -0,0 +1 @@\n+print('bye')\n\\ No newline at end of file\n"
    ) in reversed_
    assert "old mode 100755\nnew mode 100644\n" in reversed_
    assert "index a042389..3b18e51 100644\n" in reversed_
    assert reverse_patch(reversed_) == MIXED_PATCH


def test_reverse_keeps_no_newline_markers_on_their_lines() -> None:
    patch = (
        "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n keep\n"
        "-old end\n\\ No newline at end of file\n+new end\n"
    )
    assert reverse_patch(patch) == (
        "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n keep\n"
        "-new end\n+old end\n\\ No newline at end of file\n"
    )


def test_reverse_binary_and_copy_raise() -> None:
    binary = (
        "diff --git a/img.png b/img.png\nindex 1111111..2222222 100644\n"
        "Binary files a/img.png and b/img.png differ\n"
    )
    with pytest.raises(PatchError, match=r"binary diff of 'img\.png'"):
        reverse_patch(binary)
    git_binary = (
        "diff --git a/img.png b/img.png\nnew file mode 100644\nindex 0000000..2222222\n"
        "GIT binary patch\nliteral 4\nLcmZ?wbhG~X0{;L5\n\nliteral 0\nHcmV?d00001\n\n"
    )
    assert split_patch(git_binary)[0].is_binary
    with pytest.raises(PatchError, match="binary"):
        reverse_patch(git_binary)
    copy = "diff --git a/a.py b/b.py\nsimilarity index 100%\ncopy from a.py\ncopy to b.py\n"
    assert split_patch(copy)[0].status == "copied"
    with pytest.raises(PatchError, match="copy"):
        reverse_patch(copy)


def _all_real_patches(lite_rows: list[dict], verified_rows: list[dict]) -> list[str]:
    patches = [row[k] for row in lite_rows for k in ("patch", "test_patch")]
    patches += [row["patch"] for row in verified_rows]
    patches += [entry["patch"] for row in verified_rows for entry in row.get("resolved_by", [])]
    return [p for p in patches if p]


def test_double_reverse_is_identity_on_real_patches(
    lite_rows: list[dict], verified_rows: list[dict]
) -> None:
    patches = _all_real_patches(lite_rows, verified_rows)
    assert len(patches) > 1000
    for patch in patches:
        reversed_ = reverse_patch(patch)
        assert reversed_ != patch
        both = {"include_old_paths": True}
        assert set(files_in_patch(reversed_, **both)) == set(files_in_patch(patch, **both))
        assert reverse_patch(reversed_) == patch


_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _preimage(part: FilePatch) -> str:
    """A file on which ``part`` applies: each hunk's old side at its line numbers, unique
    filler lines elsewhere (written independently of the module under test)."""
    lines = part.text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _HUNK_RE.match(lines[i])
        i += 1
        if not match:
            continue
        start = int(match.group(1))
        old_left = int(match.group(2)) if match.group(2) is not None else 1
        new_left = int(match.group(3)) if match.group(3) is not None else 1
        before = start - 1 if old_left else start
        while len(out) < before:
            out.append(f"filler {len(out)} of {part.old_path}\n")
        last_was_old = False
        while i < len(lines) and (old_left or new_left or lines[i].startswith("\\")):
            line = lines[i]
            i += 1
            if line.startswith("\\"):
                if last_was_old:
                    out[-1] = out[-1][:-1]
                continue
            kind, text = (line[0], line[1:]) if line else (" ", "")
            if kind in " -":
                out.append(text + "\n")
                old_left -= 1
            if kind in " +":
                new_left -= 1
            last_was_old = kind in " -"
    return "".join(out) if out else f"content of {part.old_path}\n"


def _check_apply_and_reverse(git_tree, patch: str, label: str) -> None:
    tree = git_tree(label)
    for part in split_patch(patch):
        if part.status != "added":
            tree.write({part.old_path: _preimage(part)})
    before = tree.snapshot()
    tree.apply(patch)
    after = tree.snapshot()
    assert after != before, label
    tree.apply(reverse_patch(patch))
    assert tree.snapshot() == before, f"{label}: reversed patch did not restore the tree"
    # And the reversed patch is what `git apply -R` would do.
    tree.apply(patch)
    tree.apply(patch, "-R")
    assert tree.snapshot() == before


def test_reverse_patch_with_git_apply_on_real_patches(lite_rows: list[dict], git_tree: Any) -> None:
    chosen: list[tuple[str, str]] = []
    special = ("new file mode", "deleted file mode", "\\ No newline", "rename from")
    for row in lite_rows:
        for key in ("patch", "test_patch"):
            if any(marker in row[key] for marker in special):
                chosen.append((f"{row['instance_id']}-{key}", row[key]))
    for row in lite_rows[:: max(1, len(lite_rows) // 24)]:
        chosen.append((f"{row['instance_id']}-patch", row["patch"]))
    assert len(chosen) >= 25
    for label, patch in chosen:
        _check_apply_and_reverse(git_tree, patch, label)


def test_reverse_patch_with_git_apply_on_mixed_patch(git_tree: Any) -> None:
    tree = git_tree()
    tree.write(
        {
            "pkg/mod.py": "def f():\n    return 1\n# mid\nx = 1\n",
            "pkg/gone.py": "print('bye')",
            "old_name.py": "one\ntwo\nthree\nfour\nfive\n",
            "run.sh": "echo hi\n",
        }
    )
    before = tree.snapshot()
    tree.apply(MIXED_PATCH)
    after = tree.snapshot()
    assert after["run.sh"][1] is True
    assert "new_name.py" in after and "old_name.py" not in after
    assert after["pkg/new.py"][0] == b"a = 1\nb = 2\n"
    tree.apply(reverse_patch(MIXED_PATCH))
    assert tree.snapshot() == before


# ------------------------------------------------------------------------------------------
# Hunks: the one parser and the one applier
# ------------------------------------------------------------------------------------------


def test_hunks_of_the_mixed_patch() -> None:
    parts = split_patch(MIXED_PATCH)
    assert [p.hunk_count for p in parts] == [len(p.hunks) for p in parts] == [1, 1, 1, 1, 0]
    modified = parts[0].hunks[0]
    assert (modified.old_start, modified.old_len, modified.new_start, modified.new_len) == (
        1,
        4,
        1,
        4,
    )
    assert modified.removed == ["    return 1\n"] and modified.added == ["    return 2\n"]
    assert modified.old_text == "def f():\n    return 1\n# mid\nx = 1\n"
    assert parts[1].hunks[0].old_start == 0 and parts[1].hunks[0].new_text == "a = 1\nb = 2\n"
    # the line before "\\ No newline at end of file" has no line ending
    assert parts[2].hunks[0].lines == (("-", "print('bye')"),)
    assert patch_hunks(MIXED_PATCH)["new_name.py"] == list(parts[3].hunks)
    assert parse_hunks(parts[3].text) == list(parts[3].hunks)
    assert parse_hunks("not a diff") == [] and patch_hunks(None) == {}
    assert patch_hunks("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n") == {}  # truncated


def test_hunk_section_name_and_bare_blank_context_line() -> None:
    patch = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@ def f():\n a\n\n-b\n+B\n"
    (hunk,) = parse_hunks(patch)
    assert hunk.section == "def f():"
    assert hunk.lines == ((" ", "a\n"), (" ", "\n"), ("-", "b\n"), ("+", "B\n"))
    assert apply_hunks(["a\n", "\n", "b\n"], [hunk]) == (["a\n", "\n", "B\n"], [2])


def test_apply_hunks_exact_and_with_offsets() -> None:
    patch = "--- a/t\n+++ b/t\n@@ -2,2 +2,3 @@\n b\n+B\n c\n"
    hunks = parse_hunks(patch)
    base = split_lines("a\nb\nc\nd\n")
    assert apply_hunks(base, hunks) == (["a\n", "b\n", "B\n", "c\n", "d\n"], [2])
    shifted = ["x\n", *base]
    assert apply_hunks(shifted, hunks) is None  # exact: the context is not at line 2
    assert apply_hunks(shifted, hunks, offsets=True) == (
        ["x\n", "a\n", "b\n", "B\n", "c\n", "d\n"],
        [3],
    )
    assert apply_hunks(split_lines("b\nc"), hunks, offsets=True) is None  # "c" lacks "\\n"
    # git anchors a hunk without trailing context at the end of the file
    tail = parse_hunks("--- a/t\n+++ b/t\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n")
    assert apply_hunks(split_lines("a\nb\n"), tail) == (["a\n", "B\n"], [1])
    assert apply_hunks(split_lines("a\nb\nc\n"), tail) is None
    assert isinstance(tail[0], Hunk)


def test_apply_hunks_agrees_with_git_apply_on_real_patches(
    lite_rows: list[dict], git_tree: Any
) -> None:
    checked = 0
    for row in lite_rows[:: max(1, len(lite_rows) // 40)]:
        for key in ("patch", "test_patch"):
            tree = git_tree(f"{row['instance_id']}-{key}")
            parts = [p for p in split_patch(row[key]) if not p.is_binary]
            preimages = {p.old_path: _preimage(p) for p in parts if p.status != "added"}
            tree.write(preimages)
            tree.apply(row[key])
            after = tree.snapshot()
            for part in parts:
                if part.status == "deleted":
                    continue
                applied = apply_hunks(split_lines(preimages.get(part.old_path, "")), part.hunks)
                assert applied is not None, (row["instance_id"], key, part.path)
                text = "".join(applied[0]).encode("utf-8", errors="surrogateescape")
                assert text == after[part.path][0], (row["instance_id"], key, part.path)
                checked += 1
    assert checked >= 60


# ------------------------------------------------------------------------------------------
# is_test_path
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("tests/forms_tests/field_tests/test_urlfield.py", True),
        ("sympy/core/tests/test_basic.py", True),
        ("testing/python/collect.py", True),
        ("lib/matplotlib/tests/baseline_images/x.png", True),
        ("test/unit/foo.py", True),
        ("Tests/images/hopper.png", True),
        ("pkg/foo_test.py", True),
        ("pkg/foo_tests.py", True),
        ("conftest.py", True),
        ("src/conftest.py", True),
        ("test_something.py", True),
        ("django/test/utils.py", True),
        ("web/app.test.js", True),
        ("src/main/java/FooTest.java", True),
        ("e2e/login.spec.ts", True),
        ("django/core/validators.py", False),
        ("src/_pytest/python.py", False),
        ("docs/testing.rst", False),
        ("latest.py", False),
        ("contest/entry.py", False),
        ("requests/models.py", False),
        ("attestation.py", False),
    ],
)
def test_is_test_path(path: str, expected: bool) -> None:
    assert is_test_path(path) is expected


# ------------------------------------------------------------------------------------------
# make_unified_diff
# ------------------------------------------------------------------------------------------

DIFF_CASES: list[tuple[str, str | None, str | None]] = [
    ("mod.py", "a\nb\nc\n", "a\nB\nc\n"),
    ("added.py", None, "x = 1\ny = 2\n"),
    ("deleted.py", "gone\n", None),
    ("noeol_both.txt", "one\ntwo", "one\nTWO"),
    ("noeol_added.txt", "one\ntwo\n", "one\ntwo"),
    ("noeol_removed.txt", "one\ntwo", "one\ntwo\n"),
    ("noeol_new_file.txt", None, "single line"),
    ("noeol_deleted.txt", "last words", None),
    ("crlf.txt", "a\r\nb\r\nc\r\n", "a\r\nB\r\nc\r\n"),
    ("empty_new.txt", None, ""),
    ("empty_deleted.txt", "", None),
    ("emptied.txt", "content\n", ""),
    ("filled.txt", "", "content\n"),
    ("dir with space/file name.py", "a\n", "b\n"),
    ("unicod\u00e9/\u00fc.py", "\u00e4\n", "\u00f6\n"),
    ("formfeed.py", "a\x0cb\nc\x1cd\n", "a\x0cb\nC\x1cd\n"),
    ("big.py", "".join(f"line {i}\n" for i in range(200)), None),
]


def test_make_unified_diff_applies_with_git(git_tree: Any) -> None:
    for path, old, new in DIFF_CASES:
        tree = git_tree()
        if old is not None:
            tree.write({path: old})
        patch = make_unified_diff(path, old, new)
        assert patch.startswith("diff --git ")
        before = tree.snapshot()
        tree.apply(patch)
        if new is None:
            assert not (tree.root / path).exists(), path
        else:
            assert tree.text(path) == new, path
        assert files_in_patch(patch) == [path]
        tree.apply(reverse_patch(patch))
        assert tree.snapshot() == before, path


def test_make_unified_diff_statuses_and_no_change() -> None:
    assert make_unified_diff("x.py", "same\n", "same\n") == ""
    assert split_patch(make_unified_diff("x.py", None, "a\n"))[0].status == "added"
    assert split_patch(make_unified_diff("x.py", "a\n", None))[0].status == "deleted"
    assert split_patch(make_unified_diff("x.py", "a\n", "b\n"))[0].status == "modified"
    header = make_unified_diff("x.py", "a\n", "b\n").splitlines()[:4]
    # git's blob ids: `printf 'a\n' | git hash-object --stdin` = 7898192...
    assert header == [
        "diff --git a/x.py b/x.py",
        "index 7898192..6178079 100644",
        "--- a/x.py",
        "+++ b/x.py",
    ]
    assert "new file mode 100755" in make_unified_diff("run.sh", None, "#!/bin/sh\n", mode="100755")
    with pytest.raises(ValueError, match="both None"):
        make_unified_diff("x.py", None, None)


def test_make_unified_diff_random_edits_apply_exactly(git_tree: Any) -> None:
    rng = random.Random(1234)
    vocabulary = ["alpha", "beta", "", "    return x", "}", "# note", "\tTAB", "gamma delta"]
    files: dict[str, str] = {}
    expected: dict[str, str] = {}
    patches = []
    for n in range(60):
        old_lines = [rng.choice(vocabulary) + f" {rng.randint(0, 5)}" for _ in range(40)]
        new_lines = list(old_lines)
        for _ in range(rng.randint(1, 6)):
            op = rng.choice(["insert", "delete", "replace"])
            pos = rng.randrange(len(new_lines) + 1)
            if op == "insert":
                new_lines[pos:pos] = [f"inserted {rng.random():.6f}"] * rng.randint(1, 3)
            elif new_lines and pos < len(new_lines):
                if op == "delete":
                    del new_lines[pos : pos + rng.randint(1, 3)]
                else:
                    new_lines[pos] = f"replaced {rng.random():.6f}"
        old = "\n".join(old_lines) + ("\n" if rng.random() < 0.7 else "")
        new = "\n".join(new_lines) + ("\n" if rng.random() < 0.7 else "")
        path = f"pkg/m{n}.py"
        files[path] = old
        expected[path] = new
        patches.append(make_unified_diff(path, old, new, context=rng.choice([0, 1, 3])))
    tree = git_tree()
    tree.write(files)
    combined = "".join(patches)
    unidiff_zero = ("--unidiff-zero",)
    tree.apply(combined, *unidiff_zero)
    for path, text in expected.items():
        assert tree.text(path) == text, path
    tree.apply(reverse_patch(combined), *unidiff_zero)
    for path, text in files.items():
        assert tree.text(path) == text, path
