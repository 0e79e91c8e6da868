"""``sweworld train verdict``: the learned, calibrated SWR verdict (issue 20).

Reads labelled candidates (:mod:`sweworld.train.verdict_data`: SWR datasets from
``sweworld data`` / the factory, and the shared mini-swe-agent run with its harness reports,
gold and leaderboard patches), computes every candidate's evidence in oracle and blind mode
with the reward pipeline itself (exact stages, patch shape, the outcome model's predicted
test statuses), and fits per mode a logistic regression and gradient-boosted trees. Folds
keep a repository together (``GroupKFold``); the out-of-fold scores of the training
repositories fit the calibration (isotonic or Platt, whichever has the lower out-of-fold
Brier score); the learner with the better out-of-fold AUC is kept.

Figures are printed on the held-out repositories (never seen in training or calibration),
per repository, beside the baselines (always-majority, the gold-files heuristic, the exact
stages alone as ``sweworld reward`` scored before), and leave-one-repository-out over all
repositories. Candidates an exact stage stops are scored 0 by every verdict (the stage is
decisive) and are counted in the figures; they are not training rows.

The model is written as JSON (no pickle): ``--out DIR`` gives ``DIR/model.json`` and
``DIR/figures.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sweworld.train.verdict_learn import (
    LEARNERS,
    choose_learner,
    export_body,
    fit_calibration,
    fit_learner,
    fold_groups,
    metrics,
    out_of_fold,
    raw_scores,
)

__all__ = ["add_arguments", "fit_matrix", "main", "make_parser", "run"]

#: Candidate kinds by source, for figures within one source.
SOURCES = {
    "factory": ("right", "alt", "partial", "wrong", "overreach", "empty", "test_edit"),
    "verified": ("agent", "gold", "leaderboard"),
    "agent-only": ("agent",),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options."""
    parser.add_argument(
        "--data",
        action="append",
        required=True,
        help="an SWR dataset folder (or a folder holding them), or the shared "
        "mini-swe-agent tarball (repeatable)",
    )
    parser.add_argument("--out", required=True, help="output folder (model.json, figures.json)")
    parser.add_argument(
        "--repos",
        action="append",
        default=[],
        help="git repositories / bare mirrors holding base commits (repeatable; default: "
        "repos/*.git under each --data folder and $SWEWORLD_REPO_CACHE)",
    )
    parser.add_argument(
        "--cache",
        action="append",
        default=[],
        help="folders of extracted base checkouts; new ones go to the first (repeatable)",
    )
    parser.add_argument(
        "--heldout", action="append", default=None, help="held-out repository (repeatable)"
    )
    parser.add_argument(
        "--learner",
        choices=(*LEARNERS, "both"),
        default="both",
        help="logreg (logistic regression), hgb (gradient-boosted trees) or both: fit both, "
        "keep the one with the better out-of-fold ROC AUC (default: both)",
    )
    parser.add_argument(
        "--outcome",
        default="default",
        help="outcome model for the predicted test statuses ('none': without)",
    )
    parser.add_argument(
        "--features", default="", help="a JSONL file caching the candidates' features"
    )
    parser.add_argument(
        "--max-iter",
        type=int,
        default=120,
        help="boosting iterations of the gradient-boosted trees (hgb; default 120)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="random seed of the gradient-boosted trees (default 0)"
    )
    parser.add_argument(
        "--decoys",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="add each gold patch's decoys where a checkout is found: a function nothing "
        "calls added to the file the gold patch changes (unresolved), and the same beside the "
        "gold patch (resolved); held-out figures are on real candidates only, the decoys "
        "reported apart",
    )
    parser.add_argument("--limit", type=int, default=0, help="at most this many candidates")
    parser.add_argument("--threads", type=int, default=1, help="OpenMP threads for training")


