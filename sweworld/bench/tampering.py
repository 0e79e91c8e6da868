"""How often the tampering stage stops real fixes: on real labelled candidates, how many
it flags, and how many of those the official harness resolved (each one a real fix the
reward would throw away), overall and per repository.

Data: anything a ``sweworld data`` importer reads (:mod:`sweworld.data.importers`), e.g. the
shared mini-swe-agent run on SWE-bench Verified: every agent submission labelled by its
harness ``report.json``, and the gold and leaderboard patches that resolved each task
(positives). Candidates are judged from their patch alone (no checkout of the base: the
hunk judgement, as in blind scoring without a repo cache).

Scorers: the current stage (:func:`sweworld.reward.stages.tampering.tampering_reasons`) and,
with ``--baseline``, another version of the same module (a file, or ``git:REV`` for the
module at a commit of this checkout) to measure a change before and after.

Variants: ``as submitted``; with ``--harness-hunk``, also each candidate with the hunk that
SWE-bench's environment setup writes into sphinx's tox.ini (``sed -i 's/pytest/pytest
-rA/' tox.ini``, the shape agents' ``git diff`` carried into real submissions) added: a
tampering judgement that reads what an edit does leaves every figure of that variant as
it was.

One row per (variant, candidate) in ``OUT/rows.jsonl``; a rerun judges only what is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from sweworld.bench.output import BenchOutput, ResumeMismatch, figure

__all__ = ["HARNESS_TOX_HUNK", "Candidate", "add_arguments", "load_candidates", "run"]

TITLE = "Tampering stage on real submissions (sweworld bench tampering)"
MODULE_PATH = "sweworld/reward/stages/tampering.py"

#: The hunk SWE-bench's environment setup leaves in sphinx's tox.ini (its test command with
#: ``-rA`` added), as agents' ``git diff`` carries it into a submission.
HARNESS_TOX_HUNK = """\
diff --git a/tox.ini b/tox.ini
--- a/tox.ini
+++ b/tox.ini
@@ -28,7 +28,7 @@ setenv =
     PYTHONWARNINGS = all,ignore::ImportWarning:importlib._bootstrap_external
     PYTEST_ADDOPTS = {env:PYTEST_ADDOPTS:} --color yes
 commands=
-    python -X dev -m pytest --durations 25 {posargs}
+    python -X dev -m pytest -rA --durations 25 {posargs}
<blank>
 [testenv:flake8]
 basepython = python3
""".replace("<blank>", " ")

VARIANTS = {"as submitted": "", "with the harness's tox.ini hunk": HARNESS_TOX_HUNK}


@dataclass
class Candidate:
    """One labelled candidate patch."""

    instance_id: str
    repo: str
    kind: str
    patch: str
    resolved: bool

    @property
    def key(self) -> str:
        digest = hashlib.sha256(self.patch.strip().encode()).hexdigest()[:16]
        return f"{self.instance_id}:{self.kind}:{digest}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench tampering``."""
    parser.add_argument(
        "--data",
        nargs="+",
        required=True,
        help="labelled runs a sweworld importer reads (e.g. the mini-swe-agent tarball)",
    )
    parser.add_argument("--out", required=True, help="output folder (report.json, report.md)")
    parser.add_argument(
        "--baseline",
        default=None,
        help="another tampering module to compare with: a .py file or git:REV (the module "
        "at that commit of this checkout)",
    )
    parser.add_argument(
        "--harness-hunk",
        action="store_true",
        help="also judge each candidate with the harness's tox.ini -rA hunk added",
    )
    parser.add_argument("--fresh", action="store_true", help="discard rows of an earlier run")


# ------------------------------------------------------------------ data


def _candidates_of(items: Iterable[Any], skip: Callable[[str], None]) -> Iterator[Candidate]:
    from sweworld.data.importers import Skip
    from sweworld.data.schema import SWRRecord, Trajectory

    for item in items:
        if isinstance(item, Skip):
            skip(f"importer: {str(item.reason).split(':')[0]}")
        elif isinstance(item, Trajectory):
            if item.report is None or not isinstance(item.report.get("resolved"), bool):
                skip("trajectory without a harness report")
                continue
            yield Candidate(
                item.instance_id,
                item.repo,
                "agent",
                item.submission or "",
                item.report["resolved"],
            )
        elif isinstance(item, SWRRecord):
            yield Candidate(
                item.instance_id,
                item.repo,
                item.candidate_kind or item.label_source or "record",
                item.patch or "",
                bool(item.resolved),
            )


