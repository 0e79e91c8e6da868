"""The learned verdict: one calibrated probability from the evidence the pipeline computes.

Evidence (:data:`VERDICT_FEATURES`, one float each, NaN when unknown):

* the exact stages' outputs: syntax, type check (errors introduced), semantic
  (equivalence with the gold patch in oracle mode, whether the gold patch changes code);
* the patch's shape: files, hunks, code lines added / removed (comments and blank lines are
  not counted, so text aimed at the judge cannot move them), new / deleted files, and in
  oracle mode its overlap with the gold patch (files, functions named in hunk headers,
  changed definitions when whole files are known);
* the outcome model's prediction (issue 19) of every FAIL_TO_PASS / PASS_TO_PASS test on the
  candidate's state (:mod:`sweworld.reward.test_outcomes`): the same statuses a simulated
  ``pytest`` on that state shows;
* the LM tests stage's probability, only when that optional stage ran.

Hard exact failures (a changed file that does not parse, test tampering, an empty, no-op or
tests-only patch) stay decisive in :class:`~sweworld.reward.model.RewardModel`; the verdict
only weighs the rest.

The model file is plain JSON (``format`` :data:`FORMAT`): per mode a classifier exported by
:func:`sweworld.transition.outcome.model.export_estimator` (trees or coefficients, evaluated
with numpy: nothing is unpickled), the values that fill missing inputs of a linear head, and
a calibration map (isotonic points or Platt's two numbers). :class:`VerdictFileError` names
the file when it is corrupt, of another version or of another feature set.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sweworld.reward.patch_lines import (
    GOLD_LINE_FEATURES,
    code_line,
    gold_line_overlap,
    only_new_definitions,
)
from sweworld.transition.outcome.model import Head, ModelFileError

__all__ = [
    "DEFAULT_VERDICT",
    "FORMAT",
    "FORMAT_VERSION",
    "VERDICT_FEATURES",
    "WHOLE_FILE_FEATURES",
    "VerdictFileError",
    "VerdictModel",
    "calibrate",
    "load_verdict",
    "patch_features",
    "unanalysable",
    "verdict_features",
    "without_files",
]

FORMAT = "sweworld-verdict-model"
FORMAT_VERSION = 1
#: The shipped verdict (trained by ``sweworld train verdict``; see its README).
DEFAULT_VERDICT = (
    Path(__file__).resolve().parents[1] / "adapters" / "verdict-default" / "model.json"
)

NAN = float("nan")

VERDICT_FEATURES: tuple[str, ...] = (
    # exact stages
    "syntax_ran",
    "syntax_suspected",
    "typecheck_introduced",
    "apply_error",
    "gold_equivalent",
    "gold_touches_code",
    # patch shape
    "n_files",
    "n_code_files",
    "n_test_files",
    "n_other_files",
    "n_new_files",
    "n_deleted_files",
    "only_new_definitions",
    "n_hunks",
    "code_added",
    "code_removed",
    "test_added",
    "log_code_changed",
    # oracle: relation to the gold patch
    "gold_files_covered",
    "extra_code_files",
    "gold_sections_covered",
    "gold_defs_covered",
    "size_ratio_gold",
    "gold_removed_gone",
    "gold_added_present",
    "added_in_gold",
    # outcome model: predicted statuses of the task's tests on the candidate's state
    "oc_available",
    "oc_f2p_n",
    "oc_p2p_n",
    "oc_f2p_pass",
    "oc_p2p_pass",
    "oc_f2p_pfail_mean",
    "oc_f2p_pfail_max",
    "oc_p2p_pfail_max",
    "oc_run_fails",
    "oc_reach_changed",
    # optional LM tests stage
    "lm_tests_p",
)

#: The features only a base checkout gives (whole files): the type check, the changed
#: definitions against the gold patch's, the outcome model's predicted test statuses. They
#: are missing where no checkout of the task's repository is found; training sees every
#: candidate that had them a second time without them (:func:`without_files`), so that
#: their absence says nothing about where a candidate came from.
WHOLE_FILE_FEATURES: tuple[str, ...] = (
    "typecheck_introduced",
    "gold_defs_covered",
    *(name for name in VERDICT_FEATURES if name.startswith("oc_")),
)

_SECTION_NAME = re.compile(r"(?:def|class)\s+([A-Za-z_]\w*)")


class VerdictFileError(ModelFileError):
    """A verdict model file that cannot be used (corrupt, another version, other features)."""


# ------------------------------------------------------------------------------ features


def _normalised_counts(before: str | None, after: str | None) -> tuple[int, int]:
    """(lines added, lines removed) between the normalised forms of a Python file (no
    comments, no docstrings, no formatting: :func:`~sweworld.reward.stages.semantic.
    normalize_source`)."""
    import difflib

    from sweworld.reward.stages.semantic import normalize_source

    old = normalize_source(before or "").splitlines() if before else []
    new = normalize_source(after or "").splitlines() if after else []
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
        None, old, new, autojunk=False
    ).get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def _sections(hunks: Sequence[Any]) -> set[str]:
    """Function / class names in the hunks' ``@@`` headers and in the defs they change."""
    names: set[str] = set()
    for hunk in hunks:
        match = _SECTION_NAME.search(hunk.section or "")
        if match:
            names.add(match.group(1))
        for kind, text in hunk.lines:
            if kind != " ":
                found = _SECTION_NAME.match(text.strip())
                if found:
                    names.add(found.group(1))
    return names


