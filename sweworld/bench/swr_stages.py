"""SWR against real labels: each stage alone and combined, oracle and blind, and best-of-N.

Two labelled sets:

* **toy**: the toy repository's tasks, each with a family of candidates built by editing a
  real checkout (gold, gold with comments, empty, comment-only, syntax-broken, a wrong fix,
  half of the gold fix, README-only, test deletion, gold plus a weakened test), labelled by
  the real reward (LocalExecutor runs the tests, the shared grader grades them). Stages see
  whole files (the base checkout is available).
* **verified**: SWE-bench Verified from ``../shared/data``: the mini-swe-agent (Gemini 3)
  submissions labelled by their official harness reports, plus the leaderboard patches that
  resolved each task (positives). The repositories are not available, so the stages see the
  patches' hunks only (no type check). The model stage runs on a label-balanced sample
  (``--model-limit``), every other figure on all candidates.

Printed: accuracy, precision, recall, F1, balanced accuracy, ROC AUC, ECE for every stage
alone and for the combination (prior and 5-fold out-of-fold calibrated), per repository;
best-of-N resolve rate of the selected patch against random choice and the oracle; latency
per candidate.

    sweworld bench swr-stages [--model embedded] [--modes oracle,blind] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from sweworld.bench.summary import add_report_arguments, write_summary
from sweworld.reward.real import GRADED_STATUSES

STAGES = ("syntax", "typecheck", "semantic", "tests")

#: Every case a figure leaves out, with why: counted and printed (``report_dropped``).
DROPPED: list[tuple[str, str, str]] = []


def drop(where: str, case: str, why: str) -> None:
    """Record a case left out of a figure (printed at the end and in the JSON)."""
    DROPPED.append((where, case, why))


def report_dropped() -> dict[str, Any]:
    counts: dict[str, int] = defaultdict(int)
    for where, _, why in DROPPED:
        counts[f"{where}: {why}"] += 1
    print(f"\ncases left out of a figure: {len(DROPPED)}")
    for key, n in sorted(counts.items()):
        print(f"  {n:5d}  {key}")
    return {"total": len(DROPPED), "by_reason": dict(counts), "cases": DROPPED[:500]}


# ------------------------------------------------------------------------------ toy data


def _git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    out = subprocess.run(
        ["git", "-c", "core.quotepath=false", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def _edited(base: Path, patch: str, edit) -> str:
    """The diff of (base + patch + edit(tree)) against base."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "t"
        shutil.copytree(base, tree, symlinks=True)
        if patch:
            _git(tree, "apply", "-", stdin=patch)
        edit(tree)
        _git(tree, "add", "-A")
        return _git(tree, "diff", "--cached", "--no-color")


def _changed_py(patch: str) -> list[str]:
    from sweworld.tasks.patches import is_test_path, split_patch

    return [
        p.path
        for p in split_patch(patch)
        if p.path.endswith(".py") and not is_test_path(p.path) and p.status != "deleted"
    ]


def _mutate_fix(tree: Path, files: list[str]) -> None:
    """Flip one comparison or return value in the fixed code (a plausible wrong fix)."""
    swaps = (("==", "!="), (" < ", " <= "), (" > ", " >= "), ("True", "False"), (" + 1", " - 1"))
    for rel in files:
        path = tree / rel
        text = path.read_text()
        for old, new in swaps:
            if old in text:
                path.write_text(text.replace(old, new, 1))
                return
    if files:
        path = tree / files[0]
        path.write_text(path.read_text().replace("return ", "return None  # ", 1))


def _first_test_file(tree: Path) -> Path | None:
    found = sorted(tree.glob("tests/test_*.py"))
    return found[0] if found else None


