"""The SWR prompt (oracle and blind content, budgets, determinism), its answer format, the
test files it shows, and the parser of model reports."""

from __future__ import annotations

import json
import random
import shutil
import subprocess

import pytest

from sweworld.reward.swr import (
    EMBEDDED_SWR_CONFIG,
    SWR_FORMAT_VERSION,
    SWR_PREFILL,
    SWRPromptConfig,
    build_swr_prompt,
    normalize_status,
    parse_swr_output,
    swr_resolved_prefix,
    swr_status_prefix,
    swr_target,
)
from sweworld.reward.swr.testfiles import (
    blind_test_files,
    changed_identifiers,
    oracle_test_files,
    patched_lines,
)
from sweworld.tasks.toy import toy_data_dir
from sweworld.transition.context.config import approx_tokens

TAG_RE = r"<(\w+)>\n(.*?)\n</\1>"


@pytest.fixture(scope="module")
def base_dir():
    """The toy repository before any fix (the base of task 1; the other tasks' test files
    are unchanged by the earlier fixes)."""
    return toy_data_dir() / "repo"


def sections(messages) -> dict[str, str]:
    import re

    return dict(re.findall(TAG_RE, messages[1]["content"], flags=re.S))


# ---------------------------------------------------------------- prompt content


def test_oracle_prompt_shows_gold_tests_and_test_patch(toy_tasks, base_dir):
    task = toy_tasks[0]
    prompt = build_swr_prompt(task, task.patch, mode="oracle", base_dir=base_dir)
    assert prompt.version == SWR_FORMAT_VERSION == "swr-v1"
    assert [m["role"] for m in prompt.messages] == ["system", "user"]
    assert SWR_PREFILL in prompt.messages[0]["content"]
    parts = sections(prompt.messages)
    assert list(parts) == [
        "problem_statement",
        "gold_patch",
        "test_command",
        "test_files",
        "tests",
        "candidate_patch",
    ]
    # the candidate comes last: everything before it is the same for every candidate
    other = build_swr_prompt(task, toy_tasks[1].patch, mode="oracle", base_dir=base_dir)
    shared = prompt.messages[1]["content"].split("<candidate_patch>")[0]
    assert other.messages[1]["content"].startswith(shared)
    assert "return slug.strip(separator)" in parts["gold_patch"]
    assert (
        "$ python -m pytest -rA -p no:cacheprovider tests/test_textutil.py" in parts["test_command"]
    )
    # the whole test file after the test patch: the new test and an untouched one
    assert "def test_slugify_collapses_separators" in parts["test_files"]
    assert "def test_wrap_splits_long_words" in parts["test_files"]
    assert "(with the test patch applied)" in parts["test_files"]
    listed = parts["tests"].splitlines()
    f2p, p2p = task.FAIL_TO_PASS, task.PASS_TO_PASS
    assert listed.index(f2p[0]) < listed.index(p2p[0])
    assert prompt.expected_tests == f2p + p2p
    assert prompt.fail_to_pass == f2p and prompt.pass_to_pass == p2p
    assert prompt.tests_not_shown == 0 and prompt.test_files == ["tests/test_textutil.py"]
    assert prompt.prompt_tokens == sum(approx_tokens(m["content"]) for m in prompt.messages)


def test_blind_prompt_has_no_oracle_material(toy_tasks, base_dir):
    task = toy_tasks[0]
    candidate = toy_tasks[0].patch
    prompt = build_swr_prompt(task, candidate, mode="blind", base_dir=base_dir)
    text = "\n".join(m["content"] for m in prompt.messages)
    parts = sections(prompt.messages)
    assert list(parts) == ["problem_statement", "test_command", "test_files", "candidate_patch"]
    assert "gold_patch" not in text and "FAIL_TO_PASS" not in text
    assert "test_slugify_collapses_separators" not in text  # only the test patch has it
    assert prompt.expected_tests == [] and prompt.tests_not_shown == 0
    # the repository's own tests of the changed module, as they are at the base
    assert prompt.test_files == ["tests/test_textutil.py"]
    assert "def test_slugify_simple_words" in parts["test_files"]
    assert "(existing tests of the changed modules)" in parts["test_files"]
    assert parts["test_command"].endswith("tests/test_textutil.py")
    # the candidate is shown whatever it is; the gold patch is not
    other = build_swr_prompt(task, toy_tasks[1].patch, mode="blind", base_dir=base_dir)
    assert "InsufficientStockError(sku" in other.messages[1]["content"]
    assert other.test_files[0] == "tests/test_inventory.py"
    # without a checkout: no test files, the whole suite
    bare = build_swr_prompt(task, candidate, mode="blind")
    assert sections(bare.messages)["test_files"] == "(no test files available)"
    assert sections(bare.messages)["test_command"].endswith("-p no:cacheprovider")
    with pytest.raises(ValueError):
        build_swr_prompt(task, candidate, mode="both")