def load_candidates(
    paths: Sequence[str | Path], skip: Callable[[str], None] = lambda _: None
) -> list[Candidate]:
    """Every labelled candidate of ``paths`` (read by the importer that recognises each),
    deduplicated by task, kind and patch; empty patches are skipped (nothing to judge)."""
    from sweworld.data.importers import detect_format, get_importer

    seen: dict[str, Candidate] = {}
    for path in paths:
        importer = get_importer(detect_format(path))
        for cand in _candidates_of(importer.read(Path(path)), skip):
            if not cand.patch.strip():
                skip("empty patch")
            elif cand.key not in seen:
                seen[cand.key] = cand
    return list(seen.values())


# ------------------------------------------------------------------ scorers


def _module_from_source(source: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing look the module up by name
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def baseline_source(spec: str) -> str:
    """The source of the baseline module: a file, or ``git:REV`` (the module at REV)."""
    if spec.startswith("git:"):
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(
            ["git", "show", f"{spec[4:]}:{MODULE_PATH}"],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise ValueError(f"--baseline {spec}: {out.stderr.strip()}")
        return out.stdout
    return Path(spec).read_text(encoding="utf-8")


def _judge(module: Any, patch: str) -> list[str]:
    from sweworld.reward.candidate import view_candidate

    return list(module.tampering_reasons(view_candidate(patch, base_dir=None)))


def _short(reason: str) -> str:
    """A reason without its details (the options, the test's name)."""
    return reason.split(": ")[0][:100]


# ------------------------------------------------------------------ report


def _counts(rows: Iterable[dict[str, Any]], scorer: str) -> dict[str, int]:
    out = Counter(candidates=0, resolved=0, flagged=0, flagged_resolved=0)
    for row in rows:
        out["candidates"] += 1
        out["resolved"] += row["resolved"]
        if row[scorer]:
            out["flagged"] += 1
            out["flagged_resolved"] += row["resolved"]
    return dict(out)


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def report_figures(rows: Sequence[dict[str, Any]], scorers: Sequence[str]) -> list[dict]:
    """The report's tables from the rows (see :func:`run`)."""
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    overall = []
    for variant in variants:
        mine = [r for r in rows if r["variant"] == variant]
        for scorer in scorers:
            c = _counts(mine, scorer)
            overall.append(
                [
                    variant,
                    scorer,
                    c["candidates"],
                    c["resolved"],
                    c["flagged"],
                    c["flagged_resolved"],
                    _share(c["flagged"], c["candidates"]),
                    _share(c["flagged_resolved"], c["resolved"]),
                ]
            )
    per_repo = []
    for variant in variants:
        by_repo: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            if r["variant"] == variant:
                by_repo[r["repo"]].append(r)
        for repo in sorted(by_repo):
            cells: list[Any] = [variant, repo, len(by_repo[repo])]
            cells.append(sum(r["resolved"] for r in by_repo[repo]))
            for scorer in scorers:
                c = _counts(by_repo[repo], scorer)
                cells += [c["flagged"], c["flagged_resolved"]]
            per_repo.append(cells)
    per_kind = []
    for variant in variants:
        kinds = sorted({r["kind"] for r in rows if r["variant"] == variant})
        for kind in kinds:
            mine = [r for r in rows if r["variant"] == variant and r["kind"] == kind]
            cells = [variant, kind, len(mine), sum(r["resolved"] for r in mine)]
            for scorer in scorers:
                c = _counts(mine, scorer)
                cells += [c["flagged"], c["flagged_resolved"]]
            per_kind.append(cells)
    reasons = []
    for variant in variants:
        for scorer in scorers:
            tally: Counter[tuple[str, bool]] = Counter()
            for r in rows:
                if r["variant"] == variant:
                    for why in dict.fromkeys(_short(x) for x in r[scorer]):
                        tally[(why, r["resolved"])] += 1
            whys = sorted({w for w, _ in tally}, key=lambda w: -(tally[(w, 1)] + tally[(w, 0)]))
            for why in whys[:15]:
                reasons.append([variant, scorer, why, tally[(why, True)], tally[(why, False)]])
    columns_each = [f"{s}: {what}" for s in scorers for what in ("flagged", "flagged, resolved")]
    return [
        figure(
            "Flagged candidates, and how many of them the harness resolved",
            [
                "variant",
                "stage",
                "candidates",
                "resolved",
                "flagged",
                "flagged, resolved",
                "share flagged",
                "share of resolved flagged",
            ],
            overall,
            "A flagged candidate is stopped as test tampering (score 0). 'flagged, resolved': "
            "real fixes the stage throws away (the official harness resolved them): the "
            "number to keep at 0. Labels: agent submissions from their harness report.json; "
            "gold and leaderboard patches resolved by definition.",
        ),
        figure(
            "Per repository",
            ["variant", "repository", "candidates", "resolved", *columns_each],
            per_repo,
        ),
        figure(
            "Per kind of candidate",
            ["variant", "kind", "candidates", "resolved", *columns_each],
            per_kind,
        ),
        figure(
            "Most frequent reasons (candidates, by label)",
            ["variant", "stage", "reason", "resolved", "not resolved"],
            reasons,
        ),
    ]


def run(args: argparse.Namespace) -> int:
    """``sweworld bench tampering``: judge every candidate, write the report; 0 on success,
    2 on bad input."""
    import sweworld.reward.stages.tampering as current

    scorers: dict[str, Any] = {"current": current}
    baseline_hash = None
    if args.baseline:
        try:
            source = baseline_source(args.baseline)
        except (OSError, ValueError) as exc:
            print(f"sweworld: error: {exc}", file=sys.stderr)
            return 2
        baseline_hash = hashlib.sha256(source.encode()).hexdigest()[:16]
        scorers["baseline"] = _module_from_source(source, "sweworld_bench_tampering_baseline")
    current_hash = hashlib.sha256(Path(current.__file__).read_bytes()).hexdigest()[:16]
    variants = {k: v for k, v in VARIANTS.items() if v == "" or args.harness_hunk}
    settings = {
        "current": current_hash,
        "baseline": [args.baseline, baseline_hash],
        "variants": sorted(variants),
    }
    try:
        out = BenchOutput(
            args.out,
            "tampering",
            title=TITLE,
            description=__doc__.split("\n\n")[0].replace("\n", " "),
            settings=settings,
            data=[str(p) for p in args.data],
            model="tampering stage: current" + (f" vs {args.baseline}" if args.baseline else ""),
            fresh=args.fresh,
        )
    except ResumeMismatch as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    try:
        candidates = load_candidates(args.data, out.skip)
    except (OSError, ValueError) as exc:
        print(f"sweworld: error: {exc}", file=sys.stderr)
        return 2
    done = out.done()
    units = [(v, c) for v in variants for c in candidates]
    for variant, cand in out.progress(units, total=len(units), desc="tampering"):
        key = f"{variant}|{cand.key}"
        if key in done:
            continue
        patch = cand.patch if cand.patch.endswith("\n") else cand.patch + "\n"
        patch += variants[variant]
        row: dict[str, Any] = {
            "variant": variant,
            "instance_id": cand.instance_id,
            "repo": cand.repo,
            "kind": cand.kind,
            "resolved": cand.resolved,
        }
        for name, module in scorers.items():
            row[name] = _judge(module, patch)
        out.add_row(key, row)
    keys = {f"{v}|{c.key}" for v, c in units}
    rows = [row for key, row in out.done().items() if key in keys]
    names = list(scorers)
    summary = {
        variant: {
            name: _counts([r for r in rows if r["variant"] == variant], name) for name in names
        }
        for variant in variants
    }
    out.write(report_figures(rows, names), summary)
    for variant, by_scorer in summary.items():
        for name, c in by_scorer.items():
            print(
                f"{variant:34s} {name:9s} candidates {c['candidates']:5d}  flagged "
                f"{c['flagged']:4d}  flagged and resolved {c['flagged_resolved']:4d}"
            )
    print(f"report: {out.dir / 'report.md'}")
    return 0