def toy_candidates(task: Any, base: Path) -> dict[str, str]:
    """name -> candidate patch for one toy task (see the module docstring)."""
    from sweworld.tasks.patches import split_patch

    files = _changed_py(task.patch)
    first = files[0] if files else "README.md"

    def comment_gold(tree: Path) -> None:
        for rel in files:
            path = tree / rel
            path.write_text("# reviewed: fix for the reported issue\n" + path.read_text())

    def comment_only(tree: Path) -> None:
        path = tree / first
        path.write_text(path.read_text() + "\n# TODO: look into the reported issue\n")

    def broken(tree: Path) -> None:
        path = tree / first
        path.write_text(path.read_text() + "\ndef unfinished(:\n    pass\n")

    def readme(tree: Path) -> None:
        path = tree / "README.md"
        path.write_text(path.read_text() + "\nSee the issue tracker for known problems.\n")

    def delete_tests(tree: Path) -> None:
        test = _first_test_file(tree)
        if test is None:
            raise ValueError("no tests/test_*.py to delete")
        test.unlink()

    def weaken_tests(tree: Path) -> None:
        test = _first_test_file(tree)
        if test is None:
            raise ValueError("no tests/test_*.py to weaken")
        text = test.read_text().replace("    assert ", "    pass  # assert ", 3)
        test.write_text(text)

    parts = split_patch(task.patch)
    makers = {
        "gold": lambda: task.patch,
        "gold_commented": lambda: _edited(base, task.patch, comment_gold),
        "empty": lambda: "",
        "comment_only": lambda: _edited(base, "", comment_only),
        "syntax_broken": lambda: _edited(base, task.patch, broken),
        "wrong_fix": lambda: _edited(base, task.patch, lambda t: _mutate_fix(t, files)),
        "readme_only": lambda: _edited(base, "", readme),
        "delete_tests": lambda: _edited(base, "", delete_tests),
        "gold_weakened_tests": lambda: _edited(base, task.patch, weaken_tests),
    }
    out = {}
    for name, make in makers.items():
        try:
            out[name] = make()
        except (ValueError, subprocess.CalledProcessError) as exc:
            drop("toy candidates", f"{task.instance_id}/{name}", f"not buildable: {exc}")
    if len(parts) > 1:
        out["half_gold"] = parts[0].text
    else:
        drop("toy candidates", f"{task.instance_id}/half_gold", "the gold patch has one file")
    return out


def toy_labelled(limit: int | None) -> tuple[list[Any], list[tuple[Any, str, str, bool]]]:
    """Toy tasks and (task, name, patch, real resolved) rows."""
    from sweworld.execution.local import LocalExecutor
    from sweworld.reward.real import real_reward
    from sweworld.sandbox.manager import SessionManager
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    tasks = load_tasks(toy_tasks_path())[:limit]
    rows = []
    manager = SessionManager()
    try:
        for task in tasks:
            base = Path(manager.checkout(task, history="none").path)
            for name, patch in toy_candidates(task, base).items():
                real = real_reward(task, patch, manager=manager, executor=LocalExecutor())
                if real.status not in (*GRADED_STATUSES, "patch_failed"):  # no real label: not a 0
                    drop("toy labels", f"{task.instance_id}/{name}", f"real run {real.status}")
                    continue
                rows.append((task, name, patch, bool(real.resolved)))
                print(
                    f"  real {task.instance_id} {name}: {real.status} resolved={real.resolved}",
                    file=sys.stderr,
                )
    finally:
        manager.close_all()
    return tasks, rows


# ------------------------------------------------------------------------------ scoring


def stage_alone_score(result: Any, stage: str) -> float | None:
    """A stage used alone as a classifier: fail -> 0; its own probability when it gives one;
    pass -> 1; skip / error / not run -> None (no prediction)."""
    r = result.stages.get(stage)
    if r is None or r.verdict in ("skip", "error"):
        return None
    if r.verdict == "fail":
        return 0.0
    return float(r.score) if r.score is not None else 1.0


