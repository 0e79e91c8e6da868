from __future__ import annotations

import ast
import os
import stat
import threading

import pytest

from sweworld.sandbox.paths import SandboxPaths
from sweworld.sandbox.tools import ToolConfig, ToolContext, run_tool
from sweworld.sandbox.tools.file_editor import TRUNCATED_MESSAGE

MOD = "import os\n\ndef f():\n    return 1\n"


def fe(sandbox, **params):
    return run_tool("file_editor", sandbox.ctx, params)


@pytest.fixture
def repo(sandbox):
    sandbox.write("pkg/__init__.py", "")
    sandbox.write("pkg/mod.py", MOD)
    sandbox.write("pkg/sub/deep.py", "x = 1\n")
    sandbox.write("README.md", "# readme\n")
    sandbox.write("setup.py", "setup()\n")
    sandbox.write(".git/config", "[core]\n")
    sandbox.write(".hidden.py", "h = 1\n")
    return sandbox


# ----------------------------------------------------------------------------- view


def test_view_directory_python_only(repo):
    r = fe(repo, command="view", path="/testbed")
    assert r.exit_code == 0
    assert r.output == (
        "Here's the files and directories up to 2 levels deep in /testbed, excluding hidden:\n"
        "/testbed\n"
        "/testbed/pkg\n"
        "/testbed/pkg/__init__.py\n"
        "/testbed/pkg/mod.py\n"
        "/testbed/pkg/sub\n"
        "/testbed/setup.py\n"
        "\n"
    )


def test_view_directory_all_files_and_relative_path(repo):
    repo.ctx.config = ToolConfig(python_only=False)
    r = fe(repo, command="view", path="/testbed/")
    assert r.output == (
        "Here's the files and directories up to 2 levels deep in /testbed, excluding hidden:\n"
        "/testbed\n"
        "/testbed/README.md\n"
        "/testbed/pkg\n"
        "/testbed/pkg/__init__.py\n"
        "/testbed/pkg/mod.py\n"
        "/testbed/pkg/sub\n"
        "/testbed/setup.py\n"
        "\n"
    )
    r = fe(repo, command="view", path="pkg")
    assert r.output == (
        "Here's the files and directories up to 2 levels deep in pkg, excluding hidden:\n"
        "pkg\npkg/__init__.py\npkg/mod.py\npkg/sub\npkg/sub/deep.py\n\n"
    )


def test_view_directory_does_not_follow_symlinks(repo):
    os.symlink("/", repo.testbed / "rootlink")
    os.symlink("/testbed/pkg", repo.testbed / "pkglink")
    r = fe(repo, command="view", path="/testbed")
    assert "rootlink" not in r.output  # a link is not a directory (find -type d)
    assert "/testbed/pkglink/" not in r.output


def test_view_python_file(repo):
    r = fe(repo, command="view", path="/testbed/pkg/mod.py")
    assert r.output == (
        "Here's the result of running `cat -n` on the file: /testbed/pkg/mod.py:\n"
        "     1 import os\n"
        "     2 \n"
        "     3 def f():\n"
        "     4     return 1\n"
    )
    assert r.exit_code == 0
    rel = fe(repo, command="view", path="pkg/mod.py")
    assert rel.output.startswith("Here's the result of running `cat -n` on the file: pkg/mod.py:\n")


@pytest.mark.parametrize("view_range", ["[2, 3]", "2,3", "2 3", "(2, 3)", " [2,3] "])
def test_view_range_forms(repo, view_range):
    r = fe(repo, command="view", path="/testbed/pkg/mod.py", view_range=view_range)
    assert r.output == (
        "Here's the result of running `cat -n` on the file: /testbed/pkg/mod.py:\n"
        "     2 \n"
        "     3 def f():\n"
    )


def test_view_range_to_end_and_list_value(repo):
    r = run_tool(
        "file_editor",
        repo.ctx,
        {"command": "view", "path": "/testbed/pkg/mod.py", "view_range": [3, -1]},
    )
    assert r.output.endswith("     3 def f():\n     4     return 1\n")


