"""The single-run benchmarks' report: ``--json FILE`` and ``--out DIR`` (BenchOutput)."""

from __future__ import annotations

import argparse
import json

from sweworld.bench.summary import (
    add_report_arguments,
    settings_of,
    summary_figures,
    write_summary,
)


def test_summary_figures_follow_the_result_shape():
    rows = [{"config": "a", "steps": 3, "nested": {"x": 1}}, {"config": "b", "wall_s": 1.5}]
    (table,) = summary_figures(rows, "runs")
    assert table["columns"] == ["config", "steps", "wall_s"]
    assert table["rows"] == [["a", 3, None], ["b", None, 1.5]]

    result = {"startup_s": 2.0, "server": {"1": {"req_s": 3.0}}, "rows": rows, "text": "x"}
    titles = [f["title"] for f in summary_figures(result, "vllm")]
    assert titles == ["vllm", "vllm / server / 1", "vllm / rows"]  # no scalar: no table
    assert summary_figures(result, "vllm")[0]["rows"] == [["startup_s", 2.0], ["text", "x"]]
    assert summary_figures(7) == [] and summary_figures(["a", "b"]) == []


def test_settings_leave_out_where_output_goes():
    args = argparse.Namespace(out="R", json="f.json", bench_command="x", rounds=3, path=object())
    settings = settings_of(args)
    assert settings["rounds"] == 3 and isinstance(settings["path"], str)
    assert not {"out", "json", "bench_command"} & set(settings)


def test_write_summary_writes_json_and_a_report(tmp_path):
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    add_report_arguments(parser)
    out, path = tmp_path / "R", tmp_path / "r.json"
    args = parser.parse_args(["--json", str(path), "--out", str(out)])
    result = {"steps_per_s": 4.5, "rows": [{"kind": "ls", "p50_ms": 2.0}]}
    assert write_summary(args, "demo", result, title="Demo") == out
    assert json.loads(path.read_text()) == result
    report = json.loads((out / "report.json").read_text())
    assert report["benchmark"] == "demo" and report["title"] == "Demo"
    assert report["summary"] == result and report["settings"] == {"rounds": 2}
    assert [f["title"] for f in report["figures"]] == ["Demo", "Demo / rows"]
    assert "| ls | 2.0 |" in (out / "report.md").read_text()


def test_write_summary_without_destinations_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    add_report_arguments(parser, out=False)
    args = parser.parse_args([])
    assert not hasattr(args, "out")
    assert write_summary(args, "demo", {"a": 1}) is None
    assert not list(tmp_path.iterdir())
