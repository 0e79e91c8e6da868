"""``sweworld bench render``: write BENCHMARKS.md from the committed benchmark reports.

Every ``benchmarks/results/**/report.json`` (as :class:`sweworld.bench.output.BenchOutput`
writes it, ``report_version`` 1) becomes one section of BENCHMARKS.md, rendered by
:func:`sweworld.bench.output.render_report` with its plots linked into the report's folder.
Sections follow :data:`SECTION_ORDER` (the reports of issues 2-12 first, converted from the
hand-written file into ``benchmarks/results/legacy/``, then the issue-13 benchmarks), and
reports not named there come last, alphabetically. The same reports always give the same
bytes, so ``--check`` can tell whether BENCHMARKS.md is what the reports say:

    sweworld bench render                 rewrite BENCHMARKS.md
    sweworld bench render --check         exit 1 when BENCHMARKS.md is out of date
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweworld.bench.output import REPORT_VERSION, render_report

__all__ = [
    "SECTION_ORDER",
    "ReportError",
    "add_arguments",
    "find_reports",
    "render_benchmarks",
    "run",
]

COMMAND = "sweworld bench render"

#: Report folders (relative to the results folder) in the order BENCHMARKS.md shows them;
#: a folder's sub-folders sort under it. Anything else follows, alphabetically.
SECTION_ORDER: tuple[str, ...] = (
    "legacy/01-sandbox",
    "legacy/02-real-execution",
    "legacy/03-swt",
    "legacy/04-swr",
    "legacy/05-adversarial",
    "legacy/06-exact-facts",
    "legacy/07-learning-the-world",
    "legacy/08-environments",
    "legacy/09-serving",
    "executors",
    "swt",
    "swt-outcome",
    "swr",
    "tts",
    "e2e",
    "throughput",
)


class ReportError(ValueError):
    """A ``report.json`` that cannot be rendered (the message names the file)."""


def _check_report(path: Path, report: Any) -> dict[str, Any]:
    """The report when it has the shape :func:`render_report` reads, else ReportError."""
    if not isinstance(report, dict):
        raise ReportError(f"{path}: not a JSON object")
    version = report.get("report_version")
    if version != REPORT_VERSION:
        raise ReportError(f"{path}: report_version {version!r}, expected {REPORT_VERSION}")
    for key in ("title", "description", "model", "legacy"):
        if report.get(key) is not None and not isinstance(report[key], str):
            raise ReportError(f"{path}: {key!r} is not a string")
    for key in ("provenance", "skipped"):
        if report.get(key) is not None and not isinstance(report[key], dict):
            raise ReportError(f"{path}: {key!r} is not an object")
    machine = (report.get("provenance") or {}).get("machine")
    if machine is not None and not isinstance(machine, dict):
        raise ReportError(f"{path}: provenance.machine is not an object")
    data = (report.get("provenance") or {}).get("data")
    if data is not None and not isinstance(data, list):
        raise ReportError(f"{path}: provenance.data is not a list")
    figures = report.get("figures")
    if figures is None:
        return report
    if not isinstance(figures, list):
        raise ReportError(f"{path}: 'figures' is not a list")
    for n, fig in enumerate(figures, 1):
        where = f"{path}: figure {n}"
        if not isinstance(fig, dict):
            raise ReportError(f"{where} is not an object")
        columns = fig.get("columns")
        if columns is not None and not isinstance(columns, list):
            raise ReportError(f"{where}: 'columns' is not a list")
        rows = fig.get("rows")
        if rows is not None and (
            not isinstance(rows, list) or not all(isinstance(r, list) for r in rows)
        ):
            raise ReportError(f"{where}: 'rows' is not a list of lists")
        if fig.get("plot") is not None and not isinstance(fig["plot"], str):
            raise ReportError(f"{where}: 'plot' is not a file name")
    return report


def find_reports(results: str | os.PathLike[str]) -> list[tuple[str, dict[str, Any]]]:
    """Every ``report.json`` under ``results``: (its folder relative to ``results``, in
    POSIX form; the report), in section order. Raises ReportError for a file that is not
    a readable version-1 report."""
    root = Path(results)
    if not root.is_dir():
        raise ReportError(f"{root}: no such folder of reports")
    found = []
    for path in sorted(root.rglob("report.json")):
        rel = path.parent.relative_to(root).as_posix()
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ReportError(f"{path}: cannot read it as JSON: {exc}") from None
        found.append((rel, _check_report(path, report)))
    return sorted(found, key=lambda item: _section_key(item[0]))


def _section_key(rel: str) -> tuple[int, str]:
    for rank, name in enumerate(SECTION_ORDER):
        if rel == name or rel.startswith(name + "/"):
            return rank, rel
    return len(SECTION_ORDER), rel


def _anchor(title: str) -> str:
    """The anchor GitHub gives a heading (before de-duplication)."""
    text = unicodedata.normalize("NFC", title.strip().lower())
    text = "".join(c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def _contents(sections: Sequence[str]) -> list[str]:
    """A linked list of the sections' titles; anchors de-duplicated across every heading
    of the document, as GitHub does."""
    seen: dict[str, int] = {}
    lines = []
    for text in sections:
        for line in text.splitlines():
            match = re.match(r"(#{1,6}) (.*)", line)
            if not match:
                continue
            base = _anchor(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            if len(match.group(1)) == 2:
                anchor = base if count == 0 else f"{base}-{count}"
                lines.append(f"- [{match.group(2)}](#{anchor})")
    return lines


def _section(report: Mapping[str, Any], plot_dir: str) -> str:
    text = render_report(report, level=2, plot_dir=plot_dir)
    legacy = str(report.get("legacy") or "").strip()
    if not legacy:
        return text
    heading, _, rest = text.partition("\n")
    rest = rest.lstrip("\n")
    note = f"*Legacy: {legacy}.*" if not legacy.endswith(".") else f"*Legacy: {legacy}*"
    return f"{heading}\n\n{note}\n\n{rest}" if rest else f"{heading}\n\n{note}\n"


def render_benchmarks(
    results: str | os.PathLike[str] = "benchmarks/results",
    out: str | os.PathLike[str] = "BENCHMARKS.md",
) -> str:
    """The text of BENCHMARKS.md for the reports under ``results``; plot links are relative
    to the folder of ``out``. Raises ReportError for a malformed report."""
    reports = find_reports(results)
    base = Path(out).parent.resolve()
    titles = Counter(str(r.get("title") or r.get("benchmark") or "") for _, r in reports)
    sections = []
    for rel, report in reports:
        title = str(report.get("title") or report.get("benchmark") or "")
        if titles[title] > 1:  # one benchmark run several ways: the folder tells them apart
            report = {**report, "title": f"{title}: {rel}"}
        folder = (Path(results) / rel).resolve()
        plot_dir = Path(os.path.relpath(folder, base)).as_posix().rstrip("/") + "/"
        sections.append(_section(report, "" if plot_dir == "./" else plot_dir))
    head = [
        "# Benchmarks",
        "",
        f"<!-- Generated by `{COMMAND}` from benchmarks/results/**/report.json. "
        "Do not edit by hand. -->",
        "",
        f"This file is generated by `{COMMAND}` from the committed reports "
        "`benchmarks/results/**/report.json`; each section is one report, with the command "
        "that produced it, the machine, the data and the model. Do not edit it by hand: "
        "rerun a benchmark (its command writes the report), commit the report, then run "
        f"`{COMMAND}`. `{COMMAND} --check` fails when this file is out of date. Sections "
        "marked *legacy* hold figures of issues 2-12, copied by hand from the scripts' "
        "printed output before the reports existed.",
        "",
    ]
    if sections:
        head += ["Contents:", "", *_contents(sections), ""]
    else:
        head += ["No reports yet.", ""]
    return "\n".join(head) + "".join("\n" + s for s in sections)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``sweworld bench render``."""
    parser.add_argument(
        "--results",
        default="benchmarks/results",
        help="folder searched for report.json files (default: benchmarks/results)",
    )
    parser.add_argument(
        "--out", default="BENCHMARKS.md", help="file to write (default: BENCHMARKS.md)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when --out differs from what would be written",
    )


def run(args: argparse.Namespace) -> int:
    """Render (or check) BENCHMARKS.md: 0 done / up to date, 1 out of date, 2 bad reports."""
    try:
        text = render_benchmarks(args.results, args.out)
    except ReportError as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    count = len(find_reports(args.results))
    if args.check:
        try:
            current = out.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        except (OSError, UnicodeDecodeError) as exc:
            print(f"sweworld: error: cannot read {out}: {exc}", file=sys.stderr)
            return 2
        if current != text:
            state = "missing" if current is None else "out of date"
            print(
                f"{out} is {state}: it is not the render of the {count} reports under "
                f"{args.results}; run `{COMMAND}` and commit the result",
                file=sys.stderr,
            )
            return 1
        print(f"{out} is up to date ({count} reports)")
        return 0
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    print(f"wrote {out} ({count} reports from {args.results})")
    return 0
