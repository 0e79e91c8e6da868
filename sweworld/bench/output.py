"""A benchmark run's output folder: resumable rows, ``report.json``, ``report.md``, plots.

Every ``sweworld bench`` command writes into one folder ``OUT``:

- ``rows.jsonl``: one line per finished unit of work (a record scored, a task solved, a
  step compared), appended and flushed as it finishes, each under a ``key``. Run the same
  command again with the same ``--out`` and the keys already there are not redone
  (:meth:`BenchOutput.done`); a run killed at any point keeps every finished unit. A line
  cut short by a kill is ignored. Rows written with other settings (a different
  ``fingerprint``) are refused unless the run starts over (``--fresh``).
- ``report.json``: provenance (machine, data, model, command), settings, counts of what was
  skipped and why, the summary, and ``figures``: the tables the report shows, each
  ``{"title", "columns", "rows", "notes"}``. Rewritten atomically whenever it changes.
- ``report.md``: :func:`render_report` of ``report.json`` (the same function renders
  BENCHMARKS.md's sections, :mod:`sweworld.bench.render`).
- ``*.png``: plots (:mod:`sweworld.bench.plots`), linked from ``report.md``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sweworld.bench.report import JsonReport, provenance

__all__ = [
    "BenchOutput",
    "Figure",
    "OutputBusy",
    "ResumeMismatch",
    "command_line",
    "figure",
    "fmt",
    "markdown_table",
    "render_report",
]

T = TypeVar("T")
Figure = dict[str, Any]
REPORT_VERSION = 1


class ResumeMismatch(RuntimeError):
    """``OUT`` holds rows of a run with other settings; use another folder or ``--fresh``."""


class OutputBusy(ResumeMismatch):
    """Another process is writing ``OUT`` now (a :class:`ResumeMismatch`, so that every
    benchmark says so and exits 2 where it catches that)."""


def fingerprint(settings: Mapping[str, Any]) -> str:
    """A short hash of the settings that decide the rows (not of paths or output options)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: None as an en dash, floats to ``digits`` significant places, others
    as text (pipes and newlines escaped for Markdown)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN
            return "–"
        if value == 0 or 1e-3 <= abs(value) < 1e6:
            return f"{value:.{digits}g}" if abs(value) < 1 else f"{value:,.{max(digits - 2, 1)}f}"
        return f"{value:.{digits}g}"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    return _inline(str(value)).replace("|", "\\|")