def metrics_table(rows: list[tuple[Any, bool]], *, calibrate: bool) -> dict[str, Any]:
    """Per stage alone and combined metrics for (RewardResult, label) rows."""
    from sweworld.reward.metrics import binary_metrics
    from sweworld.reward.model import fit_from_results

    out: dict[str, Any] = {}
    for stage in STAGES:
        pairs = [(lab, s) for r, lab in rows if (s := stage_alone_score(r, stage)) is not None]
        if pairs:
            out[stage] = binary_metrics([p[0] for p in pairs], [p[1] for p in pairs])
            # candidates the stage gave no prediction for (skip, error, not reached)
            out[stage]["no_prediction"] = len(rows) - len(pairs)
    labels = [lab for _, lab in rows]
    out["combined"] = binary_metrics(labels, [r.score for r, _ in rows])
    if calibrate:
        try:
            _, fitted = fit_from_results([r for r, _ in rows], labels)
            out["combined_calibrated_oof"] = fitted["out_of_fold"]
            out["combined_calibrated_oof"]["note"] = (
                "out-of-fold, on the candidates no exact stage stopped"
            )
        except ValueError as exc:
            out["combined_calibrated_oof"] = {"error": str(exc)}
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def print_table(title: str, table: dict[str, Any]) -> None:
    keys = (
        "n",
        "no_prediction",
        "accuracy",
        "precision",
        "recall",
        "f1",
        "balanced_accuracy",
        "roc_auc",
        "ece",
    )
    print(f"\n{title}")
    print("  " + "row".ljust(26) + "".join(k[:9].rjust(10) for k in keys))
    for name, m in table.items():
        if "error" in m:
            print("  " + name.ljust(26) + "  " + m["error"])
            continue
        print("  " + name.ljust(26) + "".join(_fmt(m.get(k)).rjust(10) for k in keys))


