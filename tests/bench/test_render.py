"""``sweworld bench render``: BENCHMARKS.md from report.json files (order, determinism,
plot links, bad reports, --check), and the committed BENCHMARKS.md against the committed
reports."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sweworld.bench import render
from sweworld.bench.output import figure
from sweworld.cli import main as sweworld_main

REPO = Path(__file__).resolve().parents[2]


def write_report(results: Path, rel: str, title: str, **extra) -> Path:
    folder = results / rel
    folder.mkdir(parents=True, exist_ok=True)
    report = {"report_version": 1, "title": title, **extra}
    path = folder / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    return path


def args(results: Path, out: Path, check: bool = False) -> argparse.Namespace:
    return argparse.Namespace(results=str(results), out=str(out), check=check)


def section_titles(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


def test_sections_in_the_fixed_order_then_alphabetical(tmp_path):
    results = tmp_path / "benchmarks" / "results"
    for rel in ("zeta", "throughput", "swt/msa", "alpha", "swt", "legacy/02-real-execution"):
        write_report(results, rel, f"T {rel}")
    write_report(results, "legacy/01-sandbox", "T sandbox")
    text = render.render_benchmarks(results, tmp_path / "BENCHMARKS.md")
    assert section_titles(text) == [
        "T sandbox",
        "T legacy/02-real-execution",
        "T swt",
        "T swt/msa",
        "T throughput",
        "T alpha",
        "T zeta",
    ]


def test_same_reports_same_bytes(tmp_path):
    fig = figure("F", ["model", "rate", "n"], [["a", 0.5, 12345], ["b", None, 3]], "Notes.")
    a, b = tmp_path / "a", tmp_path / "b"
    for results, order in ((a, ("x", "swr")), (b, ("swr", "x"))):
        for rel in order:
            write_report(results, rel, rel, description="D", figures=[fig], skipped={"r": 1})
    first = render.render_benchmarks(a, tmp_path / "BENCHMARKS.md")
    assert first == render.render_benchmarks(a, tmp_path / "BENCHMARKS.md")
    assert first == render.render_benchmarks(b, tmp_path / "BENCHMARKS.md")
    assert "| a | 0.5 | 12,345 |" in first and "| b | – | 3 |" in first


def test_plot_links_are_relative_to_the_written_file(tmp_path):
    results = tmp_path / "benchmarks" / "results"
    write_report(results, "swr", "SWR", figures=[figure("Calibration", [], [], plot="cal.png")])
    top = render.render_benchmarks(results, tmp_path / "BENCHMARKS.md")
    assert "![Calibration](benchmarks/results/swr/cal.png)" in top
    nested = render.render_benchmarks(results, tmp_path / "docs" / "BENCHMARKS.md")
    assert "![Calibration](../benchmarks/results/swr/cal.png)" in nested


def test_header_contents_and_legacy_note(tmp_path):
    results = tmp_path / "results"
    write_report(results, "legacy/01-sandbox", "Sandbox (issue 2)", legacy="rerun to refresh",
                 figures=[figure("SWT", [], [])])  # fmt: skip
    write_report(results, "swt", "SWT", figures=[figure("Sandbox (issue 2)", [], [])])
    text = render.render_benchmarks(results, tmp_path / "BENCHMARKS.md")
    assert text.startswith("# Benchmarks\n")
    assert "`sweworld bench render`" in text.split("## ")[0]
    # GitHub numbers repeated anchors in document order, over every heading level
    contents = text.split("\n\n## ")[0]
    assert contents.endswith("- [Sandbox (issue 2)](#sandbox-issue-2)\n- [SWT](#swt-1)")
    assert "## Sandbox (issue 2)\n\n*Legacy: rerun to refresh.*\n\n### SWT" in text
    assert text.endswith("## SWT\n\n### Sandbox (issue 2)\n")


def test_reports_sharing_a_title_are_told_apart_by_their_folder(tmp_path):
    results = tmp_path / "results"
    write_report(results, "tts", "Best of N")
    write_report(results, "tts/blind", "Best of N")
    write_report(results, "swr", "SWR")
    text = render.render_benchmarks(results, tmp_path / "BENCHMARKS.md")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## SWR", "## Best of N: tts", "## Best of N: tts/blind"]


def test_a_report_without_optional_keys(tmp_path):
    results = tmp_path / "results"
    path = results / "bare" / "report.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"report_version": 1, "figures": [{"title": "t"}]}')
    text = render.render_benchmarks(results, tmp_path / "BENCHMARKS.md")
    assert "## benchmark\n" in text and "### t\n" in text


def test_no_reports(tmp_path):
    (tmp_path / "results").mkdir()
    assert "No reports yet." in render.render_benchmarks(tmp_path / "results", tmp_path / "B.md")


@pytest.mark.parametrize(
    "content",
    [
        '{"report_version": 1, "title": "cut',
        "[1, 2]",
        '{"report_version": 2, "title": "t"}',
        '{"report_version": 1, "figures": {"title": "t"}}',
        '{"report_version": 1, "figures": [{"title": "t", "rows": [1, 2]}]}',
        '{"report_version": 1, "provenance": {"machine": "2 cores"}}',
        b"\xff\xfe not text",
    ],
)
def test_a_malformed_report_is_named_and_exits_2(tmp_path, capsys, content):
    results = tmp_path / "results"
    write_report(results, "good", "Good")
    bad = results / "bad" / "report.json"
    bad.parent.mkdir(parents=True)
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content, encoding="utf-8")
    out = tmp_path / "BENCHMARKS.md"
    assert render.run(args(results, out)) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err
    assert not out.exists()


def test_missing_results_folder_exits_2(tmp_path, capsys):
    assert render.run(args(tmp_path / "nowhere", tmp_path / "B.md")) == 2
    assert "nowhere" in capsys.readouterr().err


def test_check_up_to_date_out_of_date_and_missing(tmp_path, capsys):
    results = tmp_path / "results"
    write_report(results, "swt", "SWT", figures=[figure("F", ["x"], [[1]])])
    out = tmp_path / "BENCHMARKS.md"
    assert render.run(args(results, out, check=True)) == 1
    assert "missing" in capsys.readouterr().err
    assert render.run(args(results, out)) == 0
    assert out.read_text() == render.render_benchmarks(results, out)
    assert render.run(args(results, out, check=True)) == 0
    assert "up to date (1 reports)" in capsys.readouterr().out
    out.write_text(out.read_text().replace("| 1 |", "| 2 |"))  # edited by hand
    assert render.run(args(results, out, check=True)) == 1
    assert "out of date" in capsys.readouterr().err
    write_report(results, "swr", "SWR")  # a new report, not rendered yet
    assert render.run(args(results, out)) == 0
    assert render.run(args(results, out, check=True)) == 0


def test_the_sweworld_command(tmp_path, capsys):
    results = tmp_path / "results"
    write_report(results, "tts", "TTS")
    out = tmp_path / "BENCHMARKS.md"
    assert sweworld_main(["bench", "render", "--results", str(results), "--out", str(out)]) == 0
    assert "## TTS" in out.read_text()
    argv = ["bench", "render", "--results", str(results), "--out", str(out), "--check"]
    assert sweworld_main(argv) == 0


def test_legacy_reports_keep_their_provenance():
    legacy = sorted((REPO / "benchmarks" / "results" / "legacy").glob("*/report.json"))
    assert len(legacy) == 9
    for path in legacy:
        report = json.loads(path.read_text(encoding="utf-8"))
        assert report["legacy"] and report["title"], path
        assert report["provenance"]["command"].startswith("sweworld bench "), path
        assert report["provenance"]["machine"]["cpus"] == 2, path
        assert any(fig.get("rows") for fig in report["figures"]), path


def committed_tree(tmp_path: Path) -> Path:
    """BENCHMARKS.md and the report.json files as committed (HEAD), copied under
    ``tmp_path``; the working tree itself when this is not a git checkout."""
    git = shutil.which("git")
    if not git or not (REPO / ".git").exists():
        return REPO

    def show(*argv: str) -> bytes | None:
        done = subprocess.run([git, "-C", str(REPO), *argv], capture_output=True, timeout=60)
        return done.stdout if done.returncode == 0 else None

    listing = show("ls-tree", "-r", "-z", "--name-only", "HEAD", "--", "benchmarks/results")
    if listing is None:
        return REPO
    paths = [p for p in listing.decode().split("\0") if p.endswith("/report.json")]
    for path in [*paths, "BENCHMARKS.md"]:
        content = show("show", f"HEAD:{path}")
        if content is not None:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_bytes(content)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True, exist_ok=True)
    return tmp_path


def test_committed_benchmarks_md_is_the_render_of_the_committed_reports(tmp_path, capsys):
    root = committed_tree(tmp_path)
    out = root / "BENCHMARKS.md"
    code = render.run(args(root / "benchmarks" / "results", out, check=True))
    assert code == 0, capsys.readouterr().err
