"""``sweworld train outcome`` end to end on records made in the test."""

from __future__ import annotations

from types import SimpleNamespace

from sweworld.train.outcome import main, wilson
from sweworld.transition.outcome.model import OutcomeModel


def test_train_prints_figures_beside_floors(calc_data, tmp_path, capsys) -> None:
    out = tmp_path / "model"
    argv = ["--data", str(calc_data["data"]), "--out", str(out),
            "--repos", str(calc_data["repo"]), "--cache", str(tmp_path / "bases"),
            "--heldout", "acme/heldout", "--max-iter", "20", "--learner", "both",
            "--min-samples-leaf", "5", "--l2", "0"]  # tiny data: small leaves  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "train acme/train: 36 records" in text and "test  acme/heldout: 36 records" in text
    for key in ("exit_all_floor0", "exit_pytest_floor0", "tests_floor_base", "mode=blind"):
        assert key in text
    model = OutcomeModel.load(out)
    figures = model.meta["heldout_figures"]
    oracle = figures[f"{model.meta['learner']}/oracle"]
    # the held-out repository is the same code: the states' features decide its outcomes
    assert oracle["exit_pytest"]["agree"] == 1.0
    assert oracle["exit_pytest_executor"]["agree"] == 1.0
    # the two python -c commands have the same features (nothing tells a ZeroDivisionError)
    assert oracle["exit_all"]["agree"] >= 0.83
    assert oracle["tests"]["agree"] == 1.0
    assert oracle["exit_all_floor0"]["agree"] < 1.0
    assert sorted(model.kinds) == ["pytest", "python_c"]


def test_wilson_interval() -> None:
    lo, hi = wilson(50, 100)
    assert round(lo, 3) == 0.404 and round(hi, 3) == 0.596
    assert wilson(10, 10)[1] == 1.0


def test_labels_complete_the_passing_tests_a_quiet_run_does_not_name() -> None:
    from sweworld.train.outcome_data import normal_status, test_labels

    ids = [f"t.py::test_{i}" for i in range(10)]
    failed = {"t.py::test_3": "FAILED"}
    out = "....F.....\nFAILED t.py::test_3 - assert 0\n1 failed, 9 passed in 0.1s\n"
    labels = test_labels(failed, ids, out, 1, False)
    assert labels["t.py::test_3"] == "FAILED" and sum(v == "PASSED" for v in labels.values()) == 9
    # a static collection that misses a parametrized case (19 of 20): still every failure named
    many = [f"t.py::test_{i}" for i in range(19)]
    labels = test_labels(failed, many, out.replace("9 passed", "19 passed"), 1, False)
    assert labels["t.py::test_18"] == "PASSED" and labels["t.py::test_3"] == "FAILED"
    assert len(labels) == 19
    # a failure the output does not name, or skipped tests: nothing is invented
    assert test_labels({}, ids, out, 1, False) == {}
    skipped = out.replace("9 passed", "8 passed, 1 skipped")
    assert test_labels(failed, ids, skipped, 1, False) == failed
    assert [normal_status(s) for s in ("ERROR:", "xfail", "passed", "weird")] == [
        "ERROR", "SKIPPED", "PASSED", "ERROR"
    ]  # fmt: skip


def test_tree_settings_reach_the_trees(calc_data, tmp_path, capsys) -> None:
    """--min-samples-leaf larger than the data leaves every tree one leaf (nothing can be
    split); the default grows splits. Bad values are refused by the parser."""
    import pytest

    def trees(*extra: str) -> list[dict]:
        out = tmp_path / "-".join(extra or ("default",))
        argv = ["--data", str(calc_data["data"]), "--out", str(out),
                "--repos", str(calc_data["repo"]), "--cache", str(tmp_path / "bases"),
                "--heldout", "acme/heldout", "--max-iter", "5", "--learner", "hgb",
                "--min-samples-leaf", "5", "--l2", "0", *extra]  # fmt: skip
        assert main(argv) == 0
        model = OutcomeModel.load(out / "model.json")
        return [n for head in model.heads.values() if head.body["kind"] == "trees"
                for n in head.tree_sizes()]  # fmt: skip

    assert any(n > 1 for n in trees())
    grown = trees("--min-samples-leaf", "100000", "--l2", "1.0")
    assert grown and all(n == 1 for n in grown)
    for bad in (["--min-samples-leaf", "0"], ["--l2", "nan"], ["--l2", "-1"]):
        with pytest.raises(SystemExit):
            main(["--data", "x", "--out", str(tmp_path / "bad"), *bad])
    capsys.readouterr()