@pytest.mark.parametrize(
    ("view_range", "error"),
    [
        ("[0, 2]", "Invalid view_range [0, 2]: start line must be in [1, 4]"),
        ("[5, 5]", "Invalid view_range [5, 5]: start line must be in [1, 4]"),
        (
            "[3, 2]",
            "Invalid view_range [3, 2]: end must be >= start and <= 4, or -1 to view until end.",
        ),
        (
            "[1, 99]",
            "Invalid view_range [1, 99]: end must be >= start and <= 4, or -1 to view until end.",
        ),
    ],
)
def test_view_range_out_of_bounds(repo, view_range, error):
    r = fe(repo, command="view", path="/testbed/pkg/mod.py", view_range=view_range)
    assert r.output == f"\nERROR: {error}\n"


@pytest.mark.parametrize("view_range", ["abc", "1", "1,2,3", "[1, x]", ""])
def test_view_range_not_two_ints(repo, view_range):
    r = fe(repo, command="view", path="/testbed/pkg/mod.py", view_range=view_range)
    assert r.output.startswith("ERROR: Invalid value for parameter 'view_range'")
    assert "Expected two integers [start_line, end_line]" in r.output
    assert r.exit_code == 2


def test_view_non_python_file_is_refused_like_r2e(repo):
    r = fe(repo, command="view", path="/testbed/README.md")
    assert r.output == (
        "\nERROR: ERROR: Viewing non-Python files is disallowed for saving context. "
        "File 'README.md' is not a .py file.\n"
    )
    repo.ctx.config = ToolConfig(python_only=False)
    r = fe(repo, command="view", path="README.md")
    assert r.output == (
        "Here's the result of running `cat -n` on the file: README.md:\n     1 # readme\n"
    )


def _long_module() -> str:
    head = (
        '"""Module doc."""\n'  # 1
        "import os\n"  # 2
        "\n"  # 3
        "class A:\n"  # 4
        '    """Doc line 1\n'  # 5
        "    line 2\n"  # 6
        "    line 3\n"  # 7
        "    line 4\n"  # 8
        "    line 5\n"  # 9
        '    """\n'  # 10
        "    def m(self):\n"  # 11
        "        a = 1\n"  # 12
        "        b = 2\n"  # 13
        "        c = 3\n"  # 14
        "        return a + b + c\n"  # 15
        "    def short(self):\n"  # 16
        "        return 1\n"  # 17
        "def g():\n"  # 18
        "    x = 1\n"  # 19
        "    y = 2\n"  # 20
        "    z = 3\n"  # 21
        "    return x\n"  # 22
    )
    return head + "".join(f"V{i} = {i}\n" for i in range(23, 161))  # 160 lines


def test_long_python_file_gets_the_concise_view(repo):
    repo.write("big.py", _long_module())
    r = fe(repo, command="view", path="/testbed/big.py")
    expected_lines = [
        '     1 """Module doc."""',
        "     2 import os",
        "     3 ",
        "     4 class A:",
        '     5     """Doc line 1',
        "     6 ... eliding lines 6-9 ...",
        '    10     """',
        "    11     def m(self):",
        "    12 ... eliding lines 12-15 ...",
        "    16     def short(self):",
        "    17         return 1",
        "    18 def g():",
        "    19 ... eliding lines 19-22 ...",
    ] + [f"{i:6d} V{i} = {i}" for i in range(23, 161)]
    assert r.output == (
        "Here is a condensed view for file: /testbed/big.py; [Note: Useful for understanding "
        "file structure in a concise manner. Please use specific view_range without concise cmd "
        "if you want to explore further into the relevant parts.]\n"
        + "\n".join(expected_lines)
        + "\n"
    )


