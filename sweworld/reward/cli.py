"""``sweworld reward``, ``sweworld verify`` and ``sweworld calibrate``.

sweworld reward --tasks TASKS --id ID --patch P [--mode blind|oracle] [--model embedded]
sweworld verify --tasks TASKS --candidates C [C ...] --out preds.json [--scores S.json]
sweworld calibrate --tasks TASKS --candidates LABELLED [...] [--out calibration.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sweworld.tasks.fields import MODE_HELP, MODES

T = TypeVar("T")


#: What the numbers of ``sweworld reward`` mean (its ``--help`` description).
SCORE_HELP = (
    "Score a candidate patch with SWR's stages and print the result as JSON. `score` is the "
    "probability that the patch resolves the task, P(resolved): the learned verdict's "
    "calibrated probability over the stages' evidence (the episode view prints the same "
    "number as 'score'); `resolved` is score >= 0.5 with no stage refusing the patch and "
    "no evidence missing (else `status` says why); "
    "`reward` is the verdict turned into an RL reward by --preset (binary: 1.0 or 0.0)."
)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mode",
        default="oracle",
        choices=list(MODES),
        help=MODE_HELP,
    )
    p.add_argument(
        "--model",
        default="embedded",
        help="SWR model for the tests stage: embedded (default: SmolLM2-135M with the shipped "
        "swr-default adapter), embedded:base (no adapter), embedded+ADAPTER (an adapter from "
        "`sweworld train swr`), openai:URL#MODEL, hf:PATH[+ADAPTER] or replay:FILE",
    )
    p.add_argument(
        "--stages",
        default="syntax,semantic",
        help="comma-separated stages to run: syntax, typecheck, semantic, tests (the LM's "
        "report; loads --model). Default: syntax,semantic, the exact stages the shipped "
        "verdict was trained on",
    )
    p.add_argument(
        "--verdict",
        default="default",
        help="the learned verdict that decides: 'default' (the shipped "
        "adapters/verdict-default), a model file from `sweworld train verdict`, or 'none' "
        "(the legacy combination: only the tests stage or gold equivalence can resolve)",
    )
    p.add_argument(
        "--outcome",
        default="default",
        help="outcome model whose predicted test statuses are evidence ('default', a "
        "model file, or 'none')",
    )
    p.add_argument(
        "--samples", type=int, default=1, help="reports sampled per candidate (default 1: greedy)"
    )
    p.add_argument(
        "--no-logprobs",
        action="store_true",
        help="do not read P(resolved) from token log-probabilities",
    )
    p.add_argument(
        "--calibration",
        default="auto",
        help="calibration of the legacy combination (--verdict none): a file; 'auto' "
        "(default) uses the one stored for this model and mode if `sweworld calibrate` made "
        "one, 'none' the fixed prior. The verdict carries its own calibration",
    )
    p.add_argument(
        "--preset",
        default="binary",
        choices=["binary", "score", "shaped", "stage_penalty"],
        help="RL reward preset (default: binary)",
    )
    p.add_argument(
        "--repo-path",
        default=None,
        help="local source of the task's repository (default: the toy repo or "
        "$SWEWORLD_REPO_CACHE; without one the stages read the patch's hunks only)",
    )


def add_reward_parsers(sub: Any, add_task_args: Any) -> None:
    """Add the reward, verify and calibrate sub-commands to the CLI's subparsers."""
    reward = sub.add_parser(
        "reward",
        help="score a candidate patch with the SWR stages (no real execution)",
        description=SCORE_HELP,
    )
    add_task_args(reward)
    reward.add_argument(
        "--patch",
        required=True,
        help="candidate patch file ('-' for stdin; an empty file scores the unchanged base)",
    )
    _add_model_args(reward)
    reward.add_argument("--steps", type=int, default=None, help="agent steps (shaped preset)")

    verify = sub.add_parser(
        "verify",
        help="best-of-N: score N candidates per task and select one",
        description="Score every candidate of each task with SWR and write the selected one "
        "per task in SWE-bench's predictions format. A candidate's score is its P(resolved) "
        "(see `sweworld reward --help`), plus --vote-weight times the share of candidates "
        "equivalent to it.",
    )
    verify.add_argument("--tasks", required=True, help="task rows (any format `tasks` reads)")
    verify.add_argument("--split", default=None, help="split, for HF datasets")
    verify.add_argument(
        "--candidates",
        required=True,
        nargs="+",
        help="candidate files: SWE-bench preds.json, JSONL, trajectory folders or tarballs",
    )
    verify.add_argument("--out", required=True, help="where to write the selected predictions")
    verify.add_argument("--scores", default=None, help="also write every score and class here")
    verify.add_argument(
        "--vote-weight", type=float, default=0.2, help="weight of the equivalence-class vote"
    )
    _add_model_args(verify)

    calibrate = sub.add_parser("calibrate", help="fit the score calibration on labelled candidates")
    calibrate.add_argument("--tasks", required=True, help="task rows")
    calibrate.add_argument("--split", default=None, help="split, for HF datasets")
    calibrate.add_argument(
        "--candidates", required=True, nargs="+", help="labelled candidates (with `resolved`)"
    )
    calibrate.add_argument(
        "--method",
        default="logistic",
        choices=["logistic", "isotonic"],
        help="logistic on the stage features (default) or isotonic on the tests score",
    )
    calibrate.add_argument(
        "--out",
        default=None,
        help="where to store it (default: beside the model, used by --calibration auto)",
    )
    _add_model_args(calibrate)


