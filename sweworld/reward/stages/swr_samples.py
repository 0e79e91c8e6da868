"""One SWR report, read and graded: the pieces of the tests stage that handle a sample.

A generation becomes a :class:`Sample`: the report parsed back (:func:`~sweworld.reward.swr.
parse_swr_output`), completed (oracle: a listed test the report omits gets its status
without the fix), rendered as the log the repository's test command prints and graded by the
shared grader (:func:`grade_sample`, :func:`sample_report`). :func:`hidden_files` says which
changed files of the candidate the prompt could not show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sweworld.execution.grading import make_report, parse_log, render_log
from sweworld.reward.swr import ParsedReport, SWRPrompt, parse_swr_output
from sweworld.tasks.fields import test_list

__all__ = [
    "REPORT_STOPS",
    "Sample",
    "grade_sample",
    "hidden_files",
    "is_empty_patch",
    "sample_report",
]

#: Stop strings that end a report (in-process models, no ``reasoning``): the ``resolved``
#: value closing the object, or the object closed right after the tests. Put back into the
#: text when hit (the backend says which one hit).
REPORT_STOPS = ("true}", "false}", "}}")
_PASSING = frozenset({"PASSED", "XFAIL"})
_TEXT_CHARS = 4000


@dataclass
class Sample:
    """One report: what the model said and how it grades."""

    index: int
    text: str
    parsed: ParsedReport
    finish_reason: str = "stop"
    completion_tokens: int = 0
    seed: int | None = None
    statuses: dict[str, str] = field(default_factory=dict)
    defaulted: dict[str, int] = field(default_factory=dict)
    model_resolved: bool | None = None
    resolved: bool = False
    report: dict[str, Any] = field(default_factory=dict)
    log: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def evidence(self) -> dict[str, Any]:
        parsed = self.parsed
        extra: dict[str, Any] = {}
        if isinstance(self.info.get("p_pass"), Mapping):  # constrained decoding
            items = list(self.info["p_pass"].items())[:50]
            extra["p_pass"] = {test: round(float(p), 4) for test, p in items}
        return {
            **extra,
            "index": self.index,
            "parse_error": parsed.error,
            "repairs": list(parsed.repairs),
            "statuses": dict(parsed.tests),
            "defaulted": dict(self.defaulted),
            "unknown_tests": parsed.unknown_tests[:20],
            "invalid": dict(list(parsed.invalid.items())[:20]),
            "resolved_model": parsed.resolved,
            "resolved": self.resolved,
            "finish_reason": self.finish_reason,
            "completion_tokens": self.completion_tokens,
            "seed": self.seed,
            "text": self.text[:_TEXT_CHARS],
        }


def grade_sample(
    task: Any,
    mode: str,
    patch: str,
    prompt: SWRPrompt,
    index: int,
    prefix: str,
    gen: Any,
) -> Sample:
    """Read one generation as a report, complete it (oracle: listed tests it omits get their
    status without the fix), render it as the repository's log and grade it."""
    text = gen.text
    hit = gen.info.get("stop_string") if isinstance(gen.info, Mapping) else None
    if isinstance(hit, str) and hit in REPORT_STOPS:
        text += hit  # the report's own end
    # any listed test of the task counts, also one the prompt had no room to show
    expected = (
        list(dict.fromkeys(test_list(task, "FAIL_TO_PASS") + test_list(task, "PASS_TO_PASS")))
        if mode == "oracle"
        else None
    )
    parsed = parse_swr_output(prefix + text, expected_tests=expected)
    if prefix and (not parsed.ok or (expected and not parsed.tests)):
        alone = parse_swr_output(text, expected_tests=expected)  # the model restarted
        if alone.ok and len(alone.tests) > len(parsed.tests):
            parsed = alone
    sample = Sample(
        index=index,
        text=text,
        parsed=parsed,
        finish_reason=gen.finish_reason,
        completion_tokens=gen.completion_tokens,
        seed=gen.info.get("seed") if isinstance(gen.info, Mapping) else None,
        info=dict(gen.info) if isinstance(gen.info, Mapping) else {},
    )
    if not parsed.ok:
        sample.report = sample_report(task, mode, {}, patch, False)
        return sample
    if mode == "oracle":
        statuses: dict[str, str] = {}
        defaulted = {"FAIL_TO_PASS": 0, "PASS_TO_PASS": 0}
        for key, default in (("FAIL_TO_PASS", "FAILED"), ("PASS_TO_PASS", "PASSED")):
            for test in test_list(task, key):
                if test in parsed.tests:
                    statuses[test] = parsed.tests[test]
                else:
                    statuses[test] = default
                    defaulted[key] += 1
        sample.defaulted = defaulted
        model_resolved = parsed.resolved
    else:
        statuses = dict(parsed.tests)
        model_resolved = parsed.resolved
        if model_resolved is None:
            model_resolved = bool(statuses) and all(v in _PASSING for v in statuses.values())
    sample.statuses = statuses
    sample.model_resolved = model_resolved
    repo = _get(task, "repo")
    sample.log = render_log(statuses, repo)
    graded = parse_log(sample.log, repo)
    sample.report = sample_report(task, mode, graded, patch, bool(model_resolved))
    entry = next(iter(sample.report.values()))
    sample.resolved = bool(entry.get("resolved"))
    return sample