def test_concise_threshold_and_explicit_view_range(repo):
    text = "".join(f"V{i} = {i}\n" for i in range(1, 151))  # exactly 150 lines
    repo.write("b150.py", text)
    r = fe(repo, command="view", path="b150.py")
    assert r.output.startswith("Here's the result of running `cat -n` on the file: b150.py:\n")
    repo.write("big.py", _long_module())
    r = fe(repo, command="view", path="big.py", view_range="[11, 13]")
    assert r.output == (
        "Here's the result of running `cat -n` on the file: big.py:\n"
        "    11     def m(self):\n"
        "    12         a = 1\n"
        "    13         b = 2\n"
    )
    small = fe(repo, command="view", path="pkg/mod.py", concise="True")
    assert small.output.startswith("Here is a condensed view for file: pkg/mod.py;")


def test_concise_view_of_a_file_with_a_syntax_error(repo):
    bad = "def f(:\n" + "x = 1\n" * 200
    repo.write("bad.py", bad)
    try:
        ast.parse(bad, filename="/testbed/bad.py")
    except SyntaxError as exc:
        message = str(exc)
    r = fe(repo, command="view", path="/testbed/bad.py")
    assert r.output == f"ERROR: Syntax error for file /testbed/bad.py: {message}\n"


def test_long_output_is_clipped(repo):
    repo.ctx.config = ToolConfig(python_only=False)
    repo.write("long.txt", "".join(f"line {i:05d} {'x' * 40}\n" for i in range(1000)))
    r = fe(repo, command="view", path="long.txt")
    assert r.output.endswith(TRUNCATED_MESSAGE + "\n")
    assert len(r.output) == 10000 + len(TRUNCATED_MESSAGE) + 1
    assert TRUNCATED_MESSAGE == (
        "<response clipped><NOTE>To save on context only part of this file has been shown to "
        "you. You should retry this tool after you have searched inside the file with `grep -n` "
        "in order to find the line numbers of what you are looking for.</NOTE>"
    )


def test_crlf_file_is_viewed_with_universal_newlines(repo):
    repo.write("crlf.py", "a = 1\r\nb = 2\r\n")
    r = fe(repo, command="view", path="crlf.py")
    assert r.output.endswith("     1 a = 1\n     2 b = 2\n")


# ----------------------------------------------------------------------------- bad files


def test_binary_file_is_refused(repo):
    repo.write("blob.py", b"abc\x00\x01\x02")
    for params in (
        {"command": "view", "path": "blob.py"},
        {"command": "str_replace", "path": "blob.py", "old_str": "abc", "new_str": "x"},
        {"command": "insert", "path": "blob.py", "insert_line": "0", "new_str": "x"},
    ):
        r = fe(repo, **params)
        assert r.output == (
            "ERROR: The file blob.py appears to be binary (it contains NUL bytes); "
            "file_editor only works on text files.\n"
        )
    assert (repo.testbed / "blob.py").read_bytes() == b"abc\x00\x01\x02"


def test_huge_file_is_refused_but_a_range_can_be_read(repo):
    repo.ctx.config = ToolConfig(max_file_bytes=100)
    repo.write("huge.py", "".join(f"v{i} = {i}\n" for i in range(100)))
    size = (repo.testbed / "huge.py").stat().st_size
    r = fe(repo, command="view", path="huge.py")
    assert r.output == (
        f"ERROR: The file huge.py is too large for file_editor ({size} bytes; the limit is 100 "
        "bytes). Pass a view_range to see part of it, or use execute_bash with `grep -n`, "
        "`head`, `tail` or `sed -n` to work with parts of it.\n"
    )
    r = fe(repo, command="str_replace", path="huge.py", old_str="v1 = 1\n", new_str="")
    assert r.output == (
        f"ERROR: The file huge.py is too large for file_editor ({size} bytes; the limit is 100 "
        "bytes). Use execute_bash with `grep -n`, `head`, `tail` or `sed -n` to work with parts "
        "of it.\n"
    )
    r = fe(repo, command="view", path="huge.py", view_range="[99, -1]")
    assert r.output == (
        "Here's the result of running `cat -n` on the file: huge.py:\n"
        "    99 v98 = 98\n"
        "   100 v99 = 99\n"
    )
    r = fe(repo, command="view", path="huge.py", view_range="[99, 200]")
    assert r.output == (
        "\nERROR: Invalid view_range [99, 200]: end must be >= start and <= 100, "
        "or -1 to view until end.\n"
    )
    r = fe(repo, command="create", path="new.py", file_text="x" * 101)
    assert r.output == "ERROR: Refusing to write 101 bytes to new.py: the limit is 100 bytes.\n"
    assert not (repo.testbed / "new.py").exists()


