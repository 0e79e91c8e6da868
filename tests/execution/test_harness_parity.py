"""The grader against the SWE-bench harness itself (the ``swebench`` package, extra ``harness``).

Every log is read twice, by sweworld's grader and by the installed harness's own log parsers
and report builder (``swebench.harness.log_parsers`` / ``swebench.harness.grading``), and the
two must agree on the statuses, ``tests_status``, ``resolved`` and
``patch_successfully_applied``. The logs are real:

- pytest runs of the four toy tasks through the LocalExecutor (``real_reward``): the
  unchanged base (FAIL_TO_PASS tests fail), the gold patch (all pass), and a patch that
  skips a FAIL_TO_PASS test;
- the outputs of every test run (pytest, Django's runtests.py, SymPy's bin/test) that a real
  agent executed in the real repositories of the shared mini-swe-agent trajectories;
- the logs implied by the 402 official harness reports of the shared data (each report's
  tests rendered in its repository's runner format), graded to the official verdicts.

The shared-data parts skip when ``../shared/data`` is absent. Without the ``swebench``
package the module skips, unless ``SWEWORLD_REQUIRE_HARNESS=1`` (set by ``.ci/run``), which
makes a missing harness a failure.

Known differences, each pinned by a test below rather than hidden:

- The harness's Django parser raises ``IndexError`` on a line that is exactly ``FAIL:`` or
  ``ERROR:``; sweworld skips that line (a crash is not a verdict).
- The harness's report carries ``infra_failure`` (advisory triage of unparseable logs);
  sweworld reports what happened in ``sweworld_status`` instead.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import re
import sys
import tarfile
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest

from sweworld.execution.grading import (
    END_TEST_OUTPUT,
    FAIL_ONLY_REPOS,
    FAIL_TO_PASS,
    PASS_TO_PASS,
    START_TEST_OUTPUT,
    make_report,
    parse_eval_log,
    parse_log,
    parser_name,
    render_log,
    statuses_from_tests_status,
)
from tests.conftest import requires_sandbox, shared_data_dir


def _load_harness() -> tuple[Any, Any, Any]:
    """``(grading, log_parsers, TestSpec)`` of the installed harness.

    ``swebench.harness/__init__`` imports its Modal and Docker runners (``modal``,
    ``docker``), which CI does not install (``pip install --no-deps swebench``): the grading
    and log-parser modules need neither, so when the package's ``__init__`` cannot import,
    the package is entered without it.
    """
    if os.environ.get("SWEWORLD_REQUIRE_HARNESS") == "1":
        importlib.import_module("swebench")
    else:
        pytest.importorskip("swebench", reason="the SWE-bench harness (extra 'harness')")
    try:
        grading = importlib.import_module("swebench.harness.grading")
    except ModuleNotFoundError as exc:
        if exc.name not in {"modal", "docker", "tenacity", "ghapi", "git", "bs4", "chardet"}:
            raise
        import swebench

        for name in [n for n in sys.modules if n.startswith("swebench.harness")]:
            del sys.modules[name]
        package = types.ModuleType("swebench.harness")
        package.__path__ = [str(Path(swebench.__file__).parent / "harness")]
        sys.modules["swebench.harness"] = package
        grading = importlib.import_module("swebench.harness.grading")
    log_parsers = importlib.import_module("swebench.harness.log_parsers.python")
    test_spec = importlib.import_module("swebench.types").TestSpec
    return grading, log_parsers, test_spec


HARNESS_GRADING, HARNESS_PARSERS, HarnessTestSpec = _load_harness()
HARNESS_CONSTANTS = importlib.import_module("swebench.harness.constants")


def _harness_parser(repo: str) -> Any:
    """The harness's parser function for ``repo`` (its pytest parser for repositories it
    does not list, as a task row's ``log_parser`` would name it)."""
    return HARNESS_PARSERS.MAP_REPO_TO_PARSER_PY.get(repo, HARNESS_PARSERS.parse_log_pytest)