def test_oracle_prompt_without_checkout_shows_fragments(toy_tasks):
    task = toy_tasks[3]
    prompt = build_swr_prompt(task, "", mode="oracle")
    parts = sections(prompt.messages)
    assert "(only the changed parts: the whole file is not available)" in parts["test_files"]
    assert "@@ lines " in parts["test_files"]
    assert parts["candidate_patch"] == "(empty: the candidate changes nothing)"


def big_task(toy_task, n_p2p=500):
    row = toy_task.model_dump()
    row["problem_statement"] = "\n".join(f"line {i} of a long issue" for i in range(400))
    row["PASS_TO_PASS"] = [f"tests/test_many.py::test_case_{i:04d}" for i in range(n_p2p)]
    return type(toy_task)(**row)


def test_budgets_are_respected_and_p2p_is_cut_with_a_count(toy_task, base_dir):
    task = big_task(toy_task)
    config = EMBEDDED_SWR_CONFIG
    prompt = build_swr_prompt(task, task.patch, mode="oracle", config=config, base_dir=base_dir)
    parts = sections(prompt.messages)
    budgets = {
        "problem_statement": config.problem_tokens,
        "candidate_patch": config.patch_tokens,
        "gold_patch": config.gold_patch_tokens,
        "test_files": config.test_files_tokens,
        "tests": config.tests_tokens,
    }
    notes = {name: len(body.split("\n", 1)[0]) for name, body in parts.items()}
    content = 0
    for name, budget in budgets.items():
        body = parts[name]
        if body.startswith("("):  # the section's note line is not budgeted
            body = body.split("\n", 1)[1]
        assert approx_tokens(body) <= budget, (name, approx_tokens(body), budget)
        content += approx_tokens(body)
    assert content <= config.total_tokens
    assert notes  # every section was found
    assert prompt.prompt_tokens <= 1560  # a 2,048-token window keeps room for the report
    assert prompt.truncated["problem_statement"] > 0
    assert "lines cut] ..." in parts["problem_statement"]
    # FAIL_TO_PASS first and whole; PASS_TO_PASS cut, with how many are missing
    assert prompt.fail_to_pass == task.FAIL_TO_PASS
    shown = len(prompt.pass_to_pass)
    assert 0 < shown < 500 and prompt.pass_to_pass == task.PASS_TO_PASS[:shown]
    assert prompt.tests_not_shown == 500 - shown
    assert f"... and {500 - shown} more PASS_TO_PASS tests not shown" in parts["tests"]
    # deterministic
    again = build_swr_prompt(task, task.patch, mode="oracle", config=config, base_dir=base_dir)
    assert again.messages == prompt.messages
    # the large defaults show everything of the toy task
    roomy = build_swr_prompt(toy_task, toy_task.patch, mode="oracle", base_dir=base_dir)
    assert roomy.truncated == {}


def test_total_cap_shares_in_proportion(toy_tasks, base_dir):
    task = big_task(toy_tasks[1], n_p2p=50)
    config = SWRPromptConfig(total_tokens=600)
    prompt = build_swr_prompt(task, task.patch, mode="oracle", config=config, base_dir=base_dir)
    parts = sections(prompt.messages)
    content = sum(
        approx_tokens(body.split("\n", 1)[1] if body.startswith("(") else body)
        for body in parts.values()
    )
    assert content <= 600 + 10 * len(parts)  # section notes aside
    assert set(prompt.truncated) >= {"problem_statement", "test_files", "tests"}
    counted = build_swr_prompt(
        task, task.patch, mode="oracle", config=config, base_dir=base_dir, count_tokens=len
    )
    assert counted.messages != prompt.messages  # the counter decides the cuts
    half = config.scaled(0.5)
    assert (half.total_tokens, half.problem_tokens) == (300, 1500)
    with pytest.raises(ValueError):
        SWRPromptConfig(tests_tokens=-1)