def test_non_utf8_file(repo):
    repo.write("latin.py", "s = 'caf\xe9'\n".encode("latin-1"))
    r = fe(repo, command="view", path="latin.py")
    assert r.output == (
        "Note: latin.py is not valid UTF-8 text; it is shown decoded as latin-1.\n"
        "Here's the result of running `cat -n` on the file: latin.py:\n"
        "     1 s = 'caf\xe9'\n"
    )
    r = fe(repo, command="str_replace", path="latin.py", old_str="s", new_str="t")
    assert r.output == (
        "ERROR: The file latin.py is not valid UTF-8 text; file_editor only edits UTF-8 "
        "files. Use execute_bash (e.g. sed) to change it.\n"
    )
    assert (repo.testbed / "latin.py").read_bytes() == "s = 'caf\xe9'\n".encode("latin-1")


# ----------------------------------------------------------------------------- paths


@pytest.mark.parametrize(
    "path", ["../../etc/passwd", "/etc/passwd", "/root", "..", "/testbed/../../etc"]
)
def test_paths_outside_the_workspace(repo, path):
    r = fe(repo, command="view", path=path)
    assert r.output.startswith(f"ERROR: The path '{path}' is outside the workspace")
    assert r.output.endswith("only paths under /testbed, /tmp can be accessed.\n")


@pytest.mark.parametrize("target", ["/etc/passwd", "/", "../../../../etc/passwd"])
def test_symlinks_leaving_the_workspace(repo, target):
    os.symlink(target, repo.testbed / "evil.py")
    for command in ("view", "str_replace", "undo_edit"):
        r = fe(repo, command=command, path="evil.py", old_str="root", new_str="x")
        assert "is outside the workspace" in r.output
    r = fe(repo, command="create", path="evil.py", file_text="x")
    assert "is outside the workspace" in r.output


def test_symlink_inside_the_workspace_is_followed_in_the_sandbox(repo):
    os.symlink("/testbed/pkg/mod.py", repo.testbed / "alias.py")
    r = fe(repo, command="view", path="alias.py")
    assert r.output.endswith("     4     return 1\n")
    r = fe(repo, command="str_replace", path="alias.py", old_str="return 1", new_str="return 2")
    assert "The file alias.py has been edited." in r.output
    assert repo.read("pkg/mod.py") == MOD.replace("return 1", "return 2")
    assert os.path.islink(repo.testbed / "alias.py")
    # the undo history is keyed by the canonical path
    r = fe(repo, command="undo_edit", path="/testbed/pkg/mod.py")
    assert r.output.startswith("Last edit to /testbed/pkg/mod.py undone successfully.")
    assert repo.read("pkg/mod.py") == MOD


def test_missing_path_and_directory(repo):
    r = fe(repo, command="view", path="/testbed/nope.py")
    assert r.output == "ERROR: The path '/testbed/nope.py' does not exist.\n"
    r = fe(repo, command="str_replace", path="/testbed/pkg", old_str="a", new_str="b")
    assert r.output == (
        "ERROR: The path '/testbed/pkg' is a directory. Only 'view' can be used on directories.\n"
    )


# ----------------------------------------------------------------------------- create