def _config(args: argparse.Namespace) -> Any:
    from sweworld.reward.model import SWRConfig

    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip())
    if "tests" in stages or args.model != "embedded":
        from sweworld.models import check_lm_spec

        # a configuration error, said now rather than as a verdict (an explicit --model is
        # checked even when the tests stage that would load it is off)
        check_lm_spec(args.model)
    return SWRConfig(
        mode=args.mode,
        stages=stages,
        model=args.model,
        samples=args.samples,
        use_logprobs=not args.no_logprobs,
        calibration=None if args.calibration == "none" else args.calibration,
        reward_preset=args.preset,
        verdict=None if args.verdict == "none" else args.verdict,
        outcome=None if args.outcome == "none" else args.outcome,
    )


def _reward_model(config: Any, args: argparse.Namespace, swr_lm: Any) -> Any:
    """The reward model of a command: ``swr_lm`` (the SWR model object the entry point built
    from ``--model`` through ``sweworld.world``) goes to the tests stage when it runs, and
    is closed with the model (a shared in-process model stays loaded)."""
    from sweworld.reward.model import RewardModel

    if "tests" not in config.stages:
        swr_lm = None
    return RewardModel(config, lm=swr_lm, close_lm=True, repo_path=args.repo_path)


def progress(items: Iterable[T], what: str, total: int) -> Iterator[T]:
    """``items`` with a tqdm bar on stderr when stderr is a terminal (silent otherwise)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm comes with the data and bench extras; no bar without it
        yield from items
        return
    yield from tqdm(items, desc=what, total=total, unit="task", disable=not sys.stderr.isatty())


def _read_patch(spec: str) -> str:
    if spec == "-":
        return sys.stdin.read()
    path = Path(spec)
    if path.is_dir():
        raise ValueError(f"patch file {path} is a folder, not a file")
    if not path.is_file():
        raise FileNotFoundError(f"patch file {path} does not exist")
    return path.read_bytes().decode("utf-8", errors="replace")


def _short_log(result: dict[str, Any], limit: int = 4000) -> dict[str, Any]:
    tests = result.get("stages", {}).get("tests")
    if tests and isinstance(tests.get("evidence", {}).get("log"), str):
        log = tests["evidence"]["log"]
        if len(log) > limit:
            tests["evidence"]["log"] = log[:limit] + f"\n... [{len(log) - limit} chars cut]"
    return result


def cmd_reward(args: argparse.Namespace, task: Any, *, swr_lm: Any = None) -> int:
    """``sweworld reward``; ``swr_lm``: the tests stage's model object (see
    :func:`_reward_model`)."""
    patch = _read_patch(args.patch)
    with _reward_model(_config(args), args, swr_lm) as model:
        result = model.score(task, patch, steps=args.steps)
    print(json.dumps(_short_log(result.to_dict()), indent=2, default=str))
    return 0


def cmd_verify(args: argparse.Namespace, *, swr_lm: Any = None) -> int:
    """``sweworld verify``; ``swr_lm`` as for :func:`cmd_reward`."""
    from sweworld.reward.candidates import load_candidates, write_predictions
    from sweworld.reward.verifier import Verifier
    from sweworld.tasks import load_tasks

    tasks = {t.instance_id: t for t in load_tasks(args.tasks, split=args.split)}
    candidates = load_candidates(args.candidates)
    unknown = [i for i in candidates if i not in tasks]
    for instance_id in unknown:
        print(f"sweworld: warning: no task row for {instance_id}; skipped", file=sys.stderr)
    candidates = {i: c for i, c in candidates.items() if i in tasks}
    if args.mode == "oracle":
        print(
            "sweworld: note: oracle mode: the choice reads each task's gold patch and tests "
            "(--mode blind chooses as at test time, without them)",
            file=sys.stderr,
        )
    with _reward_model(_config(args), args, swr_lm) as model:
        verifier = Verifier(model, vote_weight=args.vote_weight)
        selections = {}
        for instance_id, cands in progress(candidates.items(), "verify", len(candidates)):
            selections.update(
                verifier.verify({instance_id: tasks[instance_id]}, {instance_id: cands})
            )
    write_predictions({i: s.patch for i, s in selections.items()}, args.out)
    if args.scores:
        Path(args.scores).write_text(
            json.dumps({i: s.to_dict() for i, s in selections.items()}, indent=2, default=str)
        )
    scored = sum(len(c) for c in candidates.values())
    print(
        f"wrote {len(selections)} prediction(s) to {args.out} ({scored} candidate(s) scored; "
        "per-task choices and scores: --scores FILE)",
        file=sys.stderr,
    )
    return 0


def cmd_calibrate(args: argparse.Namespace, *, swr_lm: Any = None) -> int:
    """``sweworld calibrate``; ``swr_lm`` as for :func:`cmd_reward`."""
    from sweworld.reward.calibration import save_calibration
    from sweworld.reward.candidates import load_candidates
    from sweworld.reward.model import default_calibration_path, fit_from_results
    from sweworld.tasks import load_tasks

    tasks = {t.instance_id: t for t in load_tasks(args.tasks, split=args.split)}
    candidates = load_candidates(args.candidates)
    config = _config(args)
    config.calibration = None
    results, labels = [], []
    with _reward_model(config, args, swr_lm) as model:
        for instance_id, cands in candidates.items():
            if instance_id not in tasks:
                continue
            for cand in cands:
                if cand.label is None:
                    continue
                results.append(model.score(tasks[instance_id], cand.patch))
                labels.append(bool(cand.label))
    if not results:
        raise ValueError("no labelled candidates matched the tasks (need a `resolved` label)")
    calibrator, metrics = fit_from_results(results, labels, method=args.method)
    out = Path(args.out) if args.out else default_calibration_path(config.model, config.mode)
    save_calibration(calibrator, out, metrics=metrics)
    print(json.dumps({"out": str(out), "n": len(labels), "metrics": metrics}, indent=2))
    return 0