# ---------------------------------------------------------------- answer format


def test_target_and_prefixes_share_one_format():
    tests = {"t.py::a": "pass", "t.py::b": "FAILED"}
    target = swr_target(tests, False)
    assert target == '{"tests": {"t.py::a": "PASSED", "t.py::b": "FAILED"}, "resolved": false}'
    assert target.startswith(SWR_PREFILL)
    assert swr_resolved_prefix(tests) == target[: -len("false}")]
    assert swr_status_prefix(tests, "t.py::c") == target[: -len('}, "resolved": false}')] + (
        ', "t.py::c": "'
    )
    assert swr_status_prefix({}, "x") == '{"tests": {"x": "'
    with_reasoning = swr_target(tests, True, reasoning="b breaks")
    assert with_reasoning.startswith('{"reasoning": "b breaks", "tests": {')
    assert json.loads(with_reasoning)["resolved"] is True
    with pytest.raises(ValueError):
        swr_target({"t": "flaky"}, True)
    with pytest.raises(ValueError):
        swr_status_prefix(tests, "t.py::a")
    for text in (target, with_reasoning):
        parsed = parse_swr_output(text, expected_tests=list(tests))
        assert parsed.ok and parsed.tests == {"t.py::a": "PASSED", "t.py::b": "FAILED"}


# ---------------------------------------------------------------- parsing


EXPECTED = ["tests/t.py::a", "tests/t.py::b", "tests/t.py::C::c[x y]"]


def test_parse_a_clean_report():
    text = swr_target({"tests/t.py::a": "PASSED", "tests/t.py::b": "ERROR"}, False)
    parsed = parse_swr_output(text, expected_tests=EXPECTED)
    assert parsed.ok and parsed.repairs == []
    assert parsed.tests == {"tests/t.py::a": "PASSED", "tests/t.py::b": "ERROR"}
    assert parsed.resolved is False
    assert parsed.missing_tests == ["tests/t.py::C::c[x y]"]
    assert parsed.unknown_tests == [] and parsed.error is None


def test_parse_statuses_synonyms_and_unknown_ids():
    text = (
        'Sure! ```json\n{"tests": {"tests/t.py::a": "pass", "t.py::b": "Fail", '
        '"C::c[x y]": "ok", "tests/other.py::z": "PASSED", "tests/t.py::a ": "weird"}, '
        '"resolved": "No"}\n``` hope that helps'
    )
    parsed = parse_swr_output(text, expected_tests=EXPECTED)
    assert parsed.tests == {
        "tests/t.py::a": "PASSED",
        "tests/t.py::b": "FAILED",
        "tests/t.py::C::c[x y]": "PASSED",
    }
    assert parsed.unknown_tests == ["tests/other.py::z"]
    assert parsed.invalid == {"tests/t.py::a ": "weird"}
    assert parsed.resolved is False
    assert "test ids matched to the listed ones" in parsed.repairs
    for raw, status in [
        ("PASSED", "PASSED"),
        ("passed.", "PASSED"),
        (True, "PASSED"),
        ("failure", "FAILED"),
        ("Errored", "ERROR"),
        ("skip", "SKIPPED"),
        ("xfail", "XFAIL"),
        ({"outcome": "passed"}, "PASSED"),
        ("FAILED (AssertionError)", "FAILED"),
        ("banana", None),
        (3, None),
    ]:
        assert normalize_status(raw) == status, raw