def test_create(repo):
    r = fe(repo, command="create", path="/testbed/new.py", file_text="print('hi')\n")
    assert r.output == (
        "File created at /testbed/new.py. Here's the result of running `cat -n` on "
        "/testbed/new.py:\n"
        "     1\tprint('hi')\n"
        "     2\t\n"
        "Review the file and make sure that it is as expected. Edit the file if necessary.\n"
    )
    assert repo.read("new.py") == "print('hi')\n"
    r = fe(repo, command="create", path="/tmp/scratch.txt", file_text="a\tb")
    assert r.output == (
        "File created at /tmp/scratch.txt. Here's the result of running `cat -n` on "
        "/tmp/scratch.txt:\n"
        "     1\ta       b\n"
        "Review the file and make sure that it is as expected. Edit the file if necessary.\n"
    )
    assert (repo.tmp / "scratch.txt").read_text() == "a\tb"


def test_create_errors(repo):
    r = fe(repo, command="create", path="/testbed/pkg/mod.py", file_text="x")
    assert r.output == (
        "ERROR: File already exists at: /testbed/pkg/mod.py. Cannot overwrite with 'create'.\n"
    )
    assert repo.read("pkg/mod.py") == MOD
    r = fe(repo, command="create", path="/testbed/x.py")
    assert r.output == "ERROR: Cannot create file without 'file_text' parameter.\n"
    r = fe(repo, command="create", path="/testbed/nodir/x.py", file_text="x")
    assert r.output == (
        "ERROR: Error creating file at /testbed/nodir/x.py: [Errno 2] No such file or "
        "directory: '/testbed/nodir/x.py'\n"
    )


def test_create_through_a_dangling_link_inside(repo):
    os.symlink("/testbed/pkg/target.py", repo.testbed / "dangling.py")
    r = fe(repo, command="create", path="dangling.py", file_text="t = 1")
    assert r.output.startswith("File created at dangling.py.")
    assert repo.read("pkg/target.py") == "t = 1"


# ----------------------------------------------------------------------------- str_replace


def test_str_replace(repo):
    r = fe(
        repo,
        command="str_replace",
        path="/testbed/pkg/mod.py",
        old_str="return 1",
        new_str="return 42",
    )
    assert r.output == (
        "The file /testbed/pkg/mod.py has been edited. Here's the result of running `cat -n` on "
        "a snippet of /testbed/pkg/mod.py:\n"
        "     1\timport os\n"
        "     2\t\n"
        "     3\tdef f():\n"
        "     4\t    return 42\n"
        "     5\t\n"
        "Review the changes and make sure they are as expected. Edit the file again if necessary.\n"
    )
    assert repo.read("pkg/mod.py") == "import os\n\ndef f():\n    return 42\n"


def test_str_replace_snippet_window_in_a_long_file(repo):
    repo.write("lines.py", "".join(f"l{i} = {i}\n" for i in range(1, 21)))
    r = fe(
        repo, command="str_replace", path="lines.py", old_str="l10 = 10\n", new_str="a = 1\nb = 2\n"
    )
    # replacement on (0-based) line 9: window starts at line 5 and ends 4 + 2 lines later
    expected = ["l6 = 6", "l7 = 7", "l8 = 8", "l9 = 9", "a = 1", "b = 2", "l11 = 11", "l12 = 12"]
    expected += ["l13 = 13", "l14 = 14", "l15 = 15"]
    numbered = "".join(f"{i:6}\t{line}\n" for i, line in enumerate(expected, 6))
    assert r.output == (
        "The file lines.py has been edited. Here's the result of running `cat -n` on a snippet "
        "of lines.py:\n" + numbered + "Review the changes and make sure they are as expected. "
        "Edit the file again if necessary.\n"
    )


def test_str_replace_without_new_str_deletes(repo):
    fe(repo, command="str_replace", path="pkg/mod.py", old_str="import os\n")
    assert repo.read("pkg/mod.py") == "\ndef f():\n    return 1\n"


def test_str_replace_errors(repo):
    r = fe(repo, command="str_replace", path="pkg/mod.py", old_str="nothere", new_str="x")
    assert r.output == "ERROR: No occurrences of 'nothere' found in pkg/mod.py for replacement.\n"
    r = fe(repo, command="str_replace", path="pkg/mod.py", old_str="o", new_str="x")
    assert r.output == (
        "ERROR: Multiple occurrences of 'o' found in pkg/mod.py. "
        "Please ensure it is unique before using str_replace.\n"
    )
    r = fe(repo, command="str_replace", path="pkg/mod.py", new_str="x")
    assert r.output == "ERROR: Missing required parameter 'old_str' for 'str_replace'.\n"
    assert repo.read("pkg/mod.py") == MOD