def _live_hunks(candidate: Any, hunks: Mapping[str, list[Any]]) -> dict[str, list[Any]]:
    """Each changed file's hunks that change code (a comment, docstring or blank-line edit is
    not a change); a Python file whose normalised text is unchanged has none."""
    from sweworld.reward.stages.semantic import normalize_source

    live: dict[str, list[Any]] = {}
    for f in candidate.files:
        file_hunks = hunks.get(f.path, [])
        if f.binary or f.error or not f.is_python:
            live[f.path] = list(file_hunks) or ([None] if f.binary else [])
            continue
        whole = candidate.scope == "files" and f.before is not None and f.after is not None
        if whole and normalize_source(f.before or "") == normalize_source(f.after or ""):
            live[f.path] = []
            continue
        live[f.path] = [
            h for h in file_hunks if any(k != " " and code_line(t) for k, t in h.lines)
        ] or ([] if file_hunks else [None])
    return live


def patch_features(candidate: Any, gold: Any = None) -> dict[str, float]:
    """Shape features of a :class:`~sweworld.reward.types.CandidateView` and, when ``gold``
    (the gold patch's view, oracle mode) is given, its relation to the gold patch. Comments,
    docstrings and blank lines change none of them."""
    from sweworld.tasks.patches import patch_hunks

    feats: dict[str, float] = {}
    live = _live_hunks(candidate, patch_hunks(candidate.patch))
    files = [f for f in candidate.files if live.get(f.path)]
    hunks = {p: [h for h in hs if h is not None] for p, hs in live.items()}
    code = [f for f in files if f.is_python and not f.is_test]
    tests = [f for f in files if f.is_test]
    added = removed = test_added = 0
    for f in files:
        whole = candidate.scope == "files" and f.is_python and not f.error and not f.binary
        if whole and not f.is_test and (f.before is not None or f.after is not None):
            plus, minus = _normalised_counts(f.before, f.after)
            added, removed = added + plus, removed + minus
            continue
        for hunk in hunks.get(f.path, []):
            plus = sum(1 for k, t in hunk.lines if k == "+" and code_line(t))
            minus = sum(1 for k, t in hunk.lines if k == "-" and code_line(t))
            if f.is_test:
                test_added += plus
            elif f.is_python:
                added, removed = added + plus, removed + minus
    feats.update(
        n_files=float(len(files)),
        n_code_files=float(len(code)),
        n_test_files=float(len(tests)),
        n_other_files=float(len(files) - len(code) - len(tests)),
        n_new_files=float(sum(f.status == "added" for f in files)),
        n_deleted_files=float(sum(f.status == "deleted" for f in files)),
        only_new_definitions=only_new_definitions(candidate.patch),
        n_hunks=float(sum(len(hunks.get(f.path, [])) for f in files)),
        code_added=float(added),
        code_removed=float(removed),
        test_added=float(test_added),
        log_code_changed=math.log1p(added + removed),
        apply_error=float(bool(candidate.apply_error)),
    )
    keys = (
        "gold_files_covered",
        "extra_code_files",
        "gold_sections_covered",
        "gold_defs_covered",
        "size_ratio_gold",
        *GOLD_LINE_FEATURES,
    )
    if gold is None or not gold.files:
        feats.update(dict.fromkeys(keys, NAN))
        return feats
    feats.update(gold_line_overlap(candidate.patch, gold.patch))
    gold_hunks = patch_hunks(gold.patch)
    gold_code = {f.path for f in gold.files if not f.is_test}
    ours = {f.path for f in files if not f.is_test}
    feats["gold_files_covered"] = len(gold_code & ours) / len(gold_code) if gold_code else NAN
    feats["extra_code_files"] = float(len({f.path for f in code} - gold_code))
    gold_names: set[str] = set().union(*(_sections(gold_hunks.get(p, [])) for p in gold_code))
    our_names: set[str] = set().union(*(_sections(hunks.get(p, [])) for p in ours))
    feats["gold_sections_covered"] = (
        len(gold_names & our_names) / len(gold_names) if gold_names else NAN
    )
    feats["gold_defs_covered"] = _defs_covered(candidate, gold, gold_code)
    gold_size = sum(
        1
        for p in gold_code
        for h in gold_hunks.get(p, [])
        for k, t in h.lines
        if k != " " and code_line(t)
    )
    feats["size_ratio_gold"] = math.log1p(added + removed) - math.log1p(gold_size)
    return feats


