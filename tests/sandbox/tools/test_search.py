from __future__ import annotations

import io
import os
import random
import threading
import time

import pytest

from sweworld.sandbox.tools import ToolConfig, run_tool
from sweworld.sandbox.tools.search import MAX_SEARCH_TERM_CHARS, count_matching_lines


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
    # grep's own message (its wording for a lone "[" changed between grep releases)
    assert r.output.startswith("Error executing grep:\ngrep: ")
    assert r.output.endswith("\n\n")
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
    assert r.output == (
        'Matches for "needle" in /testbed/bin.py:\n\nBinary file /testbed/bin.py matches\n'
    )
    r = search(repo, search_term="caf.$", path="latin.py")  # never "binary" for its encoding
    assert r.output == 'Matches for "caf.$" in /testbed/latin.py:\n1:needle caf\ufffd\n'


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
        ("-v", ["a -v b"], ["v"]),  # a pattern, never an option
    ],
)
def test_single_file_search_is_grep_basic_regular_expressions(sandbox, pattern, matches, misses):
    sandbox.write("cases.txt", "".join(f"{line}\n" for line in misses + matches))
    r = search(sandbox, search_term=pattern, path="cases.txt")
    first = len(misses) + 1
    expected = [f"{first + i}:{line}" for i, line in enumerate(matches)]
    assert r.output == printed_lines(f'Matches for "{pattern}" in /testbed/cases.txt:', *expected)


def printed_lines(*lines):
    return "".join(f"{line}\n" for line in lines)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("[abc", "grep: Unmatched [, [^, [:, [., or [="),
        ("a\\", "grep: Trailing backslash"),
        ("\\(a", "grep: Unmatched ( or \\("),
        ("a\\)", "grep: Unmatched ) or \\)"),
        ("[[:nope:]]", "grep: Invalid character class name"),
        ("[z-a]", "grep: Invalid range end"),
    ],
)
def test_pattern_errors_are_greps_own(repo, pattern, message):
    r = search(repo, search_term=pattern, path="pkg/mod.py")
    assert r.output == f"Error executing grep:\n{message}\n\n"
    assert r.exit_code == 2


# ----------------------------------------------------------------------------- bounded work


def test_catastrophic_pattern_of_the_issue_is_instant(sandbox):
    # Python's re took 15 s on this; grep's automaton is linear
    sandbox.write("a.py", "a" * 28 + "\n")
    started = time.perf_counter()
    r = search(sandbox, search_term="\\(aa*\\)*b", path="a.py")
    assert time.perf_counter() - started < 5  # only a blow-up fails: 15 s before, 2 ms now
    assert r.output == 'No matches found for "\\(aa*\\)*b" in /testbed/a.py\n'
    sandbox.write("a.py", "a" * 200_000 + "b\n")
    r = search(sandbox, search_term="\\(aa*\\)*b", path="a.py")
    assert r.output.startswith('Matches for "\\(aa*\\)*b" in /testbed/a.py:\n1:aaaa')


def test_exponential_back_references_are_stopped_at_the_deadline(sandbox):
    # back-references defeat grep's automaton: this one runs for minutes in grep itself
    sandbox.write("a.py", "a" * 200 + "x\n")
    sandbox.ctx.config = ToolConfig(search_timeout=0.5)
    ticks: list[float] = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.005)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        r = search(sandbox, search_term="\\(a*\\)*\\(a*\\)*\\1\\2x", path="a.py")
    finally:
        stop.set()
        thread.join()
    assert r.exit_code == -1
    assert r.output.startswith("The command took too long to execute (>0.5s)\n")
    assert "The search was stopped in /testbed/a.py." in r.output
    assert r.info["timed_out"]
    # the waiting thread held no lock: the other thread kept ticking meanwhile
    assert len(ticks) > 5  # a thread holding the GIL for the 0.5 s would leave 1 or 2
    # the session is usable afterwards
    assert search(sandbox, search_term="x$", path="a.py").output.endswith("x\n")