def test_str_replace_with_linting(repo):
    r = fe(
        repo,
        command="str_replace",
        path="pkg/mod.py",
        old_str="return 1",
        new_str="return (",
        enable_linting="true",
    )
    try:
        ast.parse(MOD.replace("return 1", "return ("), filename="pkg/mod.py")
    except SyntaxError as exc:
        message = str(exc)
    assert r.output == (
        "\nERROR: Your proposed edit has introduced new syntax error(s).\n"
        "Please read this error message carefully and then retry editing the file.\n"
        f"ERRORS:\n{message}\n"
    )
    assert repo.read("pkg/mod.py") == MOD
    r = fe(repo, command="str_replace", path="pkg/mod.py", old_str="return 1", new_str="return (")
    assert "has been edited" in r.output  # linting is off by default


def test_writes_are_atomic_and_break_hardlinks(repo):
    base = repo.root / "base_mod.py"
    base.write_text(MOD)
    target = repo.testbed / "linked.py"
    os.link(base, target)
    os.chmod(target, 0o755)
    inode = target.stat().st_ino
    fe(repo, command="str_replace", path="linked.py", old_str="return 1", new_str="return 2")
    assert base.read_text() == MOD
    assert target.read_text() == MOD.replace("return 1", "return 2")
    assert target.stat().st_ino != inode
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert sorted(p.name for p in repo.testbed.iterdir() if p.name.startswith(".linked")) == []


def test_crlf_file_is_rewritten_with_lf_like_r2e(repo):
    repo.write("crlf.py", "a = 1\r\nb = 2\r\n")
    fe(repo, command="str_replace", path="crlf.py", old_str="a = 1", new_str="a = 3")
    assert (repo.testbed / "crlf.py").read_bytes() == b"a = 3\nb = 2\n"


# ----------------------------------------------------------------------------- insert


def test_insert(repo):
    r = fe(repo, command="insert", path="pkg/mod.py", insert_line="1", new_str="import sys")
    assert r.output == (
        "The file pkg/mod.py has been edited. Here's the result of running `cat -n` on a snippet "
        "of the edited file:\n"
        "     1\timport os\n"
        "     2\timport sys\n"
        "     3\t\n"
        "     4\tdef f():\n"
        "     5\t    return 1\n"
        "     6\t\n"
        "Review the changes and make sure they are as expected (correct indentation, no duplicate "
        "lines, etc). Edit the file again if necessary.\n"
    )
    assert repo.read("pkg/mod.py") == "import os\nimport sys\n\ndef f():\n    return 1\n"


def test_insert_at_start_and_end(repo):
    fe(repo, command="insert", path="pkg/mod.py", insert_line="0", new_str="# top")
    assert repo.read("pkg/mod.py").startswith("# top\nimport os\n")
    fe(repo, command="insert", path="pkg/mod.py", insert_line="6", new_str="# end")
    assert repo.read("pkg/mod.py").endswith("    return 1\n\n# end")


@pytest.mark.parametrize("line", ["-1", "6"])
def test_insert_line_out_of_range(repo, line):
    r = fe(repo, command="insert", path="pkg/mod.py", insert_line=line, new_str="x")
    assert r.output == f"ERROR: Invalid insert_line {line}. Must be in [0, 5].\n"
    assert repo.read("pkg/mod.py") == MOD