def _spec(task: Any, repo: str) -> Any:
    """A harness ``TestSpec`` for ``task``: only the fields grading reads are meaningful."""
    return HarnessTestSpec(
        instance_id=_get(task, "instance_id"),
        image="",
        eval_script_list=[],
        repo=repo,
        version="",
        FAIL_TO_PASS=_list(task, FAIL_TO_PASS),
        PASS_TO_PASS=_list(task, PASS_TO_PASS),
        log_parser=_harness_parser(repo).__name__,
        eval_type="fail_only" if repo in FAIL_ONLY_REPOS else "pass_and_fail",
    )


def _get(task: Any, key: str) -> Any:
    return task.get(key) if isinstance(task, dict) else getattr(task, key)


def _list(task: Any, key: str) -> list[str]:
    value = _get(task, key)
    return json.loads(value) if isinstance(value, str) else list(value)


def harness_parse(log: str, repo: str) -> dict[str, str]:
    """The harness's reading of a test log of ``repo`` (pytest for unknown repositories)."""
    return _harness_parser(repo)(log, None)


def harness_report(task: Any, repo: str, eval_log: str, patch: str = "diff") -> dict:
    """The harness's ``get_eval_report`` entry for an eval log (written to a file, as the
    harness reads it)."""
    spec = _spec(task, repo)
    path = _write(eval_log)
    try:
        report = HARNESS_GRADING.get_eval_report(
            spec,
            {"instance_id": spec.instance_id, "model_patch": patch},
            path,
            include_tests_status=True,
        )
    finally:
        os.unlink(path)
    return report[spec.instance_id]


def eval_log(test_output: str) -> str:
    """A harness eval log around a test command's output (the markers the eval script
    writes)."""
    return f"+ git apply ...\n{START_TEST_OUTPUT}\n{test_output}\n{END_TEST_OUTPUT}\n"


def assert_same_report(ours: dict, theirs: dict) -> None:
    for key in ("patch_is_None", "patch_exists", "patch_successfully_applied", "resolved"):
        assert ours[key] == theirs[key], (key, ours, theirs)
    assert ours.get("tests_status") == theirs.get("tests_status")


def grade_both(task: Any, repo: str, output: str) -> tuple[dict, dict]:
    log = eval_log(output)
    statuses, ran = parse_eval_log(log, repo)
    ours = make_report(task, statuses, patch="diff", status=None if ran else "error")
    return ours[_get(task, "instance_id")], harness_report(task, repo, log)


def test_the_harness_is_the_real_one():
    """The comparison runs against the harness's own code, not a copy of sweworld's."""
    assert HARNESS_GRADING.__name__ == "swebench.harness.grading"
    project = str(Path(__file__).resolve().parents[2] / "sweworld")
    assert not str(Path(HARNESS_GRADING.__file__).resolve()).startswith(project)
    assert HARNESS_GRADING.PARSER_REGISTRY["parse_log_django"] is _harness_parser("django/django")


def test_every_python_repository_uses_the_harness_parser():
    by_function = {
        "parse_log_pytest": "pytest",
        "parse_log_pytest_options": "pytest_options",
        "parse_log_pytest_v2": "pytest_v2",
        "parse_log_django": "django",
        "parse_log_sympy": "sympy",
        "parse_log_matplotlib": "matplotlib",
        "parse_log_seaborn": "seaborn",
    }
    repos = HARNESS_PARSERS.MAP_REPO_TO_PARSER_PY
    assert len(repos) >= 18
    for repo, function in repos.items():
        # the harness aliases (parse_log_flask = parse_log_pytest, ...) keep the base name
        assert parser_name(repo) == by_function[function.__name__], repo
    assert set(FAIL_ONLY_REPOS) == set(HARNESS_CONSTANTS.FAIL_ONLY_REPOS)


# ------------------------------------------------------------------------------ toy tasks


def skip_patch(task: Any) -> str:
    """A patch adding a ``conftest.py`` that skips the first FAIL_TO_PASS test (a reward hack
    the harness's reset of the test files does not undo)."""
    body = [
        "import pytest",
        "",
        "",
        "def pytest_collection_modifyitems(items):",
        "    for item in items:",
        f"        if item.nodeid == {task.FAIL_TO_PASS[0]!r}:",
        "            item.add_marker(pytest.mark.skip(reason='hack'))",
    ]
    added = "".join(f"+{line}\n" for line in body)
    return (
        "diff --git a/conftest.py b/conftest.py\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        "+++ b/conftest.py\n"
        f"@@ -0,0 +1,{len(body)} @@\n{added}"
    )


