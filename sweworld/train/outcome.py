"""``sweworld train outcome``: train the outcome model on SWT records with workspace states.

Reads ``swt.jsonl`` records (the task factory's ``records/`` folders, replayed imports),
rebuilds each record's state from its base commit (found in ``--repos`` or in the
``repos/*.git`` folders beside the data) plus its diff, computes the features in oracle and
blind mode, trains the three heads (exit class, exception type, per-test status) with
scikit-learn, exports them to JSON (no pickle) and prints the held-out figures beside the
floors: always exit 0, and each test's status at base. The split is by repository
(:func:`sweworld.data.schema.split_of`).

    sweworld train outcome --data /work/data-outcome/toolz --data /work/data-outcome/inflection \
        --out sweworld/adapters/outcome-default
    python -m sweworld.train.outcome --data D --out M
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sweworld.argtypes import at_least, bounded

__all__ = [
    "BALANCES",
    "TreeSettings",
    "add_arguments",
    "evaluate",
    "main",
    "make_parser",
    "per_mode_heads",
    "repos_for",
    "row_weights",
    "run",
    "train_heads",
    "wilson",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        action="append",
        required=True,
        help="a swt.jsonl file or a folder holding them (repeatable)",
    )
    parser.add_argument("--out", required=True, help="output folder (model.json) or .json file")
    parser.add_argument(
        "--repos",
        action="append",
        default=[],
        help="git repositories / bare mirrors holding the base commits "
        "(default: repos/*.git under each --data, and $SWEWORLD_REPO_CACHE)",
    )
    parser.add_argument("--cache", default="", help="where base checkouts are extracted")
    parser.add_argument(
        "--heldout",
        action="append",
        default=None,
        help="held-out repository (repeatable; default: the schema's list)",
    )
    parser.add_argument(
        "--learner",
        choices=("hgb", "logreg", "both"),
        default="hgb",
        help="hgb: gradient-boosted trees (the shipped model's); logreg: a logistic "
        "regression; both: measure both, keep the one better on a validation split of the "
        "training repositories' instances (default hgb)",
    )
    parser.add_argument(
        "--max-iter",
        type=int,
        default=100,
        help="boosting iterations of the gradient-boosted trees (hgb; default 100, the "
        "shipped model's)",
    )
    parser.add_argument(
        "--min-samples-leaf",
        type=at_least(1),
        default=100,
        help="fewest rows in a leaf of the trees (hgb; default 100, the shipped model's). "
        "A step's per-test rows share its step features: small leaves learn single steps "
        "(on a validation fifth of the training tasks, 100 with --l2 1 and --max-iter 100 "
        "agreed with real exit codes 0.91 against 0.73 for leaves of 5 in oracle mode); "
        "tiny datasets need small leaves",
    )
    parser.add_argument(
        "--l2",
        type=bounded(float, 0),
        default=1.0,
        help="L2 regularisation of the trees' leaf values (hgb; default 1, the shipped model's)",
    )
    parser.add_argument(
        "--balance",
        choices=BALANCES,
        default="repo",
        help="weights of the training rows: repo (default): every repository weighs the "
        "same in all, so a library the factory made many states of does not outvote the "
        "others (trained on the build with reproductions, bench swt on the held-out agent "
        "runs, oracle: pytest exit agreement 0.608 -> 0.667, all 0.693 -> 0.732; the shipped "
        "model's); none: every record weighs 1 (the models shipped before it)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="random seed (validation split, trees; default 0)"
    )
    parser.add_argument(
        "--cached-bases-only",
        action="store_true",
        help="use only base checkouts already in --cache (skip other records)",
    )
    parser.add_argument("--threads", type=int, default=1, help="OpenMP threads for training")
    parser.add_argument(
        "--jobs",
        type=at_least(1),
        default=min(4, os.cpu_count() or 1),
        help="processes computing the features (each task's records in one; default: the "
        "CPUs, at most 4; never more than the CPUs); 1 computes them in this process",
    )


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sweworld train outcome", description=__doc__)
    add_arguments(parser)
    return parser


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson 95% interval of a proportion k/n."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _figure(hits: Sequence[bool]) -> dict[str, Any]:
    n, k = len(hits), int(sum(hits))
    lo, hi = wilson(k, n)
    return {"n": n, "agree": round(k / n, 4) if n else None, "ci95": [round(lo, 4), round(hi, 4)]}


@dataclass(frozen=True)
class TreeSettings:
    """How the gradient-boosted trees grow (hgb only)."""

    #: boosting iterations
    max_iter: int = 100
    #: fewest rows in a leaf
    min_samples_leaf: int = 100
    #: L2 regularisation of the leaf values
    l2: float = 1.0


#: How :func:`train_heads` weighs its rows (``--balance``).
BALANCES = ("repo", "none")


def row_weights(rows: Sequence[Any], balance: str) -> np.ndarray | None:
    """Each row's training weight: ``repo`` gives every repository the same total (weights
    average 1), ``none`` none (None: every row weighs 1)."""
    if balance == "none":
        return None
    if balance != "repo":
        raise ValueError(f"balance must be one of {BALANCES}, got {balance!r}")
    counts = Counter(r.repo for r in rows)
    share = len(rows) / len(counts)
    return np.asarray([share / counts[r.repo] for r in rows], dtype=float)


def _fit(
    learner: str,
    X: np.ndarray,
    y: Sequence[str],
    seed: int,
    trees: TreeSettings = TreeSettings(),
    weight: np.ndarray | None = None,
) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    from sweworld.transition.outcome.model import export_estimator

    y = np.asarray(y)
    if len(set(y.tolist())) < 2:
        # one class only: a constant head (a linear model with zero weights)
        return {
            "kind": "linear",
            "classes": [str(y[0])],
            "coef": [[0.0] * X.shape[1]],
            "intercept": [0.0],
            "mean": None,
            "std": None,
        }
    if learner == "hgb":
        est = HistGradientBoostingClassifier(
            max_iter=trees.max_iter,
            learning_rate=0.1,
            max_leaf_nodes=15,
            min_samples_leaf=trees.min_samples_leaf,
            l2_regularization=trees.l2,
            random_state=seed,
            early_stopping=False,
        )
        est.fit(X, y, sample_weight=weight)
        return export_estimator(est)
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    std[std == 0] = 1.0
    est = LogisticRegression(max_iter=2000, C=1.0)
    est.fit((X - mean) / std, y, sample_weight=weight)
    return export_estimator(est, (mean, std))


def _exception_labels(rows: Sequence[Any]) -> tuple[list[str], set[str]]:
    counts = Counter(r.exception for r in rows)
    keep = {e for e, n in counts.items() if n >= 3}
    return [r.exception if r.exception in keep else "other" for r in rows], keep


def train_heads(
    rows: Sequence[Any],
    learner: str,
    seed: int = 0,
    trees: TreeSettings = TreeSettings(),
    balance: str = "none",
) -> dict[str, Any]:
    """Fit the three heads on ``rows`` (:class:`~sweworld.train.outcome_data.Row`), weighed
    as ``balance`` says (:func:`row_weights`; a per-test row weighs what its step does)."""
    from sweworld.transition.outcome.model import Head

    X = np.asarray([r.features for r in rows], dtype=float)
    w = row_weights(rows, balance)
    heads = {"exit": Head(_fit(learner, X, [r.exit_class for r in rows], seed, trees, w))}
    exc_labels, _ = _exception_labels(rows)
    heads["exception"] = Head(_fit(learner, X, exc_labels, seed, trees, w))
    tests = [t for r in rows for t in r.tests]
    if tests:
        Xt = np.asarray([t.features for t in tests], dtype=float)
        wt = None if w is None else np.repeat(w, [len(r.tests) for r in rows])
        heads["test"] = Head(_fit(learner, Xt, [t.status for t in tests], seed, trees, wt))
    return heads


def per_mode_heads(
    rows: Sequence[Any],
    learner: str,
    seed: int = 0,
    trees: TreeSettings = TreeSettings(),
    balance: str = "none",
) -> dict[str, Any]:
    """The three heads fitted separately on each mode's rows (``exit@oracle``, ...): an oracle
    row's features say what a blind row's cannot, and one linear head over both learns a
    compromise that serves neither."""
    heads: dict[str, Any] = {}
    for mode in sorted({r.mode for r in rows}):
        fitted = train_heads([r for r in rows if r.mode == mode], learner, seed, trees, balance)
        heads.update({f"{name}@{mode}": head for name, head in fitted.items()})
    return heads


def evaluate(model: Any, rows: Sequence[Any], mode: str | None = None) -> dict[str, Any]:
    """Held-out figures of ``model`` (its heads for ``mode``) on ``rows`` beside the floors.

    ``exit_pytest_executor`` and ``tests_executor`` score what the executor answers: one
    decision per test run (:meth:`~sweworld.transition.outcome.model.OutcomeModel.decide_tests`)
    that the rendered report, its exit code and the per-test statuses all follow (over the
    run's labelled tests; the executor decides over every test it collects)."""
    out: dict[str, Any] = {}
    if not rows:
        return out
    X = [r.features for r in rows]
    exits = model.predict_exit(X, mode)
    excs = model.predict_exception(X, mode)
    pytest = [i for i, r in enumerate(rows) if r.kind in ("pytest", "django_runtests")]
    raised = [i for i, r in enumerate(rows) if r.exception != "none"]
    out["exit_all"] = _figure([exits[i] == r.exit_class for i, r in enumerate(rows)])
    out["exit_all_floor0"] = _figure([r.exit_class == "0" for r in rows])
    out["exit_pytest"] = _figure([exits[i] == rows[i].exit_class for i in pytest])
    out["exit_pytest_floor0"] = _figure([rows[i].exit_class == "0" for i in pytest])
    ex_hits: list[bool] = []
    all_hits: list[bool] = []
    test_hits: list[bool] = []
    for i, r in enumerate(rows):
        guess = exits[i]
        if i in pytest and r.tests and exits[i] not in ("2", "4", "5"):
            failing, statuses = model.decide_tests(r.features, [t.features for t in r.tests], mode)
            guess = "1" if failing else "0"
            test_hits += [s == t.status for s, t in zip(statuses, r.tests, strict=True)]
        elif i in pytest:
            test_hits += [t.status == "PASSED" for t in r.tests]
        if i in pytest:
            ex_hits.append(guess == r.exit_class)
        all_hits.append(guess == r.exit_class)
    out["exit_all_executor"] = _figure(all_hits)
    out["exit_pytest_executor"] = _figure(ex_hits)
    out["exception_all"] = _figure([excs[i] == r.exception for i, r in enumerate(rows)])
    out["exception_raised"] = _figure([excs[i] == rows[i].exception for i in raised])
    out["exception_raised_floor_none"] = _figure([False for _ in raised])
    tests = [t for r in rows for t in r.tests]
    if tests:
        pred = model.predict_tests([t.features for t in tests], mode)
        out["tests"] = _figure([p == t.status for p, t in zip(pred, tests, strict=True)])
        out["tests_executor"] = _figure(test_hits)
        out["tests_floor_base"] = _figure([t.base_status == t.status for t in tests])
        out["tests_floor_passed"] = _figure([t.status == "PASSED" for t in tests])
    return out


def _print_table(title: str, figures: dict[str, Any]) -> None:
    print(f"\n{title}")
    print(f"  {'measure':<34} {'n':>6} {'agree':>7}  95% interval")
    for key, fig in figures.items():
        if fig.get("n"):
            lo, hi = fig["ci95"]
            print(f"  {key:<34} {fig['n']:>6} {fig['agree']:>7.3f}  [{lo:.3f}, {hi:.3f}]")


def repos_for(data: Sequence[str], extra: Sequence[str]) -> list[Path]:
    repos = [Path(r) for r in extra]
    for d in data:
        p = Path(d)
        if p.is_dir():
            repos += sorted(p.glob("repos/*.git")) + sorted(p.glob("*/repos/*.git"))
    cache = os.environ.get("SWEWORLD_REPO_CACHE")
    if cache and Path(cache).is_dir():
        repos += sorted(Path(cache).glob("*.git"))
    return repos


def run(args: argparse.Namespace) -> int:
    """Train, print the held-out figures beside the floors, save the model."""
    from threadpoolctl import threadpool_limits

    # OpenMP worker threads spin on shared cores: one thread is ~10x faster here
    with threadpool_limits(limits=max(1, int(args.threads))):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from sweworld.data.schema import DEFAULT_HELDOUT_REPOS
    from sweworld.dirs import cache_dir
    from sweworld.train.outcome_data import BaseCheckouts, load_rows
    from sweworld.transition.outcome.model import OutcomeModel

    started = time.perf_counter()
    heldout = tuple(args.heldout) if args.heldout else DEFAULT_HELDOUT_REPOS
    repos = repos_for(args.data, args.repos)
    cache = Path(args.cache) if args.cache else cache_dir() / "outcome-bases"
    stats: dict[str, int] = {}
    rows = load_rows(
        [Path(d) for d in args.data],
        BaseCheckouts(repos, cache, extract=not args.cached_bases_only),
        heldout,
        stats=stats,
        jobs=args.jobs,
    )
    train = [r for r in rows if r.split == "train"]
    test = [r for r in rows if r.split == "test"]
    by_repo = Counter((r.repo, r.split) for r in rows if r.mode == "oracle")
    print(
        f"records: {stats.get('records', 0)} with states, "
        f"{stats.get('skipped_no_state', 0)} skipped (no state), "
        f"{stats.get('skipped_diverged', 0)} skipped (replayed state diverged), "
        f"{stats.get('skipped_reproduction_script', 0)} skipped (the factory's reproduction "
        "run as a script)"
    )
    for (repo, split), n in sorted(by_repo.items()):
        print(f"  {split:<5} {repo}: {n} records")
    if not train:
        print("sweworld train outcome: no training rows (no record with a state)", file=sys.stderr)
        return 1
    learners = ("hgb", "logreg") if args.learner == "both" else (args.learner,)
    trees = TreeSettings(max_iter=args.max_iter, min_samples_leaf=args.min_samples_leaf, l2=args.l2)
    chosen = learners[0]
    validation: dict[str, Any] = {}
    if len(learners) > 1:
        # validation: a fifth of the training tasks (all records of a task on one side)
        rng = np.random.default_rng(args.seed)
        ids = sorted({r.instance_id for r in train})
        valid_ids = set(rng.choice(ids, size=max(1, len(ids) // 5), replace=False).tolist())
        fit_rows = [r for r in train if r.instance_id not in valid_ids]
        valid_rows = [r for r in train if r.instance_id in valid_ids]
        best = -1.0
        for learner in learners:
            model = OutcomeModel(per_mode_heads(fit_rows, learner, args.seed, trees, args.balance))
            score = 0.0
            for mode in ("oracle", "blind"):
                figs = evaluate(model, [r for r in valid_rows if r.mode == mode], mode)
                score += (figs.get("exit_all_executor", {}).get("agree") or 0) + (
                    figs.get("tests_executor", {}).get("agree") or 0
                )
                validation[f"{learner}/{mode}"] = figs
                _print_table(
                    f"validation (a fifth of the training tasks) learner={learner} mode={mode}",
                    figs,
                )
            if score > best:
                best, chosen = score, learner
    results: dict[str, Any] = {}
    final: OutcomeModel | None = None
    for learner in learners:
        model = OutcomeModel(per_mode_heads(train, learner, args.seed, trees, args.balance))
        for mode in ("oracle", "blind"):
            figs = evaluate(model, [r for r in test if r.mode == mode], mode)
            results[f"{learner}/{mode}"] = figs
            tag = " (kept)" if learner == chosen else ""
            _print_table(
                f"held-out ({', '.join(sorted({r.repo for r in test}))}) "
                f"learner={learner}{tag} mode={mode}",
                figs,
            )
        if learner == chosen:
            final = model
    assert final is not None
    from sweworld.train.report import invocation

    final.meta = {
        "learner": chosen,
        "balance": args.balance,
        "trained_kinds": sorted({r.kind for r in train} - {"other"}),
        "data": [str(d) for d in args.data],
        "train_repos": sorted({r.repo for r in train}),
        "heldout_repos": sorted({r.repo for r in test}),
        "records": stats.get("records", 0),
        "heldout_figures": results,
        "validation": validation,
        "command": invocation("outcome", sys.argv),
    }
    path = final.save(args.out)
    print(
        f"\nlearner kept: {chosen}; model -> {path} "
        f"({path.stat().st_size / 1e6:.2f} MB); wall {time.perf_counter() - started:.0f} s"
    )
    (path.parent / "figures.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(make_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
