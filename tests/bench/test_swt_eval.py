"""SWT evaluation: selection, sampling, the inference path with a replay LM, floors, and the
script end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweworld.bench.swt_eval import (
    GenerationSettings,
    floor_summaries,
    generation_settings,
    predict,
    sample_records,
    select_records,
    summarize,
)
from sweworld.models import ReplayLM
from sweworld.transition.prompt import build_messages
from tests.bench.fixtures import load_script, swt_records, write_dataset

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


def test_heldout_swt_script_end_to_end_with_replay(tmp_path: Path, capsys):
    records = swt_records()
    data = write_dataset(tmp_path / "ds", records)
    replay = tmp_path / "swt.jsonl"
    replay.write_text("".join(json.dumps(line) + "\n" for line in replay_lines(records)))
    out = tmp_path / "swt.json"
    main = load_script("heldout_swt").main
    assert main(["--data", str(data), "--models", f"replay:{replay}", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["data"]["left_out"] == {"state_source=trajectory": 1}
    assert report["sample"]["n"] == 3
    assert report["provenance"]["command"]
    for mode in ("oracle", "blind"):
        overall = report["models"][f"replay:{replay}"][mode]["summary"]["overall"]
        # by hand: exit agrees on the pytest and python -c records, not on the fallback (126)
        assert overall["exit_code_agreement"] == pytest.approx(2 / 3)
        assert overall["exit_code_agreement_model_only"] == 1.0
        assert overall["test_status_agreement"] == 0.5  # test_y: FAILED really, PASSED predicted
        assert overall["exception_agreement"] == pytest.approx(2 / 3)
        assert overall["fallback_rate"] == pytest.approx(1 / 3)
        assert overall["fallback_reasons"] == {"unparsable": 1}
        # pytest: 1 of 4 + 2 lines (1/3); python -c: 1.0; the fallback: 0.0
        assert overall["line_similarity"] == pytest.approx((1 / 3 + 1.0 + 0.0) / 3)
        assert overall["latency_p50_s"] is not None
    text = capsys.readouterr().out
    assert "== SWT oracle" in text and "floor: always exit 0" in text


def test_heldout_swt_script_with_no_records(tmp_path: Path):
    data = write_dataset(tmp_path / "ds", [r for r in swt_records() if r.repo == "owner/trained"])
    main = load_script("heldout_swt").main
    assert main(["--data", str(data), "--models", "embedded"]) == 1