def latency_summary(results: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    totals = [r.info.get("latency_s", 0.0) for r in results]
    if totals:
        out["total_p50_s"] = statistics.median(totals)
        out["total_max_s"] = max(totals)
    by_stage = defaultdict(list)
    for r in results:
        for name, value in r.info.get("latency_by_stage", {}).items():
            by_stage[name].append(value)
    for name, values in by_stage.items():
        out[f"{name}_p50_s"] = statistics.median(values)
    return out


def best_of_n(groups: dict[str, list[tuple[Any, bool]]], vote_weight: float) -> dict[str, Any]:
    """Selected vs random vs oracle over tasks with >= 2 labelled candidates.

    Candidates are put in a label-independent order (by a hash of the patch) first, and
    every "selected" figure averages the labels over the tied best choices, so neither the
    input order (leaderboard positives first) nor tie-breaking can make selection look
    better than it is.
    """
    import hashlib

    from sweworld.reward.metrics import best_of_n_metrics
    from sweworld.reward.verifier import classes_by_signature, select_candidate

    rows = []
    with_votes = []
    for task_id, items in groups.items():
        if len(items) < 2:
            drop("best-of-N", task_id, "fewer than 2 labelled candidates")
            continue
        items = sorted(
            items,
            key=lambda pair: hashlib.sha256(
                str(pair[0].info.get("patch_sha") or id(pair[0])).encode()
            ).hexdigest(),
        )
        scores = [r.score for r, _ in items]
        classes = classes_by_signature([r for r, _ in items])
        _, value, table = select_candidate(scores, classes, vote_weight=vote_weight)
        tied = [c for c in table if abs(c["value"] - value) < 1e-12]
        labels = [items[i][1] for c in tied for i in c["members"] if scores[i] == scores[c["best"]]]
        with_votes.append(sum(labels) / len(labels))
        rows.append([(s, lab) for s, (_, lab) in zip(scores, items, strict=True)])
    metrics = best_of_n_metrics(rows)
    metrics["selected_with_votes_tie_avg"] = (
        sum(with_votes) / len(with_votes) if with_votes else None
    )
    return metrics


# ------------------------------------------------------------------------------ main


def score_one(model: Any, task: Any, patch: str, *, base: bool) -> Any:
    """Score one candidate (``info["signature"]`` groups equivalent ones for votes)."""
    import hashlib

    result = model.score(task, patch, base_dir=True if base else None)
    result.info["patch_sha"] = hashlib.sha256((patch or "").encode()).hexdigest()
    return result


def run_set(
    name: str, rows: list[tuple[Any, str, str, bool]], model: Any, *, base: bool, calibrate: bool
) -> tuple[list[tuple[Any, bool]], dict[str, Any]]:
    scored = []
    for i, (task, cand_name, patch, label) in enumerate(rows, 1):
        result = score_one(model, task, patch, base=base)
        result.info["candidate"] = cand_name
        scored.append((result, label))
        if i % 25 == 0 or i == len(rows):
            print(f"  {name}: {i}/{len(rows)} scored", file=sys.stderr)
    return scored, metrics_table(scored, calibrate=calibrate)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench swr-stages``."""
    parser.add_argument("--model", default="embedded", help="SWR model spec (default embedded)")
    parser.add_argument("--modes", default="oracle,blind", help="SWR context modes")
    parser.add_argument("--sets", default="toy,verified", help="labelled sets: toy, verified")
    parser.add_argument("--toy-tasks", type=int, default=None, help="limit toy tasks")
    parser.add_argument(
        "--model-limit",
        type=int,
        default=40,
        help="verified candidates the model stage scores, per mode "
        "(label-balanced sample; 0: exact stages only)",
    )
    parser.add_argument(
        "--bon-tasks", type=int, default=8, help="verified tasks for best-of-N with the model stage"
    )
    parser.add_argument("--samples", type=int, default=1, help="model samples per candidate")
    parser.add_argument(
        "--shared",
        default=str(Path(__file__).resolve().parents[3] / "shared" / "data"),
        help="the shared data folder (SWE-bench Verified labels)",
    )
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench swr-stages``."""

    from sweworld.reward.model import RewardModel, SWRConfig
    from sweworld.world import lm_from_spec, swr_lm_from_spec

    modes = [m for m in args.modes.split(",") if m]
    sets = [s for s in args.sets.split(",") if s]
    report: dict[str, Any] = {"model": args.model, "samples": args.samples}
    lm = lm_from_spec(args.model) if args.model else swr_lm_from_spec(None)

    def reward_model(mode: str, stages: tuple[str, ...] = STAGES) -> RewardModel:
        return RewardModel(
            SWRConfig(
                mode=mode, stages=stages, model=args.model, samples=args.samples, calibration=None
            ),
            lm=lm,
        )

    if "toy" in sets:
        print("toy: real labels", file=sys.stderr)
        t0 = time.perf_counter()
        _, rows = toy_labelled(args.toy_tasks)
        report["toy_real_s"] = time.perf_counter() - t0
        report["toy_labels"] = {"n": len(rows), "positives": sum(r[3] for r in rows)}
        for mode in modes:
            scored, table = run_set(
                f"toy/{mode}", rows, reward_model(mode), base=True, calibrate=True
            )
            print_table(
                f"toy, {mode} ({len(rows)} candidates, {sum(r[3] for r in rows)} resolved)", table
            )
            groups: dict[str, list] = defaultdict(list)
            for (task, *_), pair in zip(rows, scored, strict=True):
                groups[task.instance_id].append(pair)
            bon = best_of_n(groups, 0.2)
            print(f"  best-of-N: {json.dumps(bon)}")
            report[f"toy/{mode}"] = {
                "metrics": table,
                "best_of_n": bon,
                "latency": latency_summary([r for r, _ in scored]),
                "candidates": [
                    {
                        "task": r.instance_id,
                        "name": r.info["candidate"],
                        "label": lab,
                        "score": r.score,
                        "stopped_by": r.info.get("short_circuit"),
                    }
                    for r, lab in scored
                ],
            }

    if "verified" in sets:
        from sweworld.reward.candidates import load_verified_labelled

        tasks, candidates = load_verified_labelled(args.shared)
        by_id = {t.instance_id: t for t in tasks}
        every = []
        for i, cands in candidates.items():
            for c in cands:
                if c.label is None:
                    drop("verified", f"{i}/{c.source}", "no label")
                elif i not in by_id:
                    drop("verified", f"{i}/{c.source}", "no task row")
                else:
                    every.append((by_id[i], c.source, c.patch, bool(c.label)))
        # Classification figures use the mini-swe-agent submissions only: every leaderboard
        # patch is a positive, so mixing them in would let a verifier score by telling the
        # two sources' diff styles apart. Best-of-N uses every candidate of a task.
        rows = [r for r in every if r[1] == "mini-swe-agent-gemini3"]
        report["verified_labels"] = {
            "n": len(rows),
            "positives": sum(r[3] for r in rows),
            "all_candidates": len(every),
        }
        for mode in modes:
            exact = reward_model(mode, ("syntax", "typecheck", "semantic"))
            scored, table = run_set(
                f"verified/{mode}/exact", rows, exact, base=False, calibrate=False
            )
            per_repo: dict[str, list] = defaultdict(list)
            for (task, *_), pair in zip(rows, scored, strict=True):
                per_repo[task.repo].append(pair)
            print_table(
                f"verified, {mode}, exact stages, all candidates ({len(rows)}, "
                f"{sum(r[3] for r in rows)} resolved)",
                table,
            )
            repo_tables = {}
            for repo, pairs in sorted(per_repo.items()):
                repo_tables[repo] = metrics_table(pairs, calibrate=False)
                print(
                    f"  {repo}: n={len(pairs)} combined "
                    f"acc={_fmt(repo_tables[repo]['combined']['accuracy'])}"
                )
            others = [r for r in every if r[1] != "mini-swe-agent-gemini3"]
            every_scored = [(score_one(exact, r[0], r[2], base=False), r[3]) for r in others]
            groups = defaultdict(list)
            for (task, *_), pair in zip(others + rows, every_scored + scored, strict=True):
                groups[task.instance_id].append(pair)
            mixed = {i: g for i, g in groups.items() if len({lab for _, lab in g}) == 2}
            for i in sorted(set(groups) - set(mixed)):
                drop(f"verified/{mode} best-of-N", i, "candidates of one label only")
            bon_exact = best_of_n(mixed, 0.2)
            print(
                f"  best-of-N, exact stages + votes, {len(mixed)} tasks with both labels: "
                f"{json.dumps(bon_exact)}"
            )
            entry: dict[str, Any] = {
                "exact": {
                    "metrics": table,
                    "per_repo": repo_tables,
                    "best_of_n": bon_exact,
                    "latency": latency_summary([r for r, _ in scored]),
                }
            }
            if args.model_limit:
                rng = random.Random(0)
                pos = [r for r in rows if r[3]]
                neg = [r for r in rows if not r[3]]
                half = args.model_limit // 2
                sample = rng.sample(neg, min(half, len(neg)))
                sample += rng.sample(pos, min(args.model_limit - len(sample), len(pos)))
                full = reward_model(mode)
                mscored, mtable = run_set(
                    f"verified/{mode}/model", sample, full, base=False, calibrate=True
                )
                print_table(
                    f"verified, {mode}, all stages, balanced sample ({len(sample)})", mtable
                )
                entry["model"] = {
                    "metrics": mtable,
                    "latency": latency_summary([r for r, _ in mscored]),
                }
                both = sorted(mixed)[: args.bon_tasks]
                bon_rows = [r for r in every if r[0].instance_id in both]
                if bon_rows:
                    bscored, _ = run_set(
                        f"verified/{mode}/bon", bon_rows, full, base=False, calibrate=False
                    )
                    bgroups = defaultdict(list)
                    for (task, *_), pair in zip(bon_rows, bscored, strict=True):
                        bgroups[task.instance_id].append(pair)
                    entry["model"]["best_of_n"] = best_of_n(bgroups, 0.2)
                    print(
                        f"  best-of-N with the model ({len(both)} tasks): "
                        f"{json.dumps(entry['model']['best_of_n'])}"
                    )
            report[f"verified/{mode}"] = entry
    report["dropped"] = report_dropped()
    write_summary(args, "swr-stages", report, title="SWR stages on toy and verified")
    return 0
