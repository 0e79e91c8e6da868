"""The mini-swe-agent importer: parsing, task rows, labels, bad input, the shared data."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from sweworld.data.importers import Skip, detect_format
from sweworld.data.importers import mini_swe_agent as msa
from sweworld.data.schema import SWRRecord, Trajectory
from tests.conftest import shared_data_dir
from tests.data import (
    report,
    report_member,
    toy_source,
    traj_member,
    trajectory,
    user_task,
    write_tarball,
)

SHARED = shared_data_dir() / "mini-swe-agent-gemini3-verified.tar.gz"


def _items(path, **kw):
    items = list(msa.read(path, **kw))
    trajs = [i for i in items if isinstance(i, Trajectory)]
    swr = [i for i in items if isinstance(i, SWRRecord)]
    skips = [i for i in items if isinstance(i, Skip)]
    return trajs, swr, skips


def test_repo_of_instance():
    assert msa.repo_of_instance("django__django-11099") == "django/django"
    assert msa.repo_of_instance("scikit-learn__scikit-learn-10297") == "scikit-learn/scikit-learn"
    assert msa.repo_of_instance("noseparator-1") == ""


def test_parse_observation_plain_cut_timeout_and_other():
    assert msa.parse_observation("<returncode>2</returncode>\n<output>\nboom\n</output>") == (
        2,
        "boom\n",
        False,
    )
    code, out, cut = msa.parse_observation(
        "<returncode>0</returncode>\n<warning>\nlong\n</warning><output_head>\nHEAD\n"
        "</output_head>\n<elided_chars>\n77 characters elided\n</elided_chars>\n"
        "<output_tail>\nTAIL\n</output_tail>"
    )
    assert (code, cut) == (0, True)
    assert out == "HEAD\n[... 77 characters elided ...]\nTAIL"
    code, out, cut = msa.parse_observation(
        "The last command <command>sleep 9</command> timed out and has been killed.\n"
        "The output of the command was:\n <output>\npartial\n</output>\nPlease try again."
    )
    assert code is None and out == "partial"
    assert msa.parse_observation("Please always provide EXACTLY ONE action") is None
    # an output holding the closing tag itself: the last one closes
    assert (
        msa.parse_observation(
            "<returncode>0</returncode>\n<output>\nprint('</output>')\n</output>"
        )[1]
        == "print('</output>')\n"
    )


def test_synthetic_run_steps_task_and_labels(tmp_path):
    src = toy_source(tmp_path)
    assert msa.detect(src)
    assert detect_format(src) == "mini-swe-agent"
    trajs, swr, skips = _items(src)
    assert skips == []
    (traj,) = trajs
    assert traj.repo == "sweworld/stockroom"
    # 12 assistant turns: one format error and the submission produce no step
    assert len(traj.steps) == 10
    assert traj.meta["format_errors"] == 1 and traj.meta["submitted"] is True
    assert traj.steps[0].command == "echo hello" and traj.steps[0].output == "hello\n"
    cut = traj.steps[5]
    assert cut.output_truncated and cut.exit_code == 1
    assert "[... 1234 characters elided ...]" in cut.output
    assert traj.steps[9].exit_code == 3
    # task row: base commit and gold patch from the verified file, tests from the report
    assert traj.task["base_commit"] and traj.task["patch"]
    assert "slugify" in traj.task["problem_statement"]
    assert json.loads(traj.task["FAIL_TO_PASS"]) == [
        "tests/test_textutil.py::test_slugify_collapses_separators"
    ]
    assert traj.report["resolved"] is False
    # gold + one leaderboard patch (two systems, same patch: one record naming both)
    kinds = Counter(r.candidate_kind for r in swr)
    assert kinds == {"gold": 1, "leaderboard": 1}
    board = next(r for r in swr if r.candidate_kind == "leaderboard")
    assert json.loads(board.meta)["systems"] == ["sys-a", "sys-b"] and board.resolved


def test_bad_input_is_skipped_with_reasons(tmp_path):
    good = trajectory("a__b-2", [user_task("p"), *[]])
    members = [
        traj_member("a__b-1", b'{"messages": [{"role": "user", "content": "trunc'),  # truncated
        report_member("a__b-1", report(True, [], [])),
        traj_member("a__b-2", good),  # no report: the trajectory stays, its label is skipped
        traj_member("a__b-3", trajectory("a__b-3", [user_task("q")])),
        report_member("a__b-3", {"tests_status": {}}),  # report without 'resolved'
        traj_member("a__b-4", {"not": "a trajectory"}),
        report_member("a__b-4", report(False, [], [])),
        traj_member("a__b-3", trajectory("a__b-3", [user_task("q")])),  # duplicate
        report_member("a__b-5", report(True, [], [])),  # report alone
    ]
    src = write_tarball(tmp_path / "bad.tar.gz", members)
    trajs, swr, skips = _items(src)
    reasons = {s.unit: s.reason for s in skips}
    assert reasons["a__b-1"] == "trajectory: malformed or truncated JSON"
    assert reasons["a__b-2#swr"] == "missing report"
    assert reasons["a__b-3#swr"] == "report has no boolean 'resolved'"
    assert reasons["a__b-4"] == "trajectory: no 'messages' list"
    assert reasons["a__b-5"] == "report without trajectory"
    assert [s.reason for s in skips if s.unit == "a__b-3"] == ["duplicate instance"]
    assert sorted(t.instance_id for t in trajs) == ["a__b-2", "a__b-3"]
    assert all(t.report is None for t in trajs) and swr == []


def test_folder_layout_and_filters(tmp_path):
    import tarfile

    src = toy_source(tmp_path)
    folder = tmp_path / "x"
    with tarfile.open(src) as tar:
        tar.extractall(folder, filter="data")
    top = folder / "mini-swe-agent-synthetic"
    assert msa.detect(top)
    trajs, _, _ = _items(top, verified=tmp_path / msa.VERIFIED_FILE)
    assert len(trajs) == 1 and trajs[0].task["base_commit"]
    assert _items(src, instances={"nope__nope-1"})[0] == []
    assert not msa.detect(tmp_path / msa.VERIFIED_FILE)


@pytest.mark.skipif(not SHARED.is_file(), reason="shared data not present")
@pytest.mark.slow
def test_shared_tarball_instances_repositories_and_labels():
    trajs, swr, skips = _items(SHARED)
    assert skips == []
    assert len(trajs) == 402
    repos = Counter(t.repo for t in trajs)
    assert repos["django/django"] == 231 and repos["sympy/sympy"] == 75
    assert repos["pytest-dev/pytest"] == 19 and repos["psf/requests"] == 8
    assert sum(t.report["resolved"] for t in trajs) == 308  # as the 402 reports say
    assert all(t.task.get("base_commit") and t.task.get("FAIL_TO_PASS") for t in trajs)
    assert 14000 < sum(len(t.steps) for t in trajs) < 16000
    gold = [r for r in swr if r.candidate_kind == "gold"]
    assert len(gold) == 402 and all(r.resolved for r in swr)


def test_bash_blocks_match_mini_swe_agent_regex_in_linear_time():
    import random
    import time

    pieces = ["```bash", "```", "\n", " ", "\t", "a", "b\n", "`", "bash", "\n```", "\r\n"]
    rng = random.Random(7)
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert msa._bash_blocks(text) == msa._BASH_BLOCK.findall(text), repr(text)
    hostile = [
        "```bash" + "\n" * 100_000,  # quadratic backtracking for the regex
        "```bash\n " * 50_000,  # many fences never closed
        "<returncode>0</returncode><output_head>" + "1" * 100_000 + "</output_head>",
    ]
    started = time.perf_counter()
    for text in hostile:
        msa._bash_blocks(text)
        msa.parse_observation(text)
        msa.parse_trajectory(
            {"messages": [{"role": "user", "content": "<pr_description>" * 50_000}]}
        )
    assert time.perf_counter() - started < 1.0


def test_a_member_over_the_size_bound_is_a_skip(tmp_path, monkeypatch):
    iid = "nobody__nothing-1"
    data = trajectory(iid, [user_task("x" * 500)])
    folder = tmp_path / "run"
    (folder / "trajs" / iid).mkdir(parents=True)
    (folder / "trajs" / iid / f"{iid}.traj.json").write_text(json.dumps(data))
    tar = write_tarball(tmp_path / "run.tar.gz", [traj_member(iid, data)])
    monkeypatch.setattr(msa, "MAX_FILE_BYTES", 200)
    for source in (folder, tar):
        trajs, _, skips = _items(source)
        assert trajs == [] and [s.reason for s in skips] == ["trajectory: larger than 200 bytes"]