def sample_report(
    task: Any, mode: str, graded: Mapping[str, str], patch: str, model_resolved: bool
) -> dict[str, Any]:
    """A ``report.json``-shaped verdict. Oracle: graded against the task's lists. Blind:
    the reported tests graded as tests that must pass, and ``resolved`` also needs the
    model's own verdict."""
    if mode == "oracle":
        return make_report(task, graded, patch=patch)
    blind_task = {
        "instance_id": str(_get(task, "instance_id") or ""),
        "repo": _get(task, "repo") or "",
        "FAIL_TO_PASS": [],
        "PASS_TO_PASS": list(graded),
    }
    report = make_report(blind_task, graded, patch=patch)
    entry = next(iter(report.values()))
    entry["resolved"] = bool(entry.get("resolved")) and model_resolved
    return report


def is_empty_patch(patch: str) -> bool:
    """No file is changed: blank text, or text in which no file diff can be read."""
    from sweworld.tasks.patches import files_in_patch

    if not patch.strip():
        return True
    try:
        return not files_in_patch(patch)
    except Exception:  # an unreadable diff is the model's to judge, not "empty"
        return False


def _get(task: Any, name: str) -> Any:
    return task.get(name) if isinstance(task, Mapping) else getattr(task, name, None)


#: Suffixes of files that are binary by nature (a change to one is not code the model must
#: read); a binary change to any other file (a ``.py`` made "binary" by a
#: ``.gitattributes`` line, say) shows the model nothing of what changed.
BINARY_ASSET_SUFFIXES = frozenset((
    ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".ico", ".webp", ".tif", ".tiff", ".pdf", ".ps",
    ".eps", ".zip", ".gz", ".tgz", ".bz2", ".xz", ".7z", ".tar", ".whl", ".egg", ".jar",
    ".class", ".so", ".dll", ".dylib", ".pyd", ".pyc", ".pyo", ".exe", ".o", ".a", ".mo",
    ".db", ".sqlite", ".sqlite3", ".npy", ".npz", ".pkl", ".pickle", ".joblib", ".h5", ".hdf5",
    ".nc", ".fits", ".parquet", ".feather", ".xls", ".xlsx", ".doc", ".docx", ".odt", ".ttf",
    ".otf", ".woff", ".woff2", ".eot", ".mp3", ".wav", ".ogg", ".flac", ".mp4", ".avi", ".mov",
    ".webm", ".bin", ".dat", ".dta", ".sav", ".mat",
))  # fmt: skip


def opaque_files(files: Any) -> list[str]:
    """Changed files (``CandidateView.files``) whose change is binary although the file is
    not a binary asset: no stage, and no model, can read what changed in them."""
    out = []
    for changed in files or ():
        if getattr(changed, "binary", False):
            path = str(getattr(changed, "path", ""))
            suffix = path[path.rfind(".") :].lower() if "." in path.rsplit("/", 1)[-1] else ""
            if suffix not in BINARY_ASSET_SUFFIXES:
                out.append(path)
    return out


def hidden_files(prompt: SWRPrompt, patch: str) -> tuple[list[str], float]:
    """The files of ``patch`` that change code (non-blank ``+`` / ``-`` lines) none of whose
    changed lines the prompt's ``<candidate_patch>`` block shows, and the share of changed
    lines it shows (1.0 when nothing changes). Linear time."""
    user = next((m["content"] for m in prompt.messages if m.get("role") == "user"), "")
    start, end = user.find("<candidate_patch>"), user.rfind("</candidate_patch>")
    block = user[start + len("<candidate_patch>") : end] if 0 <= start < end else ""
    shown = set(block.split("\n"))
    changed: dict[str, list[int]] = {}  # path -> [changed lines, shown]
    path = ""
    for line in patch.split("\n"):
        if line.startswith("+++ "):
            path = line[4:].strip().removeprefix("b/")
            continue
        if line[:1] not in ("+", "-") or line.startswith("--- ") or not line[1:].strip():
            continue
        counts = changed.setdefault(path, [0, 0])
        counts[0] += 1
        counts[1] += line in shown
    total = sum(c[0] for c in changed.values())
    kept = sum(c[1] for c in changed.values())
    hidden = sorted(p for p, (_, n) in changed.items() if n == 0)
    return hidden, (kept / total if total else 1.0)