def test_insert_parameter_errors(repo):
    r = fe(repo, command="insert", path="pkg/mod.py", insert_line="two", new_str="x")
    assert r.output == (
        "ERROR: Invalid value for parameter 'insert_line': 'two' is not an integer.\n"
    )
    assert r.exit_code == 2
    r = fe(repo, command="insert", path="pkg/mod.py", insert_line="1")
    assert r.output == "ERROR: Missing required parameter 'new_str' for 'insert'.\n"
    r = fe(repo, command="insert", path="pkg/mod.py", new_str="x")
    assert r.output == "ERROR: Missing required parameter 'insert_line' for 'insert'.\n"


# ----------------------------------------------------------------------------- undo_edit


def test_undo_edit(repo):
    fe(repo, command="str_replace", path="pkg/mod.py", old_str="return 1", new_str="return 2")
    fe(repo, command="insert", path="pkg/mod.py", insert_line="0", new_str="# c")
    r = fe(repo, command="undo_edit", path="pkg/mod.py")
    assert r.output == (
        "Last edit to pkg/mod.py undone successfully. Here's the result of running `cat -n` on "
        "pkg/mod.py:\n"
        "     1\timport os\n"
        "     2\t\n"
        "     3\tdef f():\n"
        "     4\t    return 2\n"
        "     5\t\n"
        "\n"
    )
    fe(repo, command="undo_edit", path="pkg/mod.py")
    assert repo.read("pkg/mod.py") == MOD
    r = fe(repo, command="undo_edit", path="pkg/mod.py")
    assert r.output == "ERROR: No previous edits found for pkg/mod.py to undo.\n"


def test_undo_of_create_empties_the_file_like_r2e(repo):
    fe(repo, command="create", path="n.py", file_text="x = 1\n")
    r = fe(repo, command="undo_edit", path="n.py")
    assert r.output.startswith("Last edit to n.py undone successfully.")
    assert repo.read("n.py") == ""


