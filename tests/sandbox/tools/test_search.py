from __future__ import annotations

import os
import re

import pytest

from sweworld.sandbox.tools import ToolConfig, run_tool
from sweworld.sandbox.tools.search import GrepPatternError, bre_to_python


def search(sandbox, **params):
    return run_tool("search", sandbox.ctx, params)


@pytest.fixture
def repo(sandbox):
    sandbox.write("pkg/__init__.py", "from .mod import f\n")
    sandbox.write("pkg/mod.py", "def f():\n    return f_helper()\n\ndef f_helper():\n    pass\n")
    sandbox.write("pkg/sub/deep.py", "# calls f()\nf()\n")
    sandbox.write("docs/notes.md", "f() is documented\n")
    sandbox.write("setup.py", "name = 'pkg'\n")
    sandbox.write(".hidden/x.py", "f()\n")
    sandbox.write("pkg/.secret.py", "f()\n")
    return sandbox


def test_directory_search(repo):
    r = search(repo, search_term="f(")
    assert r.exit_code == 0
    assert r.output == (
        'Found 3 matches for "f(" in /testbed:\n'
        "./pkg/mod.py (1 matches)\n"
        "./pkg/sub/deep.py (2 matches)\n"
        'End of matches for "f(" in /testbed\n'
    )


def test_directory_search_all_files_and_subdirectory(repo):
    repo.ctx.config = ToolConfig(python_only=False)
    r = search(repo, search_term="f()", path="pkg")
    assert r.output == (
        'Found 3 matches for "f()" in /testbed/pkg:\n'
        "./pkg/mod.py (1 matches)\n"
        "./pkg/sub/deep.py (2 matches)\n"
        'End of matches for "f()" in /testbed/pkg\n'
    )
    r = search(repo, search_term="f()")
    assert r.output == (
        'Found 4 matches for "f()" in /testbed:\n'
        "./docs/notes.md (1 matches)\n"
        "./pkg/mod.py (1 matches)\n"
        "./pkg/sub/deep.py (2 matches)\n"
        'End of matches for "f()" in /testbed\n'
    )
    r = search(repo, search_term="f()", python_only="true")
    assert "notes.md" not in r.output


def test_paths_are_printed_relative_to_the_working_directory(repo):
    repo.ctx.cwd = "/testbed/pkg"
    r = search(repo, search_term="f_helper")
    assert r.output == (
        'Found 2 matches for "f_helper" in /testbed/pkg:\n'
        "./mod.py (2 matches)\n"
        'End of matches for "f_helper" in /testbed/pkg\n'
    )
    repo.ctx.cwd = "/testbed"
    (repo.tmp / "t.py").write_text("f_helper\n")
    r = search(repo, search_term="f_helper", path="/tmp")
    assert r.output == (
        'Found 1 matches for "f_helper" in /tmp:\n'
        "./../tmp/t.py (1 matches)\n"
        'End of matches for "f_helper" in /tmp\n'
    )


def test_no_matches_and_missing_directory(repo):
    r = search(repo, search_term="zzz")
    assert r.output == 'No matches found for "zzz" in /testbed\n'
    assert r.exit_code == 0
    r = search(repo, search_term="zzz", path="nope")
    assert r.output == "Directory '/testbed/nope' not found or not a directory.\n"
    assert r.exit_code == 1


def test_more_than_100_files(sandbox):
    for i in range(101):
        sandbox.write(f"many/m{i:03d}.py", "needle\n")
    r = search(sandbox, search_term="needle")
    assert r.output == (
        'More than 101 files matched for "needle" in /testbed. Please narrow your search.\n'
    )
    (sandbox.testbed / "many" / "m100.py").unlink()
    r = search(sandbox, search_term="needle")
    assert r.output.startswith('Found 100 matches for "needle" in /testbed:\n./many/m000.py')


def test_single_file_search_is_grep_n(repo):
    r = search(repo, search_term="f_helper", path="pkg/mod.py")
    assert r.output == (
        'Matches for "f_helper" in /testbed/pkg/mod.py:\n'
        "2:    return f_helper()\n"
        "4:def f_helper():\n"
    )
    r = search(repo, search_term="zzz", path="pkg/mod.py")
    assert r.output == 'No matches found for "zzz" in /testbed/pkg/mod.py\n'
    # file mode is not limited to Python files
    r = search(repo, search_term="documented", path="/testbed/docs/notes.md")
    assert r.output == 'Matches for "documented" in /testbed/docs/notes.md:\n1:f() is documented\n'