def test_reading_a_long_report_is_linear():
    """20,000 reported ids against 2,000 listed ones took seconds (a list's ``in`` for the
    unknown ids and a scan of every listed id per reported one: quadratic)."""
    import gc
    import time

    expected = [f"tests/test_m{i % 7}.py::Case::test_{i}[p/{i}]" for i in range(2000)]

    def seconds(n: int) -> float:
        """The best of three parses (the collector off while timed: a full collection of
        the whole suite's heap is not the parser's time)."""
        tests = {f"tests/test_x.py::test_{i}": "PASSED" for i in range(n)}
        tests.update({f"test_{i}[p/{i}]": "FAILED" for i in range(0, 2000, 2)})
        text = swr_target(tests, False)
        best = float("inf")
        for _ in range(3):
            gc.disable()
            try:
                started = time.perf_counter()
                parsed = parse_swr_output(text, expected_tests=expected)
                best = min(best, time.perf_counter() - started)
            finally:
                gc.enable()
            assert len(parsed.unknown_tests) == n and len(parsed.tests) == 1000
            assert parsed.tests[expected[0]] == "FAILED" and expected[1] in parsed.missing_tests
        return best

    small, large = seconds(5000), seconds(20_000)
    assert large < 2.0, large
    assert large < 8 * small + 0.2, (small, large)  # 4x the input: not 16x the time
    # a suffix matched twice is ambiguous, as before
    ambiguous = ["a/t.py::test_x", "b/t.py::test_x"]
    parsed = parse_swr_output(
        swr_target({"t.py::test_x": "PASSED"}, True), expected_tests=ambiguous
    )
    assert parsed.tests == {} and parsed.unknown_tests == ["t.py::test_x"]
    # the reverse: a reported id with an absolute prefix
    parsed = parse_swr_output(
        swr_target({"/testbed/tests/t.py::a": "PASSED"}, True), expected_tests=EXPECTED
    )
    assert parsed.tests == {"tests/t.py::a": "PASSED"}


def test_parse_repairs_truncated_json():
    full = swr_target({t: "PASSED" for t in EXPECTED}, True)
    cut = full[: full.index('"tests/t.py::C')]  # cut off after the second test
    parsed = parse_swr_output(cut, expected_tests=EXPECTED)
    assert parsed.ok
    assert parsed.tests == {"tests/t.py::a": "PASSED", "tests/t.py::b": "PASSED"}
    assert parsed.resolved is None and "resolved missing" in parsed.repairs
    assert "unterminated object closed" in parsed.repairs
    assert parsed.missing_tests == ["tests/t.py::C::c[x y]"]
    mid_status = full[: full.index('"PASSED"') + 4]  # '..."a": "PAS'
    assert parse_swr_output(mid_status, expected_tests=EXPECTED).invalid == {"tests/t.py::a": "PAS"}
    single = "{'tests': {'tests/t.py::a': 'PASSED',}, 'resolved': True,}"
    assert parse_swr_output(single, expected_tests=EXPECTED).resolved is True


def test_parse_other_shapes():
    anchor = '{"test_report": {"tests/t.py::a": "PASSED"}, "reward": 1}'
    parsed = parse_swr_output(anchor, expected_tests=EXPECTED)
    assert parsed.tests == {"tests/t.py::a": "PASSED"} and parsed.resolved is True
    as_list = (
        '{"tests": [{"name": "tests/t.py::a", "status": "failed"}, ["tests/t.py::b", "ok"], '
        '"PASSED tests/t.py::C::c[x y]"], "resolved": false}'
    )
    parsed = parse_swr_output(as_list, expected_tests=EXPECTED)
    assert parsed.tests == {
        "tests/t.py::a": "FAILED",
        "tests/t.py::b": "PASSED",
        "tests/t.py::C::c[x y]": "PASSED",
    }
    shaped = json.dumps(
        {
            "tests_status": {
                "FAIL_TO_PASS": {"success": ["tests/t.py::a"], "failure": []},
                "PASS_TO_PASS": {"success": [], "failure": ["tests/t.py::b"]},
            },
            "resolved": False,
        }
    )
    parsed = parse_swr_output(shaped, expected_tests=EXPECTED)
    assert parsed.tests == {"tests/t.py::a": "PASSED", "tests/t.py::b": "FAILED"}
    wrapped = '{"answer": {"tests": {"tests/t.py::a": "PASSED"}, "resolved": true}}'
    assert parse_swr_output(wrapped, expected_tests=EXPECTED).resolved is True
    # the prefill written again by the model
    doubled = SWR_PREFILL + swr_target({"tests/t.py::a": "FAILED"}, False)
    parsed = parse_swr_output(doubled, expected_tests=EXPECTED)
    assert parsed.tests == {"tests/t.py::a": "FAILED"} and parsed.resolved is False
    # blind: every readable id is kept
    blind = parse_swr_output('{"tests": {"x::y": "PASSED"}, "resolved": true}')
    assert blind.tests == {"x::y": "PASSED"} and blind.missing_tests == []
    reasoning = '{"reasoning": "a works", "tests": {}, "resolved": true}'
    assert parse_swr_output(reasoning).reasoning == "a works"