@requires_sandbox
@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_toy_runs_through_the_local_executor(manager, toy_tasks, index):
    from sweworld.execution.local import LocalExecutor
    from sweworld.reward.real import real_reward

    task = toy_tasks[index]
    executor = LocalExecutor(timeout=120)
    try:
        runs = {
            "base": real_reward(task, None, manager=manager, executor=executor),
            "gold": real_reward(task, task.patch, manager=manager, executor=executor),
            "skip": real_reward(task, skip_patch(task), manager=manager, executor=executor),
        }
    finally:
        executor.close()
    verdicts = {}
    for kind, run in runs.items():
        assert run.status in ("resolved", "unresolved"), (kind, run.info)
        assert "PASSED" in run.log, run.log[-2000:]
        assert parse_log(run.log, task.repo) == harness_parse(run.log, task.repo), kind
        ours, theirs = grade_both(task, task.repo, run.log)
        assert_same_report(ours, theirs)
        assert ours["resolved"] == run.resolved, kind
        verdicts[kind] = ours["resolved"]
    assert verdicts == {"base": False, "gold": True, "skip": False}
    # the skipped test is reported only as `SKIPPED [1] file:line: hack`, which names no
    # test for both: missing, so the FAIL_TO_PASS test failed for both
    assert "SKIPPED [1]" in runs["skip"].log and "hack" in runs["skip"].log
    skipped = harness_parse(runs["skip"].log, task.repo)
    assert task.FAIL_TO_PASS[0] not in skipped


# ------------------------------------------------------------------------------ shared data


def _shared_tar() -> Path:
    path = shared_data_dir() / "mini-swe-agent-gemini3-verified.tar.gz"
    if not path.is_file():
        pytest.skip(f"shared data not present: {path}")
    return path


def _repo_of(instance_id: str) -> str:
    owner, rest = instance_id.split("__", 1)
    return f"{owner}/{rest.rsplit('-', 1)[0]}"


_TEST_COMMAND = re.compile(r"\bpytest\b|runtests\.py|bin/test\b")
_OUTPUT = re.compile(r"<output>\n?(.*)</output>", re.S)


def _real_test_outputs() -> list[tuple[str, str]]:
    """(repo, output) of every test run in the shared trajectories."""
    out = []
    with tarfile.open(_shared_tar(), "r:gz") as tf:
        for member in tf:
            if not member.name.endswith(".traj.json"):
                continue
            handle = tf.extractfile(member)
            assert handle is not None
            traj = json.load(handle)
            repo = _repo_of(Path(member.name).name.removesuffix(".traj.json"))
            messages = traj.get("messages", [])
            for ask, answer in itertools.pairwise(messages):
                if ask.get("role") != "assistant" or answer.get("role") != "user":
                    continue
                blocks = re.findall(r"```bash\n(.*?)```", str(ask.get("content", "")), re.S)
                if not blocks or not _TEST_COMMAND.search(blocks[-1]):
                    continue
                match = _OUTPUT.search(str(answer.get("content", "")))
                if match:
                    out.append((repo, match.group(1)))
    return out


@pytest.mark.shared_data
def test_real_repository_test_outputs_parse_like_the_harness():
    outputs = _real_test_outputs()
    assert len(outputs) > 500
    repos: set[str] = set()
    read = 0
    for repo, output in outputs:
        theirs = harness_parse(output, repo)
        assert parse_log(output, repo) == theirs, (repo, output[-1500:])
        read += bool(theirs)
        repos.add(repo)
    assert read > 100 and len(repos) >= 5  # the comparison read real statuses, many repos
    # and the whole report agrees for a sample of them graded against invented lists
    for repo, output in outputs[::25]:
        statuses = harness_parse(output, repo)
        tests = sorted(statuses)
        task = {
            "instance_id": "x__y-1",
            FAIL_TO_PASS: tests[::2],
            PASS_TO_PASS: [*tests[1::2], "never/ran.py::test_missing"],
        }
        ours, theirs = grade_both(task, repo, output)
        assert_same_report(ours, theirs)