def test_huge_outputs_are_cut_at_a_line_with_a_notice(sandbox):
    sandbox.write("big.txt", "match me\n" * 300_000)
    sandbox.ctx.config = ToolConfig(search_max_output_bytes=100_000)
    r = search(sandbox, search_term="match", path="big.txt")
    lines = r.output.splitlines()
    assert lines[0] == 'Matches for "match" in /testbed/big.txt:'
    assert lines[1] == "1:match me"
    assert lines[-1] == (
        "[The matches were cut after 100000 bytes; use a more specific search_term.]"
    )
    assert lines[-2].endswith(":match me")
    assert len(r.output) < 110_000
    assert r.info["truncated"]


def test_huge_single_line_files_are_searched_in_bounded_chunks(sandbox):
    sandbox.write("one_line.py", "x" * 5_000_000 + "needle" + "x" * 5_000_000)
    r = search(sandbox, search_term="needle")
    assert r.output.startswith('Found 1 matches for "needle" in /testbed:\n./one_line.py')
    r = search(sandbox, search_term="needle", path="one_line.py")
    assert r.output.startswith('Matches for "needle" in /testbed/one_line.py:\n1:xxx')


def test_directory_search_keeps_the_deadline(sandbox):
    for i in range(30):
        sandbox.write(f"d/f{i}.py", "x\n" * 1000)
    sandbox.ctx.config = ToolConfig(search_timeout=0.0)
    r = search(sandbox, search_term="x")
    assert r.exit_code == -1
    assert r.output.startswith("The command took too long to execute (>0s)\n")
    assert "The search was stopped after reading 0 files under /testbed." in r.output


def test_binary_file_match_is_reported(repo):
    repo.write("data.bin", b"\x00\x01needle\n")
    r = search(repo, search_term="needle", path="data.bin")
    assert r.output == (
        'Matches for "needle" in /testbed/data.bin:\n\nBinary file /testbed/data.bin matches\n'
    )
    r = search(repo, search_term="absent", path="data.bin")
    assert r.output == 'No matches found for "absent" in /testbed/data.bin\n'


def test_oversize_and_nul_terms_are_refused(repo):
    r = search(repo, search_term="x" * (MAX_SEARCH_TERM_CHARS + 1))
    assert r.exit_code == 2
    assert r.output.startswith("ERROR: The search_term is 10001 characters long; the limit is")
    r = search(repo, search_term="a\x00b", path="pkg/mod.py")
    assert r.output == "ERROR: The search_term contains a NUL character, which grep cannot take.\n"


def test_grep_runs_without_the_host_environment(repo, monkeypatch):
    monkeypatch.setenv("GREP_OPTIONS", "-v")
    monkeypatch.setenv("GREP_COLORS", "mt=01;31")
    monkeypatch.setenv("GREP_COLOR", "01;31")
    r = search(repo, search_term="f_helper", path="pkg/mod.py")
    assert r.output == (
        'Matches for "f_helper" in /testbed/pkg/mod.py:\n'
        "2:    return f_helper()\n"
        "4:def f_helper():\n"
    )


def test_line_counting_in_chunks_equals_r2e_gyms_line_loop():
    rng = random.Random(11)
    for _ in range(5000):
        data = "".join(rng.choice(["a", "b", "\n", "ab", "\r", "\r\n"]) for _ in range(14))
        term = "".join(rng.choice(["a", "b", "\n"]) for _ in range(rng.randint(0, 3)))

        def handle(data=data):
            raw = io.BytesIO(data.encode())
            return io.TextIOWrapper(raw, encoding="utf-8", newline=None)

        expected = sum(term in line for line in handle())
        for chunk in (1, 2, 5, 1 << 16):
            assert count_matching_lines(handle(), term, chunk_chars=chunk) == expected


def test_special_files_are_skipped(repo):
    os.mkfifo(repo.testbed / "pkg" / "pipe.py")
    r = search(repo, search_term="f_helper")
    assert r.output.startswith('Found 2 matches for "f_helper" in /testbed:\n')
