"""BenchOutput: resumable rows, fingerprints, skips, partial and final reports; table cells
and the Markdown rendering of a report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sweworld.bench.output import (
    BenchOutput,
    ResumeMismatch,
    figure,
    fmt,
    markdown_table,
    render_report,
)

SETTINGS = {"limit": 4, "models": ["embedded:base"]}


def open_out(path: Path, **kwargs) -> BenchOutput:
    kwargs.setdefault("settings", SETTINGS)
    return BenchOutput(path, "demo", title="Demo", argv=["bench", "demo"], **kwargs)


def test_rows_resume_in_a_new_run(tmp_path):
    out = open_out(tmp_path)
    assert out.done() == {}
    out.add_row("r1", {"ok": True})
    out.add_row("r2", {"ok": False, "latency": 1.5})
    again = open_out(tmp_path)
    assert again.done() == {"r1": {"ok": True}, "r2": {"ok": False, "latency": 1.5}}
    assert again.report.data["resumed_rows"] == 2


def test_rows_of_other_settings_are_refused(tmp_path):
    open_out(tmp_path).add_row("r1", {"ok": True})
    with pytest.raises(ResumeMismatch, match="--fresh"):
        open_out(tmp_path, settings={**SETTINGS, "limit": 8})


def test_fresh_discards_earlier_rows_even_of_other_settings(tmp_path):
    open_out(tmp_path).add_row("r1", {"ok": True})
    out = open_out(tmp_path, settings={"limit": 8}, fresh=True)
    assert out.done() == {}
    out.add_row("r9", {})
    assert list(open_out(tmp_path, settings={"limit": 8}).done()) == ["r9"]


def test_a_line_cut_by_a_kill_is_ignored_and_later_rows_survive(tmp_path):
    out = open_out(tmp_path)
    out.add_row("r1", {"ok": True})
    with (tmp_path / "rows.jsonl").open("a", encoding="utf-8") as fh:
        fh.write('{"key": "r2", "fingerpr')  # killed mid-write: no newline
    resumed = open_out(tmp_path)
    assert list(resumed.done()) == ["r1"]
    resumed.add_row("r2", {"ok": False})  # redone after the resume
    assert open_out(tmp_path).done() == {"r1": {"ok": True}, "r2": {"ok": False}}


def test_skips_are_counted_by_reason_in_report_json(tmp_path):
    out = open_out(tmp_path)
    out.skip("missing field 'observation'")
    out.skip("missing field 'observation'")
    out.skip("environment failed", count=3)
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["skipped"] == {"missing field 'observation'": 2, "environment failed": 3}


def test_partial_then_final_report(tmp_path):
    out = open_out(tmp_path, description="What is compared.", model="replay:x")
    fig = figure("Agreement", ["model", "rate"], [["a", 0.5]], "Notes.", plot="p.png")
    out.write([fig], summary={"n": 1}, final=False)
    partial = json.loads((tmp_path / "report.json").read_text())
    assert "finished" not in partial
    assert partial["figures"] == [fig]
    assert partial["summary"] == {"n": 1}
    assert partial["report_version"] == 1
    assert partial["provenance"]["command"].endswith("bench demo")
    assert "(not finished)" in (tmp_path / "report.md").read_text()
    out.write([fig])
    final = json.loads((tmp_path / "report.json").read_text())
    assert final["finished"]
    md = (tmp_path / "report.md").read_text()
    assert md == render_report(final)
    assert "(not finished)" not in md
    assert "| a | 0.5 |" in md and "![Agreement](p.png)" in md
    assert not list(tmp_path.glob("*.tmp"))


def test_command_names_sweworld_when_run_as_a_module(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(Path("sweworld/cli.py").resolve()), "bench", "x"])
    out = BenchOutput(tmp_path, "demo")
    assert out.report.data["provenance"]["command"] == "sweworld bench x"


def test_progress_yields_every_item(tmp_path):
    out = open_out(tmp_path)
    assert list(out.progress(iter(range(25)), total=25, desc="rows")) == list(range(25))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "–"),
        (float("nan"), "–"),
        (True, "yes"),
        (False, "no"),
        (0.0, "0"),
        (0.12345, "0.123"),
        (0.5, "0.5"),
        (12.345, "12.3"),
        (1234.5, "1,234.5"),
        (1.5e-5, "1.5e-05"),
        (2.5e7, "2.5e+07"),
        (7, "7"),
        (9999, "9999"),
        (12345, "12,345"),
        (-12345, "-12,345"),
        ("1.8–10.1 ms", "1.8–10.1 ms"),
    ],
)
def test_fmt(value, text):
    assert fmt(value) == text


def test_fmt_digits():
    assert fmt(0.123456, digits=5) == "0.12346"


def test_cells_escape_pipes_and_line_breaks():
    assert fmt("a | b\nc") == "a \\| b c"
    assert fmt("x\r\ny\rz") == "x y z"
    table = markdown_table(["cmd", "p50"], [["find . | head", "9 ms\nwarm"], ["short"]])
    lines = table.splitlines()
    assert lines == [
        "| cmd | p50 |",
        "|---|---|",
        "| find . \\| head | 9 ms warm |",
        "| short |  |",
    ]


def test_render_report_levels_and_plot_dir():
    report = {
        "title": "T",
        "description": "D.",
        "skipped": {"b reason": 1, "a reason": 2},
        "figures": [figure("F", ["x"], [[1]], plot="f.png"), {"title": "prose only", "notes": "N"}],
    }
    text = render_report(report, level=2, plot_dir="benchmarks/results/t/")
    assert text.startswith("## T\n\nD.\n")
    assert "Skipped: a reason: 2; b reason: 1." in text
    assert "### F" in text and "### prose only\n\nN\n" in text
    assert "![F](benchmarks/results/t/f.png)" in text


def test_render_report_of_a_bare_report():
    assert render_report({}) == "# benchmark\n"


def test_rows_that_are_no_object_are_redone_not_a_crash(tmp_path):
    out = open_out(tmp_path)
    out.add_row("r1", {"ok": True})
    with (tmp_path / "rows.jsonl").open("a", encoding="utf-8") as fh:
        for row in ("[1, 2]", '"text"', "null"):
            fh.write(f'{{"key": "bad", "fingerprint": "{out.fingerprint}", "row": {row}}}\n')
        fh.write("\x00\xff garbage\n")
    assert open_out(tmp_path).done() == {"r1": {"ok": True}}


def test_text_from_data_cannot_inject_markdown_lines():
    report = {
        "title": "T\n# injected",
        "model": "m <img src=x>\n- forged",
        "provenance": {"command": "sweworld bench swt --models 'replay:a`b'\nrm", "data": ["d`"]},
        "skipped": {"bad row: x\n## forged heading": 1},
        "figures": [figure("F\n# h", ["out"], [["<Response [200]> | a\nb"]])],
    }
    text = render_report(report)
    assert "\n# injected" not in text and "\n## forged" not in text and "\n# h" not in text
    assert "\n- forged" not in text and "\nrm" not in text
    assert "| <Response [200]> \\| a b |" in text
    assert "- command: `` sweworld bench swt --models 'replay:a`b' rm ``" in text
    assert "- data: `` d` ``" in text


def test_a_second_process_writing_the_same_folder_is_refused(tmp_path):
    import subprocess

    from sweworld.bench.output import OutputBusy

    out = open_out(tmp_path)  # this process holds the folder (and may open it again)
    out.add_row("r1", {"ok": True})
    assert list(open_out(tmp_path).done()) == ["r1"]
    code = (
        "import sys\n"
        "from sweworld.bench.output import BenchOutput, ResumeMismatch\n"
        "try:\n"
        f"    BenchOutput({str(tmp_path)!r}, 'demo', settings={SETTINGS!r})\n"
        "except ResumeMismatch as exc:\n"
        "    print(exc); sys.exit(3)\n"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert other.returncode == 3, other.stderr
    assert "being written by another run" in other.stdout
    assert issubclass(OutputBusy, ResumeMismatch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "rows.jsonl"]


def test_non_finite_metrics_are_stored_as_null_not_a_crash(tmp_path):
    out = open_out(tmp_path)
    nan, inf = float("nan"), float("inf")
    out.add_row("r1", {"rate": nan, "p95": [1.0, inf], "by": {"x": -inf}, "n": 3})
    expected = {"rate": None, "p95": [1.0, None], "by": {"x": None}, "n": 3}
    assert out.done() == {"r1": expected}
    assert open_out(tmp_path).done() == {"r1": expected}