def test_undo_history_is_per_context(repo, tmp_path):
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    (other_dir / "pkg").mkdir()
    (other_dir / "pkg" / "mod.py").write_text(MOD)
    other = ToolContext(paths=SandboxPaths({"/testbed": other_dir}))
    errors: list[str] = []

    def work(ctx):
        for i in range(20):
            r = run_tool(
                "file_editor",
                ctx,
                {"command": "insert", "path": "pkg/mod.py", "insert_line": "0", "new_str": f"#{i}"},
            )
            if "has been edited" not in r.output:
                errors.append(r.output)

    threads = [threading.Thread(target=work, args=(c,)) for c in (repo.ctx, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(repo.ctx.history["/testbed/pkg/mod.py"]) == 20
    assert len(other.history["/testbed/pkg/mod.py"]) == 20
    assert repo.ctx.history is not other.history


# ----------------------------------------------------------------------------- parameters


def test_unknown_command(repo):
    r = fe(repo, command="delete", path="pkg/mod.py")
    assert r.output == (
        "ERROR: Unrecognized command 'delete'. "
        "Allowed commands: view, create, str_replace, insert, undo_edit.\n"
    )


def test_missing_and_unknown_parameters(repo):
    r = run_tool("file_editor", repo.ctx, {"command": "view"})
    assert r.output == (
        "ERROR: Missing required parameter 'path' for file_editor. Expected: file_editor("
        "command (required), path (required), file_text, old_str, new_str, insert_line, "
        "view_range, concise, enable_linting, python_only).\n"
    )
    assert r.exit_code == 2
    r = run_tool("file_editor", repo.ctx, {"path": "/testbed"})
    assert r.output.startswith("ERROR: Missing required parameter 'command' for file_editor.")
    r = run_tool("file_editor", repo.ctx, {"command": "view", "path": ".", "colour": "red"})
    assert r.output.startswith("ERROR: Unknown parameter 'colour' for file_editor. Expected:")
    r = run_tool("file_editor", repo.ctx, None)
    assert r.output.startswith("ERROR: Missing required parameter 'command'")


def test_str_replace_editor_alias(repo):
    r = run_tool("str_replace_editor", repo.ctx, {"command": "view", "path": "pkg/mod.py"})
    assert r.output.endswith("     4     return 1\n")


def test_special_files_are_never_opened(repo):
    os.mkfifo(repo.testbed / "pipe.py")
    r = fe(repo, command="view", path="pipe.py")
    assert r.output == (
        "ERROR: The path pipe.py is not a regular file; file_editor only works on regular files "
        "and directories.\n"
    )
    r = fe(repo, command="str_replace", path="pipe.py", old_str="a", new_str="b")
    assert "is not a regular file" in r.output


def test_embedded_nul_in_path(repo):
    r = fe(repo, command="view", path="pkg/mod\x00.py")
    assert r.output.startswith("ERROR: ")


# ----------------------------------------------------------------------------- exit codes

# (params, R2E-Gym's exit code, start of the output): R2E-Gym's file_editor.py prints its
# own errors ("ERROR: ...") and exits 0; calls its argparse refuses exit 2.
USAGE_ERRORS = [
    ({"command": "view", "path": "pkg/mod.py", "view_range": "[10, 20]"}, 0, "\nERROR: Invalid"),
    ({"command": "view", "path": "pkg/mod.py", "view_range": "[2, 1]"}, 0, "\nERROR: Invalid"),
    ({"command": "view", "path": "pkg/mod.py", "view_range": "[1]"}, 2, "ERROR: Invalid value"),
    ({"command": "view", "path": "pkg/mod.py", "view_range": "a,b"}, 2, "ERROR: Invalid value"),
    ({"command": "str_replace", "path": "pkg/mod.py", "old_str": "o"}, 0, "ERROR: Multiple"),
    ({"command": "str_replace", "path": "pkg/mod.py", "old_str": "zzz"}, 0, "ERROR: No occur"),
    ({"command": "insert", "path": "pkg/mod.py", "insert_line": "-1", "new_str": "x"}, 0, "ERROR"),
    ({"command": "insert", "path": "pkg/mod.py", "insert_line": "x", "new_str": "x"}, 2, "ERROR"),
    ({"command": "view", "path": "/etc/passwd"}, 0, "ERROR: The path '/etc/passwd' is outside"),
    ({"command": "view", "path": "nope.py"}, 0, "ERROR: The path 'nope.py' does not exist."),
    ({"command": "fly", "path": "pkg/mod.py"}, 0, "ERROR: Unrecognized command 'fly'"),
    ({"command": "view", "path": "pkg/mod.py", "colour": "red"}, 2, "ERROR: Unknown parameter"),
    ({"command": "view"}, 2, "ERROR: Missing required parameter 'path'"),
]


@pytest.mark.parametrize(("params", "exit_code", "start"), USAGE_ERRORS)
def test_usage_errors_exit_as_r2e_gym_and_always_set_info_error(repo, params, exit_code, start):
    before = repo.read("pkg/mod.py")
    r = fe(repo, **params)
    assert r.output.startswith(start)
    assert r.exit_code == exit_code
    assert r.info["error"]
    assert r.info["error"] in r.output
    assert not r.done
    assert repo.read("pkg/mod.py") == before


# ----------------------------------------------------------------------------- valid UTF-8


def test_lone_surrogates_never_cross_the_tool_boundary(repo):
    r = fe(repo, command="create", path="s.py", file_text="x = '\ud800'\n")
    assert r.exit_code == 0
    assert repo.read("s.py") == "x = '\ufffd'\n"
    r.output.encode("utf-8")
    (repo.testbed / os.fsdecode(b"bad\xff.py")).write_text("y = 1\n")
    r = fe(repo, command="view", path="/testbed")
    assert "/testbed/bad\ufffd.py\n" in r.output
    r.output.encode("utf-8")
    for name, params in [
        ("file_editor", {"command": "view", "path": "\udcff.py"}),
        ("search", {"search_term": "\ud800", "path": "/testbed"}),
        ("search", {"search_term": "\ud800", "path": "s.py"}),
        ("file_editor", {"command": "view", "path": "s.py", "\ud800": "1"}),
    ]:
        out = run_tool(name, repo.ctx, params)
        out.output.encode("utf-8")
        assert "\ufffd" in out.output
