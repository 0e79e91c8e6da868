"""Adversarial model answers: parsing and validation stay linear, exit codes of any length
are read safely, and no lone surrogate leaves a parser.

The sizes are those that took from a minute to forever before (a 10 MB answer, 200,000
backticks, 1,000,000 newlines). The time bounds are generous (a few seconds, where the
linear code takes milliseconds) so that they only catch a blow-up, not a slow machine;
the figures are measured by ``sweworld bench adversarial``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sweworld.models.json_text import HUGE_INT, fenced_blocks, find_object, json_spans
from sweworld.models.text import valid_text
from sweworld.reward.swr.parsing import parse_swr_output
from sweworld.sandbox.executor import ExecutionRequest
from sweworld.tasks.toy import toy_data_dir
from sweworld.transition.facts import compute_facts
from sweworld.transition.types import Prediction, WorkspaceView
from sweworld.transition.validate import (
    MAX_ANSWER_CHARS,
    MAX_OUTPUT_CHARS,
    check_prediction,
    parse_prediction,
)
from sweworld.transition.validate.pytest_output import output_test_ids, strip_params

BOUND_S = 3.0


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


@pytest.fixture
def toy_view(tmp_path: Path) -> WorkspaceView:
    import shutil

    root = tmp_path / "repo"
    shutil.copytree(toy_data_dir() / "repo", root)
    (tmp_path / "tmp").mkdir()
    return WorkspaceView(root, tmp=tmp_path / "tmp", cwd="/testbed")


def facts_for(view: WorkspaceView, argv: list[str]):
    request = ExecutionRequest(argv=tuple(argv), cwd="/testbed")
    return request, compute_facts(request, view)


# --------------------------------------------------------------------------- parsing


ADVERSARIAL_ANSWERS = {
    "200k backticks": "`" * 200_000,
    "200k backticks in lines of 3": "```\n" * 50_000,
    "json fences never closed": "```json\n{\n" * 20_000,
    "1M newlines": "\n" * 1_000_000,
    "10 MB answer": "x" * 10_000_000,
    "10 MB valid JSON": json.dumps({"stdout": "y" * 10_000_000, "stderr": "", "exit_code": 0}),
    "braces": "{" * 240_000,
    "unterminated strings": '{"a":"' * 40_000,
    "bare key and spaces": "{a" + " " * 240_000,
    "bare keys": "{" + "a " * 120_000,
    "escapes cut off": '{"stdout":"' + "\\u" * 120_000,
}


@pytest.mark.parametrize("name", list(ADVERSARIAL_ANSWERS))
def test_parsers_are_linear_on_adversarial_answers(name):
    text = ADVERSARIAL_ANSWERS[name]
    (pred, repairs), seconds = timed(parse_prediction, text)
    assert seconds < BOUND_S, f"parse_prediction took {seconds:.1f}s on {name}"
    if len(text) > MAX_ANSWER_CHARS:
        assert pred is None and "refused" in repairs[0]
    report, seconds = timed(parse_swr_output, text)
    assert seconds < BOUND_S, f"parse_swr_output took {seconds:.1f}s on {name}"
    assert report.error or report.tests or report.resolved is not None


def test_a_fence_of_backticks_does_not_hide_the_answer():
    answer = json.dumps({"stdout": "ok\n", "stderr": "", "exit_code": 0})
    text = "`" * 200_000 + "\n```json\n" + answer + "\n```\n"
    (pred, _), seconds = timed(parse_prediction, text)
    assert seconds < BOUND_S
    assert pred is not None and pred.stdout == "ok\n"


def test_fenced_blocks_match_the_usual_fences():
    text = "prose\n```json\n{}\n```\nmore\n```  py extra\ncode\n``` tail\n```\nunclosed"
    blocks = [(lang, text[a:b]) for lang, a, b in fenced_blocks(text)]
    assert blocks == [("json", "{}\n"), ("py", "code\n"), ("", "unclosed")]
    assert json_spans(text)[0] == (text.index("{}"), text.index("{}") + 3)
    assert list(fenced_blocks("```no newline after the fence")) == []


def test_the_lenient_search_is_bounded_even_with_many_candidates():
    # Every "{" starts an object the lenient reader reads to the end of the text.
    text = '{"a": "' * 40_000 + '{"stdout": "found"}'
    (found, _), seconds = timed(find_object, text, lambda v: v if "stdout" in v else None)
    assert seconds < BOUND_S
    # The budget may stop the search before the last candidate; it must not run away.
    assert found is None or found["stdout"] == "found"


@pytest.mark.parametrize("depth", [950, 5000])
def test_deeply_nested_values_are_passed_over_not_raised(depth):
    # 950 levels decode under the recursion limit, and then every recursive walk of the
    # value (the text cleaning, json.dumps of a dict given as stdout) raised RecursionError
    # out of parse_prediction.
    nested = '{"a":' * depth + "1" + "}" * depth
    text = '{"stdout": ' + nested + ', "stderr": "", "exit_code": 0}'
    (pred, repairs), seconds = timed(parse_prediction, text)
    assert seconds < BOUND_S
    assert pred is None and repairs
    report = parse_swr_output('{"tests": ' + nested + ', "resolved": true}')
    assert report.resolved is not True
    # Ordinary nesting still reads.
    pred, _ = parse_prediction('{"stdout": {"a": [[1]]}, "exit_code": 0}')
    assert pred is not None and pred.stdout == '{"a": [[1]]}'


# --------------------------------------------------------------------------- exit codes


@pytest.mark.parametrize(
    "written",
    [
        "9" * 5000,  # more digits than Python converts (4,300)
        json.dumps("9" * 5000),
        json.dumps("-" + "9" * 5000),
        json.dumps("9" * 5000 + " (killed)"),
        "1e400",
    ],
    ids=["digits", "string", "negative", "text", "float"],
)
def test_exit_codes_of_any_length_are_read_safely_and_rejected(written):
    text = '{"stdout": "", "stderr": "", "exit_code": ' + written + "}"
    pred, repairs = parse_prediction(text)
    assert any("clamped" in r for r in repairs)
    assert pred is not None
    assert not 0 <= pred.exit_code <= 255
    assert abs(pred.exit_code) <= HUGE_INT
    issues = {i.code for i in check_prediction(pred, None)}
    assert "exit_code_range" in issues


def test_ordinary_exit_codes_still_read():
    for written, code in (("0", 0), ('"1"', 1), ('"2 (usage)"', 2), ("137.0", 137), ("true", 1)):
        pred, _ = parse_prediction('{"stdout": "", "exit_code": ' + written + "}")
        assert pred is not None and pred.exit_code == code, written


def test_a_huge_exit_code_in_a_swr_report_does_not_raise():
    report = parse_swr_output('{"tests": {"t.py::a": "PASSED"}, "resolved": ' + "1" * 5000 + "}")
    assert report.tests == {"t.py::a": "PASSED"} and report.resolved is None


# --------------------------------------------------------------------------- validation


def test_checks_stop_after_output_too_long(toy_view):
    stderr = '  File "/testbed/x.py", line 1\n' + "\n" * 1_000_000
    for argv in (["python", "-c", "import stockroom"], ["python", "-m", "pytest", "tests"]):
        request, facts = facts_for(toy_view, argv)
        for code in (0, 1):
            pred = Prediction(stderr=stderr, exit_code=code)
            issues, seconds = timed(check_prediction, pred, facts, request, toy_view)
            assert seconds < BOUND_S
            assert [i.code for i in issues] == ["output_too_long"]


@pytest.mark.parametrize(
    "stderr",
    [
        "\n" * (MAX_OUTPUT_CHARS - 10),  # the traceback-file pattern was quadratic here
        " \n" * (MAX_OUTPUT_CHARS // 2 - 10),
        '  File "/testbed/stockroom/money.py", line 1\n' * (MAX_OUTPUT_CHARS // 46),
        "a." * (MAX_OUTPUT_CHARS // 2 - 10),  # one long dotted "exception" line
        "No module named 'm%d'\n",
    ],
    ids=["newlines", "blank lines", "traceback files", "dotted line", "missing modules"],
)
def test_checks_are_linear_up_to_the_output_bound(toy_view, stderr):
    if "%d" in stderr:
        stderr = "".join(stderr % i for i in range(MAX_OUTPUT_CHARS // 30))
    for argv in (["python", "-c", "print(1)"], ["python", "-m", "pytest", "tests", "-rA"]):
        request, facts = facts_for(toy_view, argv)
        for code in (0, 1):
            pred = Prediction(stdout="", stderr=stderr, exit_code=code)
            _, seconds = timed(check_prediction, pred, facts, request, toy_view)
            assert seconds < BOUND_S, f"{argv}: {seconds:.1f}s"


def test_test_id_readers_are_linear():
    line = "a" + "::" * 4_500  # the old pattern took seconds per such line
    ids, seconds = timed(output_test_ids, (line + "\n") * 20 + line + " PASSED\n")
    assert seconds < BOUND_S
    assert ids == [line]
    ids, seconds = timed(output_test_ids, "a" + "::" * 500_000 + " PASSED\n")
    assert seconds < BOUND_S and ids == []  # longer than any result line: not read
    node = "t.py::x" + "[" * 50_000 + "y"
    stripped, seconds = timed(strip_params, node)
    assert seconds < BOUND_S and stripped == node
    assert strip_params("t.py::x[1-[a]]") == "t.py::x"


# --------------------------------------------------------------------------- surrogates


def test_lone_surrogates_never_leave_the_parsers():
    text = '{"stdout": "a\\ud800b", "stderr": "\\udc00", "exit_code": 0, "reasoning": "\\ud83d"}'
    pred, repairs = parse_prediction(text)
    assert pred is not None and "lone surrogates replaced" in repairs
    for field in (pred.stdout, pred.stderr, pred.reasoning):
        field.encode("utf-8")  # raises on a lone surrogate
    assert pred.stdout == "a\ufffdb"
    # A proper pair written as two escapes is one character.
    pred, _ = parse_prediction('{"stdout": "\\ud83d\\ude00", "exit_code": 0}')
    assert pred is not None and pred.stdout == "\U0001f600"
    report = parse_swr_output('{"tests": {"t.py::a\\ud800": "PASSED"}, "resolved": true}')
    assert all(name.encode("utf-8") for name in report.tests)


def test_valid_text():
    assert valid_text("plain") == "plain"
    assert valid_text("a\ud800") == "a\ufffd"
    assert valid_text("\ud83d\ude00") == "\U0001f600"
    assert valid_text("\udc00\ud800") == "\ufffd\ufffd"


# --------------------------------------------------------------------------- other threads


def test_no_adversarial_answer_stalls_another_thread(toy_view):
    """A 10 ms ticker in another thread keeps ticking while every adversarial answer is
    parsed and checked (a regular expression that backtracks holds the GIL for its whole
    run: the issue measured a 3 s pause)."""
    import threading

    gaps: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    request, facts = facts_for(toy_view, ["python", "-m", "pytest", "tests", "-rA"])
    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    try:
        for text in ADVERSARIAL_ANSWERS.values():
            pred, _ = parse_prediction(text)
            parse_swr_output(text)
            for candidate in (pred, Prediction(stdout=text[:MAX_OUTPUT_CHARS], exit_code=1)):
                if candidate is not None:
                    check_prediction(candidate, facts, request, toy_view)
    finally:
        stop.set()
        thread.join()
    assert gaps and max(gaps) < 0.5, f"longest pause {max(gaps):.3f} s"
