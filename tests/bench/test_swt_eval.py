"""SWT evaluation: selection, sampling, the inference path with a replay LM, floors, and
``sweworld bench swt`` end to end (report, plots, resume, --fresh, skips, bad data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweworld.bench.swt_scoring import (
    GenerationSettings,
    floor_summaries,
    generation_settings,
    predict,
    sample_records,
    select_records,
    summarize,
)
from sweworld.cli import main as cli_main
from sweworld.data.store import RecordStore
from sweworld.models import ReplayLM
from sweworld.transition.prompt import build_messages
from tests.bench.fixtures import swt_record, swt_records, write_dataset

ANSWERS = {
    "t-pytest": json.dumps(
        {
            "stdout": "PASSED tests/test_a.py::test_x\nPASSED tests/test_a.py::test_y\n",
            "stderr": "",
            "exit_code": 1,
        }
    ),
    "t-pyc": json.dumps({"stdout": "hello\n", "stderr": "", "exit_code": 0}),
    "t-script": "not json at all",
}


def replay_lines(records) -> list[dict]:
    by_id = {r.id: r for r in records}
    return [
        {"messages": build_messages(by_id[rid].context(mode)), "text": text}
        for rid, text in ANSWERS.items()
        for mode in ("oracle", "blind")
    ]


def test_select_leaves_out_trajectory_records_and_says_so():
    kept, left = select_records(swt_records())
    assert {r.id for r in kept} == {"t-pytest", "t-pyc", "t-script", "t-train"}
    assert left == {"state_source=trajectory": 1}
    kept, left = select_records(swt_records(), state_sources=("trajectory", "live"))
    assert left == {"no oracle/blind context": 1}


def test_sample_is_stratified_and_deterministic():
    records = [r for r in swt_records() if r.state_source == "live"]
    a = sample_records(records, 3, seed=5)
    assert [r.id for r in a] == [r.id for r in sample_records(list(reversed(records)), 3, seed=5)]
    assert len({r.command_kind for r in a}) == 3  # one of each kind before any second


def test_settings_are_read_from_the_simulator():
    from sweworld.transition.simulated import DEFAULT_SCHEDULE, EMBEDDED_MAX_TOKENS

    lm = ReplayLM(["x"])
    embedded = generation_settings("embedded", lm, "blind")
    assert embedded.max_tokens == EMBEDDED_MAX_TOKENS and embedded.schedule == DEFAULT_SCHEDULE
    assert embedded.prefill == ""  # only in-process transformers models are prefilled
    assert generation_settings("replay:x", lm, "oracle").max_tokens == 512


def test_predict_parses_validates_and_falls_back():
    records = {r.id: r for r in swt_records()}
    settings = GenerationSettings(256, ((0.0, 0), (0.7, 1)), 0, False, "")
    lines = replay_lines(list(records.values()))
    table = {json.dumps(line["messages"]): line["text"] for line in lines}
    lm = ReplayLM(lambda messages: table[json.dumps(messages)])
    good = predict(lm, records["t-pyc"], "oracle", settings)
    assert (good.source, good.prediction.stdout, good.prediction.exit_code) == (
        "model",
        "hello\n",
        0,
    )
    bad = predict(lm, records["t-script"], "blind", settings)
    assert bad.source == "fallback" and bad.fallback_reason == "unparsable"
    assert len(bad.attempts) == 2 and bad.prediction.exit_code == 126
    with pytest.raises(ValueError):
        predict(lm, next(r for r in swt_records() if r.id == "t-traj"), "oracle", settings)


def test_floors_by_hand():
    records = [r for r in swt_records() if r.id in ("t-pytest", "t-pyc", "t-script")]
    floors = floor_summaries(records)
    exit0 = floors["always exit 0, empty output"]["overall"]
    exit1 = floors["always exit 1, empty output"]["overall"]
    assert exit0["exit_code_agreement"] == pytest.approx(1 / 3)
    assert exit1["exit_code_agreement"] == pytest.approx(2 / 3)
    assert exit0["test_status_agreement"] == 0.0 and exit0["n_with_tests"] == 1
    assert exit0["exception_agreement"] == pytest.approx(2 / 3)  # the traceback is missed
    assert exit0["line_similarity"] == 0.0
    assert floors["always exit 1, empty output"]["by_kind"]["python_c"]["exit_code_agreement"] == 0
    assert summarize([])["overall"]["n"] == 0


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    records = swt_records()
    data = write_dataset(tmp_path / "ds", records)
    replay = tmp_path / "swt.jsonl"
    replay.write_text("".join(json.dumps(line) + "\n" for line in replay_lines(records)))
    return data, replay


def _bench(data: Path, replay: Path, out: Path, *extra: str) -> int:
    argv = ["bench", "swt", "--data", str(data), "--models", f"replay:{replay}", "--out", str(out)]
    return cli_main([*argv, *extra])


def _table(report: dict, title: str) -> dict:
    fig = next(f for f in report["figures"] if f["title"] == title)
    return {row[0]: dict(zip(fig["columns"], row, strict=True)) for row in fig["rows"]}


def _without_latency(figures: list[dict]) -> list[dict]:
    """The figures with the latency columns blanked (a redone unit takes other seconds)."""
    out = json.loads(json.dumps(figures))
    for fig in out:
        cut = [i for i, c in enumerate(fig["columns"]) if c.startswith("latency")]
        for row in fig["rows"]:
            for i in cut:
                row[i] = None
    return out


def _rows(out: Path) -> list[str]:
    return (out / "rows.jsonl").read_text().splitlines()


def test_bench_swt_writes_the_report_and_plots(tmp_path: Path):
    data, replay = _setup(tmp_path)
    out = tmp_path / "R"
    assert _bench(data, replay, out) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["benchmark"] == "swt" and report["finished"]
    assert report["skipped"] == {"left out: state_source=trajectory": 1}
    overall = _table(report, "Agreement with the real execution, overall")
    for mode in ("oracle", "blind"):
        row = overall[f"replay:{replay} ({mode})"]
        # by hand: exit agrees on the pytest and python -c records, not on the fallback (126)
        assert row["n"] == 3
        assert row["exit code agrees"] == pytest.approx(2 / 3)
        assert row["exit code agrees (model answers only)"] == 1.0
        assert row["test statuses agree"] == 0.5  # test_y: FAILED really, PASSED predicted
        assert row["n with tests"] == 1
        assert row["exception type agrees"] == pytest.approx(2 / 3)
        # pytest: 1 of 4 + 2 lines (1/3); python -c: 1.0; the fallback: 0.0
        assert row["output line similarity"] == pytest.approx((1 / 3 + 1.0 + 0.0) / 3)
        assert row["fallback rate"] == pytest.approx(1 / 3)
        assert row["latency p50 s"] is not None
    floor0 = overall["floor: always exit 0, empty output"]
    assert floor0["exit code agrees"] == pytest.approx(1 / 3) and floor0["fallback rate"] is None
    assert overall["floor: always exit 1, empty output"]["exit code agrees"] == pytest.approx(2 / 3)
    kinds = _table(report, "Exit-code agreement by command kind")
    assert kinds["python_script"][f"replay:{replay} (oracle)"] == 0.0
    assert kinds["python_script"]["floor: always exit 1, empty output"] == 1.0
    assert kinds["pytest"]["n"] == 1 and kinds["python_c"][f"replay:{replay} (blind)"] == 1.0
    repos = _table(report, "Exit-code agreement by repository")
    assert repos["psf/requests"][f"replay:{replay} (oracle)"] == 0.5
    summary = report["summary"]["series"][f"replay:{replay} (oracle)"]["overall"]
    assert summary["fallback_reasons"] == {"unparsable": 1}
    md = (out / "report.md").read_text()
    assert "## Exit-code agreement by command kind" in md and "| command kind | n |" in md
    assert "![Exit-code agreement by command kind](exit_code_by_kind.png)" in md
    for png in ("exit_code_by_kind.png", "exit_code_by_repo.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_bench_swt_resumes_and_starts_over(tmp_path: Path):
    data, replay = _setup(tmp_path)
    out = tmp_path / "R"
    assert _bench(data, replay, out) == 0
    assert len(_rows(out)) == 6  # 3 records x 2 modes
    before = _without_latency(json.loads((out / "report.json").read_text())["figures"])
    # every unit done: the model is not even loaded (its replay file is gone)
    replay.rename(tmp_path / "away.jsonl")
    assert _bench(data, replay, out) == 0
    report = json.loads((out / "report.json").read_text())
    assert len(_rows(out)) == 6 and report["resumed_rows"] == 6
    assert _without_latency(report["figures"]) == before
    assert report["skipped"] == {"left out: state_source=trajectory": 1}
    # one unit lost (a kill): only that one is redone
    (tmp_path / "away.jsonl").rename(replay)
    (out / "rows.jsonl").write_text("\n".join(_rows(out)[:5]) + "\n")
    assert _bench(data, replay, out) == 0
    assert len(_rows(out)) == 6
    assert _without_latency(json.loads((out / "report.json").read_text())["figures"]) == before
    # other settings are refused without --fresh; --fresh starts over
    assert _bench(data, replay, out, "--modes", "oracle") == 2
    assert _bench(data, replay, out, "--modes", "oracle", "--fresh") == 0
    assert len(_rows(out)) == 3
    assert json.loads((out / "report.json").read_text())["resumed_rows"] == 0


def test_bench_swt_counts_records_with_missing_fields(tmp_path: Path):
    folder = tmp_path / "raw"  # record files, not finalized: read row by row
    good = swt_record("t-pyc", "pallets/flask", "python -c 'print(1)'", stdout="1\n")
    no_command = swt_record("t-empty", "pallets/flask", "", stdout="")
    diverged = swt_record("t-div", "pallets/flask", "python -c 'print(1)'", stdout="1\n")
    diverged.meta = json.dumps({"state": "diverged", "diverged_after": 3})
    with RecordStore(folder) as store:
        store.add(good)
        store.add(no_command)
        store.add(diverged)
    lacking = good.to_dict()
    lacking["id"] = "t-no-exit"
    del lacking["exit_code"]
    with (folder / "records" / "swt.jsonl").open("a") as fh:
        fh.write(json.dumps(lacking) + "\n" + "{not json\n")
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": json.dumps({"stdout": "1\n", "exit_code": 0})}) + "\n")
    out = tmp_path / "R"
    assert _bench(folder, replay, out, "--modes", "oracle") == 0
    report = json.loads((out / "report.json").read_text())
    assert report["skipped"] == {
        "missing field: exit_code": 1,
        "missing field: command": 1,
        "unreadable row (not JSON)": 1,
        "replayed state diverged from the agent's": 1,
    }
    overall = _table(report, "Agreement with the real execution, overall")
    assert overall[f"replay:{replay} (oracle)"]["n"] == 1
    assert overall[f"replay:{replay} (oracle)"]["exit code agrees"] == 1.0


def test_bench_swt_counts_rows_of_wrong_types_and_unreadable_json_fields(tmp_path: Path):
    folder = tmp_path / "raw"
    good = swt_record("t-pyc", "pallets/flask", "python -c 'print(1)'", stdout="1\n")
    with RecordStore(folder) as store:
        store.add(good)
    hostile = []
    for rid, field, value in (
        ("t-list-id", "id", ["x"]),  # unhashable: used to crash the de-duplication
        ("t-str-exit", "exit_code", "abc"),
        ("t-float-exit", "exit_code", 1.5),
        ("t-int-command", "command", 123),
        ("t-dict-stdout", "stdout", {"a": 1}),
        ("t-list-context", "context_oracle", "[1, 2]"),  # JSON, but not an object
        ("t-bad-statuses", "test_statuses", "not json"),
        ("t-list-statuses", "test_statuses", "[1]"),
    ):
        row = good.to_dict()
        row["id"] = rid
        row[field] = value
        hostile.append(json.dumps(row))
    with (folder / "records" / "swt.jsonl").open("a") as fh:
        fh.write("\n".join([*hostile, "[" * 100_000, '{"id": NaN}']) + "\n")
    replay = tmp_path / "r.jsonl"
    replay.write_text(json.dumps({"text": json.dumps({"stdout": "1\n", "exit_code": 0})}) + "\n")
    out = tmp_path / "R"
    assert _bench(folder, replay, out, "--modes", "oracle") == 0
    skipped = json.loads((out / "report.json").read_text())["skipped"]
    assert skipped.pop("wrong type: id: list") == 1
    assert skipped.pop("wrong type: exit_code: str") == 1
    assert skipped.pop("wrong type: exit_code: float") == 1
    assert skipped.pop("wrong type: command: int") == 1
    assert skipped.pop("wrong type: stdout: dict") == 1
    assert skipped.pop("unreadable oracle context (AttributeError)") == 1
    assert skipped.pop("unreadable test_statuses (JSONDecodeError)") == 1
    assert skipped.pop("unreadable test_statuses (not an object)") == 1
    assert skipped.pop("unreadable row (not JSON)") == 1
    assert list(skipped) == ["missing field: source, instance_id, repo, command, stdout, "
                             "stderr, exit_code"]  # fmt: skip
    assert len(_rows(out)) == 1


def test_bench_swt_copies_the_done_rows_a_bounded_number_of_times(tmp_path: Path, monkeypatch):
    """``done()`` copies every row: asked once per record it made a resume quadratic."""
    from sweworld.bench.output import BenchOutput

    data, replay = _setup(tmp_path)
    calls = []
    original = BenchOutput.done
    monkeypatch.setattr(BenchOutput, "done", lambda self: calls.append(1) or original(self))
    assert _bench(data, replay, tmp_path / "R", "--partial-every", "1000") == 0
    first = len(calls)
    calls.clear()
    assert _bench(data, replay, tmp_path / "R", "--partial-every", "1000") == 0  # all resumed
    assert first <= 8 and len(calls) <= 4, (first, len(calls))


def test_bench_swt_bad_data_is_a_clear_error(tmp_path: Path, capsys):
    replay = tmp_path / "r.jsonl"
    replay.write_text("")
    assert _bench(tmp_path / "nowhere", replay, tmp_path / "R") == 2
    assert "no such dataset folder" in capsys.readouterr().err
    data = write_dataset(tmp_path / "ds", [r for r in swt_records() if r.repo == "owner/trained"])
    assert _bench(data, replay, tmp_path / "R") == 2
    assert "sweworld: error: no SWT records in the test split" in capsys.readouterr().err
    assert _bench(data, replay, tmp_path / "R", "--modes", "sideways") == 2


def test_bench_swt_a_damaged_dataset_is_a_clear_error_naming_it(tmp_path: Path, capsys):
    replay = tmp_path / "r.jsonl"
    replay.write_text("")
    data = write_dataset(tmp_path / "ds", swt_records())
    (data / "swt" / "test" / "state.json").write_text('{"x": 1}')  # a KeyError inside
    assert _bench(data, replay, tmp_path / "R") == 2
    said = capsys.readouterr().err
    assert f"sweworld: error: {data}: cannot read its swt dataset (KeyError" in said
    (data / "swt" / "dataset_dict.json").write_text("{garbage")
    assert _bench(data, replay, tmp_path / "R") == 2
    assert f"{data}: cannot read its swt dataset (JSONDecodeError" in capsys.readouterr().err