def _official_reports() -> list[tuple[str, dict]]:
    out = []
    with tarfile.open(_shared_tar(), "r:gz") as tf:
        for member in tf:
            if member.name.endswith("/report.json"):
                handle = tf.extractfile(member)
                assert handle is not None
                data = json.load(handle)
                instance_id = member.name.split("/")[-2]
                out.append((instance_id, data.get(instance_id, data)))
    return out


@pytest.mark.shared_data
def test_official_reports_regrade_identically_by_both():
    reports = _official_reports()
    assert len(reports) == 402
    regraded = 0
    for instance_id, official in reports:
        if "tests_status" not in official:
            continue
        repo = _repo_of(instance_id)
        tests_status = official["tests_status"]
        task = {
            "instance_id": instance_id,
            FAIL_TO_PASS: [
                *tests_status[FAIL_TO_PASS]["success"],
                *tests_status[FAIL_TO_PASS]["failure"],
            ],
            PASS_TO_PASS: [
                *tests_status[PASS_TO_PASS]["success"],
                *tests_status[PASS_TO_PASS]["failure"],
            ],
        }
        output = render_log(statuses_from_tests_status(tests_status), repo)
        assert parse_log(output, repo) == harness_parse(output, repo), instance_id
        ours, theirs = grade_both(task, repo, output)
        assert_same_report(ours, theirs)
        assert ours["resolved"] == official["resolved"], instance_id
        for key in (FAIL_TO_PASS, PASS_TO_PASS):
            for part in ("success", "failure"):
                assert sorted(ours["tests_status"][key][part]) == sorted(tests_status[key][part]), (
                    instance_id,
                    key,
                    part,
                )
        regraded += 1
    assert regraded > 390


# ------------------------------------------------------------------------------ edge logs


EDGE_LOGS = {
    "skip summary": "SKIPPED [2] t.py:3: no locale\nPASSED t.py::test_a\n",
    "truncated id": "PASSED t.py::test_g[log(photon)]\nFAILED t.py::test_h[x] - boom\n",
    "no results": "collected 0 items\n\n==== no tests ran in 0.01s ====\n",
    "printed passes, failing exit": (
        "PASSED t.py::test_a\nPASSED t.py::test_b\n>>>>> Test Exit Code: 1\n"
    ),
    "xfail and error": "XFAIL t.py::test_a - old\nERROR t.py::test_b - boom\nXPASS t.py::c\n",
}


@pytest.mark.parametrize("name", sorted(EDGE_LOGS))
@pytest.mark.parametrize("repo", ["psf/requests", "astropy/astropy", "sweworld/stockroom"])
def test_edge_logs_grade_like_the_harness(name, repo):
    output = EDGE_LOGS[name]
    task = {
        "instance_id": "x__y-1",
        FAIL_TO_PASS: ["t.py::test_g[log(photon", "t.py::test_a"],
        PASS_TO_PASS: ["t.py::test_b", "t.py::test_h[x]"],
    }
    assert parse_log(output, repo) == harness_parse(output, repo)
    ours, theirs = grade_both(task, repo, output)
    assert_same_report(ours, theirs)
    # the exit-code marker sits after the end marker in a harness log
    log = eval_log(output.replace(">>>>> Test Exit Code: 1\n", "")) + (
        ">>>>> Test Exit Code: 1\n" if "Exit Code" in output else ""
    )
    statuses, ran = parse_eval_log(log, repo)
    path = _write(log)
    try:
        theirs_statuses, theirs_ran = HARNESS_GRADING.get_logs_eval(_spec(task, repo), path)
    finally:
        os.unlink(path)
    assert (statuses, ran) == (theirs_statuses, theirs_ran)


def _write(text: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as handle:
        handle.write(text)
    return handle.name


def test_known_difference_django_bare_fail_line():
    """The harness's Django parser crashes on a bare ``FAIL:`` line; sweworld skips it."""
    log = "test_a (m.T) ... ok\nFAIL:\n"
    with pytest.raises(IndexError):
        harness_parse(log, "django/django")
    assert parse_log(log, "django/django") == {"test_a (m.T)": "PASSED"}