def test_records_whose_replayed_state_diverged_are_left_out(calc_data, tmp_path) -> None:
    """A record marked diverged (its state is not the one its output was made on) gives no
    training row; the others are kept, and the count is reported."""
    import json

    from sweworld.train.outcome_data import BaseCheckouts, load_rows

    lines = calc_data["data"].read_text().splitlines()
    marked = []
    for i, line in enumerate(lines):
        record = json.loads(line)
        if i % 3 == 0:
            record["meta"] = json.dumps({"state": "diverged", "diverged_after": 0})
        marked.append(json.dumps(record))
    data = tmp_path / "records" / "swt.jsonl"
    data.parent.mkdir()
    data.write_text("\n".join(marked) + "\n")
    checkouts = BaseCheckouts([calc_data["repo"]], tmp_path / "bases")
    stats: dict[str, int] = {}
    rows = load_rows([data], checkouts, modes=("oracle",), stats=stats)
    whole = load_rows([calc_data["data"]], checkouts, modes=("oracle",))
    n_marked = (len(lines) + 2) // 3
    assert stats["skipped_diverged"] == n_marked
    assert len(rows) == len(whole) - n_marked


def test_the_factorys_reproduction_run_as_a_script_is_left_out(calc_data, tmp_path) -> None:
    """A record of the factory's reproduction file (``meta.reproduction``) run as a script
    gives no row (the factory's copy raises where agents' scripts print); run by pytest it
    is kept. Both are counted."""
    import json

    from sweworld.train.outcome_data import BaseCheckouts, is_reproduction, load_rows

    lines = calc_data["data"].read_text().splitlines()
    marked = [json.loads(line) for line in lines]
    for record in marked:
        record["meta"] = json.dumps({"phase": "buggy", "reproduction": True})
    data = tmp_path / "records" / "swt.jsonl"
    data.parent.mkdir()
    data.write_text("\n".join(json.dumps(r) for r in marked) + "\n")
    checkouts = BaseCheckouts([calc_data["repo"]], tmp_path / "bases")
    stats: dict[str, int] = {}
    rows = load_rows([data], checkouts, modes=("oracle",), stats=stats)
    scripts = sum(not r["command"].startswith("python -m pytest") for r in marked)
    assert scripts and stats["skipped_reproduction_script"] == scripts
    assert rows and {r.kind for r in rows} == {"pytest"}
    assert len(rows) == len(marked) - scripts
    bad = SimpleNamespace(meta="{torn")
    assert not is_reproduction(bad) and not is_reproduction(SimpleNamespace(meta='["x"]'))


def test_repo_balance_gives_every_repository_the_same_weight(calc_data, tmp_path) -> None:
    import numpy as np
    import pytest

    from sweworld.train.outcome import row_weights

    rows = [SimpleNamespace(repo="a")] * 6 + [SimpleNamespace(repo="b")] * 2
    w = row_weights(rows, "repo")
    assert w[:6].sum() == pytest.approx(w[6:].sum()) and w.mean() == pytest.approx(1.0)
    assert np.all(w[6:] > w[:6].max())
    assert row_weights(rows, "none") is None
    with pytest.raises(ValueError, match="balance"):
        row_weights(rows, "source")
    out = tmp_path / "model"
    argv = ["--data", str(calc_data["data"]), "--out", str(out),
            "--repos", str(calc_data["repo"]), "--cache", str(tmp_path / "bases"),
            "--heldout", "acme/heldout", "--max-iter", "5", "--min-samples-leaf", "5",
            "--l2", "0", "--balance", "none"]  # fmt: skip
    assert main(argv) == 0
    assert OutcomeModel.load(out / "model.json").meta["balance"] == "none"


def test_rows_from_several_processes_equal_the_rows_from_one(calc_data, tmp_path) -> None:
    """``load_rows(jobs=3)`` shares the tasks out between processes (each task's records,
    and so its ledger, in one; at most the CPUs); the rows, their order and the counts are
    those of one process. The checkouts are extracted before the processes start (a fresh
    cache here)."""
    from sweworld.train.outcome_data import BaseCheckouts, load_rows

    serial_stats: dict[str, int] = {}
    serial = load_rows(
        [calc_data["data"]],
        BaseCheckouts([calc_data["repo"]], tmp_path / "one"),
        stats=serial_stats,
    )
    parallel_stats: dict[str, int] = {}
    parallel = load_rows(
        [calc_data["data"]],
        BaseCheckouts([calc_data["repo"]], tmp_path / "three"),
        stats=parallel_stats,
        jobs=3,
    )
    assert len({r.instance_id for r in serial}) == 8  # more tasks than processes
    assert parallel_stats == serial_stats and serial_stats["records"] == 72
    assert [(r.record_id, r.mode) for r in parallel] == [(r.record_id, r.mode) for r in serial]
    assert parallel == serial  # features, labels and per-test rows alike


def _orphan(parent: int) -> None:  # a spawned process: module level, importable
    import time

    from sweworld.train.outcome_data import exit_with_parent

    exit_with_parent(parent, every=0.05)
    time.sleep(30)  # a share of features that would go on computing


def test_a_feature_process_ends_when_its_parent_is_gone() -> None:
    """The processes of ``load_rows(jobs=N)`` watch their parent: a training run killed does
    not leave them computing (here the parent they watch is not theirs: it is "gone")."""
    import multiprocessing
    import os

    process = multiprocessing.get_context("spawn").Process(
        target=_orphan, args=(os.getpid() + 10**6,)
    )
    process.start()
    process.join(timeout=20)
    assert process.exitcode == 1