def test_single_file_search_uses_basic_regular_expressions(repo):
    r = search(repo, search_term="^def f.*():$", path="pkg/mod.py")
    assert (
        r.output
        == 'Matches for "^def f.*():$" in /testbed/pkg/mod.py:\n1:def f():\n4:def f_helper():\n'
    )
    r = search(repo, search_term="f_\\(helper\\|nothing\\)", path="pkg/mod.py")
    assert r.output.endswith("2:    return f_helper()\n4:def f_helper():\n")
    r = search(repo, search_term="[", path="pkg/mod.py")
    assert r.output == "Error executing grep:\ngrep: Unmatched [, [^, [:, [., or [=\n\n"
    assert r.exit_code == 2


def test_search_through_symlinks(repo):
    os.symlink("/etc", repo.testbed / "etc_link")
    os.symlink("/etc/passwd", repo.testbed / "passwd.py")
    os.symlink("/testbed/pkg/mod.py", repo.testbed / "alias.py")
    os.symlink("/testbed/pkg", repo.testbed / "pkg_link")
    r = search(repo, search_term="f_helper")
    assert r.output == (
        'Found 4 matches for "f_helper" in /testbed:\n'
        "./alias.py (2 matches)\n"
        "./pkg/mod.py (2 matches)\n"
        'End of matches for "f_helper" in /testbed\n'
    )
    r = search(repo, search_term="root", path="passwd.py")
    assert r.output.startswith("ERROR: The path 'passwd.py' is outside the workspace")
    r = search(repo, search_term="f_helper", path="alias.py")
    assert r.output.startswith('Matches for "f_helper" in /testbed/pkg/mod.py:\n')


@pytest.mark.parametrize("path", ["../../etc", "/etc", "/", "/root"])
def test_search_outside_the_workspace(repo, path):
    r = search(repo, search_term="root", path=path)
    assert r.output.startswith(f"ERROR: The path '{path}' is outside the workspace")
    assert r.exit_code == 1


def test_binary_and_non_utf8_files(repo):
    repo.write("bin.py", b"needle\x00\xff\n")
    repo.write("latin.py", "needle caf\xe9\n".encode("latin-1"))
    r = search(repo, search_term="needle")
    assert r.output == (
        'Found 2 matches for "needle" in /testbed:\n'
        "./bin.py (1 matches)\n"
        "./latin.py (1 matches)\n"
        'End of matches for "needle" in /testbed\n'
    )
    r = search(repo, search_term="needle", path="bin.py")
    assert r.output == 'Matches for "needle" in /testbed/bin.py:\n\n'


def test_parameter_errors(repo):
    r = run_tool("search", repo.ctx, {"path": "."})
    assert r.output == (
        "ERROR: Missing required parameter 'search_term' for search. "
        "Expected: search(search_term (required), path, python_only).\n"
    )
    r = run_tool("search", repo.ctx, {"search_term": "x", "regex": "1"})
    assert r.output.startswith("ERROR: Unknown parameter 'regex' for search.")
    r = run_tool("search", repo.ctx, {"search_term": "x", "python_only": "maybe"})
    assert r.output == (
        "ERROR: Invalid value for parameter 'python_only': 'maybe' is not a boolean (true/false).\n"
    )


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("a.c", ["abc", "a-c"], ["ac"]),
        ("a*b", ["b", "aab"], ["c"]),
        ("*a", ["*a"], ["a"]),
        ("^*a", ["*a"], ["a"]),
        ("x^y", ["x^y"], ["xy"]),
        ("a$b", ["a$b"], ["ab"]),
        ("end$", ["the end"], ["end it"]),
        ("a+b?", ["a+b?"], ["ab"]),
        ("a\\+", ["aa"], ["b"]),
        ("(x)", ["(x)"], ["x"]),
        ("\\(ab\\)\\1", ["abab"], ["ab"]),
        ("a\\{2\\}", ["aa"], ["a"]),
        ("x\\|y", ["x", "y"], ["z"]),
        ("[[:digit:]][[:alpha:]]", ["1a"], ["a1"]),
        ("[]a]", ["]", "a"], ["b"]),
        ("[^a-c]", ["d"], ["abc"]),
        ("[a\\]", ["\\"], ["b"]),
        ("\\<is\\>", ["it is here"], ["this"]),
        ("a\\.b", ["a.b"], ["axb"]),
        ("{}|", ["{}|"], ["{"]),
    ],
)
def test_bre_translation(pattern, matches, misses):
    regex = re.compile(bre_to_python(pattern))
    for text in matches:
        assert regex.search(text), (pattern, text)
    for text in misses:
        assert not regex.search(text), (pattern, text)


@pytest.mark.parametrize("pattern", ["[abc", "a\\", "\\(a", "a\\)", "[[:nope:]]", "[z-a]"])
def test_bre_errors(pattern):
    with pytest.raises(GrepPatternError):
        bre_to_python(pattern)


def test_special_files_are_skipped(repo):
    os.mkfifo(repo.testbed / "pkg" / "pipe.py")
    r = search(repo, search_term="f_helper")
    assert r.output.startswith('Found 2 matches for "f_helper" in /testbed:\n')