def _inline(text: str) -> str:
    """``text`` on one line (a reason or a title from the data cannot start a heading or a
    list item of its own). Markdown inside stays: cells and titles use code spans."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", " ")


def _code(text: str) -> str:
    """``text`` as one inline code span, whatever backticks it holds."""
    text = text.replace("\r", " ").replace("\n", " ")
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def figure(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    notes: str = "",
    *,
    plot: str | None = None,
) -> Figure:
    """One table of a report (``plot``: a PNG file name in the same folder, shown under it)."""
    out: Figure = {"title": title, "columns": list(columns), "rows": [list(r) for r in rows]}
    if notes:
        out["notes"] = notes
    if plot:
        out["plot"] = plot
    return out


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub Markdown table; cells through :func:`fmt`."""
    lines = [
        "| " + " | ".join(fmt(c) for c in columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    for row in rows:
        cells = [fmt(c) for c in row] + [""] * (len(columns) - len(row))
        lines.append("| " + " | ".join(cells[: len(columns)]) + " |")
    return "\n".join(lines)


def _provenance_lines(report: Mapping[str, Any]) -> list[str]:
    prov = report.get("provenance") or {}
    machine = prov.get("machine") or {}
    lines = []
    if prov.get("command"):
        lines.append(f"- command: {_code(str(prov['command']))}")
    if machine:
        parts = [
            f"{machine.get('cpus', '?')} CPUs",
            f"{machine.get('memory_gib', '?')} GiB",
            f"Python {machine.get('python', '?')}",
        ]
        if machine.get("torch"):
            parts.append(f"torch {machine['torch']}")
        if machine.get("gpu"):
            parts.append(str(machine["gpu"]))
        lines.append(f"- machine: {', '.join(parts)} ({machine.get('platform', '')})")
    data = [d.get("path", d) if isinstance(d, dict) else d for d in prov.get("data") or []]
    if data:
        lines.append("- data: " + ", ".join(_code(Path(str(d)).name or str(d)) for d in data))
    if report.get("model"):
        lines.append(f"- model: {_inline(str(report['model']))}")
    if prov.get("sweworld_commit"):
        lines.append(f"- sweworld commit: `{str(prov['sweworld_commit'])[:12]}`")
    when = prov.get("started")
    if when:
        finished = report.get("finished")
        lines.append(f"- run: {when}" + (f" to {finished}" if finished else " (not finished)"))
    return lines


def render_report(report: Mapping[str, Any], *, level: int = 1, plot_dir: str = "") -> str:
    """Markdown for a ``report.json``: title, description, provenance, skipped counts, then
    each figure as a table with its notes and plot. ``level``: the title's heading level;
    ``plot_dir``: prefix of plot links (BENCHMARKS.md links into ``benchmarks/results/``)."""
    head = "#" * level
    title = report.get("title") or report.get("benchmark", "benchmark")
    out = [f"{head} {_inline(str(title))}", ""]
    if report.get("description"):
        out += [str(report["description"]).strip(), ""]
    prov = _provenance_lines(report)
    if prov:
        out += [*prov, ""]
    skipped = report.get("skipped") or {}
    if skipped:
        parts = [f"{_inline(str(reason))}: {count}" for reason, count in sorted(skipped.items())]
        out += ["Skipped: " + "; ".join(parts) + ".", ""]
    for fig in report.get("figures") or []:
        out += [f"{head}# {_inline(str(fig.get('title', '')))}", ""]
        if fig.get("columns"):
            out += [markdown_table(fig["columns"], fig.get("rows") or []), ""]
        if fig.get("notes"):
            out += [str(fig["notes"]).strip(), ""]
        if fig.get("plot"):
            out += [f"![{fig.get('title', '')}]({plot_dir}{fig['plot']})", ""]
    return "\n".join(out).rstrip() + "\n"


class BenchOutput:
    """The output folder of one benchmark run (see the module docstring).

    ``settings`` are the options that decide the rows; their fingerprint guards resuming.
    ``data``: dataset folders (their summaries go into the provenance); ``model``: what was
    evaluated, in words. With ``fresh``, rows of an earlier run are discarded.
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        benchmark: str,
        *,
        title: str = "",
        description: str = "",
        settings: Mapping[str, Any] | None = None,
        data: Sequence[str] = (),
        model: str = "",
        fresh: bool = False,
        argv: Sequence[str] | None = None,
    ):
        self.dir = Path(out)
        self.dir.mkdir(parents=True, exist_ok=True)
        _lock_folder(self.dir)
        self.rows_path = self.dir / "rows.jsonl"
        self.settings = dict(settings or {})
        self.fingerprint = fingerprint({"benchmark": benchmark, **self.settings})
        if fresh and self.rows_path.exists():
            self.rows_path.unlink()
        self._done = self._load_rows()
        self._skipped: dict[str, int] = {}
        self.report = JsonReport(
            self.dir / "report.json",
            report_version=REPORT_VERSION,
            benchmark=benchmark,
            title=title or benchmark,
            description=description,
            model=model,
            provenance={**provenance(list(data), argv), "command": command_line(argv)},
            settings=self.settings,
            fingerprint=self.fingerprint,
            resumed_rows=len(self._done),
            skipped={},
            figures=[],
        )

    # ------------------------------------------------------------------ rows
    def _load_rows(self) -> dict[str, dict[str, Any]]:
        done: dict[str, dict[str, Any]] = {}
        if not self.rows_path.exists():
            return done
        _end_cut_line(self.rows_path)
        with self.rows_path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a kill
                if not isinstance(entry, dict) or "key" not in entry:
                    continue
                if not isinstance(entry.get("row"), dict):
                    continue  # no row of ours (a hand edit): redone like a missing one
                if entry.get("fingerprint") != self.fingerprint:
                    raise ResumeMismatch(
                        f"{self.rows_path} holds rows of a run with other settings; "
                        "use another --out folder or --fresh to start over"
                    )
                done[str(entry["key"])] = entry["row"]
        return done

    def done(self) -> dict[str, dict[str, Any]]:
        """Rows already finished (by key), from this run and the runs it resumes."""
        return dict(self._done)

    def add_row(self, key: str, row: Mapping[str, Any]) -> None:
        """Record one finished unit: appended to ``rows.jsonl`` and flushed at once."""
        row = _finite(dict(row))  # a NaN or infinite metric is stored as null, not a crash
        entry = {"key": str(key), "fingerprint": self.fingerprint, "row": row}
        line = json.dumps(entry, default=str, allow_nan=False) + "\n"
        with self.rows_path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self._done[str(key)] = row

    def skip(self, reason: str, count: int = 1) -> None:
        """Count one unit left out, by reason (missing fields, an image that failed, ...)."""
        self._skipped[reason] = self._skipped.get(reason, 0) + count
        self.report.set("skipped", dict(self._skipped))

    # ------------------------------------------------------------------ progress
    def progress(self, items: Iterable[T], total: int | None = None, desc: str = "") -> Iterator[T]:
        """``items`` with a progress bar on stderr (tqdm when installed, else a line per
        tenth)."""
        try:
            from tqdm import tqdm
        except ImportError:
            yield from _line_progress(items, total, desc)
            return
        yield from tqdm(items, total=total, desc=desc, file=sys.stderr, dynamic_ncols=True,
                        mininterval=1.0)  # fmt: skip

    # ------------------------------------------------------------------ report
    def set(self, key: str, value: Any) -> None:
        """Set a top-level key of ``report.json`` (saved at once)."""
        self.report.set(key, value)

    def plot_path(self, name: str) -> Path:
        """Where the plot ``name`` (``calibration.png``) goes."""
        return self.dir / name

    def write(self, figures: Sequence[Figure], summary: Any = None, *, final: bool = True) -> None:
        """Save the figures (and summary) into ``report.json`` and render ``report.md``.
        Called with ``final=False`` for partial reports during a run."""
        self.report.data["figures"] = list(figures)
        if summary is not None:
            self.report.data["summary"] = summary
        if final:
            self.report.data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.report.save()
        text = render_report(json.loads(self.report.path.read_text(encoding="utf-8")))
        tmp = self.dir / "report.md.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.dir / "report.md")


#: Output folders this process holds locked (by real path -> the open folder), kept until
#: it ends: a benchmark opening its folder twice (a report, then a resume) is no other run.
_LOCKED: dict[str, int] = {}


def _lock_folder(folder: Path) -> int | None:
    """Lock ``folder`` so that no other process can while this one runs (the lock goes
    with the process, killed or not): two runs with the same ``--out`` would do the same
    units twice and race on the report's files. :class:`OutputBusy` when another process
    holds it. Nothing is written into the folder for it."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks on this platform: nothing to guard with
        return None
    key = os.path.realpath(folder)
    if key in _LOCKED:
        return _LOCKED[key]
    fd = os.open(key, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise OutputBusy(
            f"{folder} is being written by another run now; wait for it to finish or use "
            "another --out folder"
        ) from None
    _LOCKED[key] = fd
    return fd


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinite floats (nested in dicts and lists) as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _end_cut_line(path: Path) -> None:
    """End a last line cut short by a kill with a newline, so that the next row appended
    starts a line of its own (and the cut one stays apart, ignored)."""
    with path.open("rb+") as fh:
        if fh.seek(0, os.SEEK_END) == 0:
            return
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) != b"\n":
            fh.write(b"\n")


def command_line(argv: Sequence[str] | None) -> str:
    """The command line of this run as one would type it: ``sweworld ...`` however the CLI
    was started (console script, ``python -m sweworld``, ``python -m sweworld.cli``)."""
    program = Path(sys.argv[0])
    name = program.name
    if program.parent.name == "sweworld" and name in ("__main__.py", "cli.py"):
        name = "sweworld"
    import shlex

    return " ".join([name, *map(shlex.quote, sys.argv[1:] if argv is None else argv)])


def _line_progress(items: Iterable[T], total: int | None, desc: str) -> Iterator[T]:
    step = max(1, (total or 10) // 10)
    for i, item in enumerate(items, 1):
        yield item
        if i % step == 0 or (total and i == total):
            print(f"{desc} {i}/{total or '?'}", file=sys.stderr, flush=True)
