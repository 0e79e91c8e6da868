"""``sweworld reward`` and ``sweworld verify`` on the toy tasks (exact stages: no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweworld.cli import main
from sweworld.tasks.toy import toy_tasks_path

EXACT = "syntax,typecheck,semantic"


def _delete_test_patch(task) -> str:
    from sweworld.reward.model import RewardModel, SWRConfig
    from sweworld.tasks.patches import make_unified_diff

    base, _ = RewardModel(SWRConfig(calibration=None)).base_dir(task)
    test = sorted(Path(base).glob("tests/test_*.py"))[0]
    return make_unified_diff(str(test.relative_to(base)), test.read_text(), None)


def _reward(capsys, task, patch: str, tmp_path: Path, *extra: str) -> dict:
    path = tmp_path / "candidate.patch"
    path.write_text(patch)
    legacy = ["--verdict", "none"] if "--verdict" not in extra else []
    legacy += ["--mode", "oracle"] if "--mode" not in extra else []  # gold equivalence
    command = ["reward", "--id", task.instance_id, "--patch", str(path), "--stages", EXACT]
    code = main([*command, *legacy, *extra])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_reward_without_flags_is_the_shipped_verdict_oracle(capsys, tmp_path, toy_task) -> None:
    """No flag: oracle mode (the gold patch and the task's tests are read), as episodes: the
    verdict decides, the outcome model's statuses of the task's tests on the candidate's
    state among its evidence; blind on request."""
    path = tmp_path / "candidate.patch"
    path.write_text(toy_task.patch)
    assert main(["reward", "--id", toy_task.instance_id, "--patch", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["info"]["verdict"].endswith("verdict-default/model.json")
    assert set(result["stages"]) == {"syntax", "semantic"} and result["status"] == "resolved"
    assert result["info"]["mode"] == "oracle" and result["evidence"]["gold_equivalent"] == 1.0
    assert result["info"]["decided_by"] == "verdict"
    assert result["evidence"]["oc_available"] == 1.0  # the outcome model's statuses were read
    assert (
        main(["reward", "--id", toy_task.instance_id, "--patch", str(path), "--mode", "blind"]) == 0
    )
    blind = json.loads(capsys.readouterr().out)
    assert blind["evidence"]["gold_equivalent"] is None and blind["status"] == "resolved"
    assert blind["info"]["decided_by"] == "verdict"


def test_reward_with_a_corrupt_verdict_names_the_file(capsys, tmp_path, toy_task) -> None:
    bad = tmp_path / "verdict.json"
    bad.write_text("{")
    path = tmp_path / "candidate.patch"
    path.write_text(toy_task.patch)
    code = main(
        ["reward", "--id", toy_task.instance_id, "--patch", str(path), "--verdict", str(bad)]
    )
    assert code != 0
    assert str(bad) in capsys.readouterr().err


def test_reward_acceptance_patches(capsys, tmp_path, toy_task) -> None:
    gold = _reward(capsys, toy_task, toy_task.patch, tmp_path)
    assert gold["score"] == pytest.approx(0.95) and gold["resolved"] is True
    assert set(gold["stages"]) == {"syntax", "typecheck", "semantic"}
    assert gold["stages"]["semantic"]["evidence"]["gold_equivalent"] is True

    broken = toy_task.patch.replace("\n+", "\n+)", 1)  # an unbalanced bracket in added code
    syntax = _reward(capsys, toy_task, broken, tmp_path)
    assert syntax["info"]["short_circuit"] == "syntax" and syntax["score"] == 0.0
    assert list(syntax["stages"]) == ["syntax"]

    deleting = _reward(capsys, toy_task, _delete_test_patch(toy_task), tmp_path)
    assert deleting["info"]["short_circuit"] == "semantic"
    assert deleting["stages"]["semantic"]["evidence"]["test_tampering"] is True

    empty = _reward(capsys, toy_task, "", tmp_path)
    assert empty["stages"]["semantic"]["evidence"]["empty"] is True and empty["reward"] == 0.0

    shaped = _reward(
        capsys, toy_task, toy_task.patch, tmp_path, "--preset", "shaped", "--steps", "20"
    )
    assert shaped["reward"] == pytest.approx(0.9)


def test_reward_missing_patch_file_is_a_clear_error(capsys, toy_task) -> None:
    code = main(["reward", "--id", toy_task.instance_id, "--patch", "/nonexistent.patch"])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "bogus:thing"], "unknown LM spec 'bogus:thing'"),
        (["--model", "replay:/nonexistent.jsonl"], "replay file /nonexistent.jsonl"),
    ],
)
def test_reward_with_a_bad_model_spec_is_a_configuration_error(
    capsys, tmp_path, toy_task, extra, message
) -> None:
    """Said before anything runs, not reported as an 'undetermined' verdict with exit 0."""
    patch = tmp_path / "fix.patch"
    patch.write_text(toy_task.patch)
    code = main(["reward", "--id", toy_task.instance_id, "--patch", str(patch), *extra])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_reward_patch_folder_is_a_clear_error(capsys, tmp_path, toy_task) -> None:
    code = main(["reward", "--id", toy_task.instance_id, "--patch", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "is a folder, not a file" in err


def test_verify_writes_one_prediction_per_task(capsys, tmp_path, toy_tasks) -> None:
    lines = []
    for task in toy_tasks[:2]:
        for patch in ("", task.test_patch, task.patch):
            lines.append(
                {
                    "instance_id": task.instance_id,
                    "model_patch": patch,
                    "model_name_or_path": "agent",
                }
            )
    candidates = tmp_path / "candidates.jsonl"
    candidates.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    out, scores = tmp_path / "preds.json", tmp_path / "scores.json"
    code = main(
        [
            "verify",
            "--tasks",
            str(toy_tasks_path()),
            "--candidates",
            str(candidates),
            "--out",
            str(out),
            "--scores",
            str(scores),
            "--stages",
            EXACT,
        ]
    )
    assert code == 0
    preds = json.loads(out.read_text())
    assert set(preds) == {t.instance_id for t in toy_tasks[:2]}
    for task in toy_tasks[:2]:
        entry = preds[task.instance_id]
        assert entry["instance_id"] == task.instance_id
        assert entry["model_patch"] == task.patch  # the gold fix beats empty and tests-only
        assert entry["model_name_or_path"] == "sweworld-verify"
    detail = json.loads(scores.read_text())
    assert detail[toy_tasks[0].instance_id]["index"] == 2
    assert detail[toy_tasks[0].instance_id]["scores"][:2] == [0.0, 0.0]


def test_calibrate_fits_and_stores_a_calibration(capsys, tmp_path, toy_tasks) -> None:
    from sweworld.reward.calibration import load_calibration

    lines = []
    for task in toy_tasks:
        lines.append({"instance_id": task.instance_id, "model_patch": task.patch, "resolved": True})
        lines.append(
            {"instance_id": task.instance_id, "model_patch": task.test_patch, "resolved": False}
        )
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    out = tmp_path / "calibration.json"
    command = [
        "calibrate",
        "--tasks",
        str(toy_tasks_path()),
        "--candidates",
        str(labelled),
        "--out",
        str(out),
        "--stages",
        EXACT,
        "--method",
        "logistic",
    ]
    assert main(command) == 2  # test-only candidates stop at an exact stage: one class left
    assert "both classes" in capsys.readouterr().err
    lines += [
        {"instance_id": t.instance_id, "model_patch": t.patch, "resolved": False}
        for t in toy_tasks[:2]
    ]  # the same fix labelled both ways: a weak, real signal
    labelled.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert main(command) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["n"] == 10 and printed["metrics"]["n"] == 6
    calibrator = load_calibration(out)
    assert calibrator.feature_names == [
        "tests_p",
        "tests_missing",
        "typecheck_fail",
        "gold_equivalent",
        "gold_different",
    ]
    assert (
        0.0
        < calibrator.predict(
            [
                {
                    "tests_p": 0.5,
                    "tests_missing": 1.0,
                    "typecheck_fail": 0.0,
                    "gold_equivalent": 1.0,
                    "gold_different": 0.0,
                }
            ]
        )[0]
        < 1.0
    )


def test_verify_warns_about_candidates_without_a_task(capsys, tmp_path, toy_task) -> None:
    candidates = tmp_path / "candidates.jsonl"
    rows = [
        {"instance_id": toy_task.instance_id, "model_patch": toy_task.patch},
        {"instance_id": "nobody__nothing-1", "model_patch": toy_task.patch},
    ]
    candidates.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "preds.json"
    code = main(
        [
            "verify",
            "--tasks",
            str(toy_tasks_path()),
            "--candidates",
            str(candidates),
            "--out",
            str(out),
            "--stages",
            EXACT,
        ]
    )
    assert code == 0
    assert "no task row for nobody__nothing-1; skipped" in capsys.readouterr().err
    assert list(json.loads(out.read_text())) == [toy_task.instance_id]


def test_verify_progress_is_a_bar_only_on_a_terminal(monkeypatch, capsys) -> None:
    import io

    from sweworld.reward.cli import progress

    assert list(progress(iter("ab"), "verify", 2)) == ["a", "b"]
    assert capsys.readouterr().err == ""  # not a terminal: no bar, no [i/N] lines

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert list(progress(iter("ab"), "verify", 2)) == ["a", "b"]
    assert "verify: 100%" in terminal.getvalue() and "2/2" in terminal.getvalue()