def _defs_covered(candidate: Any, gold: Any, gold_code: set[str]) -> float:
    """Share of the definitions the gold patch changes that the candidate changes too,
    compared on normalised text (whole files only: NaN in hunk scope)."""
    if candidate.scope != "files" or gold.scope != "files":
        return NAN
    from sweworld.reward.stages.semantic import normalize_source
    from sweworld.transition.outcome.programs import changed_names

    def names(f: Any) -> set[str]:
        before = normalize_source(f.before) if f.before else None
        after = normalize_source(f.after) if f.after else None
        return set(changed_names(before, after))

    ours = {f.path: f for f in candidate.files}
    wanted = covered = 0
    for f in gold.files:
        if f.path not in gold_code or not f.is_python:
            continue
        gold_names = names(f)
        wanted += len(gold_names)
        mine = ours.get(f.path)
        if mine is not None and gold_names:
            covered += len(gold_names & names(mine))
    return covered / wanted if wanted else NAN


def verdict_features(
    stages: Mapping[str, Any],
    candidate: Any,
    gold: Any = None,
    tests: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """All of :data:`VERDICT_FEATURES` for one candidate.

    Args:
        stages: the stage results by name (``StageResult``).
        candidate: the candidate's view; ``gold``: the gold patch's view (oracle) or None.
        tests: the outcome model's features (:func:`sweworld.reward.test_outcomes.
            predicted_test_features`), None when it did not run.
    """
    feats = dict.fromkeys(VERDICT_FEATURES, NAN)
    syntax = stages.get("syntax")
    if syntax is not None and syntax.verdict in ("pass", "fail"):
        feats["syntax_ran"] = 1.0
        feats["syntax_suspected"] = float(bool(syntax.evidence.get("suspected_only")))
    typecheck = stages.get("typecheck")
    if typecheck is not None and typecheck.verdict in ("pass", "fail"):
        introduced = typecheck.evidence.get("introduced")
        count = len(introduced) if isinstance(introduced, list) else None
        feats["typecheck_introduced"] = float(
            count if count is not None else typecheck.verdict == "fail"
        )
    semantic = stages.get("semantic")
    if semantic is not None:
        equivalent = semantic.evidence.get("gold_equivalent")
        if equivalent is not None:
            feats["gold_equivalent"] = float(bool(equivalent))
        touches = semantic.evidence.get("gold_touches_code")
        if touches is not None:
            feats["gold_touches_code"] = float(bool(touches))
    feats.update(patch_features(candidate, gold))
    if tests:
        feats.update({k: float(v) for k, v in tests.items() if k in feats})
    lm = stages.get("tests")
    if lm is not None and lm.verdict in ("pass", "fail") and lm.score is not None:
        feats["lm_tests_p"] = float(lm.score)
    return {k: feats[k] for k in VERDICT_FEATURES}


# ------------------------------------------------------------------------------ calibration


def without_files(features: Mapping[str, float]) -> dict[str, float] | None:
    """``features`` as they read without a base checkout (every
    :data:`WHOLE_FILE_FEATURES` missing), or None when none of them is known (the
    candidate was featurised without whole files already)."""
    known = [k for k in WHOLE_FILE_FEATURES if not _missing(features.get(k))]
    if not known:
        return None
    out = dict(features)
    out.update(dict.fromkeys(WHOLE_FILE_FEATURES, NAN))
    return out


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def calibrate(body: Mapping[str, Any], p: np.ndarray) -> np.ndarray:
    """Apply a calibration map to raw probabilities ``p``."""
    kind = body.get("kind")
    p = np.clip(np.asarray(p, dtype=float), 1e-6, 1 - 1e-6)
    if kind == "isotonic":
        return np.interp(p, np.asarray(body["x"], float), np.asarray(body["y"], float))
    if kind == "platt":
        z = body["a"] * np.log(p / (1 - p)) + body["b"]
        return 1.0 / (1.0 + np.exp(-z))
    if kind in (None, "none"):
        return p
    raise ValueError(f"unknown calibration kind {kind!r}")


# ------------------------------------------------------------------------------ the model


class VerdictModel:
    """A trained verdict: per mode a head, its missing-value fills and its calibration."""

    def __init__(self, heads: dict[str, dict[str, Any]], meta: dict[str, Any] | None = None):
        self.heads = heads
        self.meta = dict(meta or {})
        self.path = "<in memory>"

    @property
    def modes(self) -> list[str]:
        """The modes the file has a head for."""
        return sorted(self.heads)

    def predict(self, rows: Sequence[Mapping[str, float]] | np.ndarray, mode: str) -> np.ndarray:
        """Calibrated P(resolved) of feature rows (mappings or a matrix in
        :data:`VERDICT_FEATURES` order) in ``mode``."""
        entry = self.heads.get(mode)
        if entry is None:
            raise VerdictFileError(f"{self.path}: the verdict model has no head for mode {mode!r}")
        if isinstance(rows, np.ndarray):
            X = np.asarray(rows, dtype=float)
        else:
            X = np.asarray(
                [[float(r.get(k, NAN)) for k in VERDICT_FEATURES] for r in rows], dtype=float
            )
        if X.ndim == 1:
            X = X.reshape(1, -1)
        head: Head = entry["head"]
        if head.body["kind"] == "linear":
            fill = np.asarray(entry.get("fill") or [0.0] * X.shape[1], dtype=float)
            X = np.where(np.isnan(X), fill, X)
        proba = head.proba(X)
        p = proba[:, head.classes.index("1")] if "1" in head.classes else np.zeros(len(X))
        return np.clip(calibrate(entry.get("calibration") or {}, p), 0.0, 1.0)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        heads = {
            mode: {**{k: v for k, v in e.items() if k != "head"}, "head": e["head"].body}
            for mode, e in self.heads.items()
        }
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "features": list(VERDICT_FEATURES),
            "heads": heads,
            "meta": self.meta,
        }

    def save(self, path: str | Path) -> Path:
        """Write ``model.json`` (``path`` a folder, or a ``.json`` file)."""
        path = Path(path)
        if path.suffix != ".json":
            path.mkdir(parents=True, exist_ok=True)
            path = path / "model.json"
        path.write_text(json.dumps(self.to_dict(), separators=(",", ":")), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path | None = None) -> VerdictModel:
        """Read a verdict model (default: the shipped one); never unpickles anything."""
        path = Path(path) if path is not None else DEFAULT_VERDICT
        if path.is_dir():
            path = path / "model.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise VerdictFileError(f"{path}: cannot read the verdict model: {exc}") from exc
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise VerdictFileError(f"{path}: not a verdict model (corrupt JSON: {exc})") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise VerdictFileError(f"{path}: not a verdict model (format is not {FORMAT!r})")
        if data.get("version") != FORMAT_VERSION:
            raise VerdictFileError(
                f"{path}: verdict model format version {data.get('version')!r}; "
                f"this sweworld reads version {FORMAT_VERSION}"
            )
        if data.get("features") != list(VERDICT_FEATURES):
            raise VerdictFileError(
                f"{path}: the verdict model was trained on another feature set; retrain it "
                "with this sweworld (sweworld train verdict)"
            )
        heads: dict[str, dict[str, Any]] = {}
        try:
            for mode, entry in (data.get("heads") or {}).items():
                body = entry["head"]
                if not isinstance(body, dict) or body.get("kind") not in ("trees", "linear"):
                    raise ValueError("unknown head kind")
                head = Head(body)
                if head.max_feature() >= len(VERDICT_FEATURES):
                    raise ValueError("the head reads a feature it does not have")
                fill = entry.get("fill")
                if fill is not None and len(fill) != len(VERDICT_FEATURES):
                    raise ValueError("fill values do not match the features")
                probe = np.zeros((1, len(VERDICT_FEATURES)))
                if head.proba(probe).shape != (1, len(head.classes)):
                    raise ValueError("the head does not evaluate")
                calibrate(entry.get("calibration") or {}, np.asarray([0.5]))
                heads[mode] = {**entry, "head": head}
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise VerdictFileError(f"{path}: corrupt verdict model: {exc}") from exc
        if not heads:
            raise VerdictFileError(f"{path}: the verdict model has no head")
        model = cls(heads, data.get("meta") or {})
        model.path = str(path)
        return model


_VERDICTS: dict[str, Any] = {}


def load_verdict(spec: str) -> Any:
    """The verdict model ``spec`` (``default`` or a path), loaded once per process."""
    key = "default" if spec == "default" else str(Path(spec).resolve())
    if key not in _VERDICTS:
        _VERDICTS[key] = VerdictModel.load(None if spec == "default" else spec)
    return _VERDICTS[key]


def unanalysable(candidate: Any) -> str | None:
    """Why the candidate's change cannot be analysed (the diff does not parse, a Python file
    changed as binary data or unreadable), or None."""
    if candidate.parse_error:
        return f"the patch does not parse: {candidate.parse_error}"
    for f in candidate.files:
        if f.is_python and f.binary:
            return f"{f.path} is changed as binary data"
        if f.is_python and f.error:
            return f"{f.path}: {f.error}"
    return None