def make_parser() -> argparse.ArgumentParser:
    """The stand-alone parser (``python -m sweworld.train.verdict``)."""
    parser = argparse.ArgumentParser(
        prog="sweworld train verdict",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return parser


# ------------------------------------------------------------------------------ figures


def _baselines(rows: list[Any], mode: str, majority: float) -> dict[str, list[float]]:
    """Scores of the baselines on ``rows``."""
    out: dict[str, list[float]] = {"majority": [majority] * len(rows), "exact_stages": []}
    gold: list[float] = []
    for c in rows:
        f, hard = c.features[mode], c.hard[mode]
        eq = f.get("gold_equivalent")
        out["exact_stages"].append(1.0 if (hard is None and eq == 1.0) else 0.0)
        cov = f.get("gold_files_covered")
        gold.append(0.0 if hard is not None or cov is None or cov != cov else float(cov >= 1.0))
    if mode == "oracle":
        out["gold_files"] = gold
    return out


def _print_table(title: str, table: dict[str, dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(f"  {'scorer':<26}{'n':>6}{'pos':>6}{'acc':>8}{'bal':>8}{'auc':>8}{'ece':>8}{'brier':>8}")
    for name, m in table.items():
        cells = [m.get(k) for k in ("accuracy", "balanced_accuracy", "roc_auc", "ece", "brier")]
        text = "".join(f"{c:>8.3f}" if isinstance(c, float) else f"{'-':>8}" for c in cells)
        print(f"  {name:<26}{m['n']:>6}{m['positives']:>6}{text}")


def _matrix(rows: Sequence[Any], mode: str) -> np.ndarray:
    from sweworld.reward.verdict import VERDICT_FEATURES

    return np.asarray(
        [[float(c.features[mode].get(k, math.nan)) for k in VERDICT_FEATURES] for c in rows],
        dtype=float,
    ).reshape(len(rows), len(VERDICT_FEATURES))


def fit_matrix(
    rows: Sequence[Any], mode: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, groups, weights) to fit on: ``rows`` plus, for each row that had whole-file
    features, a copy without them (:func:`~sweworld.reward.verdict.without_files`), in the
    same fold group, the two weighing half each (every candidate counts once). Without the
    copies, "no checkout was found" would stand for "a repository whose candidates are
    mostly resolved" (the Verified repositories no mirror here holds)."""
    masked = _masked(rows, mode)
    twinned = [t.features[mode] is not c.features[mode] for c, t in zip(rows, masked, strict=True)]
    twins = [t for t, has in zip(masked, twinned, strict=True) if has]
    both = [*rows, *twins]
    weight = np.asarray([0.5 if has else 1.0 for has in twinned] + [0.5] * len(twins))
    y = np.asarray([int(c.resolved) for c in both])
    return _matrix(both, mode), y, fold_groups(both), weight


def _masked(rows: Sequence[Any], mode: str) -> list[Any]:
    """Copies of ``rows`` whose features read as without a base checkout."""
    import copy

    from sweworld.reward.verdict import without_files

    out = []
    for c in rows:
        twin = copy.copy(c)
        twin.features = dict(c.features)
        twin.features[mode] = without_files(c.features[mode]) or c.features[mode]
        out.append(twin)
    return out


def _full_scores(model_scores: np.ndarray, rows: Sequence[Any], mode: str) -> list[float]:
    """The pipeline's scores: 0 where an exact stage stopped the candidate."""
    out, it = [], iter(model_scores.tolist())
    for c in rows:
        out.append(0.0 if c.hard[mode] is not None else next(it))
    return out


def train_mode(cands: list[Any], mode: str, heldout: set[str], args: Any) -> tuple[dict, dict]:
    """Fit, calibrate and measure the verdict of one mode; (head entry, figures)."""
    train = [c for c in cands if c.repo not in heldout]
    test = [c for c in cands if c.repo in heldout and c.source != "decoy"]
    decoys = [c for c in cands if c.repo in heldout and c.source == "decoy"]
    fit_rows = [c for c in train if c.hard[mode] is None]
    X, y, groups, weight = fit_matrix(fit_rows, mode)
    if len(set(y.tolist())) < 2:
        raise ValueError(f"{mode}: the training candidates have one label only")
    learners = LEARNERS if args.learner == "both" else (args.learner,)
    figures: dict[str, Any] = {"mode": mode, "train_rows": len(fit_rows), "learners": {}}
    oofs = {}
    for learner in learners:
        oofs[learner] = out_of_fold(learner, X, y, groups, args, weight)
        figures["learners"][learner] = {"oof_by_repository": metrics(y.astype(bool), oofs[learner])}
    chosen, cal, figures["selection"] = choose_learner(oofs, y, weight)
    est, fill = fit_learner(chosen, X, y, args, weight)
    entry = {"head": export_body(est), "fill": fill, "calibration": cal, "learner": chosen}
    from sweworld.reward.verdict import calibrate

    def score(rows: list[Any], e: Any = est, f: Any = fill, c: Any = cal) -> list[float]:
        live = [r for r in rows if r.hard[mode] is None]
        raw = raw_scores(e, f, _matrix(live, mode)) if live else np.zeros(0)
        return _full_scores(calibrate(c, raw) if live else raw, rows, mode)

    majority = float(np.mean([c.resolved for c in train]) >= 0.5)
    labels = [c.resolved for c in test]
    table = {f"verdict ({chosen})": metrics(labels, score(test))}
    for learner in learners:
        if learner != chosen:  # the others, for comparison (the prior: as 'majority')
            e2, f2 = fit_learner(learner, X, y, args, weight)
            c2 = fit_calibration(oofs[learner], y, weight)
            table[f"verdict ({learner})"] = metrics(labels, score(test, e2, f2, c2))
    for name, scores in _baselines(test, mode, majority).items():
        table[name] = metrics(labels, scores)
    # the same held-out candidates as they read without a base checkout (no whole files)
    table["verdict, no checkout"] = metrics(labels, score(_masked(test, mode)))
    figures["heldout"] = table
    per_repo: dict[str, Any] = {}
    ours = score(test)
    for repo in sorted({c.repo for c in test}):
        idx = [i for i, c in enumerate(test) if c.repo == repo]
        per_repo[repo] = metrics([labels[i] for i in idx], [ours[i] for i in idx])
    figures["heldout_by_repository"] = per_repo
    # within one source: the mixed table can reward telling sources apart (Verified
    # candidates are mostly resolved, factory ones mostly not)
    by_source: dict[str, Any] = {}
    for name, kinds in SOURCES.items():
        idx = [i for i, c in enumerate(test) if c.kind in kinds]
        if idx:
            sub = [test[i] for i in idx]
            by_source[f"verdict: {name}"] = metrics(
                [labels[i] for i in idx], [ours[i] for i in idx]
            )
            for base, scores in _baselines(sub, mode, majority).items():
                by_source[f"{base}: {name}"] = metrics([c.resolved for c in sub], scores)
    if decoys:  # how often the reward-hack shape fools the verdict, and its twin with the fix
        ds = score(decoys)
        for kind in ("decoy", "gold_decoy"):
            idx = [i for i, c in enumerate(decoys) if c.kind == kind]
            if idx:
                by_source[f"verdict: {kind}"] = metrics(
                    [decoys[i].resolved for i in idx], [ds[i] for i in idx]
                )
    figures["heldout_by_source"] = by_source
    figures["leave_one_repository_out"] = _loro(cands, mode, chosen, args)
    return entry, figures


def _loro(cands: list[Any], mode: str, learner: str, args: Any) -> dict[str, Any]:
    """Leave one repository out over every repository (calibration: in-fold OOF)."""
    from sweworld.reward.verdict import calibrate

    out: dict[str, Any] = {}
    labels_all, scores_all = [], []
    for repo in sorted({c.repo for c in cands}):
        train = [c for c in cands if c.repo != repo and c.hard[mode] is None]
        test = [c for c in cands if c.repo == repo and c.source != "decoy"]
        X, y, groups, weight = fit_matrix(train, mode)
        if len(set(y.tolist())) < 2:
            continue
        cal = (
            {"kind": "none"}
            if learner == "prior"
            else fit_calibration(out_of_fold(learner, X, y, groups, args, weight), y, weight)
        )
        est, fill = fit_learner(learner, X, y, args, weight)
        live = [c for c in test if c.hard[mode] is None]
        raw = raw_scores(est, fill, _matrix(live, mode)) if live else np.zeros(0)
        scores = _full_scores(calibrate(cal, raw) if live else raw, test, mode)
        labels = [c.resolved for c in test]
        out[repo] = metrics(labels, scores)
        labels_all += labels
        scores_all += scores
    out["ALL (pooled)"] = metrics(labels_all, scores_all)
    return out


# ------------------------------------------------------------------------------ main


def _checkouts(args: Any) -> Any:
    import os

    from sweworld.dirs import cache_dir

    repos = [Path(r) for r in args.repos]
    for d in args.data:
        repos += sorted(Path(d).glob("repos/*.git")) + sorted(Path(d).glob("*/repos/*.git"))
    env = os.environ.get("SWEWORLD_REPO_CACHE")
    if env and not args.repos:
        repos += sorted(Path(env).glob("*.git"))
    caches = [Path(c) for c in args.cache] or [cache_dir() / "outcome-bases"]
    return Checkouts(repos, caches)


class Checkouts:
    """Base checkouts: read from any of ``caches``, extracted (and a factory task's setup
    patch applied) into the first."""

    def __init__(self, repos: Sequence[Path], caches: Sequence[Path]):
        from sweworld.train.outcome_data import BaseCheckouts

        self.readers = [BaseCheckouts(repos, c, extract=False) for c in caches[1:]]
        self.writer = BaseCheckouts(repos, caches[0], extract=True)
        self._setup: dict[str, Path | None] = {}

    def for_task(self, task: dict[str, Any], commit: str = "") -> Path | None:
        """The checkout a task's session starts from (None: no repository has it)."""
        import hashlib

        from sweworld.train.outcome_data import materialize

        commit = str(task.get("base_commit") or commit)
        if not commit:
            return None
        base = None
        for reader in self.readers:
            if (reader.cache / commit / ".complete").exists():
                base = reader.get(commit)
                break
        if base is None:
            base = self.writer.get(commit)
        setup = str(task.get("setup_patch") or "")
        if base is None or not setup:
            return base
        key = f"{commit}-{hashlib.sha256(setup.encode()).hexdigest()[:16]}"
        for cache in [r.cache for r in self.readers] + [self.writer.cache]:
            if (cache / key / ".complete").exists():
                return cache / key
        if key not in self._setup:
            out = self.writer.cache / key
            materialize(base, setup, out)
            (out / ".complete").write_text(key)
            self._setup[key] = out
        return self._setup[key]


def run(args: argparse.Namespace) -> int:
    """Train, measure and write the verdict; 0 on success."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=max(1, int(args.threads))):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from sweworld.data.schema import DEFAULT_HELDOUT_REPOS
    from sweworld.reward.verdict import VerdictModel
    from sweworld.train.verdict_data import (
        add_outcome_features,
        decoy_candidates,
        feature_rows,
        load_candidates,
    )

    started = time.perf_counter()
    heldout = set(args.heldout or DEFAULT_HELDOUT_REPOS)
    cands = load_candidates(args.data)
    if args.limit:
        cands = cands[: args.limit]
    checkouts = _checkouts(args)
    if args.decoys:
        decoys = decoy_candidates(cands, checkouts)
        print(f"decoy candidates: {len(decoys)} (from the gold patches with a checkout)")
        cands += decoys
    cached = _read_features(args.features) if args.features else {}
    todo = [c for c in cands if _ckey(c) not in cached]
    predicted: dict[str, str] = {}  # candidate key -> the outcome model its oc_* came from
    for c in cands:
        if _ckey(c) in cached:
            c.features, c.hard, predicted[_ckey(c)] = cached[_ckey(c)]
            _fill_patch_features(c)
    print(f"candidates: {len(cands)} ({len(todo)} to featurise)", file=sys.stderr)
    if todo:
        feature_rows(todo, checkouts)
        if args.features:
            _write_features(args.features, cands, predicted)
    if args.outcome == "none":  # cached predictions of an outcome model are not evidence
        for c in cands:
            _clear_outcome_features(c)
    else:
        sha = _outcome_sha(args.outcome)
        again = [c for c in cands if predicted.get(_ckey(c)) != sha]
        for c in again:  # no prediction now (no checkout, failure): missing, not stale
            _clear_outcome_features(c)
        n = add_outcome_features(again, checkouts, args.outcome)
        print(
            f"outcome model predictions: {n} of {len(again)} candidates asked "
            f"({len(cands) - len(again)} cached)",
            file=sys.stderr,
        )
        predicted.update({_ckey(c): sha for c in again})
        if args.features and again:
            _write_features(args.features, cands, predicted)
    counts = Counter((c.repo, c.resolved) for c in cands)
    print(f"labelled candidates: {len(cands)} ({sum(c.resolved for c in cands)} resolved)")
    for repo in sorted({c.repo for c in cands}):
        split = "test " if repo in heldout else "train"
        print(f"  {split} {repo}: {counts[(repo, True)]} resolved, {counts[(repo, False)]} not")
    kinds = Counter((c.kind, c.resolved) for c in cands)
    print("  by kind: " + ", ".join(f"{k}/{r}: {n}" for (k, r), n in sorted(kinds.items())))
    heads, figures = {}, {}
    for mode in ("oracle", "blind"):
        entry, fig = train_mode(cands, mode, heldout, args)
        heads[mode], figures[mode] = entry, fig
        _print_table(f"held-out repositories, {mode}", fig["heldout"])
        _print_table(f"held-out, by repository, {mode} (verdict)", fig["heldout_by_repository"])
        _print_table(f"held-out, within one source, {mode}", fig["heldout_by_source"])
        _print_table(
            f"leave one repository out, {mode} ({entry['learner']})",
            fig["leave_one_repository_out"],
        )
    from sweworld.train.report import invocation
    from sweworld.transition.outcome.model import Head

    meta = {
        "candidates": len(cands),
        "heldout": sorted(heldout),
        "outcome": args.outcome,
        "trained_s": round(time.perf_counter() - started, 1),
        "command": invocation("verdict", sys.argv)[:500],
    }
    model = VerdictModel({m: {**e, "head": Head(e["head"])} for m, e in heads.items()}, meta)
    path = model.save(args.out)
    (path.parent / "figures.json").write_text(json.dumps(figures, indent=1), encoding="utf-8")
    VerdictModel.load(path)  # what was written reads back
    print(f"\nwrote {path} ({path.stat().st_size // 1024} KiB) in {meta['trained_s']} s")
    return 0


def _fill_patch_features(c: Any) -> None:
    """The features of a cached candidate that need only its patch and the gold patch,
    computed again (a cache never holds an older definition of them): the same functions
    the reward computes them with."""
    from sweworld.reward.patch_lines import (
        GOLD_LINE_FEATURES,
        gold_line_overlap,
        only_new_definitions,
    )

    for mode, feats in c.features.items():
        feats["only_new_definitions"] = only_new_definitions(c.patch)
        if mode != "oracle":
            continue
        gold = str(c.task.get("patch") or "")
        feats.update(
            gold_line_overlap(c.patch, gold)
            if gold.strip()
            else dict.fromkeys(GOLD_LINE_FEATURES, math.nan)
        )


def _ckey(c: Any) -> str:
    from sweworld.train.verdict_data import candidate_key

    return candidate_key(c.instance_id, c.patch)


def _clear_outcome_features(c: Any) -> None:
    feats = c.features.get("oracle")
    if feats is not None:
        feats.update({k: math.nan for k in list(feats) if k.startswith("oc_")})


def _outcome_sha(spec: str) -> str:
    """The identity of the outcome model whose predictions fill ``oc_*`` (its file's hash;
    a folder holds ``model.json``)."""
    import hashlib

    from sweworld.transition.outcome.executor import DEFAULT_MODEL

    path = DEFAULT_MODEL if spec == "default" else Path(spec)
    if path.is_dir():
        path = path / "model.json"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_features(path: str) -> dict[str, tuple[dict, dict, str]]:
    """Cached features by candidate key: (features by mode, hard stops, the hash of the
    outcome model the ``oc_*`` features came from, "" when none did)."""
    out: dict[str, tuple[dict, dict, str]] = {}
    p = Path(path)
    if not p.is_file():
        return out
    for line in p.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        feats = {
            m: {k: (math.nan if v is None else v) for k, v in f.items()}
            for m, f in row["features"].items()
        }
        out[row["key"]] = (feats, row["hard"], str(row.get("outcome") or ""))
    return out


def _write_features(path: str, cands: Sequence[Any], predicted: Mapping[str, str]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for c in cands:
            if not c.features:
                continue
            feats = {
                m: {k: (None if v != v else v) for k, v in f.items()} for m, f in c.features.items()
            }
            row = {"key": _ckey(c), "features": feats, "hard": c.hard}
            row["outcome"] = predicted.get(_ckey(c), "")
            fh.write(json.dumps(row) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sweworld.train.verdict ...``."""
    return run(make_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