def test_parse_garbage_never_raises():
    for text in ("", "   ", None, 42, "no json at all", '{"stdout": "x", "exit_code": 0}', "{{{{"):
        parsed = parse_swr_output(text, expected_tests=EXPECTED)
        assert not parsed.ok and parsed.error and parsed.tests == {}
    rng = random.Random(7)
    alphabet = "{}[]\":,'tru efalsPASEDtests0123456789\\\n"
    full = swr_target({t: "FAILED" for t in EXPECTED}, False)
    for _ in range(300):
        noise = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        cut = full[: rng.randint(0, len(full))]
        for text in (noise, cut, cut + noise):
            parsed = parse_swr_output(text, expected_tests=EXPECTED)
            assert parsed.ok or parsed.error
            assert set(parsed.tests) <= set(EXPECTED)


# ---------------------------------------------------------------- test files


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_applied_test_files_match_git_apply(toy_tasks, base_dir, tmp_path, index):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    task = toy_tasks[index]
    work = tmp_path / "repo"
    shutil.copytree(base_dir, work)
    (work / "patch.diff").write_text(task.test_patch)
    subprocess.run(
        ["git", "apply", "patch.diff"], cwd=work, check=True, capture_output=True, text=True
    )
    files = oracle_test_files(task.test_patch, base_dir, tests=task.FAIL_TO_PASS)
    assert [f.path for f in files] == task.test_files()
    for file in files:
        assert "\n".join(file.lines) + "\n" == (work / file.path).read_text()
        added = [i for i in file.focus if file.lines[i].lstrip().startswith("def test_")]
        assert added  # the new tests are in focus


def test_patched_lines_offsets_and_failures():
    base = "a\nb\nc\nd\ne\n"
    patch = "--- a/t.py\n+++ b/t.py\n@@ -2,2 +2,3 @@\n b\n+B\n c\n"
    assert patched_lines(base, patch) == (["a", "b", "B", "c", "d", "e"], [2])
    shifted = "x\ny\n" + base  # the context is found two lines further down
    assert patched_lines(shifted, patch) == (["x", "y", "a", "b", "B", "c", "d", "e"], [4])
    assert patched_lines("nothing like it\n", patch) is None
    new_file = "--- /dev/null\n+++ b/t.py\n@@ -0,0 +1,2 @@\n+new\n+file\n"
    assert patched_lines("", new_file) == (["new", "file"], [0, 1])
    crlf = "a\r\nb\r\nc\r\n"  # context lines compare with their line endings
    crlf_patch = "--- a/t.py\n+++ b/t.py\n@@ -1,3 +1,3 @@\n a\r\n-b\r\n+B\r\n c\r\n"
    assert patched_lines(crlf, crlf_patch) == (["a", "B", "c"], [1])


def test_blind_test_files_rank_related_tests(toy_tasks, base_dir):
    files = blind_test_files(base_dir, ["stockroom/money.py"], identifiers=["format"])
    assert files[0].path == "tests/test_money.py"  # named after the module
    assert {f.path for f in files} >= {"tests/test_inventory.py"}  # imports it
    assert all(f.focus for f in files[:1])
    assert blind_test_files(base_dir, ["tests/test_money.py", "README.md"]) == []
    assert blind_test_files(None, ["stockroom/money.py"]) == []
    assert changed_identifiers(toy_tasks[0].patch) == ["slugify"]
    assert changed_identifiers(toy_tasks[3].patch)[:1] == ["_split_row"]
